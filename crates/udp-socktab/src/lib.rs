//! A UDP socket lookup table: the kernel's `udp_table` with its three hashes, per-namespace
//! tables, `SO_REUSEPORT` groups and port allocation, for a user-space dataplane that delivers
//! datagrams to local endpoints.
//!
//! # What it renders
//!
//! - **hash** (by port, `(port + net_hash_mix) & mask`): kept by the [`Writer`] alone, for bind
//!   conflicts, the port search and finding the `SO_REUSEPORT` group to join.
//! - **hash2** (by local address and port): what lookups walk, once at the destination address
//!   and once at the wildcard; each slot counts its sockets that are also in hash4.
//! - **hash4** (by the 4-tuple of connected sockets, Linux 6.13): an exact match tried first
//!   when the destination's hash2 slot has hash4 users.
//! - **Tables**: one global table of 256..=65536 slots shared by namespaces that mix a random
//!   per-namespace value into every hash, or a namespace's own table of 128..=65536 slots chosen
//!   when it is created (`udp_child_hash_entries`; Linux 6.2).
//!
//! # Lookup rules (see [`SockTable::lookup`])
//!
//! hash4 exact match → hash2 at the destination → hash2 at the wildcard. In a chain the best
//! score wins, the first one met among equals. IPv4 packets: a socket matches only with the
//! same namespace, port and bound address (or wildcard) and not IPv6-only; base 2 for IPv4
//! sockets, 1 for dual-stack IPv6 ones; +4 each for a connected peer address and port (a
//! mismatch is no match), +4 for a bound device (likewise); +1 when the socket's incoming CPU
//! is the looking-up CPU. IPv6 packets: IPv6 sockets only, base 0 and +1 for each. The first
//! unconnected socket to reach a new best score hands over to its `SO_REUSEPORT` group, which
//! picks the member at `(hash * n) >> 32` or the next unconnected one; if the group never had a
//! connected member its pick is final.
//!
//! # Invariants; what readers and the writer may do
//!
//! - Chains and groups are immutable arrays of immutable socket records ([`Sock`]), replaced
//!   whole by the writer (copy-on-write) and freed through the epoch; the chains' order
//!   follows the kernel's (new sockets at the head, fresh `SO_REUSEPORT` IPv6 ones at the tail
//!   of hash2; a rehashed socket to the head of its new chain; a group's leaver replaced by its
//!   last member).
//! - Readers pin a `crossbeam_epoch::Guard` (once per batch) and call [`SockTable::lookup`]:
//!   no lock, no allocation, no write except the optional [`Sock::record_incoming_cpu`]. They
//!   see each socket's old or new record, never a mixture.
//! - There is one [`Writer`]; its `&mut self` methods are the socket calls (bind, connect,
//!   disconnect, close, setsockopt) with the kernel's rules and errors.
//! - Retired chains and records are freed by crossbeam's global collector, that is by whichever
//!   thread's pin next collects, a reader's included. After a bulk change (thousands of binds),
//!   a control plane can free its garbage itself by pinning and calling `Guard::flush` a number
//!   of times before the run loops notice.
//! - That collector is the only one that keeps retired memory alive, so [`SockTable::lookup`]
//!   and [`SockTable::lookup_hash2_only`] panic on a guard that does not pin it (one from
//!   another `Collector`, or `unprotected()`): two pointers compared, once per call.
//! - [`reference::Reference`] is the brute-force model the tests compare against.
//!
//! ```
//! use udp_socktab::{Family, Lookup, NetnsConfig, SockOptions, SockTable, TableConfig};
//!
//! let (table, mut writer) = SockTable::new(TableConfig::default())?;
//! let ns = writer.add_netns(NetnsConfig::default())?;
//! writer.add_local_addr(ns, "192.0.2.1".parse()?, 2)?;
//! let rp = SockOptions { reuseport: true, ..SockOptions::default() };
//! let any_v4 = writer.socket(ns, Family::V4, rp)?;
//! writer.bind(any_v4, "0.0.0.0:4789".parse()?)?;
//! let specific = writer.socket(ns, Family::V4, rp)?;
//! writer.bind(specific, "192.0.2.1:4789".parse()?)?;
//! let connected = writer.socket(ns, Family::V4, SockOptions::default())?;
//! writer.connect(connected, "198.51.100.9:4789".parse()?, "192.0.2.1".parse()?)?;
//! let port = writer.sock(connected).unwrap().local_addr().port();
//!
//! let guard = crossbeam_epoch::pin(); // once per batch, in the run loop
//! let lookup = |src: &str, dst: &str| {
//!     let key = Lookup {
//!         netns: ns,
//!         src: src.parse().unwrap(),
//!         dst: dst.parse().unwrap(),
//!         ifindex: 1,
//!         hash: 0x9e37_79b9,
//!         cpu: 0,
//!     };
//!     table.lookup(&key, &guard).map(|sk| sk.id())
//! };
//! // The specific address beats the wildcard, whichever was bound first.
//! assert_eq!(lookup("203.0.113.5:1000", "192.0.2.1:4789"), Some(specific));
//! assert_eq!(lookup("203.0.113.5:1000", "192.0.2.2:4789"), Some(any_v4));
//! // hash4: the connected socket takes its peer's datagrams only.
//! assert_eq!(lookup("198.51.100.9:4789", &format!("192.0.2.1:{port}")), Some(connected));
//! assert_eq!(lookup("198.51.100.9:4790", &format!("192.0.2.1:{port}")), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod addr;
mod chain;
mod config;
mod conflict;
mod error;
mod guard;
mod hash;
pub mod reference;
mod reuseport;
mod sock;
mod table;
mod writer;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = udp_socktab::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use config::{
    DEFAULT_LOCAL_PORT_RANGE, MAX_HASH_ENTRIES, MIN_CHILD_HASH_ENTRIES, MIN_HASH_ENTRIES,
    NetnsConfig, TableConfig,
};
pub use error::{ConfigError, Error};
pub use sock::{Family, Lookup, NetnsId, Sock, SockId, SockOptions};
pub use table::SockTable;
pub use writer::Writer;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
