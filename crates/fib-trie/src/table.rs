//! One routing table (`fib_table`): an LC-trie whose leaves hold [`FibAlias`]es, with the
//! kernel's insert/delete semantics and the lookup's tos, scope, type and next-hop checks.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_epoch::Guard;

use crate::guard::check_guard;
use crate::key::TrieKey;
use crate::node::Alias;
use crate::route::{
    FibAlias, InsertFlags, NextHop, Resolved, Route, RouteError, RouteSelector, RouteType, Scope,
};
use crate::store::{FastStats, Infos, Store, StoreCell};
use crate::trie::{LcTrie, check_prefix};
use crate::writer::Wear;

/// The well-known table ids.
pub mod ids {
    /// `RT_TABLE_LOCAL`: local and broadcast addresses.
    pub const LOCAL: u32 = 255;
    /// `RT_TABLE_MAIN`: the routes `ip route` shows.
    pub const MAIN: u32 = 254;
    /// `RT_TABLE_DEFAULT`: consulted last by the default rules.
    pub const DEFAULT: u32 = 253;
}

/// What a lookup is for: the destination and the fields routes and rules select on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow<K> {
    /// The destination address.
    pub dst: K,
    /// The source address (rules only).
    pub src: K,
    /// The TOS/DSCP of the packet.
    pub tos: u8,
    /// The input interface index (rules only; 0 for locally generated).
    pub iif: u32,
    /// The output interface index, 0 for any: next hops must use it when set.
    pub oif: u32,
    /// The firewall mark (rules only).
    pub mark: u32,
    /// The narrowest scope acceptable: routes of a smaller scope value are skipped.
    pub scope: Scope,
}

impl<K: TrieKey> Flow<K> {
    /// A flow to `dst` with every other field zero.
    pub fn to(dst: K) -> Self {
        Flow {
            dst,
            ..Flow::default()
        }
    }
}

/// A route a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FibResult<'g, K> {
    /// The matched prefix's network address.
    pub prefix: K,
    /// The matched prefix length.
    pub plen: u8,
    /// The route (table, tos, type, shared info).
    pub alias: &'g FibAlias<K>,
    /// The index of the first usable next hop (`nh_sel`); 0 for routes without next hops.
    pub nh_sel: usize,
    /// The route's next hops and behaviour as the lookup found them (through its nexthop
    /// object, if it has one).
    pub path: Resolved<'g, K>,
}

impl<'g, K: TrieKey> FibResult<'g, K> {
    /// The type the route behaves as (a route through a blackhole nexthop object is a
    /// blackhole route).
    pub fn route_type(&self) -> RouteType {
        self.path.route_type
    }

    /// The route's next hops (its nexthop object's, if it has one).
    pub fn nexthops(&self) -> &'g [NextHop<K>] {
        self.path.nexthops
    }

    /// The table the route came from.
    pub fn table(&self) -> u32 {
        self.alias.table
    }

    /// Picks a next hop of a multipath route by flow hash, in proportion to the weights of the
    /// live next hops (`fib_select_multipath`); the selected one for single-path routes. A
    /// resilient group picks bucket `hash % buckets` (`nexthop_select_path_res`), or, if that
    /// bucket's next hop is dead, falls back to the weights.
    pub fn select_path(&self, hash: u32) -> Option<&'g NextHop<K>> {
        let hops = self.path.nexthops;
        let buckets = self.path.buckets;
        if !buckets.is_empty() {
            let bucket = buckets[hash as usize % buckets.len()];
            if let Some(h) = hops.get(usize::from(bucket)).filter(|h| h.is_alive()) {
                return Some(h);
            }
        }
        let total: u64 = hops
            .iter()
            .filter(|h| h.is_alive())
            .map(|h| u64::from(h.weight))
            .sum();
        if total == 0 {
            return None;
        }
        let mut point = (u64::from(hash) * total) >> 32;
        for h in hops.iter().filter(|h| h.is_alive()) {
            if point < u64::from(h.weight) {
                return Some(h);
            }
            point -= u64::from(h.weight);
        }
        None
    }
}

/// Why a lookup produced no forwarding result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No route (or an `unreachable` rule): `ENETUNREACH`.
    #[error("network unreachable")]
    NoRoute,
    /// A `blackhole` route or rule: `EINVAL`.
    #[error("blackhole")]
    Blackhole,
    /// An `unreachable` route: `EHOSTUNREACH`.
    #[error("host unreachable")]
    Unreachable,
    /// A `prohibit` route or rule: `EACCES`.
    #[error("prohibited")]
    Prohibit,
}

impl LookupError {
    /// The errno the kernel's lookup returns.
    pub fn errno(self) -> i32 {
        match self {
            LookupError::NoRoute => 101,     // ENETUNREACH
            LookupError::Blackhole => 22,    // EINVAL
            LookupError::Unreachable => 113, // EHOSTUNREACH
            LookupError::Prohibit => 13,     // EACCES
        }
    }
}

/// A table's answer: a route, a reject, or "not here" (no match or a `throw` route, the
/// kernel's `EAGAIN`), after which rules continue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableLookup<'g, K> {
    /// A usable route.
    Found(FibResult<'g, K>),
    /// A reject route matched.
    Reject(LookupError, FibResult<'g, K>),
    /// Nothing matched, or a throw route did.
    Continue,
}

/// One routing table: its routes in an LC-trie, with the writer's interning of shared route
/// information.
///
/// The local and main tables of a [`Fib`](crate::Fib) share one trie while the rules are the
/// defaults (aliases carry their table id; each table sees only its own); the first custom rule
/// gives each its own trie. A table's handle stays valid across that change.
///
/// Tables live in a [`Fib`](crate::Fib) and change only through its
/// [`FibWriter`](crate::FibWriter): a `&FibTable` reads.
///
/// ```
/// use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route, TableLookup};
///
/// let mut fib = FibWriter::<u32>::new();
/// fib.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(0x0a00_0001), 2)]), InsertFlags::ADD)?;
/// let guard = crossbeam_epoch::pin();
/// let main = fib.table(254, &guard).unwrap();
/// let TableLookup::Found(r) = main.lookup(&Flow::to(0x0808_0808), &guard) else { panic!() };
/// assert_eq!(r.plen, 0);
/// # Ok::<(), fib_trie::RouteError>(())
/// ```
#[repr(C, align(128))]
pub struct FibTable<K: TrieKey> {
    id: u32,
    store: StoreCell<K>,
    /// This table's routes (aliases) and prefix addresses (leaves with one of its aliases),
    /// on a cache line of their own (writers bump them; lookups read `store`).
    counts: Counts,
}

#[repr(align(128))]
struct Counts {
    routes: AtomicUsize,
    prefixes: AtomicUsize,
}

impl<K: TrieKey> std::fmt::Debug for FibTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FibTable")
            .field("id", &self.id)
            .field("routes", &self.route_count())
            .finish()
    }
}

impl<K: TrieKey> FibTable<K> {
    /// An empty table with this id.
    pub(crate) fn new(id: u32) -> Self {
        Self::on(id, Arc::new(Store::new(false)))
    }

    fn on(id: u32, store: Arc<Store<K>>) -> Self {
        FibTable {
            id,
            store: StoreCell::new(store),
            counts: Counts {
                routes: AtomicUsize::new(0),
                prefixes: AtomicUsize::new(0),
            },
        }
    }

    /// Two empty tables sharing one store (the merged local and main tables) and that store.
    pub(crate) fn merged_pair(a: u32, b: u32) -> (Self, Self, Arc<Store<K>>) {
        let store = Arc::new(Store::new(true));
        (
            Self::on(a, Arc::clone(&store)),
            Self::on(b, Arc::clone(&store)),
            store,
        )
    }

    /// The table id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The trie holding the table's routes (for statistics and plain prefix lookups). While
    /// local and main are merged, it holds both tables' routes.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn trie<'g>(&self, guard: &'g Guard) -> &'g LcTrie<K, FibAlias<K>> {
        check_guard(guard);
        &self.store.load(guard).trie
    }

    /// The number of routes.
    pub fn route_count(&self) -> usize {
        self.counts.routes.load(Ordering::Relaxed)
    }

    /// The number of distinct prefix addresses (leaves) with a route of this table.
    pub fn prefix_count(&self) -> usize {
        self.counts.prefixes.load(Ordering::Relaxed)
    }

    /// The number of distinct shared route infos this table's routes use (a walk: slow path).
    pub fn info_count(&self) -> usize {
        let guard = &crossbeam_epoch::pin();
        let mut seen = HashSet::new();
        self.trie(guard).for_each(guard, |_, aliases| {
            for a in aliases.iter().filter(|a| a.value.table == self.id) {
                seen.insert(Arc::as_ptr(&a.value.info));
            }
        });
        seen.len()
    }

    /// Runs `f` on the current store with its writer lock held (retrying if the unmerge
    /// replaced the store while this writer waited for the lock).
    fn write<R>(&self, f: impl FnOnce(&Store<K>, &mut Infos<K>) -> R) -> R {
        loop {
            let guard = &crossbeam_epoch::pin();
            let store = self.store.load(guard);
            let mut infos = store.lock();
            if !Arc::ptr_eq(store, self.store.load(guard)) {
                continue;
            }
            return f(store, &mut infos);
        }
    }

    /// Adds a route (`fib_table_insert`): see [`FibWriter::insert`](crate::FibWriter::insert).
    /// Writer only.
    pub(crate) fn insert(&self, route: &Route<K>, flags: InsertFlags) -> Result<(), RouteError> {
        let slen = route.validate()?;
        self.write(|store, infos| self.insert_locked(store, infos, route, slen, flags))
    }

    fn insert_locked(
        &self,
        store: &Store<K>,
        infos: &mut Infos<K>,
        route: &Route<K>,
        slen: u8,
        flags: InsertFlags,
    ) -> Result<(), RouteError> {
        infos.sweep();
        let info = infos.intern(&route.info);
        let new = FibAlias {
            table: self.id,
            tos: route.tos,
            route_type: route.route_type,
            info: Arc::clone(&info),
        };
        let (id, tos, prio) = (self.id, route.tos, route.info.priority);
        let (mut added, mut new_prefix) = (false, false);
        let guard = &crossbeam_epoch::pin();
        let before = store.answer_at(route.prefix, slen, guard);
        if tos != 0 {
            // Counted before the route can be seen, so no lookup ignores the flow's tos then.
            store.count_tos_route(true);
        }
        let result = store.trie.modify(route.prefix, |old| {
            let start = old.partition_point(|a| a.slen < slen);
            let end = old.partition_point(|a| a.slen <= slen);
            // Within a length, tables sort by id descending (local before main, the kernel's
            // merged order); only this table's routes are compared.
            let start = start + old[start..end].partition_point(|a| a.value.table > id);
            let end = start + old[start..end].partition_point(|a| a.value.table >= id);
            let section = &old[start..end];
            // `fib_find_alias`: the first route that sorts at or after the new one.
            let first = section.iter().position(|a| {
                a.value.tos < tos || (a.value.tos == tos && a.value.info.priority >= prio)
            });
            let mut at = first.map_or(end, |i| start + i);
            if let Some(i) = first
                .filter(|&i| section[i].value.tos == tos && section[i].value.info.priority == prio)
            {
                if flags.excl {
                    return Err(RouteError::Exists);
                }
                let group_len = section[i..]
                    .iter()
                    .take_while(|a| a.value.tos == tos && a.value.info.priority == prio)
                    .count();
                let group = &section[i..i + group_len];
                let identical = group.iter().position(|a| {
                    a.value.route_type == new.route_type && Arc::ptr_eq(&a.value.info, &new.info)
                });
                if flags.replace {
                    return match identical {
                        Some(0) => Ok(None),
                        Some(_) => Err(RouteError::Exists),
                        None => {
                            let mut list = old.to_vec();
                            list[start + i].value = FibAlias { tos, ..new.clone() };
                            Ok(Some(list))
                        }
                    };
                }
                if identical.is_some() {
                    return Err(RouteError::Exists);
                }
                if flags.append {
                    at = start + i + group_len;
                }
            }
            if !flags.create {
                return Err(RouteError::NotFound);
            }
            new_prefix = !old.iter().any(|a| a.value.table == id);
            added = true;
            let mut list = Vec::with_capacity(old.len() + 1);
            list.extend_from_slice(&old[..at]);
            list.push(Alias {
                slen,
                value: new.clone(),
            });
            list.extend_from_slice(&old[at..]);
            Ok(Some(list))
        });
        drop(new);
        if tos != 0 && !added {
            store.count_tos_route(false);
        }
        if result.is_ok() {
            store.changed(route.prefix, slen, before, guard);
        }
        // A refused route leaves its info unused: `info` is the only other reference.
        infos.release(&info, 1);
        if result.is_ok() && added {
            self.counts.routes.fetch_add(1, Ordering::Relaxed);
            if new_prefix {
                self.counts.prefixes.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Deletes the first route `selector` selects (`fib_table_delete`): see
    /// [`FibWriter::delete`](crate::FibWriter::delete). Writer only.
    pub(crate) fn delete(&self, selector: &RouteSelector<K>) -> Result<FibAlias<K>, RouteError> {
        let slen = check_prefix(selector.prefix, selector.plen)?;
        let id = self.id;
        self.write(|store, infos| {
            let guard = &crossbeam_epoch::pin();
            let before = store.answer_at(selector.prefix, slen, guard);
            let mut removed = None;
            let mut last_of_prefix = false;
            store.trie.modify(selector.prefix, |old| {
                let i = old
                    .iter()
                    .position(|a| {
                        a.slen == slen
                            && a.value.table == id
                            && a.value.tos == selector.tos
                            && selector.matches(&a.value)
                    })
                    .ok_or(RouteError::NotFound)?;
                let mut list = old.to_vec();
                removed = Some(list.remove(i).value);
                last_of_prefix = !list.iter().any(|a| a.value.table == id);
                Ok::<_, RouteError>(Some(list))
            })?;
            let removed = removed.ok_or(RouteError::NotFound)?;
            store.changed(selector.prefix, slen, before, guard);
            if removed.tos != 0 {
                store.count_tos_route(false);
            }
            self.counts.routes.fetch_sub(1, Ordering::Relaxed);
            if last_of_prefix {
                self.counts.prefixes.fetch_sub(1, Ordering::Relaxed);
            }
            infos.sweep();
            infos.retire(Arc::clone(&removed.info));
            Ok(removed)
        })
    }

    /// Looks `flow` up in this table alone (`fib_table_lookup`): the longest prefix with a route
    /// whose tos is 0 or the flow's, whose scope is at least the flow's, and, for types with next
    /// hops, with a live next hop (on `flow.oif` if set). Reject types answer at once.
    ///
    /// The answer comes from the fast structure derived from the trie when it depends on the
    /// destination alone (no output interface, universe scope, and tos 0 or no tos routes in
    /// the table), else from the trie's walk; both answer the same.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn lookup<'g>(&self, flow: &Flow<K>, guard: &'g Guard) -> TableLookup<'g, K> {
        check_guard(guard);
        self.lookup_pinned(flow, guard, true)
    }

    /// [`lookup`](Self::lookup) by the LC-trie's walk alone (the kernel's algorithm), never
    /// through the fast structure: for comparisons and tests.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_walk<'g>(&self, flow: &Flow<K>, guard: &'g Guard) -> TableLookup<'g, K> {
        check_guard(guard);
        self.lookup_pinned(flow, guard, false)
    }

    /// [`lookup`](Self::lookup) (`fast`) or [`lookup_walk`](Self::lookup_walk) under a guard
    /// the caller already checked.
    #[inline(always)]
    pub(crate) fn lookup_pinned<'g>(
        &self,
        flow: &Flow<K>,
        guard: &'g Guard,
        fast: bool,
    ) -> TableLookup<'g, K> {
        let store = self.store.load(guard);
        classify(store.lookup(store.shared.then_some(self.id), flow, guard, fast))
    }

    /// The state and size of the fast structure of this table's store (shared with `main`
    /// while local and main are merged).
    ///
    /// ```
    /// let fib = fib_trie::FibWriter::<u32>::new();
    /// let stats = fib.table(254, &crossbeam_epoch::pin()).unwrap().fast_stats();
    /// assert!(stats.enabled);
    /// assert_eq!(stats.answers, 0);
    /// ```
    pub fn fast_stats(&self) -> FastStats {
        self.store.load(&crossbeam_epoch::pin()).fast_stats()
    }

    /// Every route in key order, and within a prefix address longest prefix first, in table
    /// order (like `ip route show table N`, which sorts the same way).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn dump<'g>(&self, guard: &'g Guard) -> Vec<(K, u8, &'g FibAlias<K>)> {
        let mut out = Vec::with_capacity(self.route_count());
        self.trie(guard).for_each(guard, |key, aliases| {
            out.extend(
                aliases
                    .iter()
                    .filter(|a| a.value.table == self.id)
                    .map(|a| (key, K::BITS - a.slen, &a.value)),
            );
        });
        out
    }

    /// Loads `routes` (all of this table, or of tables sharing its store) into the table's
    /// store if it holds no route yet, building the trie at once ([`LcTrie::insert_many`]) and
    /// the fast structure once; else returns the routes untouched for one-by-one inserts.
    ///
    /// Within a prefix, routes are ordered as [`insert`](Self::insert) with
    /// [`InsertFlags::APPEND`] would order them, routes of equal table, tos and metric in the
    /// given order; a route identical to one before it is skipped, as such an insert refuses it.
    pub(crate) fn load_empty<'r>(
        &self,
        tables: &[&FibTable<K>],
        routes: Vec<&'r Route<K>>,
    ) -> Result<usize, Vec<&'r Route<K>>> {
        self.write(|store, infos| {
            if !store.trie.is_empty() {
                return Err(routes);
            }
            let mut items: Vec<(K, u8, FibAlias<K>)> = Vec::with_capacity(routes.len());
            for r in &routes {
                let slen = K::BITS - r.plen;
                let alias = FibAlias {
                    table: r.table,
                    tos: r.tos,
                    route_type: r.route_type,
                    info: infos.intern(&r.info),
                };
                items.push((r.prefix, slen, alias));
            }
            drop(routes);
            // Stable: the given order stays among routes of one table, tos and metric.
            items.sort_by(|(ka, sa, a), (kb, sb, b)| {
                (ka, sa, std::cmp::Reverse(a.table), std::cmp::Reverse(a.tos))
                    .cmp(&(kb, sb, std::cmp::Reverse(b.table), std::cmp::Reverse(b.tos)))
                    .then(a.info.priority.cmp(&b.info.priority))
            });
            let mut kept: Vec<(K, u8, FibAlias<K>)> = Vec::with_capacity(items.len());
            for item in items {
                let duplicate = kept
                    .iter()
                    .rev()
                    .take_while(|(k, s, a)| {
                        (*k, *s, a.table, a.tos, a.info.priority)
                            == (
                                item.0,
                                item.1,
                                item.2.table,
                                item.2.tos,
                                item.2.info.priority,
                            )
                    })
                    .any(|(_, _, a)| {
                        a.route_type == item.2.route_type && Arc::ptr_eq(&a.info, &item.2.info)
                    });
                if !duplicate {
                    kept.push(item);
                }
            }
            for t in tables {
                let mine = kept.iter().filter(|i| i.2.table == t.id);
                let routes = mine.clone().count();
                let mut prefixes = 0;
                let mut last = None;
                for (k, _, _) in mine {
                    if last != Some(*k) {
                        prefixes += 1;
                        last = Some(*k);
                    }
                }
                t.counts.routes.store(routes, Ordering::Relaxed);
                t.counts.prefixes.store(prefixes, Ordering::Relaxed);
            }
            let added = kept.len();
            store
                .trie
                .insert_many(kept.into_iter().map(|(k, s, a)| (k, K::BITS - s, a)))
                .expect("prefixes were validated");
            infos.sweep();
            store.reindex();
            Ok(added)
        })
    }

    /// How worn this table's store is: prefixes changed one by one since it was built, the
    /// routes it holds (of every table sharing it), and the routes it held when built.
    pub(crate) fn wear(&self) -> Wear {
        let guard = &crossbeam_epoch::pin();
        let store = self.store.load(guard);
        Wear {
            changes: store.changes(),
            routes: store.trie.alias_count(),
            built: store.built(),
        }
    }

    /// Whether `self` and `other` share one store (merged local and main).
    pub(crate) fn shares_store(&self, other: &FibTable<K>) -> bool {
        let guard = &crossbeam_epoch::pin();
        Arc::ptr_eq(self.store.load(guard), other.store.load(guard))
    }

    /// Builds the store `tables` share anew, in bulk, from the routes it holds now, and swaps
    /// it in for each of them; returns the new store (`None` if they no longer share one).
    /// Lookups see the same routes before and after; readers that loaded the old store keep
    /// using it until they unpin, after which its nodes are freed together.
    ///
    /// Why: a trie changed one prefix at a time (a mass delete and re-add of routes) ends up
    /// with the same routes in more memory than a bulk-built one: its fast structure's arena
    /// keeps every node updates replaced, updates' nodes come from the heap one by one, and
    /// the allocator's free lists are left in pieces between long-lived nodes.
    pub(crate) fn compact(tables: &[&FibTable<K>]) -> Option<Arc<Store<K>>> {
        let first = tables.first()?;
        first.write(|shared, _infos| {
            let guard = &crossbeam_epoch::pin();
            if !tables
                .iter()
                .all(|t| Arc::ptr_eq(t.store.load(guard), first.store.load(guard)))
            {
                return None;
            }
            let trie = LcTrie::new();
            let mut routes = Vec::with_capacity(shared.trie.alias_count());
            shared.trie.for_each(guard, |key, aliases| {
                routes.extend(
                    aliases
                        .iter()
                        .map(|a| (key, K::BITS - a.slen, a.value.clone())),
                );
            });
            trie.insert_many(routes)
                .expect("prefixes of a trie are canonical");
            let mut store = Store::with_trie(trie);
            store.shared = shared.shared;
            let store = Arc::new(store);
            for t in tables {
                t.store.swap(Arc::clone(&store), guard);
            }
            Some(store)
        })
    }

    /// Gives `local` and `main`, while they share a store, each its own (`fib_unmerge`): both
    /// new tries are built (bulk) from the shared one under its writer lock, then swapped in.
    /// Readers that loaded the shared store keep using it, unchanged, until they unpin.
    pub(crate) fn unmerge(local: &FibTable<K>, main: &FibTable<K>) {
        main.write(|shared, _infos| {
            let guard = &crossbeam_epoch::pin();
            if !Arc::ptr_eq(local.store.load(guard), main.store.load(guard)) {
                return;
            }
            for table in [local, main] {
                let trie = LcTrie::new();
                let mut routes = Vec::with_capacity(table.route_count());
                shared.trie.for_each(guard, |key, aliases| {
                    routes.extend(
                        aliases
                            .iter()
                            .filter(|a| a.value.table == table.id)
                            .map(|a| (key, K::BITS - a.slen, a.value.clone())),
                    );
                });
                trie.insert_many(routes)
                    .expect("prefixes of a trie are canonical");
                table.store.swap(Arc::new(Store::with_trie(trie)), guard);
            }
        });
    }
}

/// The first route [`FibTable::lookup`] accepts in `trie` (only routes of `table` when given),
/// before its type is interpreted.
#[inline]
pub(crate) fn lookup_raw<'g, K: TrieKey>(
    trie: &'g LcTrie<K, FibAlias<K>>,
    table: Option<u32>,
    flow: &Flow<K>,
    guard: &'g Guard,
) -> Option<FibResult<'g, K>> {
    let mut nh_sel = 0;
    let mut path = None;
    let found = trie.lookup_pinned(flow.dst, guard, |a| {
        table.is_none_or(|t| a.table == t) && accept(a, flow, &mut nh_sel, &mut path, guard)
    });
    found.map(|m| FibResult {
        prefix: m.key,
        plen: m.plen,
        alias: m.value,
        nh_sel,
        // `accept` took the route last, with the next hops it saw.
        path: path.unwrap_or_else(|| m.value.resolve_pinned(guard)),
    })
}

/// Whether a lookup may take `alias` for `flow`; sets `nh_sel` to the first usable next hop
/// and `path` to the next hops it judged (a nexthop object's group is loaded once).
#[inline]
pub(crate) fn accept<'g, K: TrieKey>(
    alias: &'g FibAlias<K>,
    flow: &Flow<K>,
    nh_sel: &mut usize,
    path: &mut Option<Resolved<'g, K>>,
    guard: &'g Guard,
) -> bool {
    if alias.tos != 0 && alias.tos != flow.tos {
        return false;
    }
    let info = &alias.info;
    if info.scope < flow.scope {
        return false;
    }
    let resolved = alias.resolve_pinned(guard);
    *path = Some(resolved);
    if !resolved.route_type.has_next_hops() {
        *nh_sel = 0;
        return true;
    }
    match resolved
        .nexthops
        .iter()
        .position(|h| h.is_alive() && (flow.oif == 0 || h.ifindex == flow.oif))
    {
        Some(i) => {
            *nh_sel = i;
            true
        }
        None => false,
    }
}

/// [`accept`] for the fast structure's precomputed answers, which must not depend on anything
/// that changes without a route change: a unicast route through a nexthop object is taken
/// whatever its object's group (`nh_sel` 0); the lookup judges the group when it reads the
/// answer, and walks the trie if the group refuses (see `Store::lookup`).
#[inline]
pub(crate) fn accept_static<K: TrieKey>(
    alias: &FibAlias<K>,
    flow: &Flow<K>,
    nh_sel: &mut usize,
) -> bool {
    if alias.info.nh_object.is_some() && alias.route_type == RouteType::Unicast {
        *nh_sel = 0;
        return (alias.tos == 0 || alias.tos == flow.tos) && alias.info.scope >= flow.scope;
    }
    // Without an object, nothing epoch-protected is read; the pin only satisfies the types
    // (and nests in the writer's own).
    let guard = &crossbeam_epoch::pin();
    accept(alias, flow, nh_sel, &mut None, guard)
}

pub(crate) fn classify<K: TrieKey>(found: Option<FibResult<'_, K>>) -> TableLookup<'_, K> {
    let Some(r) = found else {
        return TableLookup::Continue;
    };
    match r.route_type() {
        RouteType::Throw => TableLookup::Continue,
        RouteType::Blackhole => TableLookup::Reject(LookupError::Blackhole, r),
        RouteType::Unreachable => TableLookup::Reject(LookupError::Unreachable, r),
        RouteType::Prohibit => TableLookup::Reject(LookupError::Prohibit, r),
        _ => TableLookup::Found(r),
    }
}
