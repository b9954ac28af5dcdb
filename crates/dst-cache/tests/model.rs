//! Differential test: the cache against a plainly written model of the same geometry, plus a
//! safety property against a map of the last decision inserted per key: a hit is always the
//! newest decision stored for that key, under the current generation, not yet expired.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use dst_cache::{Cacheable, Config, Counters, DstCache, FlowKey, Generation, Lookup};
use proptest::prelude::*;

/// A test decision: an id, and whether it may be cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Value(u32, bool);

impl Cacheable for Value {
    fn is_cacheable(&self) -> bool {
        self.1
    }
}

#[derive(Clone, Copy, Debug)]
struct ModelEntry {
    key: FlowKey,
    value: Value,
    generation: u64,
    expires: u64,
    used: u64,
}

/// The model: buckets as vectors of optional entries, every rule spelled out.
struct Model {
    buckets: Vec<Vec<Option<ModelEntry>>>,
    clock: u64,
    counters: Counters,
}

impl Model {
    fn new(buckets: usize, ways: usize) -> Self {
        Model {
            buckets: vec![vec![None; ways]; buckets],
            clock: 0,
            counters: Counters::default(),
        }
    }

    fn lookup(
        &mut self,
        bucket: usize,
        key: FlowKey,
        generation: u64,
        enabled: bool,
        now: u64,
    ) -> Option<Option<Value>> {
        if !enabled {
            self.counters.disabled += 1;
            return None;
        }
        for slot in &mut self.buckets[bucket] {
            if let Some(entry) = slot {
                if entry.key == key {
                    if entry.generation == generation && now < entry.expires {
                        self.clock += 1;
                        entry.used = self.clock;
                        self.counters.hits += 1;
                        return Some(Some(entry.value));
                    }
                    *slot = None;
                    self.counters.stale += 1;
                    break;
                }
            }
        }
        self.counters.misses += 1;
        Some(None)
    }

    fn insert(
        &mut self,
        bucket: usize,
        key: FlowKey,
        value: Value,
        generation: u64,
        now: u64,
        expires: u64,
    ) {
        if !value.1 || expires <= now {
            self.counters.uncacheable += 1;
            return;
        }
        let slots = &mut self.buckets[bucket];
        let mut index = slots
            .iter()
            .position(|s| matches!(s, Some(e) if e.key == key));
        if index.is_none() {
            index = slots.iter().position(|s| match s {
                None => true,
                Some(e) => !(e.generation == generation && now < e.expires),
            });
        }
        let index = index.unwrap_or_else(|| {
            self.counters.evictions += 1;
            let oldest = slots.iter().map(|s| s.unwrap().used).min().unwrap();
            slots
                .iter()
                .position(|s| s.unwrap().used == oldest)
                .unwrap()
        });
        self.clock += 1;
        slots[index] = Some(ModelEntry {
            key,
            value,
            generation,
            expires,
            used: self.clock,
        });
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Look a key up; on a miss insert `Value(id, cacheable)` expiring after `ttl` (None: never).
    Packet {
        key: u8,
        id: u32,
        cacheable: bool,
        ttl: Option<u8>,
    },
    Bump,
    CustomRules(bool),
    Advance(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..40, any::<u32>(), prop::bool::weighted(0.9), prop::option::of(1u8..30))
            .prop_map(|(key, id, cacheable, ttl)| Op::Packet { key, id, cacheable, ttl }),
        1 => Just(Op::Bump),
        1 => any::<bool>().prop_map(Op::CustomRules),
        2 => (0u8..8).prop_map(Op::Advance),
    ]
}

fn key(n: u8) -> FlowKey {
    // A few keys differ only in TOS or ingress interface, to check the whole key is compared.
    match n % 4 {
        0 => FlowKey::v4(Ipv4Addr::new(10, 0, 0, n / 4), 0, 1),
        1 => FlowKey::v4(Ipv4Addr::new(10, 0, 0, n / 4), 4, 1),
        2 => FlowKey::v4(Ipv4Addr::new(10, 0, 0, n / 4), 0, 2),
        _ => FlowKey::v6(format!("2001:db8::{n}").parse().unwrap(), 0, 1),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cache_matches_model(
        entries_log in 0u32..5,
        ways_log in 0u32..5,
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let entries = 1usize << entries_log;
        let ways = 1usize << ways_log.min(entries_log);
        let config = Config { entries, ways, seed: Some(seed), bypass: None };
        let mut cache: DstCache<Value> = DstCache::new(config).unwrap();
        let mut model = Model::new(entries / ways, ways);
        let generation = Generation::new();
        let mut newest: HashMap<FlowKey, (Value, u64, u64)> = HashMap::new();
        let mut now = 0u64;

        for op in ops {
            match op {
                Op::Packet { key: n, id, cacheable, ttl } => {
                    let key = key(n);
                    let snapshot = generation.snapshot();
                    let bucket = cache.bucket_of(&key);
                    prop_assert!(bucket < cache.buckets());
                    let expected = model.lookup(bucket, key, snapshot.generation, snapshot.enabled, now);
                    let value = Value(id, cacheable);
                    let expires = ttl.map_or(u64::MAX, |t| now + u64::from(t));
                    match (cache.lookup(&key, snapshot, now), expected) {
                        (Lookup::Hit(v), Some(Some(m))) => {
                            prop_assert_eq!(v, m);
                            let (last, last_generation, last_expires) = newest[&key];
                            prop_assert_eq!(v, last);
                            prop_assert_eq!(last_generation, snapshot.generation);
                            prop_assert!(now < last_expires);
                        }
                        (Lookup::Miss(token), Some(None)) => {
                            prop_assert_eq!(token.key(), &key);
                            cache.insert(token, value, now, expires);
                            model.insert(bucket, key, value, snapshot.generation, now, expires);
                            if cacheable && expires > now {
                                newest.insert(key, (value, snapshot.generation, expires));
                            }
                        }
                        (Lookup::Bypass, None) => {}
                        (got, expected) => prop_assert!(false, "cache {:?}, model {:?}", got, expected),
                    }
                }
                Op::Bump => generation.bump(),
                Op::CustomRules(present) => generation.set_custom_rules(present),
                Op::Advance(by) => now += u64::from(by),
            }
            prop_assert_eq!(cache.counters(), &model.counters);
        }
        let occupied = model.buckets.iter().flatten().filter(|s| s.is_some()).count();
        prop_assert_eq!(cache.occupied(), occupied);
    }
}
