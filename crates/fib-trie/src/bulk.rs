//! Building a whole trie at once from sorted leaves (the bulk load behind
//! [`LcTrie::insert_many`](crate::LcTrie::insert_many) on an empty trie).
//!
//! Inserting a sorted full table one prefix at a time makes the kernel's resize inflate the same
//! nodes again and again (every inflate of a node splits and re-inflates its full children), so
//! most of the work is rebuilding nodes that are thrown away. Knowing every key up front, each
//! tnode can be given its final width directly: start binary at the highest bit where its keys
//! differ and inflate (on paper, by counting) while the kernel's own `should_inflate` rule says
//! so. Every node is allocated once; the result satisfies all the trie's invariants (placement,
//! counters, exact suffix lengths, no node to collapse, none that wants to halve).
#![forbid(unsafe_code)]

use crossbeam_epoch::Guard;

use crate::key::TrieKey;
use crate::node::{Alias, NodeRef};
use crate::trie::{INFLATE_THRESHOLD, INFLATE_THRESHOLD_ROOT};

/// Builds the subtree holding `keys` (sorted, distinct, with their alias counts), taking each
/// leaf's aliases from `aliases` in key order. `keys` must not be empty.
pub(crate) fn build<'g, K: TrieKey, V>(
    keys: &[(K, usize)],
    aliases: &mut impl Iterator<Item = Alias<V>>,
    is_root: bool,
    guard: &'g Guard,
) -> NodeRef<'g, K, V> {
    let (first, count) = keys[0];
    let Some(high) = (first ^ keys[keys.len() - 1].0).highest_bit() else {
        return NodeRef::new_leaf_with(first, count, aliases.by_ref().take(count));
    };
    // The node consumes the bits `pos .. high + 1`; start binary and widen while worthwhile.
    let end = high + 1;
    let mut bits = 1u8;
    loop {
        let pos = end - bits;
        if pos == 0 {
            break;
        }
        let (nonempty, full) = count_children(keys, pos, bits);
        let used = nonempty + full;
        let threshold = (1usize << bits)
            * if is_root {
                INFLATE_THRESHOLD_ROOT
            } else {
                INFLATE_THRESHOLD
            };
        if used > 1 && 50 * used >= threshold {
            bits += 1;
        } else {
            break;
        }
    }
    let tn = NodeRef::new_tnode(first, end - bits, bits);
    let mut rest = keys;
    while let Some(&(key, _)) = rest.first() {
        let index = tn.index_of(key);
        let len = group_len(rest, |k| tn.index_of(k) == index);
        let child = build(&rest[..len], aliases, false, guard);
        tn.put_child(index, Some(child), guard);
        rest = &rest[len..];
    }
    tn
}

/// The length of the group of sorted `keys` that starts at the first and satisfies `same`
/// (a prefix of `keys`), found by galloping: O(log of the group's length) probes, so that a
/// pass over all groups costs O(n) rather than O(groups × log n).
fn group_len<K: TrieKey>(keys: &[(K, usize)], same: impl Fn(K) -> bool) -> usize {
    let mut bound = 1;
    while bound < keys.len() && same(keys[bound].0) {
        bound *= 2;
    }
    // keys[bound / 2] is in the group; the end is in bound / 2 + 1 ..= bound.
    let lo = bound / 2 + 1;
    let hi = bound.min(keys.len());
    lo + keys[lo..hi].partition_point(|&(k, _)| same(k))
}

/// The non-empty and the full children a tnode consuming bits `pos .. pos + bits` would have
/// over `keys` (all equal above `pos + bits`). A child is full when it is a tnode ending right
/// at `pos`: its keys differ at bit `pos - 1`.
fn count_children<K: TrieKey>(keys: &[(K, usize)], pos: u8, bits: u8) -> (usize, usize) {
    let index = |k: K| k.shr(pos).low_usize() & ((1usize << bits) - 1);
    let mut nonempty = 0;
    let mut full = 0;
    let mut rest = keys;
    while let Some(&(key, _)) = rest.first() {
        let i = index(key);
        let len = group_len(rest, |k| index(k) == i);
        nonempty += 1;
        if (key ^ rest[len - 1].0).highest_bit() == Some(pos - 1) {
            full += 1;
        }
        rest = &rest[len..];
    }
    (nonempty, full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Galloping finds the same group end as a binary search over the whole slice.
        #[test]
        fn group_len_is_the_partition_point(
            mut keys in proptest::collection::vec(any::<u16>(), 1..300),
            shift in 0u32..16,
        ) {
            keys.sort_unstable();
            keys.dedup();
            let keys: Vec<(u32, usize)> = keys.into_iter().map(|k| (u32::from(k), 1)).collect();
            let mut rest = &keys[..];
            while let Some(&(first, _)) = rest.first() {
                let same = |k: u32| k >> shift == first >> shift;
                let len = group_len(rest, same);
                prop_assert_eq!(len, rest.partition_point(|&(k, _)| same(k)));
                prop_assert!(len >= 1);
                rest = &rest[len..];
            }
        }
    }
}
