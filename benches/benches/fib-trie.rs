//! fib-trie beside its peers: longest-prefix-match lookups on real full tables (single and
//! batched), full-table build time, single insert/delete latency on a full table, and lookups
//! while a writer applies updates. See `fib-trie.md` beside this file for the method.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_epoch as epoch;
use fib_trie::{LcTrie, Match, ReferenceLpm, TrieKey, TrieWriter};
use ip_network::{Ipv4Network, Ipv6Network};
use ip_network_table::IpNetworkTable;
use ipnet::{Ipv4Net, Ipv6Net};
use iptrie::map::{LCTrieMap, RTrieMap};
use iptrie::{Ipv4Prefix, Ipv6Prefix};
use prefix_trie::PrefixMap;
use rand::{RngExt, SeedableRng, rngs::StdRng};
use xfwd_benches::data::routes::{self, Route};

/// Lookups per iteration.
const KEYS: usize = 4096;

/// One address family's plumbing for the peers.
trait Family: TrieKey + std::fmt::LowerHex {
    type Net: Copy;
    fn random(rng: &mut StdRng) -> Self;
    /// The keys as DPDK's bulk lookup takes them.
    #[cfg(feature = "dpdk")]
    fn rte_keys(keys: &[Self]) -> rte::Keys;
}

impl Family for u32 {
    type Net = Ipv4Net;
    fn random(rng: &mut StdRng) -> u32 {
        rng.random()
    }
    #[cfg(feature = "dpdk")]
    fn rte_keys(keys: &[u32]) -> rte::Keys {
        rte::Keys::V4(keys.to_vec())
    }
}

impl Family for u128 {
    type Net = Ipv6Net;
    fn random(rng: &mut StdRng) -> u128 {
        // Global unicast 2000::/3: uniform IPv6 keys would almost never match.
        (rng.random::<u128>() >> 3) | (1 << 125)
    }
    #[cfg(feature = "dpdk")]
    fn rte_keys(keys: &[u128]) -> rte::Keys {
        rte::Keys::V6(xfwd_benches::dpdk::v6_bytes(keys))
    }
}

/// DPDK's `rte_fib` (DIR-24-8, IPv4) and `rte_fib6` (TRIE, IPv6) as peers (feature `dpdk`).
#[cfg(feature = "dpdk")]
mod rte {
    use std::collections::HashMap;

    use xfwd_benches::dpdk::{RteFib, RteFib6, tbl8_groups};

    /// Bulk lookups per call: the whole key set, DPDK's best case (its lookup prefetches
    /// ahead within a call).
    const BURST: usize = super::KEYS;

    /// A table and the answer each of its next hop ids stands for.
    pub struct Rte {
        fib: Fib,
        /// Next hop id -> (value, prefix length); id 0 is DPDK's "no route", (0, 0).
        answers: Vec<(u32, u8)>,
    }

    enum Fib {
        V4(RteFib),
        V6(RteFib6),
    }

    /// Keys in DPDK's form.
    pub enum Keys {
        V4(Vec<u32>),
        V6(Vec<[u8; 16]>),
    }

    /// Next hop ids for the distinct (value, prefix length) pairs of a table: the ids a router
    /// would give its next hops, with the answer each stands for.
    fn ids<K>(p: &[(K, u8, u32)]) -> (Vec<u64>, Vec<(u32, u8)>) {
        let mut by_answer = HashMap::new();
        let mut answers = vec![(0, 0)];
        let ids = p
            .iter()
            .map(|&(_, l, v)| {
                *by_answer.entry((v, l)).or_insert_with(|| {
                    answers.push((v, l));
                    answers.len() as u64 - 1
                })
            })
            .collect();
        (ids, answers)
    }

    /// The routes to add, shortest prefixes first, each prefix once with its first answer (as
    /// in the tries; DPDK's add would replace it). Short first because DPDK 22.11 mishandles
    /// adding (and deleting) a /0 or /1 over existing more-specifics: the /0 added after the rest
    /// of bgp-full-v4 took over addresses its /16s cover (the same range overflow the FFI
    /// wrapper's test shows for deletes).
    fn add_order<K: Copy + Ord + std::hash::Hash>(
        p: &[(K, u8, u32)],
        ids: &[u64],
    ) -> Vec<(K, u8, u64)> {
        let mut seen = std::collections::HashSet::new();
        let mut routes: Vec<(K, u8, u64)> = p
            .iter()
            .zip(ids)
            .filter(|((k, l, _), _)| seen.insert((*k, *l)))
            .map(|(&(k, l, _), &id)| (k, l, id))
            .collect();
        routes.sort_by_key(|&(k, l, _)| (l, k));
        routes
    }

    impl Rte {
        pub fn v4(p: &[(u32, u8, u32)]) -> Self {
            let (ids, answers) = ids(p);
            let groups = tbl8_groups(p.iter().map(|r| r.1));
            let mut fib = RteFib::new(p.len() + 1024, groups + 1024).expect("rte_fib");
            for (k, l, id) in add_order(p, &ids) {
                fib.add(k, l, id).expect("rte_fib_add");
            }
            Rte {
                fib: Fib::V4(fib),
                answers,
            }
        }

        pub fn v6(p: &[(u128, u8, u32)]) -> Self {
            let (ids, answers) = ids(p);
            let groups = tbl8_groups(p.iter().map(|r| r.1));
            let mut fib = RteFib6::new(p.len() + 1024, groups + 1024).expect("rte_fib6");
            for (k, l, id) in add_order(p, &ids) {
                fib.add(k, l, id).expect("rte_fib6_add");
            }
            Rte {
                fib: Fib::V6(fib),
                answers,
            }
        }

        /// The function id: `dpdk-rte-fib` or `dpdk-rte-fib6`.
        pub fn name(&self) -> &'static str {
            match self.fib {
                Fib::V4(_) => "dpdk-rte-fib",
                Fib::V6(_) => "dpdk-rte-fib6",
            }
        }

        /// Looks up every key (in bursts of `BURST`) and folds the answers into a checksum.
        pub fn checksum(&self, keys: &Keys) -> u64 {
            let mut sum = 0;
            self.for_each_answer(keys, |v, l| sum = super::fold(sum, v, l));
            sum
        }

        /// Looks up every key (in bursts of `BURST`) and passes each (value, plen) to `f`.
        #[inline(always)]
        pub fn for_each_answer(&self, keys: &Keys, mut f: impl FnMut(u32, u8)) {
            let mut hops = [0u64; BURST];
            let mut answer = |hops: &[u64]| {
                for &nh in hops {
                    let (v, l) = self.answers[nh as usize];
                    f(v, l);
                }
            };
            match (&self.fib, keys) {
                (Fib::V4(fib), Keys::V4(keys)) => {
                    for chunk in keys.chunks(BURST) {
                        fib.lookup_bulk(chunk, &mut hops);
                        answer(&hops[..chunk.len()]);
                    }
                }
                (Fib::V6(fib), Keys::V6(keys)) => {
                    for chunk in keys.chunks(BURST) {
                        fib.lookup_bulk(chunk, &mut hops);
                        answer(&hops[..chunk.len()]);
                    }
                }
                _ => unreachable!("keys of the table's family"),
            }
        }

        /// Adds `k/l` with the id of an existing answer, then deletes it.
        pub fn add_delete_v4(&mut self, k: u32, l: u8) {
            let Fib::V4(fib) = &mut self.fib else {
                unreachable!()
            };
            fib.add(k, l, 1).expect("rte_fib_add");
            fib.delete(k, l).expect("rte_fib_delete");
        }
    }
}

/// The answer of one lookup folded into a checksum: value and prefix length (0, 0 for none).
fn fold(sum: u64, value: u32, plen: u8) -> u64 {
    sum.wrapping_mul(31)
        .wrapping_add((u64::from(value) << 8) | u64::from(plen))
}

/// Every engine built over one table, all holding the origin ASN as value.
struct Engines<K: Family> {
    ours: TrieWriter<K, u32>,
    reference: ReferenceLpm<K, u32>,
    prefix_trie: PrefixMap<K::Net, u32>,
    ip_network_table: IpNetworkTable<u32>,
    iptrie: Peer<K>,
    #[cfg(feature = "dpdk")]
    rte: rte::Rte,
}

enum Peer<K: Family> {
    V4(LCTrieMap<Ipv4Prefix, u32>),
    V6(LCTrieMap<Ipv6Prefix, u32>),
    #[allow(dead_code, reason = "ties the key type")]
    Never(std::marker::PhantomData<K>),
}

fn prefixes<A: xfwd_benches::data::PrefixAddr, K: TrieKey>(
    table: &[Route<A>],
    key: impl Fn(A) -> K,
) -> Vec<(K, u8, u32)> {
    table
        .iter()
        .map(|r| (key(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect()
}

/// The full-table load: one `insert_many` into an empty trie (the bulk build).
fn build_ours<K: TrieKey>(p: &[(K, u8, u32)]) -> TrieWriter<K, u32> {
    let mut t = TrieWriter::new();
    t.insert_many(p.iter().copied())
        .expect("canonical prefixes");
    t
}

/// The same table by one `insert` per prefix (the kernel's way, resizing as it goes).
fn build_ours_one_by_one<K: TrieKey>(p: &[(K, u8, u32)]) -> TrieWriter<K, u32> {
    let mut t = TrieWriter::new();
    for &(k, l, v) in p {
        t.insert(k, l, v).expect("canonical prefix");
    }
    t
}

fn build_reference<K: TrieKey>(p: &[(K, u8, u32)]) -> ReferenceLpm<K, u32> {
    let mut t = ReferenceLpm::new();
    for &(k, l, v) in p {
        t.insert(k, l, v).expect("canonical prefix");
    }
    t
}

fn build_v4(p: &[(u32, u8, u32)]) -> Engines<u32> {
    let mut prefix_trie = PrefixMap::new();
    let mut ip_network_table = IpNetworkTable::new();
    let mut rtrie = RTrieMap::with_root(0);
    for &(k, l, v) in p {
        let a = Ipv4Addr::from(k);
        prefix_trie.insert(Ipv4Net::new(a, l).expect("valid"), v);
        ip_network_table.insert(Ipv4Network::new(a, l).expect("valid"), v);
        rtrie.insert(Ipv4Prefix::new(a, l).expect("valid"), v);
    }
    Engines {
        ours: build_ours(p),
        reference: build_reference(p),
        prefix_trie,
        ip_network_table,
        iptrie: Peer::V4(rtrie.compress()),
        #[cfg(feature = "dpdk")]
        rte: rte::Rte::v4(p),
    }
}

fn build_v6(p: &[(u128, u8, u32)]) -> Engines<u128> {
    let mut prefix_trie = PrefixMap::new();
    let mut ip_network_table = IpNetworkTable::new();
    let mut rtrie = RTrieMap::with_root(0);
    for &(k, l, v) in p {
        let a = Ipv6Addr::from(k);
        prefix_trie.insert(Ipv6Net::new(a, l).expect("valid"), v);
        ip_network_table.insert(Ipv6Network::new(a, l).expect("valid"), v);
        rtrie.insert(Ipv6Prefix::new(a, l).expect("valid"), v);
    }
    Engines {
        ours: build_ours(p),
        reference: build_reference(p),
        prefix_trie,
        ip_network_table,
        iptrie: Peer::V6(rtrie.compress()),
        #[cfg(feature = "dpdk")]
        rte: rte::Rte::v6(p),
    }
}

/// The peers' lookups of one key, as (value, plen).
trait Lookups {
    fn prefix_trie(&self, key: Self::Key) -> (u32, u8);
    fn ip_network_table(&self, key: Self::Key) -> (u32, u8);
    fn iptrie(&self, key: Self::Key) -> (u32, u8);
    type Key;
}

impl Lookups for Engines<u32> {
    type Key = u32;
    fn prefix_trie(&self, key: u32) -> (u32, u8) {
        let net = Ipv4Net::new(Ipv4Addr::from(key), 32).expect("host");
        self.prefix_trie
            .get_lpm(&net)
            .map_or((0, 0), |(p, v)| (*v, p.prefix_len()))
    }
    fn ip_network_table(&self, key: u32) -> (u32, u8) {
        self.ip_network_table
            .longest_match_ipv4(Ipv4Addr::from(key))
            .map_or((0, 0), |(n, v)| (*v, n.netmask()))
    }
    fn iptrie(&self, key: u32) -> (u32, u8) {
        let Peer::V4(t) = &self.iptrie else {
            unreachable!()
        };
        let (p, v) = t.lookup(&Ipv4Addr::from(key));
        (*v, iptrie::IpPrefix::len(p))
    }
}

impl Lookups for Engines<u128> {
    type Key = u128;
    fn prefix_trie(&self, key: u128) -> (u32, u8) {
        let net = Ipv6Net::new(Ipv6Addr::from(key), 128).expect("host");
        self.prefix_trie
            .get_lpm(&net)
            .map_or((0, 0), |(p, v)| (*v, p.prefix_len()))
    }
    fn ip_network_table(&self, key: u128) -> (u32, u8) {
        self.ip_network_table
            .longest_match_ipv6(Ipv6Addr::from(key))
            .map_or((0, 0), |(n, v)| (*v, n.netmask()))
    }
    fn iptrie(&self, key: u128) -> (u32, u8) {
        let Peer::V6(t) = &self.iptrie else {
            unreachable!()
        };
        let (p, v) = t.lookup(&Ipv6Addr::from(key));
        (*v, iptrie::IpPrefix::len(p))
    }
}

fn ours_of(m: Option<Match<'_, impl Copy, u32>>) -> (u32, u8) {
    m.map_or((0, 0), |m| (*m.value, m.plen))
}

/// The checksums of every engine over `keys`, which must all agree.
fn checksums<K: Family>(e: &Engines<K>, keys: &[K]) -> Vec<(&'static str, u64)>
where
    Engines<K>: Lookups<Key = K>,
{
    let guard = &epoch::pin();
    let sum = |f: &dyn Fn(K) -> (u32, u8)| {
        keys.iter().fold(0, |s, &k| {
            let (v, l) = f(k);
            fold(s, v, l)
        })
    };
    let mut batched = vec![None; keys.len()];
    e.ours.lookup_batch(keys, &mut batched, guard, |_| true);
    #[allow(unused_mut, reason = "the dpdk feature adds a peer")]
    let mut sums = vec![
        (
            "fib-trie",
            sum(&|k| ours_of(e.ours.lookup(k, guard, |_| true))),
        ),
        (
            "fib-trie-batched",
            batched.iter().fold(0, |s, m| {
                let (v, l) = ours_of(*m);
                fold(s, v, l)
            }),
        ),
        (
            "reference",
            sum(&|k| {
                e.reference
                    .lookup(k, |_| true)
                    .map_or((0, 0), |(_, l, v)| (*v, l))
            }),
        ),
        ("prefix-trie", sum(&|k| e.prefix_trie(k))),
        ("ip_network_table", sum(&|k| e.ip_network_table(k))),
        ("iptrie", sum(&|k| e.iptrie(k))),
    ];
    #[cfg(feature = "dpdk")]
    {
        let mut rte = Vec::with_capacity(keys.len());
        e.rte
            .for_each_answer(&K::rte_keys(keys), |v, l| rte.push((v, l)));
        // Name the first key DPDK answers differently, if any, before the checksums disagree.
        for (&k, &theirs) in keys.iter().zip(&rte) {
            let ours = ours_of(e.ours.lookup(k, guard, |_| true));
            assert_eq!(theirs, ours, "{} differs on key {k:x}", e.rte.name());
        }
        sums.push((e.rte.name(), e.rte.checksum(&K::rte_keys(keys))));
    }
    sums
}

fn lookup_group<K: Family>(c: &mut Criterion, group: &str, table: &str, e: &Engines<K>, keys: &[K])
where
    Engines<K>: Lookups<Key = K>,
{
    let sums = checksums(e, keys);
    for (name, sum) in &sums {
        assert_eq!(
            *sum, sums[0].1,
            "{name} disagrees with fib-trie on {table} ({group})"
        );
    }
    let mut g = c.benchmark_group(format!("fib-trie/{group}"));
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.bench_function(BenchmarkId::new("fib-trie", table), |b| {
        b.iter(|| {
            let guard = epoch::pin();
            keys.iter().fold(0, |s, &k| {
                let (v, l) = ours_of(e.ours.lookup(k, &guard, |_| true));
                fold(s, v, l)
            })
        });
    });
    g.bench_function(BenchmarkId::new("fib-trie-batched", table), |b| {
        b.iter(|| {
            let guard = epoch::pin();
            keys.chunks(fib_trie::BATCH).fold(0, |s, chunk| {
                let mut out = [None; fib_trie::BATCH];
                e.ours.lookup_batch(chunk, &mut out, &guard, |_| true);
                out[..chunk.len()].iter().fold(s, |s, m| {
                    let (v, l) = ours_of(*m);
                    fold(s, v, l)
                })
            })
        });
    });
    g.bench_function(BenchmarkId::new("prefix-trie", table), |b| {
        b.iter(|| {
            keys.iter().fold(0, |s, &k| {
                let (v, l) = e.prefix_trie(k);
                fold(s, v, l)
            })
        });
    });
    g.bench_function(BenchmarkId::new("ip_network_table", table), |b| {
        b.iter(|| {
            keys.iter().fold(0, |s, &k| {
                let (v, l) = e.ip_network_table(k);
                fold(s, v, l)
            })
        });
    });
    g.bench_function(BenchmarkId::new("iptrie", table), |b| {
        b.iter(|| {
            keys.iter().fold(0, |s, &k| {
                let (v, l) = e.iptrie(k);
                fold(s, v, l)
            })
        });
    });
    #[cfg(feature = "dpdk")]
    {
        let rte_keys = K::rte_keys(keys);
        g.bench_function(BenchmarkId::new(e.rte.name(), table), |b| {
            b.iter(|| e.rte.checksum(&rte_keys));
        });
    }
    g.bench_function(BenchmarkId::new("reference", table), |b| {
        b.iter(|| {
            keys.iter().fold(0, |s, &k| {
                let (v, l) = e
                    .reference
                    .lookup(k, |_| true)
                    .map_or((0, 0), |(_, l, v)| (*v, l));
                fold(s, v, l)
            })
        });
    });
    g.finish();
}

/// `KEYS` uniform keys and `KEYS` keys inside announced prefixes.
fn keys<K: Family>(p: &[(K, u8, u32)], seed: u64) -> (Vec<K>, Vec<K>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let uniform = (0..KEYS).map(|_| K::random(&mut rng)).collect();
    let announced = (0..KEYS)
        .map(|_| {
            let (k, l, _) = p[rng.random_range(0..p.len())];
            k | (K::random(&mut rng) & !K::prefix_mask(l))
        })
        .collect();
    (uniform, announced)
}

fn report<K: TrieKey>(table: &str, t: &LcTrie<K, u32>) {
    let s = t.stats(&epoch::pin());
    eprintln!(
        "fib-trie shape on {table}: {} bytes ({:.1} MiB)\n{s}",
        s.bytes,
        s.bytes as f64 / 1048576.0
    );
}

fn lookups(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    let e = build_v4(&v4);
    report("bgp-full-v4", &e.ours);
    let (uniform, announced) = keys(&v4, 1);
    lookup_group(c, "lookup-uniform", "bgp-full-v4", &e, &uniform);
    lookup_group(c, "lookup-announced", "bgp-full-v4", &e, &announced);
    drop(e);

    let dfz = prefixes(&routes::DFZ_V4.load().expect("dfz-v4"), u32::from);
    let e = build_v4(&dfz);
    report("dfz-v4", &e.ours);
    let (uniform, announced) = keys(&dfz, 2);
    lookup_group(c, "lookup-uniform", "dfz-v4", &e, &uniform);
    lookup_group(c, "lookup-announced", "dfz-v4", &e, &announced);
    drop(e);

    let v6 = prefixes(
        &routes::BGP_FULL_V6.load().expect("bgp-full-v6"),
        u128::from,
    );
    let e = build_v6(&v6);
    report("bgp-full-v6", &e.ours);
    let (uniform, announced) = keys(&v6, 3);
    lookup_group(c, "lookup-uniform", "bgp-full-v6", &e, &uniform);
    lookup_group(c, "lookup-announced", "bgp-full-v6", &e, &announced);
}

/// Full-table build time (bgp-full-v4), each engine from the same prefix list.
fn build(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    let mut g = c.benchmark_group("fib-trie/build");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(v4.len() as u64));
    g.bench_function(BenchmarkId::new("fib-trie", "bgp-full-v4"), |b| {
        b.iter(|| build_ours(&v4))
    });
    g.bench_function(BenchmarkId::new("fib-trie-insert", "bgp-full-v4"), |b| {
        b.iter(|| build_ours_one_by_one(&v4))
    });
    g.bench_function(BenchmarkId::new("prefix-trie", "bgp-full-v4"), |b| {
        b.iter(|| {
            let mut t = PrefixMap::new();
            for &(k, l, v) in &v4 {
                t.insert(Ipv4Net::new(Ipv4Addr::from(k), l).expect("valid"), v);
            }
            t
        });
    });
    g.bench_function(BenchmarkId::new("ip_network_table", "bgp-full-v4"), |b| {
        b.iter(|| {
            let mut t = IpNetworkTable::new();
            for &(k, l, v) in &v4 {
                t.insert(Ipv4Network::new(Ipv4Addr::from(k), l).expect("valid"), v);
            }
            t
        });
    });
    g.bench_function(BenchmarkId::new("iptrie", "bgp-full-v4"), |b| {
        b.iter(|| {
            let mut t = RTrieMap::with_root(0);
            for &(k, l, v) in &v4 {
                t.insert(Ipv4Prefix::new(Ipv4Addr::from(k), l).expect("valid"), v);
            }
            t.compress()
        });
    });
    g.bench_function(BenchmarkId::new("reference", "bgp-full-v4"), |b| {
        b.iter(|| build_reference(&v4))
    });
    #[cfg(feature = "dpdk")]
    g.bench_function(BenchmarkId::new("dpdk-rte-fib", "bgp-full-v4"), |b| {
        b.iter(|| rte::Rte::v4(&v4))
    });
    g.finish();
}

/// One insert plus one delete of a /24 absent from the full bgp-full-v4 table.
fn update(c: &mut Criterion) {
    let v4 = prefixes(&routes::BGP_FULL_V4.load().expect("bgp-full-v4"), u32::from);
    let e = build_v4(&v4);
    let mut rng = StdRng::seed_from_u64(4);
    let fresh: Vec<u32> = std::iter::repeat_with(|| rng.random::<u32>() & 0xffff_ff00)
        .filter(|k| e.ours.get(*k, &epoch::pin()).is_none())
        .take(1024)
        .collect();
    let Engines {
        mut ours,
        mut prefix_trie,
        mut ip_network_table,
        #[cfg(feature = "dpdk")]
        mut rte,
        ..
    } = e;
    let mut g = c.benchmark_group("fib-trie/update");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(2));
    let mut i = 0;
    g.bench_function(BenchmarkId::new("fib-trie", "bgp-full-v4"), |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            ours.insert(fresh[i], 24, 1).expect("valid");
            ours.remove(fresh[i], 24).expect("valid")
        });
    });
    g.bench_function(BenchmarkId::new("prefix-trie", "bgp-full-v4"), |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            let net = Ipv4Net::new(Ipv4Addr::from(fresh[i]), 24).expect("valid");
            prefix_trie.insert(net, 1);
            prefix_trie.remove(&net)
        });
    });
    g.bench_function(BenchmarkId::new("ip_network_table", "bgp-full-v4"), |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            let net = Ipv4Network::new(Ipv4Addr::from(fresh[i]), 24).expect("valid");
            ip_network_table.insert(net, 1);
            ip_network_table.remove(net)
        });
    });
    #[cfg(feature = "dpdk")]
    g.bench_function(BenchmarkId::new("dpdk-rte-fib", "bgp-full-v4"), |b| {
        b.iter(|| {
            i = (i + 1) % fresh.len();
            rte.add_delete_v4(fresh[i], 24);
        });
    });
    g.finish();
    #[cfg(feature = "dpdk")]
    drop(rte);

    // Lookups while another thread inserts and deletes /24s as fast as it can.
    let reader = Arc::clone(ours.reader());
    let (_, announced) = keys(&v4, 5);
    let mut g = c.benchmark_group("fib-trie/lookup-while-updating");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(KEYS as u64));
    let run = |b: &mut criterion::Bencher<'_>| {
        b.iter(|| {
            let guard = epoch::pin();
            announced.iter().fold(0, |s, &k| {
                let (v, l) = ours_of(reader.lookup(k, &guard, |_| true));
                fold(s, v, l)
            })
        });
    };
    g.bench_function(BenchmarkId::new("fib-trie", "idle"), run);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, fresh) = (Arc::clone(&stop), fresh.clone());
        std::thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let k = fresh[n % fresh.len()];
                ours.insert(k, 24, 1).expect("valid");
                ours.remove(k, 24).expect("valid");
                n += 1;
            }
            n
        })
    };
    g.bench_function(BenchmarkId::new("fib-trie", "writer-running"), run);
    stop.store(true, Ordering::Relaxed);
    let updates = writer.join().expect("writer");
    eprintln!("fib-trie/lookup-while-updating: the writer made {updates} insert+delete pairs");
    g.finish();
}

criterion_group!(benches, lookups, build, update);
criterion_main!(benches);
