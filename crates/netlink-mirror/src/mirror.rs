//! Starting, watching and stopping a mirror.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::apply::Applier;
use crate::change::Observer;
use crate::control::{Channel, Control, Phase, ROUTE_GROUPS, Settings, SyncState, XFRM_GROUPS};
use crate::error::MirrorError;
use crate::netns::{self, NetnsSpec};
use crate::resolver::{NeighResolver, RateLimiter};
use crate::socket::NlSocket;
use crate::stats::{Counters, MirrorStats};
use crate::tables::MirroredTables;

/// Default receive buffer: 64 MiB holds a burst of several hundred thousand route events.
pub const DEFAULT_RCVBUF: usize = 64 << 20;

/// Receive buffer of the command sockets (dump replies, request errors): one dump part
/// (at most 32 KiB) is queued at a time.
const COMMAND_RCVBUF: usize = 1 << 20;

/// How a mirror runs. `MirrorOptions::default()` suits a router.
#[derive(Clone)]
pub struct MirrorOptions {
    /// Receive buffer of each event socket (the one joined to the multicast groups), set
    /// with `SO_RCVBUFFORCE` (needs `CAP_NET_ADMIN`; else `SO_RCVBUF`, capped by
    /// `net.core.rmem_max`). Dumps and requests use a separate socket.
    pub rcvbuf: usize,
    /// Mirror xfrm policies (a `NETLINK_XFRM` socket).
    pub xfrm: bool,
    /// Hears of every applied change, on the control thread.
    pub observer: Option<Arc<dyn Observer>>,
    /// How long the control thread sleeps in `poll` at most: the latency of neighbour
    /// requests and of `stop`.
    pub poll_interval: Duration,
    /// A dump that sends nothing for this long fails.
    pub dump_timeout: Duration,
    /// Capacity of the neighbour request queue.
    pub resolve_queue: usize,
    /// At most one request per neighbour per this interval.
    pub resolve_interval: Duration,
    /// At most this many requests per second overall (and as a burst).
    pub resolve_rate: u32,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            rcvbuf: DEFAULT_RCVBUF,
            xfrm: true,
            observer: None,
            poll_interval: Duration::from_millis(5),
            dump_timeout: Duration::from_secs(30),
            resolve_queue: 1024,
            resolve_interval: Duration::from_secs(1),
            resolve_rate: 100,
        }
    }
}

impl std::fmt::Debug for MirrorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorOptions")
            .field("rcvbuf", &self.rcvbuf)
            .field("xfrm", &self.xfrm)
            .field("observer", &self.observer.is_some())
            .field("poll_interval", &self.poll_interval)
            .field("dump_timeout", &self.dump_timeout)
            .field("resolve_queue", &self.resolve_queue)
            .field("resolve_interval", &self.resolve_interval)
            .field("resolve_rate", &self.resolve_rate)
            .finish()
    }
}

/// Starts mirrors.
#[derive(Debug)]
pub struct Mirror;

impl Mirror {
    /// Starts mirroring the namespace `spec`: spawns the control thread, which enters the
    /// namespace (only itself), opens and subscribes its sockets, and then dumps everything.
    /// Returns once the sockets are open; [`MirrorHandle::wait_synced`] waits for the dumps.
    /// Several mirrors (of several namespaces) may run at once.
    ///
    /// # Errors
    /// The namespace cannot be entered, a socket cannot be opened or subscribed, the thread
    /// cannot be spawned.
    pub fn start(spec: NetnsSpec, options: MirrorOptions) -> Result<MirrorHandle, MirrorError> {
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let sync = Arc::new(SyncState::new());
        let (req_tx, req_rx) = mpsc::sync_channel(options.resolve_queue.max(1));
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let name = match &spec {
            NetnsSpec::Current => "xfwd-mirror".to_owned(),
            NetnsSpec::Name(n) => format!("mirror-{n}"),
            NetnsSpec::Path(_) => "xfwd-mirror".to_owned(),
        };
        let thread = {
            let (counters, stop, sync, options) = (
                Arc::clone(&counters),
                Arc::clone(&stop),
                Arc::clone(&sync),
                options.clone(),
            );
            std::thread::Builder::new()
                .name(name.chars().take(15).collect())
                .spawn(move || {
                    let opened = (|| {
                        let netns = netns::enter(&spec)?;
                        let (tables, writers) =
                            MirroredTables::new(netns, netns::promote_secondaries());
                        let channel = |protocol, groups: &[u32]| {
                            Ok::<_, MirrorError>(Channel {
                                events: NlSocket::open(protocol, groups, options.rcvbuf)?,
                                cmd: NlSocket::open(protocol, &[], COMMAND_RCVBUF)?,
                            })
                        };
                        let route = channel(netlink_sys::protocols::NETLINK_ROUTE, &ROUTE_GROUPS)?;
                        let xfrm = if options.xfrm {
                            Some(channel(netlink_sys::protocols::NETLINK_XFRM, &XFRM_GROUPS)?)
                        } else {
                            None
                        };
                        Ok::<_, MirrorError>((tables, writers, route, xfrm))
                    })();
                    let (tables, writers, route, xfrm) = match opened {
                        Ok(v) => v,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let rcvbuf = route.events.rcvbuf();
                    if ready_tx.send(Ok((tables.clone(), rcvbuf))).is_err() {
                        return;
                    }
                    let control = Control {
                        route,
                        xfrm,
                        applier: Applier::new(tables, writers, options.observer.clone(), counters),
                        requests: req_rx,
                        limiter: RateLimiter::new(
                            options.resolve_interval,
                            options.resolve_rate,
                            Instant::now(),
                        ),
                        stop,
                        sync,
                        settings: Settings {
                            poll_interval: options.poll_interval,
                            dump_timeout: options.dump_timeout,
                        },
                        spdinfo_polled: Instant::now(),
                        sysctls_polled: Instant::now(),
                        compactor: crate::compact::Compactor::default(),
                        grown_checked: Instant::now(),
                    };
                    control.run();
                })
                .map_err(MirrorError::Thread)?
        };
        let (tables, rcvbuf) = match ready_rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(MirrorError::Stopped(
                    "control thread ended during start".into(),
                ));
            }
        };
        Ok(MirrorHandle {
            tables,
            resolver: NeighResolver::new(req_tx, Arc::clone(&counters)),
            counters,
            stop,
            sync,
            thread: Some(thread),
            rcvbuf,
        })
    }
}

/// A running mirror. Stops its control thread when dropped.
#[derive(Debug)]
pub struct MirrorHandle {
    tables: MirroredTables,
    resolver: NeighResolver,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    sync: Arc<SyncState>,
    thread: Option<JoinHandle<()>>,
    rcvbuf: usize,
}

impl MirrorHandle {
    /// The mirrored tables (clone the `Arc`s to share them).
    pub fn tables(&self) -> &MirroredTables {
        &self.tables
    }

    /// A handle to request neighbour resolution.
    pub fn resolver(&self) -> NeighResolver {
        self.resolver.clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> MirrorStats {
        self.counters.snapshot()
    }

    /// FIB tables rebuilt in bulk so far ([`MirrorStats::compactions`]), read without a
    /// snapshot of every counter (allocation-free, for polling).
    pub fn compactions(&self) -> u64 {
        self.counters
            .compactions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The receive buffer the kernel granted the route socket (it reports twice the size
    /// asked for: its bookkeeping share).
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// Whether the first synchronisation finished.
    pub fn is_synced(&self) -> bool {
        *self.sync.phase.lock().unwrap_or_else(|e| e.into_inner()) == Phase::Synced
    }

    /// Why the control thread stopped, if it failed (the tables then stay as they were and
    /// no longer follow the kernel).
    ///
    /// ```no_run
    /// # use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
    /// let m = Mirror::start(NetnsSpec::Current, MirrorOptions::default())?;
    /// if let Some(why) = m.failure() {
    ///     eprintln!("the mirror stopped following the kernel: {why}");
    /// }
    /// # Ok::<(), netlink_mirror::MirrorError>(())
    /// ```
    pub fn failure(&self) -> Option<String> {
        match &*self.sync.phase.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Failed(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// Waits until the first synchronisation finished (every kind dumped and applied).
    ///
    /// # Errors
    /// [`MirrorError::Timeout`] after `timeout`; [`MirrorError::Stopped`] if the control
    /// thread failed.
    pub fn wait_synced(&self, timeout: Duration) -> Result<(), MirrorError> {
        let deadline = Instant::now() + timeout;
        let mut phase = self.sync.phase.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*phase {
                Phase::Synced => return Ok(()),
                Phase::Failed(e) => return Err(MirrorError::Stopped(e.clone())),
                Phase::Starting => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(MirrorError::Timeout(timeout));
            }
            phase = self
                .sync
                .cv
                .wait_timeout(phase, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stops the control thread and waits for it. The tables stay as they are.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MirrorHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
