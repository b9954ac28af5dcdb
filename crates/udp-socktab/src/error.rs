//! Typed errors: what the kernel would answer with an errno, and bad configuration.
#![forbid(unsafe_code)]

use crate::sock::{NetnsId, SockId};

/// Why a socket call failed; each variant names the kernel's errno for the same case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `EADDRINUSE`: the port conflicts with a bound socket, or no free port was left for a
    /// bind to port 0.
    #[error("address already in use")]
    AddrInUse,
    /// `EADDRNOTAVAIL`: the address to bind is not one of the namespace's local addresses.
    #[error("address not available")]
    AddrNotAvailable,
    /// `EAFNOSUPPORT`: an address of the wrong family for the socket (an IPv4 address for an
    /// IPv6-only socket's connect, an IPv6 address for an IPv4 socket).
    #[error("address family not supported by socket")]
    AddrFamilyNotSupported,
    /// `EINVAL`: the socket is bound already (bind twice), an IPv6-only socket was to be bound
    /// to a v4-mapped address, or the connect's source address does not fit the peer.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// `ENETUNREACH`: an IPv6-only socket connecting to a v4-mapped address, or an IPv6
    /// socket whose bound address cannot reach the peer's family.
    #[error("network unreachable")]
    NetworkUnreachable,
    /// `EAGAIN`: connect had to pick a local port (autobind) and none was free.
    #[error("no free local port for autobind")]
    Again,
    /// No socket of this id is open.
    #[error("no socket {0:?}")]
    UnknownSocket(SockId),
    /// No namespace of this id exists.
    #[error("no network namespace {0:?}")]
    UnknownNetns(NetnsId),
}

impl Error {
    /// The kernel's errno for this error (`None` for the ones that have no kernel counterpart).
    pub fn errno(self) -> Option<i32> {
        match self {
            Error::AddrInUse => Some(98),
            Error::AddrNotAvailable => Some(99),
            Error::AddrFamilyNotSupported => Some(97),
            Error::InvalidArgument(_) => Some(22),
            Error::NetworkUnreachable => Some(101),
            Error::Again => Some(11),
            Error::UnknownSocket(_) | Error::UnknownNetns(_) => None,
        }
    }
}

/// A table or namespace configuration that cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The global table takes 1..=65536 entries (rounded up to a power of two, at least 256).
    #[error("udp_hash_entries must be 1..=65536, got {0}")]
    HashEntries(u32),
    /// A namespace's own table takes 0 (share the global one) or 1..=65536 entries (rounded
    /// up to a power of two, at least 128).
    #[error("udp_child_hash_entries must be 0..=65536, got {0}")]
    ChildHashEntries(u32),
    /// The local port range must be `1 <= low <= high`.
    #[error("ip_local_port_range must be 1 <= low <= high, got {0}..={1}")]
    PortRange(u16, u16),
    /// No namespace of this id exists.
    #[error("no network namespace {0:?}")]
    UnknownNetns(NetnsId),
}
