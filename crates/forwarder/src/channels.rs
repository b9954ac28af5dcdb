//! How many receive and transmit queues a device has, as `ethtool -l` reports them
//! (`ETHTOOL_GCHANNELS`), so that `--queues N` is checked before any socket is bound.
//!
//! Run loop *q* binds a socket to receive queue *q* of every interface and transmits on its
//! transmit queue *q*, so every interface needs at least `N` of each. Without the check, a
//! missing receive queue fails the bind with a bare `EINVAL`, and in copy mode a missing
//! transmit queue silently sends nothing.
//!
//! Queue counts: `combined + rx` receive queues and `combined + tx` transmit queues (veth
//! reports its real RX and TX queue counts as `rx` / `tx`; most NICs report `combined`). A
//! driver without `get_channels` reports nothing, and then nothing is checked.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ETHTOOL_GCHANNELS` from `linux/ethtool.h`.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels` from `linux/ethtool.h`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// A device's current queue counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceQueues {
    /// Receive queues (`combined + rx`).
    pub rx: u32,
    /// Transmit queues (`combined + tx`).
    pub tx: u32,
}

impl DeviceQueues {
    /// Whether `queues` run loops fit, or why not (with how to fix it).
    ///
    /// ```
    /// use forwarder::channels::DeviceQueues;
    /// assert!(DeviceQueues { rx: 2, tx: 2 }.check("eth1", 2).is_ok());
    /// let error = DeviceQueues { rx: 1, tx: 1 }.check("eth1", 2).unwrap_err();
    /// assert!(error.contains("eth1 has 1 receive queue"), "{error}");
    /// ```
    ///
    /// # Errors
    /// A message naming the interface, what it has and what `queues` needs.
    pub fn check(self, iface: &str, queues: u32) -> Result<(), String> {
        if self.rx >= queues && self.tx >= queues {
            return Ok(());
        }
        Err(format!(
            "{iface} has {} receive queue(s) and {} transmit queue(s); --queues {queues} needs at \
             least {queues} of each (`ethtool -L {iface} combined {queues}`; a veth: \
             `ethtool -L {iface} rx {queues} tx {queues}` on both ends, or create it with \
             `numrxqueues {queues} numtxqueues {queues}` on both ends)",
            self.rx, self.tx
        ))
    }
}

/// The queue counts of `iface` in the calling thread's namespace; `None` when the driver does
/// not report channels (or the interface does not exist: the caller reports that).
pub fn device_queues(iface: &str) -> Option<DeviceQueues> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    request.ifr_ifru.ifru_data = (&raw mut channels).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS reads the NUL-terminated name (zeroed above
    // past its bytes) and writes one ethtool_channels through `ifru_data`, which points at
    // `channels`, alive and exclusively borrowed for the call.
    let result = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL, &mut request) };
    if result < 0 {
        return None;
    }
    let queues = DeviceQueues {
        rx: channels.combined_count + channels.rx_count,
        tx: channels.combined_count + channels.tx_count,
    };
    (queues.rx > 0 && queues.tx > 0).then_some(queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_what_is_missing() {
        let two = DeviceQueues { rx: 2, tx: 2 };
        assert!(two.check("a", 1).is_ok());
        assert!(two.check("a", 2).is_ok());
        let error = two.check("a", 3).unwrap_err();
        assert!(
            error.contains("a has 2 receive queue(s) and 2 transmit queue(s)"),
            "{error}"
        );
        assert!(error.contains("--queues 3"), "{error}");
        // Enough receive queues but too few transmit queues is refused too: copy mode would
        // send nothing on the missing ones.
        assert!(DeviceQueues { rx: 4, tx: 1 }.check("a", 2).is_err());
    }

    #[test]
    fn unknown_interfaces_report_nothing() {
        assert_eq!(device_queues(""), None);
        assert_eq!(device_queues(&"x".repeat(libc::IFNAMSIZ)), None);
        assert_eq!(device_queues("surely-not-an-if"), None);
    }

    /// Loopback has no channels; in a fresh namespace of two-queue veths (privileged), the
    /// counts are the veth's.
    #[test]
    fn veth_queue_counts() {
        assert_eq!(device_queues("lo"), None, "loopback reports no channels");
        if !xfwd_lab::privileged("channels::veth_queue_counts") {
            return;
        }
        let lab = xfwd_lab::Lab::unique("chq")
            .unwrap()
            .with_queues(2)
            .unwrap()
            .up_scoped()
            .unwrap();
        let got = xfwd_lab::netns::run_in(&lab.netns(xfwd_lab::Role::Fwd), || {
            (device_queues("fwd0"), device_queues("fwd1"))
        })
        .unwrap();
        let two = Some(DeviceQueues { rx: 2, tx: 2 });
        assert_eq!(got, (two, two));
    }
}
