//! `cargo xtask test`: setup, every test, clippy and rustfmt, the library crates' packages and
//! examples, their build with the declared rust-version, xfwd's Debian package (as root), then
//! a summary.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::exec::{describe, exec};

/// Options of `cargo xtask test`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Arguments passed on to `cargo test` after `--` (for example a test name filter).
    #[arg(last = true)]
    test_args: Vec<String>,
}

/// Runs every step, even after a failure, and fails if any step failed.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut results: Vec<(String, Duration, anyhow::Result<()>)> = Vec::new();
    let mut step = |name: String, f: &mut dyn FnMut() -> anyhow::Result<()>| {
        let start = Instant::now();
        let result = f();
        if let Err(e) = &result {
            eprintln!("error: {e:#}");
        }
        results.push((name, start.elapsed(), result));
    };

    step("setup".into(), &mut || {
        crate::setup::run(&crate::setup::Options {})
    });
    let cargo_steps = [
        {
            let mut c = Command::new(&cargo);
            c.args(["test", "--workspace", "--locked"]);
            if !options.test_args.is_empty() {
                c.arg("--").args(&options.test_args);
            }
            c
        },
        {
            let mut c = Command::new(&cargo);
            c.args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ]);
            c
        },
        {
            let mut c = Command::new(&cargo);
            c.args(["fmt", "--all", "--", "--check"]);
            c
        },
    ];
    let mut cargo_steps: Vec<Command> = cargo_steps.into();
    // The library crates and a target directory for the check of the declared rust-version.
    let mut msrv = None;
    // The publishable library crates: `cargo package` builds each one's .crate from the files
    // it would publish and compiles it alone, against the packaged versions of its sibling
    // crates (cargo's local overlay of the unpublished ones), offline: a missing file, a path
    // dependency without a version or a manifest error fails here rather than at publish time.
    // Then their examples run (each checks its own results and fails on a wrong one).
    match crate::crates::publishable(&cargo) {
        Ok(libraries) => {
            // Cargo takes registry crates as immutable by version: sources it unpacked and
            // builds it verified in an earlier run would stand in for today's packages.
            crate::crates::forget_unpacked(&libraries);
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || crate::bench::workspace_root().join("target"),
                std::path::PathBuf::from,
            );
            let _ = std::fs::remove_dir_all(target.join("package"));
            // The verification builds go to a target directory of their own, emptied first:
            // the workspace's may hold a build of an earlier package of the same version.
            let check = target.join("package-check");
            let _ = std::fs::remove_dir_all(&check);
            let mut c = Command::new(&cargo);
            c.env("CARGO_TARGET_DIR", &check);
            c.args(["package", "--locked", "--offline", "--allow-dirty"]);
            for library in &libraries {
                c.args(["-p", &library.name]);
            }
            cargo_steps.push(c);
            msrv = Some((
                libraries.iter().map(|l| l.name.clone()).collect::<Vec<_>>(),
                target.join("msrv"),
            ));
            for library in &libraries {
                for example in &library.examples {
                    let mut c = Command::new(&cargo);
                    c.args([
                        "run",
                        "--locked",
                        "-q",
                        "-p",
                        &library.name,
                        "--example",
                        example,
                    ]);
                    cargo_steps.push(c);
                }
            }
        }
        Err(e) => step("finding the publishable crates".into(), &mut || {
            Err(anyhow::anyhow!("{e:#}"))
        }),
    }
    if crate::bench::dpdk::installed() {
        // The DPDK FFI wrapper of the benches (feature `dpdk`), only where libdpdk-dev is.
        let mut c = Command::new(&cargo);
        c.args([
            "test",
            "--locked",
            "-p",
            "xfwd-benches",
            "--features",
            "dpdk",
            "--lib",
        ]);
        cargo_steps.insert(1, c);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        eprintln!("CI=true: a privileged test that cannot run fails instead of skipping");
    }
    for command in &mut cargo_steps {
        // `cargo test ...` rather than the toolchain's full path, for the summary.
        let label = describe(command).replacen(&cargo, "cargo", 1);
        step(label, &mut || exec(command));
    }
    // The declared rust-version, true: the library crates' lib targets compile with that
    // toolchain (installed by setup) against Cargo.lock (`msrv.rs`), into a target directory
    // of their own, kept between runs.
    if let Some((names, target_dir)) = &msrv {
        let root = crate::bench::workspace_root();
        match crate::msrv::declared(&root) {
            Ok(version) => step(
                format!("msrv: cargo +{version} check --locked --lib (library crates)"),
                &mut || crate::msrv::check(&version, names, target_dir),
            ),
            Err(e) => step("msrv".into(), &mut || Err(anyhow::anyhow!("{e:#}"))),
        }
    }
    // A short run of every fuzz target from its seeds, so that a regression on the corpus
    // fails here: setup installed nightly and cargo-fuzz; each fuzz crate is built once (all
    // its targets, in the shared target directory), then each target replays its seeds and
    // fuzzes for the rest of its time.
    if crate::fuzz::available() {
        for krate in crate::fuzz::crates() {
            step(format!("fuzz build {krate}"), &mut || {
                crate::fuzz::build(krate)
            });
        }
        for (krate, target) in crate::fuzz::TARGETS {
            step(
                format!("fuzz {target} ({} s)", crate::fuzz::SMOKE_SECONDS),
                &mut || {
                    let outcome = crate::fuzz::run_target(
                        krate,
                        target,
                        crate::fuzz::Limit::Seconds(crate::fuzz::SMOKE_SECONDS),
                    )?;
                    crate::fuzz::print(std::slice::from_ref(&outcome));
                    if outcome.crashed {
                        bail!("fuzz: {target} crashed (input in {krate}/artifacts/)");
                    }
                    Ok(())
                },
            );
        }
    } else {
        step("fuzz smoke".into(), &mut || {
            bail!("fuzz: nightly or cargo-fuzz missing after setup")
        });
    }
    // The unsafe code of the table crates under Miri (`cargo xtask miri`).
    if crate::miri::available() {
        for (krate, filters) in crate::miri::CRATES {
            step(format!("miri {krate}"), &mut || {
                crate::miri::run_crate(krate, filters)
            });
        }
    } else {
        eprintln!(
            "miri skipped: needs {} with Miri (`rustup +{} component add miri rust-src`)",
            crate::setup::NIGHTLY,
            crate::setup::NIGHTLY
        );
    }

    // xfwd's Debian package (`cargo xtask package`), as root: built with cargo-deb (installed
    // when missing), unpacked into a throwaway root, the unit's command line started from it
    // in a throwaway namespace until READY=1, then stopped.
    step("package (cargo xtask package)".into(), &mut || {
        if !crate::exec::is_root() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                bail!("package: checking the .deb needs root, and CI=true");
            }
            eprintln!("package check skipped: needs root");
            return Ok(());
        }
        crate::package::run(&crate::package::Options::check())
    });

    // A short soak (xfwd under churn and faults, `cargo xtask soak`), as root.
    step(
        format!("soak ({} min)", crate::soak::CI_MINUTES),
        &mut || {
            if !crate::exec::is_root() {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    bail!("soak: needs root, and CI=true");
                }
                eprintln!("soak skipped: needs root");
                return Ok(());
            }
            crate::soak::run(&crate::soak::Options::ci())
        },
    );

    eprintln!("\nsummary:");
    let mut failed = 0;
    for (name, elapsed, result) in &results {
        let verdict = if result.is_ok() { "ok" } else { "FAILED" };
        failed += usize::from(result.is_err());
        eprintln!("  {verdict:<6} {:>6.1}s  {name}", elapsed.as_secs_f64());
    }
    if failed > 0 {
        bail!("{failed} of {} steps failed", results.len());
    }
    eprintln!("all {} steps passed", results.len());
    Ok(())
}
