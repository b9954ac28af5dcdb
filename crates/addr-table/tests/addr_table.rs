//! `AddrTable`: kernel ordering of interface lists, secondaries, `dev_find`, source selection
//! and lifetimes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use addr_table::{
    AddrConfig, AddrError, AddrTable, AddrWriter, IfAddr, IfaFlags, Label, NetnsId, Scope,
};
use crossbeam_epoch as epoch;
use proptest::prelude::*;

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn list4(t: &AddrTable, ifindex: u32) -> Vec<(Ipv4Addr, bool)> {
    let g = epoch::pin();
    t.addrs::<Ipv4Addr>(ifindex, &g)
        .iter()
        .map(|a| (a.addr, a.is_secondary()))
        .collect()
}

fn promoting() -> AddrWriter {
    AddrWriter::with_config(
        NetnsId(2),
        AddrConfig {
            promote_secondaries: true,
            ..AddrConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn ipv4_primaries_by_scope_then_secondaries_in_insertion_order() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 2)).unwrap();
    let sec = t.add(IfAddr::new(v4("10.0.0.2"), 24, 2)).unwrap();
    assert!(sec.is_secondary(), "same subnet, same prefix: secondary");
    // A different prefix length is another subnet: primary.
    t.add(IfAddr::new(v4("10.0.0.3"), 16, 2)).unwrap();
    t.add(IfAddr::new(v4("127.0.0.5"), 8, 2).with_scope(Scope::HOST))
        .unwrap();
    t.add(IfAddr::new(v4("169.254.0.1"), 16, 2).with_scope(Scope::LINK))
        .unwrap();
    t.add(IfAddr::new(v4("10.0.0.4"), 24, 2)).unwrap();
    // A caller's SECONDARY flag is ignored: recomputed.
    let p = t
        .add(IfAddr::new(v4("192.0.2.1"), 24, 2).with_flags(IfaFlags::SECONDARY))
        .unwrap();
    assert!(!p.is_secondary());
    assert_eq!(
        list4(&t, 2),
        [
            (v4("127.0.0.5"), false),
            (v4("169.254.0.1"), false),
            (v4("10.0.0.1"), false),
            (v4("10.0.0.3"), false),
            (v4("192.0.2.1"), false),
            (v4("10.0.0.2"), true),
            (v4("10.0.0.4"), true),
        ]
    );
}

#[test]
fn ipv4_errors() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 2)).unwrap();
    assert_eq!(
        t.add(IfAddr::new(v4("10.0.0.1"), 24, 2)),
        Err(AddrError::Exists)
    );
    // Same address with another prefix length is allowed (another subnet), as in the kernel.
    t.add(IfAddr::new(v4("10.0.0.1"), 25, 2)).unwrap();
    assert_eq!(
        t.add(IfAddr::new(v4("10.0.0.9"), 24, 2).with_scope(Scope::LINK)),
        Err(AddrError::ScopeMismatch)
    );
    assert_eq!(
        t.add(IfAddr::new(v4("10.0.0.9"), 33, 2)),
        Err(AddrError::PrefixLen {
            prefix_len: 33,
            max: 32
        })
    );
    assert_eq!(
        t.add(IfAddr::new(v4("10.0.0.9"), 24, 0)),
        Err(AddrError::ZeroIfindex)
    );
    assert_eq!(t.remove(v4("10.0.0.7"), 24, 2), Err(AddrError::NotFound));
    assert_eq!(t.remove(v4("10.0.0.1"), 24, 3), Err(AddrError::NotFound));
    assert_eq!(
        Label::new("a-very-long-label"),
        Err(AddrError::LabelTooLong(17))
    );
    assert_eq!(Label::new("a\0b"), Err(AddrError::LabelNul));
    assert_eq!(Label::new("eth0:1").unwrap().as_str(), "eth0:1");
    assert_eq!(t.len::<Ipv4Addr>(), 1, "one distinct address, twice");
}

#[test]
fn removing_a_primary_removes_its_secondaries_by_default() {
    let mut t = AddrWriter::new(NetnsId(1));
    for a in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        t.add(IfAddr::new(v4(a), 24, 2)).unwrap();
    }
    t.add(IfAddr::new(v4("10.1.0.1"), 24, 2)).unwrap();
    let r = t.remove(v4("10.0.0.1"), 24, 2).unwrap();
    let gone: Vec<Ipv4Addr> = r.removed.iter().map(|a| a.addr).collect();
    assert_eq!(gone, [v4("10.0.0.1"), v4("10.0.0.2"), v4("10.0.0.3")]);
    assert_eq!(r.promoted, None);
    assert_eq!(list4(&t, 2), [(v4("10.1.0.1"), false)]);
    let g = epoch::pin();
    assert_eq!(t.dev_find(v4("10.0.0.2"), None, &g), None);
    assert_eq!(t.dev_find(v4("10.1.0.1"), None, &g), Some(2));
}

#[test]
fn removing_a_primary_promotes_the_first_secondary_when_configured() {
    let mut t = promoting();
    t.add(IfAddr::new(v4("127.0.0.1"), 8, 1).with_scope(Scope::HOST))
        .unwrap();
    for a in ["10.0.0.1", "10.1.0.1", "10.0.0.2", "10.0.0.3"] {
        t.add(IfAddr::new(v4(a), 24, 1)).unwrap();
    }
    let r = t.remove(v4("10.0.0.1"), 24, 1).unwrap();
    assert_eq!(r.removed.len(), 1);
    let p = r.promoted.unwrap();
    assert_eq!((p.addr, p.is_secondary()), (v4("10.0.0.2"), false));
    assert_eq!(
        list4(&t, 1),
        [
            (v4("127.0.0.1"), false),
            (v4("10.1.0.1"), false),
            (v4("10.0.0.2"), false),
            (v4("10.0.0.3"), true),
        ]
    );
    let g = epoch::pin();
    let hashed = t
        .family::<Ipv4Addr>()
        .hash()
        .get(&v4("10.0.0.2").to_bits(), &g)
        .unwrap();
    assert_eq!(
        (hashed.ifindex(), hashed.answers()),
        (1, true),
        "the promoted address stays in the hash"
    );
}

#[test]
fn dev_find_with_the_same_address_on_two_interfaces() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v4("192.0.2.1"), 24, 3)).unwrap();
    t.add(IfAddr::new(v4("192.0.2.1"), 24, 4)).unwrap();
    let g = epoch::pin();
    assert_eq!(
        t.dev_find(v4("192.0.2.1"), None, &g),
        Some(4),
        "newest first"
    );
    assert_eq!(t.dev_find(v4("192.0.2.1"), Some(3), &g), Some(3));
    assert_eq!(t.dev_find(v4("192.0.2.1"), Some(5), &g), None);
    assert_eq!(t.len::<Ipv4Addr>(), 1);
    drop(g);
    t.remove(v4("192.0.2.1"), 24, 4).unwrap();
    let g = epoch::pin();
    assert_eq!(t.dev_find(v4("192.0.2.1"), None, &g), Some(3));
    assert!(t.is_local(IpAddr::V4(v4("192.0.2.1")), &g));
    assert!(!t.is_local(IpAddr::V4(v4("192.0.2.2")), &g));
}

#[test]
fn ipv6_lists_by_scope_and_dad_states() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v6("fe80::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("fd00::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8::2"), 64, 2).with_flags(IfaFlags::TENTATIVE))
        .unwrap();
    t.add(
        IfAddr::new(v6("2001:db8::3"), 64, 2)
            .with_flags(IfaFlags::TENTATIVE.with(IfaFlags::OPTIMISTIC)),
    )
    .unwrap();
    t.add(IfAddr::new(v6("2001:db8::4"), 64, 2).with_flags(IfaFlags::DADFAILED))
        .unwrap();
    assert_eq!(
        t.add(IfAddr::new(v6("2001:db8::1"), 48, 2)),
        Err(AddrError::Exists)
    );
    let g = epoch::pin();
    let order: Vec<Ipv6Addr> = t.addrs::<Ipv6Addr>(2, &g).iter().map(|a| a.addr).collect();
    assert_eq!(
        order,
        [
            v6("2001:db8::4"),
            v6("2001:db8::3"),
            v6("2001:db8::2"),
            v6("fd00::1"),
            v6("2001:db8::1"),
            v6("fe80::1")
        ]
    );
    assert_eq!(t.dev_find(v6("2001:db8::2"), None, &g), None, "tentative");
    assert_eq!(
        t.dev_find(v6("2001:db8::3"), None, &g),
        Some(2),
        "optimistic"
    );
    assert_eq!(t.dev_find(v6("2001:db8::4"), None, &g), None, "dad failed");
    drop(g);
    // DAD completes.
    t.update(v6("2001:db8::2"), 64, 2, |a| {
        a.flags = a.flags.without(IfaFlags::TENTATIVE)
    })
    .unwrap();
    let g = epoch::pin();
    assert_eq!(t.dev_find(v6("2001:db8::2"), Some(2), &g), Some(2));
    assert_eq!(
        t.update(v6("2001:db8::9"), 64, 2, |_| {}),
        Err(AddrError::NotFound)
    );
}

#[test]
fn select_src_v4_follows_inet_select_addr() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v4("127.0.0.1"), 8, 1).with_scope(Scope::HOST))
        .unwrap();
    t.add(IfAddr::new(v4("198.51.100.1"), 24, 1)).unwrap();
    t.add(IfAddr::new(v4("169.254.1.1"), 16, 2).with_scope(Scope::LINK))
        .unwrap();
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 2)).unwrap();
    t.add(IfAddr::new(v4("10.0.0.2"), 24, 2)).unwrap(); // secondary: never chosen
    t.add(IfAddr::new(v4("192.0.2.1"), 24, 2)).unwrap();
    let g = epoch::pin();
    // The primary whose subnet holds the destination.
    assert_eq!(
        t.select_src_v4(2, Some(v4("192.0.2.77")), Scope::UNIVERSE, &g),
        Some(v4("192.0.2.1"))
    );
    // Otherwise the first eligible primary: the link-scoped one is too narrow for universe.
    assert_eq!(
        t.select_src_v4(2, Some(v4("203.0.113.9")), Scope::UNIVERSE, &g),
        Some(v4("10.0.0.1"))
    );
    // With link scope allowed, it comes first in the list.
    assert_eq!(
        t.select_src_v4(2, Some(v4("203.0.113.9")), Scope::LINK, &g),
        Some(v4("169.254.1.1"))
    );
    assert_eq!(
        t.select_src_v4(2, None, Scope::UNIVERSE, &g),
        Some(v4("10.0.0.1"))
    );
    // An interface without addresses falls back to the other interfaces by ifindex.
    assert_eq!(
        t.select_src_v4(9, None, Scope::UNIVERSE, &g),
        Some(v4("198.51.100.1"))
    );
    assert_eq!(
        t.select_src_v4(9, None, Scope::HOST, &g),
        Some(v4("127.0.0.1"))
    );
    let empty = AddrWriter::new(NetnsId(3));
    assert_eq!(empty.select_src_v4(1, None, Scope::HOST, &g), None);
}

#[test]
fn select_src_v6_rfc6724_rules() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v6("fe80::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8:1::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8:2::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("fd00::1"), 64, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8:1::abcd"), 64, 2).with_flags(IfaFlags::TEMPORARY))
        .unwrap();
    t.add(IfAddr::new(v6("2001:db8:3::1"), 64, 2).with_flags(IfaFlags::TENTATIVE))
        .unwrap();
    let g = epoch::pin();
    let sel = |d: &str| t.select_src_v6(2, v6(d), &g);
    // Rule 1: the destination itself.
    assert_eq!(sel("2001:db8:2::1"), Some(v6("2001:db8:2::1")));
    // Rule 2: link-local destination, link-local source.
    assert_eq!(sel("fe80::99"), Some(v6("fe80::1")));
    // Rule 6: a ULA destination prefers the ULA source (label 13).
    assert_eq!(sel("fd12::5"), Some(v6("fd00::1")));
    // Rule 8: longest matching prefix among global public addresses.
    assert_eq!(sel("2001:db8:2::99"), Some(v6("2001:db8:2::1")));
    // Rule 7: public before temporary, even with an equal prefix.
    assert_eq!(sel("2001:db8:1::99"), Some(v6("2001:db8:1::1")));
    // A tentative address is never chosen, even when it is the best match.
    assert_eq!(
        sel("2001:db8:3::99"),
        Some(v6("2001:db8:2::1")),
        "2::1 shares 47 bits, 1::1 46"
    );
    drop(g);
    // Rule 3: deprecated loses against any usable address of the same scope.
    t.update(v6("2001:db8:2::1"), 64, 2, |a| {
        a.flags = a.flags.with(IfaFlags::DEPRECATED)
    })
    .unwrap();
    let g = epoch::pin();
    assert_eq!(
        t.select_src_v6(2, v6("2001:db8:2::99"), &g),
        Some(v6("2001:db8:1::1"))
    );
    assert_eq!(t.select_src_v6(7, v6("2001:db8:2::99"), &g), None);
}

#[test]
fn sweep_deprecates_then_expires_and_reports_the_next_deadline() {
    let mut t = promoting();
    let t0 = Instant::now();
    let s = |n| t0 + Duration::from_secs(n);
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 2).with_lifetimes(Some(s(100)), Some(s(50))))
        .unwrap();
    t.add(IfAddr::new(v4("10.0.0.2"), 24, 2)).unwrap();
    t.add(IfAddr::new(v6("2001:db8::1"), 64, 2).with_lifetimes(Some(s(30)), Some(s(20))))
        .unwrap();
    t.add(IfAddr::new(v6("2001:db8::2"), 64, 2)).unwrap();
    assert_eq!(t.next_deadline(), Some(s(20)));
    let nothing = t.sweep(s(10));
    assert!(nothing.v4.expired.is_empty() && nothing.v6.deprecated.is_empty());

    let first = t.sweep(s(25));
    assert_eq!(first.v6.deprecated.len(), 1);
    assert!(first.v6.deprecated[0].flags.contains(IfaFlags::DEPRECATED));
    assert!(first.v6.expired.is_empty());
    assert_eq!(
        t.next_deadline(),
        Some(s(30)),
        "deprecated addresses wait for expiry only"
    );

    let second = t.sweep(s(60));
    assert_eq!(
        second.v6.expired.iter().map(|a| a.addr).collect::<Vec<_>>(),
        [v6("2001:db8::1")]
    );
    assert_eq!(
        second
            .v4
            .deprecated
            .iter()
            .map(|a| a.addr)
            .collect::<Vec<_>>(),
        [v4("10.0.0.1")]
    );

    let third = t.sweep(s(100));
    assert_eq!(
        third.v4.expired.iter().map(|a| a.addr).collect::<Vec<_>>(),
        [v4("10.0.0.1")]
    );
    assert_eq!(
        third.v4.promoted.iter().map(|a| a.addr).collect::<Vec<_>>(),
        [v4("10.0.0.2")]
    );
    assert_eq!(t.next_deadline(), None);
    let g = epoch::pin();
    assert_eq!(t.dev_find(v4("10.0.0.1"), None, &g), None);
    assert_eq!(t.dev_find(v6("2001:db8::1"), None, &g), None);
    assert_eq!(t.dev_find(v6("2001:db8::2"), None, &g), Some(2));
}

#[test]
fn removing_an_interface_removes_its_addresses_only() {
    let mut t = AddrWriter::new(NetnsId(1));
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 2)).unwrap();
    t.add(IfAddr::new(v4("10.0.0.1"), 24, 3)).unwrap();
    t.add(IfAddr::new(v6("2001:db8::1"), 64, 3)).unwrap();
    let (gone4, gone6) = t.remove_interface(3);
    assert_eq!((gone4.len(), gone6.len()), (1, 1));
    let g = epoch::pin();
    assert_eq!(t.dev_find(v4("10.0.0.1"), None, &g), Some(2));
    assert_eq!(t.dev_find(v6("2001:db8::1"), None, &g), None);
    assert_eq!(
        t.interfaces::<Ipv4Addr>(&g)
            .map(|(i, _)| i)
            .collect::<Vec<_>>(),
        [2]
    );
    assert!(t.addrs::<Ipv6Addr>(3, &g).is_empty());
    assert!(!t.is_empty());
    assert_eq!(t.netns(), NetnsId(1));
}

#[derive(Debug, Clone)]
enum AddrOp {
    Add(u8, u8, u32),
    Remove(u8, u8, u32),
    DropIf(u32),
}

fn addr_op() -> impl Strategy<Value = AddrOp> {
    // 10.0.{0,1}.x with /24 or /23, on interfaces 1..=3: many subnets shared, many secondaries.
    prop_oneof![
        5 => (0..16u8, prop_oneof![Just(23u8), Just(24u8)], 1..4u32).prop_map(|(h, p, i)| AddrOp::Add(h, p, i)),
        4 => (0..16u8, prop_oneof![Just(23u8), Just(24u8)], 1..4u32).prop_map(|(h, p, i)| AddrOp::Remove(h, p, i)),
        1 => (1..4u32).prop_map(AddrOp::DropIf),
    ]
}

fn host(h: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, h & 1, h)
}

proptest! {
    /// After any sequence of operations, the hash and the interface lists agree, and every
    /// list keeps the kernel's invariants.
    #[test]
    fn hash_and_lists_agree(ops in proptest::collection::vec(addr_op(), 1..120), promote: bool) {
        let mut t = AddrWriter::with_config(NetnsId(9), AddrConfig { promote_secondaries: promote, ..AddrConfig::default() }).unwrap();
        for op in ops {
            match op {
                AddrOp::Add(h, p, i) => { let _ = t.add(IfAddr::new(host(h), p, i)); }
                AddrOp::Remove(h, p, i) => { let _ = t.remove(host(h), p, i); }
                AddrOp::DropIf(i) => { t.remove_interface(i); }
            }
            let g = epoch::pin();
            for h in 0..16 {
                let a = host(h);
                let mut holders = Vec::new();
                for i in 1..4 {
                    let on = t.addrs::<Ipv4Addr>(i, &g).iter().any(|x| x.addr == a);
                    prop_assert_eq!(t.dev_find(a, Some(i), &g).is_some(), on);
                    if on { holders.push(i); }
                }
                match t.dev_find(a, None, &g) {
                    Some(i) => prop_assert!(holders.contains(&i)),
                    None => prop_assert!(holders.is_empty()),
                }
            }
            for i in 1..4 {
                let list = t.addrs::<Ipv4Addr>(i, &g);
                // Primaries first, and each secondary has a primary of its subnet.
                let first_secondary = list.iter().position(|x| x.is_secondary()).unwrap_or(list.len());
                prop_assert!(list[first_secondary..].iter().all(|x| x.is_secondary()));
                for x in &list[first_secondary..] {
                    prop_assert!(list[..first_secondary].iter().any(|p| p.prefix_len == x.prefix_len
                        && (p.addr.to_bits() ^ x.addr.to_bits()) >> (32 - p.prefix_len) == 0));
                }
                // No two primaries share a subnet.
                for (n, p) in list[..first_secondary].iter().enumerate() {
                    prop_assert!(!list[..n].iter().any(|q| q.prefix_len == p.prefix_len
                        && (q.addr.to_bits() ^ p.addr.to_bits()) >> (32 - p.prefix_len) == 0));
                }
            }
        }
    }
}
