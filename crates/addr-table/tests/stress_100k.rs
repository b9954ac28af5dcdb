//! Reader/writer stress at 100k addresses: the table holds 100,000 stable IPv4 (or IPv6)
//! addresses while a writer adds and removes 150,000 more, so every round grows the table
//! (IPv6, 2-slot lines: 262,144 → 524,288, above 7/8 load at 229,377 keys; IPv4, 6-slot
//! lines: 196,608 → 393,216, at 172,033 keys) and shrinks it back (below 30%: at 157,286
//! keys; IPv4 at 117,964), with bucket-by-bucket migrations running under the
//! readers. Readers check every lookup: a stable address always answers with its own value,
//! a churning one answers with its own value or not at all, an address never added never
//! answers, and the duplicate list of a stable address is exactly its one object.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use addr_table::{Inline, RhlWriter};
use crossbeam_epoch as epoch;

const STABLE: u32 = 100_000;
const CHURN: u32 = 150_000;
const ROUNDS: u32 = 2;

/// Three disjoint key spaces: stable, churning, never added.
trait Addr: Inline + Hash + Eq + Copy + Debug + Send + Sync + 'static {
    fn stable(i: u32) -> Self;
    fn churn(i: u32) -> Self;
    fn absent(i: u32) -> Self;
    /// Table sizes with the stable keys and at the peak of a round.
    const SIZES: (usize, usize);
}

impl Addr for u32 {
    // 6-slot lines: 100,000 keys are above 7/8 of 98,304, not of 196,608 (32,768 lines).
    const SIZES: (usize, usize) = (196_608, 393_216);
    fn stable(i: u32) -> u32 {
        0x0a00_0000 + i // 10.0.0.0/8
    }
    fn churn(i: u32) -> u32 {
        0xc612_0000 + i // from 198.18.0.0 on
    }
    fn absent(i: u32) -> u32 {
        0xac10_0000 + i // 172.16.0.0/12
    }
}

impl Addr for u128 {
    // 2-slot lines: 100,000 keys are above 7/8 of 65,536, not of 131,072.
    const SIZES: (usize, usize) = (131_072, 524_288);
    fn stable(i: u32) -> u128 {
        (0x2001_0db8_0000_0001u128 << 64) | u128::from(i)
    }
    fn churn(i: u32) -> u128 {
        (0x2001_0db8_0000_0002u128 << 64) | u128::from(i)
    }
    fn absent(i: u32) -> u128 {
        (0x2001_0db8_0000_0003u128 << 64) | u128::from(i)
    }
}

fn stress<A: Addr>() {
    let mut table: RhlWriter<A, u32> = RhlWriter::new();
    for i in 0..STABLE {
        table.insert(A::stable(i), i).unwrap();
    }
    table.finish_rehash();
    let start = table.stats();
    assert_eq!(start.size, A::SIZES.0, "{start:?}");

    let done = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let churn_hits = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2u32)
        .map(|r| {
            let (table, done) = (table.reader().clone(), done.clone());
            let (lookups, churn_hits) = (lookups.clone(), churn_hits.clone());
            thread::spawn(move || {
                let (mut n, mut hits) = (0u64, 0u64);
                // Strides co-prime with the key counts visit every address in a scattered order.
                let mut i = r * 50_000;
                while !done.load(Ordering::Acquire) {
                    let guard = epoch::pin();
                    for _ in 0..256 {
                        let s = i % STABLE;
                        assert_eq!(table.get(&A::stable(s), &guard), Some(s), "stable {s} lost");
                        assert_eq!(table.get_all(&A::stable(s), &guard).count(), 1);
                        let c = i.wrapping_mul(7919) % CHURN;
                        if let Some(v) = table.get(&A::churn(c), &guard) {
                            assert_eq!(v, c, "churn key {c} carries another value");
                            hits += 1;
                        }
                        let a = i.wrapping_mul(104_729) % STABLE;
                        assert_eq!(table.get(&A::absent(a), &guard), None, "absent {a} found");
                        i = i.wrapping_add(7);
                        n += 3;
                    }
                }
                lookups.fetch_add(n, Ordering::Relaxed);
                churn_hits.fetch_add(hits, Ordering::Relaxed);
            })
        })
        .collect();

    let mut peak = 0;
    for _ in 0..ROUNDS {
        for i in 0..CHURN {
            table.insert(A::churn(i), i).unwrap();
        }
        peak = peak.max(table.stats().size);
        for i in 0..CHURN {
            assert!(table.remove(&A::churn(i), |v| *v == i), "churn {i} missing");
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("reader panicked");
    }
    let end = table.stats();
    assert_eq!(peak, A::SIZES.1, "{end:?}");
    assert!(end.rehashes.grows >= u64::from(ROUNDS), "{end:?}");
    assert!(end.rehashes.shrinks >= u64::from(ROUNDS), "{end:?}");
    // A chain of more than ELASTICITY keys happens by chance about once in 20 tables of
    // 262,144 lines at the growth threshold (see `ELASTICITY`), and each round passes that
    // threshold twice: a same-size reseed is then correct behaviour, not a failure. Two in one
    // run happen by chance in well under 1% of runs; more mean the hash lost its spread.
    assert!(end.rehashes.reseeds <= 2, "{end:?}");
    assert_eq!((end.keys, end.objects), (STABLE as usize, STABLE as usize));
    assert!(lookups.load(Ordering::Relaxed) > 0);
    // Every stable key is still there, with its value, after the last migration.
    table.finish_rehash();
    let guard = epoch::pin();
    for i in 0..STABLE {
        assert_eq!(table.get(&A::stable(i), &guard), Some(i));
    }
    eprintln!(
        "{}: {} lookups, {} churn hits, {:?}",
        std::any::type_name::<A>(),
        lookups.load(Ordering::Relaxed),
        churn_hits.load(Ordering::Relaxed),
        end
    );
}

#[test]
fn ipv4_readers_at_100k_addresses_while_the_table_grows_and_shrinks() {
    stress::<u32>();
}

#[test]
fn ipv6_readers_at_100k_addresses_while_the_table_grows_and_shrinks() {
    stress::<u128>();
}

/// Duplicates (a key's slot turning into a list pointer and back inline), value updates (a
/// slot rewritten elsewhere in its line or further down its chain) and removals of list
/// heads, all on the 100,000 stable keys while 150,000 churning keys grow and shrink the
/// table under two readers. Each stable key `s` keeps its first object (value `s`) throughout;
/// the writer gives it a newer duplicate (`s + DUP`), updates that one (`s + UPD`) and removes
/// it again. Readers check that `s` is always the oldest value, the list is one of the states
/// the writer went through (`[s]`, `[s + DUP, s]`, `[s + UPD, s]`), and a predicate search for
/// `s` always finds it.
fn stress_duplicates<A: Addr>() {
    const DUP: u32 = 1 << 24;
    const UPD: u32 = 2 << 24;
    let mut table: RhlWriter<A, u32> = RhlWriter::new();
    for i in 0..STABLE {
        table.insert(A::stable(i), i).unwrap();
    }
    table.finish_rehash();

    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u32)
        .map(|r| {
            let (table, done) = (table.reader().clone(), done.clone());
            thread::spawn(move || {
                let mut i = r * 50_000;
                let mut lists = 0u64;
                let mut buf = Vec::with_capacity(4);
                while !done.load(Ordering::Acquire) {
                    let guard = epoch::pin();
                    for _ in 0..256 {
                        let s = i % STABLE;
                        buf.clear();
                        buf.extend(table.get_all(&A::stable(s), &guard));
                        let ok = buf == [s] || buf == [s + DUP, s] || buf == [s + UPD, s];
                        assert!(ok, "stable {s}: {buf:?}");
                        lists += u64::from(buf.len() == 2);
                        assert_eq!(table.find(&A::stable(s), &guard, |v| *v == s), Some(s));
                        let c = i.wrapping_mul(7919) % CHURN;
                        if let Some(v) = table.get(&A::churn(c), &guard) {
                            assert_eq!(v, c, "churn key {c} carries another value");
                        }
                        i = i.wrapping_add(7);
                    }
                }
                lists
            })
        })
        .collect();

    for round in 0..ROUNDS {
        for i in 0..CHURN {
            table.insert(A::churn(i), i).unwrap();
            // Interleave duplicate traffic on the stable keys with the growth (each stable
            // key once a round: `i * 31 % STABLE` visits every one for `i < STABLE`).
            if i < STABLE {
                let s = (i.wrapping_mul(31) + round) % STABLE;
                table.insert(A::stable(s), s + DUP).unwrap();
                assert!(table.update(&A::stable(s), |v| *v == s + DUP, |v| *v = s + UPD));
            }
        }
        for i in 0..CHURN {
            assert!(table.remove(&A::churn(i), |v| *v == i), "churn {i} missing");
            if i < STABLE {
                let s = (i.wrapping_mul(31) + round) % STABLE;
                assert!(
                    table.remove(&A::stable(s), |v| *v == s + UPD),
                    "dup of {s} missing"
                );
            }
        }
    }
    done.store(true, Ordering::Release);
    let lists: u64 = readers
        .into_iter()
        .map(|r| r.join().expect("reader panicked"))
        .sum();
    let end = table.stats();
    assert!(end.rehashes.grows >= u64::from(ROUNDS), "{end:?}");
    assert!(end.rehashes.shrinks >= u64::from(ROUNDS), "{end:?}");
    assert_eq!((end.keys, end.objects), (STABLE as usize, STABLE as usize));
    // Rewrites that found their line full moved keys down their chains; same-size rehashes
    // packed them back, so at most one key in `COMPACT_AFTER` lines is still displaced.
    assert!(end.rehashes.compactions > 0, "{end:?}");
    table.finish_rehash();
    let guard = epoch::pin();
    for i in 0..STABLE {
        assert_eq!(
            table.get_all(&A::stable(i), &guard).collect::<Vec<_>>(),
            [i]
        );
    }
    eprintln!(
        "{}: readers saw {lists} two-object lists, {end:?}",
        std::any::type_name::<A>()
    );
}

#[test]
fn ipv4_duplicates_and_updates_at_100k_addresses_while_the_table_grows_and_shrinks() {
    stress_duplicates::<u32>();
}

#[test]
fn ipv6_duplicates_and_updates_at_100k_addresses_while_the_table_grows_and_shrinks() {
    stress_duplicates::<u128>();
}
