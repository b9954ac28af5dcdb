//! Bucket tables, chain nodes and the lock-free walk over them (the unsafe core).
//!
//! A chain link is a `usize`: an even value is the address of a [`Node`], an odd value is a
//! *nulls marker*, the address of the bucket slot the chain hangs from with the low bit set.
//! Every chain ends in its own bucket's marker, so a reader that followed a node which the writer
//! moved to a bucket of the next table (migration relinks nodes in place, as the kernel does)
//! notices at the end of the walk that it is in the wrong chain and restarts its bucket.
//! Bucket slots are `AtomicUsize`s (8-byte aligned), so markers never collide with node
//! addresses, and a marker names one slot of one table for as long as a pinned reader can see it.

use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use foldhash::SharedSeed;
use foldhash::quality::FoldHasher;

/// One object of the multimap. The newest object of each key is a member of its bucket's hash
/// chain (through `next`); older objects of the same key hang off it through `dup`.
pub(crate) struct Node<K, V> {
    /// The next member of the hash chain, or the chain's nulls marker. Only meaningful while
    /// this node is a chain member; frozen (but still a valid link) once it is not.
    pub(crate) next: AtomicUsize,
    /// The next older object with the same key, or null.
    pub(crate) dup: AtomicPtr<Node<K, V>>,
    pub(crate) key: K,
    pub(crate) value: V,
}

impl<K, V> Node<K, V> {
    /// A heap node, returned as a link (its address, which is even).
    pub(crate) fn alloc(key: K, value: V, next: usize, dup: *mut Node<K, V>) -> usize {
        let node = Box::new(Node {
            next: AtomicUsize::new(next),
            dup: AtomicPtr::new(dup),
            key,
            value,
        });
        Box::into_raw(node) as usize
    }
}

/// Whether a link is a nulls marker (the end of a chain) rather than a node.
#[inline(always)]
pub(crate) fn is_marker(link: usize) -> bool {
    link & 1 == 1
}

/// Borrows the node behind a link.
///
/// # Safety
/// - `link` is even and was loaded from a bucket slot, a chain member's `next` or an object's
///   `dup` of a table reachable from the [`RhlTable`](crate::RhlTable), and
/// - the caller holds the writer lock, or a guard of the default collector that was pinned
///   before the load; nodes are only freed through that collector once unreachable.
#[inline(always)]
pub(crate) unsafe fn node<'a, K, V>(link: usize) -> &'a Node<K, V> {
    debug_assert!(!is_marker(link) && link != 0);
    // SAFETY: the caller guarantees that `link` is the address of a live `Node<K, V>`.
    unsafe { &*(link as *const Node<K, V>) }
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
    /// Chain heads; an empty bucket holds its own marker.
    pub(crate) buckets: Box<[AtomicUsize]>,
    _owns: PhantomData<Box<Node<K, V>>>,
}

impl<K, V> BucketTable<K, V> {
    /// A table of `size` empty buckets (a power of two) hashing with `seed`, on the heap.
    pub(crate) fn alloc(size: usize, seed: u64) -> *mut BucketTable<K, V> {
        debug_assert!(size.is_power_of_two());
        let buckets: Box<[AtomicUsize]> = (0..size).map(|_| AtomicUsize::new(0)).collect();
        let table = Box::new(BucketTable {
            mask: size - 1,
            // Two independent halves: the per-table SharedSeed means no process-wide constant
            // survives a reseed.
            hasher_seed: crate::seed::splitmix64_mix(seed ^ 0x5851_f42d_4c95_7f2d),
            shared_seed: SharedSeed::from_u64(seed),
            future: AtomicPtr::new(ptr::null_mut()),
            buckets,
            _owns: PhantomData,
        });
        for (i, slot) in table.buckets.iter().enumerate() {
            slot.store(table.marker(i), Ordering::Relaxed);
        }
        Box::into_raw(table)
    }

    /// Number of buckets.
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.mask + 1
    }

    /// The nulls marker that ends bucket `index`'s chain.
    #[inline(always)]
    pub(crate) fn marker(&self, index: usize) -> usize {
        (&self.buckets[index] as *const AtomicUsize as usize) | 1
    }

    /// The bucket `key` hashes to in this table.
    #[inline(always)]
    pub(crate) fn bucket_of<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        let mut hasher = FoldHasher::with_seed(self.hasher_seed, &self.shared_seed);
        key.hash(&mut hasher);
        (hasher.finish() as usize) & self.mask
    }
}

impl<K: Eq, V> BucketTable<K, V> {
    /// The chain member holding `key` in this table, if any (lock-free reader walk).
    ///
    /// # Safety
    /// The caller holds the writer lock or a guard of the default collector pinned before it
    /// loaded the pointer to this table, so the table and every node reachable from it stay
    /// allocated for the borrow `'a`.
    #[inline]
    pub(crate) unsafe fn lookup<'a>(&'a self, key: &K) -> Option<&'a Node<K, V>>
    where
        K: Hash,
    {
        let index = self.bucket_of(key);
        let slot = &self.buckets[index];
        let end = self.marker(index);
        'restart: loop {
            let mut link = slot.load(Ordering::Acquire);
            loop {
                if is_marker(link) {
                    if link == end {
                        return None;
                    }
                    // We followed a node that migrated into another table's chain.
                    continue 'restart;
                }
                // SAFETY: `link` is even and was loaded from this bucket's chain; the caller's
                // guard keeps every node reachable since the pin alive.
                let n = unsafe { node::<K, V>(link) };
                if n.key == *key {
                    return Some(n);
                }
                link = n.next.load(Ordering::Acquire);
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
