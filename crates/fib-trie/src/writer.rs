//! The writers: the one handle through which a [`Fib`] or a standalone [`LcTrie`] changes.
//!
//! Readers share the structure as an `Arc` and only read it: every method that changes it is
//! on its writer, which is not `Clone` and takes `&mut self`, so a run loop holding the
//! `Arc<Fib>` cannot change routes, and changes are serialized by the type system. The writer
//! publishes each change with the structure's epoch scheme (a pointer swap, the old version
//! retired into crossbeam-epoch's default collector), exactly as before the split. It derefs
//! to the structure, so the writer reads as any reader does.
//!
//! A reader that must not write:
//!
//! ```compile_fail,E0624
//! use fib_trie::{FibWriter, InsertFlags, Route, RouteType};
//!
//! let writer = FibWriter::<u32>::new();
//! let fib = std::sync::Arc::clone(writer.reader());
//! // `Fib::insert` is the writer's: private to the crate.
//! fib.insert(&Route::reject(0, 0, 254, RouteType::Blackhole), InsertFlags::ADD);
//! ```
//!
//! ```compile_fail,E0624
//! let writer = fib_trie::TrieWriter::<u32, u32>::new();
//! let trie = std::sync::Arc::clone(writer.reader());
//! trie.insert(0, 0, 7);
//! ```
//!
//! Nor does a table reached from a reader write:
//!
//! ```compile_fail,E0624
//! use fib_trie::{FibWriter, InsertFlags, Route, RouteType};
//!
//! let writer = FibWriter::<u32>::new();
//! let guard = crossbeam_epoch::pin();
//! let main = writer.reader().table(254, &guard).unwrap();
//! main.insert(&Route::reject(0, 0, 254, RouteType::Blackhole), InsertFlags::ADD);
//! ```
//!
//! And there is one writer:
//!
//! ```compile_fail,E0599
//! let writer = fib_trie::FibWriter::<u32>::new();
//! let second = writer.clone();
//! ```

use std::ops::Deref;
use std::sync::Arc;

use crate::fast::{FastLpm, PrefixSource};
use crate::fib::{Fib, FibRule, RuleError};
use crate::key::TrieKey;
use crate::multipath::MultipathPolicy;
use crate::node::Alias;
use crate::route::{FibAlias, InsertFlags, Route, RouteError, RouteSelector};
use crate::table::FibTable;
use crate::trie::{LcTrie, PrefixError};

/// The fewest prefixes changed one by one that make a table worn enough for
/// [`FibWriter::compact`] (smaller tables are cheap to leave as they are).
pub const COMPACT_MIN_CHANGES: usize = 4096;

/// How worn a table's store is ([`FibWriter::compact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wear {
    /// Prefixes changed one by one since the store was built.
    pub changes: usize,
    /// Routes it holds (of every table sharing it).
    pub routes: usize,
    /// Routes it held when it was last built in bulk (0 for a table that never was).
    pub built: usize,
}

impl Wear {
    /// Worn enough to rebuild: at least [`COMPACT_MIN_CHANGES`] changes, and as many as the
    /// table holds routes, or, for a table that grew by single changes, twice as many as it
    /// held when built. Without the second bound a table refilled one route at a time after
    /// it was emptied and rebuilt (a link flap: the routes through the link swept, the worn
    /// empty table rebuilt, then a routing daemon's re-add) is never worn by the first: its
    /// changes stay below its routes. Growing, it is rebuilt each time it has tripled
    /// (about 1.5 times the work of one bulk build of the final table in all).
    pub(crate) fn is_worn(self) -> bool {
        self.changes >= COMPACT_MIN_CHANGES.max(self.routes.min(2 * self.built))
    }

    /// Grown by single changes since it was built by at least `1/divisor` of the routes it
    /// holds (and at least [`COMPACT_MIN_CHANGES`] changes): the routes added after the last
    /// rebuild of a refill ([`FibWriter::compact_grown`]).
    pub(crate) fn is_grown(self, divisor: usize) -> bool {
        self.changes >= COMPACT_MIN_CHANGES
            && self.routes.saturating_sub(self.built) * divisor.max(1) >= self.routes
    }
}

/// The one writer of a [`Fib`]: routes, rules and the multipath policy change only through
/// it. Readers hold the `Arc<Fib>` of [`reader`](Self::reader); the writer derefs to the
/// [`Fib`] for its own reads.
///
/// ```
/// use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route};
///
/// let mut writer = FibWriter::<u32>::new();
/// let fib = writer.reader().clone(); // for a run loop: read only
/// writer.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(0x0a00_0001), 2)]), InsertFlags::ADD)?;
///
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(fib.lookup(&Flow::to(0x0808_0808), &guard).unwrap().plen, 0);
/// // The writer and its readers see one FIB.
/// assert_eq!(writer.lookup(&Flow::to(0x0808_0808), &guard), fib.lookup(&Flow::to(0x0808_0808), &guard));
/// # Ok::<(), fib_trie::RouteError>(())
/// ```
#[derive(Debug)]
pub struct FibWriter<K: TrieKey> {
    fib: Arc<Fib<K>>,
}

impl<K: TrieKey> Default for FibWriter<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: TrieKey> Deref for FibWriter<K> {
    type Target = Fib<K>;

    fn deref(&self) -> &Fib<K> {
        &self.fib
    }
}

impl<K: TrieKey> FibWriter<K> {
    /// A FIB with the local, main and default tables and the default rules, and its writer.
    pub fn new() -> Self {
        FibWriter {
            fib: Arc::new(Fib::new()),
        }
    }

    /// The FIB this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<Fib<K>> {
        &self.fib
    }

    /// Sets the policy [`Fib::multipath_policy`] answers (from the sysctls).
    pub fn set_multipath_policy(&mut self, policy: MultipathPolicy) {
        self.fib.set_multipath_policy(policy);
    }

    /// The table `id`, created (empty) if missing (`fib_new_table`).
    pub fn table_or_create(&mut self, id: u32) -> Arc<FibTable<K>> {
        self.fib.table_or_create(id)
    }

    /// Adds a route to its table, created if missing (`fib_table_insert`). Within a prefix,
    /// routes are ordered by tos (descending), then metric (ascending); `flags` decide what
    /// happens to existing routes of the same prefix, tos and metric (see [`InsertFlags`]).
    ///
    /// # Errors
    /// [`RouteError::Exists`] (excl, or an identical route), [`RouteError::NotFound`] (nothing
    /// to replace without `create`), or a validation error; the table is then unchanged.
    pub fn insert(&mut self, route: &Route<K>, flags: InsertFlags) -> Result<(), RouteError> {
        self.fib.insert(route, flags)
    }

    /// Adds many routes at once (an initial dump): each table that holds no route yet is built
    /// in one go (its trie by [`TrieWriter::insert_many`]'s bulk build, its fast structure
    /// once), much faster than one insert per route; routes of tables that already hold routes
    /// are inserted one by one. The result is the tables that inserting each route with
    /// [`InsertFlags::APPEND`] in the given order would give (identical routes are added once).
    /// Returns how many routes were added.
    ///
    /// ```
    /// use fib_trie::{FibWriter, Flow, NextHop, Route};
    ///
    /// let mut fib = FibWriter::<u32>::new();
    /// let hop = vec![NextHop::new(Some(0x0a00_0001), 2)];
    /// let routes = (0..1000u32).map(|i| Route::unicast(0x0b00_0000 | i << 8, 24, 254, hop.clone()));
    /// let routes: Vec<_> = routes.collect();
    /// assert_eq!(fib.insert_many(&routes)?, 1000);
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(fib.lookup(&Flow::to(0x0b00_0305), &guard).unwrap().plen, 24);
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    ///
    /// # Errors
    /// The first route that fails validation; nothing is added then. A route refused one by
    /// one (in a table that held routes) ends the load with its error.
    pub fn insert_many(&mut self, routes: &[Route<K>]) -> Result<usize, RouteError> {
        self.fib.insert_many(routes)
    }

    /// Rebuilds in bulk each table worn by changes made one route at a time: at least
    /// [`COMPACT_MIN_CHANGES`] prefixes changed since it was built, and at least as many as
    /// it holds routes (a mass delete and re-add, or a whole table's worth of churn) or twice
    /// as many as it held when built (a table refilled or grown one route at a time). Returns
    /// how many tables (merged local and main count once) were rebuilt.
    ///
    /// Lookups answer the same before and after. A table built one route at a time holds
    /// the same routes in more memory than one built in bulk: its fast structure's arena
    /// keeps the nodes updates replaced (until its next bulk build), the updates' own nodes
    /// come from the heap one by one, and the allocator is left with free pieces between
    /// long-lived nodes that it cannot return to the kernel. Rebuilt, the table takes what a
    /// bulk load takes, and the old nodes are freed together once readers have unpinned (a
    /// `malloc_trim` then returns most of them). Costs one bulk build of the table (about as
    /// long as loading it at start), taken by the writer: call it when the writer is idle.
    ///
    /// ```
    /// use fib_trie::{FibWriter, InsertFlags, NextHop, Route, RouteSelector, COMPACT_MIN_CHANGES};
    ///
    /// let mut fib = FibWriter::<u32>::new();
    /// let hop = vec![NextHop::new(Some(0x0a00_0001), 2)];
    /// let routes: Vec<_> = (0..5000u32)
    ///     .map(|i| Route::unicast(0x0b00_0000 | i << 8, 24, 254, hop.clone()))
    ///     .collect();
    /// fib.insert_many(&routes)?;
    /// assert_eq!(fib.compact(), 0, "just built in bulk");
    /// for r in &routes {
    ///     fib.delete(&RouteSelector::new(r.prefix, r.plen, r.table))?;
    ///     fib.insert(r, InsertFlags::ADD)?;
    /// }
    /// assert!(2 * routes.len() >= COMPACT_MIN_CHANGES);
    /// assert_eq!(fib.compact(), 1, "local and main, merged, count once");
    /// assert_eq!(fib.compact(), 0);
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    pub fn compact(&mut self) -> usize {
        self.fib.compact(Wear::is_worn)
    }

    /// [`compact`](Self::compact), and rebuilds in bulk as well each table that grew by
    /// single changes since it was last built by at least `1/divisor` of the routes it holds
    /// now (at least [`COMPACT_MIN_CHANGES`] changes). For a caller that sees the growth is
    /// over (a routing daemon's re-add done): [`compact`](Self::compact) alone rebuilds a
    /// growing table each time it has tripled, so up to two thirds of a refilled table may
    /// have been inserted one route at a time after its last rebuild, and the nodes those
    /// inserts replaced leave free room inside the allocator's pages. Steady churn, which
    /// deletes and re-adds as much, does not grow a table. Returns how many tables were
    /// rebuilt.
    ///
    /// ```
    /// use fib_trie::{FibWriter, InsertFlags, NextHop, Route};
    ///
    /// let mut fib = FibWriter::<u32>::new();
    /// let hop = vec![NextHop::new(Some(0x0a00_0001), 2)];
    /// let route = |i: u32| Route::unicast(0x0b00_0000 | i << 8, 24, 254, hop.clone());
    /// fib.insert_many(&(0..12_000).map(route).collect::<Vec<_>>())?;
    /// for i in 12_000..16_000 {
    ///     fib.insert(&route(i), InsertFlags::ADD)?;
    /// }
    /// assert_eq!(fib.compact(), 0, "4,000 changes: not worn");
    /// assert_eq!(fib.compact_grown(8), 0, "fewer changes than the least");
    /// for i in 16_000..17_000 {
    ///     fib.insert(&route(i), InsertFlags::ADD)?;
    /// }
    /// assert_eq!(fib.compact(), 0, "5,000 changes on 17,000 routes: not worn");
    /// assert_eq!(fib.compact_grown(8), 1, "grown by more than an eighth");
    /// assert_eq!(fib.compact_grown(8), 0);
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    pub fn compact_grown(&mut self, divisor: usize) -> usize {
        self.fib
            .compact(|wear| wear.is_worn() || wear.is_grown(divisor))
    }

    /// Deletes the first route `selector` selects (`fib_table_delete`) and returns it.
    ///
    /// # Errors
    /// [`RouteError::NotFound`] when the table or the route does not exist; a prefix error for
    /// a bad prefix.
    pub fn delete(&mut self, selector: &RouteSelector<K>) -> Result<FibAlias<K>, RouteError> {
        self.fib.delete(selector)
    }

    /// Adds a rule after the rules of equal or lower priority. The first rule added or deleted
    /// unmerges local and main (see [`Fib`]).
    ///
    /// # Errors
    /// [`RuleError::Exists`] for a duplicate, [`RuleError::BadGoto`] for a goto that does not
    /// jump forward, a prefix error for a non-canonical selector.
    pub fn add_rule(&mut self, rule: FibRule<K>) -> Result<(), RuleError> {
        self.fib.add_rule(rule)
    }

    /// Deletes the first rule equal to `rule`.
    ///
    /// # Errors
    /// [`RuleError::NotFound`] when there is none.
    pub fn delete_rule(&mut self, rule: &FibRule<K>) -> Result<(), RuleError> {
        self.fib.delete_rule(rule)
    }
}

/// The one writer of a standalone [`LcTrie`]: readers hold the `Arc<LcTrie>` of
/// [`reader`](Self::reader); the writer derefs to the trie for its own reads.
///
/// ```
/// use fib_trie::TrieWriter;
///
/// let mut writer = TrieWriter::<u32, &str>::new();
/// writer.insert(0x0a00_0000, 8, "ten")?;
/// let trie = writer.reader().clone();
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(*trie.lookup(0x0a01_0203, &guard, |_| true).unwrap().value, "ten");
/// # Ok::<(), fib_trie::PrefixError>(())
/// ```
#[derive(Debug)]
pub struct TrieWriter<K: TrieKey, V> {
    trie: Arc<LcTrie<K, V>>,
}

impl<K: TrieKey, V: Send + Sync + 'static> Default for TrieWriter<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: TrieKey, V> Deref for TrieWriter<K, V> {
    type Target = LcTrie<K, V>;

    fn deref(&self) -> &LcTrie<K, V> {
        &self.trie
    }
}

impl<K: TrieKey, V: Send + Sync + 'static> TrieWriter<K, V> {
    /// An empty trie and its writer.
    pub fn new() -> Self {
        TrieWriter {
            trie: Arc::new(LcTrie::new()),
        }
    }

    /// The trie this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<LcTrie<K, V>> {
        &self.trie
    }

    /// Adds one alias (`plen`, `value`) at `key`, after the aliases of the same length already
    /// there. A convenience over [`modify`](Self::modify).
    ///
    /// # Errors
    /// [`PrefixError`] when `key/plen` is not a canonical prefix.
    pub fn insert(&mut self, key: K, plen: u8, value: V) -> Result<(), PrefixError>
    where
        V: Clone,
    {
        self.trie.insert(key, plen, value)
    }

    /// Inserts many prefixes: the same trie contents (and so the same answers) as calling
    /// [`insert`](Self::insert) for each in order, but on an empty trie much faster: the whole
    /// trie is built at once, every tnode at its final width, and published with one store.
    /// On a non-empty trie it inserts one by one. Returns how many aliases were added.
    ///
    /// ```
    /// use fib_trie::TrieWriter;
    ///
    /// let mut trie = TrieWriter::<u32, &str>::new();
    /// trie.insert_many([(0x0a00_0000, 8, "ten"), (0, 0, "default"), (0x0a01_0000, 16, "ten-one")])?;
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(*trie.lookup(0x0a01_0203, &guard, |_| true).unwrap().value, "ten-one");
    /// assert_eq!(trie.alias_count(), 3);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    ///
    /// # Errors
    /// [`PrefixError`] when some `key/plen` is not a canonical prefix; nothing is inserted then.
    pub fn insert_many(
        &mut self,
        prefixes: impl IntoIterator<Item = (K, u8, V)>,
    ) -> Result<usize, PrefixError>
    where
        V: Clone,
    {
        self.trie.insert_many(prefixes)
    }

    /// Removes every alias of `key/plen` and returns how many there were.
    ///
    /// # Errors
    /// [`PrefixError`] when `key/plen` is not a canonical prefix.
    pub fn remove(&mut self, key: K, plen: u8) -> Result<usize, PrefixError>
    where
        V: Clone,
    {
        self.trie.remove(key, plen)
    }

    /// The writer's one entry point: finds the leaf of `key`, lets `change` compute its new
    /// alias list from the current one (empty when there is no leaf), and publishes the result.
    ///
    /// `change` returns `Ok(None)` for "no change", `Ok(Some(list))` for the new list (an empty
    /// list removes the leaf), or an error that is passed through with nothing changed. The list
    /// is stably sorted by `slen`; every alias must satisfy `key`'s low `slen` bits being zero,
    /// and `key` must be a canonical prefix of every alias (aliases that do not are dropped).
    ///
    /// Readers continue meanwhile and see the old or the new leaf.
    ///
    /// # Errors
    /// Whatever `change` returns.
    pub fn modify<E>(
        &mut self,
        key: K,
        change: impl FnOnce(&[Alias<V>]) -> Result<Option<Vec<Alias<V>>>, E>,
    ) -> Result<(), E> {
        self.trie.modify(key, change)
    }

    /// Builds the direct table now, whatever the trie's size (for tests: small tries otherwise
    /// do without it).
    #[doc(hidden)]
    pub fn enable_direct_table(&mut self) {
        self.trie.enable_direct_table();
    }
}

/// The one writer of a standalone [`FastLpm`]: it makes the structure, hands readers its `Arc`
/// ([`reader`](Self::reader)), derefs to it for its own reads and takes `&mut self` to rebuild
/// or update it. Not `Clone`.
///
/// ```
/// use fib_trie::{FastLpmWriter, TrieWriter};
///
/// let mut trie = TrieWriter::<u32, u32>::new();
/// trie.insert(0x0a00_0000, 8, 1)?;
/// let mut fast = FastLpmWriter::<u32>::new();
/// fast.rebuild(&mut &*trie);
/// let reader = std::sync::Arc::clone(fast.reader());
/// trie.insert(0x0a01_0000, 16, 2)?;
/// fast.update(0x0a01_0000, 16, &mut &*trie);
/// assert_eq!(reader.lookup(0x0a01_0203, &crossbeam_epoch::pin()), Some(2));
/// # Ok::<(), fib_trie::PrefixError>(())
/// ```
///
/// A reader cannot rebuild or update:
///
/// ```compile_fail,E0624
/// let trie = fib_trie::TrieWriter::<u32, u32>::new();
/// let fast = fib_trie::FastLpmWriter::<u32>::new();
/// let reader = std::sync::Arc::clone(fast.reader());
/// reader.rebuild(&mut &*trie);
/// ```
///
/// ```compile_fail,E0624
/// let trie = fib_trie::TrieWriter::<u32, u32>::new();
/// let fast = fib_trie::FastLpmWriter::<u32>::new();
/// fast.reader().update(0, 0, &mut &*trie);
/// ```
///
/// ```compile_fail,E0599
/// let second = fib_trie::FastLpmWriter::<u32>::new().clone();
/// ```
#[derive(Debug)]
pub struct FastLpmWriter<K: TrieKey> {
    fast: Arc<FastLpm<K>>,
}

impl<K: TrieKey> Default for FastLpmWriter<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: TrieKey> Deref for FastLpmWriter<K> {
    type Target = FastLpm<K>;

    fn deref(&self) -> &FastLpm<K> {
        &self.fast
    }
}

impl<K: TrieKey> FastLpmWriter<K> {
    /// An empty structure (no key has an answer) and its writer.
    pub fn new() -> Self {
        FastLpmWriter {
            fast: Arc::new(FastLpm::new()),
        }
    }

    /// The structure this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<FastLpm<K>> {
        &self.fast
    }

    /// Rebuilds the whole structure from `source` and publishes it with one store.
    pub fn rebuild(&mut self, source: &mut impl PrefixSource<K>) {
        self.fast.rebuild(source);
    }

    /// Brings the structure in step with `source` after the prefix `key/plen` changed in it
    /// (added, removed, or given another answer).
    pub fn update(&mut self, key: K, plen: u8, source: &mut impl PrefixSource<K>) {
        self.fast.update(key, plen, source);
    }
}
