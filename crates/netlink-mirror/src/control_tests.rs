//! The control loop ([`Control::full_sync`], [`Control::step`]) without root: its sockets
//! ([`NlIo`]) are served by a scripted kernel that holds IPv4 routes of table main, answers
//! dump requests with wire-format replies (in parts of a few routes, `NLMSG_DONE` last), and
//! delivers events, `ENOBUFS` and interrupted dumps (`NLM_F_DUMP_INTR`) when a test says so.
//! Every other kind's dump is answered empty. The tables are compared with the kernel's routes.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NLM_F_CREATE, NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REPLACE, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{Channel, Control, Settings, SyncState};
use crate::apply::Applier;
use crate::error::MirrorError;
use crate::resolver::RateLimiter;
use crate::socket::{NlIo, Recv};
use crate::stats::Counters;
use crate::sync_tests::{expected, main_routes, route};
use crate::tables::MirroredTables;

/// An IPv4 route of table main: destination, prefix length, gateway.
type Route = (u32, u8, u32);

/// `RTM_GETROUTE`.
const RTM_GETROUTE: u16 = 26;
/// Routes per dump datagram (the kernel fills a page or so; small here, so that a dump has
/// several parts and an interruption can fall between them).
const PART: usize = 4;

/// One thing a socket delivers.
enum Item {
    Datagram(Vec<u8>),
    Overrun,
}

/// The scripted kernel behind both sockets of the route channel.
#[derive(Default)]
struct Kernel {
    routes: BTreeSet<Route>,
    /// What the event socket delivers next.
    events: VecDeque<Item>,
    /// What the command socket delivers next.
    replies: VecDeque<Item>,
    /// Route dumps requested so far.
    route_dumps: usize,
    /// Route dumps still to interrupt: the dump misses a route (as a kernel walk of a
    /// changing table can), a route is added meanwhile (its event queued), and the parts
    /// after the first are flagged `NLM_F_DUMP_INTR`.
    interrupt: usize,
    /// Route dumps still to overrun: a route is added meanwhile, and its event lost
    /// (`ENOBUFS` on the event socket).
    overrun: usize,
    /// Requests still to leave unanswered (a lost reply).
    silent: usize,
    /// The next route a change during a dump adds.
    next: u32,
}

impl Kernel {
    fn new(routes: &[Route]) -> Rc<RefCell<Kernel>> {
        Rc::new(RefCell::new(Kernel {
            routes: routes.iter().copied().collect(),
            next: 0x0b00_0000,
            ..Kernel::default()
        }))
    }

    /// A change the kernel makes and announces: the route added (or replaced, for the same
    /// destination), or deleted.
    fn change(&mut self, r: Route, add: bool) {
        if add {
            self.routes.retain(|&(k, l, _)| (k, l) != (r.0, r.1));
            self.routes.insert(r);
        } else {
            self.routes.remove(&r);
        }
        self.events.push_back(Item::Datagram(event(r, add)));
    }

    /// A new route, for changes during dumps.
    fn fresh(&mut self) -> Route {
        self.next += 0x100;
        (self.next, 24, 0x0a00_0001)
    }

    /// Answers a request of message type `kind` (address family `family`) with sequence
    /// number `seq` to port `port`.
    fn answer(&mut self, kind: u16, family: u8, seq: u32, port: u32) {
        if self.silent > 0 {
            self.silent -= 1;
            return;
        }
        if kind != RTM_GETROUTE || family != libc::AF_INET as u8 {
            self.replies.push_back(Item::Datagram(done(seq, port)));
            return;
        }
        self.route_dumps += 1;
        let mut routes: Vec<Route> = self.routes.iter().copied().collect();
        let interrupted = self.interrupt > 0;
        if interrupted {
            self.interrupt -= 1;
            routes.remove(routes.len() / 2);
            let r = self.fresh();
            self.change(r, true);
        }
        if self.overrun > 0 {
            self.overrun -= 1;
            let r = self.fresh();
            self.routes.insert(r);
            self.events.push_back(Item::Overrun);
        }
        for (i, part) in routes.chunks(PART).enumerate() {
            let mut flags = NLM_F_MULTIPART;
            if interrupted && i > 0 {
                flags |= NLM_F_DUMP_INTR;
            }
            let mut datagram = Vec::new();
            for r in part {
                let m = RouteNetlinkMessage::NewRoute(route(r.0, r.1, r.2));
                datagram.extend(bytes(m, flags, seq, port));
            }
            self.replies.push_back(Item::Datagram(datagram));
        }
        self.replies.push_back(Item::Datagram(done(seq, port)));
    }
}

/// `msg` in the wire format.
fn bytes(msg: RouteNetlinkMessage, flags: u16, seq: u32, port: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    header.port_number = port;
    let mut out = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    out.finalize();
    let mut b = vec![0; out.buffer_len()];
    out.serialize(&mut b);
    b
}

/// The event for route `r` added (as `ip route add` announces it) or deleted.
fn event(r: Route, add: bool) -> Vec<u8> {
    let m = route(r.0, r.1, r.2);
    if add {
        bytes(
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
            0,
            0,
        )
    } else {
        bytes(RouteNetlinkMessage::DelRoute(m), 0, 0, 0)
    }
}

/// `NLMSG_DONE` ending the dump with `seq` to `port`.
fn done(seq: u32, port: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(20);
    b.extend(20u32.to_ne_bytes());
    b.extend(3u16.to_ne_bytes()); // NLMSG_DONE
    b.extend(NLM_F_MULTIPART.to_ne_bytes());
    b.extend(seq.to_ne_bytes());
    b.extend(port.to_ne_bytes());
    b.extend(0i32.to_ne_bytes());
    b
}

/// One of the two sockets of the route channel, served by a [`Kernel`].
struct FakeSocket {
    kernel: Rc<RefCell<Kernel>>,
    events: bool,
    port: u32,
    seq: u32,
    buf: Vec<u8>,
}

impl NlIo for FakeSocket {
    fn port(&self) -> u32 {
        self.port
    }

    fn request<I: netlink_packet_core::NetlinkSerializable>(
        &mut self,
        payload: I,
        flags: u16,
    ) -> std::io::Result<u32> {
        self.seq += 1;
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
        msg.finalize();
        let mut b = vec![0; msg.buffer_len()];
        msg.serialize(&mut b);
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        let family = b.get(16).copied().unwrap_or(0);
        self.kernel
            .borrow_mut()
            .answer(kind, family, self.seq, self.port);
        Ok(self.seq)
    }

    fn recv(&mut self) -> std::io::Result<Recv> {
        let mut kernel = self.kernel.borrow_mut();
        let queue = if self.events {
            &mut kernel.events
        } else {
            &mut kernel.replies
        };
        Ok(match queue.pop_front() {
            None => Recv::Empty,
            Some(Item::Overrun) => Recv::Overrun,
            Some(Item::Datagram(d)) => {
                self.buf = d;
                Recv::Data
            }
        })
    }

    fn datagram(&self) -> &[u8] {
        &self.buf
    }

    fn reopen(&mut self) -> Result<(), MirrorError> {
        self.port += 1000;
        Ok(())
    }

    fn wait_any(socks: &[&Self], _timeout: Duration) -> std::io::Result<Vec<bool>> {
        Ok(vec![true; socks.len()])
    }
}

/// A control loop on `kernel`'s sockets, with the tables it writes and its counters.
fn control(kernel: &Rc<RefCell<Kernel>>) -> (Control<FakeSocket>, MirroredTables, Arc<Counters>) {
    let (tables, writers) = MirroredTables::new(addr_table::NetnsId(0), false);
    let counters = Arc::new(Counters::default());
    let socket = |events, port| FakeSocket {
        kernel: Rc::clone(kernel),
        events,
        port,
        seq: 0,
        buf: Vec::new(),
    };
    let (_, requests) = mpsc::sync_channel(1);
    let control = Control {
        route: Channel {
            events: socket(true, 7),
            cmd: socket(false, 8),
        },
        xfrm: None,
        applier: Applier::new(tables.clone(), writers, None, Arc::clone(&counters)),
        requests,
        limiter: RateLimiter::new(Duration::from_millis(100), 10, Instant::now()),
        stop: Arc::new(AtomicBool::new(false)),
        sync: Arc::new(SyncState::new()),
        settings: Settings {
            poll_interval: Duration::from_millis(1),
            dump_timeout: Duration::from_secs(5),
        },
        spdinfo_polled: Instant::now(),
        sysctls_polled: Instant::now(),
        compactor: crate::compact::Compactor::default(),
        grown_checked: std::time::Instant::now(),
    };
    (control, tables, counters)
}

/// `n` routes, /24s of 10.x with two gateways.
fn routes(n: u32) -> Vec<Route> {
    (0..n)
        .map(|i| (0x0a00_0000 | (i << 8), 24, 0x0a00_0001 + (i % 2)))
        .collect()
}

/// The tables hold exactly the kernel's routes.
fn assert_mirrors(tables: &MirroredTables, kernel: &Rc<RefCell<Kernel>>) {
    let want: Vec<Route> = kernel.borrow().routes.iter().copied().collect();
    assert_eq!(main_routes(tables), expected(&want));
}

fn run(control: &mut Control<FakeSocket>, resync: bool) {
    assert!(control.full_sync(resync).is_ok(), "synchronisation failed");
}

fn step(control: &mut Control<FakeSocket>) {
    assert!(control.step().is_ok(), "control step failed");
}

#[test]
fn a_clean_start_dumps_once_and_mirrors_the_kernel() {
    let kernel = Kernel::new(&routes(23));
    let (mut control, tables, counters) = control(&kernel);
    run(&mut control, false);
    assert_mirrors(&tables, &kernel);
    let s = counters.snapshot();
    assert_eq!((s.dump_restarts, s.resyncs, s.overruns), (0, 0, 0));
    assert_eq!(kernel.borrow().route_dumps, 1);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
}

#[test]
fn an_interrupted_dump_at_start_is_restarted() {
    let kernel = Kernel::new(&routes(23));
    kernel.borrow_mut().interrupt = 1;
    let (mut control, tables, counters) = control(&kernel);
    run(&mut control, false);
    // The interrupted dump missed a route: only the restarted one has it.
    assert_mirrors(&tables, &kernel);
    assert_eq!(kernel.borrow().route_dumps, 2);
    assert_eq!(counters.snapshot().dump_restarts, 1);
}

#[test]
fn an_overrun_resynchronises_and_an_interrupted_resync_dump_sweeps_nothing_it_missed() {
    let kernel = Kernel::new(&routes(40));
    let (mut control, tables, counters) = control(&kernel);
    run(&mut control, false);
    // Changes whose events are lost: the socket reports ENOBUFS instead.
    {
        let mut k = kernel.borrow_mut();
        k.routes.remove(&(0x0a00_0300, 24, 0x0a00_0002));
        k.routes.insert((0x0c00_0000, 8, 0x0a00_0001));
        k.routes.retain(|r| r.0 != 0x0a00_0400);
        k.routes.insert((0x0a00_0400, 24, 0x0a00_0009));
        k.events.push_back(Item::Overrun);
        // and one event delivered after the loss
        k.change((0x0d00_0000, 8, 0x0a00_0002), true);
        // The resynchronising dump is interrupted (and misses a route the tables hold):
        // sweeping by it would delete that route.
        k.interrupt = 1;
    }
    step(&mut control);
    assert_mirrors(&tables, &kernel);
    let s = counters.snapshot();
    assert_eq!((s.overruns, s.resyncs, s.dump_restarts), (1, 1, 1));
    assert_eq!(kernel.borrow().route_dumps, 3);
    // Later events apply as usual.
    kernel
        .borrow_mut()
        .change((0x0a00_0500, 24, 0x0a00_0002), false);
    step(&mut control);
    assert_mirrors(&tables, &kernel);
    assert_eq!(kernel.borrow().route_dumps, 3);
}

#[test]
fn events_lost_during_a_resync_dump_resynchronise_again() {
    let kernel = Kernel::new(&routes(30));
    let (mut control, tables, counters) = control(&kernel);
    run(&mut control, false);
    {
        let mut k = kernel.borrow_mut();
        k.routes.insert((0x0c00_0000, 8, 0x0a00_0001));
        k.events.push_back(Item::Overrun);
        // The resync's route dump loses an event too (a route added meanwhile): one more.
        k.overrun = 1;
    }
    step(&mut control);
    assert_mirrors(&tables, &kernel);
    let s = counters.snapshot();
    assert_eq!((s.overruns, s.resyncs), (2, 2));
    assert_eq!(kernel.borrow().route_dumps, 3);
}

#[test]
fn deletes_of_unknown_routes_and_out_of_order_events_leave_the_kernels_routes() {
    let kernel = Kernel::new(&routes(12));
    let (mut control, tables, counters) = control(&kernel);
    // Events queued before the first dump (the sockets subscribe first): they describe a
    // past the dump already holds, and are applied after it.
    {
        let mut k = kernel.borrow_mut();
        k.change((0x0a00_0200, 24, 0x0a00_0001), false);
        k.change((0x0a00_0200, 24, 0x0a00_0003), true);
        k.change((0x0b00_0000, 8, 0x0a00_0001), true);
        k.change((0x0b00_0000, 8, 0x0a00_0001), false);
    }
    run(&mut control, false);
    assert_mirrors(&tables, &kernel);
    {
        let mut k = kernel.borrow_mut();
        // Deletes of routes the mirror never held (their adds were lost or came before the
        // dump), announced without the kernel holding them either.
        k.events
            .push_back(Item::Datagram(event((0x0e00_0000, 8, 0x0a00_0001), false)));
        k.events
            .push_back(Item::Datagram(event((0x0a00_0100, 24, 0x0a00_0007), false)));
        // The same add twice; an add, its delete and a re-add with another gateway.
        k.change((0x0f00_0000, 8, 0x0a00_0001), true);
        k.change((0x0f00_0000, 8, 0x0a00_0001), true);
        k.change((0x0a00_0900, 24, 0x0a00_0002), false);
        k.change((0x0a00_0900, 24, 0x0a00_0005), true);
    }
    step(&mut control);
    assert_mirrors(&tables, &kernel);
    let s = counters.snapshot();
    assert_eq!((s.resyncs, s.dump_restarts), (0, 0));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
}

#[test]
fn a_dump_without_an_answer_is_retried_on_a_fresh_socket() {
    let kernel = Kernel::new(&routes(9));
    let (mut control, tables, counters) = control(&kernel);
    control.settings.dump_timeout = Duration::ZERO;
    // The answer to the first request (the link dump) is lost.
    kernel.borrow_mut().silent = 1;
    run(&mut control, false);
    assert_mirrors(&tables, &kernel);
    assert_eq!(counters.snapshot().dump_restarts, 1);
    assert_eq!(control.route.cmd.port, 1008, "not reopened");
}

#[test]
fn a_table_grown_by_events_after_its_bulk_load_is_rebuilt_at_the_growth_check() {
    // 9,000 routes loaded by the first dump (in bulk), then 4,200 added by events (a
    // routing daemon's re-add): not worn (4,200 changes on 13,200 routes), but grown by
    // more than an eighth, so the growth check rebuilds it; the routes stay the kernel's.
    let kernel = Kernel::new(&routes(9_000));
    let (mut control, tables, counters) = control(&kernel);
    // No growth check until the test asks for one (a debug build on a loaded machine may
    // take longer than `GROWN_CHECK` to get there).
    control.grown_checked = Instant::now() + Duration::from_secs(3600);
    run(&mut control, false);
    {
        let mut k = kernel.borrow_mut();
        for r in (9_000..13_200).map(|i| (0x0b00_0000 | (i << 8), 24, 0x0a00_0001)) {
            k.change(r, true);
        }
    }
    while !kernel.borrow().events.is_empty() {
        step(&mut control);
    }
    step(&mut control);
    assert_mirrors(&tables, &kernel);
    assert_eq!(
        counters.snapshot().compactions,
        0,
        "not worn, growth not checked yet"
    );
    control.grown_checked = Instant::now() - crate::control::GROWN_CHECK;
    step(&mut control);
    assert_eq!(
        counters.snapshot().compactions,
        1,
        "rebuilt at the growth check"
    );
    assert_mirrors(&tables, &kernel);
    step(&mut control);
    assert_eq!(counters.snapshot().compactions, 1, "once");
}
