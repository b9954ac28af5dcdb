//! `cargo xtask demo`: xfwd forwarding traffic across the virtual lab, end to end.
//!
//! 1. builds `xfwd` (release unless `--debug`) and runs `setup`;
//! 2. brings up the lab with extra prefixes routed via `dst` (taken down at the end, also on
//!    failure and Ctrl-C), and loads a slice of bgp-full-v4 (`--routes`, default 20,000
//!    prefixes spread over the table) with `ip -batch`: in `fwd` via `dst`, in `dst` as local
//!    routes (so `dst` accepts traffic to them, as it does for the lab's extra prefixes);
//! 3. starts `xfwd run` in `fwd` on both veths: the routing pipeline over the netlink mirror
//!    of `fwd` (or, with `--bare`, the bare engine: MACs rewritten, no lookups, the AF_XDP
//!    ceiling);
//! 4. sends a few warm-up probes (dst's neighbour entry is resolved through xfwd's hold
//!    buffer and an `NTF_USE` request), then UDP probes from `src` to addresses inside the
//!    BGP prefixes (IPv4) and the lab's extra prefixes (IPv6) with `xfwd probe`, printing
//!    xfwd's live counters every second;
//! 5. checks delivery, MACs, checksums and the TTL (decremented by one when routing), stops
//!    xfwd with SIGTERM, checks that no XDP program stays attached, and prints a summary.

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
    /// Prefixes of bgp-full-v4 loaded into fwd (via dst) and probed (routing mode).
    #[arg(long, default_value_t = 20_000)]
    routes: usize,
    /// Run xfwd's bare engine instead of the routing pipeline.
    #[arg(long)]
    bare: bool,
}

/// Whether a BGP prefix may be routed via dst in the lab: no default route, nothing that
/// overlaps the lab's own ranges (198.18.0.0/15), loopback, 0/8, 10/8, multicast or class E,
/// and no host routes (so `network + 1` is inside).
fn usable(addr: std::net::Ipv4Addr, len: u8) -> bool {
    let first = addr.octets()[0];
    let lab = u32::from(addr) >> 17 == u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) >> 17;
    (8..=24).contains(&len) && !lab && !matches!(first, 0 | 10 | 127) && first < 224
}

/// Picks `count` prefixes spread over bgp-full-v4 and returns them with one address inside
/// each.
fn bgp_slice(count: usize) -> anyhow::Result<Vec<(std::net::Ipv4Addr, u8)>> {
    let table = xfwd_benches::data::routes::BGP_FULL_V4
        .load()
        .context("loading bgp-full-v4")?;
    let candidates: Vec<(std::net::Ipv4Addr, u8)> = table
        .iter()
        .map(|r| (r.prefix.addr, r.prefix.len))
        .filter(|(a, l)| usable(*a, *l))
        .collect();
    let step = (candidates.len() / count.max(1)).max(1);
    let mut picked: Vec<(std::net::Ipv4Addr, u8)> =
        candidates.into_iter().step_by(step).take(count).collect();
    picked.sort();
    picked.dedup();
    Ok(picked)
}

/// Loads `prefixes` into the lab: via dst in fwd, local in dst.
fn load_routes(lab: &Lab, prefixes: &[(std::net::Ipv4Addr, u8)]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let (mut via, mut local) = (String::new(), String::new());
    for (addr, len) in prefixes {
        let _ = writeln!(
            via,
            "route replace {addr}/{len} via {} dev {}",
            topology::DST0.ipv4,
            topology::FWD1.name
        );
        let _ = writeln!(local, "route replace local {addr}/{len} dev lo");
    }
    for (role, batch) in [(Role::Fwd, via), (Role::Dst, local)] {
        let mut child = Command::new("ip")
            .args(["-n", &lab.netns(role), "-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .context("ip -batch")?;
        std::io::Write::write_all(
            &mut child.stdin.take().context("ip -batch stdin")?,
            batch.as_bytes(),
        )?;
        let status = child.wait()?;
        if !status.success() {
            bail!("ip -n {} -batch failed: {status}", lab.netns(role));
        }
    }
    Ok(())
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
    let bgp = if options.bare {
        Vec::new()
    } else {
        let started = Instant::now();
        let bgp = bgp_slice(options.routes)?;
        load_routes(&lab, &bgp)?;
        eprintln!(
            "demo: {} prefixes of bgp-full-v4 loaded in fwd (via dst) and dst (local) in {:.1} s",
            bgp.len(),
            started.elapsed().as_secs_f64()
        );
        bgp
    };
    let control = PathBuf::from(format!("/run/xfwd/demo-{}.sock", std::process::id()));
    let mut xfwd_run = Command::new(&xfwd);
    xfwd_run
        .args(["run", "--netns", &fwd, "--iface"])
        .arg(format!("{},{}", topology::FWD0.name, topology::FWD1.name))
        .arg("--queues")
        .arg(options.queues.to_string())
        .arg("--control")
        .arg(&control);
    if options.bare {
        xfwd_run.args(["--bare", "--peer-mac"]).arg(format!(
            "{}={},{}={}",
            topology::FWD0.name,
            topology::SRC0.mac_string(),
            topology::FWD1.name,
            topology::DST0.mac_string()
        ));
    }
    eprintln!("+ {}", crate::exec::describe(&xfwd_run));
    let child = xfwd_run.spawn().context("starting xfwd")?;
    let mut xfwd_child = ChildGuard(Some(child));
    wait_for_stats(&xfwd, &control, &mut xfwd_child, &interrupted)?;

    // At most 4096 destinations (one command-line argument holds them all), spread over the
    // loaded prefixes.
    let v4: Vec<IpAddr> = if bgp.is_empty() {
        lab.extra_ipv4_prefixes()
            .take(256)
            .map(|(net, _)| IpAddr::from((u32::from(net) + 1).to_be_bytes()))
            .collect()
    } else {
        let step = (bgp.len() / 4096).max(1);
        bgp.iter()
            .step_by(step)
            .take(4096)
            .map(|(net, _)| IpAddr::from((u32::from(*net) + 1).to_be_bytes()))
            .collect()
    };
    let v6: Vec<IpAddr> = lab
        .extra_ipv6_prefixes()
        .take(256)
        .map(|(net, _)| IpAddr::from((u128::from(net) + 1).to_be_bytes()))
        .collect();
    if !options.bare {
        // dst's neighbour entries in fwd: the first probes wait in xfwd's hold buffer while
        // the mirror asks the kernel to resolve (NTF_USE).
        for (src, dst) in [
            (IpAddr::V4(topology::SRC0.ipv4), v4[0]),
            (IpAddr::V6(topology::SRC0.ipv6), v6[0]),
        ] {
            let warm = probe(&xfwd, &lab, &control, src, &[dst], 3, 100, &interrupted)?;
            eprintln!(
                "demo: warm-up to {dst}: {}/{} delivered through the hold buffer",
                warm.unique, warm.sent
            );
        }
    }
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
    if options.bare {
        println!(
            "mode: bare (MAC rewrite, no lookups); lab {}",
            options.prefix
        );
    } else {
        println!(
            "mode: router (dataplane over the netlink mirror); {} bgp-full-v4 prefixes via dst; lab {}",
            bgp.len(),
            options.prefix
        );
    }
    println!("xfwd: {final_stats}");
    let ttl = if options.bare { 64 } else { 63 };
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
        if report.ttls.iter().any(|(t, _)| *t != ttl) {
            failed.push(format!("{family}: TTLs {:?}, expected {ttl}", report.ttls));
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
    // Each frame is counted once: by the engine (its `dropped` verdicts) or, for a verdict
    // the run loop could not carry out, by the loop (its `drops`).
    let loop_dropped: u64 = value["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|q| q["drops"].as_array().into_iter().flatten())
        .filter_map(|d| d[1].as_u64())
        .sum();
    let engine_dropped: u64 = value["pipeline"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|q| q["verdicts"].as_array().into_iter().flatten())
        .filter(|pair| pair[0] == "dropped")
        .filter_map(|pair| pair[1].as_u64())
        .sum();
    let dropped = loop_dropped + engine_dropped;
    let group = |name: &str| -> String {
        let mut totals: Vec<(String, u64)> = Vec::new();
        for q in value["pipeline"].as_array().into_iter().flatten() {
            for pair in q[name].as_array().into_iter().flatten() {
                let (Some(k), Some(n)) = (pair[0].as_str(), pair[1].as_u64()) else {
                    continue;
                };
                match totals.iter_mut().find(|(t, _)| t == k) {
                    Some((_, total)) => *total += n,
                    None => totals.push((k.to_owned(), n)),
                }
            }
        }
        totals
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "rx {} tx {} dropped {} (up {:.1} s)",
        sum("rx_packets"),
        sum("tx_packets"),
        dropped,
        value["uptime_seconds"].as_f64().unwrap_or(0.0)
    );
    if value["mode"] == "router" {
        line.push_str(&format!(
            "; pipeline [{}]; drops [{}]; dst-cache [{}]; netlink generation {}",
            group("verdicts"),
            group("drops"),
            group("dst_cache"),
            value["netlink_generation"].as_u64().unwrap_or(0)
        ));
    }
    Some(line)
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
