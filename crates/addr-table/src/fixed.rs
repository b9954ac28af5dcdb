//! [`FixedTable`]: the design being replaced, a fixed 256-bucket chained hash (the kernel's
//! `inet_addr_lst` / `inet6_addr_lst`, `IN4_ADDR_HSIZE = 256`), kept as the test reference and
//! the benchmark baseline.
//!
//! Buckets are singly linked lists (hlists) under the same epoch discipline as
//! [`RhlTable`](crate::RhlTable): readers walk lock-free under a guard, one writer at a time
//! inserts at the head (so equal keys come out newest first) and unlinks, freeing through the
//! epoch. The bucket is `hash_32(net_mix ^ fold32(key), 8)`: a multiplicative hash with no
//! secret, so chains grow as `n / 256` and anyone who knows `net_mix` can fill one bucket.

use std::marker::PhantomData;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Deref;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::{self as epoch, Guard, Shared};

use crate::rhltable::check_guard;

/// log2 of the number of buckets (`IN4_ADDR_HSIZE_SHIFT`).
pub const HSIZE_SHIFT: u32 = 8;
/// Number of buckets (`IN4_ADDR_HSIZE`, `IN6_ADDR_HSIZE`).
pub const HSIZE: usize = 1 << HSIZE_SHIFT;
/// The multiplier of the kernel's `hash_32` (2^32 divided by the golden ratio).
pub const GOLDEN_RATIO_32: u32 = 0x61c8_8647;

/// The top `bits` bits of `val * GOLDEN_RATIO_32` (the kernel's `hash_32`).
#[inline(always)]
pub fn hash_32(val: u32, bits: u32) -> u32 {
    val.wrapping_mul(GOLDEN_RATIO_32) >> (32 - bits)
}

/// Keys of a [`FixedTable`]: folded to 32 bits before `hash_32` (IPv6 xors its four words,
/// as the kernel's `ipv6_addr_hash`).
pub trait Fold32: Eq {
    /// The 32-bit fold of the key.
    fn fold32(&self) -> u32;
}

impl Fold32 for u32 {
    fn fold32(&self) -> u32 {
        *self
    }
}

impl Fold32 for u128 {
    fn fold32(&self) -> u32 {
        let v = *self;
        (v as u32) ^ ((v >> 32) as u32) ^ ((v >> 64) as u32) ^ ((v >> 96) as u32)
    }
}

impl Fold32 for Ipv4Addr {
    fn fold32(&self) -> u32 {
        self.to_bits()
    }
}

impl Fold32 for Ipv6Addr {
    fn fold32(&self) -> u32 {
        self.to_bits().fold32()
    }
}

struct FNode<K, V> {
    next: AtomicPtr<FNode<K, V>>,
    key: K,
    value: V,
}

/// A fixed 256-bucket chained hash multimap with epoch-protected lookups (the old
/// `inet_addr_lst`). Readers share it as an `Arc` and only read it; its one
/// [`FixedWriter`] makes it and changes it.
///
/// ```
/// use addr_table::FixedWriter;
/// let mut writer: FixedWriter<u32, u32> = FixedWriter::new(0x1234);
/// let table = writer.reader().clone();
/// writer.insert(10, 1);
/// writer.insert(10, 2);
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(table.get(&10, &guard), Some(&2));
/// assert_eq!(table.get_all(&10, &guard).copied().collect::<Vec<_>>(), [2, 1]);
/// ```
///
/// A reader cannot write:
///
/// ```compile_fail,E0624
/// let writer: addr_table::FixedWriter<u32, u32> = addr_table::FixedWriter::new(1);
/// writer.reader().insert(1, 2);
/// ```
///
/// ```compile_fail,E0624
/// let writer: addr_table::FixedWriter<u32, u32> = addr_table::FixedWriter::new(1);
/// writer.reader().remove(&1, |_| true);
/// ```
///
/// Nor make a table of its own to write:
///
/// ```compile_fail,E0624
/// let table: addr_table::FixedTable<u32, u32> = addr_table::FixedTable::new(1);
/// ```
pub struct FixedTable<K, V> {
    buckets: Box<[AtomicPtr<FNode<K, V>>]>,
    net_mix: u32,
    objects: AtomicUsize,
    writer: Mutex<()>,
    _owns: PhantomData<(K, V)>,
}

impl<K: Fold32, V> FixedTable<K, V> {
    /// An empty table for the namespace whose hash mix is `net_mix` (the kernel's
    /// `net_hash_mix`, a per-namespace random value); [`FixedWriter::new`] makes it.
    pub(crate) fn new(net_mix: u32) -> Self {
        FixedTable {
            buckets: (0..HSIZE)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            net_mix,
            objects: AtomicUsize::new(0),
            writer: Mutex::new(()),
            _owns: PhantomData,
        }
    }

    /// The bucket of `key`.
    #[inline(always)]
    pub fn bucket_of(&self, key: &K) -> usize {
        hash_32(self.net_mix ^ key.fold32(), HSIZE_SHIFT) as usize
    }

    /// Objects in the table, duplicates included.
    pub fn len(&self) -> usize {
        self.objects.load(Ordering::Relaxed)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn first<'g>(&'g self, key: &K, guard: &'g Guard) -> *const FNode<K, V> {
        check_guard(guard);
        let mut p = self.buckets[self.bucket_of(key)].load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: `p` was loaded from this table's chain after `guard` was pinned; nodes
            // are freed through the default collector only after they became unreachable.
            let n = unsafe { &*p };
            if n.key == *key {
                return p;
            }
            p = n.next.load(Ordering::Acquire);
        }
        ptr::null()
    }

    /// The newest object with `key`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    #[inline]
    pub fn get<'g>(&'g self, key: &K, guard: &'g Guard) -> Option<&'g V> {
        let p = self.first(key, guard);
        // SAFETY: null or a node reachable after `guard` was pinned (see `first`).
        unsafe { p.as_ref() }.map(|n| &n.value)
    }

    /// Whether some object has `key`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn contains_key(&self, key: &K, guard: &Guard) -> bool {
        !self.first(key, guard).is_null()
    }

    /// Every object with `key`, newest first.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn get_all<'g>(&'g self, key: &'g K, guard: &'g Guard) -> FixedDups<'g, K, V> {
        FixedDups {
            next: self.first(key, guard),
            key,
        }
    }

    /// The longest chain, under the writer lock.
    pub fn max_chain(&self) -> usize {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut max = 0;
        for slot in self.buckets.iter() {
            let mut len = 0;
            let mut p = slot.load(Ordering::Relaxed);
            while !p.is_null() {
                len += 1;
                // SAFETY: under the writer lock nothing is freed.
                p = unsafe { &*p }.next.load(Ordering::Relaxed);
            }
            max = max.max(len);
        }
        max
    }
}

impl<K, V> FixedTable<K, V>
where
    K: Fold32 + Send + 'static,
    V: Send + 'static,
{
    /// Adds an object at the head of its chain. Writer only ([`FixedWriter::insert`]).
    pub(crate) fn insert(&self, key: K, value: V) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &self.buckets[self.bucket_of(&key)];
        let node = Box::new(FNode {
            next: AtomicPtr::new(slot.load(Ordering::Relaxed)),
            key,
            value,
        });
        slot.store(Box::into_raw(node), Ordering::Release);
        self.objects.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the newest object with `key` for which `matches` is true; returns whether one
    /// was. Writer only ([`FixedWriter::remove`]).
    pub(crate) fn remove(&self, key: &K, mut matches: impl FnMut(&V) -> bool) -> bool {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut pprev = &self.buckets[self.bucket_of(key)];
        let mut p = pprev.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: under the writer lock nothing is freed.
            let n = unsafe { &*p };
            if n.key == *key && matches(&n.value) {
                pprev.store(n.next.load(Ordering::Relaxed), Ordering::Release);
                self.objects.fetch_sub(1, Ordering::Relaxed);
                let guard = epoch::pin();
                // SAFETY: `n` is unreachable now; readers that reached it pinned before.
                unsafe { guard.defer_destroy(Shared::from(p as *const FNode<K, V>)) };
                return true;
            }
            pprev = &n.next;
            p = n.next.load(Ordering::Relaxed);
        }
        false
    }
}

/// The one writer of a [`FixedTable`], as [`RhlWriter`](crate::RhlWriter) is of an
/// [`RhlTable`](crate::RhlTable): it makes the table, hands readers its `Arc`
/// ([`FixedWriter::reader`]), derefs to it for its own reads, and takes `&mut self` for every
/// change; it is not `Clone`. Dropping it freezes the table.
///
/// ```
/// use addr_table::FixedWriter;
/// let mut writer: FixedWriter<u32, u32> = FixedWriter::new(7);
/// writer.insert(1, 10);
/// assert!(writer.remove(&1, |v| *v == 10));
/// assert!(!writer.remove(&1, |_| true));
/// assert!(writer.is_empty());
/// ```
pub struct FixedWriter<K, V> {
    table: Arc<FixedTable<K, V>>,
}

impl<K, V> Deref for FixedWriter<K, V> {
    type Target = FixedTable<K, V>;

    fn deref(&self) -> &FixedTable<K, V> {
        &self.table
    }
}

impl<K, V> std::fmt::Debug for FixedWriter<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedWriter")
            .field("table", &self.table)
            .finish()
    }
}

impl<K: Fold32, V> FixedWriter<K, V> {
    /// An empty table for the namespace whose hash mix is `net_mix` (the kernel's
    /// `net_hash_mix`), and its writer.
    pub fn new(net_mix: u32) -> Self {
        FixedWriter {
            table: Arc::new(FixedTable::new(net_mix)),
        }
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<FixedTable<K, V>> {
        &self.table
    }
}

impl<K, V> FixedWriter<K, V>
where
    K: Fold32 + Send + 'static,
    V: Send + 'static,
{
    /// Adds an object at the head of its chain (equal keys come out newest first).
    pub fn insert(&mut self, key: K, value: V) {
        self.table.insert(key, value);
    }

    /// Removes the newest object with `key` for which `matches` is true; returns whether one
    /// was. Readers that reached it keep reading it until they unpin.
    pub fn remove(&mut self, key: &K, matches: impl FnMut(&V) -> bool) -> bool {
        self.table.remove(key, matches)
    }
}

impl<K, V> Drop for FixedTable<K, V> {
    fn drop(&mut self) {
        for slot in self.buckets.iter_mut() {
            let mut p = *slot.get_mut();
            while !p.is_null() {
                // SAFETY: `&mut self`: the table owns every reachable node, each reachable once.
                let node = unsafe { Box::from_raw(p) };
                p = node.next.load(Ordering::Relaxed);
            }
        }
    }
}

impl<K, V> std::fmt::Debug for FixedTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedTable")
            .field("objects", &self.objects.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Iterator over a [`FixedTable`]'s objects with one key, newest first.
pub struct FixedDups<'g, K, V> {
    next: *const FNode<K, V>,
    key: &'g K,
}

impl<'g, K: Eq, V: 'g> Iterator for FixedDups<'g, K, V> {
    type Item = &'g V;

    fn next(&mut self) -> Option<&'g V> {
        while !self.next.is_null() {
            // SAFETY: `next` was loaded from the chain under the guard borrowed for `'g`.
            let n = unsafe { &*self.next };
            self.next = n.next.load(Ordering::Acquire);
            if n.key == *self.key {
                return Some(&n.value);
            }
        }
        None
    }
}

impl<K, V> std::fmt::Debug for FixedDups<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedDups").finish_non_exhaustive()
    }
}
