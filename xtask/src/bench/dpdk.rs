//! The optional DPDK peers of the `fib-trie` bench (`rte_fib`, `rte_fib6`): the cargo feature
//! `dpdk` of xfwd-benches, which needs Debian's `libdpdk-dev`.
//!
//! `cargo xtask bench fib-trie` turns the feature on when the library is installed; as root it
//! installs the package first if it is missing (it is a bench-only dependency, so `cargo xtask
//! setup` does not). Otherwise the run goes on without the peers and the report says why.
//! `cargo xtask test` runs the FFI wrapper's tests when the library is installed.

use std::process::Command;

use crate::exec::{exec, is_root};

/// The Debian package with DPDK's headers and libraries.
pub const PACKAGE: &str = "libdpdk-dev";

/// The benches that have DPDK peers.
const BENCHES: &[&str] = &["fib-trie"];

/// Whether DPDK's development files are installed (pkg-config knows `libdpdk`).
pub fn installed() -> bool {
    Command::new("pkg-config")
        .args(["--exists", "libdpdk"])
        .status()
        .is_ok_and(|s| s.success())
}

/// For a bench with DPDK peers: makes sure the library is there (installing it as root) and
/// returns whether to enable the `dpdk` feature, with a note for the report when not.
pub fn prepare(bench: &str, features: &[String]) -> (bool, Option<String>) {
    if !BENCHES.contains(&bench) || features.iter().any(|f| f == "dpdk") {
        return (false, None);
    }
    if !installed() && is_root() {
        let mut install = Command::new("apt-get");
        install.args(["install", "-y", PACKAGE]);
        if let Err(e) = exec(&mut install) {
            eprintln!("bench: installing {PACKAGE} failed ({e:#}); running without DPDK");
        }
    }
    if installed() {
        (true, None)
    } else {
        let note = format!(
            "not measured: {PACKAGE} is not installed (`apt-get install {PACKAGE}`, then rerun)"
        );
        eprintln!("bench: DPDK peers {note}");
        (false, Some(note))
    }
}
