//! A trie emptied by single removes and loaded again in bulk (the mirror's resync of a table
//! it had flushed) answers as the reference: the direct table, built while the trie was large,
//! stays built and must be refilled by the bulk load.

use crossbeam_epoch as epoch;
use fib_trie::{DIRECT_MIN_LEAVES, LcTrie, ReferenceLpm, TrieWriter};
use rand::{RngExt, SeedableRng, rngs::StdRng};

fn prefixes(n: usize, seed: u64) -> Vec<(u32, u8, u32)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while out.len() < n {
        let plen = match rng.random_range(0..10) {
            0 => rng.random_range(1..=16u8),
            1..=6 => 24,
            _ => rng.random_range(17..=32u8),
        };
        let key = rng.random::<u32>() & u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0);
        if seen.insert((key, plen)) {
            out.push((key, plen, out.len() as u32));
        }
    }
    out
}

fn check(trie: &LcTrie<u32, u32>, reference: &ReferenceLpm<u32, u32>, rng: &mut StdRng) {
    trie.check_direct_table().unwrap();
    let guard = epoch::pin();
    for _ in 0..20_000 {
        let key = rng.random::<u32>();
        let got = trie.lookup(key, &guard, |_| true).map(|m| *m.value);
        let want = reference.lookup(key, |_| true).map(|(_, _, v)| *v);
        assert_eq!(got, want, "key {key:#x}");
    }
}

#[test]
fn a_trie_emptied_and_bulk_loaded_again_answers_as_the_reference() {
    let mut rng = StdRng::seed_from_u64(7);
    let set = prefixes(DIRECT_MIN_LEAVES * 2, 1);
    let mut trie = TrieWriter::<u32, u32>::new();
    let mut reference = ReferenceLpm::new();
    for &(k, l, v) in &set {
        trie.insert(k, l, v).unwrap();
        reference.insert(k, l, v).unwrap();
    }
    assert!(trie.has_direct_table());
    check(&trie, &reference, &mut rng);
    for &(k, l, _) in &set {
        trie.remove(k, l).unwrap();
    }
    let empty = ReferenceLpm::new();
    check(&trie, &empty, &mut rng);
    // Loaded again in bulk, with a different set (other slots deep, other slot-wide prefixes).
    let other = prefixes(DIRECT_MIN_LEAVES * 2, 2);
    trie.insert_many(other.iter().copied()).unwrap();
    let mut reference = ReferenceLpm::new();
    for &(k, l, v) in &other {
        reference.insert(k, l, v).unwrap();
    }
    check(&trie, &reference, &mut rng);
    // And single changes after it keep the table's counts right.
    for &(k, l, _) in other.iter().step_by(3) {
        trie.remove(k, l).unwrap();
        reference.remove(k, l).unwrap();
    }
    check(&trie, &reference, &mut rng);
}
