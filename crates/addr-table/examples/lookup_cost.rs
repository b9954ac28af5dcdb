//! Load-independent cost of a lookup, for `valgrind --tool=callgrind`: builds a table of `n`
//! IPv4 addresses the way the benchmark does (consecutive from 198.18.0.0, 256 per interface,
//! then `finish_rehash`) and looks up every one of them (hits) or as many never-added
//! addresses (misses) in a shuffled order, inside one function per engine that the profiler
//! is told to count alone:
//!
//! ```sh
//! cargo build --release -p addr-table --example lookup_cost
//! valgrind --tool=callgrind --cache-sim=yes --toggle-collect='lookup_cost::lookups_*' \
//!     target/release/examples/lookup_cost addr-table hit 1000000
//! ```
//!
//! Instructions (`Ir`) and first-level data misses (`D1mr`) divided by the number of lookups it
//! prints (whole passes over the addresses, at least 100,000) are the per-lookup
//! instructions and cache lines touched (with a table far larger than the simulated caches,
//! every line a lookup touches outside the hot stack is a miss). `hashbrown` runs the same
//! queries against a `hashbrown::HashMap<u32, u32>` for comparison.
//!
//! With `LOOKUP_COST_REPS=R` in the environment (and not under callgrind), the lookups are
//! repeated `R` times after the counted run and the fastest and the median pass are printed in
//! nanoseconds per lookup: a quick wall-clock companion (as noisy as the machine is busy).
//!
//! `rhltable` runs them against an `RhlTable<u32, u32>` with `RhlTable::find` and a predicate,
//! the code path of `dev_find` with a value of the same size as `LocalAddr` (so the same
//! geometry: 6 slots of 8 bytes per line); it is built with `insert` directly, so it reaches 1,000,000
//! addresses under callgrind, where building an `AddrTable` (which also keeps each
//! interface's address list, copied on every change) takes too long.

use std::hint::black_box;
use std::net::Ipv4Addr;

use addr_table::{AddrTable, AddrWriter, IfAddr, NetnsId, RhlTable, RhlWriter};

#[path = "shared/shuffled.rs"]
mod shuffled;
use shuffled::shuffled;

#[inline(never)]
fn lookups_addr_table(table: &AddrTable, queries: &[Ipv4Addr]) -> u64 {
    let guard = crossbeam_epoch::pin();
    queries
        .iter()
        .map(|&q| u64::from(black_box(table.dev_find(q, None, &guard)).unwrap_or(0)))
        .sum()
}

#[inline(never)]
fn lookups_rhltable(table: &RhlTable<u32, u32>, queries: &[Ipv4Addr]) -> u64 {
    let guard = crossbeam_epoch::pin();
    queries
        .iter()
        .map(|&q| {
            let v = table.find(&q.to_bits(), &guard, |v| v >> 31 != 0);
            u64::from(black_box(v.map(|v| v & 0x7fff_ffff)).unwrap_or(0))
        })
        .sum()
}

#[inline(never)]
fn lookups_hashbrown(table: &hashbrown::HashMap<u32, u32>, queries: &[Ipv4Addr]) -> u64 {
    queries
        .iter()
        .map(|&q| u64::from(black_box(table.get(&q.to_bits()).copied()).unwrap_or(0)))
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: lookup_cost addr-table|rhltable|hashbrown hit|miss N";
    let (engine, mode, n) = match &args[1..] {
        [e, m, n] => (e.as_str(), m.as_str(), n.parse::<usize>().expect(usage)),
        _ => panic!("{usage}"),
    };
    let base = match mode {
        "hit" => 0xc612_0000u32,
        "miss" => 0x0a00_0000u32,
        _ => panic!("{usage}"),
    };
    let addrs: Vec<(Ipv4Addr, u32)> = (0..n)
        .map(|i| {
            (
                Ipv4Addr::from_bits(0xc612_0000 + i as u32),
                2 + (i / 256) as u32,
            )
        })
        .collect();
    // Whole passes over the addresses, at least 100,000 lookups (small tables are then warm, as
    // in the benchmark's steady state).
    let passes = 100_000usize.div_ceil(n);
    let queries: Vec<Ipv4Addr> = std::iter::repeat_n(shuffled(n), passes)
        .flatten()
        .map(|i| Ipv4Addr::from_bits(base + i as u32))
        .collect();
    let reps: usize = std::env::var("LOOKUP_COST_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    // Times `f` (one pass over the queries) `reps` times: fastest and median ns per lookup.
    let time = |f: &dyn Fn() -> u64| {
        if reps == 0 {
            return;
        }
        let mut ns: Vec<f64> = (0..reps)
            .map(|_| {
                let t = std::time::Instant::now();
                black_box(f());
                t.elapsed().as_nanos() as f64 / queries.len() as f64
            })
            .collect();
        ns.sort_by(f64::total_cmp);
        eprintln!(
            "{engine} {mode} {n}: {:.2} ns fastest, {:.2} ns median per lookup over {reps} passes",
            ns[0],
            ns[reps / 2]
        );
    };
    let sum = match engine {
        "addr-table" => {
            let mut table = AddrWriter::new(NetnsId(1));
            for &(a, ifindex) in &addrs {
                table
                    .add(IfAddr::new(a, 32, ifindex))
                    .expect("fresh address");
            }
            table.finish_rehash();
            let stats = table.family::<Ipv4Addr>().hash().stats();
            eprintln!("{stats:?}");
            let sum = lookups_addr_table(&table, &queries);
            time(&|| lookups_addr_table(&table, &queries));
            sum
        }
        "rhltable" => {
            let mut table: RhlWriter<u32, u32> = RhlWriter::new();
            for &(a, ifindex) in &addrs {
                // The ifindex and an "answers" bit, as `LocalAddr` holds them.
                table
                    .insert(a.to_bits(), ifindex | 1 << 31)
                    .expect("fresh address");
            }
            table.finish_rehash();
            eprintln!("{:?}", table.stats());
            let sum = lookups_rhltable(&table, &queries);
            time(&|| lookups_rhltable(&table, &queries));
            sum
        }
        "hashbrown" => {
            let table: hashbrown::HashMap<u32, u32> =
                addrs.iter().map(|&(a, i)| (a.to_bits(), i)).collect();
            let sum = lookups_hashbrown(&table, &queries);
            time(&|| lookups_hashbrown(&table, &queries));
            sum
        }
        _ => panic!("{usage}"),
    };
    let want: u64 = match mode {
        "hit" => passes as u64 * addrs.iter().map(|&(_, i)| u64::from(i)).sum::<u64>(),
        _ => 0,
    };
    assert_eq!(sum, want, "wrong answers");
    println!("{engine} {mode} {n}: {} lookups", queries.len());
}
