//! Kernel messages to table entries: every `RTM_*` and `XFRM_MSG_*` message the mirror
//! subscribes to maps to one [`Mapped`] value, an [`Ignored`] reason for messages outside the
//! mirror's scope, or a [`MapError`]. The mapping is total and pure (no tables, no I/O), so it is
//! unit-tested without privileges.
#![forbid(unsafe_code)]

mod addr;
mod link;
mod neigh;
mod nexthop;
mod route;
mod rule;
mod xfrm;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use addr_table::IfAddr;
use fib_trie::{FibRule, Route};
use neigh_table::{Link, Neighbour};
use netlink_packet_route::RouteNetlinkMessage;
use policy_tree::{Direction, HThresh, Mark, PolicySpec, PolicyType, Selector};

use crate::error::MapError;

pub use addr::map_addr;
pub use link::map_link;
pub use neigh::map_neigh;
pub use nexthop::{NexthopSpec, map_nexthop};
pub use route::map_route;
pub use rule::map_rule;
pub use xfrm::map_xfrm;

/// How a route notification asks to be inserted: from the netlink flags of the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    /// A dump entry (no flags): add after the routes of the same key unless identical.
    Dump,
    /// `NLM_F_CREATE` without append or replace: added before the routes of the same key.
    Prepend,
    /// `NLM_F_APPEND`: added after the routes of the same key.
    Append,
    /// `NLM_F_REPLACE`: replaced the first route of the same key.
    Replace,
}

impl Upsert {
    /// The insert mode a message with netlink flags `flags` describes; `dump` for dump parts.
    pub fn from_nl_flags(flags: u16, dump: bool) -> Upsert {
        use netlink_packet_core::{NLM_F_APPEND, NLM_F_REPLACE};
        if dump {
            Upsert::Dump
        } else if flags & NLM_F_REPLACE != 0 {
            Upsert::Replace
        } else if flags & NLM_F_APPEND != 0 {
            Upsert::Append
        } else {
            Upsert::Prepend
        }
    }
}

/// An interface address of either family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrEntry {
    /// An IPv4 address.
    V4(IfAddr<Ipv4Addr>),
    /// An IPv6 address.
    V6(IfAddr<Ipv6Addr>),
}

impl AddrEntry {
    /// The interface.
    pub fn ifindex(&self) -> u32 {
        match self {
            AddrEntry::V4(a) => a.ifindex,
            AddrEntry::V6(a) => a.ifindex,
        }
    }
    /// The address.
    pub fn addr(&self) -> IpAddr {
        match self {
            AddrEntry::V4(a) => IpAddr::V4(a.addr),
            AddrEntry::V6(a) => IpAddr::V6(a.addr),
        }
    }
    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        match self {
            AddrEntry::V4(a) => a.prefix_len,
            AddrEntry::V6(a) => a.prefix_len,
        }
    }
}

/// A policy rule as the kernel reports it: the FIB's rule plus the interface names that
/// select on (`iif NAME`, `oif NAME`), resolved to indexes against the link table when
/// applied (a name with no interface never matches, as in the kernel).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleEntry<K> {
    /// The rule; `iif`/`oif` are filled in from the names when applied.
    pub rule: FibRule<K>,
    /// `FRA_IIFNAME`.
    pub iifname: Option<String>,
    /// `FRA_OIFNAME`.
    pub oifname: Option<String>,
    /// For a rule the FIB cannot represent, whose `rule` is then its "kernel decides"
    /// stand-in ([`fib_trie::RuleAction::Kernel`]): why, and the kernel rule itself.
    pub kernel: Option<KernelRule>,
}

/// A kernel rule the FIB cannot represent, behind a "kernel decides" stand-in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelRule {
    /// The first thing the FIB does not model, as the kind the stats count it by
    /// (`rule-dport`, `rule-uidrange`, `rule-l3mdev`, `rule-suppress-prefixlength`,
    /// `rule-action`, ...).
    pub reason: &'static str,
    /// The whole message as decoded (header and attributes): the kernel rule's identity, so
    /// that two rules sharing a stand-in are kept (and deleted) apart.
    pub message: String,
}

/// The identity of an xfrm policy: what the kernel compares on update and delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PolicyKey {
    /// The selector.
    pub selector: Selector,
    /// The direction.
    pub dir: Direction,
    /// Main or sub.
    pub ptype: PolicyType,
    /// The xfrm interface id.
    pub if_id: u32,
    /// The mark.
    pub mark: Mark,
}

/// What one kernel message means for the tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapped {
    /// `RTM_NEWLINK`: the interface exists with these properties.
    Link(Link),
    /// `RTM_DELLINK`: the interface is gone.
    LinkGone(u32),
    /// `RTM_NEWADDR`.
    Addr(AddrEntry),
    /// `RTM_DELADDR`.
    AddrGone(AddrEntry),
    /// `RTM_NEWROUTE`, IPv4.
    Route4(Route<u32>, Upsert),
    /// `RTM_DELROUTE`, IPv4.
    Route4Gone(Route<u32>),
    /// `RTM_NEWROUTE`, IPv6.
    Route6(Route<u128>, Upsert),
    /// `RTM_DELROUTE`, IPv6.
    Route6Gone(Route<u128>),
    /// `RTM_NEWNEIGH`.
    Neigh(Neighbour),
    /// `RTM_DELNEIGH`.
    NeighGone {
        /// The interface.
        ifindex: u32,
        /// The neighbour's address.
        addr: IpAddr,
    },
    /// `RTM_NEWRULE`, IPv4.
    Rule4(RuleEntry<u32>),
    /// `RTM_DELRULE`, IPv4.
    Rule4Gone(RuleEntry<u32>),
    /// `RTM_NEWRULE`, IPv6.
    Rule6(RuleEntry<u128>),
    /// `RTM_DELRULE`, IPv6.
    Rule6Gone(RuleEntry<u128>),
    /// `XFRM_MSG_NEWPOLICY` / `XFRM_MSG_UPDPOLICY`.
    Policy(PolicySpec),
    /// `XFRM_MSG_DELPOLICY` naming the policy by its identity.
    PolicyGone(PolicyKey),
    /// `XFRM_MSG_DELPOLICY` naming the policy by its index (every kernel notification does).
    PolicyIndexGone(u32),
    /// `XFRM_MSG_NEWSPDINFO`: the hash thresholds.
    PolicyHThresh(HThresh),
    /// `XFRM_MSG_GETDEFAULT`: whether the default policy blocks, for in, out and fwd.
    PolicyDefaults([bool; 3]),
    /// `XFRM_MSG_FLUSHPOLICY`.
    PolicyFlush(PolicyType),
    /// `RTM_NEWROUTE` (`Some`) or `RTM_DELROUTE` (`None`) of an IPv4 route the FIB cannot
    /// represent: its "kernel decides" stand-in.
    Kernel4(KernelRoute<u32>, Option<Upsert>),
    /// The same for IPv6.
    Kernel6(KernelRoute<u128>, Option<Upsert>),
    /// `RTM_NEWNEXTHOP`: the nexthop object of this id is (now) this.
    Nexthop(u32, NexthopSpec),
    /// `RTM_DELNEXTHOP`.
    NexthopGone(u32),
    /// `RTM_NEWNETCONF`: what changed in the switches of a device (or `all`, `default`) of a
    /// family (IPv6 when `true`).
    Netconf(bool, i32, neigh_table::DevConf),
    /// `RTM_DELNETCONF`: the device is gone.
    NetconfGone(i32),
    /// A message outside what the mirror keeps (see [`Ignored`]).
    Ignored(Ignored),
}

/// A "kernel decides" stand-in for a kernel route the FIB cannot represent: a
/// [`RouteType::Kernel`](fib_trie::RouteType::Kernel) route over the same prefix, in the same
/// table, that sends matching packets to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRoute<K> {
    /// The stand-in route.
    pub route: Route<K>,
    /// Why the kernel's route cannot be represented (`encap`, `source-specific`,
    /// `route-type`, `route-attribute`, `gateway-family`).
    pub reason: &'static str,
    /// A digest of the kernel's route: several kernel routes (sources of one destination) may
    /// share one stand-in, which stays while any of them does.
    pub origin: u64,
}

/// Messages the mirror deliberately leaves out, counted by reason: they describe state that
/// is not part of forwarding (route cache clones, bridge FDB, MPLS), not changes it failed to
/// represent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// A message type the mirror does not subscribe to (tc, nsid, netconf, ...).
    MessageType,
    /// An address family other than IPv4/IPv6 (bridge, MPLS, ...), or a per-family link
    /// message (`AF_BRIDGE` port notifications).
    Family,
    /// A cloned route (`RTM_F_CLONED`: the route cache / exceptions).
    ClonedRoute,
    /// A proxy neighbour entry (`NTF_PROXY`).
    ProxyNeigh,
    /// A neighbour entry for a multicast address: the kernel makes these on demand without
    /// notifying, and the MAC follows from the address (RFC 1112, RFC 2464).
    MulticastNeigh,
    /// An xfrm message about states (SAs) or events, not policies.
    XfrmNonPolicy,
    /// A bridge FDB nexthop (`ip nexthop add ... fdb`, for VXLAN): routes cannot use it.
    FdbNexthop,
}

impl Ignored {
    /// A short stable name for counting.
    pub fn name(self) -> &'static str {
        match self {
            Ignored::MessageType => "message-type",
            Ignored::Family => "family",
            Ignored::ClonedRoute => "cloned-route",
            Ignored::ProxyNeigh => "proxy-neigh",
            Ignored::MulticastNeigh => "multicast-neigh",
            Ignored::XfrmNonPolicy => "xfrm-non-policy",
            Ignored::FdbNexthop => "fdb-nexthop",
        }
    }
}

/// Maps one `NETLINK_ROUTE` message; `nl_flags` are the netlink header flags and `dump` says
/// whether it is part of a dump (which carries no insert flags).
///
/// # Errors
/// The [`MapError`] describing what could not be represented.
pub fn map_rtnl(msg: &RouteNetlinkMessage, nl_flags: u16, dump: bool) -> Result<Mapped, MapError> {
    use RouteNetlinkMessage as M;
    match msg {
        M::NewLink(m) => map_link(m, true),
        M::DelLink(m) => map_link(m, false),
        M::NewAddress(m) => map_addr(m, true),
        M::DelAddress(m) => map_addr(m, false),
        M::NewRoute(m) => map_route(m, Some(Upsert::from_nl_flags(nl_flags, dump))),
        M::DelRoute(m) => map_route(m, None),
        M::NewNeighbour(m) => map_neigh(m, true),
        M::DelNeighbour(m) => map_neigh(m, false),
        M::NewRule(m) => map_rule(m, true),
        M::DelRule(m) => map_rule(m, false),
        _ => Ok(Mapped::Ignored(Ignored::MessageType)),
    }
}

/// Maps one message of the route socket: [`map_rtnl`] for what netlink-packet-route decodes,
/// [`map_nexthop`] for nexthop objects.
///
/// # Errors
/// The [`MapError`] describing what could not be represented.
pub fn map_route_socket(
    msg: &crate::nl_nexthop::RtnlMessage,
    nl_flags: u16,
    dump: bool,
) -> Result<Mapped, MapError> {
    use crate::nl_nexthop::RtnlMessage as M;
    match msg {
        M::Route(m) => map_rtnl(m, nl_flags, dump),
        M::NewNexthop(m) => map_nexthop(m, true),
        M::DelNexthop(m) => map_nexthop(m, false),
        M::GetNexthop(_) | M::GetNetconf(_) => Ok(Mapped::Ignored(Ignored::MessageType)),
        M::NewNetconf(m) | M::DelNetconf(m) => map_netconf(m, matches!(msg, M::NewNetconf(_))),
    }
}

/// Maps a netconf message: `new` for `RTM_NEWNETCONF`, else `RTM_DELNETCONF`.
///
/// ```
/// use netlink_mirror::map::{map_netconf, Mapped};
/// use netlink_mirror::nl_netconf::{NetconfAttribute as A, NetconfMessage};
///
/// let m = NetconfMessage { family: libc::AF_INET as u8, attributes: vec![A::Ifindex(3), A::Forwarding(0)] };
/// let Ok(Mapped::Netconf(false, 3, conf)) = map_netconf(&m, true) else { panic!() };
/// assert_eq!((conf.forwarding, conf.rp_filter), (Some(false), None));
/// ```
///
/// # Errors
/// [`MapError::Missing`] without `NETCONFA_IFINDEX`.
pub fn map_netconf(msg: &crate::nl_netconf::NetconfMessage, new: bool) -> Result<Mapped, MapError> {
    use crate::nl_netconf::NetconfAttribute as A;
    let v6 = match msg.family {
        f if f == libc::AF_INET as u8 => false,
        f if f == libc::AF_INET6 as u8 => true,
        // MPLS and others: not about IP forwarding.
        _ => return Ok(Mapped::Ignored(Ignored::Family)),
    };
    let mut ifindex = None;
    let mut conf = neigh_table::DevConf::default();
    for a in &msg.attributes {
        match a {
            A::Ifindex(i) => ifindex = Some(*i),
            A::Forwarding(f) => conf.forwarding = Some(*f != 0),
            A::RpFilter(r) => conf.rp_filter = Some(u8::try_from(*r).unwrap_or(u8::MAX)),
            A::Other(_) => {}
        }
    }
    let ifindex = ifindex.ok_or(MapError::Missing {
        message: "netconf",
        attribute: "NETCONFA_IFINDEX",
    })?;
    Ok(if new {
        Mapped::Netconf(v6, ifindex, conf)
    } else {
        Mapped::NetconfGone(ifindex)
    })
}

/// An [`IpAddr`] of the family the key type names, or a family error.
pub(crate) fn key_of<K: crate::key::IpKey>(
    ip: IpAddr,
    message: &'static str,
) -> Result<K, MapError> {
    K::from_ip(ip).ok_or_else(|| MapError::Family {
        message,
        detail: format!("{ip} in an {} message", K::NAME),
    })
}
