//! xfwd as a service: run as an unprivileged user that holds only the capabilities the
//! documentation lists (`docs/forwarder.md#running-as-a-service`), started the way
//! `crates/forwarder/packaging/xfwd.service` starts it, it must synchronise its mirror, attach XDP, tell the
//! service manager `READY=1` over `NOTIFY_SOCKET`, route traffic, and on SIGTERM say
//! `STOPPING=1`, detach and exit cleanly; with no iproute2 on its PATH. Privileged (root sets
//! the lab up and drops to `nobody` with `setpriv`).

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xfwd_lab::{Lab, Role, topology};

const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

/// The capabilities the unit grants (`AmbientCapabilities=` in crates/forwarder/packaging/xfwd.service).
const CAPABILITIES: &str = "net_admin,net_raw,bpf,ipc_lock";

/// Kills the child on the way out, also when an assertion fails.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scratch directory everyone may write (the unprivileged xfwd binds its control socket and
/// sends to the notification socket there), removed on the way out.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unit_capabilities() -> Vec<String> {
    let unit = include_str!("../packaging/xfwd.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("the unit grants ambient capabilities");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

fn receive(manager: &UnixDatagram, wanted: &str, xfwd: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 512];
    loop {
        if let Some(status) = xfwd.try_wait().unwrap() {
            panic!("xfwd exited ({status}) before saying {wanted}");
        }
        assert!(Instant::now() < deadline, "no {wanted} within 60 s");
        if let Ok(n) = manager.recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message.lines().any(|l| l == wanted) {
                return message;
            }
        }
    }
}

fn probe(lab: &Lab, count: u64) -> serde_json::Value {
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
        .args(["--src", &IpAddr::V4(topology::SRC0.ipv4).to_string()])
        .args(["--dst", "198.18.2.1", "--to-netns", &lab.netns(Role::Dst)])
        .args([
            "--capture",
            "dst0",
            "--count",
            &count.to_string(),
            "--rate",
            "2000",
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// The absolute path of a program on the test's own PATH.
fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}

/// Starts `xfwd run` in the lab's fwd namespace as `nobody` holding only `caps`, with no
/// `ip` on its PATH: root enters
/// the namespace (as systemd's `NetworkNamespacePath=` would), then drops to nobody with
/// `caps` inheritable and ambient (so they survive the exec of xfwd) and nothing else in the
/// bounding set. The locked-memory limit stays the test's (8 MiB by default), so without
/// `CAP_IPC_LOCK` the UMEM cannot be registered (`ENOBUFS`).
fn start(lab: &Lab, scratch: &std::path::Path, notify: &std::path::Path, caps: &[&str]) -> Running {
    let caps: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    let caps = format!("-all,{}", caps.join(","));
    // xfwd's PATH is the scratch directory, where there is no `ip`: it needs no iproute2 (the
    // punt TAP and the XDP attachments go through rtnetlink).
    assert!(!scratch.join("ip").exists());
    let child = Command::new(which("ip"))
        .args(["netns", "exec", &lab.netns(Role::Fwd)])
        .arg(which("setpriv"))
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(format!("--bounding-set={caps}"))
        .args([XFWD, "run", "--iface", "fwd0,fwd1"])
        .arg("--control")
        .arg(scratch.join("xfwd.sock"))
        .args([
            "--punt-device",
            &format!("s{}", std::process::id() % 100_000),
        ])
        .env("NOTIFY_SOCKET", notify)
        .env("PATH", scratch)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Running(child)
}

#[test]
fn runs_unprivileged_with_only_its_capabilities_and_notifies_readiness() {
    if !xfwd_lab::privileged("runs_unprivileged_with_only_its_capabilities_and_notifies_readiness")
    {
        return;
    }
    assert_eq!(unit_capabilities().join(","), CAPABILITIES);
    let lab = Lab::unique("svc")
        .unwrap()
        .with_extra_prefixes(4, 24)
        .unwrap()
        .up_scoped()
        .unwrap();
    let scratch = Scratch(std::env::temp_dir().join(format!("xfwd-svc-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let notify = scratch.0.join("notify");
    let manager = UnixDatagram::bind(&notify).unwrap();
    std::fs::set_permissions(&notify, std::fs::Permissions::from_mode(0o777)).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    // Each capability is needed: without any one of them xfwd fails to start, never ready
    // (without CAP_NET_ADMIN the mirror cannot join its netlink groups; without CAP_NET_RAW
    // no AF_XDP socket; without CAP_BPF no map; without CAP_IPC_LOCK no UMEM beyond the
    // locked-memory limit).
    for missing in CAPABILITIES.split(',') {
        let others: Vec<&str> = CAPABILITIES.split(',').filter(|c| *c != missing).collect();
        let mut xfwd = start(&lab, &scratch.0, &notify, &others);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = xfwd.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "xfwd without {missing} neither failed nor stopped"
            );
            let mut buf = [0u8; 512];
            if let Ok(n) = manager.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]);
                assert!(!message.contains("READY=1"), "ready without {missing}");
            }
        };
        assert!(!status.success(), "xfwd without {missing}: {status}");
    }

    let all: Vec<&str> = CAPABILITIES.split(',').collect();
    let mut xfwd = start(&lab, &scratch.0, &notify, &all);
    let ready = receive(&manager, "READY=1", &mut xfwd.0);
    let pid: u32 = ready
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .expect("MAINPID in the readiness message")
        .parse()
        .unwrap();
    // It really runs as nobody, with exactly those capabilities in effect.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert!(field("Uid:").starts_with("65534"), "{status}");
    // CAP_NET_ADMIN 12, CAP_NET_RAW 13, CAP_IPC_LOCK 14, CAP_BPF 39.
    let wanted: u64 = (1 << 12) | (1 << 13) | (1 << 14) | (1 << 39);
    assert_eq!(u64::from_str_radix(&field("CapEff:"), 16).unwrap(), wanted);

    // Traffic is routed: the first probes resolve the next hop (held, then sent), then a
    // burst must arrive whole, TTL 63.
    let _ = probe(&lab, 3);
    let report = probe(&lab, 200);
    assert_eq!(report["unique"], 200, "{report}");
    assert_eq!(report["ttls"], serde_json::json!([[63, 200]]), "{report}");

    // SIGTERM: STOPPING=1, then a clean exit with nothing left attached.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    receive(&manager, "STOPPING=1", &mut xfwd.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(status) = xfwd.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "xfwd did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit}");
    let attached = xfwd_lab::netns::run_in(&lab.netns(Role::Fwd), || {
        ["fwd0", "fwd1"].map(|i| forwarder::rtnl::link(i).unwrap().xdp)
    })
    .unwrap();
    assert_eq!(attached, [None, None]);
}

/// The packaged default configuration is valid apart from the interfaces the operator must
/// name: xfwd refuses it with EX_USAGE and says exactly that.
#[test]
fn packaged_configuration_only_lacks_interfaces() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/xfwd.toml");
    let out = Command::new(XFWD)
        .args(["run", "--config", config])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("- "))
        .collect();
    assert_eq!(problems.len(), 1, "{stderr}");
    assert!(problems[0].contains("no interfaces"), "{stderr}");
}
