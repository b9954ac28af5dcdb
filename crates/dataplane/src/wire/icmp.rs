//! ICMP and ICMPv6 headers: type, code, checksum and the four bytes of the message that follow
//! (unused, or the MTU of "fragmentation needed" and "packet too big").

use super::{Field, WireError, checksum, get16};

mod field {
    use super::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
}

/// The length of the header (type, code, checksum, four bytes of message).
pub const HEADER_LEN: usize = field::REST.end;

/// ICMP (IPv4) message types the pipeline tells apart (RFC 792, RFC 1812 4.3.2.4).
pub mod v4_type {
    /// Destination unreachable (an error).
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (an error, deprecated).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect (an error).
    pub const REDIRECT: u8 = 5;
    /// Time exceeded (an error).
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem (an error).
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// The highest type RFC 1812 knows; unknown types above it are treated as errors.
    pub const LAST_KNOWN: u8 = 18;
}

/// The codes of the ICMP (IPv4) errors the pipeline sends (RFC 792, RFC 1812 5.2.7.1).
pub mod v4_code {
    /// Destination unreachable: net unreachable.
    pub const NET_UNREACHABLE: u8 = 0;
    /// Destination unreachable: host unreachable.
    pub const HOST_UNREACHABLE: u8 = 1;
    /// Destination unreachable: fragmentation needed and DF set.
    pub const FRAG_NEEDED: u8 = 4;
    /// Destination unreachable: communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 13;
    /// Time exceeded: TTL exceeded in transit.
    pub const TTL_EXCEEDED: u8 = 0;
}

/// The codes of the ICMPv6 errors the pipeline sends (RFC 4443 3.1, 3.3).
pub mod v6_code {
    /// Destination unreachable: no route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Destination unreachable: communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Destination unreachable: beyond the scope of the source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Time exceeded: hop limit exceeded in transit.
    pub const HOP_LIMIT_EXCEEDED: u8 = 0;
}

/// ICMPv6 message types the pipeline tells apart (RFC 4443, RFC 4861).
pub mod v6_type {
    /// Destination unreachable (an error).
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big (an error).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded (an error).
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem, the last of the errors an IPv6 multipath hash looks into.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// The first informational type: types below it are errors (RFC 4443 2.1).
    pub const FIRST_INFORMATIONAL: u8 = 128;
    /// Router solicitation, the first of neighbour discovery's types.
    pub const ROUTER_SOLICITATION: u8 = 133;
    /// Redirect, the last of neighbour discovery's types.
    pub const REDIRECT: u8 = 137;
}

/// A typed view of an ICMP or ICMPv6 message (header and body).
///
/// ```
/// use dataplane::wire::icmp::{HEADER_LEN, IcmpPacket};
/// let mut message = [0u8; HEADER_LEN + 4];
/// let mut icmp = IcmpPacket::new_checked(&mut message[..])?;
/// icmp.set_type_code(11, 0);
/// icmp.set_rest([0; 4]);
/// icmp.fill_checksum(0);
/// let icmp = IcmpPacket::new_checked(&message[..])?;
/// assert_eq!((icmp.msg_type(), icmp.code()), (11, 0));
/// assert!(icmp.verify_checksum(0));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct IcmpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// A view without checks: accessors panic on a buffer shorter than [`HEADER_LEN`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        IcmpPacket { buffer }
    }

    /// A view of a buffer that holds at least the header.
    ///
    /// # Errors
    /// [`WireError::Truncated`] for a buffer shorter than [`HEADER_LEN`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(IcmpPacket { buffer })
    }

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the checksum over the whole message, plus `pseudo` (an ICMPv6 pseudo-header
    /// sum; 0 for ICMPv4), is right.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        checksum::fold(checksum::sum(self.buffer.as_ref(), pseudo)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Writes the type and the code.
    #[inline]
    pub fn set_type_code(&mut self, msg_type: u8, code: u8) {
        let buf = self.buffer.as_mut();
        buf[field::TYPE] = msg_type;
        buf[field::CODE] = code;
    }

    /// Writes the four bytes of message after the checksum.
    #[inline]
    pub fn set_rest(&mut self, rest: [u8; 4]) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&rest);
    }

    /// Computes the checksum over the whole message (the body already in place), plus `pseudo`
    /// (the ICMPv6 pseudo-header sum; 0 for ICMPv4), and writes it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let buf = self.buffer.as_mut();
        buf[field::CHECKSUM].fill(0);
        let c = !checksum::fold(checksum::sum(buf, pseudo));
        buf[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_refused() {
        assert_eq!(
            IcmpPacket::new_checked(&[0u8; HEADER_LEN - 1][..]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn the_checksum_matches_a_recomputation() {
        let mut message = [0u8; 20];
        message[8..].copy_from_slice(b"quoted bytes");
        let mut icmp = IcmpPacket::new_unchecked(&mut message[..]);
        icmp.set_type_code(3, 1);
        icmp.fill_checksum(0);
        let c = icmp.checksum();
        message[2..4].fill(0);
        assert_eq!(c, checksum::checksum(&message));
    }
}
