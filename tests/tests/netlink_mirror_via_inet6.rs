//! IPv4 routes through IPv6 next hops (RFC 8950, BGP unnumbered) against the live kernel
//! (privileged): installed with `ip route add ... via inet6 ...` (link-local and global
//! gateways, single path, multipath mixing both families, a nexthop object), they must be
//! mirrored as they are, not handed to the kernel: `route get` answers as `ip route get`,
//! `show routes` prints them as `ip route show` does, and deleting them converges.

mod netlink_mirror_common;

use fib_trie::{Flow, Gateway, RouteType};
use netlink_mirror::MirrorOptions;
use netlink_mirror::cli::{RouteGetArgs, ShowArgs, ShowWhat, route_get, show};
use netlink_mirror_common::{
    CONVERGE, converge, get_fields, ip, mirror, netns, same_answer, two_links,
};

#[test]
fn ipv4_routes_via_ipv6_gateways_are_mirrored_and_answer_as_the_kernel() {
    if !xfwd_lab::privileged("ipv4_routes_via_ipv6_gateways_are_mirrored_and_answer_as_the_kernel")
    {
        return;
    }
    let ns = netns("via6");
    two_links(&ns);
    ip(&ns, "link set lo up");
    // A router: input routes (`iif`) are answered only with forwarding on.
    ns.run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))
        .unwrap()
        .unwrap();
    ip(&ns, "route add default via 10.2.0.2");
    // One before the mirror starts (initial dump), the rest as events.
    ip(
        &ns,
        "route add 10.210.0.0/16 via inet6 2001:db8:1::2 dev d0",
    );
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "route add 10.211.0.0/16 via inet6 fe80::1 dev d1",
        "route add 10.212.0.0/16 via inet6 fe80::2 dev d0 metric 20 proto bgp",
        "route add 10.213.0.0/16 nexthop via inet6 fe80::1 dev d0 nexthop via inet6 fe80::1 dev d1",
        "route add 10.214.0.0/16 nexthop via inet6 fe80::3 dev d0 nexthop via 10.2.0.7 dev d1",
        "nexthop add id 40 via fe80::9 dev d1",
        "route add 10.215.0.0/16 nhid 40",
        "route add 10.216.0.0/24 via inet6 fe80::1 dev d0 table 100",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let t = live.tables();
    {
        let g = crossbeam_epoch::pin();
        let ll1 = u128::from("fe80::1".parse::<std::net::Ipv6Addr>().unwrap());
        let r = t.fib4.lookup(&Flow::to(0x0ad3_0101), &g).unwrap();
        assert_eq!((r.route_type(), r.plen), (RouteType::Unicast, 16));
        assert_eq!(r.alias.info.protocol, 3, "proto boot");
        let r = t.fib4.lookup(&Flow::to(0x0ad5_0101), &g).unwrap();
        assert_eq!(
            r.nexthops()
                .iter()
                .map(|h| (h.gateway, h.ifindex != 0))
                .collect::<Vec<_>>(),
            [
                (Some(Gateway::Inet6(ll1)), true),
                (Some(Gateway::Inet6(ll1)), true)
            ]
        );
    }
    for q in [
        "10.210.1.1",
        "10.211.1.1",
        "10.212.1.1",
        "10.215.1.1",
        "10.216.0.1",
        "10.211.1.1 from 10.1.0.9 iif d0",
        "10.210.1.1 oif d0",
    ] {
        same_answer(&ns, t, q);
    }
    // Multipath: the kernel's member and ours are both members of the route (the hash is
    // each one's own); everything else equal.
    for (q, members) in [
        ("10.213.1.1", ["inet6 fe80::1 d0", "inet6 fe80::1 d1"]),
        ("10.214.1.1", ["inet6 fe80::3 d0", "10.2.0.7 d1"]),
    ] {
        let kernel = ns.ip(["route", "get", q]).unwrap();
        let ours = route_get(
            t,
            &RouteGetArgs {
                addr: q.parse().unwrap(),
                selectors: vec![],
                netns: None,
            },
        )
        .unwrap();
        let (mut k, mut o) = (get_fields(&kernel), get_fields(&ours));
        for f in [&mut k, &mut o] {
            let member = format!("{} {}", f.via, f.dev);
            assert!(
                members.contains(&member.as_str()),
                "route get {q}: {member:?} not in {members:?} (kernel {kernel:?}, mirror {ours:?})"
            );
            f.via.clear();
            f.dev.clear();
            f.src.clear();
        }
        assert_eq!(k, o, "route get {q}: kernel {kernel:?}, mirror {ours:?}");
    }
    // `show routes` prints them as `ip route show` does.
    let shown = show(
        t,
        &ShowArgs {
            what: ShowWhat::Routes,
            netns: None,
        },
    );
    for prefix in ["10.210.0.0/16", "10.211.0.0/16", "10.212.0.0/16"] {
        let kernel = ns.ip(["route", "show", prefix]).unwrap();
        let kernel = kernel.trim_end();
        assert!(
            shown.lines().any(|l| l.trim_end() == kernel),
            "{kernel:?} not in\n{shown}"
        );
    }
    for (start, hops) in [
        (
            "10.214.0.0/16",
            [
                "\tnexthop via inet6 fe80::3 dev d0 weight 1",
                "\tnexthop via 10.2.0.7 dev d1 weight 1",
            ],
        ),
        (
            "10.213.0.0/16",
            [
                "\tnexthop via inet6 fe80::1 dev d0 weight 1",
                "\tnexthop via inet6 fe80::1 dev d1 weight 1",
            ],
        ),
    ] {
        let lines: Vec<&str> = shown.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("{start} not in\n{shown}"));
        assert_eq!(&lines[at + 1..at + 3], &hops, "{shown}");
    }
    let s = live.stats();
    assert!(s.kernel_decides.is_empty(), "nothing handed over: {s:?}");
    assert!(s.errors.is_empty(), "{s:?}");

    for step in [
        "route del 10.210.0.0/16",
        "route del 10.213.0.0/16",
        "nexthop del id 40",
        "route del 10.216.0.0/24 table 100",
    ] {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    for q in ["10.210.1.1", "10.213.1.1", "10.215.1.1", "10.211.1.1"] {
        same_answer(&ns, t, q);
    }
}
