//! Opening one AF_XDP socket with its own UMEM (xsk-rs), for sending or for receiving.

use std::num::NonZeroU32;

use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::GenError;

/// Bytes per UMEM frame: a power of two that holds a 1518-byte frame.
pub const FRAME_SIZE: u32 = 2048;

/// Whether the socket receives (libxdp's default program redirects the queue to it) or only
/// sends (no XDP program is loaded on the interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// TX only: `XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD`.
    Send,
    /// RX: libxdp loads its redirect-everything program (native XDP mode).
    Receive,
}

/// One socket bound to (interface, queue), with the UMEM it alone uses.
pub struct Xsk {
    /// The UMEM.
    pub umem: Umem,
    /// Every frame of the UMEM, none handed to the kernel yet.
    pub descs: Vec<FrameDesc>,
    /// The TX ring.
    pub tx: TxQueue,
    /// The RX ring.
    pub rx: RxQueue,
    /// The fill ring.
    pub fill: FillQueue,
    /// The completion ring.
    pub comp: CompQueue,
    /// The size of the TX ring.
    pub tx_ring: u32,
}

/// Opens a copy-mode socket (veth has no zero-copy) with `need_wakeup`, `frames` UMEM frames,
/// rings of `frames / 2` (RX, TX) and `frames` (fill, completion) entries.
///
/// The calling thread must be in the interface's network namespace.
///
/// # Errors
/// [`GenError::BadInterface`], [`GenError::Umem`], [`GenError::Socket`].
pub fn open(iface: &str, queue: u32, frames: u32, role: Role) -> Result<Xsk, GenError> {
    let frames = frames.next_power_of_two().max(64);
    let ring = frames / 2;
    let size = |n| QueueSize::new(n).map_err(|e| GenError::Umem(e.to_string()));
    let umem_config = UmemConfig::builder()
        .frame_size(FrameSize::new(FRAME_SIZE).map_err(|e| GenError::Umem(e.to_string()))?)
        .fill_queue_size(size(frames)?)
        .comp_queue_size(size(frames)?)
        .build()
        .map_err(|e| GenError::Umem(e.to_string()))?;
    let count = NonZeroU32::new(frames).ok_or_else(|| GenError::Umem("no frames".into()))?;
    let (umem, descs) =
        Umem::new(umem_config, count, false).map_err(|e| GenError::Umem(e.to_string()))?;
    let libxdp = match role {
        Role::Send => LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD,
        Role::Receive => LibxdpFlags::empty(),
    };
    let config = SocketConfig::builder()
        .rx_queue_size(size(ring)?)
        .tx_queue_size(size(ring)?)
        .libxdp_flags(libxdp)
        .xdp_flags(XdpFlags::XDP_FLAGS_DRV_MODE)
        .bind_flags(BindFlags::XDP_COPY | BindFlags::XDP_USE_NEED_WAKEUP)
        .build();
    let interface: Interface = iface
        .parse()
        .map_err(|_| GenError::BadInterface(iface.to_owned()))?;
    let socket_error = |reason: String| GenError::Socket {
        iface: iface.to_owned(),
        queue,
        reason,
    };
    // SAFETY: this UMEM was created just above and is used by this one socket only, so no
    // other socket can hand its frames to the kernel; libxdp may load (Receive) or not load
    // (Send) its program on this (interface, queue).
    let (tx, rx, rings) = unsafe { Socket::new(config, &umem, &interface, queue) }
        .map_err(|e| socket_error(e.to_string()))?;
    let (fill, comp) =
        rings.ok_or_else(|| socket_error("the first socket of a UMEM has no fill ring".into()))?;
    Ok(Xsk {
        umem,
        descs,
        tx,
        rx,
        fill,
        comp,
        tx_ring: ring,
    })
}
