//! Quick probe of lookup costs with distinct keys (a profiling aid; the report's numbers come
//! from `cargo bench --bench fib-lookup`): best of five passes over a 10-million-key stream,
//! per engine, for bgp-full-v4 and bgp-full-v6 (or one: `lpm_probe v4`).
//!
//! `ONLY=<suffix>` runs the engines whose label ends with it (for `perf record`);
//! `FIBLIKE=1` builds the bare structure with answers shaped like a FIB's interned results
//! (next hop and prefix length) instead of origin ASNs. On a loaded machine, run it as
//! `chrt -f 50 taskset -c 1 target/release/examples/lpm_probe`.
//!
//! `KEYS=<n>` shortens the stream and `PASSES=<n>` the passes (for `valgrind --tool=callgrind`:
//! `KEYS=1000000 PASSES=1 ONLY='announced fast-lpm'`, then the inclusive cost of `best` over
//! the keys is the cost per lookup); engines whose labels `ONLY` excludes are not built.
//!
//! `CLOCK=thread` times each pass by the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) instead
//! of the wall clock: on a machine shared with other work, the time the thread waited for a
//! CPU is then left out (what the other work does to the caches is not).
//!
//! `cargo build --release -p xfwd-benches --features dpdk --example lpm_probe`
use std::collections::HashSet;
use std::time::Instant;

use crossbeam_epoch as epoch;
use fib_trie::{FastLpmWriter, FibWriter, Flow, NextHop, Route, TrieKey, TrieWriter};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xfwd_benches::data::routes;

const CHUNK: usize = 4096;

/// Keys in the stream (`KEYS`, default 10 million).
fn stream() -> usize {
    env_usize("KEYS", 10_000_000)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether the engine labelled `label` runs (`ONLY`).
fn wanted(label: &str) -> bool {
    std::env::var("ONLY").map_or(true, |only| label.ends_with(&only))
}

#[inline(never)]
fn best(label: &str, mut pass: impl FnMut() -> u64) {
    if !wanted(label) {
        return;
    }
    let mut best = f64::MAX;
    let mut sum = 0u64;
    let thread_clock = std::env::var("CLOCK").is_ok_and(|c| c == "thread");
    for _ in 0..env_usize("PASSES", 5) {
        let (t, cpu) = (Instant::now(), thread_cpu_ns());
        sum = sum.wrapping_add(pass());
        let ns = if thread_clock {
            (thread_cpu_ns() - cpu) as f64
        } else {
            t.elapsed().as_secs_f64() * 1e9
        };
        best = best.min(ns / stream() as f64);
    }
    println!("{label:40} {best:6.2} ns  ({sum:x})");
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

type Bulk = Box<dyn Fn(usize, &mut [u64])>;

fn run<K: TrieKey + Send + Sync>(
    name: &str,
    p: &[(K, u8, u32)],
    rand_key: impl Fn(&mut StdRng) -> K,
    rte: impl Fn(&[(K, u8, u32)], &[K]) -> Bulk,
) {
    let mut trie = TrieWriter::new();
    trie.insert_many(p.iter().copied()).unwrap();
    let mut trie2 = TrieWriter::new();
    trie2
        .insert_many(
            p.iter()
                .map(|&(k, l, v)| (k, l, (v % 16) * 256 + u32::from(l))),
        )
        .unwrap();
    let mut fast = FastLpmWriter::new();
    if std::env::var("FIBLIKE").is_ok() {
        fast.rebuild(&mut &*trie2);
    } else {
        fast.rebuild(&mut &*trie);
    }

    let mut fib = FibWriter::new();
    let want_fib = ["uniform", "announced"].iter().any(|kind| {
        wanted(&format!("{name} {kind} fib")) || wanted(&format!("{name} {kind} fib-batch"))
    });
    if want_fib {
        let routes: Vec<Route<K>> = p
            .iter()
            .map(|&(k, l, v)| Route::unicast(k, l, 254, vec![NextHop::new(None, 1 + v % 16)]))
            .collect();
        fib.insert_many(&routes).unwrap();
    }
    println!("{name}: fast {} B", fast.bytes());
    // Whether the kernel backed the structure's arena with transparent huge pages.
    if let Ok(rollup) = std::fs::read_to_string("/proc/self/smaps_rollup") {
        for line in rollup.lines().filter(|l| l.starts_with("AnonHugePages")) {
            println!("{name}: process {line}");
        }
    }
    if want_fib {
        println!(
            "{name}: fib {:?}",
            fib.table(254, &epoch::pin()).unwrap().fast_stats()
        );
    }
    for announced in [false, true] {
        let mut rng = StdRng::seed_from_u64(7);
        let keys: Vec<K> = (0..stream())
            .map(|_| {
                if announced {
                    let (k, l, _) = p[rng.random_range(0..p.len())];
                    k | (rand_key(&mut rng) & !K::prefix_mask(l))
                } else {
                    rand_key(&mut rng)
                }
            })
            .collect();
        let kind = if announced { "announced" } else { "uniform" };
        let label = format!("{name} {kind} rte");
        let bulk = if wanted(&label) {
            rte(p, &keys)
        } else {
            Box::new(|_, _: &mut [u64]| {})
        };
        let mut ids = vec![0u64; CHUNK];
        best(&label, || {
            let mut s = 0u64;
            let stream = keys.len();
            for at in (0..stream).step_by(CHUNK) {
                let n = CHUNK.min(stream - at);
                bulk(at, &mut ids[..n]);
                for &v in &ids[..n] {
                    s = s.wrapping_mul(31).wrapping_add(v);
                }
            }
            s
        });
        best(&format!("{name} {kind} fast-lpm"), || {
            let mut s = 0u64;
            for c in keys.chunks(CHUNK) {
                let g = epoch::pin();
                for &k in c {
                    s = s
                        .wrapping_mul(31)
                        .wrapping_add(fast.lookup(k, &g).map_or(0, u64::from));
                }
            }
            s
        });
        let mut out = vec![None; CHUNK];
        best(&format!("{name} {kind} fast-lpm-batch"), || {
            let mut s = 0u64;
            for c in keys.chunks(CHUNK) {
                let g = epoch::pin();
                fast.lookup_batch(c, &mut out, &g);
                for a in &out[..c.len()] {
                    s = s.wrapping_mul(31).wrapping_add(a.map_or(0, u64::from));
                }
            }
            s
        });
        best(&format!("{name} {kind} fib"), || {
            let mut s = 0u64;
            for c in keys.chunks(CHUNK) {
                let g = epoch::pin();
                for &k in c {
                    let v = fib.lookup(&Flow::to(k), &g).map_or(0, |r| {
                        u64::from(r.plen) << 32 | u64::from(r.nexthops()[r.nh_sel].ifindex)
                    });
                    s = s.wrapping_mul(31).wrapping_add(v);
                }
            }
            s
        });
        let flows: Vec<Flow<K>> = keys.iter().map(|&k| Flow::to(k)).collect();
        best(&format!("{name} {kind} fib-batch"), || {
            let mut s = 0u64;
            for c in flows.chunks(CHUNK) {
                let g = epoch::pin();
                fib.lookup_batch(c, &g, |_, r| {
                    let v = r.map_or(0, |r| {
                        u64::from(r.plen) << 32 | u64::from(r.nexthops()[r.nh_sel].ifindex)
                    });
                    s = s.wrapping_mul(31).wrapping_add(v);
                });
            }
            s
        });
    }
}

/// `lpm_probe update`: `KEYS` (default 100,000) insert-plus-delete pairs of /24s absent from
/// bgp-full-v4, next to announced prefixes, on a `Fib` holding the full table (as the
/// `fib-lookup/update` benchmark does), timed as a whole; under callgrind, the inclusive cost
/// of `changes` divided by twice `KEYS` is the cost of one change.
fn update() {
    let t = routes::BGP_FULL_V4.load().unwrap();
    let mut seen = HashSet::new();
    let p: Vec<(u32, u8, u32)> = t
        .iter()
        .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .filter(|&(k, l, _)| seen.insert((k, l)))
        .collect();
    let mut rng = StdRng::seed_from_u64(24);
    let fresh: Vec<u32> = std::iter::from_fn(|| {
        let (k, _, _) = p[rng.random_range(0..p.len())];
        Some((k ^ (rng.random_range(0..4u32) << 8)) & 0xffff_ff00)
    })
    .filter(|&k| !seen.contains(&(k, 24)))
    .take(4096)
    .collect();
    let mut fib = FibWriter::new();
    let routes: Vec<Route<u32>> = p
        .iter()
        .map(|&(k, l, v)| Route::unicast(k, l, 254, vec![NextHop::new(None, 1 + v % 16)]))
        .collect();
    fib.insert_many(&routes).unwrap();
    let n = env_usize("KEYS", 100_000);
    let t = Instant::now();
    changes(&mut fib, &fresh, n);
    let per = t.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64;
    println!("v4 update: {per:.0} ns per change (insert or delete of a /24)");
}

#[inline(never)]
fn changes(fib: &mut FibWriter<u32>, fresh: &[u32], n: usize) {
    let hop = vec![NextHop::new(None, 3)];
    for i in 0..n {
        let route = Route::unicast(fresh[i % fresh.len()], 24, 254, hop.clone());
        fib.insert(&route, fib_trie::InsertFlags::ADD).unwrap();
        fib.delete(&fib_trie::RouteSelector::exact(&route)).unwrap();
    }
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    if which == "update" {
        return update();
    }
    xfwd_benches::dpdk::eal_init().unwrap();
    if which != "v6" {
        let t = routes::BGP_FULL_V4.load().unwrap();
        let mut seen = HashSet::new();
        let p: Vec<(u32, u8, u32)> = t
            .iter()
            .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
            .filter(|&(k, l, _)| seen.insert((k, l)))
            .collect();
        run(
            "v4",
            &p,
            |r| r.random(),
            |p, keys| {
                let mut fib = xfwd_benches::dpdk::RteFib::new(
                    p.len() + 1024,
                    xfwd_benches::dpdk::tbl8_groups(p.iter().map(|r| r.1)) + 1024,
                )
                .unwrap();
                let mut sorted = p.to_vec();
                sorted.sort_by_key(|&(k, l, _)| (l, k));
                for (k, l, v) in sorted {
                    fib.add(k, l, u64::from(v % 1000 + 1)).unwrap();
                }
                let keys = keys.to_vec();
                Box::new(move |at, out: &mut [u64]| fib.lookup_bulk(&keys[at..at + out.len()], out))
            },
        );
    }
    if which != "v4" {
        let t = routes::BGP_FULL_V6.load().unwrap();
        let mut seen = HashSet::new();
        let p: Vec<(u128, u8, u32)> = t
            .iter()
            .map(|r| (u128::from(r.prefix.addr), r.prefix.len, r.origin_asn))
            .filter(|&(k, l, _)| seen.insert((k, l)))
            .collect();
        run(
            "v6",
            &p,
            |r| (r.random::<u128>() >> 3) | (1 << 125),
            |p, keys| {
                let mut fib = xfwd_benches::dpdk::RteFib6::new(
                    p.len() + 1024,
                    xfwd_benches::dpdk::tbl8_groups(p.iter().map(|r| r.1)) + 1024,
                )
                .unwrap();
                let mut sorted = p.to_vec();
                sorted.sort_by_key(|&(k, l, _)| (l, k));
                for (k, l, v) in sorted {
                    fib.add(k, l, u64::from(v % 1000 + 1)).unwrap();
                }
                let keys = xfwd_benches::dpdk::v6_bytes(keys);
                Box::new(move |at, out: &mut [u64]| fib.lookup_bulk(&keys[at..at + out.len()], out))
            },
        );
    }
}
