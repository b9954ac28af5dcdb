//! Adaptive bypass: stop using the cache when it does not pay, and notice when it would again.

use crate::config::BypassConfig;

/// Whether the cache is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Every lookup uses the cache.
    On,
    /// Only probes use the cache.
    Off,
}

/// The bypass state machine of one cache.
#[derive(Clone, Debug)]
pub(crate) struct Bypass {
    config: BypassConfig,
    mode: Mode,
    /// Lookups (on) or probes (off) counted in the current window.
    seen: u32,
    /// Hits among them.
    hits: u32,
    /// Lookups seen in the current block of `interval` (off).
    skipped: u32,
    /// One lookup in this many is a probe (off): `probe_every` when the cache turned off,
    /// doubled by every probe window that keeps it off, up to `probe_every_max`.
    interval: u32,
    /// The position (1..=`interval`) of the probe in the current block (off): drawn anew
    /// for every block, so that traffic with a period (a replayed trace, a round-robin
    /// generator) cannot keep probing the same flows and fake a hit rate.
    target: u32,
    /// The xorshift state that draws the positions.
    rng: u64,
}

impl Bypass {
    pub(crate) fn new(config: BypassConfig) -> Self {
        Bypass {
            config,
            mode: Mode::On,
            seen: 0,
            hits: 0,
            skipped: 0,
            interval: config.probe_every,
            target: config.probe_every,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The probe's position in the next block.
    #[inline]
    fn next_target(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        1 + (x % u64::from(self.interval)) as u32
    }

    /// Whether this lookup may use the cache (always while on; while off, one in each block of
    /// `interval` lookups, at a pseudo-random position in the block).
    #[inline]
    pub(crate) fn admit(&mut self) -> bool {
        match self.mode {
            Mode::On => true,
            Mode::Off => {
                self.skipped += 1;
                let admitted = self.skipped == self.target;
                if self.skipped >= self.interval {
                    self.skipped = 0;
                    self.target = self.next_target();
                }
                admitted
            }
        }
    }

    /// [`admit`](Self::admit) for the next `n` lookups (at most 64) at once: bit `i` of the
    /// answer says whether the `i`-th of them may use the cache. The same answers and state as
    /// `n` calls, in a few steps per block of `interval` rather than one per lookup.
    #[inline]
    pub(crate) fn admit_many(&mut self, n: u32) -> u64 {
        debug_assert!(n <= 64);
        let all = u64::MAX.checked_shr(64 - n).unwrap_or(0);
        if self.mode == Mode::On {
            return all;
        }
        let mut mask = 0u64;
        let mut done = 0u32;
        while done < n {
            // This block's probe is still ahead if its position lies beyond the lookups seen.
            if self.target > self.skipped {
                let at = done + (self.target - self.skipped - 1);
                if at < n {
                    mask |= 1 << at;
                }
            }
            let left_in_block = self.interval - self.skipped;
            if left_in_block <= n - done {
                done += left_in_block;
                self.skipped = 0;
                self.target = self.next_target();
            } else {
                self.skipped += n - done;
                done = n;
            }
        }
        mask
    }

    /// Records the outcome of an admitted lookup and switches mode at the end of a window.
    #[inline]
    pub(crate) fn record(&mut self, hit: bool) {
        self.seen += 1;
        self.hits += u32::from(hit);
        let (window, threshold) = match self.mode {
            Mode::On => (self.config.window, self.config.enter_below_permille),
            Mode::Off => (self.config.probe_window, self.config.resume_at_permille),
        };
        if self.seen < window {
            return;
        }
        // Compare hits / window with threshold / 1000 without division.
        let meets = u64::from(self.hits) * 1000 >= u64::from(threshold) * u64::from(window);
        match (self.mode, meets) {
            (Mode::On, false) => {
                self.mode = Mode::Off;
                self.interval = self.config.probe_every;
                self.target = self.target.min(self.interval);
            }
            (Mode::Off, true) => self.mode = Mode::On,
            // Still no use: probe half as often, down to one in `probe_every_max`.
            (Mode::Off, false) => {
                self.interval = self
                    .interval
                    .saturating_mul(2)
                    .min(self.config.probe_every_max)
                    .max(self.config.probe_every);
            }
            (Mode::On, true) => {}
        }
        self.seen = 0;
        self.hits = 0;
        self.skipped = 0;
    }

    /// What `n` calls of `if !self.is_off() { self.record(true) }` do, with one step per
    /// window instead of one per hit.
    #[inline]
    pub(crate) fn record_hits(&mut self, mut n: u32) {
        while n > 0 && !self.is_off() {
            // While on, `seen` stays below the window (it is reset when it reaches it).
            let take = n.min(self.config.window.saturating_sub(self.seen)).max(1);
            self.seen += take - 1;
            self.hits += take - 1;
            self.record(true);
            n -= take;
        }
    }

    /// Whether the cache is bypassed now.
    pub(crate) fn is_off(&self) -> bool {
        self.mode == Mode::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Periodic traffic whose period is a multiple of `probe_every` does not probe the same
    /// positions of the period again and again.
    #[test]
    fn probe_positions_vary_from_block_to_block() {
        let mut b = Bypass::new(small());
        b.mode = Mode::Off;
        let mut positions = std::collections::HashSet::new();
        for i in 0..400 {
            if b.admit() {
                positions.insert(i % 4);
            }
        }
        assert!(positions.len() > 1, "{positions:?}");
    }

    /// `admit_many` gives the answers and leaves the state `admit` one at a time would, for
    /// every run length, whichever the block position.
    /// `record_hits(n)` is `n` recorded hits while on, through window ends and the switch to
    /// off (after which hits are not recorded).
    #[test]
    fn record_hits_equals_hits_one_at_a_time() {
        for window in [1, 2, 5, 64] {
            for enter_below_permille in [0, 500, 1000] {
                let config = BypassConfig {
                    window,
                    enter_below_permille,
                    ..small()
                };
                let (mut one, mut many) = (Bypass::new(config), Bypass::new(config));
                for (i, n) in [0u32, 1, 3, 7, 64, 2, 130, 1]
                    .into_iter()
                    .cycle()
                    .take(60)
                    .enumerate()
                {
                    // A miss now and then, so that the mode may switch off.
                    if i % 3 == 0 && !one.is_off() {
                        one.record(false);
                        many.record(false);
                    }
                    for _ in 0..n {
                        if !one.is_off() {
                            one.record(true);
                        }
                    }
                    many.record_hits(n);
                    assert_eq!(
                        (many.mode, many.seen, many.hits, many.skipped),
                        (one.mode, one.seen, one.hits, one.skipped),
                        "window {window}, n {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn admit_many_equals_admit_one_at_a_time() {
        for probe_every in [1, 3, 4, 64, 100] {
            let config = BypassConfig {
                probe_every,
                ..small()
            };
            let (mut one, mut many) = (Bypass::new(config), Bypass::new(config));
            one.mode = Mode::Off;
            many.mode = Mode::Off;
            for n in [0u32, 1, 2, 5, 63, 64, 7, 64, 1, 33]
                .into_iter()
                .cycle()
                .take(200)
            {
                let expected = (0..n).fold(0u64, |m, i| m | (u64::from(one.admit()) << i));
                assert_eq!(
                    many.admit_many(n),
                    expected,
                    "probe_every {probe_every}, n {n}"
                );
                assert_eq!(
                    (many.skipped, many.target, many.rng),
                    (one.skipped, one.target, one.rng)
                );
            }
        }
        let mut on = Bypass::new(small());
        assert_eq!(on.admit_many(64), u64::MAX);
        assert_eq!(on.admit_many(3), 0b111);
        assert_eq!(on.admit_many(0), 0);
    }

    fn small() -> BypassConfig {
        BypassConfig {
            window: 10,
            enter_below_permille: 300,
            resume_at_permille: 500,
            probe_every: 4,
            probe_every_max: 4,
            probe_window: 5,
        }
    }

    /// Every probe window that keeps the cache off doubles the block, up to
    /// `probe_every_max`; turning off anew starts again from `probe_every`.
    #[test]
    fn probes_back_off_while_they_keep_missing() {
        let config = BypassConfig {
            probe_every_max: 16,
            ..small()
        };
        let mut b = Bypass::new(config);
        let turn_off = |b: &mut Bypass| {
            for _ in 0..10 {
                assert!(b.admit());
                b.record(false);
            }
            assert!(b.is_off());
        };
        turn_off(&mut b);
        // Admitted lookups in 64 lookups, then a failed window of probes.
        let mut per_block = Vec::new();
        for _ in 0..5 {
            per_block.push(b.interval);
            let admitted = (0..64).filter(|_| b.admit()).count();
            assert_eq!(admitted, 64 / b.interval as usize);
            for _ in 0..5 {
                b.record(false);
            }
            assert!(b.is_off());
        }
        assert_eq!(per_block, [4, 8, 16, 16, 16]);
        // Back on, then off again: one in four once more.
        for _ in 0..5 {
            b.record(true);
        }
        assert!(!b.is_off());
        turn_off(&mut b);
        assert_eq!(b.interval, 4);
        assert_eq!((0..64).filter(|_| b.admit()).count(), 16);
    }

    #[test]
    fn turns_off_below_threshold_and_back_on() {
        let mut b = Bypass::new(small());
        // 3 hits in 10: exactly the threshold, stays on.
        for i in 0..10 {
            assert!(b.admit());
            b.record(i < 3);
        }
        assert!(!b.is_off());
        // 2 hits in 10: off.
        for i in 0..10 {
            assert!(b.admit());
            b.record(i < 2);
        }
        assert!(b.is_off());
        // Off: one lookup in each block of 4 is admitted.
        let admitted: Vec<bool> = (0..8).map(|_| b.admit()).collect();
        assert_eq!(admitted[..4].iter().filter(|a| **a).count(), 1);
        assert_eq!(admitted[4..].iter().filter(|a| **a).count(), 1);
        // Probes: 2 of 5 hit (< 500 per mille), stays off; then 3 of 5, back on.
        for hit in [true, true, false, false, false] {
            b.record(hit);
        }
        assert!(b.is_off());
        for hit in [true, true, true, false, false] {
            b.record(hit);
        }
        assert!(!b.is_off());
        assert!(b.admit());
    }
}
