//! Input routing: what the route cache stores and how a miss is answered from the tables
//! (address table, FIB, link and neighbour tables).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;
use dst_cache::{Cacheable, FlowKey};
use fib_trie::{Flow, LookupError, RouteType, Scope};

use crate::Tables;
use crate::parse::Meta;
use crate::verdict::{DropReason, PuntReason};

/// Where a forwarded packet goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The egress interface.
    pub oif: u32,
    /// The next hop's address: the gateway, or the destination itself on a connected route
    /// (an IPv4 address in the low 32 bits).
    pub next_hop: u128,
    /// The egress interface's MAC address.
    pub src_mac: [u8; 6],
    /// The next hop's MAC address, when the neighbour is usable.
    pub dst_mac: Option<[u8; 6]>,
    /// The path MTU: the egress link's, or the route's `mtu` metric when it is lower (the
    /// kernel forwards by the route's metric when one is set; a larger one than the link's
    /// cannot be sent here).
    pub mtu: u32,
    /// The route had several next hops (the choice depends on the flow: never cached).
    pub multipath: bool,
}

/// Why a route refuses a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// A blackhole: drop silently.
    Blackhole,
    /// No route (net unreachable).
    NoRoute,
    /// An unreachable route (host unreachable).
    Unreachable,
    /// A prohibit route (administratively prohibited).
    Prohibit,
}

/// An input routing decision, as cached per (destination, TOS, ingress interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Forward.
    Forward(Hop),
    /// A local destination: a UDP endpoint, else the kernel.
    Local,
    /// The kernel's (broadcast and multicast routes, "kernel decides" routes, egress on an
    /// interface the pipeline does not serve).
    Punt(PuntReason),
    /// A reject route.
    Reject(Reject),
    /// A route whose egress cannot be used (unknown or down interface, not Ethernet).
    Drop(DropReason),
}

impl Cacheable for Route {
    fn is_cacheable(&self) -> bool {
        match self {
            Route::Forward(hop) => hop.dst_mac.is_some() && !hop.multipath,
            // An unusable egress may be one path of a multipath route, chosen by this flow's
            // hash: another flow to the same destination may take a usable path.
            Route::Punt(_) | Route::Drop(_) => false,
            Route::Local | Route::Reject(_) => true,
        }
    }
}

impl From<LookupError> for Reject {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NoRoute => Reject::NoRoute,
            LookupError::Blackhole => Reject::Blackhole,
            LookupError::Unreachable => Reject::Unreachable,
            LookupError::Prohibit => Reject::Prohibit,
        }
    }
}

/// A flow hash of the addresses (the kernel's default multipath policy 0 hashes L3 only) or
/// of the 4-tuple (`ports` non-zero).
pub fn flow_hash(src: u128, dst: u128, ports: u32) -> u32 {
    let x = (src as u64)
        ^ ((src >> 64) as u64).rotate_left(17)
        ^ (dst as u64).rotate_left(29)
        ^ ((dst >> 64) as u64).rotate_left(43)
        ^ u64::from(ports).rotate_left(53);
    let x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 32) as u32
}

/// Answers a route-cache miss: a local address (address table) is local; else the FIB of the
/// family decides by route type (unicast to the egress link and neighbour; local and anycast
/// local; broadcast and multicast to the kernel; reject types rejected; throw handled inside the
/// FIB by going on with the next rule).
///
/// The same three steps the vector pipeline runs as separate stages over a batch's misses:
/// [`is_local_dst`], [`fib_lookup`], [`egress`].
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one lookup, kept as scalars"
)]
pub fn resolve(
    tables: &Tables,
    guard: &Guard,
    v6: bool,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
) -> Route {
    if is_local_dst(tables, guard, v6, dst) {
        return Route::Local;
    }
    match fib_lookup(tables, guard, v6, src, dst, tos, iif) {
        Ok(hop) => egress(tables, guard, v6, &hop),
        Err(route) => route,
    }
}

/// Whether `dst` is one of this namespace's own addresses (the address table's `dev_find`).
pub fn is_local_dst(tables: &Tables, guard: &Guard, v6: bool, dst: u128) -> bool {
    if v6 {
        tables
            .addrs
            .dev_find(Ipv6Addr::from(dst), None, guard)
            .is_some()
    } else {
        tables
            .addrs
            .dev_find(Ipv4Addr::from(dst as u32), None, guard)
            .is_some()
    }
}

/// The FIB's answer for a destination that is not a local address: the unicast route's chosen
/// next hop (for [`egress`] to complete), or the final decision of every other route type.
///
/// # Errors
/// The decision when the route is not unicast (local, broadcast, multicast, reject types), or
/// there is no route.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one lookup, kept as scalars"
)]
pub fn fib_lookup(
    tables: &Tables,
    guard: &Guard,
    v6: bool,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
) -> Result<Egress, Route> {
    // The FIB's tos selector compares DSCP bits.
    let dscp = tos & 0xfc;
    let (route_type, nexthop, multipath, route_mtu) = if v6 {
        let flow = Flow {
            dst,
            src,
            tos: dscp,
            iif,
            oif: 0,
            mark: 0,
            scope: Scope::UNIVERSE,
        };
        match tables.fib6.lookup(&flow, guard) {
            Ok(r) => {
                let multipath = r.nexthops().len() > 1;
                let nh = r
                    .select_path(flow_hash(src, dst, 0))
                    .map(|nh| (nh.ifindex, nh.gateway.unwrap_or(dst)));
                (r.route_type(), nh, multipath, r.alias.info.metrics.mtu())
            }
            Err(e) => return Err(Route::Reject(e.into())),
        }
    } else {
        let flow = Flow {
            dst: dst as u32,
            src: src as u32,
            tos: dscp,
            iif,
            oif: 0,
            mark: 0,
            scope: Scope::UNIVERSE,
        };
        match tables.fib4.lookup(&flow, guard) {
            Ok(r) => {
                let multipath = r.nexthops().len() > 1;
                let nh = r
                    .select_path(flow_hash(src, dst, 0))
                    .map(|nh| (nh.ifindex, u128::from(nh.gateway.unwrap_or(dst as u32))));
                (r.route_type(), nh, multipath, r.alias.info.metrics.mtu())
            }
            Err(e) => return Err(Route::Reject(e.into())),
        }
    };
    match route_type {
        RouteType::Unicast => {}
        RouteType::Local | RouteType::Anycast => return Err(Route::Local),
        RouteType::Broadcast => return Err(Route::Punt(PuntReason::Broadcast)),
        RouteType::Multicast => return Err(Route::Punt(PuntReason::Multicast)),
        RouteType::Blackhole => return Err(Route::Reject(Reject::Blackhole)),
        RouteType::Unreachable => return Err(Route::Reject(Reject::Unreachable)),
        RouteType::Prohibit => return Err(Route::Reject(Reject::Prohibit)),
        RouteType::Throw => return Err(Route::Reject(Reject::NoRoute)),
        RouteType::Kernel => return Err(Route::Punt(PuntReason::KernelRoute)),
    }
    let Some((oif, next_hop)) = nexthop else {
        return Err(Route::Reject(Reject::NoRoute));
    };
    Ok(Egress {
        oif,
        next_hop,
        multipath,
        route_mtu,
    })
}

/// What a route chose, for [`egress`] to complete.
#[derive(Clone, Copy, Debug)]
pub struct Egress {
    /// The egress interface.
    pub oif: u32,
    /// The gateway, or the destination on a connected route.
    pub next_hop: u128,
    /// The route had several next hops.
    pub multipath: bool,
    /// The route's `mtu` metric, if set.
    pub route_mtu: Option<u32>,
}

/// The egress half of a decision: the link's MAC, the path MTU, and the neighbour's MAC if
/// usable.
pub fn egress(tables: &Tables, guard: &Guard, v6: bool, e: &Egress) -> Route {
    if let Some(punt) = unserved(tables, e.oif) {
        return punt;
    }
    complete(e, link_answer(tables, guard, v6, e.oif, e.next_hop))
}

/// Out of an interface the pipeline does not serve ([`Tables::served`]): the kernel forwards
/// it.
#[inline]
pub fn unserved(tables: &Tables, oif: u32) -> Option<Route> {
    tables
        .served
        .as_ref()
        .is_some_and(|s| !s.contains(&oif))
        .then_some(Route::Punt(PuntReason::UnservedEgress))
}

/// What the link and neighbour tables say about a usable next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkAnswer {
    /// The egress link's MAC address.
    pub src_mac: [u8; 6],
    /// The neighbour's MAC address, when usable.
    pub dst_mac: Option<[u8; 6]>,
    /// The egress link's MTU.
    pub mtu: u32,
}

/// What the link and neighbour tables say about a next hop: the link's MAC and MTU and the
/// neighbour's usable MAC, or why the link cannot be used.
///
/// # Errors
/// [`DropReason::NoEgressLink`], [`DropReason::EgressDown`], [`DropReason::EgressNotEthernet`].
pub fn link_answer(
    tables: &Tables,
    guard: &Guard,
    v6: bool,
    oif: u32,
    next_hop: u128,
) -> Result<LinkAnswer, DropReason> {
    let Some(link) = tables.links.get(oif, guard) else {
        return Err(DropReason::NoEgressLink);
    };
    if !link.is_up() {
        return Err(DropReason::EgressDown);
    }
    let Some(src_mac) = link.mac else {
        return Err(DropReason::EgressNotEthernet);
    };
    let dst_mac = neighbour_mac(tables, guard, oif, ip_of(v6, next_hop));
    Ok(LinkAnswer {
        src_mac,
        dst_mac,
        mtu: link.mtu,
    })
}

/// A route's choice completed with what the tables say about its next hop ([`link_answer`]):
/// the path MTU is the link's, or the route's `mtu` metric when lower.
pub fn complete(e: &Egress, answer: Result<LinkAnswer, DropReason>) -> Route {
    match answer {
        Ok(link) => Route::Forward(Hop {
            oif: e.oif,
            next_hop: e.next_hop,
            src_mac: link.src_mac,
            dst_mac: link.dst_mac,
            mtu: e.route_mtu.map_or(link.mtu, |m| m.min(link.mtu)),
            multipath: e.multipath,
        }),
        Err(reason) => Route::Drop(reason),
    }
}

/// The usable MAC address of a neighbour.
pub fn neighbour_mac(tables: &Tables, guard: &Guard, oif: u32, addr: IpAddr) -> Option<[u8; 6]> {
    tables
        .neigh
        .lookup(oif, addr, guard)
        .and_then(|n| n.usable_mac())
}

/// The route-cache key of a parsed packet arriving on `iif`: destination, DSCP bits of the
/// TOS byte / traffic class, ingress interface.
pub fn flow_key(meta: &Meta, iif: u32) -> FlowKey {
    let tos = meta.tos & 0xfc;
    if meta.v6 {
        FlowKey::v6(Ipv6Addr::from(meta.dst), tos, iif)
    } else {
        FlowKey::v4(Ipv4Addr::from(meta.dst as u32), tos, iif)
    }
}

/// An address of the pipeline's form as an `IpAddr`.
pub fn ip_of(v6: bool, addr: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(addr))
    } else {
        IpAddr::V4(Ipv4Addr::from(addr as u32))
    }
}
