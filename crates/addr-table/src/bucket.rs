//! Bucket tables of cache-line buckets holding keys and values inline, and the lock-free,
//! validated reads of them (the unsafe core).
//!
//! A bucket is one 64-byte cache line: a header word (`meta`), a link to an overflow line (null
//! almost always) and twelve 32-bit words of slots, each slot a key and its value (or, when the
//! key has older duplicates, a pointer to its [`DupList`]):
//!
//! ```text
//!  byte 0          8              16                                                    64
//!       +----------+--------------+------------------------------------------------------+
//!       | meta     | overflow     | slot 0        | slot 1        | slot 2  | slot 3     |
//!       | occ, dup,| *Line        | key | value   | key | value   | ...     |            |
//!       | gen      |              | (u32 -> u32: 1 + 2 words per slot, 4 slots)          |
//!       +----------+--------------+------------------------------------------------------+
//!  meta: bits 0..8 slot occupied, 8..16 slot holds a DupList pointer, 16..64 generation
//! ```
//!
//! **Reads** copy the line's slots with relaxed atomic loads between two loads of `meta` (the
//! first acquire, the second after an acquire fence) and keep the copy only when both loads
//! agree; otherwise they read the line again. A writer never changes the words of an occupied
//! slot: it writes a free slot and then publishes it with one store of `meta` that sets the
//! slot's bit (and, to replace a slot, clears the old one's in the same store), bumping the
//! generation. So a reader that copied an occupied slot while a writer reused it sees `meta`
//! change, and a reader never waits for a writer (the kernel's seqcount readers spin while a
//! write is in progress; here every published state is whole). A 48-bit generation cannot wrap
//! while a reader stands on one line.
//!
//! **Lines** never move: a table's first lines are its array, overflow lines are linked at the
//! end of a chain and, once empty, unlinked and freed after a grace period (a reader standing
//! on one still follows its unchanged link). A key moves only forwards within a chain (to a
//! later line, published there before it is cleared here), and between tables only from the
//! old one to the new one, published in the new one first: a reader that searches the chain
//! from its head, old table then new, finds every key that stayed in the map throughout.

use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};

use foldhash::SharedSeed;
use foldhash::quality::FoldHasher;

use crate::inline::Inline;

/// 32-bit words of slots per line.
pub(crate) const LINE_WORDS: usize = 12;

/// Most slots per line (the `meta` word has 8 bits of each kind; 6 is the most a line of 12
/// words can hold, with a zero-word key and a two-word value).
const MAX_SLOTS: usize = 6;

/// One generation step in `meta`.
const GENERATION: u64 = 1 << 16;

/// How a `(K, V)` pair fills a line: words per slot, slots per line, and the table's `size`
/// units per line.
pub(crate) struct Geometry<K, V>(PhantomData<(K, V)>);

impl<K: Inline, V: Inline> Geometry<K, V> {
    /// Words of a slot's value part: the value, or a `DupList` pointer (two words).
    pub(crate) const PAYLOAD: usize = if V::WORDS > 2 { V::WORDS } else { 2 };
    /// Words per slot.
    pub(crate) const STRIDE: usize = K::WORDS + Self::PAYLOAD;
    /// Slots per line.
    pub(crate) const SLOTS: usize = {
        assert!(
            Self::STRIDE <= LINE_WORDS,
            "addr-table: key and value must fit in 12 32-bit words (48 bytes)"
        );
        let n = LINE_WORDS / Self::STRIDE;
        if n > MAX_SLOTS { MAX_SLOTS } else { n }
    };
    /// Units of the table's `size` (the kernel's bucket count, which its load factor counts)
    /// per line: the largest power of two not above the slots. At the 75% growth threshold a
    /// line then holds `0.75 * SIZE_PER_LINE` keys on average (3 in 4 slots for `u32 -> u32`),
    /// half that right after a growth.
    pub(crate) const SIZE_PER_LINE: usize = 1 << (usize::BITS - 1 - Self::SLOTS.leading_zeros());
}

/// The header word of a line (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Meta(pub(crate) u64);

impl Meta {
    /// Whether slot `i` holds a key.
    #[inline(always)]
    pub(crate) fn occupied(self, i: usize) -> bool {
        self.0 & (1 << i) != 0
    }

    /// Whether slot `i`'s value part is a `DupList` pointer.
    #[inline(always)]
    pub(crate) fn dups(self, i: usize) -> bool {
        self.0 & (1 << (8 + i)) != 0
    }

    /// Occupied slots, as a mask (bit `i` for slot `i`).
    #[inline(always)]
    pub(crate) fn occupied_mask(self) -> u32 {
        (self.0 & 0xff) as u32
    }

    /// Keys in the line.
    pub(crate) fn keys(self) -> usize {
        self.occupied_mask().count_ones() as usize
    }

    /// The first free slot of a line of `slots` slots.
    pub(crate) fn first_free(self, slots: usize) -> Option<usize> {
        let free = !self.occupied_mask() & ((1u32 << slots) - 1);
        (free != 0).then(|| free.trailing_zeros() as usize)
    }

    /// Slot `i` set (holding a `DupList` pointer when `dups`), next generation.
    pub(crate) fn with(self, i: usize, dups: bool) -> Meta {
        let cleared = self.0 & !(0x101 << i);
        Meta((cleared | (1 << i) | (u64::from(dups) << (8 + i))).wrapping_add(GENERATION))
    }

    /// Slot `from` cleared and slot `to` set (holding a `DupList` pointer when `dups`) in one
    /// generation step.
    pub(crate) fn moved(self, from: usize, to: usize, dups: bool) -> Meta {
        Meta(self.0 & !(0x101 << from)).with(to, dups)
    }

    /// Slot `i` cleared, next generation.
    pub(crate) fn without(self, i: usize) -> Meta {
        Meta((self.0 & !(0x101 << i)).wrapping_add(GENERATION))
    }
}

/// One cache line of a bucket chain.
#[repr(C, align(64))]
pub(crate) struct Line {
    pub(crate) meta: AtomicU64,
    /// The next line of this chain, or null.
    pub(crate) overflow: AtomicPtr<Line>,
    pub(crate) words: [AtomicU32; LINE_WORDS],
}

/// What a slot holds besides its key.
pub(crate) enum Payload<V> {
    /// The key's only object.
    Value(V),
    /// The key's objects, newest first (two or more).
    Dups(*const DupList<V>),
}

impl<V> Clone for Payload<V>
where
    V: Copy,
{
    fn clone(&self) -> Self {
        *self
    }
}
impl<V: Copy> Copy for Payload<V> {}

/// Where a key sits in a table, found under the writer lock.
pub(crate) struct Position<'t, K, V> {
    /// The line before `line` in its chain (`None` when `line` is the first).
    pub(crate) prev: Option<&'t Line>,
    pub(crate) line: &'t Line,
    pub(crate) slot: usize,
    pub(crate) key: K,
    pub(crate) payload: Payload<V>,
}

impl Line {
    fn empty() -> Self {
        Line {
            meta: AtomicU64::new(0),
            overflow: AtomicPtr::new(ptr::null_mut()),
            words: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// The words of slot `i`'s key.
    #[inline(always)]
    fn key_words<K: Inline, V: Inline>(&self, i: usize) -> &[AtomicU32] {
        let at = i * Geometry::<K, V>::STRIDE;
        &self.words[at..at + K::WORDS]
    }

    /// The words of slot `i`'s value part.
    #[inline(always)]
    fn payload_words<K: Inline, V: Inline>(&self, i: usize) -> &[AtomicU32] {
        let at = i * Geometry::<K, V>::STRIDE + K::WORDS;
        &self.words[at..at + Geometry::<K, V>::PAYLOAD]
    }

    /// Slot `i`'s value part as of `meta` (relaxed loads: the caller validates or holds the
    /// writer lock).
    #[inline(always)]
    fn payload<K: Inline, V: Inline>(&self, meta: Meta, i: usize) -> Payload<V> {
        let w = self.payload_words::<K, V>(i);
        if meta.dups(i) {
            let addr = u64::from(w[0].load(Ordering::Relaxed))
                | (u64::from(w[1].load(Ordering::Relaxed)) << 32);
            Payload::Dups(ptr::with_exposed_provenance(addr as usize))
        } else {
            Payload::Value(V::load(w))
        }
    }

    /// Writes `key` and `payload` into free slot `i` (not yet published).
    fn write_slot<K: Inline, V: Inline>(&self, i: usize, key: K, payload: Payload<V>) {
        // Order these stores after the `meta` store that freed the slot: a reader that copies
        // them then sees that store (or a later one) when it validates.
        fence(Ordering::Release);
        key.store(self.key_words::<K, V>(i));
        let w = self.payload_words::<K, V>(i);
        match payload {
            Payload::Value(v) => v.store(w),
            Payload::Dups(p) => {
                let addr = p.expose_provenance() as u64;
                w[0].store(addr as u32, Ordering::Relaxed);
                w[1].store((addr >> 32) as u32, Ordering::Relaxed);
            }
        }
    }

    /// Slot `i`'s value part as of `meta` (relaxed loads; the caller validates), in the
    /// reader's form: a value, or a list pointer when the key has duplicates (rare, so the
    /// branch is predicted).
    #[inline(always)]
    fn found<K: Inline, V: Inline>(&self, meta: Meta, i: usize) -> Found<V> {
        let w = self.payload_words::<K, V>(i);
        if meta.dups(i) {
            let addr = u64::from(w[0].load(Ordering::Relaxed))
                | (u64::from(w[1].load(Ordering::Relaxed)) << 32);
            Found::list(ptr::with_exposed_provenance(addr as usize))
        } else {
            Found {
                value: V::load(w),
                list: ptr::null(),
            }
        }
    }

    /// A validated copy of the slot holding `key`, or `None` when this line has none.
    #[inline(always)]
    fn find<K: Inline + Eq, V: Inline>(&self, key: &K) -> Option<Found<V>> {
        loop {
            let m = Meta(self.meta.load(Ordering::Acquire));
            // Compare every slot's key without branching (the slot that matches is as good as
            // random, a branch per slot would mispredict), then keep the occupied ones.
            let mut hits = 0u32;
            for i in 0..Geometry::<K, V>::SLOTS {
                hits |= u32::from(K::load(self.key_words::<K, V>(i)) == *key) << i;
            }
            hits &= m.occupied_mask();
            let i = hits.trailing_zeros() as usize;
            let found = (i < Geometry::<K, V>::SLOTS).then(|| self.found::<K, V>(m, i));
            fence(Ordering::Acquire);
            if self.meta.load(Ordering::Relaxed) == m.0 {
                return found;
            }
        }
    }
}

/// A reader's validated copy of a slot's value part.
#[derive(Clone, Copy)]
pub(crate) struct Found<V> {
    /// The key's only value, when `list` is null (else a placeholder).
    pub(crate) value: V,
    /// The key's duplicate list, or null.
    pub(crate) list: *const DupList<V>,
}

impl<V: Inline> Found<V> {
    /// A list pointer (the value part is then a placeholder decoded from no words).
    #[inline(always)]
    fn list(list: *const DupList<V>) -> Self {
        Found {
            value: V::load(&ZERO_WORDS[..V::WORDS]),
            list,
        }
    }
}

/// Words to decode a placeholder value from.
static ZERO_WORDS: [AtomicU32; LINE_WORDS] = [const { AtomicU32::new(0) }; LINE_WORDS];

impl<V: Copy> Found<V> {
    /// What the slot holds.
    #[inline(always)]
    pub(crate) fn payload(self) -> Payload<V> {
        if self.list.is_null() {
            Payload::Value(self.value)
        } else {
            Payload::Dups(self.list)
        }
    }
}

/// The objects of a key that has more than one, newest first (the kernel's `rhlist_head`
/// list). Allocated when a key gets its second object, retired when it is back to one.
pub(crate) struct DupList<V> {
    pub(crate) head: AtomicPtr<DupNode<V>>,
}

/// One object of a [`DupList`]: immutable but for its link.
pub(crate) struct DupNode<V> {
    pub(crate) value: V,
    /// The next older object, or null.
    pub(crate) next: AtomicPtr<DupNode<V>>,
}

impl<V> DupNode<V> {
    pub(crate) fn alloc(value: V, next: *mut DupNode<V>) -> *mut DupNode<V> {
        Box::into_raw(Box::new(DupNode {
            value,
            next: AtomicPtr::new(next),
        }))
    }
}

impl<V> DupList<V> {
    /// A list of `newest` then `older`.
    pub(crate) fn alloc(newest: V, older: V) -> *mut DupList<V> {
        let tail = DupNode::alloc(older, ptr::null_mut());
        Box::into_raw(Box::new(DupList {
            head: AtomicPtr::new(DupNode::alloc(newest, tail)),
        }))
    }

    /// Frees the list and its nodes.
    ///
    /// # Safety
    /// `p` came from [`DupList::alloc`], its nodes from [`DupNode::alloc`], each is freed once
    /// and no thread can reach any of them any more.
    pub(crate) unsafe fn free(p: *mut DupList<V>) {
        // SAFETY: the caller guarantees exclusive ownership of the list.
        let list = unsafe { Box::from_raw(p) };
        let mut n = list.head.load(Ordering::Relaxed);
        while !n.is_null() {
            // SAFETY: each node is owned by the list, reachable once, freed once.
            let node = unsafe { Box::from_raw(n) };
            n = node.next.load(Ordering::Relaxed);
        }
    }
}

/// One generation of buckets (the kernel's `bucket_table`), with its own hash seed and, while a
/// rehash runs, a pointer to the table that replaces it.
///
/// The hash is foldhash's `quality` variant keyed by this table's seed (both its per-hasher
/// seed and its shared seed are derived from it, so nothing survives a reseed). Like the
/// kernel's jhash it is fast and keyed but not a PRF; the chain-length guard is what bounds an
/// attacker who learns a seed. foldhash's `fast` variant was rejected: its output, meant for
/// hashbrown's probing, gives chains of 12-24 for 96 consecutive keys in 128 buckets under some
/// seeds (test `consecutive_keys_spread_under_every_seed`); SipHash-1-3 would cost several
/// times more per lookup for 4- and 16-byte keys.
pub(crate) struct BucketTable<K, V> {
    mask: usize,
    hasher_seed: u64,
    shared_seed: SharedSeed,
    /// The table this one is migrating into (`future_tbl`), or null.
    pub(crate) future: AtomicPtr<BucketTable<K, V>>,
    /// The first line of every chain.
    buckets: Box<[Line]>,
    _holds: PhantomData<(K, V)>,
}

impl<K: Inline + Hash + Eq, V: Inline> BucketTable<K, V> {
    /// A table of `lines` empty buckets (a power of two) hashing with `seed`, on the heap.
    pub(crate) fn alloc(lines: usize, seed: u64) -> *mut BucketTable<K, V> {
        debug_assert!(lines.is_power_of_two());
        let buckets: Box<[Line]> = (0..lines).map(|_| Line::empty()).collect();
        Box::into_raw(Box::new(BucketTable {
            mask: lines - 1,
            // Two independent halves: the per-table SharedSeed means no process-wide constant
            // survives a reseed.
            hasher_seed: crate::seed::splitmix64_mix(seed ^ 0x5851_f42d_4c95_7f2d),
            shared_seed: SharedSeed::from_u64(seed),
            future: AtomicPtr::new(ptr::null_mut()),
            buckets,
            _holds: PhantomData,
        }))
    }

    /// Number of bucket lines.
    #[inline(always)]
    pub(crate) fn lines(&self) -> usize {
        self.mask + 1
    }

    /// The table's size in the load factor's units.
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.lines() * Geometry::<K, V>::SIZE_PER_LINE
    }

    /// The bucket `key` goes to in this table.
    #[inline(always)]
    pub(crate) fn hash(&self, key: &K) -> usize {
        let mut hasher = FoldHasher::with_seed(self.hasher_seed, &self.shared_seed);
        key.hash(&mut hasher);
        (hasher.finish() as usize) & self.mask
    }

    /// Iterates over bucket `index`'s chain. The caller holds the writer lock or a guard as
    /// for [`BucketTable::find`].
    pub(crate) fn chain(&self, index: usize) -> Chain<'_> {
        Chain {
            next: &self.buckets[index],
            _table: PhantomData,
        }
    }

    /// A validated copy of what the slot of `key` holds in this table, if any (the lock-free
    /// reader walk).
    ///
    /// # Safety
    /// The caller holds the writer lock or a guard of the default collector pinned before it
    /// loaded the pointer to this table, so the table and its overflow lines stay allocated.
    #[inline]
    pub(crate) unsafe fn find(&self, key: &K) -> Option<Found<V>> {
        let index = self.hash(key);
        // SAFETY: `index` is masked with `mask`, and the table has `mask + 1` buckets.
        let mut line = unsafe { self.buckets.get_unchecked(index) };
        loop {
            if let Some(p) = line.find::<K, V>(key) {
                return Some(p);
            }
            let next = line.overflow.load(Ordering::Acquire);
            if next.is_null() {
                return None;
            }
            // SAFETY: an overflow line linked from this chain; retired only after being
            // unlinked, through the collector the caller's guard pins.
            line = unsafe { &*next };
        }
    }

    /// Where `key` sits in bucket `index`'s chain. Caller holds the writer lock.
    pub(crate) fn position(&self, index: usize, key: &K) -> Option<Position<'_, K, V>> {
        let mut prev = None;
        for line in self.chain(index) {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            for slot in 0..Geometry::<K, V>::SLOTS {
                if m.occupied(slot) && K::load(line.key_words::<K, V>(slot)) == *key {
                    return Some(Position {
                        prev,
                        line,
                        slot,
                        key: *key,
                        payload: line.payload::<K, V>(m, slot),
                    });
                }
            }
            prev = Some(line);
        }
        None
    }

    /// Publishes `key` with `payload` in the first free slot of the chain from `from` on (a
    /// new overflow line at its end when there is none). Returns the keys in the lines it
    /// walked, the new one included. Caller holds the writer lock; `key` is in no slot of
    /// those lines (or only in the one the caller clears next).
    pub(crate) fn publish_from(&self, from: &Line, key: K, payload: Payload<V>) -> usize {
        let dups = matches!(payload, Payload::Dups(_));
        let mut keys = 0;
        let mut line = from;
        loop {
            let m = Meta(line.meta.load(Ordering::Relaxed));
            keys += m.keys();
            if let Some(i) = m.first_free(Geometry::<K, V>::SLOTS) {
                line.write_slot::<K, V>(i, key, payload);
                line.meta.store(m.with(i, dups).0, Ordering::Release);
                // Count the rest of the chain too (the elasticity check needs all of it).
                let mut rest = line.overflow.load(Ordering::Relaxed);
                while !rest.is_null() {
                    // SAFETY: under the writer lock, lines of a live chain are allocated.
                    let r = unsafe { &*rest };
                    keys += Meta(r.meta.load(Ordering::Relaxed)).keys();
                    rest = r.overflow.load(Ordering::Relaxed);
                }
                return keys + 1;
            }
            let next = line.overflow.load(Ordering::Relaxed);
            if next.is_null() {
                let fresh = Box::new(Line::empty());
                fresh.write_slot::<K, V>(0, key, payload);
                fresh.meta.store(Meta(0).with(0, dups).0, Ordering::Relaxed);
                // Readers that see the link see the filled line (release).
                line.overflow.store(Box::into_raw(fresh), Ordering::Release);
                return keys + 1;
            }
            // SAFETY: as above.
            line = unsafe { &*next };
        }
    }

    /// Publishes a key that is in no slot of this table in its bucket's chain; returns the keys
    /// in the chain, the new one included. Caller holds the writer lock.
    pub(crate) fn publish(&self, key: K, payload: Payload<V>) -> usize {
        let index = self.hash(&key);
        self.publish_from(&self.buckets[index], key, payload)
    }

    /// Clears the slot of `pos` (one `meta` store) and unlinks its line when it is an overflow
    /// line left empty (freed after a grace period). Does not retire the payload.
    ///
    /// # Safety
    /// The caller holds the writer lock, `pos` was found under it and nothing changed since,
    /// and `guard` is pinned.
    pub(crate) unsafe fn unpublish(pos: &Position<'_, K, V>, guard: &crossbeam_epoch::Guard) {
        let line = pos.line;
        let m = Meta(line.meta.load(Ordering::Relaxed)).without(pos.slot);
        line.meta.store(m.0, Ordering::Release);
        if let (0, Some(prev)) = (m.keys(), pos.prev) {
            // Readers standing on the line still follow its (unchanged) overflow link.
            prev.overflow
                .store(line.overflow.load(Ordering::Relaxed), Ordering::Release);
            // SAFETY: the line came from `Box::into_raw` in `publish_from` and is now
            // unreachable from the table; readers on it were pinned before this point.
            unsafe { guard.defer_destroy(crossbeam_epoch::Shared::from(line as *const Line)) };
        }
    }

    /// Replaces the payload of `pos`'s slot: in a free slot of the same line with one `meta`
    /// store that sets it and clears the old one, else further down the chain before the old
    /// slot is cleared (a key only moves forwards). Does not retire the old payload. Returns
    /// whether the key left its line (it then stays further down until the next rehash).
    ///
    /// # Safety
    /// As for [`BucketTable::unpublish`].
    pub(crate) unsafe fn rewrite(
        &self,
        pos: &Position<'_, K, V>,
        payload: Payload<V>,
        guard: &crossbeam_epoch::Guard,
    ) -> bool {
        let line = pos.line;
        let m = Meta(line.meta.load(Ordering::Relaxed));
        if let Some(i) = m.first_free(Geometry::<K, V>::SLOTS) {
            line.write_slot::<K, V>(i, pos.key, payload);
            let dups = matches!(payload, Payload::Dups(_));
            line.meta
                .store(m.moved(pos.slot, i, dups).0, Ordering::Release);
            return false;
        }
        // The line is full: the first free slot from here on is further down the chain.
        self.publish_from(line, pos.key, payload);
        // SAFETY: forwarded from the caller; `publish_from` did not touch this line's `meta`.
        unsafe { Self::unpublish(pos, guard) };
        true
    }

    /// Moves every key of bucket `index` into `new`, as the kernel's `rhashtable_rehash_chain`
    /// does: each is published in the new table before its slot here is cleared, so a reader
    /// searching old then new finds it in one or the other. The chain's overflow lines stay
    /// (empty) until this table is freed. Caller holds the writer lock; `new` is this table's
    /// future table.
    pub(crate) fn migrate_bucket(&self, new: &BucketTable<K, V>, index: usize) {
        for line in self.chain(index) {
            let mut m = Meta(line.meta.load(Ordering::Relaxed));
            for slot in 0..Geometry::<K, V>::SLOTS {
                if !m.occupied(slot) {
                    continue;
                }
                let key = K::load(line.key_words::<K, V>(slot));
                // Every key lives in exactly one live table, and `new` only receives keys
                // migrated from here or inserted after they were: `key` is not in `new`.
                new.publish(key, line.payload::<K, V>(m, slot));
                m = m.without(slot);
                line.meta.store(m.0, Ordering::Release);
            }
        }
    }

    /// Calls `f` on every slot of the table. Caller holds the writer lock.
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(K, Payload<V>)) {
        for index in 0..self.lines() {
            for line in self.chain(index) {
                let m = Meta(line.meta.load(Ordering::Relaxed));
                for slot in 0..Geometry::<K, V>::SLOTS {
                    if m.occupied(slot) {
                        f(
                            K::load(line.key_words::<K, V>(slot)),
                            line.payload::<K, V>(m, slot),
                        );
                    }
                }
            }
        }
    }
}

impl<K: Inline, V: Inline> BucketTable<K, V> {
    /// Calls `f` on every duplicate list of the table. Caller holds the writer lock or owns
    /// the table.
    pub(crate) fn for_each_list(&self, mut f: impl FnMut(*mut DupList<V>)) {
        for first in self.buckets.iter() {
            let mut line: *const Line = first;
            while !line.is_null() {
                // SAFETY: the table's own line or an overflow line linked from its chain,
                // allocated while the caller holds the lock or owns the table.
                let l = unsafe { &*line };
                let m = Meta(l.meta.load(Ordering::Relaxed));
                for slot in 0..Geometry::<K, V>::SLOTS {
                    if m.occupied(slot) && m.dups(slot) {
                        if let Payload::Dups(p) = l.payload::<K, V>(m, slot) {
                            f(p.cast_mut());
                        }
                    }
                }
                line = l.overflow.load(Ordering::Relaxed);
            }
        }
    }
}

/// The lines of one bucket chain, first line first.
pub(crate) struct Chain<'a> {
    next: *const Line,
    _table: PhantomData<&'a Line>,
}

impl<'a> Iterator for Chain<'a> {
    type Item = &'a Line;

    #[inline]
    fn next(&mut self) -> Option<&'a Line> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is the chain's first line (in the table's array) or an overflow line
        // loaded from the previous one; overflow lines are retired through the default
        // collector only after being unlinked, and the creator of the `Chain` holds the
        // writer lock or a guard pinned before it loaded the table.
        let b = unsafe { &*self.next };
        self.next = b.overflow.load(Ordering::Acquire);
        Some(b)
    }
}

impl<K, V> Drop for BucketTable<K, V> {
    /// Frees the overflow lines (not the duplicate lists: a retired table is empty, and the
    /// map's own drop frees those of the live tables first).
    fn drop(&mut self) {
        for b in self.buckets.iter() {
            let mut o = b.overflow.load(Ordering::Relaxed);
            while !o.is_null() {
                // SAFETY: overflow lines come from `Box::into_raw` in `publish_from` or
                // `rewrite`, each is linked from exactly one place, and a dropped table is
                // unreachable.
                let line = unsafe { Box::from_raw(o) };
                o = line.overflow.load(Ordering::Relaxed);
            }
        }
    }
}

/// Iterator over the values of one key, newest first (copies).
pub struct Dups<'g, V> {
    first: Option<V>,
    next: *const DupNode<V>,
    _guard: PhantomData<&'g DupNode<V>>,
}

impl<V: Copy> Dups<'_, V> {
    /// No values.
    pub(crate) fn empty() -> Self {
        Dups {
            first: None,
            next: ptr::null(),
            _guard: PhantomData,
        }
    }

    /// The values of a validated payload.
    ///
    /// # Safety
    /// A `Payload::Dups` pointer was loaded from a live table after the guard borrowed for
    /// `'g` was pinned.
    pub(crate) unsafe fn of(payload: Payload<V>) -> Self {
        match payload {
            Payload::Value(v) => Dups {
                first: Some(v),
                next: ptr::null(),
                _guard: PhantomData,
            },
            Payload::Dups(list) => Dups {
                first: None,
                // SAFETY: the list was reachable after the guard was pinned, so it is still
                // allocated (lists and nodes are retired through the default collector).
                next: unsafe { &*list }.head.load(Ordering::Acquire),
                _guard: PhantomData,
            },
        }
    }
}

impl<V: Copy> Iterator for Dups<'_, V> {
    type Item = V;

    #[inline]
    fn next(&mut self) -> Option<V> {
        if let Some(v) = self.first.take() {
            return Some(v);
        }
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is a node reachable from a list that was reachable after the guard
        // borrowed for `'g` was pinned, so it is still allocated; nodes are immutable but for
        // their link.
        let n = unsafe { &*self.next };
        self.next = n.next.load(Ordering::Acquire);
        Some(n.value)
    }
}

impl<V> std::fmt::Debug for Dups<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dups").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_of_the_tables_in_use() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
        // u32 keys with a value of up to two words: 4 slots.
        assert_eq!(Geometry::<u32, u32>::SLOTS, 4);
        assert_eq!(Geometry::<u32, u64>::SLOTS, 4);
        assert_eq!(Geometry::<u32, u32>::SIZE_PER_LINE, 4);
        assert_eq!(Geometry::<u32, ()>::SLOTS, 4);
        // u128 keys: 2 slots.
        assert_eq!(Geometry::<u128, u64>::SLOTS, 2);
        assert_eq!(Geometry::<u128, u64>::SIZE_PER_LINE, 2);
        assert_eq!(Geometry::<u64, u64>::SLOTS, 3);
        assert_eq!(Geometry::<u64, u64>::SIZE_PER_LINE, 2);
        assert_eq!(Geometry::<(), ()>::SLOTS, 6);
    }

    #[test]
    fn meta_bits_and_generations() {
        let m = Meta(0).with(2, true);
        assert!(m.occupied(2) && m.dups(2) && !m.occupied(1));
        assert_eq!(m.first_free(4), Some(0));
        let m = m.with(0, false).with(1, false).with(3, false);
        assert_eq!(m.first_free(4), None);
        assert_eq!(m.keys(), 4);
        let m2 = m.without(2);
        assert!(!m2.occupied(2) && !m2.dups(2));
        assert_eq!(m2.first_free(4), Some(2));
        assert_eq!(m2.0 >> 16, 5, "every change is a new generation");
        // The same bits after a slot is reused: the generation still differs.
        let m3 = m2.with(2, true);
        assert_eq!(m3.0 & 0xffff, m.0 & 0xffff);
        assert_ne!(m3, m);
    }

    #[test]
    fn a_reader_sees_a_slot_replaced_in_place_as_a_new_generation() {
        let line = Line::empty();
        line.write_slot::<u32, u32>(0, 7, Payload::Value(70));
        line.meta.store(Meta(0).with(0, false).0, Ordering::Release);
        let value = |line: &Line, k| {
            line.find::<u32, u32>(&k)
                .map(|f| (f.value, f.list.is_null()))
        };
        assert_eq!(value(&line, 7), Some((70, true)));
        // Rewritten into slot 1 with one store: the key never disappears.
        line.write_slot::<u32, u32>(1, 7, Payload::Value(71));
        let m = Meta(line.meta.load(Ordering::Relaxed));
        line.meta.store(m.moved(0, 1, false).0, Ordering::Release);
        assert_eq!(value(&line, 7), Some((71, true)));
        assert_eq!(value(&line, 8), None);
        // A stale key in a free slot never answers.
        let m = Meta(line.meta.load(Ordering::Relaxed));
        line.meta.store(m.without(1).0, Ordering::Release);
        assert_eq!(value(&line, 7), None);
    }
}
