//! What the receiver counts: per flow received, out of order and gaps; a latency histogram.
//!
//! Pure bookkeeping, no I/O: the receive loop calls [`RxStats::record`] for every probe and
//! [`RxStats::foreign`] for every other frame; [`RxStats::summary`] turns the counts into a
//! report. The histogram has fixed buckets (no allocation after construction): values below 64
//! ns are exact, above that each power of two is split into 32 buckets (error ≤ 3.2%).
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::frame::Probe;

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS; // 32 buckets per power of two
const EXACT: u64 = 2 * SUB; // values below 64 have a bucket each
const BUCKETS: usize = (EXACT + (64 - SUB_BITS as u64 - 1) * SUB) as usize;

/// A log-linear histogram of nanosecond values.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

/// The bucket of `v`.
#[inline]
fn bucket(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros()); // ≥ 6
    let mantissa = (v >> (e - u64::from(SUB_BITS))) & (SUB - 1);
    (EXACT + (e - u64::from(SUB_BITS) - 1) * SUB + mantissa) as usize
}

/// The smallest value of bucket `i`.
fn bucket_low(i: usize) -> u64 {
    let i = i as u64;
    if i < EXACT {
        return i;
    }
    let e = (i - EXACT) / SUB + u64::from(SUB_BITS) + 1;
    let mantissa = (i - EXACT) % SUB;
    (SUB + mantissa) << (e - u64::from(SUB_BITS))
}

impl Histogram {
    /// Counts one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.total += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// How many values were counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1): the low end of the bucket holding the
    /// ⌈q·n⌉-th smallest value, clamped to the exact minimum and maximum; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_low(i).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Min, mean, percentiles and max; `None` when empty.
    pub fn summary(&self) -> Option<Latency> {
        let q = |q| self.quantile(q).unwrap_or(0);
        (self.total > 0).then(|| Latency {
            min_ns: self.min,
            mean_ns: (self.sum / u128::from(self.total)) as u64,
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: self.max,
        })
    }
}

/// Latency percentiles, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    /// The smallest latency.
    pub min_ns: u64,
    /// The mean.
    pub mean_ns: u64,
    /// The median.
    pub p50_ns: u64,
    /// The 90th percentile.
    pub p90_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The 99.9th percentile.
    pub p999_ns: u64,
    /// The largest latency.
    pub max_ns: u64,
}

/// Counts of one flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCounts {
    /// Probes received (duplicates included).
    pub received: u64,
    /// Probes whose sequence number was below the highest seen before them.
    pub out_of_order: u64,
    /// One more than the highest sequence number seen (0: none seen).
    pub next_seq: u64,
}

impl FlowCounts {
    /// Sequence numbers below the highest seen that never arrived: `next_seq - received`, a
    /// lower bound of the loss (losses after the last received probe are invisible here; the
    /// sender's count gives those).
    pub fn gaps(&self) -> u64 {
        self.next_seq.saturating_sub(self.received)
    }
}

/// The receiver's counts since the last reset.
#[derive(Clone, Debug)]
pub struct RxStats {
    flows: Vec<FlowCounts>,
    latency: Histogram,
    received: u64,
    foreign: u64,
    unknown_flow: u64,
}

impl RxStats {
    /// Counts for flow ids `0..flows`; probes of other flow ids count as `unknown_flow`.
    pub fn new(flows: usize) -> Self {
        RxStats {
            flows: vec![FlowCounts::default(); flows],
            latency: Histogram::default(),
            received: 0,
            foreign: 0,
            unknown_flow: 0,
        }
    }

    /// Counts a probe received at `now_ns` (CLOCK_MONOTONIC, like the probe's send time).
    #[inline]
    pub fn record(&mut self, probe: &Probe, now_ns: u64) {
        let Some(flow) = self.flows.get_mut(probe.flow as usize) else {
            self.unknown_flow += 1;
            return;
        };
        self.received += 1;
        flow.received += 1;
        let seq = u64::from(probe.seq);
        if seq < flow.next_seq {
            flow.out_of_order += 1;
        } else {
            flow.next_seq = seq + 1;
        }
        self.latency.record(now_ns.saturating_sub(probe.time_ns));
    }

    /// Counts a frame that is not a probe.
    #[inline]
    pub fn foreign(&mut self) {
        self.foreign += 1;
    }

    /// Adds the counts of another receive queue (flows are disjoint or the sums are wanted).
    pub fn merge(&mut self, other: &RxStats) {
        for (a, b) in self.flows.iter_mut().zip(&other.flows) {
            a.received += b.received;
            a.out_of_order += b.out_of_order;
            a.next_seq = a.next_seq.max(b.next_seq);
        }
        self.latency.merge(&other.latency);
        self.received += other.received;
        self.foreign += other.foreign;
        self.unknown_flow += other.unknown_flow;
    }

    /// The per-flow counts.
    pub fn flows(&self) -> &[FlowCounts] {
        &self.flows
    }

    /// The totals and latency percentiles.
    pub fn summary(&self) -> RxSummary {
        RxSummary {
            received: self.received,
            out_of_order: self.flows.iter().map(|f| f.out_of_order).sum(),
            gaps: self.flows.iter().map(FlowCounts::gaps).sum(),
            flows_seen: self.flows.iter().filter(|f| f.received > 0).count() as u64,
            foreign: self.foreign,
            unknown_flow: self.unknown_flow,
            latency: self.latency.summary(),
        }
    }
}

/// Totals over all flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxSummary {
    /// Probes received.
    pub received: u64,
    /// Probes that arrived after a later one of their flow.
    pub out_of_order: u64,
    /// Sum over flows of [`FlowCounts::gaps`].
    pub gaps: u64,
    /// Flows with at least one probe.
    pub flows_seen: u64,
    /// Frames that were not probes.
    pub foreign: u64,
    /// Probes of a flow id beyond the configured flow count.
    pub unknown_flow: u64,
    /// Latency percentiles (`None` when nothing arrived).
    pub latency: Option<Latency>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(63), 63);
        assert_eq!(bucket(64), 64);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for i in 0..BUCKETS {
            assert_eq!(bucket(bucket_low(i)), i, "bucket {i}");
            if i + 1 < BUCKETS {
                assert_eq!(bucket(bucket_low(i + 1) - 1), i, "end of bucket {i}");
            }
        }
    }

    proptest! {
        #[test]
        fn quantiles_are_within_bucket_error(mut values in proptest::collection::vec(0u64..10_000_000_000, 1..500), q in 0.0f64..=1.0) {
            let mut h = Histogram::default();
            for &v in &values {
                h.record(v);
            }
            values.sort_unstable();
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let got = h.quantile(q).unwrap();
            prop_assert!(got <= exact, "{got} > {exact}");
            prop_assert!(exact - got <= exact / 32 + 1, "{got} too far below {exact}");
        }
    }

    #[test]
    fn flows_count_loss_and_reordering() {
        let mut s = RxStats::new(2);
        let p = |flow, seq| Probe {
            flow,
            seq,
            time_ns: 100,
        };
        for seq in [0, 1, 3, 2, 5] {
            s.record(&p(0, seq), 150);
        }
        s.record(&p(1, 0), 1100);
        s.record(&p(9, 0), 1100);
        s.foreign();
        let sum = s.summary();
        assert_eq!(sum.received, 6);
        assert_eq!(sum.out_of_order, 1, "2 after 3");
        assert_eq!(sum.gaps, 1, "4 never came");
        assert_eq!(sum.flows_seen, 2);
        assert_eq!(sum.unknown_flow, 1);
        assert_eq!(sum.foreign, 1);
        let lat = sum.latency.unwrap();
        assert_eq!((lat.min_ns, lat.max_ns), (50, 1000));
        assert_eq!(lat.p50_ns, 50);
        let mut t = RxStats::new(2);
        t.record(&p(1, 1), 200);
        t.merge(&s);
        assert_eq!(t.summary().received, 7);
        assert_eq!(t.flows()[1].next_seq, 2);
    }
}
