//! Readers look up while a writer merges nodes, prunes them, updates a policy in place and
//! changes the thresholds: every answer must be one a consistent database could give.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use policy_tree::{
    Action, Direction, Flow, HThresh, PolicySpec, PolicyType, PolicyWriter, Selector,
};

fn sel(src: &str, dst: &str) -> Selector {
    Selector::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap()
}

#[test]
fn readers_never_see_a_half_changed_database() {
    let rounds = if cfg!(miri) { 4 } else { 400 };
    let mut db = PolicyWriter::new();
    let stable = sel("10.0.1.0/24", "10.0.2.0/24");
    let updated = sel("10.0.1.0/24", "10.0.2.128/25");
    db.add(PolicySpec::new(stable, Direction::Out).priority(100))
        .unwrap();
    db.add(
        PolicySpec::new(updated, Direction::Out)
            .priority(50)
            .action(Action::Block),
    )
    .unwrap();
    // Policies that match no probe but force merges of the probes' nodes.
    let churn = [
        sel("10.9.0.0/24", "10.0.0.0/22"),
        sel("10.8.0.0/24", "10.0.2.0/26"),
        sel("10.8.0.0/16", "10.0.0.0/16"),
        sel("10.7.7.7/32", "10.0.2.200/32"),
    ];

    let stop = AtomicBool::new(false);
    let lookups = AtomicUsize::new(0);
    // The run loops hold the database, not its writer.
    let reader = std::sync::Arc::clone(db.reader());
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let to_stable = Flow::v4([10, 0, 1, 2].into(), [10, 0, 2, 2].into());
                let to_updated = Flow::v4([10, 0, 1, 2].into(), [10, 0, 2, 200].into());
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) || n == 0 {
                    let guard = crossbeam_epoch::pin();
                    let a = reader.lookup(&to_stable, Direction::Out, &guard).unwrap();
                    assert_eq!(a.selector, stable);
                    let b = reader.lookup(&to_updated, Direction::Out, &guard).unwrap();
                    assert_eq!(b.selector, updated, "the updated policy vanished");
                    assert!(matches!(
                        (b.priority, b.action),
                        (50, Action::Block) | (60, Action::Allow)
                    ));
                    n += 1;
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            });
        }
        for round in 0..rounds {
            let (priority, action) = if round % 2 == 0 {
                (60, Action::Allow)
            } else {
                (50, Action::Block)
            };
            db.update(
                PolicySpec::new(updated, Direction::Out)
                    .priority(priority)
                    .action(action),
            )
            .unwrap();
            for c in churn {
                db.add(PolicySpec::new(c, Direction::Out).action(Action::Block))
                    .unwrap();
            }
            if round % 16 == 0 {
                let h = HThresh {
                    lbits4: 16,
                    rbits4: 16,
                    ..HThresh::default()
                };
                db.set_hthresh(h).unwrap();
            }
            for c in churn {
                db.delete(
                    &c,
                    Direction::Out,
                    PolicyType::Main,
                    0,
                    policy_tree::Mark::ANY,
                )
                .unwrap();
            }
            if round % 16 == 8 {
                db.set_hthresh(HThresh::default()).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(db.len(), 2);
    assert!(lookups.load(Ordering::Relaxed) >= 2);
}

#[test]
fn dropping_the_database_frees_every_version() {
    // Miri reports leaks and double frees; under plain `cargo test` this exercises the drop
    // paths of every published object.
    let mut db = PolicyWriter::new();
    for i in 0..40u8 {
        let s = sel(&format!("10.{i}.0.0/16"), &format!("10.0.{i}.0/24"));
        db.add(PolicySpec::new(s, Direction::Fwd).priority(u32::from(i)))
            .unwrap();
        let exact = sel(&format!("10.{i}.0.1"), &format!("10.0.{i}.1"));
        db.add(PolicySpec::new(exact, Direction::In)).unwrap();
    }
    db.add(PolicySpec::new(
        sel("10.0.0.0/16", "10.0.0.0/16"),
        Direction::Fwd,
    ))
    .unwrap();
    let guard = crossbeam_epoch::pin();
    let flow = Flow::v4([10, 3, 0, 1].into(), [10, 0, 3, 1].into());
    let found = db.lookup(&flow, Direction::In, &guard).unwrap();
    assert_eq!(found.selector, sel("10.3.0.1", "10.0.3.1"));
    drop(guard);
    db.set_hthresh(HThresh {
        lbits4: 8,
        rbits4: 8,
        ..HThresh::default()
    })
    .unwrap();
    assert_eq!(db.flush(PolicyType::Main), 81);
    for i in 0..4u8 {
        let s = sel(&format!("10.{i}.0.0/16"), "10.0.0.0/24");
        db.add(PolicySpec::new(s, Direction::Out)).unwrap();
    }
    drop(db);
}
