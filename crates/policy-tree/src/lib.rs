//! An xfrm-style security policy database: an exact hash per direction plus inexact bins with
//! destination and source search trees, looked up lock-free under an epoch guard.
//!
//! # What it renders
//!
//! The Linux IPsec security policy database (`net/xfrm/xfrm_policy.c`) after Florian Westphal's
//! 2018 inexact search trees:
//!
//! - **Exact hash** per direction: a policy whose destination and source prefixes are at least
//!   as long as the hash thresholds ([`HThresh`], default /32 /32 and /128 /128) goes into a
//!   chain keyed by both addresses masked to the thresholds. Changing the thresholds moves
//!   every policy to where the new ones say ([`PolicyDb::set_hthresh`]).
//! - **Inexact bins**, one per (direction, type, family, if_id), holding every other policy in
//!   one of four classes: any:any (the bin's list), saddr:any (nodes of the bin's source tree),
//!   any:daddr (the list of a node of the destination tree) and saddr:daddr (nodes of that
//!   destination node's own source tree). Addresses shorter than /16 (IPv4) or /48 (IPv6), or
//!   all zero, count as "any".
//! - **Tree nodes** are pairwise disjoint prefixes: a policy joins the node whose prefix
//!   contains its own; a policy whose prefix covers existing nodes merges them (and their
//!   source subtrees, and their lists, re-sorted) into one node; nodes left empty are pruned.
//! - **Lookup**: the first match in the exact chain, then the (up to) four candidate lists for
//!   the flow's addresses, each sorted by priority then insertion position and scanned only
//!   while it can still beat the best match; sub policies are consulted before main ones.
//!   The lowest priority value wins; ties go by the kernel's list order ([`Policy::order`])
//!   and, between the exact chain and the inexact lists, by the kernel's `pos`.
//!
//! [`LinearDb`] is the same database as one sorted list per direction (the kernel before the
//! trees): the reference the tests compare against and the baseline of the benchmarks.
//!
//! # Readers and writers
//!
//! crossbeam-epoch stands in for RCU. Readers pin once per batch of packets and pass the
//! [`Guard`](crossbeam_epoch::Guard) to [`PolicyDb::lookup`], which never locks, allocates or
//! blocks and returns a `&Policy` valid while the guard lives.
//!
//! Who writes shows in the types (one rule in all of xfwd's table crates): the
//! `Arc<PolicyDb>` readers share has no method that changes it; its one [`PolicyWriter`] (not
//! `Clone`, `&mut self` for every change) makes it, hands readers its `Arc`
//! ([`PolicyWriter::reader`]) and derefs to it for its own reads. The writer never modifies
//! what readers can see: a change builds new versions of the
//! one hash chain or the one bin it touches (the bin's trees are persistent: a change copies
//! the path to the changed node and shares the rest), publishes them with an atomic pointer
//! swap and hands the old version to the epoch collector. Hence:
//!
//! - a reader sees each bin before or after a change, never a half-merged tree;
//! - an update (same selector, new priority or action) replaces the policy in one swap;
//! - a threshold change or a flush publishes a whole new structure in one swap.
//!
//! Guards: every public function taking a `Guard` panics unless the guard pins
//! crossbeam-epoch's default collector (from `crossbeam_epoch::pin()`), the collector the
//! writers retire into: a guard of another `Collector` would not keep the answer alive. The
//! check is two pointers compared, once per call.
//!
//! # Example
//!
//! ```
//! use std::net::Ipv4Addr;
//! use policy_tree::{Action, Direction, Flow, PolicySpec, PolicyWriter, Selector, TemplateId};
//!
//! let mut db = PolicyWriter::new();
//! let esp = Action::Ipsec(TemplateId(1));
//! let lan_to_lan = Selector::new("10.0.1.0/24".parse()?, "10.0.2.0/24".parse()?)?;
//! db.add(PolicySpec::new(lan_to_lan, Direction::Fwd).priority(100).action(esp))?;
//! // An exception at a better priority: this host is reached in plain.
//! let host = Selector::new("0.0.0.0/0".parse()?, "10.0.2.254/32".parse()?)?;
//! db.add(PolicySpec::new(host, Direction::Fwd).priority(10))?;
//!
//! let guard = crossbeam_epoch::pin(); // once per batch
//! let src = Ipv4Addr::new(10, 0, 1, 2);
//! let verdict = |dst| db.lookup(&Flow::v4(src, dst), Direction::Fwd, &guard).map(|p| p.action);
//! assert_eq!(verdict(Ipv4Addr::new(10, 0, 2, 2)), Some(esp));
//! assert_eq!(verdict(Ipv4Addr::new(10, 0, 2, 254)), Some(Action::Allow));
//! assert_eq!(verdict(Ipv4Addr::new(10, 0, 3, 1)), None);
//! # Ok::<(), policy_tree::Error>(())
//! ```
//!
//! # Differences from the kernel
//!
//! The rules followed, with the kernel code behind each, are in the crate README. Where an
//! answer depends on the kernel's `pos` numbering that the database cannot know (a database
//! loaded from a dump, see [`PolicyDb::forget_history`]), a lookup returns [`UNDECIDED`].
//! Security contexts, lifetimes and socket policies are not rendered; trees are
//! path-compressed binary tries rather than rbtrees, so readers need no sequence count retry:
//! they walk an immutable version.

mod addr;
mod bin;
mod db;
mod decide;
mod epoch;
mod error;
mod exact;
mod guard;
mod linear;
mod list;
mod policy;
mod registry;
mod selector;
mod trie;
mod writer;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = policy_tree::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use addr::{Family, Prefix};
pub use bin::{BinShape, DstNodeShape, INEXACT_PREFIXLEN_IPV4, INEXACT_PREFIXLEN_IPV6, NodeShape};
pub use db::{Counts, PolicyDb};
pub use decide::{Check, UNDECIDED};
pub use error::Error;
pub use linear::LinearDb;
pub use policy::{
    Action, Direction, ExactPos, HThresh, Mark, Policy, PolicySpec, PolicyType, TemplateId,
};
pub use selector::{Flow, PortMatch, Selector};
pub use writer::PolicyWriter;

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
