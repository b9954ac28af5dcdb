//! Bucket tables, cache-line buckets and the lock-free walk over them (the unsafe core).
//!
//! A bucket is one 64-byte cache line: a word of one-byte key fingerprints (*tags*), six slots
//! holding pointers to objects, and a link to an overflow bucket (null almost always):
//!
//! ```text
//!  byte 0        8        16       24       32       40       48       56       64
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//!       | tags   | slot 0 | slot 1 | slot 2 | slot 3 | slot 4 | slot 5 | over-  |
//!       | t0..t5 | *Node  | *Node  | *Node  | *Node  | *Node  | *Node  | flow   |
//!       +--------+--------+--------+--------+--------+--------+--------+--------+
//! ```
//!
//! A lookup hashes once per bucket table (each has its own seed): the low bits pick the bucket,
//! the top seven bits (with the high bit set, so a tag is never 0) are the fingerprint. It loads
//! the tag word, compares all six fingerprints at once (SWAR), and dereferences only the slots
//! whose tag matches: a miss reads one line (a false match costs one more with probability
//! 1/128 per occupied slot), a hit reads the bucket and the object (allocated aligned so that
//! it never straddles two lines when it fits in one).
//!
//! Concurrency: objects never move between slots. The writer (one at a time) publishes an
//! object by storing its pointer into a free slot, then the tag word with its tag (release);
//! it unpublishes by clearing the tag, then the slot. A reader that saw a tag loads the slot
//! and finds either the object (kept alive by its epoch guard) or null, and always compares
//! the full key. Migration to a future table publishes each object in the new table before it
//! clears it in the old one, so a reader that searches the old table and then the new one
//! finds every object that stayed in the map throughout (a null slot or cleared tag it loaded
//! with acquire happened after the object was published in the new table). Bucket chains are
//! never relinked into another table (objects move, buckets do not), so no nulls markers are
//! needed for the walk to stay in its own chain.

use std::alloc::{Layout, handle_alloc_error};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use foldhash::SharedSeed;
use foldhash::quality::FoldHasher;

/// Slots (objects with distinct keys) per bucket line.
pub(crate) const SLOTS: usize = 6;

/// Units of the table's `size` (the kernel's bucket count, which the load factor refers to) per
/// bucket line: at the 75% growth threshold a line holds 3 keys on average in its 6 slots, and
/// one in 30 lines overflows; right after a growth, 1.5 keys and one in 2000.
pub(crate) const SIZE_PER_BUCKET: usize = 4;

/// The tag bytes of the slots (the two top bytes of the tag word stay zero).
const TAG_BYTES: u64 = (1 << (8 * SLOTS)) - 1;
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// One object of the multimap. The newest object of each key sits in a bucket slot; older
/// objects of the same key hang off it through `dup`.
pub(crate) struct Node<K, V> {
    pub(crate) key: K,
    pub(crate) value: V,
    /// The next older object with the same key, or null.
    pub(crate) dup: AtomicPtr<Node<K, V>>,
}

impl<K, V> Node<K, V> {
    /// Nodes are aligned to their size rounded up to a power of two (at most a cache line), so
    /// one that fits in a line never straddles two.
    fn layout() -> Layout {
        let natural = Layout::new::<Node<K, V>>();
        let align = natural
            .size()
            .next_power_of_two()
            .clamp(natural.align(), 64);
        natural
            .align_to(align)
            .expect("a power of two up to 64 is a valid alignment")
            .pad_to_align()
    }

    /// A heap node.
    pub(crate) fn alloc(key: K, value: V, dup: *mut Node<K, V>) -> *mut Node<K, V> {
        let layout = Self::layout();
        // SAFETY: `layout` has a non-zero size (the node holds an `AtomicPtr`).
        let p = unsafe { std::alloc::alloc(layout) }.cast::<Node<K, V>>();
        if p.is_null() {
            handle_alloc_error(layout);
        }
        // SAFETY: `p` is fresh, non-null, and sized and aligned for a `Node<K, V>`.
        unsafe {
            p.write(Node {
                key,
                value,
                dup: AtomicPtr::new(dup),
            })
        };
        p
    }

    /// Drops and frees a node made by [`Node::alloc`].
    ///
    /// # Safety
    /// `p` came from [`Node::alloc`], is freed once, and no thread can reach it any more.
    pub(crate) unsafe fn free(p: *mut Node<K, V>) {
        // SAFETY: the caller guarantees `p` is a live node of ours, owned here.
        unsafe {
            ptr::drop_in_place(p);
            std::alloc::dealloc(p.cast(), Self::layout());
        }
    }
}

/// One cache line of a bucket chain (see the module documentation for the layout).
#[repr(C, align(64))]
pub(crate) struct Bucket<K, V> {
    /// Byte `i` is the tag of slot `i`, 0 when the slot is empty.
    pub(crate) tags: AtomicU64,
    pub(crate) slots: [AtomicPtr<Node<K, V>>; SLOTS],
    /// The next bucket of this chain, or null.
    pub(crate) overflow: AtomicPtr<Bucket<K, V>>,
}

impl<K, V> Bucket<K, V> {
    pub(crate) fn empty() -> Self {
        Bucket {
            tags: AtomicU64::new(0),
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            overflow: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Slots whose tag equals `tag`, as a mask with bit `8 * i + 7` set for slot `i`.
    #[inline(always)]
    pub(crate) fn matches(tags: u64, tag: u8) -> u64 {
        let x = tags ^ (LOW_BITS * u64::from(tag));
        // Exact zero-byte test (no borrow between bytes): a byte's high bit ends up set when
        // the byte is nonzero.
        let nonzero = ((x & !HIGH_BITS) + !HIGH_BITS) | x;
        !nonzero & HIGH_BITS & TAG_BYTES
    }

    /// Empty slots, as a mask like [`Bucket::matches`].
    #[inline(always)]
    pub(crate) fn free_slots(tags: u64) -> u64 {
        Self::matches(tags, 0)
    }

    /// The slot index of the lowest bit of a mask from [`Bucket::matches`].
    #[inline(always)]
    pub(crate) fn first(mask: u64) -> usize {
        (mask.trailing_zeros() / 8) as usize
    }

    /// Occupied slots.
    pub(crate) fn keys(tags: u64) -> usize {
        SLOTS - Self::free_slots(tags).count_ones() as usize
    }

    /// `tags` with slot `i`'s tag set to `tag` (0 clears it).
    pub(crate) fn with_tag(tags: u64, i: usize, tag: u8) -> u64 {
        (tags & !(0xff << (8 * i))) | (u64::from(tag) << (8 * i))
    }

    /// An overflow bucket on the heap.
    pub(crate) fn alloc_overflow() -> *mut Bucket<K, V> {
        Box::into_raw(Box::new(Bucket::empty()))
    }
}

/// A key's place in one bucket table: its bucket and its tag.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hashed {
    pub(crate) index: usize,
    pub(crate) tag: u8,
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
    pub(crate) buckets: Box<[Bucket<K, V>]>,
    _owns: PhantomData<Box<Node<K, V>>>,
}

impl<K, V> BucketTable<K, V> {
    /// A table of `lines` empty buckets (a power of two) hashing with `seed`, on the heap.
    pub(crate) fn alloc(lines: usize, seed: u64) -> *mut BucketTable<K, V> {
        debug_assert!(lines.is_power_of_two());
        let buckets: Box<[Bucket<K, V>]> = (0..lines).map(|_| Bucket::empty()).collect();
        Box::into_raw(Box::new(BucketTable {
            mask: lines - 1,
            // Two independent halves: the per-table SharedSeed means no process-wide constant
            // survives a reseed.
            hasher_seed: crate::seed::splitmix64_mix(seed ^ 0x5851_f42d_4c95_7f2d),
            shared_seed: SharedSeed::from_u64(seed),
            future: AtomicPtr::new(ptr::null_mut()),
            buckets,
            _owns: PhantomData,
        }))
    }

    /// Number of bucket lines.
    #[inline(always)]
    pub(crate) fn lines(&self) -> usize {
        self.mask + 1
    }

    /// The table's size in the load factor's units (`lines * SIZE_PER_BUCKET`).
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.lines() * SIZE_PER_BUCKET
    }

    /// Where `key` goes in this table.
    #[inline(always)]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> Hashed {
        let mut hasher = FoldHasher::with_seed(self.hasher_seed, &self.shared_seed);
        key.hash(&mut hasher);
        let h = hasher.finish();
        Hashed {
            index: (h as usize) & self.mask,
            tag: ((h >> 57) as u8) | 0x80,
        }
    }

    /// Iterates over bucket `index`'s chain. Caller holds the writer lock or a guard as for
    /// [`BucketTable::lookup`].
    pub(crate) fn chain(&self, index: usize) -> Chain<'_, K, V> {
        Chain {
            next: &self.buckets[index],
            _table: PhantomData,
        }
    }
}

/// The lines of one bucket chain, first line first.
pub(crate) struct Chain<'a, K, V> {
    next: *const Bucket<K, V>,
    _table: PhantomData<&'a BucketTable<K, V>>,
}

impl<'a, K, V> Iterator for Chain<'a, K, V> {
    type Item = &'a Bucket<K, V>;

    #[inline]
    fn next(&mut self) -> Option<&'a Bucket<K, V>> {
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

impl<K: Eq, V> BucketTable<K, V> {
    /// The object in a slot holding `key` in this table, if any (lock-free reader walk).
    ///
    /// # Safety
    /// The caller holds the writer lock or a guard of the default collector pinned before it
    /// loaded the pointer to this table, so the table, its overflow lines and every node
    /// reachable from it stay allocated for the borrow `'a`.
    #[inline]
    pub(crate) unsafe fn lookup<'a>(&'a self, key: &K) -> Option<&'a Node<K, V>>
    where
        K: Hash,
    {
        let h = self.hash(key);
        debug_assert!(h.index < self.buckets.len());
        // SAFETY: `h.index` is masked with `mask`, and the table has `mask + 1` buckets.
        let mut bucket = unsafe { self.buckets.get_unchecked(h.index) };
        loop {
            let mut m = Bucket::<K, V>::matches(bucket.tags.load(Ordering::Acquire), h.tag);
            while m != 0 {
                let p = bucket.slots[Bucket::<K, V>::first(m)].load(Ordering::Acquire);
                if !p.is_null() {
                    // SAFETY: a slot's pointer is a live node published by the writer; the
                    // caller's guard keeps it allocated even if it is unpublished meanwhile.
                    let n = unsafe { &*p };
                    if n.key == *key {
                        return Some(n);
                    }
                }
                m &= m - 1;
            }
            let next = bucket.overflow.load(Ordering::Acquire);
            if next.is_null() {
                return None;
            }
            // SAFETY: an overflow line linked from this chain; retired only after being
            // unlinked, through the collector the caller's guard pins.
            bucket = unsafe { &*next };
        }
    }
}

impl<K, V> Drop for BucketTable<K, V> {
    /// Frees the overflow lines (not the nodes: a retired table is empty, and the map's own
    /// drop frees the nodes of the live tables first).
    fn drop(&mut self) {
        for b in self.buckets.iter() {
            let mut o = b.overflow.load(Ordering::Relaxed);
            while !o.is_null() {
                // SAFETY: overflow lines come from `Bucket::alloc_overflow` (a `Box`), each is
                // linked from exactly one place, and a dropped table is unreachable.
                let line = unsafe { Box::from_raw(o) };
                o = line.overflow.load(Ordering::Relaxed);
            }
        }
    }
}

/// Iterator over the objects that share one key, newest first.
pub struct Dups<'g, K, V> {
    pub(crate) next: *const Node<K, V>,
    pub(crate) _guard: PhantomData<&'g Node<K, V>>,
}

impl<K, V> Dups<'_, K, V> {
    pub(crate) fn empty() -> Self {
        Dups {
            next: ptr::null(),
            _guard: PhantomData,
        }
    }
}

impl<'g, K, V> Iterator for Dups<'g, K, V> {
    type Item = &'g V;

    #[inline]
    fn next(&mut self) -> Option<&'g V> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is null or an object reachable from the table when it was loaded, and
        // the guard borrowed for `'g` was pinned before that load, so it is still allocated.
        let n = unsafe { &*self.next };
        self.next = n.dup.load(Ordering::Acquire);
        Some(&n.value)
    }
}

impl<K, V> std::fmt::Debug for Dups<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dups").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_matching_is_exact() {
        let mut tags = 0;
        for (i, t) in [0x80u8, 0xff, 0x81, 0x80, 0, 0xfe].into_iter().enumerate() {
            tags = Bucket::<u32, u32>::with_tag(tags, i, t);
        }
        let slots = |m: u64| {
            (0..SLOTS)
                .filter(|i| m & (0x80 << (8 * i)) != 0)
                .collect::<Vec<_>>()
        };
        assert_eq!(slots(Bucket::<u32, u32>::matches(tags, 0x80)), [0, 3]);
        assert_eq!(slots(Bucket::<u32, u32>::matches(tags, 0xff)), [1]);
        assert_eq!(
            slots(Bucket::<u32, u32>::matches(tags, 0x82)),
            Vec::<usize>::new()
        );
        assert_eq!(slots(Bucket::<u32, u32>::free_slots(tags)), [4]);
        assert_eq!(Bucket::<u32, u32>::keys(tags), 5);
        assert_eq!(
            Bucket::<u32, u32>::first(Bucket::<u32, u32>::matches(tags, 0xfe)),
            5
        );
        assert_eq!(std::mem::size_of::<Bucket<u32, u32>>(), 64);
    }

    #[test]
    fn nodes_never_straddle_a_line() {
        assert_eq!(Node::<u32, [u8; 12]>::layout().align(), 32);
        assert_eq!(Node::<u128, [u8; 12]>::layout().size(), 64);
        let p = Node::alloc(1u32, [0u8; 12], ptr::null_mut());
        assert_eq!(p as usize % 32, 0);
        // SAFETY: allocated above, never shared.
        unsafe { Node::free(p) };
    }
}
