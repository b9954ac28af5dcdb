//! [`Inline`]: keys and values stored in the bucket lines themselves, as 32-bit words that
//! readers copy out of a line and decode once the copy is validated (see
//! [`RhlTable`](crate::RhlTable)).

use std::net::{Ipv4Addr, Ipv6Addr};

/// A `Copy` type that an [`RhlTable`](crate::RhlTable) stores inline in its bucket lines, as
/// [`WORDS`](Inline::WORDS) 32-bit words.
///
/// Readers copy a slot's words out of a line with relaxed atomic loads while a writer may be
/// rewriting it, keep the copy only if the line did not change meanwhile (a generation in the
/// line's header, as the kernel's seqcounts do), and only then call [`load`](Inline::load): it
/// always sees words that one [`store`](Inline::store) wrote. The trait is safe: a wrong
/// implementation gives wrong answers, never undefined behaviour.
///
/// **Keys are compared and hashed by their words**: for a key type, `store` must write equal
/// words for equal keys and different words for different keys (true of the integer and
/// address types below, and of any type that stores all its bits).
///
/// A bucket line has 12 words for its slots; a slot holds the key's words and
/// `max(V::WORDS, 1)` words for the value (one holds the index of a duplicate list), so
/// `u32 -> u32` gets 6 slots per line (at most 6), `u32 -> u64` 4, `u128 -> u64` 2. Types too big for one slot are a
/// compile-time error of `RhlWriter::new`; put large values behind an index or a pointer of
/// your own.
///
/// ```
/// use addr_table::Inline;
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// struct Port { ifindex: u32, up: bool }
///
/// impl Inline for Port {
///     const WORDS: usize = 2;
///     fn store(self, words: &mut [u32]) {
///         words[0] = self.ifindex;
///         words[1] = u32::from(self.up);
///     }
///     fn load(words: &[u32]) -> Self {
///         Port { ifindex: words[0], up: words[1] & 1 != 0 }
///     }
/// }
///
/// let mut t: addr_table::RhlWriter<u32, Port> = addr_table::RhlWriter::new();
/// t.insert(7, Port { ifindex: 2, up: true })?;
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(t.get(&7, &guard), Some(Port { ifindex: 2, up: true }));
/// # Ok::<(), addr_table::InsertError>(())
/// ```
pub trait Inline: Copy {
    /// 32-bit words the value occupies.
    const WORDS: usize;

    /// Writes the value into `words` (exactly [`WORDS`](Inline::WORDS) of them).
    fn store(self, words: &mut [u32]);

    /// Reads a value back from `words` (exactly [`WORDS`](Inline::WORDS) of them, as
    /// [`store`](Inline::store) wrote them).
    fn load(words: &[u32]) -> Self;
}

impl Inline for () {
    const WORDS: usize = 0;
    #[inline(always)]
    fn store(self, _: &mut [u32]) {}
    #[inline(always)]
    fn load(_: &[u32]) -> Self {}
}

impl Inline for u32 {
    const WORDS: usize = 1;
    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        words[0] = self;
    }
    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        words[0]
    }
}

impl Inline for u64 {
    const WORDS: usize = 2;
    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        words[0] = self as u32;
        words[1] = (self >> 32) as u32;
    }
    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        u64::from(words[0]) | (u64::from(words[1]) << 32)
    }
}

impl Inline for u128 {
    const WORDS: usize = 4;
    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        for (i, w) in words[..4].iter_mut().enumerate() {
            *w = (self >> (32 * i)) as u32;
        }
    }
    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        words[..4]
            .iter()
            .enumerate()
            .fold(0, |x, (i, &w)| x | (u128::from(w) << (32 * i)))
    }
}

impl Inline for Ipv4Addr {
    const WORDS: usize = 1;
    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        self.to_bits().store(words);
    }
    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        Ipv4Addr::from_bits(u32::load(words))
    }
}

impl Inline for Ipv6Addr {
    const WORDS: usize = 4;
    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        self.to_bits().store(words);
    }
    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        Ipv6Addr::from_bits(u128::load(words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Inline + PartialEq + std::fmt::Debug>(x: T) {
        let mut words = vec![0u32; T::WORDS];
        x.store(&mut words);
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
