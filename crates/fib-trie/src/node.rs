//! The one node type of the trie (the kernel's `key_vector`), its memory layout, and the
//! writer's primitives on it.
//!
//! A node is a leaf when `bits == 0` and a tnode otherwise. Each node is ONE heap allocation
//! that starts with the common header [`Node`] (key, pos, bits, slen):
//! - a tnode continues with its two bookkeeping counters and then its `2^bits` child slots
//!   inline (like the kernel's `tnode` with `key_vector.tnode[]`), so a lookup that has read a
//!   tnode's header finds the child pointer in the same or the next cache line;
//! - a leaf continues with its alias count and then its aliases inline, sorted by suffix length.
//!
//! Everything but the child slots, the suffix length and the tnode's counters is immutable once
//! a node is published; a leaf is immutable as a whole (changing its aliases publishes a new
//! leaf). Nodes are reached through [`NodeRef`], a copyable raw pointer tied to the epoch guard
//! that keeps the node alive; it reads the header through `Deref` and the tail (children or
//! aliases) through the raw pointer, whose provenance covers the whole allocation.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, handle_alloc_error};
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, Ordering};

use crossbeam_epoch::Guard;

use crate::key::TrieKey;

/// One prefix hanging off a leaf: its suffix length and the caller's value.
///
/// All aliases of a leaf share the leaf's key (the prefix's masked address); they differ in
/// suffix length (`10.0.0.0/8` has `slen` 24, `10.0.0.0/16` has 16) and in whatever the value
/// holds. A leaf keeps them sorted by `slen` ascending: the longest prefix first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias<V> {
    /// The suffix length: key width minus prefix length.
    pub slen: u8,
    /// The payload (for [`FibTable`](crate::FibTable), a [`FibAlias`](crate::FibAlias)).
    pub value: V,
}

/// The header every node starts with: the kernel's `key_vector` without its tail.
#[repr(C)]
pub(crate) struct Node<K, V> {
    /// For a leaf, the prefix address; for a tnode, the common bits above `pos + bits`, zero below.
    pub(crate) key: K,
    /// The lowest key bit this node consumes (0 for leaves).
    pub(crate) pos: u8,
    /// How many key bits index the children (0 for leaves).
    pub(crate) bits: u8,
    /// The largest suffix length of any alias below; for a tnode never less than `pos`.
    /// Readers may see a value larger than the truth, never smaller (see `trie` for the order).
    pub(crate) slen: AtomicU8,
    /// The node owns values of `V` (in its leaves), for auto traits and drop checking.
    _values: PhantomData<V>,
}

/// A tnode's allocation: header, counters, then `2^bits` [`Child`] slots.
#[repr(C)]
struct TnodeHead<K, V> {
    node: Node<K, V>,
    /// Children that are null (writer bookkeeping, like `tn_info.empty_children`).
    empty_children: AtomicU32,
    /// Children that are tnodes consuming the bits right below this node's (no skipped bits).
    full_children: AtomicU32,
}

/// A leaf's allocation: header, alias count, then the aliases.
#[repr(C)]
struct LeafHead<K, V> {
    node: Node<K, V>,
    len: u32,
}

/// A child slot of a tnode (and the trie's root slot): null or a published node.
pub(crate) type Child<K, V> = AtomicPtr<Node<K, V>>;

/// Where the child slots start in a tnode allocation.
const fn children_offset<K, V>() -> usize {
    size_of::<TnodeHead<K, V>>().next_multiple_of(align_of::<Child<K, V>>())
}

/// Where the aliases start in a leaf allocation.
const fn aliases_offset<K, V>() -> usize {
    size_of::<LeafHead<K, V>>().next_multiple_of(align_of::<Alias<V>>())
}

/// The allocation of a tnode with `2^bits` children.
fn tnode_layout<K, V>(bits: u8) -> Layout {
    let size = children_offset::<K, V>() + (size_of::<Child<K, V>>() << bits);
    let align = align_of::<TnodeHead<K, V>>().max(align_of::<Child<K, V>>());
    Layout::from_size_align(size, align).expect("tnode layout fits in memory")
}

/// The allocation of a leaf with `len` aliases.
fn leaf_layout<K, V>(len: usize) -> Layout {
    let size = aliases_offset::<K, V>() + size_of::<Alias<V>>() * len;
    let align = align_of::<LeafHead<K, V>>().max(align_of::<Alias<V>>());
    Layout::from_size_align(size, align).expect("leaf layout fits in memory")
}

/// The bytes a node's allocation takes (for statistics).
pub(crate) fn node_bytes<K: TrieKey, V>(n: NodeRef<'_, K, V>) -> usize {
    if n.is_leaf() {
        leaf_layout::<K, V>(n.aliases().len()).size()
    } else {
        tnode_layout::<K, V>(n.bits).size()
    }
}

/// A published (or freshly built, not yet published) node, valid for `'g`.
///
/// A raw pointer rather than a reference: the header is read through `Deref`, the tail through
/// the pointer, whose provenance is the whole allocation.
pub(crate) struct NodeRef<'g, K, V> {
    ptr: NonNull<Node<K, V>>,
    _life: PhantomData<&'g Node<K, V>>,
}

impl<K, V> Clone for NodeRef<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for NodeRef<'_, K, V> {}

/// Identity: the same node.
impl<K, V> PartialEq for NodeRef<'_, K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}

impl<'g, K, V> Deref for NodeRef<'g, K, V> {
    type Target = Node<K, V>;

    #[inline(always)]
    fn deref(&self) -> &Node<K, V> {
        // SAFETY: a `NodeRef<'g>` is only made from a live node (published under a guard that
        // outlives `'g`, or freshly allocated by the writer), which is not freed before `'g`
        // ends; the header is initialized at allocation and only changes through atomics.
        unsafe { self.ptr.as_ref() }
    }
}

impl<'g, K: TrieKey, V> NodeRef<'g, K, V> {
    /// Wraps a non-null node pointer.
    ///
    /// # Safety
    /// `ptr` must be null or point to a live node that stays allocated for `'g`.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(ptr: *mut Node<K, V>) -> Option<Self> {
        NonNull::new(ptr).map(|ptr| NodeRef {
            ptr,
            _life: PhantomData,
        })
    }

    /// The pointer to store in a child slot.
    #[inline(always)]
    pub(crate) fn as_ptr(self) -> *mut Node<K, V> {
        self.ptr.as_ptr()
    }

    /// An empty tnode (the kernel's `tnode_new`): the key keeps only the bits above `pos + bits`.
    /// Unpublished until the writer stores it in a slot.
    pub(crate) fn new_tnode(key: K, pos: u8, bits: u8) -> Self {
        debug_assert!(bits > 0 && usize::from(bits) < usize::BITS as usize - 4);
        let shift = pos + bits;
        let key = key.shr(shift).shl(shift);
        let layout = tnode_layout::<K, V>(bits);
        // SAFETY: the layout has a non-zero size (it holds at least the header).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(raw) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        let head = raw.cast::<TnodeHead<K, V>>();
        // SAFETY: `raw` is a fresh allocation of `tnode_layout(bits)`, aligned for the head and
        // large enough for it; the child slots behind it are zeroed, which is a null
        // `AtomicPtr`.
        unsafe {
            head.as_ptr().write(TnodeHead {
                node: Node {
                    key,
                    pos,
                    bits,
                    slen: AtomicU8::new(pos),
                    _values: PhantomData,
                },
                empty_children: AtomicU32::new(1 << bits),
                full_children: AtomicU32::new(0),
            });
        }
        NodeRef {
            ptr: raw.cast(),
            _life: PhantomData,
        }
    }

    /// A leaf holding `aliases` (sorted by `slen`). Unpublished until stored in a slot.
    pub(crate) fn new_leaf(key: K, aliases: Vec<Alias<V>>) -> Self {
        let len = aliases.len();
        Self::new_leaf_with(key, len, aliases)
    }

    /// A leaf holding the `len` aliases `aliases` yields (sorted by `slen`).
    ///
    /// # Panics
    /// If `aliases` yields fewer than `len` items.
    pub(crate) fn new_leaf_with(
        key: K,
        len: usize,
        aliases: impl IntoIterator<Item = Alias<V>>,
    ) -> Self {
        let len32 = u32::try_from(len).expect("fewer than 2^32 aliases per prefix");
        let layout = leaf_layout::<K, V>(len);
        // SAFETY: the layout has a non-zero size (it holds at least the header). Every byte a
        // reader looks at (head and aliases) is written below before the leaf is published.
        let raw = unsafe { alloc(layout) };
        let Some(raw) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        let first = raw
            .as_ptr()
            .wrapping_add(aliases_offset::<K, V>())
            .cast::<Alias<V>>();
        let mut slen = 0;
        let mut written = 0;
        for alias in aliases.into_iter().take(len) {
            slen = slen.max(alias.slen);
            // SAFETY: `raw` is a fresh allocation of `leaf_layout(len)`, with room for `len`
            // suitably aligned aliases at `aliases_offset`; `written < len`.
            unsafe { first.add(written).write(alias) };
            written += 1;
        }
        if written < len {
            // SAFETY: the `written` aliases are initialized and ours; the layout is the one
            // allocated above.
            unsafe {
                ptr::drop_in_place(ptr::slice_from_raw_parts_mut(first, written));
                dealloc(raw.as_ptr(), layout);
            }
            panic!("leaf built from too few aliases");
        }
        // SAFETY: the head fits at the start of the allocation, which is aligned for it.
        unsafe {
            raw.cast::<LeafHead<K, V>>().as_ptr().write(LeafHead {
                node: Node {
                    key,
                    pos: 0,
                    bits: 0,
                    slen: AtomicU8::new(slen),
                    _values: PhantomData,
                },
                len: len32,
            });
        }
        NodeRef {
            ptr: raw.cast(),
            _life: PhantomData,
        }
    }

    /// Frees a node that no reader can reach any more; its children are not freed.
    ///
    /// # Safety
    /// `ptr` must be a node made by `new_tnode`/`new_leaf` that is unreachable by every reader
    /// and writer and freed only once.
    pub(crate) unsafe fn free(ptr: *mut Node<K, V>) {
        // SAFETY: the caller guarantees the node is live and exclusively ours.
        let bits = unsafe { (*ptr).bits };
        if bits == 0 {
            // SAFETY: a leaf: the head and its `len` initialized aliases are ours to drop.
            unsafe {
                let len = (*ptr.cast::<LeafHead<K, V>>()).len as usize;
                let first = ptr
                    .cast::<u8>()
                    .add(aliases_offset::<K, V>())
                    .cast::<Alias<V>>();
                ptr::drop_in_place(ptr::slice_from_raw_parts_mut(first, len));
                dealloc(ptr.cast(), leaf_layout::<K, V>(len));
            }
        } else {
            // SAFETY: a tnode: its head and slots need no drop; the layout is the one it was
            // allocated with.
            unsafe { dealloc(ptr.cast(), tnode_layout::<K, V>(bits)) };
        }
    }

    #[inline(always)]
    pub(crate) fn is_leaf(self) -> bool {
        self.bits == 0
    }

    /// The child slots of a tnode; empty for a leaf.
    #[inline(always)]
    pub(crate) fn children(self) -> &'g [Child<K, V>] {
        if self.is_leaf() {
            return &[];
        }
        // SAFETY: a tnode allocation holds `2^bits` initialized slots at `children_offset`;
        // the pointer's provenance covers the allocation, which lives for `'g`.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr
                    .as_ptr()
                    .cast::<u8>()
                    .add(children_offset::<K, V>())
                    .cast::<Child<K, V>>(),
                1 << self.bits,
            )
        }
    }

    /// The aliases of a leaf; empty for a tnode.
    #[inline(always)]
    pub(crate) fn aliases(self) -> &'g [Alias<V>] {
        if !self.is_leaf() {
            return &[];
        }
        // SAFETY: a leaf allocation holds `len` initialized aliases at `aliases_offset`, never
        // mutated after publication; the allocation lives for `'g`.
        unsafe {
            let len = (*self.ptr.as_ptr().cast::<LeafHead<K, V>>()).len as usize;
            std::slice::from_raw_parts(
                self.ptr
                    .as_ptr()
                    .cast::<u8>()
                    .add(aliases_offset::<K, V>())
                    .cast::<Alias<V>>(),
                len,
            )
        }
    }

    fn counters(self) -> &'g TnodeHead<K, V> {
        assert!(!self.is_leaf(), "tnode bookkeeping asked of a leaf");
        // SAFETY: a tnode allocation starts with a `TnodeHead`, live for `'g`.
        unsafe { &*self.ptr.as_ptr().cast::<TnodeHead<K, V>>() }
    }

    /// The child index `key` selects in this tnode (`get_index`); only meaningful when the key
    /// matches the node above `pos + bits`.
    #[inline(always)]
    pub(crate) fn index_of(self, key: K) -> usize {
        (key ^ self.key).shr(self.pos).low_usize()
    }

    /// Whether `child` is a tnode that takes over exactly where this node stops (`tnode_full`).
    pub(crate) fn is_full_child(self, child: Option<NodeRef<'_, K, V>>) -> bool {
        child.is_some_and(|c| !c.is_leaf() && c.pos + c.bits == self.pos)
    }

    pub(crate) fn empty_children(self) -> usize {
        self.counters().empty_children.load(Ordering::Relaxed) as usize
    }

    pub(crate) fn full_children(self) -> usize {
        self.counters().full_children.load(Ordering::Relaxed) as usize
    }

    /// Loads child `index` of a tnode under `guard`.
    #[inline(always)]
    pub(crate) fn child(self, index: usize, guard: &'g Guard) -> Option<NodeRef<'g, K, V>> {
        load(&self.children()[index], guard)
    }

    /// Loads child `index` of a tnode without a bounds check (the lookup's hot path).
    ///
    /// # Safety
    /// `self` must be a tnode and `index < 2^bits`.
    #[inline(always)]
    pub(crate) unsafe fn child_unchecked(
        self,
        index: usize,
        guard: &'g Guard,
    ) -> Option<NodeRef<'g, K, V>> {
        debug_assert!(!self.is_leaf() && index < 1 << self.bits);
        // SAFETY: the caller guarantees slot `index` exists; see `children`.
        let slot = unsafe {
            &*self
                .ptr
                .as_ptr()
                .cast::<u8>()
                .add(children_offset::<K, V>())
                .cast::<Child<K, V>>()
                .add(index)
        };
        load(slot, guard)
    }

    /// Stores `child` at `index` and keeps the counters and `slen` (raised only) right
    /// (`put_child`). Writer only.
    pub(crate) fn put_child(self, index: usize, child: Option<NodeRef<'_, K, V>>, guard: &Guard) {
        let t = self.counters();
        let slot = &self.children()[index];
        // SAFETY: the writer is the only one storing into slots, and every pointer stored is a
        // live node (see `load`); `guard` pins the epoch.
        let old = unsafe { NodeRef::<K, V>::from_raw(slot.load(Ordering::Relaxed)) };
        let _ = guard;
        // The counters are only read and written by the (single) writer: plain loads and stores.
        let empty = t.empty_children.load(Ordering::Relaxed);
        match (old.is_some(), child.is_some()) {
            (false, true) => t.empty_children.store(empty - 1, Ordering::Relaxed),
            (true, false) => t.empty_children.store(empty + 1, Ordering::Relaxed),
            _ => {}
        }
        let full = t.full_children.load(Ordering::Relaxed);
        match (self.is_full_child(old), self.is_full_child(child)) {
            (true, false) => t.full_children.store(full - 1, Ordering::Relaxed),
            (false, true) => t.full_children.store(full + 1, Ordering::Relaxed),
            _ => {}
        }
        if let Some(n) = child {
            let s = n.slen();
            if s > self.slen() {
                self.slen.store(s, Ordering::Relaxed);
            }
        }
        slot.store(
            child.map_or(ptr::null_mut(), NodeRef::as_ptr),
            Ordering::Release,
        );
    }

    /// Recomputes `slen` exactly from the children (`update_suffix`) and returns it. Writer only.
    ///
    /// A child at index `i` can only hold suffixes up to `pos + trailing_zeros(i)` (its key has a
    /// one at that bit), so once a suffix `s` is found only indices that are multiples of
    /// `2^(s - pos + 1)` can beat it, and the scan strides over the rest.
    pub(crate) fn update_suffix(self, guard: &Guard) -> u8 {
        let children = self.children();
        let mut slen = self.pos;
        let mut stride_log = 1u32;
        let mut i = 0usize;
        while i < children.len() {
            if let Some(n) = load(&children[i], guard) {
                let s = n.slen();
                if s > slen {
                    slen = s;
                    stride_log = u32::from(s - self.pos) + 1;
                    if stride_log >= usize::BITS {
                        break;
                    }
                    i &= !((1usize << stride_log) - 1);
                }
            }
            match i.checked_add(1usize << stride_log) {
                Some(next) => i = next,
                None => break,
            }
        }
        self.slen.store(slen, Ordering::Relaxed);
        slen
    }
}

impl<K, V> Node<K, V> {
    #[inline(always)]
    pub(crate) fn slen(&self) -> u8 {
        self.slen.load(Ordering::Relaxed)
    }
}

/// Loads a node pointer under a guard.
#[inline(always)]
pub(crate) fn load<'g, K: TrieKey, V>(
    slot: &Child<K, V>,
    _guard: &'g Guard,
) -> Option<NodeRef<'g, K, V>> {
    let ptr = slot.load(Ordering::Acquire);
    // SAFETY: every non-null pointer stored in a slot points to a node that is either still
    // linked or was retired through the epoch after being unlinked; `_guard` pins the epoch, so
    // the node is not freed before `'g` ends. The Acquire load pairs with the Release store
    // that published the node, so its initialization is visible.
    unsafe { NodeRef::from_raw(ptr) }
}
