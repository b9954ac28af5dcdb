//! `FastLpm::lookup_batch` alone, as the dataplane's FIB stage calls it: bgp-full-v4 or
//! bgp-full-v6 (`FAMILY=v4|v6`, default v6) with FIB-like answers (next hop and prefix
//! length, as `fast_shape` builds it), 8,192 destinations drawn as the dataplane bench draws
//! them (a random announced prefix other than the default, random host bits), looked up in
//! batches of 64, `PASSES` times (default 20).
//!
//! For callgrind, count the lookups alone:
//! `valgrind --tool=callgrind --toggle-collect='*FastLpm*lookup_batch*' --cache-sim=yes
//! target/release/examples/fast_batch` (instructions and misses over 8,192 x `PASSES` keys).
//!
//! `AB=<rounds>`: an A/B in one process of the structure built without (A) and with (B) the
//! final direct nodes at /44 (`fib_trie::set_final_direct`; the same lookup code), `AB`
//! rounds of eight alternating blocks of `PASSES` passes each, the fastest block of each per
//! round, then the median ratio B / A of the rounds (a ratio, not absolute times, is what a
//! loaded machine still tells).
//!
//! `cargo build --release -p xfwd-benches --example fast_batch`
use std::time::Instant;

use crossbeam_epoch as epoch;
use fib_trie::{FastLpmWriter, TrieKey, TrieWriter};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xfwd_benches::data::routes;

const FLOWS: usize = 8192;
const BATCH: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn build<K: TrieKey + Send + Sync>(trie: &TrieWriter<K, u32>) -> FastLpmWriter<K> {
    let mut fast = FastLpmWriter::new();
    fast.rebuild(&mut &**trie);
    fast
}

fn passes<K: TrieKey + Send + Sync>(fast: &FastLpmWriter<K>, keys: &[K], n: usize) -> u64 {
    let guard = epoch::pin();
    let mut out = [None; BATCH];
    let mut sum = 0u64;
    for _ in 0..n {
        for chunk in keys.chunks(BATCH) {
            fast.lookup_batch(chunk, &mut out, &guard);
            sum += out[..chunk.len()]
                .iter()
                .map(|a| u64::from(a.unwrap_or(0)))
                .sum::<u64>();
        }
    }
    sum
}

fn run<K: TrieKey + Send + Sync>(
    name: &str,
    p: &[(K, u8, u32)],
    host: impl Fn(&mut StdRng, u8) -> K,
) {
    let mut trie = TrieWriter::new();
    trie.insert_many(
        p.iter()
            .map(|&(k, l, v)| (k, l, (v % 64) * 256 + u32::from(l))),
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(17);
    let keys: Vec<K> = (0..FLOWS)
        .map(|_| {
            let (k, l) = loop {
                let e = p[rng.random_range(0..p.len())];
                if e.1 > 0 {
                    break (e.0, e.1);
                }
            };
            k | host(&mut rng, l)
        })
        .collect();
    let n = env_usize("PASSES", 20);
    let rounds = env_usize("AB", 0);
    if rounds == 0 {
        let fast = build(&trie);
        println!(
            "{name}: {} bytes, checksum {}",
            fast.bytes(),
            passes(&fast, &keys, n)
        );
        return;
    }
    ab(name, &trie, &keys, n, rounds);
}

fn ab<K: TrieKey + Send + Sync>(
    name: &str,
    trie: &TrieWriter<K, u32>,
    keys: &[K],
    n: usize,
    rounds: usize,
) {
    // `AB_ORDER=ba` builds B first (where each lands in memory is part of what differs).
    let (a, b) = if std::env::var("AB_ORDER").as_deref() == Ok("ba") {
        let b = build(trie);
        fib_trie::set_final_direct(false);
        let a = build(trie);
        fib_trie::set_final_direct(true);
        (a, b)
    } else {
        fib_trie::set_final_direct(false);
        let a = build(trie);
        fib_trie::set_final_direct(true);
        (a, build(trie))
    };
    assert_eq!(passes(&a, keys, 1), passes(&b, keys, 1), "A and B disagree");
    println!("{name}: A {} bytes, B {} bytes", a.bytes(), b.bytes());
    let time = |f: &FastLpmWriter<K>| {
        let t = Instant::now();
        std::hint::black_box(passes(f, keys, n));
        t.elapsed().as_secs_f64() * 1e9 / (n * keys.len()) as f64
    };
    let mut ratios = Vec::new();
    for r in 0..rounds {
        // Each round: eight blocks of each, alternating (which goes first alternates by
        // round), and the fastest block of each: a block the scheduler cut into is dropped.
        let (mut ta, mut tb) = (f64::MAX, f64::MAX);
        for _ in 0..8 {
            if r % 2 == 0 {
                ta = ta.min(time(&a));
                tb = tb.min(time(&b));
            } else {
                tb = tb.min(time(&b));
                ta = ta.min(time(&a));
            }
        }
        println!(
            "{name}: round {r}: A {ta:.2} ns, B {tb:.2} ns, B/A {:.3}",
            tb / ta
        );
        ratios.push(tb / ta);
    }
    ratios.sort_by(f64::total_cmp);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{name}: median B/A {:.3} (min {:.3}, max {:.3}) over {rounds} rounds; loadavg {}",
        ratios[rounds / 2],
        ratios[0],
        ratios[rounds - 1],
        load.trim()
    );
}

fn main() {
    if std::env::var("FAMILY").as_deref() == Ok("v4") {
        let v4: Vec<(u32, u8, u32)> = routes::BGP_FULL_V4
            .load()
            .unwrap()
            .iter()
            .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
            .collect();
        return run("bgp-full-v4", &v4, |rng, l| {
            rng.random::<u32>().checked_shr(u32::from(l)).unwrap_or(0)
        });
    }
    let v6: Vec<(u128, u8, u32)> = routes::BGP_FULL_V6
        .load()
        .unwrap()
        .iter()
        .map(|r| (u128::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    run("bgp-full-v6", &v6, |rng, l| {
        rng.random::<u128>().checked_shr(u32::from(l)).unwrap_or(0)
    });
}
