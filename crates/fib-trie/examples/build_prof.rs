//! Profiling aid: builds a synthetic 300k-prefix table and reports the time.
fn main() {
    let t = fib_trie::LcTrie::<u32, u32>::new();
    let mut x: u32 = 12345;
    let start = std::time::Instant::now();
    for i in 0..300_000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let plen = 16 + (x % 9) as u8;
        let _ = t.insert(x & <u32 as fib_trie::TrieKey>::prefix_mask(plen), plen, i);
    }
    eprintln!("built in {:?}", start.elapsed());
}
