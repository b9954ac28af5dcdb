//! The shape of the fast structure as lookups see it: for bgp-full-v4 and bgp-full-v6 (FIB-like
//! answers: next hop and prefix length), 8,192 destinations drawn as the dataplane bench draws
//! them (a random announced prefix other than the default, random host bits), histograms of
//! the dependent loads per lookup and of the distinct cache lines they touch, and the
//! structure's bytes.
//!
//! `cargo run --release -p xfwd-benches --example fast_shape`
use std::collections::{BTreeMap, HashSet};

use crossbeam_epoch as epoch;
use fib_trie::{FastLpmWriter, TrieKey, TrieWriter};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xfwd_benches::data::routes;

const FLOWS: usize = 8192;

fn shape<K: TrieKey + Send + Sync>(
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
    let mut fast = FastLpmWriter::new();
    fast.rebuild(&mut &*trie);
    let mut rng = StdRng::seed_from_u64(17);
    let guard = epoch::pin();
    let (mut loads, mut lines) = (BTreeMap::new(), BTreeMap::new());
    let mut all_lines = HashSet::new();
    for _ in 0..FLOWS {
        let (k, l) = loop {
            let e = p[rng.random_range(0..p.len())];
            if e.1 > 0 {
                break (e.0, e.1);
            }
        };
        let key = k | host(&mut rng, l);
        let path = fast.lookup_path(key, &guard);
        *loads.entry(path.len()).or_insert(0usize) += 1;
        let distinct: HashSet<usize> = path.iter().map(|a| a / 64).collect();
        *lines.entry(distinct.len()).or_insert(0usize) += 1;
        all_lines.extend(distinct);
    }
    let mean = |h: &BTreeMap<usize, usize>| {
        h.iter().map(|(k, v)| k * v).sum::<usize>() as f64 / FLOWS as f64
    };
    println!(
        "{name}: {} bytes, first level {} bits",
        fast.bytes(),
        fast.first_level_bits()
    );
    println!(
        "{name}: dependent loads per lookup {loads:?} (mean {:.2})",
        mean(&loads)
    );
    println!(
        "{name}: distinct lines per lookup {lines:?} (mean {:.2})",
        mean(&lines)
    );
    println!(
        "{name}: distinct lines over all {FLOWS} lookups: {} ({} KiB)",
        all_lines.len(),
        all_lines.len() * 64 / 1024
    );
    let rounds = env_usize("ROUNDS", 0);
    fib_trie::PIPE_G.store(env_usize("G", 2), std::sync::atomic::Ordering::Relaxed);
    fib_trie::PIPE_STAGES.store(env_usize("STAGES", 5), std::sync::atomic::Ordering::Relaxed);
    if rounds == 0 {
        return;
    }
    // A/B: the pipelined walk (B) against the plain one (A), alternating in this process;
    // `lookup_batch` over 64-key batches of a 4,096-key stream drawn from the destinations.
    let dests: Vec<K> = (0..FLOWS)
        .map(|_| {
            let e = loop {
                let e = p[rng.random_range(0..p.len())];
                if e.1 > 0 {
                    break e;
                }
            };
            e.0 | host(&mut rng, e.1)
        })
        .collect();
    let stream: Vec<K> = (0..4096)
        .map(|_| dests[rng.random_range(0..FLOWS)])
        .collect();
    let passes = env_usize("PASSES", 200);
    let mut out = [None; 64];
    let mut time = |pipelined: bool| {
        fib_trie::PIPELINE.store(pipelined, std::sync::atomic::Ordering::Relaxed);
        let t = cpu_ns();
        let mut sum = 0u64;
        for _ in 0..passes {
            let guard = epoch::pin();
            for chunk in stream.chunks(64) {
                fast.lookup_batch(chunk, &mut out, &guard);
                sum += out.iter().map(|o| u64::from(o.unwrap_or(0))).sum::<u64>();
            }
        }
        std::hint::black_box(sum);
        (cpu_ns() - t) as f64 / (passes * stream.len()) as f64
    };
    let mut ratios = Vec::new();
    if let Ok(only) = std::env::var("ONLY_WALK") {
        let ns = time(only == "b");
        println!("{name}: walk {only} {ns:.2} ns");
        return;
    }
    for _ in 0..rounds {
        let a = time(false);
        let b = time(true);
        println!("{name}: A {a:.2} ns  B {b:.2} ns  B/A {:.3}", b / a);
        ratios.push(b / a);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{name}: median B/A {:.3} over {rounds} rounds",
        ratios[rounds / 2]
    );
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let v4: Vec<(u32, u8, u32)> = routes::BGP_FULL_V4
        .load()
        .unwrap()
        .iter()
        .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    if std::env::var("ONLY6").is_err() {
        shape("bgp-full-v4", &v4, |rng, l| {
            rng.random::<u32>().checked_shr(u32::from(l)).unwrap_or(0)
        });
    }
    let v6: Vec<(u128, u8, u32)> = routes::BGP_FULL_V6
        .load()
        .unwrap()
        .iter()
        .map(|r| (u128::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    shape("bgp-full-v6", &v6, |rng, l| {
        rng.random::<u128>().checked_shr(u32::from(l)).unwrap_or(0)
    });
}

/// The thread's CPU time (time waiting for a CPU on a shared machine left out).
fn cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}
