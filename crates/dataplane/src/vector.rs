//! The vector pipeline: each stage runs over the whole vector of frames before the next, in
//! the manner of VPP's graph nodes, so that the table lookups of different frames are issued
//! back to back and their cache misses overlap instead of queueing one behind the other.
//!
//! Stages, in order (each one only over the frames still in it):
//! 1. parse and validate, link-layer checks ([`Queue::admit`]);
//! 2. the own-source check (IPv4), behind a filter of the local addresses rebuilt per route
//!    generation;
//! 3. route-cache probes;
//! 4. for the misses: local destinations (the same filter, then the address table), then
//! 5. FIB lookups, then
//! 6. egress link and neighbour (memoised per next hop and route generation), then
//! 7. cache fills;
//! 8. the fwd policy, only when the fwd direction needs a check (the out policy, after the
//!    TTL check, is part of stage 9);
//! 9. in frame order, everything with side effects on the queue (ICMP errors and their token
//!    bucket, local delivery, the hold buffer, fragments into the pool), so that they happen in
//!    the order the reference gives them;
//! 10. the rewrite of every plain transmit (TTL, MACs);
//! 11. verdicts and counters.
//!
//! What differs from [`Queue::process_batch_reference`] is only when things happen, never what:
//! the route cache is probed for the whole vector before any miss is filled (two frames of one
//! new destination in one vector both miss, where the reference's second frame hits), so the
//! cache's own hit/miss counters may differ; every verdict, byte and pipeline counter is the
//! same (the differential property test in `tests/vector.rs` checks it).

use dst_cache::{Cacheable, FlowKey, Lookup, MissToken};
use policy_tree::Direction;

use crate::memo::LocalFilter;
use crate::parse::Meta;
use crate::pool::FramePool;
use crate::queue::{Batch, Frame, Queue, rewrite};
use crate::route::{self, Egress, Route};
use crate::verdict::{DropReason, Verdict};

/// Frames per vector: a batch is processed in vectors of this many frames.
pub(crate) const VECTOR: usize = 64;

/// Where one frame of the vector stands between stages. The data a stage hands on lives in
/// the [`Lane`]'s fields, so the step itself stays small.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Step {
    /// Decided.
    Done(Verdict),
    /// Parsed; the own-source check is next.
    #[default]
    Source,
    /// The route cache is next.
    Probe,
    /// A route-cache miss (`token` set) or bypass: the tables decide.
    Miss,
    /// The same key as the missed lane at this index, just before it: takes its answer.
    Same(usize),
    /// Not a local destination: the FIB is next.
    Fib,
    /// The FIB chose a unicast next hop (`egress`): its link and neighbour are next.
    Egress,
    /// Resolved from the tables (`route`): to be stored in the cache.
    Fill,
    /// The route (`route`) is known.
    Routed,
    /// Passed every check: a plain transmit by `route`'s hop, to be rewritten.
    Rewrite,
}

/// One frame's state in the vector.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lane {
    step: Step,
    meta: Meta,
    /// Where a miss belongs in the route cache (`None`: bypassed or no cache).
    token: Option<MissToken>,
    /// The FIB's choice, for the egress stage.
    egress: Egress,
    /// The route, once known.
    route: Route,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            step: Step::default(),
            meta: Meta::default(),
            token: None,
            egress: Egress {
                oif: 0,
                next_hop: 0,
                next_hop_v6: false,
                multipath: false,
                route_mtu: None,
                source_checked: false,
            },
            route: Route::Local,
        }
    }
}

impl Queue {
    /// Runs one vector of at most [`VECTOR`] frames through the stages; `lanes` is as long as
    /// `frames`. Each stage is a function of its own (kept out of line: a call per stage and
    /// vector, not per frame), so that profiles attribute costs to stages.
    pub(crate) fn process_vector<P: FramePool>(
        &mut self,
        b: &mut Batch<'_>,
        frames: &mut [Frame<'_>],
        lanes: &mut [Lane],
        pool: &mut P,
    ) {
        self.stage_parse(b, frames, lanes);
        self.stage_source(b, lanes);
        self.stage_probe(b, frames, lanes);
        stage_local(b, &self.locals, lanes);
        stage_fib(b, frames, lanes);
        self.stage_egress(b, lanes);
        self.stage_fill(b, frames, lanes);
        // As the kernel (`policy_count[dir]`): no fwd policy, no lookup.
        if b.tables.policies.needs_check(Direction::Fwd) {
            self.stage_policy(b, lanes);
        }
        self.stage_decide(b, frames, lanes, pool);
        stage_rewrite(frames, lanes);
        self.stage_count(frames, lanes);
    }

    /// Stage 1: Parse and validate, link-layer checks.
    #[inline(never)]
    fn stage_parse(&self, b: &mut Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
        for (frame, lane) in frames.iter().zip(lanes.iter_mut()) {
            lane.step = match self.admit_into(b, frame, &mut lane.meta) {
                Ok(()) => Step::Source,
                Err(verdict) => Step::Done(verdict),
            };
        }
    }

    /// Stage 2: `fib_validate_source`: one of our own addresses as the source is a martian.
    #[inline(never)]
    fn stage_source(&mut self, b: &Batch<'_>, lanes: &mut [Lane]) {
        for lane in lanes.iter_mut() {
            if let Step::Source = lane.step {
                let m = &lane.meta;
                let own = !m.v6
                    && self.locals.may_be_local(false, m.src)
                    && route::is_local_dst(b.tables, b.guard, false, m.src);
                lane.step = if own {
                    Step::Done(Verdict::Drop(DropReason::MartianSource))
                } else {
                    Step::Probe
                };
            }
        }
    }

    /// Stage 3: Route-cache probes; a run of frames with one key costs one probe.
    #[inline(never)]
    fn stage_probe(&mut self, b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
        let Some(cache) = &mut self.cache else {
            for lane in lanes.iter_mut() {
                if let Step::Probe = lane.step {
                    lane.token = None;
                    lane.step = Step::Miss;
                }
            }
            return;
        };
        let mut previous: Option<(FlowKey, usize)> = None;
        for i in 0..lanes.len() {
            let Step::Probe = lanes[i].step else {
                continue;
            };
            // Custom rules, or the adaptive bypass: the tables decide, no key is built.
            if !cache.admit(b.snapshot) {
                lanes[i].token = None;
                lanes[i].step = Step::Miss;
                continue;
            }
            let key = route::flow_key(&lanes[i].meta, frames[i].ifindex);
            let repeat = match previous {
                Some((k, j)) if k == key => Some(j),
                _ => None,
            };
            previous = Some((key, i));
            if let Some(j) = repeat {
                match lanes[j].step {
                    Step::Routed => {
                        cache.repeat_hit();
                        lanes[i].route = lanes[j].route;
                        lanes[i].step = Step::Routed;
                        continue;
                    }
                    Step::Miss if lanes[j].token.is_some() => {
                        lanes[i].step = Step::Same(j);
                        continue;
                    }
                    Step::Same(first) => {
                        lanes[i].step = Step::Same(first);
                        continue;
                    }
                    _ => {}
                }
            }
            let lane = &mut lanes[i];
            match cache.probe(&key, b.snapshot, b.now) {
                Lookup::Hit(route) => {
                    lane.route = route;
                    lane.step = Step::Routed;
                }
                Lookup::Miss(token) => {
                    lane.token = Some(token);
                    lane.step = Step::Miss;
                }
                Lookup::Bypass => {
                    lane.token = None;
                    lane.step = Step::Miss;
                }
            }
        }
    }

    /// Stage 6: Misses: egress link and neighbour, per next hop.
    #[inline(never)]
    fn stage_egress(&mut self, b: &Batch<'_>, lanes: &mut [Lane]) {
        let generation = b.snapshot.generation;
        for lane in lanes.iter_mut() {
            if let Step::Egress = lane.step {
                lane.route = self
                    .egress
                    .egress(b.tables, b.guard, generation, &lane.egress);
                lane.step = Step::Fill;
            }
        }
    }

    /// Stage 7: Cache fills; then repeats of a missed key take its answer, as their probe would have
    /// after the fill (an answer that could not be cached is looked up again, as the reference
    /// does).
    #[inline(never)]
    fn stage_fill(&mut self, b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
        // A repeat's first lane comes before it: already filled when the repeat is reached.
        for i in 0..lanes.len() {
            match lanes[i].step {
                Step::Fill => {
                    let lane = &mut lanes[i];
                    if let (Some(token), Some(cache)) = (lane.token, &mut self.cache) {
                        cache.insert(token, lane.route, b.now, u64::MAX);
                    }
                    lane.step = Step::Routed;
                }
                Step::Same(first) => {
                    let route = lanes[first].route;
                    lanes[i].route = match &mut self.cache {
                        Some(cache) if route.is_cacheable() => {
                            cache.repeat_hit();
                            route
                        }
                        _ => self.route(b, &lanes[i].meta, frames[i].ifindex),
                    };
                    lanes[i].step = Step::Routed;
                }
                _ => {}
            }
        }
    }

    /// Stage 8: The fwd policy (only called when the fwd direction needs a check). The flow's
    /// interface is the egress one (`flowi_oif` of the forward decode).
    #[inline(never)]
    fn stage_policy(&self, b: &Batch<'_>, lanes: &mut [Lane]) {
        for lane in lanes.iter_mut() {
            if let (Step::Routed, Route::Forward(hop)) = (lane.step, &lane.route) {
                if let Some(verdict) = self.policy(b, &lane.meta, hop.oif, Direction::Fwd) {
                    lane.step = Step::Done(verdict);
                }
            }
        }
    }

    /// Stage 9: In frame order: the forwarding checks, and every decision with side effects on the
    /// queue (ICMP errors, local delivery, hold buffer, fragments); plain transmits go on to
    /// the rewrite.
    #[inline(never)]
    fn stage_decide<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frames: &mut [Frame<'_>],
        lanes: &mut [Lane],
        pool: &mut P,
    ) {
        for (frame, lane) in frames.iter_mut().zip(lanes.iter_mut()) {
            let Step::Routed = lane.step else {
                continue;
            };
            let meta = &lane.meta;
            lane.step = match &lane.route {
                Route::Forward(hop) => match self.forward_checks(b, frame, meta, hop, pool) {
                    Ok(false) if hop.dst_mac.is_some() => Step::Rewrite,
                    Ok(too_big) => {
                        rewrite(frame, meta, hop);
                        Step::Done(self.after_rewrite(b, frame, meta, hop, too_big, pool))
                    }
                    Err(verdict) => Step::Done(verdict),
                },
                route => Step::Done(self.dispatch(b, frame, meta, *route, pool)),
            };
        }
    }

    /// Stage 11: Verdicts and counters.
    #[inline(never)]
    fn stage_count(&mut self, frames: &mut [Frame<'_>], lanes: &[Lane]) {
        for (frame, lane) in frames.iter_mut().zip(lanes.iter()) {
            let verdict = match lane.step {
                Step::Done(verdict) => verdict,
                // Every stage above moves each lane on; none is left behind.
                _ => Verdict::Pending,
            };
            frame.verdict = verdict;
            self.counters.count(verdict);
        }
    }
}

/// Stage 4: Misses: local destinations (address table, behind the filter).
#[inline(never)]
fn stage_local(b: &Batch<'_>, locals: &LocalFilter, lanes: &mut [Lane]) {
    for lane in lanes.iter_mut() {
        if let Step::Miss = lane.step {
            let m = &lane.meta;
            if locals.may_be_local(m.v6, m.dst)
                && route::is_local_dst(b.tables, b.guard, m.v6, m.dst)
            {
                lane.route = Route::Local;
                lane.step = Step::Fill;
            } else {
                lane.step = Step::Fib;
            }
        }
    }
}

/// Stage 5: Misses: FIB lookups, back to back.
#[inline(never)]
fn stage_fib(b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
    for (frame, lane) in frames.iter().zip(lanes.iter_mut()) {
        if let Step::Fib = lane.step {
            let m = &lane.meta;
            match route::fib_lookup(
                b.tables,
                b.guard,
                m.v6,
                m.src,
                m.dst,
                m.tos & 0xfc,
                frame.ifindex,
            ) {
                Ok(egress) => {
                    lane.egress = egress;
                    lane.step = Step::Egress;
                }
                Err(route) => {
                    lane.route = route;
                    lane.step = Step::Fill;
                }
            }
        }
    }
}

/// Stage 10: Rewrite the plain transmits (TTL / hop limit, MACs).
#[inline(never)]
fn stage_rewrite(frames: &mut [Frame<'_>], lanes: &mut [Lane]) {
    for (frame, lane) in frames.iter_mut().zip(lanes.iter_mut()) {
        if let (Step::Rewrite, Route::Forward(hop)) = (lane.step, &lane.route) {
            rewrite(frame, &lane.meta, hop);
            lane.step = Step::Done(Verdict::Transmit { ifindex: hop.oif });
        }
    }
}
