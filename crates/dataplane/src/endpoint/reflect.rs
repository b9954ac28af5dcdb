//! The answers of the built-in services, as pure functions over a UDP payload: the STAMP
//! (RFC 8762) / TWAMP-light (RFC 5357 appendix I) stateless session reflector and the echo
//! service (RFC 862), with the NTP timestamps and the error estimate (RFC 4656 §4.1.2) they
//! carry.
//!
//! ```
//! use dataplane::endpoint::reflect::{self, ErrorEstimate};
//!
//! // A STAMP session-sender test packet: sequence 7, a timestamp, an error estimate, MBZ.
//! let mut buf = [0u8; 64];
//! buf[..4].copy_from_slice(&7u32.to_be_bytes());
//! buf[4..12].copy_from_slice(&0x1111_2222_3333_4444u64.to_be_bytes());
//! let estimate = ErrorEstimate::from_nanos(1_000, true);
//! let len = reflect::stamp(&mut buf, 44, 0xaaaa, 0xbbbb, estimate, 63).unwrap();
//! assert_eq!(len, 44);
//! assert_eq!(&buf[..4], &7u32.to_be_bytes()); // the sender's sequence number, reflected
//! assert_eq!(u64::from_be_bytes(buf[16..24].try_into().unwrap()), 0xaaaa); // receive time
//! assert_eq!(u64::from_be_bytes(buf[28..36].try_into().unwrap()), 0x1111_2222_3333_4444);
//! assert_eq!(buf[40], 63); // the sender's TTL
//! ```
#![forbid(unsafe_code)]

/// The size of a STAMP test packet in unauthenticated mode, sender's and reflector's alike
/// (RFC 8762 §4.2.1, §4.3.1); the reflector's fields end at 41 bytes (TWAMP's minimum).
pub const STAMP_LEN: usize = 44;

/// The smallest session-sender packet the reflector answers: sequence number, timestamp and
/// error estimate (TWAMP-light's unauthenticated sender header, RFC 5357 §4.1.2).
pub const SENDER_MIN_LEN: usize = 14;

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The byte offsets of the unauthenticated test packets (RFC 8762 §4.2.1 and §4.3.1).
pub mod field {
    /// A byte range.
    pub type Field = core::ops::Range<usize>;
    /// Sequence number (sender and reflector).
    pub const SEQ: Field = 0..4;
    /// Timestamp: the sender's transmit time, or the reflector's.
    pub const TIMESTAMP: Field = 4..12;
    /// Error estimate of that timestamp.
    pub const ERROR: Field = 12..14;
    /// The reflector's receive timestamp.
    pub const RECEIVE: Field = 16..24;
    /// The session-sender's sequence number, copied.
    pub const SENDER_SEQ: Field = 24..28;
    /// The session-sender's timestamp, copied.
    pub const SENDER_TIMESTAMP: Field = 28..36;
    /// The session-sender's error estimate, copied.
    pub const SENDER_ERROR: Field = 36..38;
    /// The TTL / hop limit of the received test packet.
    pub const SENDER_TTL: usize = 40;
}

/// A Unix time in nanoseconds as a 64-bit NTP timestamp (32 bits of seconds since 1900, 32
/// bits of fraction).
///
/// ```
/// use dataplane::endpoint::reflect::{ntp_from_unix_nanos, unix_nanos_from_ntp};
/// let t = ntp_from_unix_nanos(1_500_000_000);
/// assert_eq!(t >> 32, 2_208_988_801);
/// assert_eq!(t as u32, 1 << 31); // half a second
/// assert_eq!(unix_nanos_from_ntp(t), 1_500_000_000);
/// ```
pub fn ntp_from_unix_nanos(nanos: u64) -> u64 {
    let secs = nanos / 1_000_000_000 + NTP_UNIX_OFFSET;
    let frac = ((nanos % 1_000_000_000) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// A 64-bit NTP timestamp as Unix nanoseconds (rounded to the nearest nanosecond; times before
/// 1970 give 0).
///
/// ```
/// use dataplane::endpoint::reflect::unix_nanos_from_ntp;
/// assert_eq!(unix_nanos_from_ntp(2_208_988_800 << 32), 0);
/// ```
pub fn unix_nanos_from_ntp(ntp: u64) -> u64 {
    let secs = (ntp >> 32).saturating_sub(NTP_UNIX_OFFSET);
    let frac = ((ntp & 0xffff_ffff) * 1_000_000_000 + (1 << 31)) >> 32;
    secs * 1_000_000_000 + frac
}

/// The error estimate of a timestamp (RFC 4656 §4.1.2): `S` (the clock is synchronised to
/// UTC), `Z` (0: NTP format), a 6-bit scale and an 8-bit non-zero multiplier; the estimate is
/// `multiplier * 2^(scale - 32)` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorEstimate(pub u16);

impl ErrorEstimate {
    /// The smallest encodable estimate not below `nanos` (at least one unit), NTP format, with
    /// `synchronized` as the S bit.
    ///
    /// ```
    /// use dataplane::endpoint::reflect::ErrorEstimate;
    /// let e = ErrorEstimate::from_nanos(1_000, false);
    /// assert!(e.nanos() >= 1_000.0 && e.nanos() < 1_010.0);
    /// assert!(!e.synchronized());
    /// assert_eq!(ErrorEstimate::from_nanos(0, true).0 & 0xff, 1); // multiplier never 0
    /// ```
    pub fn from_nanos(nanos: u64, synchronized: bool) -> ErrorEstimate {
        // Units of 2^-32 s, rounded up.
        let units = ((u128::from(nanos) << 32).div_ceil(1_000_000_000)).max(1);
        let mut scale = 0u32;
        while units.div_ceil(1u128 << scale) > 255 && scale < 63 {
            scale += 1;
        }
        let multiplier = units.div_ceil(1u128 << scale).clamp(1, 255) as u16;
        let s = if synchronized { 0x8000 } else { 0 };
        ErrorEstimate(s | ((scale as u16) << 8) | multiplier)
    }

    /// Whether the S bit is set.
    pub fn synchronized(self) -> bool {
        self.0 & 0x8000 != 0
    }

    /// The estimate in nanoseconds.
    pub fn nanos(self) -> f64 {
        let scale = i32::from((self.0 >> 8) as u8 & 0x3f);
        let multiplier = f64::from(self.0 as u8);
        multiplier * 2f64.powi(scale - 32) * 1e9
    }
}

/// Why a test packet is not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReflectError {
    /// Shorter than a session-sender header ([`SENDER_MIN_LEN`] bytes).
    #[error("test packet shorter than 14 bytes")]
    TooShort,
    /// The buffer cannot hold the answer ([`STAMP_LEN`] bytes).
    #[error("no room for the 44-byte answer")]
    NoRoom,
}

/// Turns the session-sender test packet in `buf[..len]` into the stateless session reflector's
/// answer (RFC 8762 §4.3.1, unauthenticated; the same layout as TWAMP-light's, RFC 5357
/// §4.2.1): the sender's sequence number reflected (a stateless reflector keeps no counter of
/// its own), `tx` as the timestamp with `estimate`, `rx` as the receive timestamp, the
/// sender's sequence number, timestamp, error estimate and `ttl` copied, MBZ fields zeroed.
/// Bytes from 44 on (padding) are kept, so the answer is as long as the test packet (symmetric
/// size) or 44 bytes when the test packet was shorter. Returns the answer's length.
///
/// # Errors
/// [`ReflectError`].
pub fn stamp(
    buf: &mut [u8],
    len: usize,
    rx: u64,
    tx: u64,
    estimate: ErrorEstimate,
    ttl: u8,
) -> Result<usize, ReflectError> {
    if len < SENDER_MIN_LEN {
        return Err(ReflectError::TooShort);
    }
    let out = len.max(STAMP_LEN);
    if out > buf.len() {
        return Err(ReflectError::NoRoom);
    }
    let mut sender = [0u8; SENDER_MIN_LEN];
    sender.copy_from_slice(&buf[..SENDER_MIN_LEN]);
    buf[SENDER_MIN_LEN..STAMP_LEN].fill(0);
    buf[field::TIMESTAMP].copy_from_slice(&tx.to_be_bytes());
    buf[field::ERROR].copy_from_slice(&estimate.0.to_be_bytes());
    buf[field::RECEIVE].copy_from_slice(&rx.to_be_bytes());
    buf[field::SENDER_SEQ].copy_from_slice(&sender[field::SEQ]);
    buf[field::SENDER_TIMESTAMP].copy_from_slice(&sender[field::TIMESTAMP]);
    buf[field::SENDER_ERROR].copy_from_slice(&sender[field::ERROR]);
    buf[field::SENDER_TTL] = ttl;
    Ok(out)
}

/// A session-sender test packet (RFC 8762 §4.2.1, unauthenticated) of `len` bytes (at least
/// [`STAMP_LEN`], the rest zero padding) into `buf`; returns its length.
///
/// # Errors
/// [`ReflectError::NoRoom`] when `buf` is shorter than `len` or `len` below 44.
///
/// ```
/// use dataplane::endpoint::reflect::{self, ErrorEstimate};
/// let mut buf = [0xffu8; 44];
/// reflect::stamp_request(&mut buf, 44, 9, 0x55, ErrorEstimate::from_nanos(100, false)).unwrap();
/// assert_eq!(&buf[..4], &9u32.to_be_bytes());
/// assert!(buf[14..].iter().all(|&b| b == 0));
/// ```
pub fn stamp_request(
    buf: &mut [u8],
    len: usize,
    seq: u32,
    tx: u64,
    estimate: ErrorEstimate,
) -> Result<usize, ReflectError> {
    if len < STAMP_LEN || buf.len() < len {
        return Err(ReflectError::NoRoom);
    }
    buf[..len].fill(0);
    buf[field::SEQ].copy_from_slice(&seq.to_be_bytes());
    buf[field::TIMESTAMP].copy_from_slice(&tx.to_be_bytes());
    buf[field::ERROR].copy_from_slice(&estimate.0.to_be_bytes());
    Ok(len)
}

/// The fields of a reflector's answer, read back by a session-sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampReply {
    /// The reflector's sequence number (the sender's, for a stateless reflector).
    pub seq: u32,
    /// The reflector's transmit timestamp (NTP).
    pub tx: u64,
    /// Its error estimate.
    pub error: ErrorEstimate,
    /// The reflector's receive timestamp (NTP).
    pub rx: u64,
    /// The sender's sequence number.
    pub sender_seq: u32,
    /// The sender's timestamp (NTP).
    pub sender_tx: u64,
    /// The sender's error estimate.
    pub sender_error: ErrorEstimate,
    /// The TTL / hop limit the test packet arrived with.
    pub sender_ttl: u8,
}

impl StampReply {
    /// Parses an answer.
    ///
    /// # Errors
    /// [`ReflectError::TooShort`] below 41 bytes (the last field, the sender's TTL).
    pub fn parse(buf: &[u8]) -> Result<StampReply, ReflectError> {
        if buf.len() <= field::SENDER_TTL {
            return Err(ReflectError::TooShort);
        }
        let u32_at =
            |r: core::ops::Range<usize>| u32::from_be_bytes(buf[r].try_into().unwrap_or_default());
        let u64_at =
            |r: core::ops::Range<usize>| u64::from_be_bytes(buf[r].try_into().unwrap_or_default());
        let u16_at =
            |r: core::ops::Range<usize>| u16::from_be_bytes(buf[r].try_into().unwrap_or_default());
        Ok(StampReply {
            seq: u32_at(field::SEQ),
            tx: u64_at(field::TIMESTAMP),
            error: ErrorEstimate(u16_at(field::ERROR)),
            rx: u64_at(field::RECEIVE),
            sender_seq: u32_at(field::SENDER_SEQ),
            sender_tx: u64_at(field::SENDER_TIMESTAMP),
            sender_error: ErrorEstimate(u16_at(field::SENDER_ERROR)),
            sender_ttl: buf[field::SENDER_TTL],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_reflect_keeps_padding_and_extends_short_packets() {
        let mut buf = [0xeeu8; 128];
        buf[..4].copy_from_slice(&1u32.to_be_bytes());
        // A 100-byte test packet keeps its padding beyond 44 bytes.
        let n = stamp(&mut buf, 100, 1, 2, ErrorEstimate(1), 64).unwrap();
        assert_eq!(n, 100);
        assert!(buf[44..100].iter().all(|&b| b == 0xee));
        assert_eq!(&buf[41..44], &[0, 0, 0]);
        assert_eq!(&buf[14..16], &[0, 0]);
        // A 14-byte TWAMP-light test packet gets a 44-byte answer.
        let mut short = [0u8; 64];
        short[..14].copy_from_slice(&[0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 1]);
        short[14..].fill(0xaa);
        assert_eq!(stamp(&mut short, 14, 3, 4, ErrorEstimate(2), 1), Ok(44));
        let r = StampReply::parse(&short[..44]).unwrap();
        assert_eq!(
            (r.seq, r.sender_seq, r.sender_tx),
            (5, 5, 0x0102_0304_0506_0708)
        );
        assert_eq!(
            (r.rx, r.tx, r.error.0, r.sender_error.0, r.sender_ttl),
            (3, 4, 2, 0x8001, 1)
        );
        assert!(short[44..].iter().all(|&b| b == 0xaa));
    }

    #[test]
    fn test_impossible_len() {
        let mut buf = [0u8; 40];
        assert_eq!(
            stamp(&mut buf, 13, 0, 0, ErrorEstimate(1), 0),
            Err(ReflectError::TooShort)
        );
        assert_eq!(
            stamp(&mut buf, 20, 0, 0, ErrorEstimate(1), 0),
            Err(ReflectError::NoRoom)
        );
        assert_eq!(
            stamp(&mut buf, 41, 0, 0, ErrorEstimate(1), 0),
            Err(ReflectError::NoRoom)
        );
        assert!(StampReply::parse(&buf[..40]).is_err());
    }

    #[test]
    fn error_estimate_round_trips_within_one_step() {
        for nanos in [1u64, 233, 1_000, 65_535, 1_000_000, 10_000_000_000] {
            let e = ErrorEstimate::from_nanos(nanos, false);
            let back = e.nanos();
            assert!(back >= nanos as f64 * 0.999_999, "{nanos}: {back}");
            // One step of the multiplier: a unit of 2^-32 s (0.233 ns) at scale 0, else at most
            // 1/128 of the value (the multiplier is then at least 128).
            assert!(
                back <= nanos as f64 * (1.0 + 1.0 / 128.0) + 0.233,
                "{nanos}: {back}"
            );
            assert_ne!(e.0 & 0xff, 0);
        }
    }

    #[test]
    fn ntp_conversion_round_trips() {
        for nanos in [0u64, 1, 999_999_999, 1_764_000_000_123_456_789] {
            assert_eq!(unix_nanos_from_ntp(ntp_from_unix_nanos(nanos)), nanos);
        }
    }
}
