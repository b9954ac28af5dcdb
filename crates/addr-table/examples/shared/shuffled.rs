//! The benchmark's query order, shared by the examples `lookup_cost` and `placement`
//! (included with `#[path]`, so it is not an example of its own).

/// A fixed pseudo-random permutation of `0..n` (xorshift), as in the benchmark
/// (`xfwd_benches::order::shuffled`, which this crate does not depend on): every pass visits every address once, in an order the
/// prefetcher cannot follow.
pub fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}
