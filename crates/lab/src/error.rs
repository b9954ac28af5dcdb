use std::io;
use std::path::PathBuf;

/// Why a lab operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A lab prefix or namespace name that `ip netns` cannot take or that could clash.
    #[error(
        "invalid name `{0}`: use 1..=40 characters of A-Z a-z 0-9 `-` `_`, starting with a letter"
    )]
    InvalidName(String),
    /// `up` found namespaces of this lab already present (from an earlier `up`).
    #[error("namespaces already exist: {}; run `lab down` with the same prefix first", .0.join(", "))]
    AlreadyUp(Vec<String>),
    /// The requested extra prefixes do not fit in their address block.
    #[error("{count} extra prefixes do not fit with IPv4 /{ipv4_len} (at most {max} do)")]
    TooManyPrefixes {
        /// Prefixes requested.
        count: usize,
        /// Their IPv4 prefix length.
        ipv4_len: u8,
        /// How many fit at that length.
        max: usize,
    },
    /// A queue count the lab's veth links cannot have.
    #[error("{0} queues per veth: use 1..={max}", max = crate::Lab::MAX_QUEUES)]
    InvalidQueues(u32),
    /// A link number other than those of [`topology::LINKS`](crate::topology::LINKS).
    #[error("no lab link {0}: the lab has links 0 (src0-fwd0) and 1 (fwd1-dst0)")]
    InvalidLink(usize),
    /// A link did not come up in time.
    #[error("{iface} in {netns} is not up after {timeout:?}")]
    LinkDown {
        /// The namespace.
        netns: String,
        /// The interface.
        iface: String,
        /// How long [`Lab::up`](crate::Lab::up) waited.
        timeout: std::time::Duration,
    },
    /// A command could not be started (for example `ip` is not installed).
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The error from the operating system.
        #[source]
        source: io::Error,
    },
    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A namespace file could not be opened or entered.
    #[error("cannot enter network namespace {}: {source}", path.display())]
    Enter {
        /// The namespace file.
        path: PathBuf,
        /// The error from the operating system.
        #[source]
        source: io::Error,
    },
}
