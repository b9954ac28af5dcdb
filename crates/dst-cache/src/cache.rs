//! The cache itself: fixed buckets of `ways` slots, keyed hashing, LRU within a bucket.

use std::hash::BuildHasher;

use foldhash::SharedSeed;
use foldhash::quality::SeedableRandomState;

use crate::bypass::Bypass;
use crate::config::{Config, ConfigError};
use crate::cost::{CostArm, CostGate};
use crate::decision::Cacheable;
use crate::generation::Snapshot;
use crate::key::FlowKey;

/// What a [`DstCache::lookup`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a miss must be resolved by a full lookup and should be inserted"]
pub enum Lookup<V> {
    /// A valid entry: use the decision (per-packet checks such as the source still apply).
    Hit(V),
    /// No valid entry: do the full lookup, then [`DstCache::insert`] the result with the token.
    Miss(MissToken),
    /// The cache is not in use (custom rules, or adaptive bypass): do the full lookup and do
    /// not insert.
    Bypass,
}

/// Remembers where a missed key belongs and under which generation it was looked up, so that
/// [`DstCache::insert`] neither hashes again nor stores a result under a newer generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissToken {
    key: FlowKey,
    bucket: usize,
    generation: u64,
}

impl MissToken {
    /// The key that missed.
    pub fn key(&self) -> &FlowKey {
        &self.key
    }
}

/// What the cache has done, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lookups that found a valid entry.
    pub hits: u64,
    /// Lookups that used the cache and found no valid entry (including `stale` ones).
    pub misses: u64,
    /// Misses that found the key with an old generation or past its expiry, and cleared it.
    pub stale: u64,
    /// Inserts that displaced a valid entry of another key (the bucket was full).
    pub evictions: u64,
    /// Lookups answered [`Lookup::Bypass`] by the adaptive bypass.
    pub bypassed: u64,
    /// Lookups answered [`Lookup::Bypass`] because custom rules disable caching.
    pub disabled: u64,
    /// Inserts refused: the decision is not cacheable or already expired.
    pub uncacheable: u64,
}

/// One slot's entry, laid out so that a bucket search touches one cache line per slot: the
/// key and everything a search and an insert compare (generation, expiry, LRU time) in the
/// entry's first line, the decision after them (`repr(C)`: in this order), each entry on
/// whole lines (`align(64)`). With the compiler's order and 16-byte alignment a 4-way bucket
/// spread over up to eight lines, which a probe of a bypassed cache (its buckets long evicted
/// by the other lookups) and its insert each missed.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Entry<V> {
    key: FlowKey,
    generation: u64,
    /// The `now` at and after which the entry is expired.
    expires: u64,
    /// When the entry was last inserted or hit, on the cache's own clock (LRU order).
    used: u64,
    value: V,
}

impl<V> Entry<V> {
    fn is_valid(&self, generation: u64, now: u64) -> bool {
        self.generation == generation && now < self.expires
    }
}

/// A per-queue input route cache: a fixed array of buckets of `ways` entries each.
///
/// Owned by one run loop (`&mut self` everywhere: no atomics, no locks). Entries are found by
/// a keyed hash of the [`FlowKey`] with a random per-cache key, so a sender cannot aim at one
/// bucket. An entry is valid while it belongs to the current [`Snapshot`]'s generation and its
/// expiry (on the caller's monotonic clock `now`, in any unit) lies ahead; an invalid entry is
/// cleared when a lookup meets it. A full bucket evicts its least recently used entry.
///
/// ```
/// use std::net::Ipv4Addr;
/// use dst_cache::{Config, Decision, DstCache, FlowKey, Generation, Lookup};
///
/// let generation = Generation::new();
/// let mut cache = DstCache::new(Config::default())?;
/// let key = FlowKey::v4(Ipv4Addr::new(198, 51, 100, 7), 0, 1);
/// let decision = Decision::unicast(2, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
/// let now = 0;
///
/// let snapshot = generation.snapshot(); // once per batch
/// match cache.lookup(&key, snapshot, now) {
///     Lookup::Miss(token) => cache.insert(token, decision, now, u64::MAX),
///     other => panic!("a new cache cannot hit: {other:?}"),
/// }
/// assert_eq!(cache.lookup(&key, snapshot, now), Lookup::Hit(decision));
///
/// generation.bump(); // a route changed
/// assert!(matches!(cache.lookup(&key, generation.snapshot(), now), Lookup::Miss(_)));
/// assert_eq!(cache.counters().stale, 1);
/// # Ok::<(), dst_cache::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct DstCache<V> {
    slots: Box<[Option<Entry<V>>]>,
    ways: usize,
    bucket_mask: usize,
    hasher: SeedableRandomState,
    clock: u64,
    bypass: Option<Bypass>,
    /// The adaptive bypass's cost rule ([`crate::cost`]), with the hit-rate rule.
    cost: Option<CostGate>,
    counters: Counters,
    config: Config,
}

impl<V: Cacheable> DstCache<V> {
    /// An empty cache.
    ///
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        let hasher = match config.seed {
            Some(seed) => SeedableRandomState::with_seed(seed, SharedSeed::global_fixed()),
            None => SeedableRandomState::random(),
        };
        Ok(DstCache {
            slots: vec![None; config.entries].into_boxed_slice(),
            ways: config.ways,
            bucket_mask: config.entries / config.ways - 1,
            hasher,
            clock: 0,
            bypass: config.bypass.map(Bypass::new),
            cost: config.bypass.map(|_| CostGate::new()),
            counters: Counters::default(),
            config,
        })
    }

    /// Looks `key` up under `snapshot` at time `now`: [`admit`](Self::admit), then
    /// [`probe`](Self::probe).
    ///
    /// A hit refreshes the entry's LRU position. An entry of `key` that is stale (older
    /// generation, or expired) is cleared and the lookup misses.
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey, snapshot: Snapshot, now: u64) -> Lookup<V> {
        if !self.admit(snapshot) {
            return Lookup::Bypass;
        }
        self.probe(key, snapshot, now)
    }

    /// The first half of a [`lookup`](Self::lookup), before any key is needed: whether this
    /// lookup may use the cache (no custom rules, and the adaptive bypass admits it). A refusal
    /// is counted (`disabled` or `bypassed`) and stands for a [`Lookup::Bypass`]; an admitted
    /// lookup must go on with [`probe`](Self::probe). A caller that builds keys only for
    /// admitted lookups pays next to nothing while the cache steps aside.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use dst_cache::{Config, DstCache, FlowKey, Generation, Lookup};
    ///
    /// let generation = Generation::new();
    /// let mut cache = DstCache::<dst_cache::Decision>::new(Config::default())?;
    /// generation.set_custom_rules(true);
    /// assert!(!cache.admit(generation.snapshot()));
    /// generation.set_custom_rules(false);
    /// let snapshot = generation.snapshot();
    /// assert!(cache.admit(snapshot));
    /// let key = FlowKey::v4(Ipv4Addr::new(192, 0, 2, 1), 0, 1);
    /// assert!(matches!(cache.probe(&key, snapshot, 0), Lookup::Miss(_)));
    /// assert_eq!((cache.counters().disabled, cache.counters().misses), (1, 1));
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    #[inline]
    pub fn admit(&mut self, snapshot: Snapshot) -> bool {
        if !snapshot.enabled {
            self.counters.disabled += 1;
            return false;
        }
        if let Some(bypass) = &mut self.bypass {
            if !bypass.admit() {
                self.counters.bypassed += 1;
                return false;
            }
        }
        true
    }

    /// [`admit`](Self::admit) for the next `n` lookups (at most 64) at once, for a vector
    /// pipeline: bit `i` of the answer says whether the `i`-th may go on to
    /// [`probe`](Self::probe); the refused ones are counted as `admit` counts them. While the
    /// adaptive bypass keeps the cache off this costs a few steps per vector, not one per
    /// lookup. The probes' outcomes may switch the bypass on or off only from the next call
    /// on (one-at-a-time `admit` would notice within the vector).
    ///
    /// ```
    /// use dst_cache::{Config, DstCache, Generation};
    ///
    /// let generation = Generation::new();
    /// let mut cache = DstCache::<dst_cache::Decision>::new(Config::default())?;
    /// assert_eq!(cache.admit_many(generation.snapshot(), 4), 0b1111);
    /// generation.set_custom_rules(true);
    /// assert_eq!(cache.admit_many(generation.snapshot(), 4), 0);
    /// assert_eq!(cache.counters().disabled, 4);
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If `n` is above 64.
    #[inline]
    pub fn admit_many(&mut self, snapshot: Snapshot, n: usize) -> u64 {
        assert!(n <= 64, "at most 64 lookups at once");
        let n = n as u32;
        if !snapshot.enabled {
            self.counters.disabled += u64::from(n);
            return 0;
        }
        let mask = match (&mut self.bypass, &mut self.cost) {
            // The cost rule, while the hit-rate rule keeps the cache on: a closed gate (or a
            // sample of the tables' path) refuses the vector whole.
            (Some(bypass), Some(cost)) => {
                if !bypass.is_off() && !cost.admits() {
                    0
                } else {
                    bypass.admit_many(n)
                }
            }
            (Some(bypass), None) => bypass.admit_many(n),
            (None, _) => u64::MAX.checked_shr(64 - n).unwrap_or(0),
        };
        self.counters.bypassed += u64::from(n - mask.count_ones());
        mask
    }

    /// The second half of a [`lookup`](Self::lookup), after [`admit`](Self::admit) said yes:
    /// the bucket search. Never answers [`Lookup::Bypass`].
    #[inline]
    pub fn probe(&mut self, key: &FlowKey, snapshot: Snapshot, now: u64) -> Lookup<V> {
        let bucket = self.bucket_of(key);
        let start = bucket * self.ways;
        let mut found = None;
        for slot in &mut self.slots[start..start + self.ways] {
            match slot {
                Some(entry) if entry.key == *key => {
                    if entry.is_valid(snapshot.generation, now) {
                        self.clock += 1;
                        entry.used = self.clock;
                        found = Some(entry.value);
                    } else {
                        *slot = None;
                        self.counters.stale += 1;
                    }
                    break;
                }
                _ => {}
            }
        }
        if let Some(bypass) = &mut self.bypass {
            bypass.record(found.is_some());
        }
        match found {
            Some(value) => {
                self.counters.hits += 1;
                Lookup::Hit(value)
            }
            None => {
                self.counters.misses += 1;
                Lookup::Miss(MissToken {
                    key: *key,
                    bucket,
                    generation: snapshot.generation,
                })
            }
        }
    }

    /// Stores the decision for a missed key, valid until `expires` (use `u64::MAX` for no
    /// expiry) under the generation the miss was looked up in.
    ///
    /// Decisions that are not [cacheable](Cacheable) or already expired are refused (counted in
    /// `uncacheable`). The entry takes the key's own slot if it is there, else an empty or
    /// stale slot, else evicts the bucket's least recently used entry.
    #[inline]
    pub fn insert(&mut self, token: MissToken, value: V, now: u64, expires: u64) {
        if !value.is_cacheable() || expires <= now {
            self.counters.uncacheable += 1;
            return;
        }
        let start = token.bucket * self.ways;
        let bucket = &mut self.slots[start..start + self.ways];
        let same_key = bucket
            .iter()
            .position(|slot| slot.as_ref().is_some_and(|e| e.key == token.key));
        let free = || {
            bucket.iter().position(|slot| match slot {
                None => true,
                Some(entry) => !entry.is_valid(token.generation, now),
            })
        };
        let index = match same_key.or_else(free) {
            Some(index) => index,
            None => {
                self.counters.evictions += 1;
                bucket
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, slot)| slot.as_ref().map_or(0, |e| e.used))
                    .map_or(0, |(index, _)| index)
            }
        };
        self.clock += 1;
        bucket[index] = Some(Entry {
            key: token.key,
            value,
            generation: token.generation,
            expires,
            used: self.clock,
        });
    }
}

impl<V> DstCache<V> {
    /// The bucket `key` maps to under this cache's hash key (for diagnostics and tests).
    #[inline]
    pub fn bucket_of(&self, key: &FlowKey) -> usize {
        (self.hasher.hash_one(key) as usize) & self.bucket_mask
    }

    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        self.bucket_mask + 1
    }

    /// The configuration the cache was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counts a hit that the caller answered without probing: a lookup of the same key as its
    /// previous one, which hit (or missed and was filled with a cacheable decision), under the
    /// same snapshot and `now`, with no insert in between; the answer is the one a probe would
    /// give. Keeps the hit counter and the adaptive bypass's window as if the probe had been
    /// made (a bypass that is off only counts real probes).
    ///
    /// A vector pipeline uses it for runs of frames of one flow, which then cost one probe.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use dst_cache::{Config, Decision, DstCache, FlowKey, Generation, Lookup};
    ///
    /// let mut cache = DstCache::new(Config::default())?;
    /// let snapshot = Generation::new().snapshot();
    /// let key = FlowKey::v4(Ipv4Addr::new(192, 0, 2, 1), 0, 1);
    /// let decision = Decision::unicast(2, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
    /// if let Lookup::Miss(token) = cache.lookup(&key, snapshot, 0) {
    ///     cache.insert(token, decision, 0, u64::MAX);
    /// }
    /// cache.repeat_hit(); // the next frame of the same flow
    /// assert_eq!((cache.counters().misses, cache.counters().hits), (1, 1));
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    #[inline]
    pub fn repeat_hit(&mut self) {
        self.counters.hits += 1;
        if let Some(bypass) = &mut self.bypass {
            if !bypass.is_off() {
                bypass.record(true);
            }
        }
    }

    /// `n` calls of [`repeat_hit`](Self::repeat_hit) at once (a run of frames of one flow,
    /// counted once per run instead of once per frame).
    ///
    /// ```
    /// use dst_cache::{Config, Decision, DstCache};
    /// let mut one = DstCache::<Decision>::new(Config::default())?;
    /// let mut many = DstCache::<Decision>::new(Config::default())?;
    /// for _ in 0..5 {
    ///     one.repeat_hit();
    /// }
    /// many.repeat_hits(5);
    /// assert_eq!(one.counters(), many.counters());
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    #[inline]
    pub fn repeat_hits(&mut self, n: u32) {
        self.counters.hits += u64::from(n);
        if let Some(bypass) = &mut self.bypass {
            bypass.record_hits(n);
        }
    }

    /// Whether the adaptive bypass currently keeps the cache out of use (its hit-rate rule;
    /// see [`is_cost_gated`](Self::is_cost_gated) for its cost rule).
    pub fn is_bypassing(&self) -> bool {
        self.bypass.as_ref().is_some_and(Bypass::is_off)
    }

    /// Whether the adaptive bypass's cost rule ([`cost_sample`](Self::cost_sample)) keeps the
    /// cache out of use: its hits were not cheaper than the caller's path without it.
    pub fn is_cost_gated(&self) -> bool {
        !self.is_bypassing() && self.cost.as_ref().is_some_and(|c| !c.is_open())
    }

    /// The cost rule of the adaptive bypass, for a caller that hands lookups over in vectors
    /// ([`admit_many`](Self::admit_many)): called once before each vector's `admit_many`,
    /// it answers whether that vector is a cost sample and of which path. For a sample, the
    /// caller times the vector's routing (from `admit_many` to the last insert: probes,
    /// table lookups, fills) and reports it with [`record_cost`](Self::record_cost). The cache
    /// then steps aside while its hits are not cheaper than the tables' path, and comes back
    /// when they are cheaper by a margin (the rule and its constants: module `cost`, in the
    /// crate's README). `None` for every vector while the hit-rate rule keeps the cache off,
    /// while the snapshot disables caching, and without a bypass configured. A caller that
    /// never calls it leaves the rule out.
    ///
    /// ```
    /// use dst_cache::{Config, CostArm, DstCache, Generation};
    ///
    /// let mut cache = DstCache::<dst_cache::Decision>::new(Config::default())?;
    /// let snapshot = Generation::new().snapshot();
    /// for _ in 0..10_000 {
    ///     if let Some(arm) = cache.cost_sample(snapshot) {
    ///         let mask = cache.admit_many(snapshot, 64);
    ///         assert_eq!(mask != 0, arm == CostArm::Cache);
    ///         // Say the cache's path costs as much as the tables' (time for 64 lookups).
    ///         cache.record_cost(arm, 64, 6_400);
    ///     } else {
    ///         cache.admit_many(snapshot, 64);
    ///     }
    /// }
    /// assert!(cache.is_cost_gated());
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    #[inline]
    pub fn cost_sample(&mut self, snapshot: Snapshot) -> Option<CostArm> {
        let cost = self.cost.as_mut()?;
        if !snapshot.enabled || self.bypass.as_ref().is_some_and(Bypass::is_off) {
            cost.admits();
            return None;
        }
        cost.sample()
    }

    /// Reports a cost sample ([`cost_sample`](Self::cost_sample)): `cost` (any unit of time,
    /// the same for every report) for the `lookups` lookups of a vector routed by `arm`'s
    /// path. A sample of no lookups is ignored.
    pub fn record_cost(&mut self, arm: CostArm, lookups: usize, cost: u64) {
        if let Some(gate) = &mut self.cost {
            gate.record(arm, u32::try_from(lookups).unwrap_or(u32::MAX), cost);
        }
    }

    /// The number of occupied slots (valid or not yet found stale).
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|slot| slot.is_some()).count()
    }

    /// The entries a lookup under `snapshot` at `now` would hit, with their expiry (on the
    /// caller's clock): for reports such as `xfwd show cache`, never for the packet path.
    /// Entries of an older generation or past their expiry are left out (they are cleared
    /// when a lookup meets them).
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use dst_cache::{Config, Decision, DstCache, FlowKey, Generation, Lookup};
    ///
    /// let generation = Generation::new();
    /// let mut cache = DstCache::new(Config::default())?;
    /// let key = FlowKey::v4(Ipv4Addr::new(198, 51, 100, 7), 0, 1);
    /// let decision = Decision::unicast(2, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
    /// if let Lookup::Miss(token) = cache.lookup(&key, generation.snapshot(), 0) {
    ///     cache.insert(token, decision, 0, 100);
    /// }
    /// let valid: Vec<_> = cache.entries(generation.snapshot(), 10).collect();
    /// assert_eq!(valid, [(&key, &decision, 100)]);
    /// assert_eq!(cache.entries(generation.snapshot(), 100).count(), 0, "expired");
    /// generation.bump();
    /// assert_eq!(cache.entries(generation.snapshot(), 10).count(), 0, "an older generation");
    /// # Ok::<(), dst_cache::ConfigError>(())
    /// ```
    pub fn entries(
        &self,
        snapshot: Snapshot,
        now: u64,
    ) -> impl Iterator<Item = (&FlowKey, &V, u64)> + '_ {
        self.slots
            .iter()
            .flatten()
            .filter(move |e| e.is_valid(snapshot.generation, now))
            .map(|e| (&e.key, &e.value, e.expires))
    }

    /// Empties the cache (counters and bypass state stay).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|slot| *slot = None);
    }

    /// Bytes of memory the cache holds (its slots and the cache itself).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots) + std::mem::size_of::<Self>()
    }
}
