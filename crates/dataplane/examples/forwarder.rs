//! A small complete forwarder built only from xfwd's library crates: `fib-trie` (routes),
//! `dst-cache` (the generation every queue's route cache checks), `neigh-table` (links and
//! neighbours), `addr-table` (local addresses) and `dataplane` (the pipeline), driving two
//! simulated ports instead of AF_XDP sockets.
//!
//! The run loop is the one a real driver has: receive up to 64 frames per port into its own
//! chunks, pin the epoch once, [`Queue::process_batch`], act on each verdict (transmit, ICMP
//! reply, punt to the kernel, drop), send the extra frames the pipeline made, release held
//! frames whose neighbour resolved, and pass resolution requests to the control plane, which
//! here answers like the hosts on the LAN would (one of them is down: its frames wait, then
//! expire, counted).
//!
//! ```sh
//! cargo run -p dataplane --example forwarder                     # generated traffic, checked
//! cargo run -p dataplane --example forwarder -- IN.pcap OUT.pcap  # IN.pcap's frames enter
//!                                                                   # port 1 (`-`: generated);
//!                                                                   # OUT.pcap: what left
//! ```
//!
//! Topology: port 1 `lan` (10.0.1.1/24, 2001:db8:1::1/64), port 2 `wan` (192.0.2.2/24,
//! 2001:db8:2::2/64), default routes via 192.0.2.1 and 2001:db8:2::1 on `wan`.
//!
//! [`Queue::process_batch`]: dataplane::Queue::process_batch

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use addr_table::{IfAddr, NetnsId};
use dataplane::{Config, Frame, HeapPool, Queue, TableWriters, Tables, Verdict, crossbeam_epoch};
use fib_trie::{InsertFlags, NextHop, Route};
use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
use udp_socktab::{NetnsConfig, SockTable, TableConfig};

/// Frames per batch (per port), as a run loop receives them.
const BATCH: usize = 64;
/// The size of a frame buffer (a UMEM chunk) and the headroom before the frame.
const CHUNK: usize = 2048;
const HEADROOM: usize = 256;
const LAN: u32 = 1;
const WAN: u32 = 2;
/// The LAN host that does not answer ARP.
const DOWN_HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 99);

/// A simulated NIC port: frames waiting to be received, frames transmitted.
struct Port {
    mac: [u8; 6],
    rx: VecDeque<Vec<u8>>,
    tx: Vec<Vec<u8>>,
}

fn mac_of(host: IpAddr) -> [u8; 6] {
    let tail = match host {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    };
    [2, 0x48, 0x4f, 0x53, 0x54, tail]
}

/// The control plane's part: what the netlink mirror would fill in.
/// The tables and their writers (the control plane keeps these).
fn build_tables() -> Result<(Tables, TableWriters), Box<dyn std::error::Error>> {
    let (sockets, mut sock_writer) = SockTable::new(TableConfig::default())?;
    let sock_netns = sock_writer.add_netns(NetnsConfig::default())?;
    let (tables, mut writers) = Tables::new(NetnsId(1), sockets, sock_netns);
    for (ifindex, name) in [(LAN, "lan"), (WAN, "wan")] {
        let mut link = Link {
            mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
            mtu: 1500,
            ..Link::new(ifindex, name)
        };
        (link.flags, link.oper) = (LinkFlags::UP | LinkFlags::BROADCAST, OperState::UP);
        writers.links.upsert(link);
    }
    writers
        .addrs
        .add(IfAddr::new(Ipv4Addr::new(10, 0, 1, 1), 24, LAN))?;
    writers
        .addrs
        .add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 2), 24, WAN))?;
    writers
        .addrs
        .add(IfAddr::new("2001:db8:1::1".parse::<Ipv6Addr>()?, 64, LAN))?;
    writers
        .addrs
        .add(IfAddr::new("2001:db8:2::2".parse::<Ipv6Addr>()?, 64, WAN))?;

    let v4 = |a: Ipv4Addr| u32::from(a);
    let v6 = |a: &str| a.parse::<Ipv6Addr>().map(u128::from);
    let gw4 = Ipv4Addr::new(192, 0, 2, 1);
    let gw6: Ipv6Addr = "2001:db8:2::1".parse()?;
    let main = 254;
    for route in [
        Route::unicast(
            v4(Ipv4Addr::new(10, 0, 1, 0)),
            24,
            main,
            vec![NextHop::new(None, LAN)],
        ),
        Route::unicast(
            v4(Ipv4Addr::new(192, 0, 2, 0)),
            24,
            main,
            vec![NextHop::new(None, WAN)],
        ),
        Route::unicast(0, 0, main, vec![NextHop::new(Some(v4(gw4)), WAN)]),
    ] {
        writers.fib4.insert(&route, InsertFlags::ADD)?;
    }
    for route in [
        Route::unicast(v6("2001:db8:1::")?, 64, main, vec![NextHop::new(None, LAN)]),
        Route::unicast(v6("2001:db8:2::")?, 64, main, vec![NextHop::new(None, WAN)]),
        Route::unicast(0, 0, main, vec![NextHop::new(Some(u128::from(gw6)), WAN)]),
    ] {
        writers.fib6.insert(&route, InsertFlags::ADD)?;
    }
    for gw in [IpAddr::V4(gw4), IpAddr::V6(gw6)] {
        writers.neigh.upsert(Neighbour::new(
            WAN,
            gw,
            Some(mac_of(gw)),
            NudState::REACHABLE,
        ));
    }
    tables.generation.bump(); // after publishing: every queue's route cache is stale
    Ok((tables, writers))
}

/// What the generated traffic must give, frame by frame.
#[derive(Default, Debug, PartialEq, Eq)]
struct Expected {
    transmit: u64,
    reply: u64,
    punt: u64,
    dropped: u64,
    held: u64,
}

fn udp4(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr, ttl: u8) -> Vec<u8> {
    let mut bytes = Vec::new();
    etherparse::PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src.octets(), dst.octets(), ttl)
        .udp(40_000, 53)
        .write(&mut bytes, b"xfwd forwarder example")
        .expect("writing to a Vec");
    bytes
}

fn udp6(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut bytes = Vec::new();
    etherparse::PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv6(src.octets(), dst.octets(), 64)
        .udp(40_000, 53)
        .write(&mut bytes, b"xfwd forwarder example")
        .expect("writing to a Vec");
    bytes
}

/// Traffic in both directions with the outcomes it must have.
fn generate(ports: &mut BTreeMap<u32, Port>) -> Expected {
    let (lan_mac, wan_mac) = (ports[&LAN].mac, ports[&WAN].mac);
    let mut e = Expected::default();
    let mut lan = VecDeque::new();
    let mut wan = VecDeque::new();
    for i in 0..200u32 {
        let host = Ipv4Addr::new(10, 0, 1, 10 + (i % 4) as u8);
        let remote = Ipv4Addr::new(198, 51, 100, (i % 200) as u8);
        // LAN host to the Internet: routed via the gateway, whose MAC is known.
        lan.push_back(udp4(mac_of(host.into()), lan_mac, host, remote, 64));
        // The Internet to a LAN host: the first frames wait for ARP.
        wan.push_back(udp4(mac_of(remote.into()), wan_mac, remote, host, 64));
        e.transmit += 2;
        if i % 20 == 0 {
            // TTL 1: ICMP time exceeded back out of the LAN port. The senders take turns:
            // as in the kernel, errors to one destination are limited to a burst of six.
            let sender = Ipv4Addr::new(10, 0, 1, 10 + (i / 20 % 4) as u8);
            lan.push_back(udp4(mac_of(sender.into()), lan_mac, sender, remote, 1));
            e.reply += 1;
            // For the router itself: handed to the kernel.
            lan.push_back(udp4(
                mac_of(host.into()),
                lan_mac,
                host,
                Ipv4Addr::new(10, 0, 1, 1),
                64,
            ));
            e.punt += 1;
            // To the host that is down: held, then expired.
            wan.push_back(udp4(mac_of(remote.into()), wan_mac, remote, DOWN_HOST, 64));
            e.held += 1;
            // IPv6 out to the Internet.
            let src: Ipv6Addr = format!("2001:db8:1::{:x}", 10 + i % 4).parse().expect("v6");
            let dst: Ipv6Addr = format!("2001:db8:ffff::{:x}", i + 1).parse().expect("v6");
            lan.push_back(udp6(mac_of(src.into()), lan_mac, src, dst));
            e.transmit += 1;
            // A runt: dropped, counted as truncated.
            lan.push_back(vec![0u8; 10]);
            e.dropped += 1;
        }
    }
    ports.get_mut(&LAN).expect("lan").rx = lan;
    ports.get_mut(&WAN).expect("wan").rx = wan;
    e
}

/// Checks a transmitted IPv4 frame: addressed to the next hop's MAC from the egress port's,
/// TTL 63, header checksum valid.
fn check_forwarded_v4(frame: &[u8], egress: &Port) -> Result<(), String> {
    let (ip, _) = etherparse::Ipv4Header::from_slice(&frame[14..]).map_err(|e| e.to_string())?;
    let next_hop = if frame[..6] == mac_of(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))) {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))
    } else {
        IpAddr::V4(Ipv4Addr::from(ip.destination))
    };
    if frame[..6] != mac_of(next_hop) || frame[6..12] != egress.mac {
        return Err(format!("bad MACs {:x?}", &frame[..12]));
    }
    if ip.time_to_live != 63 || ip.header_checksum != ip.calc_header_checksum() {
        return Err(format!("TTL {} or checksum wrong", ip.time_to_live));
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (tables, mut writers) = build_tables()?;
    let mut ports: BTreeMap<u32, Port> = [LAN, WAN]
        .into_iter()
        .map(|i| {
            (
                i,
                Port {
                    mac: [2, 0, 0, 0, 0, i as u8],
                    rx: VecDeque::new(),
                    tx: Vec::new(),
                },
            )
        })
        .collect();
    let expected = match args.first().filter(|a| *a != "-") {
        Some(input) => {
            let frames = pcap::read(&std::fs::read(input)?)?;
            println!("{}: {} frames enter port 1 (lan)", input, frames.len());
            ports.get_mut(&LAN).expect("lan").rx = frames.into();
            None
        }
        None => Some(generate(&mut ports)),
    };
    let received: u64 = ports.values().map(|p| p.rx.len() as u64).sum();

    // The run loop's state: its queue, its frame buffers (allocated once), spare frames.
    // The default hold buffer keeps a whole batch towards one unresolved host (the kernel's
    // `unres_qlen_bytes`, 212,992 bytes per neighbour).
    let config = Config::default();
    let mut queue = Queue::new(config)?;
    let mut chunks = vec![vec![0u8; CHUNK]; BATCH];
    let mut pool = HeapPool::new(CHUNK, BATCH);
    let mut kernel = 0u64; // frames punted to the kernel (a TAP device in xfwd)
    let mut now = 0u64; // a monotonic clock, nanoseconds
    loop {
        let idle = ports.values().all(|p| p.rx.is_empty());
        if idle && queue.held() == 0 {
            break;
        }
        for ifindex in [LAN, WAN] {
            let port = ports.get_mut(&ifindex).expect("port");
            let n = port.rx.len().min(BATCH);
            if n == 0 {
                continue;
            }
            let mut frames: Vec<Frame<'_>> = Vec::with_capacity(n);
            for (chunk, bytes) in chunks.iter_mut().zip(port.rx.drain(..n)) {
                let len = bytes.len().min(CHUNK - HEADROOM);
                chunk[HEADROOM..HEADROOM + len].copy_from_slice(&bytes[..len]);
                frames.push(Frame::new(chunk, HEADROOM, len, ifindex));
            }
            let guard = crossbeam_epoch::pin(); // one pin per batch
            queue.process_batch(&tables, &guard, now, &mut frames, &mut pool);
            for frame in &frames {
                match frame.verdict {
                    Verdict::Transmit { ifindex: out } | Verdict::Reply { ifindex: out } => {
                        let port = ports.get_mut(&out).ok_or("verdict names no port")?;
                        port.tx.push(frame.bytes().to_vec());
                    }
                    Verdict::Punt(_) | Verdict::Deliver { .. } => kernel += 1,
                    Verdict::Held | Verdict::Consumed | Verdict::Drop(_) => {}
                    Verdict::Pending => return Err("a frame without a verdict".into()),
                }
            }
        }
        let guard = crossbeam_epoch::pin();
        queue.release_held(&tables, &guard, now, &mut pool);
        for sent in pool.sent.drain(..) {
            let port = ports.get_mut(&sent.ifindex).ok_or("pool sent to no port")?;
            port.tx.push(sent.bytes);
        }
        // The control plane answers resolution requests (xfwd: RTM_NEWNEIGH with NTF_USE, and
        // the mirror applies the kernel's neighbour event).
        while let Some(request) = queue.poll_resolution() {
            if request.addr != IpAddr::V4(DOWN_HOST) {
                let mac = Some(mac_of(request.addr));
                let n = Neighbour::new(request.ifindex, request.addr, mac, NudState::REACHABLE);
                writers.neigh.upsert(n);
                tables.generation.bump();
            }
        }
        now += if idle { 100_000_000 } else { 50_000 };
    }

    let c = queue.counters();
    println!(
        "rx {} transmit {} reply {} punt {} held {} (released {}, expired {}) dropped {}; \
         route cache: {} hits, {} misses; {} resolutions asked",
        c.rx,
        c.transmit,
        c.reply,
        c.punt,
        c.held,
        c.held_released,
        c.held_expired,
        c.dropped,
        c.dst_cache.hits,
        c.dst_cache.misses,
        c.resolutions
    );
    for reason in dataplane::DropReason::ALL {
        if c.drops_of(*reason) > 0 {
            println!("  dropped {}: {}", reason.name(), c.drops_of(*reason));
        }
    }
    for (ifindex, port) in &ports {
        println!("port {ifindex}: {} frames out", port.tx.len());
    }
    if c.rx != received {
        return Err(format!("{received} frames received, the queue counted {}", c.rx).into());
    }
    if let Some(e) = expected {
        let got = Expected {
            transmit: c.transmit + c.held_released,
            reply: c.reply,
            punt: kernel,
            dropped: c.dropped,
            held: c.held_expired,
        };
        if got != e {
            return Err(format!("expected {e:?}, got {got:?}").into());
        }
        for (ifindex, port) in &ports {
            for frame in port
                .tx
                .iter()
                .filter(|f| f[12..14] == [8, 0] && f[14 + 9] == 17)
            {
                check_forwarded_v4(frame, port).map_err(|e| format!("port {ifindex}: {e}"))?;
            }
        }
        println!(
            "every verdict as expected; forwarded IPv4 frames have TTL 63, valid checksums and the next hop's MAC"
        );
    }
    if let Some(output) = args.get(1) {
        let all: Vec<&[u8]> = ports
            .values()
            .flat_map(|p| p.tx.iter().map(Vec::as_slice))
            .collect();
        std::fs::write(output, pcap::write(&all))?;
        println!("{output}: {} frames", all.len());
    }
    Ok(())
}

/// The classic pcap file format (Ethernet link type), enough to replay a capture and to write
/// one Wireshark or tcpdump reads.
mod pcap {
    const MAGIC_US: u32 = 0xa1b2_c3d4;
    const MAGIC_NS: u32 = 0xa1b2_3c4d;
    const LINKTYPE_ETHERNET: u32 = 1;

    /// The frames of a pcap file.
    pub fn read(file: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let header = file
            .get(..24)
            .ok_or("not a pcap file: shorter than its header")?;
        let magic = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let little = match magic {
            MAGIC_US | MAGIC_NS => true,
            m if m.swap_bytes() == MAGIC_US || m.swap_bytes() == MAGIC_NS => false,
            m => {
                return Err(format!(
                    "not a pcap file (magic {m:#x}; pcapng is not read)"
                ));
            }
        };
        let word = |b: &[u8]| {
            let b: [u8; 4] = b.try_into().expect("4 bytes");
            if little {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        if word(&header[20..24]) != LINKTYPE_ETHERNET {
            return Err("only Ethernet captures (link type 1) can be replayed".into());
        }
        let mut frames = Vec::new();
        let mut at = 24;
        while at < file.len() {
            let record = file.get(at..at + 16).ok_or("truncated record header")?;
            let len = word(&record[8..12]) as usize;
            let frame = file.get(at + 16..at + 16 + len).ok_or("truncated record")?;
            frames.push(frame.to_vec());
            at += 16 + len;
        }
        Ok(frames)
    }

    /// A pcap file holding `frames` (one per millisecond from time 0).
    pub fn write(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for word in [MAGIC_US, 0x0004_0002, 0, 0, 65_535, LINKTYPE_ETHERNET] {
            if word == 0x0004_0002 {
                out.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
                out.extend_from_slice(&4u16.to_le_bytes());
            } else {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        for (i, frame) in frames.iter().enumerate() {
            let (sec, usec) = ((i / 1000) as u32, (i % 1000 * 1000) as u32);
            for word in [sec, usec, frame.len() as u32, frame.len() as u32] {
                out.extend_from_slice(&word.to_le_bytes());
            }
            out.extend_from_slice(frame);
        }
        out
    }
}
