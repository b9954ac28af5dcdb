//! Query orders the benchmarks share.

/// A fixed pseudo-random permutation of `0..n` (xorshift; no dependency), so that a lookup
/// pass visits every key once in an order the prefetcher cannot follow, and every run and
/// every harness (the addr-table benchmark, its `addr_huge` example) visits them alike.
///
/// ```
/// let order = xfwd_benches::order::shuffled(5);
/// let mut sorted = order.clone();
/// sorted.sort_unstable();
/// assert_eq!(sorted, [0, 1, 2, 3, 4]);
/// assert_eq!(order, xfwd_benches::order::shuffled(5));
/// ```
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
