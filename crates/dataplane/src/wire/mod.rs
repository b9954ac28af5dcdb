//! Typed, bounds-checked, zero-copy views of the headers the pipeline reads and writes, in the
//! style of smoltcp's `wire` module: a view wraps any buffer (`&[u8]`, `&mut [u8]`), byte
//! offsets live in a private `field` module, `new_checked` makes every accessor panic-free,
//! setters exist only for mutable buffers.

pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod l4;

/// A byte range of a header.
pub(crate) type Field = core::ops::Range<usize>;

/// A big-endian `u16` at `field` (which the caller has bounds-checked).
#[inline]
pub(crate) fn get16(buf: &[u8], field: Field) -> u16 {
    u16::from_be_bytes([buf[field.start], buf[field.start + 1]])
}

/// Where the version field sits in the first byte of an IP header (its high nibble).
const VERSION_SHIFT: u8 = 4;

/// Why a view refused a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header (or the length a header announces).
    #[error("truncated")]
    Truncated,
    /// An IPv4 header length below 20 bytes or beyond the total length.
    #[error("bad header length")]
    BadHeaderLen,
    /// More IPv6 extension headers than the walk's bound.
    #[error("too many extension headers")]
    TooManyExtensions,
}

/// The IP version of a packet: which fixed header, EtherType and address width it has. The
/// pipeline's address fields hold either family in a `u128` (IPv4 in the low 32 bits); this
/// says which.
///
/// ```
/// use dataplane::wire::Family;
/// use dataplane::wire::ethernet::ethertype;
/// assert_eq!(Family::of_ethertype(ethertype::IPV6), Some(Family::V6));
/// assert_eq!((Family::V4.header_len(), Family::V6.header_len()), (20, 40));
/// assert_eq!(Family::V6.ethertype(), ethertype::IPV6);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (RFC 791).
    #[default]
    V4,
    /// IPv6 (RFC 8200).
    V6,
}

impl Family {
    /// The family an EtherType carries, if it is an IP one.
    #[inline]
    pub const fn of_ethertype(value: u16) -> Option<Family> {
        match value {
            ethernet::ethertype::IPV4 => Some(Family::V4),
            ethernet::ethertype::IPV6 => Some(Family::V6),
            _ => None,
        }
    }

    /// The EtherType of the family's packets.
    #[inline]
    pub const fn ethertype(self) -> u16 {
        match self {
            Family::V4 => ethernet::ethertype::IPV4,
            Family::V6 => ethernet::ethertype::IPV6,
        }
    }

    /// The length of the family's fixed header (IPv4 without options).
    #[inline]
    pub const fn header_len(self) -> usize {
        match self {
            Family::V4 => ipv4::HEADER_LEN,
            Family::V6 => ipv6::HEADER_LEN,
        }
    }

    /// The family of an IP packet by its version field (the high nibble of its first byte).
    ///
    /// ```
    /// use dataplane::wire::Family;
    /// assert_eq!(Family::of_packet(&[0x45, 0]), Some(Family::V4));
    /// assert_eq!(Family::of_packet(&[0x60]), Some(Family::V6));
    /// assert_eq!((Family::of_packet(&[0x50]), Family::of_packet(&[])), (None, None));
    /// ```
    #[inline]
    pub fn of_packet(packet: &[u8]) -> Option<Family> {
        match packet.first()? >> VERSION_SHIFT {
            ipv4::VERSION => Some(Family::V4),
            ipv6::VERSION => Some(Family::V6),
            _ => None,
        }
    }

    /// The version field of the family's header.
    #[inline]
    pub const fn version(self) -> u8 {
        match self {
            Family::V4 => ipv4::VERSION,
            Family::V6 => ipv6::VERSION,
        }
    }

    /// The protocol number of the family's ICMP (1 for ICMP, 58 for ICMPv6).
    #[inline]
    pub const fn icmp_protocol(self) -> u8 {
        match self {
            Family::V4 => l4::protocol::ICMP,
            Family::V6 => l4::protocol::ICMPV6,
        }
    }

    /// Whether this is IPv6.
    #[inline]
    pub const fn is_v6(self) -> bool {
        matches!(self, Family::V6)
    }

    /// The family from an "is IPv6" flag (the tables' interfaces take one).
    #[inline]
    pub const fn from_v6(v6: bool) -> Family {
        if v6 { Family::V6 } else { Family::V4 }
    }
}
