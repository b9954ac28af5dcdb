//! The nodes of the fast lookup structure and their memory layout.
//!
//! A node consumes six key bits (64 positions). It is ONE allocation:
//!
//! ```text
//! +----------+-----------+------------------------+------------------------+
//! | vector   | leafvec   | children: *Node × c    | leaves: u32 × l        |
//! | u64      | u64       | c = popcount(vector)   | l = popcount(leafvec)  |
//! +----------+-----------+------------------------+------------------------+
//! ```
//!
//! Bit `i` of `vector` says that position `i` leads to a child node, the
//! `popcount(vector & (2^i - 1))`-th child. Every other position is a leaf; consecutive leaf
//! positions with the same answer share one entry of `leaves`, and bit `i` of `leafvec` marks a
//! leaf position that starts a new entry, so position `i`'s answer is entry
//! `popcount(leafvec & (2^(i+1) - 1)) - 1` (Poptrie's `leafvec`).
//!
//! A **skip** node stands for a sparse region whose prefixes all lie below one longer prefix
//! (common in IPv6: a lone /48 under a /32): a key that matches its `len` bits goes on to its
//! `next` entry at depth `len`, any other key gets its `miss` answer. One cache line replaces
//! the chain of nodes the skipped bits would take (path compression, as in the LC-trie).
//!
//! ```text
//! +-----+------+--------------+---------------------+
//! | len | miss | next: Entry  | key (u32 or u128)   |     one cache line
//! +-----+------+--------------+---------------------+
//! ```
//!
//! A **direct** node consumes `bits` key bits (an even number up to 14) with no population
//! count: it is `2^bits` slots, and position `i`'s entry is slot `i`, which may hold any entry
//! (a lone answer too). It stands where a region is dense (IPv6: a /18 holding many prefixes,
//! down to /32 in one step; a /32 holding many, down to /44), so that a lookup there takes one
//! load for as many bits as two or three nodes would take. Its width travels in its tagged
//! pointer, so the step needs no header:
//!
//! ```text
//! +--------+--------+--------+-- ... --+------------------+
//! | slot 0 | slot 1 | slot 2 |         | slot 2^bits - 1  |     8 << bits bytes, 64-aligned
//! +--------+--------+--------+-- ... --+------------------+
//! ```
//!
//! A published node never changes except through its child slots, which the writer replaces
//! with one atomic store (a rebuilt subtree); the replaced subtree is freed after an epoch
//! grace period. Slots hold [`Entry`]s as tagged pointers: a node (low three bits clear), a skip
//! node (bit 1 set), a direct node (bit 2 set, its width over two in bits 3 to 5), or an answer
//! shifted left by one with the low bit set.
//!
//! A bulk build places its nodes in an [`Arena`] (packed, in huge pages where the kernel
//! allows); an update allocates each node it makes from the global allocator, padded to a
//! cache line. Freeing a subtree frees only the latter; arena nodes go with their arena.
//!
//! This module and [`arena`](super::arena) are the fast structure's only modules with
//! `unsafe`.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

use crossbeam_epoch::Guard;

use super::arena::{Arena, ArenaBuilder};
use crate::key::TrieKey;

/// Where a build places the nodes it makes.
pub(crate) enum Place<'a> {
    /// One allocation per node from the global allocator (updates).
    Heap,
    /// Packed into an arena (bulk builds).
    Arena(&'a mut ArenaBuilder),
}

impl Place<'_> {
    /// Uninitialised room for `layout`.
    fn alloc(&mut self, layout: Layout) -> NonNull<u8> {
        match self {
            Place::Heap => {
                // SAFETY: every layout here has a non-zero size (a node header or a skip).
                let raw = unsafe { alloc(layout) };
                NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout))
            }
            Place::Arena(arena) => arena.alloc_unsplit(layout),
        }
    }

    /// The alignment of a node: a cache line on the heap (so the header and the first slots
    /// come with one miss); eight bytes in an arena, where nodes are packed (but never with
    /// their first 64 bytes across two lines: `ArenaBuilder::alloc_unsplit`).
    fn node_align(&self) -> usize {
        match self {
            Place::Heap => NODE_ALIGN,
            Place::Arena(_) => ARENA_NODE_ALIGN,
        }
    }
}

/// The alignment of a node in an arena.
const ARENA_NODE_ALIGN: usize = 8;

const _: () = assert!(usize::BITS >= 64, "answers are tagged into pointers");

/// The header of a node; its children and leaves follow in the same allocation.
#[repr(C)]
pub(crate) struct Node {
    vector: u64,
    leafvec: u64,
}

/// A slot holding an [`Entry`]: a first-level slot or a node's child slot.
pub(crate) type Slot = AtomicPtr<Node>;

/// A skip node (see the module documentation). The key is stored in `key`'s first bytes as
/// the structure's key type.
#[repr(C, align(64))]
pub(crate) struct Skip {
    len: u8,
    miss: u32,
    next: Slot,
    key: u128,
}

/// What a slot holds: a node, a skip node, or the answer for every key below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Every key below the slot has this answer.
    Leaf(u32),
    /// A node consumes the next six bits.
    Node(NonNull<Node>),
    /// A skip node compares the key with a longer prefix.
    Skip(NonNull<Skip>),
    /// A direct node of `2^bits` slots consumes the next `bits` (even, at most
    /// [`MAX_DIRECT_BITS`]) bits.
    Direct(NonNull<Slot>, u8),
}

/// The tag bit of a pointer to a skip node (bit 0 tags answers).
const SKIP: usize = 2;
/// The tag bit of a pointer to a direct node; bits 3 to 5 hold its width over two.
const DIRECT: usize = 4;
/// The widest direct node (its width over two fits in three bits).
pub(crate) const MAX_DIRECT_BITS: u8 = 14;
/// The alignment of a direct node (its tag and width take the low six bits).
const DIRECT_ALIGN: usize = 64;

impl Entry {
    /// The tagged pointer stored in a slot.
    pub(crate) fn encode(self) -> *mut Node {
        match self {
            Entry::Leaf(a) => ptr::without_provenance_mut(((a as usize) << 1) | 1),
            Entry::Node(n) => n.as_ptr(),
            Entry::Skip(s) => s.as_ptr().map_addr(|a| a | SKIP).cast(),
            Entry::Direct(d, bits) => {
                debug_assert!(bits % 2 == 0 && (2..=MAX_DIRECT_BITS).contains(&bits));
                d.as_ptr()
                    .map_addr(|a| a | DIRECT | (usize::from(bits / 2) << 3))
                    .cast()
            }
        }
    }

    /// The entry a slot's tagged pointer stands for.
    #[inline(always)]
    pub(crate) fn decode(p: *mut Node) -> Entry {
        if p.addr() & 1 == 1 {
            Entry::Leaf((p.addr() >> 1) as u32)
        } else if p.addr() & SKIP != 0 {
            // Skip nodes are 64-byte aligned, so clearing the tag gives the allocation back
            // (with its provenance).
            match NonNull::new(p.map_addr(|a| a & !SKIP).cast::<Skip>()) {
                Some(s) => Entry::Skip(s),
                None => Entry::Leaf(super::NONE),
            }
        } else if p.addr() & DIRECT != 0 {
            let (slots, bits) = raw_direct(p);
            match NonNull::new(slots.cast_mut()) {
                Some(d) => Entry::Direct(d, bits),
                None => Entry::Leaf(super::NONE),
            }
        } else {
            // Node pointers are 64-byte aligned and never null: slots are written only by
            // `encode`, whose leaves have the low bit set.
            match NonNull::new(p) {
                Some(n) => Entry::Node(n),
                None => Entry::Leaf(super::NONE),
            }
        }
    }

    /// Reads a slot.
    #[inline(always)]
    pub(crate) fn load(slot: &Slot) -> Entry {
        Entry::decode(slot.load(Ordering::Acquire))
    }
}

/// Nodes start on a cache line: the header and the first six child slots (or the first
/// twelve leaves of a childless node) are then read with one miss.
const NODE_ALIGN: usize = 64;

fn layout(children: usize, leaves: usize) -> Layout {
    layout_aligned(children, leaves, NODE_ALIGN)
}

fn layout_aligned(children: usize, leaves: usize, align: usize) -> Layout {
    let size = size_of::<Node>() + children * size_of::<Slot>() + leaves * size_of::<u32>();
    Layout::from_size_align(size, align).expect("a node is at most a few hundred bytes")
}

/// Allocates a node with these vectors, child entries (one per set bit of `vector`, in
/// position order) and leaf answers (one per set bit of `leafvec`).
pub(crate) fn new_node(
    place: &mut Place<'_>,
    vector: u64,
    leafvec: u64,
    children: &[Entry],
    leaves: &[u32],
) -> NonNull<Node> {
    assert_eq!(children.len(), vector.count_ones() as usize);
    assert_eq!(leaves.len(), leafvec.count_ones() as usize);
    let layout = layout_aligned(children.len(), leaves.len(), place.node_align());
    let node = place.alloc(layout).cast::<Node>();
    // SAFETY: `node` is fresh room for `layout`, aligned for a `Node`; every byte of it is
    // written below before the pointer is returned: the header, `children.len()` slots right
    // after it and `leaves.len()` answers after those, which is exactly the layout's size.
    unsafe {
        let raw = node.as_ptr();
        raw.write(Node { vector, leafvec });
        let slots = children_ptr(node);
        for (i, c) in children.iter().enumerate() {
            slots.add(i).write(Slot::new(c.encode()));
        }
        let answers = leaves_ptr(node, children.len());
        for (i, &a) in leaves.iter().enumerate() {
            answers.add(i).write(a);
        }
        node
    }
}

/// Allocates a skip node: keys whose first `len` bits equal `key`'s go on to `next` (at
/// depth `len`), every other key below the slot gets `miss`.
pub(crate) fn new_skip<K: TrieKey>(
    place: &mut Place<'_>,
    key: K,
    len: u8,
    miss: u32,
    next: Entry,
) -> NonNull<Skip> {
    const { assert!(size_of::<K>() <= size_of::<u128>() && align_of::<K>() <= align_of::<u128>()) };
    let skip = place.alloc(Layout::new::<Skip>()).cast::<Skip>();
    // SAFETY: `skip` is fresh room for a `Skip`, exclusively owned; it is initialised whole,
    // then its `key` field (room and alignment for a `K`, asserted above) gets the key in its
    // first bytes.
    unsafe {
        skip.as_ptr().write(Skip {
            len,
            miss,
            next: Slot::new(next.encode()),
            key: 0,
        });
        ptr::addr_of_mut!((*skip.as_ptr()).key)
            .cast::<K>()
            .write(key);
    }
    skip
}

fn direct_layout(bits: u8) -> Layout {
    Layout::from_size_align(size_of::<Slot>() << bits, DIRECT_ALIGN)
        .expect("a direct node is at most 128 KiB")
}

/// Allocates a direct node of `2^bits` slots holding `entries` (one per position).
///
/// # Panics
/// If `bits` is odd, zero or above [`MAX_DIRECT_BITS`], or `entries` is not `2^bits` long.
pub(crate) fn new_direct(place: &mut Place<'_>, bits: u8, entries: &[Entry]) -> NonNull<Slot> {
    assert!(bits % 2 == 0 && (2..=MAX_DIRECT_BITS).contains(&bits));
    assert_eq!(entries.len(), 1 << bits);
    let slots = place.alloc(direct_layout(bits)).cast::<Slot>();
    // SAFETY: `slots` is fresh room for `2^bits` slots (`direct_layout`), aligned for them;
    // each is written once here before the pointer is returned.
    unsafe {
        for (i, e) in entries.iter().enumerate() {
            slots.as_ptr().add(i).write(Slot::new(e.encode()));
        }
    }
    slots
}

/// The slot at position `index` (< `2^bits`) of a direct node of `2^bits` slots.
///
/// # Safety
/// `direct` must be live, and `index` below its `2^bits` slots.
pub(crate) unsafe fn direct_slot<'a>(direct: NonNull<Slot>, index: usize) -> &'a Slot {
    // SAFETY: the caller guarantees the node is live and the index in bounds.
    unsafe { &*direct.as_ptr().add(index) }
}

/// The slots and width of the direct node a tagged pointer with [`DIRECT_TAG`] points to.
#[inline(always)]
pub(crate) fn raw_direct(p: *mut Node) -> (*const Slot, u8) {
    let bits = ((p.addr() >> 3) & 7) as u8 * 2;
    (
        p.map_addr(|a| a & !(DIRECT_ALIGN - 1)).cast_const().cast(),
        bits,
    )
}

/// One step through a direct node on its tagged pointer: the raw entry of the slot that the
/// top bits of `rest` pick, and the number of bits it consumed.
///
/// # Safety
/// `p` must carry [`DIRECT_TAG`] and point to a live direct node (published and kept alive
/// by a pinned guard, or owned).
#[inline(always)]
pub(crate) unsafe fn direct_step_raw<K: TrieKey>(p: *mut Node, rest: K) -> (*mut Node, u8) {
    let (slots, bits) = raw_direct(p);
    // The top `bits` (2 to 14) bits, from the top 64 with a `u64` shift.
    let index = (rest.top_u64() >> (64 - bits)) as usize;
    // SAFETY: the caller guarantees a live direct node of `2^bits` slots (its width is in its
    // tag, written by `Entry::encode`); `index` is `bits` bits of the key, below `2^bits`.
    (unsafe { (*slots.add(index)).load(Ordering::Acquire) }, bits)
}

/// One step through a skip node: the next entry and its depth if `key` matches the node's
/// prefix, else the node's answer for every other key.
///
/// # Safety
/// `skip` must be live and built for keys of type `K`.
#[cfg(test)]
pub(crate) unsafe fn skip_step<K: TrieKey>(
    skip: NonNull<Skip>,
    key: K,
) -> Result<(Entry, u8), u32> {
    // SAFETY: the caller guarantees the node is live and holds a `K` in `key`'s first bytes
    // (`new_skip`).
    unsafe {
        let s = skip.as_ref();
        let prefix = ptr::addr_of!(s.key).cast::<K>().read();
        if (key ^ prefix) & K::prefix_mask(s.len) == K::ZERO {
            Ok((Entry::load(&s.next), s.len))
        } else {
            Err(s.miss)
        }
    }
}

/// A skip node's prefix.
///
/// # Safety
/// `skip` must be live and built for keys of type `K`.
pub(crate) unsafe fn skip_prefix<K: TrieKey>(skip: NonNull<Skip>) -> K {
    // SAFETY: the caller guarantees the node is live and holds a `K` (`new_skip`).
    unsafe { ptr::addr_of!((*skip.as_ptr()).key).cast::<K>().read() }
}

/// A skip node's prefix length and next slot.
///
/// # Safety
/// `skip` must be live.
pub(crate) unsafe fn skip_next<'a>(skip: NonNull<Skip>) -> (u8, &'a Slot) {
    // SAFETY: the caller guarantees the node is live.
    unsafe {
        let s = skip.as_ptr();
        ((*s).len, &(*s).next)
    }
}

/// The first child slot of `node`.
#[inline(always)]
fn children_ptr(node: NonNull<Node>) -> *mut Slot {
    // SAFETY: the header is followed by the child slots in the same
    // allocation (`layout`), and `Slot`'s alignment divides the header's size.
    unsafe { node.as_ptr().add(1).cast::<Slot>() }
}

/// The first leaf answer of `node`, which has `children` child slots.
#[inline(always)]
fn leaves_ptr(node: NonNull<Node>, children: usize) -> *mut u32 {
    // SAFETY: the leaves follow the `children` slots in the same allocation.
    unsafe { children_ptr(node).add(children).cast::<u32>() }
}

/// One step of a lookup: the entry at position `index` (< 64) of `node`.
///
/// # Safety
/// `node` must be a live node (published and kept alive by a pinned guard, or owned).
#[inline(always)]
pub(crate) unsafe fn step(node: NonNull<Node>, index: u32) -> Entry {
    // SAFETY: the caller guarantees `node` is live, so its header is readable and its
    // allocation holds popcount(vector) slots and popcount(leafvec) answers. `index < 64`.
    unsafe {
        let head = node.as_ptr().read();
        let bit = 1u64 << index;
        let below = bit - 1;
        if head.vector & bit != 0 {
            let k = (head.vector & below).count_ones() as usize;
            Entry::load(&*children_ptr(node).add(k))
        } else {
            // A leaf position: some leaf position at or before it started a run, so the
            // count is at least one.
            let k = (head.leafvec & (bit | below)).count_ones() as usize;
            let children = head.vector.count_ones() as usize;
            Entry::Leaf(leaves_ptr(node, children).add(k.wrapping_sub(1)).read())
        }
    }
}

/// The address of the answer a lookup reads at leaf position `index` (< 64) of `node` (a
/// diagnostic, [`FastLpm::lookup_path`](super::FastLpm::lookup_path)).
///
/// # Safety
/// `node` must be live.
pub(crate) unsafe fn leaf_addr(node: NonNull<Node>, index: u32) -> usize {
    // SAFETY: the caller guarantees `node` is live; only addresses are computed.
    unsafe {
        let head = node.as_ptr().read();
        let k = (head.leafvec & ((2u64 << index).wrapping_sub(1))).count_ones() as usize;
        leaves_ptr(node, head.vector.count_ones() as usize)
            .wrapping_add(k.wrapping_sub(1))
            .addr()
    }
}

/// The low three bits of a slot's tagged pointer: [`NODE_TAG`], [`SKIP_TAG`], [`DIRECT_TAG`],
/// or an answer (bit 0 set).
pub(crate) const TAG_BITS: usize = 7;
/// The tag of a node pointer (nodes are at least 8-byte aligned).
pub(crate) const NODE_TAG: usize = 0;
/// The tag of a skip-node pointer.
pub(crate) const SKIP_TAG: usize = SKIP;
/// The tag of a direct-node pointer.
pub(crate) const DIRECT_TAG: usize = DIRECT;

/// The answer a tagged pointer with bit 0 set stands for.
#[inline(always)]
pub(crate) fn raw_answer(p: *mut Node) -> u32 {
    (p.addr() >> 1) as u32
}

/// One step of a lookup on a slot's raw tagged pointer `p` (tag [`NODE_TAG`]): `Ok` with the
/// raw entry of the child at position `index` (< 64), or `Err` with the answer of a leaf
/// position. The hot loop's form of [`step`]: no decoding of the tags, no null test (a node
/// pointer is never null: slots are written only by [`Entry::encode`]).
///
/// # Safety
/// `p` must carry [`NODE_TAG`] and point to a live node (published and kept alive by a
/// pinned guard, or owned).
#[inline(always)]
pub(crate) unsafe fn step_raw(p: *mut Node, index: u32) -> Result<*mut Node, u32> {
    // SAFETY: the caller guarantees `p` is a live node's (non-null) pointer, so its header is
    // readable and its allocation holds popcount(vector) slots and popcount(leafvec) answers;
    // `index < 64`, so the counted positions stay within those.
    unsafe {
        let node = NonNull::new_unchecked(p);
        let head = p.read();
        let bit = 1u64 << index;
        let below = bit - 1;
        if head.vector & bit != 0 {
            let k = (head.vector & below).count_ones() as usize;
            Ok((*children_ptr(node).add(k)).load(Ordering::Acquire))
        } else {
            // A leaf position: some leaf position at or before it started a run, so the
            // count is at least one.
            let k = (head.leafvec & (bit | below)).count_ones() as usize;
            let children = head.vector.count_ones() as usize;
            Err(leaves_ptr(node, children).add(k.wrapping_sub(1)).read())
        }
    }
}

/// A node without children whose every position answers [`NONE`](super::NONE): the node a
/// lookup's first step reads in place of a slot that holds no node, so that the step needs
/// no branch on the slot's kind (see `Root::descend`).
#[repr(C)]
struct EmptyNode {
    head: Node,
    leaf: u32,
}

static EMPTY_NODE: EmptyNode = EmptyNode {
    head: Node {
        vector: 0,
        leafvec: 1,
    },
    leaf: super::NONE,
};

/// The raw pointer of the static empty node (tag [`NODE_TAG`]; only ever read).
#[inline(always)]
pub(crate) fn empty_node() -> *mut Node {
    ptr::addr_of!(EMPTY_NODE).cast::<Node>().cast_mut()
}

/// One step through a skip node on its raw (untagged) pointer: as [`skip_step`], with the
/// next entry raw.
///
/// # Safety
/// As for [`skip_step`]: `skip` must point to a live skip node built for keys of type `K`.
#[inline(always)]
pub(crate) unsafe fn skip_step_raw<K: TrieKey>(
    skip: *mut Skip,
    key: K,
) -> Result<(*mut Node, u8), u32> {
    // SAFETY: the caller guarantees the node is live and holds a `K` in `key`'s first bytes
    // (`new_skip`).
    unsafe {
        let s = &*skip;
        let prefix = ptr::addr_of!(s.key).cast::<K>().read();
        if (key ^ prefix) & K::prefix_mask(s.len) == K::ZERO {
            Ok((s.next.load(Ordering::Acquire), s.len))
        } else {
            Err(s.miss)
        }
    }
}

/// The skip node a tagged pointer with [`SKIP_TAG`] points to.
#[inline(always)]
pub(crate) fn raw_skip(p: *mut Node) -> *mut Skip {
    p.map_addr(|a| a & !SKIP).cast()
}

/// Hints the CPU to load the cache line at `addr`.
#[inline(always)]
pub(crate) fn prefetch_addr(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no effect on memory; any address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch(addr.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// The child slot at position `index` of `node`, if that position leads to a child.
///
/// # Safety
/// `node` must be live.
pub(crate) unsafe fn child_slot<'a>(node: NonNull<Node>, index: u32) -> Option<&'a Slot> {
    // SAFETY: the caller guarantees `node` is live; the slot index is below popcount(vector).
    unsafe {
        let head = node.as_ptr().read();
        let bit = 1u64 << index;
        (head.vector & bit != 0)
            .then(|| &*children_ptr(node).add((head.vector & (bit - 1)).count_ones() as usize))
    }
}

/// The bytes the heap nodes below `entry` occupy (allocations padded to their alignment,
/// without the allocator's own headers); nodes in `arena` are counted with the arena.
///
/// # Safety
/// `entry`'s nodes must be live.
pub(crate) unsafe fn heap_bytes(entry: Entry, arena: &Arena) -> usize {
    // SAFETY: the caller guarantees the entry's nodes are live, and so are their children (a
    // published node's children are retired only with or after it).
    unsafe {
        match entry {
            Entry::Leaf(_) => 0,
            Entry::Node(node) => {
                let head = node.as_ptr().read();
                let children = head.vector.count_ones() as usize;
                let mut bytes = if arena.contains(node.as_ptr()) {
                    0
                } else {
                    layout(children, head.leafvec.count_ones() as usize)
                        .pad_to_align()
                        .size()
                };
                for i in 0..children {
                    bytes += heap_bytes(Entry::load(&*children_ptr(node).add(i)), arena);
                }
                bytes
            }
            Entry::Skip(s) => {
                let own = if arena.contains(s.as_ptr()) {
                    0
                } else {
                    size_of::<Skip>()
                };
                own + heap_bytes(Entry::load(skip_next(s).1), arena)
            }
            Entry::Direct(d, bits) => {
                let mut bytes = if arena.contains(d.as_ptr()) {
                    0
                } else {
                    direct_layout(bits).size()
                };
                for i in 0..1 << bits {
                    bytes += heap_bytes(Entry::load(direct_slot(d, i)), arena);
                }
                bytes
            }
        }
    }
}

/// Frees the heap nodes below `entry` now (nothing for an answer); nodes in `arena` are left
/// to it, but their children are visited.
///
/// # Safety
/// No one may use the subtree any more: it is owned by the caller (never published), or it
/// was unlinked and every reader that could have reached it has unpinned; `arena` must be
/// the live arena its build placed nodes in (or an empty one).
pub(crate) unsafe fn free_entry(entry: Entry, arena: &Arena) {
    // SAFETY: by the caller's guarantee the subtree is exclusively ours and arena nodes are
    // still readable; each heap node is freed once, with the layout it was allocated with
    // (recomputed from its vectors; heap nodes are always cache-line aligned, `Place::Heap`),
    // after its children.
    unsafe {
        match entry {
            Entry::Leaf(_) => {}
            Entry::Node(node) => {
                let head = node.as_ptr().read();
                let children = head.vector.count_ones() as usize;
                for i in 0..children {
                    free_entry(
                        Entry::decode((*children_ptr(node).add(i)).load(Ordering::Relaxed)),
                        arena,
                    );
                }
                if !arena.contains(node.as_ptr()) {
                    dealloc(
                        node.as_ptr().cast(),
                        layout(children, head.leafvec.count_ones() as usize),
                    );
                }
            }
            Entry::Skip(s) => {
                free_entry(Entry::decode(skip_next(s).1.load(Ordering::Relaxed)), arena);
                if !arena.contains(s.as_ptr()) {
                    dealloc(s.as_ptr().cast(), Layout::new::<Skip>());
                }
            }
            Entry::Direct(d, bits) => {
                for i in 0..1 << bits {
                    free_entry(
                        Entry::decode(direct_slot(d, i).load(Ordering::Relaxed)),
                        arena,
                    );
                }
                if !arena.contains(d.as_ptr()) {
                    dealloc(d.as_ptr().cast(), direct_layout(bits));
                }
            }
        }
    }
}

/// Every position's entry of `node`.
///
/// # Safety
/// `node` must be live.
pub(crate) unsafe fn entries(node: NonNull<Node>) -> [Entry; 64] {
    // SAFETY: the caller guarantees `node` is live; positions are below 64.
    std::array::from_fn(|i| unsafe { step(node, i as u32) })
}

/// Frees `node` alone (not its children, which a replacement node took over) once every
/// reader pinned now has unpinned; a node in `arena` stays there.
///
/// # Safety
/// `node` must have been unlinked, and its children must stay owned by another node.
pub(crate) unsafe fn retire_shallow(node: NonNull<Node>, arena: &Arena, guard: &Guard) {
    if arena.contains(node.as_ptr()) {
        return;
    }
    let n = SendNode(node);
    // SAFETY: the node is unlinked, so only readers pinned before this call can hold it; the
    // closure runs after all of them have unpinned, and frees the node's own allocation once,
    // with the layout it was allocated with.
    unsafe {
        guard.defer_unchecked(move || {
            let n = n;
            let head = n.0.as_ptr().read();
            let layout = layout(
                head.vector.count_ones() as usize,
                head.leafvec.count_ones() as usize,
            );
            dealloc(n.0.as_ptr().cast(), layout);
        });
    }
}

struct SendNode(NonNull<Node>);
// SAFETY: an unlinked subtree is plain memory that any thread may free once readers are gone.
unsafe impl Send for SendNode {}

struct SendEntry(Entry);
// SAFETY: as for `SendNode`.
unsafe impl Send for SendEntry {}

/// Frees the heap nodes below `entry` (if any) once every reader pinned now has unpinned;
/// the closure that does it keeps `arena` (where the build placed the other nodes) alive.
///
/// # Safety
/// `entry`'s nodes must have been unlinked (no slot reachable by a new reader holds them),
/// and must not be retired twice; `arena` must be the arena of the build that made them.
pub(crate) unsafe fn retire(entry: Entry, arena: &Arc<Arena>, guard: &Guard) {
    if matches!(entry, Entry::Leaf(_)) {
        return;
    }
    let e = SendEntry(entry);
    let arena = Arc::clone(arena);
    // SAFETY: the nodes are unlinked, so only readers pinned before this call can hold them;
    // the closure runs after all of them have unpinned, and frees them once; the arena it
    // holds keeps arena nodes readable until then.
    unsafe {
        guard.defer_unchecked(move || {
            let e = e;
            free_entry(e.0, &arena);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_and_children_round_trip() {
        // Positions 0..=9 answer 7, 10 is a child, 11..=63 answer 9.
        let child = new_node(&mut Place::Heap, 0, 1, &[], &[42]);
        let vector = 1 << 10;
        let leafvec = 1 | (1 << 11);
        let node = new_node(
            &mut Place::Heap,
            vector,
            leafvec,
            &[Entry::Node(child)],
            &[7, 9],
        );
        // SAFETY: both nodes are owned here and freed at the end.
        unsafe {
            assert_eq!(step(node, 0), Entry::Leaf(7));
            assert_eq!(step(node, 9), Entry::Leaf(7));
            assert_eq!(step(node, 10), Entry::Node(child));
            assert_eq!(step(child, 63), Entry::Leaf(42));
            assert_eq!(step(node, 11), Entry::Leaf(9));
            assert_eq!(step(node, 63), Entry::Leaf(9));
            // The hot loop's raw form: a child's tagged pointer, or a leaf's answer.
            let raw = Entry::Node(node).encode();
            assert_eq!(raw.addr() & TAG_BITS, NODE_TAG);
            assert_eq!(step_raw(raw, 9), Err(7));
            assert_eq!(step_raw(raw, 10), Ok(Entry::Node(child).encode()));
            assert_eq!(step_raw(raw, 63), Err(9));
            assert_eq!(step_raw(child.as_ptr(), 0), Err(42));
            assert_eq!(raw_answer(Entry::Leaf(77).encode()), 77);
            // The static empty node answers NONE everywhere and has no child.
            for i in [0, 17, 63] {
                assert_eq!(step_raw(empty_node(), i), Err(crate::fast::NONE));
            }
            assert!(child_slot(node, 10).is_some());
            assert!(child_slot(node, 11).is_none());
            // The diagnostic's answer addresses: the run each leaf position falls in.
            let leaves = leaves_ptr(node, 1);
            assert_eq!(leaf_addr(node, 0), leaves.addr());
            assert_eq!(leaf_addr(node, 9), leaves.addr());
            assert_eq!(leaf_addr(node, 11), leaves.add(1).addr());
            assert_eq!(leaf_addr(node, 63), leaves.add(1).addr());
            assert_eq!(leaf_addr(child, 63), leaves_ptr(child, 0).addr());
            // Two nodes, each padded to its cache line.
            let none = Arena::default();
            assert_eq!(heap_bytes(Entry::Node(node), &none), 2 * NODE_ALIGN);
            free_entry(Entry::Node(node), &none);
        }
    }

    #[test]
    fn skip_nodes_compare_their_prefix() {
        // 10.1.2.0/24 (answer 5) below the skip's 10.1.0.0/16; other keys answer 9.
        let next = new_node(&mut Place::Heap, 0, 1, &[], &[5]);
        let skip = new_skip(&mut Place::Heap, 0x0a01_0200u32, 24, 9, Entry::Node(next));
        let entry = Entry::Skip(skip);
        assert_eq!(Entry::decode(entry.encode()), entry);
        // SAFETY: the nodes are owned here and freed at the end.
        unsafe {
            assert_eq!(skip_step(skip, 0x0a01_02ffu32), Ok((Entry::Node(next), 24)));
            assert_eq!(skip_step(skip, 0x0a01_0300u32), Err(9));
            let raw = entry.encode();
            assert_eq!(raw.addr() & TAG_BITS, SKIP_TAG);
            assert_eq!(
                skip_step_raw(raw_skip(raw), 0x0a01_02ffu32),
                Ok((Entry::Node(next).encode(), 24))
            );
            assert_eq!(skip_step_raw(raw_skip(raw), 0x0a01_0300u32), Err(9));
            assert_eq!(skip_prefix::<u32>(skip), 0x0a01_0200);
            assert_eq!(heap_bytes(entry, &Arena::default()), 64 + NODE_ALIGN);
            free_entry(entry, &Arena::default());
        }
        // An IPv6 skip to a lone answer.
        let key = 0x2001_0db8_0001_u128 << 80;
        let skip = new_skip(&mut Place::Heap, key, 48, 1, Entry::Leaf(2));
        // SAFETY: as above.
        unsafe {
            assert_eq!(skip_step(skip, key | 77), Ok((Entry::Leaf(2), 48)));
            assert_eq!(skip_step(skip, key ^ (1 << 80)), Err(1));
            free_entry(Entry::Skip(skip), &Arena::default());
        }
    }

    #[test]
    fn direct_nodes_index_their_slots() {
        // A direct node of four bits (16 slots): answers, a node and a nested direct node of
        // two bits; the width travels in the tagged pointer.
        let leafy = new_node(&mut Place::Heap, 0, 1 | 1 << 32, &[], &[5, 6]);
        let inner = new_direct(
            &mut Place::Heap,
            2,
            &[
                Entry::Leaf(1),
                Entry::Leaf(2),
                Entry::Leaf(3),
                Entry::Node(leafy),
            ],
        );
        let mut entries = [Entry::Leaf(9); 16];
        entries[3] = Entry::Direct(inner, 2);
        entries[15] = Entry::Leaf(10);
        let outer = new_direct(&mut Place::Heap, 4, &entries);
        let entry = Entry::Direct(outer, 4);
        assert_eq!(Entry::decode(entry.encode()), entry);
        let raw = entry.encode();
        assert_eq!(raw.addr() & TAG_BITS, DIRECT_TAG);
        assert_eq!(raw_direct(raw), (outer.as_ptr().cast_const(), 4));
        // SAFETY: the nodes are owned here and freed at the end.
        unsafe {
            // Key bits 0011 pick slot 3 (the inner node), then 11 its node.
            let key = 0b00_1111_u32 << 26;
            let (next, bits) = direct_step_raw(raw, key);
            assert_eq!((Entry::decode(next), bits), (Entry::Direct(inner, 2), 4));
            let (next, bits) = direct_step_raw(next, key << 4);
            assert_eq!((Entry::decode(next), bits), (Entry::Node(leafy), 2));
            assert_eq!(step_raw(next, 40), Err(6));
            let (next, _) = direct_step_raw(raw, 0xf000_0000u32);
            assert_eq!(raw_answer(next), 10);
            let (next, _) = direct_step_raw(raw, 0u32);
            assert_eq!(raw_answer(next), 9);
            assert_eq!(Entry::load(direct_slot(outer, 3)), Entry::Direct(inner, 2));
            // 16 and 4 slots of eight bytes, and one node padded to its cache line.
            assert_eq!(heap_bytes(entry, &Arena::default()), 128 + 32 + NODE_ALIGN);
            free_entry(entry, &Arena::default());
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "a wide root's 2^18 slots take minutes; Miri checks `direct_select` below"
    )]
    fn ipv6_lookups_read_direct_slots_without_branching() {
        use super::super::{FIRST_DIRECT_BITS, Root, SECOND_DIRECT_BITS, direct_select, wide_bits};
        // A wide IPv6 root whose slot 0x2001 holds a first direct node (14 bits, /18 to
        // /32), whose slot 3 holds a second (12 bits, /32 to /44), whose slot 1 holds a
        // node: the lookup's branch-free path, with the widths fixed by depth.
        let root = Root::<u128>::empty(wide_bits::<u128>(), None);
        let leafy = new_node(&mut Place::Heap, 0, 1 | 1 << 32, &[], &[5, 6]);
        let mut second = vec![Entry::Leaf(4); 1 << SECOND_DIRECT_BITS];
        second[0] = Entry::Leaf(1);
        second[1] = Entry::Node(leafy);
        second[2] = Entry::Leaf(3);
        let second = new_direct(&mut Place::Heap, SECOND_DIRECT_BITS, &second);
        let mut first = vec![Entry::Leaf(9); 1 << FIRST_DIRECT_BITS];
        first[3] = Entry::Direct(second, SECOND_DIRECT_BITS);
        let first = new_direct(&mut Place::Heap, FIRST_DIRECT_BITS, &first);
        root.slots()[0x2001].store(
            Entry::Direct(first, FIRST_DIRECT_BITS).encode(),
            Ordering::Relaxed,
        );
        root.slots()[0x2002].store(Entry::Leaf(7).encode(), Ordering::Relaxed);
        // The key's top 50 bits: slot (18), first (14), second (12), node position (6).
        let key = |slot: u128, first: u128, second: u128, pos: u128| {
            ((slot << 32) | (first << 18) | (second << 6) | pos) << 78
        };
        assert_eq!(root.descend(key(0x2001, 3, 1, 40)), Some(6));
        assert_eq!(root.descend(key(0x2001, 3, 1, 0)), Some(5));
        assert_eq!(root.descend(key(0x2001, 3, 2, 0)), Some(3));
        assert_eq!(root.descend(key(0x2001, 3, 0xfff, 63)), Some(4));
        assert_eq!(root.descend(key(0x2001, 5, 1, 0)), Some(9));
        assert_eq!(root.descend(key(0x2001, 0x3fff, 0xfff, 63)), Some(9));
        assert_eq!(root.descend(key(0x2002, 3, 1, 40)), Some(7));
        assert_eq!(root.descend(key(0x2003, 0, 0, 0)), None);
        // A step from an entry that is no direct node reads its slot again.
        let slot: *const Slot = &root.slots()[0x2002];
        // SAFETY: `slot` is a live slot of `root`, and the entry is the one it holds.
        let (p, at, direct) =
            unsafe { direct_select::<32, FIRST_DIRECT_BITS>(Entry::Leaf(7).encode(), slot, 77) };
        assert_eq!((raw_answer(p), at, direct), (7, slot, false));
        // Dropping the root frees the direct nodes and the node (Miri checks it).
        drop(root);
    }

    #[test]
    fn direct_select_reads_fixed_width_slots() {
        use super::super::{FIRST_DIRECT_BITS, SECOND_DIRECT_BITS, direct_select};
        // The lookup's two direct steps on their own (a wide root is too large for Miri): a
        // slot holding a first direct node (14 bits), whose slot 3 holds a second (12 bits).
        let mut second = vec![Entry::Leaf(4); 1 << SECOND_DIRECT_BITS];
        second[0xabc] = Entry::Leaf(1);
        let second = new_direct(&mut Place::Heap, SECOND_DIRECT_BITS, &second);
        let mut first = vec![Entry::Leaf(9); 1 << FIRST_DIRECT_BITS];
        first[3] = Entry::Direct(second, SECOND_DIRECT_BITS);
        let first = new_direct(&mut Place::Heap, FIRST_DIRECT_BITS, &first);
        let entry = Entry::Direct(first, FIRST_DIRECT_BITS);
        let slot = Slot::new(entry.encode());
        // The key's top 64 bits: 18 (any), 14 (first), 12 (second), the rest.
        let top = |first: u64, second: u64| (0x2001 << 46) | (first << 32) | (second << 20) | 77;
        let walk = |top: u64| {
            let at: *const Slot = &slot;
            // SAFETY: `slot` and the direct nodes are owned here and live; the widths are the
            // ones `direct_bits` gives at depths 18 and 32.
            unsafe {
                let (p, at, one) = direct_select::<32, FIRST_DIRECT_BITS>(entry.encode(), at, top);
                let (p, _, two) = direct_select::<44, SECOND_DIRECT_BITS>(p, at, top);
                (raw_answer(p), one, two)
            }
        };
        assert_eq!(walk(top(3, 0xabc)), (1, true, true));
        assert_eq!(walk(top(3, 0xfff)), (4, true, true));
        assert_eq!(walk(top(0x3fff, 0xabc)), (9, true, false));
        assert_eq!(walk(top(0, 0)), (9, true, false));
        // SAFETY: the nodes are owned here, and freed once.
        unsafe { free_entry(entry, &Arena::default()) };
    }

    #[test]
    fn tagged_entries() {
        for a in [0, 1, 12345, u32::MAX - 1, u32::MAX] {
            assert_eq!(Entry::decode(Entry::Leaf(a).encode()), Entry::Leaf(a));
        }
    }

    #[test]
    fn arena_nodes_are_packed_and_left_to_their_arena() {
        // A skip and two nodes in an arena, with a heap node patched in below them (as an
        // update does): freeing the subtree frees the heap node only (Miri checks both that
        // nothing leaks and that nothing is freed twice).
        let mut builder = ArenaBuilder::default();
        let mut place = Place::Arena(&mut builder);
        let leafy = new_node(&mut place, 0, 1 | 1 << 5, &[], &[3, 4]);
        let parent = new_node(&mut place, 1 << 1, 1, &[Entry::Node(leafy)], &[8]);
        let skip = new_skip(&mut place, 0x0a00_0000u32, 12, 1, Entry::Node(parent));
        let arena = Arc::new(builder.finish());
        // Packed: 16 + 8 bytes, then 16 + 2 * 4 bytes (each rounded to eight), then the
        // skip on its own cache line.
        assert_eq!(parent.as_ptr().addr() - leafy.as_ptr().addr(), 24);
        assert_eq!(skip.as_ptr().addr() % 64, 0);
        assert!(arena.contains(leafy.as_ptr()) && arena.contains(skip.as_ptr()));
        let heap = new_node(&mut Place::Heap, 0, 1, &[], &[9]);
        // SAFETY: the nodes are owned here; the arena outlives every use of its nodes.
        unsafe {
            assert_eq!(step(parent, 0), Entry::Leaf(8));
            assert_eq!(step(parent, 1), Entry::Node(leafy));
            assert_eq!(step(leafy, 4), Entry::Leaf(3));
            assert_eq!(step(leafy, 5), Entry::Leaf(4));
            let old = Entry::decode(
                child_slot(parent, 1)
                    .unwrap()
                    .swap(Entry::Node(heap).encode(), Ordering::AcqRel),
            );
            assert_eq!(old, Entry::Node(leafy));
            assert_eq!(heap_bytes(Entry::Skip(skip), &arena), NODE_ALIGN);
            // Retiring arena nodes is a no-op; the subtree's heap node is freed with it.
            // (An arena node is never deferred, so no pinned guard is needed; and Miri's
            // Stacked Borrows flags crossbeam-epoch's own participant list, not this code.)
            retire_shallow(leafy, &arena, crossbeam_epoch::unprotected());
            free_entry(Entry::Skip(skip), &arena);
        }
    }
}
