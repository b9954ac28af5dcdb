//! Times route updates on a large `Fib` (a profiling aid): 800k random /24s through 16 next
//! hops loaded at once, then insert-and-delete pairs of absent /24s.
use std::time::Instant;

use fib_trie::{FibWriter, InsertFlags, NextHop, Route, RouteSelector};

fn main() {
    let mut x = 0x1234_5678_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let routes: Vec<Route<u32>> = (0..800_000)
        .map(|i| {
            let k = (next() as u32) & 0xffff_ff00;
            Route::unicast(k, 24, 254, vec![NextHop::new(None, 1 + i % 16)])
        })
        .collect();
    let mut fib = FibWriter::<u32>::new();
    let t = Instant::now();
    fib.insert_many(&routes).unwrap();
    println!("load: {:?}", t.elapsed());
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        let k = (next() as u32) & 0xffff_ff00;
        let r = Route::unicast(k, 24, 254, vec![NextHop::new(None, 3)]);
        if fib.insert(&r, InsertFlags::ADD).is_ok() {
            fib.delete(&RouteSelector::exact(&r)).unwrap();
        }
    }
    println!("insert+delete: {:?} per pair", t.elapsed() / n);
}
