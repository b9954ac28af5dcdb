//! The routing processor: the `dataplane` pipeline over the tables a `netlink-mirror` keeps,
//! one [`dataplane::Queue`] per run loop.
//!
//! Per batch: each frame's whole UMEM chunk is handed to the pipeline (packet at offset 0, the
//! rest of the chunk as tailroom for ICMP errors built in place), with a monotonic clock in
//! nanoseconds; spare frames (ICMP errors that need a copy, IPv4 fragments, packets released
//! from the hold buffer) come from the loop's free UMEM chunks and go straight to an egress
//! port's TX list. Per loop turn ([`Processor::turn`]): `release_held` (two atomic loads when
//! no neighbour or link changed), resolution requests forwarded to the mirror's
//! [`NeighResolver`] (a bounded channel: no syscall on the packet path; the mirror's control
//! thread sends `RTM_NEWNEIGH` with `NTF_USE`), and every [`PUBLISH_EVERY_NS`] a copy of the
//! queue's counters for `xfwd stats` (a `try_lock`: the loop never waits).
//!
//! In-dataplane UDP endpoints ([`crate::endpoints`]): after each batch the `Deliver` frames go
//! to [`dataplane::endpoint::EndpointRx::handle_batch`], which answers the echo and STAMP
//! services in place (`Transmit`, `Held` or `Drop`) and queues datagrams for embedders'
//! sockets (`Consumed`); each turn sends what endpoints queued.
//!
//! Verdict mapping: `Transmit` and `Reply` → transmit on that interface; `Punt` → the punt
//! device; `Deliver` (a socket no endpoint owns any more) → the punt device too; `Held` and
//! `Consumed` → the chunk is recycled (not a drop: the pipeline counts them); `Drop(reason)` →
//! dropped, counted under the reason's name.
#![forbid(unsafe_code)]

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use arrayvec::ArrayVec;
use crossbeam_epoch::Guard;
use dataplane::{Counters, DropReason, Frame, Queue, Tables};
use serde::{Deserialize, Serialize};

use crate::processor::{FramePool, PacketBuf, Processor, Verdict};
use crate::runloop::BATCH;

/// How often a queue publishes its counters (nanoseconds).
pub const PUBLISH_EVERY_NS: u64 = 100_000_000;

/// The drop reasons of the routing processor: `dataplane::DropReason` names, in order.
pub static ROUTER_DROP_REASONS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| DropReason::ALL.iter().map(|r| r.name()).collect());

/// Where a queue publishes its pipeline counters for the stats thread.
pub type SharedCounters = Arc<Mutex<Counters>>;

/// The published counters of every queue, by queue id.
///
/// Run loops build their processors on their own threads, so they register in whatever order
/// the threads start: the queue id travels with each entry rather than being inferred from the
/// order of registration.
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

/// Where a queue's neighbour resolution requests go: in `xfwd`,
/// `netlink_mirror::NeighResolver::request` (non-blocking, no syscall).
pub type Resolve = Box<dyn Fn(u32, std::net::IpAddr) -> bool + Send>;

/// The routing processor of one run loop.
pub struct Router {
    queue: Queue,
    tables: Tables,
    resolve: Resolve,
    clock: Instant,
    shared: SharedCounters,
    published_at: u64,
    endpoints: Option<dataplane::endpoint::EndpointRx>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("queue", &self.queue.config().queue_id)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A processor driving `queue` over `tables`, handing neighbour resolution requests to
    /// `resolve` and publishing its counters into `shared`.
    pub fn new(queue: Queue, tables: Tables, resolve: Resolve, shared: SharedCounters) -> Self {
        Router {
            queue,
            tables,
            resolve,
            clock: Instant::now(),
            shared,
            published_at: 0,
            endpoints: None,
        }
    }

    /// Hands the batches' `Deliver` frames to these endpoints (and sends what they queue).
    pub fn with_endpoints(mut self, endpoints: dataplane::endpoint::EndpointRx) -> Self {
        self.endpoints = Some(endpoints);
        self
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    fn publish(&mut self) {
        if let Ok(mut shared) = self.shared.try_lock() {
            *shared = self.queue.counters();
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let counters = self.queue.counters();
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = counters;
    }
}

impl Processor for Router {
    fn process<F: PacketBuf, S: FramePool>(
        &mut self,
        ingress: u32,
        frames: &mut [F],
        verdicts: &mut [Verdict],
        guard: &Guard,
        spare: &mut S,
    ) {
        let now = self.now();
        let mut lens: ArrayVec<usize, BATCH> = ArrayVec::new();
        let mut out: ArrayVec<(dataplane::Verdict, usize, usize), BATCH> = ArrayVec::new();
        {
            let mut batch: ArrayVec<Frame<'_>, BATCH> = ArrayVec::new();
            for frame in frames.iter_mut().take(BATCH) {
                let len = frame.data().len();
                lens.push(len);
                let capacity = frame.capacity();
                frame.set_len(capacity);
                batch.push(Frame::new(frame.data_mut(), 0, len, ingress));
            }
            self.queue
                .process_batch(&self.tables, guard, now, &mut batch, spare);
            if let Some(endpoints) = &mut self.endpoints {
                endpoints.handle_batch(
                    &mut self.queue,
                    &self.tables,
                    guard,
                    now,
                    &mut unix_nanos,
                    &mut batch,
                );
            }
            out.extend(batch.iter().map(|f| (f.verdict, f.offset, f.len)));
        }
        for (((frame, verdict), len), (decided, offset, new_len)) in frames
            .iter_mut()
            .zip(verdicts.iter_mut())
            .zip(lens)
            .zip(out)
        {
            *verdict = match decided {
                dataplane::Verdict::Transmit { ifindex }
                | dataplane::Verdict::Reply { ifindex } => {
                    if offset > 0 {
                        let end = (offset + new_len).min(frame.data().len());
                        frame.data_mut().copy_within(offset..end, 0);
                    }
                    frame.set_len(new_len);
                    Verdict::Transmit { ifindex }
                }
                dataplane::Verdict::Punt(_) | dataplane::Verdict::Deliver { .. } => {
                    frame.set_len(len);
                    Verdict::Punt
                }
                dataplane::Verdict::Held | dataplane::Verdict::Consumed => Verdict::Recycle,
                dataplane::Verdict::Drop(reason) => Verdict::Drop(reason as u16),
                dataplane::Verdict::Pending => Verdict::Undecided,
            };
        }
    }

    fn turn<S: FramePool>(&mut self, guard: &Guard, spare: &mut S) {
        let now = self.now();
        self.queue.release_held(&self.tables, guard, now, spare);
        if let Some(endpoints) = &mut self.endpoints {
            endpoints.poll_transmit(&mut self.queue, &self.tables, guard, now, spare, BATCH);
        }
        while let Some(request) = self.queue.poll_resolution() {
            (self.resolve)(request.ifindex, request.addr);
        }
        if now.saturating_sub(self.published_at) >= PUBLISH_EVERY_NS {
            self.published_at = now;
            self.publish();
        }
    }

    fn drop_reasons(&self) -> &'static [&'static str] {
        &ROUTER_DROP_REASONS
    }
}

/// The wall clock in Unix nanoseconds (the reflector's timestamps; a vDSO read, no system
/// call).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How long `xfwd run` waits for the mirror's first synchronisation (a full BGP table takes
/// seconds).
pub const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Starts the netlink mirror of the calling thread's namespace, waits until it is synced,
/// and returns the routing pipeline over its tables (one [`Router`] per queue). The mirror's
/// observer feeds the XDP program's local-address set. The mirror stops when the returned
/// pipeline (its stats hook holds the handle) is dropped.
///
/// # Errors
/// When the mirror cannot start or sync, or the socket table cannot be made.
///
/// Routes out of interfaces other than `served` (the ifindexes of `--iface`) are punted: the
/// kernel forwards those packets.
pub fn pipeline(
    config: dataplane::Config,
    served: &[u32],
    endpoint_specs: &[crate::endpoints::EndpointSpec],
) -> anyhow::Result<crate::app::Pipeline<Router>> {
    use anyhow::Context;
    use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    config.validate().context("pipeline configuration")?;
    let feed = Arc::new(crate::locals::LocalAddrFeed::default());
    let options = MirrorOptions {
        observer: Some(feed.clone()),
        ..MirrorOptions::default()
    };
    let started = Instant::now();
    let mirror =
        Mirror::start(NetnsSpec::Current, options).context("starting the netlink mirror")?;
    mirror
        .wait_synced(SYNC_TIMEOUT)
        .context("waiting for the netlink mirror's first synchronisation")?;
    let m = mirror.tables().clone();
    tracing::info!(
        links = m.links.len(),
        neighbours = m.neigh.len(),
        local_addresses = feed.addresses().len(),
        seconds = started.elapsed().as_secs_f64(),
        "kernel state mirrored"
    );
    let (sockets, mut writer) =
        SockTable::new(TableConfig::default()).context("creating the UDP socket table")?;
    let sock_netns = writer
        .add_netns(NetnsConfig::default())
        .context("creating the UDP socket table")?;
    let tables = Tables {
        links: m.links.clone(),
        neigh: m.neigh.clone(),
        addrs: m.addrs.clone(),
        fib4: m.fib4.clone(),
        fib6: m.fib6.clone(),
        policies: m.policies.clone(),
        sockets,
        generation: m.generation.clone(),
        sock_netns,
        served: Some(served.into()),
    };
    let (endpoints, udp_ports) =
        crate::endpoints::open(writer, tables.clone(), &feed.addresses(), endpoint_specs)?;
    let board = CounterBoard::default();
    let resolver = mirror.resolver();
    let make = {
        let board = board.clone();
        let endpoints = endpoints.clone();
        move |queue: u32| -> anyhow::Result<Router> {
            let dp = Queue::new(dataplane::Config {
                queue_id: queue,
                ..config
            })?;
            let counters = board.register(queue);
            let resolver = resolver.clone();
            let resolve: Resolve = Box::new(move |ifindex, addr| resolver.request(ifindex, addr));
            let rx = endpoints.lock().unwrap_or_else(|e| e.into_inner()).rx();
            Ok(Router::new(dp, tables.clone(), resolve, counters).with_endpoints(rx))
        }
    };
    let generation = {
        let g = m.generation.clone();
        move || g.snapshot().generation
    };
    let mirror = Arc::new(mirror);
    let report = move |stats: &mut crate::stats::Stats| {
        stats.pipeline = board.snapshots();
        stats.endpoints = endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list()
            .iter()
            .map(crate::endpoints::EndpointSnapshot::from)
            .collect();
        let ms = mirror.stats();
        stats.mirror = vec![
            ("applied".into(), ms.applied),
            ("unchanged".into(), ms.unchanged),
            ("swept".into(), ms.swept),
            ("dumps".into(), ms.dumps),
            ("dump_restarts".into(), ms.dump_restarts),
            ("resyncs".into(), ms.resyncs),
            ("route_redumps".into(), ms.route_redumps),
            ("overruns".into(), ms.overruns),
            ("errors".into(), ms.errors.values().sum()),
            ("resolve_requested".into(), ms.resolve_requested),
            ("resolve_sent".into(), ms.resolve_sent),
            ("resolve_errors".into(), ms.resolve_errors),
            ("resolve_rate_limited".into(), ms.resolve_rate_limited),
            ("resolve_queue_full".into(), ms.resolve_queue_full),
        ];
        stats.kernel_decides = ms
            .kernel_decides
            .iter()
            .map(|(kind, n)| ((*kind).to_owned(), *n))
            .collect();
    };
    Ok(crate::app::Pipeline {
        mode: "router",
        make: Arc::new(make),
        drop_reasons: &ROUTER_DROP_REASONS,
        generation: Some(Arc::new(generation)),
        report: Some(Arc::new(report)),
        locals: Some(feed),
        udp_ports: Some(udp_ports),
    })
}

/// The routing pipeline's counters of one queue, named for reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PipelineSnapshot {
    /// Queue index.
    pub queue: u32,
    /// Frames per verdict: rx, transmit, punt, deliver, reply, held, consumed, dropped.
    pub verdicts: Vec<(String, u64)>,
    /// Non-zero drops by reason.
    pub drops: Vec<(String, u64)>,
    /// Non-zero punts by reason.
    pub punts: Vec<(String, u64)>,
    /// Non-zero ICMP errors sent, by kind.
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
        let nonzero = |names: Vec<&'static str>, values: &[u64]| -> Vec<(String, u64)> {
            names
                .into_iter()
                .zip(values)
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| (k.to_owned(), *v))
                .collect()
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
            drops: nonzero(DropReason::ALL.iter().map(|r| r.name()).collect(), &c.drops),
            punts: nonzero(
                dataplane::PuntReason::ALL
                    .iter()
                    .map(|r| r.name())
                    .collect(),
                &c.punts,
            ),
            icmp_sent: nonzero(
                dataplane::IcmpError::ALL.iter().map(|r| r.name()).collect(),
                &c.icmp_sent,
            ),
            events: named(&[
                ("icmp_rate_limited", c.icmp_rate_limited),
                ("icmp_not_allowed", c.icmp_not_allowed),
                ("icmp_no_source", c.icmp_no_source),
                ("fragmented", c.fragmented),
                ("fragments_out", c.fragments_out),
                ("held_released", c.held_released),
                ("held_expired", c.held_expired),
                ("held_dropped", c.held_dropped),
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::VecFrame;
    use dataplane::HeapPool;
    use fib_trie::{InsertFlags, NextHop, Route};
    use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    fn tables() -> Tables {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let sock_netns = writer.add_netns(NetnsConfig::default()).unwrap();
        let tables = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
        for (ifindex, mac) in [(1, [2, 0, 0, 0, 0, 1]), (2, [2, 0, 0, 0, 0, 2])] {
            let mut link = Link {
                mac: Some(mac),
                ..Link::new(ifindex, format!("eth{ifindex}"))
            };
            (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
            tables.links.upsert(link);
        }
        let gw = std::net::Ipv4Addr::new(192, 0, 2, 1);
        tables
            .fib4
            .insert(
                &Route::unicast(0, 0, 254, vec![NextHop::new(Some(gw.into()), 2)]),
                InsertFlags::ADD,
            )
            .unwrap();
        tables.neigh.upsert(Neighbour::new(
            2,
            gw.into(),
            Some([2, 0, 0, 0, 0, 9]),
            NudState::REACHABLE,
        ));
        tables
            .addrs
            .add(addr_table::IfAddr::new(
                std::net::Ipv4Addr::new(198, 51, 100, 1),
                24,
                1,
            ))
            .unwrap();
        tables.generation.bump();
        tables
    }

    fn udp(ttl: u8) -> Vec<u8> {
        let mut bytes = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1])
            .ipv4([198, 51, 100, 7], [203, 0, 113, 9], ttl)
            .udp(5000, 53)
            .write(&mut bytes, b"hello")
            .unwrap();
        bytes
    }

    #[test]
    fn maps_verdicts_and_publishes_counters() {
        let shared = SharedCounters::default();
        let queue = Queue::new(dataplane::Config::default()).unwrap();
        let mut router = Router::new(queue, tables(), Box::new(|_, _| true), shared.clone());
        let packet = udp(64);
        let mut frames = [
            VecFrame::new(&packet, 2048),
            VecFrame::new(&packet[..20], 2048),
        ];
        let mut verdicts = [Verdict::Undecided; 2];
        let mut pool = HeapPool::new(2048, 4);
        router.process(
            1,
            &mut frames,
            &mut verdicts,
            &crossbeam_epoch::pin(),
            &mut pool,
        );
        assert_eq!(verdicts[0], Verdict::Transmit { ifindex: 2 });
        assert_eq!(
            verdicts[1],
            Verdict::Drop(DropReason::Truncated as u16),
            "a runt is dropped by reason"
        );
        let out = frames[0].data();
        assert_eq!(out.len(), packet.len(), "the length is restored");
        assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&out[6..12], &[2, 0, 0, 0, 0, 2]);
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&out[14..]).unwrap();
        assert_eq!(ip.ttl(), 63);
        assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
        assert_eq!(
            ROUTER_DROP_REASONS[DropReason::Truncated as usize],
            "truncated"
        );

        // TTL 1: an ICMP time exceeded goes back out of the ingress interface.
        let mut frames = [VecFrame::new(&udp(1), 2048)];
        let mut verdicts = [Verdict::Undecided];
        router.process(
            1,
            &mut frames,
            &mut verdicts,
            &crossbeam_epoch::pin(),
            &mut pool,
        );
        assert_eq!(verdicts[0], Verdict::Transmit { ifindex: 1 });
        let reply = frames[0].data();
        assert_eq!(&reply[..6], &[2, 0, 0, 0, 0, 7], "back to the sender's MAC");
        assert_eq!(reply[14 + 9], 1, "ICMP");
        assert_eq!(reply[14 + 20], 11, "time exceeded");

        drop(router);
        let counters = shared.lock().unwrap().clone();
        let snap = PipelineSnapshot::new(0, &counters);
        assert_eq!(snap.verdicts[0], ("rx".to_owned(), 3));
        assert_eq!(snap.verdicts[1], ("transmit".to_owned(), 1));
        assert_eq!(snap.drops, vec![("truncated".to_owned(), 1)]);
        assert_eq!(snap.icmp_sent.len(), 1);
    }

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
        let rx: Vec<(u32, u64)> = snaps.iter().map(|s| (s.queue, s.verdicts[0].1)).collect();
        assert_eq!(rx, [(0, 5), (1, 11)]);
    }
}
