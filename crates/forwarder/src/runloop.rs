//! One run loop per queue: a UMEM shared by this loop's AF_XDP sockets on every interface
//! (socket `q` of each interface is bound to its receive queue `q`), driving an [`Engine`]
//! with [`dataplane::Frame`]s that are the UMEM chunks themselves.
//!
//! Each turn of the loop:
//! 1. drains every completion ring (sent frames return to the free list);
//! 2. tops up every fill ring from the free list (fill ring = 2 × RX ring), waking the kernel
//!    when the ring asks for it (need_wakeup);
//! 3. takes up to [`BATCH`] frames from each RX ring and hands them to the engine as
//!    `dataplane::Frame`s (the whole chunk, the packet at the kernel's headroom offset) under
//!    one epoch pin per batch; then acts on each frame's `dataplane::Verdict`: `Transmit` and
//!    `Reply` go to the egress port's pending TX list, `Punt` and `Deliver` to the punt device,
//!    everything else back to the free list (the engine counted every frame once, by verdict
//!    and reason; the loop counts only what it could not carry out);
//! 4. moves pending frames into TX rings (as many as fit; the rest wait for the next turn)
//!    and kicks the kernel (`sendto`) while frames are in flight, even on turns where nothing
//!    new arrived (copy mode sends at most 32 frames per kick);
//! 5. with nothing received and nothing in flight, sleeps in poll(2) on the RX sockets (or
//!    spins when busy polling).
//!
//! The AF_XDP set-up and ring system calls are the [`afxdp`] crate's, shared with pktgen.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use afxdp::{Commit, CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};
use anyhow::Context;
use arrayvec::ArrayVec;
use dataplane::{Frame, FramePool, Verdict};

use crate::counters::{LoopDrop, QueueCounters, bump};
use crate::engine::Engine;
use crate::punt::Punt;
use crate::xdp::XdpProgram;

/// Frames per RX batch and per engine call.
pub const BATCH: usize = 64;

/// How long an idle loop sleeps in poll(2) before it looks at the stop flag again.
const IDLE_POLL_MS: i32 = 50;

/// Spare frames an engine may hold at once (allocated, not yet sent or freed).
const SPARE_SLOTS: usize = 16;

/// Loop turns between two reads of the sockets' XDP_STATISTICS.
const STATS_EVERY: u32 = 4096;

/// Busy polling: how long a socket may busy-poll its device (microseconds).
const BUSY_POLL_USECS: i32 = 20;

/// An interface the forwarder serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// Interface name.
    pub name: String,
    /// Interface index (in the forwarder's namespace).
    pub ifindex: u32,
    /// Its MAC.
    pub mac: [u8; 6],
}

/// Whether a port can take traffic, kept by the link monitor.
#[derive(Debug)]
pub struct PortState {
    /// Administratively up with carrier.
    pub up: AtomicBool,
    /// The interface was removed; the loop stops touching its socket.
    pub gone: AtomicBool,
}

impl Default for PortState {
    fn default() -> Self {
        PortState {
            up: AtomicBool::new(true),
            gone: AtomicBool::new(false),
        }
    }
}

pub use xfwd_config::RingSizes;

/// How a loop opens its sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoopOptions {
    /// Ring sizes.
    pub sizes: RingSizes,
    /// Ask for zero-copy (fails on drivers without it, such as veth); copy mode otherwise.
    pub zero_copy: bool,
    /// Busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET on the sockets,
    /// and the loop spins instead of sleeping.
    pub busy_poll: bool,
}

struct Port {
    rx: RxQueue,
    tx: TxQueue,
    fill: FillQueue,
    comp: CompQueue,
    pending: Vec<FrameDesc>,
    in_flight: u32,
    ifindex: u32,
}

/// A run loop's sockets and frames, ready to run on its own thread.
pub struct QueueLoop {
    queue: u32,
    umem: Umem,
    ports: Vec<Port>,
    states: Arc<[PortState]>,
    free: Vec<FrameDesc>,
    counters: Arc<QueueCounters>,
    busy_poll: bool,
    pending_cap: usize,
    frame_size: usize,
    spare: [Option<FrameDesc>; SPARE_SLOTS],
}

impl std::fmt::Debug for QueueLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueLoop")
            .field("queue", &self.queue)
            .field("ports", &self.ports.len())
            .field("free", &self.free.len())
            .finish_non_exhaustive()
    }
}

impl QueueLoop {
    /// Opens one socket on queue `queue` of every port, all on one new UMEM, and registers
    /// them in the XDP program's XSKMAP (port `i` uses slot `i`).
    ///
    /// # Errors
    /// When the UMEM or a socket cannot be created or registered.
    pub fn open(
        queue: u32,
        ports: &[PortSpec],
        states: Arc<[PortState]>,
        options: &LoopOptions,
        xdp: &mut XdpProgram,
        counters: Arc<QueueCounters>,
    ) -> anyhow::Result<Self> {
        let sizes = options.sizes;
        let fill_size = sizes.rx * 2;
        // Every port's fill ring full, every TX ring full, plus as many pending per port.
        let per_port = fill_size + 2 * sizes.tx;
        anyhow::ensure!(!ports.is_empty(), "a run loop needs at least one port");
        let (umem, free) = afxdp::open_umem(&afxdp::UmemOptions {
            frame_size: sizes.frame_size,
            frames: per_port * ports.len() as u32,
            fill_ring: fill_size,
            comp_ring: sizes.tx,
        })
        .with_context(|| format!("creating the UMEM of queue {queue}"))?;
        let socket_options = afxdp::SocketOptions {
            rx_ring: sizes.rx,
            tx_ring: sizes.tx,
            zero_copy: options.zero_copy,
            program: afxdp::Program::Own,
        };
        let mut opened = Vec::with_capacity(ports.len());
        for (slot, spec) in ports.iter().enumerate() {
            let socket = afxdp::open_socket(&umem, &spec.name, queue, &socket_options)?;
            let (fill, comp) = socket.rings.with_context(|| {
                format!(
                    "{} queue {queue} is already bound by another socket",
                    spec.name
                )
            })?;
            let fd = socket.tx.fd().as_raw_fd();
            if options.busy_poll {
                afxdp::set_busy_poll(socket.tx.fd(), BUSY_POLL_USECS, BATCH as i32)
                    .with_context(|| format!("busy polling on {} queue {queue}", spec.name))?;
            }
            xdp.set_socket(slot as u32, queue, fd)
                .with_context(|| format!("XSKMAP entry of {} queue {queue}", spec.name))?;
            opened.push(Port {
                rx: socket.rx,
                tx: socket.tx,
                fill,
                comp,
                pending: Vec::with_capacity(sizes.tx as usize),
                in_flight: 0,
                ifindex: spec.ifindex,
            });
        }
        Ok(QueueLoop {
            queue,
            umem,
            ports: opened,
            states,
            free,
            counters,
            busy_poll: options.busy_poll,
            pending_cap: sizes.tx as usize,
            frame_size: sizes.frame_size as usize,
            spare: [None; SPARE_SLOTS],
        })
    }

    /// Runs until `stop` or `pause` is set (the instance pauses its loops to reopen them
    /// when an interface is re-created).
    pub fn run<E: Engine>(
        &mut self,
        engine: &mut E,
        punt: Option<&Punt>,
        stop: &AtomicBool,
        pause: &AtomicBool,
    ) {
        let mut descs = [FrameDesc::default(); BATCH];
        let mut turns: u32 = 0;
        let mut pollfds: Vec<libc::pollfd> =
            self.ports.iter().map(|p| afxdp::pollfd(&p.rx)).collect();
        while !stop.load(Ordering::Relaxed) && !pause.load(Ordering::Relaxed) {
            let mut busy = false;
            for index in 0..self.ports.len() {
                if self.states[index].gone.load(Ordering::Relaxed) {
                    continue;
                }
                busy |= self.complete(index, &mut descs);
                self.refill(index);
            }
            for index in 0..self.ports.len() {
                if self.states[index].gone.load(Ordering::Relaxed) {
                    continue;
                }
                // SAFETY: `descs` receives descriptors of frames of this loop's UMEM that the
                // kernel has finished writing; the loop owns them until it hands them back.
                let received = unsafe { self.ports[index].rx.consume(&mut descs) };
                if received == 0 {
                    continue;
                }
                busy = true;
                self.batch(index, &mut descs[..received], engine, punt);
            }
            {
                let guard = crossbeam_epoch::pin();
                let mut pool = UmemPool {
                    umem: &self.umem,
                    free: &mut self.free,
                    slots: &mut self.spare,
                    ports: &mut self.ports,
                    states: &self.states,
                    counters: &self.counters,
                    pending_cap: self.pending_cap,
                    frame_size: self.frame_size,
                };
                engine.turn(&guard, &mut pool);
            }
            let mut in_flight = false;
            for index in 0..self.ports.len() {
                if self.states[index].gone.load(Ordering::Relaxed) {
                    continue;
                }
                in_flight |= self.transmit(index);
            }
            turns = turns.wrapping_add(1);
            if turns % STATS_EVERY == 0 {
                self.read_socket_stats();
            }
            if !busy && !in_flight {
                self.read_socket_stats();
                bump(&self.counters.idle_polls, 1);
                let timeout = if self.busy_poll { 0 } else { IDLE_POLL_MS };
                for (pollfd, state) in pollfds.iter_mut().zip(self.states.iter()) {
                    // A removed interface's socket reports errors forever: leave it out.
                    pollfd.fd = if state.gone.load(Ordering::Relaxed) {
                        -pollfd.fd.abs()
                    } else {
                        pollfd.fd.abs()
                    };
                }
                afxdp::wait_readable(&mut pollfds, timeout);
            } else if !busy && in_flight {
                // Frames wait in a TX ring (a link that is down, or a slow peer): do not spin.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        self.read_socket_stats();
    }

    /// Processes one received batch of port `index`: the engine decides, the loop carries the
    /// verdicts out.
    fn batch<E: Engine>(
        &mut self,
        index: usize,
        descs: &mut [FrameDesc],
        engine: &mut E,
        punt: Option<&Punt>,
    ) {
        let counters_arc = self.counters.clone();
        let counters = &*counters_arc;
        let ingress = self.ports[index].ifindex;
        let frame_size = self.frame_size;
        let bytes: usize = descs.iter().map(|d| d.lengths().data()).sum();
        bump(&counters.ports[index].rx_packets, descs.len() as u64);
        bump(&counters.ports[index].rx_bytes, bytes as u64);
        let mut decided: ArrayVec<(Verdict, usize, usize), BATCH> = ArrayVec::new();
        {
            let mut frames: ArrayVec<Frame<'_>, BATCH> = descs
                .iter_mut()
                .take(BATCH)
                .map(|desc| {
                    let len = desc.lengths().data();
                    // SAFETY: each descriptor was just consumed from the RX ring of a socket
                    // on `self.umem`, so the kernel no longer writes its frame and no ring
                    // holds it; each is borrowed mutably once, so no two chunks alias.
                    let (chunk, offset) = unsafe { afxdp::chunk_mut(&self.umem, desc, frame_size) };
                    Frame::new(chunk, offset, len, ingress)
                })
                .collect();
            let mut pool = UmemPool {
                umem: &self.umem,
                free: &mut self.free,
                slots: &mut self.spare,
                ports: &mut self.ports,
                states: &self.states,
                counters,
                pending_cap: self.pending_cap,
                frame_size,
            };
            let guard = crossbeam_epoch::pin();
            counters.set_pinned(true);
            engine.process(&mut frames, &guard, &mut pool);
            counters.set_pinned(false);
            drop(guard);
            bump(&counters.batches, 1);
            for frame in &mut frames {
                if let Verdict::Punt(_) | Verdict::Deliver { .. } = frame.verdict {
                    // The router hands `Deliver` frames to its endpoints, which leave
                    // `Deliver` on none; an engine without endpoints gives the kernel the
                    // datagram.
                    let end = frame.offset.saturating_add(frame.len);
                    let injected = match (punt, frame.chunk.get_mut(frame.offset..end)) {
                        (Some(punt), Some(bytes)) => punt.inject(bytes).is_ok(),
                        _ => false,
                    };
                    if injected {
                        bump(&counters.punted, 1);
                    } else {
                        counters.loop_drop(LoopDrop::PuntFailed, 1);
                    }
                }
                decided.push((frame.verdict, frame.offset, frame.len));
            }
        }
        for (desc, (verdict, offset, len)) in descs.iter_mut().zip(decided) {
            match verdict {
                Verdict::Transmit { ifindex } | Verdict::Reply { ifindex } => {
                    self.transmit_one(desc, ifindex, offset, len);
                }
                // Punted (or counted as failed) above; the chunk is free again.
                Verdict::Punt(_) | Verdict::Deliver { .. } => self.free.push(*desc),
                // Counted by the engine; the content, if any, was copied elsewhere.
                Verdict::Held | Verdict::Consumed | Verdict::Drop(_) => self.free.push(*desc),
                Verdict::Pending => {
                    counters.loop_drop(LoopDrop::Undecided, 1);
                    self.free.push(*desc);
                }
            }
        }
    }

    /// Queues a frame the engine forwarded (`len` bytes at `offset` of its chunk) for port
    /// `ifindex`, or frees it, counting why.
    fn transmit_one(&mut self, desc: &mut FrameDesc, ifindex: u32, offset: usize, len: usize) {
        let counters = &*self.counters;
        let Some(egress) = self.ports.iter().position(|p| p.ifindex == ifindex) else {
            counters.loop_drop(LoopDrop::UnknownEgress, 1);
            self.free.push(*desc);
            return;
        };
        let state = &self.states[egress];
        if !state.up.load(Ordering::Relaxed) || state.gone.load(Ordering::Relaxed) {
            counters.loop_drop(LoopDrop::EgressDown, 1);
            self.free.push(*desc);
            return;
        }
        if self.ports[egress].pending.len() >= self.pending_cap {
            counters.loop_drop(LoopDrop::TxRingFull, 1);
            self.free.push(*desc);
            return;
        }
        // SAFETY: the frame came off this loop's RX ring and is on no ring; the engine's
        // borrow of its chunk ended with the batch.
        match unsafe { afxdp::commit(&self.umem, desc, self.frame_size, offset, len) } {
            Commit::InPlace => self.ports[egress].pending.push(*desc),
            Commit::Shifted => {
                bump(&counters.shifted, 1);
                self.ports[egress].pending.push(*desc);
            }
            Commit::DoesNotFit => {
                counters.loop_drop(LoopDrop::DoesNotFit, 1);
                self.free.push(*desc);
            }
        }
    }

    /// Drains port `index`'s completion ring; true when something completed.
    fn complete(&mut self, index: usize, scratch: &mut [FrameDesc; BATCH]) -> bool {
        let port = &mut self.ports[index];
        let mut any = false;
        loop {
            // SAFETY: completed descriptors name frames the kernel has finished sending; they
            // return to the loop's ownership.
            let done = unsafe { port.comp.consume(scratch) };
            if done == 0 {
                return any;
            }
            any = true;
            port.in_flight = port.in_flight.saturating_sub(done as u32);
            self.free.extend_from_slice(&scratch[..done]);
        }
    }

    /// Tops up port `index`'s fill ring from the free list.
    fn refill(&mut self, index: usize) {
        let port = &mut self.ports[index];
        let want = port.fill.nb_free(self.free.len() as u32) as usize;
        let count = want.min(self.free.len());
        if count > 0 {
            let start = self.free.len() - count;
            // SAFETY: frames on the free list belong to the loop and nothing references them;
            // from here the kernel owns them until they come back on an RX ring.
            let produced = unsafe { port.fill.produce(&self.free[start..]) };
            self.free.truncate(self.free.len() - produced);
        }
        if afxdp::wake_fill(&port.fill, &port.rx) {
            bump(&self.counters.ports[index].fill_wakeups, 1);
        }
    }

    /// Moves port `index`'s pending frames into its TX ring and kicks the kernel; true while
    /// frames are in flight.
    fn transmit(&mut self, index: usize) -> bool {
        let port = &mut self.ports[index];
        if !port.pending.is_empty() {
            let room = port.tx.nb_free(port.pending.len() as u32) as usize;
            let count = room.min(port.pending.len());
            if count > 0 {
                // SAFETY: pending frames belong to the loop, hold complete packets and are
                // not referenced elsewhere; the kernel owns them until they complete.
                let sent = unsafe { port.tx.produce(&port.pending[..count]) };
                let bytes: usize = port.pending[..sent]
                    .iter()
                    .map(|d| d.lengths().data())
                    .sum();
                port.pending.drain(..sent);
                port.in_flight += sent as u32;
                let counters = &self.counters.ports[index];
                bump(&counters.tx_packets, sent as u64);
                bump(&counters.tx_bytes, bytes as u64);
            }
        }
        // A broken socket shows in its statistics (a ring that does not drain): the loop goes
        // on with its other ports.
        if port.in_flight > 0 && afxdp::kick_tx(&port.tx).unwrap_or(true) {
            bump(&self.counters.ports[index].tx_wakeups, 1);
        }
        port.in_flight > 0 || !port.pending.is_empty()
    }

    /// Copies every socket's XDP_STATISTICS into the counters.
    fn read_socket_stats(&self) {
        for (port, counters) in self.ports.iter().zip(&self.counters.ports) {
            if let Some(stats) = afxdp::statistics(port.rx.fd()) {
                let c = &counters.socket;
                c.rx_dropped.store(stats.rx_dropped, Ordering::Relaxed);
                c.rx_ring_full.store(stats.rx_ring_full, Ordering::Relaxed);
                c.rx_fill_ring_empty
                    .store(stats.rx_fill_ring_empty, Ordering::Relaxed);
                c.rx_invalid_descs
                    .store(stats.rx_invalid_descs, Ordering::Relaxed);
                c.tx_invalid_descs
                    .store(stats.tx_invalid_descs, Ordering::Relaxed);
                c.tx_ring_empty
                    .store(stats.tx_ring_empty, Ordering::Relaxed);
            }
        }
    }

    /// Frames on the free list (not in any ring).
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }
}

/// The loop's spare frames as a [`FramePool`]: chunks from the free list (the data segment,
/// from the kernel's headroom offset on), sent by moving them to an egress port's pending TX
/// list (the same checks as a `Transmit` verdict).
struct UmemPool<'a> {
    umem: &'a Umem,
    free: &'a mut Vec<FrameDesc>,
    slots: &'a mut [Option<FrameDesc>; SPARE_SLOTS],
    ports: &'a mut [Port],
    states: &'a [PortState],
    counters: &'a QueueCounters,
    pending_cap: usize,
    frame_size: usize,
}

impl FramePool for UmemPool<'_> {
    fn alloc(&mut self) -> Option<u64> {
        let slot = self.slots.iter().position(Option::is_none)?;
        let desc = self.free.pop()?;
        self.slots[slot] = Some(desc);
        Some(slot as u64)
    }

    fn chunk(&mut self, handle: u64) -> &mut [u8] {
        let Some(Some(desc)) = self.slots.get_mut(handle as usize) else {
            return &mut [];
        };
        // SAFETY: the descriptor came off the loop's free list in `alloc`, so no ring and no
        // other reference holds its frame; it stays in its slot (borrowed mutably with
        // `self`) until `send` or `free`.
        let (chunk, offset) = unsafe { afxdp::chunk_mut(self.umem, desc, self.frame_size) };
        &mut chunk[offset..]
    }

    fn send(&mut self, handle: u64, offset: usize, len: usize, ifindex: u32) {
        let Some(mut desc) = self.slots.get_mut(handle as usize).and_then(Option::take) else {
            return;
        };
        let data_start = desc.addr() & (self.frame_size - 1);
        let egress = self.ports.iter().position(|p| p.ifindex == ifindex);
        let drop = match egress {
            None => Some(LoopDrop::UnknownEgress),
            Some(e)
                if !self.states[e].up.load(Ordering::Relaxed)
                    || self.states[e].gone.load(Ordering::Relaxed) =>
            {
                Some(LoopDrop::EgressDown)
            }
            Some(e) if self.ports[e].pending.len() >= self.pending_cap => {
                Some(LoopDrop::TxRingFull)
            }
            Some(_) => {
                // SAFETY: as in `chunk`: the frame belongs to this pool's slot alone, and the
                // slice `chunk` returned is no longer borrowed.
                let done = unsafe {
                    afxdp::commit(
                        self.umem,
                        &mut desc,
                        self.frame_size,
                        data_start.saturating_add(offset),
                        len,
                    )
                };
                (done == Commit::DoesNotFit).then_some(LoopDrop::DoesNotFit)
            }
        };
        match (drop, egress) {
            (None, Some(e)) => {
                bump(&self.counters.spare_sent, 1);
                self.ports[e].pending.push(desc);
            }
            (Some(reason), _) => {
                self.counters.loop_drop(reason, 1);
                self.free.push(desc);
            }
            (None, None) => self.free.push(desc),
        }
    }

    fn free(&mut self, handle: u64) {
        if let Some(desc) = self.slots.get_mut(handle as usize).and_then(Option::take) {
            self.free.push(desc);
        }
    }
}
