//! `FastLpm::lookup_batch_raw` alone, as the dataplane's FIB stage calls it: bgp-full-v4 or
//! bgp-full-v6 (`FAMILY=v4|v6`, default v6) with FIB-like answers (next hop and prefix
//! length, as `fast_shape` builds it), 8,192 destinations drawn as the dataplane bench draws
//! them (a random announced prefix other than the default, random host bits), looked up in
//! batches of 64, `PASSES` times (default 20).
//!
//! For callgrind, count the lookups alone:
//! `valgrind --tool=callgrind --toggle-collect='*FastLpm*lookup_batch*' --cache-sim=yes
//! target/release/examples/fast_batch` (instructions and misses over 8,192 x `PASSES` keys).
//!
//! `TIME=<rounds>`: times the lookups instead: per round, the fastest of eight blocks of
//! `PASSES` passes (a block the scheduler cut into is dropped), in ns per lookup, then the
//! median of the rounds. On a shared machine compare two builds by ratio, alternating
//! their runs (an A/B of two structures in one process needs a switch in the build, as
//! branch v6chain's history has).
//!
//! `cargo build --release -p xfwd-benches --example fast_batch`
use std::time::Instant;

use crossbeam_epoch as epoch;
use fib_trie::{FastLpmWriter, TrieKey};

#[path = "shared/fast_table.rs"]
mod fast_table;
use fast_table::Table;

const BATCH: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn passes<K: TrieKey + Send + Sync>(fast: &FastLpmWriter<K>, keys: &[K], n: usize) -> u64 {
    let guard = epoch::pin();
    let mut out = [u32::MAX; BATCH];
    let mut sum = 0u64;
    for _ in 0..n {
        for chunk in keys.chunks(BATCH) {
            fast.lookup_batch_raw(chunk, &mut out, &guard);
            sum += out[..chunk.len()]
                .iter()
                .map(|&a| if a == u32::MAX { 0 } else { u64::from(a) })
                .sum::<u64>();
        }
    }
    sum
}

fn run<K: TrieKey + Send + Sync>(name: &str, table: &Table<K>) {
    let trie = table.trie();
    let keys = table.destinations();
    let n = env_usize("PASSES", 20);
    let fast = Table::fast(&trie);
    let rounds = env_usize("TIME", 0);
    if rounds == 0 {
        println!(
            "{name}: {} bytes, checksum {}",
            fast.bytes(),
            passes(&fast, &keys, n)
        );
        return;
    }
    let time = || {
        let t = Instant::now();
        std::hint::black_box(passes(&fast, &keys, n));
        t.elapsed().as_secs_f64() * 1e9 / (n * keys.len()) as f64
    };
    let mut rounds: Vec<f64> = (0..rounds)
        .map(|_| (0..8).map(|_| time()).fold(f64::MAX, f64::min))
        .collect();
    rounds.sort_by(f64::total_cmp);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{name}: {} bytes, median {:.2} ns per lookup (min {:.2}, max {:.2}) over {} rounds; \
         loadavg {}",
        fast.bytes(),
        rounds[rounds.len() / 2],
        rounds[0],
        rounds[rounds.len() - 1],
        rounds.len(),
        load.trim()
    );
}

fn main() {
    if std::env::var("FAMILY").as_deref() == Ok("v4") {
        let (name, table) = fast_table::v4();
        return run(name, &table);
    }
    let (name, table) = fast_table::v6();
    run(name, &table);
}
