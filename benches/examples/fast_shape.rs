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
use fib_trie::TrieKey;

#[path = "shared/fast_table.rs"]
mod fast_table;
use fast_table::{FLOWS, Table};

fn shape<K: TrieKey + Send + Sync>(name: &str, table: &Table<K>) {
    let fast = Table::fast(&table.trie());
    let guard = epoch::pin();
    let (mut loads, mut lines) = (BTreeMap::new(), BTreeMap::new());
    let mut all_lines = HashSet::new();
    let mut by_len = BTreeMap::new();
    for key in table.destinations() {
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
    let family = std::env::var("FAMILY").unwrap_or_default();
    if family != "v6" {
        let (name, table) = fast_table::v4();
        shape(name, &table);
    }
    if family != "v4" {
        let (name, table) = fast_table::v6();
        shape(name, &table);
    }
}
