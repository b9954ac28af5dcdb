//! The pipeline's one pass over a frame's headers: Ethernet (and a tag), IPv4 or IPv6 with
//! validation, the upper layer's ports. The result, [`Meta`], holds offsets and the fields the
//! decisions need; nothing is copied.

use crate::config::{Config, VlanMode};
use crate::verdict::{DropReason, PuntReason, Verdict};
use crate::wire::ethernet::{self, EthernetFrame, ethertype};
use crate::wire::icmp::v6_type;
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet, next_header};
use crate::wire::l4;
use crate::wire::{Family, WireError, checksum};

/// Where a frame's headers are and what they say: 48 bytes, each field written once per frame.
///
/// Only what the pipeline's stages read for every packet is kept; what only the slow paths
/// need (the MAC addresses and VLAN tag of ICMP errors, the ICMP type of the quoting rules)
/// is read from the frame this `Meta` was parsed from, which stays in its lane until the
/// verdict: [`tci`](Self::tci), [`icmp_type`](Self::icmp_type), [`ports`](Self::ports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The source address (an IPv4 address in the low 32 bits).
    pub src: u128,
    /// The destination address (an IPv4 address in the low 32 bits).
    pub dst: u128,
    /// The IP packet's length (total length, or 40 + payload length), Ethernet padding
    /// excluded.
    pub ip_len: u32,
    /// The offset of the upper-layer header from the start of the IP header.
    pub l4_offset: u32,
    /// The IP version: which header the addresses, TTL and lengths were read from.
    pub family: Family,
    /// The length of the link-layer header: 14, or 18 with a VLAN tag.
    pub l2_len: u8,
    /// The TOS byte or traffic class.
    pub tos: u8,
    /// The TTL or hop limit.
    pub ttl: u8,
    /// The upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Whether and which fragment it is, and IPv4 DF.
    pub frag: FragBits,
}

/// The fragment bits of a packet, as IPv4's flags and offset field (host order): DF, MF, the
/// offset (not zero for a fragment other than the first). An IPv6 first fragment has MF, a
/// later one an offset of 1. Kept as read, so that the parser stores one word.
///
/// ```
/// use dataplane::parse::FragBits;
/// let first = FragBits::new(true, false, true);
/// assert!(first.fragment() && !first.later_fragment() && first.dont_frag());
/// assert!(FragBits::new(false, true, false).fragment());
/// assert_eq!(FragBits::default(), FragBits::new(false, false, false));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragBits(u16);

impl FragBits {
    /// Any fragment, a fragment other than the first (which implies `fragment`), IPv4 DF.
    #[must_use]
    pub const fn new(fragment: bool, later_fragment: bool, dont_frag: bool) -> FragBits {
        let frag = if later_fragment {
            V6_LATER_FRAGMENT
        } else if fragment {
            ipv4::MF
        } else {
            0
        };
        FragBits(frag | if dont_frag { ipv4::DF } else { 0 })
    }

    /// Any fragment (IPv4 MF or offset; an IPv6 fragment header).
    #[inline]
    pub const fn fragment(self) -> bool {
        self.0 & (ipv4::MF | ipv4::OFFSET_MASK) != 0
    }

    /// A fragment other than the first (no upper-layer header here).
    #[inline]
    pub const fn later_fragment(self) -> bool {
        self.0 & ipv4::OFFSET_MASK != 0
    }

    /// IPv4 DF.
    #[inline]
    pub const fn dont_frag(self) -> bool {
        self.0 & ipv4::DF != 0
    }
}

impl Meta {
    /// The offset of the IP header from the frame's start.
    #[inline]
    pub fn l3(&self) -> usize {
        usize::from(self.l2_len)
    }

    /// The offset of the upper-layer header from the frame's start.
    #[inline]
    pub fn l4(&self) -> usize {
        self.l3() + self.l4_offset as usize
    }

    /// The IP packet's length as a `usize`.
    #[inline]
    pub fn ip_len(&self) -> usize {
        self.ip_len as usize
    }

    /// Any fragment (IPv4 MF or offset; an IPv6 fragment header).
    #[inline]
    pub fn fragment(&self) -> bool {
        self.frag.fragment()
    }

    /// A fragment other than the first (no upper-layer header here).
    #[inline]
    pub fn later_fragment(&self) -> bool {
        self.frag.later_fragment()
    }

    /// IPv4 DF.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.frag.dont_frag()
    }

    /// The source of an IPv4 packet as its 32 bits (the low bits of [`src`](Self::src)).
    ///
    /// ```
    /// use dataplane::parse::Meta;
    /// let meta = Meta { src: 0xc000_0201, ..Meta::default() };
    /// assert_eq!(std::net::Ipv4Addr::from(meta.src4()).to_string(), "192.0.2.1");
    /// ```
    #[inline]
    pub fn src4(&self) -> u32 {
        self.src as u32
    }

    /// The destination of an IPv4 packet as its 32 bits (the low bits of [`dst`](Self::dst)).
    ///
    /// ```
    /// use dataplane::parse::Meta;
    /// let meta = Meta { dst: 0xc633_6407, ..Meta::default() };
    /// assert_eq!(std::net::Ipv4Addr::from(meta.dst4()).to_string(), "198.51.100.7");
    /// ```
    #[inline]
    pub fn dst4(&self) -> u32 {
        self.dst as u32
    }

    /// Whether this is an IPv6 packet from a link-local source (fe80::/10), which is never
    /// forwarded off its link (RFC 4291 2.5.6).
    ///
    /// ```
    /// use dataplane::{parse::Meta, wire::Family};
    /// let meta = Meta { family: Family::V6, src: 0xfe80 << 112 | 1, ..Meta::default() };
    /// assert!(meta.src_is_v6_link_local());
    /// assert!(!Meta { family: Family::V4, ..meta }.src_is_v6_link_local());
    /// ```
    #[inline]
    pub fn src_is_v6_link_local(&self) -> bool {
        self.family.is_v6() && ipv6::in_prefix(self.src, ipv6::LINK_LOCAL)
    }

    /// The tag control information (VLAN id and priority) of a tagged frame, read from the
    /// frame this `Meta` was parsed from; `None` for an untagged one.
    ///
    /// ```
    /// use dataplane::parse::Meta;
    /// let mut frame = [0u8; 18];
    /// frame[12..16].copy_from_slice(&[0x81, 0x00, 0x20, 0x05]);
    /// assert_eq!(Meta::default().tci(&frame), Some(0x2005));
    /// ```
    #[inline]
    pub fn tci(&self, frame: &[u8]) -> Option<u16> {
        EthernetFrame::new_checked(frame).ok()?.tci()
    }

    /// The ICMP / ICMPv6 type, read from the frame this `Meta` was parsed from, when the
    /// upper layer is ICMP of the packet's family and its header is in this packet (first
    /// fragments included).
    ///
    /// ```
    /// use dataplane::{Config, parse::parse};
    /// let mut frame = vec![0u8; 14 + 20 + 8];
    /// frame[12..14].copy_from_slice(&[0x08, 0x00]);
    /// frame[14..34].copy_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7]);
    /// let sum = dataplane::wire::checksum::checksum(&frame[14..34]);
    /// frame[24..26].copy_from_slice(&sum.to_be_bytes());
    /// frame[34] = 8; // echo request
    /// let meta = parse(&frame, &Config::default())?;
    /// assert_eq!(meta.icmp_type(&frame), Some(8));
    /// # Ok::<(), dataplane::Verdict>(())
    /// ```
    #[inline]
    pub fn icmp_type(&self, frame: &[u8]) -> Option<u8> {
        if self.later_fragment()
            || self.proto != self.family.icmp_protocol()
            || self.l4_offset >= self.ip_len
        {
            return None;
        }
        frame.get(self.l4()).copied()
    }

    /// The ports (or ICMP type and code) for policy lookups, read from the frame this `Meta`
    /// was parsed from: `None` for fragments, protocols without ports, or an upper-layer
    /// header too short to hold them. Read only when a policy lookup needs them (most packets
    /// meet no policy), not by the parser.
    ///
    /// ```
    /// use dataplane::{Config, parse::parse};
    /// let mut frame = vec![0u8; 14 + 20 + 8];
    /// frame[12..14].copy_from_slice(&[0x08, 0x00]);
    /// frame[14..34].copy_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7]);
    /// let sum = dataplane::wire::checksum::checksum(&frame[14..34]);
    /// frame[24..26].copy_from_slice(&sum.to_be_bytes());
    /// frame[34..38].copy_from_slice(&[0x13, 0x88, 0, 53]);
    /// let meta = parse(&frame, &Config::default())?;
    /// assert_eq!(meta.ports(&frame), Some((5000, 53)));
    /// # Ok::<(), dataplane::Verdict>(())
    /// ```
    pub fn ports(&self, frame: &[u8]) -> Option<(u16, u16)> {
        if self.fragment() {
            return None;
        }
        let upper = frame.get(self.l4()..self.l3() + self.ip_len())?;
        l4::ports(self.proto, upper)
    }
}

/// The link-layer part: the tag policy, ARP and other EtherTypes. Returns the header's length
/// (tag included when there is one) and the EtherType of the IP payload.
#[inline]
fn parse_l2(frame: &[u8], config: &Config) -> Result<(usize, u16), Verdict> {
    // The untagged header as a fixed-size array: every accessor's bounds check is resolved at
    // compile time.
    let Some(head) = frame.first_chunk::<{ ethernet::HEADER_LEN }>() else {
        return Err(Verdict::Drop(DropReason::Truncated));
    };
    let outer = EthernetFrame::new_unchecked(head).ethertype();
    if !matches!(outer, ethertype::VLAN | ethertype::QINQ) {
        return match outer {
            ethertype::IPV4 | ethertype::IPV6 => Ok((ethernet::HEADER_LEN, outer)),
            ethertype::ARP => Err(Verdict::Punt(PuntReason::Arp)),
            _ => Err(Verdict::Punt(PuntReason::OtherEthertype)),
        };
    }
    let Some(tagged) = frame.first_chunk::<{ ethernet::TAGGED_HEADER_LEN }>() else {
        return Err(Verdict::Drop(DropReason::Truncated));
    };
    let eth = EthernetFrame::new_unchecked(tagged);
    let inner = eth.inner_ethertype();
    match config.vlan {
        VlanMode::Drop => return Err(Verdict::Drop(DropReason::Vlan)),
        VlanMode::Punt => return Err(Verdict::Punt(PuntReason::Vlan)),
        VlanMode::Route => {}
    }
    match inner {
        ethertype::VLAN | ethertype::QINQ => Err(Verdict::Drop(DropReason::VlanStack)),
        ethertype::IPV4 | ethertype::IPV6 => Ok((ethernet::TAGGED_HEADER_LEN, inner)),
        ethertype::ARP => Err(Verdict::Punt(PuntReason::Arp)),
        _ => Err(Verdict::Punt(PuntReason::OtherEthertype)),
    }
}

/// Parses and validates one frame: link layer, then IPv4 (version, IHL, lengths, header
/// checksum, martian addresses) or IPv6 (version, payload length, martian addresses,
/// extension headers within the configured bound). What cannot be forwarded here comes back
/// as the verdict to give (a punt or a drop).
///
/// Destination-MAC checks and checks that need the tables (a local source) are the caller's.
///
/// # Errors
/// The verdict for a frame the pipeline does not forward: `Punt` (ARP, other EtherTypes,
/// multicast and broadcast, IPv6 hop-by-hop options, too many extension headers, neighbour
/// discovery, link-local destinations) or `Drop` with the reason.
pub fn parse(frame: &[u8], config: &Config) -> Result<Meta, Verdict> {
    let mut meta = Meta::default();
    parse_into(frame, config, &mut meta)?;
    Ok(meta)
}

/// [`parse`] into a [`Meta`] the caller keeps (a vector pipeline's lane), without moving the
/// result: every field is written on success; on error `meta` holds whatever was parsed so far.
///
/// ```
/// use dataplane::{Config, parse::{Meta, parse, parse_into}};
/// let frame = [0u8; 10];
/// let mut meta = Meta::default();
/// assert_eq!(parse_into(&frame, &Config::default(), &mut meta), parse(&frame, &Config::default()).map(|_| ()));
/// ```
///
/// # Errors
/// As [`parse`].
#[inline]
pub fn parse_into(frame: &[u8], config: &Config, meta: &mut Meta) -> Result<(), Verdict> {
    match parse_plain(frame, meta) {
        Some(done) => done,
        None => parse_general(frame, config, meta),
    }
}

/// The shortcuts of [`parse_into`] for the common frames (untagged IPv4 without options,
/// untagged IPv6 UDP or TCP): what the general path gives such a frame, `None` for every other
/// frame. Always inlined, so that a caller branches on the outcome without it going through
/// memory.
#[inline(always)]
pub(crate) fn parse_plain(frame: &[u8], meta: &mut Meta) -> Option<Result<(), Verdict>> {
    match parse_plain_v4(frame, meta) {
        Some(done) => Some(done),
        None => parse_plain_v6(frame, meta),
    }
}

/// [`parse_into`] for every frame, without the shortcuts of [`parse_plain`]. Out of line: the
/// shortcuts' callers keep their registers for the common frames.
#[inline(never)]
fn parse_general(frame: &[u8], config: &Config, meta: &mut Meta) -> Result<(), Verdict> {
    let (l2_len, ethertype) = parse_l2(frame, config)?;
    // At most 18: the tagged header's length.
    meta.l2_len = l2_len as u8;
    let ip = &frame[l2_len..];
    if ethertype == ethertype::IPV6 {
        meta.family = Family::V6;
        parse_v6(ip, config, meta)
    } else {
        meta.family = Family::V4;
        parse_v4(ip, meta)
    }
}

fn wire_drop(e: WireError) -> Verdict {
    Verdict::Drop(match e {
        WireError::Truncated | WireError::TooManyExtensions => DropReason::Truncated,
        WireError::BadHeaderLen => DropReason::BadHeaderLen,
    })
}

/// IPv4 per RFC 1812 section 5.2.2 and the kernel's `ip_rcv_core` / `ip_route_input_slow`.
fn parse_v4(bytes: &[u8], meta: &mut Meta) -> Result<(), Verdict> {
    let Some(&first) = bytes.first() else {
        return Err(Verdict::Drop(DropReason::Truncated));
    };
    if first >> 4 != 4 {
        return Err(Verdict::Drop(DropReason::BadVersion));
    }
    let ip = Ipv4Packet::new_checked(bytes).map_err(wire_drop)?;
    let hlen = ip.header_len();
    // The fixed header as an array (`new_checked` saw at least its 20 bytes): its fields are
    // read without bounds checks, and a header without options sums in five loads.
    let Some(fixed) = bytes.first_chunk::<{ ipv4::HEADER_LEN }>() else {
        return Err(Verdict::Drop(DropReason::Truncated));
    };
    let sum = if hlen == ipv4::HEADER_LEN {
        checksum::sum(fixed, 0)
    } else {
        checksum::sum(&bytes[..hlen], 0)
    };
    if checksum::fold(sum) != CHECKSUM_VALID {
        return Err(Verdict::Drop(DropReason::BadChecksum));
    }
    v4_fields(Ipv4Packet::new_unchecked(fixed), hlen, meta)
}

/// What the shortcuts set for an untagged frame before its IP fields: the Ethernet header's
/// length, the family.
#[inline(always)]
fn untagged(family: Family, meta: &mut Meta) {
    meta.l2_len = ethernet::HEADER_LEN as u8;
    meta.family = family;
}

/// The common frame in one step: untagged IPv4 with an option-less header (the first byte
/// 0x45), its Ethernet and IP headers read through one fixed-size view whose bounds are
/// checked once, the total length inside the frame and the checksum valid. Gives what
/// [`parse_into`]'s general path would give such a frame; `None` for every other frame
/// (tagged, IPv6, options, a bad length or checksum: the general path finds the verdict).
/// Always inlined: as a call, its saves and the result through memory cost about a fifth of
/// the parse stage's instructions.
#[inline(always)]
fn parse_plain_v4(frame: &[u8], meta: &mut Meta) -> Option<Result<(), Verdict>> {
    let (l2, rest) = frame.split_first_chunk::<{ ethernet::HEADER_LEN }>()?;
    let l3 = rest.first_chunk::<{ ipv4::HEADER_LEN }>()?;
    let eth = EthernetFrame::new_unchecked(l2);
    if eth.ethertype() != ethertype::IPV4 || l3[0] != PLAIN_V4_FIRST_BYTE {
        return None;
    }
    let head = Ipv4Packet::new_unchecked(l3);
    let total = usize::from(head.total_len());
    if total < ipv4::HEADER_LEN || total > rest.len() {
        return None;
    }
    if !checksum::header_valid(l3) {
        return None;
    }
    untagged(Family::V4, meta);
    Some(v4_fields(head, ipv4::HEADER_LEN, meta))
}

/// Version 4 and a header length of 5 words: an IPv4 header without options.
const PLAIN_V4_FIRST_BYTE: u8 = 0x45;

/// The fields of a validated IPv4 header (`head`, the fixed part; `hlen` with options) into
/// `meta`, then the martian checks.
#[inline(always)]
fn v4_fields(
    head: Ipv4Packet<&[u8; ipv4::HEADER_LEN]>,
    hlen: usize,
    meta: &mut Meta,
) -> Result<(), Verdict> {
    let src = u32::from_be_bytes(head.src_bytes());
    let dst = u32::from_be_bytes(head.dst_bytes());
    meta.src = u128::from(src);
    meta.dst = u128::from(dst);
    meta.tos = head.tos();
    meta.ttl = head.ttl();
    meta.ip_len = u32::from(head.total_len());
    meta.proto = head.protocol();
    // At most 60.
    meta.l4_offset = hlen as u32;
    // The flags and offset as they are: `Meta`'s accessors read the bits.
    meta.frag = FragBits(head.flags_offset());

    // The common case first: neither address starts with an octet any check below looks
    // for (0, 127, 224 to 239, 255).
    if !V4_SPECIAL_FIRST_OCTETS.either(src >> 24, dst >> 24) {
        return Ok(());
    }
    // Sources no packet may carry (multicast, limited broadcast), then destinations that are
    // the kernel's (multicast, broadcast), then zeronet and loopback on either side.
    if is_v4_multicast(src) || src == u32::MAX {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    if is_v4_multicast(dst) {
        return Err(Verdict::Punt(PuntReason::Multicast));
    }
    if dst == u32::MAX || (src == 0 && dst == 0) {
        return Err(Verdict::Punt(PuntReason::Broadcast));
    }
    if is_v4_zeronet_or_loopback(src) {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    if is_v4_zeronet_or_loopback(dst) {
        return Err(Verdict::Drop(DropReason::MartianDestination));
    }
    Ok(())
}

/// A set of first octets of IPv4 addresses, as a byte per octet (one load per test, and two
/// octets tested with one `or`: fewer steps than a bit map's shifts).
struct OctetSet([u8; 256]);

impl OctetSet {
    /// The set of `octets`.
    const fn of(octets: &[u8]) -> OctetSet {
        let mut set = [0u8; 256];
        let mut i = 0;
        while i < octets.len() {
            set[octets[i] as usize] = 1;
            i += 1;
        }
        OctetSet(set)
    }

    /// Whether `octet` (its low 8 bits) is in the set.
    #[cfg(test)]
    fn contains(&self, octet: u32) -> bool {
        self.0[(octet & 0xff) as usize] != 0
    }

    /// Whether `a` or `b` (their low 8 bits) is in the set.
    #[inline(always)]
    fn either(&self, a: u32, b: u32) -> bool {
        self.0[(a & 0xff) as usize] | self.0[(b & 0xff) as usize] != 0
    }
}

/// The first octets of every IPv4 address a martian or kernel check of [`v4_fields`] may
/// catch: zeronet (0), loopback (127), multicast (224 to 239), limited broadcast (255).
static V4_SPECIAL_FIRST_OCTETS: OctetSet = OctetSet::of(&[
    V4_ZERONET_OCTET as u8,
    V4_LOOPBACK_OCTET as u8,
    224,
    225,
    226,
    227,
    228,
    229,
    230,
    231,
    232,
    233,
    234,
    235,
    236,
    237,
    238,
    239,
    V4_BROADCAST_OCTET,
]);
/// The first octet of the limited broadcast address.
const V4_BROADCAST_OCTET: u8 = 255;

/// 224.0.0.0/4.
fn is_v4_multicast(addr: u32) -> bool {
    addr >> 28 == V4_MULTICAST_HIGH_NIBBLE
}

/// 0.0.0.0/8 ("this network") or 127.0.0.0/8.
fn is_v4_zeronet_or_loopback(addr: u32) -> bool {
    matches!(addr >> 24, V4_ZERONET_OCTET | V4_LOOPBACK_OCTET)
}

/// The first four bits of an IPv4 multicast address (224.0.0.0/4).
const V4_MULTICAST_HIGH_NIBBLE: u32 = 0xe;
/// The first octet of 0.0.0.0/8.
const V4_ZERONET_OCTET: u32 = 0;
/// The first octet of 127.0.0.0/8.
const V4_LOOPBACK_OCTET: u32 = 127;
/// What the ones' complement sum of a valid header folds to.
const CHECKSUM_VALID: u16 = 0xffff;

/// IPv6 per RFC 8200 and the kernel's `ipv6_rcv` / `ip6_forward`.
fn parse_v6(bytes: &[u8], config: &Config, meta: &mut Meta) -> Result<(), Verdict> {
    if bytes.is_empty() {
        return Err(Verdict::Drop(DropReason::Truncated));
    }
    if bytes[0] >> 4 != IPV6_VERSION {
        return Err(Verdict::Drop(DropReason::BadVersion));
    }
    let ip = Ipv6Packet::new_checked(bytes).map_err(wire_drop)?;
    v6_addresses(&ip, meta)?;
    let (src, dst) = (meta.src, meta.dst);

    let upper =
        match ipv6::walk_extensions(ip.next_header(), ip.payload(), config.max_extension_headers) {
            Ok(upper) => upper,
            Err(WireError::TooManyExtensions) => {
                return Err(Verdict::Punt(PuntReason::ExtensionLimit));
            }
            Err(e) => return Err(wire_drop(e)),
        };
    if upper.hop_by_hop {
        return Err(Verdict::Punt(PuntReason::HopByHop));
    }
    meta.proto = upper.protocol;
    // Within the packet: at most 40 + 65,535.
    meta.l4_offset = (ipv6::HEADER_LEN + upper.offset) as u32;
    meta.frag = FragBits::new(upper.fragment, upper.later_fragment, false);
    if !upper.later_fragment && upper.protocol == next_header::ICMPV6 {
        let l4 = &ip.payload()[upper.offset..];
        if let Some(v6_type::ROUTER_SOLICITATION..=v6_type::REDIRECT) = l4.first() {
            return Err(Verdict::Punt(PuntReason::NeighbourDiscovery));
        }
    }
    v6_scope(src, dst)
}

/// The addresses, traffic class, hop limit and length of an IPv6 header into `meta`, then the
/// martian checks that come before the extension headers.
#[inline]
fn v6_addresses<T: AsRef<[u8]>>(ip: &Ipv6Packet<T>, meta: &mut Meta) -> Result<(), Verdict> {
    let (src, dst) = v6_fields(ip, meta);
    v6_martians(src, dst)
}

/// The addresses, traffic class, hop limit and length of an IPv6 header into `meta`; returns
/// the addresses.
#[inline(always)]
fn v6_fields<T: AsRef<[u8]>>(ip: &Ipv6Packet<T>, meta: &mut Meta) -> (u128, u128) {
    let src = u128::from_be_bytes(ip.src_bytes());
    let dst = u128::from_be_bytes(ip.dst_bytes());
    meta.src = src;
    meta.dst = dst;
    meta.tos = ip.traffic_class();
    meta.ttl = ip.hop_limit();
    meta.ip_len = ipv6::HEADER_LEN as u32 + u32::from(ip.payload_len());
    (src, dst)
}

/// The martian checks of IPv6 addresses that come before the extension headers.
#[inline]
fn v6_martians(src: u128, dst: u128) -> Result<(), Verdict> {
    if ipv6::in_prefix(src, ipv6::MULTICAST) {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    if src == ipv6::LOOPBACK {
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    if ipv6::in_prefix(dst, ipv6::MULTICAST) {
        return Err(Verdict::Punt(PuntReason::Multicast));
    }
    if dst == ipv6::UNSPECIFIED || dst == ipv6::LOOPBACK {
        return Err(Verdict::Drop(DropReason::MartianDestination));
    }
    Ok(())
}

/// The checks after the extension headers: a link-local destination is the kernel's, the
/// unspecified source is never forwarded.
#[inline]
fn v6_scope(src: u128, dst: u128) -> Result<(), Verdict> {
    if ipv6::in_prefix(dst, ipv6::LINK_LOCAL) {
        return Err(Verdict::Punt(PuntReason::LinkLocal));
    }
    if src == ipv6::UNSPECIFIED {
        // The unspecified source is never forwarded (RFC 4291 2.5.2); the kernel handles the
        // few local uses (duplicate address detection goes to a multicast group).
        return Err(Verdict::Drop(DropReason::MartianSource));
    }
    Ok(())
}

/// The common IPv6 frame in one step: untagged, UDP or TCP right after the fixed header (no
/// extension header, not ICMPv6), the payload inside the frame, read through one fixed-size
/// view whose bounds are checked once. Gives what [`parse_into`]'s general path would give
/// such a frame; `None` for every other frame. Always inlined, as [`parse_plain_v4`].
#[inline(always)]
fn parse_plain_v6(frame: &[u8], meta: &mut Meta) -> Option<Result<(), Verdict>> {
    let (l2, rest) = frame.split_first_chunk::<{ ethernet::HEADER_LEN }>()?;
    let l3 = rest.first_chunk::<{ ipv6::HEADER_LEN }>()?;
    let eth = EthernetFrame::new_unchecked(l2);
    if eth.ethertype() != ethertype::IPV6 || l3[0] >> 4 != IPV6_VERSION {
        return None;
    }
    let ip = Ipv6Packet::new_unchecked(l3);
    let proto = ip.next_header();
    if !matches!(proto, next_header::UDP | next_header::TCP)
        || ipv6::HEADER_LEN + usize::from(ip.payload_len()) > rest.len()
    {
        return None;
    }
    untagged(Family::V6, meta);
    let (src, dst) = v6_fields(&ip, meta);
    meta.proto = proto;
    meta.l4_offset = ipv6::HEADER_LEN as u32;
    meta.frag = FragBits::default();
    // The common case first: neither address starts with a byte any check looks for.
    if !V6_SPECIAL_FIRST_BYTES.either((src >> 120) as u32, (dst >> 120) as u32) {
        return Some(Ok(()));
    }
    Some(v6_martians(src, dst).and_then(|()| v6_scope(src, dst)))
}

/// The first bytes of every IPv6 address a check of [`v6_martians`] or [`v6_scope`] may
/// catch: 0x00 (the unspecified address, loopback), 0xfe (link-local, fe80::/10), 0xff
/// (multicast).
static V6_SPECIAL_FIRST_BYTES: OctetSet = OctetSet::of(&[0x00, 0xfe, 0xff]);

/// The version field of IPv6.
const IPV6_VERSION: u8 = 6;

/// The fragment bits of an IPv6 fragment other than the first, in `Meta`'s IPv4 encoding (an
/// offset that is not zero).
const V6_LATER_FRAGMENT: u16 = 1;

/// The link-layer header length of an untagged frame (what goes out).
pub const L2_LEN: usize = ethernet::HEADER_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An untagged IPv4 UDP frame with a valid header checksum.
    fn plain_v4(payload: usize) -> Vec<u8> {
        let total = ipv4::HEADER_LEN + 8 + payload;
        let mut frame = vec![0u8; ethernet::HEADER_LEN + total];
        frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        frame[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        let ip = &mut frame[ethernet::HEADER_LEN..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = crate::wire::l4::protocol::UDP;
        ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
        ip[16..20].copy_from_slice(&[198, 51, 100, 7]);
        let sum = checksum::checksum(&ip[..ipv4::HEADER_LEN]);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        frame
    }

    /// An untagged IPv6 UDP frame.
    fn plain_v6(payload: usize) -> Vec<u8> {
        let len = 8 + payload;
        let mut frame = vec![0u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN + len];
        frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        frame[12..14].copy_from_slice(&ethertype::IPV6.to_be_bytes());
        let ip = &mut frame[ethernet::HEADER_LEN..];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        ip[6] = next_header::UDP;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&0x2001_0db8_0000_0000_0000_0000_0000_0001u128.to_be_bytes());
        ip[24..40].copy_from_slice(&0x2001_0db8_0001_0000_0000_0000_0000_0007u128.to_be_bytes());
        frame
    }

    /// Both paths on one frame: the verdict and, on success, every field.
    fn both(frame: &[u8]) -> (Option<Result<Meta, Verdict>>, Result<Meta, Verdict>) {
        let config = Config::default();
        let mut fast = Meta::default();
        let quick = parse_plain_v4(frame, &mut fast)
            .or_else(|| parse_plain_v6(frame, &mut fast))
            .map(|r| r.map(|()| fast));
        let mut meta = Meta::default();
        let general = parse_general(frame, &config, &mut meta).map(|()| meta);
        (quick, general)
    }

    /// The octets the common case of `v4_fields` skips the martian checks for are exactly
    /// those no check looks at; every address with another first octet meets them.
    #[test]
    fn the_special_first_octets_are_those_the_checks_look_at() {
        for octet in 0..=255u32 {
            let addr = octet << 24 | 1;
            let special = is_v4_multicast(addr)
                || is_v4_zeronet_or_loopback(addr)
                || octet == u32::from(V4_BROADCAST_OCTET);
            assert_eq!(V4_SPECIAL_FIRST_OCTETS.contains(octet), special, "{octet}");
        }
        for a in 0..=255u32 {
            for b in 0..=255u32 {
                let set = &V4_SPECIAL_FIRST_OCTETS;
                assert_eq!(set.either(a, b), set.contains(a) || set.contains(b));
            }
        }
    }

    #[test]
    fn the_shortcut_takes_the_plain_frame_and_leaves_the_rest() {
        let frame = plain_v4(18);
        let (quick, general) = both(&frame);
        assert!(general.is_ok());
        assert_eq!(quick, Some(general));
        // Options, a tag, IPv6, a short frame, a bad checksum: the general path's.
        let mut options = frame.clone();
        options[ethernet::HEADER_LEN] = 0x46;
        let mut bad_sum = frame.clone();
        bad_sum[ethernet::HEADER_LEN + 10] ^= 1;
        let mut long = frame.clone();
        long[ethernet::HEADER_LEN + 2] = 0xff;
        for other in [options, bad_sum, long, frame[..33].to_vec()] {
            assert_eq!(both(&other).0, None);
        }
        let frame = plain_v6(18);
        let (quick, general) = both(&frame);
        assert!(general.is_ok());
        assert_eq!(quick, Some(general));
        // An extension header, ICMPv6, a payload beyond the frame: the general path's.
        let mut extension = frame.clone();
        extension[ethernet::HEADER_LEN + 6] = next_header::DEST_OPTS;
        let mut icmp = frame.clone();
        icmp[ethernet::HEADER_LEN + 6] = next_header::ICMPV6;
        let mut long = frame.clone();
        long[ethernet::HEADER_LEN + 4] = 0xff;
        for other in [extension, icmp, long, frame[..53].to_vec()] {
            assert_eq!(both(&other).0, None);
        }
    }

    /// The first bytes the IPv6 shortcut skips the checks for are those no check looks at: an
    /// address starting with any other byte passes every check as source and as destination.
    #[test]
    fn the_special_first_bytes_are_those_the_v6_checks_look_at() {
        let plain = 0x2001_0db8 << 96 | 7;
        for byte in 0..=255u32 {
            let base = u128::from(byte) << 120;
            for addr in [
                base,
                base | 1,
                base | 0xc0 << 112,
                base | 0x80 << 112 | 1,
                !0 >> 8 | base,
            ] {
                let passes = |src, dst| v6_martians(src, dst).and_then(|()| v6_scope(src, dst));
                let ok = passes(addr, plain).is_ok() && passes(plain, addr).is_ok();
                assert!(ok || V6_SPECIAL_FIRST_BYTES.contains(byte), "{addr:x}");
            }
        }
    }

    /// Any byte, often one that starts a special address (multicast, link-local, loopback,
    /// zero) or a special next header.
    fn interesting_byte() -> impl Strategy<Value = u8> {
        prop_oneof![
            any::<u8>(),
            prop::sample::select(vec![
                0u8, 1, 6, 17, 58, 60, 127, 0x45, 0x80, 0xe0, 0xfe, 0xff
            ]),
        ]
    }

    /// An address that is often special for either family (its low 32 bits for IPv4):
    /// multicast, link-local, loopback, unspecified, limited broadcast, zeronet.
    fn special_address() -> impl Strategy<Value = u128> {
        prop_oneof![
            any::<u128>(),
            prop::sample::select(vec![
                0u128,
                1,
                0xff02 << 112 | 1,
                0xfe80 << 112 | 1,
                0x2001_0db8 << 96 | 7,
                0xe000_0001,
                0xffff_ffff,
                0x7f00_0001,
                0x0000_0001,
                0xc633_6407,
            ]),
        ]
    }

    proptest! {
        /// Wherever the shortcut answers, it answers as the general path does (verdict and
        /// every field), over plain frames with random bytes written into their headers.
        #[test]
        fn the_shortcut_agrees_with_the_general_path(
            v6 in any::<bool>(),
            payload in 0usize..64,
            edits in proptest::collection::vec((0usize..60, interesting_byte()), 0..4),
            fix_sum in any::<bool>(),
            cut in 0usize..8,
            addresses in (special_address(), special_address()),
        ) {
            let mut frame = if v6 { plain_v6(payload) } else { plain_v4(payload) };
            let (src, dst) = addresses;
            let l3 = ethernet::HEADER_LEN;
            if v6 {
                frame[l3 + 8..l3 + 24].copy_from_slice(&src.to_be_bytes());
                frame[l3 + 24..l3 + 40].copy_from_slice(&dst.to_be_bytes());
            } else {
                frame[l3 + 12..l3 + 16].copy_from_slice(&(src as u32).to_be_bytes());
                frame[l3 + 16..l3 + 20].copy_from_slice(&(dst as u32).to_be_bytes());
            }
            for (at, byte) in edits {
                if let Some(b) = frame.get_mut(at) {
                    *b = byte;
                }
            }
            if fix_sum && !v6 && frame.len() >= ethernet::HEADER_LEN + ipv4::HEADER_LEN {
                let ip = &mut frame[ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::HEADER_LEN];
                ip[10..12].fill(0);
                let sum = checksum::checksum(ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
            }
            frame.truncate(frame.len().saturating_sub(cut));
            let (quick, general) = both(&frame);
            if let Some(quick) = quick {
                prop_assert_eq!(quick, general);
            }
        }
    }
}
