//! The upper-layer fields the pipeline needs: ports for policy lookups (ICMP type and code in
//! their place, as xfrm selectors use them), and the UDP header for local delivery.

use super::{Field, WireError, get16};

/// IP protocol numbers.
pub mod protocol {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// DCCP.
    pub const DCCP: u8 = 33;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// UDP-Lite.
    pub const UDPLITE: u8 = 136;
}

/// The (source, destination) "ports" of an upper-layer header as an xfrm selector sees them:
/// the ports of TCP, UDP, UDP-Lite, SCTP and DCCP; the type and code of ICMP and ICMPv6; `None`
/// for other protocols or a header too short to hold them.
///
/// ```
/// use dataplane::wire::l4::{ports, protocol};
/// assert_eq!(ports(protocol::UDP, &[0x13, 0x88, 0, 53, 0, 8]), Some((5000, 53)));
/// assert_eq!(ports(protocol::ICMP, &[11, 0, 0xf4, 0xff]), Some((11, 0)));
/// assert_eq!(ports(protocol::TCP, &[0, 80]), None);
/// ```
#[inline]
pub fn ports(protocol: u8, l4: &[u8]) -> Option<(u16, u16)> {
    match protocol {
        protocol::TCP | protocol::UDP | protocol::UDPLITE | protocol::SCTP | protocol::DCCP => {
            let &[s0, s1, d0, d1] = l4.first_chunk::<4>()?;
            Some((u16::from_be_bytes([s0, s1]), u16::from_be_bytes([d0, d1])))
        }
        protocol::ICMP | protocol::ICMPV6 => {
            let &[kind, code] = l4.first_chunk::<2>()?;
            Some((u16::from(kind), u16::from(code)))
        }
        _ => None,
    }
}

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// The length of a UDP header.
pub const UDP_HEADER_LEN: usize = field::CHECKSUM.end;

/// A typed view of a UDP header.
///
/// ```
/// use dataplane::wire::l4::UdpPacket;
/// let udp = UdpPacket::new_checked(&[0x13, 0x88, 0, 53, 0, 9, 0, 0, 7][..])?;
/// assert_eq!((udp.src_port(), udp.dst_port(), udp.len()), (5000, 53, 9));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct UdpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// A view without any check.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// A view of untrusted bytes: the header is there and its length field covers the header
    /// and fits the buffer.
    ///
    /// # Errors
    /// [`WireError::Truncated`], [`WireError::BadHeaderLen`] (length field below 8).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let udp = Self::new_unchecked(buffer);
        let len = udp.buffer.as_ref().len();
        if len < UDP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if usize::from(udp.len()) < UDP_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if usize::from(udp.len()) > len {
            return Err(WireError::Truncated);
        }
        Ok(udp)
    }

    /// The source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field (header and payload).
    #[allow(
        clippy::len_without_is_empty,
        reason = "a header field, not a collection"
    )]
    #[inline]
    pub fn len(&self) -> u16 {
        get16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The checksum field (0: none, IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

/// The setters of a UDP header; the length can break [`UdpPacket::new_checked`]'s check.
///
/// ```
/// use dataplane::wire::l4::UdpPacket;
/// let mut bytes = [0u8; 9];
/// let mut udp = UdpPacket::new_unchecked(&mut bytes[..]);
/// udp.set_src_port(5000);
/// udp.set_dst_port(53);
/// udp.set_len(9);
/// udp.set_checksum(0xffff);
/// assert_eq!(bytes, [0x13, 0x88, 0, 53, 0, 9, 0xff, 0xff, 0]);
/// ```
impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Writes the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Writes the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&port.to_be_bytes());
    }

    /// Writes the length field (header and payload).
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Writes the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }
}
