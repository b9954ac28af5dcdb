//! Property tests: arbitrary and mutated frames never panic the pipeline, every frame gets one
//! counted verdict, the route cache never changes an answer, and the IPv4 parser agrees with
//! etherparse on what it accepts.

mod common;

use common::*;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::{Config, Frame, HeapPool, Queue, Verdict, VlanMode};
use proptest::prelude::*;

/// Frames that get far into the pipeline: valid frames of every kind, then mutated.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let dst4 = prop_oneof![
        Just([8, 8, 8, 8]),
        Just([10, 0, 2, 7]),
        Just([100, 64, 0, 1]),
        Just([100, 65, 0, 1]),
        Just([9, 9, 9, 9]),
        Just(LOCAL4),
        Just([198, 51, 100, 1]),
        any::<[u8; 4]>(),
    ];
    let dst6 = prop_oneof![
        Just("2001:db8:100::9"),
        Just("2001:db8:44::1"),
        Just("2001:db8:dead::1"),
        Just(LOCAL6),
        Just("2001:db8:2::77"),
    ];
    let base = prop_oneof![
        (dst4, 0u8..3, 0usize..1500).prop_map(|(d, ttl, n)| udp4(HOST4, d, ttl, 4789, n)),
        (dst6, 0u8..3, 0usize..1500).prop_map(|(d, hop, n)| udp6(HOST6, d, hop, 4789, n)),
        proptest::collection::vec(any::<u8>(), 0..200),
    ];
    (
        base,
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        any::<u16>(),
    )
        .prop_map(|(mut f, flips, cut)| {
            if !f.is_empty() {
                for (at, byte) in flips {
                    let i = at % f.len();
                    f[i] = byte;
                }
                if cut % 4 == 0 {
                    f.truncate(usize::from(cut) % (f.len() + 1));
                }
            }
            f
        })
}

fn run_batch(
    queue: &mut Queue,
    fx: &Fixture,
    frames: &[Vec<u8>],
    headroom: usize,
    chunk: usize,
) -> Vec<(Verdict, Vec<u8>)> {
    let mut chunks: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut c = vec![0u8; chunk.max(headroom + f.len())];
            c[headroom..headroom + f.len()].copy_from_slice(f);
            c
        })
        .collect();
    let mut batch: Vec<Frame<'_>> = chunks
        .iter_mut()
        .zip(frames)
        .map(|(c, f)| Frame::new(c, headroom, f.len(), IN))
        .collect();
    let mut pool = HeapPool::new(2048, 4);
    let guard = crossbeam_epoch::pin();
    queue.process_batch(&fx.tables, &guard, 0, &mut batch, &mut pool);
    queue.release_held(&fx.tables, &guard, 5_000_000_000, &mut pool);
    batch
        .iter()
        .map(|f| (f.verdict, f.bytes().to_vec()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_frames_never_panic_and_are_all_counted(
        frames in proptest::collection::vec(frame(), 1..16),
        headroom in prop_oneof![Just(0usize), Just(256)],
        vlan in prop_oneof![Just(VlanMode::Drop), Just(VlanMode::Punt), Just(VlanMode::Route)],
    ) {
        let fx = fixture();
        let mut queue = Queue::new(Config { vlan, ..Config::default() }).unwrap();
        let out = run_batch(&mut queue, &fx, &frames, headroom, 0);
        prop_assert!(out.iter().all(|(v, _)| *v != Verdict::Pending));
        let c = queue.counters();
        prop_assert_eq!(c.rx, frames.len() as u64);
        prop_assert_eq!(c.transmit + c.punt + c.deliver + c.reply + c.held + c.consumed + c.dropped, c.rx);
        for (v, bytes) in &out {
            if let Verdict::Transmit { .. } | Verdict::Reply { .. } = v {
                prop_assert!(bytes.len() >= 14);
            }
        }
    }

    #[test]
    fn the_route_cache_never_changes_an_answer(frames in proptest::collection::vec(frame(), 1..24)) {
        let fx = fixture();
        let mut on = Queue::new(Config::default()).unwrap();
        let mut off = Queue::new(Config { dst_cache: None, ..Config::default() }).unwrap();
        // Twice the same batch: the second run of the cached queue mostly hits.
        let doubled: Vec<Vec<u8>> = frames.iter().chain(frames.iter()).cloned().collect();
        let a = run_batch(&mut on, &fx, &doubled, 256, 2048);
        let b = run_batch(&mut off, &twin(&fx), &doubled, 256, 2048);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn the_ipv4_view_accepts_what_etherparse_accepts(bytes in proptest::collection::vec(any::<u8>(), 0..80), version_ihl in 0x40u8..0x50) {
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() { *b = version_ihl; }
        let ours = Ipv4Packet::new_checked(&bytes[..]);
        let theirs = etherparse::Ipv4Slice::from_slice(&bytes);
        prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{:?} vs {:?}", ours.err(), theirs.err());
        if let (Ok(o), Ok(t)) = (ours, theirs) {
            prop_assert_eq!(o.src_bytes(), t.header().source());
            prop_assert_eq!(o.dst_bytes(), t.header().destination());
            prop_assert_eq!(o.payload(), t.payload().payload);
            prop_assert_eq!(o.ttl(), t.header().ttl());
        }
    }
}
