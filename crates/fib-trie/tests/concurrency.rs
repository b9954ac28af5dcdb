//! Readers race one writer: addresses covered only by stable routes must always resolve to
//! the same route, while volatile routes elsewhere come and go and the trie resizes under them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_epoch as epoch;
use fib_trie::LcTrie;
use rand::{RngExt, SeedableRng, rngs::StdRng};

/// Stable routes: 10.S.0.0/16 for S in 0..64, value S.
fn stable_key(s: u32) -> u32 {
    0x0a00_0000 | (s << 16)
}

/// A stable 12.0.0.0/8 (value `WIDE`): probes in 12.0.0.0/9 resolve to it through the direct
/// table's fallback when one is built.
const WIDE: u32 = 1000;

/// Volatile routes live in 11.0.0.0/8 (never covering a stable probe), at /24s and /32s
/// inside the stable /16s' upper halves (probes stay in the lower halves), and in
/// 12.128.0.0/9 at any length from /9 (slot-wide ones change the direct table's entries).
fn volatile(rng: &mut StdRng) -> (u32, u8) {
    if rng.random_bool(0.2) {
        let plen = rng.random_range(9..=32u8);
        let key = 0x0c80_0000 | rng.random_range(0..0x0080_0000u32);
        return (key & u32::prefix_mask_of(plen), plen);
    }
    if rng.random_bool(0.5) {
        let plen = rng.random_range(8..=32u8);
        (
            (0x0b00_0000 | rng.random_range(0..0x0100_0000u32)) & u32::prefix_mask_of(plen),
            plen,
        )
    } else {
        let s = rng.random_range(0..64u32);
        let plen = if rng.random_bool(0.5) { 24 } else { 32 };
        let low = 0x8000 | rng.random_range(0..0x8000u32);
        ((stable_key(s) | low) & u32::prefix_mask_of(plen), plen)
    }
}

trait Mask {
    fn prefix_mask_of(plen: u8) -> u32;
}
impl Mask for u32 {
    fn prefix_mask_of(plen: u8) -> u32 {
        <u32 as fib_trie::TrieKey>::prefix_mask(plen)
    }
}

fn stress<const READERS: usize>(duration: Duration, direct: bool) {
    let trie = Arc::new(LcTrie::<u32, u32>::new());
    if direct {
        trie.enable_direct_table();
    }
    for s in 0..64 {
        trie.insert(stable_key(s), 16, s).unwrap();
    }
    trie.insert(0x0c00_0000, 8, WIDE).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (trie, stop, lookups) =
                (Arc::clone(&trie), Arc::clone(&stop), Arc::clone(&lookups));
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(r as u64);
                let mut n = 0;
                let mut keys = [0u32; 16];
                while !stop.load(Ordering::Relaxed) {
                    let guard = epoch::pin();
                    for k in &mut keys {
                        let s = rng.random_range(0..64u32);
                        *k = stable_key(s) | rng.random_range(0..0x8000u32);
                    }
                    for &k in &keys {
                        let m = trie
                            .lookup(k, &guard, |_| true)
                            .expect("stable route vanished");
                        assert_eq!(
                            (m.key, m.plen, *m.value),
                            (k & 0xffff_0000, 16, (k >> 16) & 0xff),
                            "key {k:#x}"
                        );
                    }
                    let mut out = [None; 16];
                    trie.lookup_batch(&keys, &mut out, &guard, |_| true);
                    for (k, m) in keys.iter().zip(&out) {
                        assert_eq!(m.map(|m| *m.value), Some((k >> 16) & 0xff));
                    }
                    for _ in 0..8 {
                        let k = 0x0c00_0000 | rng.random_range(0..0x0080_0000u32);
                        let m = trie.lookup(k, &guard, |_| true).expect("12/8 vanished");
                        assert_eq!(
                            (m.key, m.plen, *m.value),
                            (0x0c00_0000, 8, WIDE),
                            "key {k:#x}"
                        );
                    }
                    n += 40;
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(99);
    let mut live: Vec<(u32, u8)> = Vec::new();
    let started = Instant::now();
    let mut writes = 0;
    while started.elapsed() < duration {
        if live.len() < 3000 && (live.is_empty() || rng.random_bool(0.6)) {
            let (k, l) = volatile(&mut rng);
            trie.insert(k, l, u32::MAX).unwrap();
            live.push((k, l));
        } else {
            let i = rng.random_range(0..live.len());
            let (k, l) = live.swap_remove(i);
            trie.remove(k, l).unwrap();
        }
        writes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader failed");
    }
    trie.check_invariants().unwrap();
    trie.check_direct_table().unwrap();
    assert_eq!(trie.has_direct_table(), direct);
    // Miri interprets: only a handful of changes and lookups fit in the time.
    let least = if cfg!(miri) { 0 } else { 1000 };
    assert!(writes > least, "writer made {writes} changes");
    assert!(lookups.load(Ordering::Relaxed) > least);
}

#[test]
fn readers_see_stable_routes_while_a_writer_churns() {
    stress::<2>(Duration::from_millis(1500), false);
}

/// The same with the direct table built from the start (small tries otherwise do without).
#[test]
fn readers_see_stable_routes_with_the_direct_table() {
    stress::<2>(Duration::from_millis(1500), true);
}

/// The unmerge under readers: local and main routes that never change must resolve the same
/// (from the merged trie, then from their own tries) while a writer changes other routes of
/// both tables and, halfway, adds the first custom rule.
#[test]
fn readers_see_stable_routes_across_the_unmerge() {
    use fib_trie::{Fib, FibRule, Flow, InsertFlags, NextHop, Route, RouteType, RuleAction, ids};

    let fib = Arc::new(Fib::<u32>::new());
    // Stable: local 10.S.0.1/32 and main 10.S.0.0/16 for S in 0..16 (probes 10.S.0.1 and
    // 10.S.1.1); volatile: /24s of 11.0.0.0/8 in both tables.
    for s in 0..16 {
        let mut local = Route::unicast(
            stable_key(s) | 1,
            32,
            ids::LOCAL,
            vec![NextHop::new(None, 1)],
        );
        local.route_type = RouteType::Local;
        fib.insert(&local, InsertFlags::ADD).unwrap();
        let main = Route::unicast(stable_key(s), 16, ids::MAIN, vec![NextHop::new(Some(s), 2)]);
        fib.insert(&main, InsertFlags::ADD).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (fib, stop, checked) = (Arc::clone(&fib), Arc::clone(&stop), Arc::clone(&checked));
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(r);
                while !stop.load(Ordering::Relaxed) {
                    let guard = epoch::pin();
                    for _ in 0..64 {
                        let s = rng.random_range(0..16);
                        let local = fib.lookup(&Flow::to(stable_key(s) | 1), &guard).unwrap();
                        assert_eq!((local.table(), local.plen), (ids::LOCAL, 32));
                        let main = fib
                            .lookup(&Flow::to(stable_key(s) | 0x101), &guard)
                            .unwrap();
                        assert_eq!((main.table(), main.plen), (ids::MAIN, 16));
                        assert_eq!(main.alias.info.nexthops[0].gateway, Some(s));
                    }
                    checked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let changes = if cfg!(miri) { 40 } else { 4000 };
    let mut rng = StdRng::seed_from_u64(9);
    let mut live = Vec::new();
    for i in 0..changes {
        if i == changes / 2 {
            assert!(fib.is_merged());
            fib.add_rule(FibRule::new(100, RuleAction::Nop)).unwrap();
            assert!(!fib.is_merged());
        }
        if live.len() < 64 && rng.random_bool(0.6) {
            let table = if rng.random_bool(0.5) {
                ids::LOCAL
            } else {
                ids::MAIN
            };
            let key = 0x0b00_0000 | (rng.random_range(0..0x1_0000u32) << 8);
            let route = Route::unicast(key, 24, table, vec![NextHop::new(None, 3)]);
            if fib.insert(&route, InsertFlags::ADD).is_ok() {
                live.push(route);
            }
        } else if !live.is_empty() {
            let route = live.swap_remove(rng.random_range(0..live.len()));
            fib.delete(&fib_trie::RouteSelector::exact(&route)).unwrap();
        }
    }
    // Let the readers run a little after the last change.
    let deadline = Instant::now() + Duration::from_millis(if cfg!(miri) { 0 } else { 50 });
    while Instant::now() < deadline {
        thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(cfg!(miri) || checked.load(Ordering::Relaxed) > 0);
    let guard = epoch::pin();
    let counts: Vec<usize> = [ids::LOCAL, ids::MAIN]
        .iter()
        .map(|&id| fib.table(id, &guard).unwrap().route_count())
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), 32 + live.len());
}
