//! dst-cache: the per-packet cost of the input route decision with a cache in front of
//! fib-trie loaded with bgp-full-v4, against the number of distinct destinations (seed 001's
//! experiment), for no cache, the kernel's route hint, dst-cache without and with its adaptive
//! bypass. Notes in `dst-cache.md`; run with `cargo xtask bench dst-cache`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_epoch as epoch;
use dst_cache::{
    Config, Decision, DecisionFlags, DstCache, FlowKey, Generation, Lookup, RouteHint, RouteKind,
};
use fib_trie::{Fib, FibWriter, Flow, InsertFlags, LookupError, NextHop, Route, RouteType};
use rand::{RngExt, SeedableRng, rngs::StdRng};
use xfwd_benches::data::routes;

/// Packets per iteration; processed in batches of [`BATCH`], one epoch pin per batch.
const PACKETS: usize = 16_384;
/// Packets per batch, as an AF_XDP run loop takes them.
const BATCH: usize = 64;
/// Numbers of distinct destinations (the RFC's 1..8000, and 100k).
const FLOWS: [usize; 10] = [1, 2, 15, 100, 500, 1000, 2000, 4000, 8000, 100_000];
const MAC_SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_DST: [u8; 6] = [2, 0, 0, 0, 0, 2];
const MAIN: u32 = 254;

/// Loads bgp-full-v4 into the main table: each route via a gateway and interface derived from
/// its origin AS (64 interfaces, so decisions differ and route infos are shared).
fn load_fib() -> (FibWriter<u32>, Vec<(u32, u8)>) {
    let table = routes::BGP_FULL_V4.load().expect("bgp-full-v4");
    let mut fib = FibWriter::new();
    let mut prefixes = Vec::with_capacity(table.len());
    for route in &table {
        let (addr, len) = (u32::from(route.prefix.addr), route.prefix.len);
        let ifindex = 1 + route.origin_asn % 64;
        let gateway = u32::from(Ipv4Addr::new(100, 64, ifindex as u8, 1));
        let r = Route::unicast(addr, len, MAIN, vec![NextHop::new(Some(gateway), ifindex)]);
        fib.insert(&r, InsertFlags::ADD)
            .expect("bgp-full-v4 has unique canonical prefixes");
        prefixes.push((addr, len));
    }
    (fib, prefixes)
}

/// The full decision: a FIB lookup turned into what the dataplane needs (the neighbour lookup
/// is left out: its MACs are fixed here, for every engine alike).
#[inline]
fn decide(fib: &Fib<u32>, dst: u32, guard: &epoch::Guard) -> Decision {
    match fib.lookup(&Flow::to(dst), guard) {
        Ok(found) => {
            let info = &found.alias.info;
            let kind = match found.alias.route_type {
                RouteType::Local => RouteKind::Local,
                RouteType::Broadcast => RouteKind::Broadcast,
                RouteType::Multicast => RouteKind::Multicast,
                RouteType::Anycast => RouteKind::Anycast,
                _ => RouteKind::Unicast,
            };
            let hop = info.nexthops.get(found.nh_sel);
            let flags = if info.nexthops.len() > 1 {
                DecisionFlags::MULTIPATH
            } else {
                DecisionFlags::EMPTY
            };
            Decision {
                oif: hop.map_or(0, |h| h.ifindex),
                next_hop: hop
                    .and_then(|h| h.gateway_same())
                    .map(|g| IpAddr::V4(Ipv4Addr::from(g))),
                src_mac: MAC_SRC,
                dst_mac: MAC_DST,
                mtu: 1500,
                kind,
                flags,
            }
        }
        Err(error) => Decision {
            kind: match error {
                LookupError::Blackhole => RouteKind::Blackhole,
                LookupError::Prohibit => RouteKind::Prohibit,
                _ => RouteKind::Unreachable,
            },
            ..Decision::unicast(0, None, MAC_SRC, MAC_DST, 0)
        },
    }
}

/// One way of making decisions, with its per-queue state.
#[allow(
    clippy::large_enum_variant,
    reason = "one engine per queue, built once; a box would add a load to every decision"
)]
enum Engine {
    NoCache,
    Hint(RouteHint<Decision>),
    Cache(DstCache<Decision>),
}

impl Engine {
    fn all() -> Vec<(&'static str, Engine)> {
        let cache = |bypass| {
            DstCache::new(Config {
                bypass,
                ..Config::default()
            })
            .expect("default geometry")
        };
        vec![
            ("no-cache", Engine::NoCache),
            ("route-hint", Engine::Hint(RouteHint::new())),
            ("dst-cache-no-bypass", Engine::Cache(cache(None))),
            ("dst-cache", Engine::Cache(cache(Config::default().bypass))),
        ]
    }

    /// Processes the packets in batches; returns the sum of egress interfaces (a checksum).
    fn run(&mut self, fib: &Fib<u32>, generation: &Generation, packets: &[u32]) -> u64 {
        let mut sum = 0u64;
        for batch in packets.chunks(BATCH) {
            let guard = epoch::pin();
            let snapshot = generation.snapshot();
            for &dst in batch {
                let key = FlowKey::v4(Ipv4Addr::from(dst), 0, 1);
                let decision = match self {
                    Engine::NoCache => decide(fib, dst, &guard),
                    Engine::Hint(hint) => match hint.lookup(&key, snapshot) {
                        Some(decision) => decision,
                        None => {
                            let decision = decide(fib, dst, &guard);
                            hint.remember(key, decision);
                            decision
                        }
                    },
                    Engine::Cache(cache) => match cache.lookup(&key, snapshot, 0) {
                        Lookup::Hit(decision) => decision,
                        Lookup::Miss(token) => {
                            let decision = decide(fib, dst, &guard);
                            cache.insert(token, decision, 0, u64::MAX);
                            decision
                        }
                        Lookup::Bypass => decide(fib, dst, &guard),
                    },
                };
                sum += u64::from(black_box(decision).oif);
            }
            if let Engine::Hint(hint) = self {
                hint.reset();
            }
        }
        sum
    }
}

/// `count` distinct destinations, each a random address inside a random announced prefix.
fn destinations(prefixes: &[(u32, u8)], count: usize, rng: &mut StdRng) -> Vec<u32> {
    let mut seen = std::collections::HashSet::with_capacity(count);
    while seen.len() < count {
        let (addr, len) = prefixes[rng.random_range(0..prefixes.len())];
        let host = if len == 32 {
            0
        } else {
            rng.random::<u32>() >> len
        };
        seen.insert(addr | host);
    }
    seen.into_iter().collect()
}

/// [`PACKETS`] packets drawn uniformly from `dests`.
fn uniform_stream(dests: &[u32], rng: &mut StdRng) -> Vec<u32> {
    (0..PACKETS)
        .map(|_| dests[rng.random_range(0..dests.len())])
        .collect()
}

/// [`PACKETS`] packets over `dests` with Zipf(1) popularity: rank r drawn with weight 1/r.
fn zipf_stream(dests: &[u32], rng: &mut StdRng) -> Vec<u32> {
    let mut cumulative = Vec::with_capacity(dests.len());
    let mut total = 0.0;
    for rank in 1..=dests.len() {
        total += 1.0 / rank as f64;
        cumulative.push(total);
    }
    (0..PACKETS)
        .map(|_| {
            let x = rng.random::<f64>() * total;
            dests[cumulative.partition_point(|&c| c < x).min(dests.len() - 1)]
        })
        .collect()
}

fn group(c: &mut Criterion, name: &str, fib: &Fib<u32>, streams: &[(String, Vec<u32>)]) {
    let generation = Generation::new();
    // Every engine must make the same decisions: compare checksums once, before timing.
    for (parameter, packets) in streams {
        let sums: Vec<(&str, u64)> = Engine::all()
            .into_iter()
            .map(|(id, mut engine)| (id, engine.run(fib, &generation, packets)))
            .collect();
        assert!(
            sums.iter().all(|(_, s)| *s == sums[0].1),
            "{parameter}: {sums:?}"
        );
    }
    let mut g = c.benchmark_group(format!("dst-cache/{name}"));
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.sample_size(20);
    g.warm_up_time(std::time::Duration::from_millis(500));
    g.measurement_time(std::time::Duration::from_secs(2));
    for (parameter, packets) in streams {
        for (id, mut engine) in Engine::all() {
            g.bench_with_input(BenchmarkId::new(id, parameter), packets, |b, packets| {
                b.iter(|| engine.run(fib, &generation, packets));
            });
        }
    }
    g.finish();
}

fn per_packet(c: &mut Criterion) {
    let (fib, prefixes) = load_fib();
    let mut rng = StdRng::seed_from_u64(1);
    let flows: Vec<(String, Vec<u32>)> = FLOWS
        .iter()
        .map(|&n| {
            let dests = destinations(&prefixes, n, &mut rng);
            (n.to_string(), uniform_stream(&dests, &mut rng))
        })
        .collect();
    group(c, "flows", &fib, &flows);

    let zipf_dests = destinations(&prefixes, 100_000, &mut rng);
    let mixes = vec![
        ("zipf-100k".to_owned(), zipf_stream(&zipf_dests, &mut rng)),
        (
            "new-every-packet".to_owned(),
            destinations(&prefixes, PACKETS, &mut rng),
        ),
    ];
    group(c, "mix", &fib, &mixes);
}

criterion_group!(benches, per_packet);
criterion_main!(benches);
