//! The kernel's forwarding switches on the ingress device (`forwarding`, `rp_filter`, as the
//! netlink mirror follows them): a packet the kernel would not forward, or whose source it
//! would validate, goes to the kernel; local traffic is unaffected; a switch flipped after a
//! route was cached takes effect with the generation bump.

mod common;

use std::sync::Arc;

use common::*;
use dataplane::{Config, PuntReason, Queue, Verdict};
use neigh_table::{DevConf, DevConfTable, NETCONF_ALL, NETCONF_DEFAULT};

fn conf(forwarding: bool, rp_filter: u8) -> DevConf {
    DevConf {
        forwarding: Some(forwarding),
        rp_filter: Some(rp_filter),
    }
}

/// The fixture with a followed table: both families forward everywhere.
fn followed() -> (Fixture, Arc<DevConfTable>) {
    let mut fx = fixture();
    let t = Arc::new(DevConfTable::followed());
    for v6 in [false, true] {
        t.update(v6, NETCONF_ALL, conf(true, 0));
        t.update(v6, NETCONF_DEFAULT, conf(true, 0));
    }
    fx.tables.devconf = Arc::clone(&t);
    (fx, t)
}

#[test]
fn forwarding_off_on_the_ingress_device_hands_packets_to_the_kernel() {
    let (fx, t) = followed();
    let mut queue = Queue::new(Config::default()).unwrap();
    let v4 = udp4(HOST4, [8, 8, 8, 8], 64, 53, 10);
    let v6 = udp6(HOST6, "2001:db8:100::9", 64, 53, 10);
    assert_eq!(
        run_on(&mut queue, &fx, &v4, 256, 0).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    // Cached now; the switch goes off and the mirror bumps the generation.
    t.update(false, IN as i32, conf(false, 0));
    fx.tables.generation.bump();
    assert_eq!(
        run_on(&mut queue, &fx, &v4, 256, 1).verdict,
        Verdict::Punt(PuntReason::ForwardingOff)
    );
    // A reject route too: the kernel answers for it (host unreachable).
    assert_eq!(
        run_on(
            &mut queue,
            &fx,
            &udp4(HOST4, [198, 51, 100, 1], 64, 53, 10),
            256,
            2
        )
        .verdict,
        Verdict::Punt(PuntReason::ForwardingOff)
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
        Verdict::Punt(PuntReason::ForwardingOff)
    );
    let c = queue.counters();
    assert_eq!(c.punts[PuntReason::ForwardingOff as usize], 3);
}

#[test]
fn rp_filter_and_unknown_devices_go_to_the_kernel() {
    let (fx, t) = followed();
    let frame = udp4(HOST4, [8, 8, 8, 8], 64, 53, 10);
    t.update(false, NETCONF_ALL, conf(true, 2));
    fx.tables.generation.bump();
    assert_eq!(
        run(&fx, &frame).verdict,
        Verdict::Punt(PuntReason::RpFilter)
    );
    // IPv6 has no rp_filter.
    assert_eq!(
        run(&fx, &udp6(HOST6, "2001:db8:100::9", 64, 53, 10)).verdict,
        Verdict::Transmit { ifindex: OUT }
    );
    // Nothing known of the device, no default: the kernel decides.
    let mut fx = fx;
    fx.tables.devconf = Arc::new(DevConfTable::followed());
    assert_eq!(
        run(&fx, &frame).verdict,
        Verdict::Punt(PuntReason::IngressConf)
    );
}
