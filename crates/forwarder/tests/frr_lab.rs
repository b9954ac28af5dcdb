//! xfwd under a real control plane (privileged): FRR from Debian (`cargo xtask setup` installs
//! it) runs zebra, staticd and bgpd in the lab's `fwd` namespace; bgpd speakers in `src` and
//! `dst` announce thousands of IPv4 and IPv6 prefixes over eBGP, some from both (ECMP with
//! `maximum-paths`); zebra installs every route through kernel nexthop objects. Static routes of
//! every kind (blackhole, reject, gateway, multipath, recursive) come from staticd. A fourth
//! namespace, `unn`, peers with `fwd` over BGP unnumbered (interface peering over IPv6
//! link-local addresses, RFC 8950 extended next hops; zebra and bgpd on both sides) and
//! announces IPv4 prefixes, which fwd's kernel routes `via inet6 fe80::... dev fwd2`.
//!
//! Checks: the mirror's `route get` (the code `xfwd route get` runs) equals `ip route get` for
//! thousands of addresses (through ECMP groups: both name a member); traffic sent through a
//! running `xfwd` arrives where the kernel sends it; after a peer goes down (zebra replaces the
//! ECMP groups and withdraws routes) and comes back, the mirror equals the kernel again.
//! Daemons are started with their own pid files and stopped by them; the lab's namespaces go
//! also on failure.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netlink_mirror::cli::{RouteGetArgs, route_get};
use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
use xfwd_lab::netns::Netns;
use xfwd_lab::{Lab, LabGuard, Role, topology};

const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");
const FRR: &str = "/usr/lib/frr";

/// Prefixes only `src` announces, only `dst`, and both (ECMP), per family.
const ONLY_V4: u32 = 1200;
const BOTH_V4: u32 = 400;
const ONLY_V6: u32 = 500;
const BOTH_V6: u32 = 200;
/// IPv4 prefixes `unn` announces over the unnumbered session.
const UNNUMBERED_V4: u32 = 300;
/// fwd's link to `unn` and its peer (no IPv4 address on either: link-local IPv6 only).
const FWD2_MAC: [u8; 6] = [0x02, 0x58, 0x46, 0x00, 0x01, 0x02];
const UNN0_MAC: [u8; 6] = [0x02, 0x58, 0x46, 0x00, 0x01, 0x03];

/// The FRR daemons of one namespace, stopped (by their pid files) when dropped.
struct Frr {
    netns: String,
    name: String,
    dir: PathBuf,
    pids: Vec<PathBuf>,
}

impl Frr {
    /// Starts `daemons` (zebra first when listed) in `netns` with `config` (one integrated
    /// file), each under the path space `name` (sockets in /var/run/frr/NAME).
    fn start(netns: &str, name: &str, daemons: &[&str], config: &str) -> Frr {
        let dir = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let run = Path::new("/var/run/frr").join(name);
        std::fs::create_dir_all(&run).unwrap();
        let conf = dir.join("frr.conf");
        std::fs::write(&conf, config).unwrap();
        // The daemons drop to the frr user (their vty sockets belong to group frrvty).
        for path in [&dir, &run] {
            let status = Command::new("chown")
                .args(["-R", "frr:frr"])
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success(), "chown frr {}", path.display());
        }
        let mut frr = Frr {
            netns: netns.to_owned(),
            name: name.to_owned(),
            dir: dir.clone(),
            pids: Vec::new(),
        };
        for daemon in daemons {
            let pid = dir.join(format!("{daemon}.pid"));
            let mut command = Command::new("ip");
            command
                .args(["netns", "exec", netns])
                .arg(Path::new(FRR).join(daemon))
                .args(["-d", "-N", name, "-f"])
                .arg(&conf)
                .arg("-i")
                .arg(&pid)
                .args([
                    "--log",
                    &format!("file:{}", dir.join(format!("{daemon}.log")).display()),
                ]);
            if *daemon == "bgpd" && !daemons.contains(&"zebra") {
                // A speaker without zebra: no RIB to install into.
                command.arg("-Z");
            }
            let out = command.output().unwrap();
            assert!(
                out.status.success(),
                "{daemon} in {netns}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            frr.pids.push(pid);
            if *daemon == "zebra" {
                // The others connect to zebra's socket.
                wait(Duration::from_secs(10), "zebra's socket", || {
                    Path::new("/var/run/frr")
                        .join(name)
                        .join("zserv.api")
                        .exists()
                });
            }
        }
        frr
    }

    fn vtysh(&self, name: &str, commands: &[&str]) -> String {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, "vtysh", "-N", name]);
        for cmd in commands {
            c.args(["-c", cmd]);
        }
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for pid in self.pids.iter().rev() {
            let Ok(text) = std::fs::read_to_string(pid) else {
                continue;
            };
            if let Ok(pid) = text.trim().parse::<i32>() {
                // SIGTERM, then SIGKILL after 5 s: only the daemons this test started.
                let _ = Command::new("kill").arg(pid.to_string()).status();
                let deadline = Instant::now() + Duration::from_secs(5);
                while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            }
        }
        if std::env::var_os("XFWD_KEEP_FRR_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        let _ = std::fs::remove_dir_all(Path::new("/var/run/frr").join(&self.name));
    }
}

fn wait(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn only_src_v4(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 100 + (i / 256) as u8, (i % 256) as u8, 0)
}
fn only_dst_v4(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 120 + (i / 256) as u8, (i % 256) as u8, 0)
}
fn both_v4(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 140 + (i / 256) as u8, (i % 256) as u8, 0)
}
fn unnumbered_v4(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 160 + (i / 256) as u8, (i % 256) as u8, 0)
}
fn only_src_v6(i: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x1000 + i as u16, 0, 0, 0, 0, 0)
}
fn only_dst_v6(i: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x2000 + i as u16, 0, 0, 0, 0, 0)
}
fn both_v6(i: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x3000 + i as u16, 0, 0, 0, 0, 0)
}

/// A speaker's configuration: AS `asn`, peering with fwd at `peer4`/`peer6`, announcing its
/// own prefixes and the shared ones.
fn speaker_config(asn: u32, id: Ipv4Addr, peer4: Ipv4Addr, peer6: Ipv6Addr, own: bool) -> String {
    let mut c = format!(
        "hostname as{asn}\n\
         router bgp {asn}\n\
          bgp router-id {id}\n\
          no bgp ebgp-requires-policy\n\
          no bgp network import-check\n\
          neighbor {peer4} remote-as 65000\n\
          neighbor {peer4} disable-connected-check\n\
          neighbor {peer6} remote-as 65000\n\
          neighbor {peer6} disable-connected-check\n\
          address-family ipv4 unicast\n"
    );
    type Prefixes = (fn(u32) -> Ipv4Addr, fn(u32) -> Ipv6Addr);
    let (v4, v6): Prefixes = if own {
        (only_src_v4, only_src_v6)
    } else {
        (only_dst_v4, only_dst_v6)
    };
    for i in 0..ONLY_V4 {
        let _ = writeln!(c, "  network {}/24", v4(i));
    }
    for i in 0..BOTH_V4 {
        let _ = writeln!(c, "  network {}/24", both_v4(i));
    }
    let _ = write!(
        c,
        "  no neighbor {peer6} activate\n\
         exit-address-family\n\
         address-family ipv6 unicast\n\
          neighbor {peer6} activate\n"
    );
    for i in 0..ONLY_V6 {
        let _ = writeln!(c, "  network {}/48", v6(i));
    }
    for i in 0..BOTH_V6 {
        let _ = writeln!(c, "  network {}/48", both_v6(i));
    }
    c.push_str(" exit-address-family\n");
    c
}

/// The unnumbered speaker's configuration: interface peering on `unn0` (zebra sends the
/// router advertisements that tell each side the other's link-local address), announcing
/// IPv4 prefixes with IPv6 next hops.
fn unnumbered_config() -> String {
    let mut c = String::from(
        "hostname unn\n\
         interface unn0\n\
          ipv6 nd ra-interval 3\n\
          no ipv6 nd suppress-ra\n\
         router bgp 65003\n\
          bgp router-id 10.255.0.3\n\
          no bgp ebgp-requires-policy\n\
          no bgp network import-check\n\
          neighbor unn0 interface remote-as external\n\
          address-family ipv4 unicast\n",
    );
    for i in 0..UNNUMBERED_V4 {
        let _ = writeln!(c, "  network {}/24", unnumbered_v4(i));
    }
    c.push_str(" exit-address-family\n");
    c
}

/// The router's configuration: eBGP to both speakers with multipath, BGP unnumbered to
/// `unn`, static routes of every kind.
fn router_config() -> String {
    let (s4, d4) = (topology::SRC0.ipv4, topology::DST0.ipv4);
    let (s6, d6) = (topology::SRC0.ipv6, topology::DST0.ipv6);
    format!(
        "hostname fwd\n\
         interface fwd2\n\
          ipv6 nd ra-interval 3\n\
          no ipv6 nd suppress-ra\n\
         ip route 192.0.2.0/26 blackhole\n\
         ip route 192.0.2.64/26 reject\n\
         ip route 192.0.2.128/26 {d4}\n\
         ip route 192.0.2.192/26 {d4}\n\
         ip route 192.0.2.192/26 {s4}\n\
         ip route 198.51.100.0/24 10.120.0.1\n\
         ipv6 route 2001:db8:ff00::/48 blackhole\n\
         ipv6 route 2001:db8:ff01::/48 {d6}\n\
         ipv6 route 2001:db8:ff02::/48 {d6}\n\
         ipv6 route 2001:db8:ff02::/48 {s6}\n\
         router bgp 65000\n\
          bgp router-id {f}\n\
          no bgp ebgp-requires-policy\n\
          bgp bestpath as-path multipath-relax\n\
          neighbor {s4} remote-as 65001\n\
          neighbor {d4} remote-as 65002\n\
          neighbor {s6} remote-as 65001\n\
          neighbor {d6} remote-as 65002\n\
          neighbor fwd2 interface remote-as external\n\
          address-family ipv4 unicast\n\
           maximum-paths 4\n\
           no neighbor {s6} activate\n\
           no neighbor {d6} activate\n\
          exit-address-family\n\
          address-family ipv6 unicast\n\
           maximum-paths 4\n\
           neighbor {s6} activate\n\
           neighbor {d6} activate\n\
          exit-address-family\n",
        f = topology::FWD0.ipv4,
    )
}

fn ip_in(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .arg("-n")
        .arg(ns)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bgp_routes(ns: &str) -> (usize, usize) {
    let count = |family: &str| {
        ip_in(ns, &[family, "route", "show", "proto", "bgp"])
            .lines()
            .filter(|l| !l.starts_with(char::is_whitespace))
            .count()
    };
    (count("-4"), count("-6"))
}

/// The addresses to compare: a host in every tenth BGP prefix of each set, the static routes,
/// the links, and addresses no route covers.
fn probe_addresses() -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    let host4 = |p: Ipv4Addr| IpAddr::V4(Ipv4Addr::from(u32::from(p) | 7));
    let host6 = |p: Ipv6Addr| IpAddr::V6(Ipv6Addr::from(u128::from(p) | 0x1234));
    for i in (0..ONLY_V4).step_by(3) {
        out.push(host4(only_src_v4(i)));
        out.push(host4(only_dst_v4(i)));
    }
    for i in (0..BOTH_V4).step_by(2) {
        out.push(host4(both_v4(i)));
    }
    for i in (0..UNNUMBERED_V4).step_by(3) {
        out.push(host4(unnumbered_v4(i)));
    }
    for i in (0..ONLY_V6).step_by(5) {
        out.push(host6(only_src_v6(i)));
        out.push(host6(only_dst_v6(i)));
    }
    for i in (0..BOTH_V6).step_by(4) {
        out.push(host6(both_v6(i)));
    }
    for a in [
        "192.0.2.1",
        "192.0.2.65",
        "192.0.2.129",
        "192.0.2.193",
        "198.51.100.9",
        "198.18.1.2",
        "198.18.0.2",
        "203.0.113.1",
        "2001:db8:ff00::1",
        "2001:db8:ff01::1",
        "2001:db8:ff02::1",
        "2001:db8:0:2::2",
        "2001:db8:4444::1",
    ] {
        out.push(a.parse().unwrap());
    }
    out
}

/// `ip route get` for every address (one `ip -batch`), as lines in order; `Err` text for the
/// ones the kernel refuses.
fn kernel_answers(ns: &str, addrs: &[IpAddr]) -> Vec<Result<String, String>> {
    addrs
        .iter()
        .map(|a| {
            let out = Command::new("ip")
                .args(["-n", ns, "route", "get", &a.to_string()])
                .output()
                .unwrap();
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
            }
        })
        .collect()
}

/// Type, destination, via, dev, table of one `route get` line.
fn fields(line: &str) -> (String, String, String, String) {
    let mut words = line.split_whitespace().peekable();
    let kind = match words.peek() {
        Some(&w) if ["blackhole", "unreachable", "prohibit", "local", "broadcast"].contains(&w) => {
            words.next();
            w.to_owned()
        }
        _ => String::new(),
    };
    let (mut via, mut dev, mut table) = (String::new(), String::new(), String::new());
    while let Some(w) = words.next() {
        match w {
            "via" => {
                via = words.next().unwrap_or_default().to_owned();
                // A gateway of the other family: `via inet6 fe80::1` (RFC 8950).
                if via == "inet6" {
                    via = format!("inet6 {}", words.next().unwrap_or_default());
                }
            }
            "dev" => dev = words.next().unwrap_or_default().to_owned(),
            "table" => table = words.next().unwrap_or_default().to_owned(),
            _ => {}
        }
    }
    (kind, via, dev, table)
}

/// Compares the mirror's answers with the kernel's; through ECMP groups (both peers) the two
/// may name different members, so only membership is compared there. Returns how many were
/// compared.
fn compare(ns: &str, tables: &netlink_mirror::MirroredTables, addrs: &[IpAddr]) -> usize {
    let members: BTreeSet<String> = [
        topology::SRC0.ipv4.to_string(),
        topology::DST0.ipv4.to_string(),
        topology::SRC0.ipv6.to_string(),
        topology::DST0.ipv6.to_string(),
    ]
    .into();
    let kernel = kernel_answers(ns, addrs);
    let mut mismatches = Vec::new();
    for (addr, k) in addrs.iter().zip(kernel) {
        let ours = route_get(
            tables,
            &RouteGetArgs {
                addr: *addr,
                selectors: vec![],
                netns: None,
            },
        )
        .map_err(|e| e.to_string());
        let same = match (&k, &ours) {
            (Ok(k), Ok(o)) => {
                let (kf, of) = (fields(k), fields(o));
                let ecmp = kf.1 != of.1 && members.contains(&kf.1) && members.contains(&of.1);
                // Through a group the route's members are compared by membership only.
                kf == of || (ecmp && kf.0 == of.0 && kf.3 == of.3 && is_ecmp(addr))
            }
            (Err(k), Err(o)) => k.contains(o.as_str()),
            _ => false,
        };
        if !same {
            mismatches.push(format!("{addr}: kernel {k:?}, mirror {ours:?}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ: {:#?}",
        mismatches.len(),
        addrs.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    addrs.len()
}

fn is_ecmp(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            a.octets()[0] == 10 && (140..150).contains(&a.octets()[1])
                || a.octets()[..3] == [192, 0, 2]
        }
        IpAddr::V6(a) => (0x3000..0x4000).contains(&a.segments()[2]) || a.segments()[2] == 0xff02,
    }
}

/// The mirror follows the kernel: compare until equal or `limit`.
fn converge(ns: &str, tables: &netlink_mirror::MirroredTables, addrs: &[IpAddr], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compare(ns, tables, addrs)));
        match result {
            Ok(_) => return,
            Err(e) if Instant::now() > deadline => std::panic::resume_unwind(e),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// A running `xfwd run` in fwd, stopped (SIGTERM, then SIGKILL) when dropped.
struct Xfwd(Child);

impl Drop for Xfwd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    macs: Vec<(String, String, u64)>,
    ttls: Vec<(u8, u64)>,
}

/// Probes from src through fwd to `dst`, captured on dst's `dst0`.
fn probe(lab: &Lab, src: IpAddr, dst: IpAddr, count: u64) -> Report {
    probe_to(lab, src, dst, count, (&lab.netns(Role::Dst), "dst0"))
}

/// Probes from src through fwd to `dst`, captured on `capture` (namespace, interface).
fn probe_to(lab: &Lab, src: IpAddr, dst: IpAddr, count: u64, capture: (&str, &str)) -> Report {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &src.to_string(), "--dst", &dst.to_string()])
        .args(["--to-netns", capture.0, "--capture", capture.1])
        .args(["--count", &count.to_string(), "--rate", "2000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn frr_bgp_and_static_routes_through_nexthop_objects() {
    if !xfwd_lab::privileged("frr_bgp_and_static_routes_through_nexthop_objects") {
        return;
    }
    if !Path::new(FRR).join("zebra").exists() {
        assert!(
            std::env::var("CI").is_ok_and(|v| v != "true") || std::env::var("CI").is_err(),
            "FRR is missing, and CI=true does not allow skipping: run `cargo xtask setup`"
        );
        eprintln!("skipping: FRR is not installed (`cargo xtask setup` installs it)");
        return;
    }
    let lab: LabGuard = Lab::unique("frr").unwrap().up_scoped().unwrap();
    let (src, fwd, dst) = (
        lab.netns(Role::Src),
        lab.netns(Role::Fwd),
        lab.netns(Role::Dst),
    );
    ip_in(&fwd, &["link", "set", "lo", "up"]);
    let tag = lab.prefix().to_owned();
    // The unnumbered peer: its own namespace (deleted when dropped, after its daemons), one
    // link to fwd with link-local IPv6 addresses only.
    let unn = Netns::create(&format!("{tag}-unn")).unwrap();
    unn.add_veth("unn0", UNN0_MAC, &fwd, "fwd2", FWD2_MAC)
        .unwrap();
    unn.ip(["link", "set", "unn0", "up"]).unwrap();
    ip_in(&fwd, &["link", "set", "fwd2", "up"]);
    let started = Instant::now();
    let router = Frr::start(
        &fwd,
        &format!("{tag}-fwd"),
        &["zebra", "staticd", "bgpd"],
        &router_config(),
    );
    let speaker_src = Frr::start(
        &src,
        &format!("{tag}-src"),
        &["bgpd"],
        &speaker_config(
            65001,
            topology::SRC0.ipv4,
            topology::FWD0.ipv4,
            topology::FWD0.ipv6,
            true,
        ),
    );
    let _speaker_dst = Frr::start(
        &dst,
        &format!("{tag}-dst"),
        &["bgpd"],
        &speaker_config(
            65002,
            topology::DST0.ipv4,
            topology::FWD1.ipv4,
            topology::FWD1.ipv6,
            false,
        ),
    );
    let _speaker_unn = Frr::start(
        unn.name(),
        &format!("{tag}-unn"),
        &["zebra", "bgpd"],
        &unnumbered_config(),
    );
    let want = (
        (2 * ONLY_V4 + BOTH_V4 + UNNUMBERED_V4) as usize,
        (2 * ONLY_V6 + BOTH_V6) as usize,
    );
    wait(
        Duration::from_secs(90),
        "BGP routes in fwd's kernel",
        || bgp_routes(&fwd) == want,
    );
    eprintln!(
        "frr: {want:?} BGP routes installed after {:?}",
        started.elapsed()
    );
    let nhids = ip_in(&fwd, &["route", "show", "proto", "bgp"]);
    assert!(
        nhids.contains("nhid"),
        "zebra installs through nexthop objects"
    );

    let mirror = Mirror::start(NetnsSpec::Name(fwd.clone()), MirrorOptions::default()).unwrap();
    mirror.wait_synced(Duration::from_secs(60)).unwrap();
    let addrs = probe_addresses();
    assert!(addrs.len() >= 1000, "{} addresses", addrs.len());
    converge(&fwd, mirror.tables(), &addrs, Duration::from_secs(20));
    let s = mirror.stats();
    assert!(s.errors.is_empty(), "{s:?}");
    assert!(mirror.tables().nexthops.lock().len() >= 2, "{s:?}");
    let ecmp_paths = |v6: bool| {
        let g = crossbeam_epoch::pin();
        let t = mirror.tables();
        let (n, object) = if v6 {
            let r = t
                .fib6
                .lookup(&fib_trie::Flow::to(u128::from(both_v6(0)) | 1), &g);
            let r = r.expect("a v6 ECMP route");
            (r.nexthops().len(), r.alias.info.nh_object.is_some())
        } else {
            let r = t
                .fib4
                .lookup(&fib_trie::Flow::to(u32::from(both_v4(0)) | 1), &g);
            let r = r.expect("a v4 ECMP route");
            (r.nexthops().len(), r.alias.info.nh_object.is_some())
        };
        assert!(object, "through a nexthop object");
        n
    };
    assert_eq!((ecmp_paths(false), ecmp_paths(true)), (2, 2), "ECMP groups");
    // The unnumbered session's IPv4 routes: via an IPv6 link-local gateway on fwd2, mirrored
    // (not handed to the kernel).
    let unnumbered = ip_in(
        &fwd,
        &["route", "show", &format!("{}/24", unnumbered_v4(5))],
    );
    assert!(
        unnumbered.contains("via inet6 fe80::") && unnumbered.contains("dev fwd2"),
        "{unnumbered}"
    );
    {
        let g = crossbeam_epoch::pin();
        let r = mirror
            .tables()
            .fib4
            .lookup(&fib_trie::Flow::to(u32::from(unnumbered_v4(5)) | 1), &g)
            .expect("an unnumbered route");
        assert_eq!(r.route_type(), fib_trie::RouteType::Unicast);
        assert!(
            matches!(
                r.nexthops()[0].gateway,
                Some(fib_trie::Gateway::Inet6(g)) if g >> 118 == 0xfe80 >> 6
            ),
            "{:?}",
            r.nexthops()
        );
    }
    assert!(s.kernel_decides.is_empty(), "{s:?}");

    // Traffic through a running xfwd arrives where the kernel sends it.
    let xfwd = Xfwd(
        Command::new(XFWD)
            .args(["run", "--netns", &fwd, "--iface", "fwd0,fwd1,fwd2"])
            .args(["--control", &format!("/run/xfwd/test-{tag}.sock")])
            .args([
                "--punt-device",
                &format!("q{}", std::process::id() % 100_000),
            ])
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_secs(3));
    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let src6 = IpAddr::V6(topology::SRC0.ipv6);
    for (from, to) in [
        (
            src4,
            IpAddr::V4(Ipv4Addr::from(u32::from(only_dst_v4(7)) | 9)),
        ),
        (
            src6,
            IpAddr::V6(Ipv6Addr::from(u128::from(only_dst_v6(3)) | 9)),
        ),
        (src4, "192.0.2.130".parse().unwrap()),
    ] {
        let kernel = ip_in(&fwd, &["route", "get", &to.to_string()]);
        assert!(kernel.contains("dev fwd1"), "{to}: {kernel}");
        // The first probes may wait for the neighbour; the rest must all arrive, routed.
        let mut report = probe(&lab, from, to, 200);
        if report.unique < 200 {
            report = probe(&lab, from, to, 200);
        }
        assert_eq!((report.sent, report.unique), (200, 200), "{to}: {report:?}");
        assert_eq!(report.ttls, [(63, 200)], "{to}: routed, not bridged");
    }
    // Over the unnumbered session: out of fwd2 to unn0's MAC (the IPv6 neighbour's).
    let to = IpAddr::V4(Ipv4Addr::from(u32::from(unnumbered_v4(7)) | 9));
    let kernel = ip_in(&fwd, &["route", "get", &to.to_string()]);
    assert!(kernel.contains("via inet6 fe80::"), "{to}: {kernel}");
    let mut report = probe_to(&lab, src4, to, 200, (unn.name(), "unn0"));
    if report.unique < 200 {
        report = probe_to(&lab, src4, to, 200, (unn.name(), "unn0"));
    }
    assert_eq!((report.sent, report.unique), (200, 200), "{to}: {report:?}");
    assert_eq!(report.ttls, [(63, 200)], "{to}: routed by xfwd");
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    assert_eq!(
        report
            .macs
            .iter()
            .map(|(s, d, _)| (s.clone(), d.clone()))
            .collect::<Vec<_>>(),
        [(mac(FWD2_MAC), mac(UNN0_MAC))],
        "{to}: fwd2 to unn0"
    );
    drop(xfwd);

    // A peer goes down: zebra withdraws its routes and replaces the ECMP groups (one
    // nexthop-group change for hundreds of routes); then it comes back.
    let name = format!("{tag}-src");
    speaker_src.vtysh(
        &name,
        &[
            "configure terminal",
            "router bgp 65001",
            &format!("neighbor {} shutdown", topology::FWD0.ipv4),
            &format!("neighbor {} shutdown", topology::FWD0.ipv6),
        ],
    );
    wait(Duration::from_secs(60), "src's routes withdrawn", || {
        bgp_routes(&fwd)
            == (
                (ONLY_V4 + BOTH_V4 + UNNUMBERED_V4) as usize,
                (ONLY_V6 + BOTH_V6) as usize,
            )
    });
    converge(&fwd, mirror.tables(), &addrs, Duration::from_secs(20));
    assert_eq!(
        (ecmp_paths(false), ecmp_paths(true)),
        (1, 1),
        "groups shrunk"
    );
    speaker_src.vtysh(
        &name,
        &[
            "configure terminal",
            "router bgp 65001",
            &format!("no neighbor {} shutdown", topology::FWD0.ipv4),
            &format!("no neighbor {} shutdown", topology::FWD0.ipv6),
        ],
    );
    wait(Duration::from_secs(90), "src's routes back", || {
        bgp_routes(&fwd) == want
    });
    converge(&fwd, mirror.tables(), &addrs, Duration::from_secs(20));
    let s = mirror.stats();
    assert!(s.errors.is_empty(), "{s:?}");
    eprintln!(
        "frr: {} addresses equal after start, peer down and up; {:?} in all; mirror {s:?}",
        addrs.len(),
        started.elapsed()
    );
    drop(router);
}
