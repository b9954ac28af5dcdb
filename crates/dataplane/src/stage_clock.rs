//! Time per stage of the vector pipeline, for diagnostics: with the cargo feature
//! `stage-clock`, every vector reads the clock before its first stage and after each stage,
//! and adds the laps to this thread's totals (`take`); without it, `Clock` is empty and
//! every call on it compiles to nothing.
//!
//! The laps include one clock read each (tens of nanoseconds on a VM's vDSO clock, measured
//! by `read_cost`): subtract it, per vector, before comparing stages.

/// The stages the clock tells apart, in the order they run (`take`'s indices).
pub const STAGES: [&str; 8] = [
    "parse", "probe", "fib", "egress", "fill", "policy", "decide", "rewrite",
];

/// The index of a stage in [`STAGES`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage {
    Parse,
    Probe,
    Fib,
    Egress,
    Fill,
    Policy,
    Decide,
    Rewrite,
}

#[cfg(feature = "stage-clock")]
mod on {
    use std::cell::Cell;
    use std::time::Instant;

    use super::{STAGES, Stage};

    thread_local! {
        /// Nanoseconds per stage, then vectors timed.
        static TOTALS: Cell<([u64; STAGES.len()], u64)> =
            const { Cell::new(([0; STAGES.len()], 0)) };
    }

    /// One vector's clock: the time of the last lap.
    pub(crate) struct Clock {
        last: Instant,
        laps: [u64; STAGES.len()],
    }

    impl Clock {
        /// Starts timing a vector.
        #[inline(always)]
        pub(crate) fn start() -> Clock {
            Clock {
                last: Instant::now(),
                laps: [0; STAGES.len()],
            }
        }

        /// The stage `stage` ended now.
        #[inline(always)]
        pub(crate) fn lap(&mut self, stage: Stage) {
            let now = Instant::now();
            let nanos = u64::try_from((now - self.last).as_nanos()).unwrap_or(u64::MAX);
            self.laps[stage as usize] += nanos;
            self.last = now;
        }

        /// The vector is done: its laps go to this thread's totals.
        #[inline(always)]
        pub(crate) fn finish(self) {
            TOTALS.with(|t| {
                let (mut sums, vectors) = t.get();
                for (sum, lap) in sums.iter_mut().zip(self.laps) {
                    *sum += lap;
                }
                t.set((sums, vectors + 1));
            });
        }
    }

    /// This thread's nanoseconds per stage ([`STAGES`]'s order) and vectors timed since the
    /// last call; resets them.
    #[must_use]
    pub fn take() -> ([u64; STAGES.len()], u64) {
        TOTALS.with(|t| t.replace(([0; STAGES.len()], 0)))
    }

    /// The mean nanoseconds between two clock reads, over `reads` reads.
    #[must_use]
    pub fn read_cost(reads: u32) -> f64 {
        let start = Instant::now();
        let mut last = start;
        for _ in 0..reads {
            last = std::hint::black_box(Instant::now());
        }
        (last - start).as_nanos() as f64 / f64::from(reads.max(1))
    }
}

#[cfg(feature = "stage-clock")]
pub(crate) use on::Clock;
#[cfg(feature = "stage-clock")]
pub use on::{read_cost, take};

/// Without the feature: nothing is timed.
#[cfg(not(feature = "stage-clock"))]
pub(crate) struct Clock;

#[cfg(not(feature = "stage-clock"))]
impl Clock {
    #[inline(always)]
    pub(crate) fn start() -> Clock {
        Clock
    }

    #[inline(always)]
    pub(crate) fn lap(&mut self, _stage: Stage) {}

    #[inline(always)]
    pub(crate) fn finish(self) {}
}

/// An experiment's switch for in-process A/B runs of two variants in one binary (feature
/// `ab-variant`; diagnostics; the dataplane bench's `DATAPLANE_AB=variant`): while it is
/// `true`, the pipeline takes the variant under test. No stage reads it now: an experiment
/// reads it (`VARIANT.load(Relaxed)`, once per vector) where its variants differ.
#[cfg(feature = "ab-variant")]
pub static VARIANT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
