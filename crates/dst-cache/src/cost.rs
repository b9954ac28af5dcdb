//! The cost gate: the second rule of the adaptive bypass. The hit-rate rule
//! ([`BypassConfig`](crate::BypassConfig)) steps aside when hits are rare; this one steps aside
//! when hits are frequent but not cheaper than what the caller does without the cache (in
//! xfwd, the FIB's memoised path, which at a few hundred flows answers in fewer instructions
//! than a probe does).
//!
//! The rule, per cache (so per queue): one vector (a batch of lookups handed to
//! [`admit_many`](crate::DstCache::admit_many)) in [`PERIOD`] starts a burst of [`BURST`]
//! vectors through one path, in turn the cache's (its lookups admitted as the hit-rate rule
//! says) or the tables' (refused whole); the last [`TIMED`] of a burst are *samples* (the
//! first warm the path's lines up, which the other path evicted meanwhile: sampled cold, the
//! rarer path would always look dearer and the gate would never move). The caller times the
//! routing of a sampled vector and reports the time
//! and the number of lookups ([`DstCache::record_cost`](crate::DstCache::record_cost)). After
//! [`WINDOW`] samples of each path, the medians of their cost per lookup are compared: an open
//! gate **closes** when the cache's is not below the tables' (`cache >= tables`), a closed
//! gate **opens** again when the cache's is below the tables' by at least 1/[`MARGIN`]
//! (`cache * MARGIN <= tables * (MARGIN - 1)`): a hysteresis, so that two paths of about
//! the same cost do not switch the gate to and fro. While closed, every vector but the
//! cache's samples is refused whole (counted `bypassed`); the samples keep the cache filled
//! and keep measuring, so a change of traffic that makes the cache pay again opens it within
//! two windows (a window: 4 bursts of each path, 2,048 vectors). Samples are taken only while the hit-rate rule keeps the cache on (a cache
//! bypassed for its hit rate has nothing to weigh), so a miss-only stream pays nothing for
//! the gate. Costs: a counter step per vector, two clock reads per sampled vector, and the
//! losing path's bursts (4 vectors in 512).
//!
//! The gate decides only whether the cache is used, never what it answers: a sample through
//! the cache probes it as any lookup does (generation and expiry checked), so verdicts are
//! those of the tables whichever way the gate stands.

/// A burst of vectors through one path starts every this many vectors (alternately of each
/// path, so each path's bursts come every `2 * PERIOD` vectors).
pub const PERIOD: u32 = 256;
/// Vectors per burst: the first `BURST - TIMED` warm the path's lines up (the path that runs
/// one vector in hundreds finds its table lines or cache buckets evicted by the other), the
/// last `TIMED` are the samples.
pub const BURST: u32 = 4;
/// Timed vectors per burst.
pub const TIMED: u32 = 2;
/// Samples of each path per decision.
pub const WINDOW: usize = 8;
/// A closed gate opens when the cache is cheaper by at least 1/`MARGIN` (about 3%).
pub const MARGIN: u64 = 32;

/// The path a sampled vector takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostArm {
    /// Through the cache (probes as the hit-rate rule admits them).
    Cache,
    /// Through the tables alone (the whole vector refused by the cache).
    Tables,
}

/// The cost gate's state.
#[derive(Clone, Debug)]
pub(crate) struct CostGate {
    /// Whether the cache is in use (open) or refused for its cost (closed).
    open: bool,
    /// Vectors until the next burst starts.
    countdown: u32,
    /// Vectors left in the current burst.
    burst: u32,
    /// The path of the next sample.
    next: CostArm,
    /// The sample the current vector is (set by `sample`, taken by `admit`).
    pending: Option<CostArm>,
    /// Cost per lookup (time units × 16 / lookups) of the window's samples, per path.
    cache: [u64; WINDOW],
    tables: [u64; WINDOW],
    cache_n: usize,
    tables_n: usize,
}

impl CostGate {
    pub(crate) fn new() -> Self {
        CostGate {
            open: true,
            countdown: PERIOD,
            burst: 0,
            next: CostArm::Cache,
            pending: None,
            cache: [0; WINDOW],
            tables: [0; WINDOW],
            cache_n: 0,
            tables_n: 0,
        }
    }

    /// Whether the gate lets the cache be used.
    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// Called once per vector (while the hit-rate rule keeps the cache on): whether this
    /// vector is a timed sample, and of which path (a vector of a burst's warm-up takes the
    /// burst's path untimed).
    #[inline]
    pub(crate) fn sample(&mut self) -> Option<CostArm> {
        if self.burst == 0 {
            self.countdown -= 1;
            if self.countdown != 0 {
                self.pending = None;
                return None;
            }
            self.countdown = PERIOD;
            self.burst = BURST;
            self.next = match self.next {
                CostArm::Cache => CostArm::Tables,
                CostArm::Tables => CostArm::Cache,
            };
        }
        self.burst -= 1;
        self.pending = Some(self.next);
        (self.burst < TIMED).then_some(self.next)
    }

    /// Whether the current vector may use the cache: an open gate and not a sample of the
    /// tables, or a sample of the cache. Clears the pending sample.
    #[inline]
    pub(crate) fn admits(&mut self) -> bool {
        match self.pending.take() {
            Some(CostArm::Cache) => true,
            Some(CostArm::Tables) => false,
            None => self.open,
        }
    }

    /// Records a sample: `cost` (any time unit) for `lookups` lookups through `arm`; decides
    /// at the end of a window.
    pub(crate) fn record(&mut self, arm: CostArm, lookups: u32, cost: u64) {
        if lookups == 0 {
            return;
        }
        let per = cost.saturating_mul(16) / u64::from(lookups);
        match arm {
            CostArm::Cache if self.cache_n < WINDOW => {
                self.cache[self.cache_n] = per;
                self.cache_n += 1;
            }
            CostArm::Tables if self.tables_n < WINDOW => {
                self.tables[self.tables_n] = per;
                self.tables_n += 1;
            }
            _ => {}
        }
        if self.cache_n < WINDOW || self.tables_n < WINDOW {
            return;
        }
        let cache = u128::from(median(&mut self.cache));
        let tables = u128::from(median(&mut self.tables));
        let m = u128::from(MARGIN);
        self.open = if self.open {
            cache < tables
        } else {
            cache * m <= tables * (m - 1)
        };
        self.cache_n = 0;
        self.tables_n = 0;
    }
}

/// The median (the upper one of an even count) of a window of samples.
fn median(samples: &mut [u64; WINDOW]) -> u64 {
    samples.sort_unstable();
    samples[WINDOW / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `windows` decision windows with the given costs per lookup of each path; returns
    /// how many vectors the cache admitted.
    fn run(gate: &mut CostGate, windows: usize, cache: u64, tables: u64) -> usize {
        let mut admitted = 0;
        for _ in 0..windows * 2 * (WINDOW / TIMED as usize) * PERIOD as usize {
            let arm = gate.sample();
            admitted += usize::from(gate.admits());
            if let Some(arm) = arm {
                let cost = match arm {
                    CostArm::Cache => cache,
                    CostArm::Tables => tables,
                };
                gate.record(arm, 64, cost * 64);
            }
        }
        admitted
    }

    /// Two windows per step: the first may mix the samples of the step before.
    #[test]
    fn closes_when_the_cache_is_not_cheaper_and_opens_with_hysteresis() {
        let mut gate = CostGate::new();
        assert!(gate.is_open());
        // Cheaper: stays open.
        run(&mut gate, 2, 90, 100);
        assert!(gate.is_open());
        // Equal: not cheaper, closes.
        run(&mut gate, 2, 100, 100);
        assert!(!gate.is_open());
        // Closed: only the cache's bursts are admitted (a burst may straddle the runs' ends).
        let vectors = 2 * (WINDOW / TIMED as usize) * PERIOD as usize;
        let bursts = (WINDOW / TIMED as usize) * BURST as usize;
        let near = |n: usize, m: usize| n.abs_diff(m) < BURST as usize;
        let admitted = run(&mut gate, 1, 100, 100);
        assert!(near(admitted, bursts), "{admitted}");
        assert!(!gate.is_open());
        // 2% cheaper: within the margin, stays closed.
        run(&mut gate, 2, 98, 100);
        assert!(!gate.is_open());
        // 4% cheaper: opens; then all vectors but the tables' bursts are admitted.
        run(&mut gate, 2, 96, 100);
        assert!(gate.is_open());
        let admitted = run(&mut gate, 1, 96, 100);
        assert!(near(admitted, vectors - bursts), "{admitted}");
        // Dearer: closes again.
        run(&mut gate, 2, 120, 100);
        assert!(!gate.is_open());
    }

    /// A burst is `BURST` vectors of one path, the last `TIMED` of them samples; the paths
    /// alternate from burst to burst.
    #[test]
    fn bursts_warm_up_then_sample() {
        let mut gate = CostGate::new();
        let mut seen = Vec::new();
        for _ in 0..3 * PERIOD {
            let sample = gate.sample();
            let admits = gate.admits();
            if sample.is_some() || !admits {
                seen.push((sample, admits));
            }
        }
        let t = CostArm::Tables;
        let c = CostArm::Cache;
        let tables = [
            (None, false),
            (None, false),
            (Some(t), false),
            (Some(t), false),
        ];
        let cache = [(None, true), (None, true), (Some(c), true), (Some(c), true)];
        let expected: Vec<_> = [tables, cache].concat();
        // The cache's warm-up vectors while open look like any other: only its samples show.
        let expected: Vec<_> = expected
            .into_iter()
            .filter(|&(s, a)| s.is_some() || !a)
            .collect();
        assert_eq!(seen, expected);
    }

    /// A few samples slowed by something else (preemption) do not move the decision.
    #[test]
    fn outliers_do_not_decide() {
        let mut gate = CostGate::new();
        let mut k = 0;
        for _ in 0..4 * (WINDOW / TIMED as usize) * PERIOD as usize {
            if let Some(arm) = gate.sample() {
                k += 1;
                let cost = match arm {
                    CostArm::Cache if k % 8 == 1 => 100_000,
                    CostArm::Cache => 90,
                    CostArm::Tables => 100,
                };
                gate.record(arm, 64, cost * 64);
            }
            gate.admits();
        }
        assert!(gate.is_open());
    }

    #[test]
    fn empty_samples_are_ignored() {
        let mut gate = CostGate::new();
        for _ in 0..100 {
            gate.record(CostArm::Cache, 0, 1_000_000);
            gate.record(CostArm::Tables, 0, 0);
        }
        assert_eq!((gate.cache_n, gate.tables_n), (0, 0));
    }
}
