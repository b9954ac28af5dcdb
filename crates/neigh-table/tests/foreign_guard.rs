//! The readers refuse a guard that does not pin the default collector: the tables retire
//! replaced chains into that collector, so a pin of any other collector (or `unprotected()`)
//! would not keep the entry a lookup returns alive.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::{self as epoch, Guard};
use neigh_table::{DevConf, DevConfWriter, Link, LinkWriter, NeighWriter, Neighbour, NudState};

/// Both a foreign collector's guard and `unprotected()` must panic with the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    epoch_guard::assert_refused("neigh-table", what, f);
}

#[test]
fn readers_refuse_a_foreign_guard() {
    let mut neigh = NeighWriter::new();
    let mut links = LinkWriter::new();
    let v4 = Ipv4Addr::new(192, 0, 2, 1);
    let v6 = "fe80::1".parse::<Ipv6Addr>().unwrap();
    neigh.upsert(Neighbour::new(
        3,
        v4.into(),
        Some([2, 0, 0, 0, 0, 1]),
        NudState::REACHABLE,
    ));
    links.upsert(Link::new(3, "eth0"));
    let guard = epoch::pin();
    assert!(neigh.lookup_v4(3, v4, &guard).is_some());
    assert!(links.by_name("eth0", &guard).is_some());

    refused("NeighTable::lookup", |g| {
        let _ = neigh.lookup(3, IpAddr::V4(v4), g);
    });
    refused("NeighTable::lookup_v4", |g| {
        let _ = neigh.lookup_v4(3, v4, g);
    });
    refused("NeighTable::lookup_v6", |g| {
        let _ = neigh.lookup_v6(3, v6, g);
    });
    refused("LinkTable::get", |g| {
        let _ = links.get(3, g);
    });
    refused("LinkTable::by_name", |g| {
        let _ = links.by_name("eth0", g);
    });
}

#[test]
fn devconf_readers_refuse_a_foreign_guard_whatever_the_table_holds() {
    // Empty tables (a permissive one answers without an entry) and a filled one: the guard is
    // refused in every case, not only when an entry is read.
    let permissive = DevConfWriter::permissive();
    let empty = DevConfWriter::followed();
    let mut filled = DevConfWriter::followed();
    filled.update(false, 3, DevConf::default());
    filled.set_accept_local(3, true);
    filled.set_force_forwarding(3, true);
    for (name, t) in [
        ("permissive", &permissive),
        ("empty", &empty),
        ("filled", &filled),
    ] {
        let guard = epoch::pin();
        let _ = (t.accepts_local(3, &guard), t.ingress(3, true, &guard));
        refused(&format!("DevConfTable::accepts_local ({name})"), |g| {
            let _ = t.accepts_local(3, g);
        });
        refused(&format!("DevConfTable::ingress v4 ({name})"), |g| {
            let _ = t.ingress(3, false, g);
        });
        refused(&format!("DevConfTable::ingress v6 ({name})"), |g| {
            let _ = t.ingress(3, true, g);
        });
        refused(&format!("DevConfTable::get ({name})"), |g| {
            let _ = t.get(false, 3, g);
        });
    }
}
