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
