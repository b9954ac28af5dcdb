//! The kernel's forwarding switches through a running `xfwd` (privileged): on the lab's
//! `fwd`, `net.ipv4.conf.fwd0.forwarding` off must stop forwarding from fwd0 as in the kernel
//! (probes do not arrive; ICMP host unreachable; `xfwd route get ... iif fwd0` answers "No
//! route to host" as `ip route get` does), and `rp_filter` strict on fwd0 must let a valid
//! source through and drop a spoofed one (a source routed back out of fwd1).

use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{XFWD, Xfwd, pipeline, sysctl};

#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    bad_checksum: u64,
    macs: Vec<(String, String, u64)>,
    ttls: Vec<(u8, u64)>,
}

fn probe(lab: &Lab, src: &str, dst: &str, count: u64) -> Report {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", src, "--dst", dst])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
        .args(["--count", &count.to_string(), "--rate", "1000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Waits until the published counters satisfy `ok`.
fn wait_stats(xfwd: &Xfwd, what: &str, ok: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if ok(&stats) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The answer of `route get` (stdout, or the error text) from the kernel and from xfwd.
fn route_get(fwd: &str, query: &str) -> (String, String) {
    let words: Vec<&str> = query.split_whitespace().collect();
    let kernel = Command::new("ip")
        .args(["-n", fwd, "route", "get"])
        .args(&words)
        .output()
        .unwrap();
    let ours = Command::new(XFWD)
        .args(["route", "get"])
        .args(&words)
        .args(["--netns", fwd])
        .output()
        .unwrap();
    let text = |o: &std::process::Output| {
        if o.status.success() {
            String::from_utf8_lossy(&o.stdout).into_owned()
        } else {
            String::from_utf8_lossy(&o.stderr).into_owned()
        }
    };
    (text(&kernel), text(&ours))
}

#[test]
fn forwarding_off_and_rp_filter_through_xfwd_as_the_kernel() {
    if !xfwd_lab::privileged("forwarding_off_and_rp_filter_through_xfwd_as_the_kernel") {
        return;
    }
    let lab = Lab::unique("fwdsw").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    let xfwd = Xfwd::start(&lab, 'w');
    let (src, dst) = (
        topology::SRC0.ipv4.to_string(),
        topology::DST0.ipv4.to_string(),
    );
    // Forwarding on: the first probes may wait for dst0's neighbour; then all arrive.
    let _ = probe(&lab, &src, &dst, 5);
    let r = probe(&lab, &src, &dst, 200);
    assert_eq!((r.sent, r.unique, r.bad_checksum), (200, 200, 0), "{r:?}");
    assert_eq!(r.ttls, [(63, 200)]);
    assert_eq!(
        r.macs
            .iter()
            .map(|(s, d, _)| (s.clone(), d.clone()))
            .collect::<Vec<_>>(),
        [(topology::FWD1.mac_string(), topology::DST0.mac_string())]
    );

    // Forwarding off on fwd0 only.
    sysctl(&fwd, "ipv4/conf/fwd0/forwarding", "0");
    let query = format!("{dst} from {src} iif fwd0");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (kernel, ours) = route_get(&fwd, &query);
        if ours.contains("No route to host") {
            assert!(kernel.contains("No route to host"), "kernel: {kernel}");
            break;
        }
        assert!(Instant::now() < deadline, "xfwd: {ours}, kernel: {kernel}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let r = probe(&lab, &src, &dst, 100);
    assert_eq!((r.sent, r.unique), (100, 0), "nothing forwarded: {r:?}");
    // The kernel's answer, from xfwd: host unreachable (rate-limited as the kernel's).
    wait_stats(&xfwd, "ICMP host unreachable", |s| {
        pipeline(s, "icmp_sent", "host_unreachable") >= 1
    });
    sysctl(&fwd, "ipv4/conf/fwd0/forwarding", "1");
    std::thread::sleep(Duration::from_millis(300));
    let r = probe(&lab, &src, &dst, 100);
    assert_eq!((r.sent, r.unique), (100, 100), "forwarding again: {r:?}");

    // rp_filter strict on fwd0: src0's address is routed back out of fwd0, 198.18.1.77 out of
    // fwd1 (spoofed).
    sysctl(&fwd, "ipv4/conf/fwd0/rp_filter", "1");
    std::thread::sleep(Duration::from_millis(300));
    let r = probe(&lab, &src, &dst, 100);
    assert_eq!(
        (r.sent, r.unique),
        (100, 100),
        "a valid source passes: {r:?}"
    );
    assert_eq!(r.ttls, [(63, 100)]);
    let r = probe(&lab, "198.18.1.77", &dst, 100);
    assert_eq!(
        (r.sent, r.unique),
        (100, 0),
        "a spoofed source is dropped: {r:?}"
    );
    wait_stats(&xfwd, "rp_filter drops", |s| {
        pipeline(s, "drops", "rp_filter") >= 100
    });
}
