//! Per-queue counters: every verdict, every drop and punt reason, and the events around them.

use crate::verdict::{DropReason, IcmpError, PuntReason, Verdict};

/// What one queue has done since it was made: a plain struct of `u64`s that a run loop can copy
/// out and export (for example as Prometheus text, with [`DropReason::name`] and friends as
/// labels).
///
/// Every frame handed to [`process_batch`](crate::Queue::process_batch) is counted once in `rx`
/// and once under its verdict (`transmit + punt + deliver + reply + held + consumed + dropped
/// == rx`); drops and punts are also counted by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames processed.
    pub rx: u64,
    /// Frames forwarded ([`Verdict::Transmit`]).
    pub transmit: u64,
    /// Frames punted to the kernel ([`Verdict::Punt`]).
    pub punt: u64,
    /// Datagrams delivered to local UDP endpoints ([`Verdict::Deliver`]).
    pub deliver: u64,
    /// Frames turned into ICMP errors in place ([`Verdict::Reply`]).
    pub reply: u64,
    /// Frames copied to the hold buffer ([`Verdict::Held`]).
    pub held: u64,
    /// Frames sent on in spare frames ([`Verdict::Consumed`]).
    pub consumed: u64,
    /// Frames dropped ([`Verdict::Drop`]).
    pub dropped: u64,
    /// Drops by reason, indexed like [`DropReason::ALL`].
    pub drops: [u64; DropReason::COUNT],
    /// Punts by reason, indexed like [`PuntReason::ALL`].
    pub punts: [u64; PuntReason::COUNT],
    /// ICMP errors sent (in place or in a spare frame), by kind, indexed like [`IcmpError::ALL`].
    pub icmp_sent: [u64; IcmpError::COUNT],
    /// ICMP errors not sent because a rate limit refused them: the queue's token bucket
    /// (the kernel's global limit) or the destination's ([`PeerLimiter`](crate::PeerLimiter)).
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because the quoting rules forbid one (the packet is itself an ICMP
    /// error, a non-first fragment, or too short to quote), or because IPv6 has no route back
    /// to the source (the kernel then sends none either).
    pub icmp_not_allowed: u64,
    /// ICMP errors not sent because the ingress interface has no usable source address.
    pub icmp_no_source: u64,
    /// IPv4 packets fragmented (each one `consumed`, or released from the hold buffer).
    pub fragmented: u64,
    /// Fragments sent.
    pub fragments_out: u64,
    /// Held frames sent once their neighbour resolved.
    pub held_released: u64,
    /// Held frames dropped because their neighbour did not resolve in time.
    pub held_expired: u64,
    /// Held frames dropped at release because the egress link went away or down, or the
    /// frame could not be sent (pool empty, frame too large to fragment).
    pub held_dropped: u64,
    /// Held frames pushed out by newer frames of the same neighbour over its byte budget
    /// ([`hold_bytes_per_neighbour`](crate::Config::hold_bytes_per_neighbour); the kernel's
    /// `unres_discards`).
    pub held_discarded: u64,
    /// Neighbour resolution requests emitted.
    pub resolutions: u64,
    /// Resolution requests lost because the caller did not poll them in time (queue full).
    pub resolutions_lost: u64,
    /// The queue's route cache counters (hits, misses, stale, evictions, bypassed, disabled,
    /// uncacheable).
    pub dst_cache: dst_cache::Counters,
}

impl Counters {
    /// Counts one frame's verdict: once in `rx`, once under the verdict, and under its reason
    /// for a drop or a punt. The pipeline calls it for every frame it processes; an engine
    /// of its own that speaks the same frame contract (the forwarder's bare port forwarder)
    /// counts its frames with it too, so that reports read the same.
    ///
    /// ```
    /// use dataplane::{Counters, DropReason, Verdict};
    /// let mut c = Counters::default();
    /// c.count(Verdict::Transmit { ifindex: 2 });
    /// c.count(Verdict::Drop(DropReason::Truncated));
    /// assert_eq!((c.rx, c.transmit, c.dropped, c.drops_of(DropReason::Truncated)), (2, 1, 1, 1));
    /// ```
    pub fn count(&mut self, verdict: Verdict) {
        self.rx += 1;
        match verdict {
            Verdict::Pending => {}
            Verdict::Transmit { .. } => self.transmit += 1,
            Verdict::Punt(reason) => {
                self.punt += 1;
                self.punts[reason as usize] += 1;
            }
            Verdict::Deliver { .. } => self.deliver += 1,
            Verdict::Reply { .. } => self.reply += 1,
            Verdict::Held => self.held += 1,
            Verdict::Consumed => self.consumed += 1,
            Verdict::Drop(reason) => {
                self.dropped += 1;
                self.drops[reason as usize] += 1;
            }
        }
    }

    /// Counts `n` plain transmits at once (what `count` does for each).
    #[inline]
    pub(crate) fn count_transmits(&mut self, n: u64) {
        self.rx += n;
        self.transmit += n;
    }

    /// The drop count of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// The punt count of one reason.
    pub fn punts_of(&self, reason: PuntReason) -> u64 {
        self.punts[reason as usize]
    }

    /// The count of one ICMP error sent.
    pub fn icmp_sent_of(&self, kind: IcmpError) -> u64 {
        self.icmp_sent[kind as usize]
    }
}
