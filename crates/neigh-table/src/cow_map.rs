//! The hash map both tables are built on: a bucket array of immutable chains, copied on write.
//!
//! Readers load the bucket array, then one chain, and scan it; both loads are epoch-protected,
//! so a reader sees each chain either before or after a change, never in between. The single
//! writer (serialised by a mutex) builds a new chain for the bucket it changes, swaps it in and
//! retires the old one through the epoch. When the map has grown to twice as many entries as
//! buckets (or shrunk to an eighth) the writer builds a whole new bucket array with fresh chains
//! and swaps the array pointer; readers still holding the old array keep a consistent view of
//! the previous version until they unpin.

use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use foldhash::fast::RandomState;

use crate::guard::check_guard;

/// Buckets of a new or shrunk map.
const MIN_BUCKETS: usize = 16;

/// One bucket's entries; never changed once published.
struct Chain<K, V> {
    entries: Vec<(K, V)>,
}

/// A power-of-two array of chain pointers (null = empty bucket).
struct Buckets<K, V> {
    slots: Box<[Atomic<Chain<K, V>>]>,
}

impl<K, V> Buckets<K, V> {
    fn new(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        Buckets {
            slots: (0..n).map(|_| Atomic::null()).collect(),
        }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }
}

impl<K, V> Drop for Buckets<K, V> {
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            // SAFETY: a bucket array is dropped either with the map (`&mut` access: no reader)
            // or by the epoch after it was replaced and every reader that could see it has
            // unpinned. Its current chains are owned by it alone: a chain swapped out of a slot
            // was retired separately, and a resize gives the new array fresh chains.
            unsafe {
                let chain = slot.load(Ordering::Relaxed, epoch::unprotected());
                if !chain.is_null() {
                    drop(chain.into_owned());
                }
            }
        }
    }
}

/// The epoch-protected copy-on-write hash map. `K` is small and `Copy`; `V` is cloned when its
/// bucket is rewritten.
pub(crate) struct CowMap<K, V> {
    buckets: Atomic<Buckets<K, V>>,
    hasher: RandomState,
    len: AtomicUsize,
    generation: AtomicU64,
    writer: Mutex<()>,
}

impl<K, V> Drop for CowMap<K, V> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can reach the map any more, and the array
        // pointer is never null.
        unsafe {
            let buckets = self.buckets.load(Ordering::Relaxed, epoch::unprotected());
            drop(buckets.into_owned());
        }
    }
}

impl<K: Copy + Eq + Hash + 'static, V: Clone + PartialEq + 'static> CowMap<K, V> {
    pub(crate) fn new() -> Self {
        CowMap {
            buckets: Atomic::new(Buckets::new(MIN_BUCKETS)),
            hasher: RandomState::default(),
            len: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            writer: Mutex::new(()),
        }
    }

    fn load_buckets<'g>(&self, guard: &'g Guard) -> &'g Buckets<K, V> {
        let ptr = self.buckets.load(Ordering::Acquire, guard);
        // SAFETY: the array pointer is never null (set in `new`, only replaced by another
        // array), and a replaced array is retired through the epoch, so it outlives `guard`.
        unsafe { ptr.deref() }
    }

    fn chain<'g>(slot: &Atomic<Chain<K, V>>, guard: &'g Guard) -> &'g [(K, V)] {
        let ptr = slot.load(Ordering::Acquire, guard);
        // SAFETY: a non-null chain is published complete by the writer's release store and
        // retired through the epoch when replaced (or dropped with its array, itself retired
        // through the epoch), so it outlives `guard`.
        match unsafe { ptr.as_ref() } {
            Some(chain) => &chain.entries,
            None => &[],
        }
    }

    fn index(&self, key: &K, buckets: &Buckets<K, V>) -> usize {
        (self.hasher.hash_one(key) as usize) & buckets.mask()
    }

    /// The value stored under `key`.
    pub(crate) fn get<'g>(&self, key: &K, guard: &'g Guard) -> Option<&'g V> {
        check_guard(guard);
        let buckets = self.load_buckets(guard);
        let slot = &buckets.slots[self.index(key, buckets)];
        Self::chain(slot, guard)
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Every entry, in no particular order.
    pub(crate) fn for_each<'g>(&self, guard: &'g Guard, mut f: impl FnMut(&'g K, &'g V)) {
        check_guard(guard);
        let buckets = self.load_buckets(guard);
        for slot in buckets.slots.iter() {
            for (k, v) in Self::chain(slot, guard) {
                f(k, v);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn buckets(&self) -> usize {
        self.load_buckets(&epoch::pin()).slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes `entries` as the chain of `slot`, retiring the old one. Writer only.
    fn publish(slot: &Atomic<Chain<K, V>>, entries: Vec<(K, V)>, guard: &Guard) {
        let new = if entries.is_empty() {
            Shared::null()
        } else {
            Owned::new(Chain { entries }).into_shared(guard)
        };
        let old = slot.swap(new, Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: `old` was unlinked by the swap and is retired exactly once; readers that
            // loaded it are pinned, so it is freed after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Inserts or replaces; returns the previous value, and whether anything changed.
    pub(crate) fn upsert(&self, key: K, value: V) -> (Option<V>, bool) {
        let _w = self.lock();
        let guard = &epoch::pin();
        let buckets = self.load_buckets(guard);
        let slot = &buckets.slots[self.index(&key, buckets)];
        let old_chain = Self::chain(slot, guard);
        let previous = old_chain.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        if previous == Some(&value) {
            return (previous.cloned(), false);
        }
        let previous = previous.cloned();
        let mut entries = Vec::with_capacity(old_chain.len() + 1);
        entries.extend(old_chain.iter().filter(|(k, _)| *k != key).cloned());
        entries.push((key, value));
        Self::publish(slot, entries, guard);
        if previous.is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        self.resize_if_needed(buckets, guard);
        self.bump();
        (previous, true)
    }

    /// Removes every entry `remove` selects; returns them.
    pub(crate) fn remove_where(&self, mut remove: impl FnMut(&K, &V) -> bool) -> Vec<(K, V)> {
        let _w = self.lock();
        let guard = &epoch::pin();
        let buckets = self.load_buckets(guard);
        let mut removed = Vec::new();
        for slot in buckets.slots.iter() {
            let chain = Self::chain(slot, guard);
            if !chain.iter().any(|(k, v)| remove(k, v)) {
                continue;
            }
            let mut kept = Vec::with_capacity(chain.len());
            for (k, v) in chain {
                if remove(k, v) {
                    removed.push((*k, v.clone()));
                } else {
                    kept.push((*k, v.clone()));
                }
            }
            Self::publish(slot, kept, guard);
        }
        if !removed.is_empty() {
            self.len.fetch_sub(removed.len(), Ordering::Relaxed);
            self.resize_if_needed(buckets, guard);
            self.bump();
        }
        removed
    }

    /// Removes `key`; returns its value.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let _w = self.lock();
        let guard = &epoch::pin();
        let buckets = self.load_buckets(guard);
        let slot = &buckets.slots[self.index(key, buckets)];
        let chain = Self::chain(slot, guard);
        let (_, value) = chain.iter().find(|(k, _)| k == key)?;
        let value = value.clone();
        let kept = chain.iter().filter(|(k, _)| k != key).cloned().collect();
        Self::publish(slot, kept, guard);
        self.len.fetch_sub(1, Ordering::Relaxed);
        self.resize_if_needed(buckets, guard);
        self.bump();
        Some(value)
    }

    /// Grows at two entries per bucket, shrinks at one per eight. Writer only.
    fn resize_if_needed(&self, buckets: &Buckets<K, V>, guard: &Guard) {
        let len = self.len();
        let n = buckets.slots.len();
        let target = if len > 2 * n {
            (len / 2).next_power_of_two().max(n * 2)
        } else if n > MIN_BUCKETS && len < n / 8 {
            (len * 2).next_power_of_two().max(MIN_BUCKETS)
        } else {
            return;
        };
        let mut chains: Vec<Vec<(K, V)>> = (0..target).map(|_| Vec::new()).collect();
        for slot in buckets.slots.iter() {
            for (k, v) in Self::chain(slot, guard) {
                let i = (self.hasher.hash_one(k) as usize) & (target - 1);
                chains[i].push((*k, v.clone()));
            }
        }
        let fresh = Buckets::new(target);
        for (slot, entries) in fresh.slots.iter().zip(chains) {
            if !entries.is_empty() {
                slot.store(Owned::new(Chain { entries }), Ordering::Relaxed);
            }
        }
        let old = self
            .buckets
            .swap(Owned::new(fresh), Ordering::AcqRel, guard);
        // SAFETY: the old array was unlinked by the swap and is retired exactly once; it drops
        // its own current chains when the epoch frees it, after every reader of it unpinned.
        unsafe { guard.defer_destroy(old) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_shrinks_keeping_every_entry() {
        let map = CowMap::<u32, u64>::new();
        for i in 0..1000 {
            assert_eq!(map.upsert(i, u64::from(i) * 3), (None, true));
        }
        assert!(map.buckets() >= 256, "{} buckets", map.buckets());
        let guard = &epoch::pin();
        for i in 0..1000 {
            assert_eq!(map.get(&i, guard), Some(&(u64::from(i) * 3)));
        }
        assert_eq!(map.remove_where(|k, _| *k >= 10).len(), 990);
        assert_eq!(map.len(), 10);
        assert!(map.buckets() <= 32, "{} buckets", map.buckets());
        for i in 0..1000 {
            assert_eq!(map.get(&i, guard).is_some(), i < 10);
        }
    }

    #[test]
    fn unchanged_upsert_does_not_bump() {
        let map = CowMap::<u32, u8>::new();
        assert_eq!(map.upsert(1, 1), (None, true));
        let g = map.generation();
        assert_eq!(map.upsert(1, 1), (Some(1), false));
        assert_eq!(map.generation(), g);
        assert_eq!(map.upsert(1, 2), (Some(1), true));
        assert!(map.generation() > g);
        assert_eq!(map.remove(&7), None);
        assert_eq!(map.remove(&1), Some(2));
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn a_reader_keeps_its_version_across_a_resize() {
        let map = CowMap::<u32, String>::new();
        map.upsert(0, "zero".to_owned());
        let guard = epoch::pin();
        let held = map.get(&0, &guard).expect("present");
        for i in 1..200 {
            map.upsert(i, i.to_string());
        }
        map.upsert(0, "changed".to_owned());
        assert_eq!(held, "zero");
        assert_eq!(map.get(&0, &guard).map(String::as_str), Some("changed"));
    }
}
