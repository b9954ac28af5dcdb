//! Running `ip` (iproute2) and reporting its failures with the command line and its stderr.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::LabError;

/// Runs `ip ARGS...` and returns its standard output.
pub(crate) fn ip<I, S>(args: I) -> Result<String, LabError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    run("ip", args, None)
}

/// Runs `ip -n NETNS -batch -` with `commands`, one `ip` command per line (without the `ip`).
pub(crate) fn ip_batch(netns: &str, commands: &str) -> Result<(), LabError> {
    run("ip", ["-n", netns, "-batch", "-"], Some(commands)).map(drop)
}

fn run<I, S>(program: &str, args: I, stdin: Option<&str>) -> Result<String, LabError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let command = format!("{program} {}", args.join(" "));
    let spawn_error = |source| LabError::Spawn {
        command: command.clone(),
        source,
    };
    #[cfg(test)]
    fault::check(&command)?;
    let mut child = Command::new(program)
        .args(&args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).map_err(spawn_error)?;
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if !output.status.success() {
        return Err(LabError::Command {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Failure injection for tests: makes a chosen `ip` command of the current thread fail.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::Cell;
    use std::os::unix::process::ExitStatusExt;

    use crate::LabError;

    thread_local! {
        static COMMANDS_BEFORE_FAILURE: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// Lets `n` more commands of this thread run, then fails the next one (once).
    pub(crate) fn fail_after(n: usize) {
        COMMANDS_BEFORE_FAILURE.set(Some(n));
    }

    /// Cancels a pending failure; returns whether one was pending (it was never reached).
    pub(crate) fn clear() -> bool {
        COMMANDS_BEFORE_FAILURE.take().is_some()
    }

    pub(super) fn check(command: &str) -> Result<(), LabError> {
        match COMMANDS_BEFORE_FAILURE.get() {
            Some(0) => {
                COMMANDS_BEFORE_FAILURE.set(None);
                Err(LabError::Command {
                    command: command.to_owned(),
                    status: std::process::ExitStatus::from_raw(1 << 8),
                    stderr: "injected failure".to_owned(),
                })
            }
            Some(n) => {
                COMMANDS_BEFORE_FAILURE.set(Some(n - 1));
                Ok(())
            }
            None => Ok(()),
        }
    }
}
