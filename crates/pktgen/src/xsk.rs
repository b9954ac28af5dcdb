//! Opening one AF_XDP socket with its own UMEM (the [`afxdp`] module), for sending or for
//! receiving.

use afxdp::{Program, SocketOptions, UmemOptions};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

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
/// rings of `frames / 2` (RX, TX) and `frames` (fill, completion) entries, through the
/// [`afxdp`] module the forwarder uses too.
///
/// The calling thread must be in the interface's network namespace.
///
/// # Errors
/// [`GenError::AfXdp`].
pub fn open(iface: &str, queue: u32, frames: u32, role: Role) -> Result<Xsk, GenError> {
    let frames = frames.next_power_of_two().max(64);
    let ring = frames / 2;
    let (umem, descs) = afxdp::open_umem(&UmemOptions {
        frame_size: FRAME_SIZE,
        frames,
        fill_ring: frames,
        comp_ring: frames,
    })?;
    let options = SocketOptions {
        rx_ring: ring,
        tx_ring: ring,
        zero_copy: false,
        program: match role {
            Role::Send => Program::Own,
            Role::Receive => Program::Libxdp,
        },
    };
    let socket = afxdp::open_socket(&umem, iface, queue, &options)?;
    // The UMEM is this socket's alone: the first socket of a pair always gets the rings.
    let (fill, comp) = socket.rings.ok_or_else(|| afxdp::Error::Socket {
        iface: iface.to_owned(),
        queue,
        reason: "the first socket of a UMEM has no fill ring".into(),
    })?;
    Ok(Xsk {
        umem,
        descs,
        tx: socket.tx,
        rx: socket.rx,
        fill,
        comp,
        tx_ring: ring,
    })
}
