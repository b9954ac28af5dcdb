//! fib-trie's fast lookup structure beside the LC-trie walk and the peers, on full tables with
//! keys that never repeat: each measured batch of `CHUNK` keys is the next slice of a stream of
//! `STREAM` keys (10 million), so no key's path stays cached from an earlier batch. Also the
//! memory of each engine, full-table build times, and one route update (insert and delete of a
//! /24) with the fast structure maintained. See `fib-lookup.md` beside this file.

use std::cell::Cell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_epoch as epoch;
use fib_trie::{
    FastLpmWriter, FibWriter, Flow, NextHop, Route, RouteSelector, TrieKey, TrieWriter,
};
use ipnet::{Ipv4Net, Ipv6Net};
use poptrie::Poptrie;
use prefix_trie::PrefixMap;
use rand::{RngExt, SeedableRng, rngs::StdRng};
use xfwd_benches::data::routes;

/// Keys per measured batch.
const CHUNK: usize = 4096;
/// Keys in the stream each engine walks through (none repeated within it).
const STREAM: usize = 10_000_000;
/// Interfaces the routes' next hops spread over (by origin AS), as peers of a router.
const HOPS: u32 = 16;

/// One address family's plumbing.
trait Family: TrieKey {
    type Net: Copy + prefix_trie::Prefix;
    type Pop: Copy + poptrie::Prefix;
    fn random(rng: &mut StdRng) -> Self;
    fn net(key: Self, len: u8) -> Self::Net;
    fn pop(key: Self, len: u8) -> Self::Pop;
    fn pop_key(key: Self) -> <Self::Pop as poptrie::Prefix>::ADDRESS;
    fn prefix_trie(map: &PrefixMap<Self::Net, u32>, key: Self) -> Option<u32>;
}

impl Family for u32 {
    type Net = Ipv4Net;
    type Pop = (u32, u8);
    fn random(rng: &mut StdRng) -> u32 {
        rng.random()
    }
    fn net(key: u32, len: u8) -> Ipv4Net {
        Ipv4Net::new(key.into(), len).expect("valid length")
    }
    fn pop(key: u32, len: u8) -> (u32, u8) {
        (key, len)
    }
    fn pop_key(key: u32) -> u32 {
        key
    }
    fn prefix_trie(map: &PrefixMap<Ipv4Net, u32>, key: u32) -> Option<u32> {
        map.get_lpm(&Ipv4Net::new(key.into(), 32).expect("/32"))
            .map(|(_, v)| *v)
    }
}

impl Family for u128 {
    type Net = Ipv6Net;
    type Pop = (u128, u8);
    fn random(rng: &mut StdRng) -> u128 {
        // Global unicast 2000::/3: uniform IPv6 keys would almost never match.
        (rng.random::<u128>() >> 3) | (1 << 125)
    }
    fn net(key: u128, len: u8) -> Ipv6Net {
        Ipv6Net::new(key.into(), len).expect("valid length")
    }
    fn pop(key: u128, len: u8) -> (u128, u8) {
        (key, len)
    }
    fn pop_key(key: u128) -> u128 {
        key
    }
    fn prefix_trie(map: &PrefixMap<Ipv6Net, u32>, key: u128) -> Option<u32> {
        map.get_lpm(&Ipv6Net::new(key.into(), 128).expect("/128"))
            .map(|(_, v)| *v)
    }
}

/// DPDK's `rte_fib` (DIR-24-8) and `rte_fib6` (TRIE), feature `dpdk`.
#[cfg(feature = "dpdk")]
mod rte {
    use xfwd_benches::dpdk::{RteFib, RteFib6, tbl8_groups, v6_bytes};

    pub enum Rte {
        V4(RteFib, usize, Vec<u32>),
        V6(RteFib6, usize, Vec<u32>),
    }

    pub enum Keys {
        V4(Vec<u32>),
        V6(Vec<[u8; 16]>),
    }

    /// Routes shortest first (DPDK 22.11 mishandles a /0 or /1 added over more-specifics),
    /// each with a next hop id per distinct value (from 1; 0 is DPDK's "no route"), and the
    /// value of each id.
    fn order<K: Copy + Ord>(p: &[(K, u8, u32)]) -> (Vec<(K, u8, u64)>, Vec<u32>) {
        let mut ids = std::collections::HashMap::new();
        let mut values = vec![0];
        let mut r: Vec<(K, u8, u64)> = p
            .iter()
            .map(|&(k, l, v)| {
                let id = *ids.entry(v).or_insert_with(|| {
                    values.push(v);
                    values.len() as u64 - 1
                });
                (k, l, id)
            })
            .collect();
        r.sort_by_key(|&(k, l, _)| (l, k));
        (r, values)
    }

    impl Rte {
        pub fn v4(p: &[(u32, u8, u32)]) -> Self {
            let groups = tbl8_groups(p.iter().map(|r| r.1)) + 1024;
            let mut fib = RteFib::new(p.len() + 1024, groups).expect("rte_fib");
            let (routes, values) = order(p);
            for (k, l, id) in routes {
                fib.add(k, l, id).expect("rte_fib_add");
            }
            Rte::V4(fib, groups, values)
        }
        pub fn v6(p: &[(u128, u8, u32)]) -> Self {
            let groups = tbl8_groups(p.iter().map(|r| r.1)) + 1024;
            let mut fib = RteFib6::new(p.len() + 1024, groups).expect("rte_fib6");
            let (routes, values) = order(p);
            for (k, l, id) in routes {
                fib.add(k, l, id).expect("rte_fib6_add");
            }
            Rte::V6(fib, groups, values)
        }
        pub fn name(&self) -> &'static str {
            match self {
                Rte::V4(..) => "dpdk-rte-fib",
                Rte::V6(..) => "dpdk-rte-fib6",
            }
        }
        /// Table memory as configured: tbl24 (2^24 4-byte entries) plus the tbl8 groups.
        pub fn bytes(&self) -> usize {
            let groups = match self {
                Rte::V4(_, g, _) | Rte::V6(_, g, _) => *g,
            };
            (1 << 24) * 4 + groups * 256 * 4
        }
        pub fn keys_v4(keys: &[u32]) -> Keys {
            Keys::V4(keys.to_vec())
        }
        pub fn keys_v6(keys: &[u128]) -> Keys {
            Keys::V6(v6_bytes(keys))
        }
        /// The value next hop id `id` stands for (`None` for 0, no route).
        pub fn value(&self, id: u64) -> Option<u32> {
            let (Rte::V4(_, _, values) | Rte::V6(_, _, values)) = self;
            (id != 0).then(|| values[id as usize])
        }
        /// Looks up `keys[at..at + n]` in one burst into `out` (next hop ids, 0 for none).
        pub fn lookup(&self, keys: &Keys, at: usize, out: &mut [u64]) {
            match (self, keys) {
                (Rte::V4(fib, ..), Keys::V4(k)) => fib.lookup_bulk(&k[at..at + out.len()], out),
                (Rte::V6(fib, ..), Keys::V6(k)) => fib.lookup_bulk(&k[at..at + out.len()], out),
                _ => unreachable!("keys of the table's family"),
            }
        }
    }
}

/// Every engine over one table. Values are origin ASNs; the `Fib`'s routes go through one of
/// `HOPS` interfaces by origin AS.
struct Engines<K: Family> {
    fib: FibWriter<K>,
    trie: TrieWriter<K, u32>,
    fast: FastLpmWriter<K>,
    prefix_trie: PrefixMap<K::Net, u32>,
    poptrie: Poptrie<K::Pop, u32>,
    #[cfg(feature = "dpdk")]
    rte: rte::Rte,
}

/// The table's prefixes, each (address, length) once with its first value.
fn prefixes<A: xfwd_benches::data::PrefixAddr, K: TrieKey>(
    table: &[routes::Route<A>],
    to_key: impl Fn(A) -> K,
) -> Vec<(K, u8, u32)> {
    let mut seen = HashSet::new();
    table
        .iter()
        .map(|r| (to_key(r.prefix.addr), r.prefix.len, r.origin_asn))
        .filter(|&(k, l, _)| seen.insert((k, l)))
        .collect()
}

fn fib_routes<K: TrieKey>(p: &[(K, u8, u32)]) -> Vec<Route<K>> {
    p.iter()
        .map(|&(k, l, v)| Route::unicast(k, l, 254, vec![NextHop::new(None, 1 + v % HOPS)]))
        .collect()
}

fn engines<K: Family>(
    p: &[(K, u8, u32)],
    #[allow(unused)] rte: impl FnOnce() -> Rte,
) -> Engines<K> {
    let mut fib = FibWriter::new();
    fib.insert_many(&fib_routes(p)).expect("routes load");
    let mut trie = TrieWriter::new();
    trie.insert_many(p.iter().copied()).expect("prefixes load");
    let mut fast = FastLpmWriter::new();
    fast.rebuild(&mut &*trie);
    let mut prefix_trie = PrefixMap::new();
    for &(k, l, v) in p {
        prefix_trie.insert(K::net(k, l), v);
    }
    // Its bulk build: one insert at a time recomputes leaf ranges (quadratic on a full table).
    let poptrie = p.iter().map(|&(k, l, v)| (K::pop(k, l), v)).collect();
    Engines {
        fib,
        trie,
        fast,
        prefix_trie,
        poptrie,
        #[cfg(feature = "dpdk")]
        rte: rte(),
    }
}

#[cfg(feature = "dpdk")]
type Rte = rte::Rte;
#[cfg(not(feature = "dpdk"))]
type Rte = ();

/// `STREAM` uniform keys, or keys inside announced prefixes (a random prefix, random host bits).
fn stream<K: Family>(p: &[(K, u8, u32)], announced: bool, seed: u64) -> Vec<K> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..STREAM)
        .map(|_| {
            if announced {
                let (k, l, _) = p[rng.random_range(0..p.len())];
                k | (K::random(&mut rng) & !K::prefix_mask(l))
            } else {
                K::random(&mut rng)
            }
        })
        .collect()
}

/// Runs `batch(start)` over consecutive `CHUNK`-key slices of the stream, never repeating a
/// key until the stream wraps.
fn streamed(
    b: &mut criterion::Bencher<'_>,
    cursor: &Cell<usize>,
    mut batch: impl FnMut(usize) -> u64,
) {
    b.iter_custom(|iters| {
        let mut sum = 0u64;
        let start = Instant::now();
        for _ in 0..iters {
            let at = cursor.get();
            sum = sum.wrapping_add(batch(at));
            cursor.set(if at + 2 * CHUNK > STREAM {
                0
            } else {
                at + CHUNK
            });
        }
        let elapsed = start.elapsed();
        std::hint::black_box(sum);
        elapsed
    });
}

fn fold(sum: u64, v: u64) -> u64 {
    sum.wrapping_mul(31).wrapping_add(v)
}

/// Every engine answers the first keys of the stream alike (values; the `Fib` by interface
/// and prefix length, against its own walk).
fn check<K: Family>(e: &Engines<K>, keys: &[K], #[allow(unused)] rte_keys: &RteKeys) {
    let guard = &epoch::pin();
    let n = 100_000.min(keys.len());
    let mut batched = vec![None; n];
    e.fast.lookup_batch(&keys[..n], &mut batched, guard);
    #[cfg(feature = "dpdk")]
    let mut rte = vec![0u64; n];
    #[cfg(feature = "dpdk")]
    for (i, chunk) in rte.chunks_mut(CHUNK).enumerate() {
        e.rte.lookup(rte_keys, i * CHUNK, chunk);
    }
    for (i, &k) in keys[..n].iter().enumerate() {
        let want = e.trie.lookup(k, guard, |_| true).map(|m| *m.value);
        assert_eq!(e.fast.lookup(k, guard), want);
        assert_eq!(batched[i], want);
        assert_eq!(K::prefix_trie(&e.prefix_trie, k), want, "prefix-trie");
        assert_eq!(e.poptrie.lookup(K::pop_key(k)).copied(), want, "poptrie");
        #[cfg(feature = "dpdk")]
        assert_eq!(e.rte.value(rte[i]), want, "{}", e.rte.name());
        let flow = Flow::to(k);
        assert_eq!(e.fib.lookup(&flow, guard), e.fib.lookup_walk(&flow, guard));
    }
}

#[cfg(feature = "dpdk")]
type RteKeys = rte::Keys;
#[cfg(not(feature = "dpdk"))]
type RteKeys = ();

fn group<K: Family>(
    c: &mut Criterion,
    name: &str,
    table: &str,
    e: &Engines<K>,
    keys: &[K],
    rte_keys: &RteKeys,
) {
    check(e, keys, rte_keys);
    let mut g = c.benchmark_group(format!("fib-lookup/{name}"));
    g.throughput(Throughput::Elements(CHUNK as u64));
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let cursor = Cell::new(0);
    g.bench_function(BenchmarkId::new("fib-trie-fast", table), |b| {
        streamed(b, &cursor, |at| {
            let guard = epoch::pin();
            keys[at..at + CHUNK].iter().fold(0, |s, &k| {
                let v = e.fib.lookup(&Flow::to(k), &guard).map_or(0, |r| {
                    u64::from(r.plen) << 32 | u64::from(r.alias.info.nexthops[r.nh_sel].ifindex)
                });
                fold(s, v)
            })
        });
    });
    g.bench_function(BenchmarkId::new("fib-trie-fast-batched", table), |b| {
        let flows: Vec<Flow<K>> = keys.iter().map(|&k| Flow::to(k)).collect();
        streamed(b, &cursor, |at| {
            let guard = epoch::pin();
            let mut sum = 0;
            e.fib.lookup_batch(&flows[at..at + CHUNK], &guard, |_, r| {
                let v = r.map_or(0, |r| {
                    u64::from(r.plen) << 32 | u64::from(r.nexthops()[r.nh_sel].ifindex)
                });
                sum = fold(sum, v);
            });
            sum
        });
    });
    g.bench_function(BenchmarkId::new("fast-lpm", table), |b| {
        streamed(b, &cursor, |at| {
            let guard = epoch::pin();
            let view = e.fast.view(&guard);
            keys[at..at + CHUNK]
                .iter()
                .fold(0, |s, &k| fold(s, view.lookup(k).map_or(0, u64::from)))
        });
    });
    g.bench_function(BenchmarkId::new("fast-lpm-batched", table), |b| {
        let mut out = vec![None; CHUNK];
        streamed(b, &cursor, |at| {
            let guard = epoch::pin();
            e.fast.lookup_batch(&keys[at..at + CHUNK], &mut out, &guard);
            out.iter().fold(0, |s, a| fold(s, a.map_or(0, u64::from)))
        });
    });
    g.bench_function(BenchmarkId::new("fib-trie-walk", table), |b| {
        streamed(b, &cursor, |at| {
            let guard = epoch::pin();
            keys[at..at + CHUNK].iter().fold(0, |s, &k| {
                let v = e.fib.lookup_walk(&Flow::to(k), &guard).map_or(0, |r| {
                    u64::from(r.plen) << 32 | u64::from(r.alias.info.nexthops[r.nh_sel].ifindex)
                });
                fold(s, v)
            })
        });
    });
    #[cfg(feature = "dpdk")]
    g.bench_function(BenchmarkId::new(e.rte.name(), table), |b| {
        let mut out = vec![0u64; CHUNK];
        streamed(b, &cursor, |at| {
            e.rte.lookup(rte_keys, at, &mut out);
            out.iter().fold(0, |s, &v| fold(s, v))
        });
    });
    g.bench_function(BenchmarkId::new("poptrie-crate", table), |b| {
        streamed(b, &cursor, |at| {
            keys[at..at + CHUNK].iter().fold(0, |s, &k| {
                fold(
                    s,
                    e.poptrie.lookup(K::pop_key(k)).map_or(0, |&v| u64::from(v)),
                )
            })
        });
    });
    g.bench_function(BenchmarkId::new("prefix-trie", table), |b| {
        streamed(b, &cursor, |at| {
            keys[at..at + CHUNK].iter().fold(0, |s, &k| {
                fold(s, K::prefix_trie(&e.prefix_trie, k).map_or(0, u64::from))
            })
        });
    });
    g.finish();
}

fn memory<K: Family>(table: &str, e: &Engines<K>) {
    let guard = &epoch::pin();
    let stats = e.fib.table(254, guard).expect("main").fast_stats();
    eprintln!(
        "memory {table}: fib-trie-fast structure {} B ({:.1} MiB; first level {} bits), answers {} ({} B); fast-lpm {} B ({:.1} MiB); lc-trie {} B ({:.1} MiB)",
        stats.structure_bytes,
        stats.structure_bytes as f64 / 1048576.0,
        stats.first_level_bits,
        stats.answers,
        stats.answer_bytes,
        e.fast.bytes(),
        e.fast.bytes() as f64 / 1048576.0,
        e.trie.stats(guard).bytes,
        e.trie.stats(guard).bytes as f64 / 1048576.0,
    );
    // Whether the kernel granted transparent huge pages (the fast structure's arena asks for
    // them; the DPDK peers run with `--no-huge`, in 4 KiB pages).
    let huge = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|r| {
            r.lines()
                .find(|l| l.starts_with("AnonHugePages"))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown".into());
    eprintln!(
        "memory {table}: process AnonHugePages {huge} (THP {})",
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default()
            .trim()
    );
    #[cfg(feature = "dpdk")]
    eprintln!(
        "memory {table}: {} {} B ({:.1} MiB)",
        e.rte.name(),
        e.rte.bytes(),
        e.rte.bytes() as f64 / 1048576.0
    );
}

fn family<K: Family>(
    c: &mut Criterion,
    table: &str,
    p: &[(K, u8, u32)],
    rte: impl FnOnce() -> Rte,
    #[allow(unused)] rte_keys: impl Fn(&[K]) -> RteKeys,
) {
    let e = engines(p, rte);
    memory(table, &e);
    for (name, announced) in [("distinct-uniform", false), ("distinct-announced", true)] {
        let keys = stream(p, announced, 7);
        #[allow(
            clippy::let_unit_value,
            reason = "DPDK's keys are () without feature dpdk"
        )]
        let rk = rte_keys(&keys);
        group(c, name, table, &e, &keys, &rk);
    }
}

fn lookups(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    family(
        c,
        "bgp-full-v4",
        &v4,
        #[cfg(feature = "dpdk")]
        || rte::Rte::v4(&v4),
        #[cfg(not(feature = "dpdk"))]
        || (),
        #[cfg(feature = "dpdk")]
        rte::Rte::keys_v4,
        #[cfg(not(feature = "dpdk"))]
        |_: &[u32]| (),
    );
    let v6 = prefixes(
        &routes::BGP_FULL_V6.load().expect("bgp-full-v6"),
        u128::from,
    );
    family(
        c,
        "bgp-full-v6",
        &v6,
        #[cfg(feature = "dpdk")]
        || rte::Rte::v6(&v6),
        #[cfg(not(feature = "dpdk"))]
        || (),
        #[cfg(feature = "dpdk")]
        rte::Rte::keys_v6,
        #[cfg(not(feature = "dpdk"))]
        |_: &[u128]| (),
    );
}

/// Full-table build times (bgp-full-v4).
fn build(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    let routes = fib_routes(&v4);
    let mut trie = TrieWriter::new();
    trie.insert_many(v4.iter().copied()).expect("prefixes load");
    let mut g = c.benchmark_group("fib-lookup/build");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Elements(v4.len() as u64));
    g.bench_function(BenchmarkId::new("fib-insert-many", "bgp-full-v4"), |b| {
        b.iter_with_large_drop(|| {
            let mut fib = FibWriter::new();
            fib.insert_many(&routes).expect("routes load");
            fib
        })
    });
    g.bench_function(BenchmarkId::new("fast-lpm-rebuild", "bgp-full-v4"), |b| {
        b.iter_with_large_drop(|| {
            let mut fast = FastLpmWriter::new();
            fast.rebuild(&mut &*trie);
            fast
        })
    });
    #[cfg(feature = "dpdk")]
    g.bench_function(BenchmarkId::new("dpdk-rte-fib", "bgp-full-v4"), |b| {
        b.iter_with_large_drop(|| rte::Rte::v4(&v4))
    });
    g.bench_function(BenchmarkId::new("poptrie-crate", "bgp-full-v4"), |b| {
        b.iter_with_large_drop(|| {
            v4.iter()
                .map(|&(k, l, v)| ((k, l), v))
                .collect::<Poptrie<(u32, u8), u32>>()
        })
    });
    g.finish();
}

/// One route change on the full table: insert a /24 that is not in it, then delete it, with
/// everything each engine derives kept in step (for the `Fib`, the fast structure).
fn update(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    let present: HashSet<(u32, u8)> = v4.iter().map(|&(k, l, _)| (k, l)).collect();
    let mut rng = StdRng::seed_from_u64(24);
    // /24s next to announced prefixes (so inside populated first-level slots), not announced.
    let fresh: Vec<u32> = std::iter::from_fn(|| {
        let (k, _, _) = v4[rng.random_range(0..v4.len())];
        let k = (k ^ (rng.random_range(0..4u32) << 8)) & 0xffff_ff00;
        Some(k)
    })
    .filter(|&k| !present.contains(&(k, 24)))
    .take(4096)
    .collect();
    let mut fib = FibWriter::new();
    fib.insert_many(&fib_routes(&v4)).expect("routes load");
    let mut poptrie: Poptrie<(u32, u8), u32> = v4.iter().map(|&(k, l, v)| ((k, l), v)).collect();
    #[cfg(feature = "dpdk")]
    let mut dpdk = xfwd_benches::dpdk::RteFib::new(
        v4.len() + 8192,
        xfwd_benches::dpdk::tbl8_groups(v4.iter().map(|r| r.1)) + 8192,
    )
    .expect("rte_fib");
    #[cfg(feature = "dpdk")]
    {
        let mut sorted = v4.clone();
        sorted.sort_by_key(|&(k, l, _)| (l, k));
        for (k, l, _) in sorted {
            dpdk.add(k, l, 2).expect("rte_fib_add");
        }
    }
    let mut g = c.benchmark_group("fib-lookup/update");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    let hop = vec![NextHop::new(None, 3)];
    let mut i = 0;
    g.bench_function(BenchmarkId::new("fib-trie-fast", "bgp-full-v4"), |b| {
        b.iter(|| {
            let k = fresh[i % fresh.len()];
            i += 1;
            let route = Route::unicast(k, 24, 254, hop.clone());
            fib.insert(&route, fib_trie::InsertFlags::ADD)
                .expect("absent /24");
            fib.delete(&RouteSelector::exact(&route))
                .expect("present /24");
        })
    });
    g.bench_function(BenchmarkId::new("poptrie-crate", "bgp-full-v4"), |b| {
        b.iter(|| {
            let k = fresh[i % fresh.len()];
            i += 1;
            poptrie.insert((k, 24), 1);
            poptrie.remove((k, 24));
        })
    });
    #[cfg(feature = "dpdk")]
    g.bench_function(BenchmarkId::new("dpdk-rte-fib", "bgp-full-v4"), |b| {
        b.iter(|| {
            let k = fresh[i % fresh.len()];
            i += 1;
            dpdk.add(k, 24, 1).expect("rte_fib_add");
            dpdk.delete(k, 24).expect("rte_fib_delete");
        })
    });
    g.finish();
}

criterion_group!(benches, lookups, build, update);
criterion_main!(benches);
