//! [`RhlTable`]: the resizable hash multimap (the kernel's rhltable over rhashtable).

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Guard, Shared};

use crate::bucket::{BucketTable, Dups, Node, is_marker, node};
use crate::error::{InsertError, ParamsError};
use crate::seed::{SeedMode, SeedSource};

/// A chain longer than this in the table an insert lands in forces a rehash (the kernel's
/// `RHT_ELASTICITY`): on a table at most 75% full, a chain of 17 distinct keys is all but
/// impossible by chance, so it means the keys were chosen against this table's seed.
pub const ELASTICITY: usize = 16;

/// Fewest buckets migrated per write while a rehash is in progress.
pub const MIGRATE_BATCH: usize = 4;

/// A rehash completes within this many writes: each write migrates
/// `max(MIGRATE_BATCH, old_size / MIGRATE_WRITES)` buckets. The kernel finishes a rehash in a
/// worker right away; without a thread of our own, a slow pace would leave the table
/// mid-migration when writes stop (readers then hash twice and probe two tables), so the pace
/// is bounded in writes, not in buckets. [`RhlTable::finish_rehash`] completes it at once.
pub const MIGRATE_WRITES: usize = 64;

/// The smallest `min_size` accepted (the kernel's `HASH_MIN_SIZE`).
pub const MIN_SIZE_FLOOR: usize = 4;

/// The largest `max_size` accepted.
pub const MAX_SIZE_CEILING: usize = 1 << 30;

/// Sizing and seeding of an [`RhlTable`] (the tunable part of the kernel's `rhashtable_params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Buckets of a new table and the floor of any shrink; a power of two, at least 4.
    /// Default 32, as in the seed post's conversion of `inet_addr_lst`.
    pub min_size: usize,
    /// The table never grows beyond this many buckets; a power of two, at most 2^30. Inserts of
    /// new keys fail once the table holds twice this many keys (the kernel's `max_elems`).
    pub max_size: usize,
    /// Shrink below 30% load (the kernel's `automatic_shrinking`). Default on.
    pub automatic_shrinking: bool,
    /// Where bucket-table seeds come from. Default [`SeedMode::Random`].
    pub seed: SeedMode,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            min_size: 32,
            max_size: 1 << 26,
            automatic_shrinking: true,
            seed: SeedMode::Random,
        }
    }
}

impl Params {
    fn validate(&self) -> Result<(), ParamsError> {
        if !self.min_size.is_power_of_two() || self.min_size < MIN_SIZE_FLOOR {
            return Err(ParamsError::MinSize(self.min_size));
        }
        if !self.max_size.is_power_of_two() || self.max_size > MAX_SIZE_CEILING {
            return Err(ParamsError::MaxSize(self.max_size));
        }
        if self.max_size < self.min_size {
            return Err(ParamsError::MaxBelowMin {
                min_size: self.min_size,
                max_size: self.max_size,
            });
        }
        Ok(())
    }
}

/// Counts of the rehashes a table has started, by cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RehashCounts {
    /// Doublings because the table went above 75% load.
    pub grows: u64,
    /// Shrinks because the table went below 30% load.
    pub shrinks: u64,
    /// Same-size rehashes with a fresh seed because a chain exceeded [`ELASTICITY`].
    pub reseeds: u64,
    /// Migrations that had to be completed at once because another rehash was due.
    pub forced_finishes: u64,
}

/// A consistent view of an [`RhlTable`]'s shape, taken under the writer lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    /// Buckets of the newest bucket table.
    pub size: usize,
    /// Buckets of the table being migrated away from, while a rehash is in progress.
    pub migrating_from: Option<usize>,
    /// Distinct keys (the kernel's `nelems`).
    pub keys: usize,
    /// Objects, duplicates included.
    pub objects: usize,
    /// Longest hash chain (distinct keys in one bucket) over the live tables.
    pub max_chain: usize,
    /// Rehashes started so far.
    pub rehashes: RehashCounts,
}

struct WriterState {
    /// Next bucket of the current table to migrate into its `future` table.
    cursor: usize,
    seeds: SeedSource,
    rehashes: RehashCounts,
}

/// A concurrent resizable hash multimap with the semantics of the kernel's rhltable.
///
/// - **Readers** ([`get`](Self::get), [`get_all`](Self::get_all),
///   [`contains_key`](Self::contains_key)) take a `&crossbeam_epoch::Guard` and never lock,
///   allocate or wait; during a rehash they search the old table, then the new one.
/// - **Writers** ([`insert`](Self::insert), [`remove`](Self::remove), ...) are serialized by an
///   internal mutex that readers never touch, and free through the epoch.
/// - Objects with equal keys form a list, newest first; [`len`](Self::len) counts distinct keys.
/// - The table grows above 75% load, shrinks below 30% (not below `min_size`), and rehashes with
///   a fresh seed when a chain exceeds [`ELASTICITY`]. Buckets migrate a few per write; a
///   migration completes before the next rehash starts.
///
/// ```
/// use addr_table::RhlTable;
/// use crossbeam_epoch as epoch;
///
/// let table: RhlTable<u32, &'static str> = RhlTable::new();
/// table.insert(7, "eth0")?;
/// table.insert(7, "eth1")?; // a duplicate key: newest first
/// let guard = epoch::pin();
/// assert_eq!(table.get_all(&7, &guard).copied().collect::<Vec<_>>(), ["eth1", "eth0"]);
/// assert_eq!(table.len(), 1);
/// assert!(table.remove(&7, |v| *v == "eth0"));
/// assert_eq!(table.get(&7, &guard), Some(&"eth1"));
/// # Ok::<(), addr_table::InsertError>(())
/// ```
pub struct RhlTable<K, V> {
    /// The oldest live bucket table; its `future`, when set, is the newest.
    tbl: AtomicPtr<BucketTable<K, V>>,
    nelems: AtomicUsize,
    nobjs: AtomicUsize,
    params: Params,
    writer: Mutex<WriterState>,
    /// Owns `K`s and `V`s: `Send`/`Sync` only when they are.
    _owns: PhantomData<(K, V)>,
}

/// Panics unless `guard` pins the default collector, the one this crate retires memory into.
#[inline(always)]
pub(crate) fn check_guard(guard: &Guard) {
    match guard.collector() {
        Some(c) if c == epoch::default_collector() => {}
        _ => panic!("addr-table: pass a guard from crossbeam_epoch::pin() (the default collector)"),
    }
}

impl<K, V> RhlTable<K, V> {
    /// Distinct keys in the table.
    pub fn len(&self) -> usize {
        self.nelems.load(Ordering::Relaxed)
    }

    /// Whether the table holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects in the table, duplicates included.
    pub fn objects(&self) -> usize {
        self.nobjs.load(Ordering::Relaxed)
    }

    /// The parameters the table was built with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    fn lock(&self) -> MutexGuard<'_, WriterState> {
        // A panic in a caller's predicate leaves the structure consistent (it runs before any
        // change), so a poisoned lock is safe to reuse.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Hash + Eq, V> RhlTable<K, V> {
    /// An empty table with the default [`Params`] (32 buckets, random seeds).
    pub fn new() -> Self {
        Self::build(Params::default())
    }

    /// An empty table with `params`.
    ///
    /// # Errors
    /// [`ParamsError`] when a size is not a power of two or out of range.
    pub fn with_params(params: Params) -> Result<Self, ParamsError> {
        params.validate()?;
        Ok(Self::build(params))
    }

    fn build(params: Params) -> Self {
        let mut seeds = SeedSource::new(params.seed);
        let tbl = BucketTable::alloc(params.min_size, seeds.next_seed());
        RhlTable {
            tbl: AtomicPtr::new(tbl),
            nelems: AtomicUsize::new(0),
            nobjs: AtomicUsize::new(0),
            params,
            writer: Mutex::new(WriterState {
                cursor: 0,
                seeds,
                rehashes: RehashCounts::default(),
            }),
            _owns: PhantomData,
        }
    }

    /// The chain member for `key`: old table first, then each newer one.
    #[inline]
    fn find<'g>(&'g self, key: &K, guard: &'g Guard) -> Option<&'g Node<K, V>> {
        check_guard(guard);
        let mut t = self.tbl.load(Ordering::Acquire);
        loop {
            // SAFETY: `t` was loaded after `guard` was pinned, from `self.tbl` or from the
            // `future` of a table loaded that way; tables are retired through the default
            // collector only after they became unreachable from `self.tbl`.
            let table = unsafe { &*t };
            // SAFETY: as above, the guard keeps this table's nodes alive.
            if let Some(n) = unsafe { table.lookup(key) } {
                return Some(n);
            }
            t = table.future.load(Ordering::Acquire);
            if t.is_null() {
                return None;
            }
        }
    }

    /// The newest object with `key`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn get<'g>(&'g self, key: &K, guard: &'g Guard) -> Option<&'g V> {
        self.find(key, guard).map(|n| &n.value)
    }

    /// Every object with `key`, newest first (empty when there is none).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn get_all<'g>(&'g self, key: &K, guard: &'g Guard) -> Dups<'g, K, V> {
        match self.find(key, guard) {
            Some(n) => Dups {
                next: n,
                _guard: PhantomData,
            },
            None => Dups::empty(),
        }
    }

    /// Whether some object has `key`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn contains_key(&self, key: &K, guard: &Guard) -> bool {
        self.find(key, guard).is_some()
    }

    /// Calls `f` on every object, under the writer lock (so it sees one consistent state; keep
    /// `f` short). Order: bucket by bucket, duplicates newest first.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let _w = self.lock();
        for table in self.live_tables() {
            for slot in table.buckets.iter() {
                let mut link = slot.load(Ordering::Relaxed);
                while !is_marker(link) {
                    // SAFETY: under the writer lock nothing is freed, and `link` is a chain
                    // member of a live table.
                    let head = unsafe { node::<K, V>(link) };
                    let mut d: *const Node<K, V> = head;
                    while !d.is_null() {
                        // SAFETY: `d` is `head` or a `dup` of a live object, under the lock.
                        let n = unsafe { &*d };
                        f(&n.key, &n.value);
                        d = n.dup.load(Ordering::Relaxed);
                    }
                    link = head.next.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// The shape of the table, under the writer lock.
    pub fn stats(&self) -> TableStats {
        let w = self.lock();
        let tables = self.live_tables();
        let mut max_chain = 0;
        for table in &tables {
            for slot in table.buckets.iter() {
                let mut len = 0;
                let mut link = slot.load(Ordering::Relaxed);
                while !is_marker(link) {
                    len += 1;
                    // SAFETY: a chain member of a live table, under the writer lock.
                    link = unsafe { node::<K, V>(link) }.next.load(Ordering::Relaxed);
                }
                max_chain = max_chain.max(len);
            }
        }
        let newest = tables[tables.len() - 1];
        TableStats {
            size: newest.size(),
            migrating_from: (tables.len() == 2).then(|| tables[0].size()),
            keys: self.len(),
            objects: self.objects(),
            max_chain,
            rehashes: w.rehashes,
        }
    }

    /// Which bucket of the newest table `key` hashes to, with that table's size. For
    /// diagnostics and tests (the seed, and so the answer, changes with every rehash).
    pub fn bucket_of(&self, key: &K) -> (usize, usize) {
        let _w = self.lock();
        let tables = self.live_tables();
        let newest = tables[tables.len() - 1];
        (newest.bucket_of(key), newest.size())
    }

    /// The current table and, during a rehash, its future table. Caller holds the writer lock.
    fn live_tables(&self) -> Vec<&BucketTable<K, V>> {
        // SAFETY: the caller holds the writer lock, and only a writer retires tables.
        let cur = unsafe { &*self.tbl.load(Ordering::Relaxed) };
        let fut = cur.future.load(Ordering::Relaxed);
        if fut.is_null() {
            vec![cur]
        } else {
            // SAFETY: as above; a future table is live until it is the current one's successor.
            vec![cur, unsafe { &*fut }]
        }
    }
}

impl<K: Hash + Eq, V> Default for RhlTable<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

/// Why the writer starts a rehash.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cause {
    Grow,
    Shrink,
    Reseed,
}

impl<K, V> RhlTable<K, V>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
{
    /// Adds an object; an existing key gets it as its newest duplicate.
    ///
    /// # Errors
    /// [`InsertError::TableFull`] when `key` is new and the table already holds twice
    /// `max_size` keys (nothing is inserted).
    pub fn insert(&self, key: K, value: V) -> Result<(), InsertError> {
        let mut w = self.lock();
        let guard = &epoch::pin();
        let t = self.prepare(&mut w, guard, &key);
        let index = t.bucket_of(&key);
        let slot = &t.buckets[index];
        let mut pprev = slot;
        let mut link = slot.load(Ordering::Relaxed);
        let mut chain = 0;
        while !is_marker(link) {
            // SAFETY: a chain member of the newest table, under the writer lock.
            let n = unsafe { node::<K, V>(link) };
            if n.key == key {
                // The new object takes the old one's place in the chain; readers standing on
                // the old one still follow its (unchanged) `next`.
                let new = Node::alloc(key, value, n.next.load(Ordering::Relaxed), link as *mut _);
                pprev.store(new, Ordering::Release);
                self.nobjs.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            chain += 1;
            pprev = &n.next;
            link = n.next.load(Ordering::Relaxed);
        }
        let max_elems = self.params.max_size * 2;
        if self.len() >= max_elems {
            return Err(InsertError::TableFull { max_elems });
        }
        let new = Node::alloc(
            key,
            value,
            slot.load(Ordering::Relaxed),
            std::ptr::null_mut(),
        );
        slot.store(new, Ordering::Release);
        self.nelems.fetch_add(1, Ordering::Relaxed);
        self.nobjs.fetch_add(1, Ordering::Relaxed);
        self.after_insert(&mut w, guard, chain + 1);
        Ok(())
    }

    /// Removes the newest object with `key` for which `matches` returns true; returns whether
    /// one was removed. Readers still holding it keep a valid reference until they unpin.
    pub fn remove(&self, key: &K, mut matches: impl FnMut(&V) -> bool) -> bool {
        let mut w = self.lock();
        let guard = &epoch::pin();
        let t = self.prepare(&mut w, guard, key);
        let Some((pprev, head)) = Self::chain_position(t, key) else {
            return false;
        };
        let mut prev: Option<&Node<K, V>> = None;
        let mut x: &Node<K, V> = head;
        while !matches(&x.value) {
            let d = x.dup.load(Ordering::Relaxed);
            if d.is_null() {
                return false;
            }
            prev = Some(x);
            // SAFETY: a `dup` of a live object, under the writer lock.
            x = unsafe { &*d };
        }
        match prev {
            Some(p) => p
                .dup
                .store(x.dup.load(Ordering::Relaxed), Ordering::Release),
            None => {
                let next = head.next.load(Ordering::Relaxed);
                let older = head.dup.load(Ordering::Relaxed);
                if older.is_null() {
                    pprev.store(next, Ordering::Release);
                    self.nelems.fetch_sub(1, Ordering::Relaxed);
                } else {
                    // The next older duplicate becomes the chain member.
                    // SAFETY: a `dup` of a live object, under the writer lock.
                    unsafe { &*older }.next.store(next, Ordering::Release);
                    pprev.store(older as usize, Ordering::Release);
                }
            }
        }
        self.nobjs.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `x` is now unreachable from the table; readers that reached it before were
        // pinned before this point, and the default collector frees it after they unpin.
        unsafe { guard.defer_destroy(Shared::from(x as *const Node<K, V>)) };
        self.after_remove(&mut w, guard);
        true
    }

    /// Removes every object with `key`; returns how many.
    pub fn remove_all(&self, key: &K) -> usize {
        let mut w = self.lock();
        let guard = &epoch::pin();
        let t = self.prepare(&mut w, guard, key);
        let Some((pprev, head)) = Self::chain_position(t, key) else {
            return 0;
        };
        pprev.store(head.next.load(Ordering::Relaxed), Ordering::Release);
        self.nelems.fetch_sub(1, Ordering::Relaxed);
        let mut removed = 0;
        let mut d: *const Node<K, V> = head;
        while !d.is_null() {
            // SAFETY: `d` is `head` or one of its duplicates, now unreachable; read before retiring.
            let next = unsafe { &*d }.dup.load(Ordering::Relaxed);
            // SAFETY: unreachable from the table; freed after every reader pinned before unpins.
            unsafe { guard.defer_destroy(Shared::from(d)) };
            removed += 1;
            d = next;
        }
        self.nobjs.fetch_sub(removed, Ordering::Relaxed);
        self.after_remove(&mut w, guard);
        removed
    }

    /// Completes a rehash in progress now instead of over the next writes.
    pub fn finish_rehash(&self) {
        let mut w = self.lock();
        let guard = &epoch::pin();
        self.migrate_step(&mut w, guard, usize::MAX);
    }

    /// The slot pointing at `key`'s chain member in table `t`, and that member.
    fn chain_position<'t>(
        t: &'t BucketTable<K, V>,
        key: &K,
    ) -> Option<(&'t AtomicUsize, &'t Node<K, V>)> {
        let mut pprev = &t.buckets[t.bucket_of(key)];
        let mut link = pprev.load(Ordering::Relaxed);
        while !is_marker(link) {
            // SAFETY: a chain member of a live table, under the writer lock.
            let n = unsafe { node::<K, V>(link) };
            if n.key == *key {
                return Some((pprev, n));
            }
            pprev = &n.next;
            link = n.next.load(Ordering::Relaxed);
        }
        None
    }

    /// Advances a rehash in progress, then returns the table that holds `key` from now on (its
    /// old bucket, if any, is migrated first, so the writer only ever edits the newest table).
    fn prepare<'g>(&self, w: &mut WriterState, guard: &'g Guard, key: &K) -> &'g BucketTable<K, V> {
        self.migrate_step(w, guard, 0);
        // SAFETY: under the writer lock, with `guard` pinned: retired tables outlive it.
        let cur = unsafe { &*self.tbl.load(Ordering::Relaxed) };
        let fut = cur.future.load(Ordering::Relaxed);
        if fut.is_null() {
            return cur;
        }
        // SAFETY: as above.
        let fut = unsafe { &*fut };
        // SAFETY: under the writer lock; `fut` is `cur`'s future table.
        unsafe { Self::migrate_bucket(cur, fut, cur.bucket_of(key)) };
        fut
    }

    /// Moves every node of `old`'s bucket `index` into `new`, tail first, as the kernel's
    /// `rhashtable_rehash_chain` does: each node is published at the head of its new chain
    /// before it is unlinked from the old one, so a reader finds it in one table or the other.
    ///
    /// # Safety
    /// - The caller holds the writer lock, and
    /// - `new` is `old`'s future table.
    unsafe fn migrate_bucket(old: &BucketTable<K, V>, new: &BucketTable<K, V>, index: usize) {
        let slot = &old.buckets[index];
        loop {
            let mut pprev = slot;
            let mut link = slot.load(Ordering::Relaxed);
            if is_marker(link) {
                return;
            }
            loop {
                // SAFETY: a chain member of `old`, under the writer lock.
                let next = unsafe { node::<K, V>(link) }.next.load(Ordering::Relaxed);
                if is_marker(next) {
                    break;
                }
                // SAFETY: as above.
                pprev = &unsafe { node::<K, V>(link) }.next;
                link = next;
            }
            // SAFETY: the tail of the chain, a live node.
            let tail = unsafe { node::<K, V>(link) };
            let target = &new.buckets[new.bucket_of(&tail.key)];
            tail.next
                .store(target.load(Ordering::Relaxed), Ordering::Release);
            target.store(link, Ordering::Release);
            pprev.store(old.marker(index), Ordering::Release);
        }
    }

    /// Migrates up to `batch` buckets (at least one write's share); when the old table is
    /// empty, the future table becomes the current one and the old one is retired.
    fn migrate_step(&self, w: &mut WriterState, guard: &Guard, batch: usize) {
        let cur_ptr = self.tbl.load(Ordering::Relaxed);
        // SAFETY: under the writer lock, with `guard` pinned.
        let cur = unsafe { &*cur_ptr };
        let fut_ptr = cur.future.load(Ordering::Relaxed);
        if fut_ptr.is_null() {
            return;
        }
        // SAFETY: as above.
        let fut = unsafe { &*fut_ptr };
        let batch = batch.max(MIGRATE_BATCH).max(cur.size() / MIGRATE_WRITES);
        let end = w.cursor.saturating_add(batch).min(cur.size());
        for index in w.cursor..end {
            // SAFETY: under the writer lock; `fut` is `cur`'s future table.
            unsafe { Self::migrate_bucket(cur, fut, index) };
        }
        w.cursor = end;
        if end == cur.size() {
            // Readers that still hold `cur` find all its buckets empty and follow `future`.
            self.tbl.store(fut_ptr, Ordering::Release);
            w.cursor = 0;
            // SAFETY: `cur` is no longer reachable from `self.tbl`; readers that loaded it were
            // pinned before now. Dropping a `BucketTable` frees its bucket array only.
            unsafe { guard.defer_destroy(Shared::from(cur_ptr as *const BucketTable<K, V>)) };
        }
    }

    /// Starts a rehash of the newest table into a table of `size` buckets with a fresh seed.
    fn start_rehash(&self, w: &mut WriterState, guard: &Guard, size: usize, cause: Cause) {
        // SAFETY: under the writer lock, with `guard` pinned.
        let cur = unsafe { &*self.tbl.load(Ordering::Relaxed) };
        if !cur.future.load(Ordering::Relaxed).is_null() {
            // One migration at a time: readers then search at most two tables.
            w.rehashes.forced_finishes += 1;
            self.migrate_step(w, guard, usize::MAX);
            return self.start_rehash(w, guard, size, cause);
        }
        match cause {
            Cause::Grow => w.rehashes.grows += 1,
            Cause::Shrink => w.rehashes.shrinks += 1,
            Cause::Reseed => w.rehashes.reseeds += 1,
        }
        let fut = BucketTable::alloc(size, w.seeds.next_seed());
        cur.future.store(fut, Ordering::Release);
        w.cursor = 0;
        self.migrate_step(w, guard, 0);
    }

    /// The size of the newest table. Caller holds the writer lock.
    fn newest_size(&self) -> usize {
        let tables = self.live_tables();
        tables[tables.len() - 1].size()
    }

    /// Grow above 75%, or rehash with a fresh seed after a chain of more than [`ELASTICITY`].
    fn after_insert(&self, w: &mut WriterState, guard: &Guard, chain: usize) {
        let size = self.newest_size();
        let n = self.len();
        if n * 4 > size * 3 && size < self.params.max_size {
            self.start_rehash(w, guard, size * 2, Cause::Grow);
        } else if chain > ELASTICITY {
            self.start_rehash(w, guard, size, Cause::Reseed);
        }
    }

    /// Shrink below 30% to `roundup_pow2(n * 3 / 2)`, not below `min_size`.
    fn after_remove(&self, w: &mut WriterState, guard: &Guard) {
        if !self.params.automatic_shrinking {
            return;
        }
        let size = self.newest_size();
        let n = self.len();
        if size > self.params.min_size && n * 10 < size * 3 {
            let target = (n * 3 / 2).next_power_of_two().max(self.params.min_size);
            if target < size {
                self.start_rehash(w, guard, target, Cause::Shrink);
            }
        }
    }
}

impl<K, V> Drop for RhlTable<K, V> {
    fn drop(&mut self) {
        let cur = *self.tbl.get_mut();
        // SAFETY: `&mut self`: no reader or writer can reach the table any more. Every node and
        // table reachable from `self.tbl` is owned by it (retired ones are not reachable), and
        // each node is reachable exactly once: as a chain member of one table, or as a `dup`.
        unsafe {
            let fut = (*cur).future.load(Ordering::Relaxed);
            free_nodes(&*cur);
            drop(Box::from_raw(cur));
            if !fut.is_null() {
                free_nodes(&*fut);
                drop(Box::from_raw(fut));
            }
        }
    }
}

/// Frees every node of `table`.
///
/// # Safety
/// - No other thread can reach `table`, and
/// - its nodes are reachable from nowhere else.
unsafe fn free_nodes<K, V>(table: &BucketTable<K, V>) {
    for slot in table.buckets.iter() {
        let mut link = slot.load(Ordering::Relaxed);
        while !is_marker(link) {
            // SAFETY: a chain member, exclusively owned here.
            let next = unsafe { node::<K, V>(link) }.next.load(Ordering::Relaxed);
            let mut d = link as *mut Node<K, V>;
            while !d.is_null() {
                // SAFETY: `d` came from `Box::into_raw` in `Node::alloc` and is freed once.
                let boxed = unsafe { Box::from_raw(d) };
                d = boxed.dup.load(Ordering::Relaxed);
            }
            link = next;
        }
    }
}

impl<K, V> std::fmt::Debug for RhlTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhlTable")
            .field("keys", &self.len())
            .field("objects", &self.objects())
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    //! Small cases that exercise every unsafe path; sized to run under Miri.
    use super::*;

    fn small() -> RhlTable<u32, u32> {
        RhlTable::with_params(Params {
            min_size: 4,
            seed: SeedMode::Deterministic(3),
            ..Params::default()
        })
        .unwrap()
    }

    #[test]
    fn duplicates_migration_and_removal() {
        let t = small();
        for k in 0..40 {
            t.insert(k, k).unwrap();
            t.insert(k % 5, 100 + k).unwrap();
        }
        let g = epoch::pin();
        assert_eq!(t.len(), 40);
        assert_eq!(t.objects(), 80);
        assert_eq!(t.get_all(&3, &g).count(), 9);
        assert_eq!(t.get(&3, &g), Some(&138));
        // Middle, head and tail of a duplicate list.
        assert!(t.remove(&3, |v| *v == 118));
        assert!(t.remove(&3, |v| *v == 138));
        assert!(t.remove(&3, |v| *v == 3));
        assert!(!t.remove(&3, |v| *v == 3));
        assert_eq!(
            t.get_all(&3, &g).copied().collect::<Vec<_>>(),
            [133, 128, 123, 113, 108, 103]
        );
        for k in 5..40 {
            assert_eq!(t.remove_all(&k), 1);
        }
        assert_eq!(t.len(), 5);
        assert!(t.stats().rehashes.shrinks > 0);
        drop(g);
    }

    #[test]
    fn readers_during_resizes() {
        let t = std::sync::Arc::new(small());
        t.insert(1_000, 7).unwrap();
        let reader = {
            let t = t.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let g = epoch::pin();
                    assert_eq!(t.get(&1_000, &g), Some(&7));
                }
            })
        };
        for k in 0..30 {
            t.insert(k, k).unwrap();
        }
        for k in 0..30 {
            t.remove_all(&k);
        }
        reader.join().unwrap();
    }
}
