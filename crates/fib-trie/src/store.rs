//! Where a table's routes live: a trie plus the writer's interning of route infos, behind a
//! pointer the table can swap. While the rules are the defaults, the local and main tables
//! share one store (the kernel's merged trie, aliases tagged with their table id); the first
//! custom rule gives each its own (`fib_unmerge`).

#![allow(
    clippy::mutable_key_type,
    reason = "a RouteInfo's only interior mutability is its nexthop object's current group, \
              which neither its Hash (the object's id) nor its Eq (the object's address) reads"
)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::answers::{Answer, AnswerKey, Answers, RouteTag};
use crate::fast::{FastLpm, PrefixSource};
use crate::key::TrieKey;
use crate::node::Alias;
use crate::route::{FibAlias, Resolved, RouteInfo, Scope};
use crate::table::{FibResult, Flow, accept, accept_static, lookup_raw};
use crate::trie::LcTrie;

/// One trie of routes (of one table, or of local and main while merged), its infos, and the
/// fast lookup structure derived from it.
pub(crate) struct Store<K: TrieKey> {
    pub(crate) trie: LcTrie<K, FibAlias<K>>,
    /// The trie's answers for a flow that only its destination distinguishes (tos 0,
    /// universe scope, any output interface), kept in step by every change.
    fast: FastLpm<K>,
    answers: Answers<K>,
    /// The fast structure follows the trie (false once its answers overflowed).
    fast_ok: AtomicBool,
    /// Routes with a tos selector: while there are none, a flow's tos changes no answer.
    tos_routes: AtomicUsize,
    /// Shared by two tables (merged local and main): lookups of one table filter by table.
    pub(crate) shared: bool,
    infos: Mutex<Infos<K>>,
    /// Prefixes changed one by one since the store was built (its wear: see
    /// [`FibWriter::compact`](crate::FibWriter::compact)).
    changes: AtomicUsize,
    /// Routes the trie held when it was last loaded at once (built in bulk).
    built: AtomicUsize,
}

impl<K: TrieKey> Store<K> {
    pub(crate) fn new(shared: bool) -> Self {
        let mut store = Self::with_trie(LcTrie::new());
        store.shared = shared;
        store
    }

    /// A store over `trie`, interning the infos its routes already hold, with the fast
    /// structure built from it.
    pub(crate) fn with_trie(trie: LcTrie<K, FibAlias<K>>) -> Self {
        let guard = &epoch::pin();
        let mut set = InfoSet::default();
        trie.for_each(guard, |_, aliases| {
            set.extend(aliases.iter().map(|a| Arc::clone(&a.value.info)));
        });
        let store = Store {
            trie,
            fast: FastLpm::new(),
            answers: Answers::new(),
            fast_ok: AtomicBool::new(true),
            tos_routes: AtomicUsize::new(0),
            shared: false,
            infos: Mutex::new(Infos {
                set,
                dying: Vec::new(),
            }),
            changes: AtomicUsize::new(0),
            built: AtomicUsize::new(0),
        };
        store.reindex();
        store
    }

    /// Recounts and rebuilds what is derived from the trie (tos routes, answers, the fast
    /// structure) after the trie was loaded at once. Writer only; the answers must be unused.
    pub(crate) fn reindex(&self) {
        let guard = &epoch::pin();
        let mut tos_routes = 0;
        let mut full = false;
        self.trie.for_each(guard, |_, aliases| {
            tos_routes += aliases.iter().filter(|a| a.value.tos != 0).count();
            for (slen, (alias, nh_sel)) in default_answers(aliases) {
                full |= self
                    .answers
                    .acquire(alias, K::BITS - slen, nh_sel, guard)
                    .is_none();
            }
        });
        self.tos_routes.store(tos_routes, Ordering::Release);
        self.rebuild_fast(full);
        // The trie was just loaded at once: as packed as a compaction would make it.
        self.changes.store(0, Ordering::Relaxed);
        self.built.store(self.trie.alias_count(), Ordering::Relaxed);
    }

    /// Builds the fast structure anew from the trie (turning it off if `broken`).
    fn rebuild_fast(&self, broken: bool) {
        let guard = &epoch::pin();
        let mut source = self.source(guard);
        if !broken {
            self.fast.rebuild(&mut source);
        }
        self.fast_ok
            .store(!broken && !source.missing, Ordering::Release);
    }

    /// Prefixes changed one by one since the store was built.
    pub(crate) fn changes(&self) -> usize {
        self.changes.load(Ordering::Relaxed)
    }

    /// Routes the trie held when it was last built in bulk.
    pub(crate) fn built(&self) -> usize {
        self.built.load(Ordering::Relaxed)
    }

    /// The store's trie as the fast structure's source.
    fn source<'a>(&'a self, guard: &'a Guard) -> StoreSource<'a, K> {
        StoreSource {
            trie: &self.trie,
            answers: &self.answers,
            guard,
            missing: false,
        }
    }

    /// The writer's lock on this store (its route infos).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Infos<K>> {
        self.infos.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a route with a tos selector (before it is linked) or its removal (after).
    pub(crate) fn count_tos_route(&self, added: bool) {
        if added {
            self.tos_routes.fetch_add(1, Ordering::AcqRel);
        } else {
            self.tos_routes.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The result a default flow gets from the aliases of `key/(BITS - slen)` now. Writer only.
    pub(crate) fn answer_at(
        &self,
        key: K,
        slen: u8,
        guard: &Guard,
    ) -> Option<(FibAlias<K>, usize)> {
        let aliases = self.trie.get(key, guard)?;
        default_answers(aliases)
            .find(|(s, _)| *s == slen)
            .map(|(_, (alias, nh_sel))| (alias.clone(), nh_sel))
    }

    /// Brings the fast structure in step after the routes of `key/(BITS - slen)` changed from
    /// `before` (what [`answer_at`](Self::answer_at) said before the change). Writer only.
    pub(crate) fn changed(
        &self,
        key: K,
        slen: u8,
        before: Option<(FibAlias<K>, usize)>,
        guard: &Guard,
    ) {
        self.changes.fetch_add(1, Ordering::Relaxed);
        let after = self.answer_at(key, slen, guard);
        let same = match (&before, &after) {
            (Some((a, i)), Some((b, j))) => AnswerKey::of(a, 0, *i) == AnswerKey::of(b, 0, *j),
            (None, None) => true,
            _ => false,
        };
        if same || !self.fast_ok.load(Ordering::Acquire) {
            return;
        }
        let plen = K::BITS - slen;
        if let Some((alias, nh_sel)) = &after {
            if self.answers.acquire(alias, plen, *nh_sel, guard).is_none() {
                // No answer can be given to this result: lookups walk the trie from now on.
                self.fast_ok.store(false, Ordering::Release);
                return;
            }
        }
        let mut source = self.source(guard);
        self.fast.update(key, plen, &mut source);
        if source.missing {
            self.fast_ok.store(false, Ordering::Release);
        }
        if let Some((alias, nh_sel)) = &before {
            self.answers.release(alias, plen, *nh_sel, guard);
        }
    }

    /// The route `flow` takes in this store (only routes of `table` when given): through the
    /// fast structure when the flow's answer depends on its destination alone, else by the
    /// trie's walk. Both give the same answer.
    #[inline]
    pub(crate) fn lookup<'g>(
        &'g self,
        table: Option<u32>,
        flow: &Flow<K>,
        guard: &'g Guard,
        fast: bool,
    ) -> Option<FibResult<'g, K>> {
        if fast
            && table.is_none()
            && self.fast_eligible(flow)
            && let Some(found) =
                self.fast_result(self.fast.lookup_pinned(flow.dst, guard), flow, guard)
        {
            return found;
        }
        lookup_raw(&self.trie, table, flow, guard)
    }

    /// Whether the fast structure can answer `flow` (of the whole store, not one table of a
    /// shared one): its answer then depends on the destination alone.
    #[inline(always)]
    pub(crate) fn fast_eligible(&self, flow: &Flow<K>) -> bool {
        flow.oif == 0
            && flow.scope == Scope::UNIVERSE
            && (flow.tos == 0 || self.tos_routes.load(Ordering::Acquire) == 0)
            && self.fast_ok.load(Ordering::Acquire)
    }

    /// The answer `id` stands for, if it is live: for [`plain_result`](Self::plain_result),
    /// after the caller read the answer's tag.
    #[inline(always)]
    pub(crate) fn fast_answer<'g>(&'g self, id: u32, guard: &'g Guard) -> Option<&'g Answer<K>> {
        self.answers.get(id, guard)
    }

    /// The tag of fast-structure answer `id` (its [`Answer::tag`]) without reading the
    /// answer itself (see [`Answers::tag`]).
    #[inline(always)]
    pub(crate) fn fast_tag(&self, id: u32, guard: &Guard) -> Option<RouteTag> {
        self.answers.tag(id, guard)
    }

    /// The result of a fast-structure answer `a` for an eligible `flow` when its route has
    /// no nexthop object (the common case: [`fast_result`](Self::fast_result) without the
    /// object's group to judge); `None` for every other answer, which `fast_result` decides.
    #[inline(always)]
    pub(crate) fn plain_result<'g>(a: &'g Answer<K>, flow: &Flow<K>) -> Option<FibResult<'g, K>> {
        let alias = &a.alias;
        if alias.info.nh_object.is_some() {
            return None;
        }
        // `alias.resolve(guard)` of a route without a nexthop object.
        Some(FibResult {
            prefix: flow.dst & K::prefix_mask(a.plen),
            plen: a.plen,
            alias,
            nh_sel: a.nh_sel,
            path: Resolved {
                route_type: alias.route_type,
                nexthops: &alias.info.nexthops,
                buckets: &[],
            },
        })
    }

    /// The store-wide half of [`fast_eligible`](Self::fast_eligible) as it is now, for a
    /// batch of flows: [`FastGate::admits`] then tests only the flow's own fields.
    #[inline(always)]
    pub(crate) fn fast_gate(&self) -> FastGate {
        let open = self.fast_ok.load(Ordering::Acquire);
        FastGate {
            open,
            any_tos: open && self.tos_routes.load(Ordering::Acquire) == 0,
        }
    }

    /// The fast structure's answers for `dsts` into `ids`, raw: `u32::MAX` for none (see
    /// [`FastLpm::lookup_batch_raw`]).
    #[inline]
    pub(crate) fn fast_batch(&self, dsts: &[K], ids: &mut [u32], guard: &Guard) {
        self.fast.lookup_batch_raw(dsts, ids, guard);
    }

    /// The result of a fast-structure answer `id` for an eligible `flow`: `Some(found)`, or
    /// `None` when the trie's walk must decide (a route through a nexthop object whose group
    /// refuses the flow, or an answer retired meanwhile).
    #[inline(always)]
    pub(crate) fn fast_result<'g>(
        &'g self,
        id: Option<u32>,
        flow: &Flow<K>,
        guard: &'g Guard,
    ) -> Option<Option<FibResult<'g, K>>> {
        let Some(id) = id else {
            return Some(None);
        };
        let a = self.answers.get(id, guard)?;
        let alias = &a.alias;
        let (mut nh_sel, mut path) = (a.nh_sel, None);
        // A route through a nexthop object was taken whatever its object's group
        // (`accept_static`): judge the group now; if it refuses, the walk decides.
        if alias.info.nh_object.is_some() && !accept(alias, flow, &mut nh_sel, &mut path, guard) {
            return None;
        }
        Some(Some(FibResult {
            prefix: flow.dst & K::prefix_mask(a.plen),
            plen: a.plen,
            alias,
            nh_sel,
            path: path.unwrap_or_else(|| alias.resolve(guard)),
        }))
    }

    /// The fast structure's state and size.
    pub(crate) fn fast_stats(&self) -> FastStats {
        FastStats {
            enabled: self.fast_ok.load(Ordering::Acquire),
            first_level_bits: self.fast.first_level_bits(),
            structure_bytes: self.fast.bytes(),
            answers: self.answers.len(),
            answer_bytes: self.answers.bytes(),
        }
    }
}

/// [`Store::fast_eligible`] with the store's state read once ([`Store::fast_gate`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastGate {
    /// The fast structure follows the trie.
    open: bool,
    /// No route has a tos selector: a flow's tos changes no answer.
    any_tos: bool,
}

impl FastGate {
    /// A gate no flow passes.
    pub(crate) const CLOSED: FastGate = FastGate {
        open: false,
        any_tos: false,
    };

    /// Whether the fast structure can answer `flow`, as [`Store::fast_eligible`] said when
    /// the gate was taken.
    #[inline(always)]
    pub(crate) fn admits<K: TrieKey>(&self, flow: &Flow<K>) -> bool {
        self.open
            && flow.oif == 0
            && flow.scope == Scope::UNIVERSE
            && (flow.tos == 0 || self.any_tos)
    }
}

/// The state and size of a table's fast lookup structure ([`FibTable::fast_stats`](crate::FibTable::fast_stats)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastStats {
    /// Lookups that depend on the destination alone use the structure (false only if its
    /// answers overflowed: lookups then walk the LC-trie).
    pub enabled: bool,
    /// The width of its first level (8 bits while small).
    pub first_level_bits: u8,
    /// Bytes of its first level and nodes.
    pub structure_bytes: usize,
    /// Distinct results (route, prefix length, next hop) its answers stand for.
    pub answers: usize,
    /// Bytes of the answers' index and results.
    pub answer_bytes: usize,
}

/// For each prefix length of a leaf's aliases (as suffix length, shortest suffix first), the
/// first alias a default flow (tos 0, universe scope, any interface) accepts, with its
/// selected next hop.
pub(crate) fn default_answers<K: TrieKey>(
    aliases: &[Alias<FibAlias<K>>],
) -> impl DoubleEndedIterator<Item = (u8, (&FibAlias<K>, usize))> {
    let flow = Flow::to(K::ZERO);
    aliases
        .chunk_by(|a, b| a.slen == b.slen)
        .filter_map(move |group| {
            group.iter().find_map(|a| {
                let mut nh_sel = 0;
                accept_static(&a.value, &flow, &mut nh_sel).then_some((a.slen, (&a.value, nh_sel)))
            })
        })
}

/// The store's trie as the fast structure's source, answers interned by the store.
struct StoreSource<'a, K: TrieKey> {
    trie: &'a LcTrie<K, FibAlias<K>>,
    answers: &'a Answers<K>,
    guard: &'a Guard,
    /// A prefix's result had no answer (an invariant broken): the structure must not be used.
    missing: bool,
}

impl<K: TrieKey> PrefixSource<K> for StoreSource<'_, K> {
    fn covering(&mut self, key: K, plen: u8) -> Option<u32> {
        let flow = Flow::to(K::ZERO);
        let mut nh_sel = 0;
        let (_, alias) = self.trie.search_alias(key, self.guard, |a| {
            K::BITS - a.slen <= plen && accept_static(&a.value, &flow, &mut nh_sel)
        })?;
        let id = self
            .answers
            .id_of(&AnswerKey::of(&alias.value, K::BITS - alias.slen, nh_sel));
        self.missing |= id.is_none();
        id
    }

    fn within(&mut self, key: K, plen: u8, out: &mut Vec<(K, u8, u32)>) {
        let (answers, missing) = (self.answers, &mut self.missing);
        self.trie
            .for_each_within(key, plen, self.guard, |leaf, aliases| {
                for (slen, (alias, nh_sel)) in default_answers(aliases).rev() {
                    let len = K::BITS - slen;
                    if len <= plen {
                        continue;
                    }
                    match answers.id_of(&AnswerKey::of(alias, len, nh_sel)) {
                        Some(id) => out.push((leaf, len, id)),
                        None => *missing = true,
                    }
                }
            });
    }

    fn prefix_count(&self) -> usize {
        self.trie.alias_count()
    }
}

/// Interned infos by value, with a fast hasher (a bulk load interns one per route; the
/// writer's table needs no protection from crafted collisions beyond foldhash's seeding).
type InfoSet<K> = HashSet<Arc<RouteInfo<K>>, foldhash::fast::RandomState>;

/// The writer's interning of [`RouteInfo`]s (the kernel's `fib_info_hash`).
pub(crate) struct Infos<K> {
    /// Every info in use, once.
    set: InfoSet<K>,
    /// Infos of deleted routes: dropped from `set` once nothing but `set` and this list holds
    /// them (retired leaves keep a reference until the epoch frees them).
    dying: Vec<Arc<RouteInfo<K>>>,
}

impl<K: TrieKey> Infos<K> {
    pub(crate) fn intern(&mut self, info: &RouteInfo<K>) -> Arc<RouteInfo<K>> {
        if let Some(shared) = self.set.get(info) {
            return Arc::clone(shared);
        }
        let shared = Arc::new(info.clone());
        self.set.insert(Arc::clone(&shared));
        shared
    }

    /// Forgets `info` if only the set and `holders` other references hold it.
    pub(crate) fn release(&mut self, info: &Arc<RouteInfo<K>>, holders: usize) {
        if Arc::strong_count(info) <= 1 + holders {
            self.set.remove(info);
        }
    }

    /// Remembers the info of a deleted route, to forget once unused. An info shared by many
    /// routes (one next hop for a whole BGP feed) is remembered once: pushing it per delete
    /// made `dying`, and the sweep every change walks, grow with every delete.
    pub(crate) fn retire(&mut self, info: Arc<RouteInfo<K>>) {
        if !self.dying.iter().any(|d| Arc::ptr_eq(d, &info)) {
            self.dying.push(info);
        }
    }

    /// How many infos wait to be forgotten.
    #[cfg(test)]
    pub(crate) fn dying_len(&self) -> usize {
        self.dying.len()
    }

    pub(crate) fn sweep(&mut self) {
        let Infos { set, dying } = self;
        dying.retain(|i| {
            let dead = Arc::strong_count(i) <= 2;
            if dead {
                set.remove(i);
            }
            !dead
        });
    }
}

/// A table's pointer to its store: read by lookups under the epoch, swapped by the unmerge.
pub(crate) struct StoreCell<K: TrieKey> {
    ptr: Atomic<Arc<Store<K>>>,
}

impl<K: TrieKey> StoreCell<K> {
    pub(crate) fn new(store: Arc<Store<K>>) -> Self {
        StoreCell {
            ptr: Atomic::new(store),
        }
    }

    /// The store, kept alive by `guard`.
    #[inline(always)]
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> &'g Arc<Store<K>> {
        let ptr = self.ptr.load(Ordering::Acquire, guard);
        // SAFETY: the cell is never null (set in `new`, only replaced by `swap` with another
        // store), and a replaced pointer is retired with `defer_destroy`, so it lives as long as
        // `guard` is pinned.
        unsafe { ptr.deref() }
    }

    /// Points the cell at `store` and retires the old pointer (its store is freed when the last
    /// `Arc` goes, after every reader that loaded it has unpinned). Writer only.
    pub(crate) fn swap(&self, store: Arc<Store<K>>, guard: &Guard) {
        let old = self.ptr.swap(Owned::new(store), Ordering::AcqRel, guard);
        // SAFETY: `old` was just unlinked by the swap and is retired once; readers that loaded
        // it are pinned, so it is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
    }
}

impl<K: TrieKey> Drop for StoreCell<K> {
    fn drop(&mut self) {
        // SAFETY: the table owning the cell is being dropped, so (as for the trie a table owns)
        // no lookup through it is running; the pointer is freed once, and the store itself
        // only when its last `Arc` goes.
        unsafe {
            let guard = epoch::unprotected();
            drop(self.ptr.load(Ordering::Relaxed, guard).into_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::NextHop;

    #[test]
    fn a_shared_info_is_retired_once() {
        let mut infos = Infos::<u32> {
            set: InfoSet::default(),
            dying: Vec::new(),
        };
        let info = RouteInfo {
            nexthops: vec![NextHop::new(Some(0x0a00_0001), 2)],
            ..RouteInfo::default()
        };
        let shared = infos.intern(&info);
        let holders: Vec<_> = (0..100).map(|_| infos.intern(&info)).collect();
        assert!(holders.iter().all(|h| Arc::ptr_eq(h, &shared)));
        for h in holders {
            infos.sweep();
            infos.retire(h);
        }
        assert_eq!(infos.dying_len(), 1);
        infos.sweep();
        assert_eq!(infos.dying_len(), 1, "still used by `shared`");
        drop(shared);
        infos.sweep();
        assert_eq!((infos.dying_len(), infos.set.len()), (0, 0));
    }
}
