//! [`Inline`]: keys and values stored in the bucket lines themselves, as 32-bit words that
//! readers load atomically and validate (see [`RhlTable`](crate::RhlTable)).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};

/// A `Copy` type that an [`RhlTable`](crate::RhlTable) stores inline in its bucket lines, as
/// [`WORDS`](Inline::WORDS) 32-bit words.
///
/// Readers copy keys and values out of a line with relaxed atomic loads while a writer may be
/// rewriting it, and keep the copy only if the line did not change meanwhile (a generation in
/// the line's header, as the kernel's seqcounts do). So [`load`](Inline::load) may see words
/// from two different values (a torn read): it must then return *some* value without
/// panicking; the table discards it. The trait is safe: a wrong implementation gives wrong
/// answers, never undefined behaviour.
///
/// A bucket line has 12 words for its slots; a slot holds the key's words and
/// `max(V::WORDS, 2)` words for the value (two hold the pointer to a duplicate list), so
/// `u32 -> u32` gets 4 slots per line, `u128 -> u64` 2. Types too big for one slot are a
/// compile-time error of `RhlTable::new`; put large values behind an index or a pointer of
/// your own.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use addr_table::Inline;
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// struct Port { ifindex: u32, up: bool }
///
/// impl Inline for Port {
///     const WORDS: usize = 2;
///     fn store(self, words: &[AtomicU32]) {
///         words[0].store(self.ifindex, Ordering::Relaxed);
///         words[1].store(u32::from(self.up), Ordering::Relaxed);
///     }
///     fn load(words: &[AtomicU32]) -> Self {
///         Port {
///             ifindex: words[0].load(Ordering::Relaxed),
///             up: words[1].load(Ordering::Relaxed) & 1 != 0,
///         }
///     }
/// }
///
/// let t: addr_table::RhlTable<u32, Port> = addr_table::RhlTable::new();
/// t.insert(7, Port { ifindex: 2, up: true })?;
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(t.get(&7, &guard), Some(Port { ifindex: 2, up: true }));
/// # Ok::<(), addr_table::InsertError>(())
/// ```
pub trait Inline: Copy {
    /// 32-bit words the value occupies.
    const WORDS: usize;

    /// Writes the value into `words` (exactly [`WORDS`](Inline::WORDS) of them) with relaxed
    /// stores.
    fn store(self, words: &[AtomicU32]);

    /// Reads a value from `words` (exactly [`WORDS`](Inline::WORDS) of them) with relaxed
    /// loads. Must not panic whatever the words hold.
    fn load(words: &[AtomicU32]) -> Self;
}

impl Inline for () {
    const WORDS: usize = 0;
    #[inline(always)]
    fn store(self, _: &[AtomicU32]) {}
    #[inline(always)]
    fn load(_: &[AtomicU32]) -> Self {}
}

impl Inline for u32 {
    const WORDS: usize = 1;
    #[inline(always)]
    fn store(self, words: &[AtomicU32]) {
        words[0].store(self, Ordering::Relaxed);
    }
    #[inline(always)]
    fn load(words: &[AtomicU32]) -> Self {
        words[0].load(Ordering::Relaxed)
    }
}

impl Inline for u64 {
    const WORDS: usize = 2;
    #[inline(always)]
    fn store(self, words: &[AtomicU32]) {
        words[0].store(self as u32, Ordering::Relaxed);
        words[1].store((self >> 32) as u32, Ordering::Relaxed);
    }
    #[inline(always)]
    fn load(words: &[AtomicU32]) -> Self {
        u64::from(words[0].load(Ordering::Relaxed))
            | (u64::from(words[1].load(Ordering::Relaxed)) << 32)
    }
}

impl Inline for u128 {
    const WORDS: usize = 4;
    #[inline(always)]
    fn store(self, words: &[AtomicU32]) {
        for (i, w) in words[..4].iter().enumerate() {
            w.store((self >> (32 * i)) as u32, Ordering::Relaxed);
        }
    }
    #[inline(always)]
    fn load(words: &[AtomicU32]) -> Self {
        words[..4].iter().enumerate().fold(0, |x, (i, w)| {
            x | (u128::from(w.load(Ordering::Relaxed)) << (32 * i))
        })
    }
}

impl Inline for Ipv4Addr {
    const WORDS: usize = 1;
    #[inline(always)]
    fn store(self, words: &[AtomicU32]) {
        self.to_bits().store(words);
    }
    #[inline(always)]
    fn load(words: &[AtomicU32]) -> Self {
        Ipv4Addr::from_bits(u32::load(words))
    }
}

impl Inline for Ipv6Addr {
    const WORDS: usize = 4;
    #[inline(always)]
    fn store(self, words: &[AtomicU32]) {
        self.to_bits().store(words);
    }
    #[inline(always)]
    fn load(words: &[AtomicU32]) -> Self {
        Ipv6Addr::from_bits(u128::load(words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Inline + PartialEq + std::fmt::Debug>(x: T) {
        let words: Vec<AtomicU32> = (0..T::WORDS).map(|_| AtomicU32::new(0)).collect();
        x.store(&words);
        assert_eq!(T::load(&words), x);
    }

    #[test]
    fn values_round_trip() {
        round_trip(());
        round_trip(0xdead_beefu32);
        round_trip(0x0123_4567_89ab_cdefu64);
        round_trip(0x0011_2233_4455_6677_8899_aabb_ccdd_eeffu128);
        round_trip(Ipv4Addr::new(198, 18, 0, 1));
        round_trip("2001:db8::1".parse::<Ipv6Addr>().unwrap());
    }
}
