//! `cargo xtask setup`: the system dependencies of the build and the tests, and the tools the
//! fuzz smoke of `cargo xtask test` needs (a nightly toolchain and cargo-fuzz, see
//! [`fuzz_tools`]).

use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::{exec, is_root};

/// The Debian packages the build and the tests need.
///
/// - clang, llvm, libelf-dev, zlib1g-dev, pkg-config, m4, make, binutils, libpcap-dev: xsk-rs
///   builds libbpf and libxdp from source;
/// - clang, libbpf-dev: the forwarder's XDP program (`crates/forwarder/bpf/`, bpf_helpers.h)
///   and the end-to-end benchmark's (`crates/pktgen/bpf/`);
/// - ethtool: the end-to-end benchmark (veth offloads);
/// - iproute2: the lab (`ip netns`, veth);
/// - prometheus: its `promtool check metrics` checks xfwd's exposition (the package also
///   installs a Prometheus server unit, which starts where systemd runs).
pub const PACKAGES: &[&str] = &[
    "binutils",
    "clang",
    "ethtool",
    // FRR (zebra, staticd, bgpd, vtysh) for the real control-plane lab test.
    "frr",
    "iproute2",
    // iptables (iptables-nft and iptables-legacy) and nftables (nft): the netfilter lab test
    // writes rulesets with the real tools.
    "iptables",
    "libbpf-dev",
    "libelf-dev",
    "libpcap-dev",
    "llvm",
    "m4",
    "make",
    "nftables",
    "pkg-config",
    "prometheus",
    "zlib1g-dev",
];

/// The toolchain the fuzz targets build with (cargo-fuzz needs nightly's sanitizer flags);
/// `cargo xtask miri` uses the same one. A dated nightly, so that CI and every machine build
/// the fuzz targets and run Miri with the same compiler (an undated `nightly` is whatever day
/// it was installed, and changes under the corpus and Miri's checks without a commit); the
/// one in use when it was pinned (rustc 1.97.0-nightly e50aa6fba 2026-05-19). Move it on
/// deliberately, with a fuzz smoke and a Miri run.
pub const NIGHTLY: &str = "nightly-2026-05-20";
/// cargo-fuzz, at a pinned version: `cargo xtask test` builds and runs every fuzz target with
/// it.
pub const CARGO_FUZZ_VERSION: &str = "0.13.1";

/// Where bpffs must be mounted (libxdp pins its dispatcher programs there).
pub const BPFFS: &str = "/sys/fs/bpf";

/// Options of `cargo xtask setup`.
#[derive(Debug, clap::Args)]
pub struct Options {}

/// Installs what is missing; quick and silent when everything is present. The toolchain of
/// the declared `rust-version` comes first (rustup, no root needed; see `msrv.rs`); without
/// rustup that is only a warning here (the build does not need it), and `cargo xtask test`'s
/// msrv step fails instead.
pub fn run(_options: &Options) -> anyhow::Result<()> {
    let root = crate::bench::workspace_root();
    if let Err(e) = crate::msrv::declared(&root).and_then(|v| crate::msrv::install(&v)) {
        eprintln!("setup: warning: {e:#}");
    }
    // Not root's to do: rustup and cargo install into the user's own directories.
    fuzz_tools()?;
    let missing = missing_packages()?;
    let bpffs = bpffs_mounted()?;
    if missing.is_empty() && bpffs {
        eprintln!(
            "setup: all {} packages present, bpffs mounted",
            PACKAGES.len()
        );
        return Ok(());
    }
    if !is_root() {
        let mut commands = Vec::new();
        if !missing.is_empty() {
            commands.push(format!(
                "apt-get update && apt-get install -y {}",
                missing.join(" ")
            ));
        }
        if !bpffs {
            commands.push(format!("mount -t bpf bpf {BPFFS}"));
        }
        bail!(
            "setup needs root for what is missing; run `sudo cargo xtask setup`, or yourself:\n  {}",
            commands.join("\n  ")
        );
    }
    if !missing.is_empty() {
        eprintln!("setup: installing {}", missing.join(" "));
        exec(Command::new("apt-get").arg("update").arg("-q"))
            .context("setup: updating the package lists")?;
        exec(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing),
        )
        .context("setup: installing packages")?;
        let still_missing = missing_packages()?;
        if !still_missing.is_empty() {
            bail!(
                "setup: still missing after install: {}",
                still_missing.join(" ")
            );
        }
    }
    if !bpffs {
        exec(Command::new("mount").args(["-t", "bpf", "bpf", BPFFS]))
            .context("setup: mounting bpffs")?;
    }
    Ok(())
}

/// Installs what the fuzz smoke needs when it is missing: [`NIGHTLY`] with rustup's minimal
/// profile (rustc, cargo and the standard library, whose sanitizer runtimes cargo-fuzz links),
/// and cargo-fuzz [`CARGO_FUZZ_VERSION`] built with its own lock file (`--locked`). On a
/// fresh machine this takes about two minutes (the toolchain's download, and cargo-fuzz's
/// build, 40 s of CPU).
pub fn fuzz_tools() -> anyhow::Result<()> {
    let nightly = Command::new("rustc")
        .arg(format!("+{NIGHTLY}"))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !nightly {
        eprintln!("setup: installing the {NIGHTLY} toolchain (minimal profile)");
        exec(Command::new("rustup").args([
            "toolchain",
            "install",
            NIGHTLY,
            "--profile",
            "minimal",
        ]))
        .context("setup: installing the nightly toolchain")?;
    }
    let have = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    if !have
        .as_deref()
        .is_some_and(|v| is_cargo_fuzz_version(v, CARGO_FUZZ_VERSION))
    {
        eprintln!("setup: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
        exec(Command::new("cargo").args([
            "install",
            "cargo-fuzz",
            "--version",
            &format!("={CARGO_FUZZ_VERSION}"),
            "--locked",
            "--force",
        ]))
        .context("setup: installing cargo-fuzz")?;
    }
    Ok(())
}

/// Whether `cargo fuzz --version`'s output (`cargo-fuzz 0.13.1`) names `version`.
fn is_cargo_fuzz_version(output: &str, version: &str) -> bool {
    output.split_whitespace().nth(1) == Some(version)
}

/// The packages of [`PACKAGES`] that dpkg does not list as installed.
fn missing_packages() -> anyhow::Result<Vec<&'static str>> {
    let output = Command::new("dpkg-query")
        .args(["--show", "--showformat=${Package} ${db:Status-Abbrev}\\n"])
        .args(PACKAGES)
        .output()
        .context("setup: cannot run dpkg-query (is this Debian?)")?;
    // dpkg-query exits 1 when some package is unknown; its stdout still lists the known ones.
    Ok(not_installed(
        PACKAGES,
        &String::from_utf8_lossy(&output.stdout),
    ))
}

/// The `wanted` packages that a `dpkg-query` listing of `${Package} ${db:Status-Abbrev}` lines
/// does not show as installed (`ii`).
fn not_installed(wanted: &[&'static str], listing: &str) -> Vec<&'static str> {
    let installed: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, status)| status.starts_with("ii"))
        .map(|(name, _)| name.split(':').next().unwrap_or(name))
        .collect();
    wanted
        .iter()
        .copied()
        .filter(|package| !installed.contains(package))
        .collect()
}

/// Whether a bpf filesystem is mounted at [`BPFFS`].
fn bpffs_mounted() -> anyhow::Result<bool> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("setup: reading mounts")?;
    Ok(has_bpffs(&mounts))
}

/// Whether a `/proc/self/mounts` listing has a bpf filesystem at [`BPFFS`].
fn has_bpffs(mounts: &str) -> bool {
    mounts.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (_, target, fstype) = (fields.next(), fields.next(), fields.next());
        target == Some(BPFFS) && fstype == Some("bpf")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dpkg_status() {
        // Installed, removed with its config kept, unknown to dpkg (absent), multi-arch name.
        let listing = "clang ii \nm4 rc \nlibelf-dev:amd64 ii \n";
        let wanted = ["clang", "m4", "libelf-dev", "libpcap-dev"];
        assert_eq!(not_installed(&wanted, listing), ["m4", "libpcap-dev"]);
        assert_eq!(not_installed(&wanted, ""), wanted);
    }

    #[test]
    fn reads_cargo_fuzz_version() {
        assert!(is_cargo_fuzz_version("cargo-fuzz 0.13.1\n", "0.13.1"));
        assert!(!is_cargo_fuzz_version("cargo-fuzz 0.12.0\n", "0.13.1"));
        assert!(!is_cargo_fuzz_version("cargo-fuzz 0.13.10\n", "0.13.1"));
        assert!(!is_cargo_fuzz_version("", "0.13.1"));
    }

    #[test]
    fn finds_bpffs() {
        let without = "sysfs /sys sysfs rw 0 0\nproc /proc proc rw 0 0\n";
        assert!(!has_bpffs(without));
        assert!(has_bpffs(&format!(
            "{without}bpf /sys/fs/bpf bpf rw,relatime 0 0\n"
        )));
        // bpffs elsewhere, or something else at the path, does not count.
        assert!(!has_bpffs(
            "bpf /mnt/bpf bpf rw 0 0\ntmpfs /sys/fs/bpf tmpfs rw 0 0\n"
        ));
    }
}
