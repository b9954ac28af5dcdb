//! Differential tests against a `BTreeMap` model, and a reader/writer stress test.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use neigh_table::{
    Link, LinkFlags, LinkWriter, NeighFlags, NeighWriter, Neighbour, NudState, OperState,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Upsert(Neighbour),
    Remove(u32, IpAddr),
    RemoveIfindex(u32),
    RetainState(u16),
}

fn addr() -> impl Strategy<Value = IpAddr> {
    // A small key space so that replaces, removes of present keys and v4-mapped collisions
    // all happen.
    prop_oneof![
        (0u8..40).prop_map(|i| IpAddr::V4(Ipv4Addr::new(192, 0, 2, i))),
        (0u16..40).prop_map(|i| IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, i))),
        (0u8..4).prop_map(|i| IpAddr::V6(Ipv4Addr::new(192, 0, 2, i).to_ipv6_mapped())),
    ]
}

fn neighbour() -> impl Strategy<Value = Neighbour> {
    (
        1u32..4,
        addr(),
        proptest::option::of(any::<[u8; 6]>()),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(ifindex, addr, lladdr, state, flags)| Neighbour {
            ifindex,
            addr,
            lladdr,
            state: NudState(u16::from(state)),
            flags: NeighFlags(flags),
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => neighbour().prop_map(Op::Upsert),
        2 => (1u32..4, addr()).prop_map(|(i, a)| Op::Remove(i, a)),
        1 => (1u32..4).prop_map(Op::RemoveIfindex),
        1 => any::<u8>().prop_map(|s| Op::RetainState(u16::from(s))),
    ]
}

proptest! {
    #[test]
    fn neigh_table_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..400)) {
        let mut table = NeighWriter::new();
        let mut model: BTreeMap<(u32, IpAddr), Neighbour> = BTreeMap::new();
        let mut generation = table.generation();
        for op in ops {
            let changed = match op {
                Op::Upsert(n) => {
                    let key = (n.ifindex, n.addr);
                    let expect = model.get(&key) != Some(&n);
                    model.insert(key, n.clone());
                    prop_assert_eq!(table.upsert(n), expect);
                    expect
                }
                Op::Remove(ifindex, addr) => {
                    let expect = model.remove(&(ifindex, addr));
                    let changed = expect.is_some();
                    prop_assert_eq!(table.remove(ifindex, addr), expect);
                    changed
                }
                Op::RemoveIfindex(ifindex) => {
                    let before = model.len();
                    model.retain(|k, _| k.0 != ifindex);
                    let removed = before - model.len();
                    prop_assert_eq!(table.remove_ifindex(ifindex), removed);
                    removed > 0
                }
                Op::RetainState(bits) => {
                    let before = model.len();
                    model.retain(|_, n| n.state.0 & bits != 0);
                    let removed = before - model.len();
                    prop_assert_eq!(table.retain(|n| n.state.0 & bits != 0), removed);
                    removed > 0
                }
            };
            // The generation moves exactly when something changed.
            prop_assert_eq!(table.generation() != generation, changed);
            generation = table.generation();
            prop_assert_eq!(table.len(), model.len());
        }
        let guard = crossbeam_epoch::pin();
        for ifindex in 1..4 {
            for i in 0..40u8 {
                let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, i));
                prop_assert_eq!(table.lookup(ifindex, a, &guard), model.get(&(ifindex, a)));
            }
        }
        let dumped = table.to_vec();
        let expected: Vec<Neighbour> = model.into_values().collect();
        prop_assert_eq!(dumped, expected);
    }

    #[test]
    fn link_table_matches_a_btreemap(
        ops in proptest::collection::vec((0u32..64, any::<bool>(), 1000u32..1600), 1..300)
    ) {
        let mut table = LinkWriter::new();
        let mut model = BTreeMap::new();
        for (ifindex, add, mtu) in ops {
            if add {
                let link = Link { mtu, ..Link::new(ifindex, format!("if{ifindex}")) };
                let changed = model.insert(ifindex, link.clone()).as_ref() != Some(&link);
                prop_assert_eq!(table.upsert(link), changed);
            } else {
                prop_assert_eq!(table.remove(ifindex), model.remove(&ifindex));
            }
        }
        let guard = crossbeam_epoch::pin();
        for ifindex in 0..64 {
            prop_assert_eq!(table.get(ifindex, &guard), model.get(&ifindex));
            let by_name = table.by_name(&format!("if{ifindex}"), &guard).map(|l| l.ifindex);
            prop_assert_eq!(by_name, model.get(&ifindex).map(|l| l.ifindex));
        }
        prop_assert_eq!(table.to_vec(), model.into_values().collect::<Vec<_>>());
    }
}

#[test]
fn unresolved_and_failed_neighbours_are_not_usable() {
    let mac = Some([2, 0, 0, 0, 0, 1]);
    let a: IpAddr = "198.18.1.2".parse().unwrap();
    for (state, usable) in [
        (NudState::NONE, false),
        (NudState::INCOMPLETE, false),
        (NudState::FAILED, false),
        (NudState::REACHABLE, true),
        (NudState::STALE, true),
        (NudState::DELAY, true),
        (NudState::PROBE, true),
        (NudState::NOARP, true),
        (NudState::PERMANENT, true),
    ] {
        let n = Neighbour::new(1, a, mac, state);
        assert_eq!(n.usable_mac().is_some(), usable, "{state}");
        assert_eq!(
            Neighbour::new(1, a, None, state).usable_mac(),
            None,
            "{state}"
        );
    }
    assert_eq!(
        (NudState::STALE | NudState::PROBE).to_string(),
        "STALE PROBE"
    );
    assert_eq!(NudState(0x100 | 0x02).to_string(), "REACHABLE 0x100");
    assert_eq!(NudState::NONE.to_string(), "NONE");
}

#[test]
fn link_is_up_needs_admin_up_and_carrier() {
    let up_running = LinkFlags::UP | LinkFlags::RUNNING | LinkFlags::LOWER_UP;
    for (flags, oper, up) in [
        (up_running, OperState::UP, true),
        (up_running, OperState::UNKNOWN, true),
        (LinkFlags::UP, OperState::UNKNOWN, false),
        (LinkFlags::UP, OperState::LOWERLAYERDOWN, false),
        (
            LinkFlags::UP | LinkFlags::LOWER_UP,
            OperState::DORMANT,
            false,
        ),
        (
            LinkFlags::RUNNING | LinkFlags::LOWER_UP,
            OperState::UP,
            false,
        ),
    ] {
        let link = Link {
            flags,
            oper,
            ..Link::new(1, "x")
        };
        assert_eq!(link.is_up(), up, "{flags:?} {oper}");
    }
}

/// One writer churns volatile neighbours (growing and shrinking the table through several
/// resizes) while readers check that stable neighbours always resolve to the same MAC.
#[test]
fn readers_see_stable_entries_through_writer_churn() {
    let mut table = NeighWriter::new();
    let stable: Vec<IpAddr> = (0..64u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)))
        .collect();
    for (i, a) in stable.iter().enumerate() {
        table.upsert(Neighbour::new(
            1,
            *a,
            Some([2, 0, 0, 0, 0, i as u8]),
            NudState::REACHABLE,
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = if cfg!(miri) { 3 } else { 60 };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (table, stable, stop) = (table.reader().clone(), stable.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !stop.load(Ordering::Relaxed) || checks == 0 {
                    let guard = crossbeam_epoch::pin();
                    for (i, a) in stable.iter().enumerate() {
                        let n = table
                            .lookup(1, *a, &guard)
                            .expect("stable neighbour vanished");
                        assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, i as u8]));
                        checks += 1;
                    }
                }
                checks
            })
        })
        .collect();
    for round in 0..rounds {
        let n = if cfg!(miri) { 40 } else { 2000 };
        for i in 0..n {
            let a = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, round, i));
            table.upsert(Neighbour::new(2, a, None, NudState::INCOMPLETE));
        }
        assert_eq!(table.remove_ifindex(2), usize::from(n));
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader panicked") > 0);
    }
    assert_eq!(table.len(), stable.len());
}
