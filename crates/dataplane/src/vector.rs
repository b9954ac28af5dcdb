//! The vector pipeline: each stage runs over the whole vector of frames before the next, in
//! the manner of VPP's graph nodes, so that the table lookups of different frames are issued
//! back to back and their cache misses overlap instead of queueing one behind the other.
//!
//! Stages, in order (each one only over the frames still in it):
//! 1. parse and validate, link-layer checks ([`Queue::admit`]), and the own-source check
//!    (IPv4) behind a filter of the local addresses rebuilt per route generation;
//! 2. route-cache probes: the adaptive bypass answers for the whole vector at once
//!    ([`DstCache::admit_many`](dst_cache::DstCache::admit_many)), so a cache that steps aside
//!    costs a few steps per vector; its two rules: hits too rare, or hits not cheaper than the
//!    tables' memoised path (sampled vectors timed, [`dst_cache::cost`]);
//! 3. for the misses: local destinations (the same filter, then the address table), then the
//!    FIB lookups, gathered per family; an answer through one gateway whose decision the
//!    ingress memo remembers for this ingress device (the kernel's `nhc_rth_input`) is
//!    decided here by the route's tag ([`fib_trie::RouteTag`], handed to
//!    [`FlowBatch::known`](fib_trie::FlowBatch::known) before the FIB builds a result),
//!    without the result, the switches, the next-hop choice or the egress stage;
//! 4. egress link and neighbour (memoised per next hop and route generation: work the kernel
//!    does per route, done once per route), then
//! 5. cache fills (only with a route cache);
//! 6. the fwd policy, only when the fwd direction needs a check (the out policy, after the
//!    TTL check, is part of stage 7);
//! 7. in frame order, everything with side effects on the queue (ICMP errors and their token
//!    bucket, local delivery, the hold buffer, fragments into the pool), so that they happen in
//!    the order the reference gives them; a frame that passes every check as a plain transmit
//!    is rewritten right there (TTL, MACs: the hop's prepared twelve bytes of addresses,
//!    [`Hop::eth_addrs`](crate::route::Hop::eth_addrs)), its verdict set and counted per
//!    vector (a pass of its own over the vector cost about 1% at 8k flows and 2.5% with 1 flow,
//!    in-process A/B, 2026-11-29);
//! 8. the rewrite of the other plain transmits (those the checks' general path passed), in one
//!    pass with
//! 9. the other frames' verdicts and counters; a vector whose every frame stage 7 sent skips
//!    this pass.
//!
//! What differs from [`Queue::process_batch_reference`] is only when things happen, never what:
//! the route cache is probed for the whole vector before any miss is filled (two frames of one
//! new destination in one vector both miss, where the reference's second frame hits), so the
//! cache's own hit/miss counters may differ; every verdict, byte and pipeline counter is the
//! same (the differential property test in `tests/vector.rs` checks it).

use std::time::Instant;

use dst_cache::{Cacheable, Lookup, MissToken};
use fib_trie::RouteTag;
use policy_tree::Direction;

use crate::memo::{IngressMemo, LocalFilter, MemoSwitches};
use crate::parse::{self, Meta};
use crate::pool::FramePool;
use crate::queue::{Batch, Frame, Queue, rewrite, rewrite_out_of_line};
use crate::route::{self, Egress, FamilyKey, Route};
use crate::stage_clock::{Clock, Stage};
use crate::verdict::{PuntReason, Verdict};
use crate::wire::Family;

/// Frames per vector: a batch is processed in vectors of this many frames.
pub(crate) const VECTOR: usize = 64;

/// Where one frame of the vector stands between stages. The data a stage hands on lives in
/// the [`Lane`]'s fields, so the step itself stays small. A tag byte of its own (`repr(u8)`):
/// in the verdict's niche, every test of the step first decoded the verdict's tag (seven
/// instructions per frame in the rewrite stage alone).
#[derive(Clone, Copy, Debug, Default)]
#[repr(u8)]
pub(crate) enum Step {
    /// Decided.
    Done(Verdict),
    /// Parsed and not an own source: the route cache may answer (the probe stage), else
    /// (a route-cache miss with `token` set, or a bypass) the tables decide.
    #[default]
    Miss,
    /// The same key as the missed lane at this index, just before it: takes its answer.
    Same(usize),
    /// The FIB chose a unicast next hop (`egress`): its link and neighbour are next.
    Egress,
    /// Resolved from the tables (`route`) after a cache miss (`token`): to be stored.
    Fill,
    /// The route (`route`) is known.
    Routed,
    /// Passed every check: a plain transmit by `route`'s hop, to be rewritten.
    Rewrite,
    /// Rewritten by the decide stage, its verdict set and counted: nothing left to do.
    Sent,
}

/// What makes a lane's route-cache key ([`route::flow_key`]: destination, TOS without ECN,
/// family, ingress device), compared field by field to find runs of one flow without building
/// keys. Equal `RunKey`s give equal flow keys.
#[derive(Clone, Copy, Debug)]
struct RunKey {
    dst: u128,
    iif: u32,
    tos: u8,
    family: Family,
}

impl RunKey {
    #[inline(always)]
    fn of(meta: &Meta, iif: u32) -> Self {
        RunKey {
            dst: meta.dst,
            iif,
            tos: meta.tos & route::DSCP_MASK,
            family: meta.family,
        }
    }

    /// Whether a lane (its `meta`, arrived on `iif`) has this key.
    #[inline(always)]
    fn is(&self, meta: &Meta, iif: u32) -> bool {
        // Bitwise `&`: one branch for the whole comparison.
        (meta.dst == self.dst)
            & (iif == self.iif)
            & ((meta.tos & route::DSCP_MASK) == self.tos)
            & (meta.family == self.family)
    }
}

/// The lane of the next admitted lookup (`admitted`, a mask of `routable`'s positions; not
/// zero), or `usize::MAX` when `routable` has no such position.
#[inline(always)]
fn next_admitted(admitted: u64, routable: &[u8]) -> usize {
    routable
        .get(admitted.trailing_zeros() as usize)
        .map_or(usize::MAX, |&i| usize::from(i))
}

/// The probe stage's run of one flow: takes the admitted lanes after a probed one, in order,
/// out of `admitted` while their key is `run`'s, handing each (its index and lane) to `take`.
#[inline(always)]
fn take_run(
    admitted: &mut u64,
    routable: &[u8],
    frames: &[Frame<'_>],
    lanes: &mut [Lane],
    run: &RunKey,
    mut take: impl FnMut(usize, &mut Lane),
) {
    while *admitted != 0 {
        let j = next_admitted(*admitted, routable);
        let (Some(lane), Some(frame)) = (lanes.get_mut(j), frames.get(j)) else {
            break;
        };
        if !run.is(&lane.meta, frame.ifindex) {
            break;
        }
        *admitted &= *admitted - 1;
        take(j, lane);
    }
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
    /// The FIB's answer was a route whose decision the ingress memo may remember
    /// ([`route::single_gateway`]), by this tag: the egress stage stores it.
    memo_tag: Option<RouteTag>,
    /// The route, once known.
    route: Route,
}

impl Lane {
    /// Takes the FIB's answer: a unicast next hop for the egress stage, or the decision.
    #[inline]
    fn take_fib_answer(&mut self, answer: Result<Egress, Route>) {
        match answer {
            Ok(egress) => {
                self.egress = egress;
                self.step = Step::Egress;
            }
            Err(route) => {
                self.route = route;
                self.step = self.resolved();
            }
        }
    }

    /// The step after the tables answered a miss: a fill if the cache asked for one.
    #[inline]
    fn resolved(&self) -> Step {
        if self.token.is_some() {
            Step::Fill
        } else {
            Step::Routed
        }
    }
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            step: Step::default(),
            meta: Meta::default(),
            token: None,
            memo_tag: None,
            egress: Egress {
                oif: 0,
                next_hop: 0,
                next_hop_family: Family::V4,
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
        // The lanes each stage hands on, in frame order (VPP's next-node frames).
        let mut routable = [0u8; VECTOR];
        // Empty unless built with the feature `stage-clock` (diagnostics).
        let mut clock = Clock::start();
        let routables = self.stage_parse(b, frames, lanes, &mut routable);
        clock.lap(Stage::Parse);
        let mut fill = [0u8; VECTOR];
        // The cache admits the vector's lookups at once (custom rules, or the adaptive bypass,
        // refuse some or all of them): a vector it refuses whole, as a bypassed cache does
        // with all but one in thousands, costs no call of the probe stage.
        // One vector in many is a sample of the bypass's cost rule
        // ([`DstCache::cost_sample`](dst_cache::DstCache::cost_sample)): its routing (from here
        // to the fills) is timed, so that the cache steps aside while its hits are not cheaper
        // than the tables' memoised path. Two clock reads per sample (4 vectors in 512), none otherwise.
        let (admitted, sample) = match &mut self.cache {
            Some(cache) => {
                let sample = cache
                    .cost_sample(b.snapshot)
                    .map(|arm| (arm, Instant::now()));
                (cache.admit_many(b.snapshot, routables), sample)
            }
            None => (0, None),
        };
        let (fills, answered) = if admitted != 0 {
            self.stage_probe(
                b,
                frames,
                lanes,
                &routable[..routables],
                admitted,
                &mut fill,
            )
        } else {
            (0, 0)
        };
        clock.lap(Stage::Probe);
        // Nothing left for the tables when the cache answered every routable lane.
        let misses = if answered < routables { routables } else { 0 };
        let egresses = stage_fib(
            b,
            &self.locals,
            &mut self.ingress,
            frames,
            lanes,
            &routable[..misses],
        );
        clock.lap(Stage::Fib);
        if egresses > 0 {
            self.stage_egress(b, frames, lanes);
        }
        clock.lap(Stage::Egress);
        if fills > 0 {
            self.stage_fill(b, frames, lanes, &fill[..fills]);
        }
        clock.lap(Stage::Fill);
        if let (Some((arm, start)), Some(cache)) = (sample, &mut self.cache) {
            let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            cache.record_cost(arm, routables, nanos);
        }
        // As the kernel (`policy_count[dir]`): no fwd policy, no lookup.
        if b.fwd_policies {
            self.stage_policy(b, frames, lanes);
        }
        clock.lap(Stage::Policy);
        let sent = self.stage_decide(b, frames, lanes, pool);
        clock.lap(Stage::Decide);
        // A vector whose every frame the decide stage sent needs no pass of its own.
        if sent < frames.len() {
            self.stage_rewrite(frames, lanes);
        }
        clock.lap(Stage::Rewrite);
        clock.finish();
    }

    /// Stage 1: Parse and validate, link-layer checks; then `fib_validate_source`: one of our
    /// own addresses as the source is a martian (the filter first, the address table only
    /// for addresses that may be local).
    /// Lists the lanes that go on to the route (`Step::Miss`) in `routable`, in order, and
    /// returns how many.
    #[inline(never)]
    fn stage_parse(
        &self,
        b: &mut Batch<'_>,
        frames: &[Frame<'_>],
        lanes: &mut [Lane],
        routable: &mut [u8; VECTOR],
    ) -> usize {
        let mut n = 0;
        // The vector's device (a queue's frames come from one), looked up once: its frames
        // whose destination is its unicast MAC pass the link-layer checks by one comparison.
        let device = frames.first().and_then(|f| match b.ingress_mac(f.ifindex) {
            Some(Some(mac)) if mac[0] & 1 == 0 => Some((f.ifindex, mac_word(mac))),
            _ => None,
        });
        let (device_ok, (device, device_mac)) = (device.is_some(), device.unwrap_or_default());
        // One index for frames, lanes and the count (`routable` is indexed below its length
        // by a mask): the loop keeps its state in registers.
        let len = frames.len().min(lanes.len()).min(VECTOR);
        for i in 0..len {
            let (frame, lane) = (&frames[i], &mut lanes[i]);
            // The common frame of the vector's device by the parser's shortcuts; every other
            // frame (another device, another MAC, a frame the shortcuts leave) by the general
            // path out of line, which gives it the same verdict or fields.
            let plain = device_ok && frame.ifindex == device && {
                match frame_bytes(frame) {
                    Some(bytes) => match parse::parse_plain(bytes, &mut lane.meta) {
                        Some(Ok(())) => dst_mac_word(bytes) == Some(device_mac),
                        Some(Err(verdict)) => {
                            lane.step = Step::Done(verdict);
                            continue;
                        }
                        None => false,
                    },
                    None => false,
                }
            };
            if !plain && !self.admit_lane(b, frame, lane) {
                continue;
            }
            // `fib_validate_source` behind the filter: the address table only for a source
            // that may be local, out of line.
            let m = &lane.meta;
            if m.family == Family::V4
                && self.locals.may_be_local(Family::V4, m.src)
                && own_source_lane(b, frame, lane)
            {
                continue;
            }
            routable[n & (VECTOR - 1)] = i as u8;
            n += 1;
            // The probe stage sets a token where the cache misses.
            lane.token = None;
            lane.step = Step::Miss;
        }
        n
    }

    /// The parse stage's general path ([`admit_into`](Queue::admit_into)) for a frame its
    /// shortcut leaves: whether the lane goes on, else its step is the verdict. Out of line,
    /// so that the stage's loop keeps its registers for the common frame.
    #[inline(never)]
    fn admit_lane(&self, b: &mut Batch<'_>, frame: &Frame<'_>, lane: &mut Lane) -> bool {
        match self.admit_into(b, frame, &mut lane.meta) {
            Ok(()) => true,
            Err(verdict) => {
                lane.step = Step::Done(verdict);
                false
            }
        }
    }

    /// Stage 2: Route-cache probes of the lanes the cache admitted (`admitted`, a mask of
    /// `routable`'s positions; called only when it admitted some); a run of frames with one
    /// key costs one probe. While the bypass keeps the cache off, one lookup in many is
    /// probed and the rest go to the tables without a key being built, so a bypassed cache
    /// costs a few steps per vector and per probe. Writes the lanes the fill
    /// stage must visit (misses to insert, repeats of one) into `fill`, in order. Returns how
    /// many lanes it listed there and how many of the routable lanes it took from the tables
    /// (hits, and repeats of a miss: no FIB lookup of their own).
    ///
    /// A run: the admitted lanes after a probed one whose key is the same (compared field by
    /// field, [`RunKey`], without building a key) take its answer in a loop of their own, the
    /// route held in registers; the run's hits are told to the cache once, before its next
    /// probe (so that it sees them in the same order as one probe each).
    #[inline(never)]
    fn stage_probe(
        &mut self,
        b: &Batch<'_>,
        frames: &[Frame<'_>],
        lanes: &mut [Lane],
        routable: &[u8],
        mut admitted: u64,
        fill: &mut [u8; VECTOR],
    ) -> (usize, usize) {
        // Every routable lane (`Step::Miss`, no token) goes to the tables unless the cache
        // answers it below; the lanes the cache refused (`admitted`, a mask of `routable`'s
        // positions, from `admit_many`) stay misses without a key.
        let Some(cache) = &mut self.cache else {
            return (0, 0);
        };
        let (mut fills, mut answered) = (0, 0);
        while admitted != 0 {
            let i = next_admitted(admitted, routable);
            admitted &= admitted - 1;
            let (Some(lane), Some(frame)) = (lanes.get_mut(i), frames.get(i)) else {
                continue;
            };
            let run = RunKey::of(&lane.meta, frame.ifindex);
            let key = route::flow_key(&lane.meta, frame.ifindex);
            match cache.probe(&key, b.snapshot, b.now) {
                Lookup::Hit(route) => {
                    lane.route = route;
                    lane.step = Step::Routed;
                    let mut repeats = 0u32;
                    take_run(&mut admitted, routable, frames, lanes, &run, |_, lane| {
                        lane.route = route;
                        lane.step = Step::Routed;
                        repeats += 1;
                    });
                    answered += 1 + repeats as usize;
                    if repeats > 0 {
                        cache.repeat_hits(repeats);
                    }
                }
                Lookup::Miss(token) => {
                    // The fill stage inserts the tables' answer, then hands it to the repeats.
                    lane.token = Some(token);
                    if let Some(slot) = fill.get_mut(fills) {
                        *slot = i as u8;
                        fills += 1;
                    }
                    take_run(&mut admitted, routable, frames, lanes, &run, |j, lane| {
                        lane.step = Step::Same(i);
                        if let Some(slot) = fill.get_mut(fills) {
                            *slot = j as u8;
                            fills += 1;
                        }
                        answered += 1;
                    });
                }
                // `probe` never answers so.
                Lookup::Bypass => {}
            }
        }
        (fills, answered)
    }

    /// Stage 4: Misses: egress link and neighbour, per next hop; the decisions of answers
    /// through one gateway are remembered in the ingress memo for the next packets.
    #[inline(never)]
    fn stage_egress(&mut self, b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
        let generation = b.snapshot.generation;
        for (frame, lane) in frames.iter().zip(lanes.iter_mut()) {
            if let Step::Egress = lane.step {
                lane.route = self
                    .egress
                    .egress(b.tables, b.guard, generation, &lane.egress);
                lane.step = lane.resolved();
                // A source checked by reverse-path filtering: the decision is this source's.
                if let (Some(tag), false) = (lane.memo_tag, lane.egress.source_checked) {
                    self.ingress
                        .remember_answer(tag, frame.ifindex, lane.egress.oif, lane.route);
                }
            }
        }
    }

    /// Stage 5: Cache fills of the lanes the probe stage listed (`fill`, in order); repeats of
    /// a missed key take its answer, as their probe would have after the fill (an answer that
    /// could not be cached is looked up again, as the reference does).
    #[inline(never)]
    fn stage_fill(&mut self, b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane], fill: &[u8]) {
        // A repeat's first lane comes before it: already filled when the repeat is reached.
        for &i in fill {
            let i = usize::from(i);
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
                        _ => self.route(b, &lanes[i].meta, frames[i].bytes(), frames[i].ifindex),
                    };
                    lanes[i].step = Step::Routed;
                }
                _ => {}
            }
        }
    }

    /// Stage 6: The fwd policy (only called when the fwd direction needs a check). The flow's
    /// interface is the egress one (`flowi_oif` of the forward decode).
    #[inline(never)]
    fn stage_policy(&self, b: &Batch<'_>, frames: &[Frame<'_>], lanes: &mut [Lane]) {
        for (frame, lane) in frames.iter().zip(lanes.iter_mut()) {
            if let (Step::Routed, Route::Forward(hop)) = (lane.step, &lane.route) {
                let packet = frame.bytes();
                if let Some(verdict) = self.policy(b, &lane.meta, packet, hop.oif, Direction::Fwd) {
                    lane.step = Step::Done(verdict);
                }
            }
        }
    }

    /// Stage 7: In frame order: the forwarding checks, and every decision with side effects on the
    /// queue (ICMP errors, local delivery, hold buffer, fragments). A frame the common case
    /// passes (every check of `forward_checks`, the neighbour known) is rewritten here, its
    /// verdict set (`Step::Sent`) and counted with the others at the end; the general path's
    /// plain transmits go on to the rewrite stage. Returns how many frames it sent.
    #[inline(never)]
    fn stage_decide<P: FramePool>(
        &mut self,
        b: &Batch<'_>,
        frames: &mut [Frame<'_>],
        lanes: &mut [Lane],
        pool: &mut P,
    ) -> usize {
        let mut sent = 0;
        for (frame, lane) in frames.iter_mut().zip(lanes.iter_mut()) {
            let Step::Routed = lane.step else {
                continue;
            };
            let meta = &lane.meta;
            // The tables lag the kernel's: leave every answer they may have wrong to it.
            if b.snapshot.behind && lane.route.may_be_stale() {
                lane.step = Step::Done(Verdict::Punt(PuntReason::MirrorBehind));
                continue;
            }
            // The common case, decided inline: every check of `forward_checks` passes and the
            // neighbour is known (its own assignment: only the step's tag is written).
            if let Route::Forward(hop) = &lane.route {
                if meta.ttl > 1
                    && !b.out_policies
                    && meta.ip_len <= hop.mtu
                    && hop.is_resolved()
                    && !meta.src_is_v6_link_local()
                {
                    rewrite(frame, meta, hop);
                    frame.verdict = Verdict::Transmit { ifindex: hop.oif };
                    lane.step = Step::Sent;
                    sent += 1;
                    continue;
                }
            }
            lane.step = match &lane.route {
                Route::Forward(hop) => match self.forward_checks(b, frame, meta, hop, pool) {
                    Ok(false) if hop.is_resolved() => Step::Rewrite,
                    Ok(too_big) => {
                        rewrite_out_of_line(frame, meta, hop);
                        Step::Done(self.after_rewrite(b, frame, meta, hop, too_big, pool))
                    }
                    Err(verdict) => Step::Done(verdict),
                },
                route => Step::Done(self.dispatch(b, frame, meta, *route, pool)),
            };
        }
        self.counters.count_transmits(sent as u64);
        sent
    }

    /// Stages 8 and 9 in one pass, for a vector with a frame the decide stage did not send: the
    /// rewrite of every plain transmit left (TTL / hop limit, MACs), then every other frame's
    /// verdict and counters (the plain transmits counted at once, per vector).
    #[inline(never)]
    fn stage_rewrite(&mut self, frames: &mut [Frame<'_>], lanes: &[Lane]) {
        let mut transmits = 0;
        for (frame, lane) in frames.iter_mut().zip(lanes.iter()) {
            let verdict = match (lane.step, &lane.route) {
                (Step::Rewrite, Route::Forward(hop)) => {
                    rewrite(frame, &lane.meta, hop);
                    frame.verdict = Verdict::Transmit { ifindex: hop.oif };
                    transmits += 1;
                    continue;
                }
                (Step::Done(verdict), _) => verdict,
                // Rewritten, its verdict set and counted by the decide stage.
                (Step::Sent, _) => continue,
                // Every stage above moves each lane on; none is left behind.
                _ => Verdict::Pending,
            };
            frame.verdict = verdict;
            if let Verdict::Transmit { .. } = verdict {
                transmits += 1;
            } else {
                self.counters.count(verdict);
            }
        }
        self.counters.count_transmits(transmits);
    }
}

/// The own-source check of an IPv4 lane whose source may be local (the filter said so): one
/// of our own addresses as the source is a martian, unless the ingress device accepts local
/// sources (`fib_validate_source`). Whether it is, its step then the verdict. Out of line: few
/// frames get here.
#[inline(never)]
fn own_source_lane(b: &Batch<'_>, frame: &Frame<'_>, lane: &mut Lane) -> bool {
    if !route::is_local_dst(b.tables, b.guard, Family::V4, lane.meta.src) {
        return false;
    }
    lane.step = Step::Done(route::own_source(b.tables, b.guard, frame.ifindex));
    true
}

/// A MAC address as the low 48 bits of a word (in memory order), for comparisons in one step.
#[inline(always)]
fn mac_word(mac: [u8; 6]) -> u64 {
    let [a, b, c, d, e, f] = mac;
    u64::from(u32::from_le_bytes([a, b, c, d])) | u64::from(u16::from_le_bytes([e, f])) << 32
}

/// The destination MAC of a frame (its first six bytes) as [`mac_word`] gives it, read as one
/// word; `None` for a frame shorter than eight bytes.
#[inline(always)]
fn dst_mac_word(bytes: &[u8]) -> Option<u64> {
    bytes
        .first_chunk::<8>()
        .map(|head| u64::from_le_bytes(*head) & MAC_MASK)
}

/// The low 48 bits of a word: a MAC address's.
const MAC_MASK: u64 = (1 << 48) - 1;

/// The frame's packet, `None` if its offset and length lie outside its chunk (as
/// [`Queue::admit_into`] checks them).
#[inline(always)]
fn frame_bytes<'f>(frame: &'f Frame<'_>) -> Option<&'f [u8]> {
    let end = frame.offset.checked_add(frame.len)?;
    frame.chunk.get(frame.offset..end)
}

/// Stage 3: Misses (among the `routable` lanes): local destinations (address table, behind
/// the filter), then the FIB lookups of the rest, gathered per family so that they run back
/// to back. Returns how many lanes the egress stage must complete.
#[inline(never)]
fn stage_fib(
    b: &Batch<'_>,
    locals: &LocalFilter,
    ingress: &mut IngressMemo,
    frames: &[Frame<'_>],
    lanes: &mut [Lane],
    routable: &[u8],
) -> usize {
    // Per family, the lanes to look up (their flows are built from the lanes when the FIB
    // asks: no array of flows is written and read back per vector). The common vector has
    // no lane whose destination may be local: its loop makes no call (its counters stay in
    // registers); a vector with one is gathered again by the general loop, in order.
    let mut v4 = Gather::new();
    let mut v6 = Gather::new();
    for &i in routable {
        let Some(lane) = lanes.get(usize::from(i)) else {
            continue;
        };
        if let Step::Miss = lane.step {
            let m = &lane.meta;
            if locals.may_be_local(m.family, m.dst) {
                (v4, v6) = gather_locals(b, locals, lanes, routable);
                break;
            }
            match m.family {
                Family::V6 => v6.push(i),
                Family::V4 => v4.push(i),
            }
        }
    }
    fib_lookups::<u32>(b, ingress, frames, lanes, v4.lanes())
        + fib_lookups::<u128>(b, ingress, frames, lanes, v6.lanes())
}

/// [`stage_fib`]'s gathering for a vector with a lane whose destination may be local (the
/// filter says so): the address table decides each such lane (a local one is answered here),
/// the others are gathered per family, in order. Out of line: few vectors get here.
#[inline(never)]
fn gather_locals(
    b: &Batch<'_>,
    locals: &LocalFilter,
    lanes: &mut [Lane],
    routable: &[u8],
) -> (Gather, Gather) {
    let mut v4 = Gather::new();
    let mut v6 = Gather::new();
    for &i in routable {
        let Some(lane) = lanes.get_mut(usize::from(i)) else {
            continue;
        };
        if let Step::Miss = lane.step {
            let m = &lane.meta;
            if locals.may_be_local(m.family, m.dst)
                && route::is_local_dst(b.tables, b.guard, m.family, m.dst)
            {
                lane.route = Route::Local;
                lane.step = lane.resolved();
            } else {
                match m.family {
                    Family::V6 => v6.push(i),
                    Family::V4 => v4.push(i),
                }
            }
        }
    }
    (v4, v6)
}

/// The lanes of one family that go to the FIB, in order.
struct Gather {
    lanes: [u8; VECTOR],
    n: usize,
}

impl Gather {
    #[inline(always)]
    fn new() -> Self {
        Gather {
            lanes: [0; VECTOR],
            n: 0,
        }
    }

    /// Adds lane `i`.
    #[inline(always)]
    fn push(&mut self, i: u8) {
        self.lanes[self.n & (VECTOR - 1)] = i;
        self.n += 1;
    }

    /// The lanes added.
    #[inline(always)]
    fn lanes(&self) -> &[u8] {
        &self.lanes[..self.n.min(VECTOR)]
    }
}

/// The FIB lookups of `gather`'s lanes, all of the family whose key is `K`, as one batch
/// (`Fib::lookup_batch_by`: the walks overlap their cache misses). Returns how many of them
/// go on to the egress stage.
#[inline(always)]
fn fib_lookups<K: FamilyKey>(
    b: &Batch<'_>,
    ingress: &mut IngressMemo,
    frames: &[Frame<'_>],
    lanes: &mut [Lane],
    gather: &[u8],
) -> usize {
    if gather.is_empty() {
        return 0;
    }
    let fib = K::fib(b.tables);
    let mut batch = FibBatch {
        switches: ingress.switches(b.tables, b.guard),
        served: b.tables.served.as_deref(),
        // Read once per batch (the mirror changes it at most once a second).
        policy: fib.multipath_policy(),
        frames,
        lanes,
        gather,
        tag: None,
        egresses: 0,
        _key: std::marker::PhantomData,
    };
    fib.lookup_batch_by(&mut batch, b.guard);
    batch.egresses
}

/// One family's FIB lookups of a vector ([`fib_lookups`]): the flows built from the lanes
/// `gather` lists, the answers taken into them.
struct FibBatch<'a, 'f, K> {
    switches: MemoSwitches<'a>,
    /// The interfaces the pipeline serves ([`route::unserved`]), read once per batch.
    served: Option<&'a crate::Served>,
    policy: fib_trie::multipath::MultipathPolicy,
    frames: &'a [Frame<'f>],
    lanes: &'a mut [Lane],
    gather: &'a [u8],
    /// The tag of the route the memo did not know ([`FlowBatch::known`](fib_trie::FlowBatch::known)),
    /// for the answer that follows.
    tag: Option<RouteTag>,
    /// How many answers go on to the egress stage.
    egresses: usize,
    _key: std::marker::PhantomData<K>,
}

impl<'g, K: FamilyKey + 'g> fib_trie::FlowBatch<'g, K> for FibBatch<'_, '_, K> {
    #[inline(always)]
    fn count(&self) -> usize {
        self.gather.len()
    }

    #[inline(always)]
    fn flow(&self, k: usize) -> fib_trie::Flow<K> {
        let i = self.gather.get(k).map_or(usize::MAX, |&i| usize::from(i));
        let (Some(lane), Some(frame)) = (self.lanes.get(i), self.frames.get(i)) else {
            // Never: `gather` lists lanes of the vector.
            return fib_trie::Flow::to(K::ZERO);
        };
        let m = &lane.meta;
        route::fib_flow(K::narrow(m.src), K::narrow(m.dst), m.tos, frame.ifindex)
    }

    #[inline(always)]
    fn answer(
        &mut self,
        k: usize,
        flow: &fib_trie::Flow<K>,
        result: Result<fib_trie::FibResult<'g, K>, fib_trie::LookupError>,
    ) {
        // The route's tag, if `known` was asked and did not know it.
        let tag = self.tag.take();
        let i = self.gather.get(k).map_or(usize::MAX, |&i| usize::from(i));
        let (Some(lane), Some(frame)) = (self.lanes.get_mut(i), self.frames.get(i)) else {
            return;
        };
        // A route through one gateway: its decision may be remembered under its tag.
        lane.memo_tag = tag.filter(|_| result.as_ref().is_ok_and(route::single_gateway));
        take_fib_answer(
            &mut self.switches,
            flow,
            result,
            lane,
            frame.bytes(),
            self.policy,
        );
        self.egresses += usize::from(matches!(lane.step, Step::Egress));
    }

    /// A route the ingress memo knows for this ingress device: its decision, without a
    /// result, the switches, the next-hop choice or the egress stage.
    #[inline(always)]
    fn known(&mut self, k: usize, tag: RouteTag) -> bool {
        let i = self.gather.get(k).map_or(usize::MAX, |&i| usize::from(i));
        let (Some(lane), Some(frame)) = (self.lanes.get_mut(i), self.frames.get(i)) else {
            return false;
        };
        // The flow's ingress interface (`fib_flow`'s `iif`), without building the flow.
        if let Some((oif, route)) = self.switches.answer(tag, frame.ifindex) {
            // Copied straight from the memo's slot into the lane (a `match` giving the route
            // as a value copied it through the stack: nine more instructions per packet).
            lane.route = *route;
            if self.served.is_some_and(|s| !s.contains(oif)) {
                lane.route = route::UNSERVED;
            }
            lane.step = lane.resolved();
            return true;
        }
        self.tag = Some(tag);
        false
    }

    /// The route `known` did not know was retired meanwhile: the answer that follows is not
    /// to be remembered under its tag.
    #[inline(always)]
    fn unknown(&mut self, _: usize) {
        self.tag = None;
    }
}

/// The decision of the FIB's `result` for `lane` (its frame's packet bytes in `packet`), when
/// the ingress memo does not have it: kept out of line, so that the loop around it keeps its
/// registers for the memo's answers.
#[inline(never)]
fn take_fib_answer<K: FamilyKey>(
    switches: &mut MemoSwitches<'_>,
    flow: &fib_trie::Flow<K>,
    result: Result<fib_trie::FibResult<'_, K>, fib_trie::LookupError>,
    lane: &mut Lane,
    packet: &[u8],
    policy: fib_trie::multipath::MultipathPolicy,
) {
    let meta = &lane.meta;
    let answer = route::fib_answer(
        switches,
        flow,
        result,
        meta.src,
        meta.dst,
        policy,
        |fields| route::hash_keys(meta, packet, fields),
        K::widen,
    );
    lane.take_fib_answer(answer);
}
