//! `cargo xtask bench NAME`: runs `benches/benches/NAME.rs` and writes its report with plots to
//! `docs/benchmarks/NAME.md`.
//!
//! The bench's notes (`benches/benches/NAME.md`: method, peers, goals) open the report; then
//! come the machine and one section per criterion group with an SVG plot and a table of times,
//! with ratios against the implementation whose criterion function id is `NAME`. Markdown files
//! the bench writes at the top of `CRITERION_HOME` (memory, chain lengths: what criterion cannot
//! time) are appended as they are.

pub mod dpdk;
pub(crate) mod machine;
mod plot;
mod report;
mod results;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::exec;

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The benchmark: a file `benches/benches/NAME.rs` (for example `fib-trie`), or a lab run
    /// as root: `e2e` (forwarding rates), `endpoints` (reflector and echo next to the kernel).
    name: String,
    /// Criterion's quick mode: fewer samples, a rough but fast report (marked as such).
    #[arg(long)]
    quick: bool,
    /// Rewrite the report from the results of the last run, without running anything.
    #[arg(long)]
    report_only: bool,
    /// Cargo features of xfwd-benches to enable (for example `dpdk`).
    #[arg(long, value_delimiter = ',')]
    features: Vec<String>,
    /// Arguments for the criterion harness after `--` (a filter runs a subset; the report then
    /// shows only that subset).
    #[arg(last = true)]
    criterion_args: Vec<String>,
}

/// The repository's root directory.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The names of the benchmarks in `benches/benches/`.
fn available(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("benches/benches"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// Markdown files the bench wrote at the top of `CRITERION_HOME` (measurements criterion has no
/// place for, such as bytes of memory or chain lengths), in name order, to append to the report.
fn extra_tables(home: &Path) -> anyhow::Result<Vec<String>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(home)
        .with_context(|| format!("bench: reading {}", home.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("bench: reading {}", path.display()))
        })
        .collect()
}

/// Runs the benchmark (unless `--report-only`) and writes the report.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let root = workspace_root();
    let name = options.name.as_str();
    if name == "e2e" {
        return crate::e2e::run(options.quick, options.report_only, &options.criterion_args);
    }
    if name == "endpoints" {
        return crate::endpoints::run(options.quick, options.report_only);
    }
    let bench_file = root.join("benches/benches").join(format!("{name}.rs"));
    if !bench_file.is_file() {
        bail!(
            "bench: no benchmark `{name}`; available: {}",
            available(&root).join(", ")
        );
    }
    let notes_file = root.join("benches/benches").join(format!("{name}.md"));
    let notes = std::fs::read_to_string(&notes_file).with_context(|| {
        format!(
            "bench: {} must describe the method, peers and goals",
            notes_file.display()
        )
    })?;
    let home = root.join("target").join(format!("criterion-{name}"));
    let (with_dpdk, dpdk_note) = if options.report_only {
        (false, None)
    } else {
        dpdk::prepare(name, &options.features)
    };
    let mut features = options.features.clone();
    if with_dpdk {
        features.push("dpdk".into());
    }

    let mut command_line = format!("cargo xtask bench {name}");
    if options.quick {
        command_line.push_str(" --quick");
    }
    if !options.features.is_empty() {
        command_line.push_str(&format!(" --features {}", options.features.join(",")));
    }
    if !options.criterion_args.is_empty() {
        command_line.push_str(&format!(" -- {}", options.criterion_args.join(" ")));
    }
    if with_dpdk {
        command_line.push_str(" (feature dpdk on: libdpdk-dev is installed)");
    }

    if !options.report_only {
        if home.exists() {
            std::fs::remove_dir_all(&home)
                .with_context(|| format!("bench: clearing {}", home.display()))?;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .current_dir(&root)
            .env("CRITERION_HOME", &home)
            .args(["bench", "--locked", "-p", "xfwd-benches", "--bench", name]);
        if !features.is_empty() {
            command.arg("--features").arg(features.join(","));
        }
        command.arg("--");
        if options.quick {
            command.arg("--quick");
        }
        command.args(&options.criterion_args);
        exec(&mut command).context("bench")?;
    }

    let groups = results::load(&home).with_context(|| {
        format!(
            "bench: no results in {} (run without --report-only first)",
            home.display()
        )
    })?;
    if groups.is_empty() {
        bail!("bench: the run left no results in {}", home.display());
    }
    let mut machine = machine::Machine::probe(&command_line);
    if options.quick {
        machine.note(
            "mode",
            "criterion --quick: indicative only, wider error bars".into(),
        );
    }

    if let Some(note) = dpdk_note {
        machine.note("dpdk peers", note);
    }

    let out_dir = root.join("docs/benchmarks");
    let plot_dir = out_dir.join(name);
    std::fs::create_dir_all(&plot_dir)
        .with_context(|| format!("bench: creating {}", plot_dir.display()))?;
    for (group, points) in &groups {
        let path = plot_dir.join(format!("{}.svg", report::short_group_name(name, group)));
        plot::plot(&path, group, points, name)
            .with_context(|| format!("bench: plotting {group}"))?;
    }
    let mut report_text = report::render(name, &notes, &machine, &groups);
    for extra in extra_tables(&home)? {
        report_text.push_str(&extra);
        report_text.push('\n');
    }
    let report_path = out_dir.join(format!("{name}.md"));
    std::fs::write(&report_path, report_text)
        .with_context(|| format!("bench: writing {}", report_path.display()))?;
    println!(
        "bench: {} groups; report {}, plots in {}",
        groups.len(),
        report_path.display(),
        plot_dir.display()
    );
    Ok(())
}
