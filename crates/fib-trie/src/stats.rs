//! Shape statistics of a trie, like `/proc/net/fib_triestat`.
#![forbid(unsafe_code)]

use crossbeam_epoch::Guard;
use std::fmt;

use crate::guard::check_guard;
use crate::key::TrieKey;
use crate::node::{NodeRef, load, node_bytes};
use crate::trie::LcTrie;

/// The shape of one trie: depth, node counts and memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrieStats {
    /// Mean number of tnodes above a leaf.
    pub avg_depth: f64,
    /// Most tnodes above any leaf.
    pub max_depth: usize,
    /// Leaves (distinct prefix addresses).
    pub leaves: usize,
    /// Aliases (prefixes) over all leaves.
    pub prefixes: usize,
    /// Inner nodes.
    pub tnodes: usize,
    /// `tnodes_by_bits[b]`: inner nodes with `2^b` children.
    pub tnodes_by_bits: Vec<usize>,
    /// Empty child slots over all tnodes.
    pub null_pointers: usize,
    /// Bytes of heap the trie takes: tnodes with their child slots, leaves with their aliases,
    /// and the direct table once built (not counting allocator overhead or what the alias
    /// values own).
    pub bytes: usize,
}

impl<K: TrieKey, V: Send + Sync + 'static> LcTrie<K, V> {
    /// Walks the trie and measures it (`trie_collect_stats`).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn stats(&self, guard: &Guard) -> TrieStats {
        check_guard(guard);
        let mut s = TrieStats::default();
        let mut depth_sum = 0usize;
        if let Some(root) = self.root(guard) {
            walk(root, 0, guard, &mut s, &mut depth_sum);
        }
        s.bytes += self.direct_bytes();
        if s.leaves > 0 {
            s.avg_depth = depth_sum as f64 / s.leaves as f64;
        }
        s
    }
}

fn walk<K: TrieKey, V>(
    n: NodeRef<'_, K, V>,
    depth: usize,
    guard: &Guard,
    s: &mut TrieStats,
    depth_sum: &mut usize,
) {
    s.bytes += node_bytes(n);
    if n.is_leaf() {
        s.leaves += 1;
        s.prefixes += n.aliases().len();
        *depth_sum += depth;
        s.max_depth = s.max_depth.max(depth);
        return;
    }
    s.tnodes += 1;
    let bits = usize::from(n.bits);
    if s.tnodes_by_bits.len() <= bits {
        s.tnodes_by_bits.resize(bits + 1, 0);
    }
    s.tnodes_by_bits[bits] += 1;
    for slot in n.children() {
        match load(slot, guard) {
            Some(c) => walk(c, depth + 1, guard, s, depth_sum),
            None => s.null_pointers += 1,
        }
    }
}

impl fmt::Display for TrieStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\tAver depth:     {:.2}", self.avg_depth)?;
        writeln!(f, "\tMax depth:      {}", self.max_depth)?;
        writeln!(f, "\tLeaves:         {}", self.leaves)?;
        writeln!(f, "\tPrefixes:       {}", self.prefixes)?;
        writeln!(f, "\tInternal nodes: {}", self.tnodes)?;
        let by_bits: Vec<String> = self
            .tnodes_by_bits
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(b, n)| format!("{b}: {n}"))
            .collect();
        writeln!(f, "\t  {}", by_bits.join("  "))?;
        writeln!(
            f,
            "\tPointers: {}",
            self.tnodes_by_bits
                .iter()
                .enumerate()
                .map(|(b, n)| n << b)
                .sum::<usize>()
        )?;
        writeln!(f, "Null ptrs: {}", self.null_pointers)?;
        writeln!(f, "Total size: {}  kB", self.bytes.div_ceil(1024))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_small_trie() {
        let trie = LcTrie::<u32, ()>::new();
        let guard = &crossbeam_epoch::pin();
        assert_eq!(trie.stats(guard), TrieStats::default());
        trie.insert(0, 0, ()).unwrap();
        trie.insert(0, 8, ()).unwrap();
        trie.insert(0x8000_0000, 1, ()).unwrap();
        let s = trie.stats(guard);
        assert_eq!((s.leaves, s.prefixes, s.tnodes, s.max_depth), (2, 3, 1, 1));
        assert_eq!(s.avg_depth, 1.0);
        // A binary tnode (16-byte head, two 8-byte slots) and two leaves (at least 8 bytes each).
        assert!(s.bytes >= 32 + 2 * 8, "{}", s.bytes);
        assert!(s.to_string().contains("Prefixes:       3"));
    }
}
