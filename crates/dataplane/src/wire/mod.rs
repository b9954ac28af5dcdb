//! Typed, bounds-checked, zero-copy views of the headers the pipeline reads and writes, in the
//! style of smoltcp's `wire` module: a view wraps any buffer (`&[u8]`, `&mut [u8]`), byte
//! offsets live in a private `field` module, `new_checked` makes every accessor panic-free,
//! setters exist only for mutable buffers.

pub mod checksum;
pub mod ethernet;
pub mod icmp;
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
