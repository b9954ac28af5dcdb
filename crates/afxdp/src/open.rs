//! Opening a UMEM and its sockets.

use std::num::NonZeroU32;

use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

use crate::Error;

/// The shape of a UMEM: how many chunks of what size, and its two rings.
///
/// ```
/// let options = afxdp::UmemOptions::default();
/// assert_eq!((options.frame_size, options.frames), (2048, 4096));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemOptions {
    /// Bytes per chunk: 2048 or 4096.
    pub frame_size: u32,
    /// Chunks.
    pub frames: u32,
    /// Fill ring entries (a power of two) of the first socket per (interface, queue).
    pub fill_ring: u32,
    /// Completion ring entries (a power of two), likewise.
    pub comp_ring: u32,
}

impl Default for UmemOptions {
    fn default() -> Self {
        UmemOptions {
            frame_size: 2048,
            frames: 4096,
            fill_ring: 2048,
            comp_ring: 2048,
        }
    }
}

/// Maps a UMEM and registers it with the kernel; returns it with a descriptor for each of its
/// chunks, none handed to the kernel yet (each descriptor's address is its chunk's data start,
/// [`XDP_PACKET_HEADROOM`](crate::XDP_PACKET_HEADROOM) past the chunk's start).
///
/// # Errors
/// [`Error::Umem`] for sizes the kernel refuses or when mapping or registering fails.
pub fn open_umem(options: &UmemOptions) -> Result<(Umem, Vec<FrameDesc>), Error> {
    let umem_error = |e: &dyn std::fmt::Display| Error::Umem(e.to_string());
    let size = |n| QueueSize::new(n).map_err(|e| umem_error(&e));
    let config = UmemConfig::builder()
        .frame_size(FrameSize::new(options.frame_size).map_err(|e| umem_error(&e))?)
        .fill_queue_size(size(options.fill_ring)?)
        .comp_queue_size(size(options.comp_ring)?)
        .build()
        .map_err(|e| umem_error(&e))?;
    let frames = NonZeroU32::new(options.frames).ok_or_else(|| Error::Umem("no frames".into()))?;
    Umem::new(config, frames, false).map_err(|e| umem_error(&e))
}

/// Who redirects the queue's packets into the socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Program {
    /// The caller's own XDP program, through its XSKMAP (libxdp loads nothing:
    /// `XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD`). Also right for a socket that only sends.
    #[default]
    Own,
    /// libxdp's default program, which redirects every packet of the queue (ARP and neighbour
    /// discovery included) to the socket; for a receiver on a link of its own.
    Libxdp,
}

/// How a socket is bound.
///
/// ```
/// let options = afxdp::SocketOptions::default();
/// assert_eq!((options.rx_ring, options.zero_copy, options.program), (1024, false, afxdp::Program::Own));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketOptions {
    /// RX ring entries (a power of two).
    pub rx_ring: u32,
    /// TX ring entries (a power of two).
    pub tx_ring: u32,
    /// Zero-copy (`XDP_ZEROCOPY`; fails on drivers without it, such as veth); copy mode
    /// otherwise. Sockets sharing a UMEM inherit the first one's mode.
    pub zero_copy: bool,
    /// Who redirects packets into the socket.
    pub program: Program,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            rx_ring: 1024,
            tx_ring: 1024,
            zero_copy: false,
            program: Program::Own,
        }
    }
}

/// One AF_XDP socket's rings.
pub struct Socket {
    /// The TX ring (its descriptor is the socket's: `tx.fd()`).
    pub tx: TxQueue,
    /// The RX ring.
    pub rx: RxQueue,
    /// The fill and completion rings, which the first socket of the UMEM on each (interface,
    /// queue) gets; `None` for later sockets on the same pair.
    pub rings: Option<(FillQueue, CompQueue)>,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("fd", &std::os::fd::AsRawFd::as_raw_fd(self.tx.fd()))
            .field("rings", &self.rings.is_some())
            .finish()
    }
}

/// How long a bind to a queue another socket has just released is retried. The kernel
/// unregisters a closed socket's buffer pool from its queue in deferred work; on a busy
/// machine (the lab tests, two at a time, creating and deleting namespaces) a queue was seen
/// still taken 2-5 s later, so the window is 10 s. A queue a live socket holds still fails,
/// with `EBUSY` in the message.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// An error's message followed by its cause's (xsk-rs keeps the errno in the cause).
fn with_cause(e: &dyn std::error::Error) -> String {
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Whether socket creation failed because the queue is still bound (`EBUSY`).
fn queue_busy(e: &xsk_rs::socket::SocketCreateError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.raw_os_error() == Some(libc::EBUSY))
}

/// Opens a socket on queue `queue` of `iface` over `umem`, with `need_wakeup`, in native XDP
/// mode. The calling thread must be in the interface's network namespace.
///
/// With [`Program::Own`] it is sound for any number of sockets sharing `umem` (the forwarder's
/// case: one UMEM per run loop, one socket on every interface). With [`Program::Libxdp`] the
/// UMEM must not be shared with another socket bound to the same (interface, queue): xsk-rs
/// could free libxdp's program twice otherwise, so that combination is refused.
///
/// # Errors
/// [`Error::BadInterface`], [`Error::Socket`] (also for the refused combination above).
pub fn open_socket(
    umem: &Umem,
    iface: &str,
    queue: u32,
    options: &SocketOptions,
) -> Result<Socket, Error> {
    let socket_error = |reason: String| Error::Socket {
        iface: iface.to_owned(),
        queue,
        reason,
    };
    let size = |n| QueueSize::new(n).map_err(|e| socket_error(e.to_string()));
    let mut bind = BindFlags::XDP_USE_NEED_WAKEUP;
    bind |= if options.zero_copy {
        BindFlags::XDP_ZEROCOPY
    } else {
        BindFlags::XDP_COPY
    };
    let libxdp = match options.program {
        Program::Own => LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD,
        Program::Libxdp => LibxdpFlags::empty(),
    };
    let config = SocketConfig::builder()
        .rx_queue_size(size(options.rx_ring)?)
        .tx_queue_size(size(options.tx_ring)?)
        .libxdp_flags(libxdp)
        .xdp_flags(XdpFlags::XDP_FLAGS_DRV_MODE)
        .bind_flags(bind)
        .build();
    let interface: Interface = iface
        .parse()
        .map_err(|_| Error::BadInterface(iface.to_owned()))?;
    // SAFETY: xsk-rs asks for XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD whenever the UMEM is shared
    // and the (interface, queue) already bound. With `Program::Own` the flag is set; with
    // `Program::Libxdp` a pair already bound through this UMEM returns no fill/completion
    // rings, which is refused just below, before the socket could be used; the queues drop
    // then, the same as when xsk-rs reports an error, with the program loaded by the first
    // socket still held by that socket.
    // The kernel frees a closed socket's hold on its queue in deferred work, so a socket
    // opened right after another on the same queue can find it still taken (`EBUSY`): such a
    // bind is retried for up to `BUSY_RETRY` before it counts as refused.
    let deadline = std::time::Instant::now() + BUSY_RETRY;
    let (tx, rx, rings) = loop {
        // SAFETY: see above; a failed attempt holds nothing (xsk-rs frees what it made).
        match unsafe { xsk_rs::Socket::new(config, umem, &interface, queue) } {
            Ok(socket) => break socket,
            Err(e) if queue_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(socket_error(with_cause(&e))),
        }
    };
    if options.program == Program::Libxdp && rings.is_none() {
        return Err(socket_error(
            "already bound through this UMEM: libxdp's program needs a pair of its own".into(),
        ));
    }
    Ok(Socket { tx, rx, rings })
}
