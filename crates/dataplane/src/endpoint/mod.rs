//! UDP endpoints that live in the dataplane: sockets of an embedder, and the built-in echo
//! (RFC 862) and STAMP / TWAMP-light reflector (RFC 8762, RFC 5357 appendix I) services,
//! answered by the run loops themselves.
//!
//! # What it renders
//! The kernel's UDP socket calls and datagram paths over [`udp_socktab`]: `bind` (an explicit
//! port, or port 0 through the table's port search), `connect` (the source address from the
//! output route, as `ip_route_connect`), `SO_REUSEPORT` groups and `close` go through the
//! table's [`Writer`](udp_socktab::Writer) with the kernel's rules and errors; the pipeline's
//! lookups choose among the endpoints exactly as `__udp4_lib_lookup` / `__udp6_lib_lookup`
//! (connected first, then bound, then wildcard; a reuseport group member by the flow hash), and
//! give [`Verdict::Deliver`]. Each endpoint receives through a bounded queue (a full queue drops
//! and counts, as `SO_RCVBUF` does) and sends through the output path: route lookup (rules
//! with `iif lo`), source selection (the route's preferred source, else the egress interface's
//! address), the egress link, the neighbour (the queue's hold buffer while it resolves), full
//! IPv4 and UDP checksums.
//!
//! # Who does what
//! - The control side, [`Endpoints`], owns the socket table's writer: binds, connects and closes
//!   (the embedder's threads, behind a `Mutex` if several). Binds can be checked against the
//!   kernel's own sockets ([`KernelSockets`]: an endpoint never takes a port a kernel socket
//!   holds) and reported to whoever steers traffic ([`PortObserver`]: the forwarder's XDP
//!   program passes to user space only local UDP for bound ports).
//! - Each run loop has an [`EndpointRx`]: after [`Queue::process_batch`] it hands the batch's
//!   `Deliver` frames to [`EndpointRx::handle_batch`] (datagrams into receive queues, answers
//!   of the services built in place and sent), and calls [`EndpointRx::poll_transmit`] every
//!   turn to send what endpoints queued.
//! - The embedder reads and writes through an [`Endpoint`] handle from any thread.
//!
//! No allocation, lock or system call per datagram on either side: buffers are allocated when
//! an endpoint is bound and move between lock-free queues; a run loop re-reads the set of
//! endpoints only when it changed (one atomic load per batch).
//!
//! # Example
//! ```
//! use dataplane::endpoint::{BindOptions, EndpointConfig, Endpoints, Service};
//! use dataplane::{Config, Frame, HeapPool, Queue, Tables, Verdict};
//! use fib_trie::{InsertFlags, NextHop, Route};
//! use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
//! use udp_socktab::{NetnsConfig, SockTable, TableConfig};
//!
//! let (sockets, mut writer) = SockTable::new(TableConfig::default())?;
//! let sock_netns = writer.add_netns(NetnsConfig::default())?;
//! let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
//! let mut link = Link { mac: Some([2, 0, 0, 0, 0, 1]), ..Link::new(2, "eth0".to_string()) };
//! (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
//! writers.links.upsert(link);
//! let local = std::net::Ipv4Addr::new(192, 0, 2, 1);
//! writers.addrs.add(addr_table::IfAddr::new(local, 24, 2))?;
//! let subnet = u32::from(local) & !0xff;
//! writers.fib4.insert(&Route::unicast(subnet, 24, 254, vec![NextHop::new(None, 2)]), InsertFlags::ADD)?;
//! let peer = std::net::Ipv4Addr::new(192, 0, 2, 7);
//! writers.neigh.upsert(Neighbour::new(2, peer.into(), Some([2, 0, 0, 0, 0, 7]), NudState::REACHABLE));
//! tables.generation.bump();
//!
//! // Control side: an echo service on port 7, and a socket of the embedder on a free port.
//! let mut endpoints = Endpoints::new(writer, tables.clone(), EndpointConfig::default())?;
//! endpoints.add_local_addr(local.into(), 2)?;
//! endpoints.bind("0.0.0.0:7".parse()?, BindOptions::service(Service::Echo))?;
//! let socket = endpoints.bind("192.0.2.1:0".parse()?, BindOptions::default())?;
//! assert!(socket.local_addr().port() >= 32768);
//!
//! // A run loop: the pipeline delivers, the endpoints answer.
//! let mut queue = Queue::new(Config::default())?;
//! let mut rx = endpoints.rx();
//! let mut pool = HeapPool::new(2048, 8);
//! let mut bytes = Vec::new();
//! etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1])
//!     .ipv4(peer.octets(), local.octets(), 64)
//!     .udp(40000, 7)
//!     .write(&mut bytes, b"ping")?;
//! let mut chunk = vec![0u8; 2048];
//! chunk[256..256 + bytes.len()].copy_from_slice(&bytes);
//! let guard = crossbeam_epoch::pin();
//! let mut frames = [Frame::new(&mut chunk, 256, bytes.len(), 2)];
//! queue.process_batch(&tables, &guard, 0, &mut frames, &mut pool);
//! assert!(matches!(frames[0].verdict, Verdict::Deliver { .. }));
//! rx.handle_batch(&mut queue, &tables, &guard, 0, &mut || 0, &mut frames);
//! assert_eq!(frames[0].verdict, Verdict::Transmit { ifindex: 2 });
//! let echo = etherparse::SlicedPacket::from_ethernet(frames[0].bytes())?;
//! let Some(etherparse::TransportSlice::Udp(udp)) = echo.transport else { unreachable!() };
//! assert_eq!((udp.source_port(), udp.destination_port(), udp.payload()), (7, 40000, &b"ping"[..]));
//!
//! // The embedder's socket sends; the next turn of a run loop transmits it.
//! socket.send_to(b"hello", "192.0.2.7:9".parse()?)?;
//! assert_eq!(rx.poll_transmit(&mut queue, &tables, &guard, 0, &mut pool, 64), 1);
//! assert_eq!(pool.sent[0].ifindex, 2);
//! assert_eq!(socket.stats().sent, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod mailbox;
pub mod output;
pub mod reflect;
mod registry;
mod rx;

pub use mailbox::{EndpointStats, RecvMeta};
pub use output::SendError;
pub use reflect::ErrorEstimate;
pub use registry::{
    BindOptions, Endpoint, EndpointConfig, EndpointError, EndpointInfo, Endpoints, KernelSockets,
    PortObserver,
};
pub use rx::EndpointRx;

/// What answers an endpoint's datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Service {
    /// The embedder: datagrams wait in the endpoint's receive queue for
    /// [`Endpoint::recv_from`].
    #[default]
    Socket,
    /// The echo service (RFC 862): each datagram goes back to its sender unchanged, from the
    /// address it was sent to.
    Echo,
    /// The STAMP session reflector in stateless mode (RFC 8762 §4.3), which also answers
    /// TWAMP-light session-senders (RFC 5357 appendix I): unauthenticated test packets, the
    /// sender's sequence number reflected, receive and transmit timestamps (NTP format) with
    /// this error estimate, the sender's fields and TTL copied.
    Stamp {
        /// The error estimate of the timestamps this reflector writes.
        error: ErrorEstimate,
    },
}

impl Service {
    /// A short name (`socket`, `echo`, `stamp`) for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Service::Socket => "socket",
            Service::Echo => "echo",
            Service::Stamp { .. } => "stamp",
        }
    }
}
