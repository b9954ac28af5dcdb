//! What a run loop drives: an [`Engine`] that gives every frame of a batch its
//! [`dataplane::Verdict`], and the [`EngineSpec`] that says how to build one per queue and
//! what it adds to the reports.
//!
//! Both engines speak the dataplane's frame contract: a batch of [`dataplane::Frame`]s (each
//! the whole UMEM chunk, the packet at its offset), verdicts set on the frames, spare frames
//! from a [`FramePool`], every frame counted once in a `dataplane::Counters` by the engine.
//! [`Router`](crate::router::Router) is the dataplane pipeline; [`Bare`](crate::bare::Bare)
//! only rewrites MACs (the AF_XDP ceiling).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::Guard;
use dataplane::{Frame, FramePool};

use crate::locals::LocalAddrFeed;
use crate::stats::Stats;

/// The packet work of one run loop. One instance per loop (queue), so `&mut self` state such
/// as a route cache needs no synchronisation.
///
/// ```
/// use dataplane::{DropReason, Frame, HeapPool, Verdict};
/// use forwarder::bare::{Bare, BareRoute};
/// use forwarder::engine::Engine;
///
/// let route = BareRoute { ingress: 1, egress: 2, src_mac: [2; 6], dst_mac: [4; 6] };
/// let mut bare = Bare::new(vec![route], Default::default());
/// let mut chunk = [0u8; 2048];
/// let mut frames = [Frame::new(&mut chunk, 256, 60, 1)];
/// bare.process(&mut frames, &crossbeam_epoch::pin(), &mut HeapPool::new(2048, 0));
/// assert_eq!(frames[0].verdict, Verdict::Transmit { ifindex: 2 });
/// ```
pub trait Engine: Send {
    /// Gives every frame of a batch (at most 64, all received on one interface, named by
    /// each frame's `ifindex`) its verdict, rewriting frames in place (`offset` and `len` may
    /// change for `Transmit` and `Reply`), and counts each frame once. The loop pinned
    /// `guard` for this batch; `pool` holds the loop's spare frames.
    fn process<P: FramePool>(&mut self, frames: &mut [Frame<'_>], guard: &Guard, pool: &mut P);

    /// Called once per loop turn (received something or not) under its own epoch pin: time
    /// for work that does not wait for a packet (releasing held packets, forwarding
    /// neighbour resolution requests, publishing counters). Must not block.
    fn turn<P: FramePool>(&mut self, _guard: &Guard, _pool: &mut P) {}
}

/// Adds an engine's own counters (and its control plane's) to a stats snapshot.
pub type ReportFn = Arc<dyn Fn(&mut Stats) + Send + Sync>;

/// How to build an engine per queue, and what it adds to start-up and reports.
pub struct EngineSpec<E> {
    /// `bare` or `router`.
    pub mode: &'static str,
    /// Builds the engine of queue `q` (called on the queue's thread; an error stops the
    /// instance).
    pub make: Arc<dyn Fn(u32) -> anyhow::Result<E> + Send + Sync>,
    /// The mirrored tables' generation, when there is a mirror.
    pub generation: Option<Arc<dyn Fn() -> u64 + Send + Sync>>,
    /// Bulk rebuilds of the mirrored tables so far (the mirror's `compactions`), when there is
    /// a mirror: each leaves the old tables' memory free, to be trimmed soon.
    pub rebuilds: Option<Arc<dyn Fn() -> u64 + Send + Sync>>,
    /// Adds the engine's counters (and the mirror's) to a stats snapshot.
    pub report: ReportFn,
    /// Keeps the XDP program's local-address set (the netlink mirror's observer); `None`:
    /// polled with getifaddrs(3).
    pub locals: Option<Arc<LocalAddrFeed>>,
    /// Where a reloaded pipeline configuration reaches the running engines (SIGHUP); `None`:
    /// the engine has none to take.
    pub live: Option<Arc<LiveConfig>>,
    /// Answers `xfwd show` / `xfwd route get` over the control socket from the engine's
    /// tables; `None`: the engine has none (bare).
    pub query: Option<crate::serve::QueryFn>,
    /// The served interfaces the engine's tables punt by (slot `i`: port `i`'s ifindex); the
    /// instance replaces a slot when that port's interface is re-created. `None`: the engine
    /// does not look (bare).
    pub served: Option<Arc<dataplane::Served>>,
    /// The UDP ports of in-dataplane endpoints, which the XDP program steers to user space
    /// (kept in step with binds and closes); `None`: no endpoints (every local datagram goes
    /// to the kernel).
    pub udp_ports: Option<Arc<crate::endpoints::UdpPortFeed>>,
    /// The per-destination ICMP limits the engines share, which the instance sets again
    /// from the namespace's sysctls every [`ICMP_SYSCTL_PERIOD`]; `None`: the engine sends
    /// no ICMP (bare).
    pub icmp_peers: Option<Arc<dataplane::PeerLimiter>>,
}

/// How often a running instance reads the ICMP rate-limit sysctls again
/// ([`crate::startup::read_icmp_sysctls`]), as the mirror polls the multipath hash sysctls.
pub const ICMP_SYSCTL_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// A pipeline configuration published to the run loops while they run: the reloading thread
/// [`publish`](Self::publish)es, each engine [`poll`](Self::poll)s once per loop turn (one
/// atomic load when nothing changed; a `try_lock` otherwise, so a loop never waits).
///
/// ```
/// use forwarder::engine::LiveConfig;
/// let live = LiveConfig::default();
/// let mut seen = 0;
/// assert!(live.poll(&mut seen).is_none());
/// live.publish(dataplane::Config { icmp_rate: 5, ..Default::default() });
/// assert_eq!(live.poll(&mut seen).map(|c| c.icmp_rate), Some(5));
/// assert!(live.poll(&mut seen).is_none(), "taken once");
/// ```
#[derive(Debug, Default)]
pub struct LiveConfig {
    generation: AtomicU64,
    config: Mutex<dataplane::Config>,
}

impl LiveConfig {
    /// Publishes `config` to every engine that follows this handle.
    pub fn publish(&self, config: dataplane::Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The last published configuration, or `initial` when none was published yet (what the
    /// run loops run with, for `xfwd route get`'s private queue).
    ///
    /// ```
    /// use forwarder::engine::LiveConfig;
    /// let live = LiveConfig::default();
    /// let initial = dataplane::Config { icmp_rate: 7, ..Default::default() };
    /// assert_eq!(live.current(initial).icmp_rate, 7);
    /// live.publish(dataplane::Config { icmp_rate: 5, ..Default::default() });
    /// assert_eq!(live.current(initial).icmp_rate, 5);
    /// ```
    pub fn current(&self, initial: dataplane::Config) -> dataplane::Config {
        if self.generation.load(Ordering::Acquire) == 0 {
            return initial;
        }
        *self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration published since generation `seen` (which it updates), if any and
    /// if the slot is free right now (else the next poll takes it).
    pub fn poll(&self, seen: &mut u64) -> Option<dataplane::Config> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == *seen {
            return None;
        }
        let config = *self.config.try_lock().ok()?;
        *seen = generation;
        Some(config)
    }
}
