//! `cargo xtask fuzz [TARGET] [--seconds N] [--runs N] [--markdown]`: runs cargo-fuzz targets
//! with nightly, installing cargo-fuzz first if it is missing, and prints for each how much
//! ran: executions, executions per second, coverage (libFuzzer's `cov` and `ft`), corpus size,
//! and whether it found a crash; `--markdown` prints the same as the table of
//! `docs/fuzzing.md`. `--runs N` stops each target after N executions (the campaign:
//! `cargo xtask fuzz --runs 10000000 --markdown`); with `--seconds` as well, a target also
//! stops at that time, whichever comes first.
//!
//! `--sanitizer none` builds and runs without AddressSanitizer (into `target/fuzz-none`, so
//! the two builds do not replace each other): the table targets compare against reference
//! models, so a logic error or a panic shows without a sanitizer, at several times the
//! rate; the long campaigns run so. `--replay` then runs every input of a target's working
//! corpus and seeds once (`-runs=0`), under AddressSanitizer unless told otherwise: what the
//! campaign found, checked for memory errors.
//!
//! Targets live in two crates outside the workspace: `crates/dataplane/fuzz` (the parsers and
//! the pipeline) and `fuzz/` (table operations against their references, netlink messages
//! into the mirror). Each starts from its committed seeds (`<crate>/seeds/<target>`, read
//! only) and grows a working corpus under `target/fuzz-corpus/<target>`; crashes stay in the
//! crate's `artifacts/`. libFuzzer's log of the latest run of each target is in
//! `target/fuzz-logs/<target>.log`, written as it runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::exec;
use crate::setup::NIGHTLY;

/// Every target: its crate (relative to the repository root) and name.
pub const TARGETS: [(&str, &str); 11] = [
    ("crates/dataplane/fuzz", "pipeline"),
    ("crates/dataplane/fuzz", "ethernet"),
    ("crates/dataplane/fuzz", "ipv4"),
    ("crates/dataplane/fuzz", "ipv6"),
    ("crates/dataplane/fuzz", "l4"),
    ("fuzz", "fib_ops"),
    ("fuzz", "policy_ops"),
    ("fuzz", "addr_ops"),
    ("fuzz", "netlink"),
    ("fuzz", "socktab_ops"),
    ("fuzz", "config"),
];
/// Targets whose tables free memory through crossbeam-epoch: run without libFuzzer's leak
/// check (`-detect_leaks=0`).
///
/// libFuzzer runs LeakSanitizer's whole-heap scan after every input that allocated more
/// than it freed, and epoch-deferred frees make nearly every input of these targets look so:
/// the scan took about 60% of `policy_ops`' time (perf), which ran at 26 executions per
/// second with the check and 493 without (10 s each, load 17). Leaks in these crates are
/// Miri's to find (`cargo xtask miri` runs their unit tests with its leak check).
pub const EPOCH_TARGETS: [&str; 5] = [
    "fib_ops",
    "policy_ops",
    "addr_ops",
    "netlink",
    "socktab_ops",
];

/// Default run time per target.
const DEFAULT_SECONDS: u64 = 60;
/// Run time per target of the smoke run inside `cargo xtask test`: the committed seeds
/// replayed, then fuzzing for the rest. 10 s rather than the 20: eleven targets, so
/// 2 minutes of CI's budget instead of 4 (the smoke catches a regression on the corpus; the
/// campaigns do the searching).
pub const SMOKE_SECONDS: u64 = 10;

/// Options of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The target (pipeline, ethernet, ipv4, ipv6, l4, fib_ops, policy_ops, addr_ops,
    /// netlink, socktab_ops, config); every target in turn when omitted.
    target: Option<String>,
    /// How long to fuzz each target, in seconds (60 without `--runs`; with it, a time cap).
    #[arg(long)]
    seconds: Option<u64>,
    /// Stop each target after this many executions instead (no time limit unless
    /// `--seconds` is given too).
    #[arg(long)]
    runs: Option<u64>,
    /// Print the outcome as the Markdown table of `docs/fuzzing.md`.
    #[arg(long)]
    markdown: bool,
    /// The sanitizer to build and run with: `address` (the default) or `none` (several
    /// times faster; for long campaigns, followed by a `--replay` under `address`).
    #[arg(long, value_enum, default_value_t = Sanitizer::Address)]
    sanitizer: Sanitizer,
    /// Run every input of the working corpus and the seeds once (`-runs=0`) instead of
    /// fuzzing; `--seconds` and `--runs` do not apply.
    #[arg(long, conflicts_with_all = ["seconds", "runs"])]
    replay: bool,
}

/// What a fuzz build is instrumented with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sanitizer {
    /// AddressSanitizer (`cargo fuzz`'s default): memory errors found where they happen.
    Address,
    /// No sanitizer (`cargo fuzz -s none`): coverage and the targets' own checks only.
    None,
}

impl Sanitizer {
    /// `cargo fuzz`'s `-s` argument.
    fn arg(self) -> &'static str {
        match self {
            Sanitizer::Address => "address",
            Sanitizer::None => "none",
        }
    }

    /// The target directory of this build ([`target_dir`] for AddressSanitizer).
    fn target_dir(self) -> PathBuf {
        match self {
            Sanitizer::Address => target_dir(),
            Sanitizer::None => root().join("target/fuzz-none"),
        }
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// After this many seconds.
    Seconds(u64),
    /// After this many executions.
    Runs(u64),
    /// After this many executions or seconds, whichever comes first.
    RunsWithin(u64, u64),
    /// Every input of the corpus and the seeds once, no fuzzing (`-runs=0`).
    Replay,
}

/// libFuzzer flags of one target beyond the run's limit.
///
/// - `-detect_leaks=0` for [`EPOCH_TARGETS`];
/// - `-max_len` where a longer input only repeats more of the same operations: libFuzzer's
///   default (the largest seed, at least 4,096 bytes) let inputs of hundreds of operations,
///   each on a fresh table, dominate the campaign's time; the limits keep every operation
///   kind and the table sizes the targets' doc comments name reachable.
pub fn target_flags(target: &str) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if EPOCH_TARGETS.contains(&target) {
        flags.push("-detect_leaks=0");
    }
    flags.extend(match target {
        // 5 or 6 bytes per operation: about a hundred, over a few nested /16s.
        "fib_ops" => ["-max_len=512"].as_slice(),
        // 8 bytes per operation: 64 adds and deletes with their lookups.
        "policy_ops" => &["-max_len=512"],
        // The target stops at 200 operations of 8 bytes after its 8-byte seed.
        "socktab_ops" => &["-max_len=1608"],
        _ => &[],
    });
    flags
}

/// What one run did, from libFuzzer's final statistics.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The target.
    pub target: String,
    /// Inputs executed.
    pub executions: u64,
    /// Coverage points (`cov`) and features (`ft`) reached at the end.
    pub cov: u64,
    /// Features reached at the end.
    pub ft: u64,
    /// Inputs in the working corpus at the end.
    pub corpus: u64,
    /// Whether the run ended on a crash (its input is in the crate's `artifacts/`).
    pub crashed: bool,
    /// Wall-clock seconds the run took (build excluded).
    pub seconds: f64,
}

impl Outcome {
    /// Executions per second over the whole run.
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.executions as f64 / self.seconds
        } else {
            0.0
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether nightly and cargo-fuzz are both there (no install attempted).
pub fn available() -> bool {
    Command::new("cargo")
        .args([&format!("+{NIGHTLY}"), "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The target directory every fuzz crate builds into: shared, so that the crates the two
/// fuzz workspaces have in common (the tables, libfuzzer-sys) are built once.
fn target_dir() -> PathBuf {
    root().join("target/fuzz")
}

/// The fuzz crates, each once, in [`TARGETS`]' order.
pub fn crates() -> Vec<&'static str> {
    let mut out: Vec<&str> = Vec::new();
    for (krate, _) in TARGETS {
        if !out.contains(&krate) {
            out.push(krate);
        }
    }
    out
}

/// Builds every target of one fuzz crate in one cargo invocation (optimised, with
/// AddressSanitizer: `cargo fuzz build -O`), into the shared [`target_dir`].
///
/// # Errors
/// When the build fails.
pub fn build(krate: &str) -> anyhow::Result<()> {
    build_with(krate, Sanitizer::Address)
}

/// [`build`] with the given sanitizer, into that sanitizer's target directory.
///
/// # Errors
/// When the build fails.
pub fn build_with(krate: &str, sanitizer: Sanitizer) -> anyhow::Result<()> {
    let mut command = Command::new("cargo");
    command
        .current_dir(root().join(krate))
        .args([
            &format!("+{NIGHTLY}"),
            "fuzz",
            "build",
            "-O",
            "-s",
            sanitizer.arg(),
        ])
        .arg("--target-dir")
        .arg(sanitizer.target_dir());
    exec(&mut command).with_context(|| format!("fuzz: building {krate}"))
}

/// Runs one target until `limit` and reads its final statistics.
///
/// # Errors
/// When the target cannot be built or run; a crash is an [`Outcome`] with `crashed`.
/// Expects the target built ([`build`]); `cargo fuzz run` only checks that it is up to date.
pub fn run_target(krate: &str, target: &str, limit: Limit) -> anyhow::Result<Outcome> {
    run_target_with(krate, target, limit, Sanitizer::Address)
}

/// [`run_target`] with the given sanitizer's build ([`build_with`]).
///
/// # Errors
/// As [`run_target`].
pub fn run_target_with(
    krate: &str,
    target: &str,
    limit: Limit,
    sanitizer: Sanitizer,
) -> anyhow::Result<Outcome> {
    let dir = root().join(krate);
    let corpus = root().join("target/fuzz-corpus").join(target);
    let seeds = dir.join("seeds").join(target);
    std::fs::create_dir_all(&corpus).context("fuzz: creating the working corpus")?;
    let mut command = Command::new("cargo");
    command
        .current_dir(&dir)
        .args([
            &format!("+{NIGHTLY}"),
            "fuzz",
            "run",
            "-O",
            "-s",
            sanitizer.arg(),
        ])
        .arg("--target-dir")
        .arg(sanitizer.target_dir())
        .arg(target)
        .arg(&corpus);
    if seeds.is_dir() {
        command.arg(&seeds);
    }
    let stop = match limit {
        Limit::Seconds(s) => vec![format!("-max_total_time={s}")],
        Limit::Runs(n) => vec![format!("-runs={n}")],
        Limit::RunsWithin(n, s) => vec![format!("-runs={n}"), format!("-max_total_time={s}")],
        Limit::Replay => vec!["-runs=0".to_owned()],
    };
    command.arg("--").args(&stop).arg("-print_final_stats=1");
    command.args(target_flags(target));
    // libFuzzer's log goes to a file as it runs (a long campaign's progress can be followed
    // there, and read if the run is cut short), then is read for the statistics.
    let log_path = log_path(target);
    std::fs::create_dir_all(root().join("target/fuzz-logs")).context("fuzz: log directory")?;
    let log_file = std::fs::File::create(&log_path)
        .with_context(|| format!("fuzz: creating {}", log_path.display()))?;
    command.stdout(std::process::Stdio::null()).stderr(log_file);
    eprintln!(
        "fuzz: {target} ({limit:?}, sanitizer {}), log in {}",
        sanitizer.arg(),
        log_path.display()
    );
    let started = std::time::Instant::now();
    let status = command
        .status()
        .with_context(|| format!("fuzz: running {target}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let log = std::fs::read(&log_path)
        .with_context(|| format!("fuzz: reading {}", log_path.display()))?;
    let log = String::from_utf8_lossy(&log);
    let mut outcome = parse_stats(&log);
    outcome.target = target.to_owned();
    outcome.seconds = seconds;
    outcome.crashed = !status.success();
    if outcome.crashed && outcome.executions == 0 {
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("fuzz: {target} did not run:\n{}", tail.join("\n"));
    }
    Ok(outcome)
}

/// Where [`run_target_with`] writes libFuzzer's log of `target` (replaced by each run).
pub fn log_path(target: &str) -> PathBuf {
    root()
        .join("target/fuzz-logs")
        .join(format!("{target}.log"))
}

/// Reads libFuzzer's `stat::number_of_executed_units` and the last `cov:`/`ft:`/`corp:`.
fn parse_stats(log: &str) -> Outcome {
    let mut o = Outcome::default();
    let mut last = 0;
    let field = |line: &str, key: &str| -> Option<u64> {
        let at = line.find(key)? + key.len();
        line[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let mut finished = false;
    for line in log.lines() {
        if let Some(n) = field(line, "stat::number_of_executed_units:") {
            finished = true;
            o.executions = n;
        }
        if let Some(rest) = line.strip_prefix('#') {
            // A status line's count: the executions of a log cut short (no final statistics).
            if let Some(n) = field(rest, "") {
                last = n;
            }
            o.cov = field(line, "cov:").unwrap_or(o.cov);
            o.ft = field(line, "ft:").unwrap_or(o.ft);
            o.corpus = field(line, "corp:").unwrap_or(o.corpus);
        }
    }
    if !finished {
        o.executions = last;
    }
    o
}

/// Prints one line per outcome.
pub fn print(outcomes: &[Outcome]) {
    eprintln!(
        "\n{:<12} {:>12} {:>9} {:>7} {:>7} {:>7}  result",
        "target", "executions", "exec/s", "cov", "ft", "corpus"
    );
    for o in outcomes {
        let result = if o.crashed {
            "CRASH (see artifacts/)"
        } else {
            "ok"
        };
        eprintln!(
            "{:<12} {:>12} {:>9.0} {:>7} {:>7} {:>7}  {result}",
            o.target,
            o.executions,
            o.per_second(),
            o.cov,
            o.ft,
            o.corpus
        );
    }
}

/// The outcomes as the Markdown table of `docs/fuzzing.md`.
pub fn markdown(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| target | executions | seconds | exec/s | cov | ft | corpus | findings |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for o in outcomes {
        let found = if o.crashed {
            "crash (input in artifacts/)"
        } else {
            "none"
        };
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {found} |\n",
            o.target,
            o.executions,
            o.seconds,
            o.per_second(),
            o.cov,
            o.ft,
            o.corpus
        ));
    }
    out
}

/// Runs the chosen target, or every target in turn.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let chosen: Vec<(&str, &str)> = match &options.target {
        Some(t) => {
            let Some(found) = TARGETS.iter().find(|(_, name)| name == t) else {
                bail!(
                    "fuzz: unknown target `{t}` (one of: {})",
                    TARGETS.map(|(_, n)| n).join(", ")
                );
            };
            vec![*found]
        }
        None => TARGETS.to_vec(),
    };
    crate::setup::fuzz_tools()?;
    // Built first, each crate once, so that a run's time is the fuzzing's alone.
    for krate in crates() {
        if chosen.iter().any(|(k, _)| *k == krate) {
            build_with(krate, options.sanitizer)?;
        }
    }
    let limit = match (options.runs, options.seconds) {
        _ if options.replay => Limit::Replay,
        (Some(n), Some(s)) => Limit::RunsWithin(n, s),
        (Some(n), None) => Limit::Runs(n),
        (None, s) => Limit::Seconds(s.unwrap_or(DEFAULT_SECONDS)),
    };
    let mut outcomes = Vec::new();
    for (krate, target) in chosen {
        outcomes.push(run_target_with(krate, target, limit, options.sanitizer)?);
    }
    print(&outcomes);
    if options.markdown {
        println!("{}", markdown(&outcomes));
    }
    if outcomes.iter().any(|o| o.crashed) {
        bail!("fuzz: a target crashed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzers_final_statistics() {
        let log = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                   #4096\tpulse  cov: 250 ft: 900 corp: 40/2Kb lim: 43 exec/s: 2048 rss: 40Mb\n\
                   #5000\tDONE   cov: 251 ft: 901 corp: 41/2Kb lim: 43 exec/s: 2500 rss: 41Mb\n\
                   Done 5000 runs in 2 second(s)\nstat::number_of_executed_units: 5000\n\
                   stat::peak_rss_mb:              41\n";
        let o = parse_stats(log);
        assert_eq!((o.executions, o.cov, o.ft, o.corpus), (5000, 251, 901, 41));
        // Cut short: the last status line's count.
        let cut = log.split("#5000").next().unwrap_or_default();
        let o = parse_stats(cut);
        assert_eq!((o.executions, o.cov, o.ft, o.corpus), (4096, 250, 900, 40));
    }

    #[test]
    fn the_markdown_table_has_a_row_per_target_with_its_rate() {
        let o = Outcome {
            target: "config".into(),
            executions: 1000,
            cov: 5,
            ft: 6,
            corpus: 7,
            crashed: false,
            seconds: 4.0,
        };
        let table = markdown(&[o]);
        assert!(
            table.contains("| config | 1000 | 4 | 250 | 5 | 6 | 7 | none |"),
            "{table}"
        );
        assert_eq!(table.lines().count(), 3);
    }
}
