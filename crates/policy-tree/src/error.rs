//! Typed errors of the policy database.

use crate::addr::Family;
use crate::policy::Direction;

/// Everything a caller can get wrong when building selectors or changing the database.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A prefix length longer than the address family allows (32 for IPv4, 128 for IPv6).
    #[error("prefix length {len} exceeds {max} bits of {family:?}")]
    PrefixLen {
        /// The length given.
        len: u8,
        /// The family's address width.
        max: u8,
        /// The family of the address.
        family: Family,
    },
    /// Text that is not `ADDR` or `ADDR/LEN`.
    #[error("`{0}` is not an IPv4 or IPv6 prefix")]
    BadPrefix(String),
    /// Source and destination (or flow and selector) of different address families.
    #[error("source and destination are of different address families")]
    FamilyMismatch,
    /// An exclusive add (`ip xfrm policy add`) of a policy whose direction, type, if_id and
    /// selector equal an existing policy's (the kernel's EEXIST).
    #[error("a policy with this selector already exists (index {index})")]
    Exists {
        /// Index of the existing policy.
        index: u32,
    },
    /// No policy with this selector, or with this index (the kernel's ENOENT).
    #[error("no such policy")]
    NotFound,
    /// A requested index is already used by another policy.
    #[error("policy index {0} is already in use")]
    IndexInUse(u32),
    /// A requested index whose low three bits do not name the policy's direction (the kernel
    /// encodes the direction there and rejects such requests with EINVAL).
    #[error("policy index {index} does not encode direction {dir:?}")]
    IndexDirection {
        /// The index requested.
        index: u32,
        /// The policy's direction.
        dir: Direction,
    },
    /// A hash threshold longer than its family's address width.
    #[error("hthresh {bits} exceeds {max} bits")]
    HThresh {
        /// The threshold given.
        bits: u8,
        /// The family's address width.
        max: u8,
    },
}
