//! Many tables and the policy rules that choose among them (`fib_rules`, `fib_lookup`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::answers::RouteTag;
use crate::fast::NONE;
use crate::guard::check_guard;
use crate::key::TrieKey;
use crate::multipath::MultipathPolicy;
use crate::route::{FibAlias, InsertFlags, Route, RouteError, RouteSelector, RouteType};
use crate::store::{FastGate, Store};
use crate::table::{FibResult, FibTable, Flow, LookupError, TableLookup, classify, ids};
use crate::writer::Wear;

/// What a matching rule does (`FR_ACT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleAction {
    /// Look the flow up in this table; on no match (or a throw route) continue with the next rule.
    Lookup(u32),
    /// Jump to the first rule of this priority (which must be larger than the rule's own).
    Goto(u32),
    /// Do nothing, continue with the next rule.
    Nop,
    /// Fail with [`LookupError::Blackhole`].
    Blackhole,
    /// Fail with [`LookupError::NoRoute`] (`ENETUNREACH`).
    Unreachable,
    /// Fail with [`LookupError::Prohibit`].
    Prohibit,
    /// Kernel decides: the stand-in of a kernel rule the FIB cannot represent (a selector it
    /// does not model, such as ports, an IP protocol or a uid range, or an unknown action),
    /// over what of it the FIB can match. A lookup that reaches it ends with a
    /// [`RouteType::Kernel`](crate::RouteType::Kernel) result of prefix length 0 (no
    /// table, no next hops): whoever forwards hands the packet to the kernel, which applies
    /// the real rule.
    Kernel,
}

/// A policy routing rule (`fib_rule`): selectors, all of which must match, and an action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FibRule<K> {
    /// The rule's priority (`pref`): rules are tried in ascending order.
    pub priority: u32,
    /// Source prefix (`from`), or any.
    pub src: Option<(K, u8)>,
    /// Destination prefix (`to`), or any.
    pub dst: Option<(K, u8)>,
    /// Input interface index, 0 for any.
    pub iif: u32,
    /// Output interface index, 0 for any.
    pub oif: u32,
    /// TOS to match, 0 for any.
    pub tos: u8,
    /// Firewall mark to match under `fwmask`.
    pub fwmark: u32,
    /// Mask of the mark bits compared (0: mark not compared).
    pub fwmask: u32,
    /// Match the flows the selectors do *not* match (`not`).
    pub invert: bool,
    /// What to do on a match.
    pub action: RuleAction,
}

impl<K: TrieKey> FibRule<K> {
    /// A rule of this priority that matches everything and does `action`.
    pub fn new(priority: u32, action: RuleAction) -> Self {
        FibRule {
            priority,
            src: None,
            dst: None,
            iif: 0,
            oif: 0,
            tos: 0,
            fwmark: 0,
            fwmask: 0,
            invert: false,
            action,
        }
    }

    /// Whether the rule's selectors match `flow` (`fib_rule_match`).
    pub fn matches(&self, flow: &Flow<K>) -> bool {
        let in_prefix = |p: Option<(K, u8)>, addr: K| {
            p.is_none_or(|(k, l)| (addr ^ k) & K::prefix_mask(l) == K::ZERO)
        };
        let hit = (self.iif == 0 || self.iif == flow.iif)
            && (self.oif == 0 || self.oif == flow.oif)
            && (self.fwmark ^ flow.mark) & self.fwmask == 0
            && (self.tos == 0 || self.tos == flow.tos)
            && in_prefix(self.src, flow.src)
            && in_prefix(self.dst, flow.dst);
        hit != self.invert
    }
}

/// Why a rule change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// An identical rule exists (`EEXIST`).
    #[error("rule exists")]
    Exists,
    /// No such rule to delete (`ENOENT`).
    #[error("no such rule")]
    NotFound,
    /// A goto that does not jump forward (`EINVAL`).
    #[error("goto {target} from priority {priority} must jump forward")]
    BadGoto {
        /// The rule's priority.
        priority: u32,
        /// The goto target.
        target: u32,
    },
    /// A selector prefix that is not canonical.
    #[error(transparent)]
    Prefix(#[from] crate::trie::PrefixError),
}

/// The read-mostly state readers walk: the tables by id and the rules, in priority order.
/// Replaced as a whole (copy-on-write) when a table is created or a rule changes.
struct Snapshot<K: TrieKey> {
    tables: HashMap<u32, Arc<FibTable<K>>>,
    rules: Vec<FibRule<K>>,
    /// For each rule, the index of its goto target (the first rule of that priority), if any.
    goto_index: Vec<Option<usize>>,
    /// Whether rules other than the three defaults were ever configured (the kernel's
    /// `fib_has_custom_rules`): until then local and main answer as one merged trie.
    custom_rules: bool,
    /// Until then, the store local and main share: lookups walk it once. Held here (not
    /// reached through the tables) so that a reader of this snapshot keeps walking it after
    /// the unmerge gives the tables their own.
    merged: Option<Arc<Store<K>>>,
    /// The default table, consulted after the merged trie.
    default: Option<Arc<FibTable<K>>>,
    /// What a [`RuleAction::Kernel`] rule answers: a "kernel decides" route of no table.
    kernel: FibAlias<K>,
}

impl<K: TrieKey> Snapshot<K> {
    fn with_rules(
        tables: HashMap<u32, Arc<FibTable<K>>>,
        rules: Vec<FibRule<K>>,
        custom_rules: bool,
        merged: Option<Arc<Store<K>>>,
    ) -> Self {
        let merged = merged.filter(|_| !custom_rules);
        let default = tables.get(&ids::DEFAULT).cloned();
        let goto_index = rules
            .iter()
            .map(|r| match r.action {
                RuleAction::Goto(target) => rules.iter().position(|t| t.priority == target),
                _ => None,
            })
            .collect();
        Snapshot {
            tables,
            rules,
            goto_index,
            custom_rules,
            merged,
            default,
            kernel: FibAlias {
                table: 0,
                tos: 0,
                route_type: crate::RouteType::Kernel,
                info: Arc::default(),
            },
        }
    }
}

/// The forwarding information base of one network namespace and address family: tables by id
/// and policy rules, all readable without locks.
///
/// With only the default rules (0: lookup local, 32766: lookup main, 32767: lookup default),
/// local and main share one trie, as in the kernel: their routes hang off the same leaves,
/// tagged with the table id (local before main within a prefix length), and a lookup walks it
/// once: the longest prefix of either table, local first among equals, then the default table.
/// The first rule added or deleted unmerges them (`fib_unmerge`): the new rules are published,
/// then each table gets its own trie, built from the shared one under its writer lock; from
/// then on rules are evaluated in order, each table on its own. Table handles stay valid
/// across the unmerge, and each table's lookups, dumps and counts only ever show its own
/// routes.
///
/// A `Fib` only reads: it changes through its one [`FibWriter`](crate::FibWriter), which makes
/// it and hands readers the `Arc<Fib>` ([`FibWriter::reader`](crate::FibWriter::reader)).
///
/// ```
/// use fib_trie::{FibRule, FibWriter, Flow, InsertFlags, NextHop, Route, RuleAction};
///
/// let mut fib = FibWriter::<u32>::new();
/// fib.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(0x0a00_0001), 2)]), InsertFlags::ADD)?;
/// fib.insert(&Route::unicast(0, 0, 100, vec![NextHop::new(Some(0x0a00_0002), 3)]), InsertFlags::ADD)?;
/// // Marked packets use table 100.
/// let mut rule = FibRule::new(100, RuleAction::Lookup(100));
/// (rule.fwmark, rule.fwmask) = (7, 0xff);
/// fib.add_rule(rule).unwrap();
///
/// let guard = crossbeam_epoch::pin();
/// let plain = fib.lookup(&Flow::to(0x0808_0808), &guard).unwrap();
/// assert_eq!(plain.table(), 254);
/// let marked = fib.lookup(&Flow { mark: 7, ..Flow::to(0x0808_0808) }, &guard).unwrap();
/// assert_eq!(marked.table(), 100);
/// # Ok::<(), fib_trie::RouteError>(())
/// ```
#[repr(C, align(128))]
pub struct Fib<K: TrieKey> {
    snapshot: Atomic<Snapshot<K>>,
    /// The family's multipath hash policy ([`MultipathPolicy::encode`]).
    multipath: AtomicU32,
    /// On a cache line of its own: taking it must not evict `snapshot` from readers' caches.
    writer: WriterLock,
}

#[repr(align(128))]
struct WriterLock(Mutex<()>);

impl<K: TrieKey> std::fmt::Debug for Fib<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fib").finish_non_exhaustive()
    }
}

impl<K: TrieKey> Fib<K> {
    /// The default rules as the kernel installs them.
    pub fn default_rules() -> Vec<FibRule<K>> {
        vec![
            FibRule::new(0, RuleAction::Lookup(ids::LOCAL)),
            FibRule::new(32766, RuleAction::Lookup(ids::MAIN)),
            FibRule::new(32767, RuleAction::Lookup(ids::DEFAULT)),
        ]
    }

    /// A FIB with the local, main and default tables and the default rules (its writer:
    /// [`FibWriter::new`](crate::FibWriter::new)).
    pub(crate) fn new() -> Self {
        let (local, main, merged) = FibTable::merged_pair(ids::LOCAL, ids::MAIN);
        let tables = [
            (ids::LOCAL, Arc::new(local)),
            (ids::MAIN, Arc::new(main)),
            (ids::DEFAULT, Arc::new(FibTable::new(ids::DEFAULT))),
        ]
        .into_iter()
        .collect();
        let snapshot = Snapshot::with_rules(tables, Self::default_rules(), false, Some(merged));
        Fib {
            snapshot: Atomic::new(snapshot),
            multipath: AtomicU32::new(MultipathPolicy::default().encode()),
            writer: WriterLock(Mutex::new(())),
        }
    }

    /// How this family's multipath routes choose their member (the namespace's
    /// `fib_multipath_hash_policy`; see [`crate::multipath`]); IPv4's default until set.
    ///
    /// ```
    /// use fib_trie::FibWriter;
    /// use fib_trie::multipath::MultipathPolicy;
    ///
    /// let mut fib = FibWriter::<u128>::new();
    /// let l4 = MultipathPolicy::from_sysctl(true, 1, 0, 0);
    /// fib.set_multipath_policy(l4);
    /// assert_eq!(fib.multipath_policy(), l4);
    /// ```
    #[inline]
    pub fn multipath_policy(&self) -> MultipathPolicy {
        MultipathPolicy::decode(self.multipath.load(Ordering::Relaxed))
    }

    /// [`FibWriter::set_multipath_policy`](crate::FibWriter::set_multipath_policy). Writer only.
    pub(crate) fn set_multipath_policy(&self, policy: MultipathPolicy) {
        self.multipath.store(policy.encode(), Ordering::Relaxed);
    }

    fn load<'g>(&self, guard: &'g Guard) -> &'g Snapshot<K> {
        let ptr = self.snapshot.load(Ordering::Acquire, guard);
        // SAFETY: `snapshot` is never null (set in `new`, only ever replaced by another
        // snapshot), and a replaced snapshot is retired with `defer_destroy`, so it lives at
        // least as long as `guard` is pinned.
        unsafe { ptr.deref() }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.writer.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes a new snapshot and retires the old one. Writer only.
    fn publish(&self, new: Snapshot<K>, guard: &Guard) {
        let old = self.snapshot.swap(Owned::new(new), Ordering::AcqRel, guard);
        // SAFETY: `old` was just unlinked by the swap and is retired once; readers that loaded
        // it are pinned, so it is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
    }

    /// The table with this id, if it exists.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn table<'g>(&self, id: u32, guard: &'g Guard) -> Option<&'g FibTable<K>> {
        check_guard(guard);
        self.load(guard).tables.get(&id).map(|t| &**t)
    }

    /// The ids of all tables, ascending.
    pub fn table_ids(&self) -> Vec<u32> {
        let guard = &epoch::pin();
        let mut ids: Vec<u32> = self.load(guard).tables.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The rules, in evaluation order.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn rules<'g>(&self, guard: &'g Guard) -> &'g [FibRule<K>] {
        check_guard(guard);
        &self.load(guard).rules
    }

    /// Whether rules were changed from the defaults (local and main are then looked up apart).
    pub fn has_custom_rules(&self) -> bool {
        self.load(&epoch::pin()).custom_rules
    }

    /// [`FibWriter::table_or_create`](crate::FibWriter::table_or_create). Writer only.
    pub(crate) fn table_or_create(&self, id: u32) -> Arc<FibTable<K>> {
        let _writer = self.lock();
        let guard = &epoch::pin();
        let snap = self.load(guard);
        if let Some(t) = snap.tables.get(&id) {
            return Arc::clone(t);
        }
        let table = Arc::new(FibTable::new(id));
        let mut tables = snap.tables.clone();
        tables.insert(id, Arc::clone(&table));
        self.publish(
            Snapshot::with_rules(
                tables,
                snap.rules.clone(),
                snap.custom_rules,
                snap.merged.clone(),
            ),
            guard,
        );
        table
    }

    /// [`FibWriter::insert`](crate::FibWriter::insert). Writer only.
    pub(crate) fn insert(&self, route: &Route<K>, flags: InsertFlags) -> Result<(), RouteError> {
        route.validate()?;
        self.table_or_create(route.table).insert(route, flags)
    }

    /// [`FibWriter::insert_many`](crate::FibWriter::insert_many). Writer only.
    pub(crate) fn insert_many(&self, routes: &[Route<K>]) -> Result<usize, RouteError> {
        for r in routes {
            r.validate()?;
        }
        let mut by_table: HashMap<u32, Vec<&Route<K>>> = HashMap::new();
        for r in routes {
            by_table.entry(r.table).or_default().push(r);
        }
        let handles: HashMap<u32, Arc<FibTable<K>>> = by_table
            .keys()
            .map(|&id| (id, self.table_or_create(id)))
            .collect();
        let mut added = 0;
        let mut one_by_one = Vec::new();
        // Tables sharing a store (merged local and main) load together.
        let merged = self.is_merged();
        let mut pending: Vec<u32> = by_table.keys().copied().collect();
        pending.sort_unstable();
        while let Some(id) = pending.pop() {
            let mut routes = by_table.remove(&id).unwrap_or_default();
            let mut group = vec![Arc::clone(&handles[&id])];
            if merged && (id == ids::LOCAL || id == ids::MAIN) {
                let other = if id == ids::LOCAL {
                    ids::MAIN
                } else {
                    ids::LOCAL
                };
                if let Some(more) = by_table.remove(&other) {
                    pending.retain(|&p| p != other);
                    routes.extend(more);
                }
                group.push(self.table_or_create(other));
            }
            let refs: Vec<&FibTable<K>> = group.iter().map(|t| &**t).collect();
            match group[0].load_empty(&refs, routes) {
                Ok(n) => added += n,
                Err(routes) => one_by_one.extend(routes),
            }
        }
        for r in one_by_one {
            match self.insert(r, InsertFlags::APPEND) {
                Ok(()) => added += 1,
                Err(RouteError::Exists) => {}
                Err(e) => return Err(e),
            }
        }
        // A bulk load retires whole structures (the empty store it replaced, the fast
        // structure's old root): hand this thread's deferred garbage to the global queue, where
        // any thread's pins collect it, rather than leave it in this thread's bag until the
        // writer retires 64 more objects, which a quiet writer may never do.
        epoch::pin().flush();
        Ok(added)
    }

    /// [`FibWriter::compact`](crate::FibWriter::compact). Writer only.
    pub(crate) fn compact(&self, worn: impl Fn(Wear) -> bool) -> usize {
        let _writer = self.lock();
        let guard = &epoch::pin();
        let snap = self.load(guard);
        let mut ids: Vec<u32> = snap.tables.keys().copied().collect();
        ids.sort_unstable();
        let mut compacted = 0;
        // Merged local and main share one store, which the snapshot also holds (the merged
        // lookup walks it): rebuilt once for both, and a snapshot holding the new one
        // published.
        if snap.merged.is_some()
            && let (Some(local), Some(main)) =
                (snap.tables.get(&ids::LOCAL), snap.tables.get(&ids::MAIN))
            && local.shares_store(main)
        {
            ids.retain(|&id| id != ids::LOCAL && id != ids::MAIN);
            if worn(main.wear())
                && let Some(store) = FibTable::compact(&[local, main])
            {
                self.publish(
                    Snapshot::with_rules(
                        snap.tables.clone(),
                        snap.rules.clone(),
                        snap.custom_rules,
                        Some(store),
                    ),
                    guard,
                );
                compacted += 1;
            }
        }
        for id in ids {
            let table = &snap.tables[&id];
            if worn(table.wear()) && FibTable::compact(&[table]).is_some() {
                compacted += 1;
            }
        }
        // The old stores wait in this thread's bag: hand them to the global queue (see
        // `insert_many`).
        guard.flush();
        compacted
    }

    /// [`FibWriter::delete`](crate::FibWriter::delete). Writer only.
    pub(crate) fn delete(&self, selector: &RouteSelector<K>) -> Result<FibAlias<K>, RouteError> {
        let guard = &epoch::pin();
        let table = self
            .table(selector.table, guard)
            .ok_or(RouteError::NotFound)?;
        table.delete(selector)
    }

    /// [`FibWriter::add_rule`](crate::FibWriter::add_rule). Writer only.
    pub(crate) fn add_rule(&self, rule: FibRule<K>) -> Result<(), RuleError> {
        for (k, l) in [rule.src, rule.dst].into_iter().flatten() {
            crate::trie::check_prefix(k, l)?;
        }
        if let RuleAction::Goto(target) = rule.action {
            if target <= rule.priority {
                return Err(RuleError::BadGoto {
                    priority: rule.priority,
                    target,
                });
            }
        }
        let _writer = self.lock();
        let guard = &epoch::pin();
        let snap = self.load(guard);
        if snap.rules.contains(&rule) {
            return Err(RuleError::Exists);
        }
        let mut rules = snap.rules.clone();
        let at = rules.partition_point(|r| r.priority <= rule.priority);
        rules.insert(at, rule);
        self.publish_custom(snap, rules, guard);
        Ok(())
    }

    /// [`FibWriter::delete_rule`](crate::FibWriter::delete_rule). Writer only.
    pub(crate) fn delete_rule(&self, rule: &FibRule<K>) -> Result<(), RuleError> {
        let _writer = self.lock();
        let guard = &epoch::pin();
        let snap = self.load(guard);
        let at = snap
            .rules
            .iter()
            .position(|r| r == rule)
            .ok_or(RuleError::NotFound)?;
        let mut rules = snap.rules.clone();
        rules.remove(at);
        self.publish_custom(snap, rules, guard);
        Ok(())
    }

    /// Publishes changed `rules` (custom from now on) and, the first time, unmerges local and
    /// main (`fib_unmerge`): readers of the new snapshot look each table up alone (which works
    /// on the shared store too), then each table gets its own trie. Writer only.
    fn publish_custom(&self, snap: &Snapshot<K>, rules: Vec<FibRule<K>>, guard: &Guard) {
        let was_merged = snap.merged.is_some();
        let tables = snap.tables.clone();
        self.publish(
            Snapshot::with_rules(tables.clone(), rules, true, None),
            guard,
        );
        if was_merged {
            if let (Some(local), Some(main)) = (tables.get(&ids::LOCAL), tables.get(&ids::MAIN)) {
                FibTable::unmerge(local, main);
            }
        }
    }

    /// Whether local and main still share one trie (no custom rule yet).
    pub fn is_merged(&self) -> bool {
        self.load(&epoch::pin()).merged.is_some()
    }

    /// Routes `flow` (`fib_lookup`): rules in order, or the merged local+main fast path while
    /// the rules are the defaults.
    ///
    /// # Errors
    /// The [`LookupError`] of a reject route or rule, or [`LookupError::NoRoute`].
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn lookup<'g>(
        &self,
        flow: &Flow<K>,
        guard: &'g Guard,
    ) -> Result<FibResult<'g, K>, LookupError> {
        check_guard(guard);
        self.lookup_with(flow, guard, true)
    }

    /// Routes every flow of `flows` as [`lookup`](Self::lookup) would, calling `emit` with
    /// each flow's index and result, in order.
    ///
    /// While the rules are the defaults, the destinations of the flows the fast structure can
    /// answer go through [`FastLpm::lookup_batch`](crate::FastLpm::lookup_batch) together
    /// (overlapping their cache misses), and their results are assembled afterwards; every
    /// other flow is looked up alone. Call it once per batch of packets with the batch's
    /// guard; it allocates nothing.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector): checked once
    /// per call, not per flow.
    ///
    /// ```
    /// use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route};
    ///
    /// let mut fib = FibWriter::<u32>::new();
    /// let via = NextHop::new(Some(0x0a00_0001), 2);
    /// fib.insert(&Route::unicast(0x0a00_0000, 8, 254, vec![via]), InsertFlags::ADD)?;
    ///
    /// let flows = [Flow::to(0x0a01_0203), Flow::to(0x0b00_0001)];
    /// let mut oifs = Vec::new();
    /// fib.lookup_batch(&flows, &crossbeam_epoch::pin(), |i, r| {
    ///     oifs.push((i, r.ok().map(|r| r.nexthops()[r.nh_sel].ifindex)));
    /// });
    /// assert_eq!(oifs, [(0, Some(2)), (1, None)]);
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    pub fn lookup_batch<'g>(
        &self,
        flows: &[Flow<K>],
        guard: &'g Guard,
        emit: impl FnMut(usize, Result<FibResult<'g, K>, LookupError>),
    ) {
        self.lookup_batch_by(&mut SliceBatch { flows, emit }, guard);
    }

    /// Routes every lookup of `batch` as [`lookup`](Self::lookup) would, handing each one's
    /// result to [`FlowBatch::answer`], in order: [`lookup_batch`](Self::lookup_batch) for a
    /// caller that keeps its lookups in its own form and builds each [`Flow`] when asked
    /// (so that no array of flows is written and read back per batch). A lookup the fast
    /// structure answers with a unicast route without a nexthop object is first offered to
    /// [`FlowBatch::known`] by the route's [`RouteTag`]: a caller that remembers what the
    /// route decides takes it from there, and no result is built for it.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector): checked once
    /// per call, not per flow.
    ///
    /// ```
    /// use fib_trie::{FibResult, FibWriter, Flow, FlowBatch, InsertFlags, LookupError, NextHop, Route};
    ///
    /// /// Destinations in, egress interfaces out.
    /// struct Oifs(Vec<u32>, Vec<Option<u32>>);
    /// impl<'g> FlowBatch<'g, u32> for Oifs {
    ///     fn count(&self) -> usize {
    ///         self.0.len()
    ///     }
    ///     fn flow(&self, k: usize) -> Flow<u32> {
    ///         Flow::to(self.0[k])
    ///     }
    ///     fn answer(&mut self, _: usize, _: &Flow<u32>, r: Result<FibResult<'g, u32>, LookupError>) {
    ///         self.1.push(r.ok().map(|r| r.nexthops()[r.nh_sel].ifindex));
    ///     }
    /// }
    ///
    /// let mut fib = FibWriter::<u32>::new();
    /// let via = NextHop::new(Some(0x0a00_0001), 2);
    /// fib.insert(&Route::unicast(0x0a00_0000, 8, 254, vec![via]), InsertFlags::ADD)?;
    /// let mut batch = Oifs(vec![0x0a01_0203, 0x0b00_0001], Vec::new());
    /// fib.lookup_batch_by(&mut batch, &crossbeam_epoch::pin());
    /// assert_eq!(batch.1, [Some(2), None]);
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    pub fn lookup_batch_by<'g>(&self, batch: &mut impl FlowBatch<'g, K>, guard: &'g Guard) {
        /// Flows whose destinations go to the fast structure together.
        const GROUP: usize = 64;
        check_guard(guard);
        let snap = self.load(guard);
        // The store-wide half of `fast_eligible`, read once per call: the batch's flows see
        // the store as it was when the call began, as if looked up at that instant. With
        // custom rules (no merged store) no flow is eligible: each is looked up alone.
        let merged = snap.merged.as_deref();
        let gate = merged.map_or(FastGate::CLOSED, Store::fast_gate);
        let mut dsts = [K::ZERO; GROUP];
        let mut at = [0u8; GROUP];
        // The fast answers, raw (`NONE` for none: four bytes each, no tag to write).
        let mut ids = [NONE; GROUP];
        let mut tags: [Option<RouteTag>; GROUP] = [None; GROUP];
        let total = batch.count();
        let mut base = 0;
        while base < total {
            let len = (total - base).min(GROUP);
            // The common case: every flow of the group goes to the fast structure; its
            // answers are then the group's in order.
            let mut all = true;
            for (j, d) in dsts[..len].iter_mut().enumerate() {
                let flow = batch.flow(base + j);
                *d = flow.dst;
                all &= gate.admits(&flow);
            }
            let n = if all {
                len
            } else {
                let mut n = 0;
                for j in 0..len {
                    let flow = batch.flow(base + j);
                    if gate.admits(&flow) {
                        dsts[n] = flow.dst;
                        at[n] = j as u8;
                        n += 1;
                    }
                }
                n
            };
            if let Some(merged) = merged {
                merged.fast_batch(&dsts[..n], &mut ids[..n], guard);
                // Each fast answer's tag, read for the whole group before the loop below uses
                // any: independent loads that overlap, where the loop would wait on each
                // flow's chain (id, its tag, the batch's memo under that tag) one flow at a
                // time. The tag sits beside the answer's address (`Answers::tag`), so a
                // lookup the batch knows by its tag never reads the answer itself.
                for (tag, &id) in tags[..n].iter_mut().zip(&ids[..n]) {
                    *tag = if id == NONE {
                        None
                    } else {
                        merged.fast_tag(id, guard)
                    };
                }
            }
            let mut k = 0;
            for j in 0..len {
                // The flow's fast answer (raw: `NONE` for none) and its tag, if it went to the
                // fast structure.
                let (id, tag) = if all {
                    (Some(ids[j & (GROUP - 1)]), tags[j & (GROUP - 1)])
                } else if k < n && usize::from(at[k & (GROUP - 1)]) == j {
                    k += 1;
                    (
                        Some(ids[(k - 1) & (GROUP - 1)]),
                        tags[(k - 1) & (GROUP - 1)],
                    )
                } else {
                    (None, None)
                };
                // A unicast route without a nexthop object (the only answers with a tag) the
                // batch may know by its tag.
                if let Some(tag) = tag {
                    if batch.known(base + j, tag) {
                        continue;
                    }
                }
                // A usable route without a nexthop object, the common answer, as
                // `finish_merged` would give it; every answer goes out through this one call of
                // `answer`, which the compiler may then inline, leaving out what it does not
                // read (such as the prefix).
                let answer = match (merged, id) {
                    (Some(merged), Some(id)) if id != NONE => merged.fast_answer(id, guard),
                    _ => None,
                };
                if tag.is_some() && answer.and_then(|a| a.tag) != tag {
                    // Retired since its tag was read (a concurrent change): the result below
                    // is another route's.
                    batch.unknown(base + j);
                }
                // Built again (from the caller's own data, still in the cache), not kept.
                let flow = batch.flow(base + j);
                let plain = answer.and_then(|a| Store::plain_result(a, &flow));
                let result = match plain {
                    Some(r) if usable(r.route_type()) => Ok(r),
                    _ => self.lookup_slow(snap, id.map(answer_of), &flow, guard),
                };
                batch.answer(base + j, &flow, result);
            }
            base += len;
        }
    }

    /// [`lookup_batch`](Self::lookup_batch)'s answer for `flow` other than a usable fast one
    /// without a nexthop object: the fast structure's answer (`id`, if the flow went to it),
    /// else the merged trie's walk, then the default table; with custom rules, the rules.
    #[inline(never)]
    fn lookup_slow<'g>(
        &self,
        snap: &'g Snapshot<K>,
        id: Option<Option<u32>>,
        flow: &Flow<K>,
        guard: &'g Guard,
    ) -> Result<FibResult<'g, K>, LookupError> {
        let Some(merged) = &snap.merged else {
            return self.lookup_with(flow, guard, true);
        };
        let found = match id.and_then(|id| merged.fast_result(id, flow, guard)) {
            Some(found) => found,
            None => merged.lookup(None, flow, guard, false),
        };
        finish_merged(found, || {
            snap.default
                .as_ref()
                .map(|t| t.lookup_pinned(flow, guard, true))
        })
    }

    /// [`lookup`](Self::lookup) by the LC-trie's walk alone (the kernel's algorithm), never
    /// through the fast structures: for comparisons and tests.
    ///
    /// # Errors
    /// As [`lookup`](Self::lookup).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_walk<'g>(
        &self,
        flow: &Flow<K>,
        guard: &'g Guard,
    ) -> Result<FibResult<'g, K>, LookupError> {
        check_guard(guard);
        self.lookup_with(flow, guard, false)
    }

    #[inline(always)]
    fn lookup_with<'g>(
        &self,
        flow: &Flow<K>,
        guard: &'g Guard,
        fast: bool,
    ) -> Result<FibResult<'g, K>, LookupError> {
        let table_lookup = |t: &'g FibTable<K>| t.lookup_pinned(flow, guard, fast);
        let snap = self.load(guard);
        if let Some(merged) = &snap.merged {
            // One walk of the merged trie: the longest prefix of either table, local first
            // among equals (its aliases sort first within a length), then the default table.
            let found = merged.lookup(None, flow, guard, fast);
            return finish_merged(found, || snap.default.as_ref().map(|t| table_lookup(t)));
        }
        let mut i = 0;
        while let Some(rule) = snap.rules.get(i) {
            if !rule.matches(flow) {
                i += 1;
                continue;
            }
            let answer = match rule.action {
                RuleAction::Goto(_) => {
                    // An unresolved goto is skipped, like the kernel's.
                    i = snap.goto_index[i].unwrap_or(i + 1);
                    continue;
                }
                RuleAction::Nop => TableLookup::Continue,
                RuleAction::Blackhole => return Err(LookupError::Blackhole),
                RuleAction::Unreachable => return Err(LookupError::NoRoute),
                RuleAction::Prohibit => return Err(LookupError::Prohibit),
                RuleAction::Kernel => {
                    return Ok(FibResult {
                        prefix: K::ZERO,
                        plen: 0,
                        alias: &snap.kernel,
                        nh_sel: 0,
                        path: snap.kernel.resolve_pinned(guard),
                    });
                }
                RuleAction::Lookup(id) => snap
                    .tables
                    .get(&id)
                    .map_or(TableLookup::Continue, |t| table_lookup(t)),
            };
            if !matches!(answer, TableLookup::Continue) {
                return finish(answer);
            }
            i += 1;
        }
        Err(LookupError::NoRoute)
    }
}

/// A batch of lookups for [`Fib::lookup_batch_by`], kept in the caller's own form: the FIB
/// asks for each lookup's [`Flow`] when it needs it and hands each result back, in order.
pub trait FlowBatch<'g, K> {
    /// How many lookups the batch holds (numbered from 0).
    fn count(&self) -> usize;

    /// The flow of lookup `k` (below [`count`](Self::count)). Asked for more than once per
    /// lookup (it is built where needed, never stored), so it must give the same flow each
    /// time and should be cheap.
    fn flow(&self, k: usize) -> Flow<K>;

    /// Takes lookup `k`'s result, `flow` being its flow as [`flow`](Self::flow) gave it.
    fn answer(&mut self, k: usize, flow: &Flow<K>, result: Result<FibResult<'g, K>, LookupError>);

    /// Whether the batch already knows what lookup `k`'s result decides (for its flow, as
    /// [`flow`](Self::flow) gives it), the result being a unicast route without a nexthop
    /// object whose identity is `tag` (see [`RouteTag`]):
    /// if so (`true`), the FIB builds no result and does not call [`answer`](Self::answer)
    /// for `k`. Called at most once per lookup, only for such results, and when it returns
    /// `false`, `answer(k, ..)` with that route's result follows before any other call, so
    /// the batch may keep `tag` until then (to remember the decision under it), unless
    /// [`unknown`](Self::unknown)`(k)` comes first (the route was retired meanwhile). The
    /// default knows nothing.
    #[inline(always)]
    fn known(&mut self, k: usize, tag: RouteTag) -> bool {
        let _ = (k, tag);
        false
    }

    /// Lookup `k`'s route, about which [`known`](Self::known) was asked and answered
    /// `false`, was retired by a concurrent change before its result was built: the result
    /// [`answer`](Self::answer) hands over next for `k` is another route's (or none), and
    /// must not be remembered under the tag `known` was given. Called (rarely) between the
    /// two; the default does nothing (a batch that keeps no tags).
    #[inline(always)]
    fn unknown(&mut self, k: usize) {
        let _ = k;
    }
}

/// [`Fib::lookup_batch`]'s flows and callback as a [`FlowBatch`].
struct SliceBatch<'a, K, F> {
    flows: &'a [Flow<K>],
    emit: F,
}

impl<'g, K: Copy + Default + 'g, F> FlowBatch<'g, K> for SliceBatch<'_, K, F>
where
    F: FnMut(usize, Result<FibResult<'g, K>, LookupError>),
{
    #[inline(always)]
    fn count(&self) -> usize {
        self.flows.len()
    }

    #[inline(always)]
    fn flow(&self, k: usize) -> Flow<K> {
        // `k` is below `count`: never the default.
        self.flows.get(k).copied().unwrap_or_default()
    }

    #[inline(always)]
    fn answer(&mut self, k: usize, _: &Flow<K>, result: Result<FibResult<'g, K>, LookupError>) {
        (self.emit)(k, result);
    }
}

/// The answer of the merged local+main store, then of the default table (`default`, if
/// there is one) where the merged store has none.
#[inline(always)]
fn finish_merged<'g, K: TrieKey>(
    found: Option<FibResult<'g, K>>,
    default: impl FnOnce() -> Option<TableLookup<'g, K>>,
) -> Result<FibResult<'g, K>, LookupError> {
    finish(match classify(found) {
        TableLookup::Continue => default().unwrap_or(TableLookup::Continue),
        answer => answer,
    })
}

/// A raw fast answer ([`FastLpm::lookup_batch_raw`](crate::FastLpm::lookup_batch_raw):
/// `NONE` for none) as an `Option`.
#[inline(always)]
fn answer_of(id: u32) -> Option<u32> {
    (id != NONE).then_some(id)
}

/// Whether a route of this type is a lookup's answer as it is (`classify`'s `Found`): not a
/// throw route (the lookup goes on) nor a reject route.
#[inline(always)]
fn usable(route_type: RouteType) -> bool {
    !matches!(
        route_type,
        RouteType::Throw | RouteType::Blackhole | RouteType::Unreachable | RouteType::Prohibit
    )
}

fn finish<K>(answer: TableLookup<'_, K>) -> Result<FibResult<'_, K>, LookupError> {
    match answer {
        TableLookup::Found(r) => Ok(r),
        TableLookup::Reject(e, _) => Err(e),
        TableLookup::Continue => Err(LookupError::NoRoute),
    }
}

impl<K: TrieKey> Drop for Fib<K> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no reader holds this snapshot through `self` any more
        // (readers borrow `self` for as long as their result lives), and it is freed once.
        unsafe {
            let guard = epoch::unprotected();
            let ptr = self.snapshot.load(Ordering::Relaxed, guard);
            drop(ptr.into_owned());
        }
    }
}
