//! The kernel's per-destination limit of ICMP errors (`inet_peer_xrlim_allow`), shared by
//! every queue of a namespace without a lock: a fixed-size hashed table of atomic token
//! buckets, one word each.
//!
//! The kernel keeps, per destination of an error (an `inet_peer`, per namespace and family), a
//! bucket of time credit: a message costs `timeout` (`net.ipv4.icmp_ratelimit`, 1000 ms; for
//! IPv6 `net.ipv6.icmp.ratelimit`, 1000 ms, halved per 32 bits the route back to the
//! destination is shorter than /128), the credit grows with time up to six messages
//! (`XRLIM_BURST_FACTOR`), and a new destination starts with a full bucket. Only the types of
//! the rate mask are limited (`icmp_ratemask`, default 0x1818: destination unreachable, source
//! quench, time exceeded, parameter problem; "fragmentation needed" never; for IPv6
//! `icmp/ratemask`, default every error but "packet too big"). The per-queue
//! [`TokenBucket`](crate::TokenBucket) stands for the kernel's global limit
//! (`icmp_msgs_per_sec`); this one keeps several queues from multiplying the rate at which one
//! destination receives errors.
//!
//! A slot holds a 16-bit tag of its destination and the time (in milliseconds) at which its
//! bucket would be empty; the bucket's credit is `now - that time`, capped. Another destination
//! hashed to the same slot with another tag takes the slot over as a new destination (the
//! kernel evicts peers too); the hash is keyed per limiter, so that senders cannot choose
//! collisions. A compare-and-swap that keeps failing (many queues erring to one destination at
//! once) refuses the message after a few tries: fewer errors, never more.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::wire::Family;
use crate::wire::icmp::{v4_code, v4_type, v6_type};

/// The kernel's `XRLIM_BURST_FACTOR`: a destination's bucket holds six messages.
pub const BURST_FACTOR: u64 = 6;
/// The kernel's default `icmp_ratemask`: destination unreachable (3), source quench (4), time
/// exceeded (11), parameter problem (12).
pub const DEFAULT_V4_RATEMASK: u32 = 1 << v4_type::DEST_UNREACHABLE
    | 1 << v4_type::SOURCE_QUENCH
    | 1 << v4_type::TIME_EXCEEDED
    | 1 << v4_type::PARAMETER_PROBLEM;
/// The kernel's default IPv6 `icmp/ratemask` over the error types 0-127: all but "packet too
/// big" (2).
pub const DEFAULT_V6_RATEMASK: u128 = !(1 << v6_type::PACKET_TOO_BIG);
/// The kernel's default `icmp_ratelimit` and IPv6 `icmp/ratelimit`, milliseconds.
pub const DEFAULT_INTERVAL_MS: u32 = 1000;

/// The bits of a slot that hold the time its bucket is empty at.
const TIME_BITS: u32 = 48;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
/// Milliseconds added to the caller's clock so that "a minute ago" exists from time 0.
const EPOCH_MS: u64 = 1 << 32;
/// A new destination's bucket was last touched this long ago (the kernel's `inet_getpeer`
/// sets `rate_last` to a minute before: a full bucket).
const NEW_PEER_MS: u64 = 60_000;
/// Compare-and-swap attempts before a message is refused.
const TRIES: usize = 8;
/// The IPv6 interval halves for every this many bits the route back is shorter than /128.
const V6_BITS_PER_HALVING: u32 = 32;

/// The per-destination ICMP error limiter of one namespace, shared by all its queues (in
/// [`Tables::icmp_peers`](crate::Tables::icmp_peers)).
///
/// ```
/// use dataplane::PeerLimiter;
///
/// let peers = PeerLimiter::new(1024);
/// let dst = u32::from(std::net::Ipv4Addr::new(192, 0, 2, 7));
/// // Destination unreachable (3, 1): a burst of six, then one per second.
/// let sent = (0..10).filter(|_| peers.allow_v4(dst, 3, 1, 0)).count();
/// assert_eq!(sent, 6);
/// assert!(!peers.allow_v4(dst, 3, 1, 999_000_000));
/// assert!(peers.allow_v4(dst, 3, 1, 1_000_000_000));
/// // Fragmentation needed is never limited; another destination has its own bucket.
/// assert!(peers.allow_v4(dst, 3, 4, 1_000_000_000));
/// assert!(peers.allow_v4(dst + 1, 3, 1, 1_000_000_000));
/// ```
#[derive(Debug)]
pub struct PeerLimiter {
    slots: Box<[AtomicU64]>,
    seed: u64,
    v4_interval_ms: AtomicU32,
    v4_mask: AtomicU32,
    v6_interval_ms: AtomicU32,
    v6_mask_low: AtomicU64,
    v6_mask_high: AtomicU64,
}

impl PeerLimiter {
    /// `slots` buckets (rounded up to a power of two, at least 64), with the kernel's default
    /// intervals and rate masks.
    pub fn new(slots: usize) -> Self {
        let n = slots.max(64).next_power_of_two();
        PeerLimiter {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            seed: std::collections::hash_map::RandomState::new().hash_one(0x1c3b_u64) | 1,
            v4_interval_ms: AtomicU32::new(DEFAULT_INTERVAL_MS),
            v4_mask: AtomicU32::new(DEFAULT_V4_RATEMASK),
            v6_interval_ms: AtomicU32::new(DEFAULT_INTERVAL_MS),
            v6_mask_low: AtomicU64::new(DEFAULT_V6_RATEMASK as u64),
            v6_mask_high: AtomicU64::new((DEFAULT_V6_RATEMASK >> 64) as u64),
        }
    }

    /// A limiter with the same size, settings and hash key and no history: a second pipeline
    /// given it decides as one given `self` would (the slots destinations share are the same).
    ///
    /// ```
    /// let peers = dataplane::PeerLimiter::new(64);
    /// assert_eq!((0..9).filter(|_| peers.allow_v4(1, 3, 1, 0)).count(), 6);
    /// let twin = peers.empty_copy();
    /// assert_eq!((0..9).filter(|_| twin.allow_v4(1, 3, 1, 0)).count(), 6);
    /// ```
    pub fn empty_copy(&self) -> Self {
        PeerLimiter {
            slots: (0..self.slots.len()).map(|_| AtomicU64::new(0)).collect(),
            seed: self.seed,
            v4_interval_ms: AtomicU32::new(self.v4_interval_ms.load(Ordering::Relaxed)),
            v4_mask: AtomicU32::new(self.v4_mask.load(Ordering::Relaxed)),
            v6_interval_ms: AtomicU32::new(self.v6_interval_ms.load(Ordering::Relaxed)),
            v6_mask_low: AtomicU64::new(self.v6_mask_low.load(Ordering::Relaxed)),
            v6_mask_high: AtomicU64::new(self.v6_mask_high.load(Ordering::Relaxed)),
        }
    }

    /// Sets IPv4's `icmp_ratelimit` (milliseconds; 0: no limit) and `icmp_ratemask`.
    ///
    /// ```
    /// let peers = dataplane::PeerLimiter::new(64);
    /// peers.set_v4(0, dataplane::DEFAULT_V4_RATEMASK);
    /// assert!((0..100).all(|_| peers.allow_v4(1, 11, 0, 0)));
    /// ```
    pub fn set_v4(&self, interval_ms: u32, ratemask: u32) {
        self.v4_interval_ms.store(interval_ms, Ordering::Relaxed);
        self.v4_mask.store(ratemask, Ordering::Relaxed);
    }

    /// Sets IPv6's `icmp/ratelimit` (milliseconds; 0: no limit) and `icmp/ratemask` (bit `t`
    /// for type `t`; types from 128 up, informational, are never limited).
    ///
    /// ```
    /// let peers = dataplane::PeerLimiter::new(64);
    /// peers.set_v6(1000, 0); // nothing limited
    /// assert!((0..100).all(|_| peers.allow_v6(1, 1, 64, 0)));
    /// ```
    pub fn set_v6(&self, interval_ms: u32, ratemask: u128) {
        self.v6_interval_ms.store(interval_ms, Ordering::Relaxed);
        self.v6_mask_low.store(ratemask as u64, Ordering::Relaxed);
        self.v6_mask_high
            .store((ratemask >> 64) as u64, Ordering::Relaxed);
    }

    /// Whether an ICMPv4 error of `icmp_type`/`code` may go to `dst` at `now` (nanoseconds,
    /// monotonic); takes its token (`icmpv4_mask_allow`, then `icmpv4_xrlim_allow`).
    pub fn allow_v4(&self, dst: u32, icmp_type: u8, code: u8, now: u64) -> bool {
        // ICMP_DEST_UNREACH / ICMP_FRAG_NEEDED: path MTU discovery is never limited.
        if icmp_type > v4_type::LAST_KNOWN
            || (icmp_type == v4_type::DEST_UNREACHABLE && code == v4_code::FRAG_NEEDED)
        {
            return true;
        }
        if self.v4_mask.load(Ordering::Relaxed) & (1 << icmp_type) == 0 {
            return true;
        }
        let interval = u64::from(self.v4_interval_ms.load(Ordering::Relaxed));
        self.take(u128::from(dst), Family::V4, interval, now)
    }

    /// Whether an ICMPv6 error of `icmp_type` may go to `dst` at `now` (nanoseconds), where
    /// `route_plen` is the prefix length of the route back to `dst`; takes its token
    /// (`icmpv6_mask_allow`, then `icmpv6_xrlim_allow`: the interval is halved for every 32
    /// bits the route is shorter than /128, "more bandwidth to wider prefixes").
    pub fn allow_v6(&self, dst: u128, icmp_type: u8, route_plen: u8, now: u64) -> bool {
        if icmp_type >= v6_type::FIRST_INFORMATIONAL {
            return true;
        }
        // The mask's 128 bits, in two words.
        let word = u64::BITS as u8;
        let mask = if icmp_type < word {
            self.v6_mask_low.load(Ordering::Relaxed) >> icmp_type
        } else {
            self.v6_mask_high.load(Ordering::Relaxed) >> (icmp_type - word)
        };
        if mask & 1 == 0 {
            return true;
        }
        let mut interval = u64::from(self.v6_interval_ms.load(Ordering::Relaxed));
        if u32::from(route_plen) < u128::BITS {
            interval >>= (u128::BITS - u32::from(route_plen)) / V6_BITS_PER_HALVING;
        }
        self.take(dst, Family::V6, interval, now)
    }

    /// Takes one message's credit (`interval` ms) from `dst`'s bucket.
    fn take(&self, dst: u128, family: Family, interval: u64, now: u64) -> bool {
        if interval == 0 {
            return true;
        }
        let now = (now / 1_000_000 + EPOCH_MS) & TIME_MASK;
        let hash = self.hash(dst, family);
        let slot = &self.slots[(hash as usize) & (self.slots.len() - 1)];
        let tag = hash >> TIME_BITS;
        let cap = interval.saturating_mul(BURST_FACTOR);
        for _ in 0..TRIES {
            let word = slot.load(Ordering::Relaxed);
            let ours = word != 0 && word >> TIME_BITS == tag;
            // When the bucket is (or would be) empty: credit is `now - empty`.
            let empty = if ours {
                word & TIME_MASK
            } else {
                now.saturating_sub(NEW_PEER_MS)
            };
            let empty = empty.max(now.saturating_sub(cap));
            let allowed = now.saturating_sub(empty) >= interval;
            let empty = if allowed { empty + interval } else { empty };
            let new = (tag << TIME_BITS) | (empty & TIME_MASK);
            if new == word {
                return allowed;
            }
            if slot
                .compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return allowed;
            }
        }
        false
    }

    /// A keyed hash of the destination and its family (a multiply-xorshift over the seed).
    fn hash(&self, dst: u128, family: Family) -> u64 {
        let mix = |x: u64| {
            let x = (x ^ (x >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
            (x ^ (x >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93) ^ (x >> 29)
        };
        let low = mix((dst as u64) ^ self.seed);
        let high = mix(((dst >> 64) as u64) ^ low ^ u64::from(family.is_v6()));
        mix(high ^ self.seed.rotate_left(17))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_default_masks_are_the_kernels() {
        assert_eq!(DEFAULT_V4_RATEMASK, 0x1818);
        assert_eq!(DEFAULT_V6_RATEMASK, !4);
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_destination_gets_six_then_one_per_interval() {
        let p = PeerLimiter::new(64);
        let sent = |from: u64, to: u64, step: u64| {
            (from..to)
                .step_by(step as usize)
                .filter(|&t| p.allow_v4(7, 11, 0, t * MS))
                .count()
        };
        // A burst of six at time 0, then nothing until a second has passed.
        assert_eq!(sent(0, 1, 1), 1);
        assert_eq!((0..20).filter(|_| p.allow_v4(7, 11, 0, 0)).count(), 5);
        assert_eq!(sent(1, 1000, 10), 0);
        // Over the next 10 s, attempted every 10 ms: one per second.
        assert_eq!(sent(1000, 11_000, 10), 10);
        // Idle for a minute: the bucket refills to six, no more.
        assert_eq!(
            (0..20)
                .filter(|_| p.allow_v4(7, 11, 0, 80_000 * MS))
                .count(),
            6
        );
    }

    #[test]
    fn the_masks_and_the_v6_prefix_scaling_are_the_kernels() {
        let p = PeerLimiter::new(64);
        // Echo reply (0) is not in the default mask; redirect (5) neither.
        assert!((0..50).all(|_| p.allow_v4(9, 0, 0, 0)));
        assert!((0..50).all(|_| p.allow_v4(9, 5, 0, 0)));
        // Parameter problem (12) is.
        assert_eq!((0..50).filter(|_| p.allow_v4(9, 12, 0, 0)).count(), 6);
        // IPv6: packet too big (2) and informational types are never limited.
        assert!((0..50).all(|_| p.allow_v6(9, 2, 64, 0)));
        assert!((0..50).all(|_| p.allow_v6(9, 128, 64, 0)));
        // A /64 route back: 1000 ms >> 2 = 250 ms per message.
        assert_eq!((0..50).filter(|_| p.allow_v6(9, 1, 64, 0)).count(), 6);
        let later = (1..=100)
            .filter(|t| p.allow_v6(9, 1, 64, t * 10 * MS))
            .count();
        assert_eq!(later, 4, "one per 250 ms over a second");
        // A default route (/0): 1000 >> 4 = 62 ms.
        let p = PeerLimiter::new(64);
        let n = (0..1000).filter(|t| p.allow_v6(5, 3, 0, t * MS)).count();
        assert_eq!(n, 6 + 999 / 62);
        // The families do not share buckets.
        let p = PeerLimiter::new(64);
        assert_eq!((0..20).filter(|_| p.allow_v4(1, 3, 0, 0)).count(), 6);
        assert_eq!((0..20).filter(|_| p.allow_v6(1, 1, 128, 0)).count(), 6);
    }

    #[test]
    fn several_queues_share_one_destinations_budget() {
        let p = Arc::new(PeerLimiter::new(1024));
        // Four queues erring to one destination, each 2,000 times over two seconds (a shared
        // clock stepping by 1 ms each round): the destination gets the burst plus one per
        // second, not four times that.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    (0..2000u64)
                        .filter(|t| p.allow_v4(0xc000_0207, 3, 1, t * MS))
                        .count()
                })
            })
            .collect();
        let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(
            (6..=7).contains(&total),
            "{total} errors to one destination"
        );
        // Meanwhile another destination was untouched.
        assert_eq!(
            (0..20).filter(|_| p.allow_v4(0xc000_0208, 3, 1, 0)).count(),
            6
        );
    }

    #[test]
    fn disabled_limit_and_many_destinations() {
        let p = PeerLimiter::new(64);
        p.set_v4(0, DEFAULT_V4_RATEMASK);
        assert!((0..100).all(|_| p.allow_v4(3, 3, 1, 0)));
        p.set_v4(1000, DEFAULT_V4_RATEMASK);
        // More destinations than slots: each still gets at least its first message, as a new
        // peer (a slot taken over resets), never more than a fresh bucket's six at once.
        for d in 0..10_000u32 {
            assert!(p.allow_v4(d, 3, 1, 5 * MS));
        }
    }
}
