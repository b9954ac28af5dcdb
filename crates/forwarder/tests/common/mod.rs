//! What the privileged lab tests of a running `xfwd` share: the process (stopped with
//! SIGTERM, then killed, when the test ends, also on failure), its counters, and sysctls in a
//! lab namespace. Each test file uses part of it.
#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `xfwd` binary under test.
pub const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

/// A running `xfwd`, stopped when dropped.
pub struct Xfwd {
    /// The process.
    pub child: Child,
    /// Its control socket.
    pub control: String,
}

impl Xfwd {
    /// Starts `xfwd run` in `lab`'s forwarding namespace on fwd0 and fwd1, its punt device
    /// named `punt` plus this process's id, and waits (up to 20 s) until it answers `stats`.
    pub fn start(lab: &xfwd_lab::Lab, punt: char) -> Xfwd {
        let fwd = lab.netns(xfwd_lab::Role::Fwd);
        let control = format!("/run/xfwd/test-{}.sock", lab.prefix());
        let xfwd = Xfwd {
            child: Command::new(XFWD)
                .args(["run", "--netns", &fwd, "--iface", "fwd0,fwd1"])
                .args(["--control", &control])
                .args([
                    "--punt-device",
                    &format!("{punt}{}", std::process::id() % 100_000),
                ])
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
            control,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while xfwd.stats().is_none() {
            assert!(Instant::now() < deadline, "xfwd never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        xfwd
    }

    /// `xfwd stats --json`, when it answers.
    pub fn stats(&self) -> Option<serde_json::Value> {
        let out = Command::new(XFWD)
            .args(["stats", "--json", "--control", &self.control])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }
}

impl Drop for Xfwd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

/// Writes `value` to `/proc/sys/net/{path}` in namespace `ns`.
pub fn sysctl(ns: &str, path: &str, value: &str) {
    let path = format!("/proc/sys/net/{path}");
    xfwd_lab::netns::run_in(ns, || std::fs::write(&path, value))
        .unwrap()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}
