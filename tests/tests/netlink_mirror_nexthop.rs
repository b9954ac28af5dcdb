//! netlink-mirror's nexthop objects against the live kernel (privileged): in throwaway
//! namespaces, `ip nexthop` adds, replaces and deletes single nexthops (gateway, device,
//! onlink, blackhole), groups with weights and resilient groups; `ip route ... nhid N` routes
//! use them. After every step the mirror must equal a fresh dump, and `route get` must answer
//! as `ip route get` (for groups: one of the group's next hops, the kernel's hash being its
//! own). A replace must change the routes through the object without re-inserting them, a
//! delete must remove them, and a burst that overruns the event buffer must resynchronise.

mod netlink_mirror_common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use fib_trie::{Flow, RouteType};
use netlink_mirror::cli::{RouteGetArgs, route_get};
use netlink_mirror::{MirrorOptions, MirroredTables};
use netlink_mirror_common::{
    CONVERGE, converge, get_fields, ip, ip_batch, mirror, netns, same_answer, two_links,
};
use xfwd_lab::netns::Netns;

/// `route get QUERY` where the route is a group: the kernel's next hop must be one of the
/// mirror's group members, and the other fields equal.
fn same_answer_in_group(ns: &Netns, t: &MirroredTables, query: &str, members: &[&str]) {
    let kernel = ns
        .ip(["route", "get"].into_iter().chain(query.split_whitespace()))
        .unwrap_or_else(|e| panic!("ip route get {query}: {e}"));
    let addr: IpAddr = query.parse().unwrap();
    let ours = route_get(
        t,
        &RouteGetArgs {
            addr,
            selectors: vec![],
            netns: None,
        },
    )
    .unwrap_or_else(|e| panic!("mirror route get {query}: {e}"));
    let (mut k, mut o) = (get_fields(&kernel), get_fields(&ours));
    for f in [&k, &o] {
        assert!(
            members.contains(&f.via.as_str()),
            "route get {query}: via {:?} not in {members:?} (kernel {kernel:?}, mirror {ours:?})",
            f.via
        );
    }
    // The source follows the chosen device; the rest must match exactly.
    for f in [&mut k, &mut o] {
        f.via.clear();
        f.dev.clear();
        f.src.clear();
    }
    assert_eq!(
        k, o,
        "route get {query}: kernel {kernel:?}, mirror {ours:?}"
    );
}

fn info_ptr(t: &MirroredTables, dst: u32) -> *const fib_trie::RouteInfo<u32> {
    let g = crossbeam_epoch::pin();
    let r = t.fib4.lookup(&Flow::to(dst), &g).expect("a route");
    Arc::as_ptr(&r.alias.info)
}

fn objects_and_routes(ns: &Netns) {
    two_links(ns);
    // Blackhole nexthops live on the loopback device.
    ip(ns, "link set lo up");
}

#[test]
fn nexthop_objects_converge_and_answer_as_the_kernel() {
    if !xfwd_lab::privileged("nexthop_objects_converge_and_answer_as_the_kernel") {
        return;
    }
    let ns = netns("nhobj");
    objects_and_routes(&ns);
    ip(&ns, "nexthop add id 1 via 10.1.0.2 dev d0");
    // Objects and routes present before the mirror starts come from its initial dump.
    ip(&ns, "route add 10.3.0.0/16 nhid 1");
    let live = mirror(&ns, MirrorOptions::default());
    let steps = [
        "nexthop add id 2 via 10.2.0.2 dev d1",
        "nexthop add id 3 blackhole",
        "nexthop add id 4 via 2001:db8:1::2 dev d0",
        "nexthop add id 5 dev d1",
        "nexthop add id 6 via 10.77.0.1 dev d0 onlink",
        "-6 nexthop add id 7 blackhole",
        "nexthop add id 10 group 1/2",
        "nexthop add id 11 group 1,3/2 type resilient buckets 8",
        "nexthop add id 12 group 3",
        "nexthop add id 13 group 4",
        "nexthop add id 14 group 1,2/2,1",
        "route add 10.9.0.0/16 nhid 10",
        "route add 10.8.0.0/16 nhid 3",
        "route add blackhole 10.7.0.0/16 nhid 1",
        "route add 10.5.0.0/16 nhid 11",
        "route add 10.4.0.0/16 nhid 12",
        "route add 10.2.5.0/24 nhid 5",
        "route add 10.33.0.0/16 nhid 6 table 100",
        "route add 10.34.0.0/16 nhid 14 metric 20",
        "-6 route add 2001:db8:9::/48 nhid 4",
        "-6 route add 2001:db8:8::/48 nhid 13",
        "-6 route add 2001:db8:7::/48 nhid 7",
    ];
    for step in steps {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    let t = live.tables();
    for q in [
        "10.3.1.1",
        "10.8.1.1",
        "10.7.1.1",
        "10.4.1.1",
        "10.2.5.9",
        "2001:db8:9::1",
        "2001:db8:8::1",
        "2001:db8:7::1",
        "8.8.8.8",
    ] {
        same_answer(&ns, t, q);
    }
    same_answer_in_group(&ns, t, "10.9.1.1", &["10.1.0.2", "10.2.0.2"]);
    same_answer_in_group(&ns, t, "10.5.1.1", &["10.1.0.2", "10.2.0.2"]);
    same_answer_in_group(&ns, t, "10.34.1.1", &["10.1.0.2", "10.2.0.2"]);
    // The resilient group's buckets as the kernel laid them out.
    let kernel_buckets: Vec<String> = ns
        .ip(["nexthop", "bucket", "show", "id", "11"])
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().last().unwrap_or_default().to_owned())
        .collect();
    let g = crossbeam_epoch::pin();
    let r = t.fib4.lookup(&Flow::to(0x0a05_0101), &g).unwrap();
    let ours: Vec<String> = r
        .path
        .buckets
        .iter()
        .map(|&b| {
            let gw = r.nexthops()[usize::from(b)].gateway_same().unwrap();
            if gw == 0x0a01_0002 { "1" } else { "2" }.to_owned()
        })
        .collect();
    assert_eq!(ours, kernel_buckets, "resilient buckets");
    drop(g);
    // An IPv4 route through an IPv6 nexthop (RFC 8950): forwarded via the IPv6 gateway.
    ip(&ns, "route add 10.6.0.0/16 nhid 4");
    converge(&live, &ns, CONVERGE).unwrap();
    {
        let g = crossbeam_epoch::pin();
        let r = t.fib4.lookup(&Flow::to(0x0a06_0101), &g).unwrap();
        assert_eq!((r.route_type(), r.plen), (RouteType::Unicast, 16));
        let gw = u128::from("2001:db8:1::2".parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(r.nexthops()[0].gateway, Some(fib_trie::Gateway::Inet6(gw)));
    }
    same_answer(&ns, t, "10.6.1.1");

    // A replace reaches every route through the object, without re-inserting them.
    let before = info_ptr(t, 0x0a03_0101);
    ip(&ns, "nexthop replace id 1 via 10.1.0.9 dev d0");
    converge(&live, &ns, CONVERGE).unwrap();
    assert_eq!(info_ptr(t, 0x0a03_0101), before, "route not re-inserted");
    same_answer(&ns, t, "10.3.1.1");
    same_answer_in_group(&ns, t, "10.9.1.1", &["10.1.0.9", "10.2.0.2"]);
    for step in [
        "nexthop replace id 10 group 2",
        "nexthop replace id 12 group 2",
        "nexthop replace id 11 group 1,2/2 type resilient buckets 8",
    ] {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    same_answer(&ns, t, "10.9.1.1");
    same_answer(&ns, t, "10.4.1.1");
    same_answer_in_group(&ns, t, "10.5.1.1", &["10.1.0.9", "10.2.0.2"]);

    // Deleting an object removes its routes (the kernel says nothing of them), and a group
    // left empty goes with its routes.
    for step in [
        "nexthop del id 2",
        "nexthop del id 1",
        "nexthop del id 3",
        "nexthop del id 4",
        "nexthop del id 7",
    ] {
        ip(&ns, step);
        converge(&live, &ns, CONVERGE).unwrap_or_else(|e| panic!("after `ip {step}`: {e}"));
    }
    for q in [
        "10.3.1.1",
        "10.9.1.1",
        "10.4.1.1",
        "10.5.1.1",
        "10.7.1.1",
        "10.8.1.1",
        "2001:db8:8::1",
        "2001:db8:7::1",
    ] {
        same_answer(&ns, t, q);
    }
    assert_eq!(t.nexthops.lock().len(), 2, "5 and 6 are left");
    let s = live.stats();
    assert!(s.errors.is_empty(), "no message refused: {:?}", s.errors);
}

#[test]
fn fdb_nexthops_are_ignored_with_a_reason() {
    if !xfwd_lab::privileged("fdb_nexthops_are_ignored_with_a_reason") {
        return;
    }
    let ns = netns("nhfdb");
    objects_and_routes(&ns);
    let live = mirror(&ns, MirrorOptions::default());
    ip(&ns, "nexthop add id 20 via 10.1.0.2 fdb");
    ip(&ns, "nexthop add id 21 group 20 fdb");
    // An ordinary object after them: once it is seen, so were they.
    ip(&ns, "nexthop add id 22 via 10.1.0.2 dev d0");
    converge(&live, &ns, CONVERGE).unwrap();
    netlink_mirror_common::wait_for(&live, "nexthop 22", |t| t.nexthops.lock().get(22).is_some());
    assert_eq!(live.tables().nexthops.lock().len(), 1, "only 22");
    let s = live.stats();
    assert_eq!(s.ignored.get("fdb-nexthop"), Some(&2), "{s:?}");
}

#[test]
fn nexthop_overrun_resync_equals_fresh_dump() {
    if !xfwd_lab::privileged("nexthop_overrun_resync_equals_fresh_dump") {
        return;
    }
    const OBJECTS: u32 = 5_000;
    let ns = netns("nhover");
    objects_and_routes(&ns);
    let tiny = MirrorOptions {
        rcvbuf: 4096,
        ..MirrorOptions::default()
    };
    let live = mirror(&ns, tiny);
    // Objects, groups of pairs of them, routes through the groups; then replaces of half the
    // objects and deletes of a quarter (with their groups' members and routes).
    let adds = (1..=OBJECTS).map(|i| {
        format!(
            "nexthop add id {i} via 10.{}.0.{} dev d{}",
            1 + i % 2,
            2 + i % 200,
            i % 2
        )
    });
    let groups = (1..=OBJECTS / 2).map(|i| {
        format!(
            "nexthop add id {} group {}/{}",
            100_000 + i,
            2 * i - 1,
            2 * i
        )
    });
    let routes = (1..=OBJECTS / 2).map(|i| {
        format!(
            "route add 20.{}.{}.0/24 nhid {}",
            i / 256,
            i % 256,
            100_000 + i
        )
    });
    let replaces = (1..=OBJECTS / 2).map(|i| {
        format!(
            "nexthop replace id {i} via 10.{}.0.250 dev d{}",
            1 + i % 2,
            i % 2
        )
    });
    let deletes = (OBJECTS * 3 / 4..=OBJECTS).map(|i| format!("nexthop del id {i}"));
    ip_batch(
        &ns,
        adds.chain(groups)
            .chain(routes)
            .chain(replaces)
            .chain(deletes),
    );
    converge(&live, &ns, Duration::from_secs(120)).unwrap();
    let s = live.stats();
    assert!(
        s.overruns >= 1 && s.resyncs >= 1,
        "the burst overran the buffer: {s:?}"
    );
    for q in ["20.0.1.1", "20.1.200.1", "20.3.231.1", "20.8.100.1"] {
        let kernel = ns.ip(["route", "get", q]);
        let ours = route_get(
            live.tables(),
            &RouteGetArgs {
                addr: q.parse().unwrap(),
                selectors: vec![],
                netns: None,
            },
        );
        assert_eq!(kernel.is_ok(), ours.is_ok(), "{q}: {kernel:?} {ours:?}");
    }
}
