//! Properties the cache must have whatever its internals, checked from the outside (no model of
//! its slots):
//! - safety: a hit is the newest decision stored for that key, under the current generation,
//!   not yet expired; so never a stale answer after a generation bump, never another key's;
//! - the replacement rule it documents, least recently refreshed first within a bucket: a
//!   valid entry whose bucket saw fewer than `ways` other keys stored or hit since it was last
//!   stored or hit is still there (a lookup hits);
//! - a decision just stored hits at once; capacity: never more entries than `entries`;
//! - the counters count what the caller saw (hits, misses, bypasses, refused inserts).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use dst_cache::{BypassConfig, Cacheable, Config, Counters, DstCache, FlowKey, Generation, Lookup};
use proptest::prelude::*;

/// A test decision: an id, and whether it may be cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Value(u32, bool);

impl Cacheable for Value {
    fn is_cacheable(&self) -> bool {
        self.1
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

/// What the test knows of a key from the outside.
#[derive(Clone, Copy, Debug)]
struct Stored {
    value: Value,
    generation: u64,
    expires: u64,
    /// When it was last stored or hit (a sequence number).
    touched: u64,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cache_keeps_its_promises(
        entries_log in 0u32..5,
        ways_log in 0u32..5,
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let entries = 1usize << entries_log;
        let ways = 1usize << ways_log.min(entries_log);
        let config = Config { entries, ways, seed: Some(seed), bypass: None };
        let mut cache: DstCache<Value> = DstCache::new(config).unwrap();
        let generation = Generation::new();
        let mut stored: HashMap<FlowKey, Stored> = HashMap::new();
        let mut seq = 0u64;
        let mut seen = Counters::default();
        let mut inserts = 0u64;
        let mut now = 0u64;

        for op in ops {
            match op {
                Op::Packet { key: n, id, cacheable, ttl } => {
                    let key = key(n);
                    let snapshot = generation.snapshot();
                    let bucket = cache.bucket_of(&key);
                    prop_assert!(bucket < cache.buckets());
                    let valid = stored.get(&key).copied().filter(|s| {
                        s.generation == snapshot.generation && now < s.expires
                    });
                    // Keys of the same bucket stored or hit since this one was.
                    let younger = valid.map_or(usize::MAX, |mine| {
                        stored
                            .iter()
                            .filter(|(k, s)| {
                                **k != key && s.touched > mine.touched && cache.bucket_of(k) == bucket
                            })
                            .count()
                    });
                    let value = Value(id, cacheable);
                    let expires = ttl.map_or(u64::MAX, |t| now + u64::from(t));
                    match cache.lookup(&key, snapshot, now) {
                        Lookup::Hit(v) => {
                            prop_assert!(snapshot.enabled);
                            let Some(mine) = valid else {
                                return Err(TestCaseError::fail(format!(
                                    "hit {v:?} for {key:?} with nothing valid stored: {:?}",
                                    stored.get(&key)
                                )));
                            };
                            prop_assert_eq!(v, mine.value);
                            seen.hits += 1;
                            seq += 1;
                            stored.get_mut(&key).unwrap().touched = seq;
                        }
                        Lookup::Miss(token) => {
                            prop_assert!(snapshot.enabled);
                            prop_assert!(
                                younger >= ways,
                                "{:?} missed with {} younger keys in its bucket of {} ways",
                                key, younger, ways
                            );
                            prop_assert_eq!(token.key(), &key);
                            seen.misses += 1;
                            cache.insert(token, value, now, expires);
                            inserts += 1;
                            if cacheable && expires > now {
                                seq += 1;
                                stored.insert(key, Stored {
                                    value,
                                    generation: snapshot.generation,
                                    expires,
                                    touched: seq,
                                });
                                // Stored a moment ago: it answers at once.
                                let again = cache.lookup(&key, generation.snapshot(), now);
                                prop_assert_eq!(again, Lookup::Hit(value));
                                seen.hits += 1;
                                seq += 1;
                                stored.get_mut(&key).unwrap().touched = seq;
                            } else {
                                seen.uncacheable += 1;
                            }
                        }
                        Lookup::Bypass => {
                            prop_assert!(!snapshot.enabled, "bypass while enabled, no adaptive bypass");
                            seen.disabled += 1;
                        }
                    }
                }
                Op::Bump => generation.bump(),
                Op::CustomRules(present) => generation.set_custom_rules(present),
                Op::Advance(by) => now += u64::from(by),
            }
            let c = cache.counters();
            prop_assert_eq!(
                (c.hits, c.misses, c.disabled, c.uncacheable, c.bypassed),
                (seen.hits, seen.misses, seen.disabled, seen.uncacheable, 0)
            );
            prop_assert!(c.stale <= c.misses && c.evictions <= inserts);
            prop_assert!(cache.occupied() <= entries);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The safety half of the promises above with the adaptive bypass switching on and off
    /// (tiny windows and probe blocks), through the calls a vector pipeline makes (`admit_many`
    /// over a vector, `probe` for the admitted lookups, `insert` for their misses): a hit is the
    /// newest decision stored for its key under the current generation and unexpired, whether
    /// the cache has been bypassed since or not (a generation bumped while it was off is never
    /// served when it comes back); never more entries than `entries`; every lookup is counted
    /// once (hit, miss, bypassed or disabled).
    #[test]
    fn bypassed_cache_never_serves_a_stale_answer(
        entries_log in 0u32..5,
        ways_log in 0u32..5,
        seed in any::<u64>(),
        window in 1u32..8,
        enter_below_permille in 0u16..=1000,
        resume_above_enter in 0u16..=1000,
        probe_every in 1u32..6,
        probe_every_max_factor in 1u32..4,
        probe_window in 1u32..6,
        vector in 1usize..9,
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let entries = 1usize << entries_log;
        let ways = 1usize << ways_log.min(entries_log);
        let bypass = BypassConfig {
            window,
            enter_below_permille,
            resume_at_permille: enter_below_permille.saturating_add(resume_above_enter).min(1000),
            probe_every,
            probe_every_max: probe_every * probe_every_max_factor,
            probe_window,
        };
        let config = Config { entries, ways, seed: Some(seed), bypass: Some(bypass) };
        let mut cache: DstCache<Value> = DstCache::new(config).unwrap();
        let generation = Generation::new();
        let mut stored: HashMap<FlowKey, Stored> = HashMap::new();
        let mut lookups = 0u64;
        let mut now = 0u64;
        let mut pending: Vec<(u8, u32, bool, Option<u8>)> = Vec::new();
        // A trailing vector of packets is flushed by the final `Advance(0)`.
        for op in ops.into_iter().chain([Op::Advance(0)]) {
            if let Op::Packet { key, id, cacheable, ttl } = op {
                pending.push((key, id, cacheable, ttl));
                if pending.len() < vector {
                    continue;
                }
            }
            // One vector of the packets gathered so far, under one snapshot.
            let snapshot = generation.snapshot();
            let mut admitted = cache.admit_many(snapshot, pending.len());
            lookups += pending.len() as u64;
            for (i, &(n, id, cacheable, ttl)) in pending.iter().enumerate() {
                if admitted & (1 << i) == 0 {
                    continue;
                }
                admitted &= !(1 << i);
                let key = key(n);
                let valid = stored.get(&key).copied().filter(|s| {
                    s.generation == snapshot.generation && now < s.expires
                });
                match cache.probe(&key, snapshot, now) {
                    Lookup::Hit(v) => {
                        let Some(mine) = valid else {
                            return Err(TestCaseError::fail(format!(
                                "hit {v:?} for {key:?} with nothing valid stored: {:?}",
                                stored.get(&key)
                            )));
                        };
                        prop_assert_eq!(v, mine.value);
                    }
                    Lookup::Miss(token) => {
                        let value = Value(id, cacheable);
                        let expires = ttl.map_or(u64::MAX, |t| now + u64::from(t));
                        cache.insert(token, value, now, expires);
                        if cacheable && expires > now {
                            stored.insert(key, Stored {
                                value,
                                generation: snapshot.generation,
                                expires,
                                touched: 0,
                            });
                        }
                    }
                    Lookup::Bypass => prop_assert!(false, "probe answered Bypass"),
                }
            }
            prop_assert_eq!(admitted, 0, "admitted beyond the vector");
            pending.clear();
            match op {
                Op::Bump => generation.bump(),
                Op::CustomRules(present) => generation.set_custom_rules(present),
                Op::Advance(by) => now += u64::from(by),
                Op::Packet { .. } => {}
            }
            let c = cache.counters();
            prop_assert_eq!(c.hits + c.misses + c.bypassed + c.disabled, lookups);
            prop_assert!(cache.occupied() <= entries);
        }
    }
}
