//! The traffic generator end to end (privileged): probes sent from an AF_XDP socket arrive at
//! an AF_XDP receiver exactly once each, in order, with a latency.
//!
//! - over a plain veth pair with two queues (two generator threads, two receiver threads);
//! - through the lab, forwarded by the kernel in `fwd`, IPv4 and IPv6 flows mixed, IMIX sizes.
//!
//! The receiver's XDP program takes every frame of its queue, so `dst`'s kernel never answers
//! ARP or neighbour solicitations: `fwd` gets static (permanent) neighbour entries for `dst0`.

use std::net::IpAddr;
use std::time::Duration;

use pktgen::{Endpoints, FlowSet, FrameSize, PortRange, Receiver, RxConfig, TxConfig};
use xfwd_lab::netns::Netns;
use xfwd_lab::topology::{DST0, FWD0, FWD1, SRC0};
use xfwd_lab::{Lab, Role};

/// Time for the last probes to cross the path before the receiver reports.
const SETTLE: Duration = Duration::from_millis(300);

/// Starts a receiver in `netns`, runs `send` (which must do its own namespace entering), then
/// returns the receiver's final report with per-flow counts.
fn send_and_receive(
    netns: &str,
    rx: &RxConfig,
    send: impl FnOnce() -> pktgen::TxReport,
) -> (pktgen::TxReport, pktgen::RxReport) {
    let receiver = xfwd_lab::netns::run_in(netns, || Receiver::start(rx))
        .unwrap()
        .expect("starting the receiver");
    // libxdp attaches its program while the socket binds; give the link a moment to settle.
    std::thread::sleep(Duration::from_millis(200));
    let sent = send();
    std::thread::sleep(SETTLE);
    let received = receiver.stop().expect("the receiver's report");
    (sent, received)
}

/// Asserts that every flow got exactly `expected[flow]` probes, none out of order.
fn assert_exact(flows: &FlowSet, sent: &pktgen::TxReport, got: &pktgen::RxReport, total: u64) {
    assert_eq!(sent.sent, total, "the generator sent what it was asked");
    let s = &got.summary;
    assert_eq!(
        s.received, total,
        "received exactly what was sent: {s:?}, {:?}",
        got.xdp
    );
    assert_eq!(s.out_of_order, 0, "{s:?}");
    assert_eq!(s.gaps, 0, "{s:?}");
    assert_eq!(s.unknown_flow, 0, "{s:?}");
    assert_eq!(s.flows_seen, flows.len() as u64);
    let n = flows.len() as u64;
    for (id, counts) in got.flows.iter().enumerate() {
        // Flows are sent round robin (per queue), so each flow gets its share.
        let share = total / n + u64::from((id as u64) < total % n);
        assert_eq!(counts.received, share, "flow {id}");
        assert_eq!(counts.next_seq, share, "flow {id}: highest sequence number");
    }
    let latency = s.latency.expect("latencies were measured");
    assert!(latency.min_ns > 0 && latency.min_ns <= latency.p50_ns);
    assert!(latency.p50_ns <= latency.p99_ns && latency.p99_ns <= latency.max_ns);
    assert!(latency.max_ns < 2_000_000_000, "{latency:?}");
}

#[test]
fn pktgen_two_queues_over_a_veth_pair() {
    if !xfwd_lab::privileged("pktgen_two_queues_over_a_veth_pair") {
        return;
    }
    let lab = Lab::unique("pgv").unwrap();
    let tx_ns = Netns::create(&format!("{}-tx", lab.prefix())).unwrap();
    let rx_ns = Netns::create(&format!("{}-rx", lab.prefix())).unwrap();
    tx_ns
        .ip([
            "link",
            "add",
            "gen0",
            "address",
            &SRC0.mac_string(),
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            "sink0",
            "address",
            &DST0.mac_string(),
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "netns",
            rx_ns.name(),
        ])
        .unwrap();
    tx_ns.ip(["link", "set", "gen0", "up"]).unwrap();
    rx_ns.ip(["link", "set", "sink0", "up"]).unwrap();

    let endpoints = Endpoints {
        src_mac: SRC0.mac,
        dst_mac: DST0.mac,
        src_v4: Some(SRC0.ipv4),
        src_v6: Some(SRC0.ipv6),
    };
    let dsts: Vec<IpAddr> = vec![DST0.ipv4.into(), DST0.ipv6.into()];
    let flows = FlowSet::new(
        endpoints,
        &dsts,
        "1000-1003".parse().unwrap(),
        PortRange::single(9),
    )
    .unwrap();
    let total = 20_000;
    let mut rx = RxConfig::new("sink0", flows.len());
    rx.queues = vec![0, 1];
    let mut tx = TxConfig::new("gen0");
    tx.queues = vec![0, 1];
    tx.size = FrameSize::Fixed(128);
    tx.count = Some(total);
    tx.rate = Some(100_000.0);
    let (sent, got) = send_and_receive(rx_ns.name(), &rx, || {
        tx_ns
            .run(|| pktgen::transmit(&tx, &flows))
            .unwrap()
            .unwrap()
    });
    assert_eq!(sent.queues.len(), 2);
    assert!(sent.queues.iter().all(|q| q.sent == total / 2), "{sent:?}");
    assert_eq!(sent.bytes, total * 128);
    assert_exact(&flows, &sent, &got, total);
    // The pacer kept to 100 kpps (±20%: a slow debug build may fall behind, never ahead).
    assert!(sent.pps < 120_000.0, "{sent:?}");
}

#[test]
fn pktgen_counts_every_probe_through_kernel_forwarding() {
    if !xfwd_lab::privileged("pktgen_counts_every_probe_through_kernel_forwarding") {
        return;
    }
    let lab = Lab::unique("pgk")
        .unwrap()
        .with_extra_prefixes(8, 24)
        .unwrap()
        .up_scoped()
        .unwrap();
    let fwd = lab.netns(Role::Fwd);
    for (addr, family) in [(DST0.ipv4.to_string(), "-4"), (DST0.ipv6.to_string(), "-6")] {
        let out = std::process::Command::new("ip")
            .args([
                "-n",
                &fwd,
                family,
                "neigh",
                "replace",
                &addr,
                "lladdr",
                &DST0.mac_string(),
                "dev",
                FWD1.name,
                "nud",
                "permanent",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let mut prefixes: Vec<pktgen::Prefix> = lab
        .extra_ipv4_prefixes()
        .map(|(a, l)| pktgen::Prefix {
            addr: a.into(),
            len: l,
        })
        .collect();
    prefixes.extend(lab.extra_ipv6_prefixes().map(|(a, l)| pktgen::Prefix {
        addr: a.into(),
        len: l,
    }));
    let dsts = pktgen::flow::destinations(&prefixes, 32);
    assert_eq!(dsts.iter().filter(|d| d.is_ipv6()).count(), 16);
    let endpoints = Endpoints {
        src_mac: SRC0.mac,
        dst_mac: FWD0.mac,
        src_v4: Some(SRC0.ipv4),
        src_v6: Some(SRC0.ipv6),
    };
    let flows = FlowSet::new(
        endpoints,
        &dsts,
        PortRange::single(1024),
        "9-10".parse().unwrap(),
    )
    .unwrap();
    let total = 12_000;
    let rx = RxConfig::new(DST0.name, flows.len());
    let mut tx = TxConfig::new(SRC0.name);
    tx.size = FrameSize::Imix;
    tx.count = Some(total);
    tx.rate = Some(50_000.0);
    let (sent, got) = send_and_receive(&lab.netns(Role::Dst), &rx, || {
        xfwd_lab::netns::run_in(&lab.netns(Role::Src), || pktgen::transmit(&tx, &flows))
            .unwrap()
            .unwrap()
    });
    // fwd's own IPv6 multicast (MLD reports) may reach dst0 too: counted apart, as foreign.
    assert_exact(&flows, &sent, &got, total);
}
