//! The cache's rules one at a time: invalidation, expiry, LRU, uncacheable decisions, custom
//! rules, adversarial insertion streams and the adaptive bypass.

use std::net::Ipv4Addr;

use dst_cache::{
    BypassConfig, Config, Decision, DecisionFlags, DstCache, FlowKey, Generation, Lookup,
    RouteHint, RouteKind,
};

const SEED: u64 = 0x5eed_0001;

fn decision(oif: u32) -> Decision {
    Decision::unicast(oif, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500)
}

fn key(n: u32) -> FlowKey {
    FlowKey::v4(Ipv4Addr::from(0xc633_0000 + n), 0, 1)
}

fn cache(config: Config) -> DstCache<Decision> {
    DstCache::new(config).unwrap()
}

fn no_bypass() -> Config {
    Config {
        seed: Some(SEED),
        bypass: None,
        ..Config::default()
    }
}

/// Looks `key` up and inserts `value` on a miss; returns whether it hit.
fn packet(
    cache: &mut DstCache<Decision>,
    generation: &Generation,
    key: FlowKey,
    value: Decision,
    now: u64,
) -> bool {
    match cache.lookup(&key, generation.snapshot(), now) {
        Lookup::Hit(v) => {
            assert_eq!(v, value);
            true
        }
        Lookup::Miss(token) => {
            cache.insert(token, value, now, u64::MAX);
            false
        }
        Lookup::Bypass => false,
    }
}

/// `count` keys that share one bucket under `cache`'s hash key.
fn colliding_keys(cache: &DstCache<Decision>, bucket: usize, count: usize) -> Vec<FlowKey> {
    (0..)
        .map(key)
        .filter(|k| cache.bucket_of(k) == bucket)
        .take(count)
        .collect()
}

#[test]
fn generation_bump_invalidates_lazily() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    for n in 0..100 {
        assert!(!packet(&mut cache, &generation, key(n), decision(2), 0));
    }
    let occupied = cache.occupied();
    generation.bump();
    // Nothing is walked at the bump; each stale entry is cleared when its key is looked up.
    assert_eq!(cache.occupied(), occupied);
    assert!(matches!(
        cache.lookup(&key(0), generation.snapshot(), 0),
        Lookup::Miss(_)
    ));
    assert_eq!(
        cache.counters().stale,
        u64::from(cache.occupied() < occupied)
    );
    assert_eq!(cache.occupied(), occupied - 1);
}

#[test]
fn a_result_looked_up_before_a_bump_is_never_served_after_it() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let Lookup::Miss(token) = cache.lookup(&key(1), generation.snapshot(), 0) else {
        panic!()
    };
    generation.bump(); // the route changed while the old answer was being computed
    cache.insert(token, decision(2), 0, u64::MAX);
    assert!(matches!(
        cache.lookup(&key(1), generation.snapshot(), 0),
        Lookup::Miss(_)
    ));
}

#[test]
fn expiry_is_exclusive() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let Lookup::Miss(token) = cache.lookup(&key(1), generation.snapshot(), 100) else {
        panic!()
    };
    cache.insert(token, decision(2), 100, 110);
    assert_eq!(
        cache.lookup(&key(1), generation.snapshot(), 109),
        Lookup::Hit(decision(2))
    );
    assert!(matches!(
        cache.lookup(&key(1), generation.snapshot(), 110),
        Lookup::Miss(_)
    ));
    assert_eq!(cache.counters().stale, 1);
    // Already expired at insertion: refused.
    let Lookup::Miss(token) = cache.lookup(&key(1), generation.snapshot(), 120) else {
        panic!()
    };
    cache.insert(token, decision(2), 120, 120);
    assert_eq!(cache.counters().uncacheable, 1);
}

#[test]
fn full_bucket_evicts_least_recently_used() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let keys = colliding_keys(&cache, 7, 5);
    for (i, &k) in keys[..4].iter().enumerate() {
        assert!(!packet(&mut cache, &generation, k, decision(i as u32), 0));
    }
    assert!(packet(&mut cache, &generation, keys[0], decision(0), 0)); // keys[1] is now the oldest
    assert!(!packet(&mut cache, &generation, keys[4], decision(4), 0));
    assert_eq!(cache.counters().evictions, 1);
    assert!(
        !packet(&mut cache, &generation, keys[1], decision(1), 0),
        "the LRU entry was evicted"
    );
    for (i, k) in [(0, keys[0]), (4, keys[4])] {
        assert_eq!(
            cache.lookup(&k, generation.snapshot(), 0),
            Lookup::Hit(decision(i))
        );
    }
}

#[test]
fn broadcast_multicast_and_multipath_are_not_cached() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let uncacheable = [
        Decision {
            kind: RouteKind::Broadcast,
            ..decision(1)
        },
        Decision {
            kind: RouteKind::Multicast,
            ..decision(1)
        },
        Decision {
            flags: DecisionFlags::MULTIPATH.union(DecisionFlags::NO_POLICY),
            ..decision(1)
        },
    ];
    for (n, value) in uncacheable.into_iter().enumerate() {
        let Lookup::Miss(token) = cache.lookup(&key(n as u32), generation.snapshot(), 0) else {
            panic!()
        };
        cache.insert(token, value, 0, u64::MAX);
        assert!(matches!(
            cache.lookup(&key(n as u32), generation.snapshot(), 0),
            Lookup::Miss(_)
        ));
    }
    assert_eq!(cache.counters().uncacheable, 3);
    assert_eq!(cache.occupied(), 0);
    // Blackhole, unreachable, prohibit and local results are cacheable.
    let Lookup::Miss(token) = cache.lookup(&key(9), generation.snapshot(), 0) else {
        panic!()
    };
    let unreachable = Decision {
        kind: RouteKind::Unreachable,
        ..decision(0)
    };
    cache.insert(token, unreachable, 0, u64::MAX);
    assert_eq!(
        cache.lookup(&key(9), generation.snapshot(), 0),
        Lookup::Hit(unreachable)
    );
}

#[test]
fn custom_rules_disable_cache_and_hint() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let mut hint = RouteHint::new();
    assert!(!packet(&mut cache, &generation, key(1), decision(1), 0));
    hint.remember(key(1), decision(1));
    generation.set_custom_rules(true);
    assert_eq!(
        cache.lookup(&key(1), generation.snapshot(), 0),
        Lookup::Bypass
    );
    assert_eq!(hint.lookup(&key(1), generation.snapshot()), None);
    assert_eq!(cache.counters().disabled, 1);
    generation.set_custom_rules(false);
    // The toggle also started a new generation: the old entry is stale.
    assert!(matches!(
        cache.lookup(&key(1), generation.snapshot(), 0),
        Lookup::Miss(_)
    ));
}

#[test]
fn the_whole_key_is_compared() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let dst = Ipv4Addr::new(192, 0, 2, 1);
    let base = FlowKey::v4(dst, 0, 1);
    assert!(!packet(&mut cache, &generation, base, decision(1), 0));
    for other in [
        FlowKey::v4(dst, 0x10, 1),
        FlowKey::v4(dst, 0, 2),
        FlowKey::v6("::192.0.2.1".parse().unwrap(), 0, 1),
    ] {
        assert!(
            matches!(
                cache.lookup(&other, generation.snapshot(), 0),
                Lookup::Miss(_)
            ),
            "{other:?}"
        );
    }
}

/// A stream aimed at one bucket (the attacker knows the key) only ever evicts inside that
/// bucket; the same stream against a cache with another key spreads over many buckets.
#[test]
fn adversarial_stream_stays_in_its_bucket() {
    let generation = Generation::new();
    let mut cache = cache(no_bypass());
    let victims: Vec<FlowKey> = (1_000_000..1_000_200)
        .map(key)
        .filter(|k| cache.bucket_of(k) != 0)
        .take(100)
        .collect();
    for &k in &victims {
        packet(&mut cache, &generation, k, decision(1), 0);
    }
    let resident: Vec<FlowKey> = victims
        .iter()
        .copied()
        .filter(|k| matches!(cache.lookup(k, generation.snapshot(), 0), Lookup::Hit(_)))
        .collect();
    assert!(!resident.is_empty());
    let attack = colliding_keys(&cache, 0, 1000);
    for &k in &attack {
        packet(&mut cache, &generation, k, decision(9), 0);
    }
    for k in &resident {
        assert_eq!(
            cache.lookup(k, generation.snapshot(), 0),
            Lookup::Hit(decision(1)),
            "{k:?} evicted"
        );
    }
    let other = cache_with_seed(SEED ^ 0xffff);
    let mut buckets: Vec<usize> = attack.iter().map(|k| other.bucket_of(k)).collect();
    buckets.sort_unstable();
    buckets.dedup();
    assert!(
        buckets.len() > other.buckets() / 2,
        "{} of {} buckets",
        buckets.len(),
        other.buckets()
    );
}

fn cache_with_seed(seed: u64) -> DstCache<Decision> {
    cache(Config {
        seed: Some(seed),
        ..no_bypass()
    })
}

#[test]
fn random_keys_differ_between_caches() {
    let a: DstCache<Decision> = DstCache::new(Config::default()).unwrap();
    let b: DstCache<Decision> = DstCache::new(Config::default()).unwrap();
    let same = (0..256)
        .map(key)
        .filter(|k| a.bucket_of(k) == b.bucket_of(k))
        .count();
    // Independent keys agree on about 1 in 128 buckets; identical keys on all 256.
    assert!(
        same < 64,
        "{same} of 256 keys share a bucket in both caches"
    );
}

/// A flood of new destinations turns the cache off; a small working set turns it back on.
#[test]
fn bypass_enters_on_a_flood_and_leaves_when_hits_return() {
    let bypass = BypassConfig::default();
    let generation = Generation::new();
    let mut cache = cache(Config {
        seed: Some(SEED),
        ..Config::default()
    });
    // A working set of 8 flows: nearly all hits, cache stays on.
    for i in 0..10_000u32 {
        packet(&mut cache, &generation, key(i % 8), decision(1), 0);
    }
    assert!(!cache.is_bypassing());
    // A flood: every packet a new destination.
    let mut n = 100_000;
    for _ in 0..bypass.window * 2 {
        n += 1;
        packet(&mut cache, &generation, key(n), decision(1), 0);
    }
    assert!(cache.is_bypassing());
    let bypassed = cache.counters().bypassed;
    assert!(bypassed > 0);
    // Still flooding: it stays off, looking at one packet in `probe_every`, then, after each
    // window of missed probes, in twice as many (three windows: 1 + 2 + 4 blocks' worth).
    let before = *cache.counters();
    for _ in 0..bypass.probe_every * bypass.probe_window * 7 {
        n += 1;
        packet(&mut cache, &generation, key(n), decision(1), 0);
    }
    assert!(cache.is_bypassing());
    let used = cache.counters().hits + cache.counters().misses - before.hits - before.misses;
    // One probe per block; a window that ends mid-block starts the next block early, so a few
    // more blocks fit; the first window began in the flood above (a few of its probes came
    // before `before`), so it ends early and the longer blocks start early: a few fewer.
    let windows = u64::from(bypass.probe_window * 3);
    assert!((windows - 4..=windows + 3).contains(&used), "{used} probes");
    // The flood ends: probes hit again and the cache comes back on within a probe window (of
    // one probe in at most `probe_every_max` lookups).
    for i in 0..bypass.probe_every_max * bypass.probe_window * 2 {
        packet(&mut cache, &generation, key(i % 8), decision(1), 0);
    }
    assert!(!cache.is_bypassing());
}
