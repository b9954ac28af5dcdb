//! An entry point for the fuzz targets (`fuzz/`, built apart with nightly): arbitrary bytes
//! as a stream of netlink messages, decoded, mapped and applied as the control thread would,
//! then the tables' own consistency checked. Not part of the supported API.

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;

use crate::apply::{Applier, Kind, Seen};
use crate::map::map_rtnl;
use crate::stats::Counters;
use crate::tables::MirroredTables;

/// Decodes `data` as netlink messages (each prefixed by one control byte: bit 0 says "part
/// of a dump", bit 1 ends a dump of routes with its sweep), applies what maps, and checks
/// that the FIBs' two lookups (the fast structure and the LC-trie walk) agree on the
/// destinations of the routes applied. Returns the tables.
///
/// # Panics
/// When the tables disagree with themselves (what the fuzzer looks for), never on bad input.
#[doc(hidden)]
pub fn apply_messages(data: &[u8]) -> MirroredTables {
    let (tables, writers) = MirroredTables::new(addr_table::NetnsId(0), false);
    let mut applier = Applier::new(
        tables.clone(),
        writers,
        None,
        std::sync::Arc::new(Counters::default()),
    );
    let mut seen = Seen::default();
    let mut dumping = false;
    let mut probes = Vec::new();
    let mut rest = data;
    while let Some((&control, tail)) = rest.split_first() {
        // A netlink header starts with its length.
        let Some(len) = tail
            .get(..4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        else {
            break;
        };
        let len = (len as usize).clamp(16, tail.len().max(16)).min(tail.len());
        let (msg, next) = tail.split_at(len);
        rest = next;
        let Ok(decoded) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(msg) else {
            continue;
        };
        let NetlinkPayload::InnerMessage(inner) = decoded.payload else {
            continue;
        };
        let dump = control & 1 == 1;
        if dump && !dumping {
            applier.begin_dump(Kind::Route4);
            seen = Seen::default();
            dumping = true;
        }
        if let RouteNetlinkMessage::NewRoute(r) | RouteNetlinkMessage::DelRoute(r) = &inner {
            for a in &r.attributes {
                if let netlink_packet_route::route::RouteAttribute::Destination(
                    netlink_packet_route::route::RouteAddress::Inet(d),
                ) = a
                {
                    probes.push(u32::from(*d));
                }
            }
        }
        match map_rtnl(&inner, decoded.header.flags, dump) {
            Ok(m) if dump => applier.apply_dumped(m, &mut seen),
            Ok(m) => applier.apply(m),
            Err(e) => applier.map_failed(&e),
        }
        if dumping && control & 2 == 2 {
            applier.end_dump(Kind::Route4);
            applier.sweep(Kind::Route4, &seen);
            dumping = false;
        }
    }
    if dumping {
        applier.end_dump(Kind::Route4);
    }
    let guard = crossbeam_epoch::pin();
    for p in probes {
        for addr in [p, p | 1, p | 0xff] {
            let flow = fib_trie::Flow::to(addr);
            let fast = tables
                .fib4
                .lookup(&flow, &guard)
                .map(|r| (r.prefix, r.plen));
            let walk = tables
                .fib4
                .lookup_walk(&flow, &guard)
                .map(|r| (r.prefix, r.plen));
            assert_eq!(fast, walk, "lookup and walk disagree on {addr:#x}");
        }
    }
    drop(guard);
    tables
}

#[cfg(test)]
mod tests {
    /// The checks run, and bad input is not a panic.
    #[test]
    fn garbage_and_truncated_messages_are_ignored() {
        let _ = super::apply_messages(&[]);
        let _ = super::apply_messages(&[1, 255, 255, 255, 255, 0, 0]);
        let _ = super::apply_messages(&[0; 64]);
    }

    /// The committed seeds decode and map: the fuzzer starts from real routes.
    #[test]
    fn the_seeds_apply_routes() {
        let count = |data: &[u8]| {
            let tables = super::apply_messages(data);
            let guard = crossbeam_epoch::pin();
            tables
                .fib4
                .table(254, &guard)
                .map_or(0, |t| t.route_count())
        };
        let events = include_bytes!("../../../fuzz/seeds/netlink/events");
        // Some of the 20 are refused as the kernel would (host bits set, duplicates).
        assert!(count(events) >= 5, "{}", count(events));
        // The dump (after the events) ends with a sweep: only its 30 routes stay.
        assert_eq!(
            count(include_bytes!("../../../fuzz/seeds/netlink/dump")),
            30
        );
    }
}
