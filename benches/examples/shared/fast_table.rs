//! What the fast-structure examples (`fast_shape`, `fast_batch`) share: the full BGP tables
//! with FIB-like answers and the dataplane bench's destinations. Included with `#[path]`, so
//! it is not an example of its own.
//!
//! ```ignore
//! #[path = "shared/fast_table.rs"]
//! mod fast_table;
//! let (name, table) = fast_table::v6();
//! ```
use fib_trie::{FastLpmWriter, TrieKey, TrieWriter};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use xfwd_benches::data::routes;

/// Destinations per run, as the dataplane bench's 8k flows.
pub const FLOWS: usize = 8192;

/// A routing table of one family: its prefixes (key, length, origin AS) and how to draw the
/// host bits below a prefix of a given length.
pub struct Table<K> {
    pub prefixes: Vec<(K, u8, u32)>,
    pub host: fn(&mut StdRng, u8) -> K,
}

/// bgp-full-v4.
pub fn v4() -> (&'static str, Table<u32>) {
    let prefixes = routes::BGP_FULL_V4
        .load()
        .unwrap()
        .iter()
        .map(|r| (u32::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    let host = |rng: &mut StdRng, l: u8| rng.random::<u32>().checked_shr(u32::from(l)).unwrap_or(0);
    ("bgp-full-v4", Table { prefixes, host })
}

/// bgp-full-v6.
pub fn v6() -> (&'static str, Table<u128>) {
    let prefixes = routes::BGP_FULL_V6
        .load()
        .unwrap()
        .iter()
        .map(|r| (u128::from(r.prefix.addr), r.prefix.len, r.origin_asn))
        .collect();
    let host =
        |rng: &mut StdRng, l: u8| rng.random::<u128>().checked_shr(u32::from(l)).unwrap_or(0);
    ("bgp-full-v6", Table { prefixes, host })
}

impl<K: TrieKey + Send + Sync> Table<K> {
    /// The trie with FIB-like answers: a next hop (one of 64, from the origin AS) and the
    /// prefix length (`(hop * 256) + len`).
    pub fn trie(&self) -> TrieWriter<K, u32> {
        let mut trie = TrieWriter::new();
        trie.insert_many(
            self.prefixes
                .iter()
                .map(|&(k, l, v)| (k, l, (v % 64) * 256 + u32::from(l))),
        )
        .unwrap();
        trie
    }

    /// The fast structure compiled from [`trie`](Self::trie).
    pub fn fast(trie: &TrieWriter<K, u32>) -> FastLpmWriter<K> {
        let mut fast = FastLpmWriter::new();
        fast.rebuild(&mut &**trie);
        fast
    }

    /// [`FLOWS`] destinations drawn as the dataplane bench draws them: a random announced
    /// prefix other than the default, random host bits (seed 17).
    pub fn destinations(&self) -> Vec<K> {
        let mut rng = StdRng::seed_from_u64(17);
        let p = &self.prefixes;
        (0..FLOWS)
            .map(|_| {
                let (k, l) = loop {
                    let e = p[rng.random_range(0..p.len())];
                    if e.1 > 0 {
                        break (e.0, e.1);
                    }
                };
                k | (self.host)(&mut rng, l)
            })
            .collect()
    }
}
