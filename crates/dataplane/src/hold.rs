//! Frames waiting for a neighbour (the kernel's per-neighbour `arp_queue`), copied into a
//! preallocated, bounded buffer per queue so the caller can recycle its chunk at once.

use std::collections::VecDeque;
use std::net::IpAddr;

use crossbeam_epoch::Guard;

use crate::Tables;
use crate::counters::Counters;
use crate::frag;
use crate::parse::L2_LEN;
use crate::pool::FramePool;
use crate::route::{Hop, ip_of, neighbour_mac};
use crate::verdict::DropReason;
use crate::wire::Family;
use crate::wire::ethernet::EthernetFrame;
use crate::wire::ipv4::Ipv4Packet;

/// What a held frame is charged against its neighbour's
/// [`hold_bytes_per_neighbour`](crate::Config::hold_bytes_per_neighbour) besides its own length:
/// the kernel's `SKB_TRUESIZE` overhead on 64-bit machines (`struct sk_buff` and
/// `struct skb_shared_info`, each cache-aligned: 256 + 320 bytes). So a full-size frame (1514
/// bytes) costs 2090, and the kernel's default 212,992 bytes hold 101 of them, the
/// `unres_qlen` the kernel reports for that default.
///
/// ```
/// assert_eq!(212_992 / (1514 + dataplane::HOLD_FRAME_OVERHEAD), 101);
/// ```
pub const HOLD_FRAME_OVERHEAD: usize = 576;

/// A request for the control plane: resolve this neighbour (for example with `RTM_NEWNEIGH`
/// and `NTF_USE`, or an `ip neigh` probe); frames wait for it in the hold buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resolution {
    /// The interface the neighbour is on.
    pub ifindex: u32,
    /// The neighbour's address.
    pub addr: IpAddr,
}

/// One unresolved neighbour with frames waiting.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    oif: u32,
    next_hop: u128,
    /// The next hop's family (ND or ARP).
    next_hop_family: Family,
    frames: usize,
    /// The frames' charge: lengths plus [`HOLD_FRAME_OVERHEAD`] each.
    bytes: usize,
    last_request: u64,
}

impl Waiting {
    /// Whether this is the neighbour `next_hop` (of `family`) on `oif`.
    fn is(&self, oif: u32, next_hop: u128, family: Family) -> bool {
        self.oif == oif && self.next_hop == next_hop && self.next_hop_family == family
    }
}

/// What became of a held frame at release.
enum Outcome {
    /// Sent (whole or in fragments).
    Sent,
    /// The neighbour is not usable yet.
    Waiting,
    /// The pool is empty: nothing was sent, try again later.
    Retry,
    /// Dropped: the egress went away or down, or the frame cannot be sent any more.
    Dropped,
}

/// One held frame: an untagged Ethernet header (MACs to be written at release) and the IP
/// packet, TTL already decremented.
#[derive(Clone, Copy, Debug)]
struct Held {
    slot: usize,
    len: usize,
    oif: u32,
    next_hop: u128,
    /// The next hop's family (ND or ARP); IPv6 for an IPv4 packet on a route `via inet6`.
    next_hop_family: Family,
    /// The route's MTU when held (the link's, or the route's `mtu` metric if lower).
    mtu: u32,
    /// The packet's family.
    family: Family,
    since: u64,
}

/// The hold buffer of one queue.
#[derive(Debug)]
pub(crate) struct HoldBuffer {
    data: Box<[u8]>,
    slot_size: usize,
    free: Vec<usize>,
    held: Vec<Held>,
    waiting: Vec<Waiting>,
    bytes_per_neighbour: usize,
    timeout: u64,
    retry: u64,
    resolutions: VecDeque<Resolution>,
    resolution_cap: usize,
    /// The table generations seen by the last release that found nothing to do.
    seen: Option<(u64, u64)>,
    /// The next time a release must look even if the tables did not change.
    deadline: u64,
}

impl HoldBuffer {
    pub(crate) fn new(config: &crate::Config) -> Self {
        let slots = config.hold_frames;
        HoldBuffer {
            data: vec![0; slots * config.hold_slot_size].into_boxed_slice(),
            slot_size: config.hold_slot_size,
            free: (0..slots).rev().collect(),
            held: Vec::with_capacity(slots),
            waiting: Vec::with_capacity(slots),
            bytes_per_neighbour: config.hold_bytes_per_neighbour,
            timeout: config.hold_timeout_ns,
            retry: config.resolve_retry_ns,
            resolutions: VecDeque::with_capacity(config.resolution_queue),
            resolution_cap: config.resolution_queue,
            seen: None,
            deadline: u64::MAX,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    pub(crate) fn poll_resolution(&mut self) -> Option<Resolution> {
        self.resolutions.pop_front()
    }

    fn request(&mut self, w: &Waiting, counters: &mut Counters) {
        if self.resolutions.len() < self.resolution_cap {
            self.resolutions.push_back(Resolution {
                ifindex: w.oif,
                addr: ip_of(w.next_hop_family, w.next_hop),
            });
            counters.resolutions += 1;
        } else {
            counters.resolutions_lost += 1;
        }
    }

    /// Copies `frame` (untagged Ethernet header, then the IP packet of `family`) to wait
    /// for the neighbour `hop.next_hop` (of its own family) on `hop.oif`; asks for a
    /// resolution when it is the neighbour's first frame or the last request is older than the
    /// retry interval.
    ///
    /// As the kernel's `neigh_event_send`: while the neighbour's frames and this one exceed
    /// the byte budget, the neighbour's oldest frame is dropped (counted `hold_full`), then
    /// this one is queued (so a neighbour always keeps its newest frame). A frame that finds
    /// no free slot in the whole buffer is refused.
    ///
    /// The budget is the egress device's `unres_qlen_bytes` of the next hop's table (ARP or
    /// ND) as mirrored into `tables.devconf`, else the configured
    /// [`hold_bytes_per_neighbour`](crate::Config::hold_bytes_per_neighbour); the buffer's
    /// slots bound all neighbours together.
    #[allow(
        clippy::too_many_arguments,
        reason = "the frame, its hop and the batch's tables, clock and counters"
    )]
    pub(crate) fn hold(
        &mut self,
        frame: &[u8],
        hop: &Hop,
        family: Family,
        now: u64,
        counters: &mut Counters,
        tables: &Tables,
        guard: &Guard,
    ) -> Result<(), DropReason> {
        if frame.len() > self.slot_size {
            return Err(DropReason::HoldTooLarge);
        }
        let (oif, next_hop, next_hop_family) = (hop.oif, hop.next_hop(), hop.next_hop_family);
        let budget = tables
            .devconf
            .queue_bytes(oif, next_hop_family.is_v6(), guard)
            .map_or(self.bytes_per_neighbour, |b| b as usize);
        let charge = frame.len() + HOLD_FRAME_OVERHEAD;
        let idx = self
            .waiting
            .iter()
            .position(|w| w.is(oif, next_hop, next_hop_family));
        while let Some(i) = idx
            && self.waiting[i].bytes + charge > budget
        {
            // The neighbour's oldest frame makes room (the kernel's `unres_discards`). A
            // waiting neighbour always has a held frame; if not, stop rather than loop.
            let Some(oldest) = self.held.iter().position(|h| {
                h.oif == oif && h.next_hop == next_hop && h.next_hop_family == next_hop_family
            }) else {
                break;
            };
            let h = self.held.remove(oldest);
            self.free.push(h.slot);
            counters.held_discarded += 1;
            let w = &mut self.waiting[i];
            w.frames -= 1;
            w.bytes -= h.len + HOLD_FRAME_OVERHEAD;
            if w.frames == 0 {
                // It stays waiting (its request time too): this frame takes the room.
                break;
            }
        }
        let Some(slot) = self.free.pop() else {
            return Err(DropReason::HoldFull);
        };
        let start = slot * self.slot_size;
        self.data[start..start + frame.len()].copy_from_slice(frame);
        self.held.push(Held {
            slot,
            len: frame.len(),
            oif,
            next_hop,
            next_hop_family,
            mtu: hop.mtu,
            family,
            since: now,
        });
        match idx {
            Some(i) => {
                self.waiting[i].frames += 1;
                self.waiting[i].bytes += charge;
                if now.saturating_sub(self.waiting[i].last_request) >= self.retry {
                    self.waiting[i].last_request = now;
                    let w = self.waiting[i];
                    self.request(&w, counters);
                }
            }
            None => {
                let w = Waiting {
                    oif,
                    next_hop,
                    next_hop_family,
                    frames: 1,
                    bytes: charge,
                    last_request: now,
                };
                self.waiting.push(w);
                self.request(&w, counters);
            }
        }
        self.deadline = self
            .deadline
            .min(now.saturating_add(self.retry.min(self.timeout)));
        self.seen = None;
        Ok(())
    }

    /// Sends the frames whose neighbour became usable, drops those that waited too long,
    /// repeats resolution requests that are due. Cheap when nothing changed: two atomic loads
    /// and a comparison with the next deadline.
    pub(crate) fn release<P: FramePool>(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        pool: &mut P,
        counters: &mut Counters,
    ) -> usize {
        if self.held.is_empty() {
            return 0;
        }
        let generations = (tables.neigh.generation(), tables.links.generation());
        if self.seen == Some(generations) && now < self.deadline {
            return 0;
        }
        let mut released = 0;
        let mut pool_ran_dry = false;
        let mut i = 0;
        while i < self.held.len() {
            let h = self.held[i];
            let outcome = if pool_ran_dry {
                Outcome::Retry
            } else {
                self.try_send(tables, guard, &h, pool, counters)
            };
            let done = match outcome {
                Outcome::Sent => {
                    released += 1;
                    counters.held_released += 1;
                    true
                }
                Outcome::Retry => {
                    pool_ran_dry = true;
                    false
                }
                Outcome::Dropped => {
                    counters.held_dropped += 1;
                    true
                }
                Outcome::Waiting if now.saturating_sub(h.since) >= self.timeout => {
                    counters.held_expired += 1;
                    true
                }
                Outcome::Waiting => false,
            };
            if done {
                // Keep the order of the remaining frames (a neighbour's frames leave in order).
                self.held.remove(i);
                self.free.push(h.slot);
                if let Some(w) = self
                    .waiting
                    .iter()
                    .position(|w| w.is(h.oif, h.next_hop, h.next_hop_family))
                {
                    self.waiting[w].frames -= 1;
                    self.waiting[w].bytes -= h.len + HOLD_FRAME_OVERHEAD;
                    if self.waiting[w].frames == 0 {
                        self.waiting.swap_remove(w);
                    }
                }
            } else {
                i += 1;
            }
        }
        // Repeat requests that are due, and find the next deadline.
        let mut deadline = u64::MAX;
        for w in 0..self.waiting.len() {
            if now.saturating_sub(self.waiting[w].last_request) >= self.retry {
                self.waiting[w].last_request = now;
                let copy = self.waiting[w];
                self.request(&copy, counters);
            }
            deadline = deadline.min(self.waiting[w].last_request.saturating_add(self.retry));
        }
        for h in &self.held {
            deadline = deadline.min(h.since.saturating_add(self.timeout));
        }
        self.deadline = deadline;
        self.seen = (!pool_ran_dry).then_some(generations);
        released
    }

    /// Sends one held frame if its neighbour is usable.
    fn try_send<P: FramePool>(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        h: &Held,
        pool: &mut P,
        counters: &mut Counters,
    ) -> Outcome {
        let Some(dst_mac) =
            neighbour_mac(tables, guard, h.oif, ip_of(h.next_hop_family, h.next_hop))
        else {
            return Outcome::Waiting;
        };
        let Some(link) = tables.links.get(h.oif, guard) else {
            return Outcome::Dropped;
        };
        let Some(src_mac) = link.mac.filter(|_| link.is_up()) else {
            return Outcome::Dropped;
        };
        let start = h.slot * self.slot_size;
        let frame = &mut self.data[start..start + h.len];
        {
            let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
            eth.set_dst_addr(dst_mac);
            eth.set_src_addr(src_mac);
        }
        let ip_len = h.len - L2_LEN;
        let mtu = h.mtu.min(link.mtu);
        if ip_len > mtu as usize {
            // Fragment what may be (DF clear, held whole), drop what the MTU shrank under.
            if h.family == Family::V6 || Ipv4Packet::new_unchecked(&frame[L2_LEN..]).dont_frag() {
                return Outcome::Dropped;
            }
            return match frag::fragment_v4(frame, ip_len, mtu, h.oif, pool) {
                Ok(n) => {
                    counters.fragmented += 1;
                    counters.fragments_out += n as u64;
                    Outcome::Sent
                }
                Err(_) => Outcome::Dropped,
            };
        }
        let Some(handle) = pool.alloc() else {
            return Outcome::Retry;
        };
        let chunk = pool.chunk(handle);
        if chunk.len() < h.len {
            pool.free(handle);
            return Outcome::Dropped;
        }
        chunk[..h.len].copy_from_slice(frame);
        pool.send(handle, 0, h.len, h.oif);
        Outcome::Sent
    }
}
