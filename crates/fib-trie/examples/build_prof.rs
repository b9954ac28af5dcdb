//! Profiling aid for the build and lookup paths (run it under `valgrind --tool=callgrind` for
//! repeatable instruction counts, or plainly for wall-clock times).
//!
//! `cargo run --release -p fib-trie --example build_prof [TABLE [MODE]]`:
//! - without arguments, builds a synthetic 300k-prefix IPv4 table;
//! - `TABLE` is a decompressed route file of `benches/data` (lines `a.b.c.d/len asn`, e.g.
//!   `xz -dc benches/data/bgp-full-v4.txt.xz > /tmp/v4.txt`);
//! - with `ONE_BY_ONE` set in the environment, the table is built by `insert` per prefix,
//!   otherwise by one `insert_many` (the bulk build);
//! - `MODE` is `build` (default), `uniform` or `announced`: after the build, 1M lookups of
//!   uniform random keys or of keys inside announced prefixes, and `update`: 100k insert+delete
//!   pairs of /24s on the full table.
use std::time::Instant;

use fib_trie::{LcTrie, TrieKey, TrieWriter};

fn xorshift(x: &mut u32) -> u32 {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    *x
}

fn parse(path: &str) -> Vec<(u32, u8, u32)> {
    let text = std::fs::read_to_string(path).expect("readable table");
    text.lines()
        .filter_map(|line| {
            let (net, asn) = line.split_once(' ')?;
            let (addr, len) = net.split_once('/')?;
            let addr: std::net::Ipv4Addr = addr.parse().ok()?;
            Some((u32::from(addr), len.parse().ok()?, asn.trim().parse().ok()?))
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let prefixes: Vec<(u32, u8, u32)> = match args.get(1) {
        Some(path) => parse(path),
        None => {
            let mut x = 12345;
            (0..300_000u32)
                .map(|i| {
                    let x = xorshift(&mut x);
                    let plen = 16 + (x % 9) as u8;
                    (x & u32::prefix_mask(plen), plen, i)
                })
                .collect()
        }
    };
    let mut t = TrieWriter::<u32, u32>::new();
    let start = Instant::now();
    if std::env::var_os("ONE_BY_ONE").is_some() {
        for &(k, l, v) in &prefixes {
            t.insert(k, l, v).expect("canonical prefix");
        }
    } else {
        t.insert_many(prefixes.iter().copied())
            .expect("canonical prefixes");
    }
    eprintln!("built {} prefixes in {:?}", prefixes.len(), start.elapsed());
    let guard = &crossbeam_epoch::pin();
    let s = t.stats(guard);
    eprintln!(
        "{} bytes ({:.1} MiB)\n{s}",
        s.bytes,
        s.bytes as f64 / 1048576.0
    );

    let mode = args.get(2).map_or("build", String::as_str);
    let mut x = 777;
    let keys: Vec<u32> = match mode {
        "uniform" => (0..1_000_000).map(|_| xorshift(&mut x)).collect(),
        "announced" => (0..1_000_000)
            .map(|_| {
                let (k, l, _) = prefixes[xorshift(&mut x) as usize % prefixes.len()];
                k | (xorshift(&mut x) & !u32::prefix_mask(l))
            })
            .collect(),
        "update" => {
            let fresh: Vec<u32> = std::iter::repeat_with(|| xorshift(&mut x) & 0xffff_ff00)
                .filter(|k| t.get(*k, guard).is_none())
                .take(1024)
                .collect();
            let start = Instant::now();
            for i in 0..100_000 {
                let k = fresh[i % fresh.len()];
                t.insert(k, 24, 1).expect("valid");
                t.remove(k, 24).expect("valid");
            }
            eprintln!("100k insert+delete in {:?}", start.elapsed());
            return;
        }
        _ => return,
    };
    let start = Instant::now();
    let sum = single_lookups(&t, &keys, guard);
    let single = start.elapsed();
    let start = Instant::now();
    let bsum = batched_lookups(&t, &keys, guard);
    let batched = start.elapsed();
    assert_eq!(sum, bsum);
    eprintln!(
        "{mode}: {:.1} ns/lookup single, {:.1} ns batched (checksum {sum:x})",
        single.as_nanos() as f64 / keys.len() as f64,
        batched.as_nanos() as f64 / keys.len() as f64
    );
}

/// The single lookups, out of line so `callgrind --toggle-collect=*single_lookups*` finds them.
#[inline(never)]
fn single_lookups(t: &LcTrie<u32, u32>, keys: &[u32], guard: &crossbeam_epoch::Guard) -> u64 {
    let mut sum = 0u64;
    for &k in keys {
        let m = t.lookup(k, guard, |_| true);
        sum = sum
            .wrapping_mul(31)
            .wrapping_add(m.map_or(0, |m| (u64::from(*m.value) << 8) | u64::from(m.plen)));
    }
    sum
}

/// The batched lookups (`--toggle-collect=*batched_lookups*`).
#[inline(never)]
fn batched_lookups(t: &LcTrie<u32, u32>, keys: &[u32], guard: &crossbeam_epoch::Guard) -> u64 {
    let mut out = [None; fib_trie::BATCH];
    let mut sum = 0u64;
    for chunk in keys.chunks(fib_trie::BATCH) {
        t.lookup_batch(chunk, &mut out, guard, |_| true);
        for m in &out[..chunk.len()] {
            sum = sum
                .wrapping_mul(31)
                .wrapping_add(m.map_or(0, |m| (u64::from(*m.value) << 8) | u64::from(m.plen)));
        }
    }
    sum
}
