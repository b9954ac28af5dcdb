//! The shared route generation that invalidates every cache at once, lazily.

use std::sync::atomic::{AtomicU64, Ordering};

/// The top bit of the word: set while custom policy rules exist (caching is then off).
const CUSTOM_RULES: u64 = 1 << 63;

/// The control plane's route generation, shared by all run loops (put it in an `Arc`).
///
/// The control plane calls [`bump`](Self::bump) after every routing, neighbour or rule change
/// it has **published** (bumping before publishing would let a run loop cache an old answer
/// under the new generation). Each run loop takes one [`snapshot`](Self::snapshot) per batch
/// and passes it to its cache: entries made under another generation miss and are cleared when
/// met. The word also carries whether custom policy rules exist: while they do, caching is off,
/// as in the kernel, because the decision then depends on more than the cache key.
///
/// ```
/// use dst_cache::Generation;
///
/// let generation = Generation::new();
/// let before = generation.snapshot();
/// generation.bump();
/// assert_ne!(generation.snapshot(), before);
/// generation.set_custom_rules(true);
/// assert!(!generation.snapshot().enabled);
/// ```
#[derive(Debug, Default)]
pub struct Generation {
    word: AtomicU64,
}

/// One run loop's view of the [`Generation`], taken once per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// The generation number.
    pub generation: u64,
    /// Whether caching is allowed (no custom policy rules).
    pub enabled: bool,
}

impl Generation {
    /// Generation 0, no custom rules.
    pub const fn new() -> Self {
        Generation {
            word: AtomicU64::new(0),
        }
    }

    /// Starts a new generation: every entry cached so far becomes stale.
    pub fn bump(&self) {
        // Release: a run loop whose Acquire load sees the new number also sees the change
        // that was published before this bump.
        self.word.fetch_add(1, Ordering::Release);
    }

    /// Records whether custom policy rules exist, and starts a new generation.
    pub fn set_custom_rules(&self, present: bool) {
        let _ = self
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |word| {
                let number = (word & !CUSTOM_RULES).wrapping_add(1) & !CUSTOM_RULES;
                Some(if present {
                    number | CUSTOM_RULES
                } else {
                    number
                })
            });
    }

    /// The current generation, to pass to lookups of one batch.
    pub fn snapshot(&self) -> Snapshot {
        let word = self.word.load(Ordering::Acquire);
        Snapshot {
            generation: word & !CUSTOM_RULES,
            enabled: word & CUSTOM_RULES == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_rules_toggle_and_bump() {
        let generation = Generation::new();
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 0,
                enabled: true
            }
        );
        generation.set_custom_rules(true);
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 1,
                enabled: false
            }
        );
        generation.bump();
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 2,
                enabled: false
            }
        );
        generation.set_custom_rules(false);
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 3,
                enabled: true
            }
        );
    }
}
