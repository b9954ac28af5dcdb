//! `cargo xtask demo`: xfwd forwarding traffic across the virtual lab, end to end.
//!
//! 1. builds `xfwd` (release unless `--debug`) and runs `setup`;
//! 2. brings up the lab with extra prefixes routed via `dst` (taken down at the end, also on
//!    failure and Ctrl-C);
//! 3. starts `xfwd run` in `fwd` on both veths;
//! 4. sends UDP probes from `src` to addresses spread over the extra prefixes (IPv4, then
//!    IPv6) with `xfwd probe`, printing xfwd's live counters every second;
//! 5. checks delivery, MACs and checksums, stops xfwd with SIGTERM, checks that no XDP
//!    program stays attached, and prints a summary.
//!
//! Until the routing pipeline (crates dataplane and netlink-mirror) is part of xfwd, the demo
//! runs xfwd's bare processor: MACs rewritten, no route lookup, TTL untouched.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use xfwd_lab::{Lab, Role, topology};

/// Options of `cargo xtask demo`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Lab prefix (namespaces PREFIX-src, PREFIX-fwd, PREFIX-dst).
    #[arg(long, default_value = "xfwd-demo")]
    prefix: String,
    /// Extra prefixes routed via dst (IPv4 /24s and IPv6 /64s); probes spread over them.
    #[arg(long, default_value_t = 256)]
    extra_prefixes: usize,
    /// IPv4 probes to send (IPv6: a tenth as many).
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Probes per second.
    #[arg(long, default_value_t = 50_000)]
    rate: u64,
    /// Run loops (queues) of xfwd.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// Smallest delivered fraction that passes.
    #[arg(long, default_value_t = 0.99)]
    min_delivery: f64,
    /// Use this xfwd binary instead of building one.
    #[arg(long)]
    xfwd: Option<PathBuf>,
    /// Build and run the debug binary (faster to build, slower to forward).
    #[arg(long)]
    debug: bool,
}

/// One probe run's report, as `xfwd probe --json` prints it.
#[derive(Debug, serde::Deserialize)]
struct Report {
    sent: u64,
    unique: u64,
    bad_checksum: u64,
    macs: Vec<(String, String, u64)>,
    ttls: Vec<(u8, u64)>,
    send_seconds: f64,
}

/// Runs the demo.
pub fn run(options: &Options) -> anyhow::Result<()> {
    if !crate::exec::is_root() {
        bail!("the demo needs root (network namespaces, XDP): run `sudo cargo xtask demo`");
    }
    crate::setup::run(&crate::setup::Options {})?;
    let xfwd = match &options.xfwd {
        Some(path) => path.clone(),
        None => build(options.debug)?,
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())?;
    }
    let lab = Lab::new(&options.prefix)?
        .with_extra_prefixes(options.extra_prefixes.max(1), Lab::DEFAULT_EXTRA_IPV4_LEN)?;
    if lab.status().nodes.iter().any(|n| n.detail.is_some()) {
        bail!(
            "a lab named {} exists already; take it down with `cargo xtask lab --prefix {} down`",
            options.prefix,
            options.prefix
        );
    }
    eprintln!(
        "demo: lab {} up with {} extra prefixes via dst",
        options.prefix, options.extra_prefixes
    );
    let lab = lab.up_scoped()?;
    let fwd = lab.netns(Role::Fwd);
    let control = PathBuf::from(format!("/run/xfwd/demo-{}.sock", std::process::id()));
    let mut xfwd_run = Command::new(&xfwd);
    xfwd_run
        .args(["run", "--netns", &fwd, "--iface"])
        .arg(format!("{},{}", topology::FWD0.name, topology::FWD1.name))
        .arg("--queues")
        .arg(options.queues.to_string())
        .arg("--control")
        .arg(&control)
        .args(["--bare", "--peer-mac"])
        .arg(format!(
            "{}={},{}={}",
            topology::FWD0.name,
            topology::SRC0.mac_string(),
            topology::FWD1.name,
            topology::DST0.mac_string()
        ));
    eprintln!("+ {}", crate::exec::describe(&xfwd_run));
    let child = xfwd_run.spawn().context("starting xfwd")?;
    let mut xfwd_child = ChildGuard(Some(child));
    wait_for_stats(&xfwd, &control, &mut xfwd_child, &interrupted)?;

    let v4: Vec<IpAddr> = lab
        .extra_ipv4_prefixes()
        .take(256)
        .map(|(net, _)| IpAddr::from((u32::from(net) + 1).to_be_bytes()))
        .collect();
    let v6: Vec<IpAddr> = lab
        .extra_ipv6_prefixes()
        .take(256)
        .map(|(net, _)| IpAddr::from((u128::from(net) + 1).to_be_bytes()))
        .collect();
    let mut reports = Vec::new();
    for (family, src, dsts, count) in [
        ("IPv4", IpAddr::V4(topology::SRC0.ipv4), &v4, options.count),
        (
            "IPv6",
            IpAddr::V6(topology::SRC0.ipv6),
            &v6,
            (options.count / 10).max(1),
        ),
    ] {
        eprintln!(
            "demo: {family}: {count} probes at {} pps from src to {} destinations",
            options.rate,
            dsts.len()
        );
        let report = probe(
            &xfwd,
            &lab,
            &control,
            src,
            dsts,
            count,
            options.rate,
            &interrupted,
        )?;
        reports.push((family, report));
    }
    let final_stats = stats_line(&xfwd, &control).unwrap_or_default();
    xfwd_child.terminate()?;
    let still = Command::new("ip")
        .args(["-n", &fwd, "-d", "link", "show"])
        .output()?;
    let leftover = String::from_utf8_lossy(&still.stdout).contains("prog/xdp");

    println!("\n== xfwd demo summary ==");
    println!(
        "mode: bare (MAC rewrite, no lookups); lab {}",
        options.prefix
    );
    println!("xfwd: {final_stats}");
    let mut failed = Vec::new();
    for (family, report) in &reports {
        let delivery = report.unique as f64 / report.sent.max(1) as f64;
        println!(
            "{family}: sent {} in {:.2} s, delivered {} ({:.2}%), bad checksums {}, TTL {:?}, MACs {:?}",
            report.sent,
            report.send_seconds,
            report.unique,
            delivery * 100.0,
            report.bad_checksum,
            report.ttls,
            report
                .macs
                .iter()
                .map(|(s, d, _)| format!("{s}->{d}"))
                .collect::<Vec<_>>()
        );
        if delivery < options.min_delivery {
            failed.push(format!("{family}: {:.2}% delivered", delivery * 100.0));
        }
        if report.bad_checksum > 0 {
            failed.push(format!("{family}: {} bad checksums", report.bad_checksum));
        }
        let expected = (topology::FWD1.mac_string(), topology::DST0.mac_string());
        if report
            .macs
            .iter()
            .any(|(s, d, _)| (s.clone(), d.clone()) != expected)
        {
            failed.push(format!(
                "{family}: frames with other MACs than {expected:?}"
            ));
        }
    }
    if leftover {
        failed.push("an XDP program is still attached in fwd after SIGTERM".to_owned());
    }
    println!(
        "XDP program detached after SIGTERM: {}",
        if leftover { "NO" } else { "yes" }
    );
    drop(lab);
    println!("lab {} taken down", options.prefix);
    if !failed.is_empty() {
        bail!("demo failed: {}", failed.join("; "));
    }
    println!("demo passed");
    Ok(())
}

/// Builds xfwd and returns its path.
fn build(debug: bool) -> anyhow::Result<PathBuf> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    cargo.args(["build", "-p", "forwarder", "--bin", "xfwd"]);
    if !debug {
        cargo.arg("--release");
    }
    crate::exec::exec(&mut cargo)?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    Ok(target
        .join(if debug { "debug" } else { "release" })
        .join("xfwd"))
}

/// Kills xfwd (SIGTERM, then SIGKILL) if the demo ends early.
struct ChildGuard(Option<Child>);

impl ChildGuard {
    /// SIGTERM and wait (up to 10 s) for a clean exit.
    fn terminate(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.0.take() else {
            return Ok(());
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("xfwd exited with {status}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("xfwd did not stop within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

fn wait_for_stats(
    xfwd: &Path,
    control: &Path,
    child: &mut ChildGuard,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !interrupted.load(Ordering::Relaxed) {
        if let Some(process) = child.0.as_mut()
            && let Some(status) = process.try_wait()?
        {
            child.0 = None;
            bail!("xfwd exited during start-up ({status})");
        }
        if stats_line(xfwd, control).is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("xfwd did not answer on {} in time", control.display())
}

/// One line of xfwd's counters, or None when it does not answer.
fn stats_line(xfwd: &Path, control: &Path) -> Option<String> {
    let out = Command::new(xfwd)
        .args(["stats", "--json", "--control"])
        .arg(control)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let sum = |field: &str| -> u64 {
        value["queues"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|q| q["ports"].as_array().into_iter().flatten())
            .filter_map(|p| p[field].as_u64())
            .sum()
    };
    let dropped: u64 = value["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|q| q["drops"].as_array().into_iter().flatten())
        .filter_map(|d| d[1].as_u64())
        .sum();
    Some(format!(
        "rx {} tx {} dropped {} (up {:.1} s)",
        sum("rx_packets"),
        sum("tx_packets"),
        dropped,
        value["uptime_seconds"].as_f64().unwrap_or(0.0)
    ))
}

#[allow(clippy::too_many_arguments, reason = "one call site, all plain values")]
fn probe(
    xfwd: &Path,
    lab: &Lab,
    control: &Path,
    src: IpAddr,
    dsts: &[IpAddr],
    count: u64,
    rate: u64,
    interrupted: &AtomicBool,
) -> anyhow::Result<Report> {
    let dst_list: Vec<String> = dsts.iter().map(ToString::to_string).collect();
    let mut command = Command::new(xfwd);
    command
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", topology::SRC0.name, "--to-mac"])
        .arg(topology::FWD0.mac_string())
        .arg("--src")
        .arg(src.to_string())
        .arg("--dst")
        .arg(dst_list.join(","))
        .args([
            "--to-netns",
            &lab.netns(Role::Dst),
            "--capture",
            topology::DST0.name,
        ])
        .arg("--count")
        .arg(count.to_string())
        .arg("--rate")
        .arg(rate.to_string())
        .stdout(Stdio::piped());
    let mut child = command.spawn().context("starting xfwd probe")?;
    let started = Instant::now();
    loop {
        if let Some(_status) = child.try_wait()? {
            break;
        }
        if interrupted.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("interrupted");
        }
        std::thread::sleep(Duration::from_secs(1));
        if let Some(line) = stats_line(xfwd, control) {
            eprintln!("  [{:>4.1} s] xfwd {line}", started.elapsed().as_secs_f64());
        }
    }
    let output = child.wait_with_output()?;
    serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "xfwd probe printed no report: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
