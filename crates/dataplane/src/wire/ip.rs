//! The network layer of either family as one value, in the manner of smoltcp's `IpRepr`: what
//! the pipeline emits over IP (ICMP errors, the endpoints' datagrams) is written once for both
//! families, the family deciding only inside [`IpRepr`]'s methods.

use std::net::IpAddr;

use super::ipv4::{Ipv4Packet, Ipv4Repr};
use super::ipv6::{Ipv6Packet, Ipv6Repr};
use super::{Family, WireError, checksum};

/// An IPv4 or IPv6 header as a value (the fields of [`Ipv4Repr`] or [`Ipv6Repr`]).
///
/// ```
/// use std::net::Ipv6Addr;
/// use dataplane::wire::Family;
/// use dataplane::wire::ip::IpRepr;
/// use dataplane::wire::ipv6::Ipv6Repr;
/// let repr = IpRepr::Ipv6(Ipv6Repr {
///     src: Ipv6Addr::LOCALHOST,
///     dst: Ipv6Addr::LOCALHOST,
///     next_header: 17,
///     hop_limit: 64,
///     traffic_class: 0,
///     payload_len: 8,
/// });
/// let mut packet = [0u8; 48];
/// repr.emit(&mut packet);
/// assert_eq!((repr.family(), repr.header_len()), (Family::V6, 40));
/// assert_eq!(IpRepr::parse(Family::V6, &packet)?, repr);
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpRepr {
    /// An IPv4 header (without options).
    Ipv4(Ipv4Repr),
    /// An IPv6 header (without extension headers).
    Ipv6(Ipv6Repr),
}

impl IpRepr {
    /// The header at the start of `packet`, read as `family`'s (the version field is the
    /// caller's to check, as the EtherType usually says the family).
    ///
    /// # Errors
    /// As [`Ipv4Repr::parse`] and [`Ipv6Repr::parse`].
    pub fn parse(family: Family, packet: &[u8]) -> Result<IpRepr, WireError> {
        match family {
            Family::V4 => Ipv4Repr::parse(&Ipv4Packet::new_checked(packet)?).map(IpRepr::Ipv4),
            Family::V6 => Ipv6Repr::parse(&Ipv6Packet::new_checked(packet)?).map(IpRepr::Ipv6),
        }
    }

    /// The family.
    #[inline]
    pub const fn family(&self) -> Family {
        match self {
            IpRepr::Ipv4(_) => Family::V4,
            IpRepr::Ipv6(_) => Family::V6,
        }
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => IpAddr::V4(r.src),
            IpRepr::Ipv6(r) => IpAddr::V6(r.src),
        }
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => IpAddr::V4(r.dst),
            IpRepr::Ipv6(r) => IpAddr::V6(r.dst),
        }
    }

    /// The upper-layer protocol (IPv4's protocol, IPv6's next header).
    #[inline]
    pub const fn protocol(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => r.protocol,
            IpRepr::Ipv6(r) => r.next_header,
        }
    }

    /// The TTL or hop limit.
    #[inline]
    pub const fn hop_limit(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => r.ttl,
            IpRepr::Ipv6(r) => r.hop_limit,
        }
    }

    /// The length of the payload (what follows the header).
    #[inline]
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.payload_len,
            IpRepr::Ipv6(r) => r.payload_len,
        }
    }

    /// The length of the header it emits.
    #[inline]
    pub const fn header_len(&self) -> usize {
        self.family().header_len()
    }

    /// Writes the header (IPv4's checksum included) into the first
    /// [`header_len`](Self::header_len) bytes of `buffer`.
    ///
    /// # Panics
    /// If the buffer is shorter than the header, or the payload length does not fit the
    /// header's length field.
    #[inline]
    pub fn emit(&self, buffer: &mut [u8]) {
        match self {
            IpRepr::Ipv4(r) => r.emit(&mut Ipv4Packet::new_unchecked(buffer)),
            IpRepr::Ipv6(r) => r.emit(&mut Ipv6Packet::new_unchecked(buffer)),
        }
    }

    /// The sum of the pseudo-header an upper-layer checksum covers (TCP, UDP, ICMPv6): the
    /// addresses, the protocol and the payload length (RFC 768, RFC 8200 8.1). ICMPv4 has
    /// none ([`IcmpRepr::emit`](super::icmp::IcmpRepr::emit) knows).
    #[inline]
    pub fn pseudo_header(&self) -> u64 {
        match self {
            IpRepr::Ipv4(r) => checksum::pseudo_v4(
                r.src.octets(),
                r.dst.octets(),
                r.protocol,
                r.payload_len as u32,
            ),
            IpRepr::Ipv6(r) => checksum::pseudo_v6(
                r.src.octets(),
                r.dst.octets(),
                r.next_header,
                r.payload_len as u32,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::wire::ipv4;

    #[test]
    fn ipv4_round_trips_and_its_pseudo_header_is_the_families() {
        let v4 = Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 7),
            protocol: 17,
            ttl: 64,
            tos: 0,
            ident: 9,
            dont_frag: true,
            payload_len: 12,
        };
        let repr = IpRepr::Ipv4(v4);
        let mut packet = [0u8; ipv4::HEADER_LEN + 12];
        repr.emit(&mut packet);
        assert!(
            Ipv4Packet::new_checked(&packet[..])
                .unwrap()
                .verify_checksum()
        );
        assert_eq!(IpRepr::parse(Family::V4, &packet), Ok(repr));
        assert_eq!(
            (repr.family(), repr.protocol(), repr.hop_limit()),
            (Family::V4, 17, 64)
        );
        assert_eq!(repr.src_addr(), IpAddr::V4(v4.src));
        assert_eq!(
            repr.pseudo_header(),
            checksum::pseudo_v4([192, 0, 2, 1], [198, 51, 100, 7], 17, 12)
        );
        assert_eq!(
            IpRepr::parse(Family::V4, &packet[..10]),
            Err(WireError::Truncated)
        );
    }
}
