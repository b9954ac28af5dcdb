//! The generator's and receiver's typed errors.

use std::io;

/// Everything that can go wrong while configuring or running the generator or the receiver.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A prefix did not parse as `ADDRESS/LENGTH` with a length that fits the address.
    #[error("invalid prefix `{0}` (expected ADDRESS/LENGTH, e.g. 198.18.2.0/24)")]
    BadPrefix(String),
    /// A port range did not parse as `PORT` or `FIRST-LAST` with FIRST ≤ LAST.
    #[error("invalid port range `{0}` (expected PORT or FIRST-LAST)")]
    BadPortRange(String),
    /// A frame size did not parse as a number or `imix`.
    #[error("invalid frame size `{0}` (expected 64..=1518 or `imix`)")]
    BadFrameSize(String),
    /// A frame size is too small for the headers and the probe payload, or above 1518.
    #[error(
        "frame size {size} is outside {min}..=1518 bytes for {family} (sizes include the 4-byte FCS)"
    )]
    FrameSizeOutOfRange {
        /// The size asked for.
        size: u16,
        /// The smallest size this address family allows.
        min: u16,
        /// `IPv4` or `IPv6`.
        family: &'static str,
    },
    /// The flow set has no destination.
    #[error("no destinations: give at least one prefix and a destination count above zero")]
    NoDestinations,
    /// A destination's family has no source address of that family.
    #[error("destination {0} is {1}, but no {1} source address was given")]
    MissingSource(std::net::IpAddr, &'static str),
    /// More flows than a probe's 32-bit flow id can name.
    #[error("{0} flows exceed the limit of 2^32")]
    TooManyFlows(u128),
    /// Neither a packet count nor a duration was given: the generator would never stop.
    #[error("give a packet count or a duration")]
    Unbounded,
    /// No queues were given, or a queue list had duplicates.
    #[error("invalid queue list: {0}")]
    BadQueues(String),
    /// The UMEM took fewer frames on its fill ring than it has.
    #[error("the fill ring took {given} of {frames} frames")]
    FillRing {
        /// Frames the ring took.
        given: usize,
        /// Frames of the UMEM.
        frames: usize,
    },
    /// Setting up the UMEM or the AF_XDP socket failed.
    #[error(transparent)]
    AfXdp(#[from] afxdp::Error),
    /// A ring operation (poll, sendto wakeup) failed.
    #[error("AF_XDP ring I/O: {0}")]
    Ring(#[from] io::Error),
    /// Pinning a thread to a CPU failed.
    #[error("pinning to CPU {cpu}: {source}")]
    Pin {
        /// The CPU asked for.
        cpu: usize,
        /// The errno.
        source: nix::Error,
    },
    /// A worker thread panicked (a bug).
    #[error("a {0} thread panicked")]
    ThreadPanicked(&'static str),
}
