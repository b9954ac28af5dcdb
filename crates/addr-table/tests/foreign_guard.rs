//! Every public reader entry point refuses a guard that does not pin the default collector:
//! the tables retire replaced lines, lists and tables into that collector, so a pin of any
//! other collector (or `unprotected()`) would not keep what a reader copies or borrows alive.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use addr_table::{AddrWriter, FixedWriter, IfAddr, NetnsId, RhlWriter, Scope};
use crossbeam_epoch::{self as epoch, Guard};

/// Both a foreign collector's guard and `unprotected()` must panic with the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    epoch_guard::assert_refused("addr-table", what, f);
}

#[test]
fn rhltable_entry_points_refuse_a_foreign_guard() {
    // Empty and filled: the check does not depend on finding the key.
    let empty: RhlWriter<u32, u32> = RhlWriter::new();
    let mut filled: RhlWriter<u32, u32> = RhlWriter::new();
    filled.insert(1, 10).unwrap();
    filled.insert(1, 11).unwrap();
    for (name, t) in [("empty", &empty), ("filled", &filled)] {
        refused(&format!("RhlTable::get ({name})"), |g| {
            let _ = t.get(&1, g);
        });
        refused(&format!("RhlTable::find ({name})"), |g| {
            let _ = t.find(&1, g, |_| true);
        });
        refused(&format!("RhlTable::get_all ({name})"), |g| {
            let _ = t.get_all(&1, g).count();
        });
        refused(&format!("RhlTable::contains_key ({name})"), |g| {
            let _ = t.contains_key(&1, g);
        });
    }
}

#[test]
fn fixed_table_entry_points_refuse_a_foreign_guard() {
    let mut t: FixedWriter<u32, u32> = FixedWriter::new(7);
    t.insert(1, 10);
    refused("FixedTable::get", |g| {
        let _ = t.get(&1, g);
    });
    refused("FixedTable::contains_key", |g| {
        let _ = t.contains_key(&2, g);
    });
    refused("FixedTable::get_all", |g| {
        let _ = t.get_all(&1, g).count();
    });
}

#[test]
fn addr_table_entry_points_refuse_a_foreign_guard() {
    let mut table = AddrWriter::new(NetnsId(1));
    table
        .add(IfAddr::new(Ipv4Addr::new(127, 0, 0, 1), 8, 1).with_scope(Scope::HOST))
        .unwrap();
    table
        .add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 10), 24, 2))
        .unwrap();
    let v6: Ipv6Addr = "2001:db8::10".parse().unwrap();
    table.add(IfAddr::new(v6, 64, 2)).unwrap();
    let guard = epoch::pin();
    assert_eq!(
        table.dev_find(Ipv4Addr::new(192, 0, 2, 10), None, &guard),
        Some(2)
    );
    drop(guard);
    let ours = Ipv4Addr::new(192, 0, 2, 10);
    refused("AddrTable::dev_find", |g| {
        let _ = table.dev_find(ours, None, g);
    });
    refused("AddrTable::dev_find with a device", |g| {
        let _ = table.dev_find(ours, Some(2), g);
    });
    refused("AddrTable::dev_find_ip", |g| {
        let _ = table.dev_find_ip(IpAddr::V6(v6), None, g);
    });
    refused("AddrTable::is_local", |g| {
        let _ = table.is_local(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)), g);
    });
    refused("AddrTable::addrs", |g| {
        let _ = table.addrs::<Ipv4Addr>(2, g).len();
    });
    refused("AddrTable::interfaces", |g| {
        let _ = table.interfaces::<Ipv6Addr>(g).count();
    });
    refused("AddrTable::select_src_v4", |g| {
        let _ = table.select_src_v4(2, None, Scope::UNIVERSE, g);
    });
    refused("AddrTable::select_src_v6", |g| {
        let _ = table.select_src_v6(2, v6, g);
    });
    refused("FamilyTable::hash().get", |g| {
        let _ = table
            .family::<Ipv4Addr>()
            .hash()
            .contains_key(&u32::from(ours), g);
    });
}
