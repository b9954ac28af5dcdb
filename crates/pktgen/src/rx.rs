//! The receiver: one thread per queue takes frames from an AF_XDP socket and counts probes per
//! flow ([`RxStats`]); [`Receiver::report`] collects and resets the counts of every queue.
//!
//! The loop consumes up to 64 descriptors, reads the clock once, parses and counts each frame,
//! and hands the frames straight back on the fill ring. When the ring is empty it sleeps in
//! `poll(2)` for up to a millisecond, so an idle receiver costs nearly nothing. A report request
//! is an epoch counter the loop compares once per iteration; each thread answers with its counts
//! over a channel and starts afresh.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use xsk_rs::FrameDesc;

use crate::GenError;
use crate::frame::Probe;
use crate::stats::{FlowCounts, RxStats, RxSummary};
use crate::sys::{monotonic_ns, pin_to, process_cpu_ns};
use crate::xsk::{self, Role, Xsk};

const BATCH: usize = 64;
const POLL_MS: i32 = 1;
/// How long [`Receiver::report`] waits for every queue to answer.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where to receive.
#[derive(Clone, Debug)]
pub struct RxConfig {
    /// The interface.
    pub iface: String,
    /// Queue ids, one thread each.
    pub queues: Vec<u32>,
    /// CPUs to pin the threads to, in turn (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Flow ids `0..flows` are counted per flow; others count as `unknown_flow`.
    pub flows: usize,
    /// UMEM frames per queue.
    pub frames: u32,
}

impl RxConfig {
    /// Queue 0, not pinned, 4096 frames.
    pub fn new(iface: &str, flows: usize) -> Self {
        RxConfig {
            iface: iface.to_owned(),
            queues: vec![0],
            cpus: Vec::new(),
            flows,
            frames: 4096,
        }
    }
}

/// The kernel's AF_XDP counters of the receive sockets (`XDP_STATISTICS`), summed over queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpCounters {
    /// Frames dropped for lack of a fill-ring buffer or another reason.
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty: u64,
    /// Invalid RX descriptors.
    pub rx_invalid: u64,
}

impl XdpCounters {
    fn read(xsk: &xsk_rs::RxQueue) -> Self {
        afxdp::statistics(xsk.fd())
            .map(|s| XdpCounters {
                rx_dropped: s.rx_dropped,
                rx_ring_full: s.rx_ring_full,
                rx_fill_ring_empty: s.rx_fill_ring_empty,
                rx_invalid: s.rx_invalid_descs,
            })
            .unwrap_or_default()
    }

    fn add(&mut self, o: &Self) {
        self.rx_dropped += o.rx_dropped;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty += o.rx_fill_ring_empty;
        self.rx_invalid += o.rx_invalid;
    }

    fn since(&self, before: &Self) -> Self {
        XdpCounters {
            rx_dropped: self.rx_dropped.saturating_sub(before.rx_dropped),
            rx_ring_full: self.rx_ring_full.saturating_sub(before.rx_ring_full),
            rx_fill_ring_empty: self
                .rx_fill_ring_empty
                .saturating_sub(before.rx_fill_ring_empty),
            rx_invalid: self.rx_invalid.saturating_sub(before.rx_invalid),
        }
    }
}

/// What arrived since the previous report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RxReport {
    /// Totals and latency.
    #[serde(flatten)]
    pub summary: RxSummary,
    /// Nanoseconds since the previous report (or the start).
    pub elapsed_ns: u64,
    /// CPU time of the whole receiver process since the previous report, nanoseconds.
    pub cpu_ns: u64,
    /// The kernel's socket counters since the previous report.
    pub xdp: XdpCounters,
    /// Per flow (flow id = index).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub flows: Vec<FlowCounts>,
}

struct Reply {
    epoch: u64,
    stats: RxStats,
    xdp: XdpCounters,
}

/// A running receiver.
pub struct Receiver {
    request: Arc<AtomicU64>,
    seen: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    replies: mpsc::Receiver<Result<Reply, GenError>>,
    threads: Vec<JoinHandle<()>>,
    flows: usize,
    epoch: u64,
    last_time: u64,
    last_cpu: u64,
    last_xdp: XdpCounters,
}

impl Receiver {
    /// Opens a socket per queue (in the calling thread, which must be in the interface's
    /// network namespace) and starts counting.
    ///
    /// # Errors
    /// [`GenError::BadQueues`], or the first socket error.
    pub fn start(config: &RxConfig) -> Result<Self, GenError> {
        if config.queues.is_empty() {
            return Err(GenError::BadQueues("no queue".into()));
        }
        let mut sockets = Vec::new();
        for &queue in &config.queues {
            let mut socket = xsk::open(&config.iface, queue, config.frames, Role::Receive)?;
            // SAFETY: all frames of this socket's own UMEM, none in use: the kernel owns them
            // from now on until they come back on the RX ring.
            let given = unsafe { socket.fill.produce(&socket.descs) };
            if given != socket.descs.len() {
                return Err(GenError::FillRing {
                    given,
                    frames: socket.descs.len(),
                });
            }
            sockets.push(socket);
        }
        let request = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (reply_tx, replies) = mpsc::channel();
        let mut threads = Vec::new();
        for (index, socket) in sockets.into_iter().enumerate() {
            let cpu = (!config.cpus.is_empty()).then(|| config.cpus[index % config.cpus.len()]);
            let (request, seen, stop) = (request.clone(), seen.clone(), stop.clone());
            let reply_tx = reply_tx.clone();
            let flows = config.flows;
            threads.push(std::thread::spawn(move || {
                let result = cpu
                    .map_or(Ok(()), pin_to)
                    .and_then(|()| run_queue(socket, flows, &request, &seen, &stop, &reply_tx));
                if let Err(e) = result {
                    let _ = reply_tx.send(Err(e));
                }
            }));
        }
        Ok(Receiver {
            request,
            seen,
            stop,
            replies,
            threads,
            flows: config.flows,
            epoch: 0,
            last_time: monotonic_ns(),
            last_cpu: process_cpu_ns(),
            last_xdp: XdpCounters::default(),
        })
    }

    /// Frames received on all queues since the start (probes or not), a cheap progress
    /// counter updated once per batch.
    pub fn frames_seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// The counts since the previous report (or the start), then counting starts afresh.
    ///
    /// # Errors
    /// The error a queue thread stopped with, or [`GenError::ThreadPanicked`] when a queue does
    /// not answer.
    pub fn report(&mut self) -> Result<RxReport, GenError> {
        self.epoch += 1;
        self.request.store(self.epoch, Ordering::Release);
        let mut stats = RxStats::new(self.flows);
        let mut xdp = XdpCounters::default();
        let mut answered = 0;
        while answered < self.threads.len() {
            let reply = self
                .replies
                .recv_timeout(REPORT_TIMEOUT)
                .map_err(|_| GenError::ThreadPanicked("receiver"))??;
            if reply.epoch != self.epoch {
                continue;
            }
            stats.merge(&reply.stats);
            xdp.add(&reply.xdp);
            answered += 1;
        }
        let (now, cpu) = (monotonic_ns(), process_cpu_ns());
        let report = RxReport {
            summary: stats.summary(),
            elapsed_ns: now - self.last_time,
            cpu_ns: cpu.saturating_sub(self.last_cpu),
            xdp: xdp.since(&self.last_xdp),
            flows: stats.flows().to_vec(),
        };
        (self.last_time, self.last_cpu, self.last_xdp) = (now, cpu, xdp);
        Ok(report)
    }

    /// A last report, then the threads stop and the sockets close (libxdp removes its program).
    ///
    /// # Errors
    /// As [`report`](Self::report).
    pub fn stop(mut self) -> Result<RxReport, GenError> {
        let report = self.report();
        self.stop.store(true, Ordering::Release);
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
        report
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

/// The receive loop of one queue.
fn run_queue(
    socket: Xsk,
    flows: usize,
    request: &AtomicU64,
    seen: &AtomicU64,
    stop: &AtomicBool,
    replies: &mpsc::Sender<Result<Reply, GenError>>,
) -> Result<(), GenError> {
    let Xsk {
        umem,
        mut rx,
        mut fill,
        ..
    } = socket;
    let mut descs = vec![FrameDesc::default(); BATCH];
    let mut pollfd = [afxdp::pollfd(&rx)];
    let mut stats = RxStats::new(flows);
    let mut epoch = 0;
    while !stop.load(Ordering::Acquire) {
        let asked = request.load(Ordering::Acquire);
        if asked != epoch {
            epoch = asked;
            let stats = std::mem::replace(&mut stats, RxStats::new(flows));
            let xdp = XdpCounters::read(&rx);
            if replies.send(Ok(Reply { epoch, stats, xdp })).is_err() {
                return Ok(()); // the Receiver is gone
            }
        }
        // SAFETY: `descs` receives descriptors of `umem`'s frames that the kernel has finished
        // writing; they are read below and handed back on the fill ring only afterwards.
        let mut n = unsafe { rx.consume(&mut descs) };
        if n == 0 {
            if afxdp::wait_readable(&mut pollfd, POLL_MS) == 0 {
                continue;
            }
            // SAFETY: as above.
            n = unsafe { rx.consume(&mut descs) };
        }
        let now = monotonic_ns();
        seen.fetch_add(n as u64, Ordering::Relaxed);
        for desc in &descs[..n] {
            // SAFETY: the frame was just consumed from the RX ring of this UMEM's socket: the
            // kernel no longer writes it and it is not on the fill ring yet.
            let data = unsafe { umem.data(desc) };
            match Probe::parse(data.contents()) {
                Some(probe) => stats.record(&probe, now),
                None => stats.foreign(),
            }
        }
        // SAFETY: the frames read above are no longer referenced; the fill ring has room for
        // every frame of the UMEM, so all of them go back.
        let back = unsafe { fill.produce(&descs[..n]) };
        debug_assert_eq!(back, n);
        afxdp::wake_fill(&fill, &rx);
    }
    Ok(())
}
