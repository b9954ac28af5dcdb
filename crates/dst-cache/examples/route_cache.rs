//! How a dataplane embeds `dst-cache`: one cache per run loop (per NIC queue) in front of the
//! full route lookup, a [`Generation`] shared with the control plane, one snapshot per batch.
//!
//! The "full lookup" here is a small longest-prefix match over a `Vec` standing in for a FIB
//! (xfwd uses `fib-trie` and the neighbour table). Between batches the control plane moves a
//! prefix to another interface and bumps the generation; every answer, cached or not, is
//! checked against the full lookup, so a stale hit fails the example.
//!
//! ```sh
//! cargo run -p dst-cache --example route_cache
//! ```

use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use dst_cache::{Config, Decision, DstCache, FlowKey, Generation, Lookup};

/// Frames per batch.
const BATCH: usize = 64;
/// Batches the run loop processes.
const BATCHES: usize = 2_000;
/// Distinct destinations the traffic cycles through.
const FLOWS: u32 = 300;
/// How long a cached decision may live, in nanoseconds (the run loop's clock).
const LIFETIME_NS: u64 = 1_000_000_000;

/// A route of the stand-in FIB: prefix, length, egress interface.
type Route = (u32, u8, u32);

fn full_lookup(fib: &RwLock<Vec<Route>>, dst: Ipv4Addr) -> Option<Decision> {
    let dst = u32::from(dst);
    let fib = fib.read().expect("FIB lock poisoned");
    let (_, _, oif) = fib
        .iter()
        .filter(|(prefix, plen, _)| {
            dst & u32::MAX.checked_shl(32 - u32::from(*plen)).unwrap_or(0) == *prefix
        })
        .max_by_key(|(_, plen, _)| *plen)?;
    let dst_mac = [2, 0, 0, 0, 0, *oif as u8];
    Some(Decision::unicast(
        *oif,
        None,
        [2, 0, 0, 0, 1, 0],
        dst_mac,
        1500,
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let net = |a, b, c| u32::from(Ipv4Addr::new(a, b, c, 0));
    let fib: Arc<RwLock<Vec<Route>>> = Arc::new(RwLock::new(vec![
        (0, 0, 1),
        (net(198, 51, 100), 24, 2),
        (net(203, 0, 113), 24, 3),
    ]));
    let generation = Arc::new(Generation::new()); // shared with the control plane
    let mut cache: DstCache<Decision> = DstCache::new(Config::default())?; // this queue's own

    let mut now = 0u64;
    let mut counter = 0u32;
    for batch in 0..BATCHES {
        if batch % 500 == 250 {
            // The control plane: publish the change, then bump (the order run loops rely on).
            let mut routes = fib.write().expect("FIB lock poisoned");
            let moved = routes
                .iter_mut()
                .find(|r| r.0 == net(198, 51, 100))
                .expect("route");
            moved.2 = if moved.2 == 2 { 4 } else { 2 };
            drop(routes);
            generation.bump();
        }
        let snapshot = generation.snapshot(); // once per batch
        for _ in 0..BATCH {
            counter = (counter + 7) % FLOWS;
            let dst = if counter % 2 == 0 {
                Ipv4Addr::new(198, 51, 100, counter as u8)
            } else {
                Ipv4Addr::new(192, 0, 2, counter as u8)
            };
            let key = FlowKey::v4(dst, 0, 1);
            let decision = match cache.lookup(&key, snapshot, now) {
                Lookup::Hit(decision) => decision,
                Lookup::Miss(token) => {
                    let decision = full_lookup(&fib, dst).ok_or("no route")?;
                    cache.insert(token, decision, now, now + LIFETIME_NS);
                    decision
                }
                Lookup::Bypass => full_lookup(&fib, dst).ok_or("no route")?,
            };
            let truth = full_lookup(&fib, dst).ok_or("no route")?;
            if decision != truth {
                return Err(format!("{dst}: cached {decision:?}, FIB says {truth:?}").into());
            }
        }
        now += 50_000; // 50 µs per batch
    }
    let c = cache.counters();
    let total = c.hits + c.misses + c.bypassed + c.disabled;
    println!(
        "{} lookups: {} hits ({:.1}%), {} misses, {} stale entries cleared after route changes",
        total,
        c.hits,
        100.0 * c.hits as f64 / total as f64,
        c.misses,
        c.stale
    );
    assert!(
        c.stale > 0,
        "the route changes must have made entries stale"
    );
    Ok(())
}
