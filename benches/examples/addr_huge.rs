//! The addr-table benchmark's largest hit case (issue 23: `addr-table` within 1.5× of
//! hashbrown), one process per sample, with where each table's memory sits.
//!
//! Builds the benchmark's tables for `N` addresses (default 1,000,000: `N` consecutive /32s
//! from 198.18.0.0, 256 per interface, added one by one, then `finish_rehash`; hashbrown
//! collected from the same pairs), prints the placement of `addr-table`'s bucket lines and
//! tags and of hashbrown's slots (share on transparent huge pages, 2 MiB physical frames,
//! `AnonHugePages` of their mappings: `xfwd_benches::thp`; frame numbers need root), then
//! times both engines interleaved: `ROUNDS` rounds, each one pass of 1,024,000 lookups per
//! engine in the benchmark's shuffled order (its `lookup_loop!`: 1024 lookups a batch,
//! `black_box` of each answer), the two engines' order alternating from round to round.
//! Prints each engine's fastest and median round (ns per lookup) and `addr-table`'s over
//! hashbrown's: of the medians, of the minima, and the median of the rounds' own ratios (the
//! two passes of a round are a few ms apart, so that ratio sees the same memory traffic from
//! the rest of the machine).
//!
//! ```sh
//! cargo build --release -p xfwd-benches --example addr_huge
//! target/release/examples/addr_huge [N] [ROUNDS] [miss] [nothp] [copies=K] [verbose]
//! ```
//!
//! `copies=K` builds `K` pairs of tables (each copy's memory elsewhere) and times them all in
//! every round, one line per pair: whether the same table runs slower in some memory than in
//! other within one process. `verbose` adds each array's placement in full.
//! `miss` queries `N` addresses that were never added; `nothp` disables transparent huge
//! pages for the process (`PR_SET_THP_DISABLE`) before anything is built: the placement the
//! table gets where the kernel has no huge page to give. One line of results per run, so
//! runs can be collected with a shell loop (a new process, new allocations, each time).

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use addr_table::{AddrTable, AddrWriter, IfAddr, NetnsId};
use xfwd_benches::order::shuffled;
use xfwd_benches::thp;

const BATCH: usize = 1024;
/// Batches per timed pass: 1,024,000 lookups.
const ITERS: usize = 1000;

/// The benchmark's timed routine, `ITERS` times, continuing at `pos`.
macro_rules! pass {
    ($name:ident, |$q:ident, $t:ident: $ty:ty, $g:ident| $lookup:expr) => {
        #[inline(never)]
        fn $name($t: &$ty, queries: &[Ipv4Addr], pos: &mut usize) -> u64 {
            let $g = crossbeam_epoch::pin();
            let _ = &$g;
            let mut total = 0u64;
            for _ in 0..ITERS {
                let mut sum = 0u64;
                for _ in 0..BATCH {
                    let $q = queries[*pos];
                    *pos += 1;
                    if *pos == queries.len() {
                        *pos = 0;
                    }
                    sum += u64::from(black_box($lookup).unwrap_or(0));
                }
                total = total.wrapping_add(black_box(sum));
            }
            total
        }
    };
}

pass!(ours, |q, t: AddrTable, g| t.dev_find(q, None, &g));
pass!(theirs, |q, t: hashbrown::HashMap<u32, u32>, g| t
    .get(&q.to_bits())
    .copied());

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().next().unwrap_or("?").to_owned())
        .unwrap_or_else(|_| "?".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let mut numbers = args.iter().filter_map(|a| a.parse::<usize>().ok());
    let n = numbers.next().unwrap_or(1_000_000);
    let rounds = numbers.next().unwrap_or(30).max(1);
    let (miss, nothp) = (flag("miss"), flag("nothp"));
    if nothp {
        nix::sys::prctl::set_thp_disable(true).expect("PR_SET_THP_DISABLE");
    }
    let load_start = loadavg();

    let copies = args
        .iter()
        .find_map(|a| a.strip_prefix("copies=")?.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let build = || {
        let mut writer = AddrWriter::new(NetnsId(1));
        for i in 0..n {
            let a = Ipv4Addr::from_bits(0xc612_0000 + i as u32);
            writer
                .add(IfAddr::new(a, 32, 2 + (i / 256) as u32))
                .expect("fresh address");
        }
        writer.finish_rehash();
        let table = std::sync::Arc::clone(writer.reader());
        let hb: hashbrown::HashMap<u32, u32> = (0..n)
            .map(|i| (0xc612_0000 + i as u32, 2 + (i / 256) as u32))
            .collect();
        (writer, table, hb)
    };
    let built: Vec<_> = (0..copies).map(|_| build()).collect();
    let base = if miss { 0x0a00_0000u32 } else { 0xc612_0000 };
    let queries: Vec<Ipv4Addr> = shuffled(n)
        .into_iter()
        .map(|i| Ipv4Addr::from_bits(base + i as u32))
        .collect();

    // Where the memory sits.
    let placements: Vec<[thp::Placement; 3]> = built
        .iter()
        .map(|(_, table, hb)| {
            let [lines, tags] = table.family::<Ipv4Addr>().hash().bucket_arrays();
            let (lo, hi) = hb.iter().fold((usize::MAX, 0), |(lo, hi), (k, _)| {
                let a = std::ptr::from_ref(k) as usize;
                (lo.min(a), hi.max(a + 8))
            });
            [
                thp::placement(lines),
                thp::placement(tags),
                thp::placement(lo..hi),
            ]
        })
        .collect();
    let share = |p: &thp::Placement| {
        p.huge_share()
            .map_or_else(|| "?".into(), |s| format!("{:.0}%", 100.0 * s))
    };

    // Per copy: addr-table's and hashbrown's times and their ratio, per round.
    let mut times = vec![(Vec::new(), Vec::new(), Vec::new()); copies];
    let mut pos = vec![(0, 0); copies];
    let per = |t: Instant| t.elapsed().as_nanos() as f64 / (ITERS * BATCH) as f64;
    for round in 0..rounds {
        for (j, (_, table, hb)) in built.iter().enumerate() {
            let (pa, ph) = &mut pos[j];
            let (ta, th);
            if round % 2 == 0 {
                let t = Instant::now();
                black_box(ours(table, &queries, pa));
                ta = per(t);
                let t = Instant::now();
                black_box(theirs(hb, &queries, ph));
                th = per(t);
            } else {
                let t = Instant::now();
                black_box(theirs(hb, &queries, ph));
                th = per(t);
                let t = Instant::now();
                black_box(ours(table, &queries, pa));
                ta = per(t);
            }
            let (a, h, r) = &mut times[j];
            a.push(ta);
            h.push(th);
            r.push(ta / th);
        }
    }
    let load_end = loadavg();
    for ((a, h, r), [p_lines, p_tags, p_hb]) in times.iter_mut().zip(&placements) {
        let (amin, hmin) = (
            a.iter().copied().fold(f64::INFINITY, f64::min),
            h.iter().copied().fold(f64::INFINITY, f64::min),
        );
        let (amed, hmed, rmed) = (median(a), median(h), median(r));
        println!(
            "{} {n}{}: addr-table min {amin:.2} med {amed:.2} | hashbrown min {hmin:.2} med {hmed:.2} | ratio med {:.2} min {:.2} rounds {rmed:.2} | huge: lines {} tags {} hashbrown {} | load {load_start}-{load_end}",
            if miss { "miss" } else { "hit" },
            if nothp { " nothp" } else { "" },
            amed / hmed,
            amin / hmin,
            share(p_lines),
            share(p_tags),
            share(p_hb),
        );
    }
    if flag("verbose") {
        for [p_lines, p_tags, p_hb] in &placements {
            println!("  lines: {}", p_lines.describe());
            println!("  tags: {}", p_tags.describe());
            println!("  hashbrown slots: {}", p_hb.describe());
        }
        println!(
            "  process AnonHugePages: {:?} MiB",
            thp::anon_huge_total().map(|b| b >> 20)
        );
    }
}
