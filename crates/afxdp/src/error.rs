//! What can go wrong while setting up AF_XDP.

/// An AF_XDP set-up failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A size the kernel would refuse (a frame size that is not 2048 or 4096, a ring size that
    /// is not a power of two, no frames), or the UMEM could not be mapped and registered.
    #[error("UMEM: {0}")]
    Umem(String),
    /// An interface name that cannot be one (empty, too long, a NUL byte).
    #[error("bad interface name {0:?}")]
    BadInterface(String),
    /// The kernel or libxdp refused the socket (no such interface or queue, no permission, a
    /// queue already bound by another process, zero-copy on a driver without it).
    #[error("AF_XDP socket on {iface} queue {queue}: {reason}")]
    Socket {
        /// The interface.
        iface: String,
        /// The queue id.
        queue: u32,
        /// What the kernel or libxdp said.
        reason: String,
    },
    /// A socket option was refused (busy polling needs Linux 5.11).
    #[error("setsockopt {option}: {source}")]
    SocketOption {
        /// The option's name.
        option: &'static str,
        /// The kernel's error.
        source: std::io::Error,
    },
}
