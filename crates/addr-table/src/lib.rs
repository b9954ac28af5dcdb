//! Local addresses per network namespace in a resizable, epoch-protected hash multimap: a
//! user-space rendering of the kernel's `rhltable`, as proposed (seed 000, 2026) to replace the
//! fixed 256-bucket `inet_addr_lst` behind `__ip_dev_find`, for IPv4 and IPv6.
//!
//! # Layers
//!
//! - [`RhlTable<K, V>`]: the generic multimap (rhashtable + rhltable). A bucket is one 64-byte
//!   cache line holding six one-byte key fingerprints (tags) and six pointers to objects, plus a
//!   link to an overflow line when more than six keys land in it; objects with equal keys hang
//!   off the object in the slot, newest first; [`len`] counts distinct keys. A lookup reads one
//!   line for a miss and two (the bucket and the object) for a hit, at any size. Each bucket
//!   table has its own random seed (keyed foldhash). Sizes count four per bucket line, so the
//!   kernel's thresholds hold: the table grows above 75% load (3 keys per line on average),
//!   shrinks below 30% down to `min_size` (default 32: 8 lines), and rehashes at once when an
//!   insert finds a bucket chain holding more than [`ELASTICITY`] (16) keys: bigger if above
//!   75%, else the same size with a fresh seed (the DoS guard).
//! - [`AddrTable`]: one namespace ([`NetnsId`]) of [`IfAddr`]s: an `RhlTable` per family for
//!   [`dev_find`](AddrTable::dev_find) / [`is_local`](AddrTable::is_local), and per-interface
//!   lists in kernel order for iteration, source selection
//!   ([`select_src_v4`](AddrTable::select_src_v4), [`select_src_v6`](AddrTable::select_src_v6))
//!   and the lifetime [`sweep`](AddrTable::sweep).
//! - [`FixedTable`]: the old design (256 hlist buckets, `hash_32(net_mix ^ addr)`), the test
//!   reference and benchmark baseline.
//!
//! # Concurrency (epochs stand in for RCU)
//!
//! Readers take a `&crossbeam_epoch::Guard` from `crossbeam_epoch::pin()` (pin once per batch)
//! and never lock, allocate or wait. Writers are serialized by an internal mutex that readers
//! never touch, publish with release stores, and free through the epoch (deferred until every
//! reader pinned at the time has unpinned).
//!
//! A rehash hangs the new table off the old one (`future`). Inserts go to the newest table;
//! lookups search the old table, then the new; every write first migrates the bucket its key
//! hashes to in the old table plus a share of the rest (a rehash completes within
//! [`MIGRATE_WRITES`] writes, or at once with [`RhlTable::finish_rehash`]), so writer operations
//! only ever edit the newest table. Objects never move between the slots of one table; the
//! writer publishes an object by storing its pointer into a free slot and then its tag, and
//! unpublishes it in the reverse order. Migration moves each object's pointer (not the object):
//! it is published in the new table before its slot in the old one is cleared, so a reader
//! that searches the old table and then the new one finds every object that stayed in the map
//! (the kernel needs nulls markers because it relinks chain nodes into the new table; bucket
//! lines are never relinked, so the walk cannot stray into another chain). When the old table
//! is empty the new one becomes current and the old one is retired. One migration at a time:
//! a rehash due while one runs first completes it.
//!
//! Invariants (checked by the tests): every object is reachable from exactly one live table;
//! a key never removed is found by every reader; the newest table's load stays in [30%, 75%]
//! (or the table is at `min_size`); a bucket chain of more than 16 keys exists only until the
//! next insert into it starts a reseed.
//!
//! # Example
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
//! use addr_table::{AddrTable, IfAddr, NetnsId, Scope};
//!
//! let netns = AddrTable::new(NetnsId(4026531840));
//! // The control thread mirrors RTM_NEWADDR messages...
//! netns.add(IfAddr::new(Ipv4Addr::new(127, 0, 0, 1), 8, 1).with_scope(Scope::HOST))?;
//! netns.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 10), 24, 2))?;
//! netns.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 11), 24, 2))?; // secondary
//! netns.add(IfAddr::new("2001:db8::10".parse::<Ipv6Addr>().unwrap(), 64, 2))?;
//!
//! // ...while a run loop pins once per batch of packets.
//! let guard = crossbeam_epoch::pin();
//! assert_eq!(netns.dev_find(Ipv4Addr::new(192, 0, 2, 11), None, &guard), Some(2));
//! assert!(netns.is_local(IpAddr::V6("2001:db8::10".parse().unwrap()), &guard));
//! let src = netns.select_src_v4(2, Some(Ipv4Addr::new(192, 0, 2, 99)), Scope::UNIVERSE, &guard);
//! assert_eq!(src, Some(Ipv4Addr::new(192, 0, 2, 10)));
//! # Ok::<(), addr_table::AddrError>(())
//! ```
//!
//! [`len`]: RhlTable::len
//! [`ELASTICITY`]: rhltable::ELASTICITY
//! [`MIGRATE_WRITES`]: rhltable::MIGRATE_WRITES
#![warn(missing_docs)]

pub mod addr;
mod bucket;
pub mod error;
pub mod fixed;
pub mod rhltable;
pub mod seed;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = addr_table::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use addr::AddrError;
pub use addr::entry::{IfAddr, Label, NetnsId};
pub use addr::family::{Family, Removal};
pub use addr::flags::{IfaFlags, Scope};
pub use addr::table::{AddrConfig, AddrTable, FamilySweep, LocalAddr, Sweep};
pub use bucket::Dups;
pub use error::{InsertError, ParamsError};
pub use fixed::FixedTable;
pub use rhltable::{Params, RehashCounts, RhlTable, TableStats};
pub use seed::SeedMode;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
