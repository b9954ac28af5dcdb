//! Per-queue memos of answers the tables give per source or per next hop rather than per
//! packet, each valid for one route generation: the control plane bumps the generation after
//! every change of addresses, links or neighbours it publishes (the [`Tables`] contract), so an
//! answer taken under the batch's generation is the one the tables give.
//!
//! - [`LocalFilter`]: which addresses may be local, for the own-source check
//!   (`fib_validate_source`: one of this host's IPv4 addresses as a source is a martian) and
//!   the local-destination check of route-cache misses, once per generation;
//! - [`EgressMemo`]: the egress link (up, MAC, MTU) and the neighbour's MAC, once per next hop,
//!   for the route-cache misses (all packets, when the cache steps aside at many flows).

use std::net::{Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;

use crate::Tables;
use crate::route::{self, Egress, LinkAnswer, Route};
use crate::verdict::DropReason;

/// Slots of the egress memo (a power of two).
const EGRESS_SLOTS: usize = 256;

/// A Bloom filter of this namespace's local addresses (both families), rebuilt from the
/// address table when the route generation changes: "not local" answers come from two bit
/// tests, and only addresses that may be local are looked up (`dev_find`). It answers the
/// own-source check (`fib_validate_source`) and the local-destination check of a route-cache
/// miss, which would otherwise hash into the address table for every packet.
///
/// The filter is a superset of the table's addresses under the generation it was built for (a
/// false positive only costs the lookup); with more than [`FILTER_MAX_ADDRESSES`] addresses it
/// is not used and every check asks the table.
#[derive(Clone, Debug)]
pub(crate) struct LocalFilter {
    words: Box<[u64]>,
    /// The route generation the filter was built under, plus one (0: never built).
    generation: u64,
    /// Whether the filter holds every address (not too many to be useful).
    usable: bool,
}

/// Bits of the local-address filter (a power of two).
const FILTER_BITS: usize = 4096;
/// Beyond this many local addresses the filter is not used.
pub(crate) const FILTER_MAX_ADDRESSES: usize = 256;

impl LocalFilter {
    pub(crate) fn new() -> Self {
        LocalFilter {
            words: vec![0; FILTER_BITS / 64].into_boxed_slice(),
            generation: 0,
            usable: false,
        }
    }

    /// Rebuilds the filter if it was built under another route generation.
    #[inline]
    pub(crate) fn refresh(&mut self, tables: &Tables, guard: &Guard, generation: u64) {
        let tag = generation.wrapping_add(1);
        if self.generation != tag {
            self.rebuild(tables, guard);
            self.generation = tag;
        }
    }

    #[cold]
    fn rebuild(&mut self, tables: &Tables, guard: &Guard) {
        self.words.fill(0);
        let mut count = 0usize;
        for (_, addrs) in tables.addrs.interfaces::<Ipv4Addr>(guard) {
            for a in addrs {
                self.insert(false, u128::from(u32::from(a.addr)));
                count += 1;
            }
        }
        for (_, addrs) in tables.addrs.interfaces::<Ipv6Addr>(guard) {
            for a in addrs {
                self.insert(true, u128::from(a.addr));
                count += 1;
            }
        }
        self.usable = count <= FILTER_MAX_ADDRESSES;
    }

    /// The filter's two bit positions of an address.
    #[inline]
    fn bits(v6: bool, addr: u128) -> (usize, usize) {
        let folded = (addr as u64) ^ ((addr >> 64) as u64).rotate_left(29) ^ u64::from(v6);
        let h = folded.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let a = (h >> 52) as usize & (FILTER_BITS - 1);
        let b = (h >> 40) as usize & (FILTER_BITS - 1);
        (a, b)
    }

    fn insert(&mut self, v6: bool, addr: u128) {
        let (a, b) = Self::bits(v6, addr);
        self.words[a / 64] |= 1 << (a % 64);
        self.words[b / 64] |= 1 << (b % 64);
    }

    /// Whether `addr` may be a local address (false: it certainly is not one, under the
    /// generation of the last [`refresh`](Self::refresh)).
    #[inline]
    pub(crate) fn may_be_local(&self, v6: bool, addr: u128) -> bool {
        if !self.usable {
            return true;
        }
        let (a, b) = Self::bits(v6, addr);
        (self.words[a / 64] >> (a % 64)) & (self.words[b / 64] >> (b % 64)) & 1 != 0
    }
}

/// One remembered next hop.
#[derive(Clone, Copy, Debug)]
struct EgressSlot {
    oif: u32,
    next_hop: u128,
    v6: bool,
    /// The route generation plus one (0: empty).
    generation: u64,
    answer: Result<LinkAnswer, DropReason>,
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
        e: &Egress,
    ) -> Route {
        let v6 = e.next_hop_v6;
        if let Some(punt) = route::unserved(tables, e.oif) {
            return punt;
        }
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
            if answer.map_or(true, |link| link.dst_mac.is_some()) {
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

    fn tables() -> Tables {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let ns = writer.add_netns(NetnsConfig::default()).unwrap();
        Tables::new(NetnsId(1), sockets, ns)
    }

    #[test]
    fn the_filter_follows_the_generation() {
        let tables = tables();
        let guard = crossbeam_epoch::pin();
        let mut filter = LocalFilter::new();
        let a = u128::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)));
        let b: u128 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
        filter.refresh(&tables, &guard, 0);
        assert!(!filter.may_be_local(false, a));
        tables
            .addrs
            .add(IfAddr::new(Ipv4Addr::from(a as u32), 24, 1))
            .unwrap();
        tables
            .addrs
            .add(IfAddr::new(Ipv6Addr::from(b), 64, 1))
            .unwrap();
        // Same generation: the old filter (the writer has not bumped yet).
        filter.refresh(&tables, &guard, 0);
        assert!(!filter.may_be_local(false, a));
        // The bump: rebuilt.
        filter.refresh(&tables, &guard, 1);
        assert!(filter.may_be_local(false, a));
        assert!(filter.may_be_local(true, b));
        // The same bits under the other family are another key.
        let misses = (0..1000u128)
            .filter(|i| filter.may_be_local(false, a + 1 + i))
            .count();
        assert!(misses < 10, "{misses} false positives in 1000");
    }

    #[test]
    fn too_many_addresses_turn_the_filter_off() {
        let tables = tables();
        let guard = crossbeam_epoch::pin();
        for i in 0..=FILTER_MAX_ADDRESSES as u32 {
            let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 0)) + i);
            tables.addrs.add(IfAddr::new(addr, 16, 1)).unwrap();
        }
        let mut filter = LocalFilter::new();
        filter.refresh(&tables, &guard, 0);
        assert!(filter.may_be_local(false, 1));
    }
}
