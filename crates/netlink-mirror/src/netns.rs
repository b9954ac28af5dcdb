//! Which network namespace a mirror watches, and entering it from the control thread.
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use addr_table::NetnsId;
use nix::sched::{CloneFlags, setns};

use crate::error::MirrorError;

/// A network namespace to mirror.
///
/// ```
/// use netlink_mirror::NetnsSpec;
/// let spec = NetnsSpec::Name("blue".into());
/// assert_eq!(spec.path().unwrap().to_str(), Some("/run/netns/blue"));
/// assert!(NetnsSpec::Current.path().is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetnsSpec {
    /// The namespace of the thread that starts the mirror.
    Current,
    /// A named namespace (`ip netns add NAME`: `/run/netns/NAME`).
    Name(String),
    /// A namespace file (`/proc/PID/ns/net`, a bind mount).
    Path(PathBuf),
}

impl NetnsSpec {
    /// The namespace file, `None` for the current namespace.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            NetnsSpec::Current => None,
            NetnsSpec::Name(n) => Some(PathBuf::from("/run/netns").join(n)),
            NetnsSpec::Path(p) => Some(p.clone()),
        }
    }

    /// Parses a command-line value: empty or `-` for the current namespace, a value with a
    /// `/` for a path, else a name.
    pub fn parse(s: &str) -> NetnsSpec {
        match s {
            "" | "-" => NetnsSpec::Current,
            s if s.contains('/') => NetnsSpec::Path(PathBuf::from(s)),
            s => NetnsSpec::Name(s.to_owned()),
        }
    }
}

/// Moves the calling thread into the namespace (only this thread: the process stays where it
/// is) and returns the namespace's id (its inode number).
pub(crate) fn enter(spec: &NetnsSpec) -> Result<NetnsId, MirrorError> {
    let path = spec
        .path()
        .unwrap_or_else(|| PathBuf::from("/proc/thread-self/ns/net"));
    let err = |source| MirrorError::Netns {
        path: path.clone(),
        source,
    };
    let file = File::open(&path).map_err(err)?;
    let ino = file.metadata().map_err(err)?.ino();
    if spec.path().is_some() {
        setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| err(e.into()))?;
    }
    Ok(NetnsId(ino))
}

/// `net.ipv4.conf.all.promote_secondaries` of the calling thread's namespace.
pub(crate) fn promote_secondaries() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/promote_secondaries")
        .is_ok_and(|s| s.trim() == "1")
}

/// `net.ipv4.conf.{device}.accept_local` of the calling thread's namespace (`device` may be
/// `all`); off when it cannot be read.
pub(crate) fn accept_local(device: &str) -> bool {
    !device.contains('/')
        && std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{device}/accept_local"))
            .is_ok_and(|s| s.trim() == "1")
}

/// `net.ipv6.conf.{device}.force_forwarding` of the calling thread's namespace (Linux 6.17 and
/// later); off when it cannot be read (an older kernel has none).
pub(crate) fn force_forwarding(device: &str) -> bool {
    !device.contains('/')
        && std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{device}/force_forwarding"))
            .is_ok_and(|s| s.trim() == "1")
}

/// `net.ipv{4,6}.neigh.{device}.unres_qlen_bytes` of the calling thread's namespace: the
/// bytes the kernel queues per unresolved neighbour of the ARP (`v6` false) or ND table on
/// that device; `None` when it cannot be read (no such device, no IPv6).
pub(crate) fn unres_qlen_bytes(v6: bool, device: &str) -> Option<u32> {
    if device.contains('/') {
        return None;
    }
    let family = if v6 { "ipv6" } else { "ipv4" };
    std::fs::read_to_string(format!(
        "/proc/sys/net/{family}/neigh/{device}/unres_qlen_bytes"
    ))
    .ok()?
    .trim()
    .parse()
    .ok()
}

/// The multipath hash policies (IPv4, IPv6) of the calling thread's namespace:
/// `net.ipv{4,6}.fib_multipath_hash_policy` and `_fields`, and
/// `net.ipv4.fib_multipath_hash_seed` (both families), and `net.ipv4.fib_multipath_use_neigh`
/// (IPv4). A sysctl this kernel lacks reads as its default (policy 0, fields 7, no seed, no
/// neighbour check).
pub(crate) fn multipath_policies() -> (
    fib_trie::multipath::MultipathPolicy,
    fib_trie::multipath::MultipathPolicy,
) {
    use fib_trie::multipath::MultipathPolicy;
    let read = |path: &str, default: u32| {
        std::fs::read_to_string(format!("/proc/sys/net/{path}"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(default)
    };
    let seed = read("ipv4/fib_multipath_hash_seed", 0);
    let family = |v6: bool| {
        let dir = if v6 { "ipv6" } else { "ipv4" };
        MultipathPolicy::from_sysctl(
            v6,
            read(&format!("{dir}/fib_multipath_hash_policy"), 0),
            read(&format!("{dir}/fib_multipath_hash_fields"), 7),
            seed,
        )
    };
    let use_neigh = read("ipv4/fib_multipath_use_neigh", 0) != 0;
    (family(false).with_use_neigh(use_neigh), family(true))
}
