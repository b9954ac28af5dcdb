//! What the privileged lab tests of a running `xfwd` share: the process (stopped with
//! SIGTERM, then killed, when the test ends, also on failure), its counters, and sysctls in a
//! lab namespace. Each test file uses part of it.
#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The `xfwd` binary under test.
pub const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

/// A running `xfwd`, stopped when dropped (SIGTERM first, so that it detaches its XDP
/// program and removes its control socket; SIGKILL if it hangs).
pub struct Xfwd {
    /// The process; `None` once [`Xfwd::signal`] stopped it.
    pub child: Option<Child>,
    /// Its control socket.
    pub control: PathBuf,
}

impl Xfwd {
    /// `xfwd run` in `lab`'s forwarding namespace on `ifaces`, with a control socket named
    /// after the lab and a punt device named `punt` plus this process's id; the caller adds
    /// what else it needs and hands the command to [`Xfwd::spawn`].
    pub fn command(lab: &xfwd_lab::Lab, ifaces: &str, punt: char) -> (Command, PathBuf) {
        let control = PathBuf::from(format!("/run/xfwd/test-{}.sock", lab.prefix()));
        let mut command = Command::new(XFWD);
        command
            .args(["run", "--netns", &lab.netns(xfwd_lab::Role::Fwd)])
            .args(["--iface", ifaces])
            .arg("--control")
            .arg(&control)
            .args([
                "--punt-device",
                &format!("{punt}{}", std::process::id() % 100_000),
            ]);
        (command, control)
    }

    /// Spawns `command` and waits (up to 30 s) until it answers `stats` on `control`;
    /// panics if it exits first.
    pub fn spawn(command: Command, control: PathBuf) -> Xfwd {
        Xfwd::spawn_logging(command, control, Stdio::inherit())
    }

    /// [`Xfwd::spawn`] with xfwd's stderr (its logs) going to `stderr`.
    pub fn spawn_logging(mut command: Command, control: PathBuf, stderr: Stdio) -> Xfwd {
        let child = command.stderr(stderr).spawn().expect("starting xfwd");
        let mut xfwd = Xfwd {
            child: Some(child),
            control,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while xfwd.stats().is_none() {
            if let Some(status) = xfwd.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("xfwd exited during start-up: {status}");
            }
            assert!(Instant::now() < deadline, "xfwd never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        xfwd
    }

    /// `xfwd run` (routing mode) on fwd0 and fwd1 of `lab`, answering.
    pub fn start(lab: &xfwd_lab::Lab, punt: char) -> Xfwd {
        let (command, control) = Xfwd::command(lab, "fwd0,fwd1", punt);
        Xfwd::spawn(command, control)
    }

    /// `xfwd stats --json`, when it answers.
    pub fn stats(&self) -> Option<serde_json::Value> {
        let out = Some(self.ask(&["stats", "--json"])).filter(|o| o.status.success())?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `xfwd ARGS --control SOCKET`.
    pub fn ask(&self, args: &[&str]) -> Output {
        Command::new(XFWD)
            .args(args)
            .arg("--control")
            .arg(&self.control)
            .stdin(Stdio::null())
            .output()
            .expect("running xfwd")
    }

    /// Sends `signal` (as `kill` spells it, e.g. `-TERM`) and waits (up to 10 s) for the exit.
    pub fn signal(&mut self, signal: &str) -> ExitStatus {
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
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
            let _ = child.wait();
        }
    }
}

/// Sends `child` SIGTERM (so that xfwd detaches its XDP program and removes its control
/// socket) and waits up to 5 s for it to exit; SIGKILL if it hangs. The caller reaps it.
pub fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
}

/// The sum over the run loops of the pipeline counter `key` in `group` of `xfwd stats --json`.
pub fn pipeline(stats: &serde_json::Value, group: &str, key: &str) -> u64 {
    stats["pipeline"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q[group].as_array().unwrap().iter())
        .filter(|pair| pair[0] == key)
        .map(|pair| pair[1].as_u64().unwrap())
        .sum()
}

/// Runs `ip -n NS LINE` (LINE split on white space), fails the test on an error and returns
/// what it printed.
pub fn ip(ns: &str, line: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns])
        .args(line.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip -n {ns} {line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The part of pktgen's JSON receive report the lab tests read.
#[derive(Debug, serde::Deserialize)]
pub struct ProbeReport {
    /// Probes sent.
    pub sent: u64,
    /// Distinct probes received.
    pub unique: u64,
    /// Received probes per IP TTL.
    pub ttls: Vec<(u8, u64)>,
}

/// Writes `value` to `/proc/sys/net/{path}` in namespace `ns`.
pub fn sysctl(ns: &str, path: &str, value: &str) {
    let path = format!("/proc/sys/net/{path}");
    xfwd_lab::netns::run_in(ns, || std::fs::write(&path, value))
        .unwrap()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// Makes the kernel of namespace `fwd` resolve dst0 (IPv4 and IPv6: a datagram from fwd's
/// stack to each address makes it send ARP / ND) and waits (up to 10 s) until fwd1 knows its
/// MAC, so that probes do not wait in xfwd's hold buffer.
pub fn resolve_dst(fwd: &str) {
    use xfwd_lab::topology;
    for addr in [
        IpAddr::V4(topology::DST0.ipv4),
        IpAddr::V6(topology::DST0.ipv6),
    ] {
        let any: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        }
        .parse()
        .unwrap();
        let socket = xfwd_lab::netns::run_in(fwd, || UdpSocket::bind(any))
            .unwrap()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let _ = socket.send_to(b"resolve", SocketAddr::new(addr, 9));
            std::thread::sleep(Duration::from_millis(100));
            let out = Command::new("ip")
                .args(["-n", fwd, "neigh", "show", &addr.to_string(), "dev", "fwd1"])
                .output()
                .unwrap();
            let neigh = String::from_utf8_lossy(&out.stdout);
            if neigh.contains(&topology::DST0.mac_string()) {
                break;
            }
            assert!(Instant::now() < deadline, "{addr} not resolved: {neigh}");
        }
    }
}

/// `xfwd run` refused to start before touching an interface: exit status 78, its message
/// names `what` and the `KEY = "bypass"` override (`key`), and no XDP program is attached to
/// fwd0 in namespace `fwd`.
pub fn assert_refused(out: &Output, what: &str, key: &str, fwd: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains(what) && stderr.contains(&format!("{key} = \"bypass\"")),
        "{stderr}"
    );
    let link = Command::new("ip")
        .args(["-n", fwd, "link", "show", "fwd0"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&link.stdout).contains("xdp"),
        "no XDP program attached"
    );
}
