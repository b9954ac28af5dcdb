//! Test traffic across a forwarder (`xfwd probe`): complete UDP frames (checksums
//! computed, so no veth offload leaves them partial) sent from one namespace through a raw
//! packet socket, captured in another, and checked.
//!
//! Each received probe is checked for: the Ethernet addresses the forwarder must write, the
//! TTL / hop limit it must leave, a valid IPv4 header checksum and a valid UDP checksum.
//! The run id in the payload keeps other traffic out of the count.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, SockAddrStorage, Socket, Type};

/// The UDP destination port of probes.
pub const PROBE_PORT: u16 = 47_101;
const MAGIC: &[u8; 8] = b"xfwdprob";

/// One probe run.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// Interface to send from (in the sender's namespace).
    pub tx_iface: String,
    /// Ethernet source of sent frames.
    pub tx_src_mac: [u8; 6],
    /// Ethernet destination of sent frames (the forwarder's ingress MAC).
    pub tx_dst_mac: [u8; 6],
    /// IP source.
    pub src_ip: IpAddr,
    /// IP destinations, used in turn (one flow each).
    pub dst_ips: Vec<IpAddr>,
    /// TTL / hop limit of sent frames.
    pub ttl: u8,
    /// Frames to send.
    pub count: u64,
    /// Frames per second (0: as fast as possible).
    pub rate: u64,
    /// UDP payload bytes (at least 16).
    pub payload_len: usize,
    /// Interface to capture on (in the receiver's namespace).
    pub rx_iface: String,
    /// How long to wait for stragglers after the last frame.
    pub linger: Duration,
}

/// What a probe run saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeReport {
    /// Frames sent.
    pub sent: u64,
    /// Probe frames captured (this run's id).
    pub received: u64,
    /// Distinct sequence numbers among them.
    pub unique: u64,
    /// Captured frames whose IPv4 header checksum or UDP checksum is wrong.
    pub bad_checksum: u64,
    /// The Ethernet (source, destination) pairs seen, with counts.
    pub macs: Vec<(String, String, u64)>,
    /// The TTL / hop limit values seen, with counts.
    pub ttls: Vec<(u8, u64)>,
    /// Seconds from the first send to the last send.
    pub send_seconds: f64,
}

impl ProbeReport {
    /// Fraction of sent frames that arrived (distinct ones).
    pub fn delivery(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.unique as f64 / self.sent as f64
        }
    }
}

/// An `AF_PACKET` raw socket receiving every protocol.
fn packet_socket() -> anyhow::Result<Socket> {
    let all = i32::from((libc::ETH_P_ALL as u16).to_be());
    Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(all))).context("AF_PACKET socket")
}

/// The link-layer address (`sockaddr_ll`) of interface `ifindex`, every protocol.
fn link_addr(ifindex: u32) -> SockAddr {
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: `sockaddr_ll` is one of the platform's `sockaddr_*` types (what `view_as`
    // requires), smaller than the storage; all-zero is a valid value of it.
    let ll = unsafe { storage.view_as::<libc::sockaddr_ll>() };
    ll.sll_family = libc::AF_PACKET as u16;
    ll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    ll.sll_ifindex = ifindex as i32;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the family is AF_PACKET and the storage holds an initialised `sockaddr_ll` of
    // the length given.
    unsafe { SockAddr::new(storage, len) }
}

/// The packet type (`sll_pkttype`) of the address a frame came from, if it is a link-layer
/// address.
fn packet_type(from: &SockAddr) -> Option<u8> {
    let whole = usize::try_from(from.len()).ok()? >= std::mem::size_of::<libc::sockaddr_ll>();
    if from.family() != libc::AF_PACKET as libc::sa_family_t || !whole {
        return None;
    }
    // SAFETY: the address is an AF_PACKET one of at least `sockaddr_ll`'s size (checked
    // above), so the storage holds an initialised `sockaddr_ll`; the read copies a `u8`.
    Some(unsafe { (*from.as_ptr().cast::<libc::sockaddr_ll>()).sll_pkttype })
}

fn bind_to(socket: &Socket, iface: &str) -> anyhow::Result<SockAddr> {
    let ifindex =
        nix::net::if_::if_nametoindex(iface).with_context(|| format!("no interface {iface}"))?;
    let addr = link_addr(ifindex);
    socket
        .bind(&addr)
        .with_context(|| format!("binding to {iface}"))?;
    Ok(addr)
}

/// Builds probe frame `seq` of run `run`.
pub fn probe_frame(spec: &ProbeSpec, run: u32, seq: u64) -> anyhow::Result<Vec<u8>> {
    let dst = spec.dst_ips[(seq % spec.dst_ips.len() as u64) as usize];
    let mut payload = vec![0u8; spec.payload_len.max(20)];
    payload[..8].copy_from_slice(MAGIC);
    payload[8..12].copy_from_slice(&run.to_be_bytes());
    payload[12..20].copy_from_slice(&seq.to_be_bytes());
    let eth = PacketBuilder::ethernet2(spec.tx_src_mac, spec.tx_dst_mac);
    let source_port = 40_000 + (seq % 1000) as u16;
    let builder = match (spec.src_ip, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth
            .ipv4(s.octets(), d.octets(), spec.ttl)
            .udp(source_port, PROBE_PORT),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth
            .ipv6(s.octets(), d.octets(), spec.ttl)
            .udp(source_port, PROBE_PORT),
        _ => bail!(
            "source {} and destination {dst} differ in family",
            spec.src_ip
        ),
    };
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, &payload)?;
    Ok(frame)
}

/// Sends the probes of `spec` from the calling thread's namespace.
///
/// # Errors
/// When the socket cannot be opened or a send fails.
pub fn send(spec: &ProbeSpec, run: u32, stop: &AtomicBool) -> anyhow::Result<(u64, f64)> {
    let fd = packet_socket()?;
    let addr = bind_to(&fd, &spec.tx_iface)?;
    let start = Instant::now();
    let mut sent = 0;
    for seq in 0..spec.count {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let frame = probe_frame(spec, run, seq)?;
        loop {
            match fd.send_to(&frame, &addr) {
                Ok(_) => break,
                Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(error) => return Err(error).context("sending a probe"),
            }
        }
        sent += 1;
        if spec.rate > 0 {
            let due = start + Duration::from_secs_f64(sent as f64 / spec.rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
    Ok((sent, start.elapsed().as_secs_f64()))
}

/// Sends `frames` as they are (complete Ethernet frames, for example malformed ones) out of
/// `iface` of the calling thread's namespace.
///
/// # Errors
/// When the socket cannot be opened or a send fails.
pub fn send_raw(iface: &str, frames: &[Vec<u8>]) -> anyhow::Result<()> {
    let fd = packet_socket()?;
    let addr = bind_to(&fd, iface)?;
    for frame in frames {
        fd.send_to(frame, &addr).context("sending a raw frame")?;
    }
    Ok(())
}

/// A capture socket, opened before sending starts.
#[derive(Debug)]
pub struct Capture {
    fd: Socket,
}

impl Capture {
    /// Opens a capture on `iface` of the calling thread's namespace.
    ///
    /// # Errors
    /// When the socket cannot be opened or bound.
    pub fn open(iface: &str) -> anyhow::Result<Self> {
        let fd = packet_socket()?;
        // 32 MiB past rmem_max with CAP_NET_ADMIN (SO_RCVBUFFORCE), else as much as rmem_max
        // allows; failure only means a smaller buffer.
        let size: usize = 32 << 20;
        if nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::RcvBufForce, &size).is_err()
        {
            let _ = fd.set_recv_buffer_size(size);
        }
        fd.set_read_timeout(Some(Duration::from_millis(100)))
            .context("SO_RCVTIMEO")?;
        bind_to(&fd, iface)?;
        Ok(Capture { fd })
    }

    /// Collects this run's probes until `done` is set and `linger` has passed since.
    pub fn collect(&self, run: u32, done: &AtomicBool, linger: Duration) -> ProbeReport {
        self.collect_matching(done, linger, |frame| probe_seq(frame, run))
    }

    /// Collects, until `done` is set and `linger` has passed since, every UDP-over-IPv4/IPv6
    /// frame to which `identify` gives an id (frames it returns `None` for are ignored): the
    /// same checks as [`collect`](Self::collect) (MACs, TTL / hop limit, IPv4 header and UDP
    /// checksums), with `unique` counting distinct ids. This is how other generators' probes
    /// are checked, for example `pktgen`'s (id = flow and sequence number).
    pub fn collect_matching(
        &self,
        done: &AtomicBool,
        linger: Duration,
        identify: impl Fn(&[u8]) -> Option<u64>,
    ) -> ProbeReport {
        let mut report = ProbeReport::default();
        let mut seen = std::collections::HashSet::new();
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 65_536];
        let mut done_at: Option<Instant> = None;
        loop {
            if done_at.is_none() && done.load(Ordering::Acquire) {
                done_at = Some(Instant::now());
            }
            if done_at.is_some_and(|t| t.elapsed() >= linger) {
                break;
            }
            let Ok((n, from)) = self.fd.recv_from(&mut buf) else {
                continue; // the timeout, to look at `done` again
            };
            if n == 0 || packet_type(&from) == Some(libc::PACKET_OUTGOING) {
                continue;
            }
            // SAFETY: `recv_from` initialised the first `n` bytes of `buf`; `MaybeUninit<u8>`
            // and `u8` have the same layout.
            let frame = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
            let Some(seq) = identify(frame) else {
                continue;
            };
            if let Some(check) = check_udp(frame) {
                report.received += 1;
                seen.insert(seq);
                if !check.checksums_ok {
                    report.bad_checksum += 1;
                }
                let (s, d) = (format_mac(&frame[6..12]), format_mac(&frame[..6]));
                match report.macs.iter_mut().find(|(a, b, _)| *a == s && *b == d) {
                    Some(entry) => entry.2 += 1,
                    None => report.macs.push((s, d, 1)),
                }
                match report.ttls.iter_mut().find(|(t, _)| *t == check.ttl) {
                    Some(entry) => entry.1 += 1,
                    None => report.ttls.push((check.ttl, 1)),
                }
            }
        }
        report.unique = seen.len() as u64;
        report
    }
}

struct Check {
    ttl: u8,
    checksums_ok: bool,
}

/// If `frame` is an `xfwd probe` frame of `run`: its sequence number.
fn probe_seq(frame: &[u8], run: u32) -> Option<u64> {
    let packet = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(TransportSlice::Udp(udp)) = &packet.transport else {
        return None;
    };
    if udp.destination_port() != PROBE_PORT {
        return None;
    }
    let payload = udp.payload();
    if payload.len() < 20 || &payload[..8] != MAGIC || payload[8..12] != run.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(payload[12..20].try_into().ok()?))
}

/// If `frame` is a probe of `run`: its sequence number and checks.
#[cfg(test)]
fn inspect(frame: &[u8], run: u32) -> Option<(u64, Check)> {
    Some((probe_seq(frame, run)?, check_udp(frame)?))
}

/// The TTL / hop limit and checksum validity of a UDP datagram over IPv4 or IPv6.
fn check_udp(frame: &[u8]) -> Option<Check> {
    let packet = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(TransportSlice::Udp(udp)) = &packet.transport else {
        return None;
    };
    let udp_bytes = udp.slice();
    let (ttl, checksums_ok) = match &packet.net {
        Some(NetSlice::Ipv4(ip)) => {
            let header = ip.header().slice();
            let header_ok = fold(sum(header)) == 0xffff;
            let mut pseudo = sum(&ip.header().source());
            pseudo += sum(&ip.header().destination());
            pseudo += 17 + udp_bytes.len() as u32;
            let udp_ok = fold(pseudo + sum(udp_bytes)) == 0xffff;
            (ip.header().ttl(), header_ok && udp_ok)
        }
        Some(NetSlice::Ipv6(ip)) => {
            let mut pseudo = sum(&ip.header().source());
            pseudo += sum(&ip.header().destination());
            pseudo += 17 + udp_bytes.len() as u32;
            let udp_ok = fold(pseudo + sum(udp_bytes)) == 0xffff;
            (ip.header().hop_limit(), udp_ok)
        }
        _ => return None,
    };
    Some(Check { ttl, checksums_ok })
}

/// Ones'-complement sum of big-endian 16-bit words (RFC 1071), not yet folded.
fn sum(bytes: &[u8]) -> u32 {
    let mut total = 0u32;
    for chunk in bytes.chunks(2) {
        let word = if chunk.len() == 2 {
            u16::from_be_bytes([chunk[0], chunk[1]])
        } else {
            u16::from_be_bytes([chunk[0], 0])
        };
        total += u32::from(word);
    }
    total
}

fn fold(mut total: u32) -> u16 {
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_addresses_round_trip() {
        let addr = link_addr(7);
        assert_eq!(addr.family(), libc::AF_PACKET as libc::sa_family_t);
        assert_eq!(
            addr.len() as usize,
            std::mem::size_of::<libc::sockaddr_ll>()
        );
        // A fresh link address has packet type 0 (PACKET_HOST).
        assert_eq!(packet_type(&addr), Some(libc::PACKET_HOST));
        let inet = SockAddr::from(std::net::SocketAddr::from(([192, 0, 2, 1], 9)));
        assert_eq!(packet_type(&inet), None);
    }

    fn spec(src: &str, dst: &str) -> ProbeSpec {
        ProbeSpec {
            tx_iface: "x".into(),
            tx_src_mac: [2, 0, 0, 0, 0, 1],
            tx_dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: src.parse().unwrap(),
            dst_ips: vec![dst.parse().unwrap()],
            ttl: 64,
            count: 1,
            rate: 0,
            payload_len: 32,
            rx_iface: "y".into(),
            linger: Duration::ZERO,
        }
    }

    #[test]
    fn built_probes_pass_inspection_and_corruption_is_seen() {
        for (src, dst) in [
            ("198.18.0.2", "198.18.2.1"),
            ("2001:db8:0:1::2", "2001:db8:1::1"),
        ] {
            let spec = spec(src, dst);
            let mut frame = probe_frame(&spec, 7, 42).unwrap();
            let (seq, check) = inspect(&frame, 7).unwrap();
            assert_eq!((seq, check.ttl, check.checksums_ok), (42, 64, true));
            assert!(inspect(&frame, 8).is_none(), "another run's probe");
            let last = frame.len() - 1;
            frame[last] ^= 0xff;
            assert!(!inspect(&frame, 7).unwrap().1.checksums_ok, "{src}");
        }
        assert!(probe_frame(&spec("198.18.0.2", "2001:db8::1"), 1, 1).is_err());
    }

    /// Any UDP frame is checked, probe or not; only `xfwd probe` frames get a sequence number.
    #[test]
    fn foreign_udp_frames_are_checked_too() {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 2], [198, 18, 2, 1], 63)
            .udp(1000, 9)
            .write(&mut frame, b"not a probe of ours")
            .unwrap();
        assert!(probe_seq(&frame, 1).is_none());
        let check = check_udp(&frame).unwrap();
        assert_eq!((check.ttl, check.checksums_ok), (63, true));
        frame[14 + 8] = 62; // TTL changed, IPv4 header checksum not updated
        assert!(!check_udp(&frame).unwrap().checksums_ok);
        assert!(check_udp(&[0u8; 60]).is_none(), "not IP");
    }

    #[test]
    fn delivery_ratio() {
        let report = ProbeReport {
            sent: 200,
            unique: 150,
            ..ProbeReport::default()
        };
        assert_eq!(report.delivery(), 0.75);
        assert_eq!(ProbeReport::default().delivery(), 0.0);
    }
}
