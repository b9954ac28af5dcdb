//! Inexact bins (`struct xfrm_pol_inexact_bin`): the policies of one (direction, type, family,
//! if_id) that are not in the exact hash, sorted into four classes.
//!
//! | class | source | destination | where |
//! |---|---|---|---|
//! | any:any | any list | any list | the bin's own list |
//! | saddr:any | fixed | any list | a node of `root_s` |
//! | any:daddr | any list | fixed | the list of a node of `root_d` |
//! | saddr:daddr | fixed | fixed | a node of the source tree of a node of `root_d` |
//!
//! An address "uses the any list" when it is all zeroes or shorter than
//! [`INEXACT_PREFIXLEN_IPV4`] / [`INEXACT_PREFIXLEN_IPV6`] bits: coarse prefixes would make
//! nodes so wide that they would merge most of the tree. A lookup gathers the (up to) four
//! candidate lists for its addresses and scans each for the best match.
//!
//! A [`Bin`] is immutable; a change builds a new version that shares every untouched node.

use crate::addr::{Family, Prefix, from_bits};
use crate::list::{self, List};
use crate::policy::Policy;
use crate::selector::{Flow, Selector};
use crate::trie::{Edit, Trie, Value};

/// IPv4 prefixes shorter than this use the any list (the kernel's `INEXACT_PREFIXLEN_IPV4`).
pub const INEXACT_PREFIXLEN_IPV4: u8 = 16;
/// IPv6 prefixes shorter than this use the any list (the kernel's `INEXACT_PREFIXLEN_IPV6`).
pub const INEXACT_PREFIXLEN_IPV6: u8 = 48;

/// Whether a selector address goes to the any list rather than into a tree.
fn uses_any_list(prefix: &Prefix) -> bool {
    let min = match prefix.family {
        Family::V4 => INEXACT_PREFIXLEN_IPV4,
        Family::V6 => INEXACT_PREFIXLEN_IPV6,
    };
    prefix.addr == 0 || prefix.len < min
}

/// The four search classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    AnyAny,
    SrcAny,
    AnyDst,
    SrcDst,
}

fn class(selector: &Selector) -> Class {
    match (uses_any_list(&selector.src), uses_any_list(&selector.dst)) {
        (true, true) => Class::AnyAny,
        (false, true) => Class::SrcAny,
        (true, false) => Class::AnyDst,
        (false, false) => Class::SrcDst,
    }
}

impl Value for List {
    fn merge(&self, other: &Self) -> Self {
        list::merged(self, other)
    }
}

/// A node of `root_d`: the any:daddr policies of its prefix, and its source tree.
#[derive(Clone)]
pub(crate) struct DstNode {
    list: List,
    root: Trie<List>,
}

impl DstNode {
    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.root.is_empty()
    }
}

impl Value for DstNode {
    /// Merges lists, and inserts every source node of `other` into `self`'s source tree (where
    /// it may in turn merge with nodes it covers or join a node that covers it).
    fn merge(&self, other: &Self) -> Self {
        let mut root = self.root.clone();
        for (addr, prefixlen, theirs) in other.root.leaves() {
            root = root.upsert(addr, prefixlen, |ours| match ours {
                Some(ours) => ours.merge(theirs),
                None => theirs.clone(),
            });
        }
        DstNode {
            list: self.list.merge(&other.list),
            root,
        }
    }
}

/// One version of an inexact bin.
#[derive(Clone)]
pub(crate) struct Bin {
    /// any:any policies (the kernel's `bin->hhead`).
    any: List,
    /// saddr:any nodes.
    root_s: Trie<List>,
    /// daddr nodes, each with its saddr:daddr subtree.
    root_d: Trie<DstNode>,
    /// The number of policies.
    count: usize,
}

fn edit_list(list: &List, index: u32) -> Edit<List> {
    match list::without(list, index) {
        None => Edit::Unchanged,
        Some(rest) if rest.is_empty() => Edit::Remove,
        Some(rest) => Edit::Replace(rest.into()),
    }
}

impl Bin {
    /// An empty bin.
    pub(crate) fn new() -> Bin {
        Bin {
            any: list::empty(),
            root_s: Trie::default(),
            root_d: Trie::default(),
            count: 0,
        }
    }

    /// The number of policies.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// A version with `policy` added (the kernel's `xfrm_policy_inexact_alloc_chain` followed by
    /// the sorted insert).
    pub(crate) fn with(&self, policy: Policy) -> Bin {
        let sel = &policy.selector;
        let add = |old: Option<List>| -> List {
            list::with(old.as_deref().unwrap_or(&[]), policy).into()
        };
        let mut bin = self.clone();
        match class(sel) {
            Class::AnyAny => bin.any = list::with(&self.any, policy).into(),
            Class::SrcAny => bin.root_s = self.root_s.upsert(sel.src.addr, sel.src.len, add),
            Class::AnyDst => {
                bin.root_d = self.root_d.upsert(sel.dst.addr, sel.dst.len, |node| {
                    let node = node.unwrap_or_else(empty_dst_node);
                    DstNode {
                        list: list::with(&node.list, policy).into(),
                        root: node.root,
                    }
                });
            }
            Class::SrcDst => {
                bin.root_d = self.root_d.upsert(sel.dst.addr, sel.dst.len, |node| {
                    let node = node.unwrap_or_else(empty_dst_node);
                    DstNode {
                        list: node.list,
                        root: node.root.upsert(sel.src.addr, sel.src.len, add),
                    }
                });
            }
        }
        bin.count += 1;
        bin
    }

    /// A version without `policy`, or `None` when it is not in the bin. Nodes left empty are
    /// pruned.
    pub(crate) fn without(&self, policy: &Policy) -> Option<Bin> {
        let sel = &policy.selector;
        let index = policy.index;
        let mut bin = self.clone();
        match class(sel) {
            Class::AnyAny => bin.any = list::without(&self.any, index)?.into(),
            Class::SrcAny => {
                bin.root_s = self
                    .root_s
                    .update(sel.src.addr, sel.src.len, |l| edit_list(l, index))?;
            }
            Class::AnyDst => {
                bin.root_d = self.root_d.update(sel.dst.addr, sel.dst.len, |node| {
                    let Some(rest) = list::without(&node.list, index) else {
                        return Edit::Unchanged;
                    };
                    let node = DstNode {
                        list: rest.into(),
                        root: node.root.clone(),
                    };
                    if node.is_empty() {
                        Edit::Remove
                    } else {
                        Edit::Replace(node)
                    }
                })?;
            }
            Class::SrcDst => {
                bin.root_d = self.root_d.update(sel.dst.addr, sel.dst.len, |node| {
                    let Some(root) = node
                        .root
                        .update(sel.src.addr, sel.src.len, |l| edit_list(l, index))
                    else {
                        return Edit::Unchanged;
                    };
                    let node = DstNode {
                        list: node.list.clone(),
                        root,
                    };
                    if node.is_empty() {
                        Edit::Remove
                    } else {
                        Edit::Replace(node)
                    }
                })?;
            }
        }
        bin.count -= 1;
        Some(bin)
    }

    /// Scans the candidate lists for `flow` (the kernel's `xfrm_policy_find_inexact_candidates`
    /// and `xfrm_policy_eval_candidates`), improving `best`.
    #[inline]
    pub(crate) fn candidates<'a>(&'a self, flow: &Flow, best: &mut Option<&'a Policy>) {
        if let Some(node) = self.root_d.lookup(flow.daddr) {
            list::scan(&node.list, flow, best);
            if let Some(list) = node.root.lookup(flow.saddr) {
                list::scan(list, flow, best);
            }
        }
        if let Some(list) = self.root_s.lookup(flow.saddr) {
            list::scan(list, flow, best);
        }
        list::scan(&self.any, flow, best);
    }

    /// The policy with exactly this selector, found through the trees (as `ip xfrm policy get`
    /// finds it).
    pub(crate) fn find(&self, selector: &Selector, mark: crate::Mark) -> Option<&Policy> {
        let list: &[Policy] = match class(selector) {
            Class::AnyAny => &self.any,
            Class::SrcAny => self.root_s.lookup(selector.src.addr)?,
            Class::AnyDst => &self.root_d.lookup(selector.dst.addr)?.list,
            Class::SrcDst => self
                .root_d
                .lookup(selector.dst.addr)?
                .root
                .lookup(selector.src.addr)?,
        };
        list.iter()
            .find(|p| p.selector == *selector && p.mark == mark)
    }

    /// Every policy of the bin, in no particular order.
    pub(crate) fn policies(&self) -> Vec<Policy> {
        let mut out: Vec<Policy> = self.any.to_vec();
        for (_, _, list) in self.root_s.leaves() {
            out.extend_from_slice(list);
        }
        for (_, _, node) in self.root_d.leaves() {
            out.extend_from_slice(&node.list);
            for (_, _, list) in node.root.leaves() {
                out.extend_from_slice(list);
            }
        }
        out
    }

    /// The bin's nodes, for tests and diagnostics.
    pub(crate) fn shape(&self, family: Family) -> BinShape {
        let nodes = |trie: &Trie<List>| -> Vec<NodeShape> {
            trie.leaves()
                .into_iter()
                .map(|(addr, len, list)| NodeShape {
                    prefix: prefix(family, addr, len),
                    policies: list.len(),
                })
                .collect()
        };
        BinShape {
            any: self.any.len(),
            src_nodes: nodes(&self.root_s),
            dst_nodes: self
                .root_d
                .leaves()
                .into_iter()
                .map(|(addr, len, node)| DstNodeShape {
                    prefix: prefix(family, addr, len),
                    policies: node.list.len(),
                    src_nodes: nodes(&node.root),
                })
                .collect(),
        }
    }
}

fn empty_dst_node() -> DstNode {
    DstNode {
        list: list::empty(),
        root: Trie::default(),
    }
}

fn prefix(family: Family, addr: u128, len: u8) -> Prefix {
    // Trie keys are masked prefixes of the bin's family, so this cannot fail.
    Prefix::new(from_bits(family, addr), len).unwrap_or(Prefix::any(family))
}

/// The nodes of an inexact bin, for tests and diagnostics (what the kernel's selftest describes
/// in its comments).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BinShape {
    /// The number of any:any policies.
    pub any: usize,
    /// The nodes of the source tree (saddr:any), in address order.
    pub src_nodes: Vec<NodeShape>,
    /// The nodes of the destination tree, in address order.
    pub dst_nodes: Vec<DstNodeShape>,
}

/// A node of a source tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeShape {
    /// The node's prefix (it covers the prefixes of the policies it holds).
    pub prefix: Prefix,
    /// The number of policies in its list.
    pub policies: usize,
}

/// A node of a destination tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DstNodeShape {
    /// The node's prefix (it covers the destination prefixes of the policies it holds).
    pub prefix: Prefix,
    /// The number of any:daddr policies in its own list.
    pub policies: usize,
    /// Its source tree (saddr:daddr), in address order.
    pub src_nodes: Vec<NodeShape>,
}
