//! The route cache never changes an answer while the tables change between batches: two
//! queues, one with the cache and one without, see the same tables; between batches routes
//! (multipath ones among them) are added, replaced and deleted, neighbours change MAC or go,
//! a link goes down and up. After each batch both must have given every frame the same verdict
//! and bytes (so the cached queue never answers from a route or neighbour that is gone, and
//! never pins a multipath flow to another path than the full lookup picks).

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use dataplane::{Config, Frame, HeapPool, Queue, Verdict};
use etherparse::PacketBuilder;
use fib_trie::{InsertFlags, NextHop, Route, RouteSelector};
use neigh_table::{LinkFlags, Neighbour, NudState};
use proptest::prelude::*;

/// Gateways on OUT, and one on SMALL (another link, a smaller MTU).
const GWS: [(u32, [u8; 4]); 4] = [
    (OUT, [10, 0, 2, 210]),
    (OUT, [10, 0, 2, 211]),
    (OUT, [10, 0, 2, 212]),
    (SMALL, [10, 0, 4, 213]),
];

fn gw(i: usize) -> NextHop<u32> {
    let (oif, a) = GWS[i % GWS.len()];
    NextHop::new(Some(u32::from_be_bytes(a)), oif)
}

/// 100.80.k.0/24 (k < 4): the prefixes the traffic goes to.
fn prefix(k: u8) -> u32 {
    u32::from_be_bytes([100, 80, k, 0])
}

#[derive(Clone, Debug)]
enum Change {
    /// 100.80.k.0/24 through these gateways (several: multipath), replacing what was there.
    Route { k: u8, hops: Vec<usize> },
    /// 100.80.k.0/25 through one gateway (a more specific route over half the traffic).
    Specific { k: u8, hop: usize },
    /// Deletes 100.80.k.0/24 or /25.
    Delete { k: u8, specific: bool },
    /// A gateway's neighbour: a new MAC, or gone (frames are then held).
    Neigh { hop: usize, mac: Option<u8> },
    /// SMALL down or up.
    Link { up: bool },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0u8..4, proptest::collection::vec(0usize..4, 1..4))
            .prop_map(|(k, hops)| Change::Route { k, hops }),
        2 => (0u8..4, 0usize..4).prop_map(|(k, hop)| Change::Specific { k, hop }),
        2 => (0u8..4, any::<bool>()).prop_map(|(k, specific)| Change::Delete { k, specific }),
        2 => (0usize..4, proptest::option::of(any::<u8>()))
            .prop_map(|(hop, mac)| Change::Neigh { hop, mac }),
        1 => any::<bool>().prop_map(|up| Change::Link { up }),
    ]
}

fn apply(fx: &mut Fixture, change: &Change) {
    let fib = &mut fx.writers().fib4;
    match change {
        Change::Route { k, hops } => {
            let hops: Vec<_> = hops.iter().map(|&h| gw(h)).collect();
            let r = Route::unicast(prefix(*k), 24, 254, hops);
            fib.insert(&r, InsertFlags::REPLACE).unwrap();
        }
        Change::Specific { k, hop } => {
            let r = Route::unicast(prefix(*k), 25, 254, vec![gw(*hop)]);
            fib.insert(&r, InsertFlags::REPLACE).unwrap();
        }
        Change::Delete { k, specific } => {
            let plen = if *specific { 25 } else { 24 };
            let _ = fib.delete(&RouteSelector::new(prefix(*k), plen, 254));
        }
        Change::Neigh { hop, mac } => {
            let (oif, a) = GWS[*hop];
            let addr = IpAddr::V4(Ipv4Addr::from(a));
            match mac {
                Some(m) => {
                    fx.writers().neigh.upsert(Neighbour::new(
                        oif,
                        addr,
                        Some([2, 0, 0, 0, 1, *m]),
                        NudState::REACHABLE,
                    ));
                }
                None => {
                    fx.writers().neigh.remove(oif, addr);
                }
            }
        }
        Change::Link { up } => {
            let guard = crossbeam_epoch::pin();
            let mut link = fx.tables.links.get(SMALL, &guard).unwrap().clone();
            if *up {
                link.flags = link.flags | LinkFlags::UP | LinkFlags::RUNNING;
            } else {
                link.flags = LinkFlags::default();
            }
            fx.writers().links.upsert(link);
        }
    }
    // The mirror's rule: a bump after every published change.
    fx.tables.generation.bump();
}

/// A UDP frame from one of ten hosts of the ingress subnet to 100.80.k.x (multipath picks by
/// source and destination).
fn frame(host: u8, k: u8, x: u8, sport: u16, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, IN_MAC)
        .ipv4([10, 0, 1, 50 + host % 10], [100, 80, k % 4, x], 64)
        .udp(sport, 4789)
        .write(&mut out, &vec![0x5a; len])
        .unwrap();
    out
}

fn batch() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(
        (any::<u8>(), 0u8..4, any::<u8>(), any::<u16>(), 0usize..900)
            .prop_map(|(h, k, x, p, n)| frame(h, k, x, p, n)),
        1..24,
    )
}

/// Every frame's verdict and bytes, and what went out through the pool (held frames released).
type Answers = (Vec<(Verdict, Vec<u8>)>, Vec<(u32, Vec<u8>)>);

fn run(queue: &mut Queue, fx: &Fixture, frames: &[Vec<u8>], now: u64) -> Answers {
    let mut chunks: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut c = vec![0u8; 2048];
            c[256..256 + f.len()].copy_from_slice(f);
            c
        })
        .collect();
    let mut batch: Vec<Frame<'_>> = chunks
        .iter_mut()
        .zip(frames)
        .map(|(c, f)| Frame::new(c, 256, f.len(), IN))
        .collect();
    let mut pool = HeapPool::new(2048, 16);
    let guard = crossbeam_epoch::pin();
    queue.process_batch(&fx.tables, &guard, now, &mut batch, &mut pool);
    queue.release_held(&fx.tables, &guard, now, &mut pool);
    let sent = pool
        .sent
        .iter()
        .map(|s| (s.ifindex, s.bytes.clone()))
        .collect();
    let answers = batch
        .iter()
        .map(|f| (f.verdict, f.bytes().to_vec()))
        .collect();
    (answers, sent)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_route_cache_never_changes_an_answer_while_tables_change(
        steps in proptest::collection::vec((change(), batch()), 1..12),
        first in batch(),
    ) {
        // At least one frame the cache can answer on the second pass.
        let first: Vec<Vec<u8>> = std::iter::once(frame(0, 0, 1, 1, 10)).chain(first).collect();
        let mut fx = fixture();
        for i in 0..GWS.len() {
            apply(&mut fx, &Change::Neigh { hop: i, mac: Some(i as u8) });
        }
        // Two single-path prefixes (cached) and two multipath ones (never cached).
        for k in 0..4u8 {
            let hops = if k < 2 { vec![k as usize] } else { vec![k as usize, (k as usize + 1) % 4] };
            apply(&mut fx, &Change::Route { k, hops });
        }
        let mut on = Queue::new(Config::default()).unwrap();
        let mut off = Queue::new(Config { dst_cache: None, ..Config::default() }).unwrap();
        let fx_off = twin(&fx);
        let mut now = 0u64;
        // Each batch twice on the cached queue's side (the second mostly hits), and as often
        // on the other.
        let mut step = |fx: &Fixture, frames: &[Vec<u8>], now: u64| -> Result<(), TestCaseError> {
            for _ in 0..2 {
                let a = run(&mut on, fx, frames, now);
                let b = run(&mut off, &fx_off, frames, now);
                prop_assert_eq!(a, b);
            }
            Ok(())
        };
        step(&fx, &first, now)?;
        for (change, frames) in &steps {
            apply(&mut fx, change);
            now += 100_000_000;
            step(&fx, frames, now)?;
        }
        prop_assert!(on.counters().dst_cache.hits > 0, "the cache was used");
        prop_assert_eq!(off.counters().dst_cache.hits, 0);
    }
}

/// The adaptive bypass's cost rule (`dst_cache::cost`) sends a burst of vectors through the
/// tables alone every 512 vectors and may step the cache aside for its cost (on this machine's
/// timing of the samples): whichever way it stands, every answer equals the one without a
/// cache, across route and neighbour changes between vectors.
#[test]
fn the_cost_rule_never_changes_an_answer() {
    let mut fx = fixture();
    for i in 0..GWS.len() {
        apply(
            &mut fx,
            &Change::Neigh {
                hop: i,
                mac: Some(i as u8),
            },
        );
    }
    for k in 0..4u8 {
        let hops = if k < 3 { vec![k as usize] } else { vec![3, 0] };
        apply(&mut fx, &Change::Route { k, hops });
    }
    let changes = [
        Change::Route {
            k: 0,
            hops: vec![1],
        },
        Change::Neigh {
            hop: 1,
            mac: Some(9),
        },
        Change::Specific { k: 1, hop: 2 },
        Change::Route {
            k: 0,
            hops: vec![0],
        },
        Change::Delete {
            k: 1,
            specific: true,
        },
    ];
    let mut on = Queue::new(Config::default()).unwrap();
    let mut off = Queue::new(Config {
        dst_cache: None,
        ..Config::default()
    })
    .unwrap();
    let fx_off = twin(&fx);
    // One vector of 64 frames per batch, of 16 flows (runs and repeats among them).
    let frames: Vec<Vec<u8>> = (0..64u16)
        .map(|i| {
            frame(
                (i % 3) as u8,
                (i % 4) as u8,
                (i % 16) as u8,
                1000 + i % 5,
                10,
            )
        })
        .collect();
    for n in 0..2_000u64 {
        if n % 150 == 149 {
            apply(&mut fx, &changes[(n / 150) as usize % changes.len()]);
        }
        let now = n * 1_000;
        assert_eq!(
            run(&mut on, &fx, &frames, now),
            run(&mut off, &fx_off, &frames, now),
            "batch {n}"
        );
    }
    let cache = on.route_cache().unwrap();
    assert!(
        !cache.is_bypassing(),
        "hits are frequent: the hit-rate rule keeps the cache on"
    );
    assert!(cache.counters().hits > 0);
    // The tables' bursts at least (4 vectors of 64 lookups in 512), more if the rule closed.
    assert!(
        cache.counters().bypassed >= 4 * 64 * 3,
        "{:?}",
        cache.counters()
    );
}
