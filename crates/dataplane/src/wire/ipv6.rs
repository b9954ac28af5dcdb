//! IPv6 headers (RFC 8200) and a bounded walk over extension headers.

use std::net::Ipv6Addr;

use super::{Field, WireError, get16};

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// The length of the fixed header.
pub const HEADER_LEN: usize = field::DST.end;
/// The version field of IPv6 headers.
pub const VERSION: u8 = 6;

/// The link-local unicast prefix fe80::/10 (RFC 4291 2.5.6), as (value, length).
pub const LINK_LOCAL: (u128, u32) = (0xfe80 << 112, 10);
/// The prefix length of the link-local route every IPv6 device has (fe80::/64).
pub const LINK_LOCAL_ROUTE_PLEN: u8 = 64;
/// The flow label's bits in the first word of the header.
pub const FLOW_LABEL_MASK: u32 = 0xf_ffff;
/// The multicast prefix ff00::/8 (RFC 4291 2.7), as (value, length).
pub const MULTICAST: (u128, u32) = (0xff << 120, 8);
/// The loopback address ::1.
pub const LOOPBACK: u128 = 1;
/// The unspecified address ::.
pub const UNSPECIFIED: u128 = 0;

/// Whether `addr` lies in `prefix` (value, length 1..=128).
///
/// ```
/// use dataplane::wire::ipv6::{LINK_LOCAL, MULTICAST, in_prefix};
/// let addr: u128 = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().into();
/// assert!(in_prefix(addr, LINK_LOCAL));
/// assert!(!in_prefix(addr, MULTICAST));
/// ```
#[inline]
pub const fn in_prefix(addr: u128, (value, len): (u128, u32)) -> bool {
    addr >> (128 - len) == value >> (128 - len)
}

/// Next-header values the walk knows.
pub mod next_header {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating security payload (opaque: the walk stops).
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header.
    pub const NONE: u8 = 59;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
    /// Mobility header.
    pub const MOBILITY: u8 = 135;
    /// Host identity protocol.
    pub const HIP: u8 = 139;
    /// Shim6.
    pub const SHIM6: u8 = 140;
}

/// A typed view of an IPv6 packet over any buffer.
///
/// After [`check_len`](Self::check_len) no accessor can panic: the buffer holds the fixed
/// header and the payload length (it may be longer: Ethernet padding).
///
/// ```
/// use dataplane::wire::ipv6::Ipv6Packet;
/// let mut bytes = [0u8; 41];
/// bytes[0] = 0x60;
/// bytes[5] = 1; // payload length
/// bytes[6] = 59; // no next header
/// bytes[7] = 64;
/// let ip = Ipv6Packet::new_checked(&bytes[..])?;
/// assert_eq!((ip.version(), ip.hop_limit(), ip.payload().len()), (6, 64, 1));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without any check (for emitting into a buffer already sized).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// A view of untrusted bytes on which no accessor can panic.
    ///
    /// # Errors
    /// As [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the buffer holds the fixed header and the payload length.
    ///
    /// # Errors
    /// [`WireError::Truncated`].
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let buf = self.buffer.as_ref();
        if buf.len() < HEADER_LEN || buf.len() < HEADER_LEN + usize::from(get16(buf, field::LENGTH))
        {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn buf(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The version field (6 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf()[0] >> 4
    }

    /// The traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        let w = get16(
            self.buf(),
            field::VER_TC_FLOW.start..field::VER_TC_FLOW.start + 2,
        );
        (w >> 4) as u8
    }

    /// The flow label (the low 20 bits of the first word).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        let b = &self.buf()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & FLOW_LABEL_MASK
    }

    /// The payload length (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        get16(self.buf(), field::LENGTH)
    }

    /// The first next-header value.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf()[field::NXT_HDR]
    }

    /// The hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf()[field::HOP_LIMIT]
    }

    /// The source address as bytes.
    #[inline]
    pub fn src_bytes(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buf()[field::SRC]);
        a
    }

    /// The destination address as bytes.
    #[inline]
    pub fn dst_bytes(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buf()[field::DST]);
        a
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src_bytes())
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst_bytes())
    }

    /// The payload (extension headers and upper layer), up to the payload length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// The whole packet, up to the payload length.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buf()[..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Writes version 6, the traffic class and the flow label.
    #[inline]
    pub fn set_version_tc_flow(&mut self, tc: u8, flow: u32) {
        let w = (u32::from(VERSION) << 28) | (u32::from(tc) << 20) | (flow & FLOW_LABEL_MASK);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Writes the payload length (can break [`check_len`](Self::check_len)).
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Writes the first next-header value.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Writes the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Decrements the hop limit by one (IPv6 has no header checksum); the hop limit must be at
    /// least 1.
    ///
    /// ```
    /// use dataplane::wire::ipv6::Ipv6Packet;
    /// let mut header = [0u8; 40];
    /// header[7] = 64;
    /// Ipv6Packet::new_unchecked(&mut header[..]).decrement_hop_limit();
    /// assert_eq!(Ipv6Packet::new_unchecked(&header[..]).hop_limit(), 63);
    /// ```
    #[inline]
    pub fn decrement_hop_limit(&mut self) {
        let buf = self.buffer.as_mut();
        buf[field::HOP_LIMIT] = buf[field::HOP_LIMIT].wrapping_sub(1);
    }

    /// Writes the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.octets());
    }

    /// Writes the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.octets());
    }
}

/// What the extension-header walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Upper {
    /// The upper-layer protocol (or [`next_header::NONE`], [`next_header::ESP`], or the next
    /// header after a non-first fragment, which is not walked further).
    pub protocol: u8,
    /// The offset of the upper-layer header from the start of the IPv6 payload.
    pub offset: usize,
    /// A fragment header was met.
    pub fragment: bool,
    /// The fragment header had a non-zero offset (the upper-layer header is not here).
    pub later_fragment: bool,
    /// The first extension header is hop-by-hop options.
    pub hop_by_hop: bool,
    /// The number of extension headers walked.
    pub headers: usize,
}

/// Walks the extension headers of an IPv6 payload starting at `first` (the fixed header's next
/// header), at most `max_headers` of them, to the upper-layer header. Stops at ESP (opaque), at
/// "no next header", at an unknown value (taken as the upper layer), and after a fragment header
/// with a non-zero offset (the rest is not in this packet).
///
/// # Errors
/// [`WireError::Truncated`] when a header runs past the payload,
/// [`WireError::TooManyExtensions`] past `max_headers`.
///
/// ```
/// use dataplane::wire::ipv6::{next_header, walk_extensions};
/// // Destination options (8 bytes), then UDP.
/// let payload = [17, 0, 1, 4, 0, 0, 0, 0, /* UDP */ 0, 53, 0, 53, 0, 8, 0, 0];
/// let upper = walk_extensions(next_header::DEST_OPTS, &payload, 8)?;
/// assert_eq!((upper.protocol, upper.offset, upper.headers), (17, 8, 1));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
pub fn walk_extensions(first: u8, payload: &[u8], max_headers: usize) -> Result<Upper, WireError> {
    let mut upper = Upper {
        protocol: first,
        offset: 0,
        fragment: false,
        later_fragment: false,
        hop_by_hop: first == next_header::HOP_BY_HOP,
        headers: 0,
    };
    loop {
        let len = match upper.protocol {
            next_header::HOP_BY_HOP
            | next_header::ROUTING
            | next_header::DEST_OPTS
            | next_header::MOBILITY
            | next_header::HIP
            | next_header::SHIM6 => payload
                .get(upper.offset + 1)
                .map(|&l| (usize::from(l) + 1) * 8),
            next_header::FRAGMENT => Some(8),
            next_header::AH => payload
                .get(upper.offset + 1)
                .map(|&l| (usize::from(l) + 2) * 4),
            _ => return Ok(upper),
        };
        let Some(len) = len else {
            return Err(WireError::Truncated);
        };
        if upper.offset + len > payload.len() {
            return Err(WireError::Truncated);
        }
        if upper.headers == max_headers {
            return Err(WireError::TooManyExtensions);
        }
        let header = &payload[upper.offset..upper.offset + len];
        let was_fragment = upper.protocol == next_header::FRAGMENT;
        upper.headers += 1;
        upper.protocol = header[0];
        upper.offset += len;
        if was_fragment {
            upper.fragment = true;
            let offset = u16::from_be_bytes([header[2], header[3]]) >> 3;
            if offset != 0 {
                upper.later_fragment = true;
                return Ok(upper);
            }
        }
    }
}

/// The fields of a fixed IPv6 header, as a value: [`parse`](Self::parse) reads them from a
/// checked view, [`emit`](Self::emit) writes the whole header (flow label zero) into a view
/// over at least [`HEADER_LEN`] bytes.
///
/// ```
/// use std::net::Ipv6Addr;
/// use dataplane::wire::ipv6::{HEADER_LEN, Ipv6Packet, Ipv6Repr};
/// let repr = Ipv6Repr {
///     src: "2001:db8::1".parse().unwrap(),
///     dst: "2001:db8::2".parse().unwrap(),
///     next_header: 58,
///     hop_limit: 64,
///     traffic_class: 0,
///     payload_len: 8,
/// };
/// let mut bytes = [0u8; HEADER_LEN + 8];
/// repr.emit(&mut Ipv6Packet::new_unchecked(&mut bytes[..]));
/// assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&bytes[..])?)?, repr);
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// The source address.
    pub src: Ipv6Addr,
    /// The destination address.
    pub dst: Ipv6Addr,
    /// The first next header.
    pub next_header: u8,
    /// The hop limit.
    pub hop_limit: u8,
    /// The traffic class.
    pub traffic_class: u8,
    /// The payload length (extension headers included).
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// The fields of a view.
    ///
    /// # Errors
    /// As [`Ipv6Packet::check_len`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Ipv6Repr, WireError> {
        packet.check_len()?;
        Ok(Ipv6Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            payload_len: usize::from(packet.payload_len()),
        })
    }

    /// The length of the header it emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`], or the payload length exceeds 65,535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        packet.set_version_tc_flow(self.traffic_class, 0);
        let len = u16::try_from(self.payload_len).expect("an IPv6 payload length");
        packet.set_payload_len(len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse() {
        let mut b = [0u8; 48];
        b[0] = 0x6a;
        b[1] = 0xb1;
        b[2] = 0x23;
        b[3] = 0x45;
        b[5] = 8;
        b[6] = 17;
        b[7] = 1;
        b[8] = 0x20;
        b[39] = 1;
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ip.version(), 6);
        assert_eq!(ip.traffic_class(), 0xab);
        assert_eq!(ip.payload_len(), 8);
        assert_eq!(ip.next_header(), 17);
        assert_eq!(ip.hop_limit(), 1);
        assert_eq!(ip.src_addr().segments()[0], 0x2000);
        assert_eq!(ip.dst_addr(), Ipv6Addr::from(1u128));
        assert_eq!(ip.payload().len(), 8);
    }

    #[test]
    fn test_repr_parse_and_emit() {
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(&[0x6a, 0xb0, 0, 0, 0, 8, 17, 1]);
        b[8] = 0x20;
        b[39] = 1;
        let repr = Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Ipv6Repr {
                src: Ipv6Addr::from(0x20u128 << 120),
                dst: Ipv6Addr::from(1u128),
                next_header: 17,
                hop_limit: 1,
                traffic_class: 0xab,
                payload_len: 8,
            }
        );
        let mut out = [0xffu8; 40];
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[..], b[..40]);
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&b[..39])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn test_impossible_len() {
        let mut b = [0u8; 48];
        b[0] = 0x60;
        b[5] = 9;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            Ipv6Packet::new_checked(&b[..39]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn test_emit() {
        let mut b = [0u8; 40];
        let mut ip = Ipv6Packet::new_unchecked(&mut b[..]);
        ip.set_version_tc_flow(0xab, 0x12345);
        ip.set_payload_len(0);
        ip.set_next_header(59);
        ip.set_hop_limit(3);
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((ip.version(), ip.traffic_class()), (6, 0xab));
        assert_eq!(&b[..4], &[0x6a, 0xb1, 0x23, 0x45]);
    }

    #[test]
    fn walk_fragments_and_bounds() {
        // Fragment header (first fragment) then TCP.
        let first = [6, 0, 0, 1, 0, 0, 0, 7, 0, 80, 0, 81];
        let u = walk_extensions(next_header::FRAGMENT, &first, 8).unwrap();
        assert_eq!((u.protocol, u.offset, u.fragment), (6, 8, true));
        // A later fragment stops after its header.
        let later = [43, 0, 0, 8 << 3, 0, 0, 0, 7, 0xff, 0xff];
        let u = walk_extensions(next_header::FRAGMENT, &later, 8).unwrap();
        assert_eq!((u.protocol, u.offset, u.later_fragment), (43, 8, true));
        // Two destination-option headers with a bound of one.
        let two = [60, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            walk_extensions(next_header::DEST_OPTS, &two, 1).unwrap_err(),
            WireError::TooManyExtensions
        );
        assert_eq!(walk_extensions(60, &two, 2).unwrap().protocol, 17);
        // A header running past the payload.
        assert_eq!(
            walk_extensions(next_header::ROUTING, &[17, 1, 0, 0], 8).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            walk_extensions(next_header::AH, &[17], 8).unwrap_err(),
            WireError::Truncated
        );
        // ESP is opaque.
        assert_eq!(walk_extensions(50, &[], 8).unwrap().protocol, 50);
    }
}
