//! Network namespaces by name, as `ip netns` keeps them in `/run/netns`.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::sched::{CloneFlags, setns};

use crate::LabError;
use crate::command::ip;
use crate::topology::format_mac;

/// Where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// The file of the named namespace.
pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Whether a namespace of that name exists.
///
/// ```
/// assert!(!xfwd_lab::netns::exists("surely-no-namespace-has-this-name"));
/// ```
pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// The names of all named namespaces, sorted (what `ip netns list` shows).
///
/// ```
/// let before = xfwd_lab::netns::list();
/// assert!(before.windows(2).all(|w| w[0] <= w[1]));
/// ```
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Checks a name for use as (part of) a namespace name: 1..=40 characters of `A-Za-z0-9-_`,
/// starting with a letter.
pub(crate) fn validate_name(name: &str) -> Result<(), LabError> {
    let valid = (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(LabError::InvalidName(name.to_owned()))
    }
}

/// Runs `f` on a new thread that has entered the named namespace, and returns its result.
///
/// Only the new thread changes namespace: sockets and interfaces it opens belong to `name`,
/// and the caller's thread stays where it is. A panic in `f` is passed on to the caller.
///
/// ```no_run
/// // Inside the namespace, `lo` has its own index.
/// let index = xfwd_lab::netns::run_in("xfwd-lab-fwd", || nix::net::if_::if_nametoindex("lo"))?;
/// # Ok::<(), xfwd_lab::LabError>(())
/// ```
pub fn run_in<F, R>(name: &str, f: F) -> Result<R, LabError>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let path = path(name);
    let enter_error = |source: std::io::Error| LabError::Enter {
        path: path.clone(),
        source,
    };
    let file = File::open(&path).map_err(enter_error)?;
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || setns(&file, CloneFlags::CLONE_NEWNET).map(|()| f()));
        match worker.join() {
            Ok(result) => result.map_err(|errno| enter_error(errno.into())),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// A network namespace that this process created; dropping it deletes the namespace and with
/// it every interface inside.
///
/// ```no_run
/// use xfwd_lab::netns::Netns;
///
/// let ns = Netns::create("xfwd-example")?;
/// ns.ip(["link", "set", "lo", "up"])?;
/// drop(ns); // `ip netns del xfwd-example`
/// # Ok::<(), xfwd_lab::LabError>(())
/// ```
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates the namespace `name` with its loopback up.
    ///
    /// # Errors
    /// [`LabError::InvalidName`] for a bad name, [`LabError::AlreadyUp`] when it exists already
    /// (it is then left alone), or the failing `ip` command.
    pub fn create(name: &str) -> Result<Self, LabError> {
        validate_name(name)?;
        if exists(name) {
            return Err(LabError::AlreadyUp(vec![name.to_owned()]));
        }
        ip(["netns", "add", name])?;
        let ns = Netns {
            name: name.to_owned(),
        };
        ns.ip(["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on the existing namespace `name`, for commands in it; dropping the handle
    /// deletes it unless [`keep`](Self::keep) is called (as for a created one).
    pub(crate) fn existing(name: &str) -> Self {
        Netns {
            name: name.to_owned(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS...` and returns its output.
    ///
    /// # Errors
    /// The failing command with its stderr.
    pub fn ip<I, S>(&self, args: I) -> Result<String, LabError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        ip(["-n", self.name.as_str()]
            .into_iter()
            .map(str::to_owned)
            .chain(args))
    }

    /// Creates a veth pair: `name` (with MAC `mac`) in this namespace, its peer `peer_name`
    /// (with `peer_mac`) in the namespace `peer_netns`. Neither end ever appears in the
    /// namespace of the calling process. Both ends stay down.
    ///
    /// # Errors
    /// The failing `ip link add`.
    pub fn add_veth(
        &self,
        name: &str,
        mac: [u8; 6],
        peer_netns: &str,
        peer_name: &str,
        peer_mac: [u8; 6],
    ) -> Result<(), LabError> {
        self.add_veth_queues(name, mac, peer_netns, peer_name, peer_mac, 1)
    }

    /// As [`add_veth`](Self::add_veth), with `queues` RX and `queues` TX queues on both ends
    /// (`numrxqueues` / `numtxqueues`; 1 is veth's default and adds nothing to the command).
    ///
    /// On veth the peer's receive queue is the sender's transmit queue, and the kernel attaches
    /// a native XDP program only when the device has at least as many RX queues as its peer
    /// has TX queues: equal counts on both ends satisfy both directions.
    ///
    /// # Errors
    /// The failing `ip link add`.
    pub fn add_veth_queues(
        &self,
        name: &str,
        mac: [u8; 6],
        peer_netns: &str,
        peer_name: &str,
        peer_mac: [u8; 6],
        queues: u32,
    ) -> Result<(), LabError> {
        let (mac, peer_mac, count) = (format_mac(mac), format_mac(peer_mac), queues.to_string());
        let counts: &[&str] = if queues > 1 {
            &["numtxqueues", &count, "numrxqueues", &count]
        } else {
            &[]
        };
        let mut args = vec!["link", "add", name, "address", &mac];
        args.extend_from_slice(counts);
        args.extend([
            "type", "veth", "peer", "name", peer_name, "address", &peer_mac,
        ]);
        args.extend_from_slice(counts);
        args.extend(["netns", peer_netns]);
        self.ip(args).map(drop)
    }

    /// Runs `f` on a thread inside this namespace; see [`run_in`].
    ///
    /// # Errors
    /// [`LabError::Enter`] when the namespace cannot be entered.
    pub fn run<F, R>(&self, f: F) -> Result<R, LabError>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        run_in(&self.name, f)
    }

    /// Keeps the namespace after this handle is dropped, returning its name.
    pub fn keep(self) -> String {
        let mut this = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut this.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting is best effort here; `delete` reports errors to callers that want them.
        let _ = delete(&self.name);
    }
}

/// Deletes the namespace `name` if it exists; returns whether it existed.
///
/// # Errors
/// The failing `ip netns del` command.
pub fn delete(name: &str) -> Result<bool, LabError> {
    if !exists(name) {
        return Ok(false);
    }
    ip(["netns", "del", name])?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "xfwd-lab", "t_1-2", &"a".repeat(40)] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1lab",
            "-lab",
            "lab/x",
            "lab x",
            "lab.x",
            "..",
            &"a".repeat(41),
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
