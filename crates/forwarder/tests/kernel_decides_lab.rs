//! Fail closed through a running xfwd (privileged): what the mirror cannot represent is handed
//! to the kernel, which forwards it as its own tables say, instead of xfwd answering from a
//! less specific route. In the lab's `fwd`, each destination below has a blackhole route in
//! the main table, which is what xfwd would follow if it passed over what it cannot
//! represent:
//!
//! - IPv4: a policy rule on the IP protocol (`ipproto udp lookup 100`, a selector the FIB
//!   does not model) sends UDP to table 100, whose route leads to `dst`;
//! - IPv6: a source-specific route (`from` `src`'s prefix) leads to `dst`.
//!
//! Probes from `src` must all arrive in `dst` with TTL 63 (decremented once, by the kernel),
//! counted as `kernel_route` punts, and `xfwd stats` must count the stand-ins by kind.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{ProbeReport as Report, XFWD, Xfwd, ip};

/// 200 probes from `src` to `dst_addr`, captured on dst0.
fn probe(lab: &Lab, src: IpAddr, dst_addr: &str) -> Report {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &src.to_string(), "--dst", dst_addr])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
        .args(["--count", "200", "--rate", "1000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Waits until xfwd has counted at least `n` punts of `reason`.
fn wait_punts(xfwd: &Xfwd, reason: &str, n: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if common::pipeline(&stats, "punts", reason) >= n {
            return stats;
        }
        assert!(Instant::now() < deadline, "{stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn what_the_mirror_cannot_represent_is_forwarded_by_the_kernel() {
    if !xfwd_lab::privileged("what_the_mirror_cannot_represent_is_forwarded_by_the_kernel") {
        return;
    }
    let lab = Lab::unique("kdec").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    let dst0_v4 = topology::DST0.ipv4.to_string();
    let dst0_v6 = topology::DST0.ipv6.to_string();
    // IPv4: only a rule the FIB cannot model leads to dst.
    ip(&fwd, "route add blackhole 198.51.100.0/24");
    ip(
        &fwd,
        &format!("route add 198.51.100.0/24 via {dst0_v4} dev fwd1 table 100"),
    );
    ip(&fwd, "rule add pref 100 ipproto udp lookup 100");
    // IPv6: only a source-specific route does.
    ip(&fwd, "-6 route add blackhole 2001:db8:99::/48");
    ip(
        &fwd,
        &format!("-6 route add 2001:db8:99::/64 from 2001:db8:0:1::/64 via {dst0_v6} dev fwd1"),
    );
    // The kernel forwards what xfwd hands it: it must know dst0 (IPv4 and IPv6) first, or the
    // probes wait in its own neighbour queue (and, while fwd1's link-local address is still
    // tentative, it sends no neighbour solicitation at all) and outlast their capture.
    common::resolve_dst(&fwd);
    let xfwd = Xfwd::start(&lab, 'k');
    let text = String::from_utf8_lossy(&xfwd.ask(&["show", "rules"]).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l == "100:\tfrom all kernel-decides rule"),
        "{text}"
    );

    let report = probe(&lab, IpAddr::V4(topology::SRC0.ipv4), "198.51.100.7");
    assert_eq!((report.sent, report.unique), (200, 200), "{report:?}");
    assert_eq!(report.ttls, [(63, 200)], "decremented once, by the kernel");
    let stats = wait_punts(&xfwd, "kernel_route", 200);

    let report = probe(&lab, IpAddr::V6(topology::SRC0.ipv6), "2001:db8:99::7");
    assert_eq!((report.sent, report.unique), (200, 200), "{report:?}");
    assert_eq!(report.ttls, [(63, 200)], "decremented once, by the kernel");
    let stats_after = wait_punts(&xfwd, "kernel_route", 400);
    // Both kinds are counted in `xfwd stats` (a gauge of the mirror's stand-ins).
    let text = String::from_utf8_lossy(&xfwd.ask(&["stats"]).stdout).into_owned();
    for kind in ["rule-ipproto", "source-specific"] {
        assert!(
            text.contains(kind),
            "{kind} not in\n{text}\n{stats:#}\n{stats_after:#}"
        );
    }
}
