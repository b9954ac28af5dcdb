//! `cargo xtask bench endpoints` (root): xfwd's in-dataplane STAMP reflector and UDP echo next
//! to a kernel UDP echo, in one lab run, measured by one STAMP session-sender (`xfwd-gen
//! stamp`, a kernel UDP socket in src). Writes `docs/benchmarks/endpoints.md`.
//!
//! The three services live in fwd behind the same veth, at the same address:
//! - `xfwd stamp`: xfwd's STAMP reflector (`[[endpoint]] service = "stamp"`, port 862),
//!   answered in xfwd's run loop (AF_XDP; the XDP program steers the port to user space);
//! - `xfwd echo`: xfwd's echo service (port 7), the same path with the answer unchanged;
//! - `kernel echo`: `xfwd-gen echo` on a kernel UDP socket (port 9: the XDP program passes
//!   it to the kernel), `recvfrom` + `sendto` per datagram in one thread.
//!
//! Per target: round-trip delay percentiles at a low rate (1000 per second), then answered
//! datagrams per second of sending at increasing offered rates; targets alternate at each
//! rate so that the machine's load falls on all three alike. The one-minute load average is
//! recorded at the start and the end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use xfwd_lab::topology::FWD0;
use xfwd_lab::{Lab, Role};

use crate::exec::{exec, is_root};

/// The services measured: name, port.
const TARGETS: [(&str, u16); 3] = [("xfwd stamp", 862), ("xfwd echo", 7), ("kernel echo", 9)];

/// xfwd's configuration in the lab: the reflector and the echo.
const CONFIG: &str = "interfaces = [\"fwd0\", \"fwd1\"]\n\n[[endpoint]]\nservice = \"stamp\"\nbind = \"[::]:862\"\n\n[[endpoint]]\nservice = \"echo\"\nbind = \"[::]:7\"\n";

/// What the sender reported (the fields of `pktgen::stamp::StampReport` used here).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Session {
    sent: u64,
    received: u64,
    lost: u64,
    #[serde(default)]
    send_seconds: f64,
    rtt: Option<Latency>,
}

/// Round-trip delay percentiles in nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    min_ns: u64,
    p50_ns: u64,
    p90_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
    max_ns: u64,
}

/// Everything one run measured; saved as `target/endpoints/results.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    /// Per target: the delay session at 1000 per second.
    delay: Vec<(String, Session)>,
    /// Per offered rate, per target: the throughput session.
    rates: Vec<(f64, Vec<(String, Session)>)>,
    /// The 1-minute load average at the start and the end.
    load: (String, String),
    /// Test packets per delay session and per second of each rate step.
    delay_count: u32,
    step_secs: f64,
}

/// Entry from `cargo xtask bench endpoints`.
pub fn run(quick: bool, report_only: bool) -> anyhow::Result<()> {
    let root = crate::bench::workspace_root();
    let work = root.join("target/endpoints");
    let results_path = work.join("results.json");
    let results: Results = if report_only {
        let text = std::fs::read_to_string(&results_path)
            .with_context(|| format!("bench endpoints: no {}", results_path.display()))?;
        serde_json::from_str(&text).context("bench endpoints: reading results.json")?
    } else {
        if !is_root() {
            bail!("bench endpoints: needs root (network namespaces, XDP)");
        }
        std::fs::create_dir_all(&work).context("bench endpoints: creating target/endpoints")?;
        let results = measure(&root, &work, quick)?;
        std::fs::write(&results_path, serde_json::to_string_pretty(&results)?)
            .context("bench endpoints: writing results.json")?;
        results
    };
    let command = format!(
        "cargo xtask bench endpoints{}",
        if quick { " --quick" } else { "" }
    );
    let machine = crate::bench::machine::Machine::probe(&command);
    let report = render(&results, &machine);
    let out = root.join("docs/benchmarks/endpoints.md");
    std::fs::write(&out, report).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The 1-minute load average.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// A child process killed (SIGTERM, then SIGKILL) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds the binaries (release), brings up a lab, starts xfwd with its endpoints and the
/// kernel echo in fwd, and runs every session from src.
fn measure(root: &Path, work: &Path, quick: bool) -> anyhow::Result<Results> {
    exec(Command::new("cargo").current_dir(root).args([
        "build",
        "--release",
        "--locked",
        "-p",
        "forwarder",
        "-p",
        "pktgen",
        "--bins",
    ]))
    .context("bench endpoints: building xfwd and xfwd-gen")?;
    let xfwd = root.join("target/release/xfwd");
    let generator = root.join("target/release/xfwd-gen");
    let load_start = loadavg();
    let prefix = format!("xfwd-epb-{}", std::process::id());
    let lab = Lab::new(&prefix)?
        .up_scoped()
        .with_context(|| format!("bench endpoints: bringing up the lab {prefix}"))?;
    let config = work.join("xfwd.toml");
    std::fs::write(&config, CONFIG)?;
    let control = PathBuf::from(format!("/run/xfwd/{prefix}.sock"));
    let xfwd_process = Running(
        Command::new(&xfwd)
            .args(["run", "--netns", &lab.netns(Role::Fwd), "--config"])
            .arg(&config)
            .arg("--control")
            .arg(&control)
            .args([
                "--punt-device",
                &format!("e{}", std::process::id() % 100_000),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting xfwd")?,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Command::new(&xfwd)
        .args(["stats", "--control"])
        .arg(&control)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        if Instant::now() > deadline {
            bail!("bench endpoints: xfwd did not come up");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let echo_process = Running(
        Command::new(&generator)
            .args(["--netns", &lab.netns(Role::Fwd), "echo", "--bind", "[::]:9"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting the kernel echo")?,
    );
    std::thread::sleep(Duration::from_millis(300));

    let src = lab.netns(Role::Src);
    let session = |port: u16, count: u32, rate: f64| -> anyhow::Result<Session> {
        let out = Command::new(&generator)
            .args(["--netns", &src, "stamp", "--json", "--to"])
            .arg(format!("{}:{port}", FWD0.ipv4))
            .args(["--count", &count.to_string(), "--rate", &rate.to_string()])
            .args(["--size", "64", "--linger-ms", "500"])
            .output()
            .context("running xfwd-gen stamp")?;
        if !out.status.success() {
            bail!(
                "xfwd-gen stamp: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).context("xfwd-gen stamp's report")
    };
    // Warm-up: every path resolved (neighbours, routes) before anything is measured.
    for (_, port) in TARGETS {
        session(port, 100, 1000.0)?;
    }
    let delay_count = if quick { 2000 } else { 10_000 };
    let mut delay = Vec::new();
    for (name, port) in TARGETS {
        delay.push((name.to_owned(), session(port, delay_count, 1000.0)?));
    }
    let step_secs = if quick { 1.0 } else { 3.0 };
    let offered: &[f64] = if quick {
        &[20_000.0, 100_000.0, 400_000.0]
    } else {
        &[
            10_000.0, 25_000.0, 50_000.0, 100_000.0, 200_000.0, 400_000.0,
        ]
    };
    let mut rates = Vec::new();
    for &rate in offered {
        let mut row = Vec::new();
        for (name, port) in TARGETS {
            let count = (rate * step_secs) as u32;
            row.push((name.to_owned(), session(port, count, rate)?));
        }
        rates.push((rate, row));
    }
    // The processes stop before the lab's namespaces go.
    drop(echo_process);
    drop(xfwd_process);
    let _ = std::fs::remove_file(&control);
    drop(lab);
    Ok(Results {
        delay,
        rates,
        load: (load_start, loadavg()),
        delay_count,
        step_secs,
    })
}

fn micros(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// Answered datagrams per second of sending.
fn answered_pps(s: &Session) -> f64 {
    if s.send_seconds > 0.0 {
        s.received as f64 / s.send_seconds
    } else {
        0.0
    }
}

/// The report's Markdown.
fn render(r: &Results, machine: &crate::bench::machine::Machine) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# In-dataplane endpoints: xfwd's STAMP reflector and echo next to a kernel UDP echo\n"
    );
    let _ = writeln!(
        md,
        "Written by `cargo xtask bench endpoints` (root; `xtask/src/endpoints.rs`). One lab run \
         (namespaces src ─ fwd ─ dst, veth pairs): xfwd runs in fwd on fwd0 and fwd1 with a STAMP \
         reflector on port 862 and an echo on port 7 (`[[endpoint]]`), answered in its run loop \
         over AF_XDP (copy mode on veth); next to it in the same namespace, at the same address, \
         a kernel UDP echo on port 9 (`xfwd-gen echo`: `recvfrom` + `sendto` in one thread; the \
         XDP program passes port 9 to the kernel). One sender for all three: `xfwd-gen stamp` in \
         src, a kernel UDP socket, 64-byte test packets to {} over IPv4. The kernel echo and \
         the echo service answer the test packet unchanged (only the round trip is measured); \
         the reflector adds its timestamps.\n",
        FWD0.ipv4
    );
    let _ = writeln!(
        md,
        "**Taken under load**: the machine was shared with other engineers' builds; the \
         one-minute load average was {} at the start and {} at the end (2 cores). The sender, \
         xfwd's run loop, the kernel's softirqs and the echo share those 2 cores, so the rates \
         below are the whole lab's, not one reflector's ceiling; the ratios between targets \
         measured in the same run are what the run shows.\n",
        r.load.0, r.load.1
    );
    let _ = writeln!(md, "## Machine\n");
    for (key, value) in machine.facts() {
        let _ = writeln!(md, "- {key}: {value}");
    }
    let _ = writeln!(
        md,
        "\n## Round-trip delay at 1000 test packets per second\n\n{} test packets per target; \
         microseconds from the sender's transmit timestamp to its receipt of the answer (the \
         sender's own kernel path included). Ratio: the target's median over the kernel echo's.\n",
        r.delay_count
    );
    let _ = writeln!(
        md,
        "| target | answered | min | p50 | p90 | p99 | p99.9 | max | p50 ratio |\n|---|---|---|---|---|---|---|---|---|"
    );
    let kernel_p50 = r
        .delay
        .iter()
        .find(|(n, _)| n == "kernel echo")
        .and_then(|(_, s)| s.rtt)
        .map_or(0, |l| l.p50_ns);
    for (name, s) in &r.delay {
        let Some(l) = s.rtt else {
            let _ = writeln!(
                md,
                "| {name} | {}/{} | - | - | - | - | - | - | - |",
                s.received, s.sent
            );
            continue;
        };
        let ratio = if kernel_p50 > 0 {
            format!("{:.2}×", l.p50_ns as f64 / kernel_p50 as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            md,
            "| {name} | {}/{} | {} | {} | {} | {} | {} | {} | {ratio} |",
            s.received,
            s.sent,
            micros(l.min_ns),
            micros(l.p50_ns),
            micros(l.p90_ns),
            micros(l.p99_ns),
            micros(l.p999_ns),
            micros(l.max_ns)
        );
    }
    let _ = writeln!(
        md,
        "\n## Answered per second at increasing offered rates\n\n{} s of test packets per \
         target and rate, the targets in turn at each rate. Answered per second = answers \
         received / seconds the sender took to send (the sender may fall behind the offered \
         rate: then `sent/s` is lower). Ratio: xfwd's reflector over the kernel echo.\n",
        r.step_secs
    );
    let _ = writeln!(
        md,
        "| offered/s | target | sent/s | answered/s | lost | p50 µs | p99 µs | reflector / kernel echo | sender kept up |\n|---|---|---|---|---|---|---|---|---|"
    );
    for (rate, row) in &r.rates {
        let kernel = row
            .iter()
            .find(|(n, _)| n == "kernel echo")
            .map_or(0.0, |(_, s)| answered_pps(s));
        for (name, s) in row {
            let sent_pps = if s.send_seconds > 0.0 {
                s.sent as f64 / s.send_seconds
            } else {
                0.0
            };
            let ratio = if name == "xfwd stamp" && kernel > 0.0 {
                format!("{:.2}×", answered_pps(s) / kernel)
            } else {
                String::new()
            };
            let (p50, p99) = s.rtt.map_or(("-".into(), "-".into()), |l| {
                (micros(l.p50_ns), micros(l.p99_ns))
            });
            let kept_up = if sent_pps >= 0.95 * rate {
                "yes"
            } else {
                "no: sender-bound"
            };
            let _ = writeln!(
                md,
                "| {rate:.0} | {name} | {sent_pps:.0} | {:.0} | {} ({:.1}%) | {p50} | {p99} | {ratio} | {kept_up} |",
                answered_pps(s),
                s.lost,
                100.0 * s.lost as f64 / s.sent.max(1) as f64
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## Highest answered rate per target\n\nThe best step of each target above. Ratio: \
         over the kernel echo's.\n\n| target | answered/s | at offered/s | ratio |\n|---|---|---|---|"
    );
    let best = |target: &str| -> (f64, f64) {
        r.rates
            .iter()
            .flat_map(|(rate, row)| {
                row.iter()
                    .filter(|(n, _)| n == target)
                    .map(move |(_, s)| (answered_pps(s), *rate))
            })
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    };
    let kernel_best = best("kernel echo").0;
    for (name, _) in TARGETS {
        let (pps, rate) = best(name);
        let ratio = if kernel_best > 0.0 {
            format!("{:.2}×", pps / kernel_best)
        } else {
            "-".into()
        };
        let _ = writeln!(md, "| {name} | {pps:.0} | {rate:.0} | {ratio} |");
    }
    let _ = writeln!(
        md,
        "\n## Reading\n\n- Rows marked sender-bound are the lab's ceiling under this load, not a \
         reflector's: the sender (one thread, `sendto` per test packet, paced by short sleeps), \
         xfwd's run loop, the kernel's softirqs and the echo thread share 2 cores with whatever \
         else runs. The targets were measured in turn at each rate, so they met the same \
         conditions, but one step can still differ from the next by the load of that moment; \
         a ratio from sender-bound rows says how many answers came back per second of \
         sending, not how fast a reflector can go.\n- Delays are round trips through the \
         sender's own kernel path and the veth pair, both ways; pktgen's histogram buckets are \
         about 3% wide, so medians in the same bucket print equal.\n- The STAMP reflector does \
         more per packet than the echoes (timestamps read, the sender's fields copied; both \
         rebuild the headers and the full UDP checksum); both xfwd services answer from the run loop without a \
         system call per datagram, the kernel echo makes two (`recvfrom`, `sendto`)."
    );
    md
}
