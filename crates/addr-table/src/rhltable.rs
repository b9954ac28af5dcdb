//! [`RhlTable`]: the resizable hash multimap (the kernel's rhltable over rhashtable).

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Guard, Shared};

use crate::bucket::{Bucket, BucketTable, Dups, Hashed, Node, SIZE_PER_BUCKET};
use crate::error::{InsertError, ParamsError};
use crate::seed::{SeedMode, SeedSource};

/// A bucket chain holding more distinct keys than this in the table an insert lands in forces a
/// rehash (the kernel's `RHT_ELASTICITY`): on a table at most 75% full a bucket line holds 3
/// keys on average, so a chain of 17 (three lines) is all but impossible by chance and means
/// the keys were chosen against this table's seed.
pub const ELASTICITY: usize = 16;

/// Fewest buckets migrated per write while a rehash is in progress.
pub const MIGRATE_BATCH: usize = 4;

/// A rehash completes within this many writes: each write migrates
/// `max(MIGRATE_BATCH, old_size / MIGRATE_WRITES)` buckets. The kernel finishes a rehash in a
/// worker right away; without a thread of our own, a slow pace would leave the table
/// mid-migration when writes stop (readers then hash twice and probe two tables), so the pace
/// is bounded in writes, not in buckets. [`RhlTable::finish_rehash`] completes it at once.
pub const MIGRATE_WRITES: usize = 64;

/// The smallest `min_size` accepted (the kernel's `HASH_MIN_SIZE`): one bucket line.
pub const MIN_SIZE_FLOOR: usize = SIZE_PER_BUCKET;

/// The largest `max_size` accepted.
pub const MAX_SIZE_CEILING: usize = 1 << 30;

/// Sizing and seeding of an [`RhlTable`] (the tunable part of the kernel's `rhashtable_params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
///
/// Sizes are in the kernel's units, the ones its load factor counts in: a table of `size` holds
/// `size / 4` bucket lines of 6 slots each (see [`TableStats::buckets`]), so the thresholds
/// (grow above `0.75 * size` keys, shrink below `0.3 * size`) are the kernel's.
pub struct Params {
    /// Size of a new table and the floor of any shrink; a power of two, at least 4 (one bucket
    /// line). Default 32 (8 lines), as in the seed post's conversion of `inet_addr_lst`.
    pub min_size: usize,
    /// The table never grows beyond this size; a power of two, at most 2^30. Inserts of new
    /// keys fail once the table holds twice this many keys (the kernel's `max_elems`).
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
    /// Size of the newest bucket table, in [`Params`] units (4 per bucket line).
    pub size: usize,
    /// Bucket lines (64-byte cache lines of 6 slots) of the newest table: `size / 4`.
    pub buckets: usize,
    /// Overflow lines hanging off full buckets, over the live tables.
    pub overflow_lines: usize,
    /// Size of the table being migrated away from, while a rehash is in progress.
    pub migrating_from: Option<usize>,
    /// Distinct keys (the kernel's `nelems`).
    pub keys: usize,
    /// Objects, duplicates included.
    pub objects: usize,
    /// Longest bucket chain (distinct keys in one bucket line and its overflow lines) over the
    /// live tables.
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
        let tbl = BucketTable::alloc(params.min_size / SIZE_PER_BUCKET, seeds.next_seed());
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

    /// The object in a slot for `key`: old table first, then each newer one.
    #[inline]
    fn find<'g>(&'g self, key: &K, guard: &'g Guard) -> Option<&'g Node<K, V>> {
        check_guard(guard);
        let mut t = self.tbl.load(Ordering::Acquire);
        loop {
            // SAFETY: `t` was loaded after `guard` was pinned, from `self.tbl` or from the
            // `future` of a table loaded that way; tables are retired through the default
            // collector only after they became unreachable from `self.tbl`.
            let table = unsafe { &*t };
            // SAFETY: as above, the guard keeps this table's lines and nodes alive.
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
            for index in 0..table.lines() {
                for line in table.chain(index) {
                    for slot in &line.slots {
                        let mut d: *const Node<K, V> = slot.load(Ordering::Relaxed);
                        while !d.is_null() {
                            // SAFETY: under the writer lock nothing is freed, and `d` is a
                            // slot's object or one of its duplicates in a live table.
                            let n = unsafe { &*d };
                            f(&n.key, &n.value);
                            d = n.dup.load(Ordering::Relaxed);
                        }
                    }
                }
            }
        }
    }

    /// The shape of the table, under the writer lock.
    pub fn stats(&self) -> TableStats {
        let w = self.lock();
        let tables = self.live_tables();
        let mut max_chain = 0;
        let mut overflow_lines = 0;
        for table in &tables {
            for index in 0..table.lines() {
                let mut keys = 0;
                for (i, line) in table.chain(index).enumerate() {
                    overflow_lines += usize::from(i > 0);
                    keys += Bucket::<K, V>::keys(line.tags.load(Ordering::Relaxed));
                }
                max_chain = max_chain.max(keys);
            }
        }
        let newest = tables[tables.len() - 1];
        TableStats {
            size: newest.size(),
            buckets: newest.lines(),
            overflow_lines,
            migrating_from: (tables.len() == 2).then(|| tables[0].size()),
            keys: self.len(),
            objects: self.objects(),
            max_chain,
            rehashes: w.rehashes,
        }
    }

    /// Which bucket line of the newest table `key` hashes to, with that table's number of
    /// lines ([`TableStats::buckets`]). For diagnostics and tests (the seed, and so the answer,
    /// changes with every rehash).
    pub fn bucket_of(&self, key: &K) -> (usize, usize) {
        let _w = self.lock();
        let tables = self.live_tables();
        let newest = tables[tables.len() - 1];
        (newest.hash(key).index, newest.lines())
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

/// Where a key's newest object sits in one bucket table.
struct Position<'t, K, V> {
    /// The line before `line` in its chain (`None` when `line` is the first).
    prev: Option<&'t Bucket<K, V>>,
    line: &'t Bucket<K, V>,
    slot: usize,
    /// The object in the slot, as loaded from it (frees need the pointer's own provenance).
    head: *mut Node<K, V>,
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
        let h = t.hash(&key);
        if let Some(pos) = Self::position(t, h, &key) {
            // The new object takes the old one's slot; readers standing on the old one still
            // reach the older duplicates through it.
            let new = Node::alloc(key, value, pos.head);
            pos.line.slots[pos.slot].store(new, Ordering::Release);
            self.nobjs.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let max_elems = self.params.max_size * 2;
        if self.len() >= max_elems {
            return Err(InsertError::TableFull { max_elems });
        }
        let new = Node::alloc(key, value, std::ptr::null_mut());
        // SAFETY: under the writer lock; `new` is a fresh node whose key is not in `t`.
        let chain = unsafe { Self::publish(t, h, new) };
        self.nelems.fetch_add(1, Ordering::Relaxed);
        self.nobjs.fetch_add(1, Ordering::Relaxed);
        self.after_insert(&mut w, guard, chain);
        Ok(())
    }

    /// Removes the newest object with `key` for which `matches` returns true; returns whether
    /// one was removed. Readers still holding it keep a valid reference until they unpin.
    pub fn remove(&self, key: &K, mut matches: impl FnMut(&V) -> bool) -> bool {
        let mut w = self.lock();
        let guard = &epoch::pin();
        let t = self.prepare(&mut w, guard, key);
        let Some(pos) = Self::position(t, t.hash(key), key) else {
            return false;
        };
        let mut prev: Option<&Node<K, V>> = None;
        let mut x = pos.head;
        loop {
            // SAFETY: `pos.head` and the `dup`s reached from it are live objects of the newest
            // table, and nothing is freed under the writer lock.
            let n = unsafe { &*x };
            if matches(&n.value) {
                break;
            }
            let d = n.dup.load(Ordering::Relaxed);
            if d.is_null() {
                return false;
            }
            prev = Some(n);
            x = d;
        }
        // SAFETY: as above.
        let older_than_x = unsafe { &*x }.dup.load(Ordering::Relaxed);
        match prev {
            Some(p) => p.dup.store(older_than_x, Ordering::Release),
            None => {
                let older = older_than_x;
                if older.is_null() {
                    // SAFETY: under the writer lock, `pos` is current, `guard` is pinned.
                    unsafe { Self::unpublish(&pos, guard) };
                    self.nelems.fetch_sub(1, Ordering::Relaxed);
                } else {
                    // The next older duplicate takes the slot.
                    pos.line.slots[pos.slot].store(older, Ordering::Release);
                }
            }
        }
        self.nobjs.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `x` is now unreachable from the table; readers that reached it were pinned
        // before this point, and the default collector frees it after they unpin.
        unsafe { retire_node(guard, x) };
        self.after_remove(&mut w, guard);
        true
    }

    /// Removes every object with `key`; returns how many.
    pub fn remove_all(&self, key: &K) -> usize {
        let mut w = self.lock();
        let guard = &epoch::pin();
        let t = self.prepare(&mut w, guard, key);
        let Some(pos) = Self::position(t, t.hash(key), key) else {
            return 0;
        };
        // SAFETY: under the writer lock, `pos` is current, `guard` is pinned.
        unsafe { Self::unpublish(&pos, guard) };
        self.nelems.fetch_sub(1, Ordering::Relaxed);
        let mut removed = 0;
        let mut d = pos.head;
        while !d.is_null() {
            // SAFETY: `d` is `head` or one of its duplicates, now unreachable; read before retiring.
            let next = unsafe { &*d }.dup.load(Ordering::Relaxed);
            // SAFETY: unreachable from the table; freed after every reader pinned before unpins.
            unsafe { retire_node(guard, d) };
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

    /// Where `key` (hashed to `h` in `t`) sits in table `t`. Caller holds the writer lock.
    fn position<'t>(t: &'t BucketTable<K, V>, h: Hashed, key: &K) -> Option<Position<'t, K, V>> {
        let mut prev = None;
        for line in t.chain(h.index) {
            let mut m = Bucket::<K, V>::matches(line.tags.load(Ordering::Relaxed), h.tag);
            while m != 0 {
                let slot = Bucket::<K, V>::first(m);
                let p = line.slots[slot].load(Ordering::Relaxed);
                // SAFETY: under the writer lock a slot with a tag holds a live node.
                if unsafe { &(*p).key } == key {
                    return Some(Position {
                        prev,
                        line,
                        slot,
                        head: p,
                    });
                }
                m &= m - 1;
            }
            prev = Some(line);
        }
        None
    }

    /// Publishes `node` in its chain of `t` (the first free slot, else a new overflow line at
    /// the end): slot first, then the tag. Returns the keys in the chain, `node`'s included.
    ///
    /// # Safety
    /// The caller holds the writer lock, `h` is `t.hash(&node.key)`, no slot of `t` holds
    /// `node`'s key, and `node` is live and reachable from nowhere else in `t`.
    unsafe fn publish(t: &BucketTable<K, V>, h: Hashed, node: *mut Node<K, V>) -> usize {
        let mut keys = 0;
        let mut free = None;
        let mut last = &t.buckets[h.index];
        for line in t.chain(h.index) {
            let tags = line.tags.load(Ordering::Relaxed);
            keys += Bucket::<K, V>::keys(tags);
            let empty = Bucket::<K, V>::free_slots(tags);
            if free.is_none() && empty != 0 {
                free = Some((line, Bucket::<K, V>::first(empty)));
            }
            last = line;
        }
        match free {
            Some((line, slot)) => {
                line.slots[slot].store(node, Ordering::Release);
                let tags = line.tags.load(Ordering::Relaxed);
                line.tags.store(
                    Bucket::<K, V>::with_tag(tags, slot, h.tag),
                    Ordering::Release,
                );
            }
            None => {
                let o = Bucket::alloc_overflow();
                // SAFETY: fresh and not yet shared.
                let line = unsafe { &*o };
                line.slots[0].store(node, Ordering::Relaxed);
                line.tags
                    .store(Bucket::<K, V>::with_tag(0, 0, h.tag), Ordering::Relaxed);
                // Readers that see the link see the filled line (release).
                last.overflow.store(o, Ordering::Release);
            }
        }
        keys + 1
    }

    /// Clears the slot of `pos` (tag first, then the pointer) and unlinks its line when it is
    /// an overflow line left empty. Does not retire the objects.
    ///
    /// # Safety
    /// The caller holds the writer lock, `pos` was found under it and nothing changed since,
    /// and `guard` is pinned.
    unsafe fn unpublish(pos: &Position<'_, K, V>, guard: &Guard) {
        let line = pos.line;
        let tags = Bucket::<K, V>::with_tag(line.tags.load(Ordering::Relaxed), pos.slot, 0);
        line.tags.store(tags, Ordering::Release);
        line.slots[pos.slot].store(std::ptr::null_mut(), Ordering::Release);
        if let (0, Some(prev)) = (tags, pos.prev) {
            // Readers standing on the line still follow its (unchanged) overflow link.
            prev.overflow
                .store(line.overflow.load(Ordering::Relaxed), Ordering::Release);
            // SAFETY: the line came from `Bucket::alloc_overflow` (a `Box`) and is now
            // unreachable from the table; readers on it were pinned before this point.
            unsafe { guard.defer_destroy(Shared::from(line as *const Bucket<K, V>)) };
        }
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
        unsafe { Self::migrate_bucket(cur, fut, cur.hash(key).index) };
        fut
    }

    /// Moves every object of `old`'s bucket `index` into `new`, as the kernel's
    /// `rhashtable_rehash_chain` does: each is published in the new table before its slot in
    /// the old one is cleared, so a reader searching old then new finds it in one or the other.
    /// The old chain's overflow lines stay (empty) until the old table is freed.
    ///
    /// # Safety
    /// - The caller holds the writer lock, and
    /// - `new` is `old`'s future table.
    unsafe fn migrate_bucket(old: &BucketTable<K, V>, new: &BucketTable<K, V>, index: usize) {
        for line in old.chain(index) {
            let mut tags = line.tags.load(Ordering::Relaxed);
            let mut occupied = !Bucket::<K, V>::free_slots(tags) & Bucket::<K, V>::free_slots(0);
            while occupied != 0 {
                let slot = Bucket::<K, V>::first(occupied);
                occupied &= occupied - 1;
                let p = line.slots[slot].load(Ordering::Relaxed);
                // SAFETY: under the writer lock a slot with a tag holds a live node.
                let key = unsafe { &(*p).key };
                // SAFETY: under the writer lock; every key lives in exactly one live table and
                // `new` only receives keys migrated from `old` or inserted after they were, so
                // `key` is not in `new`.
                unsafe { Self::publish(new, new.hash(key), p) };
                tags = Bucket::<K, V>::with_tag(tags, slot, 0);
                line.tags.store(tags, Ordering::Release);
                line.slots[slot].store(std::ptr::null_mut(), Ordering::Release);
            }
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
        let batch = batch.max(MIGRATE_BATCH).max(cur.lines() / MIGRATE_WRITES);
        let end = w.cursor.saturating_add(batch).min(cur.lines());
        for index in w.cursor..end {
            // SAFETY: under the writer lock; `fut` is `cur`'s future table.
            unsafe { Self::migrate_bucket(cur, fut, index) };
        }
        w.cursor = end;
        if end == cur.lines() {
            // Readers that still hold `cur` find all its buckets empty and follow `future`.
            self.tbl.store(fut_ptr, Ordering::Release);
            w.cursor = 0;
            // SAFETY: `cur` is no longer reachable from `self.tbl`; readers that loaded it were
            // pinned before now. Dropping a `BucketTable` frees its lines, not the (moved)
            // nodes.
            unsafe { guard.defer_destroy(Shared::from(cur_ptr as *const BucketTable<K, V>)) };
        }
    }

    /// Starts a rehash of the newest table into a table of `size` with a fresh seed.
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
        let fut = BucketTable::alloc(size / SIZE_PER_BUCKET, w.seeds.next_seed());
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

/// Frees `p` once every reader pinned now has unpinned.
///
/// # Safety
/// `p` is a node of this crate's tables, now unreachable from them, retired once.
unsafe fn retire_node<K: Send + 'static, V: Send + 'static>(guard: &Guard, p: *mut Node<K, V>) {
    // SAFETY: `K` and `V` are `Send`, so the node may be freed on another thread; the caller
    // guarantees it is unreachable and retired once, and the closure runs after every guard
    // pinned before now is dropped.
    unsafe { guard.defer_unchecked(move || Node::free(p)) };
}

impl<K, V> Drop for RhlTable<K, V> {
    fn drop(&mut self) {
        let cur = *self.tbl.get_mut();
        // SAFETY: `&mut self`: no reader or writer can reach the table any more. Every node and
        // table reachable from `self.tbl` is owned by it (retired ones are not reachable), and
        // each node is reachable exactly once: from one slot of one table, or as a `dup`.
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

/// Frees every node of `table` (its lines go with the table).
///
/// # Safety
/// - No other thread can reach `table`, and
/// - its nodes are reachable from nowhere else.
unsafe fn free_nodes<K, V>(table: &BucketTable<K, V>) {
    for index in 0..table.lines() {
        for line in table.chain(index) {
            for slot in &line.slots {
                let mut d = slot.load(Ordering::Relaxed);
                while !d.is_null() {
                    // SAFETY: `d` is a slot's node or one of its duplicates, exclusively owned
                    // here, read before it is freed once.
                    let next = unsafe { &*d }.dup.load(Ordering::Relaxed);
                    // SAFETY: as above; it came from `Node::alloc`.
                    unsafe { Node::free(d) };
                    d = next;
                }
            }
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
