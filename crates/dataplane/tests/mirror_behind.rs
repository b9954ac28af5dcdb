//! Fail closed while the tables lag the kernel's: when the control plane says it is behind
//! (`Generation::set_behind`: a dump, a resynchronisation or a backlog of events in progress),
//! every answer the tables may have wrong (a forward, a reject, an unusable egress) is punted
//! for the kernel to route, cached answers included; local destinations are unaffected; once
//! caught up, the tables answer again. Both pipelines (vector and reference) agree.

mod common;

use common::*;
use dataplane::{Config, Frame, HeapPool, PuntReason, Queue, Verdict};

/// Runs `frame` through the reference pipeline (one frame at a time).
fn reference(queue: &mut Queue, fx: &Fixture, frame: &[u8]) -> Verdict {
    let mut pool = HeapPool::new(2048, 64);
    let mut chunk = vec![0u8; 2048];
    chunk[256..256 + frame.len()].copy_from_slice(frame);
    let guard = crossbeam_epoch::pin();
    let mut frames = [Frame::new(&mut chunk, 256, frame.len(), IN)];
    queue.process_batch_reference(&fx.tables, &guard, 0, &mut frames, &mut pool);
    frames[0].verdict
}

#[test]
fn a_lagging_mirror_punts_route_answers_and_keeps_local_ones() {
    let fx = fixture();
    let mut queue = Queue::new(Config::default()).unwrap();
    let mut plain = Queue::new(Config::default()).unwrap();
    let forwarded = udp4(HOST4, [8, 8, 8, 8], 64, 53, 10);
    let forwarded6 = udp6(HOST6, "2001:db8:100::9", 64, 53, 10);
    let no_route = udp4(HOST4, [1, 2, 3, 4], 64, 53, 10);
    let local = udp4(HOST4, LOCAL4, 64, 9, 10);
    let transmit = Verdict::Transmit { ifindex: OUT };
    // Caught up: the tables answer (and the forward is cached).
    assert_eq!(
        run_on(&mut queue, &fx, &forwarded, 256, 0).verdict,
        transmit
    );
    assert_eq!(
        run_on(&mut queue, &fx, &forwarded6, 256, 0).verdict,
        transmit
    );
    assert!(matches!(
        run_on(&mut queue, &fx, &no_route, 256, 0).verdict,
        Verdict::Reply { .. }
    ));
    let local_verdict = run_on(&mut queue, &fx, &local, 256, 0).verdict;
    assert_eq!(local_verdict, Verdict::Punt(PuntReason::Local));

    assert!(!fx.tables.generation.set_behind(true));
    let behind = Verdict::Punt(PuntReason::MirrorBehind);
    for frame in [&forwarded, &forwarded6, &no_route] {
        // The cached forward as well: the cache hit is not trusted either.
        assert_eq!(run_on(&mut queue, &fx, frame, 256, 0).verdict, behind);
        assert_eq!(reference(&mut plain, &fx, frame), behind);
    }
    assert_eq!(
        run_on(&mut queue, &fx, &local, 256, 0).verdict,
        local_verdict
    );
    assert_eq!(reference(&mut plain, &fx, &local), local_verdict);
    let counted = queue.counters().punts[PuntReason::MirrorBehind as usize];
    assert_eq!(counted, 3, "each punt counted under its reason");

    assert!(fx.tables.generation.set_behind(false));
    assert_eq!(
        run_on(&mut queue, &fx, &forwarded, 256, 0).verdict,
        transmit
    );
    assert_eq!(reference(&mut plain, &fx, &forwarded), transmit);
}
