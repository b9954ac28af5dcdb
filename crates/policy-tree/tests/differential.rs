//! Differential tests: `PolicyDb` against the linear scan `LinearDb`, over random sequences of
//! adds, updates, deletes, flushes and threshold changes with heavily overlapping prefixes
//! (including /0, nested IPv4 /8../32 and IPv6), checked with flows aimed at those prefixes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use policy_tree::{
    Action, Direction, Flow, HThresh, LinearDb, Mark, Policy, PolicyDb, PolicySpec, PolicyType,
    PolicyWriter, PortMatch, Prefix, Selector, TemplateId,
};
use proptest::prelude::*;

const V4_LENS: &[u8] = &[
    0, 4, 8, 12, 15, 16, 17, 20, 22, 23, 24, 25, 26, 28, 30, 31, 32,
];
const V6_LENS: &[u8] = &[0, 16, 32, 47, 48, 49, 56, 60, 64, 96, 120, 127, 128];

/// An IPv4 address from a small space, so that prefixes nest and overlap: 10.x.y.z mostly.
fn v4_addr() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        8 => (0u8..4, 0u8..4, prop::sample::select(vec![0u8, 1, 64, 128, 200, 255]))
            .prop_map(|(x, y, z)| Ipv4Addr::new(10, x, y, z)),
        1 => Just(Ipv4Addr::UNSPECIFIED),
        1 => any::<u32>().prop_map(Ipv4Addr::from),
    ]
}

fn v6_addr() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        8 => (0u16..4, 0u16..4, prop::sample::select(vec![0u16, 1, 0xff, 0x8000]))
            .prop_map(|(x, y, z)| Ipv6Addr::new(0xdead, x, y << 8, 0, 0, 0, 0, z)),
        1 => Just(Ipv6Addr::UNSPECIFIED),
        1 => any::<u128>().prop_map(Ipv6Addr::from),
    ]
}

fn prefix(v6: bool) -> BoxedStrategy<Prefix> {
    if v6 {
        (v6_addr(), prop::sample::select(V6_LENS))
            .prop_map(|(a, l)| Prefix::new(a.into(), l).unwrap())
            .boxed()
    } else {
        (v4_addr(), prop::sample::select(V4_LENS))
            .prop_map(|(a, l)| Prefix::new(a.into(), l).unwrap())
            .boxed()
    }
}

fn port_match() -> impl Strategy<Value = PortMatch> {
    prop_oneof![
        4 => Just(PortMatch::ANY),
        2 => prop::sample::select(vec![53u16, 80, 443]).prop_map(PortMatch::exact),
        1 => Just(PortMatch::masked(0x0100, 0xff00)),
    ]
}

/// Which families a test case uses: IPv4 only, IPv6 only, or both.
#[derive(Clone, Copy, Debug)]
enum Families {
    V4,
    V6,
    Both,
}

fn families() -> impl Strategy<Value = Families> {
    prop_oneof![Just(Families::V4), Just(Families::V6), Just(Families::Both)]
}

fn is_v6(families: Families) -> BoxedStrategy<bool> {
    match families {
        Families::V4 => Just(false).boxed(),
        Families::V6 => Just(true).boxed(),
        Families::Both => any::<bool>().boxed(),
    }
}

fn selector(families: Families) -> impl Strategy<Value = Selector> {
    is_v6(families).prop_flat_map(|v6| {
        (
            prefix(v6),
            prefix(v6),
            prop::sample::select(vec![0u8, 0, 6, 17]),
            port_match(),
            port_match(),
            prop::sample::select(vec![0u32, 0, 0, 1, 2]),
        )
            .prop_map(|(src, dst, proto, sport, dport, ifindex)| {
                Selector::new(src, dst)
                    .unwrap()
                    .proto(proto)
                    .sport(sport)
                    .dport(dport)
                    .ifindex(ifindex)
            })
    })
}

/// Mostly `Out`, so that most policies share a bin and its trees grow deep.
fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![
        6 => Just(Direction::Out),
        1 => Just(Direction::Fwd),
        1 => Just(Direction::In),
    ]
}

/// Mostly no mark; marks that differ only in the mask; a value outside its mask (never matches).
fn mark() -> impl Strategy<Value = Mark> {
    prop_oneof![
        8 => Just(Mark::ANY),
        1 => Just(Mark { value: 5, mask: 0xf }),
        1 => Just(Mark { value: 5, mask: 0xff }),
        1 => Just(Mark { value: 0x15, mask: 0xf }),
    ]
}

fn spec(families: Families) -> impl Strategy<Value = PolicySpec> {
    (
        mark(),
        selector(families),
        direction(),
        prop_oneof![6 => Just(PolicyType::Main), 1 => Just(PolicyType::Sub)],
        prop_oneof![6 => Just(0u32), 1 => Just(7)],
        0u32..6,
        prop_oneof![
            Just(Action::Allow),
            Just(Action::Block),
            (0u32..4).prop_map(|t| Action::Ipsec(TemplateId(t))),
            (0u32..4).prop_map(|t| Action::IpsecOptional(TemplateId(t)))
        ],
    )
        .prop_map(|(mark, sel, dir, ptype, if_id, priority, action)| {
            PolicySpec::new(sel, dir)
                .ptype(ptype)
                .if_id(if_id)
                .mark(mark)
                .priority(priority)
                .action(action)
        })
}

fn hthresh() -> impl Strategy<Value = HThresh> {
    let v4 = prop::sample::select(vec![0u8, 8, 16, 24, 28, 32, 32]);
    let v6 = prop::sample::select(vec![0u8, 32, 64, 125, 128, 128]);
    (v4.clone(), v4, v6.clone(), v6).prop_map(|(lbits4, rbits4, lbits6, rbits6)| HThresh {
        lbits4,
        rbits4,
        lbits6,
        rbits6,
    })
}

/// One bin, every address in a tree: IPv4 `Out` policies whose prefixes are all /16 or longer
/// inside 10.0.0.0/14, so that destination nodes with source subtrees merge often.
fn dense_spec() -> impl Strategy<Value = PolicySpec> {
    let tree_prefix = (
        0u8..4,
        0u8..4,
        prop::sample::select(vec![0u8, 64, 128]),
        prop::sample::select(vec![16u8, 20, 22, 23, 24, 25, 26, 32]),
    )
        .prop_map(|(x, y, z, len)| Prefix::new(Ipv4Addr::new(10, x, y, z).into(), len).unwrap());
    (tree_prefix.clone(), tree_prefix, 0u32..4).prop_map(|(src, dst, priority)| {
        PolicySpec::new(Selector::new(src, dst).unwrap(), Direction::Out).priority(priority)
    })
}

#[derive(Clone, Debug)]
enum Op {
    Add(PolicySpec),
    Update(PolicySpec),
    /// Re-add (exclusive) or update an existing policy's selector, picked by position.
    Touch(usize, bool, u32),
    /// Add a masked twin of an existing policy: the same selector but for the source's host
    /// bits (a policy of its own in the kernel), with a priority and an action.
    Twin(usize, u128, u32, bool),
    /// The database's history becomes unknown (as after loading a kernel dump).
    ForgetHistory,
    Delete(usize),
    DeleteIndex(usize),
    DeleteMissing(Selector),
    SetHThresh(HThresh),
    Flush(PolicyType),
}

fn op(families: Families) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => spec(families).prop_map(Op::Add),
        3 => spec(families).prop_map(Op::Update),
        3 => (any::<usize>(), any::<bool>(), 0u32..6).prop_map(|(i, u, p)| Op::Touch(i, u, p)),
        3 => (any::<usize>(), any::<u128>(), 0u32..6, any::<bool>())
            .prop_map(|(i, h, p, b)| Op::Twin(i, h, p, b)),
        1 => Just(Op::ForgetHistory),
        3 => any::<usize>().prop_map(Op::Delete),
        2 => any::<usize>().prop_map(Op::DeleteIndex),
        1 => selector(families).prop_map(Op::DeleteMissing),
        2 => hthresh().prop_map(Op::SetHThresh),
        1 => prop::sample::select(vec![PolicyType::Main, PolicyType::Sub]).prop_map(Op::Flush),
    ]
}

/// A flow aimed at the policies' address space.
#[derive(Clone, Debug)]
struct Probe {
    flow: Flow,
    dir: Direction,
}

fn probe(families: Families) -> impl Strategy<Value = Probe> {
    let addrs = is_v6(families).prop_flat_map(|v6| -> BoxedStrategy<(IpAddr, IpAddr)> {
        if v6 {
            (v6_addr(), v6_addr(), any::<u16>())
                .prop_map(|(s, d, noise)| {
                    let d = Ipv6Addr::from(u128::from(d) | u128::from(noise));
                    (s.into(), d.into())
                })
                .boxed()
        } else {
            (v4_addr(), v4_addr(), any::<u8>())
                .prop_map(|(s, d, noise)| {
                    let d = Ipv4Addr::from(u32::from(d) | u32::from(noise));
                    (s.into(), d.into())
                })
                .boxed()
        }
    });
    (
        addrs,
        prop::sample::select(vec![0u8, 6, 17]),
        prop::sample::select(vec![53u16, 80, 443, 0x0123, 9999]),
        prop::sample::select(vec![53u16, 80, 443, 0x01ff, 9999]),
        prop::sample::select(vec![0u32, 1, 2]),
        prop::sample::select(vec![0u32, 0, 7]),
        prop::sample::select(vec![0u32, 0, 5, 0x15, 0x25]),
        direction(),
    )
        .prop_map(
            |((s, d), proto, sport, dport, ifindex, if_id, mark, dir)| Probe {
                flow: Flow::new(s, d)
                    .unwrap()
                    .proto(proto)
                    .ports(sport, dport)
                    .ifindex(ifindex)
                    .if_id(if_id)
                    .mark(mark),
                dir,
            },
        )
}

fn pick(reference: &LinearDb, i: usize) -> Option<Policy> {
    let all = reference.dump();
    (!all.is_empty()).then(|| all[i % all.len()])
}

/// Applies `op` to both databases and checks they agree on the outcome.
fn apply(db: &mut PolicyWriter, reference: &mut LinearDb, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::Add(spec) => prop_assert_eq!(db.add(*spec), reference.add(*spec)),
        Op::Update(spec) => prop_assert_eq!(db.update(*spec), reference.update(*spec)),
        Op::Touch(i, update, priority) => {
            if let Some(p) = pick(reference, *i) {
                let spec = PolicySpec::new(p.selector, p.dir)
                    .ptype(p.ptype)
                    .if_id(p.if_id)
                    .mark(p.mark)
                    .priority(*priority)
                    .action(Action::Block);
                if *update {
                    prop_assert_eq!(db.update(spec), reference.update(spec));
                } else {
                    prop_assert_eq!(db.add(spec), reference.add(spec));
                }
            }
        }
        Op::Twin(i, host, priority, block) => {
            if let Some(p) = pick(reference, *i) {
                let src = p.selector.src;
                let bits = if src.family() == policy_tree::Family::V4 {
                    32
                } else {
                    128
                };
                let keep = u128::MAX
                    .checked_shl(u32::from(bits - src.prefixlen()))
                    .unwrap_or(0);
                let raw = match src.network() {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(
                        (u128::from(u32::from(a)) | (*host as u32 as u128 & !keep)) as u32,
                    )),
                    IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) | (*host & !keep))),
                };
                let twin = Selector {
                    src: Prefix::new(raw, src.prefixlen()).unwrap(),
                    ..p.selector
                };
                let action = if *block { Action::Block } else { Action::Allow };
                let spec = PolicySpec::new(twin, p.dir)
                    .ptype(p.ptype)
                    .if_id(p.if_id)
                    .mark(p.mark)
                    .priority(*priority)
                    .action(action);
                let exists = reference
                    .get(&twin, p.dir, p.ptype, p.if_id, p.mark)
                    .is_some();
                let (x, y) = (db.add(spec), reference.add(spec));
                prop_assert_eq!(&x, &y);
                if !exists {
                    // Host bits make a distinct policy, never a merge with its twin.
                    prop_assert!(x.is_ok(), "masked twin refused: {:?}", x);
                }
            }
        }
        Op::ForgetHistory => {
            db.forget_history();
            reference.forget_history();
        }
        Op::Delete(i) => {
            if let Some(p) = pick(reference, *i) {
                prop_assert_eq!(
                    db.delete(&p.selector, p.dir, p.ptype, p.if_id, p.mark),
                    reference.delete(&p.selector, p.dir, p.ptype, p.if_id, p.mark)
                );
            }
        }
        Op::DeleteIndex(i) => {
            if let Some(p) = pick(reference, *i) {
                prop_assert_eq!(
                    db.delete_by_index(p.index),
                    reference.delete_by_index(p.index)
                );
                prop_assert_eq!(
                    db.delete_by_index(p.index),
                    reference.delete_by_index(p.index)
                );
            }
        }
        Op::DeleteMissing(sel) => prop_assert_eq!(
            db.delete(sel, Direction::Out, PolicyType::Main, 3, Mark::ANY),
            reference.delete(sel, Direction::Out, PolicyType::Main, 3, Mark::ANY)
        ),
        Op::SetHThresh(h) => {
            prop_assert_eq!(db.set_hthresh(*h), reference.set_hthresh(*h));
        }
        Op::Flush(t) => prop_assert_eq!(db.flush(*t), reference.flush(*t)),
    }
    Ok(())
}

/// Checks that every policy is reachable through the published structure exactly once, and
/// retrievable by its identity.
fn check_structure(db: &PolicyDb, reference: &LinearDb) -> Result<(), TestCaseError> {
    let mut expected = reference.dump();
    prop_assert_eq!(&db.dump(), &expected);
    let mut published = db.published_policies();
    expected.sort_by_key(|p| p.index);
    published.sort_by_key(|p| p.index);
    prop_assert_eq!(published, expected.clone());
    let guard = crossbeam_epoch::pin();
    for p in &expected {
        let got = db.get(&p.selector, p.dir, p.ptype, p.if_id, p.mark, &guard);
        prop_assert_eq!(got, Some(p), "policy not retrievable by selector");
        prop_assert_eq!(db.get_by_index(p.index), Some(*p));
    }
    let counts = db.counts();
    prop_assert_eq!(
        counts.exact.iter().sum::<usize>() + counts.inexact,
        expected.len()
    );
    for dir in Direction::ALL {
        prop_assert_eq!(
            db.has_policies(dir),
            expected.iter().any(|p| p.dir == dir),
            "has_policies({:?})",
            dir
        );
    }
    Ok(())
}

fn check_lookups(
    db: &PolicyDb,
    reference: &LinearDb,
    probes: &[Probe],
) -> Result<(), TestCaseError> {
    let guard = crossbeam_epoch::pin();
    for probe in probes {
        let ours = db.lookup(&probe.flow, probe.dir, &guard);
        let want = reference.lookup(&probe.flow, probe.dir);
        prop_assert_eq!(ours, want, "lookup of {:?} {:?}", probe.flow, probe.dir);
        prop_assert_eq!(
            db.check(&probe.flow, probe.dir, &guard),
            reference.check(&probe.flow, probe.dir)
        );
        for t in [PolicyType::Main, PolicyType::Sub] {
            prop_assert_eq!(
                db.lookup_bytype(&probe.flow, probe.dir, t, &guard),
                reference.lookup_bytype(&probe.flow, probe.dir, t)
            );
        }
    }
    // Every policy's own addresses find a policy at least as good as it.
    for p in reference.dump().iter().take(16) {
        let flow = Flow::new(p.selector.src.addr(), p.selector.dst.addr())
            .unwrap()
            .proto(p.selector.proto)
            .ports(p.selector.sport.port, p.selector.dport.port)
            .ifindex(p.selector.ifindex)
            .if_id(p.if_id)
            .mark(p.mark.value);
        let ours = db.lookup(&flow, p.dir, &guard);
        prop_assert_eq!(ours, reference.lookup(&flow, p.dir));
        if p.mark.matches(p.mark.value) {
            prop_assert!(ours.is_some(), "a policy's own flow found nothing");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn matches_linear_scan(
        (ops, probes) in families().prop_flat_map(|f| (
            prop::collection::vec(op(f), 1..100),
            prop::collection::vec(probe(f), 24),
        )),
    ) {
        let mut db = PolicyWriter::new();
        let mut reference = LinearDb::new();
        for (n, op) in ops.iter().enumerate() {
            apply(&mut db, &mut reference, op)?;
            if n % 4 == 3 {
                check_lookups(&db, &reference, &probes)?;
            }
        }
        check_structure(&db, &reference)?;
        check_lookups(&db, &reference, &probes)?;
    }

    #[test]
    fn dense_trees_match_linear_scan(
        ops in prop::collection::vec(prop_oneof![
            6 => dense_spec().prop_map(Op::Add),
            2 => any::<usize>().prop_map(Op::Delete),
            1 => hthresh().prop_map(Op::SetHThresh),
        ], 1..80),
        probes in prop::collection::vec(probe(Families::V4), 24),
    ) {
        let mut db = PolicyWriter::new();
        let mut reference = LinearDb::new();
        for (n, op) in ops.iter().enumerate() {
            apply(&mut db, &mut reference, op)?;
            if n % 8 == 7 {
                check_lookups(&db, &reference, &probes)?;
            }
        }
        check_structure(&db, &reference)?;
        check_lookups(&db, &reference, &probes)?;
    }

    #[test]
    fn insertion_order_does_not_change_answers(
        (specs, probes) in families().prop_flat_map(|f| (
            prop::collection::vec(spec(f), 1..60),
            prop::collection::vec(probe(f), 32),
        )),
        seed in any::<u64>(),
    ) {
        // Insert the same distinct policies in two orders, with priorities made unique so the
        // order of insertion cannot matter to the answer.
        let mut unique = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            if !unique.iter().any(|s: &PolicySpec| {
                s.selector == spec.selector && s.dir == spec.dir && s.ptype == spec.ptype
                    && s.if_id == spec.if_id && s.mark == spec.mark
            }) {
                unique.push(spec.priority(i as u32));
            }
        }
        let mut shuffled = unique.clone();
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut a = PolicyWriter::new();
        let mut b = PolicyWriter::with_hthresh(HThresh { lbits4: 24, rbits4: 16, lbits6: 64, rbits6: 56 }).unwrap();
        for s in &unique {
            a.add(*s).unwrap();
        }
        for s in &shuffled {
            b.add(*s).unwrap();
        }
        let guard = crossbeam_epoch::pin();
        for probe in &probes {
            let x = a.lookup(&probe.flow, probe.dir, &guard).map(|p| p.priority);
            let y = b.lookup(&probe.flow, probe.dir, &guard).map(|p| p.priority);
            prop_assert_eq!(x, y);
        }
    }
}
