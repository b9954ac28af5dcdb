//! The shape of the fast structure as lookups see it: for bgp-full-v4 and bgp-full-v6 (FIB-like
//! answers: next hop and prefix length), 8,192 destinations drawn as the dataplane bench draws
//! them (a random announced prefix other than the default, random host bits), histograms of
//! the dependent loads per lookup and of the distinct cache lines they touch, and the
//! structure's bytes.
//!
//! `cargo run --release -p xfwd-benches --example fast_shape` (`FAMILY=v4` or `FAMILY=v6` for
//! one).
use std::collections::{BTreeMap, HashSet};

use crossbeam_epoch as epoch;
use fib_trie::{FastLpmWriter, TrieKey, TrieWriter};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xfwd_benches::data::routes;

const FLOWS: usize = 8192;

fn shape<K: TrieKey + Send + Sync>(
    name: &str,
    p: &[(K, u8, u32)],
    host: impl Fn(&mut StdRng, u8) -> K,
) {
    let mut trie = TrieWriter::new();
    trie.insert_many(
        p.iter()
            .map(|&(k, l, v)| (k, l, (v % 64) * 256 + u32::from(l))),
    )
    .unwrap();
    let mut fast = FastLpmWriter::new();
    fast.rebuild(&mut &*trie);
    let mut rng = StdRng::seed_from_u64(17);
    let guard = epoch::pin();
    let (mut loads, mut lines) = (BTreeMap::new(), BTreeMap::new());
    let mut all_lines = HashSet::new();
    let mut by_len = BTreeMap::new();
    for _ in 0..FLOWS {
        let (k, l) = loop {
            let e = p[rng.random_range(0..p.len())];
            if e.1 > 0 {
                break (e.0, e.1);
            }
        };
        let key = k | host(&mut rng, l);
        let path = fast.lookup_path(key, &guard);
        *loads.entry(path.len()).or_insert(0usize) += 1;
        let answer_len = fast.lookup(key, &guard).map_or(0, |a| a & 255);
        *by_len
            .entry(answer_len)
            .or_insert_with(BTreeMap::new)
            .entry(path.len())
            .or_insert(0usize) += 1;
        let distinct: HashSet<usize> = path.iter().map(|a| a / 64).collect();
        *lines.entry(distinct.len()).or_insert(0usize) += 1;
        all_lines.extend(distinct);
    }
    let mean = |h: &BTreeMap<usize, usize>| {
        h.iter().map(|(k, v)| k * v).sum::<usize>() as f64 / FLOWS as f64
    };
    println!(
        "{name}: {} bytes, first level {} bits",
        fast.bytes(),
        fast.first_level_bits()
    );
    println!(
        "{name}: dependent loads per lookup {loads:?} (mean {:.2})",
        mean(&loads)
    );
    println!(
        "{name}: distinct lines per lookup {lines:?} (mean {:.2})",
        mean(&lines)
    );
    for (len, h) in &by_len {
        println!("{name}: answer /{len}: dependent loads {h:?}");
    }
    println!(
        "{name}: distinct lines over all {FLOWS} lookups: {} ({} KiB)",
        all_lines.len(),
        all_lines.len() * 64 / 1024
    );
}

fn main() {
    let v4: Vec<(u32, u8, u32)> = routes::BGP_FULL_V4
        .load()
        .unwrap()
        .iter()
        .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    let family = std::env::var("FAMILY").unwrap_or_default();
    if family != "v6" {
        shape("bgp-full-v4", &v4, |rng, l| {
            rng.random::<u32>().checked_shr(u32::from(l)).unwrap_or(0)
        });
    }
    if family == "v4" {
        return;
    }
    let v6: Vec<(u128, u8, u32)> = routes::BGP_FULL_V6
        .load()
        .unwrap()
        .iter()
        .map(|r| (u128::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    shape("bgp-full-v6", &v6, |rng, l| {
        rng.random::<u128>().checked_shr(u32::from(l)).unwrap_or(0)
    });
}
