//! Counters of a mirror's work, updated by the control thread and read by anyone.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a mirror's counters ([`MirrorHandle::stats`](crate::MirrorHandle::stats)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Messages (dump parts and events) that changed a table.
    pub applied: u64,
    /// Messages that changed nothing (already mirrored: idempotent upserts, stale deletes).
    pub unchanged: u64,
    /// Objects removed because a resynchronising dump no longer held them.
    pub swept: u64,
    /// Dumps completed (one per object kind per synchronisation).
    pub dumps: u64,
    /// Dumps restarted because the kernel flagged them inconsistent (`NLM_F_DUMP_INTR`).
    pub dump_restarts: u64,
    /// Full resynchronisations after a receive-buffer overrun (`ENOBUFS`).
    pub resyncs: u64,
    /// Route re-dumps after a link went down or away (the kernel flushes IPv4 routes then
    /// without notifications).
    pub route_redumps: u64,
    /// FIB tables rebuilt in bulk after changes made one route at a time wore them (a mass
    /// delete and re-add, or a table's worth of churn; [`fib_trie::FibWriter::compact`]).
    pub compactions: u64,
    /// Overruns seen (`ENOBUFS` from a receive).
    pub overruns: u64,
    /// Times the mirror knew it lagged the kernel (a synchronisation, a route re-dump or a
    /// backlog of unapplied events began); the tables' generation says so meanwhile
    /// ([`Generation::set_behind`](dst_cache::Generation::set_behind)).
    pub behind: u64,
    /// Messages that could not be mirrored, by [`MapError::kind`](crate::MapError::kind).
    pub errors: BTreeMap<&'static str, u64>,
    /// Messages outside the mirror's scope, by [`Ignored::name`](crate::map::Ignored::name).
    pub ignored: BTreeMap<&'static str, u64>,
    /// Kernel routes the FIBs cannot represent, now standing behind "kernel decides" routes
    /// (packets matching them go to the kernel), by reason: `encap`, `source-specific`,
    /// `route-type`, `route-attribute`, `gateway-family`; nexthop objects (`nexthop-encap`,
    /// `nexthop-group-type`) and policy rules (`rule-dport`, `rule-uidrange`, ...) the same way.
    pub kernel_decides: BTreeMap<&'static str, u64>,
    /// Neighbour resolution requests accepted by [`NeighResolver::request`](crate::NeighResolver::request).
    pub resolve_requested: u64,
    /// Requests refused because the queue to the control thread was full.
    pub resolve_queue_full: u64,
    /// Requests dropped by the per-neighbour or global rate limit.
    pub resolve_rate_limited: u64,
    /// `RTM_NEWNEIGH` (`NTF_USE`) messages sent to the kernel.
    pub resolve_sent: u64,
    /// Resolution messages the kernel refused or that could not be sent.
    pub resolve_errors: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub applied: AtomicU64,
    pub unchanged: AtomicU64,
    pub swept: AtomicU64,
    pub dumps: AtomicU64,
    pub dump_restarts: AtomicU64,
    pub resyncs: AtomicU64,
    pub route_redumps: AtomicU64,
    pub compactions: AtomicU64,
    pub overruns: AtomicU64,
    pub behind: AtomicU64,
    pub resolve_requested: AtomicU64,
    pub resolve_queue_full: AtomicU64,
    pub resolve_rate_limited: AtomicU64,
    pub resolve_sent: AtomicU64,
    pub resolve_errors: AtomicU64,
    pub errors: Mutex<BTreeMap<&'static str, u64>>,
    pub ignored: Mutex<BTreeMap<&'static str, u64>>,
    pub kernel_decides: Mutex<BTreeMap<&'static str, u64>>,
}

pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn error(&self, kind: &'static str) {
        *self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    pub fn ignored(&self, name: &'static str) {
        *self
            .ignored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name)
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> MirrorStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MirrorStats {
            applied: get(&self.applied),
            unchanged: get(&self.unchanged),
            swept: get(&self.swept),
            dumps: get(&self.dumps),
            dump_restarts: get(&self.dump_restarts),
            resyncs: get(&self.resyncs),
            route_redumps: get(&self.route_redumps),
            compactions: get(&self.compactions),
            overruns: get(&self.overruns),
            behind: get(&self.behind),
            errors: self
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            ignored: self
                .ignored
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            kernel_decides: self
                .kernel_decides
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            resolve_requested: get(&self.resolve_requested),
            resolve_queue_full: get(&self.resolve_queue_full),
            resolve_rate_limited: get(&self.resolve_rate_limited),
            resolve_sent: get(&self.resolve_sent),
            resolve_errors: get(&self.resolve_errors),
        }
    }
}
