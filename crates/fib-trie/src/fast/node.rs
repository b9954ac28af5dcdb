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
//! A published node never changes except through its child slots, which the writer replaces
//! with one atomic store (a rebuilt subtree); the replaced subtree is freed after an epoch
//! grace period. Slots hold [`Entry`]s as tagged pointers: a node, a skip node (bit 1 set), or
//! an answer shifted left by one with the low bit set.
//!
//! This is the fast structure's only module with `unsafe`.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use crossbeam_epoch::Guard;

use crate::key::TrieKey;

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
}

/// The tag bit of a pointer to a skip node (bit 0 tags answers).
const SKIP: usize = 2;

impl Entry {
    /// The tagged pointer stored in a slot.
    pub(crate) fn encode(self) -> *mut Node {
        match self {
            Entry::Leaf(a) => ptr::without_provenance_mut(((a as usize) << 1) | 1),
            Entry::Node(n) => n.as_ptr(),
            Entry::Skip(s) => s.as_ptr().map_addr(|a| a | SKIP).cast(),
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
    let size = size_of::<Node>() + children * size_of::<Slot>() + leaves * size_of::<u32>();
    Layout::from_size_align(size, NODE_ALIGN).expect("a node is at most a few hundred bytes")
}

/// Allocates a node with these vectors, child entries (one per set bit of `vector`, in
/// position order) and leaf answers (one per set bit of `leafvec`).
pub(crate) fn new_node(
    vector: u64,
    leafvec: u64,
    children: &[Entry],
    leaves: &[u32],
) -> NonNull<Node> {
    assert_eq!(children.len(), vector.count_ones() as usize);
    assert_eq!(leaves.len(), leafvec.count_ones() as usize);
    let layout = layout(children.len(), leaves.len());
    // SAFETY: the layout has a non-zero size (the header); every byte of the allocation is
    // written below before the pointer is returned: the header, `children.len()` slots right
    // after it and `leaves.len()` answers after those, which is exactly the layout's size.
    unsafe {
        let raw = alloc(layout).cast::<Node>();
        let Some(node) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
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
pub(crate) fn new_skip<K: TrieKey>(key: K, len: u8, miss: u32, next: Entry) -> NonNull<Skip> {
    const { assert!(size_of::<K>() <= size_of::<u128>() && align_of::<K>() <= align_of::<u128>()) };
    let skip = Box::into_raw(Box::new(Skip {
        len,
        miss,
        next: Slot::new(next.encode()),
        key: 0,
    }));
    // SAFETY: `skip` is a fresh, exclusively owned allocation; its `key` field has room and
    // alignment for a `K` (asserted above), which is written into its first bytes.
    unsafe {
        ptr::addr_of_mut!((*skip).key).cast::<K>().write(key);
        NonNull::new_unchecked(skip)
    }
}

/// One step through a skip node: the next entry and its depth if `key` matches the node's
/// prefix, else the node's answer for every other key.
///
/// # Safety
/// `skip` must be live and built for keys of type `K`.
#[inline(always)]
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

/// The bytes `node` and its subtree occupy (allocations padded to their alignment, without
/// the allocator's own headers).
///
/// # Safety
/// `node` must be live.
pub(crate) unsafe fn subtree_bytes(node: NonNull<Node>) -> usize {
    // SAFETY: the caller guarantees `node` is live, and so are its children (a published
    // node's children are retired only with or after it).
    unsafe {
        let head = node.as_ptr().read();
        let children = head.vector.count_ones() as usize;
        let mut bytes = layout(children, head.leafvec.count_ones() as usize)
            .pad_to_align()
            .size();
        for i in 0..children {
            bytes += entry_bytes(Entry::load(&*children_ptr(node).add(i)));
        }
        bytes
    }
}

/// The bytes the nodes below `entry` occupy (none for an answer).
///
/// # Safety
/// `entry`'s nodes must be live.
pub(crate) unsafe fn entry_bytes(entry: Entry) -> usize {
    // SAFETY: the caller guarantees the entry's nodes are live.
    unsafe {
        match entry {
            Entry::Leaf(_) => 0,
            Entry::Node(n) => subtree_bytes(n),
            Entry::Skip(s) => size_of::<Skip>() + entry_bytes(Entry::load(skip_next(s).1)),
        }
    }
}

/// Frees `node` and its whole subtree now.
///
/// # Safety
/// No one may use the subtree any more: it is owned by the caller (never published), or it
/// was unlinked and every reader that could have reached it has unpinned.
pub(crate) unsafe fn free_subtree(node: NonNull<Node>) {
    // SAFETY: by the caller's guarantee the subtree is exclusively ours; each node is freed
    // once, with the layout it was allocated with (recomputed from its vectors).
    unsafe {
        let head = node.as_ptr().read();
        let children = head.vector.count_ones() as usize;
        for i in 0..children {
            free_entry(Entry::decode(
                (*children_ptr(node).add(i)).load(Ordering::Relaxed),
            ));
        }
        dealloc(
            node.as_ptr().cast(),
            layout(children, head.leafvec.count_ones() as usize),
        );
    }
}

/// Frees the nodes below `entry` now (nothing for an answer).
///
/// # Safety
/// As for [`free_subtree`].
pub(crate) unsafe fn free_entry(entry: Entry) {
    // SAFETY: by the caller's guarantee the entry's nodes are exclusively ours; a skip node
    // was allocated as a `Box<Skip>` (`new_skip`) and is freed once, after what follows it.
    unsafe {
        match entry {
            Entry::Leaf(_) => {}
            Entry::Node(n) => free_subtree(n),
            Entry::Skip(s) => {
                free_entry(Entry::decode(skip_next(s).1.load(Ordering::Relaxed)));
                drop(Box::from_raw(s.as_ptr()));
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
/// reader pinned now has unpinned.
///
/// # Safety
/// `node` must have been unlinked, and its children must stay owned by another node.
pub(crate) unsafe fn retire_shallow(node: NonNull<Node>, guard: &Guard) {
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

/// Frees the nodes below `entry` (if any) once every reader pinned now has unpinned.
///
/// # Safety
/// `entry`'s nodes must have been unlinked (no slot reachable by a new reader holds them),
/// and must not be retired twice.
pub(crate) unsafe fn retire(entry: Entry, guard: &Guard) {
    if matches!(entry, Entry::Leaf(_)) {
        return;
    }
    let e = SendEntry(entry);
    // SAFETY: the nodes are unlinked, so only readers pinned before this call can hold them;
    // the closure runs after all of them have unpinned, and frees them once.
    unsafe {
        guard.defer_unchecked(move || {
            let e = e;
            free_entry(e.0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_and_children_round_trip() {
        // Positions 0..=9 answer 7, 10 is a child, 11..=63 answer 9.
        let child = new_node(0, 1, &[], &[42]);
        let vector = 1 << 10;
        let leafvec = 1 | (1 << 11);
        let node = new_node(vector, leafvec, &[Entry::Node(child)], &[7, 9]);
        // SAFETY: both nodes are owned here and freed at the end.
        unsafe {
            assert_eq!(step(node, 0), Entry::Leaf(7));
            assert_eq!(step(node, 9), Entry::Leaf(7));
            assert_eq!(step(node, 10), Entry::Node(child));
            assert_eq!(step(child, 63), Entry::Leaf(42));
            assert_eq!(step(node, 11), Entry::Leaf(9));
            assert_eq!(step(node, 63), Entry::Leaf(9));
            assert!(child_slot(node, 10).is_some());
            assert!(child_slot(node, 11).is_none());
            // Two nodes, each padded to its cache line.
            assert_eq!(subtree_bytes(node), 2 * NODE_ALIGN);
            free_subtree(node);
        }
    }

    #[test]
    fn skip_nodes_compare_their_prefix() {
        // 10.1.2.0/24 (answer 5) below the skip's 10.1.0.0/16; other keys answer 9.
        let next = new_node(0, 1, &[], &[5]);
        let skip = new_skip(0x0a01_0200u32, 24, 9, Entry::Node(next));
        let entry = Entry::Skip(skip);
        assert_eq!(Entry::decode(entry.encode()), entry);
        // SAFETY: the nodes are owned here and freed at the end.
        unsafe {
            assert_eq!(skip_step(skip, 0x0a01_02ffu32), Ok((Entry::Node(next), 24)));
            assert_eq!(skip_step(skip, 0x0a01_0300u32), Err(9));
            assert_eq!(skip_prefix::<u32>(skip), 0x0a01_0200);
            assert_eq!(entry_bytes(entry), 64 + NODE_ALIGN);
            free_entry(entry);
        }
        // An IPv6 skip to a lone answer.
        let key = 0x2001_0db8_0001_u128 << 80;
        let skip = new_skip(key, 48, 1, Entry::Leaf(2));
        // SAFETY: as above.
        unsafe {
            assert_eq!(skip_step(skip, key | 77), Ok((Entry::Leaf(2), 48)));
            assert_eq!(skip_step(skip, key ^ (1 << 80)), Err(1));
            free_entry(Entry::Skip(skip));
        }
    }

    #[test]
    fn tagged_entries() {
        for a in [0, 1, 12345, u32::MAX - 1, u32::MAX] {
            assert_eq!(Entry::decode(Entry::Leaf(a).encode()), Entry::Leaf(a));
        }
    }
}
