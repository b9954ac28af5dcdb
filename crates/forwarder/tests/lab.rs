//! Privileged tests of the `xfwd` binary on the virtual lab (each test its own lab):
//! forwarding (one queue, and two run loops on two-queue veths), what the kernel keeps (ARP,
//! ND, local addresses), lifecycle (SIGTERM, SIGKILL, failed start-up, link down/up, interface
//! removal).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, LabGuard, Role, topology};

mod common;
use common::{XFWD, Xfwd, ip, pipeline, resolve_dst};

/// `xfwd run --bare` on fwd0 and fwd1 (frames cross between them, MACs from `--peer-mac`),
/// with `extra` arguments.
fn start_bare(lab: &Lab, extra: &[&str]) -> Xfwd {
    let peers = format!(
        "fwd0={},fwd1={}",
        topology::SRC0.mac_string(),
        topology::DST0.mac_string()
    );
    let mut args = vec!["--bare", "--peer-mac", &peers];
    args.extend_from_slice(extra);
    spawn(lab, &args)
}

/// Routing mode (the default): the dataplane over the netlink mirror of fwd.
fn start_routing(lab: &Lab) -> Xfwd {
    spawn(lab, &[])
}

/// `xfwd run` on fwd0 and fwd1 with `extra` arguments, answering.
fn spawn(lab: &Lab, extra: &[&str]) -> Xfwd {
    let (mut command, control) = Xfwd::command(lab, "fwd0,fwd1", 'p');
    command.args(extra);
    Xfwd::spawn(command, control)
}

/// `xfwd run --netns <fwd> --iface <ifaces>`, to be completed by the caller.
fn run_in_fwd(lab: &Lab, ifaces: &str) -> Command {
    let mut command = Command::new(XFWD);
    command.args(["run", "--netns", &lab.netns(Role::Fwd), "--iface", ifaces]);
    command
}

fn lab(tag: &str) -> LabGuard {
    Lab::unique(tag)
        .unwrap()
        .with_extra_prefixes(4, 24)
        .unwrap()
        .up_scoped()
        .unwrap()
}

#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    bad_checksum: u64,
    macs: Vec<(String, String, u64)>,
    ttls: Vec<(u8, u64)>,
}

/// `xfwd probe` from src0 through fwd0 to `dst`, captured on dst0, as JSON; the caller adds
/// the count and rate.
fn probe_command(lab: &Lab, src: IpAddr, dst: IpAddr) -> Command {
    let mut command = Command::new(XFWD);
    command
        .args([
            "probe",
            "--json",
            "--from-netns",
            &lab.netns(Role::Src),
            "--iface",
            "src0",
        ])
        .args(["--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &src.to_string(), "--dst", &dst.to_string()])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"]);
    command
}

fn probe(lab: &Lab, src: IpAddr, dst: IpAddr, count: u64) -> Report {
    let out = probe_command(lab, src, dst)
        .args(["--count", &count.to_string(), "--rate", "5000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn xdp_attached(lab: &Lab) -> bool {
    let out = Command::new("ip")
        .args(["-n", &lab.netns(Role::Fwd), "-d", "link", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn v4_target() -> IpAddr {
    IpAddr::from([198, 18, 2, 1])
}

fn v6_target() -> IpAddr {
    "2001:db8:1::1".parse().unwrap()
}

/// Every probe arrived once, with valid checksums, from fwd1 to dst0, with TTL `ttl`.
fn assert_arrived(report: &Report, count: u64, ttl: u8) {
    assert_eq!(report.sent, count);
    assert_eq!(report.unique, count, "every probe arrives: {report:?}");
    assert_eq!(report.bad_checksum, 0, "checksums valid: {report:?}");
    assert_eq!(
        report
            .macs
            .iter()
            .map(|(s, d, _)| (s.as_str(), d.as_str()))
            .collect::<Vec<_>>(),
        [(
            topology::FWD1.mac_string().as_str(),
            topology::DST0.mac_string().as_str()
        )],
        "source = fwd1, destination = dst0"
    );
    assert_eq!(report.ttls, [(ttl, count)], "TTL / hop limit");
}

/// Bare mode: MACs rewritten, TTL left alone.
fn assert_forwarded(report: &Report, count: u64) {
    assert_arrived(report, count, 64);
}

#[test]
fn bare_forwarding_v4_v6_then_sigterm_detaches() {
    if !xfwd_lab::privileged("bare_forwarding_v4_v6_then_sigterm_detaches") {
        return;
    }
    let lab = lab("fwdb");
    let mut xfwd = start_bare(&lab, &[]);
    assert!(xdp_attached(&lab));
    assert_forwarded(
        &probe(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target(), 2000),
        2000,
    );
    assert_forwarded(
        &probe(&lab, IpAddr::V6(topology::SRC0.ipv6), v6_target(), 500),
        500,
    );
    let stats = xfwd.stats().unwrap();
    let rx: u64 = stats["queues"][0]["ports"][0]["rx_packets"]
        .as_u64()
        .unwrap();
    assert!(rx >= 2500, "xfwd counted {rx} frames on fwd0");
    let stats = assert_counted_once(&xfwd);
    assert!(
        pipeline(&stats, "verdicts", "transmit") >= 2500,
        "{stats:#}"
    );
    let status = xfwd.signal("-TERM");
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(!xdp_attached(&lab), "no XDP program after SIGTERM");
    assert!(!xfwd.control.exists(), "control socket removed");
}

/// Far more frames than one UMEM holds (8,192 chunks: each port's fill ring and twice its TX
/// ring) go through the bare engine, so every chunk is received, sent, completed and given to
/// the kernel again several times; a chunk lost on that round (a completion not returned to a
/// fill ring) stalls forwarding after a ring's worth of frames.
#[test]
fn bare_forwards_several_umems_worth_of_frames() {
    if !xfwd_lab::privileged("bare_forwards_several_umems_worth_of_frames") {
        return;
    }
    let lab = lab("fwdumem");
    let xfwd = start_bare(&lab, &[]);
    let count = 30_000;
    let out = probe_command(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target())
        .args(["--count", &count.to_string(), "--rate", "5000"])
        .output()
        .unwrap();
    let report: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let stats = xfwd.stats().unwrap();
    assert_eq!(
        report.unique, count,
        "every probe arrives: {report:?}; the run loop: {:#}",
        stats["queues"]
    );
    assert_forwarded(&report, count);
    let stats = assert_counted_once(&xfwd);
    assert!(
        pipeline(&stats, "verdicts", "transmit") >= count,
        "{stats:#}"
    );
}

/// Sends one UDP datagram from src's kernel stack to `to`, received by a socket in fwd.
fn local_datagram(lab: &Lab, to: SocketAddr) -> Result<Vec<u8>, String> {
    let listener = xfwd_lab::netns::run_in(&lab.netns(Role::Fwd), || UdpSocket::bind(to))
        .unwrap()
        .map_err(|e| e.to_string())?;
    listener
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .unwrap();
    let sender = xfwd_lab::netns::run_in(&lab.netns(Role::Src), || UdpSocket::bind(any))
        .unwrap()
        .unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..20 {
        sender.send_to(b"to the forwarder itself", to).unwrap();
        if let Ok(n) = listener.recv(&mut buf) {
            return Ok(buf[..n].to_vec());
        }
    }
    Err(format!("nothing arrived at {to}"))
}

#[test]
fn kernel_keeps_arp_nd_and_local_addresses() {
    if !xfwd_lab::privileged("kernel_keeps_arp_nd_and_local_addresses") {
        return;
    }
    let lab = lab("fwdk");
    let xfwd = start_bare(&lab, &[]);
    // Neighbour resolution from src (ARP, ND) and delivery to fwd's own addresses both need
    // the XDP program to pass them to the kernel.
    for addr in [
        IpAddr::V4(topology::FWD0.ipv4),
        IpAddr::V6(topology::FWD0.ipv6),
    ] {
        let got = local_datagram(&lab, SocketAddr::new(addr, 47_333)).unwrap();
        assert_eq!(got, b"to the forwarder itself");
    }
    let neigh = Command::new("ip")
        .args(["-n", &lab.netns(Role::Src), "neigh", "show", "dev", "src0"])
        .output()
        .unwrap();
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(
        neigh.matches(&topology::FWD0.mac_string()).count() >= 2,
        "src resolved fwd0 over ARP and ND: {neigh}"
    );
    let stats = xfwd.stats().unwrap();
    let xdp: Vec<(String, u64)> = serde_json::from_value(stats["xdp"].clone()).unwrap();
    let get = |k: &str| xdp.iter().find(|(n, _)| n == k).map_or(0, |x| x.1);
    assert!(get("pass_arp") >= 1, "{xdp:?}");
    // Neighbour solicitations go to a solicited-node multicast MAC and are counted as
    // multicast; unicast ND (reachability probes) as pass_nd.
    assert!(get("pass_nd") + get("pass_multicast") >= 1, "{xdp:?}");
    assert!(get("pass_local") >= 2, "{xdp:?}");
    assert!(stats["local_addresses"].as_u64().unwrap() >= 4);
}

#[test]
fn sigkill_leaves_nothing_and_the_next_start_works() {
    if !xfwd_lab::privileged("sigkill_leaves_nothing_and_the_next_start_works") {
        return;
    }
    let lab = lab("fwdkill");
    let mut xfwd = start_bare(&lab, &[]);
    let status = xfwd.signal("-KILL");
    assert!(!status.success());
    // The program hangs on BPF links, which die with the process.
    let deadline = Instant::now() + Duration::from_secs(5);
    while xdp_attached(&lab) {
        assert!(Instant::now() < deadline, "XDP program left after SIGKILL");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        xfwd.control.exists(),
        "the stale control socket file stays behind"
    );
    let again = start_bare(&lab, &[]);
    assert_forwarded(
        &probe(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target(), 500),
        500,
    );
    drop(again);
}

#[test]
fn failed_start_up_leaves_nothing() {
    if !xfwd_lab::privileged("failed_start_up_leaves_nothing") {
        return;
    }
    let lab = lab("fwdfail");
    let control = format!("/run/xfwd/test-fail-{}.sock", lab.prefix());
    let out = run_in_fwd(&lab, "fwd0,nosuch0")
        .arg("--bare")
        .args([
            "--peer-mac",
            "fwd0=02:00:00:00:00:01,nosuch0=02:00:00:00:00:02",
        ])
        .args(["--control", &control])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nosuch0"), "{stderr}");
    assert!(!xdp_attached(&lab));
    assert!(!Path::new(&control).exists());
    // A second instance on the same interfaces fails and leaves the first one working.
    let first = start_bare(&lab, &[]);
    let second = run_in_fwd(&lab, "fwd0,fwd1")
        .arg("--bare")
        .args([
            "--peer-mac",
            "fwd0=02:00:00:00:00:01,fwd1=02:00:00:00:00:02",
        ])
        .args(["--control", &control, "--no-punt"])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(!Path::new(&control).exists());
    assert_forwarded(
        &probe(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target(), 300),
        300,
    );
    drop(first);
    // A bad configuration is a usage error (64) listing every problem.
    let usage = Command::new(XFWD)
        .args(["run", "--iface", "a,a", "--queues", "0"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(64));
    let text = String::from_utf8_lossy(&usage.stderr);
    assert!(
        text.contains("listed twice") && text.contains("queues = 0"),
        "{text}"
    );
}

fn wait_for_up(xfwd: &Xfwd, index: usize, up: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = xfwd.stats();
        if stats.is_some_and(|s| s["up"][index].as_bool() == Some(up)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {index} never became up={up}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn link_down_up_and_interface_removal() {
    if !xfwd_lab::privileged("link_down_up_and_interface_removal") {
        return;
    }
    let lab = lab("fwdlink");
    let mut xfwd = start_bare(&lab, &[]);
    let fwd = lab.netns(Role::Fwd);
    let ip = |args: &[&str]| {
        let status = Command::new("ip")
            .args(["-n", &fwd])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "ip {args:?}");
    };
    ip(&["link", "set", "fwd1", "down"]);
    wait_for_up(&xfwd, 1, false);
    let lost = probe(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target(), 200);
    assert_eq!(lost.unique, 0, "nothing leaves through a down link");
    let stats = xfwd.stats().unwrap();
    let egress_down = stats["queues"][0]["drops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "egress_down")
        .and_then(|pair| pair[1].as_u64())
        .unwrap();
    assert!(egress_down > 0, "{stats:#}");
    ip(&["link", "set", "fwd1", "up"]);
    wait_for_up(&xfwd, 1, true);
    // Carrier returns a moment after the administrative state.
    std::thread::sleep(Duration::from_millis(300));
    assert_forwarded(
        &probe(&lab, IpAddr::V4(topology::SRC0.ipv4), v4_target(), 300),
        300,
    );

    ip(&["link", "del", "fwd1"]);
    wait_for_up(&xfwd, 1, false);
    assert!(
        xfwd.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "still running"
    );
    let status = xfwd.signal("-TERM");
    assert!(status.success(), "{status}");
    assert!(!xdp_attached(&lab));
}

// ---------------------------------------------------------------------------------------------
// Routing mode: the dataplane pipeline over the netlink mirror of fwd.

/// The egress veth deleted and created again under the same name (a new ifindex): xfwd keeps
/// running, reopens its sockets on it and forwards again, without a restart.
#[test]
fn routing_serves_a_re_created_egress_interface() {
    if !xfwd_lab::privileged("routing_serves_a_re_created_egress_interface") {
        return;
    }
    let lab = lab("fwdrecr");
    let mut xfwd = start_routing(&lab);
    resolve_dst(&lab.netns(Role::Fwd));
    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let src6 = IpAddr::V6(topology::SRC0.ipv6);
    assert_routed(&probe(&lab, src4, v4_target(), 300), 300);
    let fwd = lab.netns(Role::Fwd);
    for round in 0..2 {
        ip(&fwd, "link del fwd1");
        wait_for_up(&xfwd, 1, false);
        lab.recreate_link(1).unwrap();
        wait_for_up(&xfwd, 1, true);
        resolve_dst(&lab.netns(Role::Fwd));
        assert_routed(&probe(&lab, src4, v4_target(), 300), 300);
        assert_routed(&probe(&lab, src6, v6_target(), 300), 300);
        assert!(
            xfwd.child.as_mut().unwrap().try_wait().unwrap().is_none(),
            "still running after round {round}"
        );
    }
    let stats = xfwd.stats().unwrap();
    assert!(
        pipeline(&stats, "verdicts", "transmit") >= 1500,
        "{stats:#}"
    );
    assert_counted_once(&xfwd);
    let status = xfwd.signal("-TERM");
    assert!(status.success(), "{status}");
    assert!(!xdp_attached(&lab));
}

/// A raw ICMP (v4) or ICMPv6 socket in namespace `ns` that sees every ICMP message arriving
/// there.
fn icmp_listener(ns: &str, v6: bool) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    xfwd_lab::netns::run_in(ns, move || {
        let (family, proto) = if v6 {
            (libc::AF_INET6, libc::IPPROTO_ICMPV6)
        } else {
            (libc::AF_INET, libc::IPPROTO_ICMP)
        };
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe { libc::socket(family, libc::SOCK_RAW, proto) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: setsockopt reads one timeval of the size passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
    })
    .unwrap()
}

/// The ICMP messages (type, code, source address, checksum valid) the listener got within
/// `wait`. IPv4 raw sockets get the IP header (its source, and the ICMP checksum is checked
/// here); ICMPv6 raw sockets get the message alone (the kernel checks its checksum).
fn icmp_received(
    fd: &std::os::fd::OwnedFd,
    v6: bool,
    wait: Duration,
) -> Vec<(u8, u8, IpAddr, bool)> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    while Instant::now() < deadline {
        let mut buf = [0u8; 2048];
        // SAFETY: sockaddr_storage is plain data, big enough for any address.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut from_len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `buf` and `from` are writable for the lengths passed.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&raw mut from).cast(),
                &mut from_len,
            )
        };
        if n <= 0 {
            continue;
        }
        let msg = &buf[..n as usize];
        if v6 {
            // SAFETY: the kernel filled a sockaddr_in6 for an AF_INET6 socket.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read((&raw const from).cast()) };
            let src = IpAddr::from(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr));
            out.push((msg[0], msg[1], src, true));
        } else {
            let ihl = usize::from(msg[0] & 0xf) * 4;
            let src = IpAddr::from([msg[12], msg[13], msg[14], msg[15]]);
            let icmp = &msg[ihl..];
            out.push((icmp[0], icmp[1], src, ones_complement_sum(icmp) == 0xffff));
        }
    }
    out
}

fn probe_ttl(lab: &Lab, src: IpAddr, dst: IpAddr, ttl: u8, count: u64) {
    let out = probe_command(lab, src, dst)
        .args([
            "--count",
            &count.to_string(),
            "--rate",
            "100",
            "--linger-ms",
            "100",
        ])
        .args(["--ttl", &ttl.to_string()])
        .output()
        .unwrap();
    assert!(
        !out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Routing mode: MACs rewritten, TTL / hop limit decremented.
fn assert_routed(report: &Report, count: u64) {
    assert_arrived(report, count, 63);
}

fn pipeline_group(stats: &serde_json::Value, group: &str) -> Vec<serde_json::Value> {
    stats["pipeline"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q[group].as_array().unwrap().clone())
        .collect()
}

/// Waits until the published pipeline counters satisfy `ok` (they are published every 100 ms).
fn wait_stats(
    xfwd: &Xfwd,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
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

/// Every frame the loops received is counted once by the engine: per queue, the pipeline's
/// `rx` equals the sum of its verdicts and the frames its ports received, and every drop and
/// punt is counted under exactly one reason. Waits for the engines' next publication.
fn assert_counted_once(xfwd: &Xfwd) -> serde_json::Value {
    wait_stats(xfwd, "each frame counted once", |s| {
        s["pipeline"]
            .as_array()
            .unwrap()
            .iter()
            .zip(s["queues"].as_array().unwrap())
            .all(|(p, q)| {
                let sum = |group: &str, skip: &str| -> u64 {
                    p[group]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|pair| pair[0] != skip)
                        .map(|pair| pair[1].as_u64().unwrap())
                        .sum()
                };
                let verdict = |name: &str| {
                    p["verdicts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|pair| pair[0] == name)
                        .and_then(|pair| pair[1].as_u64())
                        .unwrap()
                };
                let received: u64 = q["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|port| port["rx_packets"].as_u64().unwrap())
                    .sum();
                verdict("rx") == sum("verdicts", "rx")
                    && verdict("rx") == received
                    && verdict("dropped") == sum("drops", "")
                    && verdict("punt") == sum("punts", "")
            })
    })
}

#[test]
fn routing_v4_v6_ttl_checksums_macs_and_held_until_resolved() {
    if !xfwd_lab::privileged("routing_v4_v6_ttl_checksums_macs_and_held_until_resolved") {
        return;
    }
    let lab = lab("fwdr");
    let xfwd = start_routing(&lab);
    let fwd = lab.netns(Role::Fwd);
    resolve_dst(&lab.netns(Role::Fwd));
    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let src6 = IpAddr::V6(topology::SRC0.ipv6);
    assert_routed(&probe(&lab, src4, v4_target(), 1000), 1000);
    assert_routed(&probe(&lab, src6, v6_target(), 500), 500);
    let stats = wait_stats(&xfwd, "pipeline counters", |s| {
        pipeline(s, "verdicts", "transmit") >= 1500
    });
    assert_eq!(stats["mode"], "router");
    assert!(pipeline(&stats, "dst_cache", "hits") > 0, "{stats:#}");
    assert!(stats["netlink_generation"].as_u64().unwrap() > 0);

    // An unresolved neighbour: the first packets wait in the hold buffer, the mirror asks the
    // kernel to resolve (NTF_USE), and they leave once the neighbour table has the MAC.
    for addr in [
        topology::DST0.ipv4.to_string(),
        topology::DST0.ipv6.to_string(),
    ] {
        ip(&fwd, &format!("neigh del {addr} dev fwd1"));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_routed(&probe(&lab, src4, v4_target(), 3), 3);
    assert_routed(&probe(&lab, src6, v6_target(), 3), 3);
    let stats = wait_stats(&xfwd, "held packets released", |s| {
        pipeline(s, "events", "held_released") >= 6
    });
    assert!(pipeline(&stats, "verdicts", "held") >= 6, "{stats:#}");
    assert!(pipeline(&stats, "events", "resolutions") >= 2, "{stats:#}");
    let resolve_sent = stats["mirror"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p[0] == "resolve_sent")
        .and_then(|p| p[1].as_u64())
        .unwrap();
    assert!(resolve_sent >= 2, "{stats:#}");
    assert_counted_once(&xfwd);
}

#[test]
fn routing_icmp_errors_route_changes_and_malformed_frames() {
    if !xfwd_lab::privileged("routing_icmp_errors_route_changes_and_malformed_frames") {
        return;
    }
    let lab = lab("fwdri");
    let xfwd = start_routing(&lab);
    let (src, fwd) = (lab.netns(Role::Src), lab.netns(Role::Fwd));
    resolve_dst(&lab.netns(Role::Fwd));

    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let src6 = IpAddr::V6(topology::SRC0.ipv6);
    // TTL 1: ICMP time exceeded from fwd0's address, back at src, checksum valid.
    let listen4 = icmp_listener(&src, false);
    let listen6 = icmp_listener(&src, true);
    probe_ttl(&lab, src4, v4_target(), 1, 3);
    let got = icmp_received(&listen4, false, Duration::from_millis(500));
    assert!(
        got.contains(&(11, 0, IpAddr::V4(topology::FWD0.ipv4), true)),
        "time exceeded: {got:?}"
    );
    probe_ttl(&lab, src6, v6_target(), 1, 3);
    let got = icmp_received(&listen6, true, Duration::from_millis(500));
    assert!(
        got.iter().any(|m| m.0 == 3 && m.1 == 0),
        "ICMPv6 time exceeded: {got:?}"
    );
    // A route of type unreachable: ICMP destination unreachable (host unreachable).
    ip(&fwd, "route add unreachable 198.51.100.0/24");
    // `xfwd route get` answers from a mirror of fwd, as `ip route get` does.
    let get = |addr: &str| {
        Command::new(XFWD)
            .args(["route", "get", addr, "--netns", &fwd])
            .output()
            .unwrap()
    };
    let out = get("198.18.2.1");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && line.contains(&format!("via {} dev fwd1", topology::DST0.ipv4)),
        "{line}"
    );
    let out = get("198.51.100.7");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No route to host"));
    probe_ttl(&lab, src4, IpAddr::from([198, 51, 100, 7]), 64, 3);
    let got = icmp_received(&listen4, false, Duration::from_millis(500));
    assert!(
        got.iter().any(|m| m.0 == 3 && m.1 == 1 && m.3),
        "unreachable: {got:?}"
    );
    let stats = wait_stats(&xfwd, "ICMP errors counted", |s| {
        pipeline(s, "verdicts", "reply") >= 3
    });
    assert!(!pipeline_group(&stats, "icmp_sent").is_empty(), "{stats:#}");

    // A route changed mid-traffic: traffic follows within a bounded time.
    assert_routed(&probe(&lab, src4, v4_target(), 200), 200);
    ip(&fwd, "route replace blackhole 198.18.2.0/24");
    // 500 probes at 5000/s: 100 ms of traffic; the mirror applies the change in milliseconds.
    let blocked = probe(&lab, src4, v4_target(), 500);
    assert!(blocked.unique <= 50, "blackholed within 10 ms: {blocked:?}");
    let via = topology::DST0.ipv4.to_string();
    ip(
        &fwd,
        &format!("route replace 198.18.2.0/24 via {via} dev fwd1"),
    );
    let back = probe(&lab, src4, v4_target(), 500);
    assert!(back.unique >= 450, "back within 10 ms: {back:?}");
    assert_eq!(back.bad_checksum, 0);

    // Malformed frames: dropped and counted by reason.
    let mut frame = Vec::new();
    frame.extend_from_slice(&topology::FWD0.mac);
    frame.extend_from_slice(&topology::SRC0.mac);
    frame.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![
        0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, // version/IHL .. checksum
    ];
    ip.extend_from_slice(&topology::SRC0.ipv4.octets());
    ip.extend_from_slice(&[198, 18, 2, 1]);
    ip.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 8, 0, 0]); // UDP, no checksum
    let checksum = !ones_complement_sum(&ip[..20]);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let valid: Vec<u8> = frame.iter().chain(&ip).copied().collect();
    let mut bad_checksum = valid.clone();
    bad_checksum[14 + 10] ^= 0xff;
    let mut truncated = valid.clone();
    truncated[14 + 3] = 200; // total length beyond the frame
    truncated[14 + 10..14 + 12].fill(0);
    let sum = !ones_complement_sum(&truncated[14..34]);
    truncated[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
    let frames: Vec<Vec<u8>> = (0..5)
        .flat_map(|_| [bad_checksum.clone(), truncated.clone()])
        .collect();
    xfwd_lab::netns::run_in(&src, || forwarder::probe::send_raw("src0", &frames))
        .unwrap()
        .unwrap();
    let stats = wait_stats(&xfwd, "malformed frames counted", |s| {
        pipeline(s, "drops", "bad_checksum") >= 5 && pipeline(s, "drops", "truncated") >= 5
    });
    assert!(pipeline(&stats, "drops", "blackhole") > 0, "{stats:#}");
    // Counted once, by the engine: the loop's own drops know nothing of these reasons.
    let loop_drops = serde_json::to_string(&stats["queues"][0]["drops"]).unwrap();
    assert!(
        !loop_drops.contains("bad_checksum") && !loop_drops.contains("truncated"),
        "{loop_drops}"
    );
    assert_counted_once(&xfwd);
}

fn ones_complement_sum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

// ---------------------------------------------------------------------------------------------
// Several queues: one run loop per queue, each with its own UMEM.

/// The counters of queue `q` as `xfwd stats --json` reports them: (frames received on fwd0,
/// frames sent on fwd1, pipeline `transmit` verdicts).
fn queue_counts(stats: &serde_json::Value, q: usize) -> (u64, u64, u64) {
    let queue = &stats["queues"][q];
    assert_eq!(queue["queue"], q as u64, "queue snapshots in queue order");
    let port = |i: usize, key: &str| queue["ports"][i][key].as_u64().unwrap();
    let pipeline = &stats["pipeline"][q];
    assert_eq!(pipeline["queue"], q as u64, "{stats:#}");
    let transmit = pipeline["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "transmit")
        .and_then(|pair| pair[1].as_u64())
        .unwrap();
    (port(0, "rx_packets"), port(1, "tx_packets"), transmit)
}

/// Sends `count` pktgen probes of `flows` from src0 on TX queues `queues` (on veth, the queue
/// they arrive on at fwd0) at 10 kpps, and checks in dst, with a packet capture on dst0, what
/// arrived: the probe ids seen, MACs, TTLs and checksums.
fn pktgen_through(
    lab: &Lab,
    flows: &pktgen::FlowSet,
    queues: &[u32],
    count: u64,
) -> (pktgen::TxReport, forwarder::probe::ProbeReport) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let capture = xfwd_lab::netns::run_in(&lab.netns(Role::Dst), || {
        forwarder::probe::Capture::open(topology::DST0.name)
    })
    .unwrap()
    .unwrap();
    let done = AtomicBool::new(false);
    let mut tx = pktgen::TxConfig::new(topology::SRC0.name);
    tx.queues = queues.to_vec();
    tx.size = pktgen::FrameSize::Fixed(128);
    tx.count = Some(count);
    tx.rate = Some(10_000.0);
    std::thread::scope(|scope| {
        let collector = scope.spawn(|| {
            capture.collect_matching(&done, Duration::from_millis(300), |frame| {
                pktgen::Probe::parse(frame).map(|p| u64::from(p.flow) << 32 | u64::from(p.seq))
            })
        });
        let sent = xfwd_lab::netns::run_in(&lab.netns(Role::Src), || pktgen::transmit(&tx, flows));
        // The collector stops only when told: tell it before a failure is reported (a panic
        // here would leave the scope waiting for it forever).
        done.store(true, Ordering::Release);
        let got = collector.join().unwrap();
        (sent.unwrap().expect("pktgen sends"), got)
    })
}

/// The Prometheus text served at `addr`.
fn scrape(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// `promtool check metrics` (Debian package `prometheus`, installed by `cargo xtask setup`)
/// accepts the body of the HTTP answer `response`; without promtool: skipped, unless `CI=true`.
fn promtool_accepts(response: &str) {
    use std::io::Write;
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("promtool check skipped: no promtool ({e}); `cargo xtask setup` installs it");
            return;
        }
        Err(e) => panic!("CI=true: promtool is needed: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value of one series (`name{labels}`) in Prometheus text; 0 when absent.
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Every one of `total` pktgen probes arrived once in dst, routed: MACs fwd1 → dst0, TTL /
/// hop limit 63, IPv4 header and UDP checksums valid.
fn assert_pktgen_routed(got: &forwarder::probe::ProbeReport, total: u64) {
    assert_eq!(got.unique, total, "every probe arrives once: {got:?}");
    assert_eq!(got.received, total, "{got:?}");
    assert_eq!(got.bad_checksum, 0, "{got:?}");
    assert_eq!(
        got.macs
            .iter()
            .map(|(s, d, _)| (s.as_str(), d.as_str()))
            .collect::<Vec<_>>(),
        [(
            topology::FWD1.mac_string().as_str(),
            topology::DST0.mac_string().as_str()
        )],
        "MACs rewritten: source = fwd1, destination = dst0"
    );
    assert_eq!(got.ttls, [(63, total)], "TTL / hop limit decremented");
}

fn pktgen_endpoints() -> pktgen::Endpoints {
    pktgen::Endpoints {
        src_mac: topology::SRC0.mac,
        dst_mac: topology::FWD0.mac,
        src_v4: Some(topology::SRC0.ipv4),
        src_v6: Some(topology::SRC0.ipv6),
    }
}

/// Routing with `--queues 2` on veths of two RX/TX queues: probes sent from src on TX queue
/// *q* arrive at fwd0's RX queue *q*, are taken by run loop *q* (its own UMEM and sockets on
/// both interfaces) and leave fwd1 on TX queue *q*; both loops forward, each only its own
/// queue, IPv4 and IPv6 alike, with TTL / hop limit 63, MACs fwd1 → dst0 and valid checksums.
#[test]
fn routing_two_queues_two_run_loops() {
    if !xfwd_lab::privileged("routing_two_queues_two_run_loops") {
        return;
    }
    let lab = Lab::unique("fwdmq")
        .unwrap()
        .with_extra_prefixes(4, 24)
        .unwrap()
        .with_queues(2)
        .unwrap()
        .up_scoped()
        .unwrap();
    // A free loopback port for the Prometheus endpoint (bound by xfwd before it enters fwd).
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let xfwd = spawn(&lab, &["--queues", "2", "--metrics", &metrics.to_string()]);
    resolve_dst(&lab.netns(Role::Fwd));
    // Flow ids are destination-major (d * 2 + source port index) and queue q sends the flows
    // with id ≡ q (mod 2): each queue carries every destination, IPv4 and IPv6.
    let dsts = [
        v4_target(),
        IpAddr::from([198, 18, 3, 1]),
        v6_target(),
        "2001:db8:1:1::1".parse().unwrap(),
    ];
    let flows = pktgen::FlowSet::new(
        pktgen_endpoints(),
        &dsts,
        "1000-1001".parse().unwrap(),
        pktgen::PortRange::single(9),
    )
    .unwrap();
    let before = xfwd.stats().unwrap();
    assert_eq!(before["queues"].as_array().unwrap().len(), 2, "{before:#}");

    let total = 4000;
    let (sent, got) = pktgen_through(&lab, &flows, &[0, 1], total);
    assert_eq!(sent.sent, total, "{sent:?}");
    assert!(sent.queues.iter().all(|q| q.sent == total / 2), "{sent:?}");
    assert_pktgen_routed(&got, total);
    let share = total / 2;
    let stats = wait_stats(&xfwd, "both loops' pipeline counters", |s| {
        (0..2).all(|q| queue_counts(s, q).2 >= share)
    });
    for q in 0..2 {
        let (rx, tx, transmit) = queue_counts(&stats, q);
        assert!(
            rx >= share && tx >= share && transmit >= share,
            "queue {q}: {stats:#}"
        );
    }
    // The same per queue in the Prometheus text, which promtool accepts as served.
    let text = scrape(metrics);
    promtool_accepts(&text);
    // `xfwd stats`' memory block as gauges, part by part (promtool checked their HELP and
    // TYPE above); the lab's few routes leave the FIBs' fast arenas empty (0).
    assert!(text.contains("# TYPE xfwd_memory_bytes gauge"), "{text}");
    let memory: Vec<(String, u64)> = serde_json::from_value(stats["memory"].clone()).unwrap();
    assert_eq!(
        memory.len(),
        5,
        "heap_allocated, heap_active, heap_resident, heap_retained, fast_arenas: {memory:?}"
    );
    for (part, _) in &memory {
        let series = format!("xfwd_memory_bytes{{part=\"{part}\"}} ");
        assert!(text.contains(&series), "{series}: {text}");
    }
    assert!(
        metric(&text, "xfwd_memory_bytes{part=\"heap_allocated\"}") > 0,
        "{text}"
    );
    for q in 0..2 {
        let rx = format!("xfwd_rx_packets_total{{iface=\"fwd0\",queue=\"{q}\"}}");
        let tx = format!("xfwd_tx_packets_total{{iface=\"fwd1\",queue=\"{q}\"}}");
        let transmit = format!("xfwd_pipeline_frames_total{{queue=\"{q}\",verdict=\"transmit\"}}");
        for series in [rx, tx, transmit] {
            assert!(metric(&text, &series) >= share, "{series}: {text}");
        }
    }
    let xdp: Vec<(String, u64)> = serde_json::from_value(stats["xdp"].clone()).unwrap();
    let no_socket = xdp
        .iter()
        .find(|(k, _)| k == "no_socket")
        .map_or(0, |x| x.1);
    assert_eq!(no_socket, 0, "every queue has its socket: {xdp:?}");

    // Traffic on queue 1 alone is loop 1's alone.
    let (sent, got) = pktgen_through(&lab, &flows, &[1], 500);
    assert_eq!(
        (sent.sent, got.unique, got.bad_checksum),
        (500, 500, 0),
        "{got:?}"
    );
    let after = wait_stats(&xfwd, "loop 1's pipeline counters", |s| {
        queue_counts(s, 1).2 >= queue_counts(&stats, 1).2 + 500
    });
    let (rx0, tx0, _) = queue_counts(&stats, 0);
    let (rx0_after, tx0_after, _) = queue_counts(&after, 0);
    assert!(
        rx0_after - rx0 < 10 && tx0_after - tx0 < 10,
        "loop 0 stays idle: {after:#}"
    );
    assert!(queue_counts(&after, 1).0 >= queue_counts(&stats, 1).0 + 500);
}

/// More run loops than CPUs (`--queues 4`; on a machine with fewer than four CPUs loops share
/// them round robin): every loop still forwards its own queue.
#[test]
fn routing_four_queues_more_loops_than_cpus() {
    if !xfwd_lab::privileged("routing_four_queues_more_loops_than_cpus") {
        return;
    }
    let lab = Lab::unique("fwdmq4")
        .unwrap()
        .with_extra_prefixes(4, 24)
        .unwrap()
        .with_queues(4)
        .unwrap()
        .up_scoped()
        .unwrap();
    let xfwd = spawn(&lab, &["--queues", "4"]);
    resolve_dst(&lab.netns(Role::Fwd));
    // Flow d * 4 + p goes out on queue p: each queue carries one IPv4 and one IPv6 flow.
    let flows = pktgen::FlowSet::new(
        pktgen_endpoints(),
        &[v4_target(), v6_target()],
        "1000-1003".parse().unwrap(),
        pktgen::PortRange::single(9),
    )
    .unwrap();
    let total = 2000;
    let (sent, got) = pktgen_through(&lab, &flows, &[0, 1, 2, 3], total);
    assert_eq!(sent.sent, total, "{sent:?}");
    assert_pktgen_routed(&got, total);
    let stats = wait_stats(&xfwd, "every loop's pipeline counters", |s| {
        (0..4).all(|q| queue_counts(s, q).2 >= total / 4)
    });
    for q in 0..4 {
        let (rx, tx, _) = queue_counts(&stats, q);
        assert!(rx >= total / 4 && tx >= total / 4, "queue {q}: {stats:#}");
    }
}

/// `--queues 2` on veths with one queue: refused before anything is attached, naming the
/// interface, what it has and how to give it more.
#[test]
fn more_queues_than_the_device_has_is_refused() {
    if !xfwd_lab::privileged("more_queues_than_the_device_has_is_refused") {
        return;
    }
    let lab = lab("fwdmqx");
    let control = format!("/run/xfwd/test-mqx-{}.sock", lab.prefix());
    let out = run_in_fwd(&lab, "fwd0,fwd1")
        .args(["--queues", "2", "--no-punt", "--control", &control])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fwd0 has 1 receive queue(s) and 1 transmit queue(s)")
            && stderr.contains("--queues 2"),
        "{stderr}"
    );
    assert!(!xdp_attached(&lab));
    assert!(!Path::new(&control).exists());
}

// ---------------------------------------------------------------------------------------------
// Configuration reload.

/// SIGHUP: the `[pipeline]` settings that can change live reach the running pipeline (here the
/// ICMP rate: 0, no time exceeded errors; then 1000, errors again), the instance keeps
/// running, a change that needs a restart is not applied, and an invalid file changes nothing.
/// The logs are JSON (`--log-format json`): one object per line, and the reloads' messages say
/// what was refused and what needs a restart.
#[test]
fn sighup_applies_live_pipeline_settings() {
    if !xfwd_lab::privileged("sighup_applies_live_pipeline_settings") {
        return;
    }
    let lab = lab("fwdhup");
    let dir = std::env::temp_dir().join(format!("xfwd-hup-{}", lab.prefix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("xfwd.toml");
    std::fs::write(&path, "[pipeline]\nicmp_rate = 0\n").unwrap();
    let log_path = dir.join("xfwd.log");
    let xfwd = {
        let (mut command, control) = Xfwd::command(&lab, "fwd0,fwd1", 'p');
        command.args(["--config", path.to_str().unwrap(), "--log-format", "json"]);
        let log = std::fs::File::create(&log_path).unwrap();
        Xfwd::spawn_logging(command, control, log.into())
    };
    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let sent = |s: &serde_json::Value| pipeline(s, "icmp_sent", "time_exceeded");
    let hup = || {
        let pid = xfwd.child.as_ref().unwrap().id().to_string();
        let status = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        assert!(status.success());
        // The link monitor looks every 200 ms; the loops apply it at their next turn.
        std::thread::sleep(Duration::from_millis(600));
    };

    probe_ttl(&lab, src4, v4_target(), 1, 3);
    let stats = wait_stats(&xfwd, "TTL 1 dropped without an error", |s| {
        pipeline(s, "drops", "ttl_exceeded") >= 3
    });
    assert_eq!(sent(&stats), 0, "icmp_rate = 0 sends none: {stats:#}");
    assert!(
        pipeline(&stats, "events", "icmp_rate_limited") >= 3,
        "{stats:#}"
    );

    // An invalid file: nothing changes, the instance goes on.
    std::fs::write(&path, "[pipeline]\nicmp_rate = -1\n").unwrap();
    hup();
    probe_ttl(&lab, src4, v4_target(), 1, 3);
    let stats = wait_stats(&xfwd, "still dropping", |s| {
        pipeline(s, "drops", "ttl_exceeded") >= 6
    });
    assert_eq!(sent(&stats), 0, "{stats:#}");

    // A live setting and one that needs a restart: the first applies, the second waits.
    std::fs::write(
        &path,
        "queues = 2\n[pipeline]\nicmp_rate = 1000\nhold_frames = 8\n",
    )
    .unwrap();
    hup();
    probe_ttl(&lab, src4, v4_target(), 1, 3);
    let stats = wait_stats(&xfwd, "time exceeded sent after the reload", |s| {
        sent(s) >= 3
    });
    assert_eq!(
        stats["queues"].as_array().unwrap().len(),
        1,
        "queues needs a restart: {stats:#}"
    );
    assert_counted_once(&xfwd);

    // The logs: JSON objects, one per line, with the reloads' verdicts.
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let events: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["timestamp"].is_string() && e["level"].is_string()),
        "{logs}"
    );
    let logged = |level: &str, words: &[&str]| {
        events.iter().any(|e| {
            let message = e["fields"]["message"].as_str().unwrap_or_default();
            e["level"] == level && words.iter().all(|w| message.contains(w))
        })
    };
    assert!(
        logged("ERROR", &["configuration not reloaded", "icmp_rate"]),
        "the invalid file: {logs}"
    );
    assert!(
        logged("WARN", &["only after a restart", "queues"]),
        "the restart: {logs}"
    );
    assert!(
        !logged("WARN", &["only after a restart", "icmp_rate"]),
        "icmp_rate is live: {logs}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The per-destination ICMP limit follows `net.ipv4.icmp_ratelimit` while xfwd runs, as the
/// kernel's does: at the default (1000 ms) a burst of time-exceeded errors to one source is
/// cut to the kernel's six; once the sysctl is 0 (no limit), every error goes out.
#[test]
fn icmp_rate_limit_sysctls_are_followed_live() {
    if !xfwd_lab::privileged("icmp_rate_limit_sysctls_are_followed_live") {
        return;
    }
    let lab = lab("icmpsys");
    let fwd = lab.netns(Role::Fwd);
    common::sysctl(&fwd, "ipv4/icmp_ratelimit", "1000");
    let xfwd = spawn(&lab, &[]);
    let src4 = IpAddr::V4(topology::SRC0.ipv4);
    let sent = |s: &serde_json::Value| pipeline(s, "icmp_sent", "time_exceeded");

    probe_ttl(&lab, src4, v4_target(), 1, 20);
    let stats = wait_stats(&xfwd, "20 TTL-1 probes handled", |s| {
        pipeline(s, "drops", "ttl_exceeded") + sent(s) >= 20
    });
    let limited = sent(&stats);
    assert!(
        (6..=8).contains(&limited),
        "the kernel's burst of six per destination (and one per second after it): {stats:#}"
    );

    common::sysctl(&fwd, "ipv4/icmp_ratelimit", "0");
    // Read again within a second by the link monitor.
    std::thread::sleep(Duration::from_millis(1500));
    probe_ttl(&lab, src4, v4_target(), 1, 20);
    let stats = wait_stats(&xfwd, "20 more errors sent", |s| sent(s) >= limited + 20);
    assert_eq!(sent(&stats), limited + 20, "no limit: {stats:#}");
}

// ---------------------------------------------------------------------------------------------
// Queries answered by the running instance.

/// `xfwd route get` and `xfwd show` with `--control` are answered by the running instance from
/// the tables its pipeline reads, and say the same as a fresh mirror of the namespace.
#[test]
fn route_get_and_show_ask_the_running_instance() {
    if !xfwd_lab::privileged("route_get_and_show_ask_the_running_instance") {
        return;
    }
    let lab = lab("fwdask");
    let xfwd = start_routing(&lab);
    let fwd = lab.netns(Role::Fwd);
    let control = xfwd.control.to_str().unwrap().to_owned();
    let xfwd_out = |args: &[&str]| {
        let started = Instant::now();
        let out = Command::new(XFWD).args(args).output().unwrap();
        (out, started.elapsed())
    };
    for target in [v4_target().to_string(), v6_target().to_string()] {
        let (live, took) = xfwd_out(&["route", "get", &target, "--control", &control]);
        assert!(
            live.status.success(),
            "{}",
            String::from_utf8_lossy(&live.stderr)
        );
        let (fresh, _) = xfwd_out(&["route", "get", &target, "--netns", &fwd]);
        assert!(
            fresh.status.success(),
            "{}",
            String::from_utf8_lossy(&fresh.stderr)
        );
        // The instance adds what its pipeline does with such a packet on a line of its own.
        let live = String::from_utf8_lossy(&live.stdout).into_owned();
        let (route, pipeline) = live.trim_end().rsplit_once('\n').unwrap();
        assert_eq!(
            format!("{route}\n"),
            String::from_utf8_lossy(&fresh.stdout),
            "the instance and a fresh mirror agree on {target}"
        );
        // (Held while dst0 is not resolved yet: this test sends no traffic first.)
        assert!(
            pipeline.starts_with("    xfwd transmit dev fwd1")
                || pipeline.starts_with("    xfwd held"),
            "{live}"
        );
        eprintln!("route get {target} from the instance in {took:?}");
    }
    // No route: exit status 2 with the kernel's message, from the instance too.
    let (none, _) = xfwd_out(&["route", "get", "203.0.113.250", "--control", &control]);
    assert_eq!(none.status.code(), Some(2), "{none:?}");
    assert!(!none.stderr.is_empty());
    // The same routes (as a set: routes of one prefix may be listed in another order, the
    // order their events arrived in). The lab's IPv6 link-local addresses may still finish
    // duplicate address detection meanwhile (a local route appears): ask again until both
    // views agree.
    let lines = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live = lines(&xfwd_out(&["show", "routes", "--control", &control]).0);
        let fresh = lines(&xfwd_out(&["show", "routes", "--netns", &fwd]).0);
        assert!(
            live.iter().any(|l| l.starts_with("198.18.2.0/24 via")),
            "{live:?}"
        );
        if live == fresh {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "instance {live:#?}\nfresh mirror {fresh:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Nobody on an explicit socket: an error, not a silent fallback.
    let (missing, _) = xfwd_out(&["show", "links", "--control", "/run/xfwd/nobody-here.sock"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no xfwd answers"));
}
