//! ICMP errors are limited per destination across queues, as the kernel limits them per peer
//! (`inet_peer_xrlim_allow`): four queues of one namespace, each on its own thread with its
//! own token bucket (the kernel's global limit), send "net unreachable" errors to one
//! sender; together they send the destination's burst of six and then one per second, not
//! four times that. Another sender is not affected, and "fragmentation needed" is never
//! limited per destination.

mod common;

use common::*;
use dataplane::{Config, Queue, Verdict};

/// How many of `n` frames from `src` to an unroutable destination, one every `step_ms`
/// milliseconds from `start_ms`, queue `queue` answered with an ICMP error.
fn errors(
    queue: &mut Queue,
    fx: &Fixture,
    src: [u8; 4],
    (start_ms, step_ms): (u64, u64),
    n: u64,
) -> usize {
    let frame = udp4(src, [1, 2, 3, 4], 64, 53, 10);
    (0..n)
        .filter(|i| {
            let now = (start_ms + i * step_ms) * 1_000_000;
            matches!(
                run_on(queue, fx, &frame, 256, now).verdict,
                Verdict::Reply { .. }
            )
        })
        .count()
}

#[test]
fn queues_share_each_destinations_icmp_budget() {
    let fx = fixture();
    let fx = std::sync::Arc::new(fx);
    // Four queues at once over the same two seconds (a burst of 50 each and 1,000/s of their
    // own: alone, each would answer far more than the destination's limit).
    let threads: Vec<_> = (0..4u32)
        .map(|q| {
            let fx = std::sync::Arc::clone(&fx);
            std::thread::spawn(move || {
                let config = Config {
                    queue_id: q,
                    ..Config::default()
                };
                let mut queue = Queue::new(config).unwrap();
                errors(&mut queue, &fx, HOST4, (1_000, 1), 2_000)
            })
        })
        .collect();
    let per_queue: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total: usize = per_queue.iter().sum();
    // Six at once, then one per second: at most 6 + 2 over two seconds.
    assert!((6..=8).contains(&total), "{per_queue:?}");

    // One queue alone, to another sender: its own budget (six at once).
    let mut queue = Queue::new(Config::default()).unwrap();
    let other = [10, 0, 1, 51];
    assert_eq!(errors(&mut queue, &fx, other, (1_000, 0), 20), 6);
    // The kernel's default per-peer limit off (`icmp_ratelimit = 0`): the queue's own bucket
    // (burst 50) is what limits.
    fx.tables
        .icmp_peers
        .set_v4(0, dataplane::DEFAULT_V4_RATEMASK);
    let mut queue = Queue::new(Config::default()).unwrap();
    assert_eq!(errors(&mut queue, &fx, [10, 0, 1, 52], (1_000, 0), 60), 50);
}
