//! Route semantics of `FibTable` and `Fib`: insert flags, delete matching, lookup selectors,
//! rules; and a differential test of table lookups against a linear scan.

use crossbeam_epoch as epoch;
use fib_trie::{
    FibRule, FibTable, FibWriter, Flow, InsertFlags, LookupError, NextHop, NextHopFlags, Route,
    RouteError, RouteSelector, RouteType, RuleAction, Scope, TableLookup, ids,
};
use proptest::prelude::*;

const NET: u32 = 0x0a00_0000; // 10.0.0.0

/// A FIB's writer and its main table (routes of table 254 go there).
fn main_table() -> (FibWriter<u32>, std::sync::Arc<FibTable<u32>>) {
    let mut w = FibWriter::new();
    let t = w.table_or_create(254);
    (w, t)
}

fn via(gw: u32, ifindex: u32) -> Vec<NextHop<u32>> {
    vec![NextHop::new(Some(gw), ifindex)]
}

fn found<'g>(
    t: &FibTable<u32>,
    flow: Flow<u32>,
    g: &'g epoch::Guard,
) -> Option<fib_trie::FibResult<'g, u32>> {
    match t.lookup(&flow, g) {
        TableLookup::Found(r) => Some(r),
        _ => None,
    }
}

#[test]
fn add_is_exclusive_prepend_and_append_order() {
    let (mut w, t) = main_table();
    w.insert(&Route::unicast(NET, 8, 254, via(1, 1)), InsertFlags::ADD)
        .unwrap();
    assert_eq!(
        w.insert(&Route::unicast(NET, 8, 254, via(2, 2)), InsertFlags::ADD),
        Err(RouteError::Exists)
    );
    // The very same route again is refused even without excl.
    assert_eq!(
        w.insert(&Route::unicast(NET, 8, 254, via(1, 1)), InsertFlags::APPEND),
        Err(RouteError::Exists)
    );
    w.insert(&Route::unicast(NET, 8, 254, via(2, 2)), InsertFlags::APPEND)
        .unwrap();
    w.insert(
        &Route::unicast(NET, 8, 254, via(3, 3)),
        InsertFlags::PREPEND,
    )
    .unwrap();
    let g = &epoch::pin();
    let order: Vec<u32> = t
        .dump(g)
        .iter()
        .map(|(_, _, a)| a.info.nexthops[0].ifindex)
        .collect();
    assert_eq!(order, [3, 1, 2]);
    assert_eq!(
        found(&t, Flow::to(NET + 5), g).unwrap().alias.info.nexthops[0].ifindex,
        3
    );
    assert_eq!(t.route_count(), 3);
    assert_eq!(t.prefix_count(), 1);
}

#[test]
fn metrics_make_a_route_distinct_but_deletes_ignore_them() {
    let (mut w, t) = main_table();
    let plain = Route::unicast(NET, 8, 254, via(1, 1));
    let mtu = plain.clone().with_mtu(1400);
    w.insert(&plain, InsertFlags::ADD).unwrap();
    // The same key with other metrics is another fib_info: appended, not a duplicate.
    w.insert(&mtu, InsertFlags::APPEND).unwrap();
    assert_eq!(t.route_count(), 2);
    let g = &epoch::pin();
    let mtus: Vec<_> = t
        .dump(g)
        .iter()
        .map(|(_, _, a)| a.info.metrics.mtu())
        .collect();
    assert_eq!(mtus, [None, Some(1400)]);
    // Replace changes the MTU of the first route of the key.
    w.insert(&plain.clone().with_mtu(1280), InsertFlags::REPLACE)
        .unwrap();
    let hit = found(&t, Flow::to(NET + 1), g).unwrap();
    assert_eq!(hit.alias.info.metrics.mtu(), Some(1280));
    // A delete naming the route without metrics removes the first match, as the kernel's.
    let gone = w.delete(&RouteSelector::exact(&plain)).unwrap();
    assert_eq!(gone.info.metrics.mtu(), Some(1280));
    assert_eq!(t.route_count(), 1);
}

#[test]
fn replace_change_and_metric_order() {
    let (mut w, t) = main_table();
    assert_eq!(
        w.insert(&Route::unicast(NET, 8, 254, via(1, 1)), InsertFlags::CHANGE),
        Err(RouteError::NotFound)
    );
    w.insert(
        &Route::unicast(NET, 8, 254, via(1, 1)).with_priority(100),
        InsertFlags::REPLACE,
    )
    .unwrap();
    w.insert(
        &Route::unicast(NET, 8, 254, via(2, 2)).with_priority(10),
        InsertFlags::ADD,
    )
    .unwrap();
    let g = &epoch::pin();
    // Lower metric first.
    assert_eq!(found(&t, Flow::to(NET), g).unwrap().alias.info.priority, 10);
    w.insert(
        &Route::unicast(NET, 8, 254, via(9, 9)).with_priority(100),
        InsertFlags::REPLACE,
    )
    .unwrap();
    let hops: Vec<u32> = t
        .dump(g)
        .iter()
        .map(|(_, _, a)| a.info.nexthops[0].ifindex)
        .collect();
    assert_eq!(hops, [2, 9]);
    // Replacing with an identical route is a no-op.
    w.insert(
        &Route::unicast(NET, 8, 254, via(9, 9)).with_priority(100),
        InsertFlags::REPLACE,
    )
    .unwrap();
    assert_eq!(t.route_count(), 2);
    // A type change replaces too.
    w.insert(
        &Route::reject(NET, 8, 254, RouteType::Blackhole).with_priority(10),
        InsertFlags::REPLACE,
    )
    .unwrap();
    assert_eq!(
        t.lookup(&Flow::to(NET), g),
        TableLookup::Reject(
            LookupError::Blackhole,
            match t.lookup(&Flow::to(NET), g) {
                TableLookup::Reject(_, r) => r,
                _ => unreachable!(),
            }
        )
    );
}

#[test]
fn delete_matches_given_fields_only() {
    let (mut w, t) = main_table();
    w.insert(&Route::unicast(NET, 8, 254, via(1, 1)), InsertFlags::ADD)
        .unwrap();
    w.insert(&Route::unicast(NET, 8, 254, via(2, 2)), InsertFlags::APPEND)
        .unwrap();
    let mut sel = RouteSelector::new(NET, 8, 254);
    sel.nexthops = Some(via(2, 2));
    assert_eq!(w.delete(&sel).unwrap().info.nexthops[0].ifindex, 2);
    assert_eq!(w.delete(&sel), Err(RouteError::NotFound));
    sel.nexthops = None;
    sel.route_type = Some(RouteType::Blackhole);
    assert_eq!(w.delete(&sel), Err(RouteError::NotFound));
    sel.route_type = None;
    sel.tos = 4;
    assert_eq!(w.delete(&sel), Err(RouteError::NotFound));
    sel.tos = 0;
    assert!(w.delete(&sel).is_ok());
    assert_eq!(t.route_count(), 0);
    assert_eq!(t.prefix_count(), 0);
    assert!(matches!(
        w.delete(&RouteSelector::new(NET | 1, 8, 254)),
        Err(RouteError::Prefix(_))
    ));
}

#[test]
fn lookup_honours_tos_scope_dead_hops_and_oif() {
    let (mut w, t) = main_table();
    w.insert(&Route::unicast(NET, 8, 254, via(1, 1)), InsertFlags::ADD)
        .unwrap();
    w.insert(
        &Route::unicast(NET, 16, 254, via(2, 2)).with_tos(0x10),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut dead = Route::unicast(NET, 24, 254, via(3, 3));
    dead.info.nexthops[0].flags = NextHopFlags::DEAD;
    w.insert(&dead, InsertFlags::ADD).unwrap();
    let mut link = Route::unicast(NET, 20, 254, vec![NextHop::new(None, 4)]);
    link.info.scope = Scope::LINK;
    w.insert(&link, InsertFlags::ADD).unwrap();
    let g = &epoch::pin();
    let plen = |flow: Flow<u32>| found(&t, flow, g).map(|r| r.plen);
    assert_eq!(plen(Flow::to(NET + 1)), Some(20)); // /24 is dead, /20 link-scope ok
    assert_eq!(
        plen(Flow {
            scope: Scope::HOST,
            ..Flow::to(NET + 1)
        }),
        None
    );
    assert_eq!(
        plen(Flow {
            scope: Scope::SITE,
            ..Flow::to(NET + 1)
        }),
        Some(20)
    );
    assert_eq!(
        plen(Flow {
            oif: 2,
            ..Flow::to(NET + 1)
        }),
        None
    ); // /16 needs tos 0x10
    assert_eq!(
        plen(Flow {
            oif: 2,
            tos: 0x10,
            ..Flow::to(NET + 1)
        }),
        Some(16)
    );
    assert_eq!(
        plen(Flow {
            oif: 1,
            tos: 0x10,
            ..Flow::to(NET + 1)
        }),
        Some(8)
    );
    assert_eq!(plen(Flow::to(0x0b00_0000)), None);
}

#[test]
fn multipath_weights_and_shared_info() {
    let (mut w, t) = main_table();
    let mut hops = vec![NextHop::new(Some(1), 1), NextHop::new(Some(2), 2)];
    hops[1].weight = 3;
    w.insert(&Route::unicast(NET, 8, 254, hops.clone()), InsertFlags::ADD)
        .unwrap();
    w.insert(&Route::unicast(NET, 16, 254, hops), InsertFlags::ADD)
        .unwrap();
    assert_eq!(t.info_count(), 1, "equal route infos are shared");
    let g = &epoch::pin();
    let r = found(&t, Flow::to(NET), g).unwrap();
    let picks: Vec<u32> = (0..4u32)
        .map(|q| r.select_path(q << 30).unwrap().ifindex)
        .collect();
    assert_eq!(picks, [1, 2, 2, 2]);
    assert_eq!(
        w.insert(&Route::unicast(NET, 8, 254, vec![]), InsertFlags::ADD),
        Err(RouteError::MissingNextHop(RouteType::Unicast))
    );
    assert_eq!(
        w.insert(
            &Route {
                info: Route::unicast(0, 0, 254, via(1, 1)).info,
                ..Route::reject(0, 0, 254, RouteType::Throw)
            },
            InsertFlags::ADD
        ),
        Err(RouteError::UnexpectedNextHop(RouteType::Throw))
    );
}

#[test]
fn default_rules_merge_local_and_main() {
    let mut fib = FibWriter::<u32>::new();
    let g = &epoch::pin();
    assert_eq!(fib.lookup(&Flow::to(NET), g), Err(LookupError::NoRoute));
    let mut local = Route::unicast(NET, 8, ids::LOCAL, via(0, 1));
    local.route_type = RouteType::Local;
    fib.insert(&local, InsertFlags::ADD).unwrap();
    fib.insert(
        &Route::unicast(NET, 16, ids::MAIN, via(5, 5)),
        InsertFlags::ADD,
    )
    .unwrap();
    fib.insert(
        &Route::unicast(0, 0, ids::DEFAULT, via(7, 7)),
        InsertFlags::ADD,
    )
    .unwrap();
    // Merged: the longer main /16 wins over the local /8.
    assert_eq!(fib.lookup(&Flow::to(NET), g).unwrap().table(), ids::MAIN);
    assert_eq!(
        fib.lookup(&Flow::to(NET | 0x0001_0000), g).unwrap().table(),
        ids::LOCAL
    );
    assert_eq!(
        fib.lookup(&Flow::to(0x0b00_0000), g).unwrap().table(),
        ids::DEFAULT
    );
    // Equal length: local first.
    let mut local16 = Route::unicast(NET, 16, ids::LOCAL, via(0, 1));
    local16.route_type = RouteType::Local;
    fib.insert(&local16, InsertFlags::ADD).unwrap();
    assert_eq!(fib.lookup(&Flow::to(NET), g).unwrap().table(), ids::LOCAL);
    // Any rule change ends the merge: now local answers first whatever the length.
    fib.delete(&RouteSelector::new(NET, 16, ids::LOCAL))
        .unwrap();
    fib.add_rule(FibRule::new(40000, RuleAction::Nop)).unwrap();
    assert!(fib.has_custom_rules());
    let g = &epoch::pin();
    assert_eq!(fib.lookup(&Flow::to(NET), g).unwrap().table(), ids::LOCAL);
}

#[test]
fn rules_select_goto_throw_and_reject() {
    let mut fib = FibWriter::<u32>::new();
    fib.insert(
        &Route::unicast(0, 0, ids::MAIN, via(1, 1)),
        InsertFlags::ADD,
    )
    .unwrap();
    fib.insert(
        &Route::reject(NET, 8, 10, RouteType::Throw),
        InsertFlags::ADD,
    )
    .unwrap();
    fib.insert(&Route::unicast(0, 0, 10, via(2, 2)), InsertFlags::ADD)
        .unwrap();
    fib.insert(
        &Route::reject(0x0b00_0000, 8, 10, RouteType::Prohibit),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut from = FibRule::new(100, RuleAction::Lookup(10));
    from.src = Some((0xc0a8_0000, 16));
    fib.add_rule(from.clone()).unwrap();
    assert_eq!(fib.add_rule(from.clone()), Err(RuleError::Exists));
    let g = &epoch::pin();
    let flow = |src, dst| Flow {
        src,
        ..Flow::to(dst)
    };
    assert_eq!(
        fib.lookup(&flow(0xc0a8_0101, 0x0808_0808), g)
            .unwrap()
            .table(),
        10
    );
    // Throw: table 10 gives up on 10/8, main answers.
    assert_eq!(
        fib.lookup(&flow(0xc0a8_0101, NET + 1), g).unwrap().table(),
        ids::MAIN
    );
    assert_eq!(
        fib.lookup(&flow(0xc0a8_0101, 0x0b00_0001), g),
        Err(LookupError::Prohibit)
    );
    assert_eq!(
        fib.lookup(&flow(0x0100_0000, 0x0b00_0001), g)
            .unwrap()
            .table(),
        ids::MAIN
    );
    // Goto skips over a blackhole rule.
    let mut jump = FibRule::new(50, RuleAction::Goto(200));
    jump.iif = 3;
    fib.add_rule(jump).unwrap();
    fib.add_rule(FibRule::new(150, RuleAction::Blackhole))
        .unwrap();
    assert_eq!(
        fib.add_rule(FibRule::new(300, RuleAction::Goto(300))),
        Err(fib_trie::RuleError::BadGoto {
            priority: 300,
            target: 300
        })
    );
    let g = &epoch::pin();
    assert_eq!(
        fib.lookup(&Flow::to(0x0808_0808), g),
        Err(LookupError::Blackhole)
    );
    // Goto 200 has no target rule yet: skipped, so the blackhole still applies.
    assert_eq!(
        fib.lookup(
            &Flow {
                iif: 3,
                ..Flow::to(1)
            },
            g
        ),
        Err(LookupError::Blackhole)
    );
    let mut marked = FibRule::new(200, RuleAction::Lookup(ids::MAIN));
    (marked.fwmark, marked.fwmask, marked.invert) = (1, 1, true);
    fib.add_rule(marked.clone()).unwrap();
    let g = &epoch::pin();
    assert_eq!(
        fib.lookup(
            &Flow {
                iif: 3,
                ..Flow::to(1)
            },
            g
        )
        .unwrap()
        .table(),
        ids::MAIN
    );
    // `not fwmark 1`: a marked flow does not match, falls to local/main rules after 150? No:
    // the goto lands on rule 200 which does not match, so evaluation continues after it.
    assert_eq!(
        fib.lookup(
            &Flow {
                iif: 3,
                mark: 1,
                ..Flow::to(1)
            },
            g
        )
        .unwrap()
        .table(),
        ids::MAIN
    );
    fib.add_rule(FibRule::new(250, RuleAction::Unreachable))
        .unwrap();
    let g = &epoch::pin();
    assert_eq!(
        fib.lookup(
            &Flow {
                iif: 3,
                mark: 1,
                ..Flow::to(1)
            },
            g
        ),
        Err(LookupError::NoRoute)
    );
    fib.delete_rule(&marked).unwrap();
    assert_eq!(fib.delete_rule(&marked), Err(RuleError::NotFound));
}

/// A "kernel decides" rule (the stand-in of a kernel rule the FIB cannot represent) answers a
/// kernel route of prefix length 0 for the flows its selectors match, ahead of the rules after
/// it, and leaves the others to them.
#[test]
fn kernel_rule_answers_kernel_decides_for_what_it_matches() {
    let mut fib = FibWriter::<u32>::new();
    fib.insert(
        &Route::unicast(NET, 8, ids::MAIN, via(0xc0a8_0001, 2)),
        InsertFlags::ADD,
    )
    .unwrap();
    let mut rule = FibRule::new(100, RuleAction::Kernel);
    rule.src = Some((0xc0a8_0000, 16));
    fib.add_rule(rule.clone()).unwrap();
    let g = &epoch::pin();
    let from = |src: u32| Flow {
        src,
        ..Flow::to(NET | 1)
    };
    let r = fib.lookup(&from(0xc0a8_0101), g).unwrap();
    assert_eq!((r.route_type(), r.plen), (RouteType::Kernel, 0));
    assert!(r.nexthops().is_empty());
    let r = fib.lookup(&from(0x0b00_0001), g).unwrap();
    assert_eq!(
        (r.route_type(), r.plen, r.table()),
        (RouteType::Unicast, 8, ids::MAIN)
    );
    // Ahead of a route of any length, even where no table has a route.
    assert_eq!(
        fib.lookup(
            &Flow {
                src: 0xc0a8_0101,
                ..Flow::to(0x0808_0808)
            },
            g
        )
        .map(|r| r.route_type()),
        Ok(RouteType::Kernel)
    );
    fib.delete_rule(&rule).unwrap();
    let g = &epoch::pin();
    assert_eq!(
        fib.lookup(&from(0xc0a8_0101), g).map(|r| r.route_type()),
        Ok(RouteType::Unicast)
    );
}

use fib_trie::RuleError;

/// A route as the linear-scan oracle keeps it.
#[derive(Clone, Debug)]
struct Flat {
    route: Route<u32>,
}

fn route_strategy() -> impl Strategy<Value = Route<u32>> {
    let prefix = (
        prop::sample::select(vec![
            0u32,
            0x0a00_0000,
            0x0a0a_0000,
            0xc0a8_0100,
            0xffff_ff00,
        ]),
        any::<u32>(),
        0u8..=32,
    )
        .prop_map(|(base, noise, plen)| {
            (
                (base ^ (noise & 0x0001_0f0f)) & u32::prefix_mask(plen),
                plen,
            )
        });
    let kind = prop::sample::select(vec![
        RouteType::Unicast,
        RouteType::Unicast,
        RouteType::Local,
        RouteType::Broadcast,
        RouteType::Anycast,
        RouteType::Multicast,
        RouteType::Blackhole,
        RouteType::Unreachable,
        RouteType::Prohibit,
        RouteType::Throw,
    ]);
    (
        prefix,
        kind,
        prop::sample::select(vec![0u8, 0x10, 0x20]),
        0u32..4,
        1u32..4,
        any::<bool>(),
        prop::sample::select(vec![0u8, 200, 253]),
    )
        .prop_map(|((p, l), kind, tos, prio, ifindex, dead, scope)| {
            let mut r = if kind.has_next_hops() {
                let mut hop = NextHop::new(Some(ifindex), ifindex);
                if dead {
                    hop.flags = NextHopFlags::DEAD;
                }
                let mut r = Route::unicast(p, l, 254, vec![hop]);
                r.route_type = kind;
                r
            } else {
                Route::reject(p, l, 254, kind)
            };
            r.tos = tos;
            r.info.priority = prio;
            r.info.scope = Scope(scope);
            r
        })
}

use fib_trie::TrieKey;

/// The oracle: among routes covering `dst` that the lookup may take, the longest prefix, then
/// tos descending, then metric ascending (routes are added with ADD, so keys are unique).
fn oracle(routes: &[Flat], flow: &Flow<u32>) -> Option<(u32, u8, RouteType, u32)> {
    routes
        .iter()
        .map(|f| &f.route)
        .filter(|r| (flow.dst ^ r.prefix) & u32::prefix_mask(r.plen) == 0)
        .filter(|r| r.tos == 0 || r.tos == flow.tos)
        .filter(|r| r.info.scope >= flow.scope)
        .filter(|r| {
            !r.route_type.has_next_hops()
                || r.info
                    .nexthops
                    .iter()
                    .any(|h| h.is_alive() && (flow.oif == 0 || h.ifindex == flow.oif))
        })
        .min_by_key(|r| {
            (
                std::cmp::Reverse(r.plen),
                std::cmp::Reverse(r.tos),
                r.info.priority,
            )
        })
        .map(|r| (r.prefix, r.plen, r.route_type, r.info.priority))
}

proptest! {
    #[test]
    fn table_lookup_matches_linear_scan(
        routes in prop::collection::vec(route_strategy(), 1..80),
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        flows in prop::collection::vec((any::<u32>(), prop::sample::select(vec![0u8, 0x10, 0x20]), 0u32..4, prop::sample::select(vec![0u8, 200, 254])), 1..40),
    ) {
        let (mut w, t) = main_table();
        let mut flat: Vec<Flat> = Vec::new();
        for r in routes {
            let key_taken = flat.iter().any(|f| f.route.prefix == r.prefix && f.route.plen == r.plen && f.route.tos == r.tos && f.route.info.priority == r.info.priority);
            let res = w.insert(&r, InsertFlags::ADD);
            prop_assert_eq!(res.is_err(), key_taken);
            if !key_taken {
                flat.push(Flat { route: r });
            }
        }
        for d in deletes {
            if flat.is_empty() { break; }
            let f = flat.remove(d.index(flat.len()));
            prop_assert!(w.delete(&RouteSelector::exact(&f.route)).is_ok());
            prop_assert_eq!(w.delete(&RouteSelector::exact(&f.route)), Err(RouteError::NotFound));
        }
        prop_assert_eq!(t.route_count(), flat.len());
        t.trie(&epoch::pin()).check_invariants().unwrap();
        let g = &epoch::pin();
        let probes = flows.iter().map(|&(d, tos, oif, scope)| (d, tos, oif, scope))
            .chain(flat.iter().map(|f| (f.route.prefix, f.route.tos, 0, 0)));
        for (dst, tos, oif, scope) in probes {
            let flow = Flow { tos, oif, scope: Scope(scope), ..Flow::to(dst) };
            let got = match t.lookup(&flow, g) {
                TableLookup::Found(r) | TableLookup::Reject(_, r) => Some((r.prefix, r.plen, r.route_type(), r.alias.info.priority)),
                TableLookup::Continue => None,
            };
            let want = oracle(&flat, &flow);
            // The fast structure and the LC-trie walk answer alike.
            prop_assert_eq!(t.lookup(&flow, g), t.lookup_walk(&flow, g), "flow {:?}", flow);
            // A throw answers "continue": compare what it hides.
            let got_cmp = got.filter(|g| g.2 != RouteType::Throw);
            let want_cmp = want.filter(|w| w.2 != RouteType::Throw);
            prop_assert_eq!(got_cmp, want_cmp, "flow {:?}", flow);
        }
        // The dump is ordered by key, and holds every route once.
        let dump = t.dump(g);
        prop_assert!(dump.windows(2).all(|w| w[0].0 <= w[1].0));
        prop_assert_eq!(dump.len(), flat.len());
    }
}

/// One step of the merge/unmerge differential: a route change in local, main or default, or a
/// rule change (the first of which unmerges local and main).
#[derive(Clone, Debug)]
enum Step {
    Add(Route<u32>),
    Delete(prop::sample::Index),
    AddRule(u32),
    DeleteRule(prop::sample::Index),
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let table = prop::sample::select(vec![ids::LOCAL, ids::MAIN, ids::MAIN, ids::DEFAULT]);
    prop_oneof![
        // Few distinct prefixes, so that local and main often hold the same one.
        8 => (route_strategy(), table, prop::sample::select(vec![(0u32, 0u8), (NET, 8), (NET, 16), (NET | 0x0001_0000, 16), (NET, 24), (NET | 0x0101_0100, 24)]), any::<bool>()).prop_map(|(mut r, t, (p, l), coarse)| {
            r.table = t;
            if coarse {
                (r.prefix, r.plen) = (p, l);
            }
            Step::Add(r)
        }),
        3 => any::<prop::sample::Index>().prop_map(Step::Delete),
        1 => (1u32..30000).prop_map(Step::AddRule),
        1 => any::<prop::sample::Index>().prop_map(Step::DeleteRule),
    ]
}

/// What `Fib::lookup` should answer with the default rules (plus `nop` rules once `merged` is
/// false): (table, prefix, plen, metric) or the error.
fn fib_oracle(
    routes: &[Route<u32>],
    merged: bool,
    flow: &Flow<u32>,
) -> Result<(u32, u32, u8, u32), LookupError> {
    let best = |tables: &[u32]| {
        routes
            .iter()
            .filter(|r| tables.contains(&r.table))
            .filter(|r| (flow.dst ^ r.prefix) & u32::prefix_mask(r.plen) == 0)
            .filter(|r| r.tos == 0 || r.tos == flow.tos)
            .filter(|r| r.info.scope >= flow.scope)
            .filter(|r| {
                !r.route_type.has_next_hops()
                    || r.info
                        .nexthops
                        .iter()
                        .any(|h| h.is_alive() && (flow.oif == 0 || h.ifindex == flow.oif))
            })
            // The merged trie's order: longer prefix, then local before main, tos, metric.
            .min_by_key(|r| {
                (
                    std::cmp::Reverse(r.plen),
                    std::cmp::Reverse(r.table),
                    std::cmp::Reverse(r.tos),
                    r.info.priority,
                )
            })
            .filter(|r| r.route_type != RouteType::Throw)
    };
    let lookups: &[&[u32]] = if merged {
        &[&[ids::LOCAL, ids::MAIN], &[ids::DEFAULT]]
    } else {
        &[&[ids::LOCAL], &[ids::MAIN], &[ids::DEFAULT]]
    };
    for tables in lookups {
        if let Some(r) = best(tables) {
            return match r.route_type {
                RouteType::Blackhole => Err(LookupError::Blackhole),
                RouteType::Unreachable => Err(LookupError::Unreachable),
                RouteType::Prohibit => Err(LookupError::Prohibit),
                _ => Ok((r.table, r.prefix, r.plen, r.info.priority)),
            };
        }
    }
    Err(LookupError::NoRoute)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn fib_merges_until_the_first_rule_and_answers_the_same(
        steps in prop::collection::vec(step_strategy(), 1..80),
        flows in prop::collection::vec((any::<u32>(), prop::sample::select(vec![0u8, 0x10]), 0u32..3, prop::sample::select(vec![0u8, 254])), 8),
    ) {
        let mut fib = FibWriter::<u32>::new();
        let mut routes: Vec<Route<u32>> = Vec::new();
        let mut rules: Vec<FibRule<u32>> = Vec::new();
        let mut merged = true;
        for step in steps {
            match step {
                Step::Add(r) => {
                    let taken = routes.iter().any(|o| o.table == r.table && o.prefix == r.prefix && o.plen == r.plen && o.tos == r.tos && o.info.priority == r.info.priority);
                    prop_assert_eq!(fib.insert(&r, InsertFlags::ADD).is_err(), taken);
                    if !taken {
                        routes.push(r);
                    }
                }
                Step::Delete(i) if !routes.is_empty() => {
                    let r = routes.remove(i.index(routes.len()));
                    prop_assert!(fib.delete(&RouteSelector::exact(&r)).is_ok());
                }
                Step::AddRule(priority) => {
                    let rule = FibRule::new(priority, RuleAction::Nop);
                    prop_assert_eq!(fib.add_rule(rule.clone()).is_err(), rules.contains(&rule));
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                    merged = false;
                }
                Step::DeleteRule(i) if !rules.is_empty() => {
                    let rule = rules.remove(i.index(rules.len()));
                    prop_assert!(fib.delete_rule(&rule).is_ok());
                    merged = false;
                }
                Step::Delete(_) | Step::DeleteRule(_) => {}
            }
            prop_assert_eq!(fib.is_merged(), merged);
            let g = &epoch::pin();
            let probes = flows.iter().copied()
                .chain(routes.iter().rev().take(4).map(|r| (r.prefix, r.tos, 0, 0)));
            let probes: Vec<Flow<u32>> = probes
                .map(|(dst, tos, oif, scope)| Flow { tos, oif, scope: Scope(scope), ..Flow::to(dst) })
                .collect();
            for flow in &probes {
                let got = fib.lookup(flow, g).map(|r| (r.table(), r.prefix, r.plen, r.alias.info.priority));
                prop_assert_eq!(got, fib_oracle(&routes, merged, flow), "flow {:?}", flow);
                prop_assert_eq!(fib.lookup(flow, g), fib.lookup_walk(flow, g), "flow {:?}", flow);
            }
            // The batched lookup answers each flow as the lookup of that flow alone.
            let mut batched = Vec::new();
            fib.lookup_batch(&probes, g, |i, r| batched.push((i, r)));
            prop_assert_eq!(batched.len(), probes.len());
            for (j, (i, r)) in batched.into_iter().enumerate() {
                prop_assert_eq!(i, j);
                prop_assert_eq!(r, fib.lookup(&probes[i], g), "batched, flow {:?}", probes[i]);
            }
        }
        // Each table holds exactly its routes, merged or not.
        let g = &epoch::pin();
        for id in [ids::LOCAL, ids::MAIN, ids::DEFAULT] {
            let t = fib.table(id, g).unwrap();
            let mut want: Vec<(u32, u8, u8, u32)> = routes.iter().filter(|r| r.table == id)
                .map(|r| (r.prefix, r.plen, r.tos, r.info.priority)).collect();
            let mut got: Vec<(u32, u8, u8, u32)> = t.dump(g).iter()
                .map(|(k, l, a)| (*k, *l, a.tos, a.info.priority)).collect();
            want.sort_unstable();
            got.sort_unstable();
            prop_assert_eq!(t.route_count(), want.len());
            let mut prefixes: Vec<u32> = want.iter().map(|w| w.0).collect();
            prefixes.dedup();
            prop_assert_eq!(t.prefix_count(), prefixes.len());
            prop_assert_eq!(got, want);
            t.trie(g).check_invariants().unwrap();
        }
    }
}

proptest! {
    /// `Fib::insert_many` builds the tables that one `APPEND` insert per route builds: the same
    /// routes in the same order within each prefix, and the same answers.
    #[test]
    fn bulk_load_equals_one_by_one_appends(
        routes in prop::collection::vec(route_strategy(), 1..120),
        tables in prop::collection::vec(prop::sample::select(vec![ids::LOCAL, ids::MAIN, ids::DEFAULT, 100]), 120),
        flows in prop::collection::vec((any::<u32>(), prop::sample::select(vec![0u8, 0x10]), 0u32..3), 1..40),
    ) {
        let routes: Vec<Route<u32>> = routes.into_iter().zip(tables).map(|(mut r, t)| { r.table = t; r }).collect();
        let mut bulk = FibWriter::<u32>::new();
        let mut one = FibWriter::<u32>::new();
        let mut added = 0;
        for r in &routes {
            match one.insert(r, InsertFlags::APPEND) {
                Ok(()) => added += 1,
                Err(RouteError::Exists) => {}
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
        }
        prop_assert_eq!(bulk.insert_many(&routes), Ok(added));
        let g = &epoch::pin();
        for id in one.table_ids() {
            let (a, b) = (bulk.table(id, g).unwrap(), one.table(id, g).unwrap());
            let dump = |t: &FibTable<u32>| t.dump(g).iter().map(|(k, l, a)| (*k, *l, (*a).clone())).collect::<Vec<_>>();
            prop_assert_eq!(dump(a), dump(b), "table {}", id);
            prop_assert_eq!((a.route_count(), a.prefix_count()), (b.route_count(), b.prefix_count()));
            a.trie(g).check_invariants().unwrap();
        }
        let probes = flows.iter().copied().chain(routes.iter().map(|r| (r.prefix, 0, 0)));
        for (dst, tos, oif) in probes {
            let flow = Flow { tos, oif, ..Flow::to(dst) };
            prop_assert_eq!(bulk.lookup(&flow, g), one.lookup(&flow, g), "flow {:?}", flow);
            prop_assert_eq!(bulk.lookup(&flow, g), bulk.lookup_walk(&flow, g), "flow {:?}", flow);
        }
        // A second load goes one by one into the filled tables and changes nothing.
        prop_assert_eq!(bulk.insert_many(&routes), Ok(0));
    }
}
