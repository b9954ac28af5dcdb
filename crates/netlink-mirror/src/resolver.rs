//! Neighbour resolution requests: the dataplane asks, the control thread sends
//! `RTM_NEWNEIGH` with `NTF_USE` (no link-layer address), and the kernel probes; the answer
//! arrives as an ordinary neighbour event.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

use crate::stats::{Counters, inc};

/// A cheap, cloneable handle to ask a mirror's control thread to resolve a neighbour.
///
/// [`request`](Self::request) never blocks and makes no system call on the caller's thread:
/// it puts the request in a bounded queue that the control thread drains between netlink
/// reads (it polls the queue, so it never sleeps on it and no wake-up is needed).
#[derive(Clone, Debug)]
pub struct NeighResolver {
    tx: SyncSender<(u32, IpAddr)>,
    counters: Arc<Counters>,
}

impl NeighResolver {
    pub(crate) fn new(tx: SyncSender<(u32, IpAddr)>, counters: Arc<Counters>) -> Self {
        NeighResolver { tx, counters }
    }

    /// Asks the kernel to resolve `addr` on interface `ifindex`. Returns `false` when the
    /// queue is full or the mirror stopped (the request is then dropped and counted).
    /// Requests for one neighbour are rate-limited by the control thread.
    pub fn request(&self, ifindex: u32, addr: IpAddr) -> bool {
        match self.tx.try_send((ifindex, addr)) {
            Ok(()) => {
                inc(&self.counters.resolve_requested);
                true
            }
            Err(TrySendError::Full(_)) => {
                inc(&self.counters.resolve_queue_full);
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Per-neighbour minimum interval plus a global token bucket.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    last: HashMap<(u32, IpAddr), Instant>,
    per_neigh: Duration,
    rate: f64,
    burst: f64,
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    /// At most one request per neighbour per `per_neigh`, `rate` per second overall with a
    /// burst of `rate` (at least 1).
    pub fn new(per_neigh: Duration, rate: u32, now: Instant) -> Self {
        let burst = f64::from(rate.max(1));
        RateLimiter {
            last: HashMap::new(),
            per_neigh,
            rate: f64::from(rate),
            burst,
            tokens: burst,
            refilled: now,
        }
    }

    /// Whether a request for `key` may go out at `now`; records it if so.
    pub fn allow(&mut self, key: (u32, IpAddr), now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.refilled = now;
        if self
            .last
            .get(&key)
            .is_some_and(|&t| now.saturating_duration_since(t) < self.per_neigh)
        {
            return false;
        }
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        if self.last.len() >= 4096 {
            let window = self.per_neigh;
            self.last
                .retain(|_, t| now.saturating_duration_since(*t) < window);
        }
        self.last.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_neighbour_per_interval_and_a_global_bucket() {
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut l = RateLimiter::new(Duration::from_secs(1), 2, t0);
        assert!(l.allow((1, a), t0));
        assert!(
            l.allow((2, a), t0),
            "another interface is another neighbour"
        );
        assert!(!l.allow((1, b), t0), "the bucket of 2 is empty");
        let t1 = t0 + Duration::from_millis(600);
        assert!(!l.allow((1, a), t1), "one per neighbour per second");
        assert!(l.allow((1, b), t1), "refilled");
        assert!(l.allow((1, a), t0 + Duration::from_millis(1100)));
    }

    #[test]
    fn a_full_queue_refuses_without_blocking() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let counters = Arc::new(Counters::default());
        let r = NeighResolver::new(tx, Arc::clone(&counters));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(r.request(1, a));
        assert!(!r.request(1, a));
        let s = counters.snapshot();
        assert_eq!((s.resolve_requested, s.resolve_queue_full), (1, 1));
        drop(rx);
        assert!(!r.clone().request(1, a));
    }
}
