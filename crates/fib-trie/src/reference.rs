//! The test oracle and benchmark baseline: one hash map per prefix length, probed from the
//! longest length down. Obviously correct, and fast enough to check a million lookups on a full
//! table in seconds.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use crate::key::TrieKey;
use crate::trie::{PrefixError, check_prefix};

/// A naive longest-prefix-match table: `by_len[plen]` maps a network address to its values,
/// in insertion order.
///
/// ```
/// use fib_trie::ReferenceLpm;
///
/// let mut r = ReferenceLpm::<u32, u8>::new();
/// r.insert(0, 0, 1)?;
/// r.insert(0x0a00_0000, 8, 2)?;
/// assert_eq!(r.lookup(0x0a01_0101, |_| true), Some((0x0a00_0000, 8, &2)));
/// assert_eq!(r.lookup(0x0b00_0000, |_| true), Some((0, 0, &1)));
/// # Ok::<(), fib_trie::PrefixError>(())
/// ```
#[derive(Clone, Debug)]
pub struct ReferenceLpm<K, V> {
    by_len: Vec<HashMap<K, Vec<V>>>,
}

impl<K: TrieKey, V> Default for ReferenceLpm<K, V> {
    fn default() -> Self {
        ReferenceLpm {
            by_len: (0..=K::BITS).map(|_| HashMap::new()).collect(),
        }
    }
}

impl<K: TrieKey, V> ReferenceLpm<K, V> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `value` to the values of `key/plen`.
    ///
    /// # Errors
    /// [`PrefixError`] when `key/plen` is not a canonical prefix.
    pub fn insert(&mut self, key: K, plen: u8, value: V) -> Result<(), PrefixError> {
        check_prefix(key, plen)?;
        self.by_len[usize::from(plen)]
            .entry(key)
            .or_default()
            .push(value);
        Ok(())
    }

    /// Removes every value of `key/plen`; returns how many there were.
    ///
    /// # Errors
    /// [`PrefixError`] when `key/plen` is not a canonical prefix.
    pub fn remove(&mut self, key: K, plen: u8) -> Result<usize, PrefixError> {
        check_prefix(key, plen)?;
        Ok(self.by_len[usize::from(plen)]
            .remove(&key)
            .map_or(0, |v| v.len()))
    }

    /// The values of exactly `key/plen`, mutable (empty lists are removed on the next lookup
    /// of nothing; callers should not leave them).
    pub fn values_mut(&mut self, key: K, plen: u8) -> Option<&mut Vec<V>> {
        self.by_len.get_mut(usize::from(plen))?.get_mut(&key)
    }

    /// Every prefix with its values.
    pub fn iter(&self) -> impl Iterator<Item = (K, u8, &[V])> {
        self.by_len
            .iter()
            .enumerate()
            .flat_map(|(plen, map)| map.iter().map(move |(k, v)| (*k, plen as u8, v.as_slice())))
    }

    /// The longest prefix covering `key` with a value `accept` takes (the first such value of
    /// that prefix): `(network, plen, value)`.
    pub fn lookup<'a>(
        &'a self,
        key: K,
        mut accept: impl FnMut(&'a V) -> bool,
    ) -> Option<(K, u8, &'a V)> {
        for plen in (0..=K::BITS).rev() {
            let map = &self.by_len[usize::from(plen)];
            if map.is_empty() {
                continue;
            }
            let net = key & K::prefix_mask(plen);
            if let Some(values) = map.get(&net) {
                if let Some(v) = values.iter().find(|v| accept(v)) {
                    return Some((net, plen, v));
                }
            }
        }
        None
    }
}
