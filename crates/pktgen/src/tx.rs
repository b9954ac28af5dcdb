//! The generator: one thread per queue sends probes from its own UMEM through AF_XDP TX.
//!
//! Each queue owns the flows whose id ≡ queue index (mod queue count) and cycles through them
//! in order, so the packets of one flow leave from one queue, in sequence. Per batch (at most
//! [`TxConfig::batch`]) the loop drains the completion ring into a free list, asks the
//! [`Pacer`] how many may go, writes that many probes (template copy and patch; one clock read
//! per batch), produces them on the TX ring and kicks the kernel (copy mode sends at most 32
//! frames per `sendto`, so it kicks while the ring is not empty).

use std::sync::Barrier;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use xsk_rs::FrameDesc;

use crate::GenError;
use crate::flow::FlowSet;
use crate::frame::{FrameSize, Template};
use crate::pacer::Pacer;
use crate::sys::{monotonic_ns, pin_to, thread_cpu_ns};
use crate::xsk::{self, Role, Xsk};

/// How long the generator waits for the last completions after its last send.
const DRAIN: Duration = Duration::from_secs(1);

/// What to send.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// The interface to send from.
    pub iface: String,
    /// Queue ids, one thread each (the interface must have that many TX queues: copy mode sends
    /// nothing on a queue id beyond them).
    pub queues: Vec<u32>,
    /// CPUs to pin the threads to, in turn (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Frame sizes.
    pub size: FrameSize,
    /// Packets per second over all queues; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Packets to send over all queues.
    pub count: Option<u64>,
    /// How long to send.
    pub duration: Option<Duration>,
    /// UMEM frames per queue.
    pub frames: u32,
    /// The largest batch.
    pub batch: usize,
}

impl TxConfig {
    /// Defaults: queue 0, no pinning, 64-byte frames, unlimited rate, 4096 frames, batch 64;
    /// set a count or a duration.
    pub fn new(iface: &str) -> Self {
        TxConfig {
            iface: iface.to_owned(),
            queues: vec![0],
            cpus: Vec::new(),
            size: FrameSize::Fixed(64),
            rate: None,
            count: None,
            duration: None,
            frames: 4096,
            batch: 64,
        }
    }

    fn validate(&self, flows: &FlowSet) -> Result<(), GenError> {
        if self.count.is_none() && self.duration.is_none() {
            return Err(GenError::Unbounded);
        }
        if self.queues.is_empty() {
            return Err(GenError::BadQueues("no queue".into()));
        }
        let mut sorted = self.queues.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.queues.len() {
            return Err(GenError::BadQueues(format!(
                "{:?} repeats a queue",
                self.queues
            )));
        }
        if flows.len() < self.queues.len() {
            return Err(GenError::BadQueues(format!(
                "{} queues for {} flows: every queue needs a flow",
                self.queues.len(),
                flows.len()
            )));
        }
        let ipv4 = flows.flows().iter().any(|f| f.dst.is_ipv4());
        self.size.validate(ipv4, flows.has_ipv6())
    }
}

/// What one queue sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueTx {
    /// The queue id.
    pub queue: u32,
    /// Probes sent (handed to the kernel and completed).
    pub sent: u64,
    /// Bytes sent, FCS included.
    pub bytes: u64,
    /// CPU time of the thread (user + system), nanoseconds.
    pub cpu_ns: u64,
    /// Frames produced but not completed when the drain timed out.
    pub uncompleted: u64,
    /// The kernel's count of invalid TX descriptors.
    pub tx_invalid_descs: u64,
}

/// What the generator sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TxReport {
    /// Probes sent over all queues.
    pub sent: u64,
    /// Bytes sent, FCS included.
    pub bytes: u64,
    /// From the first to the last send, nanoseconds (the slowest queue).
    pub elapsed_ns: u64,
    /// `sent / elapsed`.
    pub pps: f64,
    /// Sum of the queue threads' CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Per queue.
    pub queues: Vec<QueueTx>,
}

/// Sends probes of `flows` as `config` says; returns when done.
///
/// The calling thread must be in the interface's network namespace (the sockets are opened
/// there; the queue threads then run wherever they are pinned).
///
/// # Errors
/// A bad configuration, or the first socket or ring error of any queue.
pub fn transmit(config: &TxConfig, flows: &FlowSet) -> Result<TxReport, GenError> {
    config.validate(flows)?;
    let queues = config.queues.len();
    let mut sockets = Vec::with_capacity(queues);
    for &queue in &config.queues {
        sockets.push(xsk::open(&config.iface, queue, config.frames, Role::Send)?);
    }
    let barrier = Barrier::new(queues);
    let results: Vec<Result<(QueueTx, u64), GenError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(index, socket)| {
                let barrier = &barrier;
                scope.spawn(move || run_queue(config, flows, index, socket, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(GenError::ThreadPanicked("generator")))
            })
            .collect()
    });
    let mut report = TxReport::default();
    for result in results {
        let (queue, elapsed) = result?;
        report.sent += queue.sent;
        report.bytes += queue.bytes;
        report.cpu_ns += queue.cpu_ns;
        report.elapsed_ns = report.elapsed_ns.max(elapsed);
        report.queues.push(queue);
    }
    report.pps = if report.elapsed_ns > 0 {
        report.sent as f64 * 1e9 / report.elapsed_ns as f64
    } else {
        0.0
    };
    Ok(report)
}

/// One queue's share of `total` when split over `parts` (the first ones take the remainder).
fn share(total: u64, parts: usize, index: usize) -> u64 {
    let parts = parts as u64;
    total / parts + u64::from((index as u64) < total % parts)
}

/// The send loop of queue `index`; returns its counts and its sending time.
fn run_queue(
    config: &TxConfig,
    flows: &FlowSet,
    index: usize,
    socket: Xsk,
    barrier: &Barrier,
) -> Result<(QueueTx, u64), GenError> {
    if !config.cpus.is_empty() {
        pin_to(config.cpus[index % config.cpus.len()])?;
    }
    let queues = config.queues.len();
    let templates: Vec<Template> = flows
        .flows()
        .iter()
        .enumerate()
        .skip(index)
        .step_by(queues)
        .map(|(id, flow)| Template::new(flows.endpoints(), flow, id as u32))
        .collect();
    let limit = config.count.map_or(u64::MAX, |c| share(c, queues, index));
    let rate = config.rate.map(|r| r / queues as f64);
    let batch = config.batch.clamp(1, 1024);
    let Xsk {
        umem,
        descs,
        mut tx,
        mut comp,
        tx_ring,
        ..
    } = socket;
    let mut free: Vec<FrameDesc> = descs;
    let total_frames = free.len();
    let mut produced: Vec<FrameDesc> = Vec::with_capacity(batch);
    let mut completed = vec![FrameDesc::default(); total_frames];
    let mut seqs = vec![0u32; templates.len()];
    let mut next_flow = 0;
    let mut out = QueueTx {
        queue: config.queues[index],
        ..QueueTx::default()
    };

    barrier.wait();
    let cpu_start = thread_cpu_ns();
    let start = monotonic_ns();
    let end = config
        .duration
        .map_or(u64::MAX, |d| start + d.as_nanos() as u64);
    let mut pacer = Pacer::new(rate, start);
    let mut last_send = start;
    let mut drain_until = None;
    loop {
        // SAFETY: `completed` only receives descriptors of `umem`'s frames that the kernel has
        // finished sending; they return to the free list and are written again only then.
        let done = unsafe { comp.consume(&mut completed) };
        free.extend_from_slice(&completed[..done]);
        let in_flight = total_frames - free.len();
        let in_ring = tx_ring - tx.nb_free_exact();
        let now = monotonic_ns();
        if out.sent >= limit || now >= end {
            let until = *drain_until.get_or_insert(now + DRAIN.as_nanos() as u64);
            if in_flight == 0 || now >= until {
                out.uncompleted = in_flight as u64;
                break;
            }
            if in_ring == 0 || !afxdp::kick_tx(&tx)? {
                std::thread::yield_now();
            }
            continue;
        }
        let remaining = (limit - out.sent).min(usize::MAX as u64) as usize;
        let mut n = pacer.allowance(now, batch).min(free.len()).min(remaining);
        if n > 0 {
            n = n.min(tx.nb_free(n as u32) as usize);
        }
        if n == 0 {
            if in_ring == 0 || !afxdp::kick_tx(&tx)? {
                let wait = pacer.wait_ns(now);
                if wait > 100_000 {
                    std::thread::sleep(Duration::from_nanos(wait - 50_000));
                } else {
                    std::thread::yield_now();
                }
            }
            continue;
        }
        produced.clear();
        for _ in 0..n {
            let Some(mut desc) = free.pop() else { break };
            let template = &templates[next_flow];
            let size = config
                .size
                .nth(out.sent + produced.len() as u64, template.is_ipv6());
            // SAFETY: `desc` came from the free list: a frame of `umem` that is neither on the
            // TX ring nor awaiting completion, so nothing else (kernel included) accesses it.
            let mut data = unsafe { umem.data_mut(&mut desc) };
            data.cursor()
                .set_pos(usize::from(size - crate::frame::FCS_LEN));
            template.write(data.contents_mut(), size, seqs[next_flow], now);
            seqs[next_flow] = seqs[next_flow].wrapping_add(1);
            next_flow = if next_flow + 1 == templates.len() {
                0
            } else {
                next_flow + 1
            };
            out.bytes += u64::from(size);
            produced.push(desc);
        }
        // SAFETY: the descriptors were written above and belong to `umem`; `nb_free` said the
        // ring has room for all of them, so none is left behind.
        let on_ring = unsafe { tx.produce(&produced) };
        debug_assert_eq!(on_ring, produced.len());
        free.extend_from_slice(&produced[on_ring..]);
        out.sent += on_ring as u64;
        pacer.sent(on_ring);
        last_send = now;
        afxdp::kick_tx(&tx)?;
    }
    out.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    out.tx_invalid_descs = afxdp::statistics(tx.fd()).map_or(0, |s| s.tx_invalid_descs);
    Ok((out, last_send.saturating_sub(start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for (total, parts) in [(10, 3), (0, 2), (7, 7), (5, 8)] {
            let sum: u64 = (0..parts).map(|i| share(total, parts, i)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(share(10, 3, 0), 4);
        assert_eq!(share(10, 3, 2), 3);
    }
}
