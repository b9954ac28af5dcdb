//! IPv4 routes through IPv6 next hops (RFC 8950, as BGP unnumbered installs them) through a
//! running `xfwd` (privileged): in the lab's `fwd`, `ip route add ... via inet6 LL dev fwd1`
//! (dst0's link-local address) and `... via inet6 GLOBAL dev fwd1` (dst0's global IPv6
//! address). `xfwd route get` must print what `ip route get` prints; IPv4 probes from `src`
//! must arrive at dst0 with fwd1's and dst0's MACs and TTL 63, also when fwd's kernel has no
//! IPv6 neighbour entry yet (the frames wait in the hold buffer, xfwd asks the kernel to
//! resolve the IPv6 neighbour, ND runs, and they leave).

use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{XFWD, Xfwd, ip, pipeline};

#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    bad_checksum: u64,
    macs: Vec<(String, String, u64)>,
    ttls: Vec<(u8, u64)>,
}

fn probe(lab: &Lab, dst: &str, count: u64) -> Report {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &topology::SRC0.ipv4.to_string(), "--dst", dst])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
        .args(["--count", &count.to_string(), "--rate", "1000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Every probe arrived once, valid, from fwd1 to dst0, TTL decremented once by xfwd.
fn assert_arrived(report: &Report, count: u64) {
    assert_eq!(
        (report.sent, report.unique, report.bad_checksum),
        (count, count, 0),
        "{report:?}"
    );
    let macs: Vec<_> = report
        .macs
        .iter()
        .map(|(s, d, _)| (s.clone(), d.clone()))
        .collect();
    assert_eq!(
        macs,
        [(topology::FWD1.mac_string(), topology::DST0.mac_string())],
        "fwd1 to dst0"
    );
    assert_eq!(report.ttls, [(63, count)], "decremented once, by xfwd");
}

fn punts(stats: &serde_json::Value) -> u64 {
    stats["pipeline"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q["punts"].as_array().unwrap().iter())
        .map(|pair| pair[1].as_u64().unwrap())
        .sum()
}

/// The words of the first line of a `route get` answer, without `uid N` (the kernel's
/// answer names the asking user; xfwd's does not).
fn route_words(answer: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut it = answer.lines().next().unwrap_or_default().split_whitespace();
    while let Some(w) = it.next() {
        if w == "uid" {
            it.next();
            continue;
        }
        words.push(w.to_owned());
    }
    words
}

/// The link-local address of `dev` in `ns`, once duplicate address detection is done.
fn link_local(ns: &str, dev: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ip(ns, &format!("-6 addr show dev {dev} scope link"));
        if let Some(line) = out
            .lines()
            .find(|l| l.contains("inet6 fe80") && !l.contains("tentative"))
        {
            let cidr = line.split_whitespace().nth(1).unwrap();
            return cidr.split('/').next().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no link-local on {dev}: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ipv4_via_ipv6_next_hops_through_xfwd_with_nd_resolution() {
    if !xfwd_lab::privileged("ipv4_via_ipv6_next_hops_through_xfwd_with_nd_resolution") {
        return;
    }
    let lab = Lab::unique("via6").unwrap().up_scoped().unwrap();
    let (fwd, dst) = (lab.netns(Role::Fwd), lab.netns(Role::Dst));
    let ll = link_local(&dst, "dst0");
    // The kernel sends no neighbour solicitation while the egress device's own link-local
    // address is tentative (`ndisc_solicit` needs a usable source), so resolution would
    // wait for DAD (about a second) and the first probes would outlast their capture.
    link_local(&fwd, "fwd1");
    let global = topology::DST0.ipv6.to_string();
    ip(
        &fwd,
        &format!("route add 198.51.100.0/24 via inet6 {ll} dev fwd1 proto bgp"),
    );
    ip(
        &fwd,
        &format!("route add 203.0.113.0/24 via inet6 {global} dev fwd1"),
    );
    let xfwd = Xfwd::start(&lab, 'v');

    // `xfwd route get` equals `ip route get`: `via inet6 ADDR dev fwd1 src ...`.
    for (addr, via) in [("198.51.100.7", &ll), ("203.0.113.9", &global)] {
        let kernel = ip(&fwd, &format!("route get {addr}"));
        let out = Command::new(XFWD)
            .args(["route", "get", addr, "--netns", &fwd])
            .output()
            .unwrap();
        let ours = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "xfwd route get {addr}: {ours}");
        assert_eq!(
            route_words(&ours),
            route_words(&kernel),
            "xfwd {ours:?}, kernel {kernel:?}"
        );
        assert!(
            ours.contains(&format!("via inet6 {via} dev fwd1")),
            "{ours}"
        );
    }

    // No IPv6 neighbour entry for either gateway in fwd's kernel: the first frames wait, xfwd
    // asks for resolution, ND runs, the frames leave.
    for gw in [&ll, &global] {
        let _ = Command::new("ip")
            .args(["-n", &fwd, "-6", "neigh", "del", gw, "dev", "fwd1"])
            .output();
    }
    let before = xfwd.stats().unwrap();
    let held_before = pipeline(&before, "events", "held_released");
    for gw in [&ll, &global] {
        let n = ip(&fwd, &format!("-6 neigh show {gw} dev fwd1"));
        assert!(
            !n.contains("REACHABLE") && !n.contains("STALE") && !n.contains("DELAY"),
            "{gw} already resolved: {n}"
        );
    }
    assert_arrived(&probe(&lab, "198.51.100.7", 3), 3);
    assert_arrived(&probe(&lab, "203.0.113.9", 3), 3);
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let stats = xfwd.stats().unwrap();
        if pipeline(&stats, "events", "held_released") >= held_before + 2 {
            break stats;
        }
        assert!(Instant::now() < deadline, "{stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(pipeline(&stats, "events", "resolutions") >= 2, "{stats:#}");
    for gw in [&ll, &global] {
        let n = ip(&fwd, &format!("-6 neigh show {gw} dev fwd1"));
        assert!(n.contains(&topology::DST0.mac_string()), "{gw}: {n}");
    }

    // Resolved: a stream goes straight through xfwd, none of it to the kernel.
    let punted = punts(&stats);
    assert_arrived(&probe(&lab, "198.51.100.7", 500), 500);
    assert_arrived(&probe(&lab, "203.0.113.9", 500), 500);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if pipeline(&stats, "verdicts", "transmit") >= 1000 {
            assert_eq!(punts(&stats), punted, "nothing punted: {stats:#}");
            break;
        }
        assert!(Instant::now() < deadline, "{stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
