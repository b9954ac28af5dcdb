//! A user-space rendering of Linux's `fib_trie` (net/ipv4/fib_trie.c after Alexander Duyck's
//! 2014-15 rework): a level-compressed trie for longest-prefix match, generic over the key
//! width (`u32` for IPv4, `u128` for IPv6, where the kernel itself uses `fib6` instead), with
//! route aliases, many tables, policy rules, and readers that never lock.
//!
//! # Layers
//! - [`LcTrie<K, V>`]: the trie. One node type (the kernel's `key_vector`: `key`, `pos`,
//!   `bits`, `slen`); a leaf (`bits == 0`) holds the [`Alias`]es of one prefix address sorted by
//!   suffix length, longest prefix first. Tnodes inflate when `50 * (nonempty + full) >= 50 *
//!   2^bits` (30 at the root), halve when `100 * nonempty < 25 * 2^bits` (15 at the root),
//!   collapse below two children, with at most [`MAX_WORK`] steps per resize.
//!   Lookup descends while the key matches, remembering tnodes with `slen > pos`; on a miss it
//!   strips the lowest set bit of the child index (climbing when it reaches zero) and
//!   searches the sibling subtree through child 0 for a shorter prefix, skipping any subtree
//!   whose `slen == pos`.
//! - Layout: every node is one allocation, a header (key, pos, bits, slen) followed by the
//!   tnode's child pointers or the leaf's aliases (`node.rs`, the only module with layout
//!   `unsafe`); nodes are handled as `NodeRef`s, raw pointers kept alive by the epoch guard.
//! - Direct table (`direct.rs`, built once a trie has 4096 leaves): for each /16 (top 16 key
//!   bits), the leaf of the longest prefix of length at most 16 covering it. Backtracking meets
//!   covering prefixes longest first, and a strip at key bit `b` only finds prefixes with
//!   `slen > b`; so when the next strip is at `b >= BITS - 17` the lookup reads the slot's entry
//!   instead, and if the caller's filter refuses that alias it starts over without the shortcut.
//! - [`TrieWriter::insert_many`] loads an empty trie at once, every tnode built at its final width
//!   by the same inflate rule, rather than by the inflate cascade of sorted inserts.
//! - [`FibTable`]: one routing table: a trie of [`FibAlias`]es (table, tos, type, shared
//!   [`RouteInfo`]) with the kernel's insert flags ([`InsertFlags`]: create, excl, replace,
//!   append), delete by [`RouteSelector`], and lookups that honour tos, scope, route type and
//!   dead next hops.
//! - [`Fib`]: tables by id plus [`FibRule`]s. With only the default rules, local and main
//!   share one trie (aliases tagged with their table, local first within a length) and a
//!   lookup walks it once, as the kernel's merged trie; the first custom rule unmerges them
//!   (`store.rs`: a table reaches its trie through a pointer the unmerge swaps) and rules are
//!   then walked in order.
//!
//! # Concurrency (epochs stand in for RCU)
//! Readers pin a `crossbeam_epoch::Guard` (once per batch of packets) and pass it to
//! [`LcTrie::lookup`], [`FibTable::lookup`] or [`Fib::lookup`]; results borrow from the guard.
//!
//! Who writes shows in the types: a [`Fib`] (and the [`FibTable`]s reached from it) or an
//! [`LcTrie`] shared with readers has no method that changes it. Each has one writer,
//! [`FibWriter`] or [`TrieWriter`] (not `Clone`; changes take `&mut self`), which makes the
//! structure, hands readers its `Arc` ([`FibWriter::reader`]) and derefs to it for its own
//! reads. So do a standalone [`FastLpm`] ([`FastLpmWriter`]) and a nexthop object
//! ([`NexthopWriter`]: routes and lookups hold the `Arc<NexthopObject>`, which cannot replace its
//! group). The same rule holds in addr-table, policy-tree, neigh-table and udp-socktab.
//!
//! Writers are serialized by a mutex per trie (another for the FIB's rules and table map) and
//! never modify what a reader may be reading except through atomics:
//! - a leaf is immutable: changing its aliases publishes a new leaf with one pointer store;
//! - a new branch is built completely before the pointer store that links it;
//! - inflate and halve build the replacement tnode (and split or paired children) off to the
//!   side and link it with one store; the nodes they replace are retired with `defer_destroy`
//!   and freed once every reader pinned before has unpinned;
//! - suffix lengths are raised before a prefix becomes visible and lowered after it is gone,
//!   so a reader may see a value too large (an extra backtrack), never too small;
//! - direct-table entries are single atomic pointers to leaves in the trie: the writer moves them
//!   to a new leaf after linking it and away from an old leaf before retiring it, so an entry
//!   never names a freed leaf, and each entry read is one consistent version of a leaf. A
//!   bulk-loaded trie and a newly built table are published complete, with one store each.
//!
//! So a lookup racing a change answers as if it ran wholly before or wholly after it.
//!
//! Guards: every public function taking a `Guard` panics unless the guard pins
//! crossbeam-epoch's default collector (from `crossbeam_epoch::pin()`), the collector the
//! writers retire into (two pointers compared, once per call, once per batch for the batch
//! lookups; the functions it calls trust it).
//!
//! # Example
//! ```
//! use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, Route, RouteType};
//!
//! let mut writer = FibWriter::<u32>::new(); // the control plane's
//! let fib = writer.reader().clone(); // a run loop's: `Arc<Fib<u32>>`, read only
//! let gw = u32::from(std::net::Ipv4Addr::new(192, 0, 2, 1));
//! writer.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(gw), 2)]), InsertFlags::ADD)?;
//! writer.insert(&Route::reject(0x0a00_0000, 8, 254, RouteType::Unreachable), InsertFlags::ADD)?;
//!
//! let guard = crossbeam_epoch::pin(); // once per batch
//! let hop = fib.lookup(&Flow::to(0x0808_0808), &guard).unwrap();
//! assert_eq!(hop.alias.info.nexthops[hop.nh_sel].gateway_same(), Some(gw));
//! assert!(fib.lookup(&Flow::to(0x0a01_0203), &guard).is_err());
//! # Ok::<(), fib_trie::RouteError>(())
//! ```
mod answers;
mod bulk;
mod direct;
mod fast;
mod fib;
mod guard;
mod key;
mod metrics;
pub mod multipath;
mod nexthop;
mod node;
mod reference;
mod route;
mod stats;
mod store;
mod table;
mod trie;
mod writer;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = fib_trie::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use answers::RouteTag;
pub use crossbeam_epoch;

pub use direct::{DIRECT_BITS, DIRECT_MIN_LEAVES};
pub use fast::{FastLpm, FastLpmView, PrefixSource, WIDE_AT, wide_bits};
pub use fib::{Fib, FibRule, FlowBatch, RuleAction, RuleError};
pub use key::TrieKey;
pub use metrics::Metrics;
pub use nexthop::{NexthopGroup, NexthopObject, NexthopWriter};
pub use node::Alias;
pub use reference::ReferenceLpm;
pub use route::{
    FibAlias, Gateway, InsertFlags, NextHop, NextHopFlags, Resolved, Route, RouteError, RouteInfo,
    RouteSelector, RouteType, Scope,
};
pub use stats::TrieStats;
pub use store::FastStats;
pub use table::{FibResult, FibTable, Flow, LookupError, TableLookup, ids};
pub use trie::{
    BATCH, HALVE_THRESHOLD, HALVE_THRESHOLD_ROOT, INFLATE_THRESHOLD, INFLATE_THRESHOLD_ROOT,
    LcTrie, MAX_WORK, Match, PrefixError, check_prefix,
};
pub use writer::{COMPACT_MIN_CHANGES, FastLpmWriter, FibWriter, TrieWriter};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
