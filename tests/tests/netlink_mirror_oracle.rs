//! netlink-mirror with the kernel as oracle (privileged).
//!
//! - `kernel_oracle_bgp_full_v4`: bgp-full-v4 (or a spread subset of it) loaded with
//!   `ip -batch` into a throwaway namespace over four next hops; a mirror started afterwards
//!   dumps it; for random addresses `route get` from the mirror must equal `ip route get`
//!   (type, via, dev, src, table). By default (CI, debug) every 20th prefix (53,627 routes) and
//!   10,000 addresses; `XFWD_ORACLE_ROUTES=all XFWD_ORACLE_LOOKUPS=1000000` (what
//!   `cargo xtask mirror-oracle` runs, in release) is the full table and a million addresses.
//! - `overrun_resync_equals_fresh_dump`: a mirror with a tiny receive buffer watches 100,000
//!   route changes arrive in one burst; it must notice the overrun, resynchronise, and end up
//!   equal to a fresh dump.

mod netlink_mirror_common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use netlink_mirror::MirrorOptions;
use netlink_mirror::cli::{RouteGetArgs, route_get};
use netlink_mirror_common::{converge, get_fields, ip_batch, mirror, netns};
use rand::{RngExt, SeedableRng, rngs::StdRng};
use xfwd_benches::data::routes::BGP_FULL_V4;

/// Every n-th prefix of bgp-full-v4 by default.
const CI_STRIDE: usize = 20;
const CI_LOOKUPS: usize = 10_000;
const NEXT_HOPS: u32 = 4;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Four veth pairs d0..d3 (10.255.i.1/24), peers up in the same namespace.
fn next_hops(ns: &xfwd_lab::netns::Netns) {
    let mut lines = Vec::new();
    for i in 0..NEXT_HOPS {
        lines.push(format!("link add d{i} type veth peer name p{i}"));
        lines.push(format!("link set d{i} up"));
        lines.push(format!("link set p{i} up"));
        lines.push(format!("addr add 10.255.{i}.1/24 dev d{i}"));
    }
    ip_batch(ns, lines);
}

/// The nexthop objects routes use with `--nexthop-objects`: one per next hop, a group of one
/// (hash-threshold), a resilient group of one, a blackhole. Single-member groups keep every
/// answer deterministic (with several members, the kernel's hash picks its own).
const OBJECTS: [&str; 8] = [
    "nexthop add id 1 via 10.255.0.2 dev d0",
    "nexthop add id 2 via 10.255.1.2 dev d1",
    "nexthop add id 3 via 10.255.2.2 dev d2",
    "nexthop add id 4 via 10.255.3.2 dev d3",
    "nexthop add id 10 group 1",
    "nexthop add id 11 group 2 type resilient buckets 16",
    "link set lo up",
    "nexthop add id 12 blackhole",
];
/// The object ids routes are spread over.
const OBJECT_IDS: [u32; 7] = [1, 2, 3, 4, 10, 11, 12];

#[test]
fn kernel_oracle_bgp_full_v4() {
    if !xfwd_lab::privileged("kernel_oracle_bgp_full_v4") {
        return;
    }
    oracle(false);
}

/// The same through nexthop objects (what routing daemons such as FRR install): the mirror
/// resolves every route through its object; then one group replace moves a seventh of the
/// table to another next hop, and the answers must follow.
#[test]
fn kernel_oracle_bgp_full_v4_nexthop_objects() {
    if !xfwd_lab::privileged("kernel_oracle_bgp_full_v4_nexthop_objects") {
        return;
    }
    oracle(true);
}

fn oracle(objects: bool) {
    let all = std::env::var("XFWD_ORACLE_ROUTES").is_ok_and(|v| v == "all");
    let stride = if all {
        1
    } else {
        env_usize("XFWD_ORACLE_ROUTES").unwrap_or(CI_STRIDE)
    };
    let lookups = env_usize("XFWD_ORACLE_LOOKUPS").unwrap_or(CI_LOOKUPS);
    let table = BGP_FULL_V4.load().expect("bgp-full-v4");
    let ns = netns(if objects { "oraclenh" } else { "oracle" });
    next_hops(&ns);
    if objects {
        ip_batch(&ns, OBJECTS.iter().map(|l| (*l).to_owned()));
    }
    let chosen: Vec<_> = table.iter().step_by(stride.max(1)).collect();
    let t0 = Instant::now();
    ip_batch(
        &ns,
        chosen.iter().map(|r| {
            if objects {
                let id = OBJECT_IDS[r.origin_asn as usize % OBJECT_IDS.len()];
                format!("route add {} nhid {id}", r.prefix)
            } else {
                format!(
                    "route add {} via 10.255.{}.2",
                    r.prefix,
                    r.origin_asn % NEXT_HOPS
                )
            }
        }),
    );
    let loaded = t0.elapsed();
    let t1 = Instant::now();
    let live = mirror(&ns, MirrorOptions::default());
    let mirrored = t1.elapsed();
    let main = live
        .tables()
        .fib4
        .table(254, &crossbeam_epoch::pin())
        .map(|t| t.route_count());
    eprintln!(
        "oracle: {} routes loaded by ip -batch in {loaded:?}, mirrored in {mirrored:?} ({main:?} in main)",
        chosen.len()
    );
    let mut rng = StdRng::seed_from_u64(0x6e6c_6d69);
    let addrs: Vec<Ipv4Addr> = (0..lookups)
        .map(|_| {
            loop {
                let a = Ipv4Addr::from(rng.random::<u32>());
                // Multicast, class E and loopback destinations take other paths in the kernel.
                if !a.is_multicast()
                    && a.octets()[0] < 224
                    && !a.is_loopback()
                    && a.octets()[0] != 0
                {
                    break a;
                }
            }
        })
        .collect();
    compare(&ns, &live, &addrs);
    if objects {
        // One message for a seventh of the table: group 10 moves from d0 to d2.
        let t2 = Instant::now();
        ip_batch(&ns, ["nexthop replace id 10 group 3".to_owned()]);
        converge(&live, &ns, Duration::from_secs(300)).unwrap();
        eprintln!(
            "oracle: group replace under {} routes converged in {:?}",
            chosen.len(),
            t2.elapsed()
        );
        let some: Vec<_> = addrs
            .iter()
            .take(addrs.len().min(20_000))
            .copied()
            .collect();
        compare(&ns, &live, &some);
    }
    assert!(live.stats().errors.is_empty(), "{:?}", live.stats().errors);
}

/// `route get` from the mirror equals `ip route get` for every address.
fn compare(ns: &xfwd_lab::netns::Netns, live: &netlink_mirror::MirrorHandle, addrs: &[Ipv4Addr]) {
    let kernel = ip_batch(ns, addrs.iter().map(|a| format!("route get {a}")));
    let mut answers = std::collections::HashMap::new();
    for line in kernel
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
    {
        let f = get_fields(line);
        answers.insert(f.dst.clone(), f);
    }
    let mut mismatches = Vec::new();
    for a in addrs {
        let args = RouteGetArgs {
            addr: IpAddr::V4(*a),
            selectors: vec![],
            netns: None,
        };
        let ours = route_get(live.tables(), &args).ok().map(|l| get_fields(&l));
        if ours.as_ref() != answers.get(&a.to_string()) {
            mismatches.push((a, ours, answers.get(&a.to_string()).cloned()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} lookups differ, first: {:#?}",
        mismatches.len(),
        addrs.len(),
        &mismatches[..mismatches.len().min(5)]
    );
}

#[test]
fn overrun_resync_equals_fresh_dump() {
    if !xfwd_lab::privileged("overrun_resync_equals_fresh_dump") {
        return;
    }
    const BURST: u32 = 100_000;
    let ns = netns("overrun");
    next_hops(&ns);
    // The smallest buffer the kernel grants: a burst overruns it at once.
    let tiny = MirrorOptions {
        rcvbuf: 4096,
        ..MirrorOptions::default()
    };
    let live = mirror(&ns, tiny);
    let base = u32::from(Ipv4Addr::new(20, 0, 0, 0));
    // Adds, then replaces of a quarter and deletes of another quarter: a mirror that lost
    // any of them and did not resynchronise would differ.
    let adds = (0..BURST * 3 / 4).map(|i| {
        format!(
            "route add {}/32 via 10.255.{}.2",
            Ipv4Addr::from(base + i),
            i % NEXT_HOPS
        )
    });
    let replaces = (0..BURST / 8).map(|i| {
        format!(
            "route replace {}/32 via 10.255.{}.2",
            Ipv4Addr::from(base + i),
            (i + 1) % NEXT_HOPS
        )
    });
    let deletes =
        (0..BURST / 8).map(|i| format!("route del {}/32", Ipv4Addr::from(base + BURST / 2 + i)));
    ip_batch(&ns, adds.chain(replaces).chain(deletes));
    converge(&live, &ns, Duration::from_secs(300)).unwrap();
    let s = live.stats();
    eprintln!("overrun: converged; {s:?}");
    assert!(
        s.overruns >= 1 && s.resyncs >= 1,
        "the burst overran the buffer: {s:?}"
    );
    let main = live
        .tables()
        .fib4
        .table(254, &crossbeam_epoch::pin())
        .map(|t| t.route_count());
    assert_eq!(
        main,
        Some((BURST * 3 / 4 - BURST / 8) as usize + NEXT_HOPS as usize)
    );
}
