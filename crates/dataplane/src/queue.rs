//! One run loop's state and the batch entry points.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crossbeam_epoch::Guard;
use dst_cache::{DstCache, FlowKey, Lookup, Snapshot};
use policy_tree::{Action, Check, Direction};

use crate::config::{Config, ConfigError};
use crate::counters::Counters;
use crate::hold::{HoldBuffer, Resolution};
use crate::icmp::{self, ErrorIp, ReplyL2};
use crate::parse::{self, L2_LEN, Meta};
use crate::pool::FramePool;
use crate::ratelimit::TokenBucket;
use crate::route::{self, Hop, Reject, Route, flow_hash, ip_of};
use crate::verdict::{DropReason, IcmpError, PuntReason, Verdict};
use crate::wire::ethernet::{EthernetFrame, ethertype};
use crate::wire::ipv4::Ipv4Packet;
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
struct Batch<'t> {
    tables: &'t Tables,
    guard: &'t Guard,
    now: u64,
    snapshot: Snapshot,
    /// The last ingress interface looked up: its index and MAC (`None` inside: not Ethernet;
    /// `None` outside: not in the link table).
    ingress: Option<(u32, Option<Option<[u8; 6]>>)>,
}

impl Batch<'_> {
    fn ingress_mac(&mut self, ifindex: u32) -> Option<Option<[u8; 6]>> {
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
    config: Config,
    cache: Option<DstCache<Route>>,
    counters: Counters,
    icmp: TokenBucket,
    hold: HoldBuffer,
    ident: u16,
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
        let mut batch = Batch {
            tables,
            guard,
            now,
            snapshot: tables.generation.snapshot(),
            ingress: None,
        };
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
        let Some(end) = frame
            .offset
            .checked_add(frame.len)
            .filter(|&end| end <= frame.chunk.len())
        else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let meta = match parse::parse(&frame.chunk[frame.offset..end], &self.config) {
            Ok(meta) => meta,
            Err(verdict) => return verdict,
        };
        if meta.dst_mac[0] & 1 != 0 {
            return Verdict::Punt(PuntReason::LinkMulticast);
        }
        match b.ingress_mac(frame.ifindex) {
            None => return Verdict::Drop(DropReason::UnknownIngress),
            Some(Some(mac)) if mac != meta.dst_mac => {
                return Verdict::Drop(DropReason::OtherHost);
            }
            Some(_) => {}
        }
        // fib_validate_source: one of our own addresses as the source is a martian.
        if !meta.v6
            && b.tables
                .addrs
                .dev_find(Ipv4Addr::from(meta.src as u32), None, b.guard)
                .is_some()
        {
            return Verdict::Drop(DropReason::MartianSource);
        }
        let v6 = meta.v6;
        match self.route(b, &meta, frame.ifindex) {
            Route::Forward(hop) => self.forward(b, frame, &meta, hop, pool),
            Route::Local => self.local(b, frame, &meta),
            Route::Punt(reason) => Verdict::Punt(reason),
            Route::Drop(reason) => Verdict::Drop(reason),
            Route::Reject(Reject::Blackhole) => Verdict::Drop(DropReason::Blackhole),
            Route::Reject(Reject::NoRoute) => {
                let kind = if v6 {
                    IcmpError::V6NoRoute
                } else {
                    IcmpError::NetUnreachable
                };
                self.icmp_error(b, frame, &meta, kind, 0, pool)
            }
            Route::Reject(Reject::Unreachable) => {
                let kind = if v6 {
                    IcmpError::V6NoRoute
                } else {
                    IcmpError::HostUnreachable
                };
                self.icmp_error(b, frame, &meta, kind, 0, pool)
            }
            Route::Reject(Reject::Prohibit) => {
                let kind = if v6 {
                    IcmpError::V6AdminProhibited
                } else {
                    IcmpError::AdminProhibited
                };
                self.icmp_error(b, frame, &meta, kind, 0, pool)
            }
        }
    }

    /// The route cache, then (on a miss or while bypassed) the tables.
    fn route(&mut self, b: &Batch<'_>, meta: &Meta, iif: u32) -> Route {
        let tos = meta.tos & 0xfc;
        let resolve = || route::resolve(b.tables, b.guard, meta.v6, meta.src, meta.dst, tos, iif);
        let Some(cache) = &mut self.cache else {
            return resolve();
        };
        let key = if meta.v6 {
            FlowKey::v6(Ipv6Addr::from(meta.dst), tos, iif)
        } else {
            FlowKey::v4(Ipv4Addr::from(meta.dst as u32), tos, iif)
        };
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
        if meta.proto != protocol::UDP || meta.fragment {
            return Verdict::Punt(PuntReason::Local);
        }
        let ip_start = frame.offset + meta.l2_len;
        let l4 = ip_start + meta.l4_offset;
        let Some(bytes) = frame.chunk.get(l4..ip_start + meta.ip_len) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let Ok(udp) = UdpPacket::new_checked(bytes) else {
            return Verdict::Drop(DropReason::Truncated);
        };
        let (sport, dport) = (udp.src_port(), udp.dst_port());
        let lookup = udp_socktab::Lookup {
            netns: b.tables.sock_netns,
            src: SocketAddr::new(ip_of(meta.v6, meta.src), sport),
            dst: SocketAddr::new(ip_of(meta.v6, meta.dst), dport),
            ifindex: frame.ifindex,
            hash: flow_hash(
                meta.src,
                meta.dst,
                (u32::from(sport) << 16) | u32::from(dport),
            ),
            cpu: self.config.queue_id,
        };
        let payload = u16::try_from(meta.l2_len + meta.l4_offset + UDP_HEADER_LEN);
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
        if b.tables.policies.needs_check(Direction::Fwd) {
            if let Some(verdict) = self.policy(b, meta, hop.oif, Direction::Fwd) {
                return verdict;
            }
        }
        if meta.ttl <= 1 {
            let kind = if meta.v6 {
                IcmpError::V6TimeExceeded
            } else {
                IcmpError::TimeExceeded
            };
            return self.icmp_error(b, frame, meta, kind, 0, pool);
        }
        // `xfrm_route_forward`: a forwarded packet also meets the out policies.
        if b.tables.policies.needs_check(Direction::Out) {
            if let Some(verdict) = self.policy(b, meta, hop.oif, Direction::Out) {
                return verdict;
            }
        }
        if meta.v6 && meta.src >> 118 == 0x3fa {
            return self.icmp_error(b, frame, meta, IcmpError::V6BeyondScope, 0, pool);
        }
        let too_big = meta.ip_len > hop.mtu as usize;
        if too_big && (meta.v6 || meta.dont_frag) {
            let kind = if meta.v6 {
                IcmpError::V6PacketTooBig
            } else {
                IcmpError::FragNeeded
            };
            return self.icmp_error(b, frame, meta, kind, hop.mtu, pool);
        }

        // Rewrite in place: an untagged Ethernet header right before the IP header (a tag, if
        // any, falls away), TTL / hop limit minus one.
        let ip_start = frame.offset + meta.l2_len;
        let l2_start = ip_start - L2_LEN;
        if meta.v6 {
            frame.chunk[ip_start + 7] -= 1;
        } else {
            Ipv4Packet::new_unchecked(&mut frame.chunk[ip_start..ip_start + 20]).decrement_ttl();
        }
        {
            let mut eth = EthernetFrame::new_unchecked(&mut frame.chunk[l2_start..ip_start]);
            eth.set_dst_addr(hop.dst_mac.unwrap_or([0; 6]));
            eth.set_src_addr(hop.src_mac);
            eth.set_ethertype(if meta.v6 {
                ethertype::IPV6
            } else {
                ethertype::IPV4
            });
        }
        frame.offset = l2_start;
        frame.len = L2_LEN + meta.ip_len;
        let bytes = &frame.chunk[l2_start..l2_start + frame.len];
        match hop.dst_mac {
            None => match self
                .hold
                .hold(bytes, &hop, meta.v6, b.now, &mut self.counters)
            {
                Ok(()) => Verdict::Held,
                Err(reason) => Verdict::Drop(reason),
            },
            Some(_) if too_big => {
                match frag::fragment_v4(bytes, meta.ip_len, hop.mtu, hop.oif, pool) {
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
    fn policy(&self, b: &Batch<'_>, meta: &Meta, oif: u32, dir: Direction) -> Option<Verdict> {
        let flow = if meta.v6 {
            policy_tree::Flow::v6(meta.src.into(), meta.dst.into())
        } else {
            policy_tree::Flow::v4((meta.src as u32).into(), (meta.dst as u32).into())
        }
        .proto(meta.proto)
        .ifindex(oif)
        .mark(self.config.policy_mark);
        let flow = match meta.ports {
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

    /// Turns the frame into an ICMP error back to its sender (in place, or in a spare frame),
    /// if the quoting rules, the rate limit and the source address allow; else a drop under
    /// the error's reason.
    fn icmp_error<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frame: &mut Frame<'_>,
        meta: &Meta,
        kind: IcmpError,
        mtu: u32,
        pool: &mut P,
    ) -> Verdict {
        let dropped = Verdict::Drop(kind.drop_reason());
        if !icmp::may_send(meta) {
            self.counters.icmp_not_allowed += 1;
            return dropped;
        }
        if kind.is_rate_limited() && !self.icmp.allow(b.now) {
            self.counters.icmp_rate_limited += 1;
            return dropped;
        }
        let src = if meta.v6 {
            b.tables
                .addrs
                .select_src_v6(frame.ifindex, meta.src.into(), b.guard)
                .map(u128::from)
        } else {
            b.tables
                .addrs
                .select_src_v4(
                    frame.ifindex,
                    Some((meta.src as u32).into()),
                    addr_table::Scope::UNIVERSE,
                    b.guard,
                )
                .map(|a| u128::from(u32::from(a)))
        };
        let Some(src) = src else {
            self.counters.icmp_no_source += 1;
            return dropped;
        };
        self.ident = self.ident.wrapping_add(1);
        let l2 = ReplyL2 {
            dst: meta.src_mac,
            src: meta.dst_mac,
            tci: meta.tci,
        };
        let ip = ErrorIp {
            v6: meta.v6,
            src,
            dst: meta.src,
            tos: meta.tos,
            ident: self.ident,
        };
        let quote = icmp::quote_len(meta);
        let headers = icmp::headers_len(&l2, meta.v6);
        let ip_start = frame.offset + meta.l2_len;
        if let Some(start) = icmp::room_in_place(frame.chunk, ip_start, quote, headers) {
            let total = headers + quote;
            icmp::write_error(&mut frame.chunk[start..start + total], &l2, &ip, kind, mtu);
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
        let total = headers + quote;
        if chunk.len() < total {
            pool.free(handle);
            return Verdict::Drop(DropReason::PoolEmpty);
        }
        chunk[headers..total].copy_from_slice(&frame.chunk[ip_start..ip_start + quote]);
        icmp::write_error(&mut chunk[..total], &l2, &ip, kind, mtu);
        pool.send(handle, 0, total, frame.ifindex);
        self.counters.icmp_sent[kind as usize] += 1;
        Verdict::Consumed
    }
}
