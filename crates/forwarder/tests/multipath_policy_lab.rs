//! The multipath hash policy through a running `xfwd` (privileged): in the lab's `fwd`, a
//! two-member multipath route to `dst` (both members via dst0, so whichever the kernel or
//! xfwd picks, the probes must arrive). With `net.ipv4.fib_multipath_hash_seed` set, xfwd
//! cannot reproduce the kernel's choice: every probe goes to the kernel (punt
//! `multipath_hash`), which forwards it (TTL 63). With the seed back to 0 (policy 0 followed),
//! xfwd forwards them itself and punts none.

use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{XFWD, Xfwd, pipeline, sysctl};

#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    ttls: Vec<(u8, u64)>,
}

fn probe(lab: &Lab, count: u64) -> Report {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args([
            "--src",
            &topology::SRC0.ipv4.to_string(),
            "--dst",
            "198.51.100.7",
        ])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
        .args(["--count", &count.to_string(), "--rate", "1000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Waits until `ok` holds for xfwd's stats.
fn wait(xfwd: &Xfwd, what: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if ok(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "{what}: {stats:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_unfollowed_multipath_hash_leaves_ecmp_to_the_kernel() {
    if !xfwd_lab::privileged("an_unfollowed_multipath_hash_leaves_ecmp_to_the_kernel") {
        return;
    }
    let seed = "/proc/sys/net/ipv4/fib_multipath_hash_seed";
    if !std::path::Path::new(seed).exists() {
        // Kernels before 6.11 have no seed; policy 2 is the unfollowed case there.
        eprintln!("no {seed}: this kernel has no multipath hash seed");
    }
    let lab = Lab::unique("mphash").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    let gw = topology::DST0.ipv4.to_string();
    let out = Command::new("ip")
        .args(["-n", &fwd, "route", "add", "198.51.100.0/24"])
        .args(["nexthop", "via", &gw, "dev", "fwd1"])
        .args(["nexthop", "via", &gw, "dev", "fwd1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (unfollowed, value) = if std::path::Path::new(seed).exists() {
        ("ipv4/fib_multipath_hash_seed", "77")
    } else {
        ("ipv4/fib_multipath_hash_policy", "2")
    };
    sysctl(&fwd, unfollowed, value);
    let xfwd = Xfwd::start(&lab, 'm');

    // Unfollowed: the kernel forwards every probe.
    let report = probe(&lab, 200);
    assert_eq!((report.sent, report.unique), (200, 200), "{report:?}");
    assert_eq!(report.ttls, [(63, 200)], "{report:?}");
    let stats = wait(&xfwd, "punted", |s| {
        pipeline(s, "punts", "multipath_hash") >= 200
    });
    let transmitted = pipeline(&stats, "verdicts", "transmit");

    // Followed again (read within a second): xfwd forwards them, none punted.
    sysctl(&fwd, unfollowed, "0");
    std::thread::sleep(Duration::from_millis(1500));
    let punted = pipeline(&xfwd.stats().unwrap(), "punts", "multipath_hash");
    let report = probe(&lab, 200);
    assert_eq!((report.sent, report.unique), (200, 200), "{report:?}");
    assert_eq!(report.ttls, [(63, 200)], "{report:?}");
    let stats = wait(&xfwd, "forwarded by xfwd", |s| {
        pipeline(s, "verdicts", "transmit") >= transmitted + 200
    });
    assert_eq!(
        pipeline(&stats, "punts", "multipath_hash"),
        punted,
        "{stats:#}"
    );
}
