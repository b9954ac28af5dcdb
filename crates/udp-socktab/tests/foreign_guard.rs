//! The lookups refuse a guard that does not pin the default collector: the table retires
//! replaced chains and records into that collector, so a pin of any other collector (or
//! `unprotected()`) would not keep the socket a lookup returns alive.

use crossbeam_epoch::{self as epoch, Guard};
use udp_socktab::{Family, Lookup, NetnsConfig, SockOptions, SockTable, TableConfig};

/// Both a foreign collector's guard and `unprotected()` must panic with the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    epoch_guard::assert_refused("udp-socktab", what, f);
}

#[test]
fn lookups_refuse_a_foreign_guard() {
    let (table, mut writer) = SockTable::new(TableConfig::default()).unwrap();
    let ns = writer.add_netns(NetnsConfig::default()).unwrap();
    let s = writer
        .socket(ns, Family::V4, SockOptions::default())
        .unwrap();
    writer.bind(s, "0.0.0.0:53".parse().unwrap()).unwrap();
    let key = Lookup {
        netns: ns,
        src: "192.0.2.7:4000".parse().unwrap(),
        dst: "192.0.2.1:53".parse().unwrap(),
        ifindex: 2,
        hash: 7,
        cpu: 0,
    };
    let guard = epoch::pin();
    assert_eq!(table.lookup(&key, &guard).map(|sk| sk.id()), Some(s));
    refused("SockTable::lookup", |g| {
        let _ = table.lookup(&key, g);
    });
    refused("SockTable::lookup_hash2_only", |g| {
        let _ = table.lookup_hash2_only(&key, g);
    });
}
