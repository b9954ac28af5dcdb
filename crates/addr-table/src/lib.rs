//! Local addresses per network namespace in a resizable, epoch-protected hash multimap: a
//! user-space rendering of the kernel's `rhltable`, as proposed (seed 000, 2026) to replace the
//! fixed 256-bucket `inet_addr_lst` behind `__ip_dev_find`, for IPv4 and IPv6.
//!
//! # Layers
//!
//! - [`RhlTable<K, V>`]: the generic multimap (rhashtable + rhltable). A bucket is one 64-byte
//!   cache line holding its keys and values inline (both [`Inline`]: 6 slots of 8 bytes for
//!   `u32` keys with values of up to 4 bytes, 4 with 8-byte values, 2 for `u128` keys), plus
//!   a link to an overflow line when more keys land in it. A key with several objects
//!   (duplicates) keeps the 32-bit index of its list, newest first, in its slot; [`len`] counts distinct keys. A lookup first tests its
//!   key's bit in the bucket's 64-bit tag (a Bloom filter of the chain's keys, in a dense
//!   array beside the lines), which ends most misses without reading a line; a hit then reads
//!   one line at any size (two for the rare key in an overflow line or with duplicates) and
//!   returns a **copy** of the value: the keys sit side by side in the line
//!   and are compared at once (six IPv4 keys in two SSE2 compares). Each bucket table has its
//!   own random seed (a keyed multiply-xorshift-multiply hash). Sizes count in the kernel's
//!   units, one per slot (6 per line of 6 slots), in a power-of-two number of lines: the
//!   table grows above 7/8 load (5.25 keys per 6-slot line on average; hashbrown's maximum
//!   load, where the kernel's is 3/4: [`GROW_LOAD`]), shrinks below 30% down to `min_size`
//!   (default 32: 8 lines), and rehashes at once when an insert finds a bucket chain holding
//!   more than [`ELASTICITY`] (16; 24 for 6-slot lines) keys: bigger if above 7/8, else the
//!   same size with a fresh seed (the DoS guard).
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
//! and never lock, allocate or wait.
//!
//! Who writes shows in the types (one rule in all of xfwd's table crates): a table shared with
//! readers (`Arc<AddrTable>`, `Arc<RhlTable>`, and the hashes reached from an `AddrTable`) has
//! no method that changes it. Its one writer, [`AddrWriter`] or [`RhlWriter`] (not `Clone`,
//! `&mut self` for every change), makes it, hands readers its `Arc` (`writer.reader()`) and
//! derefs to it for its own reads.
//!
//! Writers take an internal mutex that readers never touch, publish with release stores, and free through the epoch (deferred until every
//! reader pinned at the time has unpinned).
//!
//! Readers copy a line's slots with relaxed atomic loads between two loads of the line's
//! header word and keep the copy only if the header did not change (it carries a 48-bit
//! generation bumped by every write to the line); the writer never changes the words of an
//! occupied slot, it fills a free one and publishes it with one header store (which may clear
//! the slot it replaces in the same store). So a reader never sees a torn value and never
//! waits for a writer: every published state of a line is whole, and a retry only happens
//! when a write completed during the read. (The kernel's seqcount readers spin while a write
//! is in progress; here there is no such state.)
//!
//! A rehash hangs the new table off the old one (`future`). Inserts go to the newest table;
//! lookups search the old table, then the new; every write first migrates the bucket its key
//! hashes to in the old table plus a share of the rest (a rehash completes within
//! [`MIGRATE_WRITES`] writes, or at once with [`RhlWriter::finish_rehash`]), so writer operations
//! only ever edit the newest table. Migration publishes each key in the new table before it
//! clears it in the old one, so a reader that searches the old table and then the new one
//! finds every key that stayed in the map. Within a table a key only moves forwards along its
//! chain (a rewrite that finds its line full goes further down), so a reader scanning the
//! chain from its head cannot miss it; lines are never relinked into another chain, so the
//! kernel's nulls markers are not needed. When the old table is empty the new one becomes
//! current and the old one is retired. One migration at a time: a rehash due while one runs
//! first completes it.
//!
//! Invariants (checked by the tests): every key sits in exactly one slot of the live tables
//! (for the length of a writer's operation, two);
//! a key never removed is found by every reader; the newest table's load stays in [30%, 87.5%]
//! (or the table is at `min_size`); a bucket chain of more than 16 keys exists only until the
//! next insert into it starts a reseed.
//!
//! # Example
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
//! use addr_table::{AddrWriter, IfAddr, NetnsId, Scope};
//!
//! let mut writer = AddrWriter::new(NetnsId(4026531840));
//! // The control thread mirrors RTM_NEWADDR messages through the table's one writer...
//! writer.add(IfAddr::new(Ipv4Addr::new(127, 0, 0, 1), 8, 1).with_scope(Scope::HOST))?;
//! writer.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 10), 24, 2))?;
//! writer.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 11), 24, 2))?; // secondary
//! writer.add(IfAddr::new("2001:db8::10".parse::<Ipv6Addr>().unwrap(), 64, 2))?;
//!
//! // ...while a run loop, holding the `Arc<AddrTable>`, pins once per batch of packets.
//! let netns = writer.reader().clone();
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
//! [`GROW_LOAD`]: rhltable::GROW_LOAD
//! [`MIGRATE_WRITES`]: rhltable::MIGRATE_WRITES
#![warn(missing_docs)]

pub mod addr;
mod array;
mod bucket;
pub mod error;
pub mod fixed;
pub mod inline;
mod lists;
pub mod rhltable;
pub mod seed;
mod writer;

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
pub use fixed::{FixedTable, FixedWriter};
pub use inline::Inline;
pub use rhltable::{Params, RehashCounts, RhlTable, TableStats};
pub use seed::SeedMode;
pub use writer::{AddrWriter, RhlWriter};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
