//! Per-queue memos of answers the tables give per source or per next hop rather than per
//! packet, each valid for one route generation: the control plane bumps the generation after
//! every change of addresses, links or neighbours it publishes (the [`Tables`] contract), so an
//! answer taken under the batch's generation is the one the tables give.
//!
//! - [`LocalFilter`]: which addresses may be local, for the own-source check
//!   (`fib_validate_source`: one of this host's IPv4 addresses as a source is a martian) and
//!   the local-destination check of route-cache misses, once per generation;
//! - [`EgressMemo`]: the egress link (up, MAC, MTU) and the neighbour's MAC, once per next hop,
//!   for the route-cache misses (all packets, when the cache steps aside at many flows);
//! - [`IngressMemo`]: the ingress device's switches (`forwarding`, `rp_filter`) once per
//!   (device, family), the reverse-path answer once per (source, DSCP, device), and the whole
//!   decision of a FIB answer through one gateway once per (route, ingress device) (the
//!   kernel's `nhc_rth_input`: the input route cached on the next hop), the route named by
//!   the fast structure's [`RouteTag`], valid for one route generation and one generation of
//!   the device table.

use std::net::{Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;
use fib_trie::RouteTag;

use crate::Tables;
use crate::route::{self, Egress, IngressCheck, IngressSwitches, LinkAnswer, Route};
use crate::verdict::DropReason;
use crate::wire::Family;

/// Buckets of the egress memo (a power of two), each of [`EGRESS_WAYS`] slots.
const EGRESS_BUCKETS: usize = 256;
/// Slots per bucket: two next hops that hash alike do not evict each other.
const EGRESS_WAYS: usize = 2;

/// A Bloom filter of this namespace's local addresses (both families), rebuilt from the
/// address table when the route generation changes: "not local" answers come from two bit
/// tests in one word, and only addresses that may be local are looked up (`dev_find`). It
/// answers the own-source check (`fib_validate_source`) and the local-destination check of a
/// route-cache miss, which would otherwise hash into the address table for every packet.
///
/// Blocked: both bits of an address lie in one 64-bit word (one load per test, no branch);
/// with more than [`FILTER_MAX_ADDRESSES`] addresses every bit is set, so that every check
/// asks the table. The filter is a superset of the table's addresses under the generation it
/// was built for (a false positive only costs the lookup).
#[derive(Clone, Debug)]
pub(crate) struct LocalFilter {
    words: Box<[u64; FILTER_WORDS]>,
    /// The route generation the filter was built under, plus one (0: never built).
    generation: u64,
}

/// Words of the local-address filter (4,096 bits).
const FILTER_WORDS: usize = 64;
/// Beyond this many local addresses the filter is not used.
pub(crate) const FILTER_MAX_ADDRESSES: usize = 256;

impl LocalFilter {
    /// A filter that lets every address through until its first [`refresh`](Self::refresh).
    pub(crate) fn new() -> Self {
        LocalFilter {
            words: Box::new([u64::MAX; FILTER_WORDS]),
            generation: 0,
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
                self.insert(Family::V4, u128::from(u32::from(a.addr)));
                count += 1;
            }
        }
        for (_, addrs) in tables.addrs.interfaces::<Ipv6Addr>(guard) {
            for a in addrs {
                self.insert(Family::V6, u128::from(a.addr));
                count += 1;
            }
        }
        if count > FILTER_MAX_ADDRESSES {
            // Too many to be useful: every address may be local.
            self.words.fill(u64::MAX);
        }
    }

    /// The filter's word and two bit positions in it of an address: an IPv4 address (in the
    /// low 32 bits) is hashed alone, an IPv6 one folded from 128 bits first.
    #[inline(always)]
    fn bits(family: Family, addr: u128) -> (usize, u32, u32) {
        let folded = match family {
            Family::V4 => addr as u64,
            Family::V6 => (addr as u64) ^ ((addr >> 64) as u64).rotate_left(29) ^ 1,
        };
        let h = folded.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The top six bits choose the word (below `FILTER_WORDS`: no bounds check).
        let word = (h >> 58) as usize;
        let a = (h >> 52) as u32 & 63;
        let b = (h >> 46) as u32 & 63;
        (word, a, b)
    }

    fn insert(&mut self, family: Family, addr: u128) {
        let (word, a, b) = Self::bits(family, addr);
        self.words[word] |= 1 << a | 1 << b;
    }

    /// Whether `addr` may be a local address (false: it certainly is not one, under the
    /// generation of the last [`refresh`](Self::refresh)).
    #[inline]
    pub(crate) fn may_be_local(&self, family: Family, addr: u128) -> bool {
        let (word, a, b) = Self::bits(family, addr);
        let w = self.words[word];
        (w >> a) & (w >> b) & 1 != 0
    }
}

/// One remembered next hop, with the decision last completed from it.
#[derive(Clone, Copy, Debug)]
struct EgressSlot {
    oif: u32,
    next_hop: u128,
    /// The next hop's family.
    family: Family,
    /// The route generation plus one (0: empty).
    generation: u64,
    answer: Result<LinkAnswer, DropReason>,
    /// The route's own parts the last decision was completed with, and that decision: a
    /// route with the same ones gets it without being completed again.
    route_mtu: Option<u32>,
    multipath: bool,
    source_checked: bool,
    route: Route,
}

/// A 2-way set-associative memo of [`route::egress`]'s table lookups per (interface, next hop), valid
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
            family: Family::V4,
            generation: 0,
            answer: Err(DropReason::NoEgressLink),
            route_mtu: None,
            multipath: false,
            source_checked: false,
            route: Route::Drop(DropReason::NoEgressLink),
        };
        EgressMemo {
            slots: vec![empty; EGRESS_BUCKETS * EGRESS_WAYS].into_boxed_slice(),
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
        let family = e.next_hop_family;
        if let Some(punt) = route::unserved(tables, e.oif) {
            return punt;
        }
        let mix = ((e.next_hop as u64) ^ ((e.next_hop >> 64) as u64).rotate_left(21))
            .wrapping_add(u64::from(e.oif).wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
        let bucket =
            (mix.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize & (EGRESS_BUCKETS - 1);
        let tag = generation.wrapping_add(1);
        let start = bucket * EGRESS_WAYS;
        let Some(ways) = self.slots.get_mut(start..start + EGRESS_WAYS) else {
            return route::egress(tables, guard, e);
        };
        for slot in ways.iter_mut() {
            if slot.generation == tag
                && slot.oif == e.oif
                && slot.next_hop == e.next_hop
                && slot.family == family
            {
                if slot.route_mtu != e.route_mtu
                    || slot.multipath != e.multipath
                    || slot.source_checked != e.source_checked
                {
                    slot.route = route::complete(e, slot.answer);
                    slot.route_mtu = e.route_mtu;
                    slot.multipath = e.multipath;
                    slot.source_checked = e.source_checked;
                }
                return slot.route;
            }
        }
        let answer = route::link_answer(tables, guard, family, e.oif, e.next_hop);
        let route = route::complete(e, answer);
        if answer.map_or(true, |link| link.dst_mac.is_some()) {
            // A slot of another generation, else the first after the others move down one
            // (the last, the oldest answer, falls out).
            let index = match ways.iter().position(|slot| slot.generation != tag) {
                Some(index) => index,
                None => {
                    ways.copy_within(0..EGRESS_WAYS - 1, 1);
                    0
                }
            };
            ways[index] = EgressSlot {
                oif: e.oif,
                next_hop: e.next_hop,
                family,
                generation: tag,
                answer,
                route_mtu: e.route_mtu,
                multipath: e.multipath,
                source_checked: e.source_checked,
                route,
            };
        }
        route
    }
}

/// Slots of the ingress memo's device part (a power of two; direct-mapped by device and
/// family: a queue sees one device, or a few VLANs of it).
const INGRESS_DEVICES: usize = 16;
/// Slots of the ingress memo's source part (a power of two, direct-mapped by source).
const INGRESS_SOURCES: usize = 256;
/// Slots of the ingress memo's answer part (a power of two, direct-mapped by route tag and
/// ingress device; a slot is touched only by the routes in use: a full table through a few
/// dozen gateways has a few dozen route informations).
const INGRESS_ANSWERS: usize = 1024;

/// A remembered ingress verdict of one (device, family).
#[derive(Clone, Copy, Debug)]
struct DeviceSlot {
    iif: u32,
    family: Family,
    /// The memo's epoch the verdict was taken in (0: empty).
    epoch: u32,
    check: IngressCheck,
}

/// A remembered reverse-path answer of one (source, DSCP, device, strictness).
#[derive(Clone, Copy, Debug, Default)]
struct SourceSlot {
    src: u32,
    dscp: u8,
    strict: bool,
    valid: Option<bool>,
    iif: u32,
    /// The memo's epoch the answer was taken in (0: empty).
    epoch: u32,
}

/// A remembered decision of a FIB answer through one gateway for packets arriving on one
/// device: what [`route::fib_answer`] and [`route::egress`] gave it.
///
/// The route's [`RouteTag`] names its information (next hops, metrics), which never changes
/// under a tag and which a tag never names again once gone; a unicast route with one live next
/// hop through a gateway ([`route::single_gateway`]) decides from that information, the
/// packet's family (a tag is of one family's table) and the ingress device's switches
/// alone (no flow hash, no destination, no source: a decision whose source was checked by
/// `rp_filter` is not remembered), so every packet of one epoch that the FIB sends by a
/// route of this tag through this device gets this decision.
///
/// One cache line (`align(64)`, 64 bytes: a [`Route`] is 40), so that reading a decision
/// costs one line, which the FIB walk's own lines may have evicted, not two.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct AnswerSlot {
    /// The route's tag ([`RouteTag::get`]; 0: empty).
    tag: u64,
    /// The memo's epoch the answer was taken in (0: empty).
    epoch: u32,
    iif: u32,
    /// The route's egress interface.
    oif: u32,
    route: Route,
}

/// The ingress switches and reverse-path answers of [`route::fib_answer`], remembered: the
/// kernel reads the device's switches (`IN_DEV_FORWARD`, `IN_DEV_RPFILTER`) and, with
/// `rp_filter` on, looks the source up in the FIB (`fib_validate_source`) for every packet;
/// both are functions of the tables alone, so one answer per (device, family) and per (source,
/// DSCP, device) serves every packet until the tables change.
///
/// Valid for one route generation and one generation of the device table
/// ([`DevConfTable::generation`](neigh_table::DevConfTable::generation)): a change of either
/// forgets everything (a new epoch). Reverse-path answers are remembered only while no custom
/// policy rules exist: with them the reverse lookup's rules may select on the packet's
/// destination, which the memo's key does not hold.
#[derive(Clone, Debug)]
pub(crate) struct IngressMemo {
    /// The route generation plus one, the device table's generation and its address (another
    /// table object is another epoch, whatever its generation) the epoch belongs to.
    tables: (u64, u64, usize),
    /// Whether reverse-path answers may be remembered in this epoch (no custom rules).
    sources_usable: bool,
    /// The current epoch (never 0).
    epoch: u32,
    devices: [DeviceSlot; INGRESS_DEVICES],
    sources: Box<[SourceSlot]>,
    answers: Box<[AnswerSlot; INGRESS_ANSWERS]>,
}

impl IngressMemo {
    pub(crate) fn new() -> Self {
        IngressMemo {
            tables: (0, 0, 0),
            sources_usable: false,
            epoch: 1,
            devices: [DeviceSlot {
                iif: 0,
                family: Family::V4,
                epoch: 0,
                check: IngressCheck::Pass,
            }; INGRESS_DEVICES],
            sources: vec![SourceSlot::default(); INGRESS_SOURCES].into_boxed_slice(),
            answers: Box::new([AnswerSlot::EMPTY; INGRESS_ANSWERS]),
        }
    }

    /// The answer slot of the route `tag` for packets arriving on `iif`.
    #[inline(always)]
    fn answer_slot(tag: RouteTag, iif: u32) -> usize {
        let mix = tag.get() ^ u64::from(iif).rotate_left(40);
        (mix.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize & (INGRESS_ANSWERS - 1)
    }

    /// The remembered decision of the single-gateway route `tag` ([`AnswerSlot`]) on packets
    /// arriving on `iif`, taken in this epoch, with its egress interface (whether the
    /// pipeline serves it is asked per packet: [`route::unserved`]).
    #[inline(always)]
    pub(crate) fn answer(&self, tag: RouteTag, iif: u32) -> Option<(u32, &Route)> {
        let s = &self.answers[Self::answer_slot(tag, iif)];
        (s.tag == tag.get() && s.iif == iif && s.epoch == self.epoch).then_some((s.oif, &s.route))
    }

    /// Remembers `route`, the decision of the single-gateway route `tag` ([`AnswerSlot`]) on
    /// packets arriving on `iif` whose switches let them pass without a source check, if a
    /// later packet may take it without asking the tables: a usable neighbour, or a link that
    /// cannot be used (as [`EgressMemo`] keeps them); an unresolved neighbour is asked again
    /// each time.
    #[inline]
    pub(crate) fn remember_answer(&mut self, tag: RouteTag, iif: u32, oif: u32, route: Route) {
        let keep = match route {
            Route::Forward(hop) => hop.is_resolved() && !hop.multipath && !hop.source_checked,
            Route::Drop(_) => true,
            Route::Local | Route::Punt(_) | Route::Reject(_) => false,
        };
        if keep {
            self.answers[Self::answer_slot(tag, iif)] = AnswerSlot {
                tag: tag.get(),
                epoch: self.epoch,
                iif,
                oif,
                route,
            };
        }
    }

    /// Starts a new epoch if the route generation (`snapshot`) or the device table changed
    /// since the last call: once per batch.
    #[inline]
    pub(crate) fn refresh(&mut self, tables: &Tables, snapshot: dst_cache::Snapshot) {
        let now = (
            snapshot.generation.wrapping_add(1),
            tables.devconf.generation(),
            std::sync::Arc::as_ptr(&tables.devconf) as usize,
        );
        if self.tables != now {
            self.tables = now;
            self.sources_usable = snapshot.enabled;
            self.epoch = self.epoch.wrapping_add(1);
            if self.epoch == 0 {
                // Wrapped: no slot may carry an epoch that comes again.
                for slot in &mut self.devices {
                    slot.epoch = 0;
                }
                self.sources.fill(SourceSlot::default());
                self.answers.fill(AnswerSlot::EMPTY);
                self.epoch = 1;
            }
        }
    }

    /// The memo as the [`IngressSwitches`] of one batch's lookups.
    #[inline]
    pub(crate) fn switches<'a>(
        &'a mut self,
        tables: &'a Tables,
        guard: &'a Guard,
    ) -> MemoSwitches<'a> {
        MemoSwitches {
            memo: self,
            tables,
            guard,
        }
    }
}

const _: () = assert!(std::mem::size_of::<AnswerSlot>() == 64);

impl AnswerSlot {
    const EMPTY: AnswerSlot = AnswerSlot {
        tag: 0,
        epoch: 0,
        iif: 0,
        oif: 0,
        route: Route::Local,
    };
}

/// [`IngressMemo`] answering for the tables of one batch.
pub(crate) struct MemoSwitches<'a> {
    memo: &'a mut IngressMemo,
    tables: &'a Tables,
    guard: &'a Guard,
}

impl MemoSwitches<'_> {
    /// [`IngressMemo::answer`].
    #[inline(always)]
    pub(crate) fn answer(&self, tag: RouteTag, iif: u32) -> Option<(u32, &Route)> {
        self.memo.answer(tag, iif)
    }
}

impl IngressSwitches for MemoSwitches<'_> {
    #[inline]
    fn check(&mut self, family: Family, iif: u32) -> IngressCheck {
        let epoch = self.memo.epoch;
        let index = ((iif as usize) << 1 | usize::from(family.is_v6())) & (INGRESS_DEVICES - 1);
        let slot = &mut self.memo.devices[index];
        if slot.epoch == epoch && slot.iif == iif && slot.family == family {
            return slot.check;
        }
        let check = route::ingress_check(self.tables, self.guard, family, iif);
        *slot = DeviceSlot {
            iif,
            family,
            epoch,
            check,
        };
        check
    }

    #[inline]
    fn source_valid(
        &mut self,
        src: u128,
        dst: u128,
        dscp: u8,
        iif: u32,
        strict: bool,
    ) -> Option<bool> {
        if !self.memo.sources_usable {
            return route::source_valid(self.tables, self.guard, src, dst, dscp, iif, strict);
        }
        let epoch = self.memo.epoch;
        let src4 = src as u32;
        let h = (src4 ^ iif.rotate_left(16)).wrapping_mul(0x9e37_79b9);
        let slot = &mut self.memo.sources[(h >> 24) as usize & (INGRESS_SOURCES - 1)];
        if slot.epoch == epoch
            && slot.src == src4
            && slot.dscp == dscp
            && slot.iif == iif
            && slot.strict == strict
        {
            return slot.valid;
        }
        let valid = route::source_valid(self.tables, self.guard, src, dst, dscp, iif, strict);
        *slot = SourceSlot {
            src: src4,
            dscp,
            strict,
            valid,
            iif,
            epoch,
        };
        valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use addr_table::{IfAddr, NetnsId};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    fn tables() -> (Tables, crate::TableWriters) {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let ns = writer.add_netns(NetnsConfig::default()).unwrap();
        Tables::new(NetnsId(1), sockets, ns)
    }

    #[test]
    fn the_filter_follows_the_generation() {
        let (tables, mut writers) = tables();
        let guard = crossbeam_epoch::pin();
        let mut filter = LocalFilter::new();
        let a = u128::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)));
        let b: u128 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
        filter.refresh(&tables, &guard, 0);
        assert!(!filter.may_be_local(Family::V4, a));
        writers
            .addrs
            .add(IfAddr::new(Ipv4Addr::from(a as u32), 24, 1))
            .unwrap();
        writers
            .addrs
            .add(IfAddr::new(Ipv6Addr::from(b), 64, 1))
            .unwrap();
        // Same generation: the old filter (the writer has not bumped yet).
        filter.refresh(&tables, &guard, 0);
        assert!(!filter.may_be_local(Family::V4, a));
        // The bump: rebuilt.
        filter.refresh(&tables, &guard, 1);
        assert!(filter.may_be_local(Family::V4, a));
        assert!(filter.may_be_local(Family::V6, b));
        // The same bits under the other family are another key.
        let misses = (0..1000u128)
            .filter(|i| filter.may_be_local(Family::V4, a + 1 + i))
            .count();
        assert!(misses < 10, "{misses} false positives in 1000");
    }

    /// Routes through one next hop share its link and neighbour answer, and each gets the
    /// decision of its own MTU metric and multipath flag, remembered or not.
    #[test]
    fn the_egress_memo_completes_each_route_with_its_own_parts() {
        use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
        let (tables, mut writers) = tables();
        let guard = crossbeam_epoch::pin();
        let mut link = Link {
            mac: Some([2, 0, 0, 0, 0, 2]),
            mtu: 1500,
            ..Link::new(2, String::from("eth2"))
        };
        link.flags = LinkFlags::UP | LinkFlags::RUNNING;
        link.oper = OperState::UP;
        writers.links.upsert(link);
        let gw = Ipv4Addr::new(192, 0, 2, 1);
        writers.neigh.upsert(Neighbour::new(
            2,
            gw.into(),
            Some([2, 0, 0, 0, 0, 9]),
            NudState::REACHABLE,
        ));
        let mut memo = EgressMemo::new();
        let egress = |route_mtu, multipath| Egress {
            oif: 2,
            next_hop: u128::from(u32::from(gw)),
            next_hop_family: Family::V4,
            multipath,
            route_mtu,
            source_checked: false,
        };
        let mtu_of = |route: Route| match route {
            Route::Forward(hop) => (hop.mtu, hop.multipath, hop.dst_mac()),
            other => panic!("{other:?}"),
        };
        for (route_mtu, multipath, expected) in [
            (None, false, 1500),
            (None, false, 1500),
            (Some(1400), false, 1400),
            (Some(9000), true, 1500),
            (None, false, 1500),
        ] {
            let e = egress(route_mtu, multipath);
            let route = memo.egress(&tables, &guard, 0, &e);
            assert_eq!(route, route::egress(&tables, &guard, &e));
            assert_eq!(
                mtu_of(route),
                (expected, multipath, Some([2, 0, 0, 0, 0, 9]))
            );
        }
    }

    /// The memo holds the answers of 64 next hops at once (as the dataplane benchmark's 64
    /// gateways need): within one generation they are answered from the memo even after the
    /// neighbours went (the writer has not bumped yet), and the bump asks the tables again.
    #[test]
    fn the_egress_memo_holds_many_next_hops() {
        use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
        let (tables, mut writers) = tables();
        let guard = crossbeam_epoch::pin();
        let gateways: Vec<(u32, Ipv4Addr)> = (0..64u32)
            .map(|i| (2 + i % 4, Ipv4Addr::from(0x6440_0001 + (i << 8))))
            .collect();
        for oif in 2..6 {
            let mut link = Link {
                mac: Some([2, 0, 0, 0, 0, oif as u8]),
                ..Link::new(oif, format!("eth{oif}"))
            };
            link.flags = LinkFlags::UP | LinkFlags::RUNNING;
            link.oper = OperState::UP;
            writers.links.upsert(link);
        }
        for &(oif, gw) in &gateways {
            let mac = Some([2, 0, 0, 1, 0, gw.octets()[2]]);
            writers
                .neigh
                .upsert(Neighbour::new(oif, gw.into(), mac, NudState::REACHABLE));
        }
        let mut memo = EgressMemo::new();
        let egress = |oif, gw: Ipv4Addr| Egress {
            oif,
            next_hop: u128::from(u32::from(gw)),
            next_hop_family: Family::V4,
            multipath: false,
            route_mtu: None,
            source_checked: false,
        };
        let resolved = |memo: &mut EgressMemo, generation| {
            gateways
                .iter()
                .filter(|&&(oif, gw)| {
                    let route = memo.egress(&tables, &guard, generation, &egress(oif, gw));
                    matches!(route, Route::Forward(hop) if hop.is_resolved())
                })
                .count()
        };
        assert_eq!(resolved(&mut memo, 0), 64);
        for &(oif, gw) in &gateways {
            writers.neigh.remove(oif, gw.into());
        }
        assert_eq!(resolved(&mut memo, 0), 64);
        assert_eq!(resolved(&mut memo, 1), 0);
    }

    /// The tags of the routes of `fib` that answer `dsts`, in order (through the batch
    /// lookup, which hands them out).
    fn tags_of(fib: &fib_trie::Fib<u32>, dsts: &[u32]) -> Vec<RouteTag> {
        struct Tags<'a>(&'a [u32], Vec<RouteTag>);
        impl fib_trie::FlowBatch<'_, u32> for Tags<'_> {
            fn count(&self) -> usize {
                self.0.len()
            }
            fn flow(&self, k: usize) -> fib_trie::Flow<u32> {
                fib_trie::Flow::to(self.0[k])
            }
            fn answer(
                &mut self,
                _: usize,
                _: &fib_trie::Flow<u32>,
                _: Result<fib_trie::FibResult<'_, u32>, fib_trie::LookupError>,
            ) {
            }
            fn known(&mut self, _: usize, tag: RouteTag) -> bool {
                self.1.push(tag);
                false
            }
        }
        let mut batch = Tags(dsts, Vec::new());
        fib.lookup_batch_by(&mut batch, &crossbeam_epoch::pin());
        batch.1
    }

    /// A remembered decision answers only its own route and ingress device, only in its
    /// epoch, and only usable decisions are remembered; a route replaced (even by an equal
    /// one) gets a tag of its own.
    #[test]
    fn the_answer_memo_keeps_usable_decisions_per_route_device_and_epoch() {
        use crate::route::Hop;
        use fib_trie::{InsertFlags, NextHop, Route as FibRoute, RouteSelector};
        let (tables, mut writers) = tables();
        let via = |gw| vec![NextHop::new(Some(gw), 2)];
        let a = FibRoute::unicast(0x0a00_0000, 8, 254, via(0x0a00_0201));
        let b = FibRoute::unicast(0x0b00_0000, 8, 254, via(0x0a00_0202));
        writers.fib4.insert(&a, InsertFlags::ADD).unwrap();
        writers.fib4.insert(&b, InsertFlags::ADD).unwrap();
        let tags = tags_of(&tables.fib4, &[0x0a01_0101, 0x0a02_0202, 0x0b01_0101]);
        let [ta, ta2, tb] = tags[..] else {
            panic!("{tags:?}")
        };
        assert_eq!(ta, ta2, "one route, one tag");
        assert_ne!(ta, tb);
        let mut memo = IngressMemo::new();
        let snapshot = |generation| dst_cache::Snapshot {
            generation,
            ..tables.generation.snapshot()
        };
        memo.refresh(&tables, snapshot(0));
        let hop = |dst_mac| {
            Hop::new(
                2,
                0x0a00_0201,
                Family::V4,
                [2, 0, 0, 0, 0, 2],
                dst_mac,
                1500,
                false,
                false,
            )
        };
        let usable = Route::Forward(hop(Some([2, 0, 0, 0, 0, 9])));
        memo.remember_answer(ta, 1, 2, usable);
        assert_eq!(memo.answer(ta, 1), Some((2, &usable)));
        assert_eq!(memo.answer(ta, 3), None, "another device");
        assert_eq!(memo.answer(tb, 1), None, "another route");
        // An unresolved neighbour is asked again; a link that cannot be used is remembered.
        let unresolved = Route::Forward(hop(None));
        memo.remember_answer(ta, 1, 2, unresolved);
        assert_eq!(memo.answer(ta, 1), Some((2, &usable)));
        let down = Route::Drop(DropReason::EgressDown);
        memo.remember_answer(ta, 1, 2, down);
        assert_eq!(memo.answer(ta, 1), Some((2, &down)));
        // The next generation forgets it.
        memo.refresh(&tables, snapshot(1));
        assert_eq!(memo.answer(ta, 1), None);
        // Replaced by an equal route: a new tag, under which nothing is remembered.
        memo.remember_answer(ta, 1, 2, usable);
        writers.fib4.delete(&RouteSelector::exact(&a)).unwrap();
        writers.fib4.insert(&a, InsertFlags::ADD).unwrap();
        let again = tags_of(&tables.fib4, &[0x0a01_0101]);
        assert_eq!(again.len(), 1);
        assert_ne!(again[0], ta);
        assert_eq!(memo.answer(again[0], 1), None);
    }

    #[test]
    fn too_many_addresses_turn_the_filter_off() {
        let (tables, mut writers) = tables();
        let guard = crossbeam_epoch::pin();
        for i in 0..=FILTER_MAX_ADDRESSES as u32 {
            let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 0)) + i);
            writers.addrs.add(IfAddr::new(addr, 16, 1)).unwrap();
        }
        let mut filter = LocalFilter::new();
        filter.refresh(&tables, &guard, 0);
        assert!(filter.may_be_local(Family::V4, 1));
    }
}
