//! The kernel's rules one by one, each on both databases: identity by the full selector,
//! list order on updates and threshold changes, ties between the exact hash and the inexact
//! lists, and the policy check (sub before main, the main policy of direction in).
//! The lab test `xfrm_oracle` checks the same rules against the live kernel.

use policy_tree::{
    Action, Check, Direction, Flow, HThresh, LinearDb, Mark, PolicySpec, PolicyType, PolicyWriter,
    Selector, UNDECIDED,
};

fn sel(src: &str, dst: &str) -> Selector {
    Selector::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap()
}

fn flow(src: &str, dst: &str) -> Flow {
    Flow::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap()
}

/// Both databases, changed alike.
struct Both {
    db: PolicyWriter,
    reference: LinearDb,
}

impl Both {
    fn new() -> Both {
        Both {
            db: PolicyWriter::new(),
            reference: LinearDb::new(),
        }
    }

    fn add(&mut self, spec: PolicySpec) -> u32 {
        let a = self.db.add(spec).unwrap();
        assert_eq!(Ok(a), self.reference.add(spec));
        a.index
    }

    fn update(&mut self, spec: PolicySpec) -> u32 {
        let a = self.db.update(spec).unwrap();
        assert_eq!(Ok(a), self.reference.update(spec));
        a.index
    }

    /// The index of the deciding policy (0: undecided), the same in both.
    fn winner(&self, f: &Flow) -> Option<u32> {
        let guard = crossbeam_epoch::pin();
        let ours = self.db.lookup(f, Direction::Fwd, &guard).copied();
        assert_eq!(ours.as_ref(), self.reference.lookup(f, Direction::Fwd));
        ours.map(|p| p.index)
    }
}

#[test]
fn masked_twins_are_two_policies() {
    let mut b = Both::new();
    let block = b.add(
        PolicySpec::new(sel("10.100.1.3/25", "0.0.0.0/0"), Direction::Fwd)
            .priority(5)
            .action(Action::Block),
    );
    let allow =
        b.add(PolicySpec::new(sel("10.100.1.96/25", "0.0.0.0/0"), Direction::Fwd).priority(3));
    assert_ne!(block, allow);
    assert_eq!(b.db.len(), 2);
    assert_eq!(b.winner(&flow("10.100.1.5", "10.0.0.1")), Some(allow));
    b.db.delete_by_index(allow).unwrap();
    b.reference.delete_by_index(allow).unwrap();
    assert_eq!(b.winner(&flow("10.100.1.5", "10.0.0.1")), Some(block));
}

#[test]
fn marks_are_identity_and_filter() {
    let mut b = Both::new();
    let s = sel("10.0.0.0/24", "0.0.0.0/0");
    let m1 = b.add(PolicySpec::new(s, Direction::Fwd).mark(Mark {
        value: 5,
        mask: 0xf,
    }));
    let m2 = b.add(PolicySpec::new(s, Direction::Fwd).mark(Mark {
        value: 5,
        mask: 0xff,
    }));
    assert_ne!(m1, m2);
    assert_eq!(b.winner(&flow("10.0.0.1", "1.1.1.1")), None);
    assert_eq!(b.winner(&flow("10.0.0.1", "1.1.1.1").mark(0x15)), Some(m1));
    assert_eq!(b.winner(&flow("10.0.0.1", "1.1.1.1").mark(0x5)), Some(m1));
}

#[test]
fn dev_selectors_compare_the_flows_interface() {
    let mut b = Both::new();
    let dev = b.add(
        PolicySpec::new(sel("0.0.0.0/0", "0.0.0.0/0").ifindex(4), Direction::Fwd)
            .action(Action::Block),
    );
    assert_eq!(b.winner(&flow("10.0.0.1", "1.1.1.1").ifindex(3)), None);
    assert_eq!(b.winner(&flow("10.0.0.1", "1.1.1.1").ifindex(4)), Some(dev));
}

#[test]
fn ties_go_to_the_list_order_and_updates_keep_their_place() {
    let mut b = Both::new();
    let older = b.add(PolicySpec::new(sel("10.0.0.0/16", "0.0.0.0/0"), Direction::Fwd).priority(5));
    let newer = b.add(
        PolicySpec::new(sel("10.0.0.0/24", "0.0.0.0/0"), Direction::Fwd)
            .priority(5)
            .action(Action::Block),
    );
    let f = flow("10.0.0.1", "1.1.1.1");
    assert_eq!(b.winner(&f), Some(older));
    // Same priority: the update keeps the older place.
    b.update(
        PolicySpec::new(sel("10.0.0.0/16", "0.0.0.0/0"), Direction::Fwd)
            .priority(5)
            .action(Action::Allow),
    );
    assert_eq!(b.winner(&f), Some(older));
    // A threshold change re-sorts by creation: the update is now the newer policy.
    b.db.set_hthresh(HThresh::default()).unwrap();
    b.reference.set_hthresh(HThresh::default()).unwrap();
    assert_eq!(b.winner(&f), Some(newer));
    // Another priority and back: the policy goes last.
    b.update(PolicySpec::new(sel("10.0.0.0/24", "0.0.0.0/0"), Direction::Fwd).priority(6));
    b.update(PolicySpec::new(sel("10.0.0.0/24", "0.0.0.0/0"), Direction::Fwd).priority(5));
    assert_eq!(b.winner(&f), Some(older));
}

#[test]
fn exact_against_inexact_ties_follow_pos() {
    let mut b = Both::new();
    let f = flow("10.0.0.1", "10.0.1.1");
    let first =
        b.add(PolicySpec::new(sel("10.0.0.0/24", "10.0.1.0/24"), Direction::Fwd).priority(5));
    let second =
        b.add(PolicySpec::new(sel("10.0.0.0/25", "10.0.1.0/24"), Direction::Fwd).priority(5));
    let exact =
        b.add(PolicySpec::new(sel("10.0.0.1/32", "10.0.1.1/32"), Direction::Fwd).priority(5));
    // The inexact holder of pos 0 beats the exact policy's pos 0 (`!(0 < 0)`).
    assert_eq!(b.winner(&f), Some(first));
    // Delete it: nobody holds pos 0 (deletes do not renumber), the exact policy wins.
    b.db.delete_by_index(first).unwrap();
    b.reference.delete_by_index(first).unwrap();
    assert_eq!(b.winner(&f), Some(exact));
    // The next inexact insert renumbers: `second` holds pos 0 again.
    b.add(PolicySpec::new(sel("10.9.0.0/24", "10.9.1.0/24"), Direction::Fwd).priority(9));
    assert_eq!(b.winner(&f), Some(second));
    // Loaded from a dump, who holds pos 0 is not known: the tie goes to the kernel.
    b.db.forget_history();
    b.reference.forget_history();
    assert_eq!(b.winner(&f), Some(UNDECIDED.index));
    // Priorities still decide.
    b.update(PolicySpec::new(sel("10.0.0.1/32", "10.0.1.1/32"), Direction::Fwd).priority(4));
    assert_eq!(b.winner(&f), Some(exact));
}

#[test]
fn a_sub_policy_brings_the_main_policy_of_direction_in() {
    let mut b = Both::new();
    let any = sel("0.0.0.0/0", "0.0.0.0/0");
    b.add(PolicySpec::new(any, Direction::Fwd).ptype(PolicyType::Sub));
    let f = flow("10.0.0.1", "10.0.1.1");
    let guard = crossbeam_epoch::pin();
    assert_eq!(b.db.check(&f, Direction::Fwd, &guard), Check::Pass);
    // A main fwd block is not consulted once a sub policy matched...
    b.add(PolicySpec::new(any, Direction::Fwd).action(Action::Block));
    assert_eq!(b.db.check(&f, Direction::Fwd, &guard), Check::Pass);
    // ...but the main policy of direction in is.
    let inb = b.add(PolicySpec::new(any, Direction::In).action(Action::Block));
    assert!(matches!(b.db.check(&f, Direction::Fwd, &guard), Check::Drop(p) if p.index == inb));
    assert_eq!(
        b.db.check(&f, Direction::Fwd, &guard),
        b.reference.check(&f, Direction::Fwd)
    );
}

#[test]
fn the_default_policy_decides_when_nothing_matches() {
    let mut b = Both::new();
    let f = flow("10.0.0.1", "10.0.1.1");
    let guard = crossbeam_epoch::pin();
    b.add(PolicySpec::new(
        sel("10.9.0.0/16", "0.0.0.0/0"),
        Direction::Fwd,
    ));
    assert_eq!(b.db.check(&f, Direction::Fwd, &guard), Check::Pass);
    b.db.set_default_block(Direction::Fwd, true);
    b.reference.set_default_block(Direction::Fwd, true);
    assert_eq!(b.db.check(&f, Direction::Fwd, &guard), Check::DefaultBlock);
    assert_eq!(b.reference.check(&f, Direction::Fwd), Check::DefaultBlock);
    // A matching allow still passes; other directions keep their default.
    let ok = flow("10.9.0.1", "10.0.1.1");
    assert_eq!(b.db.check(&ok, Direction::Fwd, &guard), Check::Pass);
    assert_eq!(b.db.check(&f, Direction::Out, &guard), Check::Pass);
}
