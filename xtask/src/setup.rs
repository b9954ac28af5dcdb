//! `cargo xtask setup`: the system dependencies of the build and the tests.

use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::{exec, is_root};

/// The Debian packages the build and the tests need.
///
/// - clang, llvm, libelf-dev, zlib1g-dev, pkg-config, m4, make, binutils, libpcap-dev: xsk-rs
///   builds libbpf and libxdp from source;
/// - iproute2: the lab (`ip netns`, veth).
pub const PACKAGES: &[&str] = &[
    "binutils",
    "clang",
    "iproute2",
    "libelf-dev",
    "libpcap-dev",
    "llvm",
    "m4",
    "make",
    "pkg-config",
    "zlib1g-dev",
];

/// Where bpffs must be mounted (libxdp pins its dispatcher programs there).
pub const BPFFS: &str = "/sys/fs/bpf";

/// Options of `cargo xtask setup`.
#[derive(Debug, clap::Args)]
pub struct Options {}

/// Installs what is missing; quick and silent when everything is present.
pub fn run(_options: &Options) -> anyhow::Result<()> {
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

/// The packages of [`PACKAGES`] that dpkg does not list as installed.
fn missing_packages() -> anyhow::Result<Vec<&'static str>> {
    let output = Command::new("dpkg-query")
        .args(["--show", "--showformat=${Package} ${db:Status-Abbrev}\\n"])
        .args(PACKAGES)
        .output()
        .context("setup: cannot run dpkg-query (is this Debian?)")?;
    // dpkg-query exits 1 when some package is unknown; its stdout still lists the known ones.
    let listing = String::from_utf8_lossy(&output.stdout);
    let installed: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, status)| status.starts_with("ii"))
        .map(|(name, _)| name.split(':').next().unwrap_or(name))
        .collect();
    Ok(PACKAGES
        .iter()
        .copied()
        .filter(|package| !installed.contains(package))
        .collect())
}

/// Whether a bpf filesystem is mounted at [`BPFFS`].
fn bpffs_mounted() -> anyhow::Result<bool> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("setup: reading mounts")?;
    Ok(mounts.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (_, target, fstype) = (fields.next(), fields.next(), fields.next());
        target == Some(BPFFS) && fstype == Some("bpf")
    }))
}
