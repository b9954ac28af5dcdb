//! A namespace's tables as the netlink mirror would fill them, and frames built by etherparse.
#![allow(dead_code, reason = "each test binary uses a part")]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use addr_table::{IfAddr, NetnsId};
use dataplane::{Config, Frame, HeapPool, Queue, Tables, Verdict};
use etherparse::{Ipv4Header, PacketBuilder};
use fib_trie::{InsertFlags, NextHop, Route, RouteType};
use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
use policy_tree::{Action, Direction, PolicySpec, Selector, TemplateId};
use udp_socktab::{Family, NetnsConfig, SockId, SockOptions, SockTable, TableConfig};

pub const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];
pub const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
pub const SMALL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 4];
pub const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];
pub const GW4_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xf4];
/// Ingress 1, egress 2, a down link 3, a link with MTU 576 (4).
pub const IN: u32 = 1;
pub const OUT: u32 = 2;
pub const DOWN: u32 = 3;
pub const SMALL: u32 = 4;
pub const SMALL_MTU: u32 = 576;

pub const HOST4: [u8; 4] = [10, 0, 1, 50];
pub const LOCAL4: [u8; 4] = [10, 0, 1, 1];
pub const HOST6: &str = "2001:db8:1::50";
pub const LOCAL6: &str = "2001:db8:1::1";

pub struct Fixture {
    pub tables: Tables,
    pub socket: SockId,
    pub socket6: SockId,
    /// The tables' writers (`None` in a [`twin`], which shares the tables).
    pub writers: Option<dataplane::TableWriters>,
}

impl Fixture {
    /// The tables' writers, standing in for the netlink mirror.
    pub fn writers(&mut self) -> &mut dataplane::TableWriters {
        self.writers
            .as_mut()
            .expect("a twin shares its tables: write through the fixture it was made from")
    }
}

fn v4(a: [u8; 4]) -> u32 {
    u32::from_be_bytes(a)
}

pub fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().unwrap())
}

pub fn fixture() -> Fixture {
    fixture_and_writer().0
}

/// [`fixture`] and the socket table's writer (for `dataplane::endpoint::Endpoints`).
pub fn fixture_and_writer() -> (Fixture, udp_socktab::Writer) {
    let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
    let ns = writer.add_netns(NetnsConfig::default()).unwrap();
    writer
        .add_local_addr(ns, IpAddr::V4(LOCAL4.into()), IN)
        .unwrap();
    writer
        .add_local_addr(ns, IpAddr::V6(LOCAL6.parse().unwrap()), IN)
        .unwrap();
    let socket = writer
        .socket(ns, Family::V4, SockOptions::default())
        .unwrap();
    writer
        .bind(socket, "10.0.1.1:4789".parse().unwrap())
        .unwrap();
    let socket6 = writer
        .socket(ns, Family::V6Only, SockOptions::default())
        .unwrap();
    writer
        .bind(socket6, "[2001:db8:1::1]:4789".parse().unwrap())
        .unwrap();
    let (tables, mut writers) = Tables::new(NetnsId(1), sockets, ns);

    for (ifindex, mac, up, mtu) in [
        (IN, IN_MAC, true, 1500),
        (OUT, OUT_MAC, true, 1500),
        (DOWN, [2, 0, 0, 0, 0, 3], false, 1500),
        (SMALL, SMALL_MAC, true, SMALL_MTU),
    ] {
        let mut link = Link {
            mac: Some(mac),
            mtu,
            ..Link::new(ifindex, format!("eth{ifindex}"))
        };
        if up {
            link.flags = LinkFlags::UP | LinkFlags::RUNNING;
            link.oper = OperState::UP;
        }
        writers.links.upsert(link);
    }
    let a = &mut writers.addrs;
    a.add(IfAddr::new(Ipv4Addr::from(LOCAL4), 24, IN)).unwrap();
    a.add(IfAddr::new(Ipv4Addr::new(10, 0, 2, 1), 24, OUT))
        .unwrap();
    a.add(IfAddr::new(LOCAL6.parse::<Ipv6Addr>().unwrap(), 64, IN))
        .unwrap();
    a.add(IfAddr::new(
        "2001:db8:2::1".parse::<Ipv6Addr>().unwrap(),
        64,
        OUT,
    ))
    .unwrap();

    let f4 = &mut writers.fib4;
    let mut add4 = |r: Route<u32>| f4.insert(&r, InsertFlags::ADD).unwrap();
    add4(Route::unicast(
        v4([10, 0, 1, 0]),
        24,
        254,
        vec![NextHop::new(None, IN)],
    ));
    add4(Route::unicast(
        v4([10, 0, 2, 0]),
        24,
        254,
        vec![NextHop::new(None, OUT)],
    ));
    add4(Route::unicast(
        v4([8, 0, 0, 0]),
        8,
        254,
        vec![NextHop::new(Some(v4([10, 0, 2, 254])), OUT)],
    ));
    add4(Route::unicast(
        v4([100, 64, 0, 0]),
        16,
        254,
        vec![NextHop::new(Some(v4([10, 0, 4, 254])), SMALL)],
    ));
    add4(Route::unicast(
        v4([100, 65, 0, 0]),
        16,
        254,
        vec![NextHop::new(Some(v4([10, 0, 2, 200])), OUT)],
    ));
    add4(Route::unicast(
        v4([100, 66, 0, 0]),
        16,
        254,
        vec![NextHop::new(None, DOWN)],
    ));
    add4(Route::reject(
        v4([192, 0, 2, 0]),
        24,
        254,
        RouteType::Blackhole,
    ));
    add4(Route::reject(
        v4([198, 51, 100, 0]),
        24,
        254,
        RouteType::Unreachable,
    ));
    add4(Route::reject(
        v4([203, 0, 113, 0]),
        24,
        254,
        RouteType::Prohibit,
    ));
    let mut local = Route::unicast(v4([100, 67, 0, 1]), 32, 255, vec![NextHop::new(None, IN)]);
    local.route_type = RouteType::Local;
    local.info.scope = fib_trie::Scope::HOST;
    add4(local);

    let f6 = &mut writers.fib6;
    let mut add6 = |r: Route<u128>| f6.insert(&r, InsertFlags::ADD).unwrap();
    add6(Route::unicast(
        v6("2001:db8:1::"),
        64,
        254,
        vec![NextHop::new(None, IN)],
    ));
    add6(Route::unicast(
        v6("2001:db8:2::"),
        64,
        254,
        vec![NextHop::new(None, OUT)],
    ));
    add6(Route::unicast(
        v6("2001:db8:100::"),
        48,
        254,
        vec![NextHop::new(Some(v6("2001:db8:2::fe")), OUT)],
    ));
    add6(Route::unicast(
        v6("2001:db8:44::"),
        48,
        254,
        vec![NextHop::new(Some(v6("2001:db8:4::fe")), SMALL)],
    ));
    add6(Route::reject(
        v6("2001:db8:dead::"),
        48,
        254,
        RouteType::Unreachable,
    ));
    add6(Route::reject(
        v6("2001:db8:bad::"),
        48,
        254,
        RouteType::Prohibit,
    ));
    add6(Route::reject(
        v6("2001:db8:b1ac::"),
        48,
        254,
        RouteType::Blackhole,
    ));

    let n = &mut writers.neigh;
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V4([10, 0, 2, 254].into()),
        Some(GW_MAC),
        NudState::REACHABLE,
    ));
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V4([10, 0, 2, 7].into()),
        Some([2, 0, 0, 0, 0, 7]),
        NudState::STALE,
    ));
    n.upsert(Neighbour::new(
        SMALL,
        IpAddr::V4([10, 0, 4, 254].into()),
        Some(GW4_MAC),
        NudState::REACHABLE,
    ));
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V6("2001:db8:2::fe".parse().unwrap()),
        Some(GW_MAC),
        NudState::REACHABLE,
    ));
    n.upsert(Neighbour::new(
        SMALL,
        IpAddr::V6("2001:db8:4::fe".parse().unwrap()),
        Some(GW4_MAC),
        NudState::REACHABLE,
    ));
    // An incomplete entry: known to the kernel, not usable.
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V4([10, 0, 2, 200].into()),
        None,
        NudState::INCOMPLETE,
    ));

    let p = &mut writers.policies;
    let sel = |s: &str, d: &str| Selector::new(s.parse().unwrap(), d.parse().unwrap()).unwrap();
    p.add(PolicySpec::new(sel("0.0.0.0/0", "8.8.4.4/32"), Direction::Fwd).action(Action::Block))
        .unwrap();
    p.add(
        PolicySpec::new(sel("0.0.0.0/0", "8.9.0.0/16"), Direction::Out)
            .action(Action::Ipsec(TemplateId(1))),
    )
    .unwrap();
    tables.generation.bump();
    (
        Fixture {
            tables,
            socket,
            socket6,
            writers: Some(writers),
        },
        writer,
    )
}

/// An IPv4/UDP frame from the host on the ingress link.
pub fn udp4(src: [u8; 4], dst: [u8; 4], ttl: u8, dport: u16, payload: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, IN_MAC)
        .ipv4(src, dst, ttl)
        .udp(5000, dport)
        .write(&mut out, &vec![0x5a; payload])
        .unwrap();
    out
}

/// An IPv6/UDP frame from the host on the ingress link.
pub fn udp6(src: &str, dst: &str, hop: u8, dport: u16, payload: usize) -> Vec<u8> {
    let s: Ipv6Addr = src.parse().unwrap();
    let d: Ipv6Addr = dst.parse().unwrap();
    let mut out = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, IN_MAC)
        .ipv6(s.octets(), d.octets(), hop)
        .udp(5000, dport)
        .write(&mut out, &vec![0x5a; payload])
        .unwrap();
    out
}

/// Rewrites the IPv4 header of an untagged frame through etherparse (which recomputes the
/// header checksum).
pub fn patch4(frame: &mut [u8], change: impl FnOnce(&mut Ipv4Header)) {
    let (mut h, _) = Ipv4Header::from_slice(&frame[14..]).unwrap();
    let len = h.header_len();
    change(&mut h);
    let mut bytes = Vec::new();
    h.write(&mut bytes).unwrap();
    assert_eq!(bytes.len(), len, "patch4 must keep the header length");
    frame[14..14 + len].copy_from_slice(&bytes);
}

pub struct Outcome {
    pub verdict: Verdict,
    /// The frame's bytes after processing (offset/len as the pipeline left them).
    pub out: Vec<u8>,
    pub pool: HeapPool,
}

/// Runs one frame (placed at `headroom` in a 2048-byte chunk) through a fresh batch.
pub fn run_on(queue: &mut Queue, fx: &Fixture, frame: &[u8], headroom: usize, now: u64) -> Outcome {
    let mut pool = HeapPool::new(2048, 64);
    let mut chunk = vec![0u8; (headroom + frame.len()).max(2048)];
    chunk[headroom..headroom + frame.len()].copy_from_slice(frame);
    let guard = crossbeam_epoch::pin();
    let mut frames = [Frame::new(&mut chunk, headroom, frame.len(), IN)];
    queue.process_batch(&fx.tables, &guard, now, &mut frames, &mut pool);
    Outcome {
        verdict: frames[0].verdict,
        out: frames[0].bytes().to_vec(),
        pool,
    }
}

pub fn run(fx: &Fixture, frame: &[u8]) -> Outcome {
    let mut queue = Queue::new(Config::default()).unwrap();
    run_on(&mut queue, fx, frame, 256, 0)
}

/// The same tables with a per-destination ICMP limiter of their own (same hash key, no
/// history): for a second pipeline compared with a first, which would otherwise share (and
/// split) each destination's ICMP budget with it, as two queues of one namespace do.
pub fn twin(fx: &Fixture) -> Fixture {
    Fixture {
        tables: dataplane::Tables {
            icmp_peers: std::sync::Arc::new(fx.tables.icmp_peers.empty_copy()),
            ..fx.tables.clone()
        },
        socket: fx.socket,
        socket6: fx.socket6,
        writers: None,
    }
}
