//! Lookups during concurrent resizes: one writer grows the table from 0 to 100k keys and back
//! while reader threads check that keys never removed are always found.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use addr_table::RhlWriter;
use crossbeam_epoch as epoch;

/// Keys present for the whole run (IPv4-like addresses in 10.0.0.0/22).
const STABLE: u32 = 1000;
const CHURN: u32 = 100_000;

fn stable_key(i: u32) -> u32 {
    0x0a00_0000 + i
}

fn churn_key(i: u32) -> u32 {
    0xc612_0000 + i
}

#[test]
fn readers_always_find_stable_keys_while_the_table_grows_and_shrinks() {
    let mut table: RhlWriter<u32, u32> = RhlWriter::new();
    for i in 0..STABLE {
        table.insert(stable_key(i), i).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (table, done, lookups) = (table.reader().clone(), done.clone(), lookups.clone());
            thread::spawn(move || {
                let mut n = 0u64;
                let mut i = r;
                while !done.load(Ordering::Acquire) {
                    let guard = epoch::pin();
                    // One pin per batch, as a run loop would.
                    for _ in 0..64 {
                        let k = i % STABLE;
                        assert_eq!(
                            table.get(&stable_key(k), &guard),
                            Some(k),
                            "stable key {k} lost"
                        );
                        assert_eq!(table.get_all(&stable_key(k), &guard).count(), 1);
                        // A churning key is either absent or carries its own value.
                        let c = i.wrapping_mul(7919) % CHURN;
                        if let Some(v) = table.get(&churn_key(c), &guard) {
                            assert_eq!(v, c);
                        }
                        i = i.wrapping_add(13);
                        n += 1;
                    }
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();

    for i in 0..CHURN {
        table.insert(churn_key(i), i).unwrap();
    }
    let grown = table.stats();
    for i in 0..CHURN {
        assert!(table.remove(&churn_key(i), |v| *v == i));
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("reader panicked");
    }
    let shrunk = table.stats();
    assert!(grown.size >= 131_072, "{grown:?}");
    assert!(grown.rehashes.grows >= 12, "{grown:?}");
    assert!(shrunk.rehashes.shrinks >= 1, "{shrunk:?}");
    assert_eq!(shrunk.keys, STABLE as usize);
    assert!(lookups.load(Ordering::Relaxed) > 0);
}

/// Duplicates under churn: readers see the stable object of a key at the tail of its list
/// while the writer pushes and pops newer duplicates in front of it and the table resizes.
#[test]
fn readers_see_the_oldest_duplicate_while_newer_ones_come_and_go() {
    let mut table: RhlWriter<u32, u32> = RhlWriter::new();
    for k in 0..64 {
        table.insert(k, u32::MAX).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (table, done) = (table.reader().clone(), done.clone());
        thread::spawn(move || {
            let mut k = 0;
            while !done.load(Ordering::Acquire) {
                let guard = epoch::pin();
                let last = table.get_all(&(k % 64), &guard).last();
                assert_eq!(last, Some(u32::MAX), "key {}", k % 64);
                k += 1;
            }
        })
    };
    for round in 0..20u32 {
        for k in 0..64 {
            table.insert(k, round).unwrap();
        }
        // Unrelated keys force grows and shrinks meanwhile.
        for k in 1000..3000 {
            table.insert(k, round).unwrap();
        }
        for k in 1000..3000 {
            assert_eq!(table.remove_all(&k), 1);
        }
        for k in 0..64 {
            assert!(table.remove(&k, |v| *v == round));
        }
    }
    done.store(true, Ordering::Release);
    reader.join().expect("reader panicked");
    assert_eq!(table.objects(), 64);
}
