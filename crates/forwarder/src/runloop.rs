//! One run loop per queue: a UMEM shared by this loop's AF_XDP sockets on every interface
//! (socket `q` of each interface is bound to its receive queue `q`), driven by a
//! [`Processor`].
//!
//! Each turn of the loop:
//! 1. drains every completion ring (sent frames return to the free list);
//! 2. tops up every fill ring from the free list (fill ring = 2 × RX ring), waking the kernel
//!    when the ring asks for it (need_wakeup);
//! 3. takes up to [`BATCH`] frames from each RX ring and hands them to the processor under
//!    one epoch pin per batch; verdicts move frames to an egress port's pending TX list, to
//!    the punt device, or back to the free list;
//! 4. moves pending frames into TX rings (as many as fit; the rest wait for the next turn)
//!    and kicks the kernel (`sendto`) while frames are in flight, even on turns where nothing
//!    new arrived (copy mode sends at most 32 frames per kick);
//! 5. with nothing received and nothing in flight, sleeps in poll(2) on the RX sockets (or
//!    spins when busy polling).

use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use arrayvec::ArrayVec;
use xsk_rs::config::{
    BindFlags, FrameSize, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::umem::frame::DataMut;
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::counters::{LoopDrop, QueueCounters, bump};
use crate::processor::{FramePool, PacketBuf, Processor, Verdict};
use crate::punt::Punt;
use crate::xdp::XdpProgram;

/// Frames per RX batch and per processor call.
pub const BATCH: usize = 64;

/// How long an idle loop sleeps in poll(2) before it looks at the stop flag again.
const IDLE_POLL_MS: i32 = 50;

/// Spare frames a processor may hold at once (allocated, not yet sent or freed).
const SPARE_SLOTS: usize = 16;

/// Loop turns between two reads of the sockets' XDP_STATISTICS.
const STATS_EVERY: u32 = 4096;

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

/// Ring and frame sizes of a run loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    /// RX ring entries per socket (power of two).
    pub rx: u32,
    /// TX ring entries per socket (power of two).
    pub tx: u32,
    /// UMEM chunk size: 2048 or 4096.
    pub frame_size: u32,
}

impl Default for RingSizes {
    fn default() -> Self {
        RingSizes {
            rx: 1024,
            tx: 1024,
            frame_size: 2048,
        }
    }
}

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
        let umem_config = UmemConfig::builder()
            .frame_size(FrameSize::new(sizes.frame_size).context("frame size")?)
            .fill_queue_size(QueueSize::new(fill_size).context("fill ring size")?)
            .comp_queue_size(QueueSize::new(sizes.tx).context("completion ring size")?)
            .build()
            .context("UMEM configuration")?;
        // Every port's fill ring full, every TX ring full, plus as many pending per port.
        let per_port = fill_size + 2 * sizes.tx;
        let frame_count = NonZeroU32::new(per_port * ports.len() as u32)
            .context("a run loop needs at least one port")?;
        let (umem, free) = Umem::new(umem_config, frame_count, false)
            .with_context(|| format!("creating the UMEM of queue {queue}"))?;
        let mut bind = BindFlags::XDP_USE_NEED_WAKEUP;
        bind |= if options.zero_copy {
            BindFlags::XDP_ZEROCOPY
        } else {
            BindFlags::XDP_COPY
        };
        let socket_config = SocketConfig::builder()
            .rx_queue_size(QueueSize::new(sizes.rx).context("RX ring size")?)
            .tx_queue_size(QueueSize::new(sizes.tx).context("TX ring size")?)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .xdp_flags(XdpFlags::XDP_FLAGS_DRV_MODE)
            .bind_flags(bind)
            .build();
        let mut opened = Vec::with_capacity(ports.len());
        for (slot, spec) in ports.iter().enumerate() {
            let interface = spec
                .name
                .parse()
                .map_err(|e| anyhow::anyhow!("interface name {}: {e:?}", spec.name))?;
            // SAFETY: libxdp's program loading is inhibited (XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD
            // above), which is what sharing one UMEM across sockets requires; each
            // (interface, queue) is bound once.
            let (tx, rx, rings) = unsafe { Socket::new(socket_config, &umem, &interface, queue) }
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("AF_XDP socket on {} queue {queue}", spec.name))?;
            let (fill, comp) = rings.with_context(|| {
                format!(
                    "{} queue {queue} is already bound by another socket",
                    spec.name
                )
            })?;
            let fd = tx.fd().as_raw_fd();
            if options.busy_poll {
                set_busy_poll(fd)
                    .with_context(|| format!("busy polling on {} queue {queue}", spec.name))?;
            }
            xdp.set_socket(slot as u32, queue, fd)
                .with_context(|| format!("XSKMAP entry of {} queue {queue}", spec.name))?;
            opened.push(Port {
                rx,
                tx,
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
            spare: [None; SPARE_SLOTS],
        })
    }

    /// Runs until `stop` is set.
    pub fn run<P: Processor>(&mut self, processor: &mut P, punt: Option<&Punt>, stop: &AtomicBool) {
        let mut descs = [FrameDesc::default(); BATCH];
        let mut verdicts = [Verdict::Undecided; BATCH];
        let mut turns: u32 = 0;
        let mut pollfds: Vec<libc::pollfd> = self
            .ports
            .iter()
            .map(|p| libc::pollfd {
                fd: p.rx.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        while !stop.load(Ordering::Relaxed) {
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
                self.batch(
                    index,
                    &mut descs[..received],
                    &mut verdicts[..received],
                    processor,
                    punt,
                );
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
                };
                processor.turn(&guard, &mut pool);
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
                // SAFETY: `pollfds` is a live array of pollfd of the given length; poll(2)
                // only writes the revents fields.
                unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, timeout) };
            } else if !busy && in_flight {
                // Frames wait in a TX ring (a link that is down, or a slow peer): do not spin.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        self.read_socket_stats();
    }

    /// Processes one received batch of port `index`.
    fn batch<P: Processor>(
        &mut self,
        index: usize,
        descs: &mut [FrameDesc],
        verdicts: &mut [Verdict],
        processor: &mut P,
        punt: Option<&Punt>,
    ) {
        let counters_arc = self.counters.clone();
        let counters = &*counters_arc;
        let ingress = self.ports[index].ifindex;
        let bytes: usize = descs.iter().map(|d| d.lengths().data()).sum();
        bump(&counters.ports[index].rx_packets, descs.len() as u64);
        bump(&counters.ports[index].rx_bytes, bytes as u64);
        verdicts.fill(Verdict::Undecided);
        {
            let mut frames: ArrayVec<UmemFrame<'_>, BATCH> = descs
                .iter_mut()
                // SAFETY: each descriptor was just consumed from the RX ring of a socket on
                // `self.umem`, so the kernel no longer writes its frame, and each is borrowed
                // mutably once: no two `DataMut` alias.
                .map(|desc| UmemFrame(unsafe { self.umem.data_mut(desc) }))
                .collect();
            let mut pool = UmemPool {
                umem: &self.umem,
                free: &mut self.free,
                slots: &mut self.spare,
                ports: &mut self.ports,
                states: &self.states,
                counters,
                pending_cap: self.pending_cap,
            };
            let guard = crossbeam_epoch::pin();
            counters.set_pinned(true);
            processor.process(ingress, &mut frames, verdicts, &guard, &mut pool);
            counters.set_pinned(false);
            drop(guard);
            bump(&counters.batches, 1);
            if punt.is_some() {
                for (frame, verdict) in frames.iter_mut().zip(verdicts.iter_mut()) {
                    if *verdict == Verdict::Punt {
                        let injected = punt.is_some_and(|p| p.inject(frame.data_mut()).is_ok());
                        if injected {
                            bump(&counters.punted, 1);
                        } else {
                            counters.loop_drop(LoopDrop::PuntFailed, 1);
                            *verdict = Verdict::Drop(u16::MAX);
                        }
                        // Punted or not, the frame goes back to the free list below.
                    }
                }
            }
        }
        for (desc, verdict) in descs.iter().zip(verdicts.iter()) {
            match *verdict {
                Verdict::Transmit { ifindex } => {
                    let Some(egress) = self.ports.iter().position(|p| p.ifindex == ifindex) else {
                        counters.loop_drop(LoopDrop::UnknownEgress, 1);
                        self.free.push(*desc);
                        continue;
                    };
                    let state = &self.states[egress];
                    if !state.up.load(Ordering::Relaxed) || state.gone.load(Ordering::Relaxed) {
                        counters.loop_drop(LoopDrop::EgressDown, 1);
                        self.free.push(*desc);
                    } else if self.ports[egress].pending.len() >= self.pending_cap {
                        counters.loop_drop(LoopDrop::TxRingFull, 1);
                        self.free.push(*desc);
                    } else {
                        self.ports[egress].pending.push(*desc);
                    }
                }
                Verdict::Punt => {
                    if punt.is_none() {
                        counters.loop_drop(LoopDrop::PuntFailed, 1);
                    }
                    self.free.push(*desc);
                }
                Verdict::Drop(u16::MAX) => self.free.push(*desc), // counted above
                Verdict::Recycle => self.free.push(*desc),
                Verdict::Drop(reason) => {
                    counters.processor_drop(reason);
                    self.free.push(*desc);
                }
                Verdict::Undecided => {
                    counters.loop_drop(LoopDrop::Undecided, 1);
                    self.free.push(*desc);
                }
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
        if port.fill.needs_wakeup() {
            bump(&self.counters.ports[index].fill_wakeups, 1);
            // SAFETY: poll(2) on a valid descriptor with a zero timeout, one entry.
            let mut pollfd = libc::pollfd {
                fd: port.rx.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pollfd` is a valid pollfd; poll(2) writes only its revents.
            unsafe { libc::poll(&mut pollfd, 1, 0) };
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
        if port.in_flight > 0 && port.tx.needs_wakeup() {
            bump(&self.counters.ports[index].tx_wakeups, 1);
            // Errors (ENOBUFS, EAGAIN, EBUSY, ENETDOWN) only mean "try again later".
            let _ = port.tx.wakeup();
        }
        port.in_flight > 0 || !port.pending.is_empty()
    }

    /// Copies every socket's XDP_STATISTICS into the counters.
    fn read_socket_stats(&self) {
        for (port, counters) in self.ports.iter().zip(&self.counters.ports) {
            if let Ok(stats) = port.rx.fd().xdp_statistics() {
                let c = &counters.socket;
                c.rx_dropped.store(stats.rx_dropped(), Ordering::Relaxed);
                c.rx_ring_full
                    .store(stats.rx_ring_full(), Ordering::Relaxed);
                c.rx_fill_ring_empty
                    .store(stats.rx_fill_ring_empty_descs(), Ordering::Relaxed);
                c.rx_invalid_descs
                    .store(stats.rx_invalid_descs(), Ordering::Relaxed);
                c.tx_invalid_descs
                    .store(stats.tx_invalid_descs(), Ordering::Relaxed);
                c.tx_ring_empty
                    .store(stats.tx_ring_empty_descs(), Ordering::Relaxed);
            }
        }
    }

    /// Frames on the free list (not in any ring).
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }
}

/// The loop's spare frames as a [`FramePool`]: chunks from the free list, sent by moving
/// them to an egress port's pending TX list (the same checks as a `Transmit` verdict).
struct UmemPool<'a> {
    umem: &'a Umem,
    free: &'a mut Vec<FrameDesc>,
    slots: &'a mut [Option<FrameDesc>; SPARE_SLOTS],
    ports: &'a mut [Port],
    states: &'a [PortState],
    counters: &'a QueueCounters,
    pending_cap: usize,
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
        let mut data = unsafe { self.umem.data_mut(desc) };
        let capacity = data.cursor().buf_len();
        data.cursor().set_pos(capacity);
        let contents = data.contents_mut();
        let (ptr, len) = (contents.as_mut_ptr(), contents.len());
        // SAFETY: `ptr..ptr+len` is the frame's data segment inside the UMEM mapping, which
        // outlives `'a`; the returned borrow is tied to `&mut self`, which also holds the only
        // access to the descriptor's slot, so nothing else reads or writes it meanwhile.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    fn send(&mut self, handle: u64, offset: usize, len: usize, ifindex: u32) {
        let Some(mut desc) = self.slots.get_mut(handle as usize).and_then(Option::take) else {
            return;
        };
        {
            // SAFETY: as in `chunk`: the frame belongs to this pool's slot alone.
            let mut data = unsafe { self.umem.data_mut(&mut desc) };
            let capacity = data.cursor().buf_len();
            let end = offset.saturating_add(len).min(capacity);
            data.cursor().set_pos(capacity);
            if offset > 0 {
                data.contents_mut().copy_within(offset.min(end)..end, 0);
            }
            data.cursor().set_pos(end - offset.min(end));
        }
        let egress = self.ports.iter().position(|p| p.ifindex == ifindex);
        match egress {
            None => {
                self.counters.loop_drop(LoopDrop::UnknownEgress, 1);
                self.free.push(desc);
            }
            Some(e)
                if !self.states[e].up.load(Ordering::Relaxed)
                    || self.states[e].gone.load(Ordering::Relaxed) =>
            {
                self.counters.loop_drop(LoopDrop::EgressDown, 1);
                self.free.push(desc);
            }
            Some(e) if self.ports[e].pending.len() >= self.pending_cap => {
                self.counters.loop_drop(LoopDrop::TxRingFull, 1);
                self.free.push(desc);
            }
            Some(e) => {
                bump(&self.counters.spare_sent, 1);
                self.ports[e].pending.push(desc);
            }
        }
    }

    fn free(&mut self, handle: u64) {
        if let Some(desc) = self.slots.get_mut(handle as usize).and_then(Option::take) {
            self.free.push(desc);
        }
    }
}

/// A UMEM frame seen by the processor.
struct UmemFrame<'a>(DataMut<'a>);

impl PacketBuf for UmemFrame<'_> {
    #[inline]
    fn data(&self) -> &[u8] {
        self.0.contents()
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        self.0.contents_mut()
    }
    #[inline]
    fn capacity(&mut self) -> usize {
        self.0.cursor().buf_len()
    }
    #[inline]
    fn set_len(&mut self, len: usize) -> bool {
        let mut cursor = self.0.cursor();
        if len > cursor.buf_len() {
            return false;
        }
        cursor.set_pos(len);
        true
    }
}

/// Socket options for busy polling (Linux 5.11+): prefer busy polling, poll up to 20 µs,
/// a budget of one batch.
fn set_busy_poll(fd: i32) -> anyhow::Result<()> {
    const SO_PREFER_BUSY_POLL: libc::c_int = 69;
    const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
    for (option, value) in [
        (SO_PREFER_BUSY_POLL, 1),
        (libc::SO_BUSY_POLL, 20),
        (SO_BUSY_POLL_BUDGET, BATCH as libc::c_int),
    ] {
        // SAFETY: setsockopt reads one c_int from `value`, whose size is passed.
        let result = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result < 0 {
            bail!("setsockopt({option}): {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
