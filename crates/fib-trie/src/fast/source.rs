//! An [`LcTrie`] of `u32` values as a [`PrefixSource`]: each prefix answers with the value of
//! its first alias, as [`LcTrie::lookup`] with an accept-all filter does.

use crossbeam_epoch as epoch;

use super::PrefixSource;
use crate::key::TrieKey;
use crate::trie::LcTrie;

impl<K: TrieKey> PrefixSource<K> for &LcTrie<K, u32> {
    fn covering(&mut self, key: K, plen: u8) -> Option<u32> {
        let guard = &epoch::pin();
        self.search_alias(key, guard, |a| K::BITS - a.slen <= plen)
            .map(|(_, a)| a.value)
    }

    fn within(&mut self, key: K, plen: u8, out: &mut Vec<(K, u8, u32)>) {
        let guard = &epoch::pin();
        self.for_each_within(key, plen, guard, |leaf, aliases| {
            // Aliases are sorted longest prefix first; one answer per length, the first
            // alias of that length, shortest length first.
            for group in aliases.chunk_by(|a, b| a.slen == b.slen).rev() {
                let len = K::BITS - group[0].slen;
                if len > plen {
                    out.push((leaf, len, group[0].value));
                }
            }
        });
    }

    fn prefix_count(&self) -> usize {
        self.alias_count()
    }
}
