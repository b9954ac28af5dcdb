//! How a dataplane embeds `fib-trie`: one control thread changes routes while run loops look
//! destinations up in batches, each batch under one epoch pin (as the kernel holds
//! `rcu_read_lock` across a NAPI poll).
//!
//! The control thread flaps a /24 inside a covering /16; every answer the run loops see must be
//! one of the two routes' next hops (never "no route": the /16 is always there), and once the
//! control thread is done the /24 is gone and the /16 answers.
//!
//! ```sh
//! cargo run -p fib-trie --example concurrent_lookups
//! ```

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route, RouteSelector, crossbeam_epoch};

/// Frames per batch, as a run loop receives them.
const BATCH: usize = 64;
/// Route changes the control thread makes.
const FLAPS: usize = 2_000;

fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from(Ipv4Addr::new(a, b, c, d))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut fib = FibWriter::<u32>::new();
    let (gw_wide, gw_narrow) = (v4(192, 0, 2, 1), v4(192, 0, 2, 2));
    let wide = Route::unicast(
        v4(10, 1, 0, 0),
        16,
        254,
        vec![NextHop::new(Some(gw_wide), 2)],
    );
    let narrow = Route::unicast(
        v4(10, 1, 7, 0),
        24,
        254,
        vec![NextHop::new(Some(gw_narrow), 3)],
    );
    fib.insert(&wide, InsertFlags::ADD)?;

    let done = Arc::new(AtomicBool::new(false));
    let run_loops: Vec<_> = (0..2u32)
        .map(|queue| {
            let (fib, done) = (Arc::clone(fib.reader()), Arc::clone(&done));
            std::thread::spawn(move || -> Result<[u64; 2], String> {
                let mut seen = [0u64; 2];
                let mut next = queue;
                while !done.load(Ordering::Acquire) {
                    // One pin per batch; every answer borrows from it.
                    let guard = crossbeam_epoch::pin();
                    for _ in 0..BATCH {
                        next = next.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        let dst = v4(10, 1, 6 + (next >> 16) as u8 % 3, next as u8);
                        let hop = fib
                            .lookup(&Flow::to(dst), &guard)
                            .map_err(|e| format!("{}: {e:?}", Ipv4Addr::from(dst)))?;
                        match hop.alias.info.nexthops[hop.nh_sel]
                            .gateway
                            .and_then(fib_trie::Gateway::same)
                        {
                            Some(gw) if gw == gw_wide => seen[0] += 1,
                            Some(gw) if gw == gw_narrow && hop.plen == 24 => seen[1] += 1,
                            other => return Err(format!("{}: via {other:?}", Ipv4Addr::from(dst))),
                        }
                    }
                }
                Ok(seen)
            })
        })
        .collect();

    // The control thread (the netlink mirror, in xfwd): writers are serialised, readers never
    // wait for them.
    for _ in 0..FLAPS {
        fib.insert(&narrow, InsertFlags::ADD)?;
        fib.delete(&RouteSelector::new(narrow.prefix, narrow.plen, 254))?;
    }
    done.store(true, Ordering::Release);
    for (queue, run_loop) in run_loops.into_iter().enumerate() {
        let [wide_hits, narrow_hits] = run_loop.join().expect("run loop panicked")?;
        println!("queue {queue}: {wide_hits} lookups via the /16, {narrow_hits} via the /24");
    }

    let guard = crossbeam_epoch::pin();
    let hop = fib
        .lookup(&Flow::to(v4(10, 1, 7, 9)), &guard)
        .map_err(|e| format!("{e:?}"))?;
    assert_eq!((hop.prefix, hop.plen), (v4(10, 1, 0, 0), 16));
    println!("after {FLAPS} flaps of 10.1.7.0/24: 10.1.7.9 goes via the /16, as it must");
    Ok(())
}
