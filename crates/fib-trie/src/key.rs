//! The key of the trie: an unsigned integer as wide as the address (`u32` for IPv4, `u128` for
//! IPv6), with the few bit operations the trie needs.

use std::fmt::Debug;
use std::hash::Hash;
use std::ops::{BitAnd, BitOr, BitXor, Not};

mod private {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u128 {}
}

/// An address as an unsigned integer, most significant bit first: `u32` (IPv4) or `u128` (IPv6).
///
/// Bit `i` is the bit of value `2^i`; a prefix of length `plen` fixes the top `plen` bits, so its
/// *suffix length* (`slen`, in the kernel's words) is `BITS - plen`.
pub trait TrieKey:
    Copy
    + Eq
    + Ord
    + Hash
    + Debug
    + Default
    + Send
    + Sync
    + 'static
    + BitXor<Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + Not<Output = Self>
    + private::Sealed
{
    /// The key width in bits: 32 or 128.
    const BITS: u8;
    /// The all-zero key.
    const ZERO: Self;

    /// `self >> n`, and zero when `n >= BITS` (where the primitive shift would overflow).
    fn shr(self, n: u8) -> Self;
    /// `self << n`, and zero when `n >= BITS`.
    fn shl(self, n: u8) -> Self;
    /// `self >> n` for `n < BITS` (a node's `pos` or `bits`), one instruction where the
    /// saturating [`shr`](Self::shr) needs a compare; `n` is taken modulo `BITS`.
    fn shr_in_width(self, n: u8) -> Self;
    /// The low bits as a `usize` (truncating): a child index once shifted and range-checked.
    fn low_usize(self) -> usize;
    /// A key from a child index.
    fn from_usize(index: usize) -> Self;
    /// The index of the highest set bit (the kernel's `__fls`); `None` for zero.
    fn highest_bit(self) -> Option<u8>;
    /// Two's complement negation, wrapping (`-x`, used for "this bit and every bit above").
    fn wrapping_neg(self) -> Self;
    /// The top 64 bits (zeros below an IPv4 key's 32): a lookup's indices within its first
    /// 64 bits come from here with `u64` shifts, cheaper than `u128` ones.
    fn top_u64(self) -> u64;
    /// `self << n` for `n < 64` (and `n < BITS`): a direct node's width, without the compare
    /// and moves that a `u128` shift by any count takes.
    fn shl_lt64(self, n: u8) -> Self;

    /// The mask of a prefix of length `plen` (its top `plen` bits set); `plen` is capped at `BITS`.
    fn prefix_mask(plen: u8) -> Self {
        let slen = Self::BITS.saturating_sub(plen);
        (!Self::ZERO).shl(slen)
    }
}

macro_rules! impl_trie_key {
    ($t:ty, $top:expr, $shl:expr) => {
        impl TrieKey for $t {
            const BITS: u8 = <$t>::BITS as u8;
            const ZERO: Self = 0;

            #[inline(always)]
            fn shr(self, n: u8) -> Self {
                self.checked_shr(u32::from(n)).unwrap_or(0)
            }
            #[inline(always)]
            fn shr_in_width(self, n: u8) -> Self {
                debug_assert!(u32::from(n) < <$t>::BITS);
                self.wrapping_shr(u32::from(n))
            }
            #[inline(always)]
            fn shl(self, n: u8) -> Self {
                self.checked_shl(u32::from(n)).unwrap_or(0)
            }
            #[inline(always)]
            fn low_usize(self) -> usize {
                self as usize
            }
            #[inline(always)]
            fn from_usize(index: usize) -> Self {
                index as $t
            }
            #[inline(always)]
            fn highest_bit(self) -> Option<u8> {
                (self != 0).then(|| (<$t>::BITS - 1 - self.leading_zeros()) as u8)
            }
            #[inline(always)]
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            #[inline(always)]
            fn top_u64(self) -> u64 {
                $top(self)
            }
            #[inline(always)]
            fn shl_lt64(self, n: u8) -> Self {
                debug_assert!(n < 64 && u32::from(n) < <$t>::BITS);
                $shl(self, u32::from(n) & 63)
            }
        }
    };
}

impl_trie_key!(u32, |k: u32| u64::from(k) << 32, u32::wrapping_shl);
// The two 64-bit halves, each shifted by less than 64 (`n < 64`; the low half's bits that
// move up are shifted in two steps so that `n == 0` shifts none).
impl_trie_key!(u128, |k: u128| (k >> 64) as u64, |k: u128, n: u32| {
    let (hi, lo) = ((k >> 64) as u64, k as u64);
    let hi = (hi << n) | ((lo >> 1) >> (63 - n));
    (u128::from(hi) << 64) | u128::from(lo << n)
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_saturate_at_the_width() {
        assert_eq!(TrieKey::shr(0xffff_ffff_u32, 32), 0);
        assert_eq!(TrieKey::shr(0x8000_0000_u32, 31), 1);
        assert_eq!(TrieKey::shl(1_u128, 128), 0);
        assert_eq!(TrieKey::shl(1_u128, 127), 1 << 127);
    }

    #[test]
    fn top_bits_and_small_shifts() {
        assert_eq!(0x8000_0001_u32.top_u64(), 0x8000_0001 << 32);
        let k = 0x2001_0db8_0000_0001_ffff_0000_0000_0003_u128;
        assert_eq!(k.top_u64(), 0x2001_0db8_0000_0001);
        for n in [0, 1, 2, 14, 31, 63] {
            assert_eq!(k.shl_lt64(n), k << n, "{n}");
            assert_eq!(
                0xdead_beef_u32.shl_lt64(n.min(31)),
                0xdead_beef << n.min(31)
            );
        }
    }

    #[test]
    fn masks_and_fls() {
        assert_eq!(u32::prefix_mask(0), 0);
        assert_eq!(u32::prefix_mask(8), 0xff00_0000);
        assert_eq!(u32::prefix_mask(32), u32::MAX);
        assert_eq!(u128::prefix_mask(128), u128::MAX);
        assert_eq!(u128::prefix_mask(1), 1 << 127);
        assert_eq!(0_u32.highest_bit(), None);
        assert_eq!(1_u32.highest_bit(), Some(0));
        assert_eq!(u128::MAX.highest_bit(), Some(127));
    }
}
