//! `cargo xtask bench e2e`: end-to-end forwarding in the lab, the same generator and flows
//! against several forwarders in `fwd`; RFC 2544-style NDR/PDR search, latency at half NDR, CPU
//! time per packet on each side; writes `docs/benchmarks/e2e.md` and `docs/benchmarks/e2e/`.
//!
//! Cases: the kernel's forwarding, XDP + `bpf_fib_lookup` (`crates/pktgen/bpf/xdp_fib.c`), and
//! two AF_XDP forwarders given as command lines (the bare MAC-swapping one and xfwd).
//! Options after `--` (`cargo xtask bench e2e --quick -- --cases kernel,xdp`).

pub(crate) mod harness;
mod report;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::exec::{exec, is_root};

pub use harness::Trial;

/// The forwarders a run compares, in report order.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// The Linux kernel's own IPv4 forwarding in `fwd` (threaded NAPI on fwd0).
    Kernel,
    /// XDP on fwd0: bpf_fib_lookup in the kernel's FIB, bpf_redirect to fwd1.
    Xdp,
    /// The bare AF_XDP forwarder: same sockets, rings and batching as xfwd, MAC swap, no lookup.
    Bare,
    /// xfwd itself.
    Xfwd,
}

impl Case {
    /// The name in tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Case::Kernel => "kernel",
            Case::Xdp => "xdp-fib",
            Case::Bare => "afxdp-bare",
            Case::Xfwd => "xfwd",
        }
    }
}

/// Options of `cargo xtask bench e2e`, given after `--`.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask bench e2e [--quick] [--report-only] --", about)]
pub struct E2eOptions {
    /// Cases to run (default: kernel, xdp, and bare/xfwd when their command line is known).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<Case>,
    /// Command line of the bare AF_XDP MAC-swapping forwarder, run in fwd pinned to the
    /// forwarder CPU; `{fwd0}`, `{fwd1}`, `{netns}` and `{cpu}` are replaced.
    #[arg(long)]
    bare_cmd: Option<String>,
    /// Command line of xfwd, as for --bare-cmd.
    #[arg(long)]
    xfwd_cmd: Option<String>,
    /// Name prefix of the lab's namespaces (created and removed by the run).
    #[arg(long, default_value = "xfwd-e2e")]
    prefix: String,
    /// The generator's CPU.
    #[arg(long, default_value_t = 0)]
    gen_cpu: usize,
    /// The forwarder's CPU (fwd0/fwd1 NAPI threads, AF_XDP forwarder threads).
    #[arg(long, default_value_t = 1)]
    fwd_cpu: usize,
    /// The receiver's CPU (dst0's NAPI thread and the receiver).
    #[arg(long, default_value_t = 0)]
    rx_cpu: usize,
    /// Real-time priority (SCHED_FIFO, 1..=99) of the forwarder (its NAPI threads or its
    /// process) and the receiving side (dst0's NAPI thread, the receiver), so that other work on
    /// a busy machine cannot stall the measured path; the generator stays at normal priority
    /// (a spinning RT thread would trip the kernel's RT throttling). 0: everything at normal
    /// priority.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=99))]
    rt: u8,
    /// Seconds per trial (default 2; 0.5 with --quick).
    #[arg(long)]
    trial_secs: Option<f64>,
    /// Load only the first N routes of bgp-full-v4 (default: all).
    #[arg(long)]
    routes: Option<usize>,
    /// Frame sizes (with FCS).
    #[arg(long, value_delimiter = ',', default_values_t = [64u16, 1518])]
    sizes: Vec<u16>,
    /// Flow counts (destinations drawn evenly from the loaded table).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 8192])]
    flows: Vec<usize>,
    /// Offered rate (packets per second) of the matched-load comparison of xfwd against the
    /// bare AF_XDP forwarder (default: MATCHED_SHARE of the lower of their two NDRs at
    /// 64 B and 8k flows).
    #[arg(long)]
    matched_rate: Option<f64>,
}

/// Frame size of the matched-load comparison (with FCS).
pub const MATCHED_SIZE: u16 = 64;
/// Flows of the matched-load comparison.
pub const MATCHED_FLOWS: usize = 8192;
/// Trials per forwarder in the matched-load comparison (the report gives their median).
pub const MATCHED_TRIALS: usize = 5;
/// The matched load's share of the lower NDR of the two forwarders: below both forwarders'
/// zero-loss rate, so each handles all of it.
pub const MATCHED_SHARE: f64 = 0.8;

/// xfwd against the bare AF_XDP forwarder at one offered load: each forwarder's CPU time per
/// packet, trial by trial (the goal: xfwd's median at most 1.1× bare's).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Matched {
    /// Frame size with FCS.
    pub size: u16,
    /// Flows.
    pub flows: usize,
    /// The offered rate, packets per second.
    pub rate: f64,
    /// Where the rate came from.
    pub rate_from: String,
    /// Each forwarder's trials (bare first).
    pub cases: Vec<(Case, Vec<Trial>)>,
}

/// Fixed settings of a run, derived from the options.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    /// Seconds per trial.
    pub trial_secs: f64,
    /// Stop a search when (hi − lo) ≤ precision × hi.
    pub precision: f64,
    /// PDR's loss limit.
    pub pdr_loss: f64,
    /// CPUs.
    pub gen_cpu: usize,
    /// The forwarder's CPU.
    pub fwd_cpu: usize,
    /// The receiver's CPU.
    pub rx_cpu: usize,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// SCHED_FIFO priority of the forwarder and the receiving side, if any.
    #[serde(default)]
    pub rt: Option<u8>,
}

/// One (case, frame size, flow count) measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The forwarder.
    pub case: Case,
    /// Frame size with FCS.
    pub size: u16,
    /// Flows.
    pub flows: usize,
    /// The trial with the generator unlimited.
    pub max: Trial,
    /// The best zero-loss trial (None: none passed).
    pub ndr: Option<Trial>,
    /// The best ≤ pdr_loss trial.
    pub pdr: Option<Trial>,
    /// Whether NDR is the generator's maximum (the forwarder lost nothing at full speed).
    pub generator_limited: bool,
    /// The trial at half of NDR (latency).
    pub latency: Option<Trial>,
    /// Trials run for this point.
    pub trials: usize,
}

/// Everything a run measured; saved as `target/e2e/results.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// Settings.
    pub settings: Settings,
    /// Routes in fwd's kernel FIB (besides the lab's own).
    pub routes_loaded: usize,
    /// Seconds `ip -batch` took to load them.
    pub route_load_secs: f64,
    /// Load averages (1 min) at the start and the end of the run.
    pub load: (String, String),
    /// Minutes the whole run took.
    pub minutes: f64,
    /// Cases not run, with why.
    pub skipped: Vec<(Case, String)>,
    /// Notes gathered during the run (attribution problems, forwarder start-up times).
    pub notes: Vec<String>,
    /// The measurements.
    pub points: Vec<Point>,
    /// xfwd against the bare forwarder at one offered load (None: not both were run).
    #[serde(default)]
    pub matched: Option<Matched>,
}

/// Entry from `cargo xtask bench e2e`.
pub fn run(quick: bool, report_only: bool, args: &[String]) -> anyhow::Result<()> {
    let options =
        E2eOptions::try_parse_from(std::iter::once("e2e".to_owned()).chain(args.iter().cloned()))
            .context("bench e2e: options after --")?;
    let root = crate::bench::workspace_root();
    let work = root.join("target/e2e");
    let results_path = work.join("results.json");
    let mut command_line = "cargo xtask bench e2e".to_owned();
    if quick {
        command_line.push_str(" --quick");
    }
    if !args.is_empty() {
        command_line.push_str(&format!(" -- {}", args.join(" ")));
    }
    let results = if report_only {
        let text = std::fs::read_to_string(&results_path).with_context(|| {
            format!(
                "bench e2e: no {} (run without --report-only first)",
                results_path.display()
            )
        })?;
        serde_json::from_str(&text).context("bench e2e: reading results.json")?
    } else {
        if !is_root() {
            bail!(
                "bench e2e: needs root (network namespaces, XDP); run `sudo cargo xtask bench e2e`"
            );
        }
        std::fs::create_dir_all(&work).context("bench e2e: creating target/e2e")?;
        let results = measure(&root, &work, quick, &options)?;
        std::fs::write(&results_path, serde_json::to_string_pretty(&results)?)
            .context("bench e2e: writing results.json")?;
        results
    };
    let mut machine = crate::bench::machine::Machine::probe(&command_line);
    machine.note(
        "load during the run",
        format!(
            "{} at the start, {} at the end (1-minute averages; 2 cores: above 0.5 means other work shared the CPUs)",
            results.load.0, results.load.1
        ),
    );
    if results.settings.quick {
        machine.note(
            "mode",
            "--quick: short trials, coarse search; indicative only".into(),
        );
    }
    let out_dir = root.join("docs/benchmarks");
    let plot_dir = out_dir.join("e2e");
    std::fs::create_dir_all(&plot_dir).context("bench e2e: creating docs/benchmarks/e2e")?;
    report::plot(&plot_dir.join("ndr.svg"), &results).context("bench e2e: plotting")?;
    let text = report::render(&results, &machine);
    let path = out_dir.join("e2e.md");
    std::fs::write(&path, text)
        .with_context(|| format!("bench e2e: writing {}", path.display()))?;
    println!(
        "bench e2e: {} points; report {}",
        results.points.len(),
        path.display()
    );
    Ok(())
}

/// The 1-minute load average.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// Builds the generator and the XDP program, brings the lab up, loads the routes and runs
/// every case.
fn measure(root: &Path, work: &Path, quick: bool, options: &E2eOptions) -> anyhow::Result<Results> {
    let started = Instant::now();
    let load_start = loadavg();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    exec(std::process::Command::new(&cargo).current_dir(root).args([
        "build",
        "--release",
        "--locked",
        "-p",
        "pktgen",
    ]))
    .context("bench e2e: building xfwd-gen")?;
    let generator = root.join("target/release/xfwd-gen");
    let xdp_object = work.join("xdp_fib.o");
    // asm/types.h lives under Debian's multiarch include directory.
    let multiarch = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    exec(
        std::process::Command::new("clang")
            .args(["-O2", "-g", "-target", "bpf", &multiarch, "-c"])
            .arg(root.join("crates/pktgen/bpf/xdp_fib.c"))
            .arg("-o")
            .arg(&xdp_object),
    )
    .context("bench e2e: compiling the XDP program (Debian: clang, libbpf-dev)")?;

    let settings = Settings {
        trial_secs: options.trial_secs.unwrap_or(if quick { 0.5 } else { 2.0 }),
        precision: if quick { 0.1 } else { 0.02 },
        pdr_loss: 0.005,
        gen_cpu: options.gen_cpu,
        fwd_cpu: options.fwd_cpu,
        rx_cpu: options.rx_cpu,
        quick,
        rt: (options.rt > 0).then_some(options.rt),
    };
    let mut cases: Vec<Case> = if options.cases.is_empty() {
        vec![Case::Kernel, Case::Xdp, Case::Bare, Case::Xfwd]
    } else {
        options.cases.clone()
    };
    cases.sort();
    cases.dedup();
    let (mut bare_cmd, mut xfwd_cmd) = (options.bare_cmd.clone(), options.xfwd_cmd.clone());
    let wants_forwarder = cases.contains(&Case::Bare) || cases.contains(&Case::Xfwd);
    if wants_forwarder && root.join("crates/forwarder").is_dir() {
        // The forwarder has landed: its binary plays both AF_XDP cases unless told otherwise.
        exec(std::process::Command::new(&cargo).current_dir(root).args([
            "build",
            "--release",
            "--locked",
            "-p",
            "forwarder",
        ]))
        .context("bench e2e: building xfwd")?;
        let (bare, xfwd) = default_forwarder_commands(&root.join("target/release/xfwd"));
        bare_cmd.get_or_insert(bare);
        xfwd_cmd.get_or_insert(xfwd);
    }
    let mut skipped = Vec::new();
    let mut runnable = Vec::new();
    for case in cases {
        let command = match case {
            Case::Bare => bare_cmd.clone(),
            Case::Xfwd => xfwd_cmd.clone(),
            _ => Some(String::new()),
        };
        match command {
            Some(command) => runnable.push((case, command)),
            None => skipped.push((
                case,
                format!(
                    "no command line (--{}-cmd): waiting on the forwarder (crates/forwarder)",
                    if case == Case::Bare { "bare" } else { "xfwd" }
                ),
            )),
        }
    }

    let mut lab = harness::Lab::up(&options.prefix, &generator, &settings, work)?;
    let (routes_loaded, route_load_secs) = lab.load_routes(options.routes)?;
    let mut points = Vec::new();
    let runnable_commands = runnable.clone();
    for (case, command) in runnable {
        eprintln!("bench e2e: case {}", case.label());
        match lab.run_case(case, &command, &xdp_object, &options.sizes, &options.flows) {
            Ok(mut measured) => points.append(&mut measured),
            Err(error) => {
                eprintln!("bench e2e: case {} failed: {error:#}", case.label());
                skipped.push((case, format!("failed: {error:#}")));
            }
        }
    }
    let matched = measure_matched(&mut lab, &runnable_commands, &points, &xdp_object, options);
    let matched = match matched {
        Ok(m) => m,
        Err(error) => {
            eprintln!("bench e2e: matched load failed: {error:#}");
            lab.note(format!("the matched-load comparison failed: {error:#}"));
            None
        }
    };
    let notes = lab.take_notes();
    drop(lab);
    Ok(Results {
        settings,
        routes_loaded,
        route_load_secs,
        load: (load_start, loadavg()),
        minutes: started.elapsed().as_secs_f64() / 60.0,
        skipped,
        notes,
        points,
        matched,
    })
}

/// The matched-load comparison: when both AF_XDP forwarders ran, each is started again and
/// offered the same rate ([`E2eOptions::matched_rate`], else [`MATCHED_SHARE`] of the lower of
/// their NDRs at [`MATCHED_SIZE`] and [`MATCHED_FLOWS`]) for [`MATCHED_TRIALS`] trials.
fn measure_matched(
    lab: &mut harness::Lab,
    runnable: &[(Case, String)],
    points: &[Point],
    xdp_object: &Path,
    options: &E2eOptions,
) -> anyhow::Result<Option<Matched>> {
    let command = |case: Case| {
        runnable
            .iter()
            .find(|(c, _)| *c == case)
            .map(|(_, command)| command.clone())
    };
    let (Some(bare), Some(xfwd)) = (command(Case::Bare), command(Case::Xfwd)) else {
        return Ok(None);
    };
    let Some((rate, rate_from)) = matched_rate(points, options.matched_rate) else {
        lab.note(format!(
            "matched load not measured: no NDR of both AF_XDP forwarders at {MATCHED_SIZE} B and {MATCHED_FLOWS} flows (give --matched-rate)"
        ));
        return Ok(None);
    };
    let mut cases = Vec::new();
    for (case, command) in [(Case::Bare, bare), (Case::Xfwd, xfwd)] {
        eprintln!("bench e2e: matched load, case {}", case.label());
        let trials = lab.run_fixed(
            case,
            &command,
            xdp_object,
            rate,
            MATCHED_SIZE,
            MATCHED_FLOWS,
            MATCHED_TRIALS,
        )?;
        cases.push((case, trials));
    }
    Ok(Some(Matched {
        size: MATCHED_SIZE,
        flows: MATCHED_FLOWS,
        rate,
        rate_from,
        cases,
    }))
}

/// The matched load's rate and where it came from: the one given, else [`MATCHED_SHARE`] of
/// the lower NDR of the bare forwarder and xfwd at [`MATCHED_SIZE`] and [`MATCHED_FLOWS`].
fn matched_rate(points: &[Point], given: Option<f64>) -> Option<(f64, String)> {
    if let Some(rate) = given {
        return Some((rate, "--matched-rate".into()));
    }
    let ndr = |case: Case| {
        points
            .iter()
            .find(|p| p.case == case && p.size == MATCHED_SIZE && p.flows == MATCHED_FLOWS)
            .and_then(|p| p.ndr.as_ref())
            .map(|t| t.tx_pps)
            .filter(|&r| r > 0.0)
    };
    let lower = ndr(Case::Bare)?.min(ndr(Case::Xfwd)?);
    Some((
        lower * MATCHED_SHARE,
        format!(
            "{:.0}% of the lower NDR of afxdp-bare and xfwd",
            MATCHED_SHARE * 100.0
        ),
    ))
}

/// The command lines of the bare AF_XDP forwarder and of xfwd, from the `xfwd` binary
/// (`{fwd0}`, `{fwd1}`, `{cpu}` are filled in by the harness). Bare mode pairs fwd0 with fwd1 and
/// writes the MAC behind each (src0's, dst0's) as the destination.
fn default_forwarder_commands(xfwd: &Path) -> (String, String) {
    use xfwd_lab::topology::{DST0, SRC0};
    let bin = display(xfwd);
    (
        format!(
            "{bin} run --netns {{netns}} --iface {{fwd0}},{{fwd1}} --bare --peer-mac {{fwd0}}={},{{fwd1}}={} --cpus {{cpu}} --no-punt",
            SRC0.mac_string(),
            DST0.mac_string()
        ),
        format!("{bin} run --netns {{netns}} --iface {{fwd0}},{{fwd1}} --cpus {{cpu}} --no-punt"),
    )
}

/// A path as a string for command lines.
fn display(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse() {
        let o = E2eOptions::try_parse_from([
            "e2e",
            "--cases",
            "kernel,xfwd",
            "--xfwd-cmd",
            "xfwd run --iface {fwd0},{fwd1}",
        ])
        .unwrap();
        assert_eq!(o.cases, [Case::Kernel, Case::Xfwd]);
        assert_eq!(o.sizes, [64, 1518]);
        assert_eq!(o.flows, [1, 8192]);
        assert!(E2eOptions::try_parse_from(["e2e", "--cases", "dpdk"]).is_err());
        assert!(E2eOptions::try_parse_from(["e2e", "--rt", "100"]).is_err());
        let (bare, xfwd) = default_forwarder_commands(Path::new("/x/xfwd"));
        assert!(bare.starts_with(
            "/x/xfwd run --netns {netns} --iface {fwd0},{fwd1} --bare --peer-mac {fwd0}=02:58:46:00:00:01,"
        ));
        assert!(xfwd.contains("--cpus {cpu}") && !xfwd.contains("--bare"));
    }

    #[test]
    fn the_matched_rate_is_below_both_ndrs_or_the_one_given() {
        let point = |case, size, flows, ndr: f64| Point {
            case,
            size,
            flows,
            max: Trial::default(),
            ndr: Some(Trial {
                tx_pps: ndr,
                ..Trial::default()
            }),
            pdr: None,
            generator_limited: false,
            latency: None,
            trials: 1,
        };
        let points = [
            point(Case::Bare, 64, 8192, 50_000.0),
            point(Case::Xfwd, 64, 8192, 40_000.0),
            point(Case::Xfwd, 64, 1, 10_000.0),
            point(Case::Kernel, 64, 8192, 1_000.0),
        ];
        let (rate, from) = matched_rate(&points, None).unwrap();
        assert!((rate - 32_000.0).abs() < 1e-6, "{rate}");
        assert!(from.contains("80%"));
        assert_eq!(matched_rate(&points, Some(7.0)).unwrap().0, 7.0);
        assert!(matched_rate(&points[1..], None).is_none(), "no bare NDR");
    }
}
