//! IPv4 routes through IPv6 next hops (RFC 8950, `ip route add ... via inet6 fe80::1`, how BGP
//! unnumbered installs IPv4 routes): the neighbour is the IPv6 one (ND) on the egress device,
//! in both the vector pipeline and the one-frame-at-a-time reference.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use dataplane::{Config, Frame, HeapPool, Queue, Resolution, Verdict};
use etherparse::Ipv4Header;
use fib_trie::{InsertFlags, NextHop, Route};
use neigh_table::{Neighbour, NudState};

const LL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x61];
/// An IPv4 neighbour whose address is the low 32 bits of `fe80::1`: found only if the
/// pipeline looked the IPv6 gateway up as an IPv4 address.
const DECOY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xdd];

fn ll(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// The fixture plus `100.70.0.0/16 via inet6 fe80::1 dev OUT` (resolved), `100.71.0.0/16 via
/// inet6 fe80::2 dev OUT` (not resolved), `100.72.0.0/16 via inet6 2001:db8:2::fe dev SMALL`
/// (MTU 576), and a two-way multipath `100.73.0.0/16` mixing an IPv6 and an IPv4 gateway.
fn fixture6() -> Fixture {
    let mut fx = fixture();
    let mut add = |prefix: [u8; 4], hops: Vec<NextHop<u32>>| {
        fx.writers()
            .fib4
            .insert(
                &Route::unicast(u32::from_be_bytes(prefix), 16, 254, hops),
                InsertFlags::ADD,
            )
            .unwrap();
    };
    add(
        [100, 70, 0, 0],
        vec![NextHop::via_inet6(u128::from(ll("fe80::1")), OUT)],
    );
    add(
        [100, 71, 0, 0],
        vec![NextHop::via_inet6(u128::from(ll("fe80::2")), OUT)],
    );
    add(
        [100, 72, 0, 0],
        vec![NextHop::via_inet6(v6("2001:db8:2::fe"), SMALL)],
    );
    add(
        [100, 73, 0, 0],
        vec![
            NextHop::via_inet6(u128::from(ll("fe80::1")), OUT),
            NextHop::new(Some(u32::from_be_bytes([10, 0, 2, 254])), OUT),
        ],
    );
    let n = &mut fx.writers().neigh;
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V6(ll("fe80::1")),
        Some(LL_MAC),
        NudState::REACHABLE,
    ));
    n.upsert(Neighbour::new(
        OUT,
        IpAddr::V4(Ipv4Addr::from(1)),
        Some(DECOY_MAC),
        NudState::REACHABLE,
    ));
    n.upsert(Neighbour::new(
        SMALL,
        IpAddr::V6(ll("2001:db8:2::fe")),
        Some(GW4_MAC),
        NudState::REACHABLE,
    ));
    fx.tables.generation.bump();
    fx
}

/// Runs `frame` through the vector pipeline and through the reference; both must agree.
fn both(fx: &Fixture, frame: &[u8]) -> Outcome {
    let vector = run(fx, frame);
    let mut queue = Queue::new(Config::default()).unwrap();
    let mut pool = HeapPool::new(2048, 64);
    let mut chunk = vec![0u8; 2048];
    chunk[256..256 + frame.len()].copy_from_slice(frame);
    let guard = crossbeam_epoch::pin();
    let mut frames = [Frame::new(&mut chunk, 256, frame.len(), IN)];
    queue.process_batch_reference(&fx.tables, &guard, 0, &mut frames, &mut pool);
    assert_eq!(
        frames[0].verdict, vector.verdict,
        "reference and vector agree"
    );
    assert_eq!(frames[0].bytes(), &vector.out[..]);
    vector
}

#[test]
fn an_ipv4_packet_via_an_ipv6_gateway_goes_to_the_nd_neighbour() {
    let fx = fixture6();
    let frame = udp4(HOST4, [100, 70, 3, 4], 64, 53, 20);
    let o = both(&fx, &frame);
    assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
    assert_eq!(
        &o.out[..6],
        &LL_MAC,
        "the IPv6 neighbour's MAC, not the decoy's"
    );
    assert_eq!(&o.out[6..12], &OUT_MAC);
    let (h, _) = Ipv4Header::from_slice(&o.out[14..]).unwrap();
    assert_eq!(h.time_to_live, 63);
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    assert_eq!(&o.out[34..], &frame[34..]);
}

#[test]
fn a_multipath_route_mixing_both_gateway_families_uses_each_neighbour() {
    let fx = fixture6();
    let mut macs = std::collections::BTreeSet::new();
    for i in 2..66u8 {
        let o = both(&fx, &udp4([10, 0, 1, i], [100, 73, i, 1], 64, 53, 0));
        assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
        macs.insert(<[u8; 6]>::try_from(&o.out[..6]).unwrap());
    }
    assert_eq!(macs, [GW_MAC, LL_MAC].into_iter().collect());
}

#[test]
fn an_unresolved_ipv6_gateway_holds_ipv4_frames_asks_nd_and_releases_them() {
    let mut fx = fixture6();
    let mut queue = Queue::new(Config::default()).unwrap();
    let frame = udp4(HOST4, [100, 71, 0, 1], 64, 53, 20);
    for now in 0..2 {
        assert_eq!(
            run_on(&mut queue, &fx, &frame, 256, now).verdict,
            Verdict::Held
        );
    }
    let gw = IpAddr::V6(ll("fe80::2"));
    assert_eq!(
        queue.poll_resolution(),
        Some(Resolution {
            ifindex: OUT,
            addr: gw
        })
    );
    assert_eq!(queue.poll_resolution(), None, "one request per neighbour");

    let guard = crossbeam_epoch::pin();
    let mut pool = HeapPool::new(2048, 8);
    // An IPv4 neighbour of the same low bits does not release them.
    fx.writers().neigh.upsert(Neighbour::new(
        OUT,
        IpAddr::V4(Ipv4Addr::from(2)),
        Some(DECOY_MAC),
        NudState::REACHABLE,
    ));
    assert_eq!(queue.release_held(&fx.tables, &guard, 10, &mut pool), 0);
    fx.writers().neigh.upsert(Neighbour::new(
        OUT,
        gw,
        Some([2, 0, 0, 0, 0, 0x62]),
        NudState::REACHABLE,
    ));
    assert_eq!(queue.release_held(&fx.tables, &guard, 20, &mut pool), 2);
    for s in &pool.sent {
        assert_eq!(s.ifindex, OUT);
        assert_eq!(
            &s.bytes[..12],
            &[[2, 0, 0, 0, 0, 0x62], OUT_MAC].concat()[..]
        );
        let (h, _) = Ipv4Header::from_slice(&s.bytes[14..]).unwrap();
        assert_eq!(h.time_to_live, 63);
    }
    // Now resolved, the next frame goes straight out.
    let o = run_on(&mut queue, &fx, &frame, 256, 30);
    assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
    assert_eq!(&o.out[..6], &[2, 0, 0, 0, 0, 0x62]);
}

#[test]
fn icmp_errors_and_mtu_are_unchanged_by_an_ipv6_gateway() {
    let fx = fixture6();
    // TTL 1: time exceeded, back to the sender from the ingress address.
    let o = both(&fx, &udp4(HOST4, [100, 70, 0, 1], 1, 53, 20));
    assert_eq!(o.verdict, Verdict::Reply { ifindex: IN });
    assert_eq!(&o.out[..6], &HOST_MAC);
    let (h, rest) = Ipv4Header::from_slice(&o.out[14..]).unwrap();
    assert_eq!((h.source, h.destination), (LOCAL4, HOST4));
    assert_eq!((rest[0], rest[1]), (11, 0));

    // Over the egress link's MTU (576) with DF: fragmentation needed, MTU 576.
    let o = both(&fx, &udp4(HOST4, [100, 72, 0, 1], 64, 53, 800));
    assert_eq!(o.verdict, Verdict::Reply { ifindex: IN });
    let (_, rest) = Ipv4Header::from_slice(&o.out[14..]).unwrap();
    assert_eq!((rest[0], rest[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([rest[6], rest[7]]), SMALL_MTU as u16);

    // Under it: forwarded to the IPv6 neighbour on that link.
    let o = both(&fx, &udp4(HOST4, [100, 72, 0, 1], 64, 53, 400));
    assert_eq!(o.verdict, Verdict::Transmit { ifindex: SMALL });
    assert_eq!(&o.out[..12], &[GW4_MAC, SMALL_MAC].concat()[..]);
}
