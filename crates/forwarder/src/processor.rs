//! What a run loop asks of the packet pipeline: the [`Processor`] trait, the [`Verdict`]s it
//! returns, and the [`PacketBuf`] view of a frame it gets.
//!
//! The run loop owns the frames (UMEM chunks); a processor sees one batch received on one
//! port, may rewrite each frame in place (and change its length within the chunk), and says
//! what becomes of it. It never keeps a frame after `process` returns.
#![forbid(unsafe_code)]

use crossbeam_epoch::Guard;
pub use dataplane::FramePool;

/// A frame of a batch: the packet bytes of one UMEM chunk, writable in place.
pub trait PacketBuf {
    /// The packet, from the Ethernet header on.
    fn data(&self) -> &[u8];
    /// The packet, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// The most bytes the chunk can hold.
    fn capacity(&mut self) -> usize;
    /// Changes the packet's length (new bytes past the old end are whatever the chunk held);
    /// returns false, changing nothing, when `len` exceeds [`PacketBuf::capacity`].
    fn set_len(&mut self, len: usize) -> bool;
}

/// A frame in ordinary memory, for tests and simulations.
///
/// ```
/// use forwarder::processor::{PacketBuf, VecFrame};
/// let mut frame = VecFrame::new(&[1, 2, 3], 2048);
/// assert!(frame.set_len(2));
/// assert_eq!(frame.data(), &[1, 2]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecFrame {
    buf: Vec<u8>,
    len: usize,
}

impl VecFrame {
    /// A frame holding `bytes` in a chunk of `capacity` bytes (at least `bytes.len()`).
    pub fn new(bytes: &[u8], capacity: usize) -> Self {
        let mut buf = bytes.to_vec();
        buf.resize(capacity.max(bytes.len()), 0);
        VecFrame {
            buf,
            len: bytes.len(),
        }
    }
}

impl PacketBuf for VecFrame {
    fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
    fn capacity(&mut self) -> usize {
        self.buf.len()
    }
    fn set_len(&mut self, len: usize) -> bool {
        if len > self.buf.len() {
            return false;
        }
        self.len = len;
        true
    }
}

/// What becomes of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Send it out of the interface with this index (it must be one of the loop's ports).
    Transmit {
        /// The egress interface.
        ifindex: u32,
    },
    /// Hand it to the kernel's stack (the punt path).
    Punt,
    /// Drop it, counting the reason (an index into [`Processor::drop_reasons`]).
    Drop(u16),
    /// The processor is done with the frame without it being a drop (its content was copied
    /// elsewhere: a hold buffer, spare frames): the loop recycles it uncounted.
    Recycle,
    /// Not decided (the initial value of a verdict slot); the run loop drops and counts it.
    #[default]
    Undecided,
}

/// The packet pipeline a run loop drives. One instance per run loop (queue), so `&mut self`
/// state such as a route cache needs no synchronisation.
///
/// `spare` is the loop's supply of spare frames (free UMEM chunks of the same UMEM): a
/// processor may allocate one, write a packet into it and send it out of one of the loop's
/// ports (ICMP errors that need a copy, IPv4 fragments, packets released from a hold buffer).
pub trait Processor: Send {
    /// Decides the fate of a batch of frames received on interface `ingress`: writes
    /// `verdicts[i]` for `frames[i]` (both have the same length, at most 64). The loop pinned
    /// `guard` for this batch.
    fn process<F: PacketBuf, S: FramePool>(
        &mut self,
        ingress: u32,
        frames: &mut [F],
        verdicts: &mut [Verdict],
        guard: &Guard,
        spare: &mut S,
    );

    /// Called once per loop turn (received something or not) under its own epoch pin: time
    /// for work that does not wait for a packet (releasing held packets, forwarding
    /// neighbour resolution requests, publishing counters). Must not block.
    fn turn<S: FramePool>(&mut self, _guard: &Guard, _spare: &mut S) {}

    /// Names of the drop reasons this processor reports, by index (snake_case, for metrics).
    fn drop_reasons(&self) -> &'static [&'static str];
}
