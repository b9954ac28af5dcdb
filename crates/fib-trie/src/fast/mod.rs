//! A read-optimised longest-prefix-match structure derived from a source of prefixes (the
//! LC-trie), after Poptrie (Asai and Ohara, SIGCOMM 2015): a direct-indexed first level, then
//! nodes of six bits whose children and leaves are found by population counts, with
//! leaf-pushed answers.
//!
//! ```text
//!  key:  [ first level: 18 bits ][ 6 ][ 6 ][ 6 ] ...
//!                        |
//!   slots  [ leaf | node | leaf | leaf | node | ... ]   2^18 tagged pointers
//!                    |
//!                    v
//!   node   vector  0000100000100...   bit i: position i has a child
//!          leafvec 1000010001001...   bit i: leaf position i starts a new answer run
//!          children [*node, *node]     popcount(vector below i) picks one
//!          leaves   [a0, a1, a2, a3]   popcount(leafvec up to i) - 1 picks one
//! ```
//!
//! An answer is a `u32` chosen by the source (for a [`FibTable`](crate::FibTable), the index
//! of an interned result); every key is answered by the longest prefix covering it, pushed
//! down into the leaves, so a lookup reads one first-level slot and one node per six bits
//! below it, and never backtracks.
//!
//! IPv6 regions dense with prefixes take **direct nodes** instead of chains of nodes: a
//! first-level slot (/18) holding at least [`DIRECT_AT`] longer prefixes points to 2^14 slots
//! indexed by the key's bits 18 to 31, and such a /32 to 2^12 slots for bits 32 to 43 (see
//! [`direct_bits`]). A key inside a /48 then costs four dependent loads (first-level slot,
//! /32 slot, /44 slot, node), as in DPDK's rte_fib6, where six-bit nodes from /18 took six.
//!
//! ```text
//!  IPv6 key:  [ 18: first level ][ 14: direct ][ 12: direct ][ 6 ][ 6 ] ...
//!  slot[key >> 110] ──> direct[bits 18..32] ──> direct[bits 32..44] ──> node ──> ...
//! ```
//!
//! # Memory
//! A bulk build ([`FastLpm::rebuild`], and an update that widens the first level) places the
//! wide first level and all its nodes in one arena of 2 MiB chunks, packed depth first,
//! advised for transparent huge pages, so that the structure of a full table needs a few TLB
//! entries instead of thousands; nodes made by updates come from the global allocator, and
//! nodes they replace stay in the arena until the next bulk build.
//!
//! # Updates
//! A change of one prefix rebuilds the smallest subtree whose leaves it can change (the node
//! whose six bits hold the prefix's last bit, or the first-level slots it covers) from the
//! source, and publishes it with one pointer store; the replaced subtree is freed after every
//! reader pinned before the store has unpinned. A lookup racing a change so reads the entries
//! of wholly before or wholly after it. A table that grows past [`WIDE_AT`] prefixes is
//! rebuilt once with the wide first level.
mod arena;
mod build;
mod node;
mod source;

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::guard::check_guard;
use crate::key::TrieKey;
use arena::{Arena, ArenaBuilder};
use build::{Item, assemble, build};
use node::{
    DIRECT_TAG, Entry, NODE_TAG, Place, SKIP_TAG, Slot, TAG_BITS, child_slot, direct_slot,
    direct_step_raw, entries, prefetch_addr, raw_answer, raw_skip, retire, retire_shallow,
    skip_next, skip_prefix, skip_step_raw, step_raw,
};

/// The answer slots hold where no prefix covers a key.
pub(crate) const NONE: u32 = u32::MAX;
/// Key bits a node consumes.
pub(crate) const STRIDE: u8 = 6;
/// First-level width of a small table.
const NARROW_BITS: u8 = 8;
/// A source with this many prefixes gets the wide first level.
pub const WIDE_AT: usize = 1024;
/// A change covering more first-level slots than this rebuilds the whole structure.
const REBUILD_ALL_SLOTS: usize = 4096;

/// The first-level width of a large table: 18 bits (IPv4: most prefixes are /24 or shorter,
/// so one node below; IPv6: a dense /18 goes on to a direct node down to /32, and a dense /32
/// to one down to /44; 1 MiB of slots, against 256 KiB for 16 bits).
pub const fn wide_bits<K: TrieKey>() -> u8 {
    18
}

/// IPv6 regions with at least this many longer prefixes get a direct node (see
/// [`direct_bits`]).
const DIRECT_AT: usize = 64;
/// A change under a direct node covering more of its slots than this rebuilds the node.
const DIRECT_PATCH_SLOTS: usize = 256;

/// The width of the direct node under a wide first-level slot (depth 18, down to /32).
pub(crate) const FIRST_DIRECT_BITS: u8 = 14;
/// The width of the direct node under a first direct node's slot (depth 32, down to /44).
pub(crate) const SECOND_DIRECT_BITS: u8 = 12;

/// The width of the direct node that the region at `depth` holding `count` longer prefixes
/// gets, if any: only for IPv6, where prefixes are long and bunched in few regions. A dense
/// /18 (a wide first-level slot) goes down to /32 in one step (2^14 slots, 128 KiB), a dense
/// /32 to /44 (2^12 slots, 32 KiB): the lengths most prefixes have (/32, /40, /44, /48),
/// which six-bit nodes from 18 reach only after two, four and five nodes. Elsewhere, and in
/// sparse regions, six-bit nodes (a few dozen bytes each) are smaller for the same depth.
///
/// The width is fixed by the depth (the lookup's first two direct steps rely on it: a direct
/// node in a first-level slot has [`FIRST_DIRECT_BITS`], one in its slots
/// [`SECOND_DIRECT_BITS`], so that the lookup needs no width from the tagged pointer).
pub(crate) fn direct_bits<K: TrieKey>(depth: u8, count: usize) -> Option<u8> {
    if K::BITS != 128 || count < DIRECT_AT {
        return None;
    }
    match depth {
        18 => Some(FIRST_DIRECT_BITS),
        32 => Some(SECOND_DIRECT_BITS),
        _ => None,
    }
}
const _: () = assert!(
    wide_bits::<u128>() == 18
        && NARROW_BITS != 18
        && 18 + FIRST_DIRECT_BITS == 32
        && 32 + SECOND_DIRECT_BITS + STRIDE <= 64,
    "direct_bits assumes an 18-bit first level, and the lookup a node's six bits in the top 64"
);

/// The six key bits (zero-padded past the key's end) that a node at `depth` consumes.
#[inline(always)]
pub(crate) fn index_at<K: TrieKey>(key: K, depth: u8) -> u32 {
    let end = depth + STRIDE;
    let bits = if end <= K::BITS {
        key.shr_in_width(K::BITS - end)
    } else {
        key.shl(end - K::BITS)
    };
    (bits.low_usize() & 63) as u32
}

/// Where the fast structure reads the prefixes it is built from.
///
/// Answers are chosen by the source and must not be `u32::MAX`. A source answers for its
/// current contents; [`FastLpm::update`] is called after each change.
pub trait PrefixSource<K: TrieKey> {
    /// The answer of the longest prefix of length at most `plen` covering `key`.
    fn covering(&mut self, key: K, plen: u8) -> Option<u32>;
    /// Appends every prefix longer than `plen` inside `key/plen` with its answer (sorted by
    /// key, then length, is fastest; any order is accepted).
    fn within(&mut self, key: K, plen: u8, out: &mut Vec<(K, u8, u32)>);
    /// How many prefixes the source holds (picks the first level's width).
    fn prefix_count(&self) -> usize;
}

/// The first level: its width and its slots (each a leaf answer or a node), and the arena
/// its bulk build placed the slots (when wide) and nodes in.
struct Root<K> {
    bits: u8,
    /// `1 << bits` slots, in `arena`, or (`boxed`) a boxed slice of their own.
    slots: NonNull<Slot>,
    /// Whether `slots` came from `Box::into_raw` (a narrow root), to be boxed again and
    /// freed with the root. (Not kept as a `Box`: moving a root would then assert the box's
    /// uniqueness while lookups read through `slots`, which Miri's Tree Borrows reports.)
    boxed: bool,
    arena: Arc<Arena>,
    _key: PhantomData<K>,
}

impl<K: TrieKey> Root<K> {
    /// A root of `1 << bits` slots answering `NONE`; a wide one in a fresh arena (which the
    /// build goes on filling), a narrow one on the heap.
    fn empty(bits: u8, arena: Option<&mut ArenaBuilder>) -> Root<K> {
        let len = 1usize << bits;
        let none = || Slot::new(Entry::Leaf(NONE).encode());
        let (slots, boxed) = match arena {
            Some(builder) => {
                let layout = std::alloc::Layout::array::<Slot>(len).expect("at most 2 MiB");
                let slots = builder.alloc(layout).cast::<Slot>();
                for i in 0..len {
                    // SAFETY: `slots` is fresh room for `len` slots, written once each here.
                    unsafe { slots.add(i).write(none()) };
                }
                (slots, false)
            }
            None => {
                let boxed: Box<[Slot]> = (0..len).map(|_| none()).collect();
                let raw = NonNull::new(Box::into_raw(boxed)).expect("a box is never null");
                (raw.cast::<Slot>(), true)
            }
        };
        Root {
            bits,
            slots,
            boxed,
            arena: Arc::default(),
            _key: PhantomData,
        }
    }

    /// The first-level slots.
    #[inline(always)]
    fn slots(&self) -> &[Slot] {
        // SAFETY: `slots` points to `1 << bits` initialised slots (`empty`) that live as long
        // as the root: in its arena (kept by `arena`, or by the builder until `arena` is set)
        // or in a boxed slice of their own (`boxed`), freed when the root is dropped.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), 1 << self.bits) }
    }

    #[inline(always)]
    fn slot_index(&self, key: K) -> usize {
        Self::slot_index_at(key, self.bits)
    }

    /// The first-level slot of `key` in a root of `bits` bits (a constant where the caller
    /// knows the width: constant shifts).
    #[inline(always)]
    fn slot_index_at(key: K, bits: u8) -> usize {
        if K::BITS > 64 {
            (key.top_u64() >> (64 - bits)) as usize
        } else {
            key.shr_in_width(K::BITS - bits).low_usize()
        }
    }

    /// The answer for `key`: its first-level slot, then (IPv6) up to two direct slots, then
    /// one node per six bits until a leaf. The root must be live (read under a pinned guard,
    /// or owned).
    #[inline(always)]
    fn descend(&self, key: K) -> Option<u32> {
        Option::from_raw(self.descend_raw(self.slots.as_ptr(), key, self.bits))
    }
}

/// One branch-free step into a direct node of the fixed width `BITS` whose bits end at depth
/// `END`: if the raw entry `p`, read from `at`, is a direct node, its slot for the key's bits
/// `END - BITS` to `END - 1` (taken from `top`, the key's top 64 bits), and `true`; else `at`
/// read again (a hit in L1) and `false`. Either way one load, whose address a conditional
/// move picks: no branch on `p`'s kind, which is mispredicted for about one key in two when
/// regions of both kinds are looked up (and a mispredicted branch that waits on a load
/// discards the work of the keys after it).
///
/// # Safety
/// `at` must be a live slot (of a live root, read under a pinned guard, or owned), and `p`
/// the entry read from it; if `p` is a direct node, it must be one of `2^BITS` slots (a
/// direct node at depth `END - BITS`: `direct_bits` fixes the width by the depth).
#[inline(always)]
unsafe fn direct_select<const END: u8, const BITS: u8>(
    p: *mut node::Node,
    at: *const Slot,
    top: u64,
) -> (*mut node::Node, *const Slot, bool) {
    const { assert!(BITS > 0 && BITS <= END && END <= 64) };
    let is_direct = p.addr() & TAG_BITS == DIRECT_TAG;
    debug_assert!(!is_direct || node::raw_direct(p).1 == BITS);
    let slots = node::raw_direct(p).0;
    // Meaningless (and never read through) unless `p` is a direct node.
    let index = ((top >> (64 - END)) & ((1 << BITS) - 1)) as usize;
    let at = std::hint::select_unpredictable(is_direct, slots.wrapping_add(index), at);
    // SAFETY: `at` is the caller's live slot, or the slot of the live direct node `p` points
    // to that `index` picks (`BITS` bits of the key, below its `2^BITS` slots: the caller
    // guarantees the width).
    let next = unsafe { (*at).load(Ordering::Acquire) };
    (next, at, is_direct)
}

/// How many keys ahead [`FastLpm::lookup_batch`] prefetches first-level slots (best of 0,
/// 4, 8 and 16 on bgp-full-v4 here).
const AHEAD: usize = 8;

/// Bit `i` is set where a tagged pointer whose low six bits are `i` is a skip or a direct
/// node (low three bits [`SKIP_TAG`] or [`DIRECT_TAG`]; the bits above them are a direct
/// node's width or an answer's bits, and an answer has bit 0 set): the lookup tells such an
/// entry from a node or an answer with one bit test instead of two tests and an `or`.
const SKIP_OR_DIRECT: u64 = {
    let mut mask = 0u64;
    let mut i = 0;
    while i < 64 {
        if i & TAG_BITS == SKIP_TAG || i & TAG_BITS == DIRECT_TAG {
            mask |= 1 << i;
        }
        i += 1;
    }
    mask
};
const _: () = assert!(SKIP_OR_DIRECT == 0x1414_1414_1414_1414);

/// What a batch lookup writes for an answer: the raw `u32` ([`NONE`] where no prefix
/// covers the key; four bytes, no tag) or an `Option<u32>`.
trait Out: Copy {
    /// The output for the raw answer `answer`.
    fn from_raw(answer: u32) -> Self;
}

impl Out for u32 {
    #[inline(always)]
    fn from_raw(answer: u32) -> Self {
        answer
    }
}

impl Out for Option<u32> {
    #[inline(always)]
    fn from_raw(answer: u32) -> Self {
        (answer != NONE).then_some(answer)
    }
}

impl<K: TrieKey> Root<K> {
    /// The answer for `key` ([`NONE`] where no prefix covers it) in a root whose width the
    /// caller passes and whose slots start at `base`: `bits` must be `self.bits` (a constant
    /// where the caller has checked it, so that every shift by the first level's width is a
    /// constant one), `base` `self.slots` (passed so that a batch loop keeps it in a
    /// register: after each slot's acquire load the compiler would read `self.slots` again,
    /// one more load on every key's chain). The root must be live (read under a pinned
    /// guard, or owned).
    ///
    /// The hot loop works on the slots' raw tagged pointers (a node is told by its two low
    /// bits being clear, an answer by bit 0, with no decoding into an [`Entry`] and no null
    /// test), reads the first-level slot without a bounds check, and keeps the key shifted
    /// so that the next node's six bits are its top bits: one constant shift per step, where
    /// [`index_at`] takes a variable shift and a range test (several instructions on `u128`).
    /// The answer is returned raw, so that a batch writes four bytes per key and no tag.
    #[inline(always)]
    fn descend_raw(&self, base: *const Slot, key: K, bits: u8) -> u32 {
        debug_assert_eq!(bits, self.bits);
        debug_assert_eq!(base, self.slots.as_ptr().cast_const());
        // SAFETY: `slot_index_at` is the key's top `bits` bits, below the `1 << bits` slots,
        // which start at `base` and live as long as the root (see `slots`).
        let slot = unsafe { base.add(Self::slot_index_at(key, bits)) };
        // SAFETY: as above.
        let p = unsafe { (*slot).load(Ordering::Acquire) };
        if K::BITS == 128 {
            // IPv6: a dense /18 holds a direct node down to /32, and a dense /32 one down
            // to /44. Their slots are read without a branch on the entry's kind (see
            // `direct_select`), then the node step below, so that most lookups take no
            // branch that depends on the data before their answer. Until then the key's
            // next bits come from its top 64 (`u64` shifts); the whole key is shifted only
            // for a lookup that goes further.
            // A first-level slot that holds an answer (most of the IPv6 space, covered by
            // a short prefix or by none) answers at once: this branch follows the traffic
            // (keys to announced prefixes almost never land on one, uniform keys almost
            // always), so it is predicted well, and it spares those keys two loads.
            if p.addr() & 1 != 0 {
                return raw_answer(p);
            }
            // Direct nodes have fixed widths by depth (`direct_bits`): one in a first-level
            // slot is at depth 18 (only a wide root has them) and takes bits 18 to 31, one in
            // its slots takes bits 32 to 43. The key's bits are read at those fixed places
            // from its top 64, with constant shifts; no width is decoded.
            let top = key.top_u64();
            // SAFETY: `p` was read from `slot`, a slot of this live root (at depth `bits`;
            // if it holds a direct node, the depth is 18, see above).
            let (p, slot, first) = unsafe { direct_select::<32, FIRST_DIRECT_BITS>(p, slot, top) };
            // SAFETY: as above, one level down: `slot` is at depth 32 if it is a first
            // direct node's slot, else it is the first-level slot again (no direct node).
            let (p, _, second) = unsafe { direct_select::<44, SECOND_DIRECT_BITS>(p, slot, top) };
            // The key's bits from the node's depth on, at the top: past the first level,
            // then past each direct node taken (a constant shift, picked).
            let rest = top << bits;
            let rest = std::hint::select_unpredictable(first, rest << FIRST_DIRECT_BITS, rest);
            let rest = std::hint::select_unpredictable(second, rest << SECOND_DIRECT_BITS, rest);
            let index = (rest >> (64 - STRIDE)) as u32;
            // The depth, for the lookups that go further (a child, a skip node) only.
            let used = move || {
                bits + std::hint::select_unpredictable(first, FIRST_DIRECT_BITS, 0)
                    + std::hint::select_unpredictable(second, SECOND_DIRECT_BITS, 0)
            };
            return self.node_or_answer(key, p, index, || key.shl_lt64(used()));
        }
        // The key's bits from the next entry's depth on, at the top (zeros shifted in past
        // the key's end: `index_at`'s padding).
        let rest = key.shl(bits);
        let index = rest.shr_in_width(K::BITS - STRIDE).low_usize() as u32;
        self.node_or_answer(key, p, index, || rest)
    }

    /// The lookup from the raw entry `p` (with `index` the key's six bits at its depth, and
    /// `rest` giving all its bits from there on): one node step or `p`'s own answer, picked
    /// without a branch, then [`walk`](Self::walk) if the key goes further.
    ///
    /// The step reads `p`'s node, or the static empty node when `p` holds an answer (or a
    /// skip or direct node): a branch on the entry's kind would be mispredicted often (the
    /// key lands on an answer or on a node almost at random) and only found so once the
    /// entry's load returned, discarding the work of the keys after it. Only descending
    /// further (a child, a skip or direct node) branches.
    #[inline(always)]
    fn node_or_answer(
        &self,
        key: K,
        p: *mut node::Node,
        index: u32,
        rest: impl FnOnce() -> K,
    ) -> u32 {
        let is_node = p.addr() & TAG_BITS == NODE_TAG;
        let node = std::hint::select_unpredictable(is_node, p, node::empty_node());
        // SAFETY: `node` is a node pointer read from a slot of this root, which is live (the
        // caller's guard keeps published nodes from being freed), or the static empty node.
        match unsafe { step_raw(node, index) } {
            Ok(next) => self.walk(key, next, rest().shl(STRIDE)),
            // A node's or an answer slot's answer; a skip or direct node goes on below
            // (told by one bit test: see `SKIP_OR_DIRECT`).
            Err(answer) if (SKIP_OR_DIRECT >> (p.addr() & 63)) & 1 == 0 => {
                std::hint::select_unpredictable(is_node, answer, raw_answer(p))
            }
            Err(_) => self.walk(key, p, rest()),
        }
    }

    /// The rest of a lookup from the raw entry `p`, with `rest` the key's bits from `p`'s
    /// depth on (at the top): the raw answer.
    #[inline(always)]
    fn walk(&self, key: K, mut p: *mut node::Node, mut rest: K) -> u32 {
        loop {
            match p.addr() & TAG_BITS {
                NODE_TAG => {
                    let index = rest.shr_in_width(K::BITS - STRIDE).low_usize() as u32;
                    // SAFETY: `p` is a node pointer (tag clear) read from a slot of this
                    // root, which is live: the caller's guard keeps published nodes from
                    // being freed.
                    match unsafe { step_raw(p, index) } {
                        Ok(next) => {
                            p = next;
                            rest = rest.shl(STRIDE);
                        }
                        Err(answer) => return answer,
                    }
                }
                DIRECT_TAG => {
                    // SAFETY: `p` is a direct node's tagged pointer read from a slot of this
                    // root, which is live (see above).
                    let (next, bits) = unsafe { direct_step_raw(p, rest) };
                    p = next;
                    rest = rest.shl_lt64(bits);
                }
                // SAFETY: as above; skip nodes of a `FastLpm<K>` hold keys of type `K`.
                SKIP_TAG => match unsafe { skip_step_raw(raw_skip(p), key) } {
                    Ok((next, len)) => {
                        p = next;
                        rest = key.shl(len);
                    }
                    Err(miss) => return miss,
                },
                _ => return raw_answer(p),
            }
        }
    }

    /// [`FastLpm::lookup_batch`]'s loop, for a root `bits` wide (`self.bits`): each key with
    /// the first-level slot of the key `AHEAD` places further prefetched, then the last
    /// `AHEAD` (no bounds checks: the iterators end together). Inlined, so that a caller
    /// passing a constant width (a wide root, tested once per batch) gets every shift by the
    /// first level's width as a constant one (a variable shift of a `u32` key takes a range
    /// test and several instructions more: callgrind, bgp-full-v4, 8k destinations, 60 -> 49
    /// instructions per lookup; IPv6 94 -> 93).
    #[inline(always)]
    fn descend_batch<O: Out>(&self, keys: &[K], out: &mut [O], bits: u8) {
        debug_assert_eq!(self.bits, bits);
        let base = self.slots.as_ptr().cast_const();
        let split = keys.len().saturating_sub(AHEAD);
        let (head, tail) = out.split_at_mut(split);
        for ((o, &key), &ahead) in head.iter_mut().zip(keys).zip(&keys[keys.len() - split..]) {
            // A prefetch never faults: no bounds check needed (and the index is in bounds).
            prefetch_addr(base.wrapping_add(Self::slot_index_at(ahead, bits)).cast());
            *o = O::from_raw(self.descend_raw(base, key, bits));
        }
        for (o, &key) in tail.iter_mut().zip(&keys[split..]) {
            *o = O::from_raw(self.descend_raw(base, key, bits));
        }
    }

    /// [`descend_batch`](Self::descend_batch) for a root narrower than [`wide_bits`] (a small
    /// table), out of line so that the wide loop keeps the caller to itself.
    #[inline(never)]
    fn descend_batch_narrow<O: Out>(&self, keys: &[K], out: &mut [O]) {
        self.descend_batch(keys, out, self.bits);
    }
}

// SAFETY: a root owns its slots (boxed, or in `arena`); shared access is reads of
// atomic slots and of the immutable nodes they point to.
unsafe impl<K: Send> Send for Root<K> {}
// SAFETY: as above.
unsafe impl<K: Sync> Sync for Root<K> {}

impl<K> Drop for Root<K> {
    fn drop(&mut self) {
        // SAFETY: the slots are live (see `slots`); the arena is dropped after this body.
        let slots = unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), 1 << self.bits) };
        for slot in slots {
            // SAFETY: a root is dropped when it is owned (never published) or after it was
            // unlinked and its readers unpinned (`defer_destroy`); its subtrees went with it,
            // and subtrees replaced earlier were retired on their own. Its arena is still
            // alive (dropped with the root's fields, after this).
            unsafe { node::free_entry(Entry::decode(slot.load(Ordering::Relaxed)), &self.arena) };
        }
        if self.boxed {
            let len = 1usize << self.bits;
            // SAFETY: `slots` came from `Box::into_raw` of a boxed slice of `len` slots
            // (`empty`), is boxed again once, here, and nothing uses it afterwards.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.slots.as_ptr(), len))
            });
        }
    }
}

/// A longest-prefix-match structure over `u32` answers, kept in step with a [`PrefixSource`].
///
/// Readers never lock. Who writes shows in the types, as for the crate's other structures: a
/// `FastLpm` shared with readers has no method that changes it; its one writer,
/// [`FastLpmWriter`](crate::FastLpmWriter) (not `Clone`, `&mut self` to rebuild or update),
/// makes it, hands readers its `Arc` and derefs to it. (Inside a [`FibTable`](crate::FibTable)
/// the table's writer keeps it in step.)
///
/// # Panics
/// [`lookup`](Self::lookup) and [`lookup_batch`](Self::lookup_batch) panic unless `guard` is
/// from `crossbeam_epoch::pin()` (the default collector, which replaced nodes are retired
/// into): checked once per call, so once per batch for `lookup_batch`.
///
/// ```
/// use fib_trie::{FastLpmWriter, TrieWriter};
///
/// // The LC-trie is the source of truth; the fast structure is derived from it.
/// let mut trie = TrieWriter::<u32, u32>::new();
/// trie.insert(0x0a00_0000, 8, 1)?;
/// trie.insert(0x0a01_0000, 16, 2)?;
/// let mut fast = FastLpmWriter::<u32>::new();
/// fast.rebuild(&mut &*trie);
/// let reader = std::sync::Arc::clone(fast.reader()); // for lookups: read only
///
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(reader.lookup(0x0a01_0203, &guard), Some(2));
/// assert_eq!(fast.lookup(0x0a02_0203, &guard), Some(1));
/// assert_eq!(fast.lookup(0x0b00_0000, &guard), None);
///
/// // After each change of the source, tell the structure which prefix changed.
/// trie.insert(0x0a02_0000, 15, 3)?;
/// fast.update(0x0a02_0000, 15, &mut &*trie);
/// assert_eq!(fast.lookup(0x0a03_0001, &guard), Some(3));
/// # Ok::<(), fib_trie::PrefixError>(())
/// ```
pub struct FastLpm<K: TrieKey> {
    root: Atomic<Root<K>>,
    writer: Mutex<Vec<Item<K>>>,
}

// SAFETY: the structure owns plain memory (nodes of integers and pointers to nodes); readers
// only read it, and writers are serialized by the mutex and publish with atomic stores.
unsafe impl<K: TrieKey> Send for FastLpm<K> {}
// SAFETY: as above: shared access is reads of published, immutable nodes and atomic slots.
unsafe impl<K: TrieKey> Sync for FastLpm<K> {}

impl<K: TrieKey> Default for FastLpm<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// A [`FastLpm`] read under one pinned, checked guard ([`FastLpm::view`]): the structure and
/// the guard stay borrowed while the view lives, so the root it holds cannot be freed under it.
pub struct FastLpmView<'a, K: TrieKey> {
    root: &'a Root<K>,
}

impl<K: TrieKey> FastLpmView<'_, K> {
    /// The answer of the longest prefix covering `key`, if any: [`FastLpm::lookup`] without
    /// its guard check (made once, when the view was taken).
    ///
    /// ```
    /// use fib_trie::{FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u128, u32>::new();
    /// trie.insert(0x2001_0db8 << 96, 32, 7)?;
    /// let mut fast = FastLpmWriter::<u128>::new();
    /// fast.rebuild(&mut &*trie);
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(fast.view(&guard).lookup(0x2001_0db8_0001 << 80), Some(7));
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    #[inline]
    pub fn lookup(&self, key: K) -> Option<u32> {
        self.root.descend(key)
    }
}

impl<K: TrieKey> std::fmt::Debug for FastLpmView<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastLpmView").finish_non_exhaustive()
    }
}

impl<K: TrieKey> std::fmt::Debug for FastLpm<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastLpm")
            .field("first_level_bits", &self.first_level_bits())
            .finish_non_exhaustive()
    }
}

impl<K: TrieKey> FastLpm<K> {
    /// An empty structure (no key has an answer).
    pub fn new() -> Self {
        FastLpm {
            root: Atomic::new(Root::empty(NARROW_BITS, None)),
            writer: Mutex::new(Vec::new()),
        }
    }

    #[inline(always)]
    fn root<'g>(&self, guard: &'g Guard) -> &'g Root<K> {
        // SAFETY: the root is never null (set in `new`, only replaced by another root), and a
        // replaced root is retired with `defer_destroy`, so it lives while `guard` is pinned.
        unsafe { self.root.load(Ordering::Acquire, guard).deref() }
    }

    /// The answer of the longest prefix covering `key`, if any.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn lookup(&self, key: K, guard: &Guard) -> Option<u32> {
        check_guard(guard);
        self.lookup_pinned(key, guard)
    }

    /// A reader's view of this structure under `guard`, checked once: its
    /// [`lookup`](FastLpmView::lookup)s then skip the per-call guard check that
    /// [`lookup`](Self::lookup) makes, for a reader that looks up key after key under one pin
    /// (a run loop's batch). The view reads the root published when it was taken; changes
    /// below the root that a writer publishes later are still seen.
    ///
    /// ```
    /// use fib_trie::{FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u32, u32>::new();
    /// trie.insert(0x0a00_0000, 8, 1)?;
    /// let mut fast = FastLpmWriter::<u32>::new();
    /// fast.rebuild(&mut &*trie);
    ///
    /// let guard = crossbeam_epoch::pin();
    /// let view = fast.view(&guard);
    /// assert_eq!(view.lookup(0x0a01_0203), Some(1));
    /// assert_eq!(view.lookup(0x0b00_0000), None);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn view<'a>(&'a self, guard: &'a Guard) -> FastLpmView<'a, K> {
        check_guard(guard);
        FastLpmView {
            root: self.root(guard),
        }
    }

    /// [`lookup`](Self::lookup) under a guard the caller already checked.
    #[inline]
    pub(crate) fn lookup_pinned(&self, key: K, guard: &Guard) -> Option<u32> {
        self.root(guard).descend(key)
    }

    /// Looks up every key of `keys` into `out` (as long), as [`lookup`](Self::lookup) would,
    /// prefetching the first-level slot of the key eight places further while descending
    /// for the current one: the first of each lookup's dependent cache misses is then taken
    /// off its chain, and the out-of-order core overlaps the rest across keys.
    ///
    /// (Descending a group of keys in lock step, prefetching each level's nodes for the
    /// whole group, measured slower here: its bookkeeping costs more than the overlap it
    /// adds to what the core already overlaps on its own. So did, for IPv6 with bgp-full-v6
    /// and 8k destinations, a software pipeline that prefetched each key's first-level slot,
    /// direct slots, node header and child in five stages two to ten keys apart: 2.8 times
    /// the instructions, 1.4 to 1.6 times the time alone and 1.05 in the dataplane; and
    /// prefetching only the /32's direct slot besides the first-level slot gained nothing
    /// measurable. Such a walk's lines fit the 1 MiB L2 of the machine measured, so its
    /// misses are short ones that the core already overlaps; the experiment is in the
    /// history of branch v6walk.)
    ///
    /// ```
    /// use fib_trie::{FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u32, u32>::new();
    /// trie.insert(0x0a00_0000, 8, 1)?;
    /// trie.insert(0x0a01_0200, 24, 2)?;
    /// let mut fast = FastLpmWriter::<u32>::new();
    /// fast.rebuild(&mut &*trie);
    ///
    /// let keys = [0x0a01_0203, 0x0a05_0000, 0x0b00_0000];
    /// let mut out = [None; 3];
    /// fast.lookup_batch(&keys, &mut out, &crossbeam_epoch::pin());
    /// assert_eq!(out, [Some(2), Some(1), None]);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    ///
    /// # Panics
    /// If `out` is shorter than `keys`, or `guard` is not from `crossbeam_epoch::pin()` (the
    /// default collector; checked once for the batch).
    pub fn lookup_batch(&self, keys: &[K], out: &mut [Option<u32>], guard: &Guard) {
        self.lookup_batch_into(keys, out, guard);
    }

    /// [`lookup_batch`](Self::lookup_batch) with each answer raw: [`u32::MAX`] where no
    /// prefix covers the key (answers are never `u32::MAX`, see [`PrefixSource`]); a
    /// four-byte output with no tag to write.
    ///
    /// ```
    /// use fib_trie::{FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u32, u32>::new();
    /// trie.insert(0x0a00_0000, 8, 1)?;
    /// let mut fast = FastLpmWriter::<u32>::new();
    /// fast.rebuild(&mut &*trie);
    /// let mut out = [0; 2];
    /// fast.lookup_batch_raw(&[0x0a01_0203, 0x0b00_0000], &mut out, &crossbeam_epoch::pin());
    /// assert_eq!(out, [1, u32::MAX]);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    ///
    /// # Panics
    /// As [`lookup_batch`](Self::lookup_batch).
    pub fn lookup_batch_raw(&self, keys: &[K], out: &mut [u32], guard: &Guard) {
        self.lookup_batch_into(keys, out, guard);
    }

    /// [`lookup_batch`](Self::lookup_batch) into either output (the raw or the `Option`).
    fn lookup_batch_into<O: Out>(&self, keys: &[K], out: &mut [O], guard: &Guard) {
        check_guard(guard);
        assert!(out.len() >= keys.len(), "output shorter than input");
        let root = self.root(guard);
        let out = &mut out[..keys.len()];
        const { assert!(wide_bits::<u32>() == wide_bits::<u128>()) };
        const WIDE: u8 = wide_bits::<u128>();
        if root.bits == WIDE {
            root.descend_batch(keys, out, WIDE);
        } else {
            root.descend_batch_narrow(keys, out);
        }
    }

    /// A diagnostic: the addresses `lookup(key)` reads, in order (one per dependent load:
    /// the first-level slot, each direct slot, each node's header and the child slot or
    /// answer it picks, each skip node), for histograms of a table's depth and of the cache
    /// lines a lookup touches (`benches/examples/fast_shape.rs`). Allocates; not for the
    /// data path.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[doc(hidden)]
    pub fn lookup_path(&self, key: K, guard: &Guard) -> Vec<usize> {
        check_guard(guard);
        let root = self.root(guard);
        let first = &root.slots()[root.slot_index(key)];
        let mut path = vec![std::ptr::from_ref(first).addr()];
        let mut entry = Entry::load(first);
        let mut depth = root.bits;
        loop {
            match entry {
                Entry::Leaf(_) => return path,
                Entry::Node(n) => {
                    path.push(n.as_ptr().addr());
                    // SAFETY: `guard` keeps the published node live.
                    match unsafe { child_slot(n, index_at(key, depth)) } {
                        Some(child) => {
                            path.push(std::ptr::from_ref(child).addr());
                            entry = Entry::load(child);
                            depth += STRIDE;
                        }
                        None => {
                            // The answer's place: after the node's children, counted as
                            // the lookup's step counts it.
                            // SAFETY: as above.
                            path.push(unsafe { node::leaf_addr(n, index_at(key, depth)) });
                            return path;
                        }
                    }
                }
                Entry::Direct(d, bits) => {
                    let index = key.shl(depth).shr_in_width(K::BITS - bits).low_usize();
                    // SAFETY: as above; `index` is `bits` bits, below the node's `2^bits`.
                    let slot = unsafe { direct_slot(d, index) };
                    path.push(std::ptr::from_ref(slot).addr());
                    entry = Entry::load(slot);
                    depth += bits;
                }
                Entry::Skip(s) => {
                    path.push(s.as_ptr().addr());
                    // SAFETY: as above; skip nodes of a `FastLpm<K>` hold keys of type `K`.
                    let ((len, next), prefix) = unsafe { (skip_next(s), skip_prefix::<K>(s)) };
                    if (key ^ prefix) & K::prefix_mask(len) != K::ZERO {
                        return path;
                    }
                    entry = Entry::load(next);
                    depth = len;
                }
            }
        }
    }

    /// The width of the first level in bits (8 while small, then [`wide_bits`]).
    pub fn first_level_bits(&self) -> u8 {
        self.root(&epoch::pin()).bits
    }

    /// The bytes the structure occupies: the arena's chunks whole (the first level and the
    /// nodes of the last bulk build, dead ones included, and each chunk's unused tail), plus
    /// the nodes updates made since (padded to a cache line, without allocator overhead).
    ///
    /// ```
    /// use fib_trie::{FastLpm, FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u32, u32>::new();
    /// for i in 0..2048u32 {
    ///     trie.insert(i << 12, 20, i)?;
    /// }
    /// let mut fast = FastLpmWriter::<u32>::new();
    /// fast.rebuild(&mut &*trie);
    /// // A wide first level (2^18 slots of 8 bytes) and its nodes, in 2 MiB chunks.
    /// assert_eq!(fast.first_level_bits(), 18);
    /// assert!(fast.bytes() >= 2 << 20 && fast.bytes() % (2 << 20) < 4096);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    pub fn bytes(&self) -> usize {
        let _writer = self.lock();
        let guard = &epoch::pin();
        let root = self.root(guard);
        let mut bytes = size_of::<Root<K>>() + root.arena.bytes();
        if root.boxed {
            bytes += size_of_val(root.slots());
        }
        for slot in root.slots() {
            // SAFETY: the writer lock is held, so no subtree is replaced meanwhile, and
            // `guard` keeps published nodes alive.
            bytes += unsafe { node::heap_bytes(Entry::load(slot), &root.arena) };
        }
        bytes
    }

    /// The bytes of the arenas of every fast structure live in the process (IPv4 and IPv6,
    /// retired ones not yet freed included). Arenas are mapped from the kernel directly, so a
    /// counting global allocator does not see them; add this to its count.
    ///
    /// ```
    /// use fib_trie::{FastLpm, FastLpmWriter, TrieWriter};
    ///
    /// let mut trie = TrieWriter::<u32, u32>::new();
    /// for i in 0..2048u32 {
    ///     trie.insert(i << 12, 20, i)?;
    /// }
    /// let mut fast = FastLpmWriter::<u32>::new();
    /// fast.rebuild(&mut &*trie);
    /// assert!(FastLpm::<u32>::arena_bytes_in_process() >= 2 << 20);
    /// # Ok::<(), fib_trie::PrefixError>(())
    /// ```
    pub fn arena_bytes_in_process() -> usize {
        arena::mapped()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Item<K>>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rebuilds the whole structure from `source` and publishes it with one store (the writer's:
    /// [`FastLpmWriter::rebuild`](crate::FastLpmWriter::rebuild), or the table's).
    pub(crate) fn rebuild(&self, source: &mut impl PrefixSource<K>) {
        let mut items = self.lock();
        self.rebuild_locked(source, &mut items, &epoch::pin());
    }

    fn rebuild_locked(
        &self,
        source: &mut impl PrefixSource<K>,
        items: &mut Vec<Item<K>>,
        guard: &Guard,
    ) {
        let bits = if source.prefix_count() >= WIDE_AT {
            wide_bits::<K>()
        } else {
            NARROW_BITS
        };
        items.clear();
        source.within(K::ZERO, 0, items);
        sort(items);
        let default = source.covering(K::ZERO, 0).unwrap_or(NONE);
        // A wide root and its nodes go into one arena (huge pages); a narrow one's nodes are
        // few and each on the heap.
        let mut builder = ArenaBuilder::default();
        let mut place = if bits == NARROW_BITS {
            Place::Heap
        } else {
            Place::Arena(&mut builder)
        };
        let mut root = Root::<K>::empty(
            bits,
            match &mut place {
                Place::Arena(b) => Some(&mut **b),
                Place::Heap => None,
            },
        );
        // First-level answers: the default, overwritten by prefixes of at most `bits`,
        // shortest first.
        let mut answers = vec![default; root.slots().len()];
        let mut short: Vec<Item<K>> = items.iter().copied().filter(|i| i.1 <= bits).collect();
        short.sort_by_key(|i| i.1);
        for (key, len, answer) in short {
            let first = root.slot_index(key);
            answers[first..first + (1 << (bits - len))].fill(answer);
        }
        let longer: Vec<Item<K>> = items.iter().copied().filter(|i| i.1 > bits).collect();
        for (i, answer) in answers.iter().enumerate() {
            root.slots()[i].store(Entry::Leaf(*answer).encode(), Ordering::Relaxed);
        }
        let mut rest = &longer[..];
        while let Some(&(key, _, _)) = rest.first() {
            let s = root.slot_index(key);
            let n = rest
                .iter()
                .take_while(|i| root.slot_index(i.0) == s)
                .count();
            let entry = build(
                &mut place,
                key & K::prefix_mask(bits),
                bits,
                answers[s],
                &rest[..n],
            );
            root.slots()[s].store(entry.encode(), Ordering::Relaxed);
            rest = &rest[n..];
        }
        root.arena = Arc::new(builder.finish());
        let old = self.root.swap(Owned::new(root), Ordering::AcqRel, guard);
        // SAFETY: the old root was just unlinked and is retired once; readers that loaded it
        // are pinned, so it (with its subtrees) is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
    }

    /// Brings the structure in step with `source` after the prefix `key/plen` changed in it
    /// (added, removed, or given another answer); the writer's, as [`rebuild`](Self::rebuild).
    pub(crate) fn update(&self, key: K, plen: u8, source: &mut impl PrefixSource<K>) {
        let mut items = self.lock();
        let guard = &epoch::pin();
        let root = self.root(guard);
        if root.bits == NARROW_BITS && source.prefix_count() >= WIDE_AT {
            return self.rebuild_locked(source, &mut items, guard);
        }
        if plen <= root.bits {
            let count = 1usize << (root.bits - plen);
            if count > REBUILD_ALL_SLOTS {
                return self.rebuild_locked(source, &mut items, guard);
            }
            let first = root.slot_index(key);
            for s in first..first + count {
                let region = K::from_usize(s).shl(K::BITS - root.bits);
                let entry = region_entry(source, region, root.bits, &mut items);
                let old = Entry::decode(root.slots()[s].swap(entry.encode(), Ordering::AcqRel));
                // SAFETY: the old subtree was just unlinked by the swap, and is retired once.
                unsafe { retire(old, &root.arena, guard) };
            }
            return;
        }
        // Find the node whose six bits hold the prefix's last bit (or the deepest node on
        // its path), remembering the slots on the way, and whether each may hold a lone
        // answer (a first-level or direct-node slot may; a node's child slot may not).
        let mut path: Vec<(&Slot, u8, bool)> =
            vec![(&root.slots()[root.slot_index(key)], root.bits, true)];
        while let Some(&(slot, depth, _)) = path.last() {
            match Entry::load(slot) {
                Entry::Node(n) if plen > depth + STRIDE => {
                    // SAFETY: the writer lock is held and `guard` pinned: `n` is live.
                    match unsafe { child_slot(n, index_at(key, depth)) } {
                        Some(child) => path.push((child, depth + STRIDE, false)),
                        None => break,
                    }
                }
                Entry::Direct(d, bits) if plen > depth + bits => {
                    let index = key.shl(depth).shr_in_width(K::BITS - bits).low_usize();
                    // SAFETY: as above; `index` is `bits` bits, below the node's `2^bits`.
                    path.push((unsafe { direct_slot(d, index) }, depth + bits, true));
                }
                // A prefix below a skip node's prefix changes only what follows it; any
                // other prefix in its region rebuilds the region (the slot holding it).
                Entry::Skip(s) => {
                    // SAFETY: as above; skip nodes of a `FastLpm<K>` hold keys of type `K`.
                    let ((len, next), prefix) = unsafe { (skip_next(s), skip_prefix::<K>(s)) };
                    if plen > len && (key ^ prefix) & K::prefix_mask(len) == K::ZERO {
                        path.push((next, len, false));
                    } else {
                        break;
                    }
                }
                _ => break,
            }
        }
        // Patch that node: only the positions the prefix covers (or the one its path leaves
        // through) get new entries, rebuilt from the source; the other children are kept.
        if let Some(&(slot, depth, lone_ok)) = path.last()
            && let Entry::Node(n) = Entry::load(slot)
            && depth + STRIDE <= K::BITS
        {
            // SAFETY: the writer lock is held and `guard` pinned: `n` is published and live.
            let old = unsafe { entries(n) };
            let mut new = old;
            let index = index_at(key, depth) as usize;
            let (first, count) = if plen <= depth + STRIDE {
                let count = 1usize << (depth + STRIDE - plen);
                (index & !(count - 1), count)
            } else {
                (index, 1)
            };
            let base = key & K::prefix_mask(depth);
            for (i, e) in new.iter_mut().enumerate().skip(first).take(count) {
                let sub = base | K::from_usize(i).shl(K::BITS - depth - STRIDE);
                *e = region_entry(source, sub, depth + STRIDE, &mut items);
            }
            let patched = assemble(&mut Place::Heap, &new);
            // A lone answer can only go into a first-level or direct slot (else the parent
            // is rebuilt below; `patched` then holds no node, nothing is lost).
            if !matches!(patched, Entry::Leaf(_)) || lone_ok {
                slot.store(patched.encode(), Ordering::Release);
                // SAFETY: `n` was just unlinked (its untouched children live on in the new
                // node, so only the node itself is freed); the children of the patched
                // positions were unlinked with it and are retired once each.
                unsafe {
                    retire_shallow(n, &root.arena, guard);
                    for e in &old[first..first + count] {
                        retire(*e, &root.arena, guard);
                    }
                }
                return;
            }
        }
        // A direct node whose slots the prefix covers (it ends within the node's bits):
        // those slots are rebuilt one by one, each published with one store (a lookup reads
        // one slot, so it sees that slot before or after), unless there are many.
        if let Some(&(slot, depth, _)) = path.last()
            && let Entry::Direct(d, bits) = Entry::load(slot)
            && plen > depth
            && plen <= depth + bits
        {
            let count = 1usize << (depth + bits - plen);
            if count <= DIRECT_PATCH_SLOTS {
                let index = key.shl(depth).shr_in_width(K::BITS - bits).low_usize();
                let first = index & !(count - 1);
                let base = key & K::prefix_mask(depth);
                for i in first..first + count {
                    let sub = base | K::from_usize(i).shl(K::BITS - depth - bits);
                    let entry = region_entry(source, sub, depth + bits, &mut items);
                    // SAFETY: the writer lock is held and `guard` pinned: `d` is live, and
                    // `i` is below its `2^bits` slots.
                    let old = unsafe { direct_slot(d, i) }.swap(entry.encode(), Ordering::AcqRel);
                    // SAFETY: the old subtree was just unlinked by the swap, and is retired
                    // once.
                    unsafe { retire(Entry::decode(old), &root.arena, guard) };
                }
                return;
            }
        }
        // Rebuild there; a node's child slot cannot hold a lone answer, so a subtree that
        // became uniform is folded into its parent by rebuilding the parent instead.
        while let Some((slot, depth, lone_ok)) = path.pop() {
            let entry = region_entry(source, key & K::prefix_mask(depth), depth, &mut items);
            if matches!(entry, Entry::Leaf(_)) && !lone_ok {
                continue;
            }
            let old = Entry::decode(slot.swap(entry.encode(), Ordering::AcqRel));
            // SAFETY: the old subtree was just unlinked by the swap, and is retired once.
            unsafe { retire(old, &root.arena, guard) };
            return;
        }
    }
}

/// The entry for the region `key/depth`, built from `source`.
fn region_entry<K: TrieKey>(
    source: &mut impl PrefixSource<K>,
    key: K,
    depth: u8,
    items: &mut Vec<Item<K>>,
) -> Entry {
    let default = source.covering(key, depth).unwrap_or(NONE);
    items.clear();
    source.within(key, depth, items);
    sort(items);
    build(&mut Place::Heap, key, depth, default, items)
}

fn sort<K: TrieKey>(items: &mut [Item<K>]) {
    if !items.is_sorted_by_key(|i| (i.0, i.1)) {
        items.sort_unstable_by_key(|i| (i.0, i.1));
    }
}

impl<K: TrieKey> Drop for FastLpm<K> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader can hold the root through `self` any more; it is
        // freed once (its subtrees with it, by `Root::drop`).
        unsafe {
            let guard = epoch::unprotected();
            drop(self.root.load(Ordering::Relaxed, guard).into_owned());
        }
    }
}

#[cfg(test)]
mod tests;
