//! Building a subtree of the fast structure from the prefixes under it, leaf-pushed.

use super::node::{Entry, Place, new_direct, new_node, new_skip};
use super::{STRIDE, direct_bits, index_at};
use crate::key::TrieKey;

/// A prefix and its answer.
pub(crate) type Item<K> = (K, u8, u32);

/// The entry for the region `key/depth` (a slot at `depth`): the answer `default` where no
/// item covers a key, else the item of the longest prefix covering it.
///
/// `items` are the prefixes longer than `depth` inside the region, sorted by (key, length).
/// New nodes go to `place`, children before their parent (depth first).
pub(crate) fn build<K: TrieKey>(
    place: &mut Place<'_>,
    key: K,
    depth: u8,
    default: u32,
    items: &[Item<K>],
) -> Entry {
    if items.is_empty() {
        return Entry::Leaf(default);
    }
    debug_assert!(depth < K::BITS);
    if let Some(skip) = skip(place, key, depth, default, items) {
        return skip;
    }
    if let Some(bits) = direct_bits::<K>(depth, items.len()) {
        return direct(place, key, depth, bits, default, items);
    }
    debug_assert!(
        items
            .iter()
            .all(|i| (i.0 ^ key) & K::prefix_mask(depth) == K::ZERO)
    );
    // Positions of this node: six bits from `depth` (zero-padded past the key's end, so a
    // last node of fewer bits repeats each real position's answer over its padding).
    let real_bits = STRIDE.min(K::BITS - depth);
    let pad = STRIDE - real_bits;
    let end = depth + real_bits;

    // Leaf-pushed answers: the default, overwritten by the prefixes ending in this node in
    // (key, length) order, which puts every prefix after those covering it.
    let mut answers = [default; 64];
    for &(k, len, answer) in items.iter().filter(|(_, len, _)| *len <= end) {
        let first = (index_at(k, depth) >> pad) << pad;
        let count = 1usize << (end - len + pad);
        answers[first as usize..first as usize + count].fill(answer);
    }

    // Children: the longer prefixes, grouped by position (contiguous, as items are sorted).
    let mut entries = answers.map(Entry::Leaf);
    let longer: Vec<Item<K>> = items
        .iter()
        .copied()
        .filter(|(_, len, _)| *len > end)
        .collect();
    let mut rest = &longer[..];
    while let Some(&(k, _, _)) = rest.first() {
        let index = index_at(k, depth);
        let n = rest
            .iter()
            .take_while(|(k, _, _)| index_at(*k, depth) == index)
            .count();
        let child_key = k & K::prefix_mask(end);
        entries[index as usize] = build(place, child_key, end, answers[index as usize], &rest[..n]);
        rest = &rest[n..];
    }
    assemble(place, &entries)
}

/// A node holding `entries` (one per position), or the lone answer if they are all the same
/// answer.
pub(crate) fn assemble(place: &mut Place<'_>, entries: &[Entry; 64]) -> Entry {
    // Leaf runs: a leaf position starts a new entry when its answer differs from the
    // previous leaf position's.
    // (On the stack: an update assembles one node per change.)
    let mut vector = 0u64;
    let mut leafvec = 0u64;
    let mut children = [Entry::Leaf(0); 64];
    let mut leaves = [0u32; 64];
    let (mut c, mut l) = (0, 0);
    let mut last = None;
    for (i, e) in entries.iter().enumerate() {
        match *e {
            Entry::Node(_) | Entry::Skip(_) | Entry::Direct(..) => {
                vector |= 1 << i;
                children[c] = *e;
                c += 1;
            }
            Entry::Leaf(answer) => {
                if last != Some(answer) {
                    leafvec |= 1 << i;
                    leaves[l] = answer;
                    l += 1;
                    last = Some(answer);
                }
            }
        }
    }
    if vector == 0 && l == 1 {
        return Entry::Leaf(leaves[0]);
    }
    Entry::Node(new_node(
        place,
        vector,
        leafvec,
        &children[..c],
        &leaves[..l],
    ))
}

/// A direct node of `bits` bits for the region `key/depth` (as [`build`]): every position
/// one slot, holding its answer or the entry built for the longer prefixes under it.
fn direct<K: TrieKey>(
    place: &mut Place<'_>,
    key: K,
    depth: u8,
    bits: u8,
    default: u32,
    items: &[Item<K>],
) -> Entry {
    debug_assert!(
        items
            .iter()
            .all(|i| (i.0 ^ key) & K::prefix_mask(depth) == K::ZERO)
    );
    let end = depth + bits;
    let index = |k: K| k.shl(depth).shr_in_width(K::BITS - bits).low_usize();
    // Leaf-pushed answers, as in `build`: (key, length) order puts every prefix after those
    // covering it.
    let mut answers = vec![default; 1 << bits];
    for &(k, len, answer) in items.iter().filter(|(_, len, _)| *len <= end) {
        let first = index(k);
        answers[first..first + (1 << (end - len))].fill(answer);
    }
    let mut entries: Vec<Entry> = answers.iter().map(|&a| Entry::Leaf(a)).collect();
    let mut rest = items;
    while let Some(&(k, _, _)) = rest.first() {
        let n = rest.iter().take_while(|i| index(i.0) == index(k)).count();
        let longer: Vec<Item<K>> = rest[..n].iter().copied().filter(|i| i.1 > end).collect();
        if !longer.is_empty() {
            let i = index(k);
            entries[i] = build(place, k & K::prefix_mask(end), end, answers[i], &longer);
        }
        rest = &rest[n..];
    }
    if entries.iter().all(|e| *e == entries[0]) && matches!(entries[0], Entry::Leaf(_)) {
        return entries[0];
    }
    Entry::Direct(new_direct(place, bits, &entries), bits)
}

/// Bits a skip node must save before it replaces nodes: it costs one load, as a node does,
/// so it pays once it spares two.
const SKIP_AT_LEAST: u8 = 2 * STRIDE;

/// A skip node for the region `key/depth` if all its `items` lie below one prefix at least
/// [`SKIP_AT_LEAST`] bits longer than `depth`.
fn skip<K: TrieKey>(
    place: &mut Place<'_>,
    key: K,
    depth: u8,
    default: u32,
    items: &[Item<K>],
) -> Option<Entry> {
    // Items are sorted by key: the first and the last share the prefix all of them share.
    let (first, last) = (items.first()?, items.last()?);
    let common = (first.0 ^ last.0)
        .highest_bit()
        .map_or(K::BITS, |b| K::BITS - 1 - b);
    let len = items.iter().map(|i| i.1).fold(common, u8::min);
    if len < depth + SKIP_AT_LEAST {
        return None;
    }
    let prefix = first.0 & K::prefix_mask(len);
    debug_assert_eq!((prefix ^ key) & K::prefix_mask(depth), K::ZERO);
    // An item of exactly `len` bits (at most one: they all share those bits) answers for
    // the keys below the skip that no longer item covers.
    let inner = items.iter().find(|i| i.1 == len).map_or(default, |i| i.2);
    let longer: Vec<Item<K>> = items.iter().copied().filter(|i| i.1 > len).collect();
    let next = build(place, prefix, len, inner, &longer);
    Some(Entry::Skip(new_skip(place, prefix, len, default, next)))
}
