//! Egress on an interface xfwd does not serve (privileged): `fwd` gets a third link, `fwd2`,
//! to `dst`, which `xfwd run --iface fwd0,fwd1` does not bind; a route out of it must not drop
//! the packets (`unknown_egress`) but punt them, unchanged, to the kernel, which forwards them
//! out of `fwd2` (TTL decremented once, by the kernel).

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{ProbeReport as Report, XFWD, Xfwd, ip};

#[test]
fn routes_out_of_unserved_interfaces_are_forwarded_by_the_kernel() {
    if !xfwd_lab::privileged("routes_out_of_unserved_interfaces_are_forwarded_by_the_kernel") {
        return;
    }
    let lab = Lab::unique("unsrv").unwrap().up_scoped().unwrap();
    let (fwd, dst) = (lab.netns(Role::Fwd), lab.netns(Role::Dst));
    ip(
        &fwd,
        &format!("link add fwd2 type veth peer name dst1 netns {dst}"),
    );
    ip(&fwd, "addr add 198.18.3.1/24 dev fwd2");
    ip(&dst, "addr add 198.18.3.2/24 dev dst1");
    ip(&fwd, "link set fwd2 up");
    ip(&dst, "link set dst1 up");
    ip(&fwd, "route add 198.51.100.0/24 via 198.18.3.2 dev fwd2");
    // fwd's kernel knows dst1's MAC before the probes come: a datagram from fwd's own stack
    // makes it resolve.
    let socket = xfwd_lab::netns::run_in(&fwd, || std::net::UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = socket.send_to(b"resolve", "198.18.3.2:9");
        std::thread::sleep(Duration::from_millis(100));
        let out = Command::new("ip")
            .args(["-n", &fwd, "neigh", "show", "198.18.3.2", "dev", "fwd2"])
            .output()
            .unwrap();
        let neigh = String::from_utf8_lossy(&out.stdout);
        if neigh.contains("REACHABLE") || neigh.contains("STALE") || neigh.contains("DELAY") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fwd never resolved dst1: {neigh}"
        );
    }
    let xfwd = Xfwd::start(&lab, 'u');
    let src = IpAddr::V4(topology::SRC0.ipv4);
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &src.to_string(), "--dst", "198.51.100.7"])
        .args(["--to-netns", &dst, "--capture", "dst1"])
        .args(["--count", "200", "--rate", "1000"])
        .output()
        .unwrap();
    let report: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!((report.sent, report.unique), (200, 200), "{report:?}");
    assert_eq!(report.ttls, [(63, 200)], "decremented once, by the kernel");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if common::pipeline(&stats, "punts", "unserved_egress") >= 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
