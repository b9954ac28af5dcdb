//! The LC-trie itself: lock-free lookup with suffix-length backtracking, and the single writer's
//! insert/remove with the kernel's resize (inflate, halve, collapse).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Guard};

use crate::direct::{DIRECT_MIN_LEAVES, Direct, DirectWriter, covering, deep_count};
use crate::guard::check_guard;
use crate::key::TrieKey;
use crate::node::{Alias, Child, NodeRef, load};

/// Inflate a non-root tnode when `50 * (nonempty + full) >= INFLATE_THRESHOLD * 2^bits`.
///
/// This is the LC-trie paper's rule restated: after doubling, a full child contributes two
/// children and every other non-empty child one, and the doubled node (of `2^(bits+1)` slots)
/// should be at least half used: `100 * (nonempty + full) >= 50 * 2 * 2^bits`.
pub const INFLATE_THRESHOLD: usize = 50;
/// The inflate threshold of the root tnode, lower so the root grows wider (fewer levels).
pub const INFLATE_THRESHOLD_ROOT: usize = 30;
/// Halve a non-root tnode when `100 * nonempty < HALVE_THRESHOLD * 2^bits` (and `bits > 1`).
pub const HALVE_THRESHOLD: usize = 25;
/// The halve threshold of the root tnode.
pub const HALVE_THRESHOLD_ROOT: usize = 15;
/// The most inflate or halve steps one resize of one tnode performs (the kernel's `MAX_WORK`).
pub const MAX_WORK: usize = 10;

/// Room for the backtrack points of one lookup: a path holds at most one tnode per key bit.
const MAX_DEPTH: usize = 128;

/// A prefix found by a lookup: the leaf key, the prefix length and the accepted alias value.
#[derive(Debug, PartialEq, Eq)]
pub struct Match<'g, K, V> {
    /// The prefix's network address (the leaf's key).
    pub key: K,
    /// The prefix length.
    pub plen: u8,
    /// The value of the first alias the lookup accepted.
    pub value: &'g V,
}

impl<K: Copy, V> Clone for Match<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Copy, V> Copy for Match<'_, K, V> {}

/// What a lookup does next (the kernel's lookup is three loops joined by `goto`s).
enum Step<'g, K, V> {
    /// In "prefix match" mode: check this node and keep descending through child 0.
    Check(NodeRef<'g, K, V>),
    /// Try the aliases of this leaf.
    Leaf(NodeRef<'g, K, V>),
    /// Strip the lowest set bit of the deepest backtrack point's child index, or climb.
    Backtrack,
}

/// The backtrack points of one lookup: the tnodes passed with `slen > pos` and the child index
/// taken at each. A fixed array left uninitialized (only `points[..len]` is ever read), so a
/// lookup neither allocates nor clears it.
struct Backtrack<'g, K, V> {
    points: [MaybeUninit<(NodeRef<'g, K, V>, usize)>; MAX_DEPTH],
    len: usize,
}

impl<'g, K: TrieKey, V> Backtrack<'g, K, V> {
    #[inline(always)]
    fn new() -> Self {
        Backtrack {
            points: [const { MaybeUninit::uninit() }; MAX_DEPTH],
            len: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, node: NodeRef<'g, K, V>, index: usize) {
        // A path has at most one tnode per key bit, so this never fills up.
        if let Some(slot) = self.points.get_mut(self.len) {
            slot.write((node, index));
            self.len += 1;
        }
    }

    /// Strips one bit at the deepest point that still has one, climbing past exhausted ones,
    /// and returns the tnode and the new child index; [`Strip::Cut`] instead when what that
    /// strip can find has a suffix length of at least `cut`.
    ///
    /// Stripping the bit at key position `b` only finds prefixes with `slen > b` (the key has a
    /// one there, the prefixes found a zero). So a point whose subtree holds no suffix length
    /// above `b` (`slen <= b`) has nothing left to give and is dropped at once: later strips
    /// there clear higher bits still.
    #[inline(always)]
    fn next(&mut self, cut: u32) -> Strip<'g, K, V> {
        while self.len > 0 {
            // SAFETY: `points[..len]` were written by `push`.
            let (node, index) = unsafe { self.points[self.len - 1].assume_init_mut() };
            let bit = u32::from(node.pos) + index.trailing_zeros();
            if *index == 0 || u32::from(node.slen()) <= bit {
                self.len -= 1;
                continue;
            }
            if bit + 1 >= cut {
                return Strip::Cut;
            }
            *index &= *index - 1;
            return Strip::Next(*node, *index);
        }
        Strip::Exhausted
    }
}

/// What [`Backtrack::next`] found.
enum Strip<'g, K, V> {
    /// Look in this tnode's child at this index.
    Next(NodeRef<'g, K, V>, usize),
    /// The next strip could only find slot-wide prefixes (`slen >= cut`): the direct table's.
    Cut,
    /// Every backtrack point is used up: no prefix is left.
    Exhausted,
}

/// How a [`LcTrie::search`] ended.
enum Found<'g, K, V> {
    /// This leaf's alias was accepted.
    Hit(NodeRef<'g, K, V>, &'g Alias<V>),
    /// No prefix left.
    Miss,
    /// Stopped at the cut (only with the shortcut).
    Cut,
}

/// A Linux fib_trie-style level-compressed trie mapping prefixes of `K` to alias lists of `V`.
///
/// Readers call [`lookup`](Self::lookup) under a pinned `crossbeam_epoch::Guard` and never lock;
/// the trie's one writer, a [`TrieWriter`](crate::TrieWriter), publishes every change with one
/// atomic pointer store per changed subtree. A shared `LcTrie` has no method that changes it.
///
/// ```
/// use fib_trie::TrieWriter;
///
/// let mut writer = TrieWriter::<u32, &str>::new();
/// writer.insert(0x0a00_0000, 8, "ten")?;
/// writer.insert(0x0a01_0000, 16, "ten-one")?;
/// let trie = writer.reader().clone(); // an `Arc<LcTrie>`, for the readers
/// let guard = crossbeam_epoch::pin();
/// let m = trie.lookup(0x0a01_0203, &guard, |_| true).unwrap();
/// assert_eq!((m.plen, *m.value), (16, "ten-one"));
/// assert_eq!(*trie.lookup(0x0a02_0000, &guard, |_| true).unwrap().value, "ten");
/// # Ok::<(), fib_trie::PrefixError>(())
/// ```
///
/// A trie is shared between threads only if its values are `Send + Sync` (readers on any thread
/// borrow them; the collector may drop them on any thread):
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<fib_trie::LcTrie<u32, std::rc::Rc<u32>>>();
/// ```
#[repr(C, align(128))]
pub struct LcTrie<K: TrieKey, V> {
    root: Child<K, V>,
    /// The fallback leaf of each top-bits slot (see `direct`).
    direct: Direct<K, V>,
    /// What only writers change, on cache lines of its own: a writer taking the lock or
    /// counting a leaf must not evict the line every lookup reads (`root`, `direct`) from the
    /// readers' caches (that false sharing made lookups several times slower while a writer
    /// ran).
    side: WriterSide,
}

/// The writer's lock and the counters, apart from the readers' fields.
#[repr(align(128))]
struct WriterSide {
    writer: Mutex<DirectWriter>,
    leaves: AtomicUsize,
    aliases: AtomicUsize,
}

// SAFETY: the nodes are reached through raw atomic pointers, which would make the trie `Send`
// and `Sync` whatever `V` is. Values are borrowed by readers on any thread (`Sync`) and
// dropped by the writer or the epoch collector on any thread (`Send`), so both are required of
// `V`; the keys are plain integers.
unsafe impl<K: TrieKey, V: Send + Sync> Send for LcTrie<K, V> {}
// SAFETY: as above.
unsafe impl<K: TrieKey, V: Send + Sync> Sync for LcTrie<K, V> {}

/// Why a prefix was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The prefix length exceeds the address width.
    #[error("prefix length {plen} exceeds {bits} bits")]
    TooLong {
        /// The length given.
        plen: u8,
        /// The address width.
        bits: u8,
    },
    /// The address has bits set past the prefix length (it is not the network address).
    #[error("address has host bits set past /{plen}")]
    HostBits {
        /// The length given.
        plen: u8,
    },
}

/// Checks that `key/plen` is a canonical prefix and returns its suffix length.
pub fn check_prefix<K: TrieKey>(key: K, plen: u8) -> Result<u8, PrefixError> {
    if plen > K::BITS {
        return Err(PrefixError::TooLong {
            plen,
            bits: K::BITS,
        });
    }
    if key & !K::prefix_mask(plen) != K::ZERO {
        return Err(PrefixError::HostBits { plen });
    }
    Ok(K::BITS - plen)
}

impl<K: TrieKey, V> LcTrie<K, V> {
    /// An empty trie (its writer: [`TrieWriter::new`](crate::TrieWriter::new)).
    pub(crate) fn new() -> Self {
        LcTrie {
            root: Child::new(std::ptr::null_mut()),
            direct: Direct::default(),
            side: WriterSide {
                writer: Mutex::new(DirectWriter::default()),
                leaves: AtomicUsize::new(0),
                aliases: AtomicUsize::new(0),
            },
        }
    }
}

impl<K: TrieKey, V> std::fmt::Debug for LcTrie<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LcTrie")
            .field("leaves", &self.leaf_count())
            .field("aliases", &self.alias_count())
            .finish()
    }
}

/// Where a node hangs: the root, or child `index` of a tnode.
struct Slot<'g, K, V> {
    parent: Option<NodeRef<'g, K, V>>,
    index: usize,
}

impl<K, V> Clone for Slot<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for Slot<'_, K, V> {}

impl<K: TrieKey, V> LcTrie<K, V> {
    /// The number of leaves (distinct prefix addresses).
    pub fn leaf_count(&self) -> usize {
        self.side.leaves.load(Ordering::Relaxed)
    }

    /// The number of aliases (prefix entries) over all leaves.
    pub fn alias_count(&self) -> usize {
        self.side.aliases.load(Ordering::Relaxed)
    }

    /// Whether the trie holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.leaf_count() == 0
    }
}

impl<K: TrieKey, V: Send + Sync + 'static> LcTrie<K, V> {
    pub(crate) fn root<'g>(&self, guard: &'g Guard) -> Option<NodeRef<'g, K, V>> {
        load(&self.root, guard)
    }

    /// Longest-prefix match (`fib_table_lookup`): the longest prefix covering `key` that has an
    /// alias `accept` takes; aliases of one leaf are offered longest prefix first, in list order.
    ///
    /// Never locks, never allocates. `accept` may be called on aliases that turn out not to be the
    /// answer only if it returned `false` for them.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn lookup<'g, F>(&self, key: K, guard: &'g Guard, accept: F) -> Option<Match<'g, K, V>>
    where
        F: FnMut(&'g V) -> bool,
    {
        check_guard(guard);
        self.lookup_pinned(key, guard, accept)
    }

    /// [`lookup`](Self::lookup) under a guard the caller already checked.
    #[inline]
    pub(crate) fn lookup_pinned<'g, F>(
        &self,
        key: K,
        guard: &'g Guard,
        mut accept: F,
    ) -> Option<Match<'g, K, V>>
    where
        F: FnMut(&'g V) -> bool,
    {
        // The key's direct-table entry, if the table is built.
        let table = self.direct.table();
        let entry = table.and_then(|t| t.entry(key));
        if let (Some(table), Some(entry)) = (table, entry) {
            if table.is_final(key) {
                // No prefix longer than the slot lies inside it: the entry's is the answer
                // (none when the entry is empty).
                let leaf = load(entry, guard)?;
                if let Some(alias) = covering(leaf, key) {
                    if accept(&alias.value) {
                        return Some(Match {
                            key: leaf.key,
                            plen: K::BITS - alias.slen,
                            value: &alias.value,
                        });
                    }
                    // Refused: search the kernel's way, without the shortcuts.
                    return self.lookup_from_root(key, guard, accept, None);
                }
            }
            // Most lookups that backtrack end at the entry: start loading it now, so its miss
            // overlaps the descent's.
            prefetch(std::ptr::from_ref(entry));
        }
        self.lookup_from_root(key, guard, accept, entry)
    }

    /// [`lookup`](Self::lookup) by descent and backtracking, stopping at the cut when given the
    /// key's direct-table `entry`.
    #[inline(always)]
    fn lookup_from_root<'g, F>(
        &self,
        key: K,
        guard: &'g Guard,
        mut accept: F,
        entry: Option<&Child<K, V>>,
    ) -> Option<Match<'g, K, V>>
    where
        F: FnMut(&'g V) -> bool,
    {
        let found = match self.search(key, guard, |a| accept(&a.value), entry) {
            Found::Hit(leaf, alias) => Some((leaf, alias)),
            Found::Miss => None,
            Found::Cut => {
                // Everything left covers the key's whole slot; the slot's entry names the
                // longest. If the filter refuses it, start over without the shortcut.
                let leaf = load(entry?, guard)?;
                match covering(leaf, key) {
                    Some(alias) if accept(&alias.value) => Some((leaf, alias)),
                    _ => match self.search(key, guard, |a| accept(&a.value), None) {
                        Found::Hit(leaf, alias) => Some((leaf, alias)),
                        Found::Miss | Found::Cut => None,
                    },
                }
            }
        };
        found.map(|(leaf, alias)| Match {
            key: leaf.key,
            plen: K::BITS - alias.slen,
            value: &alias.value,
        })
    }

    /// The kernel's lookup (`fib_table_lookup`): descend, then backtrack. With the key's
    /// direct-table `entry`, stops with [`Found::Cut`] instead of a strip that could only find
    /// slot-wide prefixes.
    #[inline(always)]
    fn search<'g>(
        &self,
        key: K,
        guard: &'g Guard,
        mut accept: impl FnMut(&'g Alias<V>) -> bool,
        entry: Option<&Child<K, V>>,
    ) -> Found<'g, K, V> {
        let cut = if entry.is_some() {
            u32::from(crate::direct::cut::<K>())
        } else {
            u32::MAX
        };
        let mut stack = Backtrack::new();
        let Some(mut node) = load(&self.root, guard) else {
            return Found::Miss;
        };

        // Step 1: descend while the key matches exactly, recording the tnodes whose subtree holds
        // a prefix shorter than the bits they consume (`slen > pos`) as backtrack points.
        let mut step = loop {
            // `pos < BITS` and `bits < BITS` for every node (a tnode has `bits >= 1` and
            // `pos + bits <= BITS`; a leaf has both zero).
            let index = (key ^ node.key).shr_in_width(node.pos);
            if index.shr_in_width(node.bits) != K::ZERO {
                break Step::Check(node);
            }
            if node.is_leaf() {
                break Step::Leaf(node);
            }
            let index = index.low_usize();
            if node.slen() > node.pos {
                stack.push(node, index);
            }
            // SAFETY: `node` is a tnode and `index >> bits == 0` was just checked.
            match unsafe { node.child_unchecked(index, guard) } {
                Some(child) => node = child,
                None => break Step::Backtrack,
            }
        };
        if let Some(entry) = entry.filter(|_| !matches!(step, Step::Leaf(_))) {
            // A backtracking lookup usually ends at the slot's fallback leaf: its entry was
            // prefetched at the start; start loading the leaf too (a hint only: the entry is
            // read again if the cut is reached).
            if let Some(leaf) = load(entry, guard) {
                prefetch(leaf.as_ptr());
            }
        }

        // Step 2: leaves and backtracking.
        loop {
            step = match step {
                Step::Check(n) => {
                    // Bits that differ at or above the node key's lowest set bit cannot be
                    // covered by anything below; a subtree with slen == pos holds no prefix
                    // short enough for a key we reached by stripping a bit.
                    let prefix_mismatch = (key ^ n.key) & (n.key | n.key.wrapping_neg());
                    if prefix_mismatch != K::ZERO || n.slen() == n.pos {
                        Step::Backtrack
                    } else if n.is_leaf() {
                        Step::Leaf(n)
                    } else {
                        // SAFETY: `n` is a tnode; child 0 always exists.
                        match unsafe { n.child_unchecked(0, guard) } {
                            Some(c) => Step::Check(c),
                            None => Step::Backtrack,
                        }
                    }
                }
                Step::Leaf(n) => {
                    let diff = key ^ n.key;
                    for alias in n.aliases() {
                        if diff.shr(alias.slen) != K::ZERO {
                            continue;
                        }
                        if accept(alias) {
                            return Found::Hit(n, alias);
                        }
                    }
                    Step::Backtrack
                }
                Step::Backtrack => loop {
                    let (tn, index) = match stack.next(cut) {
                        Strip::Next(tn, index) => (tn, index),
                        Strip::Cut => return Found::Cut,
                        Strip::Exhausted => return Found::Miss,
                    };
                    // SAFETY: a backtrack point is a tnode, and stripping bits keeps its index
                    // below `2^bits`.
                    if let Some(c) = unsafe { tn.child_unchecked(index, guard) } {
                        break Step::Check(c);
                    }
                },
            };
        }
    }

    /// Looks up `keys.len()` keys, writing each answer into `out` (which must be as long):
    /// the same answers as [`lookup`](Self::lookup), computed in groups of [`BATCH`] whose
    /// descents run in lock step, prefetching every group member's next node before any of them
    /// is read, so the cache misses of independent lookups overlap.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or if `guard` is not from `crossbeam_epoch::pin()` (the
    /// default collector).
    pub fn lookup_batch<'g, F>(
        &self,
        keys: &[K],
        out: &mut [Option<Match<'g, K, V>>],
        guard: &'g Guard,
        mut accept: F,
    ) where
        F: FnMut(&'g V) -> bool,
    {
        assert!(out.len() >= keys.len(), "output shorter than input");
        check_guard(guard);
        let Some(root) = load(&self.root, guard) else {
            out.iter_mut().for_each(|o| *o = None);
            return;
        };
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            // Warm the cache for the first WARM_LEVELS levels of every key's path, in lock
            // step and in half steps: from each node, prefetch the child slot the key selects
            // (and, first, the key's direct-table entry); then read each slot and prefetch the
            // child. Each half step issues one independent miss per key.
            // Keys whose slot is final need only their entry: their paths are not warmed.
            let mut nodes: [Option<NodeRef<'g, K, V>>; BATCH] = [None; BATCH];
            let mut finals = [false; BATCH];
            let table = self.direct.table();
            for ((node, fin), &key) in nodes.iter_mut().zip(&mut finals).zip(keys) {
                *node = Some(root);
                if let Some(table) = table {
                    if let Some(entry) = table.entry(key) {
                        prefetch(std::ptr::from_ref(entry));
                    }
                    *fin = table.is_final(key);
                    if *fin {
                        *node = None;
                    }
                }
            }
            let mut slots: [Option<&'g Child<K, V>>; BATCH] = [None; BATCH];
            for level in 0..WARM_LEVELS {
                if level == 1 {
                    // The final keys' entries have had a half step to arrive: warm their leaves.
                    for (&key, _) in keys.iter().zip(&finals).filter(|(_, f)| **f) {
                        if let Some(leaf) = table
                            .and_then(|t| t.entry(key))
                            .and_then(|e| load(e, guard))
                        {
                            prefetch(leaf.as_ptr());
                        }
                    }
                }
                for ((slot, node), &key) in slots.iter_mut().zip(&nodes).zip(keys) {
                    *slot = node.and_then(|n| {
                        let index = (key ^ n.key).shr(n.pos);
                        if n.is_leaf() || index.shr(n.bits) != K::ZERO {
                            return None;
                        }
                        let slot = &n.children()[index.low_usize()];
                        prefetch(std::ptr::from_ref(slot));
                        Some(slot)
                    });
                }
                for (node, slot) in nodes.iter_mut().zip(&slots) {
                    *node = slot.and_then(|slot| load(slot, guard));
                    if let Some(n) = node {
                        prefetch(n.as_ptr());
                    }
                }
            }
            for (o, &key) in out.iter_mut().zip(keys) {
                *o = self.lookup_pinned(key, guard, &mut accept);
            }
        }
    }

    /// Calls `f` with every leaf key and its aliases, in ascending key order.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn for_each<'g>(&self, guard: &'g Guard, mut f: impl FnMut(K, &'g [Alias<V>])) {
        check_guard(guard);
        if let Some(root) = self.root(guard) {
            walk_leaves(root, guard, &mut f);
        }
    }

    /// Calls `f` with the key and aliases of every leaf whose key lies inside `key/plen`, in
    /// ascending key order (a range of [`for_each`](Self::for_each)).
    pub(crate) fn for_each_within<'g>(
        &self,
        key: K,
        plen: u8,
        guard: &'g Guard,
        mut f: impl FnMut(K, &'g [Alias<V>]),
    ) {
        let mut node = self.root(guard);
        while let Some(n) = node {
            // The bits `n` fixes: all of a leaf's key, a tnode's key above `pos + bits`.
            let fixed = K::BITS - n.pos - n.bits;
            if (n.key ^ key) & K::prefix_mask(fixed.min(plen)) != K::ZERO {
                return;
            }
            if fixed >= plen {
                return walk_leaves(n, guard, &mut f);
            }
            // The region lies inside `n`: it fixes the top `plen - fixed` of its index bits.
            let index = key.shr_in_width(n.pos).low_usize() & ((1 << n.bits) - 1);
            let free = n.bits.saturating_sub(plen - fixed);
            if free == 0 {
                node = n.child(index, guard);
                continue;
            }
            let first = index >> free << free;
            for slot in &n.children()[first..first + (1 << free)] {
                if let Some(c) = load(slot, guard) {
                    walk_leaves(c, guard, &mut f);
                }
            }
            return;
        }
    }

    /// The leaf key and alias the kernel's search finds for `key` with `accept` as the filter
    /// (without the direct table's shortcuts).
    pub(crate) fn search_alias<'g>(
        &self,
        key: K,
        guard: &'g Guard,
        accept: impl FnMut(&'g Alias<V>) -> bool,
    ) -> Option<(K, &'g Alias<V>)> {
        match self.search(key, guard, accept, None) {
            Found::Hit(leaf, alias) => Some((leaf.key, alias)),
            Found::Miss | Found::Cut => None,
        }
    }

    /// The aliases of the leaf with exactly this key (`fib_find_node`), if any.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn get<'g>(&self, key: K, guard: &'g Guard) -> Option<&'g [Alias<V>]> {
        check_guard(guard);
        let mut n = self.root(guard)?;
        loop {
            let index = (key ^ n.key).shr(n.pos);
            if index.shr(n.bits) != K::ZERO {
                return None;
            }
            if n.is_leaf() {
                return Some(n.aliases());
            }
            n = n.child(index.low_usize(), guard)?;
        }
    }

    /// [`TrieWriter::insert`](crate::TrieWriter::insert). Writer only.
    pub(crate) fn insert(&self, key: K, plen: u8, value: V) -> Result<(), PrefixError>
    where
        V: Clone,
    {
        let slen = check_prefix(key, plen)?;
        self.modify(key, |old| {
            let mut new = old.to_vec();
            let at = new.partition_point(|a| a.slen <= slen);
            new.insert(at, Alias { slen, value });
            Ok::<_, PrefixError>(Some(new))
        })
    }

    /// [`TrieWriter::insert_many`](crate::TrieWriter::insert_many). Writer only.
    pub(crate) fn insert_many(
        &self,
        prefixes: impl IntoIterator<Item = (K, u8, V)>,
    ) -> Result<usize, PrefixError>
    where
        V: Clone,
    {
        let mut items = prefixes
            .into_iter()
            .map(|(key, plen, value)| Ok((key, check_prefix(key, plen)?, value)))
            .collect::<Result<Vec<_>, PrefixError>>()?;
        let added = items.len();
        let writer = self.lock();
        let guard = &epoch::pin();
        if self.root(guard).is_some() {
            drop(writer);
            for (key, slen, value) in items {
                self.insert(key, K::BITS - slen, value)?;
            }
            return Ok(added);
        }
        if items.is_empty() {
            return Ok(0);
        }
        // Stable: aliases of one key and length keep their input order, as `insert` would.
        // Route dumps usually come sorted already.
        if !items.is_sorted_by_key(|&(key, slen, _)| (key, slen)) {
            items.sort_by_key(|&(key, slen, _)| (key, slen));
        }
        let mut keys: Vec<(K, usize)> = Vec::new();
        for &(key, _, _) in &items {
            match keys.last_mut() {
                Some((last, count)) if *last == key => *count += 1,
                _ => keys.push((key, 1)),
            }
        }
        let mut aliases = items
            .into_iter()
            .map(|(_, slen, value)| Alias { slen, value });
        let root = crate::bulk::build(&keys, &mut aliases, true, guard);
        if keys.len() >= DIRECT_MIN_LEAVES || self.direct.is_enabled() {
            // Fill the direct table from the new leaves before the root is published (also
            // when it was built before the trie was emptied: it stays built, and empty).
            let mut leaves = Vec::with_capacity(keys.len());
            collect_leaves(root, guard, &mut |leaf| leaves.push(leaf));
            let mut writer = writer;
            writer.load(&self.direct, leaves, guard);
        }
        self.side.leaves.store(keys.len(), Ordering::Relaxed);
        self.side.aliases.store(added, Ordering::Relaxed);
        self.root.store(root.as_ptr(), Ordering::Release);
        Ok(added)
    }

    /// [`TrieWriter::remove`](crate::TrieWriter::remove). Writer only.
    pub(crate) fn remove(&self, key: K, plen: u8) -> Result<usize, PrefixError>
    where
        V: Clone,
    {
        let slen = check_prefix(key, plen)?;
        let mut removed = 0;
        self.modify(key, |old| {
            removed = old.iter().filter(|a| a.slen == slen).count();
            Ok::<_, PrefixError>(
                (removed > 0).then(|| old.iter().filter(|a| a.slen != slen).cloned().collect()),
            )
        })?;
        Ok(removed)
    }

    /// [`TrieWriter::modify`](crate::TrieWriter::modify). Writer only.
    pub(crate) fn modify<E>(
        &self,
        key: K,
        change: impl FnOnce(&[Alias<V>]) -> Result<Option<Vec<Alias<V>>>, E>,
    ) -> Result<(), E> {
        let mut writer = self.lock();
        let guard = &epoch::pin();

        // Find the leaf (or the place for it), recording the path of tnodes.
        let mut path: Vec<(NodeRef<'_, K, V>, usize)> = Vec::new();
        let mut found = self.root(guard);
        while let Some(n) = found {
            let index = (key ^ n.key).shr(n.pos);
            if index.shr(n.bits) != K::ZERO || n.is_leaf() {
                break;
            }
            let index = index.low_usize();
            path.push((n, index));
            found = n.child(index, guard);
        }
        let leaf = found.filter(|n| n.is_leaf() && n.key == key);
        let Some(mut new) = change(leaf.map_or(&[], |l| l.aliases()))? else {
            return Ok(());
        };
        new.retain(|a| a.slen <= K::BITS && key & !K::prefix_mask(K::BITS - a.slen) == K::ZERO);
        new.sort_by_key(|a| a.slen);
        let slot = match path.last() {
            Some(&(parent, index)) => Slot {
                parent: Some(parent),
                index,
            },
            None => Slot {
                parent: None,
                index: 0,
            },
        };
        let old_aliases = leaf.map_or(0, |l| l.aliases().len());
        self.side.aliases.fetch_add(new.len(), Ordering::Relaxed);
        self.side.aliases.fetch_sub(old_aliases, Ordering::Relaxed);
        // The slot's final bit goes off before a longer prefix appears in it, and back on
        // after its last one is gone.
        let old_deep = deep_count::<K, V>(leaf.map_or(&[], |l| l.aliases()));
        let new_deep = deep_count::<K, V>(&new);
        writer.before_change(&self.direct, key, old_deep, new_deep);

        let fresh = match (leaf, new.is_empty()) {
            (None, true) => return Ok(()),
            (Some(old), false) => {
                // Replace the leaf: raise suffixes first, lower them after (readers may see a
                // suffix length that is too large, never one too small).
                let fresh = NodeRef::new_leaf(key, new);
                let (old_slen, new_slen) = (old.slen(), fresh.slen());
                push_suffix(&path, new_slen);
                self.replace_in(slot, Some(fresh), guard);
                if new_slen < old_slen {
                    pull_suffix(&path, old_slen, guard);
                }
                Some(fresh)
            }
            (Some(old), true) => {
                self.replace_in(slot, None, guard);
                self.side.leaves.fetch_sub(1, Ordering::Relaxed);
                self.rebalance(&path, Some(old.slen()), guard);
                None
            }
            (None, false) => {
                // `fib_insert_node`: an empty slot takes the leaf; an occupied one (a node whose
                // key differs above its pos + bits) gets a binary tnode at the highest differing
                // bit, holding both.
                let fresh = NodeRef::new_leaf(key, new);
                push_suffix(&path, fresh.slen());
                self.side.leaves.fetch_add(1, Ordering::Relaxed);
                match found {
                    None => self.replace_in(slot, Some(fresh), guard),
                    Some(other) => {
                        let pos = (key ^ other.key).highest_bit().unwrap_or(0);
                        let tn = NodeRef::new_tnode(key, pos, 1);
                        tn.put_child(tn.index_of(other.key), Some(other), guard);
                        tn.put_child(tn.index_of(key), Some(fresh), guard);
                        self.replace_in(slot, Some(tn), guard);
                        path.push((tn, 0));
                    }
                }
                self.rebalance(&path, None, guard);
                Some(fresh)
            }
        };
        // The direct table follows the new leaf; only then may the old one be retired (no
        // entry may name a leaf after its retirement).
        writer.update(&self.direct, key, leaf, fresh, guard, |k, plen| {
            self.search_slot_wide(k, plen, guard)
        });
        writer.after_change(&self.direct, key, old_deep, new_deep);
        if let Some(old) = leaf {
            retire(old, guard);
        }
        if !self.direct.is_enabled() && self.leaf_count() >= DIRECT_MIN_LEAVES {
            self.enable_direct(&mut writer, guard);
        }
        Ok(())
    }

    /// The longest prefix shorter than `below` and of length at most `DIRECT_BITS` covering
    /// `key` (so covering its whole slot), searched the kernel's way.
    fn search_slot_wide<'g>(
        &self,
        key: K,
        below: u8,
        guard: &'g Guard,
    ) -> Option<(NodeRef<'g, K, V>, &'g Alias<V>)> {
        let cut = crate::direct::cut::<K>();
        match self.search(
            key,
            guard,
            |a| a.slen >= cut && K::BITS - a.slen < below,
            None,
        ) {
            Found::Hit(leaf, alias) => Some((leaf, alias)),
            Found::Miss | Found::Cut => None,
        }
    }

    /// Builds and publishes the direct table from the trie's leaves. Writer only.
    fn enable_direct(&self, writer: &mut DirectWriter, guard: &Guard) {
        let mut leaves = Vec::with_capacity(self.leaf_count());
        if let Some(root) = self.root(guard) {
            collect_leaves(root, guard, &mut |leaf| leaves.push(leaf));
        }
        writer.enable(&self.direct, leaves, guard);
    }

    /// [`TrieWriter::enable_direct_table`](crate::TrieWriter::enable_direct_table). Writer only.
    pub(crate) fn enable_direct_table(&self) {
        let mut writer = self.lock();
        self.enable_direct(&mut writer, &epoch::pin());
    }

    /// Checks every entry of the direct table (if built) against a search of the trie (for
    /// tests; one search per slot).
    #[doc(hidden)]
    pub fn check_direct_table(&self) -> Result<(), String> {
        let writer = self.lock();
        let guard = &epoch::pin();
        let mut deep = vec![0u32; 1 << crate::direct::DIRECT_BITS];
        if let Some(root) = self.root(guard) {
            collect_leaves(root, guard, &mut |leaf| {
                deep[crate::direct::slot_of(leaf.key)] += deep_count::<K, V>(leaf.aliases());
            });
        }
        writer.check(&self.direct, guard, &deep, |k| {
            self.search_slot_wide(k, u8::MAX, guard)
        })
    }

    /// Whether the direct table is built.
    #[doc(hidden)]
    pub fn has_direct_table(&self) -> bool {
        self.direct.is_enabled()
    }

    /// The bytes the direct table takes (for statistics).
    pub(crate) fn direct_bytes(&self) -> usize {
        self.direct.bytes()
    }

    fn lock(&self) -> MutexGuard<'_, DirectWriter> {
        self.side
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Publishes `node` in `slot` (`put_child_root`).
    fn replace_in(&self, slot: Slot<'_, K, V>, node: Option<NodeRef<'_, K, V>>, guard: &Guard) {
        match slot.parent {
            Some(parent) => parent.put_child(slot.index, node, guard),
            None => self.root.store(
                node.map_or(std::ptr::null_mut(), NodeRef::as_ptr),
                Ordering::Release,
            ),
        }
    }

    fn load_slot<'g>(&self, slot: Slot<'g, K, V>, guard: &'g Guard) -> Option<NodeRef<'g, K, V>> {
        match slot.parent {
            Some(parent) => parent.child(slot.index, guard),
            None => self.root(guard),
        }
    }

    /// Resizes every tnode of `path` bottom up (`trie_rebalance`), recomputing suffix lengths
    /// that may have dropped: `lowered` is the former suffix length of the deepest node's child
    /// that changed, when it may have shrunk.
    fn rebalance<'g>(
        &self,
        path: &[(NodeRef<'g, K, V>, usize)],
        mut lowered: Option<u8>,
        guard: &'g Guard,
    ) {
        for depth in (0..path.len()).rev() {
            let tn = path[depth].0;
            // What the parent last saw of this node.
            let before = tn.slen();
            // Only a node whose suffix length came from the shrunken child can drop.
            if lowered.is_some_and(|old| before == old && old > tn.pos) {
                tn.update_suffix(guard);
            }
            let slot = match depth.checked_sub(1) {
                Some(up) => Slot {
                    parent: Some(path[up].0),
                    index: path[up].1,
                },
                None => Slot {
                    parent: None,
                    index: 0,
                },
            };
            self.resize(slot, guard);
            let after = self.load_slot(slot, guard).map(|n| n.slen());
            lowered = after.is_none_or(|after| after < before).then_some(before);
        }
    }

    /// The kernel's `resize`: inflate while worthwhile, else halve while worthwhile, then
    /// collapse a node left with fewer than two children. At most [`MAX_WORK`] steps.
    fn resize<'g>(&self, slot: Slot<'g, K, V>, guard: &'g Guard) {
        let is_root = slot.parent.is_none();
        let Some(mut tn) = self.load_slot(slot, guard).filter(|n| !n.is_leaf()) else {
            return;
        };
        let mut work = MAX_WORK;
        while work > 0 && should_inflate(tn, is_root) {
            tn = self.inflate(slot, tn, guard);
            work -= 1;
        }
        if work != MAX_WORK {
            // The kernel stops here; an inflate that dissolved a lone full child can leave a
            // single child behind, so we also collapse (keeping "every tnode has two children").
            if should_collapse(tn) {
                self.collapse(slot, tn, guard);
            }
            return;
        }
        while work > 0 && should_halve(tn, is_root) {
            tn = self.halve(slot, tn, guard);
            work -= 1;
        }
        if should_collapse(tn) {
            self.collapse(slot, tn, guard);
        }
    }

    /// Doubles `old`'s children: it consumes one more bit, downwards. Full children are split
    /// in two (or dissolved when binary); the others move to the half their next bit selects.
    fn inflate<'g>(
        &self,
        slot: Slot<'g, K, V>,
        old: NodeRef<'g, K, V>,
        guard: &'g Guard,
    ) -> NodeRef<'g, K, V> {
        let tn = NodeRef::new_tnode(old.key, old.pos - 1, old.bits + 1);
        let mut retired = vec![old];
        for i in 0..old.children().len() {
            let Some(inode) = old.child(i, guard) else {
                continue;
            };
            if !old.is_full_child(Some(inode)) {
                tn.put_child(tn.index_of(inode.key), Some(inode), guard);
                continue;
            }
            retired.push(inode);
            if inode.bits == 1 {
                tn.put_child(2 * i, inode.child(0, guard), guard);
                tn.put_child(2 * i + 1, inode.child(1, guard), guard);
                continue;
            }
            // Split in two: node0 takes the children whose index has the top bit clear, node1
            // the others; their keys differ exactly in that bit (`tn.pos`).
            let half = inode.children().len() / 2;
            let n0 = NodeRef::new_tnode(inode.key, inode.pos, inode.bits - 1);
            let bit = K::from_usize(1).shl(tn.pos);
            let n1 = NodeRef::new_tnode(inode.key | bit, inode.pos, inode.bits - 1);
            for j in 0..half {
                n0.put_child(j, inode.child(j, guard), guard);
                n1.put_child(j, inode.child(half + j, guard), guard);
            }
            tn.put_child(2 * i, Some(n0), guard);
            tn.put_child(2 * i + 1, Some(n1), guard);
        }
        self.replace(slot, tn, &retired, guard)
    }

    /// Halves `old`'s children: it consumes one bit less. Pairs of non-empty siblings get a new
    /// binary tnode; a lone sibling moves up.
    fn halve<'g>(
        &self,
        slot: Slot<'g, K, V>,
        old: NodeRef<'g, K, V>,
        guard: &'g Guard,
    ) -> NodeRef<'g, K, V> {
        let tn = NodeRef::new_tnode(old.key, old.pos + 1, old.bits - 1);
        for i in (0..old.children().len()).step_by(2) {
            match (old.child(i, guard), old.child(i + 1, guard)) {
                (None, None) => {}
                (Some(one), None) | (None, Some(one)) => tn.put_child(i / 2, Some(one), guard),
                (Some(n0), Some(n1)) => {
                    let pair = NodeRef::new_tnode(n0.key, old.pos, 1);
                    pair.put_child(0, Some(n0), guard);
                    pair.put_child(1, Some(n1), guard);
                    tn.put_child(i / 2, Some(pair), guard);
                }
            }
        }
        self.replace(slot, tn, &[old], guard)
    }

    /// Publishes a rebuilt tnode, retires the nodes it replaces, then resizes its full children
    /// (which may be new) and recomputes its suffix length (the kernel's `replace`).
    fn replace<'g>(
        &self,
        slot: Slot<'g, K, V>,
        tn: NodeRef<'g, K, V>,
        retired: &[NodeRef<'g, K, V>],
        guard: &'g Guard,
    ) -> NodeRef<'g, K, V> {
        self.replace_in(slot, Some(tn), guard);
        for &old in retired {
            retire(old, guard);
        }
        for i in (0..tn.children().len()).rev() {
            if tn.is_full_child(tn.child(i, guard)) {
                self.resize(
                    Slot {
                        parent: Some(tn),
                        index: i,
                    },
                    guard,
                );
            }
        }
        tn.update_suffix(guard);
        tn
    }

    /// Replaces a tnode with fewer than two children by its only child (or nothing).
    fn collapse<'g>(&self, slot: Slot<'g, K, V>, old: NodeRef<'g, K, V>, guard: &'g Guard) {
        let only = (0..old.children().len()).find_map(|i| old.child(i, guard));
        self.replace_in(slot, only, guard);
        retire(old, guard);
    }

    /// Checks the structural invariants (for tests): child placement, counters, exact suffix
    /// lengths, the alias order, and that no node is left that a resize would change.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let guard = &epoch::pin();
        let Some(root) = self.root(guard) else {
            return if self.leaf_count() == 0 {
                Ok(())
            } else {
                Err("empty trie with leaves".into())
            };
        };
        let mut leaves = 0;
        let mut aliases = 0;
        check_node(root, None, guard, &mut leaves, &mut aliases)?;
        if leaves != self.leaf_count() || aliases != self.alias_count() {
            return Err(format!(
                "counted {leaves} leaves {aliases} aliases, recorded {} {}",
                self.leaf_count(),
                self.alias_count()
            ));
        }
        Ok(())
    }
}

fn check_node<K: TrieKey, V>(
    n: NodeRef<'_, K, V>,
    parent: Option<NodeRef<'_, K, V>>,
    guard: &Guard,
    leaves: &mut usize,
    aliases: &mut usize,
) -> Result<(), String> {
    if let Some(p) = parent {
        if n.pos + n.bits > p.pos {
            return Err(format!(
                "node {:?}/{} below parent pos {}",
                n.key, n.pos, p.pos
            ));
        }
        let mask = K::prefix_mask(K::BITS - (p.pos + p.bits));
        if n.key & mask != p.key {
            return Err(format!(
                "node key {:?} outside parent key {:?}",
                n.key, p.key
            ));
        }
    }
    if n.is_leaf() {
        let list = n.aliases();
        if list.is_empty() {
            return Err(format!("empty leaf {:?}", n.key));
        }
        if !list.windows(2).all(|w| w[0].slen <= w[1].slen) {
            return Err(format!("unsorted aliases at {:?}", n.key));
        }
        if n.slen() != list[list.len() - 1].slen {
            return Err(format!("leaf {:?} slen {} wrong", n.key, n.slen()));
        }
        *leaves += 1;
        *aliases += list.len();
        return Ok(());
    }
    let mut empty = 0;
    let mut full = 0;
    let mut slen = n.pos;
    for (i, slot) in n.children().iter().enumerate() {
        match load(slot, guard) {
            None => empty += 1,
            Some(c) => {
                if n.index_of(c.key) != i {
                    return Err(format!("child {:?} at wrong index {i}", c.key));
                }
                full += usize::from(n.is_full_child(Some(c)));
                slen = slen.max(c.slen());
                check_node(c, Some(n), guard, leaves, aliases)?;
            }
        }
    }
    if empty != n.empty_children() || full != n.full_children() {
        return Err(format!(
            "counters of tnode {:?}/{}/{} wrong",
            n.key, n.pos, n.bits
        ));
    }
    if slen != n.slen() {
        return Err(format!(
            "tnode {:?}/{} slen {} should be {slen}",
            n.key,
            n.pos,
            n.slen()
        ));
    }
    if should_collapse(n) {
        return Err(format!("tnode {:?}/{} should have collapsed", n.key, n.pos));
    }
    Ok(())
}

/// The number of keys [`LcTrie::lookup_batch`] walks in lock step.
pub const BATCH: usize = 16;

/// How many levels of each key's path [`LcTrie::lookup_batch`] warms before the lookups (the
/// root's child and grandchild: most paths are no deeper).
const WARM_LEVELS: usize = 2;

/// Calls `f` with the key and aliases of every leaf below `n`, in ascending key order.
fn walk_leaves<'g, K: TrieKey, V>(
    n: NodeRef<'g, K, V>,
    guard: &'g Guard,
    f: &mut impl FnMut(K, &'g [Alias<V>]),
) {
    if n.is_leaf() {
        f(n.key, n.aliases());
    } else {
        for slot in n.children() {
            if let Some(c) = load(slot, guard) {
                walk_leaves(c, guard, f);
            }
        }
    }
}

fn should_inflate<K: TrieKey, V>(tn: NodeRef<'_, K, V>, is_root: bool) -> bool {
    let len = tn.children().len();
    let threshold = len
        * if is_root {
            INFLATE_THRESHOLD_ROOT
        } else {
            INFLATE_THRESHOLD
        };
    let used = len - tn.empty_children() + tn.full_children();
    used > 1 && tn.pos > 0 && 50 * used >= threshold
}

fn should_halve<K: TrieKey, V>(tn: NodeRef<'_, K, V>, is_root: bool) -> bool {
    let len = tn.children().len();
    let threshold = len
        * if is_root {
            HALVE_THRESHOLD_ROOT
        } else {
            HALVE_THRESHOLD
        };
    let used = len - tn.empty_children();
    used > 1 && tn.bits > 1 && 100 * used < threshold
}

fn should_collapse<K: TrieKey, V>(tn: NodeRef<'_, K, V>) -> bool {
    tn.children().len() - tn.empty_children() < 2
}

/// Calls `f` with every leaf below `n`.
fn collect_leaves<'g, K: TrieKey, V>(
    n: NodeRef<'g, K, V>,
    guard: &'g Guard,
    f: &mut impl FnMut(NodeRef<'g, K, V>),
) {
    if n.is_leaf() {
        f(n);
    } else {
        for slot in n.children() {
            if let Some(c) = load(slot, guard) {
                collect_leaves(c, guard, f);
            }
        }
    }
}

/// Raises the suffix length of every tnode on `path` to at least `slen` (`node_push_suffix`).
fn push_suffix<K: TrieKey, V>(path: &[(NodeRef<'_, K, V>, usize)], slen: u8) {
    for (tn, _) in path.iter().rev() {
        if tn.slen() >= slen {
            break;
        }
        tn.slen.store(slen, Ordering::Relaxed);
    }
}

/// Recomputes suffix lengths bottom up after a leaf's dropped from `old` (`node_pull_suffix`):
/// only nodes whose value was `old` can change, and the walk stops at the first that keeps it.
fn pull_suffix<K: TrieKey, V>(path: &[(NodeRef<'_, K, V>, usize)], old: u8, guard: &Guard) {
    for (tn, _) in path.iter().rev() {
        if tn.slen() != old || old == tn.pos || tn.update_suffix(guard) == old {
            break;
        }
    }
}

/// Hands an unlinked node to the epoch collector; its children (if any) are not freed with it.
fn retire<K: TrieKey, V: Send + Sync + 'static>(node: NodeRef<'_, K, V>, guard: &Guard) {
    let ptr = SendPtr(node.as_ptr());
    // SAFETY: the writer has just unlinked `node` from the trie (no slot points to it any more),
    // and it is retired exactly once; readers that still hold it are pinned, so the collector
    // runs the closure only after they unpin. Freeing a node drops its own aliases (which are
    // `Send`, so dropping them on another thread is fine), never other nodes.
    unsafe {
        guard.defer_unchecked(move || {
            let SendPtr(ptr) = ptr;
            NodeRef::free(ptr)
        })
    };
}

/// A node pointer handed to the collector, which may free it on another thread.
struct SendPtr<K, V>(*mut crate::node::Node<K, V>);
// SAFETY: the pointee is only dropped (once) through this pointer, after every reader is gone;
// its values are `Send`.
unsafe impl<K: Send, V: Send> Send for SendPtr<K, V> {}

/// Asks the CPU to start loading `*item` into L1 (a hint: no effect on semantics).
#[inline(always)]
fn prefetch<T>(item: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is only a hint: it never faults, whatever the address, and SSE
        // (which provides it) is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(item.cast::<i8>()) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = item;
}

impl<K: TrieKey, V> Drop for LcTrie<K, V> {
    fn drop(&mut self) {
        fn free<K: TrieKey, V>(ptr: *mut crate::node::Node<K, V>) {
            // SAFETY: `drop` has exclusive access to the trie (`&mut self`), so no reader or
            // writer can reach these nodes; every node is reachable through exactly one slot,
            // so each is freed exactly once, after its children. Retired nodes were unlinked
            // and belong to the collector.
            let Some(node) = (unsafe { NodeRef::<K, V>::from_raw(ptr) }) else {
                return;
            };
            for slot in node.children() {
                free(slot.load(Ordering::Relaxed));
            }
            // SAFETY: as above: exclusively ours, live, freed once.
            unsafe { NodeRef::<K, V>::free(ptr) };
        }
        free(self.root.load(Ordering::Relaxed));
    }
}

/// Small tests of the unsafe layers (node layout, publication, retirement, the direct table),
/// sized to run under Miri: `cargo +nightly miri test -p fib-trie --lib`.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::reference::ReferenceLpm;

    /// A value that owns heap memory, so Miri sees every alias dropped exactly once.
    type Owned = (Arc<u32>, String);

    fn owned(i: u32) -> Owned {
        (Arc::new(i), format!("v{i}"))
    }

    fn keys(n: u32) -> impl Iterator<Item = (u32, u8)> {
        (0..n).map(|i| {
            let plen = [8u8, 16, 20, 24, 28, 32][(i % 6) as usize];
            let key = i.wrapping_mul(0x9e37_79b9) & u32::prefix_mask(plen);
            (key, plen)
        })
    }

    fn same<K: TrieKey>(trie: &LcTrie<K, Owned>, reference: &ReferenceLpm<K, u32>, key: K) {
        let guard = &epoch::pin();
        let got = trie
            .lookup(key, guard, |_| true)
            .map(|m| (m.key, m.plen, *m.value.0));
        let want = reference.lookup(key, |_| true).map(|(k, l, v)| (k, l, *v));
        assert_eq!(got, want, "key {key:?}");
    }

    #[test]
    fn insert_lookup_remove_owned_values() {
        let trie = LcTrie::<u32, Owned>::new();
        let mut reference = ReferenceLpm::new();
        for (i, (k, l)) in keys(150).enumerate() {
            trie.insert(k, l, owned(i as u32)).unwrap();
            reference.insert(k, l, i as u32).unwrap();
        }
        // Several aliases on one leaf, including the default route.
        for (i, l) in [(1000, 0), (1001, 4), (1002, 12)] {
            trie.insert(0, l, owned(i)).unwrap();
            reference.insert(0, l, i).unwrap();
        }
        trie.check_invariants().unwrap();
        for (k, _) in keys(150) {
            same(&trie, &reference, k | 0x55);
            same(&trie, &reference, !k);
        }
        let guard = &epoch::pin();
        let mut out = vec![None; 64];
        let probes: Vec<u32> = keys(64).map(|(k, _)| k ^ 0x0101).collect();
        trie.lookup_batch(&probes, &mut out, guard, |_| true);
        for (o, p) in out.iter().zip(&probes) {
            assert_eq!(*o, trie.lookup(*p, guard, |_| true), "key {p:#x}");
        }
        for (k, l) in keys(150).step_by(2) {
            assert_eq!(trie.remove(k, l).unwrap(), reference.remove(k, l).unwrap());
        }
        trie.check_invariants().unwrap();
        for (k, _) in keys(150) {
            same(&trie, &reference, k);
        }
    }

    #[test]
    fn ipv6_keys_grow_and_shrink() {
        let trie = LcTrie::<u128, Owned>::new();
        let mut reference = ReferenceLpm::new();
        let key = |i: u32| (u128::from(i.wrapping_mul(0x9e37_79b9)) << 96) | (1 << 125);
        for i in 0..60 {
            let plen = [32u8, 48, 64, 128][(i % 4) as usize];
            let k = key(i) & u128::prefix_mask(plen);
            trie.insert(k, plen, owned(i)).unwrap();
            reference.insert(k, plen, i).unwrap();
        }
        trie.check_invariants().unwrap();
        for i in 0..60 {
            same(&trie, &reference, key(i) | 7);
        }
        for i in 0..60 {
            let plen = [32u8, 48, 64, 128][(i % 4) as usize];
            let k = key(i) & u128::prefix_mask(plen);
            trie.remove(k, plen).unwrap();
            reference.remove(k, plen).unwrap();
        }
        assert!(trie.is_empty());
        trie.check_invariants().unwrap();
    }

    #[test]
    fn bulk_load_and_direct_table() {
        let trie = LcTrie::<u32, Owned>::new();
        let mut reference = ReferenceLpm::new();
        let items: Vec<(u32, u8, u32)> = keys(120)
            .enumerate()
            .map(|(i, (k, l))| (k, l, i as u32))
            .collect();
        trie.insert_many(items.iter().map(|&(k, l, v)| (k, l, owned(v))))
            .unwrap();
        for &(k, l, v) in &items {
            reference.insert(k, l, v).unwrap();
        }
        trie.enable_direct_table();
        assert!(trie.has_direct_table());
        trie.check_invariants().unwrap();
        for &(k, _, _) in &items {
            same(&trie, &reference, k | 0x0f0f);
        }
        // Change, remove and re-add slot-wide prefixes: the table follows.
        for &(k, l, v) in items.iter().filter(|&&(_, l, _)| l <= 16) {
            trie.insert(k, l, owned(v + 500)).unwrap();
            reference.insert(k, l, v + 500).unwrap();
            same(&trie, &reference, k | 0x00ff_ffff);
            trie.remove(k, l).unwrap();
            reference.remove(k, l).unwrap();
            same(&trie, &reference, k | 0x00ff_ffff);
        }
        // A filter refusing the table's alias takes the slow path.
        let guard = &epoch::pin();
        for &(k, _, _) in &items {
            let got = trie
                .lookup(k | 0x3333, guard, |v| *v.0 % 3 == 0)
                .map(|m| (m.key, m.plen, *m.value.0));
            let want = reference
                .lookup(k | 0x3333, |v| *v % 3 == 0)
                .map(|(k, l, v)| (k, l, *v));
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_reader_races_the_writer() {
        let trie = Arc::new(LcTrie::<u32, Owned>::new());
        trie.insert(0x0a00_0000, 8, owned(10)).unwrap();
        trie.enable_direct_table();
        let reader = {
            let trie = Arc::clone(&trie);
            std::thread::spawn(move || {
                for i in 0..40u32 {
                    let guard = epoch::pin();
                    let key = 0x0a00_0000 | (i << 12);
                    let m = trie.lookup(key, &guard, |_| true).expect("10/8 is stable");
                    // Volatile prefixes live in 10.128/9; probes stay below.
                    assert_eq!((m.key, m.plen, *m.value.0), (0x0a00_0000, 8, 10));
                }
            })
        };
        for (i, (k, l)) in keys(30).enumerate() {
            let k = 0x0a80_0000 | (k >> 9);
            let k = k & u32::prefix_mask(l.max(9));
            trie.insert(k, l.max(9), owned(i as u32)).unwrap();
            if i % 3 == 0 {
                trie.remove(k, l.max(9)).unwrap();
            }
        }
        reader.join().unwrap();
        trie.check_invariants().unwrap();
    }
}
