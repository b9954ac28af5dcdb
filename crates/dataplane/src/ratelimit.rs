//! A token bucket for ICMP errors, per queue, like the kernel's `icmp_global_allow`
//! (`net.ipv4.icmp_msgs_per_sec` = 1000, `icmp_msgs_burst` = 50).

/// A token bucket on the caller's clock (nanoseconds): `rate` messages per second on average,
/// at most `burst` at once. Integer arithmetic only: the bucket holds time credit, each message
/// costs `1e9 / rate` nanoseconds of it, and the credit is capped at `burst` messages.
///
/// ```
/// use dataplane::TokenBucket;
/// let mut bucket = TokenBucket::new(1000, 2); // 1000/s, burst 2
/// assert!(bucket.allow(0) && bucket.allow(0));
/// assert!(!bucket.allow(0));
/// assert!(bucket.allow(1_000_000)); // one millisecond later: one more token
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokenBucket {
    cost: u64,
    cap: u64,
    credit: u64,
    last: u64,
}

impl TokenBucket {
    /// A full bucket. `rate == 0` refuses every message; `burst` is at least 1.
    pub fn new(rate: u32, burst: u32) -> Self {
        let cost = if rate == 0 {
            u64::MAX
        } else {
            1_000_000_000 / u64::from(rate)
        };
        let cap = cost.saturating_mul(u64::from(burst.max(1)));
        TokenBucket {
            cost,
            cap,
            credit: cap,
            last: 0,
        }
    }

    /// Whether a token is there at time `now`, without taking it (the kernel checks its global
    /// credit first, then the destination's limit, and takes the global credit only when
    /// both allow).
    ///
    /// ```
    /// let mut bucket = dataplane::TokenBucket::new(1000, 1);
    /// assert!(bucket.has_token(0) && bucket.has_token(0));
    /// assert!(bucket.allow(0));
    /// assert!(!bucket.has_token(0));
    /// ```
    pub fn has_token(&self, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.last);
        let credit = self.credit.saturating_add(elapsed).min(self.cap);
        self.cost != u64::MAX && credit >= self.cost
    }

    /// Whether one message may go at time `now` (nanoseconds, monotonic); takes its token.
    pub fn allow(&mut self, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        self.credit = self.credit.saturating_add(elapsed).min(self.cap);
        if self.cost != u64::MAX && self.credit >= self.cost {
            self.credit -= self.cost;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_run_rate_is_the_configured_rate() {
        let mut bucket = TokenBucket::new(1000, 50);
        let mut sent = 0;
        // One attempt every 100 us for one second: 10_000 attempts.
        for i in 0..10_000u64 {
            sent += u64::from(bucket.allow(i * 100_000));
        }
        // The burst of 50 plus 1000 per second (minus the first interval).
        assert!((1000..=1050).contains(&sent), "{sent}");
    }

    #[test]
    fn zero_rate_refuses_and_clock_going_back_is_harmless() {
        let mut off = TokenBucket::new(0, 10);
        assert!(!off.allow(0) && !off.allow(u64::MAX));
        let mut b = TokenBucket::new(1, 1);
        assert!(b.allow(5_000_000_000));
        assert!(!b.allow(1));
        assert!(b.allow(6_000_000_000));
    }
}
