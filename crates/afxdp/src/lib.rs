//! xfwd's AF_XDP plumbing, in one place for the forwarder (`xfwd run`) and the traffic
//! generator (`pktgen`): opening a UMEM and its sockets (over [xsk-rs]), the ring system calls
//! (TX kicks, fill-ring wakeups, poll when idle), busy polling, `XDP_STATISTICS`, and access
//! to a frame's whole UMEM chunk, headroom included.
//!
//! # What it renders
//! The user-space half of `net/xdp/xsk.c`: a UMEM of equal chunks (2048 or 4096 bytes, aligned
//! mode) registered with the kernel, four rings per (interface, queue) (fill, RX, TX,
//! completion), and `need_wakeup`, with which the kernel says when a ring needs a system call.
//!
//! # The frame contract
//! The kernel writes a received packet at `XDP_PACKET_HEADROOM` (256 bytes) past the start of
//! its chunk (plus the UMEM's own headroom, 0 here). [`chunk_mut`] hands out the whole chunk and
//! the packet's offset in it, so a packet pipeline can grow the packet into the headroom
//! (an ICMP error in front of the quoted original) or drop bytes at its front (a VLAN tag)
//! without copying; [`commit`] sets the descriptor's length for transmission.
//!
//! Limit: xsk-rs 0.11 cannot give a TX descriptor another address than its chunk's data start,
//! so a packet whose start moved is shifted back there by [`commit`] (one `memmove` of the
//! packet; [`Commit::Shifted`] says when it happened so that callers count it). Only frames
//! whose start moves pay it: a VLAN tag removed, an ICMP error built in place.
//!
//! # Invariants
//! - Every frame of a UMEM is owned by exactly one party at a time: the caller's free list, a
//!   fill ring, an RX ring, the caller (between consuming it and producing it again), a TX
//!   ring, a completion ring. The `unsafe` functions here ask the caller to say so.
//! - No allocation and no system call per packet: the system calls here are per batch or per
//!   idle turn.
//!
//! # Example
//! ```no_run
//! use afxdp::{Program, SocketOptions, UmemOptions};
//!
//! let (umem, mut free) = afxdp::open_umem(&UmemOptions::default())?;
//! let options = SocketOptions { program: Program::Libxdp, ..SocketOptions::default() };
//! let mut socket = afxdp::open_socket(&umem, "eth0", 0, &options)?;
//! let (fill, _comp) = socket.rings.as_mut().expect("the first socket of a pair");
//! // SAFETY: the frames come straight from `open_umem`; nothing else holds them.
//! let given = unsafe { fill.produce(&free) };
//! free.drain(..given);
//! let mut descs = [afxdp::FrameDesc::default(); 64];
//! // SAFETY: `descs` receives frames of `umem` the kernel has finished writing.
//! let received = unsafe { socket.rx.consume(&mut descs) };
//! for desc in &mut descs[..received] {
//!     let len = desc.lengths().data();
//!     // SAFETY: the frame was just consumed from the RX ring: this code owns it.
//!     let (chunk, offset) = unsafe { afxdp::chunk_mut(&umem, desc, 2048) };
//!     println!("{len} bytes at {offset} of a {}-byte chunk", chunk.len());
//! }
//! # Ok::<(), afxdp::Error>(())
//! ```
//!
//! [xsk-rs]: https://docs.rs/xsk-rs

mod chunk;
mod error;
mod open;
mod ring;

pub use chunk::{Commit, chunk_mut, commit};
pub use error::Error;
pub use open::{Program, Socket, SocketOptions, UmemOptions, open_socket, open_umem};
pub use ring::{Statistics, kick_tx, pollfd, set_busy_poll, statistics, wait_readable, wake_fill};
pub use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

/// The headroom the kernel leaves in front of a received packet (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: usize = 256;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
