//! Every public reader entry point refuses a guard that does not pin the default collector:
//! the database retires replaced versions into that collector, so a pin of any other collector
//! (or `unprotected()`) would not keep what the reader borrows alive.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_epoch::{self as epoch, Collector, Guard};
use policy_tree::{Direction, Flow, Mark, PolicySpec, PolicyType, PolicyWriter, Selector};

/// Runs `f` with a guard of a fresh collector and with `unprotected()`; both must panic with
/// the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    let collector = Collector::new();
    let handle = collector.register();
    let foreign = handle.pin();
    // SAFETY: the call under test must refuse the guard before loading anything through it.
    let unprotected = unsafe { epoch::unprotected() };
    for (kind, guard) in [("foreign", &foreign), ("unprotected", unprotected)] {
        let err = catch_unwind(AssertUnwindSafe(|| f(guard)))
            .expect_err(&format!("{what} accepted a {kind} guard"));
        let msg = err
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| err.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(
            msg.contains("policy-tree: pass a guard from crossbeam_epoch::pin()"),
            "{what} with a {kind} guard panicked with {msg:?}"
        );
    }
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
