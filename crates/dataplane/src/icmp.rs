//! ICMP errors: when one may be sent (the quoting rules of RFC 1812 4.3.2.7 and RFC 4443
//! 2.4), how much of the original is quoted, and how the error frame is written, in place
//! over the original or into a spare frame.

use crate::parse::Meta;
use crate::verdict::IcmpError;
use crate::wire::ethernet::{self, EthernetFrame};
use crate::wire::icmp::{IcmpPacket, v4_type, v6_type};
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::wire::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::wire::l4::protocol;
use crate::wire::{Family, checksum};

/// The largest ICMPv4 error: 576 bytes of IP (RFC 1812 4.3.2.3), as the kernel sends.
pub const MAX_V4_ERROR: usize = 576;
/// The largest ICMPv6 error: the minimum IPv6 MTU (RFC 4443 2.4 (c)).
pub const MAX_V6_ERROR: usize = 1280;
/// The ICMP header length (type, code, checksum, four bytes of message).
pub const ICMP_HEADER_LEN: usize = crate::wire::icmp::HEADER_LEN;
/// The TTL / hop limit of errors (`ip_default_ttl`, the IPv6 default hop limit).
pub const ERROR_TTL: u8 = 64;

/// Whether an error about the packet `meta` describes may be sent.
///
/// Never about a fragment other than the first; never about an ICMP error (for IPv4 the
/// error types 3, 4, 5, 11, 12 and unknown types above 18; for IPv6 the types below 128), nor
/// about an ICMP packet whose type cannot be read (unless it is an IPv6 fragment, as RFC 8200
/// 4.5 lets a first fragment lack it). Multicast, broadcast and martian sources and
/// destinations never get this far.
pub fn may_send(meta: &Meta) -> bool {
    if meta.family.is_v6() {
        if meta.proto != protocol::ICMPV6 {
            return true;
        }
        match meta.icmp_type {
            Some(t) => t >= v6_type::FIRST_INFORMATIONAL,
            None => meta.fragment,
        }
    } else {
        if meta.later_fragment {
            return false;
        }
        if meta.proto != protocol::ICMP {
            return true;
        }
        match meta.icmp_type {
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
    meta.ip_len.min(room)
}

/// The link-layer header of an error: back to the sender, with the tag it came with.
#[derive(Clone, Copy, Debug)]
pub struct ReplyL2 {
    /// The original's source MAC.
    pub dst: [u8; 6],
    /// Our MAC on the ingress interface.
    pub src: [u8; 6],
    /// The original's tag control information, if tagged.
    pub tci: Option<u16>,
}

impl ReplyL2 {
    /// The header's length.
    pub fn header_len(&self) -> usize {
        if self.tci.is_some() {
            ethernet::TAGGED_HEADER_LEN
        } else {
            ethernet::HEADER_LEN
        }
    }
}

/// The addresses and fields of the error's IP header.
#[derive(Clone, Copy, Debug)]
pub struct ErrorIp {
    /// The error's IP version (the original's).
    pub family: Family,
    /// Our address on the ingress interface.
    pub src: u128,
    /// The original's source.
    pub dst: u128,
    /// The original's TOS (IPv4: the error keeps its TOS bits with precedence "internetwork
    /// control", as the kernel does).
    pub tos: u8,
    /// The IPv4 identification.
    pub ident: u16,
}

/// The length of the error's headers (link layer, IP, ICMP) before the quote.
pub fn headers_len(l2: &ReplyL2, family: Family) -> usize {
    l2.header_len() + family.header_len() + ICMP_HEADER_LEN
}

/// Writes the headers of an error into `out[..headers_len]`, the quote being already at
/// `out[headers_len..]` (so `out` is exactly the error frame). `mtu` goes into "fragmentation
/// needed" and "packet too big" errors.
pub fn write_error(out: &mut [u8], l2: &ReplyL2, ip: &ErrorIp, kind: IcmpError, mtu: u32) {
    let l2_len = l2.header_len();
    {
        let mut eth = EthernetFrame::new_unchecked(&mut out[..l2_len]);
        eth.set_dst_addr(l2.dst);
        eth.set_src_addr(l2.src);
        let inner = ip.family.ethertype();
        match l2.tci {
            Some(tci) => eth.set_vlan_tag(tci, inner),
            None => eth.set_ethertype(inner),
        }
    }
    let (ty, code) = kind.type_code();
    let rest: [u8; 4] = match kind {
        IcmpError::FragNeeded => {
            let m = mtu.min(0xffff) as u16;
            let [a, b] = m.to_be_bytes();
            [0, 0, a, b]
        }
        IcmpError::V6PacketTooBig => mtu.to_be_bytes(),
        _ => [0; 4],
    };
    let packet = &mut out[l2_len..];
    let (header, icmp) = packet.split_at_mut(ip.family.header_len());
    let icmp_len = icmp.len() as u32;
    let mut message = IcmpPacket::new_unchecked(&mut icmp[..]);
    message.set_type_code(ty, code);
    message.set_rest(rest);
    if ip.family.is_v6() {
        Ipv6Repr {
            src: ip.src.into(),
            dst: ip.dst.into(),
            next_header: protocol::ICMPV6,
            hop_limit: ERROR_TTL,
            traffic_class: 0,
            payload_len: icmp_len as usize,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut header[..]));
        message.fill_checksum(checksum::pseudo_v6(
            ip.src.to_be_bytes(),
            ip.dst.to_be_bytes(),
            protocol::ICMPV6,
            icmp_len,
        ));
    } else {
        Ipv4Repr {
            src: (ip.src as u32).into(),
            dst: (ip.dst as u32).into(),
            protocol: protocol::ICMP,
            ttl: ERROR_TTL,
            tos: (ip.tos & ipv4::TOS_BITS) | ipv4::PREC_INTERNETWORK_CONTROL,
            ident: ip.ident,
            // ICMP sockets do not set DF (`IP_PMTUDISC_DONT`), nor do the kernel's errors.
            dont_frag: false,
            payload_len: icmp_len as usize,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut header[..]));
        message.fill_checksum(0);
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

    fn meta(v6: bool, proto: u8, icmp_type: Option<u8>) -> Meta {
        Meta {
            l2_len: 14,
            tci: None,
            dst_mac: [0; 6],
            src_mac: [0; 6],
            family: Family::from_v6(v6),
            src: 0,
            dst: 0,
            tos: 0,
            ttl: 1,
            ip_len: 2000,
            proto,
            l4_offset: 20,
            icmp_type,
            fragment: false,
            later_fragment: false,
            dont_frag: false,
        }
    }

    #[test]
    fn no_error_about_an_error() {
        assert!(may_send(&meta(false, 17, None)));
        assert!(may_send(&meta(false, 1, Some(8))));
        assert!(!may_send(&meta(false, 1, Some(3))));
        assert!(!may_send(&meta(false, 1, Some(11))));
        assert!(!may_send(&meta(false, 1, Some(40))));
        assert!(!may_send(&meta(false, 1, None)));
        assert!(may_send(&meta(true, 58, Some(128))));
        assert!(!may_send(&meta(true, 58, Some(1))));
        assert!(!may_send(&meta(true, 58, None)));
        let mut later = meta(false, 17, None);
        later.later_fragment = true;
        assert!(!may_send(&later));
    }

    #[test]
    fn quotes_are_bounded() {
        assert_eq!(quote_len(&meta(false, 17, None)), 548);
        assert_eq!(quote_len(&meta(true, 17, None)), 1232);
        let mut small = meta(false, 17, None);
        small.ip_len = 60;
        assert_eq!(quote_len(&small), 60);
    }
}
