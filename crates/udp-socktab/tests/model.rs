//! Differential test: the writer and the lock-free lookup against the brute-force
//! [`Reference`], over random sequences of socket calls in three namespaces (two sharing a
//! small global table, one with its own), small address and port pools so that sockets
//! collide, share ports, join groups and exhaust the port range; after every call both agree
//! on its result and on every socket's state and group, and random and exhaustive lookups
//! agree on the receiving socket (the exhaustive ones against the reference cut down to each
//! namespace and port, as the fuzz target asks it, and against the whole one).

use proptest::prelude::*;

mod world;
use world::{Op, World};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop_oneof![3 => Just(0u32), 1 => 1..3u32], 0..3u8, any::<bool>(), prop::bool::weighted(0.7), prop_oneof![3 => Just(0u32), 1 => 1..3u32], prop_oneof![5 => Just(0u32), 1 => Just(1)])
            .prop_map(|(ns, family, reuseaddr, reuseport, dev, uid)| Op::Socket { ns, family, reuseaddr, reuseport, dev, uid }),
        6 => (0..24usize, prop::bool::weighted(0.05), prop_oneof![3 => Just(0usize), 3 => Just(1), 2 => Just(3), 1 => 0..7usize], prop_oneof![1 => Just(0usize), 3 => Just(1), 1 => 2..4usize])
            .prop_map(|(sock, v6, addr, port)| Op::Bind { sock, v6, addr, port }),
        2 => (0..24usize, prop::bool::weighted(0.1), 0..4usize, prop_oneof![Just(7000u16), Just(7001), Just(0)], prop_oneof![2 => Just(1usize), 1 => Just(3), 1 => 0..7usize])
            .prop_map(|(sock, v6, peer, port, src)| Op::Connect { sock, v6, peer, port, src }),
        1 => (0..24usize).prop_map(|sock| Op::Disconnect { sock }),
        1 => (0..24usize).prop_map(|sock| Op::Close { sock }),
        1 => (0..24usize, 0..3u32).prop_map(|(sock, dev)| Op::SetDev { sock, dev }),
        1 => (0..24usize, prop::option::of(0..2u32)).prop_map(|(sock, cpu)| Op::SetCpu { sock, cpu }),
        3 => (prop_oneof![3 => Just(0u32), 1 => 1..3u32], any::<bool>(), 0..4usize, prop_oneof![Just(7000u16), Just(7001), Just(9)], 0..7usize, 1..4usize, 0..3u32, any::<u32>(), 0..2u32)
            .prop_map(|(ns, v6, src, sport, dst, dport, dif, hash, cpu)| Op::Lookup { ns, v6, src, sport, dst, dport, dif, hash, cpu }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn writer_and_lookup_agree_with_reference(seed in any::<u64>(), ops in prop::collection::vec(op(), 1..100)) {
        let mut world = World::new(seed);
        for op in &ops {
            world.apply(op).map_err(TestCaseError::fail)?;
        }
        world.sweep_checking_cut().map_err(TestCaseError::fail)?;
    }
}
