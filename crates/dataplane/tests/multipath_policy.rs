//! The namespace's multipath hash policy (`fib_multipath_hash_policy`, mirrored into
//! `Fib::multipath_policy`): the fields it names decide which packets stay together, in the
//! vector pipeline and the one-frame-at-a-time reference alike; a policy xfwd does not follow
//! (a hash seed, inner headers) leaves multipath routes to the kernel.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use common::*;
use dataplane::{Config, Frame, HeapPool, PuntReason, Queue, Verdict};
use fib_trie::multipath::MultipathPolicy;
use fib_trie::{InsertFlags, NextHop, Route};
use neigh_table::{Neighbour, NudState};

const LL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x61];

/// The fixture plus a two-way multipath `100.80.0.0/16` (10.0.2.254 and fe80::1 on OUT, both
/// resolved) and a single-path `100.81.0.0/16`.
fn fixture_mp() -> Fixture {
    let mut fx = fixture();
    let ll: Ipv6Addr = "fe80::1".parse().unwrap();
    for (prefix, hops) in [
        (
            [100, 80, 0, 0],
            vec![
                NextHop::new(Some(u32::from_be_bytes([10, 0, 2, 254])), OUT),
                NextHop::via_inet6(u128::from(ll), OUT),
            ],
        ),
        (
            [100, 81, 0, 0],
            vec![NextHop::new(Some(u32::from_be_bytes([10, 0, 2, 254])), OUT)],
        ),
    ] {
        fx.writers()
            .fib4
            .insert(
                &Route::unicast(u32::from_be_bytes(prefix), 16, 254, hops),
                InsertFlags::ADD,
            )
            .unwrap();
    }
    fx.writers().neigh.upsert(Neighbour::new(
        OUT,
        IpAddr::V6(ll),
        Some(LL_MAC),
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
    vector
}

/// The member (its MAC) each destination port's flow takes, from one source to one
/// destination.
fn members_by_port(fx: &Fixture) -> Vec<[u8; 6]> {
    (1000..1064u16)
        .map(|dport| {
            let o = both(fx, &udp4(HOST4, [100, 80, 1, 1], 64, dport, 20));
            assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
            <[u8; 6]>::try_from(&o.out[..6]).unwrap()
        })
        .collect()
}

#[test]
fn policy_0_keeps_a_host_pair_on_one_member() {
    let mut fx = fixture_mp();
    fx.writers()
        .fib4
        .set_multipath_policy(MultipathPolicy::from_sysctl(false, 0, 7, 0));
    let members: BTreeSet<_> = members_by_port(&fx).into_iter().collect();
    assert_eq!(members.len(), 1, "ports do not move an L3 flow");
    // Other host pairs use the other member too.
    let spread: BTreeSet<_> = (2..66u8)
        .map(|i| {
            let o = both(&fx, &udp4([10, 0, 1, i], [100, 80, i, 1], 64, 53, 0));
            <[u8; 6]>::try_from(&o.out[..6]).unwrap()
        })
        .collect();
    assert_eq!(spread, [GW_MAC, LL_MAC].into_iter().collect());
}

#[test]
fn policy_1_spreads_the_ports_of_a_host_pair_and_keeps_each_flow() {
    let mut fx = fixture_mp();
    fx.writers()
        .fib4
        .set_multipath_policy(MultipathPolicy::from_sysctl(false, 1, 7, 0));
    let first = members_by_port(&fx);
    let members: BTreeSet<_> = first.iter().copied().collect();
    assert_eq!(members, [GW_MAC, LL_MAC].into_iter().collect());
    assert_eq!(members_by_port(&fx), first, "each flow stays on its member");
    // Custom fields (policy 3) naming the destination port only: the same.
    fx.writers()
        .fib4
        .set_multipath_policy(MultipathPolicy::from_sysctl(false, 3, 0x20, 0));
    let members: BTreeSet<_> = members_by_port(&fx).into_iter().collect();
    assert_eq!(members.len(), 2);
}

#[test]
fn a_policy_xfwd_cannot_follow_leaves_multipath_routes_to_the_kernel() {
    let mut fx = fixture_mp();
    for (policy, fields, seed) in [(0, 7, 42), (2, 7, 0), (3, 0x40, 0)] {
        fx.writers()
            .fib4
            .set_multipath_policy(MultipathPolicy::from_sysctl(false, policy, fields, seed));
        let o = both(&fx, &udp4(HOST4, [100, 80, 1, 1], 64, 53, 20));
        assert_eq!(
            o.verdict,
            Verdict::Punt(PuntReason::MultipathHash),
            "policy {policy} fields {fields:#x} seed {seed}"
        );
        // A single-path route is not affected.
        let o = both(&fx, &udp4(HOST4, [100, 81, 1, 1], 64, 53, 20));
        assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
    }
}

/// An ICMPv4 time exceeded from `src` to `dst` quoting a UDP packet from `inner_src` to
/// `inner_dst`.
fn icmp_error(src: [u8; 4], dst: [u8; 4], inner_src: [u8; 4], inner_dst: [u8; 4]) -> Vec<u8> {
    let mut quoted = vec![0x45, 0, 0, 48, 0, 0, 0x40, 0, 1, 17, 0, 0];
    quoted.extend_from_slice(&inner_src);
    quoted.extend_from_slice(&inner_dst);
    quoted.extend_from_slice(&[0x13, 0x88, 0, 53, 0, 28, 0, 0]);
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(HOST_MAC, IN_MAC)
        .ipv4(src, dst, 64)
        .icmpv4_raw(11, 0, [0; 4])
        .write(&mut out, &quoted)
        .unwrap();
    out
}

#[test]
fn under_policy_0_an_icmp_error_follows_the_flow_it_quotes() {
    let mut fx = fixture_mp();
    // Errors from many routers about one flow (100.80.1.1 -> 10.9.9.9) going back to its
    // source: hashed by the quoted header, they all take one member.
    let members = |fx: &Fixture| -> BTreeSet<[u8; 6]> {
        (2..66u8)
            .map(|i| {
                let frame = icmp_error(
                    [10, 0, 1, i],
                    [100, 80, 1, 1],
                    [100, 80, 1, 1],
                    [10, 9, 9, 9],
                );
                let o = both(fx, &frame);
                assert_eq!(o.verdict, Verdict::Transmit { ifindex: OUT });
                <[u8; 6]>::try_from(&o.out[..6]).unwrap()
            })
            .collect()
    };
    fx.writers()
        .fib4
        .set_multipath_policy(MultipathPolicy::from_sysctl(false, 0, 7, 0));
    assert_eq!(members(&fx).len(), 1);
    // The same fields without that rule (policy 3, addresses): the outer sources spread them.
    fx.writers()
        .fib4
        .set_multipath_policy(MultipathPolicy::from_sysctl(false, 3, 0x3, 0));
    assert_eq!(members(&fx).len(), 2);
}
