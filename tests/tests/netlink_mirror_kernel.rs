//! netlink-mirror against the live kernel (privileged): in throwaway namespaces, `ip` adds,
//! replaces and deletes routes (several tables and types, multipath with weights, metrics,
//! preferred sources), addresses, neighbours, links, rules and xfrm policies, and the mirror
//! must converge, within a bounded wait, to exactly what a fresh dump of the namespace holds;
//! `route get` must answer as `ip route get` does; a neighbour resolution request must make
//! the kernel resolve; two namespaces are mirrored at once.

mod netlink_mirror_common;

use std::net::IpAddr;

use netlink_mirror::MirrorOptions;
use netlink_mirror_common::{
    CONVERGE, converge, ip, mirror, netns, same_answer, two_links, wait_for,
};
use xfwd_lab::netns::Netns;

#[test]
fn routes_of_every_table_and_type_converge() {
    if !xfwd_lab::privileged("routes_of_every_table_and_type_converge") {
        return;
    }
    let ns = netns("routes");
    two_links(&ns);
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "route add 10.9.0.0/16 via 10.1.0.2 metric 5",
        "route append 10.9.0.0/16 via 10.2.0.2 metric 5",
        "route add 10.9.0.0/16 via 10.2.0.3 metric 7 src 10.1.0.1",
        "route replace 10.9.0.0/16 via 10.1.0.4 metric 5",
        "route add 10.8.0.0/16 nexthop via 10.1.0.2 weight 3 nexthop via 10.2.0.2 weight 1",
        "route add 192.0.2.0/24 via 10.1.0.2 table 100",
        "route add blackhole 198.51.100.0/24 table 100",
        "route add unreachable 203.0.113.0/24",
        "route add prohibit 203.0.113.128/25",
        "route add throw 10.0.0.0/8 table 200",
        "route add 10.10.0.0/16 dev d1 scope link",
        "route add 10.11.0.0/16 via 10.1.0.2 tos 0x10",
        "route del 10.9.0.0/16 via 10.1.0.4 metric 5",
        "route del 10.8.0.0/16",
        "-6 route add 2001:db8:9::/48 via 2001:db8:1::2 dev d0",
        "-6 route append 2001:db8:9::/48 via 2001:db8:2::2 dev d1",
        "-6 route add 2001:db8:8::/48 dev d0",
        "-6 route append 2001:db8:8::/48 dev d1",
        "-6 route add 2001:db8:7::/48 nexthop via 2001:db8:1::2 dev d0 weight 2 nexthop via 2001:db8:2::2 dev d1",
        "-6 route add blackhole 2001:db8:6::/48",
        "-6 route add 2001:db8:5::/48 via 2001:db8:1::2 table 300 metric 10",
        "-6 route del 2001:db8:9::/48 via 2001:db8:1::2 dev d0",
        "-6 route del 2001:db8:7::/48",
        "-6 route replace 2001:db8:5::/48 via 2001:db8:2::2 table 300 metric 10",
        "route add 10.12.0.0/16 via 10.1.0.2 mtu lock 1400 advmss 1360",
        "route add 10.13.0.0/16 via 10.1.0.2 mtu 1400",
        "route replace 10.13.0.0/16 via 10.1.0.2 mtu 1300 initcwnd 10",
        "-6 route add 2001:db8:4::/48 dev d0 mtu 1300",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let t = live.tables();
    for q in [
        "10.9.1.1",
        "10.9.1.1 from 10.1.0.1",
        "10.1.0.1",
        "10.1.0.77",
        "10.10.3.3",
        "203.0.113.1",
        "203.0.113.200",
        "8.8.8.8",
        "2001:db8:9::1",
        "2001:db8:8::1",
        "2001:db8:6::1",
        "2001:db8:1::1",
        "10.12.0.1",
        "10.13.0.1",
        "2001:db8:4::1",
    ] {
        same_answer(&ns, t, q);
    }
    let s = live.stats();
    assert!(s.errors.is_empty(), "no message refused: {:?}", s.errors);
    assert!(s.applied > 0 && s.dumps >= 8, "{s:?}");
}

#[test]
fn addresses_neighbours_and_links_converge() {
    if !xfwd_lab::privileged("addresses_neighbours_and_links_converge") {
        return;
    }
    let ns = netns("addrs");
    two_links(&ns);
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "addr add 10.1.0.9/24 dev d0",
        "addr add 10.3.0.1/16 dev d0 label d0:x",
        "addr add 2001:db8:3::1/64 dev d1 nodad",
        "addr del 10.1.0.9/24 dev d0",
        "-6 addr del 2001:db8:3::1/64 dev d1",
        "neigh add 10.1.0.2 lladdr 02:00:00:00:00:02 dev d0 nud permanent",
        "neigh add 2001:db8:1::2 lladdr 02:00:00:00:00:03 dev d0 nud permanent",
        "neigh replace 10.1.0.2 lladdr 02:00:00:00:00:04 dev d0 nud permanent",
        "neigh del 2001:db8:1::2 dev d0",
        "link add d2 type veth peer name p2",
        "link set d2 mtu 9000",
        "link set d2 up",
        "addr add 10.4.0.1/24 dev d2",
        "route add 10.44.0.0/16 via 10.4.0.2",
        // The kernel flushes IPv4 routes through a link that goes down without telling.
        "link set d2 down",
        "link set d2 up",
        "link del d2",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let g = crossbeam_epoch::pin();
    let d0 = live.tables().links.by_name("d0", &g).expect("d0").ifindex;
    let n = live
        .tables()
        .neigh
        .lookup(d0, "10.1.0.2".parse().unwrap(), &g)
        .expect("neighbour");
    assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, 4]));
    assert!(
        live.tables()
            .addrs
            .is_local("10.3.0.1".parse().unwrap(), &g)
    );
    assert!(
        !live
            .tables()
            .addrs
            .is_local("10.1.0.9".parse().unwrap(), &g)
    );
    assert!(live.stats().route_redumps >= 1, "{:?}", live.stats());
}

#[test]
fn rules_and_xfrm_policies_converge() {
    if !xfwd_lab::privileged("rules_and_xfrm_policies_converge") {
        return;
    }
    let ns = netns("rules");
    two_links(&ns);
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "route add default via 10.2.0.2 table 100",
        "rule add fwmark 7 table 100 pref 100",
        "rule add from 10.1.0.0/24 to 192.0.2.0/24 table 100 pref 110",
        "rule add iif d1 table 100 pref 120",
        "rule add iif later0 table 100 pref 130",
        "rule add not from 10.0.0.0/8 unreachable pref 140",
        "rule add fwmark 9 goto 32766 pref 150",
        "-6 rule add from 2001:db8:1::/64 table 100 pref 100",
        "rule del pref 110",
        "xfrm policy add src 10.1.0.0/24 dst 10.2.0.0/24 dir fwd priority 10 action block",
        "xfrm policy add src 10.1.0.0/16 dst 10.2.0.0/16 dir fwd priority 20",
        "xfrm policy add src 10.1.0.1/32 dst 10.2.0.1/32 proto tcp dport 443 dir out priority 5 tmpl src 10.1.0.1 dst 10.2.0.1 proto esp mode tunnel",
        "xfrm policy add src 2001:db8:1::/64 dst 2001:db8:2::/64 dir in priority 7 action block",
        "xfrm policy update src 10.1.0.0/24 dst 10.2.0.0/24 dir fwd priority 30 action allow",
        "xfrm policy delete src 10.1.0.0/16 dst 10.2.0.0/16 dir fwd",
        "link add later0 type veth peer name later1",
        "xfrm policy flush",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
        if step.starts_with("xfrm policy update") {
            assert_eq!(live.tables().policies.len(), 4);
        }
    }
    let t = live.tables();
    for q in ["8.8.8.8 mark 7", "8.8.8.8", "8.8.8.8 mark 9", "10.1.0.1"] {
        same_answer(&ns, t, q);
    }
    let g = crossbeam_epoch::pin();
    let later = t.links.by_name("later0", &g).expect("later0").ifindex;
    assert!(
        t.fib4.rules(&g).iter().any(|r| r.iif == later),
        "rule re-linked to the new device"
    );
    assert!(t.policies.is_empty());
    assert!(live.stats().errors.is_empty(), "{:?}", live.stats().errors);
}

#[test]
fn neighbour_resolution_request_resolves() {
    if !xfwd_lab::privileged("neighbour_resolution_request_resolves") {
        return;
    }
    let a = netns("resa");
    let b = netns("resb");
    ip(
        &a,
        &format!("link add d0 type veth peer name e0 netns {}", b.name()),
    );
    ip(&a, "link set d0 up");
    ip(&a, "addr add 10.5.0.1/24 dev d0");
    ip(&b, "link set e0 up");
    ip(&b, "addr add 10.5.0.2/24 dev e0");
    let live = mirror(&a, MirrorOptions::default());
    let mirror_b = mirror(&b, MirrorOptions::default());
    let g = crossbeam_epoch::pin();
    let d0 = live.tables().links.by_name("d0", &g).expect("d0").ifindex;
    // Several mirrors at once: each sees its own namespace.
    assert!(
        live.tables()
            .addrs
            .is_local("10.5.0.1".parse().unwrap(), &g)
    );
    assert!(
        !live
            .tables()
            .addrs
            .is_local("10.5.0.2".parse().unwrap(), &g)
    );
    assert!(
        mirror_b
            .tables()
            .addrs
            .is_local("10.5.0.2".parse().unwrap(), &g)
    );
    drop(g);
    let peer: IpAddr = "10.5.0.2".parse().unwrap();
    let resolver = live.resolver();
    assert!(resolver.request(d0, peer));
    assert!(
        resolver.request(d0, peer),
        "queued again; the control thread rate-limits it"
    );
    wait_for(&live, "the peer's MAC", |t| {
        t.neigh
            .lookup(d0, peer, &crossbeam_epoch::pin())
            .and_then(|n| n.usable_mac())
            .is_some()
    });
    let s = live.stats();
    assert_eq!(
        (s.resolve_requested, s.resolve_sent, s.resolve_rate_limited),
        (2, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.resolve_errors, 0);
}

/// Policies that existed before the mirror started: masked twins and marks that differ only in
/// the mask are separate policies; the mirror holds as many as `ip xfrm policy` lists, in the
/// kernel's dump order (newest first), with the kernel's indexes; the hash thresholds follow
/// `ip xfrm policy set`.
#[test]
fn xfrm_policies_keep_kernel_identity_and_order() {
    if !xfwd_lab::privileged("xfrm_policies_keep_kernel_identity_and_order") {
        return;
    }
    let ns = netns("xfrmid");
    two_links(&ns);
    for line in [
        "xfrm policy add src 10.100.1.3/25 dst 0.0.0.0/0 dir fwd priority 5 action block",
        "xfrm policy add src 10.100.1.96/25 dst 0.0.0.0/0 dir fwd priority 5",
        "xfrm policy add src 10.100.1.96/25 dst 0.0.0.0/0 dir fwd priority 5 mark 5 mask 0xf",
        "xfrm policy add src 10.100.1.96/25 dst 0.0.0.0/0 dir fwd priority 5 mark 5 mask 0xff",
        "xfrm policy add src 0.0.0.0/0 dst 10.2.0.0/24 dev d1 dir fwd priority 5 action block",
        "xfrm policy add src 2001:db8:1::5/64 dst ::/0 dir fwd ptype sub priority 1",
        "xfrm policy update src 10.100.1.3/25 dst 0.0.0.0/0 dir fwd priority 5 action allow",
    ] {
        ip(&ns, line);
    }
    let kernel_indexes = |ns: &Netns| -> Vec<u32> {
        let out = ns
            .ip(["-s", "xfrm", "policy", "list"])
            .expect("ip -s xfrm policy");
        out.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "index")
            .map(|w| w[1].parse().unwrap())
            .collect()
    };
    let want = kernel_indexes(&ns);
    assert_eq!(want.len(), 6, "the kernel keeps six policies");
    let live = mirror(&ns, MirrorOptions::default());
    let t = live.tables();
    let got: Vec<u32> = t.policies.dump().iter().map(|p| p.index).collect();
    assert_eq!(got, want, "the mirror's dump order is the kernel's");
    let shown = netlink_mirror::cli::show(
        t,
        &netlink_mirror::cli::ShowArgs {
            what: netlink_mirror::cli::ShowWhat::Policies,
            netns: None,
        },
    );
    assert!(shown.contains("src 10.100.1.3/25") && shown.contains("src 10.100.1.96/25"));
    assert!(shown.contains("mark 0x5/0xf") && shown.contains("mark 0x5/0xff"));
    // Default policies: asked for at start, followed through their notifications.
    assert!(!t.policies.default_blocks(policy_tree::Direction::Fwd));
    ip(&ns, "xfrm policy setdefault fwd block");
    wait_for(&live, "the fwd default policy", |t| {
        t.policies.default_blocks(policy_tree::Direction::Fwd)
    });
    let late = mirror(&ns, MirrorOptions::default());
    assert!(
        late.tables()
            .policies
            .default_blocks(policy_tree::Direction::Fwd)
    );
    assert!(
        !late
            .tables()
            .policies
            .default_blocks(policy_tree::Direction::In)
    );
    drop(late);
    ip(&ns, "xfrm policy setdefault fwd accept");
    wait_for(&live, "the fwd default policy back", |t| {
        !t.policies.default_blocks(policy_tree::Direction::Fwd)
    });
    ip(&ns, "xfrm policy set hthresh4 24 16");
    wait_for(&live, "the new hash thresholds", |t| {
        t.policies.hthresh().lbits4 == 24 && t.policies.hthresh().rbits4 == 16
    });
    ip(
        &ns,
        "xfrm policy delete src 10.100.1.96/25 dst 0.0.0.0/0 dir fwd mark 5 mask 0xff",
    );
    converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after the delete: {e}"));
    assert_eq!(t.policies.len(), 5);
    assert!(live.stats().errors.is_empty(), "{:?}", live.stats().errors);
}

/// The mirror says when it lags the kernel (`Generation::set_behind`, which makes the run
/// loops punt route answers): during a burst of 20,000 route adds made by `ip -batch` (faster
/// than a mirror applies them: a backlog builds), and when a link goes down (the kernel
/// flushes its IPv4 routes without telling; the mirror re-dumps); never once it has caught
/// up, with every route in place.
#[test]
fn the_mirror_says_when_it_lags_the_kernel() {
    if !xfwd_lab::privileged("the_mirror_says_when_it_lags_the_kernel") {
        return;
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    let ns = netns("behind");
    two_links(&ns);
    let live = mirror(&ns, MirrorOptions::default());
    let generation = Arc::clone(&live.tables().generation);
    // Caught up after the initial synchronisation (within a round of the control loop).
    let start = Instant::now();
    while generation.is_behind() {
        assert!(
            start.elapsed() < CONVERGE,
            "still behind after the first sync"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = live.stats().behind;
    // A watcher sees the flag while the burst is applied.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = {
        let (generation, stop) = (Arc::clone(&generation), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut seen = false;
            while !stop.load(Ordering::Relaxed) {
                seen |= generation.is_behind();
                std::thread::yield_now();
            }
            seen
        })
    };
    const BURST: u32 = 20_000;
    netlink_mirror_common::ip_batch(
        &ns,
        (0..BURST).map(|i| {
            let p = std::net::Ipv4Addr::from(0x1e00_0000 + (i << 8));
            format!("route add {p}/24 via 10.1.0.2")
        }),
    );
    let in_main = |t: &netlink_mirror::MirroredTables| {
        let guard = crossbeam_epoch::pin();
        t.fib4.table(254, &guard).map_or(0, |m| m.route_count())
    };
    wait_for(&live, "the burst applied", |t| in_main(t) >= BURST as usize);
    let start = Instant::now();
    while generation.is_behind() {
        assert!(start.elapsed() < CONVERGE, "still behind after the burst");
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        seen.join().unwrap(),
        "the lag during the burst was never flagged"
    );
    let after_burst = live.stats().behind;
    assert!(
        after_burst > before,
        "lag counted: {before} -> {after_burst}"
    );
    assert!(in_main(live.tables()) >= BURST as usize);

    // A link going down: the kernel drops the routes through it without a message each; the
    // mirror is behind until its re-dump has removed them.
    ip(&ns, "link set d0 down");
    wait_for(&live, "the routes through d0 gone", |t| {
        in_main(t) < BURST as usize
    });
    let start = Instant::now();
    while generation.is_behind() {
        assert!(start.elapsed() < CONVERGE, "still behind after the re-dump");
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = live.stats();
    assert!(s.behind > after_burst && s.route_redumps > 0, "{s:?}");
    converge(&live, &ns, CONVERGE).unwrap();
}
