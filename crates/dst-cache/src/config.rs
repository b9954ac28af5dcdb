//! Cache geometry and adaptive-bypass settings.

/// The largest cache accepted: 2^24 entries.
pub const MAX_ENTRIES: usize = 1 << 24;

/// How a [`DstCache`](crate::DstCache) is laid out and when it steps aside.
///
/// ```
/// use dst_cache::Config;
///
/// let config = Config { entries: 1024, ways: 8, ..Config::default() };
/// assert!(config.validate().is_ok());
/// assert!(Config { entries: 1000, ..Config::default() }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Total entries: a power of two, at most [`MAX_ENTRIES`] (the RFC: 512).
    pub entries: usize,
    /// Entries per bucket: a power of two, at most `entries` (the RFC: 4).
    pub ways: usize,
    /// The hash key; `None` draws a random one (the default: nobody can aim at one bucket).
    /// Fix it only for reproducible tests.
    pub seed: Option<u64>,
    /// Adaptive bypass; `None` keeps the cache always on.
    pub bypass: Option<BypassConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            entries: 512,
            ways: 4,
            seed: None,
            bypass: Some(BypassConfig::default()),
        }
    }
}

/// When the cache stops being used and when it comes back.
///
/// While on, the hit rate is measured over windows of `window` lookups; a window below
/// `enter_below_permille` turns the cache off. While off, only one lookup in each block of
/// `probe_every`, at a pseudo-random position, uses it (a probe: looked up, and inserted on a
/// miss, so the cache keeps learning); after `probe_window` probes, a hit rate of at least
/// `resume_at_permille` turns it on again. Each probe window that keeps the cache off doubles
/// the block, up to `probe_every_max`: traffic the cache cannot serve pays for fewer and
/// fewer probes, and the block is `probe_every` again whenever the cache turns off anew.
///
/// A bypassed cache never serves a stale answer: the bypass only decides whether a lookup uses
/// the cache; every probe, and every lookup once the cache is back on, checks an entry's
/// generation and expiry as any lookup does, so entries stored before a generation bump that
/// came while the cache was off are misses when it comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BypassConfig {
    /// Lookups per measuring window while the cache is on.
    pub window: u32,
    /// Hit rate (per mille) below which a window turns the cache off.
    pub enter_below_permille: u16,
    /// Hit rate (per mille) of the probes at which the cache turns on again.
    pub resume_at_permille: u16,
    /// While off, one lookup in this many is a probe (at first).
    pub probe_every: u32,
    /// While off, the longest block one probe stands for (at least `probe_every`).
    pub probe_every_max: u32,
    /// Probes per measuring window while the cache is off.
    pub probe_window: u32,
}

/// The defaults use the cache only where it clearly pays: below one hit in four lookups it
/// steps aside, and it comes back when half the probes hit. While the cache is off its content
/// stays as it was, so probes of a working set a few times larger than the cache hit more often
/// than lookups would with the cache on (which churns it); lower thresholds (10% and 20%
/// before) let such traffic switch the cache on and off again and again.
///
/// While off, one lookup in 256 is a probe (64 before): a probe reads a bucket of the cache
/// that the other lookups' table walks have long evicted (four slots across several cache
/// lines) and inserts into it on a miss, misses that nothing overlaps; in a vector pipeline at
/// 8k flows one probe per 64-frame vector cost about 2% in time where its instructions were
/// 0.7%. The decision to come back still takes `probe_window` (64) probes: 16,384 lookups,
/// about a millisecond at 15 Mpps per queue, while the cache has just turned off. Every window
/// of probes that keeps it off doubles the block, up to one probe in 4,096 lookups (after
/// 245,760 lookups off): the probes then cost a sixteenth of what they cost at first, and a
/// change of traffic that would make the cache pay again is noticed within 262,144 lookups
/// (about 17 ms at 15 Mpps).
impl Default for BypassConfig {
    fn default() -> Self {
        BypassConfig {
            window: 1024,
            enter_below_permille: 250,
            resume_at_permille: 500,
            probe_every: 256,
            probe_every_max: 4096,
            probe_window: 64,
        }
    }
}

/// Why a [`Config`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `entries` is zero, not a power of two, or above [`MAX_ENTRIES`].
    #[error("entries must be a power of two in 1..={MAX_ENTRIES}, not {0}")]
    Entries(usize),
    /// `ways` is zero, not a power of two, or above `entries`.
    #[error("ways must be a power of two no larger than the entries, not {0}")]
    Ways(usize),
    /// A bypass window or probe interval is zero, `probe_every_max` is below `probe_every`, a
    /// threshold is above 1000 per mille, or `enter_below_permille` exceeds
    /// `resume_at_permille` (no hysteresis).
    #[error("invalid bypass settings: {0}")]
    Bypass(&'static str),
}

impl Config {
    /// Checks the settings.
    ///
    /// # Errors
    /// The first setting that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.entries.is_power_of_two() || self.entries > MAX_ENTRIES {
            return Err(ConfigError::Entries(self.entries));
        }
        if !self.ways.is_power_of_two() || self.ways > self.entries {
            return Err(ConfigError::Ways(self.ways));
        }
        if let Some(bypass) = &self.bypass {
            bypass.validate()?;
        }
        Ok(())
    }
}

impl BypassConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 || self.probe_window == 0 || self.probe_every == 0 {
            return Err(ConfigError::Bypass(
                "windows and probe interval must be positive",
            ));
        }
        if self.probe_every_max < self.probe_every {
            return Err(ConfigError::Bypass(
                "probe_every_max must not be below probe_every",
            ));
        }
        if self.enter_below_permille > 1000 || self.resume_at_permille > 1000 {
            return Err(ConfigError::Bypass(
                "thresholds are per mille, at most 1000",
            ));
        }
        if self.enter_below_permille > self.resume_at_permille {
            return Err(ConfigError::Bypass(
                "enter_below_permille must not exceed resume_at_permille",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_geometry_and_bypass() {
        let ok = Config::default();
        assert_eq!(ok.validate(), Ok(()));
        for entries in [0, 3, 1000, MAX_ENTRIES * 2] {
            let c = Config { entries, ..ok };
            assert_eq!(c.validate(), Err(ConfigError::Entries(entries)));
        }
        for ways in [0, 3, 1024] {
            let c = Config { ways, ..ok };
            assert_eq!(c.validate(), Err(ConfigError::Ways(ways)));
        }
        assert!(
            Config {
                entries: 1,
                ways: 1,
                ..ok
            }
            .validate()
            .is_ok()
        );
        let bypass = BypassConfig::default();
        for bad in [
            BypassConfig {
                window: 0,
                ..bypass
            },
            BypassConfig {
                probe_every: 0,
                ..bypass
            },
            BypassConfig {
                probe_window: 0,
                ..bypass
            },
            BypassConfig {
                probe_every_max: bypass.probe_every - 1,
                ..bypass
            },
            BypassConfig {
                resume_at_permille: 1001,
                ..bypass
            },
            BypassConfig {
                enter_below_permille: 300,
                resume_at_permille: 200,
                ..bypass
            },
        ] {
            let c = Config {
                bypass: Some(bad),
                ..ok
            };
            assert!(
                matches!(c.validate(), Err(ConfigError::Bypass(_))),
                "{bad:?}"
            );
        }
    }
}
