//! The kernel's forwarding switches against the live kernel (privileged): in a throwaway
//! namespace, `forwarding` (IPv4 per device and `all`, IPv6 `all`) and `rp_filter` are turned
//! on and off with sysctl writes; the mirror must follow each change (`RTM_NEWNETCONF`), its
//! answer for a packet arriving on a device must be what the kernel does (forward, or hand it
//! to the kernel), and `route get ... iif DEV` must answer as `ip route get` does with
//! forwarding off ("No route to host" for IPv4; IPv6 routes input as usual). `accept_local`
//! and IPv6 `force_forwarding`, which netconf does not carry, are followed from sysctl.
//! So is a device's `unres_qlen_bytes`, and the dataplane's hold buffer keeps that many bytes
//! per unresolved neighbour on it.

mod netlink_mirror_common;

use std::time::{Duration, Instant};

use fib_trie::multipath::{HashFields, MultipathPolicy};
use netlink_mirror::Ingress;
use netlink_mirror::{MirrorHandle, MirrorOptions, MirroredTables};
use netlink_mirror_common::{ip, mirror, netns, same_answer, two_links};
use xfwd_lab::netns::Netns;

fn sysctl(ns: &Netns, path: &str, value: &str) {
    let path = format!("/proc/sys/net/{path}");
    ns.run(|| std::fs::write(&path, value))
        .unwrap()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

fn ifindex(t: &MirroredTables, name: &str) -> u32 {
    let g = crossbeam_epoch::pin();
    t.links.by_name(name, &g).map(|l| l.ifindex).unwrap()
}

/// Waits until the mirror's answer for `dev` and family `v6` is `want`.
fn wait_ingress(live: &MirrorHandle, dev: &str, v6: bool, want: Ingress) {
    let t = live.tables();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let g = crossbeam_epoch::pin();
        let got = t.devconf.ingress(ifindex(t, dev), v6, &g);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{dev} v6={v6}: {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn forwarding_and_rp_filter_are_followed_as_the_kernel_applies_them() {
    if !xfwd_lab::privileged("forwarding_and_rp_filter_are_followed_as_the_kernel_applies_them") {
        return;
    }
    let ns = netns("netconf");
    two_links(&ns);
    ip(&ns, "link set lo up");
    ip(&ns, "route add 10.9.0.0/16 via 10.2.0.2");
    ip(&ns, "-6 route add 2001:db8:9::/48 via 2001:db8:2::2");
    // A new namespace does not forward: from the initial dump.
    let live = mirror(&ns, MirrorOptions::default());
    let t = live.tables();
    for v6 in [false, true] {
        wait_ingress(&live, "d0", v6, Ingress::ForwardingOff);
    }
    same_answer(&ns, t, "10.9.1.1 from 10.1.0.9 iif d0");
    same_answer(&ns, t, "10.1.0.1 from 10.1.0.9 iif d0");
    same_answer(&ns, t, "2001:db8:9::1 from 2001:db8:1::9 iif d0");

    // ip_forward sets every device: IPv4 forwards, IPv6 still not.
    sysctl(&ns, "ipv4/ip_forward", "1");
    wait_ingress(&live, "d0", false, Ingress::Forward);
    wait_ingress(&live, "d1", false, Ingress::Forward);
    wait_ingress(&live, "d0", true, Ingress::ForwardingOff);
    same_answer(&ns, t, "10.9.1.1 from 10.1.0.9 iif d0");
    sysctl(&ns, "ipv6/conf/all/forwarding", "1");
    wait_ingress(&live, "d0", true, Ingress::Forward);

    // One device off: only it.
    sysctl(&ns, "ipv4/conf/d0/forwarding", "0");
    wait_ingress(&live, "d0", false, Ingress::ForwardingOff);
    wait_ingress(&live, "d1", false, Ingress::Forward);
    same_answer(&ns, t, "10.9.1.1 from 10.1.0.9 iif d0");
    same_answer(&ns, t, "10.9.1.1 from 10.2.0.9 iif d1");
    sysctl(&ns, "ipv4/conf/d0/forwarding", "1");
    wait_ingress(&live, "d0", false, Ingress::Forward);

    // rp_filter: the device's, or `all`'s, whichever is larger.
    sysctl(&ns, "ipv4/conf/d1/rp_filter", "1");
    wait_ingress(&live, "d1", false, Ingress::RpFilter { strict: true });
    wait_ingress(&live, "d0", false, Ingress::Forward);
    sysctl(&ns, "ipv4/conf/d1/rp_filter", "0");
    wait_ingress(&live, "d1", false, Ingress::Forward);
    sysctl(&ns, "ipv4/conf/all/rp_filter", "2");
    wait_ingress(&live, "d0", false, Ingress::RpFilter { strict: false });
    wait_ingress(&live, "d0", true, Ingress::Forward);
    sysctl(&ns, "ipv4/conf/all/rp_filter", "0");
    wait_ingress(&live, "d0", false, Ingress::Forward);

    // A device created now starts from `default` (and is reported on its own).
    ip(&ns, "link add d2 type veth peer name p2");
    ip(&ns, "link set d2 up");
    netlink_mirror_common::wait_for(&live, "d2", |t| {
        let g = crossbeam_epoch::pin();
        t.links.by_name("d2", &g).is_some()
    });
    wait_ingress(&live, "d2", false, Ingress::Forward);

    // accept_local (read from sysctl, not in netconf): the device's, or `all`'s.
    let accepts = |dev: &str| {
        let g = crossbeam_epoch::pin();
        t.devconf.accepts_local(ifindex(t, dev), &g)
    };
    let wait_accepts = |dev: &str, want: bool| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while accepts(dev) != want {
            assert!(Instant::now() < deadline, "{dev}: accept_local not {want}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(!accepts("d0") && !accepts("d1"));
    sysctl(&ns, "ipv4/conf/d0/accept_local", "1");
    wait_accepts("d0", true);
    assert!(!accepts("d1"));
    sysctl(&ns, "ipv4/conf/d0/accept_local", "0");
    wait_accepts("d0", false);
    sysctl(&ns, "ipv4/conf/all/accept_local", "1");
    wait_accepts("d1", true);
    wait_accepts("d0", true);
    sysctl(&ns, "ipv4/conf/all/accept_local", "0");
    wait_accepts("d1", false);

    // IPv6 force_forwarding (read from sysctl, not in netconf; Linux 6.17 and later): with
    // all's forwarding off, a device's force_forwarding forwards what arrives on it
    // (`ip6_forward`), and no other device's.
    if std::path::Path::new("/proc/sys/net/ipv6/conf/all/force_forwarding").exists() {
        sysctl(&ns, "ipv6/conf/all/forwarding", "0");
        wait_ingress(&live, "d0", true, Ingress::ForwardingOff);
        sysctl(&ns, "ipv6/conf/d0/force_forwarding", "1");
        wait_ingress(&live, "d0", true, Ingress::Forward);
        wait_ingress(&live, "d1", true, Ingress::ForwardingOff);
        sysctl(&ns, "ipv6/conf/d0/force_forwarding", "0");
        wait_ingress(&live, "d0", true, Ingress::ForwardingOff);
    }
    let s = live.stats();
    assert!(s.errors.is_empty(), "{s:?}");
}

/// Waits until the mirror's multipath policies are `want` (IPv4, IPv6).
fn wait_multipath(live: &MirrorHandle, want: (MultipathPolicy, MultipathPolicy)) {
    let t = live.tables();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = (t.fib4.multipath_policy(), t.fib6.multipath_policy());
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{got:?}, want {want:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn multipath_hash_sysctls_are_followed() {
    if !xfwd_lab::privileged("multipath_hash_sysctls_are_followed") {
        return;
    }
    let ns = netns("mphash");
    let live = mirror(&ns, MirrorOptions::default());
    let policy = MultipathPolicy::from_sysctl;
    // A new namespace: policy 0 for both families (IPv6's includes the flow label).
    wait_multipath(&live, (policy(false, 0, 7, 0), policy(true, 0, 7, 0)));
    assert_eq!(
        live.tables().fib6.multipath_policy(),
        MultipathPolicy::Fields(HashFields(0x400f))
    );
    sysctl(&ns, "ipv4/fib_multipath_hash_policy", "1");
    sysctl(&ns, "ipv6/fib_multipath_hash_policy", "3");
    sysctl(&ns, "ipv6/fib_multipath_hash_fields", "0x23");
    wait_multipath(&live, (policy(false, 1, 7, 0), policy(true, 3, 0x23, 0)));
    // Inner fields: only the kernel can hash them.
    sysctl(&ns, "ipv6/fib_multipath_hash_fields", "0x43");
    wait_multipath(&live, (policy(false, 1, 7, 0), policy(true, 3, 0x43, 0)));
    assert!(matches!(
        live.tables().fib6.multipath_policy(),
        MultipathPolicy::Kernel(_)
    ));
    // A seed (kernels from 6.11): the kernel's deterministic choice, for both families.
    let seed = "/proc/sys/net/ipv4/fib_multipath_hash_seed";
    if ns.run(|| std::path::Path::new(seed).exists()).unwrap() {
        sysctl(&ns, "ipv6/fib_multipath_hash_fields", "0x23");
        sysctl(&ns, "ipv4/fib_multipath_hash_seed", "1234");
        wait_multipath(
            &live,
            (policy(false, 1, 7, 1234), policy(true, 3, 0x23, 1234)),
        );
        assert!(matches!(
            live.tables().fib4.multipath_policy(),
            MultipathPolicy::Kernel("fib_multipath_hash_seed set")
        ));
        sysctl(&ns, "ipv4/fib_multipath_hash_seed", "0");
    }
    // IPv4's neighbour check among multipath members: the kernel's choice, IPv4 only.
    sysctl(&ns, "ipv4/fib_multipath_use_neigh", "1");
    wait_multipath(
        &live,
        (
            policy(false, 1, 7, 0).with_use_neigh(true),
            policy(true, 3, 0x23, 0),
        ),
    );
    assert_eq!(
        live.tables().fib4.multipath_policy(),
        MultipathPolicy::Kernel("fib_multipath_use_neigh set")
    );
    sysctl(&ns, "ipv4/fib_multipath_use_neigh", "0");
    wait_multipath(&live, (policy(false, 1, 7, 0), policy(true, 3, 0x23, 0)));
}

/// Waits until the mirror holds `want` as `d1`'s ARP `unres_qlen_bytes`.
fn wait_queue_bytes(live: &MirrorHandle, dev: &str, want: u32) {
    let t = live.tables();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let g = crossbeam_epoch::pin();
        let got = t.devconf.queue_bytes(ifindex(t, dev), false, &g);
        if got == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{dev}: {got:?}, want {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_hold_buffer_holds_what_the_mirrored_unres_qlen_bytes_allows() {
    use dataplane::{Config, Frame, HOLD_FRAME_OVERHEAD, HeapPool, Queue, Verdict};
    if !xfwd_lab::privileged("the_hold_buffer_holds_what_the_mirrored_unres_qlen_bytes_allows") {
        return;
    }
    let ns = netns("holdq");
    two_links(&ns);
    sysctl(&ns, "ipv4/ip_forward", "1");
    // 10.2.0.2, the gateway on d1, is never resolved (no neighbour entry: the frames wait).
    ip(&ns, "route add 10.9.0.0/16 via 10.2.0.2");
    let frame_charge = (1514 + HOLD_FRAME_OVERHEAD) as u32;
    sysctl(
        &ns,
        "ipv4/neigh/d1/unres_qlen_bytes",
        &(5 * frame_charge).to_string(),
    );
    // The ND table's own value is another setting: it must not size an IPv4 neighbour.
    sysctl(&ns, "ipv6/neigh/d1/unres_qlen_bytes", "1");
    let live = mirror(&ns, MirrorOptions::default());
    wait_ingress(&live, "d0", false, Ingress::Forward);
    wait_queue_bytes(&live, "d1", 5 * frame_charge);

    // The dataplane on the mirrored tables, as the forwarder builds them.
    let m = live.tables();
    let (sockets, mut writer) =
        udp_socktab::SockTable::new(udp_socktab::TableConfig::default()).unwrap();
    let sock_netns = writer
        .add_netns(udp_socktab::NetnsConfig::default())
        .unwrap();
    let tables = forwarder::startup::dataplane_tables(
        m,
        sockets,
        sock_netns,
        None,
        dataplane::PeerLimiter::new(dataplane::ICMP_PEER_SLOTS),
    );
    let (d0, d0_mac) = {
        let g = crossbeam_epoch::pin();
        let l = m.links.by_name("d0", &g).unwrap();
        (l.ifindex, l.mac.unwrap())
    };
    // Full-size frames from a host on d0 to 10.9.1.1.
    let mut frame = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xaa], d0_mac)
        .ipv4([10, 1, 0, 9], [10, 9, 1, 1], 64)
        .udp(5000, 53)
        .write(&mut frame, &vec![0x5a; 1514 - 42])
        .unwrap();
    assert_eq!(frame.len(), 1514);
    let mut queue = Queue::new(Config::default()).unwrap();
    let mut send = |count: u64, start: u64| {
        for now in start..start + count {
            let mut pool = HeapPool::new(2048, 64);
            let mut chunk = vec![0u8; 256 + 2048];
            chunk[256..256 + frame.len()].copy_from_slice(&frame);
            let guard = crossbeam_epoch::pin();
            let mut frames = [Frame::new(&mut chunk, 256, frame.len(), d0)];
            queue.process_batch(&tables, &guard, now, &mut frames, &mut pool);
            assert_eq!(frames[0].verdict, Verdict::Held, "frame {now}");
        }
    };
    send(12, 0);
    // The device's budget, not the configured default (101 such frames), nor the ND value.
    assert_eq!(queue.held(), 5);
    assert_eq!(queue.counters().held_discarded, 7);

    // Lowered on the device: the mirror follows, and the neighbour keeps that much.
    sysctl(
        &ns,
        "ipv4/neigh/d1/unres_qlen_bytes",
        &(2 * frame_charge).to_string(),
    );
    wait_queue_bytes(&live, "d1", 2 * frame_charge);
    let mut pool = HeapPool::new(2048, 64);
    let mut chunk = vec![0u8; 256 + 2048];
    chunk[256..256 + frame.len()].copy_from_slice(&frame);
    let guard = crossbeam_epoch::pin();
    let mut frames = [Frame::new(&mut chunk, 256, frame.len(), d0)];
    queue.process_batch(&tables, &guard, 100, &mut frames, &mut pool);
    assert_eq!(frames[0].verdict, Verdict::Held);
    assert_eq!(queue.held(), 2);
    assert_eq!(queue.counters().held_discarded, 7 + 4);
}

#[test]
fn the_mirror_and_the_dataplane_hand_out_one_table_writers_type() {
    // One definition (crate table-writers): the mirror's writers are the dataplane's.
    let (tables, writers) = netlink_mirror::MirroredTables::new(addr_table::NetnsId(1), false);
    let mut writers: dataplane::TableWriters = writers;
    // and they write the mirror's tables, device switches followed (unknown devices are
    // left to the kernel).
    assert!(writers.devconf.set_queue_bytes(false, 3, Some(4096)));
    let g = crossbeam_epoch::pin();
    assert_eq!(tables.devconf.queue_bytes(3, false, &g), Some(4096));
    assert_eq!(tables.devconf.ingress(3, false, &g), Ingress::Unknown);
}
