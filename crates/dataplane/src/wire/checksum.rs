//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// The ones' complement sum of `data` as 16-bit big-endian words (an odd last byte is padded
/// with zero), added to `initial`; not folded. Sums of up to 2^47 bytes cannot overflow.
#[inline]
pub fn sum(data: &[u8], initial: u64) -> u64 {
    let mut acc = initial;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a ones' complement sum to 16 bits.
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Whether an IPv4 header without options (its checksum field included) sums to all ones,
/// as a valid header does. Summed in the machine's byte order: the ones' complement sum is
/// independent of byte order (RFC 1071 section 2(B)), and all ones is the same in either, so
/// no byte is swapped; the sum is checked by its remainder modulo 0xffff.
///
/// ```
/// use dataplane::wire::checksum::{checksum, header_valid};
/// let mut header = [0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 1];
/// assert!(!header_valid(&header));
/// let sum = checksum(&header);
/// header[10..12].copy_from_slice(&sum.to_be_bytes());
/// assert!(header_valid(&header));
/// ```
#[inline]
pub fn header_valid(header: &[u8; 20]) -> bool {
    let mut acc = 0u64;
    for w in header.as_chunks::<4>().0 {
        acc += u64::from(u32::from_ne_bytes(*w));
    }
    // Folding keeps the value modulo 0xffff and leaves a non-zero sum in 1..=0xffff, so the
    // sum folds to all ones exactly when it is a non-zero multiple of 0xffff: one remainder
    // by a constant (a multiplication) instead of four folding steps.
    acc != 0 && acc % 0xffff == 0
}

/// The Internet checksum of `data` (the complement of the folded sum).
///
/// ```
/// // RFC 1071's example words 0001 f203 f4f5 f6f7 sum to ddf2.
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// assert_eq!(dataplane::wire::checksum::checksum(&data), !0xddf2);
/// ```
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

/// The sum of the IPv4 pseudo-header for an upper-layer checksum.
#[inline]
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, len: u32) -> u64 {
    sum(&src, 0) + sum(&dst, 0) + u64::from(protocol) + u64::from(len)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 section 8.1) for an upper-layer checksum.
#[inline]
pub fn pseudo_v6(src: [u8; 16], dst: [u8; 16], next_header: u8, len: u32) -> u64 {
    sum(&src, 0) + sum(&dst, 0) + u64::from(next_header) + u64::from(len)
}

/// RFC 1624 equation 3: the checksum `hc` after one 16-bit word of the covered data changed
/// from `old` to `new`: `HC' = ~(~HC + ~m + m')`. Unlike equation 2 it never yields 0x0000 from
/// a non-zero sum (the "minus zero" case RFC 1624 section 3 warns about).
///
/// ```
/// use dataplane::wire::checksum::{checksum, update16};
/// let mut header = [0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 1];
/// let before = checksum(&header);
/// header[8] = 63; // TTL 64 -> 63
/// assert_eq!(update16(before, 0x4011, 0x3f11), checksum(&header));
/// ```
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    let acc = u64::from(!hc) + u64::from(!old) + u64::from(new);
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The byte-order-free check agrees with the folded big-endian sum on any header.
        #[test]
        fn header_valid_is_the_folded_sum(header in proptest::array::uniform20(proptest::prelude::any::<u8>()), fix in proptest::bool::ANY) {
            let mut header = header;
            if fix {
                header[10..12].fill(0);
                let c = checksum(&header);
                header[10..12].copy_from_slice(&c.to_be_bytes());
            }
            proptest::prop_assert_eq!(header_valid(&header), fold(sum(&header, 0)) == 0xffff);
        }
    }

    #[test]
    fn header_valid_at_the_edges() {
        for header in [[0u8; 20], [0xff; 20]] {
            assert_eq!(header_valid(&header), fold(sum(&header, 0)) == 0xffff);
        }
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0x12, 0x34, 0x56], 0), 0x1234 + 0x5600);
    }

    #[test]
    fn a_correct_header_sums_to_all_ones() {
        let mut header = [
            0x45, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = checksum(&header);
        header[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(fold(sum(&header, 0)), 0xffff);
        assert_eq!(checksum(&header), 0);
    }

    #[test]
    fn incremental_update_matches_recomputation_for_every_ttl() {
        let mut header = [
            0x45, 0, 0, 0x54, 0xab, 0xcd, 0, 0, 255, 6, 0, 0, 203, 0, 113, 9, 8, 8, 8, 8,
        ];
        let mut c = checksum(&header);
        header[10..12].copy_from_slice(&c.to_be_bytes());
        for ttl in (1..=255u8).rev() {
            let old = u16::from_be_bytes([header[8], header[9]]);
            header[8] = ttl - 1;
            let new = u16::from_be_bytes([header[8], header[9]]);
            c = update16(c, old, new);
            header[10..12].copy_from_slice(&[0, 0]);
            assert_eq!(c, checksum(&header), "ttl {ttl}");
            header[10..12].copy_from_slice(&c.to_be_bytes());
        }
    }
}
