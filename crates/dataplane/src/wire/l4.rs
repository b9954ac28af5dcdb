//! The upper-layer fields the pipeline needs: ports for policy lookups (ICMP type and code in
//! their place, as xfrm selectors use them), and the UDP header for local delivery.

use super::ip::IpRepr;
use super::{Field, WireError, checksum, get16};

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
    /// IPsec ESP (its SPI where ports would be).
    pub const ESP: u8 = 50;
    /// IPsec AH (its SPI after four bytes of header).
    pub const AH: u8 = 51;
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

    /// Whether the checksum over the buffer (header and payload) and `ip`'s pseudo-header is
    /// right (a zero checksum, "none", counts as right over IPv4).
    #[inline]
    pub fn verify_checksum(&self, ip: &IpRepr) -> bool {
        (self.checksum() == 0 && ip.family() == super::Family::V4)
            || checksum::fold(checksum::sum(self.buffer.as_ref(), ip.pseudo_header())) == 0xffff
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

/// What a UDP checksum that computes to zero is sent as: all ones, since zero means "no
/// checksum" (RFC 768).
pub const UDP_CHECKSUM_ZERO: u16 = 0xffff;

/// A UDP header as a value, in the manner of smoltcp's `UdpRepr`: the ports;
/// [`emit`](Self::emit) writes them with the length and the checksum over a payload already in
/// place.
///
/// ```
/// use std::net::Ipv4Addr;
/// use dataplane::wire::ip::IpRepr;
/// use dataplane::wire::ipv4::Ipv4Repr;
/// use dataplane::wire::l4::{UdpPacket, UdpRepr, protocol};
/// let mut datagram = *b"headers!hello";
/// let ip = IpRepr::Ipv4(Ipv4Repr {
///     src: Ipv4Addr::new(192, 0, 2, 1),
///     dst: Ipv4Addr::new(198, 51, 100, 7),
///     protocol: protocol::UDP,
///     ttl: 64,
///     tos: 0,
///     ident: 0,
///     dont_frag: true,
///     payload_len: datagram.len(),
/// });
/// UdpRepr { src_port: 862, dst_port: 40000 }.emit(&mut datagram, &ip);
/// let udp = UdpPacket::new_checked(&datagram[..])?;
/// assert_eq!((udp.src_port(), udp.dst_port(), udp.len()), (862, 40000, 13));
/// assert!(udp.verify_checksum(&ip));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// The source port.
    pub src_port: u16,
    /// The destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Writes the header at the start of `datagram` (the whole datagram: the payload already
    /// after [`UDP_HEADER_LEN`]), its length and its checksum over `ip`'s pseudo-header, whose
    /// payload length must be the datagram's.
    ///
    /// # Panics
    /// If the datagram is shorter than [`UDP_HEADER_LEN`] or longer than 65,535 bytes.
    #[inline]
    pub fn emit(&self, datagram: &mut [u8], ip: &IpRepr) {
        debug_assert_eq!(ip.payload_len(), datagram.len());
        let len = u16::try_from(datagram.len()).expect("a UDP length");
        let mut udp = UdpPacket::new_unchecked(&mut datagram[..]);
        udp.set_src_port(self.src_port);
        udp.set_dst_port(self.dst_port);
        udp.set_len(len);
        udp.set_checksum(0);
        let sum = match !checksum::fold(checksum::sum(datagram, ip.pseudo_header())) {
            0 => UDP_CHECKSUM_ZERO,
            c => c,
        };
        UdpPacket::new_unchecked(datagram).set_checksum(sum);
    }
}
