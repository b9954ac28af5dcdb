//! Input routing: what the route cache stores and how a miss is answered from the tables
//! (address table, FIB, link and neighbour tables).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;
use dst_cache::{Cacheable, FlowKey};
use fib_trie::multipath::{self, HashFields, HashKeys, MultipathPolicy};
use fib_trie::{Fib, FibResult, Flow, Gateway, LookupError, RouteType, Scope, TrieKey};
use neigh_table::Ingress;

use crate::Tables;
use crate::parse::Meta;
use crate::verdict::{DropReason, IcmpError, PuntReason};
use crate::wire::Family;
use crate::wire::ethernet;
use crate::wire::icmp::{self, v4_type, v6_type};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::l4::protocol;

/// The DSCP bits of the IPv4 TOS byte or the IPv6 traffic class (the two ECN bits cleared):
/// what the FIB's `tos` selector and the route cache's key compare.
pub const DSCP_MASK: u8 = 0xfc;

/// Where a forwarded packet goes next.
///
/// The two MAC addresses are kept as the Ethernet header's first twelve bytes
/// ([`Hop::eth_addrs`]: the neighbour's, then the egress link's), prepared once per next hop
/// when the decision is made (by the egress stage or its memo, for every packet of a route
/// after it), so that the rewrite writes them with two stores; a neighbour's new MAC comes
/// with a new route generation, under which the decision is made again. Four-byte aligned
/// (the next hop's address as four words), so that a [`Route`] is 40 bytes and a remembered
/// decision with its key fits one cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The egress interface.
    pub oif: u32,
    /// The path MTU: the egress link's, or the route's `mtu` metric when it is lower (the
    /// kernel forwards by the route's metric when one is set; a larger one than the link's
    /// cannot be sent here).
    pub mtu: u32,
    /// The neighbour's MAC address (zeros when not usable), then the egress interface's.
    eth: [u8; 2 * ethernet::ADDR_LEN],
    /// The next hop's address ([`Hop::next_hop`]), most significant word first.
    next_hop: [u32; 4],
    /// The family of the next hop's address, which decides how the neighbour is resolved
    /// (IPv6: ND, IPv4: ARP): always IPv6 for IPv6 packets, and for IPv4 packets on a route
    /// `via inet6` (RFC 8950, BGP unnumbered).
    pub next_hop_family: Family,
    /// Whether the neighbour is usable (its MAC is in `eth`).
    resolved: bool,
    /// The route had several next hops (the choice depends on the flow: never cached).
    pub multipath: bool,
    /// The source passed reverse-path filtering (`rp_filter` on the ingress device): the
    /// decision depends on the source, so it is never cached.
    pub source_checked: bool,
}

impl Hop {
    /// A hop out of `oif` to `next_hop` (the gateway, or the destination itself on a
    /// connected route; an IPv4 address in the low 32 bits) of `next_hop_family`, from the
    /// egress interface's MAC `src_mac` to the neighbour's `dst_mac` (when usable), with the
    /// path MTU `mtu`; `multipath` and `source_checked` as [`Hop::multipath`] and
    /// [`Hop::source_checked`].
    #[allow(
        clippy::too_many_arguments,
        reason = "the fields of one decision, kept as scalars"
    )]
    pub fn new(
        oif: u32,
        next_hop: u128,
        next_hop_family: Family,
        src_mac: [u8; 6],
        dst_mac: Option<[u8; 6]>,
        mtu: u32,
        multipath: bool,
        source_checked: bool,
    ) -> Self {
        let mut eth = [0; 2 * ethernet::ADDR_LEN];
        let (dst, src) = eth.split_at_mut(ethernet::ADDR_LEN);
        dst.copy_from_slice(&dst_mac.unwrap_or_default());
        src.copy_from_slice(&src_mac);
        let n = next_hop;
        Hop {
            oif,
            mtu,
            eth,
            next_hop: [
                (n >> 96) as u32,
                (n >> 64) as u32,
                (n >> 32) as u32,
                n as u32,
            ],
            next_hop_family,
            resolved: dst_mac.is_some(),
            multipath,
            source_checked,
        }
    }

    /// The next hop's address: the gateway, or the destination itself on a connected route
    /// (an IPv4 address in the low 32 bits).
    #[inline]
    pub fn next_hop(&self) -> u128 {
        let [a, b, c, d] = self.next_hop.map(u128::from);
        a << 96 | b << 64 | c << 32 | d
    }

    /// The egress interface's MAC address.
    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        let mut mac = [0; ethernet::ADDR_LEN];
        mac.copy_from_slice(&self.eth[ethernet::ADDR_LEN..]);
        mac
    }

    /// The next hop's MAC address, when the neighbour is usable.
    #[inline]
    pub fn dst_mac(&self) -> Option<[u8; 6]> {
        let mut mac = [0; ethernet::ADDR_LEN];
        mac.copy_from_slice(&self.eth[..ethernet::ADDR_LEN]);
        self.resolved.then_some(mac)
    }

    /// Whether the neighbour is usable (`dst_mac` is known).
    #[inline(always)]
    pub fn is_resolved(&self) -> bool {
        self.resolved
    }

    /// The Ethernet header's destination and source addresses as the rewrite writes them:
    /// the neighbour's MAC (zeros when not usable: a held frame gets its own when the
    /// neighbour answers), then the egress interface's.
    #[inline(always)]
    pub fn eth_addrs(&self) -> &[u8; 2 * ethernet::ADDR_LEN] {
        &self.eth
    }
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

impl Route {
    /// Whether this answer may be wrong while the tables lag the kernel's
    /// ([`dst_cache::Snapshot::behind`]): every answer but a local destination (served by this
    /// process's endpoints, which the kernel has no socket for) and a punt (the kernel's
    /// already). Such answers are punted while the tables are behind.
    #[inline]
    pub(crate) fn may_be_stale(&self) -> bool {
        !matches!(self, Route::Local | Route::Punt(_))
    }
}

impl Cacheable for Route {
    fn is_cacheable(&self) -> bool {
        match self {
            Route::Forward(hop) => hop.is_resolved() && !hop.multipath && !hop.source_checked,
            // An unusable egress may be one path of a multipath route, chosen by this flow's
            // hash: another flow to the same destination may take a usable path. Reverse-path
            // drops depend on the source.
            Route::Punt(_) | Route::Drop(_) => false,
            Route::Local | Route::Reject(_) => true,
        }
    }
}

impl Reject {
    /// The ICMP error a reject route answers a packet of `family` with (`None`: a blackhole,
    /// silent). IPv6 has no "host unreachable" for unreachable routes: the kernel's
    /// `ip6_pkt_discard` sends "no route" for both.
    pub const fn error(self, family: Family) -> Option<IcmpError> {
        Some(match (family, self) {
            (_, Reject::Blackhole) => return None,
            (Family::V4, Reject::NoRoute) => IcmpError::NetUnreachable,
            (Family::V4, Reject::Unreachable) => IcmpError::HostUnreachable,
            (Family::V4, Reject::Prohibit) => IcmpError::AdminProhibited,
            (Family::V6, Reject::NoRoute | Reject::Unreachable) => IcmpError::V6NoRoute,
            (Family::V6, Reject::Prohibit) => IcmpError::V6AdminProhibited,
        })
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

/// A flow hash of the addresses, or of the 4-tuple (`ports` non-zero), for choosing among
/// the sockets of a UDP endpoint (multipath routes use [`fib_trie::multipath::flow_hash`]).
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
/// [`is_local_dst`], [`fib_lookup`], [`egress`]. `keys` gives what a multipath route's hash
/// reads over the fields of the family's policy ([`hash_keys`]); called only for those.
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one lookup, kept as scalars"
)]
pub fn resolve(
    tables: &Tables,
    guard: &Guard,
    family: Family,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
    keys: impl FnOnce(HashFields) -> HashKeys,
) -> Route {
    if is_local_dst(tables, guard, family, dst) {
        return Route::Local;
    }
    match fib_lookup(tables, guard, family, src, dst, tos, iif, keys) {
        Ok(hop) => egress(tables, guard, &hop),
        Err(route) => route,
    }
}

/// The verdict for an IPv4 packet whose source is one of this namespace's own addresses,
/// arriving on `iif` (`fib_validate_source`): a martian, unless the device's `accept_local`
/// is on, when the kernel validates and routes it.
pub fn own_source(tables: &Tables, guard: &Guard, iif: u32) -> crate::Verdict {
    if tables.devconf.accepts_local(iif, guard) {
        crate::Verdict::Punt(PuntReason::AcceptLocal)
    } else {
        crate::Verdict::Drop(DropReason::MartianSource)
    }
}

/// Whether `dst` is one of this namespace's own addresses (the address table's `dev_find`).
pub fn is_local_dst(tables: &Tables, guard: &Guard, family: Family, dst: u128) -> bool {
    match family {
        Family::V6 => tables
            .addrs
            .dev_find(Ipv6Addr::from(dst), None, guard)
            .is_some(),
        Family::V4 => tables
            .addrs
            .dev_find(Ipv4Addr::from(dst as u32), None, guard)
            .is_some(),
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
    family: Family,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
    keys: impl FnOnce(HashFields) -> HashKeys,
) -> Result<Egress, Route> {
    match family {
        Family::V6 => fib_lookup_in::<u128>(tables, guard, src, dst, tos, iif, keys),
        Family::V4 => fib_lookup_in::<u32>(tables, guard, src, dst, tos, iif, keys),
    }
}

/// [`fib_lookup`] in the FIB of the family whose key is `K`.
#[inline]
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one lookup, kept as scalars"
)]
fn fib_lookup_in<K: FamilyKey>(
    tables: &Tables,
    guard: &Guard,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
    keys: impl FnOnce(HashFields) -> HashKeys,
) -> Result<Egress, Route> {
    let fib = K::fib(tables);
    let flow = fib_flow(K::narrow(src), K::narrow(dst), tos, iif);
    let result = fib.lookup(&flow, guard);
    let mut switches = TableSwitches { tables, guard };
    let policy = fib.multipath_policy();
    fib_answer(
        &mut switches,
        &flow,
        result,
        src,
        dst,
        policy,
        keys,
        K::widen,
    )
}

/// A family's FIB key (`u32` for IPv4, `u128` for IPv6), over which `Fib<K>` is generic: what
/// differs between the families in a route lookup, so that the lookup is written once.
pub(crate) trait FamilyKey: TrieKey {
    /// The key of an address in the pipeline's `u128` form (IPv4 in the low 32 bits).
    fn narrow(addr: u128) -> Self;
    /// A route's gateway in the pipeline's `u128` form, and its family.
    fn widen(gateway: Gateway<Self>) -> (u128, Family);
    /// The family's FIB.
    fn fib(tables: &Tables) -> &Fib<Self>;
}

impl FamilyKey for u32 {
    #[inline(always)]
    fn narrow(addr: u128) -> u32 {
        addr as u32
    }

    #[inline(always)]
    fn widen(gateway: Gateway<u32>) -> (u128, Family) {
        widen4(gateway)
    }

    #[inline(always)]
    fn fib(tables: &Tables) -> &Fib<u32> {
        &tables.fib4
    }
}

impl FamilyKey for u128 {
    #[inline(always)]
    fn narrow(addr: u128) -> u128 {
        addr
    }

    #[inline(always)]
    fn widen(gateway: Gateway<u128>) -> (u128, Family) {
        widen6(gateway)
    }

    #[inline(always)]
    fn fib(tables: &Tables) -> &Fib<u128> {
        &tables.fib6
    }
}

/// What a multipath hash over `fields` reads of a parsed packet in `frame` (its packet
/// bytes): the addresses, the upper-layer protocol, the ports and the IPv6 flow label; under
/// the L3 policy ([`HashFields::ICMP_ERROR_INNER`]) an ICMP error's quoted header instead.
/// Read only for multipath routes.
///
/// The ports are those of TCP, UDP, UDP-Lite, SCTP and DCCP and the SPI of ESP and AH, none
/// for fragments or other protocols, as the kernel's flow dissector finds them
/// (`proto_ports_offset`).
pub fn hash_keys(meta: &Meta, frame: &[u8], fields: HashFields) -> HashKeys {
    let l4 = meta.l4();
    if fields.contains(HashFields::ICMP_ERROR_INNER) {
        if let Some(inner) = icmp_error_inner(meta, frame, l4) {
            return inner;
        }
    }
    let ports_at = match meta.proto {
        _ if meta.fragment() => None,
        protocol::TCP
        | protocol::UDP
        | protocol::DCCP
        | protocol::SCTP
        | protocol::UDPLITE
        | protocol::ESP => Some(l4),
        protocol::AH => Some(l4 + AH_SPI_OFFSET),
        _ => None,
    };
    // Two 16-bit ports, or a 32-bit SPI read as two halves.
    let (sport, dport) = ports_at
        .and_then(|at| frame.get(at..)?.first_chunk::<4>())
        .map_or((0, 0), |&[s0, s1, d0, d1]| {
            (u16::from_be_bytes([s0, s1]), u16::from_be_bytes([d0, d1]))
        });
    HashKeys {
        src: meta.src,
        dst: meta.dst,
        proto: meta.proto,
        sport,
        dport,
        flowlabel: match meta.family {
            Family::V6 => flowlabel(frame, meta.l3()),
            Family::V4 => 0,
        },
    }
}

/// Where AH's SPI is: after its next header, payload length and reserved fields.
const AH_SPI_OFFSET: usize = 4;

/// The flow label of the IPv6 header at `at`.
fn flowlabel(frame: &[u8], at: usize) -> u32 {
    frame
        .get(at..)
        .and_then(|b| b.first_chunk::<{ ipv6::HEADER_LEN }>())
        .map_or(0, |h| Ipv6Packet::new_unchecked(h).flow_label())
}

/// The header an ICMP error quotes (ICMPv4 destination unreachable, source quench, redirect,
/// time exceeded, parameter problem; ICMPv6 types 1 to 4 right after the fixed header), as
/// the L3 multipath hash reads it: addresses, and for IPv6 the flow label and next header.
fn icmp_error_inner(meta: &Meta, frame: &[u8], l4: usize) -> Option<HashKeys> {
    let inner = frame.get(l4 + icmp::HEADER_LEN..)?;
    match meta.family {
        Family::V6 => {
            if meta.proto != protocol::ICMPV6
                || meta.l4_offset != ipv6::HEADER_LEN as u32
                || !matches!(
                    meta.icmp_type(frame)?,
                    v6_type::DEST_UNREACHABLE..=v6_type::PARAMETER_PROBLEM
                )
            {
                return None;
            }
            let ip = Ipv6Packet::new_unchecked(inner.first_chunk::<{ ipv6::HEADER_LEN }>()?);
            Some(HashKeys {
                src: u128::from_be_bytes(ip.src_bytes()),
                dst: u128::from_be_bytes(ip.dst_bytes()),
                proto: ip.next_header(),
                flowlabel: ip.flow_label(),
                ..HashKeys::default()
            })
        }
        Family::V4 => {
            if meta.proto != protocol::ICMP
                || meta.later_fragment()
                || !matches!(
                    meta.icmp_type(frame)?,
                    v4_type::DEST_UNREACHABLE
                        | v4_type::SOURCE_QUENCH
                        | v4_type::REDIRECT
                        | v4_type::TIME_EXCEEDED
                        | v4_type::PARAMETER_PROBLEM
                )
            {
                return None;
            }
            let ip = Ipv4Packet::new_unchecked(inner.first_chunk::<{ ipv4::HEADER_LEN }>()?);
            Some(HashKeys {
                src: u128::from(u32::from_be_bytes(ip.src_bytes())),
                dst: u128::from(u32::from_be_bytes(ip.dst_bytes())),
                proto: meta.proto,
                ..HashKeys::default()
            })
        }
    }
}

/// The FIB flow of an input route lookup (the TOS's DSCP bits, the ingress interface).
#[inline]
pub(crate) fn fib_flow<K>(src: K, dst: K, tos: u8, iif: u32) -> Flow<K> {
    Flow {
        dst,
        src,
        // The FIB's tos selector compares DSCP bits.
        tos: tos & DSCP_MASK,
        iif,
        oif: 0,
        mark: 0,
        scope: Scope::UNIVERSE,
    }
}

/// An IPv4 route's gateway in the pipeline's `u128` form, and its family (IPv6 for `via
/// inet6`, RFC 8950: the neighbour is the IPv6 one).
#[inline]
pub(crate) fn widen4(gateway: Gateway<u32>) -> (u128, Family) {
    match gateway {
        Gateway::Same(g) => (u128::from(g), Family::V4),
        Gateway::Inet6(g) => (g, Family::V6),
    }
}

/// An IPv6 route's gateway in the pipeline's `u128` form (always IPv6).
#[inline]
pub(crate) fn widen6(gateway: Gateway<u128>) -> (u128, Family) {
    match gateway {
        Gateway::Same(g) | Gateway::Inet6(g) => (g, Family::V6),
    }
}

/// The second half of [`fib_lookup`]: the decision of the FIB's answer `result` to `flow`,
/// for a packet from `src` to `dst` (the pipeline's `u128` form), with the ingress device's
/// switches (`forwarding`, `rp_filter`) applied as `switches` answers them; a multipath
/// route's member chosen by the family's `policy`, over what `keys` reads of the packet (called
/// only for multipath routes); `widen` turns a gateway into that form.
#[inline]
#[allow(
    clippy::too_many_arguments,
    reason = "the fields of one lookup, kept as scalars"
)]
pub(crate) fn fib_answer<K: TrieKey>(
    switches: &mut impl IngressSwitches,
    flow: &Flow<K>,
    result: Result<FibResult<'_, K>, LookupError>,
    src: u128,
    dst: u128,
    policy: MultipathPolicy,
    keys: impl FnOnce(HashFields) -> HashKeys,
    widen: impl Fn(Gateway<K>) -> (u128, Family),
) -> Result<Egress, Route> {
    let family = Family::from_v6(K::BITS == 128);
    let r = match result {
        Ok(r) => r,
        // IPv4 with forwarding off answers "host unreachable" to every lookup failure.
        Err(e) if family == Family::V4 => {
            return Err(refused_lookup(switches, flow.iif).unwrap_or(Route::Reject(e.into())));
        }
        Err(e) => return Err(Route::Reject(e.into())),
    };
    let route_type = r.route_type();
    let mut source_checked = false;
    if !matches!(route_type, RouteType::Local | RouteType::Anycast) {
        match switches.check(family, flow.iif) {
            IngressCheck::Pass => {}
            IngressCheck::Refused(route) => return Err(route),
            IngressCheck::ValidateSource { strict } => {
                match switches.source_valid(src, dst, flow.tos, flow.iif, strict) {
                    Some(true) => {}
                    Some(false) => return Err(Route::Drop(DropReason::RpFilter)),
                    // The route back is the kernel's to find.
                    None => return Err(Route::Punt(PuntReason::KernelRoute)),
                }
                source_checked = true;
            }
        }
    }
    unicast_egress(&r, dst, policy, keys, widen, source_checked)
}

/// Whether the decision of the FIB's answer `r` may be remembered per route and ingress
/// device ([`IngressMemo`](crate::memo::IngressMemo)): a unicast route with one live next hop
/// through a gateway, whose decision [`unicast_egress`] and [`egress`] take from the route's
/// information alone (its gateway, interface and `mtu` metric; no flow hash, no destination).
#[inline]
pub(crate) fn single_gateway<K: TrieKey>(r: &FibResult<'_, K>) -> bool {
    if r.route_type() != RouteType::Unicast {
        return false;
    }
    let [only] = r.nexthops() else {
        return false;
    };
    only.is_alive() && only.weight > 0 && only.gateway.is_some()
}

/// The FIB's answer for a locally originated packet (`ip_route_output_key`: the flow's `iif`
/// is the loopback device, as `iif lo` rules expect): the unicast route's chosen next hop, or
/// the decision of every other route type. Unlike [`fib_lookup`] no ingress switch
/// (`forwarding`, `rp_filter`) applies: they are input-path checks.
///
/// # Errors
/// The decision when the route is not unicast, or there is no route.
pub(crate) fn output_lookup(
    tables: &Tables,
    guard: &Guard,
    family: Family,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
) -> Result<Egress, Route> {
    match family {
        Family::V6 => output_lookup_in::<u128>(tables, guard, src, dst, tos, iif),
        Family::V4 => output_lookup_in::<u32>(tables, guard, src, dst, tos, iif),
    }
}

/// [`output_lookup`] in the FIB of the family whose key is `K`.
fn output_lookup_in<K: FamilyKey>(
    tables: &Tables,
    guard: &Guard,
    src: u128,
    dst: u128,
    tos: u8,
    iif: u32,
) -> Result<Egress, Route> {
    let fib = K::fib(tables);
    let flow = fib_flow(K::narrow(src), K::narrow(dst), tos, iif);
    let r = fib
        .lookup(&flow, guard)
        .map_err(|e| Route::Reject(e.into()))?;
    let keys = |_| addresses_only(src, dst);
    unicast_egress(&r, dst, fib.multipath_policy(), keys, K::widen, false)
}

/// The hash keys of a locally originated answer: its addresses (an endpoint's reply reuses
/// the addresses of what it answers; its ports are not known here).
fn addresses_only(src: u128, dst: u128) -> HashKeys {
    HashKeys {
        src,
        dst,
        proto: 0,
        sport: 0,
        dport: 0,
        flowlabel: 0,
    }
}

/// The decision of a route `r` the FIB chose for a packet to `dst`: a unicast route's next
/// hop (chosen among several by the family's multipath `policy` over what `keys` reads of the
/// packet), else the route type's verdict.
#[inline]
fn unicast_egress<K: TrieKey>(
    r: &FibResult<'_, K>,
    dst: u128,
    policy: MultipathPolicy,
    keys: impl FnOnce(HashFields) -> HashKeys,
    widen: impl Fn(Gateway<K>) -> (u128, Family),
    source_checked: bool,
) -> Result<Egress, Route> {
    match r.route_type() {
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
    let multipath = r.nexthops().len() > 1;
    // One next hop: the hash cannot change the choice.
    let hash = if multipath {
        match policy {
            MultipathPolicy::Fields(fields) => multipath::flow_hash(fields, &keys(fields)),
            MultipathPolicy::Kernel(_) => return Err(Route::Punt(PuntReason::MultipathHash)),
        }
    } else {
        0
    };
    let nh = match r.nexthops() {
        // One live next hop with a weight: every way of `select_path` (a resilient bucket,
        // the weighted choice) picks it, so the choice is skipped.
        [only] if only.is_alive() && only.weight > 0 => Some(only),
        _ => r.select_path(hash),
    };
    let Some(nh) = nh else {
        return Err(Route::Reject(Reject::NoRoute));
    };
    // A connected route: the destination is the neighbour, of the packet's family.
    let connected = (dst, Family::from_v6(K::BITS == 128));
    let (next_hop, next_hop_family) = nh.gateway.map_or(connected, widen);
    Ok(Egress {
        oif: nh.ifindex,
        next_hop,
        next_hop_family,
        multipath,
        route_mtu: r.alias.info.metrics.mtu(),
        source_checked,
    })
}

/// What the ingress device's switches say about a packet not for this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IngressCheck {
    /// Forward as the route says.
    Pass,
    /// The kernel's verdict instead of the route's.
    Refused(Route),
    /// Forward if the source passes reverse-path filtering.
    ValidateSource {
        /// Strict (`rp_filter` 1) rather than loose (2).
        strict: bool,
    },
}

/// How [`fib_answer`] learns the ingress device's switches and the reverse-path answers:
/// from the tables for every packet ([`TableSwitches`], the reference), or remembered per
/// device and per source for one generation of the tables (the vector pipeline's
/// [`IngressMemo`](crate::memo::IngressMemo)). Both give the answers of [`ingress_check`] and
/// [`source_valid`].
pub(crate) trait IngressSwitches {
    /// [`ingress_check`] for a packet of `family` arriving on `iif`.
    fn check(&mut self, family: Family, iif: u32) -> IngressCheck;
    /// [`source_valid`] for an IPv4 packet from `src` to `dst`.
    fn source_valid(
        &mut self,
        src: u128,
        dst: u128,
        dscp: u8,
        iif: u32,
        strict: bool,
    ) -> Option<bool>;
}

/// The switches asked from the tables for every packet.
pub(crate) struct TableSwitches<'t> {
    pub(crate) tables: &'t Tables,
    pub(crate) guard: &'t Guard,
}

impl IngressSwitches for TableSwitches<'_> {
    #[inline]
    fn check(&mut self, family: Family, iif: u32) -> IngressCheck {
        ingress_check(self.tables, self.guard, family, iif)
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
        source_valid(self.tables, self.guard, src, dst, dscp, iif, strict)
    }
}

/// The kernel's verdicts for a packet not for this host arriving on `iif`: with `forwarding`
/// off, IPv4 answers "host unreachable" whatever the route (`ip_route_input_slow`) and IPv6
/// drops (`ip6_forward`); with `rp_filter` on, the source is validated; switches not known
/// (yet): the kernel decides. A function of the device table alone (`tables.devconf`).
pub(crate) fn ingress_check(
    tables: &Tables,
    guard: &Guard,
    family: Family,
    iif: u32,
) -> IngressCheck {
    match tables.devconf.ingress(iif, family.is_v6(), guard) {
        Ingress::Forward => IngressCheck::Pass,
        Ingress::ForwardingOff => IngressCheck::Refused(match family {
            Family::V6 => Route::Drop(DropReason::ForwardingOff),
            Family::V4 => Route::Reject(Reject::Unreachable),
        }),
        Ingress::RpFilter { strict } => IngressCheck::ValidateSource { strict },
        Ingress::Unknown => IngressCheck::Refused(Route::Punt(PuntReason::IngressConf)),
    }
}

/// The verdict for an IPv4 destination without a route (or with a reject route) arriving on
/// `iif`, when the ingress device's switches change it: forwarding off makes every lookup
/// failure "host unreachable"; unknown switches leave it to the kernel.
fn refused_lookup(switches: &mut impl IngressSwitches, iif: u32) -> Option<Route> {
    match switches.check(Family::V4, iif) {
        IngressCheck::Refused(route) => Some(route),
        IngressCheck::Pass | IngressCheck::ValidateSource { .. } => None,
    }
}

/// Reverse-path filtering of an IPv4 source (`fib_validate_source`): the route back to `src`
/// (a lookup of `src` from `dst`) must be unicast and, when `strict`, use the ingress device
/// `iif` among its next hops. `None` when a "kernel decides" route or rule answers the route
/// back: what the kernel's own lookup finds there is not known, so the kernel must decide.
///
/// ```
/// use dataplane::route::source_valid;
/// use dataplane::Tables;
/// use fib_trie::{InsertFlags, NextHop, Route, RouteType};
/// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
///
/// let (sockets, mut w) = SockTable::new(TableConfig::default())?;
/// let ns = w.add_netns(NetnsConfig::default())?;
/// let (t, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, ns);
/// writers.fib4.insert(&Route::unicast(0x0a00_0000, 8, 254, vec![NextHop::new(None, 1)]), InsertFlags::ADD)?;
/// let g = crossbeam_epoch::pin();
/// assert_eq!(source_valid(&t, &g, 0x0a00_0005, 0x0808_0808, 0, 1, true), Some(true));
/// assert_eq!(source_valid(&t, &g, 0x0a00_0005, 0x0808_0808, 0, 2, true), Some(false), "strict: via 1");
/// assert_eq!(source_valid(&t, &g, 0x0a00_0005, 0x0808_0808, 0, 2, false), Some(true), "loose");
/// assert_eq!(source_valid(&t, &g, 0x0b00_0005, 0x0808_0808, 0, 1, false), Some(false), "no route back");
/// writers.fib4.insert(&Route::reject(0x0b00_0000, 8, 254, RouteType::Kernel), InsertFlags::ADD)?;
/// assert_eq!(source_valid(&t, &g, 0x0b00_0005, 0x0808_0808, 0, 1, false), None, "kernel decides");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn source_valid(
    tables: &Tables,
    guard: &Guard,
    src: u128,
    dst: u128,
    dscp: u8,
    iif: u32,
    strict: bool,
) -> Option<bool> {
    let flow = Flow {
        dst: src as u32,
        src: dst as u32,
        tos: dscp,
        iif: 0,
        oif: 0,
        mark: 0,
        scope: Scope::UNIVERSE,
    };
    match tables.fib4.lookup(&flow, guard) {
        Ok(r) if r.route_type() == RouteType::Unicast => {
            Some(!strict || r.nexthops().iter().any(|h| h.ifindex == iif))
        }
        Ok(r) if r.route_type() == RouteType::Kernel => None,
        _ => Some(false),
    }
}

/// What a route chose, for [`egress`] to complete.
#[derive(Clone, Copy, Debug)]
pub struct Egress {
    /// The egress interface.
    pub oif: u32,
    /// The gateway, or the destination on a connected route.
    pub next_hop: u128,
    /// The family of `next_hop` ([`Hop::next_hop_family`]).
    pub next_hop_family: Family,
    /// The route had several next hops.
    pub multipath: bool,
    /// The route's `mtu` metric, if set.
    pub route_mtu: Option<u32>,
    /// The source passed reverse-path filtering ([`Hop::source_checked`]).
    pub source_checked: bool,
}

/// The egress half of a decision: the link's MAC, the path MTU, and the neighbour's MAC if
/// usable (the neighbour of the next hop's family: ND for an IPv6 gateway of an IPv4 route).
pub fn egress(tables: &Tables, guard: &Guard, e: &Egress) -> Route {
    if let Some(punt) = unserved(tables, e.oif) {
        return punt;
    }
    complete(
        e,
        link_answer(tables, guard, e.next_hop_family, e.oif, e.next_hop),
    )
}

/// Out of an interface the pipeline does not serve ([`Tables::served`]): the kernel forwards
/// it.
#[inline]
pub fn unserved(tables: &Tables, oif: u32) -> Option<Route> {
    tables
        .served
        .as_ref()
        .is_some_and(|s| !s.contains(oif))
        .then_some(UNSERVED)
}

/// The decision for a route out of an interface the pipeline does not serve
/// ([`unserved`]).
pub(crate) const UNSERVED: Route = Route::Punt(PuntReason::UnservedEgress);

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
/// neighbour's usable MAC, or why the link cannot be used. `family` is the next hop's.
///
/// # Errors
/// [`DropReason::NoEgressLink`], [`DropReason::EgressDown`], [`DropReason::EgressNotEthernet`].
pub fn link_answer(
    tables: &Tables,
    guard: &Guard,
    family: Family,
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
    let dst_mac = neighbour_mac(tables, guard, oif, ip_of(family, next_hop));
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
        Ok(link) => Route::Forward(Hop::new(
            e.oif,
            e.next_hop,
            e.next_hop_family,
            link.src_mac,
            link.dst_mac,
            e.route_mtu.map_or(link.mtu, |m| m.min(link.mtu)),
            e.multipath,
            e.source_checked,
        )),
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
    let tos = meta.tos & DSCP_MASK;
    match meta.family {
        Family::V6 => FlowKey::v6(Ipv6Addr::from(meta.dst), tos, iif),
        Family::V4 => FlowKey::v4(Ipv4Addr::from(meta.dst as u32), tos, iif),
    }
}

/// An address of the pipeline's form as an `IpAddr` of `family`.
///
/// ```
/// use dataplane::{route::ip_of, wire::Family};
/// assert_eq!(ip_of(Family::V4, 0xc000_0201).to_string(), "192.0.2.1");
/// assert_eq!(ip_of(Family::V6, 1).to_string(), "::1");
/// ```
pub fn ip_of(family: Family, addr: u128) -> IpAddr {
    match family {
        Family::V6 => IpAddr::V6(Ipv6Addr::from(addr)),
        Family::V4 => IpAddr::V4(Ipv4Addr::from(addr as u32)),
    }
}
