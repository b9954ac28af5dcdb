//! Probe frames: Ethernet, IPv4 or IPv6, UDP, and an 18-byte probe header that names the flow,
//! the packet's sequence number in it and its send time.
//!
//! ```text
//!  payload offset 0      2          6          10                 18
//!                 magic  flow id    sequence   send time (ns, CLOCK_MONOTONIC)   zero padding…
//! ```
//!
//! Every header byte that does not change between packets of a flow is precomputed once in a
//! [`Template`], together with the partial (unfolded) one's-complement sums of both checksums.
//! Writing a probe copies the template's 48 (IPv4) or 68 (IPv6) bytes, then patches the lengths,
//! the sequence number and the time, and finishes both checksums from the partial sums: no pass
//! over the padding, which stays zero in the UMEM frame it was prebuilt in. The one exception is
//! a frame reused across families: an IPv6 probe's header ends 20 bytes later than an IPv4
//! one's, so an IPv4 probe clears those 20 bytes (where an earlier IPv6 probe of the same UMEM
//! frame may have left its header) before its checksum counts them as zero.
//!
//! Frame sizes follow RFC 2544 and include the 4-byte Ethernet FCS, which the NIC (here: nobody,
//! on veth) appends; a 64-byte frame is 60 bytes written.
#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::str::FromStr;

use crate::GenError;
use crate::flow::{Endpoints, Flow};

/// The probe header's first two bytes ("XF").
pub const MAGIC: u16 = 0x5846;
/// Bytes of the probe header.
pub const PROBE_LEN: usize = 18;
/// Bytes of the Ethernet FCS counted in a frame size but not written.
pub const FCS_LEN: u16 = 4;
/// The largest frame size (standard Ethernet, FCS included).
pub const MAX_FRAME: u16 = 1518;
/// The smallest IPv4 probe frame: 14 + 20 + 8 + 18 bytes written, plus the FCS.
pub const MIN_FRAME_V4: u16 = 64;
/// The smallest IPv6 probe frame: 14 + 40 + 8 + 18 bytes written, plus the FCS.
pub const MIN_FRAME_V6: u16 = 84;

const ETH_LEN: usize = 14;
const V4_LEN: usize = 20;
const V6_LEN: usize = 40;
const UDP_LEN: usize = 8;
/// The TTL / hop limit of probes: the router decrements it once.
const TTL: u8 = 64;

/// Simple IMIX: 7 frames of 64 bytes, 4 of 594, 1 of 1518, interleaved in a fixed order.
pub const IMIX: [u16; 12] = [64, 594, 64, 64, 594, 64, 1518, 64, 594, 64, 64, 594];

/// Frame sizes of a run: one fixed size, or the [`IMIX`] cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameSize {
    /// Every frame has this size (FCS included).
    Fixed(u16),
    /// The [`IMIX`] sizes in turn; IPv6 frames below [`MIN_FRAME_V6`] are raised to it.
    Imix,
}

impl FrameSize {
    /// The size of the `n`-th frame of a flow of the given family.
    #[inline]
    pub fn nth(self, n: u64, ipv6: bool) -> u16 {
        match self {
            FrameSize::Fixed(size) => size,
            FrameSize::Imix => {
                let size = IMIX[(n % IMIX.len() as u64) as usize];
                if ipv6 { size.max(MIN_FRAME_V6) } else { size }
            }
        }
    }

    /// Checks that every frame fits the headers of the families in use.
    ///
    /// # Errors
    /// [`GenError::FrameSizeOutOfRange`] for a fixed size too small or above 1518.
    pub fn validate(self, ipv4: bool, ipv6: bool) -> Result<(), GenError> {
        let FrameSize::Fixed(size) = self else {
            return Ok(());
        };
        for (used, min, family) in [(ipv4, MIN_FRAME_V4, "IPv4"), (ipv6, MIN_FRAME_V6, "IPv6")] {
            if used && !(min..=MAX_FRAME).contains(&size) {
                return Err(GenError::FrameSizeOutOfRange { size, min, family });
            }
        }
        Ok(())
    }

    /// The average frame size (FCS included), for bit rates.
    pub fn mean(self) -> f64 {
        match self {
            FrameSize::Fixed(size) => f64::from(size),
            FrameSize::Imix => IMIX.iter().map(|&s| f64::from(s)).sum::<f64>() / IMIX.len() as f64,
        }
    }
}

impl FromStr for FrameSize {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, GenError> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(FrameSize::Imix);
        }
        s.parse()
            .map(FrameSize::Fixed)
            .map_err(|_| GenError::BadFrameSize(s.to_owned()))
    }
}

/// Adds the big-endian 16-bit words of `bytes` (even length) to a one's-complement sum.
fn sum_words(bytes: &[u8]) -> u64 {
    bytes
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

/// Folds a wide one's-complement sum into 16 bits.
#[inline]
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The one's-complement sum of the words of a `u64` (four words).
#[inline]
fn sum_u64(v: u64) -> u64 {
    (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff)
}

/// The precomputed headers of one flow.
#[derive(Clone, Debug)]
pub struct Template {
    /// Ethernet + IP + UDP headers and the probe's magic and flow id; lengths, checksums,
    /// sequence and time left zero.
    bytes: [u8; ETH_LEN + V6_LEN + UDP_LEN + 6],
    /// How many of `bytes` are used: 48 (IPv4) or 68 (IPv6).
    len: usize,
    ipv6: bool,
    /// Partial sum of the IPv4 header without its total length (0 for IPv6).
    ip_sum: u64,
    /// Partial sum of the UDP checksum: pseudo-header addresses and protocol, ports, magic,
    /// flow id; without the lengths, the sequence and the time.
    udp_sum: u64,
}

impl Template {
    /// Builds the headers of flow `id`.
    ///
    /// # Panics
    /// When the endpoints lack a source of the flow's family (a [`crate::FlowSet`] never does).
    pub fn new(endpoints: &Endpoints, flow: &Flow, id: u32) -> Self {
        let mut bytes = [0u8; ETH_LEN + V6_LEN + UDP_LEN + 6];
        bytes[0..6].copy_from_slice(&endpoints.dst_mac);
        bytes[6..12].copy_from_slice(&endpoints.src_mac);
        let (ipv6, l4, ip_sum, pseudo) = match flow.dst {
            IpAddr::V4(dst) => {
                let src = endpoints.src_v4.expect("FlowSet checks sources");
                bytes[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut bytes[ETH_LEN..ETH_LEN + V4_LEN];
                ip[0] = 0x45; // version 4, 5 words
                // ip[2..4] total length: per packet; ip[4..8] id 0, DF set, fragment offset 0
                ip[6] = 0x40;
                ip[8] = TTL;
                ip[9] = 17; // UDP
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                let ip_sum = sum_words(ip);
                let pseudo = sum_words(&src.octets()) + sum_words(&dst.octets()) + 17;
                (false, ETH_LEN + V4_LEN, ip_sum, pseudo)
            }
            IpAddr::V6(dst) => {
                let src = endpoints.src_v6.expect("FlowSet checks sources");
                bytes[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                let ip = &mut bytes[ETH_LEN..ETH_LEN + V6_LEN];
                ip[0] = 0x60;
                // ip[4..6] payload length: per packet
                ip[6] = 17;
                ip[7] = TTL;
                ip[8..24].copy_from_slice(&src.octets());
                ip[24..40].copy_from_slice(&dst.octets());
                let pseudo = sum_words(&src.octets()) + sum_words(&dst.octets()) + 17;
                (true, ETH_LEN + V6_LEN, 0, pseudo)
            }
        };
        bytes[l4..l4 + 2].copy_from_slice(&flow.src_port.to_be_bytes());
        bytes[l4 + 2..l4 + 4].copy_from_slice(&flow.dst_port.to_be_bytes());
        let probe = l4 + UDP_LEN;
        bytes[probe..probe + 2].copy_from_slice(&MAGIC.to_be_bytes());
        bytes[probe + 2..probe + 6].copy_from_slice(&id.to_be_bytes());
        let udp_sum = pseudo
            + u64::from(flow.src_port)
            + u64::from(flow.dst_port)
            + u64::from(MAGIC)
            + u64::from(id >> 16)
            + u64::from(id & 0xffff);
        Template {
            bytes,
            len: probe + 6,
            ipv6,
            ip_sum,
            udp_sum,
        }
    }

    /// Whether the flow is IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// Writes probe `seq` of this flow, `size` bytes with the FCS (so `size - 4` written), sent
    /// at `time_ns`, into `frame`; returns the bytes written. Bytes of `frame` past the longest
    /// (IPv6) probe header, [`MIN_FRAME_V6`]` - 4`, are not touched: they must be zero (a fresh
    /// UMEM frame, only ever written by this function, for flows of either family), or the UDP
    /// checksum is wrong.
    ///
    /// # Panics
    /// When `size` is below the family's minimum or `frame` is shorter than `size - 4` (a
    /// [`FrameSize::validate`]d size in a UMEM frame of 2048 bytes never is).
    #[inline]
    pub fn write(&self, frame: &mut [u8], size: u16, seq: u32, time_ns: u64) -> usize {
        let wire = usize::from(size - FCS_LEN);
        frame[..self.len].copy_from_slice(&self.bytes[..self.len]);
        let l4 = if self.ipv6 {
            let payload = (wire - ETH_LEN - V6_LEN) as u16;
            frame[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&payload.to_be_bytes());
            ETH_LEN + V6_LEN
        } else {
            let total = (wire - ETH_LEN) as u16;
            frame[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
            let check = !fold(self.ip_sum + u64::from(total));
            frame[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&check.to_be_bytes());
            ETH_LEN + V4_LEN
        };
        let udp_len = (wire - l4) as u16;
        frame[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
        let probe = l4 + UDP_LEN;
        frame[probe + 6..probe + 10].copy_from_slice(&seq.to_be_bytes());
        frame[probe + 10..probe + 18].copy_from_slice(&time_ns.to_be_bytes());
        // Padding the checksum takes for zero, which an IPv6 probe's header may have covered.
        let longest = usize::from(MIN_FRAME_V6 - FCS_LEN);
        if probe + PROBE_LEN < longest {
            frame[probe + PROBE_LEN..wire.min(longest)].fill(0);
        }
        let sum = self.udp_sum
            + 2 * u64::from(udp_len)
            + u64::from(seq >> 16)
            + u64::from(seq & 0xffff)
            + sum_u64(time_ns);
        let check = match !fold(sum) {
            0 => 0xffff, // RFC 768: a computed zero is sent as all ones
            c => c,
        };
        frame[l4 + 6..l4 + 8].copy_from_slice(&check.to_be_bytes());
        wire
    }
}

/// What a receiver reads from a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The flow id.
    pub flow: u32,
    /// The sequence number within the flow.
    pub seq: u32,
    /// The send time, CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
}

impl Probe {
    /// Reads the probe header of a received frame: Ethernet, IPv4 (any header length) or IPv6
    /// (no extension headers), UDP, magic. `None` for anything else, never a panic.
    ///
    /// ```
    /// use pktgen::{Endpoints, Flow, Template, Probe};
    /// let ends = Endpoints { src_mac: [2; 6], dst_mac: [4; 6],
    ///     src_v4: Some("198.18.0.2".parse().unwrap()), src_v6: None };
    /// let flow = Flow { dst: "10.0.0.1".parse().unwrap(), src_port: 1024, dst_port: 9 };
    /// let mut frame = [0u8; 60];
    /// let len = Template::new(&ends, &flow, 7).write(&mut frame, 64, 42, 1_000);
    /// assert_eq!(Probe::parse(&frame[..len]), Some(Probe { flow: 7, seq: 42, time_ns: 1_000 }));
    /// assert_eq!(Probe::parse(&frame[..30]), None);
    /// ```
    #[inline]
    pub fn parse(frame: &[u8]) -> Option<Probe> {
        let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
        let l4 = match ethertype {
            0x0800 => {
                let ihl = usize::from(frame.get(ETH_LEN)? & 0x0f) * 4;
                if frame[ETH_LEN] >> 4 != 4 || ihl < V4_LEN || *frame.get(ETH_LEN + 9)? != 17 {
                    return None;
                }
                ETH_LEN + ihl
            }
            0x86dd => {
                if frame.get(ETH_LEN)? >> 4 != 6 || *frame.get(ETH_LEN + 6)? != 17 {
                    return None;
                }
                ETH_LEN + V6_LEN
            }
            _ => return None,
        };
        let p = frame.get(l4 + UDP_LEN..l4 + UDP_LEN + PROBE_LEN)?;
        if u16::from_be_bytes([p[0], p[1]]) != MAGIC {
            return None;
        }
        Some(Probe {
            flow: u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            seq: u32::from_be_bytes([p[6], p[7], p[8], p[9]]),
            time_ns: u64::from_be_bytes([p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn endpoints() -> Endpoints {
        Endpoints {
            src_mac: [0x02, 0x58, 0x46, 0, 0, 1],
            dst_mac: [0x02, 0x58, 0x46, 0, 0, 2],
            src_v4: Some(Ipv4Addr::new(198, 18, 0, 2)),
            src_v6: Some("2001:db8:0:1::2".parse().unwrap()),
        }
    }

    /// Writes a probe into a zeroed buffer and checks every field and both checksums with
    /// etherparse, an independent parser.
    fn check(flow: Flow, id: u32, size: u16, seq: u32, time: u64) {
        check_in(&mut vec![0u8; 2048], flow, id, size, seq, time);
    }

    /// As `check`, in a buffer that earlier probes may have written (a reused UMEM frame).
    fn check_in(buf: &mut [u8], flow: Flow, id: u32, size: u16, seq: u32, time: u64) {
        let ends = endpoints();
        let len = Template::new(&ends, &flow, id).write(buf, size, seq, time);
        assert_eq!(len, usize::from(size) - 4);
        let frame = &buf[..len];
        let packet = SlicedPacket::from_ethernet(frame).expect("etherparse parses the probe");
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = &packet.link else {
            panic!("no Ethernet II header");
        };
        assert_eq!(eth.destination(), ends.dst_mac);
        assert_eq!(eth.source(), ends.src_mac);
        let Some(TransportSlice::Udp(udp)) = &packet.transport else {
            panic!("no UDP");
        };
        assert_eq!(udp.source_port(), flow.src_port);
        assert_eq!(udp.destination_port(), flow.dst_port);
        assert_eq!(usize::from(udp.length()), udp.slice().len());
        let header = udp.to_header();
        let payload = udp.payload();
        let expected = match &packet.net {
            Some(NetSlice::Ipv4(ip)) => {
                let h = ip.header().to_header();
                assert_eq!(
                    h.header_checksum,
                    h.calc_header_checksum(),
                    "IPv4 header checksum"
                );
                assert_eq!(IpAddr::V4(h.destination.into()), flow.dst);
                assert_eq!(h.time_to_live, TTL);
                assert_eq!(usize::from(h.total_len), len - 14);
                header.calc_checksum_ipv4(&h, payload).unwrap()
            }
            Some(NetSlice::Ipv6(ip)) => {
                let h = ip.header().to_header();
                assert_eq!(IpAddr::V6(h.destination.into()), flow.dst);
                assert_eq!(usize::from(h.payload_length), len - 54);
                header.calc_checksum_ipv6(&h, payload).unwrap()
            }
            other => panic!("unexpected network layer {other:?}"),
        };
        assert_eq!(header.checksum, expected, "UDP checksum");
        assert_eq!(
            Probe::parse(frame),
            Some(Probe {
                flow: id,
                seq,
                time_ns: time
            })
        );
    }

    #[test]
    fn smallest_and_largest_frames() {
        let v4 = Flow {
            dst: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)),
            src_port: 1024,
            dst_port: 9,
        };
        let v6 = Flow {
            dst: IpAddr::V6("2001:db8:1::1".parse::<Ipv6Addr>().unwrap()),
            src_port: 65535,
            dst_port: 0,
        };
        for (flow, min) in [(v4, MIN_FRAME_V4), (v6, MIN_FRAME_V6)] {
            for size in [min, 128, 594, MAX_FRAME] {
                check(flow, 0, size, 0, 0);
                check(flow, u32::MAX, size, u32::MAX, u64::MAX);
            }
        }
    }

    /// A UMEM frame carries IPv4 and IPv6 probes in turn (one queue sends flows of both
    /// families): every probe's checksums stay valid whatever the frame held before.
    #[test]
    fn frames_reused_across_families_and_sizes() {
        let v4 = Flow {
            dst: IpAddr::V4(Ipv4Addr::new(198, 18, 2, 1)),
            src_port: 1000,
            dst_port: 9,
        };
        let v6 = Flow {
            dst: IpAddr::V6("2001:db8:1::1".parse::<Ipv6Addr>().unwrap()),
            src_port: 1001,
            dst_port: 9,
        };
        let mut buf = vec![0u8; 2048];
        let sequence = [
            (v6, 128),
            (v4, 128),
            (v6, MIN_FRAME_V6),
            (v4, MIN_FRAME_V4),
            (v6, MAX_FRAME),
            (v4, 70),
            (v4, 594),
            (v6, 100),
            (v4, MAX_FRAME),
        ];
        for (n, (flow, size)) in sequence.into_iter().enumerate() {
            check_in(
                &mut buf,
                flow,
                n as u32,
                size,
                n as u32,
                u64::MAX - n as u64,
            );
        }
    }

    #[test]
    fn sizes_parse_and_validate() {
        assert_eq!("imix".parse::<FrameSize>().unwrap(), FrameSize::Imix);
        assert_eq!("64".parse::<FrameSize>().unwrap(), FrameSize::Fixed(64));
        assert!("x".parse::<FrameSize>().is_err());
        assert!(FrameSize::Fixed(64).validate(true, false).is_ok());
        assert!(matches!(
            FrameSize::Fixed(64).validate(true, true),
            Err(GenError::FrameSizeOutOfRange { min: 84, .. })
        ));
        assert!(FrameSize::Fixed(1519).validate(true, false).is_err());
        assert!(FrameSize::Fixed(63).validate(true, false).is_err());
        let imix: Vec<u16> = (0..12).map(|n| FrameSize::Imix.nth(n, false)).collect();
        assert_eq!(imix.iter().filter(|&&s| s == 64).count(), 7);
        assert_eq!(imix.iter().filter(|&&s| s == 594).count(), 4);
        assert_eq!(FrameSize::Imix.nth(0, true), MIN_FRAME_V6);
        assert!((FrameSize::Imix.mean() - 4342.0 / 12.0).abs() < 1e-9);
    }

    #[test]
    fn foreign_frames_are_not_probes() {
        let mut frame = vec![0u8; 60];
        assert_eq!(Probe::parse(&frame), None);
        frame[12] = 0x08; // IPv4, but version 0
        assert_eq!(Probe::parse(&frame), None);
        frame[14] = 0x45;
        frame[23] = 17; // UDP, no magic
        assert_eq!(Probe::parse(&frame), None);
        frame[42] = 0x58;
        frame[43] = 0x46;
        assert!(Probe::parse(&frame).is_some());
        frame[14] = 0x4f; // IHL 15: probe header would lie past the end
        assert_eq!(Probe::parse(&frame), None);
        assert_eq!(Probe::parse(&[]), None);
    }

    proptest! {
        #[test]
        fn every_probe_has_valid_checksums(
            v6 in any::<bool>(),
            addr in any::<u128>(),
            ports in any::<(u16, u16)>(),
            id in any::<u32>(),
            size_seed in any::<u16>(),
            seq in any::<u32>(),
            time in any::<u64>(),
        ) {
            let dst = if v6 { IpAddr::V6(addr.into()) } else { IpAddr::V4((addr as u32).into()) };
            let min = if v6 { MIN_FRAME_V6 } else { MIN_FRAME_V4 };
            let size = min + size_seed % (MAX_FRAME - min + 1);
            check(Flow { dst, src_port: ports.0, dst_port: ports.1 }, id, size, seq, time);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Probe::parse(&bytes);
        }
    }
}
