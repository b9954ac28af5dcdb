//! The kernel behaviours udp-socktab reproduces, one test each (the facts were checked against
//! Linux 6.18 in a namespace; the live comparison is `tests/tests/udp_socktab_kernel.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use udp_socktab::{
    Error, Family, Lookup, NetnsConfig, NetnsId, SockId, SockOptions, SockTable, TableConfig,
    Writer,
};

fn setup(child: u32) -> (Arc<SockTable>, Writer, NetnsId) {
    let (table, mut w) = SockTable::new(TableConfig {
        hash_entries: 256,
        seed: Some(7),
    })
    .unwrap();
    let ns = w
        .add_netns(NetnsConfig {
            child_hash_entries: child,
            ..NetnsConfig::default()
        })
        .unwrap();
    for a in ["10.0.0.1", "10.0.0.2", "2001:db8::1"] {
        w.add_local_addr(ns, a.parse().unwrap(), 2).unwrap();
    }
    (table, w, ns)
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn opts(reuseaddr: bool, reuseport: bool) -> SockOptions {
    SockOptions {
        reuseaddr,
        reuseport,
        ..SockOptions::default()
    }
}

fn lookup(table: &SockTable, ns: NetnsId, src: &str, dst: &str, hash: u32) -> Option<SockId> {
    let key = Lookup {
        netns: ns,
        src: sa(src),
        dst: sa(dst),
        ifindex: 2,
        hash,
        cpu: 0,
    };
    let guard = crossbeam_epoch::pin();
    table.lookup(&key, &guard).map(|s| s.id())
}

#[test]
fn explicit_bind_stops_at_the_first_reuseport_mate() {
    // B (SO_REUSEADDR) then A (both options): A heads the port chain, so C (SO_REUSEPORT) meets
    // A first and may share the port, though B alone would refuse it.
    let (_t, mut w, ns) = setup(0);
    let b = w.socket(ns, Family::V4, opts(true, false)).unwrap();
    let a = w.socket(ns, Family::V4, opts(true, true)).unwrap();
    let c = w.socket(ns, Family::V4, opts(false, true)).unwrap();
    w.bind(b, sa("0.0.0.0:5003")).unwrap();
    w.bind(a, sa("0.0.0.0:5003")).unwrap();
    assert!(w.bind(c, sa("0.0.0.0:5003")).is_ok());
    // The other order: B heads the chain and refuses C.
    let a2 = w.socket(ns, Family::V4, opts(true, true)).unwrap();
    let b2 = w.socket(ns, Family::V4, opts(true, false)).unwrap();
    let c2 = w.socket(ns, Family::V4, opts(false, true)).unwrap();
    w.bind(a2, sa("0.0.0.0:5004")).unwrap();
    w.bind(b2, sa("0.0.0.0:5004")).unwrap();
    assert_eq!(w.bind(c2, sa("0.0.0.0:5004")), Err(Error::AddrInUse));
}

#[test]
fn dual_stack_overlaps() {
    let (_t, mut w, ns) = setup(0);
    // A native IPv6 address makes a dual-stack socket IPv6-only: no clash with 0.0.0.0.
    let v6 = w
        .socket(ns, Family::V6DualStack, SockOptions::default())
        .unwrap();
    w.bind(v6, sa("[2001:db8::1]:5001")).unwrap();
    assert_eq!(w.sock(v6).unwrap().family(), Family::V6Only);
    let v4 = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
    assert!(w.bind(v4, sa("0.0.0.0:5001")).is_ok());
    // `::` dual-stack, connected: its IPv4 view is 127.0.0.6, which 0.0.0.0 overlaps.
    let a = w
        .socket(ns, Family::V6DualStack, SockOptions::default())
        .unwrap();
    w.bind(a, sa("[::]:5002")).unwrap();
    w.connect(a, sa("[2001:db8::2]:7000"), "2001:db8::1".parse().unwrap())
        .unwrap();
    let b = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
    assert_eq!(w.bind(b, sa("0.0.0.0:5002")), Err(Error::AddrInUse));
    // v4-mapped after 0.0.0.0: in use; IPv6-only sockets may not bind v4-mapped addresses.
    let m = w
        .socket(ns, Family::V6DualStack, SockOptions::default())
        .unwrap();
    assert_eq!(
        w.bind(m, sa("[::ffff:10.0.0.1]:5001")),
        Err(Error::AddrInUse)
    );
    let o = w
        .socket(ns, Family::V6Only, SockOptions::default())
        .unwrap();
    assert!(matches!(
        w.bind(o, sa("[::ffff:10.0.0.1]:5005")),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        w.bind(o, sa("[2001:db8::9]:5005")),
        Err(Error::AddrNotAvailable)
    );
    assert_eq!(
        w.bind(o, sa("10.0.0.1:5005")),
        Err(Error::AddrFamilyNotSupported)
    );
}

#[test]
fn disconnect_forgets_device_address_and_autobound_port() {
    let (_t, mut w, ns) = setup(0);
    let s = w
        .socket(
            ns,
            Family::V4,
            SockOptions {
                bound_dev_if: 2,
                ..SockOptions::default()
            },
        )
        .unwrap();
    w.bind(s, sa("0.0.0.0:5000")).unwrap();
    w.connect(s, sa("10.9.0.2:6000"), "10.0.0.1".parse().unwrap())
        .unwrap();
    assert_eq!(w.sock(s).unwrap().local_addr(), sa("10.0.0.1:5000"));
    w.disconnect(s).unwrap();
    let r = w.sock(s).unwrap();
    assert_eq!(
        (r.local_addr(), r.bound_dev_if(), r.remote_addr()),
        (sa("0.0.0.0:5000"), 0, None)
    );
    // A port that bind did not choose is given back.
    let t = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
    w.connect(t, sa("10.9.0.2:6000"), "10.0.0.1".parse().unwrap())
        .unwrap();
    assert_ne!(w.sock(t).unwrap().local_addr().port(), 0);
    w.disconnect(t).unwrap();
    assert_eq!(w.sock(t).unwrap().local_addr(), sa("0.0.0.0:0"));
}

#[test]
fn port_search_covers_the_range_skips_reserved_and_runs_out() {
    for child in [0, 128] {
        let (_t, mut w, ns) = setup(child);
        w.set_local_port_range(ns, 40000, 40009).unwrap();
        w.set_reserved_port(ns, 40004, true).unwrap();
        let mut ports = Vec::new();
        for _ in 0..9 {
            let s = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
            ports.push(w.bind(s, sa("0.0.0.0:0")).unwrap().port());
        }
        ports.sort_unstable();
        assert_eq!(
            ports,
            [
                40000, 40001, 40002, 40003, 40005, 40006, 40007, 40008, 40009
            ]
        );
        let s = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
        assert_eq!(w.bind(s, sa("0.0.0.0:0")), Err(Error::AddrInUse));
        assert_eq!(
            w.connect(s, sa("10.9.0.2:1"), "10.0.0.1".parse().unwrap()),
            Err(Error::Again)
        );
        // A specific address finds no port either: the wildcard sockets hold them all.
        assert_eq!(w.bind(s, sa("10.0.0.1:0")), Err(Error::AddrInUse));
        // SO_REUSEPORT sockets of one owner share ports found by the search.
        let (_t, mut w, ns) = setup(child);
        w.set_local_port_range(ns, 40000, 40000).unwrap();
        let a = w.socket(ns, Family::V4, opts(false, true)).unwrap();
        let b = w.socket(ns, Family::V4, opts(false, true)).unwrap();
        assert_eq!(w.bind(a, sa("0.0.0.0:0")).unwrap().port(), 40000);
        assert_eq!(w.bind(b, sa("0.0.0.0:0")).unwrap().port(), 40000);
        assert_eq!(w.reuseport_group(a).unwrap().0, [a, b]);
    }
}

#[test]
fn reuseport_spreads_by_hash_and_skips_connected_members() {
    let (table, mut w, ns) = setup(0);
    let members: Vec<SockId> = (0..4)
        .map(|_| {
            let s = w.socket(ns, Family::V4, opts(false, true)).unwrap();
            w.bind(s, sa("10.0.0.1:53")).unwrap();
            s
        })
        .collect();
    // (hash * 4) >> 32 picks member 0..3.
    for (k, m) in members.iter().enumerate() {
        let hash = (k as u32) << 30;
        assert_eq!(
            lookup(&table, ns, "192.0.2.9:1000", "10.0.0.1:53", hash),
            Some(*m)
        );
    }
    // Member 1 connects: hash 1 moves on to member 2; its peer still reaches it.
    w.connect(members[1], sa("192.0.2.7:7"), "10.0.0.1".parse().unwrap())
        .unwrap();
    assert!(w.reuseport_group(members[0]).unwrap().1, "has_conns");
    assert_eq!(
        lookup(&table, ns, "192.0.2.9:1000", "10.0.0.1:53", 1 << 30),
        Some(members[2])
    );
    assert_eq!(
        lookup(&table, ns, "192.0.2.7:7", "10.0.0.1:53", 0),
        Some(members[1])
    );
    // Closing member 0 moves the last member into its place.
    w.close(members[0]).unwrap();
    assert_eq!(
        w.reuseport_group(members[2]).unwrap().0,
        [members[3], members[1], members[2]]
    );
}

#[test]
fn specific_address_wins_over_wildcards_bound_before_and_after() {
    // reuseport_addr_any: for IPv4, IPv6 and v4-mapped destinations.
    for (family, specific, dst) in [
        (Family::V4, "10.0.0.1:9000", "10.0.0.1:9000"),
        (
            Family::V6DualStack,
            "[2001:db8::1]:9000",
            "[2001:db8::1]:9000",
        ),
        (
            Family::V6DualStack,
            "[::ffff:10.0.0.1]:9000",
            "10.0.0.1:9000",
        ),
    ] {
        let (table, mut w, ns) = setup(0);
        let bind = |w: &mut Writer, f: Family, a: &str| {
            let s = w.socket(ns, f, opts(false, true)).unwrap();
            w.bind(s, sa(a)).unwrap();
            s
        };
        bind(&mut w, Family::V4, "0.0.0.0:9000");
        bind(&mut w, Family::V6Only, "[::]:9000");
        let s = bind(&mut w, family, specific);
        bind(&mut w, Family::V4, "0.0.0.0:9000");
        bind(&mut w, Family::V6Only, "[::]:9000");
        let src = if dst.starts_with('[') {
            "[2001:db8::7]:1"
        } else {
            "192.0.2.7:1"
        };
        for hash in [0, 1 << 31, u32::MAX] {
            assert_eq!(lookup(&table, ns, src, dst, hash), Some(s), "{specific}");
        }
    }
}

#[test]
fn namespaces_are_apart_in_shared_and_own_tables() {
    let (table, mut w) = SockTable::new(TableConfig {
        hash_entries: 256,
        seed: None,
    })
    .unwrap();
    let shared = w.add_netns(NetnsConfig::default()).unwrap();
    let own = w
        .add_netns(NetnsConfig {
            child_hash_entries: 100,
            ..NetnsConfig::default()
        })
        .unwrap();
    assert_eq!(table.entries_of(shared), Some(256));
    assert_eq!(table.entries_of(own), Some(128));
    let a = w
        .socket(shared, Family::V4, SockOptions::default())
        .unwrap();
    let b = w.socket(own, Family::V4, SockOptions::default()).unwrap();
    w.bind(a, sa("0.0.0.0:53")).unwrap();
    w.bind(b, sa("0.0.0.0:53")).unwrap();
    assert_eq!(
        lookup(&table, shared, "192.0.2.1:1", "10.0.0.1:53", 0),
        Some(a)
    );
    assert_eq!(
        lookup(&table, own, "192.0.2.1:1", "10.0.0.1:53", 0),
        Some(b)
    );
    assert_eq!(table.chain_lengths(own).unwrap().iter().sum::<usize>(), 1);
    w.remove_netns(own).unwrap();
    assert_eq!(lookup(&table, own, "192.0.2.1:1", "10.0.0.1:53", 0), None);
    assert_eq!(
        w.socket(own, Family::V4, SockOptions::default()),
        Err(Error::UnknownNetns(own))
    );
    assert!(
        w.add_netns(NetnsConfig {
            child_hash_entries: 70000,
            ..NetnsConfig::default()
        })
        .is_err()
    );
}

#[test]
fn hash4_finds_one_of_many_connected_sockets() {
    let (table, mut w, ns) = setup(0);
    let listener = w.socket(ns, Family::V4, opts(true, false)).unwrap();
    w.bind(listener, sa("10.0.0.1:4433")).unwrap();
    let mut conns = Vec::new();
    for i in 0..500u16 {
        let s = w.socket(ns, Family::V4, opts(true, false)).unwrap();
        w.bind(s, sa("10.0.0.1:4433")).unwrap();
        w.connect(
            s,
            SocketAddr::new("192.0.2.1".parse().unwrap(), 10000 + i),
            "10.0.0.1".parse().unwrap(),
        )
        .unwrap();
        conns.push(s);
    }
    for (i, s) in conns.iter().enumerate() {
        let src = format!("192.0.2.1:{}", 10000 + i);
        assert_eq!(lookup(&table, ns, &src, "10.0.0.1:4433", 0), Some(*s));
    }
    assert_eq!(
        lookup(&table, ns, "192.0.2.1:9999", "10.0.0.1:4433", 0),
        Some(listener)
    );
}

#[test]
fn readers_keep_their_records_while_the_writer_changes_the_table() {
    let (table, mut w, ns) = setup(0);
    let s = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
    w.bind(s, sa("0.0.0.0:53")).unwrap();
    let reader = {
        let table = Arc::clone(&table);
        std::thread::spawn(move || {
            let mut found = 0;
            for _ in 0..2000 {
                let guard = crossbeam_epoch::pin();
                let key = Lookup {
                    netns: ns,
                    src: sa("192.0.2.1:1"),
                    dst: sa("10.0.0.1:53"),
                    ifindex: 2,
                    hash: 0,
                    cpu: 0,
                };
                if let Some(sk) = table.lookup(&key, &guard) {
                    assert_eq!(sk.local_addr().port(), 53);
                    found += 1;
                }
            }
            found
        })
    };
    for i in 0..300u16 {
        let t = w.socket(ns, Family::V4, opts(true, true)).unwrap();
        w.bind(t, SocketAddr::new("10.0.0.2".parse().unwrap(), 60 + i % 3))
            .unwrap();
        if i % 2 == 0 {
            w.close(t).unwrap();
        }
    }
    assert_eq!(reader.join().unwrap(), 2000);
}
