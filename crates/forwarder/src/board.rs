//! Where every queue's engine publishes its `dataplane::Counters` for the reporting threads,
//! and their named form for `xfwd stats` and Prometheus.
//!
//! An engine counts each frame once, by verdict and by drop or punt reason, in a
//! `dataplane::Counters` it owns (no atomics on the packet path); every
//! [`PUBLISH_EVERY_NS`] its [`Publisher`] copies them into a slot of the [`CounterBoard`]
//! with a `try_lock` (the loop never waits), and once more when the engine is dropped.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

use dataplane::{Counters, DropReason, IcmpError, PuntReason};
use serde::{Deserialize, Serialize};

/// How often a queue publishes its counters (nanoseconds).
pub const PUBLISH_EVERY_NS: u64 = 100_000_000;

/// Where a queue publishes its counters.
pub type SharedCounters = Arc<Mutex<Counters>>;

/// The published counters of every queue, by queue id.
///
/// Run loops build their engines on their own threads, so they register in whatever order the
/// threads start: the queue id travels with each entry rather than being inferred from the
/// order of registration.
///
/// ```
/// let board = forwarder::board::CounterBoard::default();
/// let slot = board.register(1);
/// slot.lock().unwrap().rx = 5;
/// assert_eq!(board.snapshots()[0].queue, 1);
/// assert_eq!(board.snapshots()[0].verdicts[0], ("rx".to_owned(), 5));
/// ```
#[derive(Debug, Default, Clone)]
pub struct CounterBoard(Arc<Mutex<Vec<(u32, SharedCounters)>>>);

impl CounterBoard {
    /// A new (zeroed) counter slot for `queue`.
    pub fn register(&self, queue: u32) -> SharedCounters {
        let counters = SharedCounters::default();
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((queue, counters.clone()));
        counters
    }

    /// Every registered queue's last published counters, sorted by queue id.
    pub fn snapshots(&self) -> Vec<PipelineSnapshot> {
        let queues = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out: Vec<PipelineSnapshot> = queues
            .iter()
            .map(|(queue, c)| {
                let counters = c.lock().unwrap_or_else(|e| e.into_inner()).clone();
                PipelineSnapshot::new(*queue, &counters)
            })
            .collect();
        out.sort_by_key(|p| p.queue);
        out
    }
}

/// Publishes one queue's counters into its board slot, at most every [`PUBLISH_EVERY_NS`].
///
/// ```
/// use forwarder::board::{CounterBoard, Publisher, PUBLISH_EVERY_NS};
/// let board = CounterBoard::default();
/// let mut publisher = Publisher::new(board.register(0));
/// let mut counters = dataplane::Counters::default();
/// counters.rx = 3;
/// publisher.tick(PUBLISH_EVERY_NS, || counters.clone());
/// assert_eq!(board.snapshots()[0].verdicts[0].1, 3);
/// ```
#[derive(Debug)]
pub struct Publisher {
    shared: SharedCounters,
    published_at: u64,
}

impl Publisher {
    /// A publisher into `shared`.
    pub fn new(shared: SharedCounters) -> Self {
        Publisher {
            shared,
            published_at: 0,
        }
    }

    /// At monotonic time `now` (ns): publishes `counters()` if the last publication is
    /// [`PUBLISH_EVERY_NS`] old and nobody holds the slot (never waits).
    pub fn tick(&mut self, now: u64, counters: impl FnOnce() -> Counters) {
        if now.saturating_sub(self.published_at) < PUBLISH_EVERY_NS {
            return;
        }
        self.published_at = now;
        if let Ok(mut shared) = self.shared.try_lock() {
            *shared = counters();
        }
    }

    /// Publishes `counters` now, waiting for the slot (when an engine stops).
    pub fn flush(&self, counters: Counters) {
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = counters;
    }
}

/// One queue's engine counters, named for reports. Every reason is listed, zeros included,
/// so that a series exists before its first increment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PipelineSnapshot {
    /// Queue index.
    pub queue: u32,
    /// Frames per verdict: rx (every frame, once), then transmit, punt, deliver, reply, held,
    /// consumed, dropped, which add up to rx.
    pub verdicts: Vec<(String, u64)>,
    /// Drops by [`DropReason`] name.
    pub drops: Vec<(String, u64)>,
    /// Punts by [`PuntReason`] name.
    pub punts: Vec<(String, u64)>,
    /// ICMP errors sent, by [`IcmpError`] name.
    pub icmp_sent: Vec<(String, u64)>,
    /// Other events: ICMP not sent, fragments, hold buffer, resolutions.
    pub events: Vec<(String, u64)>,
    /// The route cache: hits, misses, stale, evictions, bypassed, disabled, uncacheable.
    pub dst_cache: Vec<(String, u64)>,
}

impl PipelineSnapshot {
    /// Names the counters of queue `queue`.
    pub fn new(queue: u32, c: &Counters) -> Self {
        let named = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let by_name = |names: &mut dyn Iterator<Item = &'static str>, values: &[u64]| {
            names
                .zip(values)
                .map(|(k, v)| (k.to_owned(), *v))
                .collect::<Vec<_>>()
        };
        let d = &c.dst_cache;
        PipelineSnapshot {
            queue,
            verdicts: named(&[
                ("rx", c.rx),
                ("transmit", c.transmit),
                ("punt", c.punt),
                ("deliver", c.deliver),
                ("reply", c.reply),
                ("held", c.held),
                ("consumed", c.consumed),
                ("dropped", c.dropped),
            ]),
            drops: by_name(&mut DropReason::ALL.iter().map(|r| r.name()), &c.drops),
            punts: by_name(&mut PuntReason::ALL.iter().map(|r| r.name()), &c.punts),
            icmp_sent: by_name(&mut IcmpError::ALL.iter().map(|r| r.name()), &c.icmp_sent),
            events: named(&[
                ("icmp_rate_limited", c.icmp_rate_limited),
                ("icmp_not_allowed", c.icmp_not_allowed),
                ("icmp_no_source", c.icmp_no_source),
                ("fragmented", c.fragmented),
                ("fragments_out", c.fragments_out),
                ("held_released", c.held_released),
                ("held_expired", c.held_expired),
                ("held_dropped", c.held_dropped),
                ("held_discarded", c.held_discarded),
                ("resolutions", c.resolutions),
                ("resolutions_lost", c.resolutions_lost),
            ]),
            dst_cache: named(&[
                ("hits", d.hits),
                ("misses", d.misses),
                ("stale", d.stale),
                ("evictions", d.evictions),
                ("bypassed", d.bypassed),
                ("disabled", d.disabled),
                ("uncacheable", d.uncacheable),
            ]),
        }
    }

    /// The count of `name` in the verdicts.
    pub fn verdict(&self, name: &str) -> u64 {
        self.verdicts
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues register from their own threads in any order; each snapshot carries the id of
    /// the queue whose counters it holds.
    #[test]
    fn counter_board_labels_by_queue_not_by_registration_order() {
        let board = CounterBoard::default();
        let one = board.register(1);
        let zero = board.register(0);
        one.lock().unwrap().rx = 11;
        zero.lock().unwrap().rx = 5;
        let snaps = board.snapshots();
        let rx: Vec<(u32, u64)> = snaps.iter().map(|s| (s.queue, s.verdict("rx"))).collect();
        assert_eq!(rx, [(0, 5), (1, 11)]);
    }

    #[test]
    fn every_reason_is_named_zeros_included() {
        let mut c = Counters::default();
        c.drops[DropReason::Blackhole as usize] = 2;
        let snap = PipelineSnapshot::new(0, &c);
        assert_eq!(snap.drops.len(), DropReason::COUNT);
        assert_eq!(snap.punts.len(), PuntReason::COUNT);
        assert_eq!(snap.icmp_sent.len(), IcmpError::COUNT);
        assert!(snap.drops.contains(&("blackhole".to_owned(), 2)));
        assert!(snap.drops.contains(&("truncated".to_owned(), 0)));
    }

    #[test]
    fn publisher_waits_its_period_and_flushes() {
        let board = CounterBoard::default();
        let mut publisher = Publisher::new(board.register(0));
        let counters = |rx| Counters {
            rx,
            ..Counters::default()
        };
        publisher.tick(PUBLISH_EVERY_NS - 1, || counters(1));
        assert_eq!(board.snapshots()[0].verdict("rx"), 0, "too early");
        publisher.tick(PUBLISH_EVERY_NS, || counters(2));
        assert_eq!(board.snapshots()[0].verdict("rx"), 2);
        publisher.tick(PUBLISH_EVERY_NS + 1, || counters(3));
        assert_eq!(board.snapshots()[0].verdict("rx"), 2, "within the period");
        publisher.flush(counters(4));
        assert_eq!(board.snapshots()[0].verdict("rx"), 4);
    }
}
