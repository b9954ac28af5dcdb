//! `cargo xtask package`: the Debian package of xfwd, built with cargo-deb, then checked: it
//! is unpacked into a throwaway root, its files are looked at, and the systemd unit's command
//! line is started from that root in a throwaway network namespace until it reports readiness.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::exec::{exec, is_root};

/// Files the package must install (paths inside the package).
const EXPECTED: &[&str] = &[
    "usr/bin/xfwd",
    "lib/systemd/system/xfwd.service",
    "etc/xfwd/xfwd.toml",
    "usr/share/man/man1/xfwd.1.gz",
    "usr/share/man/man1/xfwd-run.1.gz", // cargo-deb compresses man pages
    "usr/share/bash-completion/completions/xfwd",
    "usr/share/zsh/vendor-completions/_xfwd",
    "usr/share/fish/vendor_completions.d/xfwd.fish",
];

/// Options of `cargo xtask package`.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Build only: skip unpacking the package and starting the unit's command line (which
    /// needs root).
    #[arg(long)]
    no_check: bool,
    /// Build with the dev profile, unstripped and with fast compression: a package for the
    /// check only, quick to make where `cargo test` has built the workspace in that profile
    /// (what `cargo xtask test` does); not one to ship.
    #[arg(long)]
    dev: bool,
}

impl Options {
    /// The package step of `cargo xtask test`: build and check (as root).
    pub fn check() -> Self {
        Options {
            no_check: false,
            dev: true,
        }
    }
}

/// Builds `target/debian/xfwd_VERSION_ARCH.deb` and checks it.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let workspace = workspace_root(&cargo)?;
    if Command::new(&cargo)
        .args(["deb", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        // The version this was checked with (its handling of `target/release/` assets under
        // `--profile` and of the package path it prints).
        exec(Command::new(&cargo).args(["install", "cargo-deb", "--version", "3.8.0", "--locked"]))
            .context("package: installing cargo-deb")?;
    }
    // Where crates/forwarder/Cargo.toml's deb assets expect them.
    let docs = workspace.join("target/xfwd-docs");
    let profile = if options.dev { "dev" } else { "release" };
    exec(
        Command::new(&cargo)
            .args([
                "run",
                "--locked",
                "--profile",
                profile,
                "-q",
                "-p",
                "forwarder",
            ])
            .args(["--example", "xfwd_docs", "--"])
            .arg(&docs),
    )
    .context("package: generating the man pages and completions")?;
    let mut deb = Command::new(&cargo);
    deb.args(["deb", "--locked", "-p", "forwarder"]);
    if options.dev {
        // cargo-deb maps the `target/release/` asset to the chosen profile's directory.
        deb.args(["--profile", "dev", "--no-strip", "--fast"]);
    }
    let output = deb
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("package: running cargo deb")?;
    ensure!(
        output.status.success(),
        "cargo deb failed ({})",
        output.status
    );
    let deb = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    ensure!(deb.is_file(), "cargo deb printed no package path: {deb:?}");
    eprintln!("package: {}", deb.display());
    if options.no_check {
        return Ok(());
    }
    if !is_root() {
        bail!("checking the package starts xfwd in a namespace: run as root, or pass --no-check");
    }
    check(&deb)
}

fn workspace_root(cargo: &str) -> anyhow::Result<PathBuf> {
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .output()
        .context("running cargo metadata")?;
    ensure!(output.status.success(), "cargo metadata failed");
    let value: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok(PathBuf::from(
        value["workspace_root"]
            .as_str()
            .context("cargo metadata without workspace_root")?,
    ))
}

/// Removes a directory tree on the way out.
struct TempRoot(PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unpacks `deb` into a throwaway root, checks its files, and starts the unit's `ExecStart`
/// from there in a throwaway lab's forwarding namespace, with the packaged configuration
/// edited as an operator would (the interfaces named), until `READY=1`; then stops it.
fn check(deb: &Path) -> anyhow::Result<()> {
    let root = TempRoot(std::env::temp_dir().join(format!("xfwd-deb-{}", std::process::id())));
    std::fs::create_dir_all(&root.0)?;
    exec(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root.0)).context("package: unpacking")?;
    for file in EXPECTED {
        let path = root.0.join(file);
        let len = std::fs::metadata(&path)
            .with_context(|| format!("package: {file} missing"))?
            .len();
        ensure!(len > 0, "package: {file} is empty");
    }
    let unit = std::fs::read_to_string(root.0.join("lib/systemd/system/xfwd.service"))?;
    ensure!(
        unit.lines().any(|l| l == "Type=notify"),
        "the unit is not Type=notify"
    );
    let exec_start = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .context("the unit has no ExecStart")?;

    // The operator's edit: name the interfaces (and, here, a control socket of our own).
    let lab = xfwd_lab::Lab::unique("deb")?.up_scoped()?;
    let config_path = root.0.join("etc/xfwd/xfwd.toml");
    let config = std::fs::read_to_string(&config_path)?;
    ensure!(
        config.contains("interfaces = []"),
        "the packaged configuration names interfaces"
    );
    let control = root.0.join("xfwd.sock");
    let config = config
        .replace("interfaces = []", "interfaces = [\"fwd0\", \"fwd1\"]")
        .replace("/run/xfwd/xfwd.sock", &control.to_string_lossy())
        .replace(
            "\"xfwd-punt\"",
            &format!("\"d{}\"", std::process::id() % 100_000),
        );
    std::fs::write(&config_path, config)?;

    // ExecStart, with the package's absolute paths inside the throwaway root.
    let rooted = |word: &str| -> String {
        match word.strip_prefix('/') {
            Some(inside) => root.0.join(inside).to_string_lossy().into_owned(),
            None => word.to_owned(),
        }
    };
    let words: Vec<String> = exec_start.split_whitespace().map(rooted).collect();
    let notify = root.0.join("notify");
    let manager = UnixDatagram::bind(&notify)?;
    manager.set_read_timeout(Some(Duration::from_millis(200)))?;
    eprintln!(
        "package: starting the unit's command line: {}",
        words.join(" ")
    );
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.netns(xfwd_lab::Role::Fwd)])
        .args(&words)
        .env("NOTIFY_SOCKET", &notify)
        .spawn()
        .context("starting the unit's command line")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 512];
    let ready = loop {
        if let Some(status) = child.try_wait()? {
            break Err(anyhow::anyhow!("xfwd exited before READY=1: {status}"));
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!("no READY=1 within 60 s"));
        }
        if let Ok(n) = manager.recv(&mut buf) {
            if buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1") {
                break Ok(());
            }
        }
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait()?;
    ready?;
    ensure!(status.success(), "xfwd did not stop cleanly: {status}");
    eprintln!("package: checked (files, unit, READY=1 from the unit's command line, clean stop)");
    Ok(())
}
