//! The direct-indexed fallback table: for each block of addresses sharing the top
//! [`DIRECT_BITS`] bits (a "slot", a /16 for IPv4), the leaf holding the longest prefix that
//! covers the whole block (a prefix of length at most `DIRECT_BITS`), or nothing.
//!
//! It replaces the expensive end of the kernel's backtracking. Stripping the key bit at position
//! `b` from a child index only finds prefixes with a suffix length above `b`; so once the next
//! strip is at `b >= BITS - DIRECT_BITS - 1`, all that is left are prefixes of length at most
//! `DIRECT_BITS`, which cover the key's whole slot, met longest first (the kernel's
//! backtracking meets covering prefixes in order of decreasing length); the longest of them is
//! what the slot's entry names. So the lookup stops backtracking there and reads one entry
//! instead of probing several siblings in the (multi-megabyte) root. If the caller's filter
//! refuses the entry's alias, the lookup starts over the kernel's way without the shortcut, so
//! answers never change.
//!
//! The table holds pointers to leaves that are in the trie. The writer keeps it up to date on
//! every change of a leaf that has (or had) a prefix of length at most `DIRECT_BITS`: after the
//! new leaf is linked and before the old one is retired, so an entry never names a freed leaf,
//! and a racing reader sees the old or the new leaf, each a consistent version.
//!
//! Beside each entry, a "final" bit says that no prefix longer than `DIRECT_BITS` lies inside
//! the slot. Then every prefix covering a key of the slot covers the whole slot, and the longest
//! of them is the entry's: a lookup whose slot is final answers from the entry without walking
//! the trie at all (on bgp-full-v4, 61% of the IPv4 space). The writer counts the longer
//! prefixes of each slot; it clears the bit before linking a slot's first one and sets it after
//! unlinking its last, so a reader that trusts the bit answers as before or after the change.
//! The bits take 8 KiB, so they stay in the first-level cache.
//!
//! Small tries do without: the table (512 KiB) is built, complete, and published once the trie
//! reaches [`DIRECT_MIN_LEAVES`] leaves; until then lookups backtrack the kernel's way.
#![forbid(unsafe_code)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::Guard;

use crate::key::TrieKey;
use crate::node::{Alias, Child, NodeRef, load};

/// The top key bits that index the table: 2^16 entries of 8 bytes (512 KiB). Under Miri and
/// in fuzz builds (`cfg(fuzzing)`, set by cargo-fuzz), 8: the interpreter is too slow to build
/// and update a 2^16-entry table in the unit tests, and a fuzz input that changes a short
/// prefix rewrote up to 65,536 entries (each with the sanitizers' coverage callbacks: `fib_ops`
/// ran at 4 inputs per second); the code paths are the same.
pub const DIRECT_BITS: u8 = if cfg!(any(miri, fuzzing)) { 8 } else { 16 };

/// The leaf count at which a trie builds its direct table.
pub const DIRECT_MIN_LEAVES: usize = 4096;

/// The suffix length from which a prefix covers whole slots (`slen >= cut`).
#[inline(always)]
pub(crate) fn cut<K: TrieKey>() -> u8 {
    K::BITS - DIRECT_BITS
}

/// The slot of `key`.
#[inline(always)]
pub(crate) fn slot_of<K: TrieKey>(key: K) -> usize {
    key.shr(cut::<K>()).low_usize()
}

/// The readers' half: one entry and one final bit per slot, published once (complete) and
/// freed with the trie.
pub(crate) struct Direct<K, V> {
    table: OnceLock<Table<K, V>>,
}

/// The entries and the final bits (bit `s % 64` of word `s / 64` for slot `s`).
pub(crate) struct Table<K, V> {
    entries: Box<[Child<K, V>]>,
    finals: Box<[AtomicU64]>,
}

impl<K: TrieKey, V> Table<K, V> {
    /// The entry of `key`'s slot.
    #[inline(always)]
    pub(crate) fn entry(&self, key: K) -> Option<&Child<K, V>> {
        self.entries.get(slot_of(key))
    }

    /// Whether no prefix longer than [`DIRECT_BITS`] lies inside `key`'s slot.
    #[inline(always)]
    pub(crate) fn is_final(&self, key: K) -> bool {
        let s = slot_of(key);
        self.finals
            .get(s / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (s % 64)) != 0)
    }

    fn set_final(&self, s: usize, on: bool) {
        let bit = 1u64 << (s % 64);
        if on {
            self.finals[s / 64].fetch_or(bit, Ordering::Release);
        } else {
            self.finals[s / 64].fetch_and(!bit, Ordering::Release);
        }
    }
}

impl<K, V> Default for Direct<K, V> {
    fn default() -> Self {
        Direct {
            table: OnceLock::new(),
        }
    }
}

impl<K: TrieKey, V> Direct<K, V> {
    /// Whether the table is built (lookups may then stop at the cut).
    #[inline(always)]
    pub(crate) fn is_enabled(&self) -> bool {
        self.table.get().is_some()
    }

    /// The table, once built.
    #[inline(always)]
    pub(crate) fn table(&self) -> Option<&Table<K, V>> {
        self.table.get()
    }

    /// The table's size in bytes (0 before it is built).
    pub(crate) fn bytes(&self) -> usize {
        self.table.get().map_or(0, |t| {
            std::mem::size_of_val::<[Child<K, V>]>(&t.entries)
                + std::mem::size_of_val::<[AtomicU64]>(&t.finals)
        })
    }
}

/// The first alias of `leaf` that covers the whole slot of `key` (and so `key`): the longest
/// prefix of length at most [`DIRECT_BITS`] there.
#[inline(always)]
pub(crate) fn covering<'g, K: TrieKey, V: 'g>(
    leaf: NodeRef<'g, K, V>,
    key: K,
) -> Option<&'g Alias<V>> {
    let diff = key ^ leaf.key;
    let cut = cut::<K>();
    leaf.aliases()
        .iter()
        .find(|a| a.slen >= cut && diff.shr(a.slen) == K::ZERO)
}

/// The writer's half: the prefix length each entry stands for (meaningless where null), and
/// each slot's count of prefixes longer than [`DIRECT_BITS`].
#[derive(Default)]
pub(crate) struct DirectWriter {
    plen: Vec<u8>,
    deep: Vec<u32>,
}

/// The number of aliases of `leaf` longer than [`DIRECT_BITS`] (inside one slot).
pub(crate) fn deep_count<K: TrieKey, V>(aliases: &[Alias<V>]) -> u32 {
    let cut = cut::<K>();
    aliases.iter().filter(|a| a.slen < cut).count() as u32
}

/// The suffix lengths of `leaf`'s aliases that cover whole slots, in order.
fn slot_slens<'a, K: TrieKey, V>(leaf: Option<NodeRef<'a, K, V>>) -> impl Iterator<Item = u8> + 'a {
    let cut = cut::<K>();
    leaf.into_iter()
        .flat_map(|l| l.aliases().iter().map(|a| a.slen))
        .filter(move |&s| s >= cut)
}

/// The slots a prefix of suffix length `slen >= cut` at `key` covers.
fn slots<K: TrieKey>(key: K, slen: u8) -> std::ops::Range<usize> {
    let first = slot_of(key);
    first..first + (1usize << (slen - cut::<K>()))
}

impl DirectWriter {
    /// Builds and publishes the table from `leaves` (every leaf of the trie). Writer only; a
    /// no-op when already built.
    pub(crate) fn enable<'g, K: TrieKey, V: 'g>(
        &mut self,
        direct: &Direct<K, V>,
        leaves: impl IntoIterator<Item = NodeRef<'g, K, V>>,
        guard: &'g Guard,
    ) {
        direct.table.get_or_init(|| {
            let entries: Box<[Child<K, V>]> = (0..1usize << DIRECT_BITS)
                .map(|_| Child::new(std::ptr::null_mut()))
                .collect();
            self.plen = vec![0; entries.len()];
            self.deep = vec![0; entries.len()];
            for leaf in leaves {
                self.deep[slot_of(leaf.key)] += deep_count::<K, V>(leaf.aliases());
                if leaf.slen() >= cut::<K>() {
                    self.offer(&entries, leaf, guard);
                }
            }
            let finals = self
                .deep
                .chunks(64)
                .map(|c| {
                    let bits = c
                        .iter()
                        .enumerate()
                        .fold(0u64, |w, (i, &d)| w | (u64::from(d == 0) << i));
                    AtomicU64::new(bits)
                })
                .collect();
            Table { entries, finals }
        });
    }

    /// Fills the table from the leaves of a bulk load into an empty trie (every leaf of the
    /// new trie, before its root is published): builds it as [`enable`](Self::enable) does,
    /// or, when it was built before the trie was emptied (its entries are then all null and
    /// its counts zero), counts and offers each leaf as single inserts would have. Writer only.
    pub(crate) fn load<'g, K: TrieKey, V: 'g>(
        &mut self,
        direct: &Direct<K, V>,
        leaves: impl IntoIterator<Item = NodeRef<'g, K, V>>,
        guard: &'g Guard,
    ) {
        let Some(table) = direct.table.get() else {
            return self.enable(direct, leaves, guard);
        };
        for leaf in leaves {
            let deep = deep_count::<K, V>(leaf.aliases());
            if deep > 0 {
                let s = slot_of(leaf.key);
                if self.deep[s] == 0 {
                    table.set_final(s, false);
                }
                self.deep[s] += deep;
            }
            if leaf.slen() >= cut::<K>() {
                self.offer(&table.entries, leaf, guard);
            }
        }
    }

    /// Before the leaf at `key` changes from `old_deep` to `new_deep` aliases longer than
    /// [`DIRECT_BITS`]: counts the added ones, and clears the slot's final bit when it gains
    /// its first (before the prefix can be seen).
    pub(crate) fn before_change<K: TrieKey, V>(
        &mut self,
        direct: &Direct<K, V>,
        key: K,
        old_deep: u32,
        new_deep: u32,
    ) {
        let Some(table) = direct.table.get() else {
            return;
        };
        if new_deep > old_deep {
            let s = slot_of(key);
            if self.deep[s] == 0 {
                table.set_final(s, false);
            }
            self.deep[s] += new_deep - old_deep;
        }
    }

    /// After the change [`before_change`](Self::before_change) announced is published: counts
    /// the removed ones, and sets the final bit when the slot lost its last.
    pub(crate) fn after_change<K: TrieKey, V>(
        &mut self,
        direct: &Direct<K, V>,
        key: K,
        old_deep: u32,
        new_deep: u32,
    ) {
        let Some(table) = direct.table.get() else {
            return;
        };
        if new_deep < old_deep {
            let s = slot_of(key);
            self.deep[s] -= old_deep - new_deep;
            if self.deep[s] == 0 {
                table.set_final(s, true);
            }
        }
    }

    /// Makes `leaf` the entry of every slot where it holds a longer slot-wide prefix than the
    /// current entry (another leaf, or none).
    fn offer<'g, K: TrieKey, V: 'g>(
        &mut self,
        table: &[Child<K, V>],
        leaf: NodeRef<'g, K, V>,
        guard: &'g Guard,
    ) {
        // Longest prefix first: each covers its own range minus the ranges already done
        // (all of them share the leaf's key, so the ranges nest and start at the same slot).
        let mut done = slot_of(leaf.key)..slot_of(leaf.key);
        for slen in slot_slens(Some(leaf)) {
            let plen = K::BITS - slen;
            let range = slots(leaf.key, slen);
            let entries = table[done.end..range.end].iter();
            for (entry, known) in entries.zip(&mut self.plen[done.end..range.end]) {
                if load(entry, guard).is_none() || plen > *known {
                    store(entry, Some(leaf));
                    *known = plen;
                }
            }
            done = range;
        }
    }

    /// Brings the table up to date after the leaf at `key` changed from `old` to `new` (either
    /// may be absent). Call after `new` is linked and before `old` is retired. `shorter(key,
    /// plen)` finds, in the trie as it now is, the leaf and alias of the longest slot-wide
    /// prefix shorter than `plen` covering `key`.
    pub(crate) fn update<'g, K: TrieKey, V: 'g>(
        &mut self,
        direct: &Direct<K, V>,
        key: K,
        old: Option<NodeRef<'g, K, V>>,
        new: Option<NodeRef<'g, K, V>>,
        guard: &'g Guard,
        mut shorter: impl FnMut(K, u8) -> Option<(NodeRef<'g, K, V>, &'g Alias<V>)>,
    ) {
        let Some(Table { entries: table, .. }) = direct.table.get() else {
            return;
        };
        let Some(old) = old.filter(|_| slot_slens(old).next().is_some()) else {
            // Nothing named the old leaf: the new one only competes with the entries.
            if let Some(new) = new {
                self.offer(table, new, guard);
            }
            return;
        };
        if slot_slens(Some(old)).eq(slot_slens(new)) {
            // Same slot-wide prefixes (values or longer prefixes changed): entries naming the
            // old leaf move to the new one; elsewhere it still loses.
            let widest = slot_slens(Some(old)).last().unwrap_or(cut::<K>());
            for s in slots(key, widest) {
                if load(&table[s], guard) == Some(old) {
                    store(&table[s], new);
                }
            }
            return;
        }
        // Slots naming the old leaf had its alias of length `plen[s]` as their best; now it is
        // the best of the new leaf's covering alias and the longest shorter prefix elsewhere,
        // which is the same for every slot with that `plen` (one search each).
        let widest = slot_slens(Some(old)).last().unwrap_or(cut::<K>());
        let mut memo: Vec<(u8, Best<'g, K, V>)> = Vec::new();
        for s in slots(key, widest) {
            if load(&table[s], guard) != Some(old) {
                continue;
            }
            let was = self.plen[s];
            let elsewhere = match memo.iter().find(|(p, _)| *p == was) {
                Some(&(_, found)) => found,
                None => {
                    let found = shorter(key, was).map(|(leaf, a)| (leaf, K::BITS - a.slen));
                    memo.push((was, found));
                    found
                }
            };
            let base = K::from_usize(s).shl(cut::<K>());
            let mine = new.and_then(|n| covering(n, base).map(|a| (n, K::BITS - a.slen)));
            let best = match (mine, elsewhere) {
                (Some(m), Some(e)) => Some(if m.1 >= e.1 { m } else { e }),
                (m, e) => m.or(e),
            };
            match best {
                Some((leaf, plen)) => {
                    store(&table[s], Some(leaf));
                    self.plen[s] = plen;
                }
                None => store(&table[s], None),
            }
        }
        // The new leaf may also have gained slot-wide prefixes wider than the old ones.
        if let Some(new) = new {
            self.offer(table, new, guard);
        }
    }

    /// Checks every entry against `best(slot base)` and every final bit against `deep`, each
    /// slot's count of prefixes longer than [`DIRECT_BITS`] (for tests). Writer only.
    pub(crate) fn check<'g, K: TrieKey, V: 'g>(
        &self,
        direct: &Direct<K, V>,
        guard: &'g Guard,
        deep: &[u32],
        mut best: impl FnMut(K) -> Option<(NodeRef<'g, K, V>, &'g Alias<V>)>,
    ) -> Result<(), String> {
        let Some(table) = direct.table.get() else {
            return Ok(());
        };
        for (s, entry) in table.entries.iter().enumerate() {
            let base = K::from_usize(s).shl(cut::<K>());
            let want = best(base);
            let got = load(entry, guard);
            if got != want.map(|(leaf, _)| leaf) {
                return Err(format!("direct entry {s} names the wrong leaf"));
            }
            if let Some((_, alias)) = want {
                if self.plen[s] != K::BITS - alias.slen {
                    return Err(format!("direct entry {s} has the wrong length"));
                }
            }
            if self.deep[s] != deep[s] {
                return Err(format!(
                    "slot {s} counts {} deep prefixes, not {}",
                    self.deep[s], deep[s]
                ));
            }
            if table.is_final(base) != (deep[s] == 0) {
                return Err(format!("slot {s} has the wrong final bit"));
            }
        }
        Ok(())
    }
}

/// A slot's best leaf and the length of its covering prefix, if any.
type Best<'g, K, V> = Option<(NodeRef<'g, K, V>, u8)>;

fn store<K: TrieKey, V>(entry: &Child<K, V>, leaf: Option<NodeRef<'_, K, V>>) {
    entry.store(
        leaf.map_or(std::ptr::null_mut(), NodeRef::as_ptr),
        Ordering::Release,
    );
}
