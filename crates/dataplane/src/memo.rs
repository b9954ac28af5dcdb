//! Per-queue memos of answers the tables give per source or per next hop rather than per
//! packet, each valid for one route generation: the control plane bumps the generation after
//! every change of addresses, links or neighbours it publishes (the [`Tables`] contract), so an
//! answer taken under the batch's generation is the one the tables give.
//!
//! - [`SourceMemo`]: the own-source check (`fib_validate_source`: one of this host's IPv4
//!   addresses as a source is a martian), once per source;
//! - [`EgressMemo`]: the egress link (up, MAC, MTU) and the neighbour's MAC, once per next hop,
//!   for the route-cache misses (all packets, when the cache steps aside at many flows).

use std::net::Ipv4Addr;

use crossbeam_epoch::Guard;

use crate::Tables;
use crate::route::{self, Egress, Route};
use crate::verdict::DropReason;

/// Slots of the source memo (a power of two).
const SLOTS: usize = 256;
/// Slots of the egress memo (a power of two).
const EGRESS_SLOTS: usize = 256;

/// One remembered answer.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The source address.
    addr: u32,
    /// The route generation the answer was taken under, plus one (0: empty).
    generation: u64,
    /// Whether `addr` is one of ours.
    own: bool,
}

/// A direct-mapped memo of "is this IPv4 source one of our addresses", valid for one route
/// generation: the control plane bumps the generation after every address change it publishes
/// (the [`Tables`] contract), so an answer taken under the batch's generation is the answer the
/// address table gives. A flood of random sources only misses: each miss costs what the check
/// without the memo costs, plus one slot write.
#[derive(Clone, Debug)]
pub(crate) struct SourceMemo {
    slots: Box<[Slot]>,
}

impl SourceMemo {
    pub(crate) fn new() -> Self {
        SourceMemo {
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
        }
    }

    /// Whether `src` is one of this namespace's IPv4 addresses, under route generation
    /// `generation`.
    #[inline]
    pub(crate) fn is_own(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        generation: u64,
        src: u32,
    ) -> bool {
        let index = (src.wrapping_mul(0x9e37_79b1) >> 24) as usize & (SLOTS - 1);
        let tag = generation.wrapping_add(1);
        let slot = &mut self.slots[index];
        if slot.generation == tag && slot.addr == src {
            return slot.own;
        }
        let own = tables
            .addrs
            .dev_find(Ipv4Addr::from(src), None, guard)
            .is_some();
        *slot = Slot {
            addr: src,
            generation: tag,
            own,
        };
        own
    }
}

/// What the tables say about one next hop: the link's MAC and MTU and the neighbour's MAC, or
/// why the link cannot be used.
type LinkAnswer = Result<([u8; 6], Option<[u8; 6]>, u32), DropReason>;

/// One remembered next hop.
#[derive(Clone, Copy, Debug)]
struct EgressSlot {
    oif: u32,
    next_hop: u128,
    v6: bool,
    /// The route generation plus one (0: empty).
    generation: u64,
    answer: LinkAnswer,
}

/// A direct-mapped memo of [`route::egress`]'s table lookups per (interface, next hop), valid
/// for one route generation. Only answers a route cache would keep are remembered: a usable
/// neighbour, or a link that cannot be used; an unresolved neighbour is asked again each time
/// (its frames go to the hold buffer, which watches the neighbour table itself).
#[derive(Clone, Debug)]
pub(crate) struct EgressMemo {
    slots: Box<[EgressSlot]>,
}

impl EgressMemo {
    pub(crate) fn new() -> Self {
        let empty = EgressSlot {
            oif: 0,
            next_hop: 0,
            v6: false,
            generation: 0,
            answer: Err(DropReason::NoEgressLink),
        };
        EgressMemo {
            slots: vec![empty; EGRESS_SLOTS].into_boxed_slice(),
        }
    }

    /// [`route::egress`] for `e` under route generation `generation`.
    #[inline]
    pub(crate) fn egress(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        generation: u64,
        v6: bool,
        e: &Egress,
    ) -> Route {
        let mix = ((e.next_hop as u64) ^ ((e.next_hop >> 64) as u64).rotate_left(21))
            .wrapping_add(u64::from(e.oif).wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
        let index = (mix.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize & (EGRESS_SLOTS - 1);
        let tag = generation.wrapping_add(1);
        let slot = &mut self.slots[index];
        let answer = if slot.generation == tag
            && slot.oif == e.oif
            && slot.next_hop == e.next_hop
            && slot.v6 == v6
        {
            slot.answer
        } else {
            let answer = route::link_answer(tables, guard, v6, e.oif, e.next_hop);
            if matches!(answer, Ok((_, Some(_), _)) | Err(_)) {
                *slot = EgressSlot {
                    oif: e.oif,
                    next_hop: e.next_hop,
                    v6,
                    generation: tag,
                    answer,
                };
            }
            answer
        };
        route::complete(e, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use addr_table::{IfAddr, NetnsId};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    #[test]
    fn answers_follow_the_generation() {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let ns = writer.add_netns(NetnsConfig::default()).unwrap();
        let tables = Tables::new(NetnsId(1), sockets, ns);
        let guard = crossbeam_epoch::pin();
        let mut memo = SourceMemo::new();
        let a = u32::from(Ipv4Addr::new(10, 0, 0, 1));
        assert!(!memo.is_own(&tables, &guard, 0, a));
        tables
            .addrs
            .add(IfAddr::new(Ipv4Addr::from(a), 24, 1))
            .unwrap();
        // Same generation: the memo's answer (the writer has not bumped yet).
        assert!(!memo.is_own(&tables, &guard, 0, a));
        // The bump: the address table is asked again.
        assert!(memo.is_own(&tables, &guard, 1, a));
        assert!(!memo.is_own(&tables, &guard, 1, a + 1));
    }
}
