//! The kernel's forwarding switches on the ingress device (`forwarding`, `rp_filter`, as the
//! netlink mirror follows them), answered as the kernel does: IPv4 with forwarding off gets
//! ICMP host unreachable whatever the route, IPv6 with forwarding off is dropped, a source
//! failing reverse-path filtering is dropped (and the decision, which depends on the source,
//! is never cached); local traffic is unaffected; a switch flipped after a route was cached
//! takes effect with the generation bump; unknown switches leave the packet to the kernel.

mod common;

use std::sync::Arc;

use common::*;
use dataplane::{Config, DropReason, PuntReason, Queue, Verdict};
use etherparse::Ipv4Header;
use neigh_table::{DevConf, DevConfWriter, NETCONF_ALL, NETCONF_DEFAULT};

fn conf(forwarding: bool, rp_filter: u8) -> DevConf {
    DevConf {
        forwarding: Some(forwarding),
        rp_filter: Some(rp_filter),
    }
}

/// The fixture with a followed table: both families forward everywhere.
fn followed() -> (Fixture, DevConfWriter) {
    let mut fx = fixture();
    let mut t = DevConfWriter::followed();
    for v6 in [false, true] {
        t.update(v6, NETCONF_ALL, conf(true, 0));
        t.update(v6, NETCONF_DEFAULT, conf(true, 0));
    }
    fx.tables.devconf = Arc::clone(t.reader());
    (fx, t)
}

/// The ICMP type and code of an IPv4 error frame.
fn icmp4(frame: &[u8]) -> (u8, u8) {
    let (h, rest) = Ipv4Header::from_slice(&frame[14..]).unwrap();
    assert_eq!(h.destination, HOST4);
    (rest[0], rest[1])
}

#[test]
fn forwarding_off_on_the_ingress_device_is_answered_as_the_kernel_does() {
    let (fx, mut t) = followed();
    let mut queue = Queue::new(Config::default()).unwrap();
    let v4 = udp4(HOST4, [8, 8, 8, 8], 64, 53, 10);
    let v6 = udp6(HOST6, "2001:db8:100::9", 64, 53, 10);
    assert_eq!(
        run_on(&mut queue, &fx, &v4, 256, 0).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    let no_route = udp4(HOST4, [1, 2, 3, 4], 64, 53, 10);
    let o = run_on(&mut queue, &fx, &no_route, 256, 0);
    assert_eq!(icmp4(&o.out), (3, 0), "net unreachable with forwarding on");
    // Cached now; the switch goes off and the mirror bumps the generation.
    t.update(false, IN as i32, conf(false, 0));
    fx.tables.generation.bump();
    let o = run_on(&mut queue, &fx, &v4, 256, 1_000_000_000);
    assert_eq!(o.verdict, Verdict::Reply { ifindex: IN });
    assert_eq!(icmp4(&o.out), (3, 1), "host unreachable");
    let o = run_on(&mut queue, &fx, &no_route, 256, 2_000_000_000);
    assert_eq!(
        icmp4(&o.out),
        (3, 1),
        "host unreachable, not net unreachable"
    );
    // Local delivery is not forwarding.
    assert_eq!(
        run_on(&mut queue, &fx, &udp4(HOST4, LOCAL4, 64, 4789, 5), 256, 3).verdict,
        Verdict::Deliver {
            socket: fx.socket,
            payload: 14 + 20 + 8
        }
    );
    // IPv6 follows `all`, not the device.
    t.update(true, IN as i32, conf(false, 0));
    fx.tables.generation.bump();
    assert_eq!(
        run_on(&mut queue, &fx, &v6, 256, 4).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    t.update(true, NETCONF_ALL, conf(false, 0));
    fx.tables.generation.bump();
    assert_eq!(
        run_on(&mut queue, &fx, &v6, 256, 5).verdict,
        Verdict::Drop(DropReason::ForwardingOff)
    );
    // Back on: forwarded again.
    t.update(false, IN as i32, conf(true, 0));
    fx.tables.generation.bump();
    assert_eq!(
        run_on(&mut queue, &fx, &v4, 256, 6).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
}

#[test]
fn rp_filter_validates_every_source_strict_and_loose() {
    let (fx, mut t) = followed();
    let mut queue = Queue::new(Config::default()).unwrap();
    let dst = [8, 8, 8, 8];
    t.update(false, IN as i32, conf(true, 1));
    fx.tables.generation.bump();
    let mut verdict =
        |src: [u8; 4]| run_on(&mut queue, &fx, &udp4(src, dst, 64, 53, 10), 256, 0).verdict;
    // Strict: the route back to 10.0.1.50 leaves through the ingress device.
    assert_eq!(verdict(HOST4), Verdict::Transmit { ifindex: OUT });
    // A source routed back out of another device, to the same destination right after (the
    // first answer must not have been cached): dropped.
    assert_eq!(verdict([10, 0, 2, 50]), Verdict::Drop(DropReason::RpFilter));
    assert_eq!(verdict(HOST4), Verdict::Transmit { ifindex: OUT });
    // No route back, or a reject route back: dropped in both modes.
    assert_eq!(verdict([1, 2, 3, 4]), Verdict::Drop(DropReason::RpFilter));
    t.update(false, NETCONF_ALL, conf(true, 2));
    t.update(false, IN as i32, conf(true, 0));
    fx.tables.generation.bump();
    let mut verdict =
        |src: [u8; 4]| run_on(&mut queue, &fx, &udp4(src, dst, 64, 53, 10), 256, 0).verdict;
    // Loose: any unicast route back will do.
    assert_eq!(verdict([10, 0, 2, 50]), Verdict::Transmit { ifindex: OUT });
    assert_eq!(
        verdict([203, 0, 113, 9]),
        Verdict::Drop(DropReason::RpFilter)
    );
    assert_eq!(verdict([1, 2, 3, 4]), Verdict::Drop(DropReason::RpFilter));
    // IPv6 has no rp_filter.
    assert_eq!(
        run(&fx, &udp6(HOST6, "2001:db8:100::9", 64, 53, 10)).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    assert_eq!(queue.counters().drops_of(DropReason::RpFilter), 4);
}

/// A route back the mirror could not represent ("kernel decides": an encapsulation, a
/// source-specific route, a policy rule on ports, ...) leaves reverse-path filtering to the
/// kernel: the packet is punted, neither dropped nor forwarded, in both modes and also when
/// the answer is remembered.
#[test]
fn a_kernel_decides_route_back_leaves_the_source_check_to_the_kernel() {
    let (mut fx, mut t) = followed();
    fx.writers()
        .fib4
        .insert(
            &fib_trie::Route::reject(0xc612_0000, 16, 254, fib_trie::RouteType::Kernel),
            fib_trie::InsertFlags::ADD,
        )
        .unwrap();
    let mut queue = Queue::new(Config::default()).unwrap();
    let frame = udp4([198, 18, 7, 7], [8, 8, 8, 8], 64, 53, 10);
    for rp_filter in [1, 2] {
        t.update(false, IN as i32, conf(true, rp_filter));
        fx.tables.generation.bump();
        for now in [0, 1] {
            assert_eq!(
                run_on(&mut queue, &fx, &frame, 256, now).verdict,
                Verdict::Punt(PuntReason::KernelRoute),
                "rp_filter {rp_filter}"
            );
        }
    }
    assert_eq!(queue.counters().drops_of(DropReason::RpFilter), 0);
    // rp_filter off: no route back is looked up; the route forward decides.
    t.update(false, IN as i32, conf(true, 0));
    fx.tables.generation.bump();
    assert_eq!(
        run_on(&mut queue, &fx, &frame, 256, 2).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
}

#[test]
fn unknown_switches_leave_the_packet_to_the_kernel() {
    let mut fx = fixture();
    fx.tables.devconf = Arc::clone(DevConfWriter::followed().reader());
    assert_eq!(
        run(&fx, &udp4(HOST4, [8, 8, 8, 8], 64, 53, 10)).verdict,
        Verdict::Punt(PuntReason::IngressConf)
    );
    assert_eq!(
        run(&fx, &udp4(HOST4, [1, 2, 3, 4], 64, 53, 10)).verdict,
        Verdict::Punt(PuntReason::IngressConf)
    );
}

/// `accept_local`: an own source (10.0.2.1, the OUT link's address) arriving on IN is a
/// martian by default; with the device's or `all`'s `accept_local` on, the kernel decides
/// (vector pipeline and reference alike).
#[test]
fn an_own_source_is_a_martian_unless_the_device_accepts_local() {
    use dataplane::{Frame, HeapPool};
    let mut fx = common::fixture();
    let frame = common::udp4([10, 0, 2, 1], [8, 8, 8, 8], 64, 53, 0);
    let verdicts = |fx: &common::Fixture| {
        let vector = common::run(fx, &frame).verdict;
        let mut queue = Queue::new(Config::default()).unwrap();
        let mut pool = HeapPool::new(2048, 8);
        let mut chunk = vec![0u8; 2048];
        chunk[256..256 + frame.len()].copy_from_slice(&frame);
        let guard = crossbeam_epoch::pin();
        let mut frames = [Frame::new(&mut chunk, 256, frame.len(), common::IN)];
        queue.process_batch_reference(&fx.tables, &guard, 0, &mut frames, &mut pool);
        assert_eq!(frames[0].verdict, vector, "reference and vector agree");
        vector
    };
    assert_eq!(verdicts(&fx), Verdict::Drop(DropReason::MartianSource));
    // Another device accepting local sources changes nothing for IN.
    fx.writers()
        .devconf
        .set_accept_local(common::OUT as i32, true);
    assert_eq!(verdicts(&fx), Verdict::Drop(DropReason::MartianSource));
    fx.writers()
        .devconf
        .set_accept_local(common::IN as i32, true);
    assert_eq!(verdicts(&fx), Verdict::Punt(PuntReason::AcceptLocal));
    fx.writers()
        .devconf
        .set_accept_local(common::IN as i32, false);
    fx.writers().devconf.set_accept_local(NETCONF_ALL, true);
    assert_eq!(verdicts(&fx), Verdict::Punt(PuntReason::AcceptLocal));
}

/// The queue remembers the switches per device and the reverse-path answers per source (see
/// `memo.rs`): a route back that appears or goes, and a switch flipped, are noticed by the
/// next batch; a switch change is noticed even before the control plane bumps the route
/// generation (the device table has its own), where the route cache is not involved.
#[test]
fn remembered_switches_and_sources_follow_the_tables() {
    use fib_trie::{InsertFlags, NextHop, Route, RouteSelector};
    let (mut fx, mut t) = followed();
    let mut writers = fx.writers.take().unwrap();
    let mut queue = Queue::new(Config::default()).unwrap();
    t.update(false, NETCONF_ALL, conf(true, 2));
    fx.tables.generation.bump();
    let far = [172, 16, 0, 9];
    let mut verdict = |src: [u8; 4], dst: [u8; 4], now: u64| {
        run_on(&mut queue, &fx, &udp4(src, dst, 64, 53, 10), 256, now).verdict
    };
    assert_eq!(
        verdict(far, [8, 8, 8, 8], 0),
        Verdict::Drop(DropReason::RpFilter)
    );
    assert_eq!(
        verdict(far, [8, 8, 8, 8], 1),
        Verdict::Drop(DropReason::RpFilter)
    );
    // A route back appears.
    let back = Route::unicast(0xac10_0000, 16, 254, vec![NextHop::new(None, IN)]);
    writers.fib4.insert(&back, InsertFlags::ADD).unwrap();
    fx.tables.generation.bump();
    assert_eq!(
        verdict(far, [8, 8, 8, 8], 2),
        Verdict::Transmit { ifindex: OUT }
    );
    // And goes.
    writers.fib4.delete(&RouteSelector::exact(&back)).unwrap();
    fx.tables.generation.bump();
    assert_eq!(
        verdict(far, [8, 8, 8, 8], 3),
        Verdict::Drop(DropReason::RpFilter)
    );
    // rp_filter off, without a bump of the route generation: the device table's own
    // generation starts a new epoch (destinations not in the route cache: 8.8.4.x).
    t.update(false, NETCONF_ALL, conf(true, 0));
    assert_eq!(
        verdict(far, [8, 8, 4, 1], 4),
        Verdict::Transmit { ifindex: OUT }
    );
    // Forwarding off on IN, again without a bump.
    t.update(false, IN as i32, conf(false, 0));
    let no_route = verdict(HOST4, [8, 8, 4, 2], 5);
    assert_eq!(no_route, Verdict::Reply { ifindex: IN }, "host unreachable");
}

/// Another device table put in place (with the same generation as the old one, and no bump)
/// is another set of switches: the queue's memo does not answer from the old one.
#[test]
fn another_device_table_is_not_answered_from_the_memo() {
    let (mut fx, t) = followed();
    let mut queue = Queue::new(Config::default()).unwrap();
    // Not in the route cache: a new destination each time.
    let v4 = |last: u8| udp4(HOST4, [8, 8, 5, last], 64, 53, 10);
    assert_eq!(
        run_on(&mut queue, &fx, &v4(1), 256, 0).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    let mut off = DevConfWriter::followed();
    for v6 in [false, true] {
        off.update(v6, NETCONF_ALL, conf(false, 0));
        off.update(v6, NETCONF_DEFAULT, conf(false, 0));
    }
    // Both tables have seen the same number of changes.
    assert_eq!(off.generation(), t.generation());
    fx.tables.devconf = Arc::clone(off.reader());
    assert_eq!(
        run_on(&mut queue, &fx, &v4(2), 256, 1).verdict,
        Verdict::Reply { ifindex: IN },
        "host unreachable: forwarding is off in the new table"
    );
}
