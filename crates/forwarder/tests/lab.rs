//! Privileged tests of the `xfwd` binary on the virtual lab (each test its own lab):
//! forwarding, what the kernel keeps (ARP, ND, local addresses), lifecycle (SIGTERM, SIGKILL,
//! failed start-up, link down/up, interface removal).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, LabGuard, Role, topology};

const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

/// A running `xfwd run` in the lab's fwd namespace, killed when dropped.
struct Xfwd {
    child: Option<Child>,
    control: PathBuf,
}

impl Xfwd {
    fn start(lab: &Lab, extra: &[&str]) -> Xfwd {
        let control = PathBuf::from(format!("/run/xfwd/test-{}.sock", lab.prefix()));
        let child = Command::new(XFWD)
            .args([
                "run",
                "--netns",
                &lab.netns(Role::Fwd),
                "--iface",
                "fwd0,fwd1",
                "--bare",
            ])
            .arg("--peer-mac")
            .arg(format!(
                "fwd0={},fwd1={}",
                topology::SRC0.mac_string(),
                topology::DST0.mac_string()
            ))
            .arg("--control")
            .arg(&control)
            .args([
                "--punt-device",
                &format!("p{}", std::process::id() % 100_000),
            ])
            .args(extra)
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting xfwd");
        let mut xfwd = Xfwd {
            child: Some(child),
            control,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while xfwd.stats().is_none() {
            if let Some(status) = xfwd.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("xfwd exited during start-up: {status}");
            }
            assert!(Instant::now() < deadline, "xfwd never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        xfwd
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let out = Command::new(XFWD)
            .args(["stats", "--json", "--control"])
            .arg(&self.control)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    fn signal(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "xfwd did not exit after {signal}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Xfwd {
    fn drop(&mut self) {
        // SIGTERM first, so that the control socket file goes too; SIGKILL if it hangs.
        if let Some(child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let mut child = child;
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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

fn probe(lab: &Lab, src: IpAddr, dst: IpAddr, count: u64) -> Report {
    let out = Command::new(XFWD)
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
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
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

fn assert_forwarded(report: &Report, count: u64) {
    assert_eq!(report.sent, count);
    assert_eq!(report.unique, count, "every probe arrives: {report:?}");
    assert_eq!(report.bad_checksum, 0);
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
    assert_eq!(report.ttls, [(64, count)], "bare mode leaves the TTL alone");
}

#[test]
fn bare_forwarding_v4_v6_then_sigterm_detaches() {
    if !xfwd_lab::privileged("bare_forwarding_v4_v6_then_sigterm_detaches") {
        return;
    }
    let lab = lab("fwdb");
    let mut xfwd = Xfwd::start(&lab, &[]);
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
    let status = xfwd.signal("-TERM");
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(!xdp_attached(&lab), "no XDP program after SIGTERM");
    assert!(!xfwd.control.exists(), "control socket removed");
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
    let xfwd = Xfwd::start(&lab, &[]);
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
    let mut xfwd = Xfwd::start(&lab, &[]);
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
    let again = Xfwd::start(&lab, &[]);
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
    let out = Command::new(XFWD)
        .args([
            "run",
            "--netns",
            &lab.netns(Role::Fwd),
            "--iface",
            "fwd0,nosuch0",
            "--bare",
        ])
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
    let first = Xfwd::start(&lab, &[]);
    let second = Command::new(XFWD)
        .args([
            "run",
            "--netns",
            &lab.netns(Role::Fwd),
            "--iface",
            "fwd0,fwd1",
            "--bare",
        ])
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
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = xfwd.stats().unwrap();
        if stats["up"][index].as_bool() == Some(up) {
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
    let mut xfwd = Xfwd::start(&lab, &[]);
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
    let drops = serde_json::to_string(&stats["queues"][0]["drops"]).unwrap();
    assert!(drops.contains("egress_down"), "{drops}");
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
