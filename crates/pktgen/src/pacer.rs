//! Rate limiting: how many packets a sender may send now to keep to a packets-per-second rate.
//!
//! A pure function of elapsed time (no clock inside, so it is tested with made-up times): the
//! allowance is `rate × elapsed − sent`, in whole packets, capped by the batch size. A sender
//! that falls behind (descheduled, or slower than the rate) may catch up by at most
//! [`MAX_DEBT`] packets; older debt is forgiven, so a stall never turns into a long burst that
//! would overflow the 256-slot veth rings downstream and be blamed on the device under test.
//! The achieved rate then falls short of the asked one, and the report says so.
#![forbid(unsafe_code)]

/// The most packets a late sender may still owe (two batches of 64).
pub const MAX_DEBT: u64 = 128;

/// Paces a sender to `rate` packets per second (or not at all).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacer {
    /// Packets per second; `None`: as fast as possible.
    rate: Option<f64>,
    start_ns: u64,
    sent: u64,
}

impl Pacer {
    /// A pacer starting at `start_ns` (CLOCK_MONOTONIC nanoseconds).
    pub fn new(rate: Option<f64>, start_ns: u64) -> Self {
        Pacer {
            rate: rate.filter(|r| *r > 0.0),
            start_ns,
            sent: 0,
        }
    }

    /// How many packets may go now, at most `batch`.
    ///
    /// ```
    /// let mut p = pktgen::pacer::Pacer::new(Some(1000.0), 0);
    /// assert_eq!(p.allowance(0, 64), 1); // the first packet goes at once
    /// p.sent(1);
    /// assert_eq!(p.allowance(500_000, 64), 0);
    /// assert_eq!(p.allowance(1_000_000, 64), 1); // the second after 1 ms at 1 kpps
    /// assert_eq!(p.allowance(1_000_000_000, 64), 64); // far behind: capped by the batch
    /// p.sent(64);
    /// assert_eq!(p.allowance(1_000_000_000, 1024), 64); // older debt was forgiven
    /// ```
    #[inline]
    pub fn allowance(&mut self, now_ns: u64, batch: usize) -> usize {
        let Some(rate) = self.rate else {
            return batch;
        };
        let elapsed = now_ns.saturating_sub(self.start_ns) as f64 * 1e-9;
        // The first packet goes at once: the budget at time t is ⌊rate·t⌋ + 1.
        let due = (rate * elapsed) as u64 + 1;
        let owed = due.saturating_sub(self.sent);
        if owed > MAX_DEBT {
            self.sent = due - MAX_DEBT; // forgive the rest: no long bursts after a stall
        }
        owed.min(MAX_DEBT).min(batch as u64) as usize
    }

    /// Records `n` packets as sent.
    #[inline]
    pub fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// Nanoseconds from `now_ns` until the next packet is due (0 when one is due now).
    pub fn wait_ns(&self, now_ns: u64) -> u64 {
        let Some(rate) = self.rate else { return 0 };
        let due_at = self.start_ns as f64 + self.sent as f64 / rate * 1e9;
        (due_at - now_ns as f64).max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unlimited_always_allows_a_batch() {
        let mut p = Pacer::new(None, 0);
        assert_eq!(p.allowance(0, 64), 64);
        assert_eq!(p.wait_ns(0), 0);
        assert_eq!(
            Pacer::new(Some(0.0), 0).allowance(5, 8),
            8,
            "rate 0 means no limit"
        );
    }

    #[test]
    fn a_stall_does_not_become_a_burst() {
        let mut p = Pacer::new(Some(1_000_000.0), 0);
        // 10 ms late at 1 Mpps: 10 000 owed, but at most MAX_DEBT go back to back.
        let mut burst = 0;
        loop {
            let n = p.allowance(10_000_000, 64);
            if n == 0 {
                break;
            }
            p.sent(n);
            burst += n as u64;
        }
        assert_eq!(burst, MAX_DEBT);
        assert_eq!(p.allowance(10_001_000, 64), 1, "then the rate resumes");
    }

    proptest! {
        /// Sending whatever is allowed at arbitrary times never runs ahead of the rate by more
        /// than one packet, and never falls behind when the sender is called often enough.
        #[test]
        fn keeps_to_the_rate(rate in 1_000.0f64..1_000_000.0, steps in proptest::collection::vec(1u64..100_000, 1..300)) {
            let mut p = Pacer::new(Some(rate), 1_000);
            let mut now = 1_000;
            let mut sent = 0u64;
            for step in steps {
                now += step;
                let n = p.allowance(now, usize::MAX);
                p.sent(n);
                sent += n as u64;
                let ideal = rate * (now - 1_000) as f64 * 1e-9;
                prop_assert!(sent as f64 <= ideal + 1.0 + 1e-6, "ahead: {sent} vs {ideal}");
                prop_assert!(sent as f64 >= ideal - 1.0, "behind: {sent} vs {ideal}");
                prop_assert_eq!(p.allowance(now, usize::MAX), 0);
                prop_assert!(p.wait_ns(now) as f64 <= 1e9 / rate + 1.0);
            }
        }
    }
}
