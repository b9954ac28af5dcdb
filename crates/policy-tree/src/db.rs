//! [`PolicyDb`]: the published structure (exact hashes and inexact bins) and its writer.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_epoch::{Atomic, Guard};
use foldhash::fast::{FixedState, RandomState};
use hashbrown::HashMap;

use crate::Error;
use crate::addr::Family;
use crate::bin::{Bin, BinShape};
use crate::decide::{Check, check, resolve};
use crate::epoch::{load, publish, take};
use crate::exact::ExactTable;
use crate::guard::check_guard;
use crate::policy::{Direction, HThresh, Mark, Policy, PolicySpec, PolicyType};
use crate::registry::{Admitted, Head, Registry};
use crate::selector::{Flow, Selector};

/// What selects an inexact bin: the kernel's `xfrm_pol_inexact_key` (without the netns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct BinKey {
    dir: Direction,
    ptype: PolicyType,
    family: Family,
    if_id: u32,
}

impl BinKey {
    fn of(policy: &Policy) -> BinKey {
        BinKey {
            dir: policy.dir,
            ptype: policy.ptype,
            family: policy.selector.family(),
            if_id: policy.if_id,
        }
    }
}

/// The published pointer to one bin's current version; shared by successive bin tables.
struct BinSlot {
    bin: Atomic<Bin>,
}

impl Drop for BinSlot {
    fn drop(&mut self) {
        drop(take(&mut self.bin));
    }
}

/// The bins that exist, by key. Replaced as a whole when a bin appears or disappears.
struct BinTable {
    map: HashMap<BinKey, Arc<BinSlot>, FixedState>,
    /// Whether any bin holds sub policies (most databases have none: lookups skip the probe).
    has_sub: bool,
}

impl BinTable {
    fn new(map: HashMap<BinKey, Arc<BinSlot>, FixedState>) -> BinTable {
        let has_sub = map.keys().any(|k| k.ptype == PolicyType::Sub);
        BinTable { map, has_sub }
    }
}

/// Everything a reader sees, replaced as a whole on a rebuild (hthresh change, flush).
struct Root {
    hthresh: HThresh,
    exact: [ExactTable; 3],
    bins: Atomic<BinTable>,
}

impl Drop for Root {
    fn drop(&mut self) {
        drop(take(&mut self.bins));
    }
}

impl Root {
    /// A root holding `policies` (any order), built before anyone can see it.
    fn build(hthresh: HThresh, seed: u64, policies: &[Policy], guard: &Guard) -> (Root, Counts) {
        let exact = Direction::ALL.map(|dir| ExactTable::new(dir, &hthresh, seed));
        let mut counts = Counts::default();
        let mut bins: std::collections::HashMap<BinKey, Bin> = std::collections::HashMap::new();
        for policy in policies {
            if hthresh.is_exact(policy.dir, &policy.selector) {
                let table = &exact[policy.dir.slot()];
                table.change(None, Some(policy), guard);
                counts.exact[policy.dir.slot()] += 1;
                table.maybe_grow(counts.exact[policy.dir.slot()], guard);
            } else {
                let bin = bins.entry(BinKey::of(policy)).or_insert_with(Bin::new);
                *bin = bin.with(*policy);
                counts.inexact += 1;
            }
        }
        let mut map = HashMap::with_hasher(FixedState::with_seed(seed));
        for (key, bin) in bins {
            map.insert(
                key,
                Arc::new(BinSlot {
                    bin: Atomic::new(bin),
                }),
            );
        }
        counts.bins = map.len();
        let root = Root {
            hthresh,
            exact,
            bins: Atomic::new(BinTable::new(map)),
        };
        (root, counts)
    }
}

/// How many policies sit where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Policies in the exact hash, per direction (in, out, fwd).
    pub exact: [usize; 3],
    /// Policies in inexact bins.
    pub inexact: usize,
    /// Inexact bins.
    pub bins: usize,
}

/// The writer's state, behind the writer lock.
struct Writer {
    registry: Registry,
    counts: Counts,
    seed: u64,
}

/// The security policy database: exact hashes per direction under [`HThresh`], inexact bins
/// with destination and source search trees, lock-free lookups.
///
/// Readers share the database as an `Arc<PolicyDb>` and only read it: it changes through its
/// one [`PolicyWriter`](crate::PolicyWriter), which makes it. Lookups run under a caller's
/// [`Guard`] and never lock, allocate or block; changes publish with atomic pointer swaps.
///
/// ```
/// use std::net::Ipv4Addr;
/// use policy_tree::{Action, Direction, Flow, PolicySpec, PolicyWriter, Selector, TemplateId};
///
/// let mut db = PolicyWriter::new();
/// let tunnel = Selector::new("10.0.1.0/24".parse()?, "10.0.2.0/24".parse()?)?;
/// db.add(PolicySpec::new(tunnel, Direction::Out).priority(100).action(Action::Ipsec(TemplateId(1))))?;
/// let plain = Selector::new("0.0.0.0/0".parse()?, "10.0.2.240/28".parse()?)?;
/// db.add(PolicySpec::new(plain, Direction::Out).priority(10))?;
///
/// let guard = crossbeam_epoch::pin();
/// let to_tunnel = Flow::v4(Ipv4Addr::new(10, 0, 1, 2), Ipv4Addr::new(10, 0, 2, 2));
/// let to_plain = Flow::v4(Ipv4Addr::new(10, 0, 1, 2), Ipv4Addr::new(10, 0, 2, 254));
/// assert_eq!(db.lookup(&to_tunnel, Direction::Out, &guard).unwrap().action, Action::Ipsec(TemplateId(1)));
/// assert_eq!(db.lookup(&to_plain, Direction::Out, &guard).unwrap().action, Action::Allow);
/// assert!(db.lookup(&to_plain, Direction::In, &guard).is_none());
/// # Ok::<(), policy_tree::Error>(())
/// ```
pub struct PolicyDb {
    root: Atomic<Root>,
    writer: Mutex<Writer>,
    /// Policies per direction (the kernel's `policy_count[dir]`), read without the lock so a
    /// packet path can skip the lookup when a direction has none.
    per_dir: [AtomicUsize; 3],
    /// Per direction, who holds the kernel's `pos` 0 ([`Head::encode`]).
    heads: [AtomicU64; 3],
    /// Per direction, whether the default policy is block.
    default_block: [AtomicBool; 3],
}

impl Drop for PolicyDb {
    fn drop(&mut self) {
        drop(take(&mut self.root));
    }
}

impl std::fmt::Debug for PolicyDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyDb")
            .field("counts", &self.counts())
            .field("hthresh", &self.hthresh())
            .finish_non_exhaustive()
    }
}

impl PolicyDb {
    /// [`PolicyWriter::new`](crate::PolicyWriter::new). Writer only.
    pub(crate) fn new() -> PolicyDb {
        PolicyDb::with_hthresh(HThresh::default()).unwrap_or_else(|_| unreachable!())
    }

    /// [`PolicyWriter::with_hthresh`](crate::PolicyWriter::with_hthresh). Writer only.
    pub(crate) fn with_hthresh(hthresh: HThresh) -> Result<PolicyDb, Error> {
        hthresh.validate()?;
        // A random seed keeps the exact hash's buckets unpredictable to whoever picks addresses.
        let seed = RandomState::default().hash_one(0x7866_726d_u64);
        let guard = crossbeam_epoch::pin();
        let (root, counts) = Root::build(hthresh, seed, &[], &guard);
        Ok(PolicyDb {
            root: Atomic::new(root),
            writer: Mutex::new(Writer {
                registry: Registry::new(hthresh),
                counts,
                seed,
            }),
            per_dir: Default::default(),
            heads: Default::default(),
            default_block: Default::default(),
        })
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        // A writer that panicked left the registry and the published structure in step (every
        // change publishes after the registry is updated and cannot fail), so go on.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`PolicyWriter::add`](crate::PolicyWriter::add). Writer only.
    pub(crate) fn add(&self, spec: PolicySpec) -> Result<Policy, Error> {
        self.insert(&spec, true)
    }

    /// [`PolicyWriter::update`](crate::PolicyWriter::update). Writer only.
    pub(crate) fn update(&self, spec: PolicySpec) -> Result<Policy, Error> {
        self.insert(&spec, false)
    }

    fn insert(&self, spec: &PolicySpec, excl: bool) -> Result<Policy, Error> {
        let mut w = self.writer();
        let Admitted { policy, replaced } = w.registry.admit(spec, excl)?;
        self.change(&mut w, replaced.as_ref(), Some(&policy));
        self.publish_heads(&w);
        Ok(policy)
    }

    /// Publishes who holds `pos` 0 in each direction.
    fn publish_heads(&self, w: &Writer) {
        for dir in Direction::ALL {
            self.heads[dir.slot()].store(w.registry.head(dir).encode(), Ordering::Release);
        }
    }

    #[inline]
    fn head(&self, dir: Direction) -> Head {
        Head::decode(self.heads[dir.slot()].load(Ordering::Acquire))
    }

    /// [`PolicyWriter::delete`](crate::PolicyWriter::delete). Writer only.
    pub(crate) fn delete(
        &self,
        selector: &Selector,
        dir: Direction,
        ptype: PolicyType,
        if_id: u32,
        mark: Mark,
    ) -> Result<Policy, Error> {
        let mut w = self.writer();
        let policy = w.registry.remove(selector, dir, ptype, if_id, mark)?;
        self.change(&mut w, Some(&policy), None);
        self.publish_heads(&w);
        Ok(policy)
    }

    /// [`PolicyWriter::delete_by_index`](crate::PolicyWriter::delete_by_index). Writer only.
    pub(crate) fn delete_by_index(&self, index: u32) -> Result<Policy, Error> {
        let mut w = self.writer();
        let policy = w.registry.remove_index(index)?;
        self.change(&mut w, Some(&policy), None);
        self.publish_heads(&w);
        Ok(policy)
    }

    /// [`PolicyWriter::flush`](crate::PolicyWriter::flush). Writer only.
    pub(crate) fn flush(&self, ptype: PolicyType) -> usize {
        let mut w = self.writer();
        let removed = w.registry.flush(ptype);
        self.rebuild(&mut w);
        self.publish_heads(&w);
        let left = w.registry.dump();
        for dir in Direction::ALL {
            let n = left.iter().filter(|p| p.dir == dir).count();
            self.per_dir[dir.slot()].store(n, Ordering::Release);
        }
        removed
    }

    /// [`PolicyWriter::set_hthresh`](crate::PolicyWriter::set_hthresh). Writer only.
    pub(crate) fn set_hthresh(&self, hthresh: HThresh) -> Result<(), Error> {
        hthresh.validate()?;
        let mut w = self.writer();
        w.registry.set_hthresh(hthresh);
        self.rebuild(&mut w);
        self.publish_heads(&w);
        Ok(())
    }

    /// [`PolicyWriter::forget_history`](crate::PolicyWriter::forget_history). Writer only.
    pub(crate) fn forget_history(&self) {
        let mut w = self.writer();
        w.registry.forget_history();
        self.rebuild(&mut w);
        self.publish_heads(&w);
    }

    /// The current hash thresholds.
    pub fn hthresh(&self) -> HThresh {
        let guard = crossbeam_epoch::pin();
        load(&self.root, &guard).map_or_else(HThresh::default, |r| r.hthresh)
    }

    /// The number of policies.
    pub fn len(&self) -> usize {
        self.writer().registry.len()
    }

    /// Whether there are no policies.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether any policy of direction `dir` exists, without locking: what the kernel checks
    /// (`policy_count[dir]`) before it looks policies up for a packet. A change in progress
    /// may be seen a moment late, as in the kernel.
    ///
    /// ```
    /// use policy_tree::{Action, Direction, PolicySpec, PolicyWriter, Selector};
    ///
    /// let mut db = PolicyWriter::new();
    /// assert!(!db.has_policies(Direction::Fwd));
    /// let sel = Selector::new("10.0.0.0/8".parse()?, "0.0.0.0/0".parse()?)?;
    /// db.add(PolicySpec::new(sel, Direction::Fwd).action(Action::Block))?;
    /// assert!(db.has_policies(Direction::Fwd) && !db.has_policies(Direction::In));
    /// # Ok::<(), policy_tree::Error>(())
    /// ```
    #[inline]
    pub fn has_policies(&self, dir: Direction) -> bool {
        self.per_dir[dir.slot()].load(Ordering::Acquire) != 0
    }

    /// [`PolicyWriter::set_default_block`](crate::PolicyWriter::set_default_block). Writer only.
    pub(crate) fn set_default_block(&self, dir: Direction, block: bool) {
        self.default_block[dir.slot()].store(block, Ordering::Release);
    }

    /// Whether the default policy of `dir` is block.
    pub fn default_blocks(&self, dir: Direction) -> bool {
        self.default_block[dir.slot()].load(Ordering::Acquire)
    }

    /// Whether a packet of direction `dir` must be checked at all: a policy of that direction
    /// exists or its default is block (the kernel's `__xfrm_check_nopolicy`, for a packet
    /// without IPsec). Lock-free.
    ///
    /// ```
    /// use policy_tree::{Direction, PolicyWriter};
    ///
    /// let mut db = PolicyWriter::new();
    /// assert!(!db.needs_check(Direction::Fwd));
    /// db.set_default_block(Direction::Fwd, true);
    /// assert!(db.needs_check(Direction::Fwd) && !db.has_policies(Direction::Fwd));
    /// ```
    #[inline]
    pub fn needs_check(&self, dir: Direction) -> bool {
        self.has_policies(dir) || self.default_block[dir.slot()].load(Ordering::Relaxed)
    }

    /// Where the policies sit.
    pub fn counts(&self) -> Counts {
        self.writer().counts
    }

    /// Every policy in the kernel's dump order (`ip xfrm policy show`): the most recently added
    /// or updated first.
    pub fn dump(&self) -> Vec<Policy> {
        self.writer().registry.dump()
    }

    /// The policy with this index.
    pub fn get_by_index(&self, index: u32) -> Option<Policy> {
        self.writer().registry.get_index(index)
    }

    /// The policy with this direction, type, if_id, mark and selector, found through the
    /// published structure as a reader finds it (`ip xfrm policy get`): the exact chain, or the
    /// bin's tree node that must hold it.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn get<'g>(
        &self,
        selector: &Selector,
        dir: Direction,
        ptype: PolicyType,
        if_id: u32,
        mark: Mark,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        check_guard(guard);
        let root = load(&self.root, guard)?;
        if root.hthresh.is_exact(dir, selector) {
            return root.exact[dir.slot()].find(selector, ptype, if_id, mark, guard);
        }
        let key = BinKey {
            dir,
            ptype,
            family: selector.family(),
            if_id,
        };
        let slot = load(&root.bins, guard)?.map.get(&key)?;
        load(&slot.bin, guard)?.find(selector, mark)
    }

    /// The policy that decides `flow` in direction `dir` (the kernel's `xfrm_policy_lookup`):
    /// sub policies first, then main ones; among matches the lowest priority value wins, ties
    /// going as the kernel breaks them (see the crate README); [`UNDECIDED`](crate::UNDECIDED)
    /// when that depends on what the database cannot know.
    ///
    /// Lock-free and allocation-free; the result lives as long as `guard`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn lookup<'g>(&self, flow: &Flow, dir: Direction, guard: &'g Guard) -> Option<&'g Policy> {
        check_guard(guard);
        self.lookup_pinned(flow, dir, guard)
    }

    /// [`lookup`](Self::lookup) under a guard the caller already checked.
    #[inline(always)]
    fn lookup_pinned<'g>(
        &self,
        flow: &Flow,
        dir: Direction,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        let root = load(&self.root, guard)?;
        let [main, sub] = root.exact[dir.slot()].lookup(flow, None, guard);
        let bins = load(&root.bins, guard);
        let head = self.head(dir);
        if let Some(sub) = Self::inexact(bins, flow, dir, PolicyType::Sub, sub, head, guard) {
            return Some(sub);
        }
        Self::inexact(bins, flow, dir, PolicyType::Main, main, head, guard)
    }

    /// The kernel's policy check of a packet without IPsec (no `sec_path`: not decapsulated
    /// by this host) in direction `dir` (see [`Check`]):
    /// `__xfrm_policy_check` for in and fwd, `xfrm_lookup` for out (what a forwarded packet
    /// meets in `xfrm_route_forward`). Lock-free and allocation-free.
    ///
    /// ```
    /// use policy_tree::{Action, Check, Direction, Flow, PolicySpec, PolicyType, PolicyWriter, Selector};
    ///
    /// let mut db = PolicyWriter::new();
    /// let any = Selector::new("0.0.0.0/0".parse()?, "0.0.0.0/0".parse()?)?;
    /// db.add(PolicySpec::new(any, Direction::Fwd).ptype(PolicyType::Sub))?;
    /// // A matching sub policy brings the main policy of direction in, as in the kernel.
    /// db.add(PolicySpec::new(any, Direction::In).action(Action::Block))?;
    /// let flow = Flow::new("10.0.0.1".parse().unwrap(), "10.0.1.1".parse().unwrap())?;
    /// let guard = crossbeam_epoch::pin();
    /// assert!(matches!(db.check(&flow, Direction::Fwd, &guard), Check::Drop(p) if p.dir == Direction::In));
    /// # Ok::<(), policy_tree::Error>(())
    /// ```
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn check<'g>(&self, flow: &Flow, dir: Direction, guard: &'g Guard) -> Check<'g> {
        check_guard(guard);
        let default_block = self.default_block[dir.slot()].load(Ordering::Relaxed);
        check(
            dir,
            default_block,
            self.lookup_pinned(flow, dir, guard),
            |d| self.lookup_bytype_pinned(flow, d, PolicyType::Main, guard),
        )
    }

    /// The policy of type `ptype` that decides `flow` in direction `dir` (the kernel's
    /// `xfrm_policy_lookup_bytype`).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_bytype<'g>(
        &self,
        flow: &Flow,
        dir: Direction,
        ptype: PolicyType,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        check_guard(guard);
        self.lookup_bytype_pinned(flow, dir, ptype, guard)
    }

    /// [`lookup_bytype`](Self::lookup_bytype) under a guard the caller already checked.
    fn lookup_bytype_pinned<'g>(
        &self,
        flow: &Flow,
        dir: Direction,
        ptype: PolicyType,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        let root = load(&self.root, guard)?;
        let exact = root.exact[dir.slot()].lookup(flow, Some(ptype), guard)[ptype as usize];
        let head = self.head(dir);
        Self::inexact(
            load(&root.bins, guard),
            flow,
            dir,
            ptype,
            exact,
            head,
            guard,
        )
    }

    /// Weighs the exact chain's answer against the bin's candidate lists.
    #[inline]
    #[allow(clippy::too_many_arguments, reason = "one private hot-path helper")]
    fn inexact<'g>(
        bins: Option<&'g BinTable>,
        flow: &Flow,
        dir: Direction,
        ptype: PolicyType,
        exact: Option<&'g Policy>,
        head: Head,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        let Some(bins) = bins.filter(|b| match ptype {
            PolicyType::Main => !b.map.is_empty(),
            PolicyType::Sub => b.has_sub,
        }) else {
            return exact;
        };
        let mut best = None;
        let key = BinKey {
            dir,
            ptype,
            family: flow.family,
            if_id: flow.if_id,
        };
        if let Some(bin) = bins.map.get(&key).and_then(|slot| load(&slot.bin, guard)) {
            bin.candidates(flow, &mut best);
        }
        resolve(exact, best, head)
    }

    /// The nodes of one inexact bin, or `None` when the bin does not exist.
    pub fn bin_shape(
        &self,
        dir: Direction,
        ptype: PolicyType,
        family: Family,
        if_id: u32,
    ) -> Option<BinShape> {
        let guard = crossbeam_epoch::pin();
        let root = load(&self.root, &guard)?;
        let key = BinKey {
            dir,
            ptype,
            family,
            if_id,
        };
        let slot = load(&root.bins, &guard)?.map.get(&key)?;
        Some(load(&slot.bin, &guard)?.shape(family))
    }

    /// The number of buckets and the longest chain of the exact hash of `dir`.
    pub fn exact_shape(&self, dir: Direction) -> (usize, usize) {
        let guard = crossbeam_epoch::pin();
        load(&self.root, &guard).map_or((0, 0), |root| {
            let table = &root.exact[dir.slot()];
            (table.bucket_count(&guard), table.longest_chain(&guard))
        })
    }

    /// Every policy reachable through the published structure, in no particular order (tests
    /// compare it with the registry).
    #[doc(hidden)]
    pub fn published_policies(&self) -> Vec<Policy> {
        let guard = crossbeam_epoch::pin();
        let mut out = Vec::new();
        let Some(root) = load(&self.root, &guard) else {
            return out;
        };
        for policy in self.dump() {
            if root.hthresh.is_exact(policy.dir, &policy.selector) {
                let table = &root.exact[policy.dir.slot()];
                if let Some(p) = table.find(
                    &policy.selector,
                    policy.ptype,
                    policy.if_id,
                    policy.mark,
                    &guard,
                ) {
                    out.push(*p);
                }
            }
        }
        if let Some(bins) = load(&root.bins, &guard) {
            for slot in bins.map.values() {
                if let Some(bin) = load(&slot.bin, &guard) {
                    out.extend(bin.policies());
                }
            }
        }
        out
    }

    /// Writers only: replaces `remove` by `add` (same identity, so same place) in one step,
    /// keeping the per-direction counts: raised before a new policy is published, lowered
    /// after a removed one is unpublished.
    fn change(&self, w: &mut Writer, remove: Option<&Policy>, add: Option<&Policy>) {
        if let (Some(a), None) = (add, remove) {
            self.per_dir[a.dir.slot()].fetch_add(1, Ordering::Release);
        }
        self.change_published(w, remove, add);
        if let (None, Some(r)) = (add, remove) {
            self.per_dir[r.dir.slot()].fetch_sub(1, Ordering::Release);
        }
    }

    /// [`PolicyDb::change`] without the counts.
    fn change_published(&self, w: &mut Writer, remove: Option<&Policy>, add: Option<&Policy>) {
        let Some(any) = remove.or(add) else {
            return;
        };
        let guard = crossbeam_epoch::pin();
        let Some(root) = load(&self.root, &guard) else {
            return;
        };
        let delta = |count: &mut usize| {
            *count = *count + usize::from(add.is_some()) - usize::from(remove.is_some());
        };
        if root.hthresh.is_exact(any.dir, &any.selector) {
            let table = &root.exact[any.dir.slot()];
            let found = table.change(remove, add, &guard);
            debug_assert!(found, "registry and exact hash disagree");
            delta(&mut w.counts.exact[any.dir.slot()]);
            table.maybe_grow(w.counts.exact[any.dir.slot()], &guard);
            return;
        }
        delta(&mut w.counts.inexact);
        let Some(bins) = load(&root.bins, &guard) else {
            return;
        };
        let key = BinKey::of(any);
        let old = bins
            .map
            .get(&key)
            .and_then(|slot| Some((slot, load(&slot.bin, &guard)?)));
        let base = old.map_or_else(Bin::new, |(_, bin)| bin.clone());
        let without = match remove {
            Some(r) => base.without(r),
            None => Some(base),
        };
        debug_assert!(without.is_some(), "registry and bin disagree");
        let Some(mut bin) = without else {
            return;
        };
        if let Some(a) = add {
            bin = bin.with(*a);
        }
        match old {
            Some((slot, _)) if bin.len() > 0 => publish(&slot.bin, Some(bin), &guard),
            Some(_) => {
                // The bin is empty: prune it. Readers of the old table still see its last
                // version until they unpin.
                let mut map = bins.map.clone();
                map.remove(&key);
                w.counts.bins = map.len();
                publish(&root.bins, Some(BinTable::new(map)), &guard);
            }
            None => {
                let mut map = bins.map.clone();
                map.insert(
                    key,
                    Arc::new(BinSlot {
                        bin: Atomic::new(bin),
                    }),
                );
                w.counts.bins = map.len();
                publish(&root.bins, Some(BinTable::new(map)), &guard);
            }
        }
    }

    /// Writers only: publishes a new root holding the registry's policies under its thresholds.
    fn rebuild(&self, w: &mut Writer) {
        let guard = crossbeam_epoch::pin();
        let hthresh = w.registry.hthresh();
        let (root, counts) = Root::build(hthresh, w.seed, &w.registry.oldest_first(), &guard);
        w.counts = counts;
        publish(&self.root, Some(root), &guard);
    }
}
