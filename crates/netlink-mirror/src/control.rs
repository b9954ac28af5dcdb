//! The control thread: subscribe, dump, then apply events; resynchronise after overruns;
//! send neighbour resolution requests.
#![forbid(unsafe_code)]

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NLM_F_CREATE, NLM_F_DUMP_INTR, NLM_F_REPLACE, NetlinkDeserializable, NetlinkPayload,
    NetlinkSerializable,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteMessage, RouteType};
use netlink_packet_route::rule::RuleMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_packet_xfrm::XfrmMessage;
use netlink_packet_xfrm::policy::DelGetMessage;

use crate::apply::{Applier, Kind, Seen};
use crate::error::MapError;
use crate::map::{Mapped, map_route_socket, map_xfrm};
use crate::nl_netconf::NetconfMessage;
use crate::nl_nexthop::{NexthopMessage, RtnlMessage};
use crate::pending::PendingEvents;
use crate::resolver::RateLimiter;
use crate::socket::{NlIo, NlSocket, Recv};
use crate::stats::inc;

/// The rtnetlink multicast groups (`RTNLGRP_*`) the mirror joins.
pub(crate) const ROUTE_GROUPS: [u32; 11] = [
    1,  // RTNLGRP_LINK
    3,  // RTNLGRP_NEIGH
    5,  // RTNLGRP_IPV4_IFADDR
    7,  // RTNLGRP_IPV4_ROUTE
    8,  // RTNLGRP_IPV4_RULE
    9,  // RTNLGRP_IPV6_IFADDR
    11, // RTNLGRP_IPV6_ROUTE
    19, // RTNLGRP_IPV6_RULE
    crate::nl_nexthop::RTNLGRP_NEXTHOP,
    crate::nl_netconf::RTNLGRP_IPV4_NETCONF,
    crate::nl_netconf::RTNLGRP_IPV6_NETCONF,
];
/// `XFRMNLGRP_POLICY`.
pub(crate) const XFRM_GROUPS: [u32; 1] = [netlink_packet_xfrm::XFRMNLGRP_POLICY];

/// The kinds dumped on the route socket, in dependency order (links first: rules and
/// nexthops name them; nexthop objects before the routes through them).
const ROUTE_KINDS: [Kind; 10] = [
    Kind::Link,
    Kind::Netconf4,
    Kind::Netconf6,
    Kind::Addr,
    Kind::Nexthop,
    Kind::Route4,
    Kind::Route6,
    Kind::Neigh,
    Kind::Rule4,
    Kind::Rule6,
];

/// Where a mirror is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Starting,
    Synced,
    Failed(String),
}

/// The phase, with a condition variable to wait on.
#[derive(Debug)]
pub(crate) struct SyncState {
    pub phase: Mutex<Phase>,
    pub cv: Condvar,
}

impl SyncState {
    pub fn new() -> Self {
        SyncState {
            phase: Mutex::new(Phase::Starting),
            cv: Condvar::new(),
        }
    }
    pub fn set(&self, p: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
        self.cv.notify_all();
    }
}

/// Settings the control thread runs with.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub poll_interval: Duration,
    pub dump_timeout: Duration,
}

pub(crate) struct Control<S = NlSocket> {
    pub route: Channel<S>,
    pub xfrm: Option<Channel<S>>,
    pub applier: Applier,
    pub requests: Receiver<(u32, IpAddr)>,
    pub limiter: RateLimiter,
    pub stop: Arc<AtomicBool>,
    pub sync: Arc<SyncState>,
    pub settings: Settings,
    /// When the SPD information (hash thresholds) was last asked for.
    pub spdinfo_polled: Instant,
    /// When the multipath hash sysctls were last read.
    pub sysctls_polled: Instant,
    /// Rebuilds worn FIB tables on a thread of their own.
    pub compactor: crate::compact::Compactor,
    /// When the tables were last checked for growth since their last rebuild
    /// ([`GROWN_CHECK`]).
    pub grown_checked: Instant,
}

/// How often, once caught up, the FIB tables are also checked for growth by single changes
/// since their last rebuild ([`crate::compact::Compactor::compact_grown`]): a routing
/// daemon's re-add is over within this long of its last route, and the table it refilled is
/// rebuilt then, not only each time it has tripled.
pub(crate) const GROWN_CHECK: Duration = Duration::from_secs(10);

/// How often the multipath hash sysctls are read (the kernel announces no sysctl change).
pub(crate) const SYSCTL_POLL: Duration = Duration::from_secs(1);

/// How often the hash thresholds are asked for (the kernel does not announce changes).
pub(crate) const SPDINFO_POLL: Duration = Duration::from_secs(1);

/// Why a synchronisation did not finish.
enum SyncError {
    Stopped,
    Io(io::Error),
}

impl From<io::Error> for SyncError {
    fn from(e: io::Error) -> Self {
        SyncError::Io(e)
    }
}

fn route_request(kind: Kind) -> RtnlMessage {
    match kind {
        Kind::Nexthop => RtnlMessage::GetNexthop(NexthopMessage::default()),
        Kind::Netconf4 | Kind::Netconf6 => RtnlMessage::GetNetconf(NetconfMessage {
            family: if kind == Kind::Netconf6 {
                libc::AF_INET6 as u8
            } else {
                libc::AF_INET as u8
            },
            attributes: Vec::new(),
        }),
        other => RtnlMessage::Route(rtnl_request(other)),
    }
}

fn rtnl_request(kind: Kind) -> RouteNetlinkMessage {
    let route = |family| {
        let mut m = RouteMessage::default();
        m.header.address_family = family;
        m.header.kind = RouteType::Unspec;
        RouteNetlinkMessage::GetRoute(m)
    };
    let rule = |family| {
        let mut m = RuleMessage::default();
        m.header.family = family;
        RouteNetlinkMessage::GetRule(m)
    };
    match kind {
        Kind::Link => RouteNetlinkMessage::GetLink(LinkMessage::default()),
        Kind::Addr => RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        Kind::Route4 => route(AddressFamily::Inet),
        Kind::Route6 => route(AddressFamily::Inet6),
        Kind::Neigh => RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
        Kind::Rule4 => rule(AddressFamily::Inet),
        Kind::Rule6 => rule(AddressFamily::Inet6),
        Kind::Policy | Kind::Nexthop | Kind::Netconf4 | Kind::Netconf6 => unreachable_kind(),
    }
}

#[cold]
fn unreachable_kind() -> RouteNetlinkMessage {
    // Policies are dumped on the xfrm socket; asking the route socket for them is a no-op
    // request (an empty link dump would do no harm either).
    RouteNetlinkMessage::GetLink(LinkMessage::default())
}

/// The two sockets of one netlink protocol.
///
/// `events` joins the multicast groups and carries nothing else; `cmd` joins none and
/// carries dumps and requests. Sharing one socket breaks under an event flood, for two
/// reasons in the kernel's netlink code:
/// - the next part of a dump is produced when a `recvmsg` finds the queue at most half full;
///   if events fill it at that moment, the step fails with `ENOBUFS` and is only retried by a
///   later successful `recvmsg`, so once the queue drains the dump stalls for good;
/// - after the first dropped event the socket is congested and drops every further event
///   without reporting it again until a `recvmsg` leaves its queue empty, which a stream of
///   dump replies in the same queue can postpone for the whole dump.
pub(crate) struct Channel<S = NlSocket> {
    pub events: S,
    pub cmd: S,
}

/// Events read from an event socket, with what the reads saw.
#[derive(Default)]
struct Drained {
    /// An `ENOBUFS`: events were lost.
    overrun: bool,
    /// The queue was found empty (which ends a congestion: later losses are reported).
    empty: bool,
}

/// Reads up to `limit` datagrams of event socket `sock`, handing each decoded event to
/// `each`; undecodable ones are counted.
fn read_events<I: NetlinkDeserializable, S: NlIo>(
    sock: &mut S,
    applier: &Applier,
    limit: usize,
    mut each: impl FnMut(u16, I),
) -> io::Result<Drained> {
    drain(sock, applier, limit, |sock| {
        let mut bad = Vec::new();
        sock.messages::<I>(
            |m| {
                if let NetlinkPayload::InnerMessage(msg) = m.payload {
                    each(m.header.flags, msg);
                }
            },
            |kind, e| bad.push(format!("type {kind}: {e}")),
        );
        for b in bad {
            applier.map_failed(&MapError::Decode(b));
        }
    })
}

/// Reads up to `limit` datagrams of event socket `sock` into `pending`, undecoded (see
/// [`PendingEvents`]).
fn keep_events<S: NlIo>(
    sock: &mut S,
    applier: &Applier,
    limit: usize,
    pending: &mut PendingEvents,
) -> io::Result<Drained> {
    drain(sock, applier, limit, |sock| {
        pending.push_datagram(sock.datagram())
    })
}

/// Receives up to `limit` datagrams of `sock`, handing each to `data` (which reads it from
/// the socket's buffer); counts overruns, and stops early when the socket is empty.
fn drain<S: NlIo>(
    sock: &mut S,
    applier: &Applier,
    limit: usize,
    mut data: impl FnMut(&mut S),
) -> io::Result<Drained> {
    let mut out = Drained::default();
    for _ in 0..limit {
        match sock.recv()? {
            Recv::Empty => {
                out.empty = true;
                break;
            }
            Recv::Overrun => {
                inc(&applier.counters.overruns);
                out.overrun = true;
            }
            Recv::Data => data(sock),
        }
    }
    Ok(out)
}

/// Hands the events kept in `pending` to `each`, in order; undecodable ones are counted.
pub(crate) fn apply_kept<I: NetlinkDeserializable>(
    pending: &mut PendingEvents,
    applier: &mut Applier,
    mut each: impl FnMut(&mut Applier, u16, I),
) {
    let mut bad = Vec::new();
    let mut events = Vec::new();
    // Decoded in slices, so that at most one slice of decoded events is alive at a time.
    let mut slice = PendingEvents::default();
    std::mem::swap(&mut slice, pending);
    slice.drain::<I>(
        |flags, msg| {
            events.push((flags, msg));
            if events.len() >= EVENTS_PER_TURN {
                for (flags, msg) in events.drain(..) {
                    each(applier, flags, msg);
                }
            }
        },
        |kind, e| bad.push(format!("type {kind}: {e}")),
    );
    for (flags, msg) in events {
        each(applier, flags, msg);
    }
    for b in bad {
        applier.map_failed(&MapError::Decode(b));
    }
    // The (emptied) buffer back, for the next dump.
    std::mem::swap(&mut slice, pending);
}

/// Datagrams of an event socket read per turn while a dump runs.
const EVENTS_PER_TURN: usize = 64;
/// A dump that times out is retried on a fresh command socket this many times.
const DUMP_TIMEOUTS: u32 = 3;

/// Dumps one kind on `ch.cmd`: requests, applies each entry as an upsert, keeps events that
/// arrive on `ch.events` meanwhile in `pending` (undecoded), restarts on `NLM_F_DUMP_INTR`, then sweeps
/// what the dump did not hold. Returns whether events were lost meanwhile.
///
/// The event socket is read until empty after the dump's last part, so that a loss during
/// the dump is seen here and not blamed on a later, clean, stretch.
#[allow(clippy::too_many_arguments)]
fn dump_kind<I, S: NlIo>(
    ch: &mut Channel<S>,
    applier: &mut Applier,
    kind: Kind,
    request: impl Fn() -> I,
    map: &impl Fn(&I, u16, bool) -> Result<Mapped, MapError>,
    pending: &mut PendingEvents,
    settings: &Settings,
    stop: &AtomicBool,
) -> Result<bool, SyncError>
where
    I: NetlinkSerializable + NetlinkDeserializable,
{
    let mut overrun = false;
    let (mut failures, mut timeouts) = (0, 0);
    loop {
        applier.begin_dump(kind);
        let seq = ch.cmd.dump(request())?;
        let port = ch.cmd.port();
        let mut seen = Seen::default();
        // xfrm policies come newest first (`policy_all` from its head); they are applied
        // oldest first once the dump is whole, so that list order is creation order.
        let mut newest_first = Vec::new();
        let (mut done, mut intr, mut failed, mut timed_out) = (false, false, None, false);
        let mut last = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(SyncError::Stopped);
            }
            let drained = keep_events(&mut ch.events, applier, EVENTS_PER_TURN, pending)?;
            overrun |= drained.overrun;
            if done {
                if drained.empty {
                    break;
                }
                continue;
            }
            match ch.cmd.recv()? {
                Recv::Overrun => {
                    // Only replies land here, and the kernel never drops dump parts; a lost
                    // error reply would show as a timeout.
                    tracing::warn!(?kind, "command socket overran");
                    continue;
                }
                Recv::Empty => {
                    if last.elapsed() > settings.dump_timeout {
                        timed_out = true;
                        break;
                    }
                    if drained.empty {
                        S::wait_any(
                            &[&ch.cmd, &ch.events],
                            settings.poll_interval.max(Duration::from_millis(50)),
                        )?;
                    }
                    continue;
                }
                Recv::Data => last = Instant::now(),
            }
            let mut bad = Vec::new();
            ch.cmd.messages::<I>(
                |m| {
                    let ours = m.header.sequence_number == seq && m.header.port_number == port;
                    if !ours {
                        // A refused neighbour request (the only other thing sent here).
                        if matches!(&m.payload, NetlinkPayload::Error(e) if e.code.is_some()) {
                            inc(&applier.counters.resolve_errors);
                        }
                        return;
                    }
                    if m.header.flags & NLM_F_DUMP_INTR != 0 {
                        intr = true;
                    }
                    match m.payload {
                        NetlinkPayload::InnerMessage(msg) => {
                            match map(&msg, m.header.flags, true) {
                                Ok(mapped) => {
                                    if kind == Kind::Policy {
                                        seen.record(&mapped, true);
                                        newest_first.push(mapped);
                                    } else {
                                        applier.apply_dumped(mapped, &mut seen);
                                    }
                                }
                                Err(e) => applier.map_failed(&e),
                            }
                        }
                        NetlinkPayload::Done(_) => done = true,
                        NetlinkPayload::Error(e) => {
                            failed = Some(e.raw_code());
                            done = true;
                        }
                        _ => {}
                    }
                },
                |kind, e| bad.push(format!("type {kind}: {e}")),
            );
            for b in bad {
                applier.map_failed(&MapError::Decode(b));
            }
        }
        if timed_out {
            timeouts += 1;
            tracing::warn!(
                ?kind,
                timeouts,
                "dump timed out; retrying on a fresh socket"
            );
            if timeouts >= DUMP_TIMEOUTS {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "dump timed out").into());
            }
            ch.cmd
                .reopen()
                .map_err(|e| SyncError::Io(io::Error::other(e.to_string())))?;
            inc(&applier.counters.dump_restarts);
            continue;
        }
        if let Some(code) = failed {
            failures += 1;
            tracing::warn!(?kind, code, "dump refused by the kernel");
            if failures >= 3 {
                return Err(io::Error::from_raw_os_error(-code).into());
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if intr {
            inc(&applier.counters.dump_restarts);
            tracing::debug!(?kind, "dump interrupted by a change, restarting");
            continue;
        }
        applier.end_dump(kind);
        applier.sweep(kind, &seen);
        for mapped in newest_first.into_iter().rev() {
            applier.apply(mapped);
        }
        inc(&applier.counters.dumps);
        return Ok(overrun);
    }
}

impl<S: NlIo> Control<S> {
    fn map_route(m: &RtnlMessage, flags: u16, dump: bool) -> Result<Mapped, MapError> {
        map_route_socket(m, flags, dump)
    }

    fn map_policy(m: &XfrmMessage, _flags: u16, _dump: bool) -> Result<Mapped, MapError> {
        map_xfrm(m)
    }

    /// Dumps `kinds` on the route channel, then applies the events that arrived meanwhile.
    /// Returns whether events were lost in a way these dumps do not repair.
    ///
    /// The queued events are applied first, until the event socket is empty: that ends any
    /// congestion, so every loss from the first dump request on is reported. Losses before it
    /// are repaired by the dumps when `kinds` is every kind; a partial re-dump reports them.
    fn sync_route(&mut self, kinds: &[Kind]) -> Result<bool, SyncError> {
        let (before, _) = self.drain_route(usize::MAX)?;
        let mut overrun = before && kinds.len() < ROUTE_KINDS.len();
        let mut pending = PendingEvents::default();
        for &kind in kinds {
            overrun |= dump_kind(
                &mut self.route,
                &mut self.applier,
                kind,
                || route_request(kind),
                &Self::map_route,
                &mut pending,
                &self.settings,
                &self.stop,
            )?;
        }
        if pending.len() > 0 {
            tracing::debug!(
                datagrams = pending.len(),
                bytes = pending.bytes(),
                "applying the events that arrived during the dump"
            );
        }
        apply_kept::<RtnlMessage>(&mut pending, &mut self.applier, |applier, flags, msg| {
            apply_route_event(applier, &msg, flags);
        });
        Ok(overrun)
    }

    fn sync_xfrm(&mut self) -> Result<bool, SyncError> {
        if self.xfrm.is_none() {
            return Ok(false);
        }
        self.drain_xfrm(usize::MAX)?;
        // Thresholds first: the kernel rebuilt its lists when they were set, and the dumped
        // policies go where the current ones say. Default policies: changes are announced
        // (`XFRM_MSG_GETDEFAULT` to the policy group), the current ones asked for here.
        self.poll_spdinfo()?;
        self.ask_xfrm(XfrmMessage::GetPolicyDefault(
            netlink_packet_xfrm::policy::DefaultMessage::default(),
        ))?;
        let Some(ch) = self.xfrm.as_mut() else {
            return Ok(false);
        };
        let mut pending = PendingEvents::default();
        let overrun = dump_kind(
            ch,
            &mut self.applier,
            Kind::Policy,
            || XfrmMessage::GetPolicy(DelGetMessage::default()),
            &Self::map_policy,
            &mut pending,
            &self.settings,
            &self.stop,
        )?;
        // What the kernel numbered before this dump (`pos`) is not in it.
        self.applier.writers.policies.forget_history();
        apply_kept::<XfrmMessage>(&mut pending, &mut self.applier, |applier, _, msg| {
            apply_policy_event(applier, &msg);
        });
        Ok(overrun)
    }

    /// Asks for the SPD information (`XFRM_MSG_GETSPDINFO`) and applies its hash thresholds.
    /// The kernel announces no threshold change, so the control loop asks again every
    /// [`SPDINFO_POLL`]; until then a change is seen late (the answers it changes are ties).
    fn poll_spdinfo(&mut self) -> Result<(), SyncError> {
        self.spdinfo_polled = Instant::now();
        self.ask_xfrm(XfrmMessage::GetSpdInfo(
            netlink_packet_xfrm::policy::GetSpdInfoMessage::default(),
        ))
    }

    /// Sends one xfrm request on the command socket and applies its answer.
    fn ask_xfrm(&mut self, request: XfrmMessage) -> Result<(), SyncError> {
        let Some(ch) = self.xfrm.as_mut() else {
            return Ok(());
        };
        let seq = ch.cmd.request(request, 0)?;
        let port = ch.cmd.port();
        let deadline = Instant::now() + self.settings.dump_timeout;
        let mut reply = None;
        while reply.is_none() && Instant::now() < deadline {
            match ch.cmd.recv()? {
                Recv::Data => {}
                Recv::Empty | Recv::Overrun => {
                    S::wait_any(&[&ch.cmd], Duration::from_millis(20))?;
                    continue;
                }
            }
            ch.cmd.messages::<XfrmMessage>(
                |m| {
                    if m.header.sequence_number != seq || m.header.port_number != port {
                        return;
                    }
                    match m.payload {
                        NetlinkPayload::InnerMessage(msg) => reply = Some(Ok(msg)),
                        NetlinkPayload::Error(e) => reply = Some(Err(e.raw_code())),
                        _ => {}
                    }
                },
                |_, _| {},
            );
        }
        match reply {
            Some(Ok(msg)) => self.apply_policy_event(&msg),
            Some(Err(code)) => tracing::warn!(code, "xfrm request refused"),
            None => tracing::warn!("no answer to an xfrm request"),
        }
        Ok(())
    }

    fn apply_route_event(&mut self, msg: &RtnlMessage, flags: u16) {
        apply_route_event(&mut self.applier, msg, flags);
    }

    fn apply_policy_event(&mut self, msg: &XfrmMessage) {
        apply_policy_event(&mut self.applier, msg);
    }

    /// Reads the multipath hash sysctls into the FIBs, and `accept_local` and IPv6
    /// `force_forwarding` into the device switches ([`SYSCTL_POLL`]; a change is seen that
    /// late).
    fn poll_sysctls(&mut self) {
        self.sysctls_polled = Instant::now();
        let (v4, v6) = crate::netns::multipath_policies();
        let t = &self.applier.tables;
        let w = &mut self.applier.writers;
        let mut changed = false;
        if t.fib4.multipath_policy() != v4 || t.fib6.multipath_policy() != v6 {
            tracing::info!(ipv4 = ?v4, ipv6 = ?v6, "multipath hash policy");
            w.fib4.set_multipath_policy(v4);
            w.fib6.set_multipath_policy(v6);
            changed = true;
        }
        // accept_local of `all` and of every device, and IPv6 force_forwarding of every
        // device (not in netconf).
        let all = crate::netns::accept_local("all");
        changed |= w.devconf.set_accept_local(neigh_table::NETCONF_ALL, all);
        for link in t.links.to_vec() {
            if let Ok(ifindex) = i32::try_from(link.ifindex) {
                let on = crate::netns::accept_local(&link.name);
                changed |= w.devconf.set_accept_local(ifindex, on);
                let forced = crate::netns::force_forwarding(&link.name);
                changed |= w.devconf.set_force_forwarding(ifindex, forced);
                // The hold buffer's budget per unresolved neighbour (the kernel does not
                // notify changes of neighbour table parameters).
                for v6 in [false, true] {
                    let bytes = crate::netns::unres_qlen_bytes(v6, &link.name);
                    changed |= w.devconf.set_queue_bytes(v6, ifindex, bytes);
                }
            }
        }
        if changed {
            t.generation.bump();
        }
    }

    /// Says whether the tables lag the kernel's, in the generation the run loops read
    /// ([`Generation::set_behind`](dst_cache::Generation::set_behind)): while they do, route
    /// answers are left to the kernel. Counts each start of a lag.
    ///
    /// The mirror is behind from the start of a synchronisation or route re-dump (the FIBs
    /// are being rebuilt; or a link went down and the kernel flushed routes silently) until a
    /// later round of events found the event sockets empty; and whenever a round of events
    /// ends without emptying a socket (a backlog: the kernel changed more than the mirror has
    /// applied). A mirror whose control thread stops on an error stays behind for good, so
    /// that the run loops leave everything to the kernel rather than use frozen tables.
    fn lagging(&self, behind: bool) {
        let was = self.applier.tables.generation.set_behind(behind);
        if behind && !was {
            inc(&self.applier.counters.behind);
            tracing::debug!("mirror behind the kernel: route answers go to the kernel");
        } else if was && !behind {
            tracing::debug!("mirror caught up with the kernel");
        }
    }

    /// Synchronises until a pass finishes without losing events.
    fn full_sync(&mut self, resync: bool) -> Result<(), SyncError> {
        self.lagging(true);
        self.poll_sysctls();
        let mut again = resync;
        let mut first = true;
        while first || again {
            if !first || resync {
                inc(&self.applier.counters.resyncs);
            }
            first = false;
            again = self.sync_route(&ROUTE_KINDS)?;
            again |= self.sync_xfrm()?;
        }
        Ok(())
    }

    /// Runs until stopped.
    pub fn run(mut self) {
        match self.full_sync(false) {
            Ok(()) => self.sync.set(Phase::Synced),
            Err(SyncError::Stopped) => return,
            Err(SyncError::Io(e)) => {
                tracing::error!(error = %e, "initial synchronisation failed");
                self.sync.set(Phase::Failed(e.to_string()));
                return;
            }
        }
        tracing::info!(stats = ?self.applier.counters.snapshot(), "mirror synchronised");
        while !self.stop.load(Ordering::Relaxed) {
            if let Err(e) = self.step() {
                match e {
                    SyncError::Stopped => return,
                    SyncError::Io(e) => {
                        tracing::error!(error = %e, "netlink socket failed; mirror stops");
                        self.sync.set(Phase::Failed(e.to_string()));
                        return;
                    }
                }
            }
        }
    }

    /// One round: wait, read and apply events, resynchronise if needed, send requests.
    fn step(&mut self) -> Result<(), SyncError> {
        let mut socks = vec![&self.route.events, &self.route.cmd];
        if let Some(x) = &self.xfrm {
            socks.push(&x.events);
        }
        // This thread is the tables' writer: what it retired stays in its thread-local bag
        // until it retires 64 more objects, which a quiet control plane may never do; hand
        // it to the global queue, where the run loops' pins free it, before waiting.
        crossbeam_epoch::pin().flush();
        S::wait_any(&socks, self.settings.poll_interval)?;
        // Bounded so that resolver requests and stop are served during floods.
        let (route_overrun, route_emptied) = self.drain_route(4096)?;
        let (xfrm_overrun, xfrm_emptied) = self.drain_xfrm(4096)?;
        // Caught up when both event queues were emptied and nothing calls for a re-dump; a
        // synchronisation below leaves it to the next round to say so.
        let mut caught_up = route_emptied && xfrm_emptied;
        self.drain_replies()?;
        if self.xfrm.is_some() && self.spdinfo_polled.elapsed() >= SPDINFO_POLL {
            self.poll_spdinfo()?;
        }
        if self.sysctls_polled.elapsed() >= SYSCTL_POLL {
            self.poll_sysctls();
        }
        if route_overrun || xfrm_overrun {
            tracing::warn!("netlink receive buffer overran; resynchronising");
            self.full_sync(true)?;
            caught_up = false;
        } else if self.applier.routes_need_redump {
            // A link went down or away: the kernel drops its IPv4 routes without telling.
            self.applier.routes_need_redump = false;
            inc(&self.applier.counters.route_redumps);
            // Nexthops on that device went too, and with them their routes, also silently.
            self.lagging(true);
            if self.sync_route(&[Kind::Nexthop, Kind::Route4, Kind::Route6])? {
                self.full_sync(true)?;
            }
            caught_up = false;
        }
        if caught_up && !self.applier.routes_need_redump {
            self.lagging(false);
            self.compact_worn();
        }
        self.send_requests();
        Ok(())
    }

    /// Rebuilds in bulk the FIB tables that changes applied one route at a time have worn
    /// ([`fib_trie::FibWriter::compact`]: at least as many prefixes changed as the table
    /// holds routes, e.g. a mass delete and re-add after a link flap), once caught up with
    /// the kernel. Without it such a table keeps the same routes in more memory than after
    /// its bulk load at start, and the allocator keeps pieces of the old nodes resident
    /// (`docs/forwarder.md`, "Memory after mass changes"); on a thread of its own (see
    /// [`crate::compact`]). Lookups answer the same; the
    /// generation is bumped all the same, so that nothing keeps an answer of the old
    /// structures.
    fn compact_worn(&mut self) {
        let w = &mut self.applier.writers;
        let rebuilt = if self.grown_checked.elapsed() >= GROWN_CHECK {
            self.grown_checked = Instant::now();
            self.compactor.compact_grown(&mut w.fib4, &mut w.fib6)
        } else {
            self.compactor.compact(&mut w.fib4, &mut w.fib6)
        };
        if rebuilt > 0 {
            self.applier
                .counters
                .compactions
                .fetch_add(rebuilt as u64, Ordering::Relaxed);
            self.applier.tables.generation.bump();
            tracing::debug!(tables = rebuilt, "worn FIB tables rebuilt in bulk");
        }
    }

    /// Reads and applies up to `limit` datagrams of route events, or until none is queued;
    /// says whether events were lost and whether the queue was found empty. A turn that
    /// leaves events queued (a backlog), or a link going down (routes flushed silently),
    /// marks the tables behind at once.
    fn drain_route(&mut self, limit: usize) -> Result<(bool, bool), SyncError> {
        let mut events = Vec::new();
        let mut overrun = false;
        let mut emptied = false;
        let mut left = limit;
        while left > 0 {
            let turn = left.min(EVENTS_PER_TURN);
            left -= turn;
            let drained = read_events(&mut self.route.events, &self.applier, turn, |f, m| {
                events.push((f, m));
            })?;
            overrun |= drained.overrun;
            if !drained.empty || drained.overrun {
                self.lagging(true);
            }
            for (flags, msg) in events.drain(..) {
                self.apply_route_event(&msg, flags);
            }
            if self.applier.routes_need_redump {
                self.lagging(true);
            }
            if drained.empty {
                emptied = true;
                break;
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(SyncError::Stopped);
            }
        }
        Ok((overrun, emptied))
    }

    /// [`Control::drain_route`] for the xfrm channel.
    fn drain_xfrm(&mut self, limit: usize) -> Result<(bool, bool), SyncError> {
        let mut events = Vec::new();
        let mut overrun = false;
        let mut left = limit;
        while left > 0 {
            let Some(ch) = self.xfrm.as_mut() else {
                return Ok((false, true));
            };
            let turn = left.min(EVENTS_PER_TURN);
            left -= turn;
            let drained = read_events(&mut ch.events, &self.applier, turn, |_, m| {
                events.push(m);
            })?;
            overrun |= drained.overrun;
            if !drained.empty || drained.overrun {
                self.lagging(true);
            }
            for msg in events.drain(..) {
                self.apply_policy_event(&msg);
            }
            if drained.empty {
                return Ok((overrun, true));
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(SyncError::Stopped);
            }
        }
        Ok((overrun, false))
    }

    /// Reads what the kernel answered to neighbour requests on the route command socket
    /// (only refusals: the requests ask for no acknowledgement).
    fn drain_replies(&mut self) -> Result<(), SyncError> {
        let port = self.route.cmd.port();
        loop {
            match self.route.cmd.recv()? {
                Recv::Empty => return Ok(()),
                Recv::Overrun => tracing::warn!("route command socket overran"),
                Recv::Data => {
                    let mut refused = Vec::new();
                    self.route.cmd.messages::<RtnlMessage>(
                        |m| {
                            if let NetlinkPayload::Error(e) = m.payload {
                                if m.header.port_number == port && e.code.is_some() {
                                    refused.push(e.to_io());
                                }
                            }
                        },
                        |_, _| {},
                    );
                    for e in refused {
                        inc(&self.applier.counters.resolve_errors);
                        tracing::debug!(error = %e, "neighbour request refused");
                    }
                }
            }
        }
    }

    /// Sends the queued neighbour resolution requests that pass the rate limits.
    fn send_requests(&mut self) {
        let now = Instant::now();
        while let Ok((ifindex, addr)) = self.requests.try_recv() {
            if !self.limiter.allow((ifindex, addr), now) {
                inc(&self.applier.counters.resolve_rate_limited);
                continue;
            }
            match self
                .route
                .cmd
                .request(resolve_message(ifindex, addr), NLM_F_CREATE | NLM_F_REPLACE)
            {
                Ok(_) => inc(&self.applier.counters.resolve_sent),
                Err(e) => {
                    inc(&self.applier.counters.resolve_errors);
                    tracing::debug!(error = %e, "neighbour request not sent");
                }
            }
        }
    }
}

/// Maps and applies one route socket event.
pub(crate) fn apply_route_event(applier: &mut Applier, msg: &RtnlMessage, flags: u16) {
    match map_route_socket(msg, flags, false) {
        Ok(m) => applier.apply(m),
        Err(e) => applier.map_failed(&e),
    }
}

/// Maps and applies one xfrm event.
fn apply_policy_event(applier: &mut Applier, msg: &XfrmMessage) {
    match map_xfrm(msg) {
        Ok(m) => applier.apply(m),
        Err(e) => applier.map_failed(&e),
    }
}

/// `RTM_NEWNEIGH` with `NTF_USE` and no link-layer address: "resolve this neighbour".
pub(crate) fn resolve_message(ifindex: u32, addr: IpAddr) -> RouteNetlinkMessage {
    let mut m = NeighbourMessage::default();
    m.header.ifindex = ifindex;
    m.header.state = NeighbourState::None;
    m.header.flags = NeighbourFlags::Use;
    let dst = match addr {
        IpAddr::V4(a) => {
            m.header.family = AddressFamily::Inet;
            NeighbourAddress::Inet(a)
        }
        IpAddr::V6(a) => {
            m.header.family = AddressFamily::Inet6;
            NeighbourAddress::Inet6(a)
        }
    };
    m.attributes = vec![NeighbourAttribute::Destination(dst)];
    RouteNetlinkMessage::NewNeighbour(m)
}

#[cfg(test)]
#[path = "control_tests.rs"]
mod tests;
