//! What a route is: the kernel's `fib_alias` (per prefix: table, tos, type) and `fib_info`
//! (shared: protocol, scope, metric, preferred source, next hops), and the request types.
#![forbid(unsafe_code)]

use std::sync::Arc;

use crossbeam_epoch::Guard;

use crate::guard::check_guard;
use crate::key::TrieKey;
use crate::metrics::Metrics;
use crate::nexthop::NexthopObject;

/// The route types of `rtm_type` that a FIB holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteType {
    /// A gateway or direct route (`RTN_UNICAST`).
    Unicast,
    /// A local address: deliver to this host (`RTN_LOCAL`).
    Local,
    /// A broadcast address: deliver and send as broadcast (`RTN_BROADCAST`).
    Broadcast,
    /// A local anycast address (`RTN_ANYCAST`).
    Anycast,
    /// A multicast route (`RTN_MULTICAST`).
    Multicast,
    /// Silently discard (`RTN_BLACKHOLE`, lookups fail with `EINVAL`).
    Blackhole,
    /// Refuse with "host unreachable" (`RTN_UNREACHABLE`, `EHOSTUNREACH`).
    Unreachable,
    /// Refuse with "administratively prohibited" (`RTN_PROHIBIT`, `EACCES`).
    Prohibit,
    /// Not in this table: policy routing continues with the next rule (`RTN_THROW`).
    Throw,
    /// Kernel decides: a route the FIB cannot represent (an encapsulation, a source-specific
    /// route, an unknown type or attribute) stands in for it over exactly its prefix; packets
    /// matching it are handed to the kernel, which routes them. No Linux counterpart.
    Kernel,
}

impl RouteType {
    /// Whether routes of this type carry next hops (the reject types and `throw` do not).
    pub fn has_next_hops(self) -> bool {
        matches!(
            self,
            RouteType::Unicast
                | RouteType::Local
                | RouteType::Broadcast
                | RouteType::Anycast
                | RouteType::Multicast
        )
    }
}

/// A route scope (`rtm_scope`): how far the destination is. Lookups skip routes whose scope is
/// narrower than (numerically below) the flow's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope(pub u8);

impl Scope {
    /// Anywhere (`RT_SCOPE_UNIVERSE`), the default of gateway routes.
    pub const UNIVERSE: Scope = Scope(0);
    /// Inside the site (`RT_SCOPE_SITE`).
    pub const SITE: Scope = Scope(200);
    /// On an attached link (`RT_SCOPE_LINK`).
    pub const LINK: Scope = Scope(253);
    /// On this host (`RT_SCOPE_HOST`), the scope of local routes.
    pub const HOST: Scope = Scope(254);
    /// Nowhere (`RT_SCOPE_NOWHERE`).
    pub const NOWHERE: Scope = Scope(255);
}

/// Next-hop flags (`RTNH_F_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NextHopFlags(pub u32);

impl NextHopFlags {
    /// The next hop is dead (`RTNH_F_DEAD`): lookups skip it.
    pub const DEAD: NextHopFlags = NextHopFlags(1);
    /// The gateway is on-link even if no prefix says so (`RTNH_F_ONLINK`).
    pub const ONLINK: NextHopFlags = NextHopFlags(4);
    /// The carrier is down (`RTNH_F_LINKDOWN`).
    pub const LINKDOWN: NextHopFlags = NextHopFlags(16);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: NextHopFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A next hop's gateway (`fib_nh_common`'s `nhc_gw_family` and `nhc_gw`): an address of the
/// route's own family, or an IPv6 address on an IPv4 route (RFC 8950, the kernel since 5.2:
/// `ip route add 10.0.0.0/8 via inet6 fe80::1 dev eth0`, how BGP unnumbered installs IPv4
/// routes).
///
/// The gateway's family is the family of the neighbour a forwarded packet is sent to: ARP for
/// an IPv4 gateway, ND for an IPv6 one, on the next hop's interface.
///
/// ```
/// use fib_trie::{Gateway, NextHop};
///
/// let ll = u128::from("fe80::1".parse::<std::net::Ipv6Addr>().unwrap());
/// let hop = NextHop::<u32>::via_inet6(ll, 3);
/// assert_eq!(hop.gateway, Some(Gateway::Inet6(ll)));
/// assert_eq!(hop.gateway.and_then(Gateway::same), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gateway<K> {
    /// An address of the route's family (`RTA_GATEWAY`, or `RTA_VIA` of the route's family).
    Same(K),
    /// An IPv6 address on an IPv4 route (`RTA_VIA` with `AF_INET6`, `via inet6 ADDR`). IPv6
    /// routes always carry [`Gateway::Same`] (the kernel refuses IPv4 gateways on them).
    Inet6(u128),
}

impl<K> Gateway<K> {
    /// The address when it is of the route's family.
    ///
    /// ```
    /// use fib_trie::Gateway;
    ///
    /// assert_eq!(Gateway::Same(7u32).same(), Some(7));
    /// assert_eq!(Gateway::<u32>::Inet6(7).same(), None);
    /// ```
    pub fn same(self) -> Option<K> {
        match self {
            Gateway::Same(k) => Some(k),
            Gateway::Inet6(_) => None,
        }
    }
}

/// One next hop (`fib_nh`): where to send, out of which interface, with which multipath weight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NextHop<K> {
    /// The gateway; `None` for a directly connected destination.
    pub gateway: Option<Gateway<K>>,
    /// The output interface index (0: unknown).
    pub ifindex: u32,
    /// The multipath weight, at least 1 (`rtnh_hops + 1`).
    pub weight: u16,
    /// `RTNH_F_*` flags.
    pub flags: NextHopFlags,
}

impl<K> NextHop<K> {
    /// A next hop via `gateway` (if any, of the route's family) out of `ifindex`, weight 1, no
    /// flags.
    ///
    /// ```
    /// use fib_trie::{Gateway, NextHop};
    ///
    /// assert_eq!(NextHop::new(Some(1u32), 2).gateway, Some(Gateway::Same(1)));
    /// ```
    pub fn new(gateway: Option<K>, ifindex: u32) -> Self {
        NextHop {
            gateway: gateway.map(Gateway::Same),
            ifindex,
            weight: 1,
            flags: NextHopFlags::default(),
        }
    }

    /// A next hop of an IPv4 route via an IPv6 gateway (`via inet6 ADDR`) out of `ifindex`,
    /// weight 1, no flags.
    ///
    /// ```
    /// use fib_trie::{Gateway, NextHop};
    ///
    /// assert_eq!(NextHop::<u32>::via_inet6(1, 2).gateway, Some(Gateway::Inet6(1)));
    /// ```
    pub fn via_inet6(gateway: u128, ifindex: u32) -> Self {
        NextHop {
            gateway: Some(Gateway::Inet6(gateway)),
            ifindex,
            weight: 1,
            flags: NextHopFlags::default(),
        }
    }

    /// The gateway when it is of the route's family.
    ///
    /// ```
    /// use fib_trie::NextHop;
    ///
    /// assert_eq!(NextHop::new(Some(1u32), 2).gateway_same(), Some(1));
    /// assert_eq!(NextHop::<u32>::via_inet6(1, 2).gateway_same(), None);
    /// ```
    pub fn gateway_same(&self) -> Option<K>
    where
        K: Copy,
    {
        self.gateway.and_then(Gateway::same)
    }

    /// Whether a lookup may use this next hop.
    pub fn is_alive(&self) -> bool {
        !self.flags.contains(NextHopFlags::DEAD)
    }
}

/// The shared part of a route (`fib_info`): equal infos are stored once and shared by every
/// alias that uses them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RouteInfo<K> {
    /// Who installed the route (`rtm_protocol`: 2 kernel, 3 boot, 4 static, 186 bgp, ...).
    pub protocol: u8,
    /// The route scope.
    pub scope: Scope,
    /// The metric (`RTA_PRIORITY`): lower wins among routes of one prefix and tos.
    pub priority: u32,
    /// The preferred source address (`RTA_PREFSRC`).
    pub prefsrc: Option<K>,
    /// The next hops; more than one makes a multipath route.
    pub nexthops: Vec<NextHop<K>>,
    /// The route's metrics (`RTA_METRICS`): path MTU and TCP parameters.
    pub metrics: Metrics,
    /// The nexthop object the route uses (`RTA_NH_ID`), whose current group stands in for
    /// `nexthops` (then empty) at every lookup.
    pub nh_object: Option<Arc<NexthopObject<K>>>,
}

/// What a route's next hops are at the moment of a lookup: its own, or its nexthop object's
/// current group.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved<'g, K> {
    /// The type the route behaves as: its own, or `Blackhole`/`Kernel` for a nexthop object
    /// that is a blackhole or cannot be represented.
    pub route_type: RouteType,
    /// The next hops.
    pub nexthops: &'g [NextHop<K>],
    /// A resilient group's bucket table (index into `nexthops` per bucket); else empty.
    pub buckets: &'g [u16],
}

impl<K> Clone for Resolved<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Resolved<'_, K> {}

impl<K> FibAlias<K> {
    /// The route's next hops and behaviour now, read under `guard` (one atomic load for a
    /// route through a nexthop object).
    ///
    /// ```
    /// use fib_trie::{FibAlias, NextHop, Route, RouteType};
    ///
    /// let r = Route::<u32>::unicast(0, 0, 254, vec![NextHop::new(Some(1), 2)]);
    /// let alias = FibAlias { table: 254, tos: 0, route_type: r.route_type, info: r.info.into() };
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(alias.resolve(&guard).route_type, RouteType::Unicast);
    /// ```
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn resolve<'g>(&'g self, guard: &'g Guard) -> Resolved<'g, K> {
        check_guard(guard);
        self.resolve_pinned(guard)
    }

    /// [`resolve`](Self::resolve) under a guard the caller already checked.
    #[inline(always)]
    pub(crate) fn resolve_pinned<'g>(&'g self, guard: &'g Guard) -> Resolved<'g, K> {
        match &self.info.nh_object {
            // A reject or throw route keeps its type whatever its object (`fib_table_lookup`
            // checks the type first).
            Some(obj) if self.route_type == RouteType::Unicast => {
                let group = obj.load_pinned(guard);
                Resolved {
                    route_type: group.route_type(),
                    nexthops: group.nexthops(),
                    buckets: group.buckets(),
                }
            }
            _ => Resolved {
                route_type: self.route_type,
                nexthops: &self.info.nexthops,
                buckets: &[],
            },
        }
    }
}

/// One route of a prefix as a leaf stores it (`fib_alias`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FibAlias<K> {
    /// The table the route belongs to.
    pub table: u32,
    /// The TOS/DSCP selector; 0 matches any.
    pub tos: u8,
    /// The route type.
    pub route_type: RouteType,
    /// The shared route information.
    pub info: Arc<RouteInfo<K>>,
}

/// A route to add: prefix, table, selectors, type and information.
///
/// ```
/// use fib_trie::{NextHop, Route, RouteType};
///
/// let r = Route::<u32>::unicast(0x0a00_0000, 8, 254, vec![NextHop::new(Some(0xc0a8_0001), 2)]);
/// assert_eq!((r.plen, r.route_type), (8, RouteType::Unicast));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route<K> {
    /// The network address (host bits zero).
    pub prefix: K,
    /// The prefix length.
    pub plen: u8,
    /// The table id (255 local, 254 main, 253 default, any other).
    pub table: u32,
    /// The TOS/DSCP selector; 0 matches any.
    pub tos: u8,
    /// The route type.
    pub route_type: RouteType,
    /// Protocol, scope, metric, preferred source and next hops.
    pub info: RouteInfo<K>,
}

impl<K: TrieKey> Route<K> {
    /// A unicast route with these next hops, scope universe, metric 0, protocol static (4).
    pub fn unicast(prefix: K, plen: u8, table: u32, nexthops: Vec<NextHop<K>>) -> Self {
        Route {
            prefix,
            plen,
            table,
            tos: 0,
            route_type: RouteType::Unicast,
            info: RouteInfo {
                protocol: 4,
                nexthops,
                ..RouteInfo::default()
            },
        }
    }

    /// A route of a type without next hops (blackhole, unreachable, prohibit, throw).
    pub fn reject(prefix: K, plen: u8, table: u32, route_type: RouteType) -> Self {
        Route {
            prefix,
            plen,
            table,
            tos: 0,
            route_type,
            info: RouteInfo {
                protocol: 4,
                ..RouteInfo::default()
            },
        }
    }

    /// A unicast route through nexthop object `object` (`ip route add PREFIX nhid N`).
    pub fn via_object(prefix: K, plen: u8, table: u32, object: Arc<NexthopObject<K>>) -> Self {
        Route {
            prefix,
            plen,
            table,
            tos: 0,
            route_type: RouteType::Unicast,
            info: RouteInfo {
                protocol: 4,
                nh_object: Some(object),
                ..RouteInfo::default()
            },
        }
    }

    /// The same route with metric `priority`.
    pub fn with_priority(mut self, priority: u32) -> Self {
        self.info.priority = priority;
        self
    }

    /// The same route with path MTU `mtu` (the `RTAX_MTU` metric; 0 unsets it).
    pub fn with_mtu(mut self, mtu: u32) -> Self {
        self.info.metrics.set(Metrics::MTU, mtu);
        self
    }

    /// The same route with TOS selector `tos`.
    pub fn with_tos(mut self, tos: u8) -> Self {
        self.tos = tos;
        self
    }
}

/// How an insert treats an existing route of the same prefix, tos and metric: the netlink flags
/// `NLM_F_CREATE`, `NLM_F_EXCL`, `NLM_F_REPLACE`, `NLM_F_APPEND`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsertFlags {
    /// Create the route if no route of that key exists.
    pub create: bool,
    /// Fail with [`RouteError::Exists`] if one exists.
    pub excl: bool,
    /// Replace the first existing route of that key.
    pub replace: bool,
    /// Add after the existing routes of that key (instead of before).
    pub append: bool,
}

impl InsertFlags {
    /// `ip route add`: create, fail if the key exists.
    pub const ADD: InsertFlags = InsertFlags {
        create: true,
        excl: true,
        replace: false,
        append: false,
    };
    /// `ip route replace`: replace or create.
    pub const REPLACE: InsertFlags = InsertFlags {
        create: true,
        excl: false,
        replace: true,
        append: false,
    };
    /// `ip route append`: add after existing routes of the key.
    pub const APPEND: InsertFlags = InsertFlags {
        create: true,
        excl: false,
        replace: false,
        append: true,
    };
    /// `ip route prepend`: add before existing routes of the key.
    pub const PREPEND: InsertFlags = InsertFlags {
        create: true,
        excl: false,
        replace: false,
        append: false,
    };
    /// `ip route change`: replace, fail if there is nothing to replace.
    pub const CHANGE: InsertFlags = InsertFlags {
        create: false,
        excl: false,
        replace: true,
        append: false,
    };
}

/// Which route a delete removes: the prefix, table and tos must match; every field that is
/// `Some` must match too (like `ip route del` with optional attributes). The first match goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSelector<K> {
    /// The network address.
    pub prefix: K,
    /// The prefix length.
    pub plen: u8,
    /// The table id.
    pub table: u32,
    /// The TOS selector (exact).
    pub tos: u8,
    /// The route type.
    pub route_type: Option<RouteType>,
    /// The metric.
    pub priority: Option<u32>,
    /// The protocol.
    pub protocol: Option<u8>,
    /// The scope.
    pub scope: Option<Scope>,
    /// The preferred source.
    pub prefsrc: Option<K>,
    /// The next hops, compared by gateway and interface, in order.
    pub nexthops: Option<Vec<NextHop<K>>>,
    /// The nexthop object's id (`nhid N`); `Some(None)` selects routes without one.
    pub nh_id: Option<Option<u32>>,
}

impl<K: TrieKey> RouteSelector<K> {
    /// Selects the first route of `prefix/plen` in `table` with tos 0.
    pub fn new(prefix: K, plen: u8, table: u32) -> Self {
        RouteSelector {
            prefix,
            plen,
            table,
            tos: 0,
            route_type: None,
            priority: None,
            protocol: None,
            scope: None,
            prefsrc: None,
            nexthops: None,
            nh_id: None,
        }
    }

    /// Selects exactly the route `route` describes (every field).
    pub fn exact(route: &Route<K>) -> Self {
        RouteSelector {
            prefix: route.prefix,
            plen: route.plen,
            table: route.table,
            tos: route.tos,
            route_type: Some(route.route_type),
            priority: Some(route.info.priority),
            protocol: Some(route.info.protocol),
            scope: Some(route.info.scope),
            prefsrc: route.info.prefsrc,
            nexthops: Some(route.info.nexthops.clone()),
            nh_id: Some(route.info.nh_object.as_ref().map(|o| o.id())),
        }
    }

    /// Whether `alias` (of this selector's prefix, table and tos) is selected.
    pub fn matches(&self, alias: &FibAlias<K>) -> bool {
        let info = &alias.info;
        self.route_type.is_none_or(|t| t == alias.route_type)
            && self.priority.is_none_or(|p| p == info.priority)
            && self.protocol.is_none_or(|p| p == info.protocol)
            && self.scope.is_none_or(|s| s == info.scope)
            && self.prefsrc.is_none_or(|s| Some(s) == info.prefsrc)
            && self
                .nh_id
                .is_none_or(|id| id == info.nh_object.as_ref().map(|o| o.id()))
            && self.nexthops.as_ref().is_none_or(|want| {
                want.len() == info.nexthops.len()
                    && want
                        .iter()
                        .zip(&info.nexthops)
                        .all(|(w, h)| w.gateway == h.gateway && w.ifindex == h.ifindex)
            })
    }
}

/// Why a route change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The prefix is not canonical or too long.
    #[error(transparent)]
    Prefix(#[from] crate::trie::PrefixError),
    /// A route with that key exists and the flags forbid touching it (`EEXIST`).
    #[error("route exists")]
    Exists,
    /// Nothing to replace and no `create` flag (`ENOENT`), or nothing to delete (`ESRCH`).
    #[error("no such route")]
    NotFound,
    /// A unicast-like route without next hops.
    #[error("a {0:?} route needs at least one next hop")]
    MissingNextHop(RouteType),
    /// A reject or throw route with next hops.
    #[error("a {0:?} route takes no next hops")]
    UnexpectedNextHop(RouteType),
    /// A next hop of weight 0.
    #[error("next-hop weight must be at least 1")]
    ZeroWeight,
    /// A route through a nexthop object that has next hops of its own, or is of a type with
    /// next hops other than unicast.
    #[error(
        "a route through a nexthop object must be unicast (or a reject type) without next hops of its own"
    )]
    ObjectMisuse,
}

impl<K: TrieKey> Route<K> {
    /// Checks the prefix and the next hops against the route type.
    ///
    /// # Errors
    /// The [`RouteError`] describing the first problem found.
    pub fn validate(&self) -> Result<u8, RouteError> {
        let slen = crate::trie::check_prefix(self.prefix, self.plen)?;
        let hops = &self.info.nexthops;
        if self.info.nh_object.is_some() {
            let reject = !self.route_type.has_next_hops();
            if !(reject || self.route_type == RouteType::Unicast) || !hops.is_empty() {
                return Err(RouteError::ObjectMisuse);
            }
            return Ok(slen);
        }
        if self.route_type.has_next_hops() && hops.is_empty() {
            return Err(RouteError::MissingNextHop(self.route_type));
        }
        if !self.route_type.has_next_hops() && !hops.is_empty() {
            return Err(RouteError::UnexpectedNextHop(self.route_type));
        }
        if hops.iter().any(|h| h.weight == 0) {
            return Err(RouteError::ZeroWeight);
        }
        Ok(slen)
    }
}
