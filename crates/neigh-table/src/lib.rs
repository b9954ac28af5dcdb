//! Neighbour (ARP / NDP) and link tables for a user-space dataplane, mirrored from the kernel.
//!
//! The kernel keeps neighbours in `struct neigh_table` instances (`arp_tbl`, `nd_tbl`): hash
//! tables of `struct neighbour` keyed by (device, address), read under RCU by the output path
//! (`__ipv4_neigh_lookup_noref`) and resized by the writer. [`NeighTable`] renders that for
//! xfwd: the control plane mirrors `RTM_NEWNEIGH` / `RTM_DELNEIGH` into it, and the packet path
//! reads the link-layer address of the next hop without locks. [`LinkTable`] does the same for
//! the few facts the packet path needs about interfaces (MAC, MTU, up or down, master).
//!
//! The state machine itself (probing, timers, NUD transitions) stays in the kernel: these tables
//! only hold its latest answer. A dataplane that needs a neighbour the kernel has not resolved
//! asks the kernel to resolve it (`RTM_NEWNEIGH` with `NTF_USE`) and waits for the update.
//!
//! Concurrency (crossbeam-epoch standing in for RCU): readers pin once per batch and pass the
//! `&Guard`; a returned reference lives as long as the guard. Who writes shows in the types
//! (one rule in all of xfwd's table crates): a table shared with readers (`Arc<NeighTable>`,
//! `Arc<LinkTable>`, `Arc<DevConfTable>`) has no method that changes it; its one writer
//! ([`NeighWriter`], [`LinkWriter`], [`DevConfWriter`]: not `Clone`, `&mut self` for every
//! change) makes it, hands readers its `Arc` (`writer.reader()`) and derefs to it for its own
//! reads. A write copies the one bucket chain it changes and publishes it with an
//! atomic swap; resizing publishes a whole new bucket array. A reader therefore sees each
//! entry either before or after a change, never a torn one. Every change bumps a generation
//! counter, so a hold queue can poll for "anything changed?" with one atomic load.
//!
//! Guards: the writers retire replaced chains into crossbeam-epoch's default collector, so every
//! reader function panics on a guard that does not pin it (one of another `Collector`, or
//! `unprotected()`), which would not keep the returned entry alive, whether or not the call
//! reads an entry: two pointers compared, once per call. addr-table, fib-trie, policy-tree and udp-socktab follow the same rule.
//!
//! ```
//! use std::net::Ipv6Addr;
//! use neigh_table::{Link, LinkWriter, NeighWriter, Neighbour, NudState};
//!
//! // The control plane keeps the writers...
//! let (mut neigh_writer, mut link_writer) = (NeighWriter::new(), LinkWriter::new());
//! // ...and a run loop holds `Arc<NeighTable>` and `Arc<LinkTable>`: it can only read.
//! let (neigh, links) = (neigh_writer.reader().clone(), link_writer.reader().clone());
//! link_writer.upsert(Link { mac: Some([2, 0, 0, 0, 0, 9]), ..Link::new(4, "eth1") });
//!
//! let router = "fe80::1".parse::<Ipv6Addr>()?;
//! neigh_writer.upsert(Neighbour::new(4, router.into(), Some([2, 0, 0, 0, 0, 1]), NudState::STALE));
//!
//! let guard = crossbeam_epoch::pin();
//! let dst_mac = neigh.lookup_v6(4, router, &guard).and_then(|n| n.usable_mac());
//! let src_mac = links.get(4, &guard).and_then(|l| l.mac);
//! assert_eq!((dst_mac, src_mac), (Some([2, 0, 0, 0, 0, 1]), Some([2, 0, 0, 0, 0, 9])));
//! # Ok::<(), std::net::AddrParseError>(())
//! ```

mod cow_map;
mod devconf;
mod guard;
mod link;
mod neigh;
mod writer;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = neigh_table::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use devconf::{DevConf, DevConfTable, Ingress, NETCONF_ALL, NETCONF_DEFAULT};
pub use link::{Link, LinkFlags, LinkTable, OperState};
pub use neigh::{NeighFlags, NeighTable, Neighbour, NudState};
pub use writer::{DevConfWriter, LinkWriter, NeighWriter};
