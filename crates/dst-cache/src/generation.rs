//! The shared route generation that invalidates every cache at once, lazily.

use std::sync::atomic::{AtomicU64, Ordering};

/// The top bit of the word: set while custom policy rules exist (caching is then off).
const CUSTOM_RULES: u64 = 1 << 63;
/// The next bit: set while the control plane knows its tables lag the kernel's.
const BEHIND: u64 = 1 << 62;
/// The bits that carry the generation number.
const NUMBER: u64 = !(CUSTOM_RULES | BEHIND);

/// The control plane's route generation, shared by all run loops (put it in an `Arc`).
///
/// The control plane calls [`bump`](Self::bump) after every routing, neighbour or rule change
/// it has **published** (bumping before publishing would let a run loop cache an old answer
/// under the new generation). Each run loop takes one [`snapshot`](Self::snapshot) per batch
/// and passes it to its cache: entries made under another generation miss and are cleared when
/// met. The word also carries whether custom policy rules exist: while they do, caching is off,
/// as in the kernel, because the decision then depends on more than the cache key.
///
/// It carries a third thing: whether the control plane **knows it is behind** the kernel
/// ([`set_behind`](Self::set_behind)): a dump or resynchronisation in progress, events lost
/// (an overrun) and not yet repaired, or a backlog of events read but not applied. While it
/// is, a run loop must not act on a route answer, which may be stale or missing: it hands the
/// packet to the kernel instead (fail closed). Setting or clearing it starts no new
/// generation.
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
/// generation.set_behind(true);
/// assert!(generation.snapshot().behind);
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
    /// Whether the tables were known to lag the kernel's when the snapshot was taken (see
    /// [`Generation::set_behind`]): route answers must then go to the kernel.
    pub behind: bool,
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
        // The number wraps inside its bits (2^62 bumps: never in practice, but never into
        // the flags either).
        let _ = self
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |word| {
                Some(((word & NUMBER).wrapping_add(1) & NUMBER) | (word & !NUMBER))
            });
    }

    /// Records whether custom policy rules exist, and starts a new generation.
    pub fn set_custom_rules(&self, present: bool) {
        let _ = self
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |word| {
                let number = (word & NUMBER).wrapping_add(1) & NUMBER;
                let custom = if present { CUSTOM_RULES } else { 0 };
                Some(number | custom | (word & BEHIND))
            });
    }

    /// Records whether the tables lag the kernel's (a dump, a resynchronisation or a backlog
    /// of events in progress), without starting a new generation. Returns the previous state.
    ///
    /// ```
    /// use dst_cache::Generation;
    ///
    /// let generation = Generation::new();
    /// let before = generation.snapshot();
    /// assert!(!generation.set_behind(true));
    /// let lagging = generation.snapshot();
    /// assert!(lagging.behind);
    /// assert_eq!(lagging.generation, before.generation);
    /// assert!(generation.set_behind(false));
    /// assert!(!generation.snapshot().behind);
    /// ```
    pub fn set_behind(&self, behind: bool) -> bool {
        // Release on setting: nothing to publish, but a clear must not be seen before the
        // changes applied while behind (which were published, then bumped, before it).
        let previous = if behind {
            self.word.fetch_or(BEHIND, Ordering::Release)
        } else {
            self.word.fetch_and(!BEHIND, Ordering::Release)
        };
        previous & BEHIND != 0
    }

    /// Whether [`set_behind`](Self::set_behind) was last given `true`.
    pub fn is_behind(&self) -> bool {
        self.word.load(Ordering::Acquire) & BEHIND != 0
    }

    /// The current generation, to pass to lookups of one batch.
    pub fn snapshot(&self) -> Snapshot {
        let word = self.word.load(Ordering::Acquire);
        Snapshot {
            generation: word & NUMBER,
            enabled: word & CUSTOM_RULES == 0,
            behind: word & BEHIND != 0,
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
                enabled: true,
                behind: false,
            }
        );
        generation.set_custom_rules(true);
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 1,
                enabled: false,
                behind: false,
            }
        );
        generation.bump();
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 2,
                enabled: false,
                behind: false,
            }
        );
        generation.set_custom_rules(false);
        assert_eq!(
            generation.snapshot(),
            Snapshot {
                generation: 3,
                enabled: true,
                behind: false,
            }
        );
    }

    #[test]
    fn behind_is_independent_of_number_and_rules() {
        let generation = Generation::new();
        generation.bump();
        generation.set_custom_rules(true);
        assert!(!generation.set_behind(true));
        generation.bump();
        generation.set_custom_rules(false);
        let s = generation.snapshot();
        assert_eq!((s.generation, s.enabled, s.behind), (4, true, true));
        assert!(generation.set_behind(true));
        assert!(generation.set_behind(false));
        assert!(!generation.is_behind());
        let s = generation.snapshot();
        assert_eq!((s.generation, s.enabled, s.behind), (4, true, false));
    }
}
