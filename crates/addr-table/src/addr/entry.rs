//! One interface address ([`IfAddr`]), its label and the ids it is filed under.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::Instant;

use super::flags::{IfaFlags, Scope};
use crate::addr::AddrError;

/// A network namespace, named by the kernel's namespace cookie (`SO_NETNS_COOKIE`) or any id
/// the embedder keeps unique. Each namespace has its own [`AddrTable`](crate::AddrTable).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NetnsId(pub u64);

/// An interface label (`IFA_LABEL`, IPv4 only in the kernel): at most 15 bytes, as `IFNAMSIZ`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Label {
    len: u8,
    bytes: [u8; Label::MAX_LEN],
}

impl Label {
    /// Longest label (`IFNAMSIZ - 1`).
    pub const MAX_LEN: usize = 15;

    /// A label from `text`.
    ///
    /// # Errors
    /// [`AddrError::LabelTooLong`] beyond 15 bytes, [`AddrError::LabelNul`] with a NUL byte.
    pub fn new(text: &str) -> Result<Label, AddrError> {
        let raw = text.as_bytes();
        if raw.len() > Self::MAX_LEN {
            return Err(AddrError::LabelTooLong(raw.len()));
        }
        if raw.contains(&0) {
            return Err(AddrError::LabelNul);
        }
        let mut bytes = [0; Self::MAX_LEN];
        bytes[..raw.len()].copy_from_slice(raw);
        Ok(Label {
            len: raw.len() as u8,
            bytes,
        })
    }

    /// The label text.
    pub fn as_str(&self) -> &str {
        // Built from a `&str` and cut nowhere else, so always valid UTF-8.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or_default()
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One address on one interface (the kernel's `in_ifaddr` / `inet6_ifaddr`), for IPv4
/// (`A = Ipv4Addr`) or IPv6 (`A = Ipv6Addr`).
///
/// Lifetimes are absolute deadlines on the caller's clock (`None`: forever); the table never
/// reads a clock itself, [`AddrTable::sweep`](crate::AddrTable::sweep) takes `now`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IfAddr<A> {
    /// The local address (`IFA_LOCAL`).
    pub addr: A,
    /// Prefix length of its subnet.
    pub prefix_len: u8,
    /// The interface holding it.
    pub ifindex: u32,
    /// Its scope. For IPv6 the table orders and selects by the scope of the address itself.
    pub scope: Scope,
    /// `IFA_F_*` flags (`SECONDARY` is computed by the table for IPv4).
    pub flags: IfaFlags,
    /// When the address stops being valid and is removed by a sweep.
    pub valid_until: Option<Instant>,
    /// When the address becomes deprecated (`DEPRECATED` set by a sweep).
    pub preferred_until: Option<Instant>,
    /// The label (IPv4).
    pub label: Option<Label>,
}

impl<A> IfAddr<A> {
    /// A permanent address of universe scope with no flags, label or lifetimes.
    pub fn new(addr: A, prefix_len: u8, ifindex: u32) -> Self {
        IfAddr {
            addr,
            prefix_len,
            ifindex,
            scope: Scope::UNIVERSE,
            flags: IfaFlags::PERMANENT,
            valid_until: None,
            preferred_until: None,
            label: None,
        }
    }

    /// This address with `scope`.
    #[must_use]
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// This address with `flags` (replacing the defaults).
    #[must_use]
    pub fn with_flags(mut self, flags: IfaFlags) -> Self {
        self.flags = flags;
        self
    }

    /// This address with lifetimes; clears `PERMANENT` when either is finite.
    #[must_use]
    pub fn with_lifetimes(
        mut self,
        valid_until: Option<Instant>,
        preferred_until: Option<Instant>,
    ) -> Self {
        self.valid_until = valid_until;
        self.preferred_until = preferred_until;
        if valid_until.is_some() || preferred_until.is_some() {
            self.flags = self.flags.without(IfaFlags::PERMANENT);
        }
        self
    }

    /// This address with `label`.
    #[must_use]
    pub fn with_label(mut self, label: Label) -> Self {
        self.label = Some(label);
        self
    }

    /// Whether this is an IPv4 secondary address.
    pub fn is_secondary(&self) -> bool {
        self.flags.contains(IfaFlags::SECONDARY)
    }
}
