//! Where bucket tables get their hash seeds from.
//!
//! Every bucket table of an [`RhlTable`](crate::RhlTable) hashes with its own 64-bit seed, as
//! each kernel `bucket_table` carries its own `hash_rnd`. A rehash that keeps the size (the
//! chain-length guard) only helps if the next seed cannot be predicted from the last one, so the
//! default source draws every seed from the operating system's entropy. Tests that must replay a
//! run pick [`SeedMode::Deterministic`].
#![forbid(unsafe_code)]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// How an [`RhlTable`](crate::RhlTable) chooses the hash seed of each new bucket table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeedMode {
    /// Unpredictable seeds (from the standard library's OS-seeded SipHash keys). The default.
    #[default]
    Random,
    /// A reproducible sequence of seeds derived from this value (SplitMix64). For tests and
    /// benchmarks that must replay exactly; never for tables that hold attacker-chosen keys.
    Deterministic(u64),
}

/// The writer's generator of table seeds.
#[derive(Debug)]
pub(crate) struct SeedSource {
    mode: SeedMode,
    state: u64,
}

impl SeedSource {
    pub(crate) fn new(mode: SeedMode) -> Self {
        let state = match mode {
            SeedMode::Random => 0,
            SeedMode::Deterministic(seed) => seed,
        };
        Self { mode, state }
    }

    /// The seed for the next bucket table.
    pub(crate) fn next_seed(&mut self) -> u64 {
        match self.mode {
            SeedMode::Random => random_u64(),
            SeedMode::Deterministic(_) => {
                self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                splitmix64_mix(self.state)
            }
        }
    }
}

/// 64 unpredictable bits: the standard library keys each `RandomState` from OS entropy (then
/// increments the key per instance), and SipHash of a counter under a secret key is a PRF.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The output function of SplitMix64 (Steele, Lea, Flood 2014).
pub(crate) fn splitmix64_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_mode_replays_and_random_mode_differs() {
        let mut a = SeedSource::new(SeedMode::Deterministic(7));
        let mut b = SeedSource::new(SeedMode::Deterministic(7));
        let xs: Vec<u64> = (0..4).map(|_| a.next_seed()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_seed()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], xs[1]);
        let mut r = SeedSource::new(SeedMode::Random);
        assert_ne!(r.next_seed(), r.next_seed());
    }
}
