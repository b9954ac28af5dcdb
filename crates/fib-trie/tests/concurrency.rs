//! Readers race one writer: addresses covered only by stable routes must always resolve to
//! the same route, while volatile routes elsewhere come and go and the trie resizes under them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_epoch as epoch;
use fib_trie::TrieWriter;
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
    let mut trie = TrieWriter::<u32, u32>::new();
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
            let (trie, stop, lookups) = (
                Arc::clone(trie.reader()),
                Arc::clone(&stop),
                Arc::clone(&lookups),
            );
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
    use fib_trie::{
        FibRule, FibWriter, Flow, InsertFlags, NextHop, Route, RouteType, RuleAction, ids,
    };

    let mut fib = FibWriter::<u32>::new();
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
            let (fib, stop, checked) = (
                Arc::clone(fib.reader()),
                Arc::clone(&stop),
                Arc::clone(&checked),
            );
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
                        assert_eq!(main.alias.info.nexthops[0].gateway_same(), Some(s));
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

/// The probes of the linearizability test and the prefixes that cover them.
struct Pool {
    /// Prefixes changed by the writer: nested around the probes, at every depth the fast
    /// structure distinguishes (first-level-wide, slot, node, node below).
    prefixes: Vec<(u32, u8)>,
    probes: Vec<u32>,
}

fn pool() -> Pool {
    // Each probe has a short chain of covering prefixes, so every length is often the answer.
    let chains: [(u32, &[u8]); 6] = [
        (0x0a01_0203, &[4, 18]),
        (0x0b01_02f0, &[8, 17, 32]),
        (0x2001_8000, &[12, 24]),
        (0x3a7f_ff01, &[15, 19, 30]),
        (0x4b00_0001, &[23, 25, 29]),
        (0x4b00_0081, &[0, 26]),
    ];
    let mut prefixes = Vec::new();
    for (probe, lengths) in chains {
        for &plen in lengths {
            let key = probe & <u32 as fib_trie::TrieKey>::prefix_mask(plen);
            if !prefixes.contains(&(key, plen)) {
                prefixes.push((key, plen));
            }
        }
    }
    Pool {
        prefixes,
        probes: chains.iter().map(|c| c.0).collect(),
    }
}

/// Readers look up probes while a writer applies `changes` route changes (each an insert,
/// replace or delete of a prefix covering some probe, the route's interface index numbering
/// the change) over 5,000 unrelated routes (so the fast structure is wide). The writer logs
/// each change before making it; every reader checks each answer against the log: it must be
/// the table's state after some change between the last one completed before the lookup and
/// the one announced after it. (Lookups take the fast structure here. The LC-trie walk alone
/// does not pass this test: while a short prefix's many direct-table entries are rewritten, a
/// walk can briefly miss a covering route; see the crate README.)
#[test]
fn every_answer_is_a_state_of_the_change_log() {
    use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route, RouteSelector};
    use std::sync::atomic::AtomicU64;

    const READERS: usize = 2;
    let changes: usize = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let mut fib = FibWriter::<u32>::new();
    let background: Vec<Route<u32>> = (0..5000u32)
        .map(|i| Route::unicast(0xc000_0000 | (i << 8), 24, 254, vec![NextHop::new(None, 1)]))
        .collect();
    fib.insert_many(&background).unwrap();
    assert!(fib.table(254, &epoch::pin()).unwrap().fast_stats().enabled);
    let pool = Arc::new(pool());
    // Entry `i` (1-based): the pool index of the prefix changed, and the version installed
    // (the change's number) or 0 for a delete.
    let log: Arc<Vec<AtomicU64>> = Arc::new((0..=changes).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let announced = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // The probe's answer after changes 1..=t: the longest prefix of its chain then present.
    let state_at = |pool: &Pool, log: &[AtomicU64], probe: u32, t: usize| -> Option<(u8, u32)> {
        let mut chain: Vec<(usize, u8)> = pool
            .prefixes
            .iter()
            .enumerate()
            .filter(|(_, (k, l))| probe & <u32 as fib_trie::TrieKey>::prefix_mask(*l) == *k)
            .map(|(i, (_, l))| (i, *l))
            .collect();
        chain.sort_by_key(|c| std::cmp::Reverse(c.1));
        chain.into_iter().find_map(|(index, plen)| {
            let version = (1..=t).rev().find_map(|j| {
                let e = log[j].load(Ordering::Relaxed);
                ((e >> 32) as usize == index).then_some(e as u32)
            })?;
            (version != 0).then_some((plen, version))
        })
    };

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (fib, pool, log) = (fib.reader().clone(), pool.clone(), log.clone());
            let (done, announced, stop) = (done.clone(), announced.clone(), stop.clone());
            thread::spawn(move || {
                let mut checked = 0usize;
                let mut i = r;
                while !stop.load(Ordering::Acquire) {
                    let probe = pool.probes[i % pool.probes.len()];
                    i += 1;
                    let guard = epoch::pin();
                    let before = done.load(Ordering::Acquire);
                    let flow = Flow::to(probe);
                    let answer = fib.lookup(&flow, &guard);
                    let answer = answer
                        .ok()
                        .map(|a| (a.plen, a.alias.info.nexthops[a.nh_sel].ifindex));
                    let after = announced.load(Ordering::Acquire);
                    let ok = (before..=after).any(|t| state_at(&pool, &log, probe, t) == answer);
                    assert!(
                        ok,
                        "answer {answer:?} for probe {probe:#x} is no state in {before}..={after}"
                    );
                    checked += 1;
                }
                checked
            })
        })
        .collect();

    // The writer: change `i` installs version `i` or deletes.
    let mut rng = StdRng::seed_from_u64(0x11ae);
    let mut present = vec![false; pool.prefixes.len()];
    for i in 1..=changes {
        let index = rng.random_range(0..pool.prefixes.len());
        let (key, plen) = pool.prefixes[index];
        let version = u32::try_from(i).unwrap();
        let delete = present[index] && rng.random_bool(0.5);
        let entry = (index as u64) << 32 | if delete { 0 } else { u64::from(version) };
        log[i].store(entry, Ordering::Relaxed);
        announced.store(i, Ordering::Release);
        if delete {
            fib.delete(&RouteSelector::new(key, plen, 254))
                .map(|_| ())
                .unwrap();
        } else {
            let route = Route::unicast(key, plen, 254, vec![NextHop::new(None, version)]);
            fib.insert(&route, InsertFlags::REPLACE).unwrap();
        }
        present[index] = !delete;
        done.store(i, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        let checked = r.join().unwrap();
        assert!(checked > 1000, "a reader checked {checked} answers");
    }
}
