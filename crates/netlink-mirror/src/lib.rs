//! Mirrors one network namespace's kernel state (links, addresses, routes of every table
//! and type, neighbours, policy rules, xfrm policies) over netlink into xfwd's lock-free
//! tables: the user-space counterpart of what the kernel keeps in `net_device`s,
//! `in_ifaddr`/`inet6_ifaddr`, `fib_table`s and `fib_rules`, `neigh_table`s and the xfrm SPD.
//!
//! # How it keeps the copy exact
//! - A control thread per namespace enters the namespace (only itself: `setns` on that
//!   thread), opens an `NETLINK_ROUTE` socket subscribed to the link, neighbour, IPv4/IPv6
//!   address, route and rule groups, and an `NETLINK_XFRM` socket subscribed to
//!   `XFRMNLGRP_POLICY`, both with a large receive buffer (`SO_RCVBUFFORCE`); dumps and
//!   requests go over a second, unsubscribed, socket of each protocol, so an event flood can
//!   neither stall a dump nor hide its losses behind the dump's replies.
//! - Subscribe, then dump: each kind is dumped in turn (links first, since rules name
//!   interfaces); dump entries are applied as they arrive, events that arrive meanwhile are
//!   kept and applied after the dumps. A dump the kernel flags `NLM_F_DUMP_INTR` is restarted.
//! - Everything is applied as an idempotent upsert or a tolerant delete ([`apply`]), so an
//!   event seen again after a dump that already held it changes nothing.
//! - `ENOBUFS` (events lost) starts a resynchronisation: read the event socket until empty
//!   (which ends the kernel's silent congestion drops), dump everything again, apply it, and
//!   sweep what the dumps no longer hold; repeated while events are lost during the dumps.
//!   When a link loses `IFF_UP` or goes away the kernel flushes its IPv4 routes without
//!   notifications, so the routes are re-dumped then too.
//! - Mapping a message ([`map`]) is total: a message the tables cannot represent (nexthop
//!   objects, encapsulation, uid-range rules, marked policies, ...) is a [`MapError`],
//!   counted by kind in [`MirrorStats`] and logged with `tracing`, never a panic and never
//!   silently dropped. Messages outside the mirror's scope (cloned routes, bridge FDB, proxy
//!   and multicast neighbours) are counted as ignored.
//!
//! # Readers and writers
//! Only the control thread writes the tables: it owns their writers ([`TableWriters`]; the
//! [`MirroredTables`] it hands out hold read-only `Arc`s). It bumps
//! [`MirroredTables::generation`] after
//! every applied change (after publishing it), then tells the [`Observer`], if any.
//! Readers (the dataplane's run loops) look up under their own epoch guard and never wait for
//! the mirror. [`NeighResolver::request`] only queues (no syscall, no blocking); the control
//! thread sends `RTM_NEWNEIGH` with `NTF_USE` for it, rate-limited, and the resolved neighbour
//! comes back as an ordinary event.
//!
//! # Example
//! ```no_run
//! use std::time::Duration;
//! use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
//! use netlink_mirror::cli::{route_get, RouteGetArgs};
//!
//! let mirror = Mirror::start(NetnsSpec::Name("fwd".into()), MirrorOptions::default())?;
//! mirror.wait_synced(Duration::from_secs(60))?;
//! let tables = mirror.tables().clone(); // the Arcs the dataplane shares
//! let guard = crossbeam_epoch::pin();
//! let hop = tables.fib4.lookup(&fib_trie::Flow::to(0x0808_0808), &guard);
//! let args = RouteGetArgs { addr: "8.8.8.8".parse()?, selectors: vec![], netns: None };
//! println!("{}", route_get(&tables, &args)?);
//! # drop(hop);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// No unsafe code; the tests' memory diagnosis alone reads glibc's counters (`mallinfo2`).
#![cfg_attr(not(any(test, feature = "jemalloc-arenas")), forbid(unsafe_code))]
// The feature `jemalloc-arenas` binds the rebuild thread to its arena (two `mallctl` calls,
// module `compact`).
#![cfg_attr(any(test, feature = "jemalloc-arenas"), deny(unsafe_code))]

pub mod apply;
pub mod change;
pub mod cli;
mod compact;
mod control;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod json;
pub mod kernel_routes;
pub mod key;
pub mod map;
mod mirror;
pub mod netns;
pub mod nexthops;
pub mod nl_netconf;
pub mod nl_nexthop;
mod pending;
mod resolver;
mod socket;
pub mod stats;
#[cfg(test)]
mod sync_tests;
pub mod tables;

#[cfg(all(test, feature = "diag-jemalloc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(all(test, feature = "diag-mimalloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = netlink_mirror::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use change::{Change, ChangeOp, Observer};
pub use error::{MapError, MirrorError};
pub use mirror::{DEFAULT_RCVBUF, Mirror, MirrorHandle, MirrorOptions};
/// The devices' forwarding switches the mirror keeps ([`MirroredTables::devconf`]).
pub use neigh_table::{DevConf, DevConfTable, Ingress};
pub use netns::NetnsSpec;
pub use resolver::NeighResolver;
pub use stats::MirrorStats;
pub use tables::{MirroredTables, TableWriters};

/// The README's example, compiled (not run: it needs a namespace) as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
