//! Every public reader entry point refuses a guard that does not pin the default collector:
//! the database retires replaced versions into that collector, so a pin of any other collector
//! (or `unprotected()`) would not keep what the reader borrows alive.

use crossbeam_epoch::{self as epoch, Guard};
use policy_tree::{Direction, Flow, Mark, PolicySpec, PolicyType, PolicyWriter, Selector};

/// Both a foreign collector's guard and `unprotected()` must panic with the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    epoch_guard::assert_refused("policy-tree", what, f);
}

#[test]
fn entry_points_refuse_a_foreign_guard() {
    let mut db = PolicyWriter::new();
    let sel = Selector::new(
        "10.0.1.0/24".parse().unwrap(),
        "10.0.2.0/24".parse().unwrap(),
    )
    .unwrap();
    db.add(PolicySpec::new(sel, Direction::Fwd)).unwrap();
    let flow = Flow::new("10.0.1.1".parse().unwrap(), "10.0.2.1".parse().unwrap()).unwrap();

    let guard = epoch::pin();
    assert!(db.lookup(&flow, Direction::Fwd, &guard).is_some());
    assert!(
        db.get(
            &sel,
            Direction::Fwd,
            PolicyType::Main,
            0,
            Mark::default(),
            &guard
        )
        .is_some()
    );

    refused("PolicyDb::lookup", |g| {
        let _ = db.lookup(&flow, Direction::Fwd, g);
    });
    refused("PolicyDb::check", |g| {
        let _ = db.check(&flow, Direction::Fwd, g);
    });
    refused("PolicyDb::lookup_bytype", |g| {
        let _ = db.lookup_bytype(&flow, Direction::Fwd, PolicyType::Main, g);
    });
    refused("PolicyDb::get", |g| {
        let _ = db.get(
            &sel,
            Direction::Fwd,
            PolicyType::Main,
            0,
            Mark::default(),
            g,
        );
    });
}
