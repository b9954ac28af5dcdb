//! The one node type of the trie (the kernel's `key_vector`) and the writer's primitives on it.
//!
//! A node is a leaf when `bits == 0` and a tnode otherwise. Everything but the child slots, the
//! suffix length and the tnode's bookkeeping counters is immutable once a node is published;
//! a leaf is immutable as a whole (changing its aliases publishes a new leaf).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};

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

/// The aliases of a leaf, stored inline when there is just one (the common case).
#[derive(Debug)]
pub(crate) enum Aliases<V> {
    One(Alias<V>),
    Many(Box<[Alias<V>]>),
}

impl<V> Aliases<V> {
    pub(crate) fn from_vec(mut aliases: Vec<Alias<V>>) -> Self {
        if aliases.len() == 1 {
            if let Some(one) = aliases.pop() {
                return Aliases::One(one);
            }
        }
        Aliases::Many(aliases.into_boxed_slice())
    }

    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[Alias<V>] {
        match self {
            Aliases::One(one) => std::slice::from_ref(one),
            Aliases::Many(many) => many,
        }
    }
}

/// The child array and bookkeeping of an inner node.
#[derive(Debug)]
pub(crate) struct Tnode<K, V> {
    /// Children that are null (writer bookkeeping, like `tn_info.empty_children`).
    pub(crate) empty_children: AtomicUsize,
    /// Children that are tnodes consuming the bits right below this node's (no skipped bits).
    pub(crate) full_children: AtomicUsize,
    /// `2^bits` child slots, indexed by the key bits `pos .. pos + bits`.
    pub(crate) children: Box<[Atomic<Node<K, V>>]>,
}

/// What a node carries besides its key vector.
#[derive(Debug)]
pub(crate) enum Body<K, V> {
    Leaf(Aliases<V>),
    Tnode(Tnode<K, V>),
}

/// The kernel's `key_vector`: key, pos, bits, slen and either children or aliases.
#[derive(Debug)]
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
    pub(crate) body: Body<K, V>,
}

impl<K: TrieKey, V> Node<K, V> {
    pub(crate) fn new_leaf(key: K, aliases: Vec<Alias<V>>) -> Self {
        let slen = aliases.iter().map(|a| a.slen).max().unwrap_or(0);
        Node {
            key,
            pos: 0,
            bits: 0,
            slen: AtomicU8::new(slen),
            body: Body::Leaf(Aliases::from_vec(aliases)),
        }
    }

    /// An empty tnode (the kernel's `tnode_new`): the key keeps only the bits above `pos + bits`.
    pub(crate) fn new_tnode(key: K, pos: u8, bits: u8) -> Self {
        let shift = pos + bits;
        let key = key.shr(shift).shl(shift);
        let len = 1usize << bits;
        Node {
            key,
            pos,
            bits,
            slen: AtomicU8::new(pos),
            body: Body::Tnode(Tnode {
                empty_children: AtomicUsize::new(len),
                full_children: AtomicUsize::new(0),
                children: (0..len).map(|_| Atomic::null()).collect(),
            }),
        }
    }

    #[inline(always)]
    pub(crate) fn slen(&self) -> u8 {
        self.slen.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn is_leaf(&self) -> bool {
        self.bits == 0
    }

    /// The child slots of a tnode; empty for a leaf.
    #[inline(always)]
    pub(crate) fn children(&self) -> &[Atomic<Node<K, V>>] {
        match &self.body {
            Body::Tnode(t) => &t.children,
            Body::Leaf(_) => &[],
        }
    }

    /// The aliases of a leaf; empty for a tnode.
    #[inline(always)]
    pub(crate) fn aliases(&self) -> &[Alias<V>] {
        match &self.body {
            Body::Leaf(a) => a.as_slice(),
            Body::Tnode(_) => &[],
        }
    }

    /// The child index `key` selects in this tnode (`get_index`); only meaningful when the key
    /// matches the node above `pos + bits`.
    #[inline(always)]
    pub(crate) fn index_of(&self, key: K) -> usize {
        (key ^ self.key).shr(self.pos).low_usize()
    }

    /// Whether `child` is a tnode that takes over exactly where this node stops (`tnode_full`).
    pub(crate) fn is_full_child(&self, child: Option<&Node<K, V>>) -> bool {
        child.is_some_and(|c| !c.is_leaf() && c.pos + c.bits == self.pos)
    }

    fn tnode(&self) -> &Tnode<K, V> {
        match &self.body {
            Body::Tnode(t) => t,
            Body::Leaf(_) => unreachable!("tnode bookkeeping asked of a leaf"),
        }
    }

    pub(crate) fn empty_children(&self) -> usize {
        self.tnode().empty_children.load(Ordering::Relaxed)
    }

    pub(crate) fn full_children(&self) -> usize {
        self.tnode().full_children.load(Ordering::Relaxed)
    }

    /// Loads child `index` under `guard`.
    #[inline(always)]
    pub(crate) fn child<'g>(&self, index: usize, guard: &'g Guard) -> Option<&'g Node<K, V>> {
        load(&self.children()[index], guard)
    }

    /// Stores `child` at `index` and keeps the counters and `slen` (raised only) right
    /// (`put_child`). Writer only.
    pub(crate) fn put_child(&self, index: usize, child: Shared<'_, Node<K, V>>, guard: &Guard) {
        let t = self.tnode();
        let slot = &t.children[index];
        let old = load(slot, guard);
        // SAFETY: `child` is either null, a node the writer just built, or a node reachable from
        // the trie; both outlive `guard` (retired nodes are freed only after it is unpinned).
        let new = unsafe { child.as_ref() };
        match (old.is_some(), new.is_some()) {
            (false, true) => {
                t.empty_children.fetch_sub(1, Ordering::Relaxed);
            }
            (true, false) => {
                t.empty_children.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        match (self.is_full_child(old), self.is_full_child(new)) {
            (true, false) => {
                t.full_children.fetch_sub(1, Ordering::Relaxed);
            }
            (false, true) => {
                t.full_children.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if let Some(n) = new {
            if n.slen() > self.slen() {
                self.slen.store(n.slen(), Ordering::Relaxed);
            }
        }
        slot.store(child, Ordering::Release);
    }

    /// Recomputes `slen` exactly from the children (`update_suffix`) and returns it. Writer only.
    ///
    /// A child at index `i` can only hold suffixes up to `pos + trailing_zeros(i)` (its key has a
    /// one at that bit), so once a suffix `s` is found only indices that are multiples of
    /// `2^(s - pos + 1)` can beat it, and the scan strides over the rest.
    pub(crate) fn update_suffix(&self, guard: &Guard) -> u8 {
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

/// Loads a node pointer under a guard.
#[inline(always)]
pub(crate) fn load<'g, K, V>(
    slot: &Atomic<Node<K, V>>,
    guard: &'g Guard,
) -> Option<&'g Node<K, V>> {
    let ptr = slot.load(Ordering::Acquire, guard);
    // SAFETY: every non-null pointer stored in a slot points to a node that is either still
    // linked or was retired with `defer_destroy` after being unlinked; `guard` pins the epoch, so
    // the node is not freed before `'g` ends. Nodes are never mutated through shared references
    // except through atomics.
    unsafe { ptr.as_ref() }
}

/// Moves a freshly built node to the heap for publication.
pub(crate) fn boxed<'g, K, V>(node: Node<K, V>, guard: &'g Guard) -> Shared<'g, Node<K, V>> {
    Owned::new(node).into_shared(guard)
}
