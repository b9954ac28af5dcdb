//! The kernel's route hint (merged in 2019), as the baseline the cache must beat.

use crate::decision::Cacheable;
use crate::generation::Snapshot;
use crate::key::FlowKey;

/// Reuses the previous packet's decision within one batch when its key is equal: the mechanism
/// Linux uses in `ip_list_rcv_finish` (same destination and TOS, same device). Like the kernel,
/// it is off while custom rules exist and never reuses broadcast, multicast or multipath
/// results.
///
/// Call [`reset`](Self::reset) at the start of every batch: a hint never outlives its batch, so
/// it needs no generation or expiry.
///
/// ```
/// use std::net::Ipv4Addr;
/// use dst_cache::{Decision, FlowKey, Generation, RouteHint};
///
/// let snapshot = Generation::new().snapshot();
/// let key = FlowKey::v4(Ipv4Addr::new(203, 0, 113, 9), 0, 1);
/// let decision = Decision::unicast(2, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
/// let mut hint = RouteHint::new();
/// assert_eq!(hint.lookup(&key, snapshot), None);
/// hint.remember(key, decision);
/// assert_eq!(hint.lookup(&key, snapshot), Some(decision));
/// hint.reset(); // next batch
/// assert_eq!(hint.lookup(&key, snapshot), None);
/// ```
#[derive(Clone, Debug, Default)]
pub struct RouteHint<V> {
    last: Option<(FlowKey, V)>,
    hits: u64,
    misses: u64,
}

impl<V: Cacheable> RouteHint<V> {
    /// An empty hint.
    pub const fn new() -> Self {
        RouteHint {
            last: None,
            hits: 0,
            misses: 0,
        }
    }

    /// The previous packet's decision, if its key equals `key` and caching is enabled.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, snapshot: Snapshot) -> Option<V> {
        let found = match &self.last {
            Some((last, value)) if snapshot.enabled && last == key => Some(*value),
            _ => None,
        };
        if found.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        found
    }

    /// Remembers the decision just made for `key` (if cacheable) for the next packet.
    #[inline]
    pub fn remember(&mut self, key: FlowKey, value: V) {
        self.last = value.is_cacheable().then_some((key, value));
    }

    /// Forgets the hint: call at the start of each batch.
    #[inline]
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// (hits, misses) so far.
    pub fn counters(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }
}
