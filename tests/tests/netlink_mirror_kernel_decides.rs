//! Fail closed, against the live kernel (privileged): routes the FIB cannot represent (seg6 and
//! ip lightweight-tunnel encapsulations, IPv6 source-specific routes, a nexthop object with an
//! encapsulation) must become "kernel decides" routes
//! over exactly their prefix and table, never leave their traffic to a less specific route;
//! `show routes` names the reason, the stats count them per kind, and they go with the last
//! kernel route behind them. An IPv4 route via an IPv6 gateway (RFC 8950) is no longer one of
//! them: it is mirrored as it is.

mod netlink_mirror_common;

use fib_trie::{Flow, RouteType};
use netlink_mirror::cli::{ShowArgs, ShowWhat, show};
use netlink_mirror::{MirrorOptions, MirroredTables};
use netlink_mirror_common::{CONVERGE, converge, ip, mirror, netns, two_links};

/// What a lookup of `dst` answers: the type and the matched prefix length.
fn decide4(t: &MirroredTables, dst: &str) -> (RouteType, u8) {
    let g = crossbeam_epoch::pin();
    let dst: std::net::Ipv4Addr = dst.parse().unwrap();
    let r = t
        .fib4
        .lookup(&Flow::to(u32::from(dst)), &g)
        .expect("a route");
    (r.route_type(), r.plen)
}

fn decide6(t: &MirroredTables, dst: &str, table: u32) -> Option<(RouteType, u8)> {
    let g = crossbeam_epoch::pin();
    let dst: std::net::Ipv6Addr = dst.parse().unwrap();
    match t
        .fib6
        .table(table, &g)?
        .lookup(&Flow::to(u128::from(dst)), &g)
    {
        fib_trie::TableLookup::Found(r) => Some((r.route_type(), r.plen)),
        _ => None,
    }
}

fn routes(t: &MirroredTables) -> String {
    show(
        t,
        &ShowArgs {
            what: ShowWhat::Routes,
            netns: None,
        },
    )
}

#[test]
fn unrepresentable_routes_hand_their_prefix_to_the_kernel() {
    if !xfwd_lab::privileged("unrepresentable_routes_hand_their_prefix_to_the_kernel") {
        return;
    }
    let ns = netns("kdecide");
    two_links(&ns);
    ip(&ns, "link set lo up");
    // A default route that must not take over the traffic of the routes below.
    ip(&ns, "route add default via 10.2.0.2");
    ip(&ns, "-6 route add default via 2001:db8:2::2");
    // Present before the mirror starts: from the initial dump.
    ip(
        &ns,
        "route add 10.51.0.0/16 encap seg6 mode encap segs 2001:db8::1 dev d0",
    );
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "route add 10.52.0.0/16 encap ip id 5 dst 10.1.0.9 dev d0 table 100",
        "route add 10.70.0.0/16 via inet6 2001:db8:1::2 dev d0",
        "-6 route add 2001:db8:20::/48 from 2001:db8:1::/64 via 2001:db8:1::2",
        "-6 route add 2001:db8:20::/48 from 2001:db8:3::/64 via 2001:db8:1::2",
        "nexthop add id 31 encap seg6 mode encap segs 2001:db8::1 dev d0",
        "route add 10.53.0.0/16 nhid 31",
        // A more specific ordinary route inside a kernel-decides prefix still wins.
        "route add 10.51.7.0/24 via 10.1.0.2",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let t = live.tables();
    assert_eq!(decide4(t, "10.51.1.1"), (RouteType::Kernel, 16), "seg6");
    assert_eq!(decide4(t, "10.51.7.1"), (RouteType::Unicast, 24));
    assert_eq!(
        decide4(t, "10.70.1.1"),
        (RouteType::Unicast, 16),
        "via inet6: mirrored (RFC 8950)"
    );
    assert_eq!(
        decide4(t, "10.53.1.1"),
        (RouteType::Kernel, 16),
        "encap object"
    );
    assert_eq!(
        decide4(t, "10.52.1.1"),
        (RouteType::Unicast, 0),
        "table 100 only"
    );
    {
        let g = crossbeam_epoch::pin();
        let r = t
            .fib4
            .table(100, &g)
            .unwrap()
            .lookup(&Flow::to(0x0a34_0101), &g);
        assert!(
            matches!(r, fib_trie::TableLookup::Found(r) if r.route_type() == RouteType::Kernel && r.plen == 16),
            "ip encap in table 100: {r:?}"
        );
    }
    // Source-specific: the stand-in covers the destination for every source, ahead of the
    // default route.
    assert_eq!(
        decide6(t, "2001:db8:20::1", 254),
        Some((RouteType::Kernel, 48))
    );
    let text = routes(t);
    for (start, end) in [
        ("kernel 10.51.0.0/16 ", " kernel-decides encap"),
        ("kernel 10.52.0.0/16 table 100 ", " kernel-decides encap"),
        ("10.70.0.0/16 via inet6 2001:db8:1::2 ", " dev d0"),
        (
            "kernel 2001:db8:20::/48 ",
            " kernel-decides source-specific",
        ),
        ("10.53.0.0/16 nhid 31 ", " kernel-decides nexthop"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(start) && l.ends_with(end)),
            "{start}...{end} not in\n{text}"
        );
    }
    let s = live.stats();
    assert_eq!(s.kernel_decides.get("encap"), Some(&2), "{s:?}");
    assert_eq!(s.kernel_decides.get("nexthop-encap"), Some(&1), "{s:?}");
    assert_eq!(s.kernel_decides.get("gateway-family"), None, "{s:?}");
    assert_eq!(s.kernel_decides.get("source-specific"), Some(&2), "{s:?}");
    assert!(s.errors.is_empty(), "{s:?}");

    // The stand-in of two source-specific routes stays until the last one goes.
    ip(
        &ns,
        "-6 route del 2001:db8:20::/48 from 2001:db8:1::/64 via 2001:db8:1::2",
    );
    converge(&live, &ns, CONVERGE).unwrap();
    assert_eq!(
        decide6(t, "2001:db8:20::1", 254),
        Some((RouteType::Kernel, 48))
    );
    for step in [
        "-6 route del 2001:db8:20::/48 from 2001:db8:3::/64 via 2001:db8:1::2",
        "route del 10.51.0.0/16",
        "route del 10.70.0.0/16",
        "route del 10.52.0.0/16 table 100",
        "nexthop del id 31",
    ] {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    assert_eq!(decide6(t, "2001:db8:20::1", 254).map(|d| d.1), Some(0));
    assert_eq!(decide4(t, "10.51.1.1"), (RouteType::Unicast, 0));
    assert_eq!(decide4(t, "10.70.1.1"), (RouteType::Unicast, 0));
    assert_eq!(decide4(t, "10.53.1.1"), (RouteType::Unicast, 0));
    let s = live.stats();
    assert!(s.kernel_decides.is_empty(), "{s:?}");
}

/// What a lookup of `dst` from `src` arriving on `iif` answers in the IPv4 FIB, with the flow's
/// ports and protocol unknown (the FIB does not model them): the type and prefix length.
fn decide4_from(t: &MirroredTables, src: &str, dst: &str, iif: &str) -> (RouteType, u8) {
    let g = crossbeam_epoch::pin();
    let ifindex = t.links.by_name(iif, &g).expect("link").ifindex;
    let src: std::net::Ipv4Addr = src.parse().unwrap();
    let dst: std::net::Ipv4Addr = dst.parse().unwrap();
    let flow = Flow {
        src: u32::from(src),
        iif: ifindex,
        ..Flow::to(u32::from(dst))
    };
    let r = t.fib4.lookup(&flow, &g).expect("a route");
    (r.route_type(), r.plen)
}

fn rules(t: &MirroredTables) -> String {
    show(
        t,
        &ShowArgs {
            what: ShowWhat::Rules,
            netns: None,
        },
    )
}

/// Rules with selectors or actions the FIB does not model (ports, an IP protocol, a uid
/// range, `suppress_prefixlength`, `l3mdev`) fail closed: each becomes a "kernel decides"
/// rule over the selectors the FIB does model, so that every flow it could match goes to the
/// kernel, not to the table a later rule names; two kernel rules behind one stand-in keep it
/// until the last goes; a `not` rule's stand-in covers every flow.
#[test]
fn unrepresentable_rules_hand_what_they_could_match_to_the_kernel() {
    if !xfwd_lab::privileged("unrepresentable_rules_hand_what_they_could_match_to_the_kernel") {
        return;
    }
    let ns = netns("krule");
    two_links(&ns);
    ip(&ns, "link set lo up");
    ip(&ns, "route add default via 10.2.0.2");
    ip(&ns, "route add 10.60.0.0/16 via 10.1.0.2 table 100");
    // Present before the mirror starts: from the initial dump.
    ip(
        &ns,
        "rule add pref 100 from 10.9.0.0/16 dport 80 lookup 100",
    );
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        // The same stand-in (pref 100 from 10.9.0.0/16) for another kernel rule.
        "rule add pref 100 from 10.9.0.0/16 dport 443 lookup 100",
        "rule add pref 110 iif d1 ipproto udp lookup 100",
        "rule add pref 120 from 10.8.0.0/16 uidrange 0-0 lookup 100",
        "rule add pref 130 from 10.7.0.0/16 lookup main suppress_prefixlength 0",
        // An ordinary rule after them still applies to what they cannot match.
        "rule add pref 200 from 10.9.0.0/16 lookup 100",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let t = live.tables();
    let kernel = (RouteType::Kernel, 0);
    // dport 80/443 from 10.9/16: the kernel decides (the port is not known to the FIB).
    assert_eq!(decide4_from(t, "10.9.1.1", "10.60.1.1", "d0"), kernel);
    // ipproto udp on d1 only.
    assert_eq!(decide4_from(t, "10.6.1.1", "10.60.1.1", "d1"), kernel);
    assert_eq!(
        decide4_from(t, "10.6.1.1", "10.60.1.1", "d0"),
        (RouteType::Unicast, 0),
        "not on d1: main's default route"
    );
    assert_eq!(decide4_from(t, "10.8.1.1", "10.60.1.1", "d0"), kernel);
    assert_eq!(decide4_from(t, "10.7.1.1", "10.60.1.1", "d0"), kernel);
    let text = rules(t);
    for line in [
        "100:\tfrom 10.9.0.0/16 kernel-decides rule",
        "110:\tfrom all iif d1 kernel-decides rule",
        "200:\tfrom 10.9.0.0/16 lookup 100",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
    }
    let s = live.stats();
    assert_eq!(s.kernel_decides.get("rule-dport"), Some(&2), "{s:?}");
    assert_eq!(s.kernel_decides.get("rule-ipproto"), Some(&1), "{s:?}");
    assert_eq!(s.kernel_decides.get("rule-uidrange"), Some(&1), "{s:?}");
    assert_eq!(
        s.kernel_decides.get("rule-suppress-prefixlength"),
        Some(&1),
        "{s:?}"
    );
    assert!(s.errors.is_empty(), "{s:?}");

    // The shared stand-in stays until its last kernel rule goes; then rule 200 applies.
    ip(
        &ns,
        "rule del pref 100 from 10.9.0.0/16 dport 80 lookup 100",
    );
    converge(&live, &ns, CONVERGE).unwrap();
    assert_eq!(decide4_from(t, "10.9.1.1", "10.60.1.1", "d0"), kernel);
    ip(
        &ns,
        "rule del pref 100 from 10.9.0.0/16 dport 443 lookup 100",
    );
    converge(&live, &ns, CONVERGE).unwrap();
    assert_eq!(
        decide4_from(t, "10.9.1.1", "10.60.1.1", "d0"),
        (RouteType::Unicast, 16),
        "rule 200: table 100"
    );

    // `not` with a selector the FIB does not model: the stand-in covers every flow.
    ip(
        &ns,
        "rule add pref 50 not from 10.5.0.0/16 dport 22 lookup 100",
    );
    converge(&live, &ns, CONVERGE).unwrap();
    assert_eq!(decide4_from(t, "10.5.1.1", "10.60.1.1", "d0"), kernel);
    assert_eq!(decide4_from(t, "10.4.1.1", "10.60.1.1", "d0"), kernel);
    for step in [
        "rule del pref 50 not from 10.5.0.0/16 dport 22 lookup 100",
        "rule del pref 110 iif d1 ipproto udp lookup 100",
        "rule del pref 120 from 10.8.0.0/16 uidrange 0-0 lookup 100",
        "rule del pref 130 from 10.7.0.0/16 lookup main suppress_prefixlength 0",
    ] {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    assert_eq!(
        decide4_from(t, "10.6.1.1", "10.60.1.1", "d1"),
        (RouteType::Unicast, 0)
    );
    assert_eq!(
        decide4_from(t, "10.8.1.1", "10.60.1.1", "d0"),
        (RouteType::Unicast, 0)
    );
    let s = live.stats();
    assert!(s.kernel_decides.is_empty(), "{s:?}");
    assert!(s.errors.is_empty(), "{s:?}");
}
