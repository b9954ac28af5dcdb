//! IPv4 headers (RFC 791), options included.

use std::net::Ipv4Addr;

use super::{Field, WireError, checksum, get16};

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// The length of a header without options.
pub const HEADER_LEN: usize = field::DST.end;
/// The version field of IPv4 headers.
pub const VERSION: u8 = 4;
/// The largest total length (header and payload) the 16-bit length field can say.
pub const MAX_TOTAL_LEN: usize = u16::MAX as usize;
/// The "don't fragment" flag in the flags/offset word.
pub const DF: u16 = 0x4000;
/// The "more fragments" flag in the flags/offset word.
pub const MF: u16 = 0x2000;
/// The fragment offset bits (in units of [`FRAGMENT_UNIT`] bytes) of the flags/offset word.
pub const OFFSET_MASK: u16 = 0x1fff;
/// The unit of fragment offsets: every fragment's data but the last's is a multiple of it.
pub const FRAGMENT_UNIT: usize = 8;
/// The longest options field (IHL 15: 60 bytes of header).
pub const MAX_OPTIONS_LEN: usize = 40;
/// The four TOS bits of RFC 1349 in the TOS byte (between the precedence and the last bit).
pub const TOS_BITS: u8 = 0x1e;
/// Precedence "internetwork control" (6) in the TOS byte: what the kernel's ICMP errors carry
/// (`IPTOS_PREC_INTERNETCONTROL`).
pub const PREC_INTERNETWORK_CONTROL: u8 = 0xc0;

/// A typed view of an IPv4 packet over any buffer.
///
/// After [`check_len`](Self::check_len) (or [`new_checked`](Self::new_checked)) no accessor
/// can panic: the buffer holds the header with its options and the total length, and the total
/// length covers the header. The buffer may be longer than the total length (Ethernet padding);
/// [`payload`](Self::payload) stops at the total length.
///
/// ```
/// use dataplane::wire::ipv4::Ipv4Packet;
/// let mut bytes = [0x45, 0, 0, 21, 0, 1, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7, 0xaa, 0];
/// Ipv4Packet::new_unchecked(&mut bytes[..]).fill_checksum();
/// let ip = Ipv4Packet::new_checked(&bytes[..])?;
/// assert!(ip.verify_checksum() && ip.dont_frag());
/// assert_eq!((ip.ttl(), ip.protocol(), ip.payload()), (64, 17, &[0xaa][..]));
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without any check (for emitting into a buffer already sized).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
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

    /// Checks the lengths: a fixed header, IHL ≥ 5, the options inside the buffer, the total
    /// length at least the header length and inside the buffer. The version is not checked
    /// (see [`version`](Self::version)).
    ///
    /// # Errors
    /// [`WireError::Truncated`] (buffer shorter than the fixed header, the options, or the total
    /// length), [`WireError::BadHeaderLen`] (IHL below 5, or above the total length).
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let buf = self.buffer.as_ref();
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hlen = self.header_len();
        if hlen < HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if buf.len() < hlen {
            return Err(WireError::Truncated);
        }
        let total = usize::from(self.total_len());
        if total < hlen {
            return Err(WireError::BadHeaderLen);
        }
        if buf.len() < total {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn buf(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The IP version field (4 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buf()[field::VER_IHL] & 0x0f) * 4
    }

    /// The DSCP/ECN byte (the old TOS).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buf()[field::DSCP_ECN]
    }

    /// The total length (header and payload).
    #[inline]
    pub fn total_len(&self) -> u16 {
        get16(self.buf(), field::LENGTH)
    }

    /// The identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        get16(self.buf(), field::IDENT)
    }

    /// The flags and fragment offset word.
    #[inline]
    pub fn flags_offset(&self) -> u16 {
        get16(self.buf(), field::FLG_OFF)
    }

    /// Whether DF is set.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_offset() & DF != 0
    }

    /// Whether MF is set.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_offset() & MF != 0
    }

    /// The fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_offset() & OFFSET_MASK) << 3
    }

    /// Whether this is a fragment (MF set or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_offset() & (MF | OFFSET_MASK) != 0
    }

    /// The time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf()[field::TTL]
    }

    /// The payload's protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buf()[field::PROTOCOL]
    }

    /// The header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buf(), field::CHECKSUM)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src_bytes())
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst_bytes())
    }

    /// The source address as bytes.
    #[inline]
    pub fn src_bytes(&self) -> [u8; 4] {
        let b = &self.buf()[field::SRC];
        [b[0], b[1], b[2], b[3]]
    }

    /// The destination address as bytes.
    #[inline]
    pub fn dst_bytes(&self) -> [u8; 4] {
        let b = &self.buf()[field::DST];
        [b[0], b[1], b[2], b[3]]
    }

    /// Whether the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(&self.buf()[..self.header_len()], 0)) == 0xffff
    }

    /// The options (empty for IHL 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buf()[HEADER_LEN..self.header_len()]
    }

    /// The payload, up to the total length.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf()[self.header_len()..usize::from(self.total_len())]
    }

    /// The whole packet, up to the total length.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.buf()[..usize::from(self.total_len())]
    }

    /// The underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn buf_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Writes version 4 and the header length (a multiple of 4 from 20 to 60). Changing the
    /// header length can break [`check_len`](Self::check_len).
    #[inline]
    pub fn set_version_header_len(&mut self, hlen: usize) {
        self.buf_mut()[field::VER_IHL] = (VERSION << 4) | ((hlen / 4) as u8 & 0x0f);
    }

    /// Writes the DSCP/ECN byte.
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buf_mut()[field::DSCP_ECN] = tos;
    }

    /// Writes the total length (can break [`check_len`](Self::check_len)).
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        self.buf_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Writes the identification.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        self.buf_mut()[field::IDENT].copy_from_slice(&ident.to_be_bytes());
    }

    /// Writes the flags and fragment offset word.
    #[inline]
    pub fn set_flags_offset(&mut self, word: u16) {
        self.buf_mut()[field::FLG_OFF].copy_from_slice(&word.to_be_bytes());
    }

    /// Writes the TTL.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buf_mut()[field::TTL] = ttl;
    }

    /// Writes the protocol.
    #[inline]
    pub fn set_protocol(&mut self, protocol: u8) {
        self.buf_mut()[field::PROTOCOL] = protocol;
    }

    /// Writes the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buf_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Writes the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buf_mut()[field::SRC].copy_from_slice(&addr.octets());
    }

    /// Writes the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buf_mut()[field::DST].copy_from_slice(&addr.octets());
    }

    /// Computes and writes the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hlen = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..hlen]);
        self.set_checksum(c);
    }

    /// Decrements the TTL by one and updates the checksum incrementally (RFC 1624); the TTL
    /// must be at least 1.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let buf = self.buf_mut();
        let ttl = buf[field::TTL];
        let c = if ttl != 0 {
            // The TTL/protocol word drops by 0x0100: the sum gains 0x0100, with the carry
            // folded back (the kernel's `ip_decrease_ttl`; equal to RFC 1624 equation 3 for
            // every checksum, as the test below checks exhaustively).
            let sum = u32::from(get16(buf, field::CHECKSUM)) + TTL_WORD_STEP;
            (sum + u32::from(sum >= 0xffff)) as u16
        } else {
            let old = u16::from_be_bytes([ttl, buf[field::PROTOCOL]]);
            let new = u16::from_be_bytes([ttl.wrapping_sub(1), buf[field::PROTOCOL]]);
            checksum::update16(get16(buf, field::CHECKSUM), old, new)
        };
        buf[field::TTL] = ttl.wrapping_sub(1);
        buf[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// What a TTL decrement takes from the TTL/protocol word of the header (the TTL is its high
/// byte), and so adds to the header checksum.
const TTL_WORD_STEP: u32 = 0x0100;

/// The fields of an IPv4 header without options, as a value: [`parse`](Self::parse) reads
/// them from a checked view, [`emit`](Self::emit) writes a whole header (version, length,
/// checksum included) into a view over at least [`HEADER_LEN`] bytes. Not fragmented: the
/// flags and offset word is written as zero.
///
/// ```
/// use std::net::Ipv4Addr;
/// use dataplane::wire::ipv4::{HEADER_LEN, Ipv4Packet, Ipv4Repr};
/// let repr = Ipv4Repr {
///     src: Ipv4Addr::new(192, 0, 2, 1),
///     dst: Ipv4Addr::new(198, 51, 100, 7),
///     protocol: 1,
///     ttl: 64,
///     tos: 0xc0,
///     ident: 7,
///     dont_frag: true,
///     payload_len: 8,
/// };
/// let mut bytes = [0u8; HEADER_LEN + 8];
/// repr.emit(&mut Ipv4Packet::new_unchecked(&mut bytes[..]));
/// let ip = Ipv4Packet::new_checked(&bytes[..])?;
/// assert!(ip.verify_checksum());
/// assert_eq!(Ipv4Repr::parse(&ip)?, repr);
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// The source address.
    pub src: Ipv4Addr,
    /// The destination address.
    pub dst: Ipv4Addr,
    /// The upper-layer protocol.
    pub protocol: u8,
    /// The time to live.
    pub ttl: u8,
    /// The DSCP/ECN byte.
    pub tos: u8,
    /// The identification.
    pub ident: u16,
    /// DF ("don't fragment"); a `Repr` never describes a fragment.
    pub dont_frag: bool,
    /// The payload's length (the total length minus the header's).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// The fields of a view.
    ///
    /// # Errors
    /// As [`Ipv4Packet::check_len`] (the caller's other checks, version and checksum, are
    /// its own).
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Ipv4Repr, WireError> {
        packet.check_len()?;
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            protocol: packet.protocol(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
        })
    }

    /// The length of the header it emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, checksum included, into the first [`HEADER_LEN`] bytes of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`], or the total length exceeds 65,535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        packet.set_version_header_len(HEADER_LEN);
        packet.set_tos(self.tos);
        let total = u16::try_from(HEADER_LEN + self.payload_len).expect("an IPv4 total length");
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.set_flags_offset(if self.dont_frag { DF } else { 0 });
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        packet.fill_checksum();
    }
}

/// Option types (RFC 791): the copy flag is the top bit of the type.
pub mod option {
    /// End of option list.
    pub const EOL: u8 = 0;
    /// No operation.
    pub const NOP: u8 = 1;
    /// Copy this option into every fragment.
    pub const COPIED: u8 = 0x80;
}

/// Copies the options of `options` that carry the copy flag into `out` (as every fragment after
/// the first must carry), pads with EOL to a multiple of four and returns the length written.
/// A malformed option (a length below 2 or past the end) ends the walk.
///
/// ```
/// use dataplane::wire::ipv4::copied_options;
/// // NOP, record route (not copied, len 7), loose source route (copied, len 3), EOL.
/// let opts = [1, 7, 7, 4, 0, 0, 0, 0, 0x83, 3, 4, 0];
/// let mut out = [0xee; 40];
/// assert_eq!(copied_options(&opts, &mut out), 4);
/// assert_eq!(&out[..4], &[0x83, 3, 4, 0]);
/// ```
pub fn copied_options(options: &[u8], out: &mut [u8; MAX_OPTIONS_LEN]) -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < options.len() {
        let kind = options[i];
        if kind == option::EOL {
            break;
        }
        if kind == option::NOP {
            i += 1;
            continue;
        }
        let Some(&len) = options.get(i + 1) else {
            break;
        };
        let len = usize::from(len);
        if len < 2 || i + len > options.len() {
            break;
        }
        if kind & option::COPIED != 0 && n + len <= out.len() {
            out[n..n + len].copy_from_slice(&options[i..i + len]);
            n += len;
        }
        i += len;
    }
    let padded = n.div_ceil(4) * 4;
    out[n..padded].fill(option::EOL);
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> [u8; 24] {
        let mut b = [
            0x46, 0x10, 0, 24, 0x12, 0x34, 0x20, 0x03, 9, 6, 0, 0, 10, 1, 2, 3, 10, 4, 5, 6, 0x94,
            4, 0, 0,
        ];
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    #[test]
    fn test_repr_parse_and_emit() {
        let b = header();
        let repr = Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Ipv4Repr {
                src: Ipv4Addr::new(10, 1, 2, 3),
                dst: Ipv4Addr::new(10, 4, 5, 6),
                protocol: 6,
                ttl: 9,
                tos: 0x10,
                ident: 0x1234,
                dont_frag: false,
                payload_len: 0,
            }
        );
        let mut out = [0xffu8; 20];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        // The options, MF and the fragment offset are not part of the repr.
        let mut expected = [
            0x45, 0x10, 0, 20, 0x12, 0x34, 0, 0, 9, 6, 0, 0, 10, 1, 2, 3, 10, 4, 5, 6,
        ];
        Ipv4Packet::new_unchecked(&mut expected[..]).fill_checksum();
        assert_eq!(out, expected);
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b[..10])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn test_parse() {
        let b = header();
        let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ip.version(), 4);
        assert_eq!(ip.header_len(), 24);
        assert_eq!(ip.tos(), 0x10);
        assert_eq!(ip.ident(), 0x1234);
        assert!(ip.more_frags() && !ip.dont_frag() && ip.is_fragment());
        assert_eq!(ip.frag_offset(), 24);
        assert_eq!(ip.ttl(), 9);
        assert_eq!(ip.protocol(), 6);
        assert_eq!(ip.src_addr(), Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(10, 4, 5, 6));
        assert_eq!(ip.options(), &[0x94, 4, 0, 0]);
        assert!(ip.payload().is_empty());
        assert!(ip.verify_checksum());
    }

    #[test]
    fn test_impossible_len() {
        let b = header();
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..22]).unwrap_err(),
            WireError::Truncated
        );
        let mut short_ihl = b;
        short_ihl[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&short_ihl[..]).unwrap_err(),
            WireError::BadHeaderLen
        );
        let mut long = b;
        long[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&long[..]).unwrap_err(),
            WireError::Truncated
        );
        let mut total_below_header = b;
        total_below_header[2..4].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&total_below_header[..]).unwrap_err(),
            WireError::BadHeaderLen
        );
    }

    #[test]
    fn test_decrement_ttl_keeps_checksum_valid() {
        let mut b = header();
        let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
        ip.decrement_ttl();
        assert_eq!(ip.ttl(), 8);
        assert!(ip.verify_checksum());
    }

    /// The kernel's form of the decrement gives RFC 1624 equation 3's checksum for every
    /// checksum and every TTL/protocol word (TTL 0 wraps through equation 3 itself).
    #[test]
    fn the_ttl_decrement_is_rfc_1624_equation_3() {
        let mut b = header();
        for hc in 0..=u16::MAX {
            for (ttl, proto) in [(0u8, 17u8), (1, 6), (2, 0), (64, 17), (255, 255)] {
                b[8] = ttl;
                b[9] = proto;
                b[10..12].copy_from_slice(&hc.to_be_bytes());
                let old = u16::from_be_bytes([ttl, proto]);
                let new = u16::from_be_bytes([ttl.wrapping_sub(1), proto]);
                let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
                ip.decrement_ttl();
                assert_eq!(ip.ttl(), ttl.wrapping_sub(1));
                assert_eq!(
                    ip.checksum(),
                    checksum::update16(hc, old, new),
                    "{hc:#x} {ttl}"
                );
            }
        }
    }

    #[test]
    fn copied_options_stop_at_malformed_lengths() {
        let mut out = [0; 40];
        assert_eq!(copied_options(&[0x83, 1, 0, 0], &mut out), 0);
        assert_eq!(copied_options(&[0x83, 9, 0, 0], &mut out), 0);
        assert_eq!(copied_options(&[0x83], &mut out), 0);
        assert_eq!(copied_options(&[1, 1, 0x94, 4, 0, 0], &mut out), 4);
    }
}
