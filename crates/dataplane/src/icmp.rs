//! ICMP errors: when one may be sent (the quoting rules of RFC 1812 4.3.2.7 and RFC 4443
//! 2.4), how much of the original is quoted, and how the error frame is written, in place
//! over the original or into a spare frame.

use crate::parse::Meta;
use crate::verdict::IcmpError;
use crate::wire::Family;
use crate::wire::ethernet::{ADDR_LEN, EthernetFrame, EthernetRepr};
use crate::wire::icmp::{IcmpPacket, IcmpRepr, v4_type, v6_type};
use crate::wire::ip::IpRepr;
use crate::wire::ipv4::{self, Ipv4Repr};
use crate::wire::ipv6::Ipv6Repr;
use crate::wire::l4::protocol;

/// The largest ICMPv4 error: 576 bytes of IP (RFC 1812 4.3.2.3), as the kernel sends.
pub const MAX_V4_ERROR: usize = 576;
/// The largest ICMPv6 error: the minimum IPv6 MTU (RFC 4443 2.4 (c)).
pub const MAX_V6_ERROR: usize = 1280;
/// The ICMP header length (type, code, checksum, four bytes of message).
pub const ICMP_HEADER_LEN: usize = crate::wire::icmp::HEADER_LEN;
/// The TTL / hop limit of errors (`ip_default_ttl`, the IPv6 default hop limit).
pub const ERROR_TTL: u8 = 64;

/// Whether an error about the packet `meta` describes (parsed from `frame`, which holds its
/// ICMP type) may be sent.
///
/// Never about a fragment other than the first; never about an ICMP error (for IPv4 the
/// error types 3, 4, 5, 11, 12 and unknown types above 18; for IPv6 the types below 128), nor
/// about an ICMP packet whose type cannot be read (unless it is an IPv6 fragment, as RFC 8200
/// 4.5 lets a first fragment lack it). Multicast, broadcast and martian sources and
/// destinations never get this far.
pub fn may_send(meta: &Meta, frame: &[u8]) -> bool {
    if meta.family.is_v6() {
        if meta.proto != protocol::ICMPV6 {
            return true;
        }
        match meta.icmp_type(frame) {
            Some(t) => t >= v6_type::FIRST_INFORMATIONAL,
            None => meta.fragment(),
        }
    } else {
        if meta.later_fragment() {
            return false;
        }
        if meta.proto != protocol::ICMP {
            return true;
        }
        match meta.icmp_type(frame) {
            Some(t) => {
                t <= v4_type::LAST_KNOWN
                    && !matches!(
                        t,
                        v4_type::DEST_UNREACHABLE
                            | v4_type::SOURCE_QUENCH
                            | v4_type::REDIRECT
                            | v4_type::TIME_EXCEEDED
                            | v4_type::PARAMETER_PROBLEM
                    )
            }
            None => false,
        }
    }
}

/// How many bytes of the original IP packet an error quotes: as much as fits in 576 bytes
/// (IPv4) or 1280 bytes (IPv6) with the new IP and ICMP headers.
pub fn quote_len(meta: &Meta) -> usize {
    let room = match meta.family {
        Family::V6 => MAX_V6_ERROR,
        Family::V4 => MAX_V4_ERROR,
    } - meta.family.header_len()
        - ICMP_HEADER_LEN;
    meta.ip_len().min(room)
}

/// The headers of an ICMP error frame as values: back to the sender (its MAC, with the tag it
/// came with), from our address on the ingress interface, the message of the error. Built by
/// [`error_headers`] for either family; [`emit`](Self::emit) writes them in front of the quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorHeaders {
    /// The link-layer header: to the original's source MAC from ours, with its tag.
    pub l2: EthernetRepr,
    /// The IP header (its payload: the ICMP header and the quote).
    pub ip: IpRepr,
    /// The ICMP message.
    pub icmp: IcmpRepr,
}

impl ErrorHeaders {
    /// The length of the headers (link layer, IP, ICMP) before the quote.
    #[inline]
    pub const fn headers_len(&self) -> usize {
        self.l2.header_len() + self.ip.header_len() + ICMP_HEADER_LEN
    }

    /// The length of the whole error frame (the headers and the quote).
    #[inline]
    pub const fn frame_len(&self) -> usize {
        self.l2.header_len() + self.ip.header_len() + self.ip.payload_len()
    }

    /// Writes the headers into `out[..headers_len]`, the quote being already after them (so
    /// `out` is exactly the error frame, [`frame_len`](Self::frame_len) bytes), and the ICMP
    /// checksum over the message.
    ///
    /// # Panics
    /// If `out` is shorter than the headers.
    pub fn emit(&self, out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.frame_len());
        let (l2, packet) = out.split_at_mut(self.l2.header_len());
        self.l2.emit(&mut EthernetFrame::new_unchecked(l2));
        let (header, message) = packet.split_at_mut(self.ip.header_len());
        self.ip.emit(header);
        self.icmp
            .emit(&mut IcmpPacket::new_unchecked(message), &self.ip);
    }

    /// Writes the error frame into `out` (exactly [`frame_len`](Self::frame_len) bytes): the
    /// quote copied from `quote` (its [`frame_len`](Self::frame_len) minus
    /// [`headers_len`](Self::headers_len) bytes), then the headers in front of it.
    ///
    /// # Panics
    /// If `out` or `quote` has another length.
    pub fn emit_quoting(&self, out: &mut [u8], quote: &[u8]) {
        out[self.headers_len()..].copy_from_slice(quote);
        self.emit(out);
    }
}

/// The headers of the error `kind` about the packet `meta` describes (parsed from `frame`,
/// whose MAC addresses and tag the error's link-layer header takes), quoting `quote` bytes of
/// it, from `src` (our address on the ingress interface, of the packet's family) with IPv4
/// identification `ident`; `mtu` goes into "fragmentation needed" and "packet too big".
///
/// IPv4 errors keep the original's TOS bits with precedence "internetwork control" and no DF,
/// as the kernel's; IPv6 errors have traffic class 0. Both have [`ERROR_TTL`].
pub fn error_headers(
    meta: &Meta,
    frame: &[u8],
    src: u128,
    ident: u16,
    kind: IcmpError,
    mtu: u32,
    quote: usize,
) -> ErrorHeaders {
    let payload_len = ICMP_HEADER_LEN + quote;
    let ip = match meta.family {
        Family::V6 => IpRepr::Ipv6(Ipv6Repr {
            src: src.into(),
            dst: meta.src.into(),
            next_header: protocol::ICMPV6,
            hop_limit: ERROR_TTL,
            traffic_class: 0,
            payload_len,
        }),
        Family::V4 => IpRepr::Ipv4(Ipv4Repr {
            src: (src as u32).into(),
            dst: meta.src4().into(),
            protocol: protocol::ICMP,
            ttl: ERROR_TTL,
            tos: (meta.tos & ipv4::TOS_BITS) | ipv4::PREC_INTERNETWORK_CONTROL,
            ident,
            // ICMP sockets do not set DF (`IP_PMTUDISC_DONT`), nor do the kernel's errors.
            dont_frag: false,
            payload_len,
        }),
    };
    // The parser saw the Ethernet header (a `frame` too short gives zero addresses).
    let mut macs = [0u8; 2 * ADDR_LEN];
    if let Some(head) = frame.first_chunk::<{ 2 * ADDR_LEN }>() {
        macs = *head;
    }
    let (to, from) = macs.split_at(ADDR_LEN);
    ErrorHeaders {
        l2: EthernetRepr {
            dst: from.try_into().unwrap_or_default(),
            src: to.try_into().unwrap_or_default(),
            ethertype: meta.family.ethertype(),
            tci: meta.tci(frame),
        },
        ip,
        icmp: kind.repr(mtu),
    }
}

/// Makes room for an error in the chunk that holds the original, whose IP header starts at
/// `ip_start`: the error frame starts `headers` bytes before the quote. With enough headroom
/// the quote stays where it is; otherwise it moves to `headers` bytes after the chunk's start,
/// if the chunk is long enough. Returns where the error frame starts.
pub fn room_in_place(
    chunk: &mut [u8],
    ip_start: usize,
    quote: usize,
    headers: usize,
) -> Option<usize> {
    if ip_start >= headers {
        return Some(ip_start - headers);
    }
    if headers + quote <= chunk.len() && ip_start + quote <= chunk.len() {
        chunk.copy_within(ip_start..ip_start + quote, headers);
        return Some(0);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::FragBits;

    fn meta(v6: bool, proto: u8) -> Meta {
        Meta {
            l2_len: 14,
            family: Family::from_v6(v6),
            src: 0,
            dst: 0,
            tos: 0,
            ttl: 1,
            ip_len: 2000,
            proto,
            l4_offset: 20,
            ..Meta::default()
        }
    }

    /// Whether an error may be sent about a packet of `proto` whose upper-layer header starts
    /// with `icmp_type` (`None`: the packet ends before it).
    fn may(v6: bool, proto: u8, icmp_type: Option<u8>) -> bool {
        let mut m = meta(v6, proto);
        let mut frame = vec![0u8; m.l4() + 1];
        match icmp_type {
            Some(t) => frame[m.l4()] = t,
            None => m.ip_len = m.l4_offset,
        }
        may_send(&m, &frame)
    }

    #[test]
    fn no_error_about_an_error() {
        assert!(may(false, 17, None));
        assert!(may(false, 1, Some(8)));
        assert!(!may(false, 1, Some(3)));
        assert!(!may(false, 1, Some(11)));
        assert!(!may(false, 1, Some(40)));
        assert!(!may(false, 1, None));
        assert!(may(true, 58, Some(128)));
        assert!(!may(true, 58, Some(1)));
        assert!(!may(true, 58, None));
        let later = Meta {
            frag: FragBits::new(true, true, false),
            ..meta(false, 17)
        };
        assert!(!may_send(&later, &[0; 64]));
    }

    /// The headers of an error read back as what they were built from, with a right ICMP
    /// checksum, in both families and with a tag.
    #[test]
    fn error_headers_read_back() {
        for (v6, tci) in [(false, None), (true, Some(7u16)), (false, Some(100))] {
            let mut m = meta(v6, 17);
            (m.src, m.ip_len) = (9, 40);
            // The original frame: to us ([4; 6]) from the sender ([2; 6]), with the tag.
            let mut frame = [[4; 6], [2; 6]].concat();
            if let Some(tci) = tci {
                frame.extend_from_slice(&[0x81, 0x00]);
                frame.extend_from_slice(&tci.to_be_bytes());
            }
            frame.extend_from_slice(&m.family.ethertype().to_be_bytes());
            m.l2_len = frame.len() as u8;
            let quote = quote_len(&m);
            let error = error_headers(&m, &frame, 5, 77, IcmpError::V6TimeExceeded, 0, quote);
            let mut out = vec![0xeeu8; error.frame_len()];
            error.emit_quoting(&mut out, &[0xab; 40]);
            let eth = EthernetFrame::new_checked(&out[..]).unwrap();
            assert_eq!(EthernetRepr::parse(&eth), Ok(error.l2));
            assert_eq!((error.l2.dst, error.l2.tci), ([2; 6], tci));
            let family = Family::from_v6(v6);
            let ip = IpRepr::parse(family, eth.payload()).unwrap();
            assert_eq!(ip, error.ip);
            assert_eq!(ip.hop_limit(), ERROR_TTL);
            assert_eq!(ip.protocol(), family.icmp_protocol());
            let message = &eth.payload()[ip.header_len()..];
            let icmp = IcmpPacket::new_checked(message).unwrap();
            let pseudo = if v6 { ip.pseudo_header() } else { 0 };
            assert!(icmp.verify_checksum(pseudo));
            assert_eq!(IcmpRepr::parse(family, &icmp), Some(IcmpRepr::TimeExceeded));
            assert_eq!(&message[ICMP_HEADER_LEN..], &[0xab; 40]);
        }
    }

    #[test]
    fn quotes_are_bounded() {
        assert_eq!(quote_len(&meta(false, 17)), 548);
        assert_eq!(quote_len(&meta(true, 17)), 1232);
        let mut small = meta(false, 17);
        small.ip_len = 60;
        assert_eq!(quote_len(&small), 60);
    }
}
