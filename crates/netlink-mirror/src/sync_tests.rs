//! The mirror's sync logic without root: synthesised netlink messages, serialised to the wire
//! format and decoded again as the sockets would, mapped and applied as events and as
//! (resynchronising, restarted) dumps; the tables are compared with what the kernel would hold.

use std::net::Ipv4Addr;
use std::sync::Arc;

use netlink_packet_core::{
    NLM_F_CREATE, NLM_F_EXCL, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rand::{RngExt, SeedableRng, rngs::StdRng};

use crate::apply::{Applier, Kind, Seen};
use crate::map::map_rtnl;
use crate::stats::Counters;
use crate::tables::MirroredTables;

const OIF: u32 = 3;

/// An IPv4 unicast route of the main table via a gateway on [`OIF`].
pub(crate) fn route(dst: u32, plen: u8, gw: u32) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = AddressFamily::Inet;
    m.header.destination_prefix_length = plen;
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::Unicast;
    m.attributes = vec![
        RouteAttribute::Table(254),
        RouteAttribute::Destination(RouteAddress::Inet(Ipv4Addr::from(dst))),
        RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::from(gw))),
        RouteAttribute::Oif(OIF),
    ];
    m
}

/// `msg` through the wire format and back, as a socket delivers it, then mapped.
fn wire(msg: RouteNetlinkMessage, flags: u16, dump: bool) -> crate::map::Mapped {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut out = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    out.finalize();
    let mut bytes = vec![0; out.buffer_len()];
    out.serialize(&mut bytes);
    let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes).expect("decodes");
    let NetlinkPayload::InnerMessage(inner) = back.payload else {
        panic!("not an rtnetlink message")
    };
    map_rtnl(&inner, back.header.flags, dump).expect("maps")
}

fn new_route(r: &(u32, u8, u32)) -> crate::map::Mapped {
    wire(
        RouteNetlinkMessage::NewRoute(route(r.0, r.1, r.2)),
        NLM_F_CREATE | NLM_F_EXCL,
        false,
    )
}

fn del_route(r: &(u32, u8, u32)) -> crate::map::Mapped {
    wire(
        RouteNetlinkMessage::DelRoute(route(r.0, r.1, r.2)),
        0,
        false,
    )
}

fn dumped(r: &(u32, u8, u32)) -> crate::map::Mapped {
    wire(RouteNetlinkMessage::NewRoute(route(r.0, r.1, r.2)), 0, true)
}

fn applier() -> (Applier, MirroredTables, Arc<Counters>) {
    let (tables, writers) = MirroredTables::new(addr_table::NetnsId(0), false);
    let counters = Arc::new(Counters::default());
    (
        Applier::new(tables.clone(), writers, None, Arc::clone(&counters)),
        tables,
        counters,
    )
}

/// `n` distinct prefixes (mostly /24, some shorter and longer) with a few gateways.
fn prefixes(n: usize, seed: u64) -> Vec<(u32, u8, u32)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let plen = if rng.random_bool(0.7) {
            24
        } else {
            rng.random_range(8..=32u8)
        };
        let key = rng.random::<u32>() & u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0);
        if seen.insert((key, plen)) {
            out.push((key, plen, 0x0a00_0000 | rng.random_range(1..8u32)));
        }
    }
    out
}

/// Every route of table main, sorted.
pub(crate) fn main_routes(tables: &MirroredTables) -> Vec<(u32, u8, Option<u32>)> {
    let guard = crossbeam_epoch::pin();
    let Some(main) = tables.fib4.table(254, &guard) else {
        return Vec::new();
    };
    let mut out: Vec<_> = main
        .dump(&guard)
        .into_iter()
        .map(|(k, l, a)| {
            let gateway = a.info.nexthops.first().and_then(|h| h.gateway);
            (k, l, gateway.and_then(fib_trie::Gateway::same))
        })
        .collect();
    out.sort_unstable();
    out
}

pub(crate) fn expected(routes: &[(u32, u8, u32)]) -> Vec<(u32, u8, Option<u32>)> {
    let mut out: Vec<_> = routes.iter().map(|&(k, l, g)| (k, l, Some(g))).collect();
    out.sort_unstable();
    out
}

/// Both lookups (the fast structure and the LC-trie's walk) answer as the longest match in
/// `routes` for random addresses.
fn answers_as(tables: &MirroredTables, routes: &[(u32, u8, u32)], seed: u64) {
    let reference: std::collections::HashMap<(u32, u8), u32> =
        routes.iter().map(|&(k, l, g)| ((k, l), g)).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let guard = crossbeam_epoch::pin();
    for _ in 0..5000 {
        let addr = if rng.random_bool(0.5) {
            let (k, l, _) = routes[rng.random_range(0..routes.len())];
            k | (rng.random::<u32>() & !u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0))
        } else {
            rng.random()
        };
        let want = (0..=32u8).rev().find_map(|l| {
            let k = addr & u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0);
            reference.get(&(k, l)).map(|&g| (k, l, g))
        });
        for (how, got) in [
            (
                "lookup",
                tables.fib4.lookup(&fib_trie::Flow::to(addr), &guard),
            ),
            (
                "lookup_walk",
                tables.fib4.lookup_walk(&fib_trie::Flow::to(addr), &guard),
            ),
        ] {
            let got = got.ok().map(|r| {
                (
                    r.prefix,
                    r.plen,
                    r.nexthops()[0]
                        .gateway
                        .and_then(fib_trie::Gateway::same)
                        .unwrap(),
                )
            });
            assert_eq!(got, want, "{how} {}", Ipv4Addr::from(addr));
        }
    }
}

/// A resynchronising dump of routes (`ENOBUFS` or a fresh start): begin, apply each as
/// dumped, end, sweep.
fn resync(applier: &mut Applier, routes: &[(u32, u8, u32)]) {
    let mut seen = Seen::default();
    applier.begin_dump(Kind::Route4);
    for r in routes {
        applier.apply_dumped(dumped(r), &mut seen);
    }
    applier.end_dump(Kind::Route4);
    applier.sweep(Kind::Route4, &seen);
}

#[test]
fn events_then_a_resync_after_an_overrun_hold_exactly_the_kernels_routes() {
    let (mut applier, tables, counters) = applier();
    let all = prefixes(600, 1);
    let (before, after) = all.split_at(400);
    for r in before {
        applier.apply(new_route(r));
    }
    assert_eq!(main_routes(&tables), expected(before));
    // Events were lost (ENOBUFS): the kernel now holds half of the old routes and new ones.
    let now: Vec<_> = before[200..].iter().chain(after).copied().collect();
    resync(&mut applier, &now);
    assert_eq!(main_routes(&tables), expected(&now));
    answers_as(&tables, &now, 2);
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        counters.swept.load(Relaxed),
        200,
        "the routes the kernel no longer has"
    );
}

#[test]
fn a_dump_interrupted_and_restarted_sweeps_by_the_complete_dump_only() {
    let (mut applier, tables, _) = applier();
    let old = prefixes(300, 3);
    for r in &old {
        applier.apply(new_route(r));
    }
    // NLM_F_DUMP_INTR: the first attempt saw a third of the table before the kernel changed
    // it; the mirror discards that attempt's record and dumps again.
    let now: Vec<_> = old[100..].iter().chain(&prefixes(50, 4)).copied().collect();
    let mut partial = Seen::default();
    applier.begin_dump(Kind::Route4);
    for r in &now[..now.len() / 3] {
        applier.apply_dumped(dumped(r), &mut partial);
    }
    resync(&mut applier, &now);
    assert_eq!(main_routes(&tables), expected(&now));
    answers_as(&tables, &now, 5);
}

#[test]
fn deletes_of_unknown_routes_and_out_of_order_events_leave_the_right_state() {
    let (mut applier, tables, _) = applier();
    let rs = prefixes(50, 6);
    // A delete for a route never seen (its add was lost, or came before the dump): ignored.
    applier.apply(del_route(&rs[0]));
    assert_eq!(main_routes(&tables), expected(&[]));
    for r in &rs {
        applier.apply(new_route(r));
    }
    // The same add again (an event racing the dump that already held it): no duplicate.
    applier.apply(new_route(&rs[1]));
    // Deleted twice: the second finds nothing.
    applier.apply(del_route(&rs[2]));
    applier.apply(del_route(&rs[2]));
    // A delete naming another gateway does not match the route (the kernel's rule).
    let wrong_gw = (rs[3].0, rs[3].1, rs[3].2 ^ 0xff);
    applier.apply(del_route(&wrong_gw));
    let left: Vec<_> = rs
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 2)
        .map(|(_, r)| *r)
        .collect();
    assert_eq!(main_routes(&tables), expected(&left));
    answers_as(&tables, &left, 7);
}

#[test]
fn a_table_emptied_by_events_and_resynchronised_in_bulk_answers_right() {
    // Enough routes for the LC-trie's direct table; deleted one by one (a flush), then a
    // resync finds the FIB empty and bulk-loads the dump: the fib-trie bug this caught left
    // the direct table empty, so the walk answered wrongly.
    let (mut applier, tables, _) = applier();
    let first = prefixes(2 * fib_trie::DIRECT_MIN_LEAVES, 8);
    for r in &first {
        applier.apply(new_route(r));
    }
    for r in &first {
        applier.apply(del_route(r));
    }
    assert_eq!(main_routes(&tables), expected(&[]));
    let second = prefixes(2 * fib_trie::DIRECT_MIN_LEAVES, 9);
    resync(&mut applier, &second);
    assert_eq!(main_routes(&tables), expected(&second));
    answers_as(&tables, &second, 10);
}

/// Diagnosis (run by hand: `cargo test -p netlink-mirror --lib memory_cycles -- --ignored
/// --nocapture`): resident memory over mass delete and re-add cycles of 100,000 routes
/// applied as events (the heap is not trimmed: a steady level means freed memory is reused).
#[test]
#[ignore = "diagnosis, prints resident memory; not a check"]
fn memory_cycles() {
    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4
    }
    fn settle() {
        for _ in 0..2000 {
            crossbeam_epoch::pin().flush();
        }
    }
    let (mut applier, tables, _) = applier();
    let rs = prefixes(100_000, 7);
    settle();
    eprintln!("empty: {} KiB", rss_kib());
    for cycle in 0..5 {
        for r in &rs {
            applier.apply(new_route(r));
        }
        settle();
        let full = rss_kib();
        for r in &rs {
            applier.apply(del_route(r));
        }
        settle();
        eprintln!(
            "cycle {cycle}: full {full} KiB, emptied {} KiB, routes {}",
            rss_kib(),
            main_routes(&tables).len()
        );
    }
}

/// `msg` as the bytes of one netlink datagram.
fn datagram(msg: RouteNetlinkMessage, flags: u16) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut out = NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(crate::nl_nexthop::RtnlMessage::Route(msg)),
    );
    out.finalize();
    let mut bytes = vec![0; out.buffer_len()];
    out.serialize(&mut bytes);
    bytes
}

/// Diagnosis (run by hand: `cargo test -p netlink-mirror --lib memory_redump -- --ignored
/// --nocapture`): resident memory over cycles of the soak's worst
/// case: 100,000 routes deleted by events, then re-added while a route re-dump runs, so that
/// the re-add's events queue up during the dump (as the control thread's `pending`) between
/// the allocations of the dump's own routes. With `XFWD_READD` the routes are re-added by
/// events before the re-dump instead (a link flap), and the dump finds them all. Under the
/// xfwd binary's allocator: `--release --features diag-jemalloc` (or `diag-mimalloc`); the
/// figures of 2026-11-29 are in `docs/forwarder.md` ("Memory after mass changes").
#[test]
#[ignore = "diagnosis, prints resident memory; not a check"]
#[allow(unsafe_code)]
fn memory_redump_cycles() {
    use crate::nl_nexthop::RtnlMessage;
    use crate::pending::PendingEvents;
    fn rss_kib() -> String {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: mallinfo2 takes nothing and reads glibc's counters.
        let m = unsafe { libc::mallinfo2() };
        #[cfg(feature = "diag-jemalloc")]
        let je = {
            tikv_jemalloc_ctl::epoch::advance().unwrap();
            use tikv_jemalloc_ctl::stats;
            format!(
                " je: allocated {} KiB active {} KiB metadata {} KiB resident {} KiB mapped {} KiB retained {} KiB;",
                stats::allocated::read().unwrap() / 1024,
                stats::active::read().unwrap() / 1024,
                stats::metadata::read().unwrap() / 1024,
                stats::resident::read().unwrap() / 1024,
                stats::mapped::read().unwrap() / 1024,
                stats::retained::read().unwrap() / 1024
            )
        };
        #[cfg(feature = "diag-jemalloc")]
        let je = format!("{je}{}", arenas_in_use());
        #[cfg(not(feature = "diag-jemalloc"))]
        let je = String::new();
        // The peak since the last sample (VmHWM, reset after reading).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let peak = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .map_or("?", str::trim)
            .to_owned();
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        format!(
            "peak {peak}, rss {} KiB{je} (heap {} KiB: in use {} KiB, free {} KiB; mmapped {} KiB; fast arenas {} KiB)",
            pages * 4,
            m.arena / 1024,
            m.uordblks / 1024,
            m.fordblks / 1024,
            m.hblkhd / 1024,
            fib_trie::FastLpm::<u32>::arena_bytes_in_process() / 1024
        )
    }
    /// Each arena's threads, active and allocated MiB (those with pages in use).
    #[cfg(feature = "diag-jemalloc")]
    fn arenas_in_use() -> String {
        use tikv_jemalloc_ctl::raw;
        let narenas: u32 = tikv_jemalloc_ctl::arenas::narenas::read().unwrap();
        let mut out = String::from(" arenas");
        for i in 0..narenas + 2 {
            // SAFETY: each name's value is the type read (size_t or unsigned, jemalloc's
            // manual); a name of an arena that does not exist is an error, not a read.
            let read = |what: &str| unsafe {
                raw::read::<usize>(format!("stats.arenas.{i}.{what}\0").as_bytes())
            };
            let (Ok(pactive), Ok(small), Ok(large)) = (
                read("pactive"),
                read("small.allocated"),
                read("large.allocated"),
            ) else {
                continue;
            };
            // SAFETY: as above, an unsigned.
            let threads =
                unsafe { raw::read::<u32>(format!("stats.arenas.{i}.nthreads\0").as_bytes()) }
                    .unwrap_or(0);
            if pactive > 0 {
                out += &format!(
                    " a{i}:{threads}t act {:.1} alloc {:.1};",
                    (pactive * 4096) as f64 / 1048576.0,
                    (small + large) as f64 / 1048576.0
                );
            }
        }
        out
    }
    let trim = || {
        // SAFETY: malloc_trim takes no pointers.
        unsafe { libc::malloc_trim(0) };
        #[cfg(feature = "diag-jemalloc")]
        if std::env::var("XFWD_NO_PURGE").is_err() {
            // SAFETY: a void mallctl.
            unsafe {
                tikv_jemalloc_sys::mallctl(
                    c"arena.4096.purge".as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            };
        }
        #[cfg(feature = "diag-mimalloc")]
        // SAFETY: takes a bool.
        unsafe {
            libmimalloc_sys::mi_collect(true)
        };
    };
    if std::env::var("XFWD_MMAP_FIXED").is_ok() {
        // SAFETY: mallopt takes two integers.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    }
    let fast = |tables: &MirroredTables| {
        let guard = crossbeam_epoch::pin();
        tables.fib4.table(254, &guard).map(|t| {
            let f = t.fast_stats();
            let s = t.trie(&guard).stats(&guard);
            format!(
                "fast {} KiB, trie {} KiB ({} tnodes)",
                f.structure_bytes / 1024,
                s.bytes / 1024,
                s.tnodes
            )
        })
    };
    fn settle() {
        for _ in 0..2000 {
            crossbeam_epoch::pin().flush();
        }
    }
    // XFWD_THREADS=K: K other threads hold arenas as xfwd's do (the run loops, the control
    // socket, metrics, the link monitor), each having allocated once, until the end.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let hold_rx = std::sync::Arc::new(std::sync::Mutex::new(hold_rx));
    let holders: Vec<_> = (0..std::env::var("XFWD_THREADS").map_or(0, |k| k.parse().unwrap()))
        .map(|_| {
            let rx = std::sync::Arc::clone(&hold_rx);
            std::thread::spawn(move || {
                let kept = std::hint::black_box(vec![0u8; 64]);
                let _ = rx.lock().unwrap().recv();
                drop(kept);
            })
        })
        .collect();
    let (mut applier, tables, _) = applier();
    let n: usize = std::env::var("XFWD_ROUTES").map_or(100_000, |c| c.parse().unwrap());
    let rs = match std::env::var("XFWD_ROUTES_FILE") {
        // An `ip -batch` file of `route add A.B.C.D/L via G ...` lines (the soak's
        // target/soak/routes.batch: bgp-full-v4).
        Ok(path) => std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .take(n)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let (p, len) = w[2].split_once('/').unwrap();
                let p: Ipv4Addr = p.parse().unwrap();
                let gw: Ipv4Addr = w[4].parse().unwrap();
                (u32::from(p), len.parse().unwrap(), u32::from(gw))
            })
            .collect(),
        Err(_) => prefixes(n, 7),
    };
    let readd = std::env::var("XFWD_READD").is_ok();
    let adds: Vec<Vec<u8>> = rs
        .iter()
        .take(if readd { 0 } else { usize::MAX })
        .map(|r| {
            datagram(
                RouteNetlinkMessage::NewRoute(route(r.0, r.1, r.2)),
                NLM_F_CREATE | NLM_F_EXCL,
            )
        })
        .collect();
    resync(&mut applier, &rs);
    settle();
    trim();
    eprintln!("loaded: {}; {:?}", rss_kib(), fast(&tables));
    // XFWD_PENDING=decoded keeps the events decoded, as the control thread did before;
    // XFWD_PENDING=none queues none (the re-dump alone).
    let mode = std::env::var("XFWD_PENDING").unwrap_or_default();
    let (decoded, none) = (mode == "decoded", mode == "none");
    eprintln!(
        "pending kept {}",
        if decoded {
            "decoded"
        } else if none {
            "not at all"
        } else {
            "as bytes"
        }
    );
    let mut pending = PendingEvents::default();
    // XFWD_COMPACT_HERE: rebuilt on this thread (`Compactor::on_calling_thread`, measured and
    // not used by the mirror: docs/forwarder.md).
    let mut compactor = if std::env::var("XFWD_COMPACT_HERE").is_ok() {
        crate::compact::Compactor::on_calling_thread()
    } else if std::env::var("XFWD_AUTO_ARENAS").is_ok() {
        // As before the feature `jemalloc-arenas`: the thread's own arena.
        crate::compact::Compactor::with_automatic_arenas()
    } else {
        crate::compact::Compactor::default()
    };
    let mut kept: Vec<(u16, RtnlMessage)> = Vec::new();
    let cycles: usize = std::env::var("XFWD_CYCLES").map_or(6, |c| c.parse().unwrap());
    for cycle in 0..cycles {
        for r in &rs {
            applier.apply(del_route(r));
        }
        if std::env::var("XFWD_COMPACT_EMPTY").is_ok() {
            // As the mirror does once caught up after the sweep, before the re-add.
            let w = &mut applier.writers;
            eprintln!(
                "compacted emptied {}",
                compactor.compact(&mut w.fib4, &mut w.fib6)
            );
        }
        settle();
        trim();
        eprintln!("cycle {cycle} emptied: {}; {:?}", rss_kib(), fast(&tables));
        // The re-dump begins with the FIB not empty (as in the soak, where other routes
        // remain), so that its routes are inserted one by one.
        applier.apply(new_route(&rs[0]));
        if readd {
            // Re-added by events alone, as after a link flap (no dump in between).
            // XFWD_COMPACT_EVERY=N: the mirror caught up every N events (it then compacts
            // what is worn), as during a routing daemon's re-add.
            // XFWD_GROWN_EVERY=N: every N events the growth check as well
            // (`Compactor::compact_grown`, as the mirror every `GROWN_CHECK`).
            let every: usize =
                std::env::var("XFWD_COMPACT_EVERY").map_or(0, |c| c.parse().unwrap());
            let grown_every: usize =
                std::env::var("XFWD_GROWN_EVERY").map_or(0, |c| c.parse().unwrap());
            for (i, r) in rs[1..].iter().enumerate() {
                applier.apply(new_route(r));
                if grown_every > 0 && (i + 1) % grown_every == 0 {
                    let w = &mut applier.writers;
                    if compactor.compact_grown(&mut w.fib4, &mut w.fib6) > 0 {
                        eprintln!("compacted grown at {}: {}", i + 2, rss_kib());
                    }
                } else if every > 0 && (i + 1) % every == 0 {
                    let w = &mut applier.writers;
                    if compactor.compact(&mut w.fib4, &mut w.fib6) > 0 {
                        eprintln!("compacted at {}", i + 2);
                    }
                }
            }
        }
        let mut seen = Seen::default();
        applier.begin_dump(Kind::Route4);
        for (i, r) in rs.iter().enumerate() {
            applier.apply_dumped(dumped(r), &mut seen);
            // Re-added by events already (XFWD_READD): the dump finds them all, no event
            // queues during it.
            let Some(add) = adds.get(i) else { continue };
            if none {
                continue;
            } else if decoded {
                crate::socket::decode::<RtnlMessage>(
                    add,
                    |m| {
                        if let NetlinkPayload::InnerMessage(msg) = m.payload {
                            kept.push((m.header.flags, msg));
                        }
                    },
                    |_, e| panic!("{e}"),
                );
            } else {
                pending.push_datagram(add);
            }
        }
        applier.end_dump(Kind::Route4);
        applier.sweep(Kind::Route4, &seen);
        // What the dump saw (a key per route) is not the tables' memory.
        drop(seen);
        let queued = if decoded { kept.len() } else { pending.len() };
        for (flags, msg) in kept.drain(..) {
            crate::control::apply_route_event(&mut applier, &msg, flags);
        }
        kept = Vec::new();
        crate::control::apply_kept::<RtnlMessage>(&mut pending, &mut applier, |a, flags, msg| {
            crate::control::apply_route_event(a, &msg, flags);
        });
        match std::env::var("XFWD_COMPACT").as_deref() {
            Ok("here") => eprintln!("compacted {}", applier.writers.fib4.compact()),
            // As the mirror does once the growth is over (`Control::compact_worn`).
            Ok("grown") => {
                let w = &mut applier.writers;
                eprintln!(
                    "compacted grown {}",
                    compactor.compact_grown(&mut w.fib4, &mut w.fib6)
                );
            }
            Ok(_) => {
                let w = &mut applier.writers;
                eprintln!("compacted {}", compactor.compact(&mut w.fib4, &mut w.fib6));
            }
            Err(_) => {}
        }
        // XFWD_CHURN=N: steady churn after the refill, N changes (a route deleted, re-added
        // 500 changes later), the mirror caught up (a `compact` call, which starts a rebuild
        // thread whether anything is worn or not) every XFWD_CHURN_ROUND changes (default
        // 100: 1,000 changes a second, a round every 100 ms).
        let churn: usize = std::env::var("XFWD_CHURN").map_or(0, |c| c.parse().unwrap());
        let round: usize = std::env::var("XFWD_CHURN_ROUND").map_or(100, |c| c.parse().unwrap());
        let mut spawns = 0usize;
        for i in 0..churn / 2 {
            let r = &rs[(cycle * 7919 + i * 104_729) % rs.len()];
            applier.apply(del_route(r));
            applier.apply(new_route(r));
            if (2 * i + 2) % round.max(1) < 2 {
                let w = &mut applier.writers;
                compactor.compact(&mut w.fib4, &mut w.fib6);
                spawns += 1;
            }
        }
        // XFWD_SPAWNS=j (or "cycle": the cycle's number): j more rounds that rebuild nothing,
        // so that the next rebuild's thread gets the other automatic arena.
        let extra = match std::env::var("XFWD_SPAWNS").as_deref() {
            Ok("cycle") => cycle,
            Ok(j) => j.parse().unwrap(),
            Err(_) => 0,
        };
        for _ in 0..extra {
            let w = &mut applier.writers;
            compactor.compact(&mut w.fib4, &mut w.fib6);
            spawns += 1;
        }
        if churn > 0 || extra > 0 {
            eprintln!("churned {churn}, {spawns} rounds");
        }
        settle();
        trim();
        eprintln!(
            "cycle {cycle}: queued {queued}; {}; routes {}; {:?}",
            rss_kib(),
            main_routes(&tables).len(),
            fast(&tables)
        );
    }
    drop((pending, applier, tables, compactor));
    drop(hold_tx);
    for h in holders {
        h.join().unwrap();
    }
    settle();
    trim();
    eprintln!("dropped: {}", rss_kib());
}

/// `RTM_NEWNEIGH` (or `DELNEIGH`) for `10.0.0.2` on `ifindex`, reachable at `mac`.
fn neigh_msg(ifindex: u32, mac: u8, new: bool) -> crate::map::Mapped {
    use netlink_packet_route::neighbour::{
        NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
    };
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.ifindex = ifindex;
    m.header.state = NeighbourState::Reachable;
    m.attributes = vec![
        NeighbourAttribute::Destination(NeighbourAddress::Inet(Ipv4Addr::new(10, 0, 0, 2))),
        NeighbourAttribute::LinkLayerAddress(vec![2, 0, 0, 0, 0, mac]),
    ];
    if new {
        wire(RouteNetlinkMessage::NewNeighbour(m), NLM_F_CREATE, false)
    } else {
        wire(RouteNetlinkMessage::DelNeighbour(m), 0, false)
    }
}

/// `RTM_NEWADDR` (or `DELADDR`) for `10.0.0.1/24` on `ifindex`.
fn addr_msg(ifindex: u32, new: bool) -> crate::map::Mapped {
    use netlink_packet_route::address::{AddressAttribute, AddressMessage};
    let mut m = AddressMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.prefix_len = 24;
    m.header.index = ifindex;
    m.attributes = vec![
        AddressAttribute::Address(Ipv4Addr::new(10, 0, 0, 1).into()),
        AddressAttribute::Local(Ipv4Addr::new(10, 0, 0, 1).into()),
    ];
    if new {
        wire(RouteNetlinkMessage::NewAddress(m), NLM_F_CREATE, false)
    } else {
        wire(RouteNetlinkMessage::DelAddress(m), 0, false)
    }
}

/// `RTM_NEWLINK` (or `DELLINK`) for `ifindex`, named `d<ifindex>`.
fn link_msg(ifindex: u32, new: bool) -> crate::map::Mapped {
    use netlink_packet_route::link::{LinkAttribute, LinkMessage};
    let mut m = LinkMessage::default();
    m.header.index = ifindex;
    m.attributes = vec![
        LinkAttribute::IfName(format!("d{ifindex}")),
        LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
        LinkAttribute::Mtu(1500),
    ];
    if new {
        wire(RouteNetlinkMessage::NewLink(m), 0, false)
    } else {
        wire(RouteNetlinkMessage::DelLink(m), 0, false)
    }
}

#[test]
fn deletes_of_unknown_links_neighbours_and_addresses_are_ignored_and_event_order_does_not_matter() {
    let (mut applier, tables, _) = applier();
    let neighbour = |t: &MirroredTables, ifindex: u32| {
        let guard = crossbeam_epoch::pin();
        t.neigh
            .lookup_v4(ifindex, Ipv4Addr::new(10, 0, 0, 2), &guard)
            .and_then(|n| n.lladdr)
    };
    let local = |t: &MirroredTables| {
        let guard = crossbeam_epoch::pin();
        t.addrs.dev_find(Ipv4Addr::new(10, 0, 0, 1), None, &guard)
    };
    let link = |t: &MirroredTables, ifindex: u32| {
        let guard = crossbeam_epoch::pin();
        t.links.get(ifindex, &guard).map(|l| l.name.clone())
    };
    // Deletes of objects never seen (their adds were lost, or preceded the dump): nothing
    // happens, and nothing appears.
    applier.apply(neigh_msg(4, 2, false));
    applier.apply(addr_msg(4, false));
    applier.apply(link_msg(4, false));
    assert_eq!(
        (neighbour(&tables, 4), local(&tables), link(&tables, 4)),
        (None, None, None)
    );
    // Events of different groups arrive in any order (one socket per group): a neighbour and
    // an address of a link before the link itself.
    applier.apply(neigh_msg(4, 2, true));
    applier.apply(addr_msg(4, true));
    applier.apply(link_msg(4, true));
    assert_eq!(neighbour(&tables, 4), Some([2, 0, 0, 0, 0, 2]));
    assert_eq!(local(&tables), Some(4));
    assert_eq!(link(&tables, 4).as_deref(), Some("d4"));
    // A new MAC replaces the old; the same message twice changes nothing; deletes twice are
    // one delete.
    applier.apply(neigh_msg(4, 3, true));
    applier.apply(neigh_msg(4, 3, true));
    assert_eq!(neighbour(&tables, 4), Some([2, 0, 0, 0, 0, 3]));
    applier.apply(neigh_msg(4, 3, false));
    applier.apply(neigh_msg(4, 3, false));
    assert_eq!(neighbour(&tables, 4), None);
    applier.apply(addr_msg(4, false));
    applier.apply(addr_msg(4, false));
    assert_eq!(local(&tables), None);
    // A delete on another interface than the object's does not remove it.
    applier.apply(addr_msg(4, true));
    applier.apply(addr_msg(5, false));
    assert_eq!(local(&tables), Some(4));
}
