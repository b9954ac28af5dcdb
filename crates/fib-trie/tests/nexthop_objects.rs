//! Routes through nexthop objects: one replace changes every route using the object, a
//! blackhole object makes its routes blackholes, dead next hops fall through to shorter
//! prefixes, deletes select by object id, and lookups racing replaces see whole groups.

use std::sync::Arc;

use fib_trie::{
    FibWriter, Flow, InsertFlags, LookupError, NextHop, NextHopFlags, NexthopGroup, NexthopObject,
    NexthopWriter, Route, RouteError, RouteSelector, RouteType,
};

fn hop(gw: u32, ifindex: u32) -> NextHop<u32> {
    NextHop::new(Some(gw), ifindex)
}

#[test]
fn replacing_an_object_changes_every_route_using_it() {
    let mut fib = FibWriter::<u32>::new();
    let mut nh = NexthopWriter::new(1, NexthopGroup::hops(vec![hop(1, 2)]));
    for i in 0..1000u32 {
        fib.insert(
            &Route::via_object(0x0a00_0000 | (i << 8), 24, 254, Arc::clone(nh.reader())),
            InsertFlags::ADD,
        )
        .unwrap();
    }
    let guard = crossbeam_epoch::pin();
    let gw = |d: u32, g: &crossbeam_epoch::Guard| {
        fib.lookup(&Flow::to(d), g)
            .map(|r| r.nexthops().first().and_then(|h| h.gateway_same()))
    };
    assert_eq!(gw(0x0a00_0501, &guard), Ok(Some(1)));
    nh.replace(NexthopGroup::hops(vec![hop(7, 3)]));
    drop(guard);
    let guard = crossbeam_epoch::pin();
    for i in [0u32, 5, 999] {
        assert_eq!(gw(0x0a00_0001 | (i << 8), &guard), Ok(Some(7)));
    }
    // One shared info for the thousand routes: the object is referenced, not copied.
    assert_eq!(fib.table(254, &guard).unwrap().info_count(), 1);

    nh.replace(NexthopGroup::Blackhole);
    assert_eq!(
        fib.lookup(&Flow::to(0x0a00_0001), &crossbeam_epoch::pin()),
        Err(LookupError::Blackhole)
    );
    nh.replace(NexthopGroup::Kernel);
    let g = crossbeam_epoch::pin();
    let r = fib.lookup(&Flow::to(0x0a00_0001), &g).unwrap();
    assert_eq!(r.route_type(), RouteType::Kernel);
    assert!(r.nexthops().is_empty());
}

#[test]
fn dead_object_hops_fall_through_to_a_shorter_prefix() {
    let mut fib = FibWriter::<u32>::new();
    fib.insert(
        &Route::unicast(0, 0, 254, vec![hop(9, 9)]),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut dead = hop(1, 2);
    dead.flags = NextHopFlags::DEAD;
    let mut nh = NexthopWriter::new(4, NexthopGroup::hops(vec![dead]));
    fib.insert(
        &Route::via_object(0x0a00_0000, 8, 254, Arc::clone(nh.reader())),
        InsertFlags::ADD,
    )
    .unwrap();
    let g = crossbeam_epoch::pin();
    assert_eq!(fib.lookup(&Flow::to(0x0a01_0101), &g).unwrap().plen, 0);
    nh.replace(NexthopGroup::hops(vec![hop(1, 2)]));
    let g = crossbeam_epoch::pin();
    assert_eq!(fib.lookup(&Flow::to(0x0a01_0101), &g).unwrap().plen, 8);
}

#[test]
fn resilient_groups_pick_by_bucket_and_multipath_by_weight() {
    let mut fib = FibWriter::<u32>::new();
    let mut heavy = hop(1, 2);
    heavy.weight = 3;
    let nh = Arc::new(NexthopObject::new(
        2,
        NexthopGroup::resilient(vec![heavy.clone(), hop(2, 3)], 4),
    ));
    fib.insert(&Route::via_object(0, 0, 254, nh), InsertFlags::ADD)
        .unwrap();
    let g = crossbeam_epoch::pin();
    let r = fib.lookup(&Flow::to(5), &g).unwrap();
    assert_eq!(r.path.buckets, &[1, 0, 0, 0]);
    let picks: Vec<_> = (0..4u32)
        .map(|h| r.select_path(h).unwrap().gateway_same())
        .collect();
    assert_eq!(picks, [Some(2), Some(1), Some(1), Some(1)]);
}

#[test]
fn deletes_select_by_object_id_and_misuse_is_refused() {
    let mut fib = FibWriter::<u32>::new();
    let a = Arc::new(NexthopObject::new(1, NexthopGroup::hops(vec![hop(1, 2)])));
    let b = Arc::new(NexthopObject::new(2, NexthopGroup::hops(vec![hop(2, 2)])));
    fib.insert(&Route::via_object(0x0a00_0000, 8, 254, a), InsertFlags::ADD)
        .unwrap();
    fib.insert(
        &Route::via_object(0x0a00_0000, 8, 254, Arc::clone(&b)),
        InsertFlags::APPEND,
    )
    .unwrap();
    let mut sel = RouteSelector::new(0x0a00_0000, 8, 254);
    sel.nh_id = Some(Some(2));
    let gone = fib.delete(&sel).unwrap();
    assert_eq!(gone.info.nh_object.as_ref().map(|o| o.id()), Some(2));
    sel.nh_id = Some(None);
    assert_eq!(fib.delete(&sel), Err(RouteError::NotFound));

    let mut both = Route::via_object(0x0b00_0000, 8, 254, Arc::clone(&b));
    both.info.nexthops.push(hop(1, 1));
    assert_eq!(
        fib.insert(&both, InsertFlags::ADD),
        Err(RouteError::ObjectMisuse)
    );
    // `ip route add blackhole PREFIX nhid N`: the type decides, whatever the object.
    let mut hole = Route::via_object(0x0c00_0000, 8, 254, Arc::clone(&b));
    hole.route_type = RouteType::Blackhole;
    fib.insert(&hole, InsertFlags::ADD).unwrap();
    assert_eq!(
        fib.lookup(&Flow::to(0x0c00_0001), &crossbeam_epoch::pin()),
        Err(LookupError::Blackhole)
    );
    let mut typed = Route::via_object(0x0b00_0000, 8, 254, b);
    typed.route_type = RouteType::Local;
    assert_eq!(
        fib.insert(&typed, InsertFlags::ADD),
        Err(RouteError::ObjectMisuse)
    );
}

#[test]
fn lookups_racing_replaces_see_whole_groups() {
    let mut fib = FibWriter::<u32>::new();
    let mut nh = NexthopWriter::new(1, NexthopGroup::hops(vec![hop(1, 1), hop(1, 1)]));
    fib.insert(
        &Route::via_object(0, 0, 254, Arc::clone(nh.reader())),
        InsertFlags::ADD,
    )
    .unwrap();
    let reader = {
        let fib = Arc::clone(fib.reader());
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                let g = crossbeam_epoch::pin();
                if let Ok(r) = fib.lookup(&Flow::to(1), &g) {
                    let hops = r.nexthops();
                    // Every group written has two hops of one gateway equal to the ifindex.
                    assert_eq!(hops.len(), 2);
                    assert!(
                        hops.iter()
                            .all(|h| h.gateway_same() == Some(hops[0].ifindex))
                    );
                }
            }
        })
    };
    for i in 1..20_000u32 {
        nh.replace(NexthopGroup::hops(vec![hop(i, i), hop(i, i)]));
    }
    reader.join().unwrap();
}

#[test]
fn the_fast_structure_follows_object_replaces_as_the_walk_does() {
    let mut fib = FibWriter::<u32>::new();
    fib.insert(
        &Route::unicast(0, 0, 254, vec![hop(9, 9)]),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut objects: Vec<_> = (0..4u32)
        .map(|i| NexthopWriter::new(i, NexthopGroup::hops(vec![hop(i, 1)])))
        .collect();
    // Nested prefixes through different objects, and a plain route between them.
    for (i, plen) in [8u8, 16, 24, 28].into_iter().enumerate() {
        fib.insert(
            &Route::via_object(
                0x0a0a_0a00 & !(u32::MAX >> plen),
                plen,
                254,
                Arc::clone(objects[i].reader()),
            ),
            InsertFlags::ADD,
        )
        .unwrap();
    }
    fib.insert(
        &Route::unicast(0x0a0a_0000, 20, 254, vec![hop(20, 2)]),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut dead = hop(0, 1);
    dead.flags = NextHopFlags::DEAD;
    let groups = [
        NexthopGroup::hops(vec![dead.clone()]),
        NexthopGroup::Blackhole,
        NexthopGroup::Kernel,
        NexthopGroup::hops(vec![hop(7, 3)]),
    ];
    // Every combination of groups for the four objects: the fast lookup equals the walk.
    for combo in 0..(groups.len().pow(4)) {
        let mut c = combo;
        for o in &mut objects {
            o.replace(groups[c % groups.len()].clone());
            c /= groups.len();
        }
        let g = crossbeam_epoch::pin();
        let table = fib.table(254, &g).unwrap();
        assert!(table.fast_stats().enabled, "the fast structure answers");
        let dsts = [
            0x0a0a_0a05u32,
            0x0a0a_0a15,
            0x0a0a_0b01,
            0x0a0b_0101,
            0x0b00_0001,
        ];
        let flows = dsts.map(Flow::to);
        fib.lookup_batch(&flows, &g, |i, batched| {
            assert_eq!(
                format!("{batched:?}"),
                format!("{:?}", fib.lookup(&flows[i], &g)),
                "combination {combo}, batched, destination {:#x}",
                dsts[i]
            );
        });
        for dst in dsts {
            let flow = Flow::to(dst);
            let (fast, walk) = (table.lookup(&flow, &g), table.lookup_walk(&flow, &g));
            assert_eq!(
                format!("{fast:?}"),
                format!("{walk:?}"),
                "combination {combo}, destination {dst:#x}"
            );
        }
    }
}
