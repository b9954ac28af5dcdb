//! xfwd's forwarding pipeline, sans IO: a batch of received frames in, a verdict per frame
//! out, over one network namespace's lock-free tables.
//!
//! # What it renders
//! The kernel's IPv4/IPv6 receive and forward path for a router (`ip_rcv` → `ip_route_input`
//! → `ip_forward` → `neigh_output`, and `ipv6_rcv` → `ip6_forward`), with the tables of the
//! sibling crates standing in for the kernel's: [`addr_table`] (`__ip_dev_find`, source
//! selection), [`fib_trie`] (`fib_lookup` with every route type and rules), [`dst_cache`] (an
//! input route cache per queue), [`neigh_table`] (neighbours and links), [`policy_tree`] (the
//! xfrm policy check, direction fwd) and [`udp_socktab`] (local UDP endpoints).
//!
//! For each frame: parse and validate (Ethernet, one 802.1Q tag by [`VlanMode`], ARP punted;
//! IPv4 version, IHL, lengths, header checksum, martian addresses, options allowed; IPv6
//! version, payload length, extension headers walked within a bound; the upper layer's ports,
//! none for fragments) → route (the queue's route cache, else: local address → local; FIB
//! unicast → egress link and neighbour; local/anycast → local; broadcast/multicast → kernel;
//! blackhole → drop; unreachable/prohibit/no route → ICMP) → local: a UDP endpoint or the
//! kernel; forward: policy fwd (block → drop, IPsec → kernel), TTL/hop limit ≤ 1 → time
//! exceeded, larger than the path MTU (the egress link's, or the route's `mtu` metric when
//! lower) → ICMP fragmentation needed (DF) / IPv4 fragments /
//! ICMPv6 packet too big, unresolved neighbour → hold buffer and a resolution request;
//! otherwise rewrite MACs, decrement TTL with an RFC 1624 checksum update, transmit.
//!
//! ICMP errors quote per RFC 1812/4443 (no error about an error or a later fragment; up to 576
//! or 1280 bytes), take their source from the ingress interface ([`AddrTable::select_src_v4`]
//! / [`select_src_v6`]), leave by the ingress interface back to the sender's MAC, and share a
//! per-queue [`TokenBucket`] (path-MTU errors exempt, as in the kernel).
//!
//! # Invariants
//! - No allocation, lock or system call per frame: a [`Queue`] allocates its route cache,
//!   hold buffer and resolution queue when made; frames are rewritten in place; extra frames
//!   come from the caller's [`FramePool`].
//! - Every frame gets exactly one [`Verdict`]; every verdict, drop and punt reason is counted
//!   in [`Counters`]; nothing is dropped silently.
//! - Untrusted bytes never panic the pipeline (property tests and fuzz targets check it).
//!
//! # Readers and writers
//! A run loop owns its [`Queue`] (`&mut self`), pins the epoch once per batch and passes the
//! `&Guard`, a monotonic `now` in nanoseconds, and the [`Tables`]. The control plane writes the
//! tables concurrently and bumps [`Tables::generation`] after each change it published, which
//! every queue's route cache checks; [`Queue::release_held`] polls the neighbour table's
//! generation.
//!
//! # Example
//! ```
//! use dataplane::{Config, Frame, HeapPool, Queue, Tables, Verdict};
//! use fib_trie::{InsertFlags, NextHop, Route};
//! use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
//! use udp_socktab::{NetnsConfig, SockTable, TableConfig};
//!
//! let (sockets, mut sock_writer) = SockTable::new(TableConfig::default())?;
//! let sock_netns = sock_writer.add_netns(NetnsConfig::default())?;
//! let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
//! // What the netlink mirror would fill in: two links, a route, a neighbour.
//! for (ifindex, mac) in [(1, [2, 0, 0, 0, 0, 1]), (2, [2, 0, 0, 0, 0, 2])] {
//!     let mut link = Link { mac: Some(mac), ..Link::new(ifindex, format!("eth{ifindex}")) };
//!     (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
//!     writers.links.upsert(link);
//! }
//! let gw = u32::from(std::net::Ipv4Addr::new(192, 0, 2, 1));
//! writers.fib4.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(gw), 2)]), InsertFlags::ADD)?;
//! writers.neigh.upsert(Neighbour::new(2, std::net::Ipv4Addr::from(gw).into(), Some([2, 0, 0, 0, 0, 0x99]), NudState::REACHABLE));
//! tables.generation.bump();
//!
//! // The run loop: one queue, one pin per batch.
//! let mut queue = Queue::new(Config::default())?;
//! let mut pool = HeapPool::new(2048, 16); // the run loop's spare UMEM chunks
//! let mut chunk = vec![0u8; 2048];
//! let packet = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1])
//!     .ipv4([198, 51, 100, 7], [203, 0, 113, 9], 64)
//!     .udp(5000, 53);
//! let mut bytes = Vec::new();
//! packet.write(&mut bytes, b"query")?;
//! chunk[256..256 + bytes.len()].copy_from_slice(&bytes);
//!
//! let guard = crossbeam_epoch::pin();
//! let mut frames = [Frame::new(&mut chunk, 256, bytes.len(), 1)];
//! queue.process_batch(&tables, &guard, 0, &mut frames, &mut pool);
//! assert_eq!(frames[0].verdict, Verdict::Transmit { ifindex: 2 });
//! let out = frames[0].bytes();
//! assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 0x99]); // the gateway's MAC
//! assert_eq!(out[14 + 8], 63); // TTL
//! assert_eq!(queue.counters().transmit, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`AddrTable::select_src_v4`]: addr_table::AddrTable::select_src_v4
//! [`select_src_v6`]: addr_table::AddrTable::select_src_v6
#![forbid(unsafe_code)]

mod config;
mod counters;
pub mod endpoint;
mod frag;
mod hold;
pub mod icmp;
mod memo;
pub mod parse;
mod peer_limit;
mod pool;
mod queue;
mod ratelimit;
mod reconfigure;
pub mod route;
pub mod stage_clock;
mod tables;
mod vector;
mod verdict;
pub mod wire;

/// The epoch-based reclamation this crate's readers run under, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) is in this crate's API, and an embedder that pins through
/// this path always holds the version the crate was built with.
///
/// ```
/// let guard = dataplane::crossbeam_epoch::pin();
/// # drop(guard);
/// ```
pub use crossbeam_epoch;

pub use config::{Config, ConfigError, VlanMode};
pub use counters::Counters;
/// The route cache's configuration, as [`Config::dst_cache`] holds it.
pub use dst_cache::Config as DstCacheConfig;
pub use frag::{MIN_V4_MTU, fragment_v4};
pub use hold::{HOLD_FRAME_OVERHEAD, Resolution};
pub use peer_limit::{
    BURST_FACTOR, DEFAULT_INTERVAL_MS, DEFAULT_V4_RATEMASK, DEFAULT_V6_RATEMASK, PeerLimiter,
};
pub use pool::{FramePool, HeapPool, Sent};
pub use queue::{Frame, Queue};
pub use ratelimit::TokenBucket;
pub use tables::{ICMP_PEER_SLOTS, Served, TableWriters, Tables};
pub use verdict::{DropReason, IcmpError, PuntReason, Verdict};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
