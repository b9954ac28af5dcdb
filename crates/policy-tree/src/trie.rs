//! The search tree of an inexact bin: a persistent trie of pairwise disjoint prefixes.
//!
//! The kernel keeps the nodes of `root_d` and `root_s` (`struct xfrm_pol_inexact_node`) in an
//! rbtree ordered by a masked three-way compare of address and prefix length, and keeps the
//! nodes of one tree disjoint: a policy whose prefix lies inside an existing node's prefix joins
//! that node, and a policy whose prefix covers existing nodes merges them into one node with
//! the shorter prefix. We keep the same set of nodes in a path-compressed binary trie whose
//! leaves are the nodes: because no leaf's prefix contains another's, each address lies in at
//! most one leaf, and the walk from the root to it tests one bit per level (`pos`).
//!
//! The trie is persistent: a change copies the path from the root to the changed leaf and shares
//! every other subtree with the previous version through `Arc`, so a reader holding the previous
//! root keeps seeing a complete, consistent tree (never a half-merged one) while the writer
//! builds the next. Dropping the last holder of an old root frees exactly the nodes no newer
//! version shares.
//!
//! Invariants (checked by [`Trie::check`] in tests):
//! - leaves are pairwise disjoint;
//! - an inner node branching on bit `pos` has two children, every leaf below it agrees with its
//!   `key` on the first `pos` bits and is longer than `pos` bits, and the leaves below child `b`
//!   have bit `pos` equal to `b`.

use std::sync::Arc;

use crate::addr::{bit, mask};

/// What a trie leaf holds: a value that can absorb another when their nodes merge.
pub(crate) trait Value: Clone {
    /// The value of a node that takes over `self`'s and `other`'s contents.
    fn merge(&self, other: &Self) -> Self;
}

/// A change to the value of an existing leaf.
pub(crate) enum Edit<T> {
    /// Nothing to change (what was to be removed is not there).
    Unchanged,
    /// The leaf's new value.
    Replace(T),
    /// The leaf became empty: prune it.
    Remove,
}

enum Node<T> {
    /// Branches on bit `pos`; every leaf below agrees with `key` on the first `pos` bits.
    Inner {
        key: u128,
        pos: u8,
        child: [Arc<Node<T>>; 2],
    },
    /// A tree node of the kernel: the prefix `addr/prefixlen` and what it holds.
    Leaf { addr: u128, prefixlen: u8, value: T },
}

/// A persistent trie of disjoint prefixes; cloning shares every node.
pub(crate) struct Trie<T> {
    root: Option<Arc<Node<T>>>,
}

impl<T> Clone for Trie<T> {
    fn clone(&self) -> Self {
        Trie {
            root: self.root.clone(),
        }
    }
}

impl<T> Default for Trie<T> {
    fn default() -> Self {
        Trie { root: None }
    }
}

fn leaf<T>(addr: u128, prefixlen: u8, value: T) -> Arc<Node<T>> {
    Arc::new(Node::Leaf {
        addr,
        prefixlen,
        value,
    })
}

/// Joins an existing subtree (whose leaves agree with `key` on their first bits) with a new,
/// disjoint leaf, under an inner node at the first bit where they differ.
fn join<T>(existing: Arc<Node<T>>, key: u128, addr: u128, prefixlen: u8, value: T) -> Arc<Node<T>> {
    // Both sides are disjoint, so they differ before either one's length ends.
    let pos = (key ^ addr).leading_zeros() as u8;
    let new = leaf(addr, prefixlen, value);
    let child = if bit(addr, pos) == 0 {
        [new, existing]
    } else {
        [existing, new]
    };
    Arc::new(Node::Inner {
        key: addr & mask(pos),
        pos,
        child,
    })
}

impl<T: Value> Trie<T> {
    /// Whether the trie has no node.
    pub(crate) fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// The value of the node whose prefix contains `addr` (the kernel's
    /// `xfrm_policy_lookup_inexact_addr`).
    #[inline]
    pub(crate) fn lookup(&self, addr: u128) -> Option<&T> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Inner { pos, child, .. } => node = &child[bit(addr, *pos)],
                Node::Leaf {
                    addr: a,
                    prefixlen,
                    value,
                } => return (addr & mask(*prefixlen) == *a).then_some(value),
            }
        }
    }

    /// A new version in which the node for `addr/prefixlen` holds `f(old)`. The node is an
    /// existing one whose prefix contains `addr/prefixlen` (`old` is its value), or a new one
    /// with exactly this prefix that takes over every existing node inside it (`old` is their
    /// merged value, `None` if there are none).
    pub(crate) fn upsert(
        &self,
        addr: u128,
        prefixlen: u8,
        f: impl FnOnce(Option<T>) -> T,
    ) -> Trie<T> {
        let addr = addr & mask(prefixlen);
        Trie {
            root: Some(upsert(self.root.as_ref(), addr, prefixlen, f)),
        }
    }

    /// A new version in which the node whose prefix contains `addr/prefixlen` is edited by `f`;
    /// `None` when there is no such node or `f` changed nothing.
    pub(crate) fn update(
        &self,
        addr: u128,
        prefixlen: u8,
        f: impl FnOnce(&T) -> Edit<T>,
    ) -> Option<Trie<T>> {
        let addr = addr & mask(prefixlen);
        let root = update(self.root.as_ref()?, addr, prefixlen, f)?;
        Some(Trie { root })
    }

    /// Every node as `(addr, prefixlen, value)`, in address order.
    pub(crate) fn leaves(&self) -> Vec<(u128, u8, &T)> {
        let mut out = Vec::new();
        if let Some(root) = &self.root {
            collect(root, &mut out);
        }
        out
    }

    /// Checks the invariants in the module documentation.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        fn walk<T>(node: &Node<T>, within: u128, within_len: u8) {
            match node {
                Node::Inner { key, pos, child } => {
                    assert!(*pos >= within_len, "inner node above its parent's bit");
                    assert_eq!(key & mask(within_len), within, "inner key off its path");
                    assert_eq!(key & !mask(*pos), 0, "inner key not masked");
                    for (b, c) in child.iter().enumerate() {
                        let branch = key | ((b as u128) << (127 - *pos as u32));
                        walk(c, branch, pos + 1);
                    }
                }
                Node::Leaf {
                    addr, prefixlen, ..
                } => {
                    assert!(*prefixlen >= within_len, "leaf shorter than its path");
                    assert_eq!(addr & mask(within_len), within, "leaf off its path");
                    assert_eq!(addr & !mask(*prefixlen), 0, "leaf address not masked");
                }
            }
        }
        if let Some(root) = &self.root {
            walk(root, 0, 0);
        }
        let leaves = self.leaves();
        for pair in leaves.windows(2) {
            let ((a, alen, _), (b, blen, _)) = (pair[0], pair[1]);
            let end_a = a | !mask(alen);
            assert!(
                end_a < b,
                "leaves overlap or are out of order: {a:x}/{alen} {b:x}/{blen}"
            );
        }
    }
}

fn upsert<T: Value>(
    node: Option<&Arc<Node<T>>>,
    addr: u128,
    prefixlen: u8,
    f: impl FnOnce(Option<T>) -> T,
) -> Arc<Node<T>> {
    let Some(node) = node else {
        return leaf(addr, prefixlen, f(None));
    };
    match &**node {
        Node::Leaf {
            addr: a,
            prefixlen: len,
            value,
        } => {
            if *len <= prefixlen && addr & mask(*len) == *a {
                // The node covers the new prefix: the policy joins it.
                leaf(*a, *len, f(Some(value.clone())))
            } else if prefixlen < *len && *a & mask(prefixlen) == addr {
                // The new prefix covers the node: it is re-keyed to the shorter prefix.
                leaf(addr, prefixlen, f(Some(value.clone())))
            } else {
                join(node.clone(), *a, addr, prefixlen, f(None))
            }
        }
        Node::Inner { key, pos, child } => {
            if prefixlen <= *pos && key & mask(prefixlen) == addr {
                // The new prefix covers every node below: merge them all into one.
                let mut leaves = Vec::new();
                collect(node, &mut leaves);
                let mut merged = leaves[0].2.clone();
                for (_, _, value) in &leaves[1..] {
                    merged = merged.merge(value);
                }
                leaf(addr, prefixlen, f(Some(merged)))
            } else if prefixlen > *pos && addr & mask(*pos) == *key {
                let b = bit(addr, *pos);
                let mut child = child.clone();
                child[b] = upsert(Some(&child[b]), addr, prefixlen, f);
                Arc::new(Node::Inner {
                    key: *key,
                    pos: *pos,
                    child,
                })
            } else {
                join(node.clone(), *key, addr, prefixlen, f(None))
            }
        }
    }
}

/// `None`: not found or unchanged; `Some(None)`: the subtree became empty.
fn update<T: Value>(
    node: &Arc<Node<T>>,
    addr: u128,
    prefixlen: u8,
    f: impl FnOnce(&T) -> Edit<T>,
) -> Option<Option<Arc<Node<T>>>> {
    match &**node {
        Node::Leaf {
            addr: a,
            prefixlen: len,
            value,
        } => {
            if *len > prefixlen || addr & mask(*len) != *a {
                return None;
            }
            match f(value) {
                Edit::Unchanged => None,
                Edit::Replace(value) => Some(Some(leaf(*a, *len, value))),
                Edit::Remove => Some(None),
            }
        }
        Node::Inner { key, pos, child } => {
            if prefixlen <= *pos || addr & mask(*pos) != *key {
                return None;
            }
            let b = bit(addr, *pos);
            Some(Some(match update(&child[b], addr, prefixlen, f)? {
                Some(new) => {
                    let mut child = child.clone();
                    child[b] = new;
                    Arc::new(Node::Inner {
                        key: *key,
                        pos: *pos,
                        child,
                    })
                }
                // The emptied leaf is pruned; its sibling takes this node's place.
                None => child[1 - b].clone(),
            }))
        }
    }
}

fn collect<'a, T>(node: &'a Node<T>, out: &mut Vec<(u128, u8, &'a T)>) {
    match node {
        Node::Inner { child, .. } => {
            collect(&child[0], out);
            collect(&child[1], out);
        }
        Node::Leaf {
            addr,
            prefixlen,
            value,
        } => out.push((*addr, *prefixlen, value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::to_bits;

    /// A leaf value: the sorted set of prefixes inserted into it.
    #[derive(Clone, Debug, PartialEq)]
    struct Set(Vec<(u128, u8)>);

    impl Value for Set {
        fn merge(&self, other: &Self) -> Self {
            let mut all = self.0.clone();
            all.extend_from_slice(&other.0);
            all.sort_unstable();
            Set(all)
        }
    }

    fn p(text: &str) -> (u128, u8) {
        let (a, l) = text.split_once('/').unwrap();
        let l: u8 = l.parse().unwrap();
        (to_bits(a.parse().unwrap()) & mask(l), l)
    }

    fn insert(t: &Trie<Set>, text: &str) -> Trie<Set> {
        let (a, l) = p(text);
        let t = t.upsert(a, l, |old| {
            let mut set = old.unwrap_or(Set(Vec::new()));
            set.0.push((a, l));
            set.0.sort_unstable();
            set
        });
        t.check();
        t
    }

    fn shape(t: &Trie<Set>) -> Vec<(String, usize)> {
        t.leaves()
            .into_iter()
            .map(|(a, l, v)| {
                let addr = crate::addr::from_bits(crate::Family::V4, a);
                (format!("{addr}/{l}"), v.0.len())
            })
            .collect()
    }

    #[test]
    fn covering_prefix_merges_nodes_and_old_version_survives() {
        let mut t = Trie::default();
        for text in ["10.0.0.0/26", "10.0.0.64/26", "10.0.1.0/24", "10.0.2.0/24"] {
            t = insert(&t, text);
        }
        let before = t.clone();
        assert_eq!(before.leaves().len(), 4);
        // The seed's caveat 2: a /24 arriving over two /26 nodes merges them.
        t = insert(&t, "10.0.0.0/24");
        assert_eq!(
            shape(&t),
            [
                ("10.0.0.0/24".to_owned(), 3),
                ("10.0.1.0/24".to_owned(), 1),
                ("10.0.2.0/24".to_owned(), 1)
            ]
        );
        // The selftest's overlap: a /23 over the 10.0.0.0/24 and 10.0.1.0/24 nodes.
        t = insert(&t, "10.0.0.0/23");
        assert_eq!(
            shape(&t),
            [("10.0.0.0/23".to_owned(), 5), ("10.0.2.0/24".to_owned(), 1)]
        );
        // A longer prefix joins the covering node.
        t = insert(&t, "10.0.1.128/25");
        assert_eq!(shape(&t)[0], ("10.0.0.0/23".to_owned(), 6));
        // The version taken before the merges is untouched.
        assert_eq!(before.leaves().len(), 4);
        before.check();
        let addr = to_bits("10.0.0.65".parse().unwrap());
        assert_eq!(before.lookup(addr).unwrap().0, [p("10.0.0.64/26")]);
        assert_eq!(t.lookup(addr).unwrap().0.len(), 6);
        assert!(t.lookup(to_bits("10.0.3.1".parse().unwrap())).is_none());
    }

    #[test]
    fn zero_length_prefix_swallows_everything() {
        let mut t = Trie::default();
        for text in [
            "10.0.0.0/24",
            "192.168.0.0/16",
            "0.0.0.0/0",
            "172.16.0.0/12",
        ] {
            t = insert(&t, text);
        }
        assert_eq!(shape(&t), [("0.0.0.0/0".to_owned(), 4)]);
        assert!(t.lookup(to_bits("1.2.3.4".parse().unwrap())).is_some());
    }

    #[test]
    fn update_edits_and_prunes() {
        let mut t = Trie::default();
        for text in ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"] {
            t = insert(&t, text);
        }
        let (a, l) = p("10.0.1.0/24");
        let removed = t.update(a, l, |_| Edit::Remove).unwrap();
        removed.check();
        assert_eq!(removed.leaves().len(), 2);
        assert!(removed.lookup(a).is_none());
        // Nothing covers 10.0.3.0/24.
        let (b, bl) = p("10.0.3.0/24");
        assert!(t.update(b, bl, |_| Edit::Remove).is_none());
        assert!(t.update(a, l, |_| Edit::Unchanged).is_none());
        // A longer prefix finds its covering node.
        let (c, cl) = p("10.0.2.128/25");
        let edited = t.update(c, cl, |v| Edit::Replace(v.merge(v))).unwrap();
        assert_eq!(edited.lookup(c).unwrap().0.len(), 2);
        // Pruning everything leaves an empty trie.
        let mut u = t.clone();
        for text in ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"] {
            let (a, l) = p(text);
            u = u.update(a, l, |_| Edit::Remove).unwrap();
            u.check();
        }
        assert!(u.is_empty());
    }
}
