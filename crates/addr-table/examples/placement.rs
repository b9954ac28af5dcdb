//! Code placement sensitivity of the hit path: the benchmark's timed loop (`lookup_loop!` in
//! `benches/benches/addr-table.rs`: 1024 lookups a batch, a position carried across batches,
//! `black_box` of each answer) compiled 16 times for `addr-table` (`dev_find`) and 16 times
//! for hashbrown, each copy shifted by `K` = 0, 4, ..., 60 bytes of `nop` at the function's
//! start, so that the same loop lands at 16 places (offsets within the 64-byte lines and
//! within the page). Build with functions aligned to 64 bytes, so that `K` is the shift (a
//! flag for this example's build only, never for the benchmark):
//!
//! ```sh
//! RUSTFLAGS='-C target-cpu=x86-64-v2 -C llvm-args=-align-all-functions=6' \
//!     cargo build --release -p addr-table --example placement --target-dir target/placement
//! taskset -c 1 target/placement/release/examples/placement both 10000 40 [miss]
//! ```
//!
//! Each of `ROUNDS` rounds times every copy of both engines once (1,024,000 lookups, about
//! 3 ms each); the fastest round of each copy is kept, which stays steady on a loaded machine
//! where means do not. It prints those times in ns per lookup, `addr-table`'s over the median
//! of hashbrown's copies, and the largest of those ratios over the smallest (1.0: the loop's
//! speed does not depend on where it lands). Branch addrplace's notes in
//! `benches/benches/addr-table.md` give its findings.

use std::hint::black_box;
use std::net::Ipv4Addr;

use addr_table::{AddrTable, AddrWriter, IfAddr, NetnsId};

const BATCH: usize = 1024;
const SHIFTS: usize = 16;

#[path = "shared/shuffled.rs"]
mod shuffled;
use shuffled::shuffled;

/// Criterion's `Bencher::iter` in short: the routine inlined into a loop of `iters` calls.
macro_rules! timed {
    ($name:ident, $k:expr, |$q:ident, $t:ident: $ty:ty, $g:ident| $lookup:expr) => {
        #[inline(never)]
        fn $name($t: &$ty, queries: &[Ipv4Addr], pos: &mut usize, iters: usize) -> u64 {
            // SAFETY: `$k` bytes of `nop`, nothing else (shifts the code below).
            unsafe { std::arch::asm!(concat!(".skip ", $k, ", 0x90"), options(nomem, nostack)) };
            let $g = crossbeam_epoch::pin();
            let _ = &$g;
            let mut total = 0u64;
            let mut routine = || {
                let mut sum = 0u64;
                for _ in 0..BATCH {
                    let $q = queries[*pos];
                    *pos += 1;
                    if *pos == queries.len() {
                        *pos = 0;
                    }
                    sum += u64::from(black_box($lookup).unwrap_or(0));
                }
                sum
            };
            for _ in 0..iters {
                total = total.wrapping_add(black_box(routine()));
            }
            total
        }
    };
}

macro_rules! shifts {
    ($($name:ident $hb:ident $k:literal),*) => {
        $(
            timed!($name, $k, |q, t: AddrTable, g| t.dev_find(q, None, &g));
            timed!($hb, $k, |q, t: hashbrown::HashMap<u32, u32>, g| t.get(&q.to_bits()).copied());
        )*
        const ADDR: &[(usize, fn(&AddrTable, &[Ipv4Addr], &mut usize, usize) -> u64)] =
            &[$(($k, $name)),*];
        const HB: &[(usize, fn(&hashbrown::HashMap<u32, u32>, &[Ipv4Addr], &mut usize, usize) -> u64)] =
            &[$(($k, $hb)),*];
    };
}

shifts!(a0 h0 0, a4 h4 4, a8 h8 8, a12 h12 12, a16 h16 16, a20 h20 20, a24 h24 24, a28 h28 28,
    a32 h32 32, a36 h36 36, a40 h40 40, a44 h44 44, a48 h48 48, a52 h52 52, a56 h56 56, a60 h60 60);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: placement both N ROUNDS [miss]";
    let (engine, n, rounds) = match &args[1..] {
        [e, n, r, ..] => (
            e.as_str(),
            n.parse::<usize>().expect(usage),
            r.parse::<usize>().expect(usage),
        ),
        _ => panic!("{usage}"),
    };
    let miss = args.get(4).is_some_and(|m| m == "miss");
    let base = if miss { 0x0a00_0000u32 } else { 0xc612_0000 };
    let queries: Vec<Ipv4Addr> = shuffled(n)
        .into_iter()
        .map(|i| Ipv4Addr::from_bits(base + i as u32))
        .collect();
    let mut table = AddrWriter::new(NetnsId(1));
    for i in 0..n {
        let a = Ipv4Addr::from_bits(0xc612_0000 + i as u32);
        table
            .add(IfAddr::new(a, 32, 2 + (i / 256) as u32))
            .expect("fresh address");
    }
    table.finish_rehash();
    let hb: hashbrown::HashMap<u32, u32> = (0..n)
        .map(|i| (0xc612_0000 + i as u32, 2 + (i / 256) as u32))
        .collect();
    // About 3 ms a measurement; every round times every shift of both engines.
    let iters = 1_000;
    let mut best = [[f64::INFINITY; SHIFTS]; 2];
    let mut pos = 0;
    for _ in 0..rounds {
        for j in 0..SHIFTS {
            for (e, best) in best.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                let s = if e == 0 {
                    (ADDR[j].1)(&table, &queries, &mut pos, iters)
                } else {
                    (HB[j].1)(&hb, &queries, &mut pos, iters)
                };
                black_box(s);
                let ns = t.elapsed().as_nanos() as f64 / (iters * BATCH) as f64;
                best[j] = best[j].min(ns);
            }
        }
    }
    // hashbrown's placements' median, the reference of every ratio.
    let mut hbs = best[1];
    hbs.sort_by(f64::total_cmp);
    let hb_mid = (hbs[SHIFTS / 2 - 1] + hbs[SHIFTS / 2]) / 2.0;
    let ratios: Vec<f64> = best[0].iter().map(|a| a / hb_mid).collect();
    println!(
        "{} {n}: addr-table {} | hashbrown {} | ratio {} | max/min {:.2}",
        if miss { "miss" } else { "hit" },
        best[0].map(|x| format!("{x:.2}")).join(" "),
        best[1].map(|x| format!("{x:.2}")).join(" "),
        ratios
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
        ratios.iter().copied().fold(0.0, f64::max)
            / ratios.iter().copied().fold(f64::INFINITY, f64::min),
    );
    let _ = engine;
}
