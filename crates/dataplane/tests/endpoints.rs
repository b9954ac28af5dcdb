//! In-dataplane UDP endpoints through the whole pipeline: which endpoint receives each
//! datagram (against udp-socktab's brute-force reference, the kernel's rules), the bounded
//! queues, the echo and STAMP services' answers (parsed and checksum-checked by etherparse),
//! the output path (routes, source selection, the hold buffer), and the hooks for the kernel's
//! sockets and the traffic steering.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use addr_table::{IfAddr, NetnsId};
use dataplane::endpoint::reflect::{self, ErrorEstimate, StampReply};
use dataplane::endpoint::{
    BindOptions, Endpoint, EndpointConfig, EndpointError, EndpointRx, Endpoints, KernelSockets,
    PortObserver, SendError, Service,
};
use dataplane::{Config, DropReason, Frame, HeapPool, PuntReason, Queue, Tables, Verdict};
use etherparse::{IpHeaders, PacketBuilder, SlicedPacket, TransportSlice};
use fib_trie::{InsertFlags, NextHop, Route};
use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
use proptest::prelude::*;
use udp_socktab::reference::Reference;
use udp_socktab::{Family, Lookup, NetnsConfig, SockOptions, SockTable, TableConfig};

const IF: u32 = 2;
const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 7];
const LOCAL4: [&str; 2] = ["10.0.0.1", "10.0.0.2"];
const LOCAL6: [&str; 2] = ["2001:db8::1", "2001:db8::2"];
const PEERS4: [&str; 3] = ["192.0.2.1", "192.0.2.2", "198.51.100.9"];
const PEERS6: [&str; 3] = ["2001:db8:1::1", "2001:db8:1::2", "2001:db8:2::9"];
const RANGE: (u16, u16) = (1000, 1007);
const HEADROOM: usize = 256;

struct Lab {
    tables: Tables,
    /// The tables' writers, standing in for the netlink mirror.
    writers: dataplane::TableWriters,
    endpoints: Endpoints,
    queue: Queue,
    rx: EndpointRx,
    pool: HeapPool,
    /// The peers whose neighbour entries exist (the others are unresolved).
    ns: udp_socktab::NetnsId,
}

/// One interface holding both local addresses of each family, the peers' subnets connected
/// on it, their neighbours resolved except the last peer of each family (routed via a gateway
/// that is unresolved).
fn lab() -> Lab {
    let (sockets, mut writer) = SockTable::new(TableConfig {
        hash_entries: 256,
        seed: Some(7),
    })
    .unwrap();
    let ns = writer
        .add_netns(NetnsConfig {
            child_hash_entries: 0,
            local_port_range: RANGE,
        })
        .unwrap();
    let (tables, mut writers) = Tables::new(NetnsId(1), sockets, ns);
    let mut link = Link {
        mac: Some(OUR_MAC),
        ..Link::new(IF, "eth0".to_string())
    };
    (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
    writers.links.upsert(link);
    let mut endpoints = Endpoints::new(
        writer,
        tables.clone(),
        EndpointConfig {
            queue_depth: 4,
            max_datagram: 1500,
        },
    )
    .unwrap();
    for a in LOCAL4 {
        let a: Ipv4Addr = a.parse().unwrap();
        writers.addrs.add(IfAddr::new(a, 24, IF)).unwrap();
        endpoints.add_local_addr(a.into(), IF).unwrap();
    }
    for a in LOCAL6 {
        let a: Ipv6Addr = a.parse().unwrap();
        writers.addrs.add(IfAddr::new(a, 64, IF)).unwrap();
        endpoints.add_local_addr(a.into(), IF).unwrap();
    }
    let v4 = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap());
    let v6 = |s: &str| u128::from(s.parse::<Ipv6Addr>().unwrap());
    let connected4 = Route::unicast(v4("192.0.2.0"), 24, 254, vec![NextHop::new(None, IF)]);
    writers.fib4.insert(&connected4, InsertFlags::ADD).unwrap();
    let via4 = vec![NextHop::new(Some(v4("192.0.2.254")), IF)];
    let far4 = Route::unicast(v4("198.51.100.0"), 24, 254, via4);
    writers.fib4.insert(&far4, InsertFlags::ADD).unwrap();
    let connected6 = Route::unicast(v6("2001:db8:1::"), 64, 254, vec![NextHop::new(None, IF)]);
    writers.fib6.insert(&connected6, InsertFlags::ADD).unwrap();
    let via6 = vec![NextHop::new(Some(v6("2001:db8:1::fe")), IF)];
    let far6 = Route::unicast(v6("2001:db8:2::"), 64, 254, via6);
    writers.fib6.insert(&far6, InsertFlags::ADD).unwrap();
    for peer in PEERS4[..2].iter().chain(&PEERS6[..2]) {
        let addr: IpAddr = peer.parse().unwrap();
        let n = Neighbour::new(IF, addr, Some(PEER_MAC), NudState::REACHABLE);
        writers.neigh.upsert(n);
    }
    tables.generation.bump();
    let rx = endpoints.rx();
    Lab {
        tables,
        writers,
        endpoints,
        queue: Queue::new(Config::default()).unwrap(),
        rx,
        pool: HeapPool::new(2048, 16),
        ns,
    }
}

fn udp_frame(src: SocketAddr, dst: SocketAddr, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC);
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), ttl),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), ttl),
        _ => panic!("mixed families"),
    };
    let mut bytes = Vec::new();
    ip.udp(src.port(), dst.port())
        .write(&mut bytes, payload)
        .unwrap();
    bytes
}

/// Runs one received frame through the pipeline and the endpoints: its verdict, and the
/// frame's bytes when it is to be transmitted.
fn receive(
    lab: &mut Lab,
    bytes: &[u8],
    now: u64,
    wall: u64,
) -> (Verdict, Option<Verdict>, Vec<u8>) {
    let mut chunk = vec![0u8; 2048];
    chunk[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
    let guard = crossbeam_epoch::pin();
    let mut frames = [Frame::new(&mut chunk, HEADROOM, bytes.len(), IF)];
    lab.queue
        .process_batch(&lab.tables, &guard, now, &mut frames, &mut lab.pool);
    let first = frames[0].verdict;
    let handled = lab.rx.handle_batch(
        &mut lab.queue,
        &lab.tables,
        &guard,
        now,
        &mut || wall,
        &mut frames,
    );
    let after = (handled == 1).then_some(frames[0].verdict);
    (first, after, frames[0].bytes().to_vec())
}

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

// ---- endpoint selection against the reference model --------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Bind {
        family: u8,
        addr: usize,
        port: usize,
        reuseaddr: bool,
        reuseport: bool,
    },
    Connect {
        ep: usize,
        peer: usize,
        port: u16,
    },
    Close {
        ep: usize,
    },
    Datagram {
        v6: bool,
        src: usize,
        sport: u16,
        dst: usize,
        dport: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0usize..4, 0usize..3, any::<bool>(), any::<bool>()).prop_map(
            |(family, addr, port, reuseaddr, reuseport)| Op::Bind { family, addr, port, reuseaddr, reuseport }
        ),
        1 => (0usize..8, 0usize..2, 1u16..3).prop_map(|(ep, peer, port)| Op::Connect { ep, peer, port }),
        1 => (0usize..8).prop_map(|ep| Op::Close { ep }),
        6 => (any::<bool>(), 0usize..2, 1u16..3, 0usize..2, 1000u16..1003)
            .prop_map(|(v6, src, sport, dst, dport)| Op::Datagram { v6, src, sport, dst, dport }),
    ]
}

/// The bind address of an op: IPv4 sockets take a wildcard or local IPv4 address; IPv6 ones a
/// wildcard, local, or v4-mapped local address.
fn bind_addr(family: Family, addr: usize, port: u16) -> SocketAddr {
    let v4 = ["0.0.0.0", LOCAL4[0], LOCAL4[1], LOCAL4[0]];
    let v6 = ["::", LOCAL6[0], LOCAL6[1], "::ffff:10.0.0.1"];
    match family {
        Family::V4 => sa(v4[addr], port),
        _ => sa(v6[addr], port),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Every datagram reaches the endpoint udp-socktab's reference (the kernel's rules, by
    /// brute force) chooses, with the same flow hash and CPU, and arrives whole in that
    /// endpoint's queue; without a match it goes to the kernel. Binds and connects succeed or
    /// fail alike.
    #[test]
    fn datagrams_reach_the_endpoint_the_kernel_would_choose(ops in prop::collection::vec(op(), 1..40)) {
        let mut lab = lab();
        let mut model = Reference::new();
        model.add_netns(lab.ns, Some(RANGE));
        for a in LOCAL4.iter().chain(&LOCAL6) {
            model.add_local_addr(lab.ns, a.parse().unwrap(), IF);
        }
        let mut open: Vec<Endpoint> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Bind { family, addr, port, reuseaddr, reuseport } => {
                    let family = [Family::V4, Family::V6DualStack, Family::V6Only][family as usize];
                    let addr = bind_addr(family, addr, [0, 1000, 1001][port]);
                    let options = SockOptions { reuseaddr, reuseport, ..SockOptions::default() };
                    let ours = lab.endpoints.bind(addr, BindOptions { family: Some(family), options, service: Service::Socket });
                    // The model's socket takes our endpoint's id (a fresh one when ours failed).
                    let id = ours.as_ref().map_or(udp_socktab::SockId(1 << 40 | step as u64), |e| e.id());
                    model.socket(id, lab.ns, family, options);
                    let theirs = model.bind(id, addr, |free| {
                        ours.as_ref().ok().map(|e| e.local_addr().port()).filter(|p| free.contains(p))
                    });
                    match (&ours, &theirs) {
                        (Ok(e), Ok(b)) => {
                            prop_assert_eq!(e.local_addr().port(), b.port());
                            open.push(e.clone());
                        }
                        (Err(EndpointError::Socket(a)), Err(b)) => {
                            prop_assert_eq!(a.errno(), b.errno(), "{:?} vs {:?}", a, b);
                            model.close(id).unwrap();
                        }
                        _ => prop_assert!(false, "step {step}: ours {ours:?}, model {theirs:?}"),
                    }
                }
                Op::Connect { ep, peer, port } if !open.is_empty() => {
                    let e = open[ep % open.len()].clone();
                    let peer = if e.local_addr().is_ipv4() || e.local_addr().ip().to_string().starts_with("::ffff:") {
                        sa(PEERS4[peer], port)
                    } else {
                        sa(PEERS6[peer], port)
                    };
                    match lab.endpoints.connect(&e, peer) {
                        Ok(local) => {
                            let theirs = model.connect(e.id(), peer, local.ip(), |_| None);
                            prop_assert_eq!(theirs.map(|a| a.port()), Ok(local.port()));
                        }
                        Err(EndpointError::Socket(err)) => {
                            prop_assert!(model.connect(e.id(), peer, e.local_addr().ip(), |_| None).is_err(), "{err:?}");
                        }
                        Err(other) => prop_assert!(false, "connect: {other:?}"),
                    }
                }
                Op::Connect { .. } => {}
                Op::Close { ep } if !open.is_empty() => {
                    let e = open.remove(ep % open.len());
                    lab.endpoints.close(&e).unwrap();
                    model.close(e.id()).unwrap();
                }
                Op::Close { .. } => {}
                Op::Datagram { v6, src, sport, dst, dport } => {
                    let (src, dst) = if v6 {
                        (sa(PEERS6[src], sport), sa(LOCAL6[dst], dport))
                    } else {
                        (sa(PEERS4[src], sport), sa(LOCAL4[dst], dport))
                    };
                    let payload = [step as u8; 9];
                    let bits = |a: IpAddr| match a {
                        IpAddr::V4(a) => u128::from(u32::from(a)),
                        IpAddr::V6(a) => u128::from(a),
                    };
                    let hash = dataplane::route::flow_hash(
                        bits(src.ip()),
                        bits(dst.ip()),
                        (u32::from(src.port()) << 16) | u32::from(dst.port()),
                    );
                    let key = Lookup { netns: lab.ns, src, dst, ifindex: IF, hash, cpu: 0 };
                    let expected = model.lookup(&key);
                    let (first, after, _) = receive(&mut lab, &udp_frame(src, dst, 64, &payload), 0, 0);
                    match expected {
                        Some(id) => {
                            prop_assert!(matches!(first, Verdict::Deliver { socket, .. } if socket == id), "{first:?} vs {id:?}");
                            prop_assert_eq!(after, Some(Verdict::Consumed));
                            let e = open.iter().find(|e| e.id() == id).unwrap();
                            let mut buf = [0u8; 64];
                            let (n, meta) = e.recv_from(&mut buf).unwrap();
                            prop_assert_eq!(&buf[..n], &payload[..]);
                            prop_assert_eq!((meta.src, meta.dst, meta.ifindex), (src, dst, IF));
                            for other in &open {
                                prop_assert!(other.recv_from(&mut buf).is_none());
                            }
                        }
                        None => prop_assert_eq!(first, Verdict::Punt(PuntReason::Local)),
                    }
                }
            }
        }
    }
}

// ---- queues -------------------------------------------------------------------------------

#[test]
fn a_full_receive_queue_drops_and_counts() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("10.0.0.1", 1000), BindOptions::default())
        .unwrap();
    for i in 0..6u8 {
        let f = udp_frame(sa(PEERS4[0], 5), sa("10.0.0.1", 1000), 64, &[i; 3]);
        let (_, after, _) = receive(&mut lab, &f, 0, 0);
        assert_eq!(after, Some(Verdict::Consumed));
    }
    let s = e.stats();
    assert_eq!((s.received, s.rx_queue_full), (6, 2));
    let mut buf = [0u8; 2];
    let (n, meta) = e.recv_from(&mut buf).unwrap();
    assert_eq!((n, meta.len, buf), (2, 3, [0, 0])); // cut to the caller's buffer
    for i in 1..4u8 {
        assert_eq!(e.recv_from(&mut buf).unwrap().0, 2);
        assert_eq!(buf[0], i);
    }
    assert!(e.recv_from(&mut buf).is_none());
}

#[test]
fn a_full_transmit_queue_refuses_and_counts() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("10.0.0.1", 0), BindOptions::default())
        .unwrap();
    for _ in 0..4 {
        e.send_to(b"x", sa(PEERS4[0], 9)).unwrap();
    }
    assert_eq!(e.send_to(b"x", sa(PEERS4[0], 9)), Err(SendError::QueueFull));
    assert_eq!(
        e.send_to(&[0; 1501], sa(PEERS4[0], 9)),
        Err(SendError::TooBig)
    );
    assert_eq!(e.send_to(b"x", sa(PEERS6[0], 9)), Err(SendError::Family));
    assert_eq!(e.send(b"x"), Err(SendError::NotConnected));
    let guard = crossbeam_epoch::pin();
    let sent = lab
        .rx
        .poll_transmit(&mut lab.queue, &lab.tables, &guard, 0, &mut lab.pool, 64);
    assert_eq!(sent, 4);
    let s = e.stats();
    assert_eq!(s.sent, 4);
    for (err, n) in [
        (SendError::QueueFull, 1),
        (SendError::TooBig, 1),
        (SendError::Family, 1),
        (SendError::NotConnected, 1),
    ] {
        assert_eq!(s.send_errors_of(err), n, "{err:?}");
    }
}

// ---- the output path ----------------------------------------------------------------------

fn parse_udp(bytes: &[u8]) -> (IpHeaders, u16, u16, Vec<u8>, u16, u16) {
    let p = SlicedPacket::from_ethernet(bytes).unwrap();
    let Some(TransportSlice::Udp(udp)) = p.transport else {
        panic!("not UDP")
    };
    let ip = IpHeaders::from_slice(&bytes[14..]).unwrap().0;
    let payload = udp.payload().to_vec();
    let expected = match &ip {
        IpHeaders::Ipv4(h, _) => {
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            udp.to_header().calc_checksum_ipv4(h, &payload).unwrap()
        }
        IpHeaders::Ipv6(h, _) => udp.to_header().calc_checksum_ipv6(h, &payload).unwrap(),
    };
    (
        ip,
        udp.source_port(),
        udp.destination_port(),
        payload,
        udp.checksum(),
        expected,
    )
}

fn addrs_ttl(ip: &IpHeaders) -> (IpAddr, IpAddr, u8) {
    match ip {
        IpHeaders::Ipv4(h, _) => (
            Ipv4Addr::from(h.source).into(),
            Ipv4Addr::from(h.destination).into(),
            h.time_to_live,
        ),
        IpHeaders::Ipv6(h, _) => (
            Ipv6Addr::from(h.source).into(),
            Ipv6Addr::from(h.destination).into(),
            h.hop_limit,
        ),
    }
}

#[test]
fn sends_choose_the_route_source_and_neighbour() {
    for (bind, peer, source) in [
        ("0.0.0.0", PEERS4[1], "10.0.0.1"),
        ("10.0.0.2", PEERS4[1], "10.0.0.2"),
        ("::", PEERS6[1], "select_src_v6"),
        ("::", PEERS4[0], "10.0.0.1"),
    ] {
        let mut lab = lab();
        let e = lab
            .endpoints
            .bind(sa(bind, 0), BindOptions::default())
            .unwrap();
        e.send_to(b"datagram", sa(peer, 4242)).unwrap();
        let guard = crossbeam_epoch::pin();
        let n = lab
            .rx
            .poll_transmit(&mut lab.queue, &lab.tables, &guard, 0, &mut lab.pool, 64);
        assert_eq!(n, 1, "{bind} -> {peer}");
        let sent = &lab.pool.sent[0];
        assert_eq!(sent.ifindex, IF);
        assert_eq!(&sent.bytes[..12], &[PEER_MAC, OUR_MAC].concat()[..]);
        let (ip, sport, dport, payload, sum, expected) = parse_udp(&sent.bytes);
        let (s, d, ttl) = addrs_ttl(&ip);
        let peer_ip: IpAddr = peer.parse().unwrap();
        let source: IpAddr = match (source, peer_ip) {
            // Both IPv6 addresses share 47 bits with the peer: the address table's RFC 6724
            // order decides (tested against the kernel in addr-table).
            ("select_src_v6", IpAddr::V6(p)) => {
                let chosen = lab.tables.addrs.select_src_v6(IF, p, &guard).unwrap();
                assert!(LOCAL6.contains(&chosen.to_string().as_str()));
                chosen.into()
            }
            (s, _) => s.parse().unwrap(),
        };
        assert_eq!((s, d, ttl), (source, peer_ip, 64));
        assert_eq!((sport, dport), (e.local_addr().port(), 4242));
        assert_eq!((payload.as_slice(), sum), (&b"datagram"[..], expected));
    }
}

#[test]
fn unresolved_neighbours_hold_then_release() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("10.0.0.1", 0), BindOptions::default())
        .unwrap();
    e.send_to(b"far", sa(PEERS4[2], 7)).unwrap();
    let guard = crossbeam_epoch::pin();
    let n = lab
        .rx
        .poll_transmit(&mut lab.queue, &lab.tables, &guard, 0, &mut lab.pool, 64);
    assert_eq!((n, lab.queue.held(), lab.pool.sent.len()), (1, 1, 0));
    let r = lab.queue.poll_resolution().unwrap();
    assert_eq!((r.ifindex, r.addr), (IF, "192.0.2.254".parse().unwrap()));
    let gw = Neighbour::new(IF, r.addr, Some([2, 0, 0, 0, 0, 0xfe]), NudState::REACHABLE);
    lab.writers.neigh.upsert(gw);
    let released = lab
        .queue
        .release_held(&lab.tables, &guard, 1, &mut lab.pool);
    assert_eq!(released, 1);
    let (ip, _, dport, payload, sum, expected) = parse_udp(&lab.pool.sent[0].bytes);
    assert_eq!(addrs_ttl(&ip).1, PEERS4[2].parse::<IpAddr>().unwrap());
    assert_eq!((dport, payload.as_slice(), sum), (7, &b"far"[..], expected));
}

#[test]
fn unsendable_datagrams_are_counted_by_cause() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("0.0.0.0", 0), BindOptions::default())
        .unwrap();
    e.send_to(b"a", sa("10.0.0.2", 1)).unwrap(); // our own address
    e.send_to(b"b", sa("203.0.113.1", 1)).unwrap(); // no route
    let guard = crossbeam_epoch::pin();
    let n = lab
        .rx
        .poll_transmit(&mut lab.queue, &lab.tables, &guard, 0, &mut lab.pool, 64);
    assert_eq!(n, 0);
    let s = e.stats();
    assert_eq!(s.send_errors_of(SendError::LocalDestination), 1);
    assert_eq!(s.send_errors_of(SendError::NoRoute), 1);
    assert_eq!(
        lab.endpoints.connect(&e, sa("203.0.113.1", 1)),
        Err(EndpointError::Route(SendError::NoRoute))
    );
}

#[test]
fn connect_takes_the_route_source_and_only_the_peer() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("0.0.0.0", 1000), BindOptions::default())
        .unwrap();
    let local = lab.endpoints.connect(&e, sa(PEERS4[0], 53)).unwrap();
    assert_eq!(local, sa("10.0.0.1", 1000));
    assert_eq!(e.peer_addr(), Some(sa(PEERS4[0], 53)));
    let from_peer = udp_frame(sa(PEERS4[0], 53), local, 64, b"r");
    assert_eq!(
        receive(&mut lab, &from_peer, 0, 0).1,
        Some(Verdict::Consumed)
    );
    let other = udp_frame(sa(PEERS4[1], 53), local, 64, b"r");
    assert_eq!(
        receive(&mut lab, &other, 0, 0).0,
        Verdict::Punt(PuntReason::Local)
    );
    e.send(b"q").unwrap();
    let guard = crossbeam_epoch::pin();
    lab.rx
        .poll_transmit(&mut lab.queue, &lab.tables, &guard, 0, &mut lab.pool, 64);
    let (ip, sport, dport, ..) = parse_udp(&lab.pool.sent[0].bytes);
    assert_eq!(addrs_ttl(&ip).0, "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!((sport, dport), (1000, 53));
}

// ---- services -----------------------------------------------------------------------------

#[test]
fn the_stamp_reflector_answers_with_correct_fields() {
    let error = ErrorEstimate::from_nanos(2_000, true);
    for (peer, local) in [(PEERS4[0], "10.0.0.2"), (PEERS6[1], "2001:db8::1")] {
        let mut lab = lab();
        let wild = if local.contains(':') { "::" } else { "0.0.0.0" };
        let ep = lab
            .endpoints
            .bind(
                sa(wild, 862),
                BindOptions::service(Service::Stamp { error }),
            )
            .unwrap();
        let mut test = [0u8; 60];
        let sender_ts = reflect::ntp_from_unix_nanos(1_700_000_000_000_000_000);
        let sender_err = ErrorEstimate::from_nanos(500, false);
        reflect::stamp_request(&mut test, 60, 41, sender_ts, sender_err).unwrap();
        test[50] = 0x5a; // padding is kept
        let wall = 1_700_000_000_250_000_000;
        let frame = udp_frame(sa(peer, 50_000), sa(local, 862), 61, &test);
        let (first, after, out) = receive(&mut lab, &frame, 0, wall);
        assert!(matches!(first, Verdict::Deliver { .. }));
        assert_eq!(after, Some(Verdict::Transmit { ifindex: IF }));
        assert_eq!(&out[..12], &[PEER_MAC, OUR_MAC].concat()[..]);
        let (ip, sport, dport, payload, sum, expected) = parse_udp(&out);
        assert_eq!(sum, expected);
        let (s, d, ttl) = addrs_ttl(&ip);
        assert_eq!(
            (s, d, ttl),
            (local.parse().unwrap(), peer.parse().unwrap(), 255)
        );
        assert_eq!((sport, dport, payload.len()), (862, 50_000, 60));
        let r = StampReply::parse(&payload).unwrap();
        let ts = reflect::ntp_from_unix_nanos(wall);
        assert_eq!((r.seq, r.sender_seq, r.sender_tx), (41, 41, sender_ts));
        assert_eq!(
            (r.rx, r.tx, r.error, r.sender_error),
            (ts, ts, error, sender_err)
        );
        assert_eq!(r.sender_ttl, 61);
        assert_eq!(payload[50], 0x5a);
        let s = ep.stats();
        assert_eq!((s.received, s.sent), (1, 1));
    }
}

#[test]
fn the_reflector_counts_short_packets_and_unsendable_answers() {
    let mut lab = lab();
    let ep = lab
        .endpoints
        .bind(
            sa("0.0.0.0", 862),
            BindOptions::service(Service::Stamp {
                error: ErrorEstimate(1),
            }),
        )
        .unwrap();
    let short = udp_frame(sa(PEERS4[0], 1), sa("10.0.0.1", 862), 64, &[0; 13]);
    assert_eq!(
        receive(&mut lab, &short, 0, 0).1,
        Some(Verdict::Drop(DropReason::Truncated))
    );
    // A sender the reply cannot be routed to: the answer is dropped, counted by cause.
    lab.writers
        .fib4
        .delete(&fib_trie::RouteSelector::new(
            u32::from(Ipv4Addr::new(192, 0, 2, 0)),
            24,
            254,
        ))
        .unwrap();
    lab.tables.generation.bump();
    let test = udp_frame(sa(PEERS4[0], 1), sa("10.0.0.1", 862), 64, &[0; 44]);
    assert_eq!(
        receive(&mut lab, &test, 0, 0).1,
        Some(Verdict::Drop(DropReason::NoRoute))
    );
    let s = ep.stats();
    assert_eq!((s.received, s.rx_malformed, s.sent), (2, 1, 0));
    assert_eq!(s.send_errors_of(SendError::NoRoute), 1);
}

#[test]
fn echo_answers_and_holds_for_an_unresolved_sender() {
    let mut lab = lab();
    lab.endpoints
        .bind(sa("::", 7), BindOptions::service(Service::Echo))
        .unwrap();
    // Dual-stack: an IPv4 datagram to the IPv6 wildcard socket is echoed over IPv4.
    let f = udp_frame(sa(PEERS4[1], 3333), sa("10.0.0.1", 7), 64, b"hello");
    let (_, after, out) = receive(&mut lab, &f, 0, 0);
    assert_eq!(after, Some(Verdict::Transmit { ifindex: IF }));
    let (ip, sport, dport, payload, sum, expected) = parse_udp(&out);
    assert_eq!(addrs_ttl(&ip).0, "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(
        (sport, dport, payload.as_slice(), sum),
        (7, 3333, &b"hello"[..], expected)
    );
    // The far sender's gateway is unresolved: the answer waits in the hold buffer.
    let f = udp_frame(sa(PEERS6[2], 3333), sa("2001:db8::2", 7), 64, b"far");
    assert_eq!(receive(&mut lab, &f, 0, 0).1, Some(Verdict::Held));
    assert_eq!(lab.queue.held(), 1);
}

#[test]
fn link_local_senders_are_answered_on_their_link() {
    let mut lab = lab();
    // A second link with a link-local route: the answer must not follow it.
    let mut other = Link {
        mac: Some([2, 0, 0, 0, 0, 3]),
        ..Link::new(3, "eth1".to_string())
    };
    (other.flags, other.oper) = (LinkFlags::UP, OperState::UP);
    lab.writers.links.upsert(other);
    let fe80 = u128::from("fe80::".parse::<Ipv6Addr>().unwrap());
    let ll = Route::unicast(fe80, 64, 254, vec![NextHop::new(None, 3)]);
    lab.writers.fib6.insert(&ll, InsertFlags::ADD).unwrap();
    let peer: IpAddr = "fe80::7".parse().unwrap();
    let n = Neighbour::new(IF, peer, Some(PEER_MAC), NudState::REACHABLE);
    lab.writers.neigh.upsert(n);
    lab.tables.generation.bump();
    lab.endpoints
        .bind(sa("::", 7), BindOptions::service(Service::Echo))
        .unwrap();
    let f = udp_frame(sa("fe80::7", 5), sa(LOCAL6[0], 7), 64, b"ll");
    assert_eq!(
        receive(&mut lab, &f, 0, 0).1,
        Some(Verdict::Transmit { ifindex: IF })
    );
}

// ---- lifecycle and hooks --------------------------------------------------------------------

#[derive(Clone, Default)]
struct Steering(Arc<Mutex<Vec<(bool, u16)>>>);

impl PortObserver for Steering {
    fn port_added(&mut self, port: u16) -> Result<(), String> {
        if port == 999 {
            return Err("map full".into());
        }
        self.0.lock().unwrap().push((true, port));
        Ok(())
    }
    fn port_removed(&mut self, port: u16) {
        self.0.lock().unwrap().push((false, port));
    }
}

struct FakeKernel(Vec<u16>, bool);

impl KernelSockets for FakeKernel {
    fn holds(&mut self, addr: SocketAddr) -> Result<bool, String> {
        if self.1 {
            return Err("netlink down".into());
        }
        Ok(self.0.contains(&addr.port()))
    }
}

#[test]
fn ports_are_steered_while_an_endpoint_holds_them() {
    let mut lab = lab();
    let steering = Steering::default();
    let rp = BindOptions {
        options: SockOptions {
            reuseport: true,
            ..SockOptions::default()
        },
        ..BindOptions::default()
    };
    let a = lab.endpoints.bind(sa("0.0.0.0", 1000), rp).unwrap();
    lab.endpoints
        .set_port_observer(Box::new(steering.clone()))
        .unwrap();
    let b = lab.endpoints.bind(sa("0.0.0.0", 1000), rp).unwrap();
    let c = lab.endpoints.bind(sa("10.0.0.1", 1001), rp).unwrap();
    lab.endpoints.close(&a).unwrap();
    lab.endpoints.close(&c).unwrap();
    assert_eq!(
        *steering.0.lock().unwrap(),
        vec![(true, 1000), (true, 1001), (false, 1001)]
    );
    lab.endpoints.close(&b).unwrap();
    assert_eq!(steering.0.lock().unwrap().last(), Some(&(false, 1000)));
    assert!(lab.endpoints.close(&b).is_err());
    // A port the steering refuses is not bound.
    let refused = lab
        .endpoints
        .bind(sa("0.0.0.0", 999), BindOptions::default());
    assert!(matches!(refused, Err(EndpointError::Steering(_))));
    assert!(
        lab.endpoints
            .bind(sa("0.0.0.0", 999), BindOptions::default().with_reuse())
            .is_err()
    );
    assert!(lab.endpoints.list().is_empty());
}

trait WithReuse {
    fn with_reuse(self) -> Self;
}
impl WithReuse for BindOptions {
    fn with_reuse(mut self) -> Self {
        self.options.reuseaddr = true;
        self
    }
}

#[test]
fn closed_endpoints_leave_their_datagrams_to_the_kernel() {
    let mut lab = lab();
    let e = lab
        .endpoints
        .bind(sa("10.0.0.1", 1000), BindOptions::default())
        .unwrap();
    let f = udp_frame(sa(PEERS4[0], 1), sa("10.0.0.1", 1000), 64, b"x");
    assert_eq!(receive(&mut lab, &f, 0, 0).1, Some(Verdict::Consumed));
    lab.endpoints.close(&e).unwrap();
    assert_eq!(
        receive(&mut lab, &f, 0, 0).0,
        Verdict::Punt(PuntReason::Local)
    );
    // The port is free again for a new endpoint, which gets the next datagram.
    let again = lab
        .endpoints
        .bind(sa("0.0.0.0", 1000), BindOptions::default())
        .unwrap();
    assert_eq!(receive(&mut lab, &f, 0, 0).1, Some(Verdict::Consumed));
    assert_eq!(again.stats().received, 1);
}

#[test]
fn binds_on_ports_kernel_sockets_hold_are_refused() {
    let mut lab = lab();
    lab.endpoints.set_kernel_sockets(Box::new(FakeKernel(
        vec![1000, 1001, 1002, 1003, 1004, 1005],
        false,
    )));
    let err = lab
        .endpoints
        .bind(sa("0.0.0.0", 1003), BindOptions::default())
        .unwrap_err();
    assert!(err.is_addr_in_use());
    assert_eq!(err.errno(), Some(98));
    // Port 0 searches past the kernel's ports; with the range exhausted it fails alike.
    let a = lab
        .endpoints
        .bind(sa("0.0.0.0", 0), BindOptions::default())
        .unwrap();
    let b = lab
        .endpoints
        .bind(sa("0.0.0.0", 0), BindOptions::default())
        .unwrap();
    let mut ports = [a.local_addr().port(), b.local_addr().port()];
    ports.sort();
    assert_eq!(ports, [1006, 1007]);
    let full = lab.endpoints.bind(sa("0.0.0.0", 0), BindOptions::default());
    assert!(full.unwrap_err().is_addr_in_use());
    // The ports tried and refused were given back to the table.
    assert_eq!(lab.endpoints.list().len(), 2);
    lab.endpoints
        .set_kernel_sockets(Box::new(FakeKernel(vec![], true)));
    assert!(matches!(
        lab.endpoints
            .bind(sa("0.0.0.0", 1000), BindOptions::default()),
        Err(EndpointError::KernelCheck(_))
    ));
}
