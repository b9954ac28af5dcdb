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
use crate::map::{Mapped, map_rtnl, map_xfrm};
use crate::resolver::RateLimiter;
use crate::socket::{NlSocket, Recv, wait_any};
use crate::stats::inc;

/// The rtnetlink multicast groups (`RTNLGRP_*`) the mirror joins.
pub(crate) const ROUTE_GROUPS: [u32; 8] = [
    1,  // RTNLGRP_LINK
    3,  // RTNLGRP_NEIGH
    5,  // RTNLGRP_IPV4_IFADDR
    7,  // RTNLGRP_IPV4_ROUTE
    8,  // RTNLGRP_IPV4_RULE
    9,  // RTNLGRP_IPV6_IFADDR
    11, // RTNLGRP_IPV6_ROUTE
    19, // RTNLGRP_IPV6_RULE
];
/// `XFRMNLGRP_POLICY`.
pub(crate) const XFRM_GROUPS: [u32; 1] = [netlink_packet_xfrm::XFRMNLGRP_POLICY];

/// The kinds dumped on the route socket, in dependency order (links first: rules name them).
const ROUTE_KINDS: [Kind; 7] = [
    Kind::Link,
    Kind::Addr,
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

pub(crate) struct Control {
    pub route: NlSocket,
    pub xfrm: Option<NlSocket>,
    pub applier: Applier,
    pub requests: Receiver<(u32, IpAddr)>,
    pub limiter: RateLimiter,
    pub stop: Arc<AtomicBool>,
    pub sync: Arc<SyncState>,
    pub settings: Settings,
}

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

fn route_request(kind: Kind) -> RouteNetlinkMessage {
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
        Kind::Policy => unreachable_kind(),
    }
}

#[cold]
fn unreachable_kind() -> RouteNetlinkMessage {
    // Policies are dumped on the xfrm socket; asking the route socket for them is a no-op
    // request (an empty link dump would do no harm either).
    RouteNetlinkMessage::GetLink(LinkMessage::default())
}

/// Dumps one kind on `sock`: requests, applies each entry as an upsert, keeps events that
/// arrive meanwhile in `pending`, restarts on `NLM_F_DUMP_INTR`, then sweeps what the dump
/// did not hold. Returns whether the socket overran meanwhile.
#[allow(clippy::too_many_arguments)]
fn dump_kind<I>(
    sock: &mut NlSocket,
    applier: &mut Applier,
    kind: Kind,
    request: impl Fn() -> I,
    map: &impl Fn(&I, u16, bool) -> Result<Mapped, MapError>,
    pending: &mut Vec<(u16, I)>,
    settings: &Settings,
    stop: &AtomicBool,
) -> Result<bool, SyncError>
where
    I: NetlinkSerializable + NetlinkDeserializable,
{
    let mut overrun = false;
    let mut failures = 0;
    loop {
        let seq = sock.dump(request())?;
        let port = sock.port();
        let mut seen = Seen::default();
        let (mut done, mut intr, mut failed) = (false, false, None);
        let mut last = Instant::now();
        while !done {
            if stop.load(Ordering::Relaxed) {
                return Err(SyncError::Stopped);
            }
            match sock.recv()? {
                Recv::Overrun => {
                    inc(&applier.counters.overruns);
                    overrun = true;
                    continue;
                }
                Recv::Empty => {
                    if last.elapsed() > settings.dump_timeout {
                        return Err(
                            io::Error::new(io::ErrorKind::TimedOut, "dump timed out").into()
                        );
                    }
                    sock.wait(settings.poll_interval.max(Duration::from_millis(50)))?;
                    continue;
                }
                Recv::Data => last = Instant::now(),
            }
            let mut bad = Vec::new();
            sock.messages::<I>(
                |m| {
                    let ours = m.header.sequence_number == seq && m.header.port_number == port;
                    if ours && m.header.flags & NLM_F_DUMP_INTR != 0 {
                        intr = true;
                    }
                    match m.payload {
                        NetlinkPayload::InnerMessage(msg) if ours => {
                            match map(&msg, m.header.flags, true) {
                                Ok(mapped) => {
                                    seen.record(&mapped);
                                    applier.apply(mapped);
                                }
                                Err(e) => applier.map_failed(&e),
                            }
                        }
                        NetlinkPayload::InnerMessage(msg) => pending.push((m.header.flags, msg)),
                        NetlinkPayload::Done(_) if ours => done = true,
                        NetlinkPayload::Error(e) if ours => {
                            failed = Some(e.raw_code());
                            done = true;
                        }
                        NetlinkPayload::Error(e)
                            if m.header.port_number == port && e.code.is_some() =>
                        {
                            inc(&applier.counters.resolve_errors);
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
        applier.sweep(kind, &seen);
        inc(&applier.counters.dumps);
        return Ok(overrun);
    }
}

impl Control {
    fn map_route(m: &RouteNetlinkMessage, flags: u16, dump: bool) -> Result<Mapped, MapError> {
        map_rtnl(m, flags, dump)
    }

    fn map_policy(m: &XfrmMessage, _flags: u16, _dump: bool) -> Result<Mapped, MapError> {
        map_xfrm(m)
    }

    /// Dumps `kinds` on the route socket, then applies the events that arrived meanwhile.
    /// Returns whether the socket overran during the synchronisation.
    fn sync_route(&mut self, kinds: &[Kind]) -> Result<bool, SyncError> {
        let mut pending = Vec::new();
        let mut overrun = false;
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
        for (flags, msg) in pending {
            self.apply_route_event(&msg, flags);
        }
        Ok(overrun)
    }

    fn sync_xfrm(&mut self) -> Result<bool, SyncError> {
        let Some(sock) = self.xfrm.as_mut() else {
            return Ok(false);
        };
        let mut pending = Vec::new();
        let overrun = dump_kind(
            sock,
            &mut self.applier,
            Kind::Policy,
            || XfrmMessage::GetPolicy(DelGetMessage::default()),
            &Self::map_policy,
            &mut pending,
            &self.settings,
            &self.stop,
        )?;
        for (_, msg) in pending {
            match map_xfrm(&msg) {
                Ok(m) => self.applier.apply(m),
                Err(e) => self.applier.map_failed(&e),
            }
        }
        Ok(overrun)
    }

    fn apply_route_event(&mut self, msg: &RouteNetlinkMessage, flags: u16) {
        match map_rtnl(msg, flags, false) {
            Ok(m) => self.applier.apply(m),
            Err(e) => self.applier.map_failed(&e),
        }
    }

    /// Synchronises until a pass finishes without an overrun.
    fn full_sync(&mut self, resync: bool) -> Result<(), SyncError> {
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
        let mut socks = vec![&self.route];
        if let Some(x) = &self.xfrm {
            socks.push(x);
        }
        wait_any(&socks, self.settings.poll_interval)?;
        let route_overrun = self.drain_route()?;
        let xfrm_overrun = self.drain_xfrm()?;
        if route_overrun || xfrm_overrun {
            tracing::warn!("netlink receive buffer overran; resynchronising");
            self.full_sync(true)?;
        } else if self.applier.routes_need_redump {
            // A link went down or away: the kernel drops its IPv4 routes without telling.
            self.applier.routes_need_redump = false;
            inc(&self.applier.counters.route_redumps);
            if self.sync_route(&[Kind::Route4, Kind::Route6])? {
                self.full_sync(true)?;
            }
        }
        self.send_requests();
        Ok(())
    }

    /// Reads and applies every queued event of the route socket; says whether it overran.
    fn drain_route(&mut self) -> Result<bool, SyncError> {
        let mut overrun = false;
        // Bounded so that resolver requests and stop are served during floods.
        for _ in 0..4096 {
            match self.route.recv()? {
                Recv::Empty => break,
                Recv::Overrun => {
                    inc(&self.applier.counters.overruns);
                    overrun = true;
                }
                Recv::Data => {
                    let port = self.route.port();
                    let mut events = Vec::new();
                    let mut refused = Vec::new();
                    let mut bad = Vec::new();
                    self.route.messages::<RouteNetlinkMessage>(
                        |m| match m.payload {
                            NetlinkPayload::InnerMessage(msg) => events.push((m.header.flags, msg)),
                            NetlinkPayload::Error(e)
                                if m.header.port_number == port && e.code.is_some() =>
                            {
                                refused.push(e.to_io());
                            }
                            _ => {}
                        },
                        |kind, e| bad.push(format!("type {kind}: {e}")),
                    );
                    for e in refused {
                        inc(&self.applier.counters.resolve_errors);
                        tracing::debug!(error = %e, "neighbour request refused");
                    }
                    for b in bad {
                        self.applier.map_failed(&MapError::Decode(b));
                    }
                    for (flags, msg) in events {
                        self.apply_route_event(&msg, flags);
                    }
                }
            }
        }
        Ok(overrun)
    }

    fn drain_xfrm(&mut self) -> Result<bool, SyncError> {
        let Some(sock) = self.xfrm.as_mut() else {
            return Ok(false);
        };
        let mut overrun = false;
        for _ in 0..4096 {
            match sock.recv()? {
                Recv::Empty => break,
                Recv::Overrun => {
                    inc(&self.applier.counters.overruns);
                    overrun = true;
                }
                Recv::Data => {
                    let mut events = Vec::new();
                    let mut bad = Vec::new();
                    sock.messages::<XfrmMessage>(
                        |m| {
                            if let NetlinkPayload::InnerMessage(msg) = m.payload {
                                events.push(msg);
                            }
                        },
                        |kind, e| bad.push(format!("xfrm type {kind}: {e}")),
                    );
                    for b in bad {
                        self.applier.map_failed(&MapError::Decode(b));
                    }
                    for msg in events {
                        match map_xfrm(&msg) {
                            Ok(m) => self.applier.apply(m),
                            Err(e) => self.applier.map_failed(&e),
                        }
                    }
                }
            }
        }
        Ok(overrun)
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
