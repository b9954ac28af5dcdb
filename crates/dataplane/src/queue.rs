//! One run loop's state and the batch entry points.

use std::net::{Ipv4Addr, SocketAddr};

use crossbeam_epoch::Guard;
use dst_cache::{DstCache, Lookup, Snapshot};
use policy_tree::{Action, Check, Direction};

use crate::config::{Config, ConfigError};
use crate::counters::Counters;
use crate::hold::{HoldBuffer, Resolution};
use crate::icmp;
use crate::memo::{EgressMemo, IngressMemo, LocalFilter};
use crate::parse::{self, L2_LEN, Meta};
use crate::pool::FramePool;
use crate::ratelimit::TokenBucket;
use crate::route::{self, Hop, Route, flow_hash, ip_of};
use crate::vector::{Lane, VECTOR};
use crate::verdict::{DropReason, IcmpError, PuntReason, Verdict};
use crate::wire::Family;
use crate::wire::ethernet::{self, EthernetFrame};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::l4::{UDP_HEADER_LEN, UdpPacket, protocol};
use crate::{Tables, frag};

/// One received frame of a batch: a mutable UMEM chunk (or any buffer), where the packet lies
/// in it, the interface it came in on, and the verdict the pipeline gives it.
///
/// The chunk is the whole buffer the packet may use: bytes before `offset` are headroom,
/// bytes after `offset + len` tailroom. Passing only the packet's bytes (`offset` 0) works too;
/// ICMP errors that find no room in place then go out in a spare frame.
///
/// ```
/// use dataplane::{Frame, Verdict};
/// let mut chunk = [0u8; 2048];
/// let frame = Frame::new(&mut chunk, 256, 64, 3);
/// assert_eq!((frame.offset, frame.len, frame.verdict), (256, 64, Verdict::Pending));
/// ```
#[derive(Debug)]
pub struct Frame<'a> {
    /// The chunk holding the packet.
    pub chunk: &'a mut [u8],
    /// Where the packet starts in the chunk (its Ethernet header). Updated for `Transmit` and
    /// `Reply`.
    pub offset: usize,
    /// The packet's length. Updated for `Transmit` and `Reply`.
    pub len: usize,
    /// The ingress interface index.
    pub ifindex: u32,
    /// What to do with it: set by [`Queue::process_batch`].
    pub verdict: Verdict,
}

impl<'a> Frame<'a> {
    /// A frame of `len` bytes at `offset` of `chunk`, received on `ifindex`.
    pub fn new(chunk: &'a mut [u8], offset: usize, len: usize, ifindex: u32) -> Self {
        Frame {
            chunk,
            offset,
            len,
            ifindex,
            verdict: Verdict::Pending,
        }
    }

    /// The packet's bytes (empty if `offset` and `len` lie outside the chunk).
    pub fn bytes(&self) -> &[u8] {
        self.offset
            .checked_add(self.len)
            .and_then(|end| self.chunk.get(self.offset..end))
            .unwrap_or(&[])
    }
}

/// What stays the same for one batch.
pub(crate) struct Batch<'t> {
    pub(crate) tables: &'t Tables,
    pub(crate) guard: &'t Guard,
    pub(crate) now: u64,
    pub(crate) snapshot: Snapshot,
    /// Whether forwarded packets meet the fwd policies (`policy_count[XFRM_POLICY_FWD]`, or a
    /// default block), read once per batch.
    pub(crate) fwd_policies: bool,
    /// The same for the out policies (`xfrm_route_forward`).
    pub(crate) out_policies: bool,
    /// The last ingress interface looked up: its index and MAC (`None` inside: not Ethernet;
    /// `None` outside: not in the link table).
    ingress: Option<(u32, Option<Option<[u8; 6]>>)>,
}

impl<'t> Batch<'t> {
    fn new(tables: &'t Tables, guard: &'t Guard, now: u64) -> Self {
        Batch {
            tables,
            guard,
            now,
            snapshot: tables.generation.snapshot(),
            fwd_policies: tables.policies.needs_check(Direction::Fwd),
            out_policies: tables.policies.needs_check(Direction::Out),
            ingress: None,
        }
    }

    pub(crate) fn ingress_mac(&mut self, ifindex: u32) -> Option<Option<[u8; 6]>> {
        match self.ingress {
            Some((i, mac)) if i == ifindex => mac,
            _ => {
                let mac = self.tables.links.get(ifindex, self.guard).map(|l| l.mac);
                self.ingress = Some((ifindex, mac));
                mac
            }
        }
    }
}

/// The state of one run loop (one NIC queue): its route cache, counters, ICMP token bucket and
/// hold buffer. Owned by that loop alone (`&mut self`: no atomics, no locks).
///
/// See the [crate documentation](crate) for a complete example.
pub struct Queue {
    pub(crate) config: Config,
    pub(crate) cache: Option<DstCache<Route>>,
    pub(crate) counters: Counters,
    pub(crate) icmp: TokenBucket,
    pub(crate) hold: HoldBuffer,
    ident: u16,
    /// Which addresses may be local, per route generation.
    pub(crate) locals: LocalFilter,
    /// Egress link and neighbour answers, per next hop and route generation.
    pub(crate) egress: EgressMemo,
    /// Ingress switches per device and reverse-path answers per source, per generation.
    pub(crate) ingress: IngressMemo,
    /// The vector pipeline's per-frame state, allocated once.
    lanes: Box<[Lane]>,
}

impl Queue {
    /// A queue with this configuration; every buffer it will use (route cache, hold buffer,
    /// resolution queue) is allocated here, none later.
    ///
    /// # Errors
    /// [`ConfigError`] for a configuration out of range.
    pub fn new(config: Config) -> Result<Queue, ConfigError> {
        config.validate()?;
        let cache = config.dst_cache.map(DstCache::new).transpose()?;
        Ok(Queue {
            cache,
            counters: Counters::default(),
            icmp: TokenBucket::new(config.icmp_rate, config.icmp_burst),
            hold: HoldBuffer::new(&config),
            ident: (config.queue_id as u16).wrapping_mul(0x9e37),
            locals: LocalFilter::new(),
            egress: EgressMemo::new(),
            ingress: IngressMemo::new(),
            lanes: vec![Lane::default(); VECTOR].into_boxed_slice(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters, with the route cache's.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        if let Some(cache) = &self.cache {
            c.dst_cache = *cache.counters();
        }
        c
    }

    /// The queue's route cache, when it has one (`dst_cache` in the [`Config`]): for
    /// reports (`xfwd show cache` lists its valid entries through
    /// [`DstCache::entries`](dst_cache::DstCache::entries)).
    ///
    /// ```
    /// let queue = dataplane::Queue::new(dataplane::Config::default()).unwrap();
    /// assert_eq!(queue.route_cache().map(|c| c.occupied()), Some(0));
    /// ```
    pub fn route_cache(&self) -> Option<&DstCache<Route>> {
        self.cache.as_ref()
    }

    /// The number of frames in the hold buffer.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Takes the next neighbour resolution request, if any: forward it to the control plane.
    #[must_use]
    pub fn poll_resolution(&mut self) -> Option<Resolution> {
        self.hold.poll_resolution()
    }

    /// Processes a batch: sets each frame's `verdict` (and `offset`/`len` for `Transmit` and
    /// `Reply`), rewriting forwarded frames in place. Extra frames (fragments, ICMP errors
    /// without room in place) come from and go out through `pool`. `guard` is the batch's one
    /// epoch pin; `now` is a monotonic clock in nanoseconds.
    ///
    /// The batch goes through the vector pipeline, in vectors of up to 64 frames: each stage
    /// (parse and validate, own-source check, route-cache probes, local destinations, FIB
    /// lookups for the misses, egress and neighbour, cache fills, fwd policy where policies
    /// exist, checks and side effects in frame order, rewrite) runs over the whole vector before
    /// the next, so that the memory accesses of different frames overlap. Verdicts, bytes and
    /// counters are those of [`process_batch_reference`](Self::process_batch_reference), frame
    /// by frame.
    ///
    /// No allocation, lock or system call; frames are never copied except into the hold
    /// buffer or a spare frame.
    pub fn process_batch<P: FramePool>(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        frames: &mut [Frame<'_>],
        pool: &mut P,
    ) {
        let mut batch = Batch::new(tables, guard, now);
        self.locals
            .refresh(tables, guard, batch.snapshot.generation);
        self.ingress.refresh(tables, batch.snapshot);
        let mut lanes = std::mem::take(&mut self.lanes);
        for vector in frames.chunks_mut(VECTOR) {
            self.process_vector(&mut batch, vector, &mut lanes[..vector.len()], pool);
        }
        self.lanes = lanes;
    }

    /// The reference the vector pipeline is tested against: the same decisions taken one
    /// frame at a time from parse to rewrite, with the own-source check asking the address
    /// table for every IPv4 frame. Not for run loops (slower); kept for differential tests and
    /// benchmarks.
    ///
    /// ```
    /// use dataplane::{Config, Frame, HeapPool, Queue, Tables, Verdict};
    /// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
    ///
    /// let (sockets, mut writer) = SockTable::new(TableConfig::default())?;
    /// let sock_netns = writer.add_netns(NetnsConfig::default())?;
    /// let (tables, _writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
    /// let mut queue = Queue::new(Config::default())?;
    /// let mut chunk = [0u8; 10];
    /// let mut frames = [Frame::new(&mut chunk, 0, 10, 1)];
    /// let guard = crossbeam_epoch::pin();
    /// queue.process_batch_reference(&tables, &guard, 0, &mut frames, &mut HeapPool::new(2048, 1));
    /// assert_eq!(frames[0].verdict, Verdict::Drop(dataplane::DropReason::Truncated));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn process_batch_reference<P: FramePool>(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        frames: &mut [Frame<'_>],
        pool: &mut P,
    ) {
        let mut batch = Batch::new(tables, guard, now);
        for frame in frames.iter_mut() {
            let verdict = self.process_frame(&mut batch, frame, pool);
            frame.verdict = verdict;
            self.counters.count(verdict);
        }
    }

    /// Sends held frames whose neighbour has become usable (through `pool`), drops those that
    /// waited longer than the hold timeout, and repeats due resolution requests. Returns the
    /// number of frames sent. Cheap when nothing changed (the neighbour and link tables'
    /// generations and one deadline are compared): call it once per run-loop iteration.
    pub fn release_held<P: FramePool>(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        pool: &mut P,
    ) -> usize {
        self.hold
            .release(tables, guard, now, pool, &mut self.counters)
    }

    fn process_frame<P: FramePool>(
        &mut self,
        b: &mut Batch<'_>,
        frame: &mut Frame<'_>,
        pool: &mut P,
    ) -> Verdict {
        let meta = match self.admit(b, frame) {
            Ok(meta) => meta,
            Err(verdict) => return verdict,
        };
        // fib_validate_source: one of our own addresses as the source is a martian, unless
        // the ingress device accepts local sources (then the kernel decides).
        if meta.family == Family::V4
            && b.tables
                .addrs
                .dev_find(Ipv4Addr::from(meta.src4()), None, b.guard)
                .is_some()
        {
            return route::own_source(b.tables, b.guard, frame.ifindex);
        }
        let route = self.route(b, &meta, frame.bytes(), frame.ifindex);
        self.dispatch(b, frame, &meta, route, pool)
    }

    /// Parse and validate, then the link-layer checks against the ingress interface: the
    /// frame's metadata, or the verdict of a frame that goes no further.
    pub(crate) fn admit(&self, b: &mut Batch<'_>, frame: &Frame<'_>) -> Result<Meta, Verdict> {
        let mut meta = Meta::default();
        self.admit_into(b, frame, &mut meta)?;
        Ok(meta)
    }

    /// [`admit`](Self::admit) into the caller's `meta` (the vector pipeline's parse stage calls
    /// it out of line, for the frames its shortcut leaves).
    #[inline(always)]
    pub(crate) fn admit_into(
        &self,
        b: &mut Batch<'_>,
        frame: &Frame<'_>,
        meta: &mut Meta,
    ) -> Result<(), Verdict> {
        let Some(end) = frame
            .offset
            .checked_add(frame.len)
            .filter(|&end| end <= frame.chunk.len())
        else {
            return Err(Verdict::Drop(DropReason::Truncated));
        };
        let bytes = &frame.chunk[frame.offset..end];
        parse::parse_into(bytes, &self.config, meta)?;
        // The parser saw the Ethernet header: never `None`.
        let Some(&dst_mac) = bytes.first_chunk::<{ ethernet::ADDR_LEN }>() else {
            return Err(Verdict::Drop(DropReason::Truncated));
        };
        if dst_mac[0] & 1 != 0 {
            return Err(Verdict::Punt(PuntReason::LinkMulticast));
        }
        match b.ingress_mac(frame.ifindex) {
            None => Err(Verdict::Drop(DropReason::UnknownIngress)),
            Some(Some(mac)) if mac != dst_mac => Err(Verdict::Drop(DropReason::OtherHost)),
            Some(_) => Ok(()),
        }
    }

    /// The verdict of a route, one frame at a time: forwarding (policy, checks, rewrite), local
    /// delivery, punts, drops and the ICMP errors of reject routes.
    pub(crate) fn dispatch<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &mut Frame<'_>,
        meta: &Meta,
        route: Route,
        pool: &mut P,
    ) -> Verdict {
        if b.snapshot.behind && route.may_be_stale() {
            return Verdict::Punt(PuntReason::MirrorBehind);
        }
        let kind = match route {
            Route::Forward(hop) => return self.forward(b, frame, meta, hop, pool),
            Route::Local => return self.local(b, frame, meta),
            Route::Punt(reason) => return Verdict::Punt(reason),
            Route::Drop(reason) => return Verdict::Drop(reason),
            Route::Reject(reject) => match reject.error(meta.family) {
                Some(kind) => kind,
                None => return Verdict::Drop(DropReason::Blackhole),
            },
        };
        self.icmp_error(b, frame, meta, kind, 0, pool)
    }

    /// The route cache, then (on a miss or while bypassed) the tables.
    /// `packet` is the frame's packet (for a multipath route's hash).
    pub(crate) fn route(&mut self, b: &Batch<'_>, meta: &Meta, packet: &[u8], iif: u32) -> Route {
        let tos = meta.tos & route::DSCP_MASK;
        let resolve = || {
            let keys = |fields| route::hash_keys(meta, packet, fields);
            route::resolve(
                b.tables,
                b.guard,
                meta.family,
                meta.src,
                meta.dst,
                tos,
                iif,
                keys,
            )
        };
        let Some(cache) = &mut self.cache else {
            return resolve();
        };
        let key = route::flow_key(meta, iif);
        match cache.lookup(&key, b.snapshot, b.now) {
            Lookup::Hit(route) => route,
            Lookup::Miss(token) => {
                let route = resolve();
                cache.insert(token, route, b.now, u64::MAX);
                route
            }
            Lookup::Bypass => resolve(),
        }
    }

    /// A local destination: a registered UDP endpoint, else the kernel.
    fn local(&mut self, b: &Batch<'_>, frame: &Frame<'_>, meta: &Meta) -> Verdict {
        if meta.proto != protocol::UDP || meta.fragment() {
            return Verdict::Punt(PuntReason::Local);
        }
        let ip_start = frame.offset + meta.l3();
        let l4 = frame.offset + meta.l4();
        let Some(bytes) = frame.chunk.get(l4..ip_start + meta.ip_len()) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let Ok(udp) = UdpPacket::new_checked(bytes) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let (sport, dport) = (udp.src_port(), udp.dst_port());
        let lookup = udp_socktab::Lookup {
            netns: b.tables.sock_netns,
            src: SocketAddr::new(ip_of(meta.family, meta.src), sport),
            dst: SocketAddr::new(ip_of(meta.family, meta.dst), dport),
            ifindex: frame.ifindex,
            hash: flow_hash(
                meta.src,
                meta.dst,
                (u32::from(sport) << 16) | u32::from(dport),
            ),
            cpu: self.config.queue_id,
        };
        let payload = u16::try_from(meta.l4() + UDP_HEADER_LEN);
        match (b.tables.sockets.lookup(&lookup, b.guard), payload) {
            (Some(sock), Ok(payload)) => Verdict::Deliver {
                socket: sock.id(),
                payload,
            },
            _ => Verdict::Punt(PuntReason::Local),
        }
    }

    /// Forwarding: policy (fwd), TTL, scope, MTU, then the rewrite; the neighbour decides
    /// between transmitting, fragmenting and holding.
    fn forward<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &mut Frame<'_>,
        meta: &Meta,
        hop: Hop,
        pool: &mut P,
    ) -> Verdict {
        // As the kernel (`policy_count[dir]`): no fwd policy, no lookup. The flow's interface is
        // the egress one (`flowi_oif` of the forward decode).
        if b.fwd_policies {
            if let Some(verdict) = self.policy(b, meta, frame.bytes(), hop.oif, Direction::Fwd) {
                return verdict;
            }
        }
        match self.forward_checks(b, frame, meta, &hop, pool) {
            Ok(too_big) => {
                rewrite(frame, meta, &hop);
                self.after_rewrite(b, frame, meta, &hop, too_big, pool)
            }
            Err(verdict) => verdict,
        }
    }

    /// The checks of a forwarded packet after the policy: TTL, scope, MTU. `Ok(too_big)` when
    /// it goes on to the rewrite; else the verdict (an ICMP error, sent or counted).
    pub(crate) fn forward_checks<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &mut Frame<'_>,
        meta: &Meta,
        hop: &Hop,
        pool: &mut P,
    ) -> Result<bool, Verdict> {
        if meta.ttl <= 1 {
            let kind = match meta.family {
                Family::V6 => IcmpError::V6TimeExceeded,
                Family::V4 => IcmpError::TimeExceeded,
            };
            return Err(self.icmp_error(b, frame, meta, kind, 0, pool));
        }
        // `xfrm_route_forward`: a forwarded packet also meets the out policies.
        if b.out_policies {
            if let Some(verdict) = self.policy(b, meta, frame.bytes(), hop.oif, Direction::Out) {
                return Err(verdict);
            }
        }
        if meta.src_is_v6_link_local() {
            return Err(self.icmp_error(b, frame, meta, IcmpError::V6BeyondScope, 0, pool));
        }
        let too_big = meta.ip_len > hop.mtu;
        if too_big && (meta.family.is_v6() || meta.dont_frag()) {
            let kind = match meta.family {
                Family::V6 => IcmpError::V6PacketTooBig,
                Family::V4 => IcmpError::FragNeeded,
            };
            return Err(self.icmp_error(b, frame, meta, kind, hop.mtu, pool));
        }
        Ok(too_big)
    }

    /// After the rewrite: transmit, or hold the frame for its neighbour, or fragment it.
    pub(crate) fn after_rewrite<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &Frame<'_>,
        meta: &Meta,
        hop: &Hop,
        too_big: bool,
        pool: &mut P,
    ) -> Verdict {
        let bytes = frame.bytes();
        match hop.dst_mac() {
            None => match self.hold.hold(
                bytes,
                hop,
                meta.family,
                b.now,
                &mut self.counters,
                b.tables,
                b.guard,
            ) {
                Ok(()) => Verdict::Held,
                Err(reason) => Verdict::Drop(reason),
            },
            Some(_) if too_big => {
                match frag::fragment_v4(bytes, meta.ip_len(), hop.mtu, hop.oif, pool) {
                    Ok(n) => {
                        self.counters.fragmented += 1;
                        self.counters.fragments_out += n as u64;
                        Verdict::Consumed
                    }
                    Err(reason) => Verdict::Drop(reason),
                }
            }
            Some(_) => Verdict::Transmit { ifindex: hop.oif },
        }
    }

    /// The verdict of the kernel's policy check in `dir` on a forwarded packet leaving on
    /// `oif`, if it stops it (blocked, or left to the kernel).
    pub(crate) fn policy(
        &self,
        b: &Batch<'_>,
        meta: &Meta,
        packet: &[u8],
        oif: u32,
        dir: Direction,
    ) -> Option<Verdict> {
        let flow = match meta.family {
            Family::V6 => policy_tree::Flow::v6(meta.src.into(), meta.dst.into()),
            Family::V4 => policy_tree::Flow::v4(meta.src4().into(), meta.dst4().into()),
        }
        .proto(meta.proto)
        .ifindex(oif)
        .mark(self.config.policy_mark);
        let flow = match meta.ports(packet) {
            Some((sport, dport)) => flow.ports(sport, dport),
            None => flow,
        };
        match b.tables.policies.check(&flow, dir, b.guard) {
            Check::Pass => None,
            Check::Drop(p) if matches!(p.action, Action::Ipsec(_)) => {
                Some(Verdict::Drop(DropReason::PolicyTemplate))
            }
            Check::Drop(_) | Check::DefaultBlock => Some(Verdict::Drop(DropReason::PolicyBlock)),
            Check::Kernel(p) if matches!(p.action, Action::Ipsec(_) | Action::IpsecOptional(_)) => {
                Some(Verdict::Punt(PuntReason::Ipsec))
            }
            Check::Kernel(_) => Some(Verdict::Punt(PuntReason::PolicyKernel)),
        }
    }

    /// The destination's limit ([`Tables::icmp_peers`](crate::Tables::icmp_peers)) for an
    /// error to the frame's source: `None` when IPv6 has no route back to it (the kernel
    /// sends nothing then), whose prefix length scales the interval.
    fn peer_allows(&self, b: &Batch<'_>, meta: &Meta, kind: IcmpError) -> Option<bool> {
        let (icmp_type, code) = kind.type_code();
        let peers = &b.tables.icmp_peers;
        if meta.family == Family::V4 {
            return Some(peers.allow_v4(meta.src4(), icmp_type, code, b.now));
        }
        // A link-local source is reached through the ingress device's fe80::/64, which the
        // kernel has on every IPv6 device (the mirror may not hold it).
        let plen = if meta.src_is_v6_link_local() {
            ipv6::LINK_LOCAL_ROUTE_PLEN
        } else {
            b.tables
                .fib6
                .lookup(&fib_trie::Flow::to(meta.src), b.guard)
                .ok()?
                .plen
        };
        Some(peers.allow_v6(meta.src, icmp_type, plen, b.now))
    }

    /// Turns the frame into an ICMP error back to its sender (in place, or in a spare frame),
    /// if the quoting rules, the rate limit and the source address allow; else a drop under
    /// the error's reason.
    pub(crate) fn icmp_error<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &mut Frame<'_>,
        meta: &Meta,
        kind: IcmpError,
        mtu: u32,
        pool: &mut P,
    ) -> Verdict {
        let dropped = Verdict::Drop(kind.drop_reason());
        if !icmp::may_send(meta, frame.bytes()) {
            self.counters.icmp_not_allowed += 1;
            return dropped;
        }
        // As the kernel since 6.11: the global credit must be there, then the destination's
        // limit decides, and only a message both allow takes the global credit.
        if kind.is_rate_limited() {
            if !self.icmp.has_token(b.now) {
                self.counters.icmp_rate_limited += 1;
                return dropped;
            }
            match self.peer_allows(b, meta, kind) {
                Some(true) => {}
                Some(false) => {
                    self.counters.icmp_rate_limited += 1;
                    return dropped;
                }
                None => {
                    self.counters.icmp_not_allowed += 1;
                    return dropped;
                }
            }
            let _ = self.icmp.allow(b.now);
        }
        let src = match meta.family {
            Family::V6 => b
                .tables
                .addrs
                .select_src_v6(frame.ifindex, meta.src.into(), b.guard)
                .map(u128::from),
            Family::V4 => b
                .tables
                .addrs
                .select_src_v4(
                    frame.ifindex,
                    Some(meta.src4().into()),
                    addr_table::Scope::UNIVERSE,
                    b.guard,
                )
                .map(|a| u128::from(u32::from(a))),
        };
        let Some(src) = src else {
            self.counters.icmp_no_source += 1;
            return dropped;
        };
        self.ident = self.ident.wrapping_add(1);
        let quote = icmp::quote_len(meta);
        let error = icmp::error_headers(meta, frame.bytes(), src, self.ident, kind, mtu, quote);
        let (headers, total) = (error.headers_len(), error.frame_len());
        let ip_start = frame.offset + meta.l3();
        if let Some(start) = icmp::room_in_place(frame.chunk, ip_start, quote, headers) {
            error.emit(&mut frame.chunk[start..start + total]);
            frame.offset = start;
            frame.len = total;
            self.counters.icmp_sent[kind as usize] += 1;
            return Verdict::Reply {
                ifindex: frame.ifindex,
            };
        }
        let Some(handle) = pool.alloc() else {
            return Verdict::Drop(DropReason::PoolEmpty);
        };
        let chunk = pool.chunk(handle);
        if chunk.len() < total {
            pool.free(handle);
            return Verdict::Drop(DropReason::PoolEmpty);
        }
        error.emit_quoting(
            &mut chunk[..total],
            &frame.chunk[ip_start..ip_start + quote],
        );
        pool.send(handle, 0, total, frame.ifindex);
        self.counters.icmp_sent[kind as usize] += 1;
        Verdict::Consumed
    }
}

/// Rewrites a forwarded frame in place: an untagged Ethernet header right before the IP header
/// (a tag, if any, falls away) with the hop's MACs, TTL / hop limit minus one; `offset` and
/// `len` then describe the frame to send.
#[inline(always)]
pub(crate) fn rewrite(frame: &mut Frame<'_>, meta: &Meta, hop: &Hop) {
    let ip_start = frame.offset + meta.l3();
    let l2_start = ip_start - L2_LEN;
    // The addresses as the hop prepared them (a neighbour not yet known gives zeros until
    // the hold buffer sends the frame).
    let addrs = hop.eth_addrs();
    let chunk = &mut frame.chunk[l2_start..];
    match meta.family {
        Family::V6 => {
            rewrite_head::<{ L2_LEN + ipv6::HEADER_LEN }>(chunk, addrs, Family::V6, |ip| {
                Ipv6Packet::new_unchecked(ip).decrement_hop_limit()
            })
        }
        Family::V4 => {
            rewrite_head::<{ L2_LEN + ipv4::HEADER_LEN }>(chunk, addrs, Family::V4, |ip| {
                Ipv4Packet::new_unchecked(ip).decrement_ttl()
            })
        }
    }
    frame.offset = l2_start;
    frame.len = L2_LEN + meta.ip_len();
}

/// [`rewrite`] kept out of line, for the paths that rewrite a frame they then hold or
/// fragment: the loop of the decide stage, which only sometimes takes them, keeps its
/// registers for the common case.
#[inline(never)]
pub(crate) fn rewrite_out_of_line(frame: &mut Frame<'_>, meta: &Meta, hop: &Hop) {
    rewrite(frame, meta, hop);
}

/// The rewrite of one family's headers at the start of `chunk`: the new Ethernet header and
/// the fixed IP header as one `N`-byte view (the writes need no bounds check of their own):
/// the hop's prepared destination and source addresses (`addrs`, twelve bytes: two stores),
/// the family's EtherType, then `hop` (the TTL / hop-limit decrement, through the family's
/// view) on the IP part.
#[inline(always)]
fn rewrite_head<const N: usize>(
    chunk: &mut [u8],
    addrs: &[u8; 2 * ethernet::ADDR_LEN],
    family: Family,
    hop: impl FnOnce(&mut [u8]),
) {
    if let Some(head) = chunk.first_chunk_mut::<N>() {
        let (eth, ip) = head.split_at_mut(L2_LEN);
        let (macs, _) = eth.split_at_mut(2 * ethernet::ADDR_LEN);
        macs.copy_from_slice(addrs);
        EthernetFrame::new_unchecked(eth).set_ethertype(family.ethertype());
        hop(ip);
    }
}
