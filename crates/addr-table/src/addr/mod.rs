//! The local address table of a network namespace, on top of [`RhlTable`](crate::RhlTable).

pub mod entry;
pub mod family;
pub mod flags;
pub mod select;
pub mod table;

use crate::error::{InsertError, ParamsError};

/// Why an [`AddrTable`](table::AddrTable) operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// A prefix length longer than the family allows.
    #[error("prefix length {prefix_len} above {max}")]
    PrefixLen {
        /// The length given.
        prefix_len: u8,
        /// The family's maximum.
        max: u8,
    },
    /// Interface index 0 names no interface.
    #[error("interface index 0")]
    ZeroIfindex,
    /// Interface index above `i32::MAX` (the kernel's is a positive `int`).
    #[error("interface index {0} above 2^31 - 1")]
    IfindexRange(u32),
    /// The interface already has this address (IPv4: with this prefix length).
    #[error("address already on the interface")]
    Exists,
    /// IPv4: a secondary address must have its primary's scope (the kernel's `EINVAL`).
    #[error("scope differs from the primary address of the subnet")]
    ScopeMismatch,
    /// No such address on the interface.
    #[error("no such address on the interface")]
    NotFound,
    /// A label longer than 15 bytes.
    #[error("label of {0} bytes, at most 15")]
    LabelTooLong(usize),
    /// A label containing a NUL byte.
    #[error("label contains a NUL byte")]
    LabelNul,
    /// The address hash is at its maximum size.
    #[error(transparent)]
    TableFull(#[from] InsertError),
    /// Invalid hash table parameters.
    #[error(transparent)]
    Params(#[from] ParamsError),
}
