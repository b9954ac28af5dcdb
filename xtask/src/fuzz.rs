//! `cargo xtask fuzz TARGET --seconds N`: runs one cargo-fuzz target of `crates/dataplane/fuzz`
//! (pipeline, ethernet, ipv4, ipv6, l4) with nightly for N seconds, installing cargo-fuzz first
//! if it is missing. Crashes and the corpus stay in `crates/dataplane/fuzz/`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::exec;

/// The fuzz targets of `crates/dataplane/fuzz`.
const TARGETS: [&str; 5] = ["pipeline", "ethernet", "ipv4", "ipv6", "l4"];
/// Default run time.
const DEFAULT_SECONDS: u64 = 60;

/// Options of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The target: pipeline, ethernet, ipv4, ipv6 or l4.
    target: String,
    /// How long to fuzz, in seconds.
    #[arg(long, default_value_t = DEFAULT_SECONDS)]
    seconds: u64,
}

/// Runs the fuzz target.
pub fn run(options: &Options) -> anyhow::Result<()> {
    if !TARGETS.contains(&options.target.as_str()) {
        bail!(
            "fuzz: unknown target `{}` (one of: {})",
            options.target,
            TARGETS.join(", ")
        );
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/dataplane");
    let have_fuzz = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_fuzz {
        exec(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
            .context("fuzz: installing cargo-fuzz")?;
    }
    exec(
        Command::new("cargo")
            .current_dir(&crate_dir)
            .args(["+nightly", "fuzz", "run", &options.target, "--"])
            .arg(format!("-max_total_time={}", options.seconds)),
    )
    .with_context(|| format!("fuzz: running target {}", options.target))
}
