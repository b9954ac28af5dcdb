//! The fib-trie LC-trie on the real tables of `benches/data` (full BGP v4 and v6, the v4 DFZ):
//! every lookup of random addresses (uniform, and inside announced prefixes) equals the
//! per-length hash-map reference, single and batched, both for the trie built by one `insert`
//! per prefix and for the one bulk-loaded by `insert_many`; then half the table is deleted from
//! both and they are checked again. 200k addresses per table in debug builds, 1M with optimizations.
//!
//! The fast structure (`FastLpm`) derived from the trie answers the same at every prefix
//! boundary and at the random addresses, built at once and then kept in step with the
//! deletions; and a `Fib` loaded with the table answers through it as through the LC-trie walk.

use crossbeam_epoch as epoch;
use fib_trie::{
    FastLpm, FastLpmWriter, FibWriter, Flow, LcTrie, NextHop, ReferenceLpm, Route as FibRoute,
    TrieKey, TrieWriter,
};
use rand::{RngExt, SeedableRng, rngs::StdRng};
use xfwd_benches::data::PrefixAddr;
use xfwd_benches::data::routes::{self, Route};

const ADDRESSES: usize = if cfg!(debug_assertions) {
    200_000
} else {
    1_000_000
};

fn check<A: PrefixAddr, K: TrieKey>(
    table: &[Route<A>],
    to_key: impl Fn(A) -> K,
    random: impl Fn(&mut StdRng) -> K,
) {
    let mut trie = TrieWriter::<K, u32>::new();
    let mut reference = ReferenceLpm::<K, u32>::new();
    let mut prefixes = Vec::with_capacity(table.len());
    for r in table {
        let key = to_key(r.prefix.addr);
        trie.insert(key, r.prefix.len, r.origin_asn).unwrap();
        reference.insert(key, r.prefix.len, r.origin_asn).unwrap();
        prefixes.push((key, r.prefix.len));
    }
    assert_eq!(trie.alias_count(), table.len());
    trie.check_invariants().unwrap();
    // The same table loaded at once (the bulk build of `insert_many`).
    let mut bulk = TrieWriter::<K, u32>::new();
    let loaded = table
        .iter()
        .map(|r| (to_key(r.prefix.addr), r.prefix.len, r.origin_asn));
    assert_eq!(bulk.insert_many(loaded).unwrap(), table.len());
    bulk.check_invariants().unwrap();
    // Both are big enough for the direct table; every entry must be right.
    assert!(trie.has_direct_table() && bulk.has_direct_table());
    trie.check_direct_table().unwrap();
    bulk.check_direct_table().unwrap();

    let mut rng = StdRng::seed_from_u64(0xf1b);
    let keys: Vec<K> = (0..ADDRESSES)
        .map(|i| {
            if i % 2 == 0 {
                random(&mut rng)
            } else {
                // Inside an announced prefix: its network address with random host bits.
                let (k, plen) = prefixes[rng.random_range(0..prefixes.len())];
                k | (random(&mut rng) & !K::prefix_mask(plen))
            }
        })
        .collect();
    compare(&trie, &reference, &keys);
    compare(&bulk, &reference, &keys);
    let mut fast = FastLpmWriter::<K>::new();
    fast.rebuild(&mut &*trie);
    let bounds = boundaries(&prefixes);
    compare_fast(&fast, &reference, &keys);
    compare_fast(&fast, &reference, &bounds);

    // Delete every other prefix, compare again.
    for &(k, plen) in prefixes.iter().step_by(2) {
        assert_eq!(trie.remove(k, plen).unwrap(), 1);
        assert_eq!(bulk.remove(k, plen).unwrap(), 1);
        reference.remove(k, plen).unwrap();
        fast.update(k, plen, &mut &*trie);
    }
    compare_fast(&fast, &reference, &keys[..keys.len() / 4]);
    compare_fast(&fast, &reference, &bounds);
    trie.check_invariants().unwrap();
    bulk.check_invariants().unwrap();
    trie.check_direct_table().unwrap();
    bulk.check_direct_table().unwrap();
    compare(&trie, &reference, &keys[..keys.len() / 4]);
    compare(&bulk, &reference, &keys[..keys.len() / 4]);
}

fn compare<K: TrieKey>(trie: &LcTrie<K, u32>, reference: &ReferenceLpm<K, u32>, keys: &[K]) {
    let guard = &epoch::pin();
    let mut batch = vec![None; keys.len()];
    trie.lookup_batch(keys, &mut batch, guard, |_| true);
    for (key, batched) in keys.iter().zip(&batch) {
        let got = trie.lookup(*key, guard, |_| true);
        let want = reference.lookup(*key, |_| true);
        assert_eq!(got.map(|m| (m.key, m.plen, m.value)), want, "key {key:?}");
        assert_eq!(*batched, got, "batched, key {key:?}");
    }
}

/// Every prefix's first and last address, and the addresses just outside them.
fn boundaries<K: TrieKey>(prefixes: &[(K, u8)]) -> Vec<K> {
    let mut out = Vec::with_capacity(prefixes.len() * 4);
    for &(k, plen) in prefixes {
        let last = k | !K::prefix_mask(plen);
        // Wrapping: one below the first, one above the last (the key's own arithmetic).
        let below = k.wrapping_sub_one();
        out.extend([k, last, below, last.wrapping_add_one()]);
    }
    out
}

trait Step: Sized {
    fn wrapping_sub_one(self) -> Self;
    fn wrapping_add_one(self) -> Self;
}

impl<K: TrieKey> Step for K {
    fn wrapping_sub_one(self) -> Self {
        // x - 1 == !(!x + 1) == !(-(!x)) in two's complement.
        !((!self).wrapping_neg())
    }
    fn wrapping_add_one(self) -> Self {
        (!self).wrapping_neg()
    }
}

fn compare_fast<K: TrieKey>(fast: &FastLpm<K>, reference: &ReferenceLpm<K, u32>, keys: &[K]) {
    let guard = &epoch::pin();
    let mut batch = vec![None; keys.len()];
    fast.lookup_batch(keys, &mut batch, guard);
    for (key, batched) in keys.iter().zip(&batch) {
        let want = reference.lookup(*key, |_| true).map(|(_, _, v)| *v);
        assert_eq!(fast.lookup(*key, guard), want, "fast, key {key:?}");
        assert_eq!(*batched, want, "fast batched, key {key:?}");
    }
}

/// The table in a `Fib` (eight next hops, by origin AS), loaded at once: every lookup through
/// the fast structure equals the LC-trie walk's, and the structure is in use.
fn check_fib<A: PrefixAddr, K: TrieKey>(
    table: &[Route<A>],
    to_key: impl Fn(A) -> K,
    random: impl Fn(&mut StdRng) -> K,
) {
    let hops: Vec<Vec<NextHop<K>>> = (1..=8u32).map(|i| vec![NextHop::new(None, i)]).collect();
    let routes: Vec<FibRoute<K>> = table
        .iter()
        .map(|r| {
            let hop = hops[r.origin_asn as usize % hops.len()].clone();
            FibRoute::unicast(to_key(r.prefix.addr), r.prefix.len, 254, hop)
        })
        .collect();
    let mut fib = FibWriter::<K>::new();
    assert_eq!(fib.insert_many(&routes).unwrap(), table.len());
    let guard = &epoch::pin();
    let main = fib.table(254, guard).unwrap();
    let stats = main.fast_stats();
    assert!(stats.enabled, "{stats:?}");
    assert!(stats.answers <= 8 * 129, "{stats:?}");
    let mut rng = StdRng::seed_from_u64(0xfa57);
    for i in 0..ADDRESSES / 2 {
        let key = if i % 2 == 0 {
            random(&mut rng)
        } else {
            let r = &table[rng.random_range(0..table.len())];
            let plen = r.prefix.len;
            to_key(r.prefix.addr) | (random(&mut rng) & !K::prefix_mask(plen))
        };
        let flow = Flow::to(key);
        assert_eq!(
            fib.lookup(&flow, guard),
            fib.lookup_walk(&flow, guard),
            "key {key:?}"
        );
    }
}

#[test]
fn bgp_full_v4_fib() {
    let table = routes::BGP_FULL_V4.load().unwrap();
    check_fib(&table, u32::from, |rng: &mut StdRng| rng.random::<u32>());
}

#[test]
fn bgp_full_v6_fib() {
    let table = routes::BGP_FULL_V6.load().unwrap();
    check_fib(&table, u128::from, |rng: &mut StdRng| {
        (rng.random::<u128>() >> 3) | (1 << 125)
    });
}

#[test]
fn bgp_full_v4() {
    let table = routes::BGP_FULL_V4.load().unwrap();
    check(&table, u32::from, |rng: &mut StdRng| rng.random::<u32>());
}

#[test]
fn dfz_v4() {
    let table = routes::DFZ_V4.load().unwrap();
    check(&table, u32::from, |rng: &mut StdRng| rng.random::<u32>());
}

#[test]
fn bgp_full_v6() {
    let table = routes::BGP_FULL_V6.load().unwrap();
    // Uniform IPv6 addresses almost never hit a route: draw them from 2000::/3 instead.
    check(&table, u128::from, |rng: &mut StdRng| {
        (rng.random::<u128>() >> 3) | (1 << 125)
    });
}
