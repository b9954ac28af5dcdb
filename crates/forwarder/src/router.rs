//! The routing engine: the `dataplane` pipeline over the tables a `netlink-mirror` keeps, one
//! [`dataplane::Queue`] per run loop.
//!
//! Per batch the run loop's frames go to [`Queue::process_batch`] as they are (each frame the
//! whole UMEM chunk, the packet at the kernel's headroom offset: ICMP errors grow into the
//! headroom, a removed VLAN tag moves the start), with a monotonic clock in nanoseconds; the
//! pipeline sets each frame's verdict and counts it once. Spare frames (ICMP errors that need
//! a copy, IPv4 fragments, packets released from the hold buffer) come from the loop's free
//! UMEM chunks and go straight to an egress port's TX list. Per loop turn ([`Engine::turn`]):
//! `release_held` (two atomic loads when no neighbour or link changed), resolution requests
//! forwarded to the control plane ([`Resolve`]: a bounded channel, no syscall on the packet
//! path), and every [`PUBLISH_EVERY_NS`](crate::board::PUBLISH_EVERY_NS) a copy of the
//! queue's counters for `xfwd stats` (a `try_lock`: the loop never waits).
//!
//! In-dataplane UDP endpoints ([`crate::endpoints`], [`Router::with_endpoints`]): after each
//! batch the frames the pipeline gave `Deliver` go to
//! [`EndpointRx::handle_batch`](dataplane::endpoint::EndpointRx::handle_batch), which answers
//! the echo and STAMP services in place (`Transmit`, `Held` or `Drop`, counted on the
//! endpoint) and queues datagrams for embedders' sockets (`Consumed`); each turn sends what
//! endpoints queued. Without endpoints (or for a socket no endpoint owns any more) `Deliver`
//! goes to the kernel like a punt.
//!
//! The control-plane start-up (the mirror, the tables, one router per queue) is in
//! [`startup`](crate::startup).
#![forbid(unsafe_code)]

use std::time::Instant;

use crossbeam_epoch::Guard;
use dataplane::endpoint::EndpointRx;
use dataplane::{Frame, FramePool, Queue, Tables};

use std::sync::Arc;

use crate::board::{Publisher, SharedCounters};
use crate::cache_report::{CacheBoard, CachedRoute};
use crate::engine::{Engine, LiveConfig};
use crate::runloop::BATCH;

/// Where a queue's neighbour resolution requests go: in `xfwd`,
/// `netlink_mirror::NeighResolver::request` (non-blocking, no syscall).
pub type Resolve = Box<dyn Fn(u32, std::net::IpAddr) -> bool + Send>;

/// The routing engine of one run loop.
pub struct Router {
    queue: Queue,
    tables: Tables,
    resolve: Resolve,
    clock: Instant,
    publisher: Publisher,
    live: Option<(Arc<LiveConfig>, u64)>,
    caches: Option<(Arc<CacheBoard>, u64)>,
    endpoints: Option<EndpointRx>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("queue", &self.queue.config().queue_id)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// An engine driving `queue` over `tables`, handing neighbour resolution requests to
    /// `resolve` and publishing its counters into `shared`.
    pub fn new(queue: Queue, tables: Tables, resolve: Resolve, shared: SharedCounters) -> Self {
        Router {
            queue,
            tables,
            resolve,
            clock: Instant::now(),
            publisher: Publisher::new(shared),
            live: None,
            caches: None,
            endpoints: None,
        }
    }

    /// Hands the batches' `Deliver` frames to these endpoints, and sends what they queue
    /// every turn.
    ///
    /// ```
    /// use dataplane::endpoint::{EndpointConfig, Endpoints};
    /// use dataplane::{Queue, Tables};
    /// use forwarder::router::Router;
    /// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
    ///
    /// let (sockets, mut writer) = SockTable::new(TableConfig::default())?;
    /// let sock_netns = writer.add_netns(NetnsConfig::default())?;
    /// let (tables, _writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
    /// let endpoints = Endpoints::new(writer, tables.clone(), EndpointConfig::default())?;
    /// let queue = Queue::new(dataplane::Config::default())?;
    /// let router = Router::new(queue, tables, Box::new(|_, _| true), Default::default())
    ///     .with_endpoints(endpoints.rx());
    /// # drop(router);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_endpoints(mut self, endpoints: EndpointRx) -> Self {
        self.endpoints = Some(endpoints);
        self
    }

    /// Follows `live`: a configuration published there is applied between two batches
    /// ([`Queue::reconfigure`]: what can change live; the rest needs a restart).
    pub fn follow(mut self, live: Arc<LiveConfig>) -> Self {
        self.live = Some((live, 0));
        self
    }

    /// Answers `xfwd show cache` requests made on `board` (registering there): once per loop
    /// turn, one atomic load when nobody asked.
    pub fn report_cache(mut self, board: Arc<CacheBoard>) -> Self {
        board.register();
        self.caches = Some((board, 0));
        self
    }

    /// Copies the route cache's valid entries into the board when asked since the last turn.
    fn answer_cache_request(&mut self) {
        let now = self.now();
        let Some((board, seen)) = &mut self.caches else {
            return;
        };
        let Some(request) = board.poll(seen) else {
            return;
        };
        let queue = self.queue.config().queue_id;
        let snapshot = self.tables.generation.snapshot();
        let entries: Vec<CachedRoute> = self.queue.route_cache().map_or_else(Vec::new, |cache| {
            cache
                .entries(snapshot, now)
                .map(|(key, route, expires)| CachedRoute::new(queue, key, route, expires, now))
                .collect()
        });
        board.answer(queue, request, entries);
    }

    /// Applies a configuration published since the last turn, if any.
    fn reconfigure(&mut self) {
        let Some((live, seen)) = &mut self.live else {
            return;
        };
        let Some(config) = live.poll(seen) else {
            return;
        };
        let queue_id = self.queue.config().queue_id;
        match self
            .queue
            .reconfigure(&dataplane::Config { queue_id, ..config })
        {
            Ok(changed) => tracing::info!(queue = queue_id, ?changed, "pipeline reconfigured"),
            Err(e) => tracing::warn!(queue = queue_id, "pipeline not reconfigured: {e}"),
        }
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.publisher.flush(self.queue.counters());
    }
}

impl Engine for Router {
    fn process<P: FramePool>(&mut self, frames: &mut [Frame<'_>], guard: &Guard, pool: &mut P) {
        let now = self.now();
        self.queue
            .process_batch(&self.tables, guard, now, frames, pool);
        if let Some(endpoints) = &mut self.endpoints {
            endpoints.handle_batch(
                &mut self.queue,
                &self.tables,
                guard,
                now,
                &mut unix_nanos,
                frames,
            );
        }
    }

    fn turn<P: FramePool>(&mut self, guard: &Guard, pool: &mut P) {
        self.reconfigure();
        self.answer_cache_request();
        let now = self.now();
        self.queue.release_held(&self.tables, guard, now, pool);
        if let Some(endpoints) = &mut self.endpoints {
            endpoints.poll_transmit(&mut self.queue, &self.tables, guard, now, pool, BATCH);
        }
        while let Some(request) = self.queue.poll_resolution() {
            (self.resolve)(request.ifindex, request.addr);
        }
        let queue = &self.queue;
        self.publisher.tick(now, || queue.counters());
    }
}

/// The wall clock in Unix nanoseconds (the reflector's timestamps; a vDSO read, no system
/// call).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::PipelineSnapshot;
    use dataplane::{DropReason, HeapPool, Verdict};
    use fib_trie::{InsertFlags, NextHop, Route};
    use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    fn tables() -> Tables {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let sock_netns = writer.add_netns(NetnsConfig::default()).unwrap();
        let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
        for (ifindex, mac) in [(1, [2, 0, 0, 0, 0, 1]), (2, [2, 0, 0, 0, 0, 2])] {
            let mut link = Link {
                mac: Some(mac),
                ..Link::new(ifindex, format!("eth{ifindex}"))
            };
            (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
            writers.links.upsert(link);
        }
        let gw = std::net::Ipv4Addr::new(192, 0, 2, 1);
        writers
            .fib4
            .insert(
                &Route::unicast(0, 0, 254, vec![NextHop::new(Some(gw.into()), 2)]),
                InsertFlags::ADD,
            )
            .unwrap();
        writers.neigh.upsert(Neighbour::new(
            2,
            gw.into(),
            Some([2, 0, 0, 0, 0, 9]),
            NudState::REACHABLE,
        ));
        writers
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

    /// A UMEM-like chunk: the packet at the kernel's 256-byte headroom offset.
    fn chunk(packet: &[u8]) -> Vec<u8> {
        let mut chunk = vec![0u8; 2048];
        chunk[256..256 + packet.len()].copy_from_slice(packet);
        chunk
    }

    #[test]
    fn frames_go_through_the_pipeline_as_they_are_and_are_counted_once() {
        let shared = SharedCounters::default();
        let queue = Queue::new(dataplane::Config::default()).unwrap();
        let mut router = Router::new(queue, tables(), Box::new(|_, _| true), shared.clone());
        let packet = udp(64);
        let (mut a, mut b) = (chunk(&packet), chunk(&packet[..20]));
        let mut frames = [
            Frame::new(&mut a, 256, packet.len(), 1),
            Frame::new(&mut b, 256, 20, 1),
        ];
        let mut pool = HeapPool::new(2048, 4);
        router.process(&mut frames, &crossbeam_epoch::pin(), &mut pool);
        assert_eq!(frames[0].verdict, Verdict::Transmit { ifindex: 2 });
        assert_eq!(
            frames[1].verdict,
            Verdict::Drop(DropReason::Truncated),
            "a runt is dropped by reason"
        );
        assert_eq!((frames[0].offset, frames[0].len), (256, packet.len()));
        let out = frames[0].bytes();
        assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&out[6..12], &[2, 0, 0, 0, 0, 2]);
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&out[14..]).unwrap();
        assert_eq!(ip.ttl(), 63);
        assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());

        // TTL 1: an ICMP time exceeded goes back out of the ingress interface, built in place
        // in front of its quote (into the headroom).
        let mut c = chunk(&udp(1));
        let mut frames = [Frame::new(&mut c, 256, packet.len(), 1)];
        router.process(&mut frames, &crossbeam_epoch::pin(), &mut pool);
        assert_eq!(frames[0].verdict, Verdict::Reply { ifindex: 1 });
        let reply = frames[0].bytes();
        assert_eq!(&reply[..6], &[2, 0, 0, 0, 0, 7], "back to the sender's MAC");
        assert_eq!(reply[14 + 9], 1, "ICMP");
        assert_eq!(reply[14 + 20], 11, "time exceeded");
        assert!(pool.sent.is_empty(), "in place, no spare frame");

        drop(router);
        let counters = shared.lock().unwrap().clone();
        assert_eq!(
            (
                counters.rx,
                counters.transmit,
                counters.reply,
                counters.dropped
            ),
            (3, 1, 1, 1),
            "each frame once"
        );
        let snap = PipelineSnapshot::new(0, &counters);
        assert!(snap.drops.contains(&("truncated".to_owned(), 1)));
        assert!(snap.icmp_sent.contains(&("time_exceeded".to_owned(), 1)));
    }
}
