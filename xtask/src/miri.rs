//! `cargo xtask miri [CRATE]`: the unit tests of the table crates that use `unsafe` (their
//! epoch-protected pointers, the lock-free hash tables) under Miri, with nightly.
//!
//! Miri interprets the tests and checks every memory access against Rust's aliasing and
//! initialisation rules and for leaks and data races, about a thousand times slower than a
//! native run: each crate runs the unit tests named in [`CRATES`] (all of them where that
//! is affordable), which cover each `unsafe` block. `cargo xtask test` runs the whole list
//! when the pinned nightly ([`NIGHTLY`]) with Miri is installed (`rustup +NIGHTLY component add
//! miri rust-src`).
//! Miri's artefacts go under `target/NIGHTLY/miri`, one directory per pinned nightly: its
//! first run builds Miri's sysroot, and the artefacts of another nightly of the same rustc
//! version would look fresh to cargo while naming another sysroot (Miri then cannot find
//! the dependencies' crates).

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::exec::exec;
use crate::setup::NIGHTLY;

/// Each crate with `unsafe` in its library, and the unit-test filters run under Miri (empty:
/// every unit test). The crates without `unsafe` (dst-cache, dataplane) and those whose
/// `unsafe` is system calls Miri cannot run (afxdp, forwarder, pktgen, lab, netlink-mirror's
/// sockets) are not listed.
pub const CRATES: [(&str, &[&str]); 5] = [
    ("neigh-table", &[]),
    ("policy-tree", &[]),
    ("udp-socktab", &[]),
    ("addr-table", &[]),
    // The tests that reach the trie's unsafe code and the fast structure's node layout
    // (epoch stores, readers racing the writer, tagged entries); the fast structure's own
    // tests build whole tables and take more than four minutes each under Miri (2026-11-25,
    // under load), so they and the bulk load are left to the native run.
    (
        "fib-trie",
        &[
            "fast::node::",
            "guard::",
            "nexthop::",
            "store::",
            "trie::tests::a_reader",
            "trie::tests::insert_lookup",
            "trie::tests::ipv6_keys",
        ],
    ),
];

/// Miri's flags: Tree Borrows, because crossbeam-epoch's intrusive list of participants
/// (`internal.rs`, `Local::element_of`) breaks the stricter, experimental Stacked Borrows
/// rules on every `pin` (reported upstream, not a bug of these crates); leaks ignored, because
/// garbage deferred to the global collector and still in its bags when a test ends is never
/// freed (the process ends); isolation off, because proptest looks for its regression files
/// (`getcwd`, reads).
pub const MIRIFLAGS: &str = "-Zmiri-tree-borrows -Zmiri-ignore-leaks -Zmiri-disable-isolation";

/// Options of `cargo xtask miri`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Only this crate (one of [`CRATES`]).
    krate: Option<String>,
}

/// Whether nightly with Miri is installed.
pub fn available() -> bool {
    Command::new("cargo")
        .args([&format!("+{NIGHTLY}"), "miri", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the listed unit tests of one crate under Miri.
pub fn run_crate(krate: &str, filters: &[&str]) -> anyhow::Result<()> {
    let root = crate::bench::workspace_root();
    let mut command = Command::new("cargo");
    command.current_dir(&root).args([
        &format!("+{NIGHTLY}"),
        "miri",
        "test",
        "--locked",
        "-p",
        krate,
        "--lib",
        "--target-dir",
    ]);
    command.arg(root.join("target").join(NIGHTLY));
    if !filters.is_empty() {
        command.arg("--");
        command.args(filters);
    }
    // Proptests read their case count from here when not set in code: a few cases suffice
    // under Miri (the native run has the full count).
    command.env("PROPTEST_CASES", "4");
    command.env("MIRIFLAGS", MIRIFLAGS);
    exec(&mut command).with_context(|| format!("miri: {krate}"))
}

/// `cargo xtask miri`.
pub fn run(options: &Options) -> anyhow::Result<()> {
    if !available() {
        bail!("miri: needs {NIGHTLY} with Miri (`rustup +{NIGHTLY} component add miri rust-src`)");
    }
    let chosen: Vec<_> = CRATES
        .iter()
        .filter(|(k, _)| options.krate.as_deref().is_none_or(|want| want == *k))
        .collect();
    if chosen.is_empty() {
        bail!(
            "miri: unknown crate {:?}; one of {:?}",
            options.krate,
            CRATES.map(|(k, _)| k)
        );
    }
    for (krate, filters) in chosen {
        let start = Instant::now();
        run_crate(krate, filters)?;
        eprintln!(
            "miri: {krate} passed in {:.0} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
