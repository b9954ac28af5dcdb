//! Differential tests of the LC-trie against the per-length hash-map reference.

use std::collections::HashSet;

use crossbeam_epoch as epoch;
use fib_trie::{LcTrie, ReferenceLpm, TrieKey, TrieWriter};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op<K> {
    Insert(K, u8, u16),
    Remove(K, u8),
}

/// Prefixes drawn so that they nest and collide: addresses from a small pool of bases with
/// a few random low bits, lengths biased to the extremes and to the usual ones.
fn prefix<K: TrieKey + Arbitrary>(bases: Vec<K>) -> BoxedStrategy<(K, u8)> {
    let plen = prop_oneof![
        Just(0u8),
        Just(K::BITS),
        Just(K::BITS - 1),
        0..=K::BITS,
        (K::BITS / 4)..=(K::BITS / 4 * 3),
    ];
    (prop::sample::select(bases), any::<K>(), plen, 0u8..=K::BITS)
        .prop_map(|(base, noise, plen, keep)| {
            let noise = noise & !K::prefix_mask(keep);
            ((base ^ noise) & K::prefix_mask(plen), plen)
        })
        .boxed()
}

fn ops<K: TrieKey + Arbitrary>() -> impl Strategy<Value = Vec<Op<K>>> {
    prop::collection::vec(any::<K>(), 1..6).prop_flat_map(|bases| {
        let p = prefix(bases);
        prop::collection::vec(
            prop_oneof![
                3 => (p.clone(), any::<u16>()).prop_map(|((k, l), v)| Op::Insert(k, l, v)),
                1 => p.prop_map(|(k, l)| Op::Remove(k, l)),
            ],
            1..120,
        )
    })
}

fn probes<K: TrieKey>(trie_keys: &[(K, u8)], extra: &[K]) -> Vec<K> {
    let mut out: Vec<K> = extra.to_vec();
    for &(k, plen) in trie_keys {
        let host = !K::prefix_mask(plen);
        out.extend([
            k,
            k | host,
            k ^ K::from_usize(1),
            k | (host & K::from_usize(0x5555_5555)),
        ]);
        if plen > 0 {
            // Just outside the prefix: flip its last fixed bit.
            out.push(k ^ K::from_usize(1).shl(K::BITS - plen));
        }
    }
    out
}

fn run<K: TrieKey + Arbitrary>(ops: Vec<Op<K>>, extra: Vec<K>) {
    let mut trie = TrieWriter::<K, u16>::new();
    let mut reference = ReferenceLpm::<K, u16>::new();
    let mut touched = Vec::new();
    let accept_even = |v: &u16| v % 2 == 0;
    for op in ops {
        match op {
            Op::Insert(k, l, v) => {
                trie.insert(k, l, v).unwrap();
                reference.insert(k, l, v).unwrap();
                touched.push((k, l));
            }
            Op::Remove(k, l) => {
                assert_eq!(trie.remove(k, l).unwrap(), reference.remove(k, l).unwrap());
            }
        }
        trie.check_invariants().unwrap();
    }
    let guard = &epoch::pin();
    for key in probes(&touched, &extra) {
        let got = trie
            .lookup(key, guard, |_| true)
            .map(|m| (m.key, m.plen, m.value));
        assert_eq!(got, reference.lookup(key, |_| true), "key {key:?}");
        let got = trie
            .lookup(key, guard, accept_even)
            .map(|m| (m.key, m.plen, m.value));
        assert_eq!(
            got,
            reference.lookup(key, accept_even),
            "filtered, key {key:?}"
        );
    }
    // Batched lookups equal single ones.
    let keys = probes(&touched, &extra);
    let mut out = vec![None; keys.len()];
    trie.lookup_batch(&keys, &mut out, guard, |_| true);
    for (k, o) in keys.iter().zip(&out) {
        assert_eq!(*o, trie.lookup(*k, guard, |_| true));
    }
    // The dump holds exactly the reference's prefixes, in key order.
    let mut dumped = Vec::new();
    trie.for_each(guard, |k, aliases| {
        for a in aliases {
            dumped.push((k, K::BITS - a.slen, a.value));
        }
    });
    assert!(dumped.windows(2).all(|w| w[0].0 <= w[1].0));
    let mut want: Vec<_> = reference
        .iter()
        .flat_map(|(k, l, vs)| vs.iter().map(move |v| (k, l, *v)))
        .collect();
    let mut got = dumped.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let leaves: HashSet<K> = reference.iter().map(|(k, _, _)| k).collect();
    assert_eq!(trie.leaf_count(), leaves.len());
}

/// `insert_many` on an empty trie (the bulk build) holds exactly what one `insert` per prefix
/// holds, in the same order, answers every probe the same, and keeps working under changes.
fn bulk_equals_sequential<K: TrieKey + Arbitrary>(ops: Vec<Op<K>>, extra: Vec<K>) {
    let inserts: Vec<(K, u8, u16)> = ops
        .iter()
        .filter_map(|op| match *op {
            Op::Insert(k, l, v) => Some((k, l, v)),
            Op::Remove(..) => None,
        })
        .collect();
    let mut bulk = TrieWriter::<K, u16>::new();
    let mut sequential = TrieWriter::<K, u16>::new();
    let mut reference = ReferenceLpm::<K, u16>::new();
    assert_eq!(
        bulk.insert_many(inserts.iter().copied()).unwrap(),
        inserts.len()
    );
    for &(k, l, v) in &inserts {
        sequential.insert(k, l, v).unwrap();
        reference.insert(k, l, v).unwrap();
    }
    bulk.check_invariants().unwrap();
    assert_eq!(
        (bulk.leaf_count(), bulk.alias_count()),
        (sequential.leaf_count(), sequential.alias_count())
    );
    let guard = &epoch::pin();
    let dump = |t: &LcTrie<K, u16>| {
        let mut out = Vec::new();
        t.for_each(guard, |k, aliases| {
            out.extend(aliases.iter().map(|a| (k, a.slen, a.value)))
        });
        out
    };
    assert_eq!(dump(&bulk), dump(&sequential));
    let touched: Vec<(K, u8)> = inserts.iter().map(|&(k, l, _)| (k, l)).collect();
    for key in probes(&touched, &extra) {
        for accept in [|_: &u16| true, |v: &u16| v % 2 == 0] {
            let got = bulk
                .lookup(key, guard, accept)
                .map(|m| (m.key, m.plen, m.value));
            assert_eq!(got, reference.lookup(key, accept), "key {key:?}");
        }
    }
    // A second `insert_many` on the now non-empty trie inserts one by one; then removals.
    bulk.insert_many(inserts.iter().map(|&(k, l, v)| (k, l, v ^ 1)))
        .unwrap();
    for &(k, l, v) in &inserts {
        reference.insert(k, l, v ^ 1).unwrap();
    }
    for op in ops {
        if let Op::Remove(k, l) = op {
            assert_eq!(bulk.remove(k, l).unwrap(), reference.remove(k, l).unwrap());
        }
    }
    bulk.check_invariants().unwrap();
    for key in probes(&touched, &extra) {
        let got = bulk
            .lookup(key, guard, |_| true)
            .map(|m| (m.key, m.plen, m.value));
        assert_eq!(
            got,
            reference.lookup(key, |_| true),
            "after changes, key {key:?}"
        );
    }
}

/// With the direct table built from the start: every lookup (accepting all, and filtered,
/// which forces the fallback's slow path) equals the reference after every change, and every
/// table entry is right at the end.
fn run_direct<K: TrieKey + Arbitrary>(ops: Vec<Op<K>>, extra: Vec<K>) {
    let mut trie = TrieWriter::<K, u16>::new();
    trie.enable_direct_table();
    let mut reference = ReferenceLpm::<K, u16>::new();
    let mut touched = Vec::new();
    for op in ops {
        match op {
            Op::Insert(k, l, v) => {
                trie.insert(k, l, v).unwrap();
                reference.insert(k, l, v).unwrap();
                touched.push((k, l));
            }
            Op::Remove(k, l) => {
                assert_eq!(trie.remove(k, l).unwrap(), reference.remove(k, l).unwrap());
            }
        }
        let guard = &epoch::pin();
        for key in probes(&touched[touched.len().saturating_sub(3)..], &extra) {
            for accept in [|_: &u16| true, |v: &u16| v % 2 == 0] {
                let got = trie
                    .lookup(key, guard, accept)
                    .map(|m| (m.key, m.plen, m.value));
                assert_eq!(got, reference.lookup(key, accept), "key {key:?}");
            }
        }
    }
    trie.check_invariants().unwrap();
    trie.check_direct_table().unwrap();
    let guard = &epoch::pin();
    for key in probes(&touched, &extra) {
        for accept in [|_: &u16| true, |v: &u16| v % 2 == 0] {
            let got = trie
                .lookup(key, guard, accept)
                .map(|m| (m.key, m.plen, m.value));
            assert_eq!(got, reference.lookup(key, accept), "key {key:?}");
        }
    }
}

proptest! {
    // Each case checks all 65536 direct entries once: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn ipv4_direct_table_matches_reference(ops in ops::<u32>(), extra in prop::collection::vec(any::<u32>(), 0..32)) {
        run_direct(ops, extra);
    }

    #[test]
    fn ipv6_direct_table_matches_reference(ops in ops::<u128>(), extra in prop::collection::vec(any::<u128>(), 0..32)) {
        run_direct(ops, extra);
    }
}

proptest! {
    #[test]
    fn ipv4_bulk_load_equals_inserts(ops in ops::<u32>(), extra in prop::collection::vec(any::<u32>(), 0..32)) {
        bulk_equals_sequential(ops, extra);
    }

    #[test]
    fn ipv6_bulk_load_equals_inserts(ops in ops::<u128>(), extra in prop::collection::vec(any::<u128>(), 0..32)) {
        bulk_equals_sequential(ops, extra);
    }

    #[test]
    fn ipv4_matches_reference(ops in ops::<u32>(), extra in prop::collection::vec(any::<u32>(), 0..32)) {
        run(ops, extra);
    }

    #[test]
    fn ipv6_matches_reference(ops in ops::<u128>(), extra in prop::collection::vec(any::<u128>(), 0..32)) {
        run(ops, extra);
    }

    /// Dense sets: many prefixes under one /16 (v4), so tnodes inflate, halve and collapse.
    #[test]
    fn dense_ipv4_insert_then_delete(lens in prop::collection::vec((0u32..65536, 16u8..=32), 1..400), drop_every in 1usize..4) {
        let mut trie = TrieWriter::<u32, u32>::new();
        let mut reference = ReferenceLpm::<u32, u32>::new();
        let mut added = Vec::new();
        for (i, (low, plen)) in lens.iter().enumerate() {
            let key = (0x0a0a_0000 | low) & u32::prefix_mask(*plen);
            trie.insert(key, *plen, i as u32).unwrap();
            reference.insert(key, *plen, i as u32).unwrap();
            added.push((key, *plen));
        }
        trie.check_invariants().unwrap();
        for (k, l) in added.iter().step_by(drop_every) {
            prop_assert_eq!(trie.remove(*k, *l).unwrap(), reference.remove(*k, *l).unwrap());
        }
        trie.check_invariants().unwrap();
        let guard = &epoch::pin();
        for key in probes(&added, &[0, u32::MAX]) {
            let got = trie.lookup(key, guard, |_| true).map(|m| (m.key, m.plen, m.value));
            prop_assert_eq!(got, reference.lookup(key, |_| true));
        }
        // Re-add everything.
        for (k, l) in &added {
            if reference.lookup(*k, |_| true).is_none_or(|(_, pl, _)| pl != *l) {
                trie.insert(*k, *l, 7).unwrap();
                reference.insert(*k, *l, 7).unwrap();
            }
        }
        trie.check_invariants().unwrap();
        for key in probes(&added, &[]) {
            let got = trie.lookup(key, guard, |_| true).map(|m| (m.key, m.plen, m.value));
            prop_assert_eq!(got, reference.lookup(key, |_| true));
        }
    }
}

#[test]
fn default_and_host_routes() {
    let mut trie = TrieWriter::<u32, u8>::new();
    let guard = &epoch::pin();
    assert!(trie.lookup(1, guard, |_| true).is_none());
    trie.insert(0, 0, 0).unwrap();
    trie.insert(u32::MAX, 32, 1).unwrap();
    trie.insert(0, 32, 2).unwrap();
    assert_eq!(*trie.lookup(u32::MAX, guard, |_| true).unwrap().value, 1);
    assert_eq!(
        *trie.lookup(u32::MAX - 1, guard, |_| true).unwrap().value,
        0
    );
    assert_eq!(*trie.lookup(0, guard, |_| true).unwrap().value, 2);
    assert_eq!(trie.lookup(1, guard, |_| true).unwrap().plen, 0);
    // The /0 and the /32 at 0.0.0.0 share one leaf.
    assert_eq!(trie.leaf_count(), 2);
    assert_eq!(trie.get(0, guard).unwrap().len(), 2);
    trie.check_invariants().unwrap();
    assert!(matches!(
        trie.insert(1, 31, 0),
        Err(fib_trie::PrefixError::HostBits { plen: 31 })
    ));
    assert!(matches!(
        trie.insert(0, 33, 0),
        Err(fib_trie::PrefixError::TooLong { .. })
    ));
}

#[test]
fn sequential_fill_and_drain_ipv4() {
    let mut trie = TrieWriter::<u32, u32>::new();
    for i in 0..5000u32 {
        trie.insert(i << 8, 24, i).unwrap();
    }
    trie.check_invariants().unwrap();
    let guard = &epoch::pin();
    for i in (0..5000u32).step_by(7) {
        assert_eq!(
            *trie.lookup((i << 8) | 9, guard, |_| true).unwrap().value,
            i
        );
    }
    for i in 0..5000u32 {
        assert_eq!(trie.remove(i << 8, 24).unwrap(), 1);
        if i % 500 == 0 {
            trie.check_invariants().unwrap();
        }
    }
    assert!(trie.is_empty());
    trie.check_invariants().unwrap();
}
