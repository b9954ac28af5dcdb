//! Running external commands: echoed, inheriting the terminal, failing on a non-zero exit.

use std::process::Command;

use anyhow::{Context, bail};

/// Runs `command` with inherited stdio; an error names the command and its exit status.
pub fn exec(command: &mut Command) -> anyhow::Result<()> {
    let line = describe(command);
    eprintln!("+ {line}");
    let status = command
        .status()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    Ok(())
}

/// The command line as a shell would show it.
pub fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
