//! What the fast structure's `u32` answers stand for in a routing table: interned results
//! (the route a lookup takes, its prefix length and its selected next hop), shared by every
//! prefix with the same result, so a table of a million routes through a few next hops has a
//! few dozen answers and their table stays in cache.
//!
//! Readers map an answer to its result through a two-level array of epoch-protected pointers,
//! each beside its answer's [`RouteTag`] (so that a reader that remembers decisions by tag, as
//! the dataplane's ingress memo does, reads the tag without the answer's own line: in-process
//! A/B of the dataplane under load, IPv6 8k flows −5.9%, IPv4 −4.5%, against reading each
//! answer for its tag); the writer interns results, counts the prefixes using each, and
//! retires an answer (its index is reused) once no prefix uses it and every reader pinned
//! before has unpinned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};

use crate::key::TrieKey;
use crate::route::{FibAlias, RouteType};

/// Answers per chunk (a chunk is allocated when its first answer is).
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Chunks: at most `CHUNKS * CHUNK` (4 Mi) distinct results per table.
const CHUNKS: usize = 4096;

/// A result a lookup through the fast structure returns.
#[derive(Debug)]
pub(crate) struct Answer<K> {
    /// The route (a copy of the alias the LC-trie holds).
    pub(crate) alias: FibAlias<K>,
    /// The matched prefix length.
    pub(crate) plen: u8,
    /// The first usable next hop.
    pub(crate) nh_sel: usize,
    /// The route's tag ([`RouteTag`]) when it is a unicast route without a nexthop object.
    pub(crate) tag: Option<RouteTag>,
}

/// A unicast route's identity for remembering what it decides: equal for every answer of
/// one interned route information ([`RouteInfo`](crate::RouteInfo), the next hops, metrics
/// and the rest shared by the prefixes of one route), whatever the prefix, and never given
/// to another route information while the process lives (a counter, not an address or an
/// index that is reused), so a decision remembered under a tag stays the decision of the
/// route information it came from.
///
/// [`FlowBatch::known`](crate::FlowBatch::known) hands it out for the answers of unicast
/// routes without a nexthop object; such a route's information never changes (a change of
/// the route is a new information, with a new tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RouteTag(std::num::NonZeroU64);

/// The last [`RouteTag`] handed out, by any table of any family: a tag names one route
/// information of one store, so two stores (IPv4 and IPv6, or a store and its compacted
/// successor) never hand out the same tag.
static LAST_TAG: AtomicU64 = AtomicU64::new(0);

impl RouteTag {
    /// A tag never handed out before.
    fn fresh() -> Self {
        let n = LAST_TAG.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // 2^64 tags are never handed out (one per new route information).
        RouteTag(std::num::NonZeroU64::new(n).unwrap_or(std::num::NonZeroU64::MAX))
    }

    /// The tag as a number (never 0).
    #[inline(always)]
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

/// A result's identity: equal routes share their interned info, so its address stands for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AnswerKey {
    info: usize,
    table: u32,
    tos: u8,
    route_type: RouteType,
    plen: u8,
    nh_sel: usize,
}

impl AnswerKey {
    pub(crate) fn of<K>(alias: &FibAlias<K>, plen: u8, nh_sel: usize) -> Self {
        AnswerKey {
            info: Arc::as_ptr(&alias.info).addr(),
            table: alias.table,
            tos: alias.tos,
            route_type: alias.route_type,
            plen,
            nh_sel,
        }
    }
}

/// One answer's place: the answer and, beside it, its tag ([`Answer::tag`] as
/// [`RouteTag::get`], 0 for none), so that a reader that only needs the tag (a batch that
/// remembers decisions by tag, [`FlowBatch::known`](crate::FlowBatch::known)) reads it from
/// the same line as the answer's address, without the answer's own line.
struct Place<K> {
    answer: Atomic<Answer<K>>,
    tag: AtomicU64,
}

struct Chunk<K>([Place<K>; CHUNK]);

/// The answers of one store.
pub(crate) struct Answers<K> {
    chunks: Box<[Atomic<Chunk<K>>]>,
    writer: Mutex<Interning>,
    /// Indices whose answers were retired, filled once their readers are gone.
    free: Arc<Mutex<Vec<u32>>>,
}

/// The writer's side: each live answer's index and how many prefixes use it.
#[derive(Default)]
struct Interning {
    ids: HashMap<AnswerKey, u32, foldhash::fast::RandomState>,
    refs: HashMap<u32, (AnswerKey, usize), foldhash::fast::RandomState>,
    next: u32,
    /// Per route information (its address) of the live answers: its tag and how many live
    /// answers hold it (the answers hold the information, so its address is not reused
    /// while it is here).
    tags: HashMap<usize, (RouteTag, usize), foldhash::fast::RandomState>,
}

impl<K: TrieKey> Answers<K> {
    pub(crate) fn new() -> Self {
        Answers {
            chunks: (0..CHUNKS).map(|_| Atomic::null()).collect(),
            writer: Mutex::new(Interning::default()),
            free: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The result of answer `id`, if it is live.
    #[inline(always)]
    pub(crate) fn get<'g>(&self, id: u32, guard: &'g Guard) -> Option<&'g Answer<K>> {
        let chunk = self.chunks.get((id >> CHUNK_BITS) as usize)?;
        // SAFETY: chunks are freed only when `self` is dropped, which cannot happen while a
        // reader borrows it; answers are unlinked before being retired with `defer_destroy`,
        // so one loaded under `guard` lives while it is pinned.
        unsafe {
            let chunk = chunk.load(Ordering::Acquire, guard).as_ref()?;
            chunk.0[id as usize & (CHUNK - 1)]
                .answer
                .load(Ordering::Acquire, guard)
                .as_ref()
        }
    }

    /// The tag of answer `id` ([`Answer::tag`]), if it has one and is live: what
    /// [`get`](Self::get)`(id)?.tag` gives, read beside the answer's address (one load less).
    /// Under the same guard, an answer read afterwards with `get` is the same one (an index
    /// is reused only once the readers that could hold it are gone) or, if it was retired
    /// meanwhile, none.
    #[inline(always)]
    pub(crate) fn tag(&self, id: u32, guard: &Guard) -> Option<RouteTag> {
        let chunk = self.chunks.get((id >> CHUNK_BITS) as usize)?;
        // SAFETY: as in `get`: chunks live as long as `self`.
        let chunk = unsafe { chunk.load(Ordering::Acquire, guard).as_ref()? };
        let tag = chunk.0[id as usize & (CHUNK - 1)]
            .tag
            .load(Ordering::Acquire);
        std::num::NonZeroU64::new(tag).map(RouteTag)
    }

    /// The answer of a live result.
    pub(crate) fn id_of(&self, key: &AnswerKey) -> Option<u32> {
        self.lock().ids.get(key).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Interning> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One more prefix uses this result: its answer, interned if new; `None` when the table
    /// of answers is full.
    pub(crate) fn acquire(
        &self,
        alias: &FibAlias<K>,
        plen: u8,
        nh_sel: usize,
        guard: &Guard,
    ) -> Option<u32> {
        let key = AnswerKey::of(alias, plen, nh_sel);
        let mut w = self.lock();
        if let Some(&id) = w.ids.get(&key) {
            if let Some(r) = w.refs.get_mut(&id) {
                r.1 += 1;
            }
            return Some(id);
        }
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let id = match reused {
            Some(id) => id,
            None if (w.next as usize) < CHUNKS * CHUNK => {
                w.next += 1;
                w.next - 1
            }
            None => return None,
        };
        let chunk = &self.chunks[(id >> CHUNK_BITS) as usize];
        let mut loaded = chunk.load(Ordering::Acquire, guard);
        if loaded.is_null() {
            let fresh = Owned::new(Chunk(std::array::from_fn(|_| Place {
                answer: Atomic::null(),
                tag: AtomicU64::new(0),
            })));
            loaded = fresh.into_shared(guard);
            chunk.store(loaded, Ordering::Release);
        }
        let info = key.info;
        let tag = w
            .tags
            .entry(info)
            .and_modify(|t| t.1 += 1)
            .or_insert_with(|| (RouteTag::fresh(), 1))
            .0;
        let tagged = alias.route_type == RouteType::Unicast && alias.info.nh_object.is_none();
        let answer = Owned::new(Answer {
            alias: alias.clone(),
            plen,
            nh_sel,
            tag: tagged.then_some(tag),
        });
        // SAFETY: the chunk was just loaded or published, and chunks live as long as `self`.
        let slot = unsafe { &loaded.deref().0[id as usize & (CHUNK - 1)] };
        // The tag first: a reader that finds the answer finds its tag (and one that reads the
        // tag got the index from a structure published after both).
        let tag = if tagged { tag.get() } else { 0 };
        slot.tag.store(tag, Ordering::Release);
        slot.answer.store(answer, Ordering::Release);
        w.ids.insert(key, id);
        w.refs.insert(id, (key, 1));
        Some(id)
    }

    /// One prefix fewer uses the result: retires its answer when it was the last.
    pub(crate) fn release(&self, alias: &FibAlias<K>, plen: u8, nh_sel: usize, guard: &Guard) {
        let key = AnswerKey::of(alias, plen, nh_sel);
        let mut w = self.lock();
        let Some(&id) = w.ids.get(&key) else {
            return;
        };
        let Some(r) = w.refs.get_mut(&id) else {
            return;
        };
        r.1 -= 1;
        if r.1 > 0 {
            return;
        }
        w.refs.remove(&id);
        w.ids.remove(&key);
        if let Some(t) = w.tags.get_mut(&key.info) {
            t.1 -= 1;
            if t.1 == 0 {
                w.tags.remove(&key.info);
            }
        }
        drop(w);
        let chunk = self.chunks[(id >> CHUNK_BITS) as usize].load(Ordering::Acquire, guard);
        // SAFETY: a live answer's chunk exists and lives as long as `self`.
        let slot = unsafe { &chunk.deref().0[id as usize & (CHUNK - 1)] };
        slot.tag.store(0, Ordering::Release);
        let old = slot.answer.swap(Shared::null(), Ordering::AcqRel, guard);
        // SAFETY: the answer was just unlinked and is retired once; readers that loaded it are
        // pinned, so it is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
        let free = Arc::clone(&self.free);
        // The index is reused only after the readers that could still hold it are gone.
        guard.defer(move || free.lock().unwrap_or_else(|p| p.into_inner()).push(id));
    }

    /// How many answers are live.
    pub(crate) fn len(&self) -> usize {
        self.lock().refs.len()
    }

    /// The bytes of the answers' index (chunks allocated so far, not the answers' routes).
    pub(crate) fn bytes(&self) -> usize {
        let guard = &crossbeam_epoch::pin();
        let chunks = self
            .chunks
            .iter()
            .filter(|c| !c.load(Ordering::Relaxed, guard).is_null())
            .count();
        self.chunks.len() * size_of::<Atomic<Chunk<K>>>()
            + chunks * size_of::<Chunk<K>>()
            + self.len() * size_of::<Answer<K>>()
    }
}

impl<K> Drop for Answers<K> {
    fn drop(&mut self) {
        // Every id ever handed out is below `next` (fresh ids count up to it, reused ones
        // were fresh once): chunks and slots past it were never filled, so they are not
        // visited (most tables use one chunk of 4,096; a fuzz input drops dozens of tables).
        let next = self
            .writer
            .get_mut()
            .map_or_else(|p| p.into_inner().next, |w| w.next) as usize;
        // SAFETY: `&mut self`: no reader borrows the answers any more; each chunk and answer
        // still linked is freed once (retired ones were unlinked and are freed by the epoch).
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            for (i, chunk) in self.chunks.iter().take(next.div_ceil(CHUNK)).enumerate() {
                let c = chunk.load(Ordering::Relaxed, guard);
                if c.is_null() {
                    continue;
                }
                for a in c.deref().0.iter().take(next - i * CHUNK) {
                    let a = a.answer.load(Ordering::Relaxed, guard);
                    if !a.is_null() {
                        drop(a.into_owned());
                    }
                }
                drop(c.into_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NextHop, Route};

    /// Dropping the answers frees every one still linked, in the first chunk and past it
    /// (the drop visits only the chunks and slots below the highest id handed out).
    #[test]
    fn drop_frees_every_answer_of_every_chunk() {
        let r = Route::<u32>::unicast(0x0a00_0000, 8, 254, vec![NextHop::new(Some(1), 2)]);
        let alias = FibAlias {
            table: 254,
            tos: 0,
            route_type: r.route_type,
            info: r.info.into(),
        };
        let answers = Answers::<u32>::new();
        let guard = crossbeam_epoch::pin();
        let n = if cfg!(miri) { CHUNK + 3 } else { 3 * CHUNK + 5 };
        for sel in 0..n {
            assert_eq!(answers.acquire(&alias, 8, sel, &guard), Some(sel as u32));
        }
        drop(guard);
        assert_eq!(Arc::strong_count(&alias.info), n + 1);
        drop(answers);
        assert_eq!(Arc::strong_count(&alias.info), 1);
    }

    /// The tag read beside an answer's address is the answer's own tag while it is live (none
    /// for a route that has no tag), none once it is retired, and the new answer's when the
    /// index is reused.
    #[test]
    fn the_tag_beside_the_answer_is_the_answers() {
        let alias_of = |r: Route<u32>| FibAlias {
            table: 254,
            tos: 0,
            route_type: r.route_type,
            info: r.info.into(),
        };
        let a = alias_of(Route::unicast(
            0x0a00_0000,
            8,
            254,
            vec![NextHop::new(Some(1), 2)],
        ));
        let b = alias_of(Route::unicast(
            0x0b00_0000,
            8,
            254,
            vec![NextHop::new(Some(3), 2)],
        ));
        let mut c = alias_of(Route::unicast(
            0x0c00_0000,
            8,
            254,
            vec![NextHop::new(Some(1), 2)],
        ));
        c.route_type = RouteType::Blackhole;
        let answers = Answers::<u32>::new();
        let guard = crossbeam_epoch::pin();
        let ia = answers.acquire(&a, 8, 0, &guard).unwrap();
        let ia16 = answers.acquire(&a, 16, 0, &guard).unwrap();
        let ic = answers.acquire(&c, 8, 0, &guard).unwrap();
        for id in [ia, ia16, ic] {
            assert_eq!(
                answers.tag(id, &guard),
                answers.get(id, &guard).unwrap().tag
            );
        }
        assert!(answers.tag(ia, &guard).is_some());
        assert_eq!(answers.tag(ia, &guard), answers.tag(ia16, &guard));
        assert_eq!(answers.tag(ic, &guard), None);
        assert_eq!(answers.tag(u32::MAX, &guard), None, "no chunk");
        answers.release(&a, 16, 0, &guard);
        assert_eq!(answers.tag(ia16, &guard), None);
        assert!(answers.get(ia16, &guard).is_none());
        drop(guard);
        // The index comes back (once the epoch moves on) with the new answer's tag.
        let mut reused = None;
        for _ in 0..64 {
            let guard = crossbeam_epoch::pin();
            guard.flush();
            if answers.free.lock().unwrap().contains(&ia16) {
                let id = answers.acquire(&b, 8, 0, &guard).unwrap();
                assert_eq!(id, ia16);
                reused = Some(id);
                break;
            }
        }
        let guard = crossbeam_epoch::pin();
        if let Some(id) = reused {
            let tag = answers.tag(id, &guard);
            assert!(tag.is_some() && tag != answers.tag(ia, &guard));
            assert_eq!(tag, answers.get(id, &guard).unwrap().tag);
        }
    }
}

#[cfg(test)]
mod tag_tests {
    use crate::{Fib, FibResult, FibWriter, Flow, FlowBatch, InsertFlags, LookupError, NextHop};
    use crate::{Route, RouteSelector, RouteTag, RouteType};

    /// Lookups to `dsts`: the tags `known` was offered, and which lookups were answered.
    struct Tags<'a, K> {
        dsts: &'a [K],
        /// Tags `known` says it knows.
        knows: &'a [RouteTag],
        offered: Vec<(usize, RouteTag)>,
        answered: Vec<usize>,
    }

    impl<'g, K: crate::TrieKey> FlowBatch<'g, K> for Tags<'_, K> {
        fn count(&self) -> usize {
            self.dsts.len()
        }
        fn flow(&self, k: usize) -> Flow<K> {
            Flow::to(self.dsts[k])
        }
        fn answer(&mut self, k: usize, _: &Flow<K>, _: Result<FibResult<'g, K>, LookupError>) {
            self.answered.push(k);
        }
        fn known(&mut self, k: usize, tag: RouteTag) -> bool {
            self.offered.push((k, tag));
            self.knows.contains(&tag)
        }
    }

    fn run<K: crate::TrieKey>(
        fib: &Fib<K>,
        dsts: &[K],
        knows: &[RouteTag],
    ) -> (Vec<(usize, RouteTag)>, Vec<usize>) {
        let mut batch = Tags {
            dsts,
            knows,
            offered: Vec::new(),
            answered: Vec::new(),
        };
        fib.lookup_batch_by(&mut batch, &crossbeam_epoch::pin());
        (batch.offered, batch.answered)
    }

    /// One tag per route information whatever the prefix; none for other route types; a
    /// known tag skips the answer; a replaced route and the other family's routes get tags
    /// of their own.
    #[test]
    fn tags_name_route_informations_and_are_never_reused() {
        let mut fib = FibWriter::<u32>::new();
        let via = |gw| vec![NextHop::new(Some(gw), 2)];
        let a = Route::unicast(0x0a00_0000, 8, 254, via(1));
        let a24 = Route::unicast(0x0b01_0200, 24, 254, via(1));
        let b = Route::unicast(0x0c00_0000, 8, 254, via(2));
        for r in [&a, &a24, &b] {
            fib.insert(r, InsertFlags::ADD).unwrap();
        }
        let mut local = Route::unicast(0x0d00_0000, 8, 255, vec![NextHop::new(None, 1)]);
        local.route_type = RouteType::Local;
        local.info.scope = crate::Scope::HOST;
        fib.insert(&local, InsertFlags::ADD).unwrap();
        let dsts = [
            0x0a00_0001,
            0x0b01_0203,
            0x0c00_0001,
            0x0d00_0001,
            0x0e00_0001,
        ];
        let (offered, answered) = run(&fib, &dsts, &[]);
        assert_eq!(offered.len(), 3, "{offered:?}");
        let [(0, ta), (1, ta24), (2, tb)] = offered[..] else {
            panic!("{offered:?}")
        };
        assert_eq!(answered, [0, 1, 2, 3, 4]);
        // Equal routes share their interned information, hence their tag.
        assert_eq!(ta, ta24);
        assert_ne!(ta, tb);
        let (_, answered) = run(&fib, &dsts, &[ta]);
        assert_eq!(answered, [2, 3, 4], "known: no answer");
        // Replaced by an equal route: a new information, a new tag.
        fib.delete(&RouteSelector::exact(&a)).unwrap();
        fib.delete(&RouteSelector::exact(&a24)).unwrap();
        fib.insert(&a, InsertFlags::ADD).unwrap();
        let (offered, _) = run(&fib, &dsts[..1], &[]);
        assert_eq!(offered.len(), 1);
        assert!(![ta, tb].contains(&offered[0].1), "{offered:?}");
        // Another family's table: tags of its own.
        let mut fib6 = FibWriter::<u128>::new();
        fib6.insert(
            &Route::unicast(1 << 120, 8, 254, vec![NextHop::new(Some(1), 2)]),
            InsertFlags::ADD,
        )
        .unwrap();
        let (offered6, _) = run(&fib6, &[1 << 120 | 5], &[]);
        assert_eq!(offered6.len(), 1);
        assert!(![ta, tb, offered[0].1].contains(&offered6[0].1));
    }
}
