//! Per-queue counters of the run loop itself: written by one run loop (relaxed load + store, no
//! locked instruction), read by anyone (metrics, `xfwd stats`) as a [`QueueSnapshot`].
//!
//! What the engine decided for each frame (verdicts, drop and punt reasons) is counted once, by
//! the engine, in `dataplane::Counters` (see [`board`](crate::board)); the loop counts only the
//! ports' traffic and the verdicts it could not carry out ([`LoopDrop`]).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Why the run loop could not carry out a verdict, by [`LoopDrop`] index.
pub const LOOP_DROP_REASONS: [&str; 6] = [
    "undecided",
    "tx_ring_full",
    "unknown_egress",
    "egress_down",
    "punt_failed",
    "does_not_fit",
];
/// Why the run loop could not carry out a verdict (the engine counted the verdict itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum LoopDrop {
    /// The engine left a frame `Pending` (it never should: every frame gets a verdict).
    Undecided = 0,
    /// The egress port's pending TX queue was full.
    TxRingFull = 1,
    /// The verdict named an interface this loop has no socket on.
    UnknownEgress = 2,
    /// The egress interface is down or gone.
    EgressDown = 3,
    /// Writing to the punt device failed (or there is none).
    PuntFailed = 4,
    /// A forwarded packet does not fit between its descriptor's data start and its chunk's
    /// end (it grew into the headroom by more than the tailroom left).
    DoesNotFit = 5,
}

/// XDP_STATISTICS of one socket, as last read by the loop.
#[derive(Debug, Default)]
pub struct SocketCounters {
    /// Frames dropped for other reasons (rx_dropped).
    pub rx_dropped: AtomicU64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: AtomicU64,
    /// Times the fill ring was empty when the kernel needed a frame.
    pub rx_fill_ring_empty: AtomicU64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: AtomicU64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: AtomicU64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty: AtomicU64,
}

/// Per-port counters of one queue.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: AtomicU64,
    /// Bytes received.
    pub rx_bytes: AtomicU64,
    /// Frames handed to the TX ring.
    pub tx_packets: AtomicU64,
    /// Bytes handed to the TX ring.
    pub tx_bytes: AtomicU64,
    /// TX wakeups (sendto calls).
    pub tx_wakeups: AtomicU64,
    /// Fill-ring wakeups.
    pub fill_wakeups: AtomicU64,
    /// The socket's XDP_STATISTICS.
    pub socket: SocketCounters,
}

/// Counters of one run loop (queue).
#[derive(Debug)]
pub struct QueueCounters {
    /// The queue (loop) index.
    pub queue: u32,
    /// Per port, in the order of the configured interfaces.
    pub ports: Vec<PortCounters>,
    /// Batches processed (one epoch pin each).
    pub batches: AtomicU64,
    /// Frames written to the punt device (the engine's `Punt` verdicts that reached the
    /// kernel).
    pub punted: AtomicU64,
    /// Spare frames the engine sent (ICMP errors in copies, fragments, released held
    /// packets).
    pub spare_sent: AtomicU64,
    /// Forwarded frames whose start had moved in their chunk (a VLAN tag removed, an ICMP
    /// error built in place) and were moved back to the descriptor's data start
    /// ([`afxdp::Commit::Shifted`]).
    pub shifted: AtomicU64,
    /// Times the loop slept in poll(2) with nothing to do.
    pub idle_polls: AtomicU64,
    /// Drops by [`LoopDrop`].
    pub loop_drops: [AtomicU64; LOOP_DROP_REASONS.len()],
    /// Nanoseconds since `epoch` when the current batch pinned the epoch, 0 when unpinned.
    pub pinned_since_ns: AtomicU64,
    epoch: Instant,
}

/// Adds `n` to a counter that only the calling thread writes.
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

impl QueueCounters {
    /// Zeroed counters for `ports` ports.
    pub fn new(queue: u32, ports: usize) -> Self {
        QueueCounters {
            queue,
            ports: (0..ports).map(|_| PortCounters::default()).collect(),
            batches: AtomicU64::new(0),
            punted: AtomicU64::new(0),
            spare_sent: AtomicU64::new(0),
            shifted: AtomicU64::new(0),
            idle_polls: AtomicU64::new(0),
            loop_drops: std::array::from_fn(|_| AtomicU64::new(0)),
            pinned_since_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Counts a loop drop.
    #[inline]
    pub fn loop_drop(&self, reason: LoopDrop, n: u64) {
        bump(&self.loop_drops[reason as usize], n);
    }

    /// Marks the start (`true`) or end of an epoch pin.
    #[inline]
    pub fn set_pinned(&self, pinned: bool) {
        let now = if pinned {
            (self.epoch.elapsed().as_nanos() as u64).max(1)
        } else {
            0
        };
        self.pinned_since_ns.store(now, Relaxed);
    }

    /// A consistent-enough copy for reporting.
    pub fn snapshot(&self, port_names: &[String]) -> QueueSnapshot {
        let load = |c: &AtomicU64| c.load(Relaxed);
        let pinned = load(&self.pinned_since_ns);
        let pin_age = if pinned == 0 {
            0.0
        } else {
            (self.epoch.elapsed().as_nanos() as u64).saturating_sub(pinned) as f64 / 1e9
        };
        let drops = LOOP_DROP_REASONS
            .iter()
            .zip(&self.loop_drops)
            .map(|(name, counter)| ((*name).to_owned(), load(counter)))
            .collect();
        QueueSnapshot {
            queue: self.queue,
            ports: self
                .ports
                .iter()
                .zip(port_names)
                .map(|(p, name)| PortSnapshot {
                    iface: name.clone(),
                    rx_packets: load(&p.rx_packets),
                    rx_bytes: load(&p.rx_bytes),
                    tx_packets: load(&p.tx_packets),
                    tx_bytes: load(&p.tx_bytes),
                    tx_wakeups: load(&p.tx_wakeups),
                    fill_wakeups: load(&p.fill_wakeups),
                    xdp_rx_dropped: load(&p.socket.rx_dropped),
                    xdp_rx_ring_full: load(&p.socket.rx_ring_full),
                    xdp_rx_fill_ring_empty: load(&p.socket.rx_fill_ring_empty),
                    xdp_rx_invalid_descs: load(&p.socket.rx_invalid_descs),
                    xdp_tx_invalid_descs: load(&p.socket.tx_invalid_descs),
                    xdp_tx_ring_empty: load(&p.socket.tx_ring_empty),
                })
                .collect(),
            batches: load(&self.batches),
            punted: load(&self.punted),
            spare_sent: load(&self.spare_sent),
            shifted: load(&self.shifted),
            idle_polls: load(&self.idle_polls),
            drops,
            epoch_pin_age_seconds: pin_age,
        }
    }
}

/// One port of one queue, for reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[allow(missing_docs, reason = "the names are the counters of PortCounters")]
pub struct PortSnapshot {
    pub iface: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_wakeups: u64,
    pub fill_wakeups: u64,
    pub xdp_rx_dropped: u64,
    pub xdp_rx_ring_full: u64,
    pub xdp_rx_fill_ring_empty: u64,
    pub xdp_rx_invalid_descs: u64,
    pub xdp_tx_invalid_descs: u64,
    pub xdp_tx_ring_empty: u64,
}

/// One queue, for reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct QueueSnapshot {
    /// Queue index.
    pub queue: u32,
    /// Per port.
    pub ports: Vec<PortSnapshot>,
    /// Batches (epoch pins).
    pub batches: u64,
    /// Frames written to the punt device.
    pub punted: u64,
    /// Spare frames sent by the engine.
    #[serde(default)]
    pub spare_sent: u64,
    /// Forwarded frames moved back to their descriptor's data start.
    #[serde(default)]
    pub shifted: u64,
    /// Idle sleeps.
    pub idle_polls: u64,
    /// Verdicts the loop could not carry out, by [`LoopDrop`] name (every reason, zeros
    /// included).
    pub drops: Vec<(String, u64)>,
    /// How long the current batch has held the epoch pinned (0 when not pinned): a loop
    /// that stalls while pinned holds back memory reclamation of every table.
    pub epoch_pin_age_seconds: f64,
}

impl QueueSnapshot {
    /// Frames received on all ports.
    pub fn rx_packets(&self) -> u64 {
        self.ports.iter().map(|p| p.rx_packets).sum()
    }
    /// Frames transmitted on all ports.
    pub fn tx_packets(&self) -> u64 {
        self.ports.iter().map(|p| p.tx_packets).sum()
    }
    /// Verdicts the loop could not carry out.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_drops_and_sums() {
        let counters = QueueCounters::new(3, 2);
        bump(&counters.ports[0].rx_packets, 5);
        bump(&counters.ports[1].tx_packets, 4);
        counters.loop_drop(LoopDrop::TxRingFull, 3);
        counters.loop_drop(LoopDrop::DoesNotFit, 1);
        let names = ["a".to_owned(), "b".to_owned()];
        let snap = counters.snapshot(&names);
        assert_eq!(snap.queue, 3);
        assert_eq!(snap.rx_packets(), 5);
        assert_eq!(snap.tx_packets(), 4);
        assert_eq!(snap.ports[1].iface, "b");
        let expected: Vec<(String, u64)> = LOOP_DROP_REASONS
            .iter()
            .map(|name| {
                let n = match *name {
                    "tx_ring_full" => 3,
                    "does_not_fit" => 1,
                    _ => 0,
                };
                ((*name).to_owned(), n)
            })
            .collect();
        assert_eq!(snap.drops, expected, "every reason, zeros included");
        assert_eq!(snap.dropped(), 4);
        assert_eq!(snap.epoch_pin_age_seconds, 0.0);
        counters.set_pinned(true);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(counters.snapshot(&names).epoch_pin_age_seconds >= 0.004);
    }
}
