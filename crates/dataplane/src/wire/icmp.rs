//! ICMP and ICMPv6 headers: type, code, checksum and the four bytes of the message that follow
//! (unused, or the MTU of "fragmentation needed" and "packet too big").

use super::ip::IpRepr;
use super::{Family, Field, WireError, checksum, get16};

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
    /// Packet too big: the only code (the originator sets 0).
    pub const PACKET_TOO_BIG: u8 = 0;
}

/// The largest MTU an ICMPv4 "fragmentation needed" carries: its next-hop MTU field is the low
/// 16 bits of the message's four bytes (RFC 1191 4).
pub const MAX_V4_NEXT_HOP_MTU: u32 = u16::MAX as u32;

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

    /// The four bytes of message after the checksum (unused, or an MTU).
    #[inline]
    pub fn rest(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::REST];
        [b[0], b[1], b[2], b[3]]
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

/// An ICMP or ICMPv6 error message as a value, in the manner of smoltcp's `Icmpv4Repr` /
/// `Icmpv6Repr` but for both families at once: the errors a router sends mean the same in
/// both, and the family of the IP header the message travels in picks the type numbers and the
/// layout of the four bytes after the checksum. The quoted packet is not part of the value:
/// the pipeline leaves it in place (or copies it once) behind the headers.
///
/// ```
/// use dataplane::wire::Family;
/// use dataplane::wire::icmp::{IcmpRepr, v4_code, v4_type, v6_type};
/// let too_big = IcmpRepr::PacketTooBig { mtu: 1400 };
/// assert_eq!(too_big.type_code(Family::V4), (v4_type::DEST_UNREACHABLE, v4_code::FRAG_NEEDED));
/// assert_eq!(too_big.type_code(Family::V6), (v6_type::PACKET_TOO_BIG, 0));
/// assert_eq!(too_big.rest(Family::V4), [0, 0, 0x05, 0x78]);
/// assert_eq!(IcmpRepr::TimeExceeded.type_code(Family::V6), (v6_type::TIME_EXCEEDED, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpRepr {
    /// Destination unreachable (ICMP type 3, ICMPv6 type 1) with a code of the family
    /// ([`v4_code`], [`v6_code`]); not "fragmentation needed", which is
    /// [`PacketTooBig`](Self::PacketTooBig).
    DstUnreachable {
        /// The code.
        code: u8,
    },
    /// Larger than the next hop's MTU: ICMP "fragmentation needed and DF set" (type 3 code 4,
    /// the MTU in 16 bits, at most [`MAX_V4_NEXT_HOP_MTU`]), ICMPv6 "packet too big" (type
    /// 2, the MTU in 32 bits).
    PacketTooBig {
        /// The next hop's MTU.
        mtu: u32,
    },
    /// The TTL / hop limit ran out in transit (ICMP type 11, ICMPv6 type 3, code 0).
    TimeExceeded,
}

impl IcmpRepr {
    /// The message's type and code in `family`.
    #[inline]
    pub const fn type_code(&self, family: Family) -> (u8, u8) {
        match (family, self) {
            (Family::V4, IcmpRepr::DstUnreachable { code }) => (v4_type::DEST_UNREACHABLE, *code),
            (Family::V4, IcmpRepr::PacketTooBig { .. }) => {
                (v4_type::DEST_UNREACHABLE, v4_code::FRAG_NEEDED)
            }
            (Family::V4, IcmpRepr::TimeExceeded) => (v4_type::TIME_EXCEEDED, v4_code::TTL_EXCEEDED),
            (Family::V6, IcmpRepr::DstUnreachable { code }) => (v6_type::DEST_UNREACHABLE, *code),
            (Family::V6, IcmpRepr::PacketTooBig { .. }) => {
                (v6_type::PACKET_TOO_BIG, v6_code::PACKET_TOO_BIG)
            }
            (Family::V6, IcmpRepr::TimeExceeded) => {
                (v6_type::TIME_EXCEEDED, v6_code::HOP_LIMIT_EXCEEDED)
            }
        }
    }

    /// The four bytes after the checksum in `family`: the MTU of a
    /// [`PacketTooBig`](Self::PacketTooBig) (IPv4: in the low 16 bits, capped), else unused
    /// (zero).
    #[inline]
    pub const fn rest(&self, family: Family) -> [u8; 4] {
        match (family, self) {
            (Family::V4, IcmpRepr::PacketTooBig { mtu }) => {
                let mtu = if *mtu > MAX_V4_NEXT_HOP_MTU {
                    MAX_V4_NEXT_HOP_MTU
                } else {
                    *mtu
                };
                let [_, _, high, low] = mtu.to_be_bytes();
                [0, 0, high, low]
            }
            (Family::V6, IcmpRepr::PacketTooBig { mtu }) => mtu.to_be_bytes(),
            _ => [0; 4],
        }
    }

    /// The error a message of `family` carries, if it is one this type describes.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(family: Family, packet: &IcmpPacket<T>) -> Option<IcmpRepr> {
        let [_, _, high, low] = packet.rest();
        match (family, packet.msg_type(), packet.code()) {
            (Family::V4, v4_type::DEST_UNREACHABLE, v4_code::FRAG_NEEDED) => {
                Some(IcmpRepr::PacketTooBig {
                    mtu: u32::from(u16::from_be_bytes([high, low])),
                })
            }
            (Family::V4, v4_type::DEST_UNREACHABLE, code) => {
                Some(IcmpRepr::DstUnreachable { code })
            }
            (Family::V4, v4_type::TIME_EXCEEDED, v4_code::TTL_EXCEEDED) => {
                Some(IcmpRepr::TimeExceeded)
            }
            (Family::V6, v6_type::DEST_UNREACHABLE, code) => {
                Some(IcmpRepr::DstUnreachable { code })
            }
            (Family::V6, v6_type::PACKET_TOO_BIG, _) => Some(IcmpRepr::PacketTooBig {
                mtu: u32::from_be_bytes(packet.rest()),
            }),
            (Family::V6, v6_type::TIME_EXCEEDED, v6_code::HOP_LIMIT_EXCEEDED) => {
                Some(IcmpRepr::TimeExceeded)
            }
            _ => None,
        }
    }

    /// Writes the message's header into `packet` (the whole message: the quote already in
    /// place after [`HEADER_LEN`]) and its checksum, which for ICMPv6 covers `ip`'s
    /// pseudo-header; `ip` is the header the message travels in (its family picks the
    /// numbers).
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut IcmpPacket<T>, ip: &IpRepr) {
        let family = ip.family();
        let (msg_type, code) = self.type_code(family);
        packet.set_type_code(msg_type, code);
        packet.set_rest(self.rest(family));
        packet.fill_checksum(match family {
            Family::V4 => 0,
            Family::V6 => ip.pseudo_header(),
        });
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
    fn every_error_round_trips_in_both_families() {
        for family in [Family::V4, Family::V6] {
            for repr in [
                IcmpRepr::DstUnreachable { code: 1 },
                IcmpRepr::PacketTooBig { mtu: 1280 },
                IcmpRepr::TimeExceeded,
            ] {
                let mut message = [0u8; HEADER_LEN];
                let mut icmp = IcmpPacket::new_unchecked(&mut message[..]);
                let (t, c) = repr.type_code(family);
                icmp.set_type_code(t, c);
                icmp.set_rest(repr.rest(family));
                assert_eq!(IcmpRepr::parse(family, &icmp), Some(repr), "{family:?}");
            }
        }
        // The IPv4 field holds 16 bits of MTU.
        let huge = IcmpRepr::PacketTooBig { mtu: 70_000 };
        assert_eq!(huge.rest(Family::V4), [0, 0, 0xff, 0xff]);
        assert_eq!(huge.rest(Family::V6), 70_000u32.to_be_bytes());
        let echo = IcmpPacket::new_unchecked([8u8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(IcmpRepr::parse(Family::V4, &echo), None);
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
