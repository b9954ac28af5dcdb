//! The declared minimum Rust version (`rust-version` in the workspace's `Cargo.toml`), checked:
//! `cargo xtask setup` installs that toolchain (rustup, minimal profile) and `cargo xtask test`
//! compiles the publishable library crates with it (`cargo +VERSION check --locked --lib`),
//! against the dependency versions of `Cargo.lock`, so that neither the code nor a locked
//! dependency can need a newer compiler than the manifests declare.
//!
//! Only the library targets: tests, examples and benches may use dev-dependencies that need a
//! newer compiler, and a user of the crates builds their libraries. The check builds into a
//! target directory of its own (`target/msrv`), so it does not evict the stable build's
//! artifacts.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::exec::exec;

/// The `rust-version` of `[workspace.package]` in the workspace's `Cargo.toml`.
pub fn declared(root: &Path) -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))
        .context("msrv: reading the workspace's Cargo.toml")?;
    parse_rust_version(&manifest).context("msrv: no rust-version in [workspace.package]")
}

/// The `rust-version` value of the `[workspace.package]` table of a manifest.
fn parse_rust_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "rust-version" {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// Whether rustup has the toolchain `version`.
fn installed(version: &str) -> bool {
    Command::new("rustup")
        .args(["run", version, "rustc", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs the toolchain `version` with rustup (minimal profile: rustc, cargo, rust-std),
/// unless it is there; quick and silent when it is.
pub fn install(version: &str) -> anyhow::Result<()> {
    if installed(version) {
        return Ok(());
    }
    eprintln!("msrv: installing Rust {version} (minimal profile)");
    exec(Command::new("rustup").args(["toolchain", "install", version, "--profile", "minimal"]))
        .with_context(|| format!("msrv: installing Rust {version} with rustup"))
}

/// `cargo +VERSION check --locked --lib` of `crates` into `target_dir`.
pub fn check(version: &str, crates: &[String], target_dir: &Path) -> anyhow::Result<()> {
    if crates.is_empty() {
        bail!("msrv: no crate to check");
    }
    install(version)?;
    let mut command = Command::new("cargo");
    command
        .current_dir(crate::bench::workspace_root())
        // The outer cargo's toolchain must not leak into the checked one.
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env("CARGO_TARGET_DIR", target_dir)
        .arg(format!("+{version}"))
        .args(["check", "--locked", "--lib"]);
    for name in crates {
        command.args(["-p", name]);
    }
    exec(&mut command).with_context(|| {
        format!(
            "msrv: the library crates do not build with Rust {version}, their declared rust-version"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_workspace_rust_version() {
        let manifest = "[workspace]\nmembers = []\n\n[workspace.package]\nversion = \"0.1.0\"\n\
                        rust-version = \"1.88\"\n\n[workspace.dependencies]\nrust-version = \"9\"\n";
        assert_eq!(parse_rust_version(manifest).as_deref(), Some("1.88"));
        assert_eq!(
            parse_rust_version("[package]\nrust-version = \"1.80\"\n"),
            None
        );
    }

    #[test]
    fn the_repositorys_manifest_declares_one() {
        let version = declared(&crate::bench::workspace_root()).unwrap();
        assert!(
            version.split('.').all(|p| p.parse::<u32>().is_ok()),
            "{version}"
        );
    }
}
