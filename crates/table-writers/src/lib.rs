//! The one writer of each table of a network namespace, as one set ([`TableWriters`]): what
//! the control plane keeps, while the run loops hold the tables' read-only `Arc`s.
//!
//! `netlink_mirror::MirroredTables::new` and `dataplane::Tables::new` both make tables with
//! their writers and return this type (each crate re-exports it), so there is one definition
//! of who may write.
//!
//! # Example
//! ```
//! use table_writers::TableWriters;
//!
//! let writers = TableWriters::new(
//!     addr_table::AddrWriter::new(addr_table::NetnsId(1)),
//!     neigh_table::DevConfWriter::followed(),
//! );
//! // Every table is empty; the FIBs have their default tables.
//! let guard = crossbeam_epoch::pin();
//! assert!(writers.fib4.reader().table(254, &guard).is_some());
//! assert_eq!(writers.links.reader().len(), 0);
//! ```
#![forbid(unsafe_code)]

use addr_table::AddrWriter;
use fib_trie::FibWriter;
use neigh_table::{DevConfWriter, LinkWriter, NeighWriter};
use policy_tree::PolicyWriter;

/// The one writer of each of a namespace's tables, made with them: owned by the control plane
/// (the netlink mirror's control thread, or a test standing in for it). Not `Clone`: each
/// writer is the only way to change its table, and dropping it freezes the table (readers
/// keep it alive).
#[derive(Debug)]
pub struct TableWriters {
    /// Writes the interfaces (`links`).
    pub links: LinkWriter,
    /// Writes the neighbours (`neigh`).
    pub neigh: NeighWriter,
    /// Writes the local addresses (`addrs`).
    pub addrs: AddrWriter,
    /// Writes the IPv4 routes and rules (`fib4`).
    pub fib4: FibWriter<u32>,
    /// Writes the IPv6 routes and rules (`fib6`).
    pub fib6: FibWriter<u128>,
    /// Writes the xfrm policies (`policies`).
    pub policies: PolicyWriter,
    /// Writes the devices' forwarding switches (`devconf`).
    pub devconf: DevConfWriter,
}

impl TableWriters {
    /// Writers of fresh tables: `addrs` and `devconf` as given (their settings are the
    /// caller's: the namespace's address configuration; device switches followed from a
    /// mirror, or permissive), the others empty (the FIBs with their default tables and
    /// rules).
    pub fn new(addrs: AddrWriter, devconf: DevConfWriter) -> Self {
        TableWriters {
            links: LinkWriter::new(),
            neigh: NeighWriter::new(),
            addrs,
            fib4: FibWriter::new(),
            fib6: FibWriter::new(),
            policies: PolicyWriter::new(),
            devconf,
        }
    }
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
