//! `RTM_NEWROUTE` / `RTM_DELROUTE` to fib-trie routes.
#![forbid(unsafe_code)]

use std::sync::Arc;

use fib_trie::{
    Gateway, Metrics, NextHop, NextHopFlags, NexthopGroup, NexthopObject, Route, RouteInfo,
    RouteType, Scope,
};
use netlink_packet_core::Nla;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteMetric, RouteNextHop,
    RouteType as NlType, RouteVia,
};

use super::{Ignored, KernelRoute, Mapped, Upsert, key_of};
use crate::error::MapError;
use crate::key::IpKey;

const MESSAGE: &str = "route";

/// Maps a route message: `upsert` is `Some` for `RTM_NEWROUTE`, `None` for `RTM_DELROUTE`.
///
/// # Errors
/// Addresses of the wrong family (other than a gateway) and routes the FIB would refuse.
/// IPv4 routes through IPv6 gateways (`RTA_VIA`, RFC 8950) map to next hops with a
/// [`Gateway::Inet6`].
///
/// A route the FIB cannot represent but the kernel routes by (an encapsulation, a
/// source-specific route, an unknown type or attribute, an IPv4 gateway on an IPv6 route) maps to
/// its "kernel decides" stand-in, [`Mapped::Kernel4`] / [`Mapped::Kernel6`].
pub fn map_route(msg: &RouteMessage, upsert: Option<Upsert>) -> Result<Mapped, MapError> {
    if msg.header.flags.contains(RouteFlags::Cloned) {
        return Ok(Mapped::Ignored(Ignored::ClonedRoute));
    }
    match msg.header.address_family {
        AddressFamily::Inet => match route_of::<u32>(msg) {
            Ok(r) => Ok(match upsert {
                Some(u) => Mapped::Route4(r, u),
                None => Mapped::Route4Gone(r),
            }),
            Err(e) => Ok(Mapped::Kernel4(kernel_route(msg, &e)?, upsert)),
        },
        AddressFamily::Inet6 => match route_of::<u128>(msg) {
            Ok(r) => Ok(match upsert {
                Some(u) => Mapped::Route6(r, u),
                None => Mapped::Route6Gone(r),
            }),
            Err(e) => Ok(Mapped::Kernel6(kernel_route(msg, &e)?, upsert)),
        },
        _ => Ok(Mapped::Ignored(Ignored::Family)),
    }
}

/// The "kernel decides" stand-in of a route `route_of` refused with `why`: a
/// [`RouteType::Kernel`] route over exactly its destination prefix, in its table, with its tos
/// and metric, or `why` itself when it is not about what the route means.
///
/// A source-specific route gets metric 0: the kernel matches the source before comparing
/// metrics with the routes of the same destination that have no source (`fib6` keeps them
/// in a subtree of the destination's node), so no route of that prefix may win over it here.
fn kernel_route<K: IpKey>(msg: &RouteMessage, why: &MapError) -> Result<KernelRoute<K>, MapError> {
    let Some(reason) = why.kernel_decides() else {
        return Err(why.clone());
    };
    let h = &msg.header;
    let mut prefix = K::ZERO;
    let mut table = u32::from(h.table);
    let mut priority = 0;
    let mut source = None;
    for a in &msg.attributes {
        match a {
            RouteAttribute::Destination(d) => prefix = address(d)?,
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Priority(p) => priority = *p,
            RouteAttribute::Source(s) => source = Some(format!("{s:?}")),
            _ => {}
        }
    }
    if h.source_prefix_length != 0 || source.is_some() {
        priority = 0;
    }
    // What tells this kernel route from others of the same stand-in: everything the message
    // says but what changes on its own (cache info, expiry).
    let origin = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        let mut header = h.clone();
        header.flags = RouteFlags::empty();
        format!("{header:?}").hash(&mut hasher);
        for a in &msg.attributes {
            if !matches!(
                a,
                RouteAttribute::CacheInfo(_)
                    | RouteAttribute::Expires(_)
                    | RouteAttribute::MulticastExpires(_)
            ) {
                format!("{a:?}").hash(&mut hasher);
            }
        }
        hasher.finish()
    };
    let route = Route {
        prefix,
        plen: h.destination_prefix_length,
        table,
        tos: h.tos,
        route_type: RouteType::Kernel,
        info: RouteInfo {
            protocol: u8::from(h.protocol),
            scope: Scope(u8::from(h.scope)),
            priority,
            ..RouteInfo::default()
        },
    };
    route.validate()?;
    Ok(KernelRoute {
        route,
        reason,
        origin,
    })
}

fn route_type(t: NlType) -> Result<RouteType, MapError> {
    Ok(match t {
        NlType::Unicast => RouteType::Unicast,
        NlType::Local => RouteType::Local,
        NlType::Broadcast => RouteType::Broadcast,
        NlType::Anycast => RouteType::Anycast,
        NlType::Multicast => RouteType::Multicast,
        NlType::BlackHole => RouteType::Blackhole,
        NlType::Unreachable => RouteType::Unreachable,
        NlType::Prohibit => RouteType::Prohibit,
        NlType::Throw => RouteType::Throw,
        other => return Err(MapError::RouteType(u8::from(other))),
    })
}

fn address<K: IpKey>(a: &RouteAddress) -> Result<K, MapError> {
    match a {
        RouteAddress::Inet(v4) => key_of(std::net::IpAddr::V4(*v4), MESSAGE),
        RouteAddress::Inet6(v6) => key_of(std::net::IpAddr::V6(*v6), MESSAGE),
        other => Err(MapError::Family {
            message: MESSAGE,
            detail: format!("{other:?}"),
        }),
    }
}

/// The gateway among a next hop's (or a single-path route's) attributes: `RTA_GATEWAY` (of the
/// route's family) or `RTA_VIA` (of the route's family, or IPv6 on an IPv4 route).
fn gateway<K: IpKey>(attrs: &[RouteAttribute]) -> Result<Option<Gateway<K>>, MapError> {
    for a in attrs {
        match a {
            RouteAttribute::Gateway(g) => {
                let ip = match g {
                    RouteAddress::Inet(v4) => std::net::IpAddr::V4(*v4),
                    RouteAddress::Inet6(v6) => std::net::IpAddr::V6(*v6),
                    other => return Err(MapError::GatewayFamily(format!("{other:?}"))),
                };
                // RTA_GATEWAY is always of the route's family.
                return match K::from_ip(ip) {
                    Some(k) => Ok(Some(Gateway::Same(k))),
                    None => Err(MapError::GatewayFamily(format!("{ip}"))),
                };
            }
            RouteAttribute::Via(v) => {
                let ip = match v {
                    RouteVia::Inet(v4) => std::net::IpAddr::V4(*v4),
                    RouteVia::Inet6(v6) => std::net::IpAddr::V6(*v6),
                    other => return Err(MapError::GatewayFamily(format!("via {other:?}"))),
                };
                return K::gateway_of(ip)
                    .map(Some)
                    .ok_or_else(|| MapError::GatewayFamily(format!("via {ip}")));
            }
            RouteAttribute::Encap(_) | RouteAttribute::EncapType(_) => {
                return Err(MapError::Encap);
            }
            _ => {}
        }
    }
    Ok(None)
}

fn next_hop<K: IpKey>(nh: &RouteNextHop) -> Result<NextHop<K>, MapError> {
    Ok(NextHop {
        gateway: gateway(&nh.attributes)?,
        ifindex: nh.interface_index,
        weight: u16::from(nh.hops) + 1,
        flags: NextHopFlags(u32::from(nh.flags.bits())),
    })
}

/// The metrics of `RTA_METRICS`, every one kept (unknown numeric ones by id).
fn metrics_of(list: &[RouteMetric]) -> Result<Metrics, MapError> {
    let mut m = Metrics::default();
    for metric in list {
        let (id, value) = match metric {
            RouteMetric::Lock(v) => (Metrics::LOCK, *v),
            RouteMetric::Mtu(v) => (Metrics::MTU, *v),
            RouteMetric::Window(v) => (Metrics::WINDOW, *v),
            RouteMetric::Rtt(v) => (Metrics::RTT, *v),
            RouteMetric::RttVar(v) => (Metrics::RTTVAR, *v),
            RouteMetric::SsThresh(v) => (Metrics::SSTHRESH, *v),
            RouteMetric::Cwnd(v) => (Metrics::CWND, *v),
            RouteMetric::Advmss(v) => (Metrics::ADVMSS, *v),
            RouteMetric::Reordering(v) => (Metrics::REORDERING, *v),
            RouteMetric::Hoplimit(v) => (Metrics::HOPLIMIT, *v),
            RouteMetric::InitCwnd(v) => (Metrics::INITCWND, *v),
            RouteMetric::Features(v) => (Metrics::FEATURES, *v),
            RouteMetric::RtoMin(v) => (Metrics::RTO_MIN, *v),
            RouteMetric::InitRwnd(v) => (Metrics::INITRWND, *v),
            RouteMetric::QuickAck(v) => (Metrics::QUICKACK, *v),
            RouteMetric::FastopenNoCookie(v) => (Metrics::FASTOPEN_NO_COOKIE, *v),
            RouteMetric::CcAlgo(name) => {
                m.set_cc_algo(Some(name));
                continue;
            }
            RouteMetric::Other(nla) => {
                let mut bytes = [0u8; 4];
                if nla.value_len() != bytes.len() {
                    return Err(MapError::Decode(format!(
                        "route metric {} of {} bytes",
                        nla.kind(),
                        nla.value_len()
                    )));
                }
                nla.emit_value(&mut bytes);
                (nla.kind(), u32::from_ne_bytes(bytes))
            }
            _ => {
                return Err(MapError::Decode(format!("route metric {metric:?}")));
            }
        };
        m.set(id, value);
    }
    Ok(m)
}

/// Builds the route a message describes (both for additions and deletions).
pub(crate) fn route_of<K: IpKey>(msg: &RouteMessage) -> Result<Route<K>, MapError> {
    let h = &msg.header;
    if h.source_prefix_length != 0 {
        return Err(MapError::SourceSpecific(h.source_prefix_length));
    }
    let route_type = route_type(h.kind)?;
    let mut prefix = K::ZERO;
    let mut table = u32::from(h.table);
    let mut priority = 0;
    let mut prefsrc = None;
    let mut oif = 0;
    let mut multipath = None;
    let mut metrics = Metrics::default();
    let mut nh_id = None;
    let mut encap = false;
    for a in &msg.attributes {
        match a {
            RouteAttribute::Destination(d) => prefix = address(d)?,
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Priority(p) => priority = *p,
            RouteAttribute::PrefSource(s) => prefsrc = Some(address(s)?),
            RouteAttribute::Oif(i) => oif = *i,
            RouteAttribute::MultiPath(hops) => multipath = Some(hops),
            RouteAttribute::NhId(id) => nh_id = Some(*id),
            RouteAttribute::Encap(_) | RouteAttribute::EncapType(_) => encap = true,
            RouteAttribute::Source(_) => return Err(MapError::SourceSpecific(0)),
            RouteAttribute::Metrics(list) => metrics = metrics_of(list)?,
            // Gateway/Via are read below; cache info, RA preference, expiry and realms do not
            // change the forwarding decision.
            RouteAttribute::Gateway(_)
            | RouteAttribute::Via(_)
            | RouteAttribute::CacheInfo(_)
            | RouteAttribute::Preference(_)
            | RouteAttribute::Expires(_)
            | RouteAttribute::MulticastExpires(_)
            | RouteAttribute::Realm(_) => {}
            other => return Err(MapError::RouteAttribute(other.kind())),
        }
    }
    // A route through an object carries the object's encapsulation as an expansion.
    if encap && nh_id.is_none() {
        return Err(MapError::Encap);
    }
    // Through a nexthop object: the applier attaches the object of that id (and tells a
    // unicast route the kernel reports as a blackhole, because its object is one, from a
    // blackhole route). The kernel expands the object's next hops into the message
    // (`nexthop_compat_mode`): they follow from the object and are not read.
    let nh_object = nh_id.map(|id| Arc::new(NexthopObject::new(id, NexthopGroup::Kernel)));
    let nexthops = if nh_object.is_some() || !route_type.has_next_hops() {
        // Reject routes carry `dev lo` in IPv6: not a next hop.
        Vec::new()
    } else if let Some(hops) = multipath {
        hops.iter().map(next_hop).collect::<Result<_, _>>()?
    } else {
        // Single path: the next-hop flags travel in the low byte of rtm_flags.
        vec![NextHop {
            gateway: gateway(&msg.attributes)?,
            ifindex: oif,
            weight: 1,
            flags: NextHopFlags(h.flags.bits() & 0xff),
        }]
    };
    let route = Route {
        prefix,
        plen: h.destination_prefix_length,
        table,
        tos: h.tos,
        route_type,
        info: RouteInfo {
            protocol: u8::from(h.protocol),
            scope: Scope(u8::from(h.scope)),
            priority,
            prefsrc,
            nexthops,
            metrics,
            nh_object,
        },
    };
    route.validate()?;
    Ok(route)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use netlink_packet_route::route::{RouteHeader, RouteNextHopFlags, RouteProtocol, RouteScope};

    use super::*;

    fn v4_message(kind: NlType) -> RouteMessage {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        m.header.destination_prefix_length = 16;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Static;
        m.header.scope = RouteScope::Universe;
        m.header.kind = kind;
        m.attributes = vec![
            RouteAttribute::Table(254),
            RouteAttribute::Destination(RouteAddress::Inet(Ipv4Addr::new(10, 9, 0, 0))),
            RouteAttribute::Priority(5),
            RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(10, 1, 0, 2))),
            RouteAttribute::Oif(3),
        ];
        m
    }

    #[test]
    fn unicast_v4_with_gateway_metric_and_protocol() {
        let Mapped::Route4(r, Upsert::Append) = map_route(
            &v4_message(NlType::Unicast),
            Some(Upsert::from_nl_flags(
                netlink_packet_core::NLM_F_APPEND,
                false,
            )),
        )
        .unwrap() else {
            panic!("not an appended IPv4 route");
        };
        assert_eq!(
            (r.prefix, r.plen, r.table, r.info.priority),
            (0x0a09_0000, 16, 254, 5)
        );
        assert_eq!(r.info.protocol, 4);
        assert_eq!(r.info.nexthops, vec![NextHop::new(Some(0x0a01_0002), 3)]);
    }

    #[test]
    fn ipv4_routes_via_ipv6_gateways_single_and_multipath() {
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        let global: Ipv6Addr = "fd00:2::2".parse().unwrap();
        let mut m = v4_message(NlType::Unicast);
        m.attributes
            .retain(|a| !matches!(a, RouteAttribute::Gateway(_)));
        m.attributes.push(RouteAttribute::Via(RouteVia::Inet6(ll)));
        let Mapped::Route4(r, _) = map_route(&m, Some(Upsert::Dump)).unwrap() else {
            panic!("not an IPv4 route");
        };
        assert_eq!(r.info.nexthops, vec![NextHop::via_inet6(u128::from(ll), 3)]);

        // An IPv4 gateway in RTA_VIA is an ordinary gateway.
        let mut m4 = v4_message(NlType::Unicast);
        m4.attributes
            .retain(|a| !matches!(a, RouteAttribute::Gateway(_)));
        m4.attributes
            .push(RouteAttribute::Via(RouteVia::Inet(Ipv4Addr::new(
                10, 1, 0, 9,
            ))));
        let Mapped::Route4(r, _) = map_route(&m4, Some(Upsert::Dump)).unwrap() else {
            panic!("not an IPv4 route");
        };
        assert_eq!(r.info.nexthops, vec![NextHop::new(Some(0x0a01_0009), 3)]);

        let mut mp = v4_message(NlType::Unicast);
        mp.attributes
            .retain(|a| !matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::Oif(_)));
        let hop = |attr, ifindex| {
            let mut h = RouteNextHop::default();
            h.interface_index = ifindex;
            h.attributes = vec![attr];
            h
        };
        mp.attributes.push(RouteAttribute::MultiPath(vec![
            hop(RouteAttribute::Via(RouteVia::Inet6(global)), 4),
            hop(
                RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(10, 1, 0, 2))),
                3,
            ),
        ]));
        let Mapped::Route4(r, _) = map_route(&mp, Some(Upsert::Dump)).unwrap() else {
            panic!("not an IPv4 route");
        };
        let gws: Vec<_> = r
            .info
            .nexthops
            .iter()
            .map(|h| (h.gateway, h.ifindex))
            .collect();
        assert_eq!(
            gws,
            vec![
                (Some(Gateway::Inet6(u128::from(global))), 4),
                (Some(Gateway::Same(0x0a01_0002)), 3)
            ]
        );
    }

    #[test]
    fn metrics_are_kept_and_a_malformed_one_is_an_error() {
        let mut m = v4_message(NlType::Unicast);
        m.attributes.push(RouteAttribute::Metrics(vec![
            RouteMetric::Lock(1 << Metrics::MTU),
            RouteMetric::Mtu(1400),
            RouteMetric::Advmss(1360),
            RouteMetric::CcAlgo("cubic".into()),
        ]));
        let Mapped::Route4(r, _) = map_route(&m, Some(Upsert::Replace)).unwrap() else {
            panic!("not an IPv4 route");
        };
        assert_eq!(
            r.info.metrics.to_string(),
            "mtu lock 1400 advmss 1360 congctl cubic"
        );
        assert_eq!(r.info.metrics.mtu(), Some(1400));

        let odd = netlink_packet_core::DefaultNla::new(40, vec![1, 2]);
        m.attributes
            .push(RouteAttribute::Metrics(vec![RouteMetric::Other(odd)]));
        assert!(matches!(
            map_route(&m, Some(Upsert::Replace)),
            Err(MapError::Decode(_))
        ));
    }

    #[test]
    fn table_attribute_overrides_the_header_byte() {
        let mut m = v4_message(NlType::Unicast);
        m.header.table = 252; // RT_TABLE_COMPAT when the id does not fit
        m.attributes.push(RouteAttribute::Table(1000));
        let Mapped::Route4Gone(r) = map_route(&m, None).unwrap() else {
            panic!()
        };
        assert_eq!(r.table, 1000);
    }

    #[test]
    fn multipath_weights_are_hops_plus_one() {
        let mut m = v4_message(NlType::Unicast);
        m.attributes
            .retain(|a| !matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::Oif(_)));
        let hop = |gw: [u8; 4], ifindex, hops| {
            let mut h = RouteNextHop::default();
            h.flags = RouteNextHopFlags::empty();
            h.hops = hops;
            h.interface_index = ifindex;
            h.attributes = vec![RouteAttribute::Gateway(RouteAddress::Inet(gw.into()))];
            h
        };
        m.attributes.push(RouteAttribute::MultiPath(vec![
            hop([10, 1, 0, 2], 3, 1),
            hop([10, 2, 0, 2], 4, 0),
        ]));
        let Mapped::Route4(r, _) = map_route(&m, Some(Upsert::Dump)).unwrap() else {
            panic!()
        };
        let weights: Vec<_> = r
            .info
            .nexthops
            .iter()
            .map(|h| (h.ifindex, h.weight))
            .collect();
        assert_eq!(weights, vec![(3, 2), (4, 1)]);
    }

    #[test]
    fn reject_routes_drop_the_loopback_device() {
        let mut m = v4_message(NlType::Unreachable);
        m.header.address_family = AddressFamily::Inet6;
        m.attributes = vec![
            RouteAttribute::Destination(RouteAddress::Inet6("2001:db8::".parse().unwrap())),
            RouteAttribute::Oif(1),
        ];
        m.header.destination_prefix_length = 32;
        let Mapped::Route6(r, _) = map_route(&m, Some(Upsert::Dump)).unwrap() else {
            panic!()
        };
        assert_eq!(r.route_type, RouteType::Unreachable);
        assert!(r.info.nexthops.is_empty());
        assert_eq!(
            r.prefix,
            u128::from("2001:db8::".parse::<Ipv6Addr>().unwrap())
        );
    }

    fn stand_in(m: &RouteMessage) -> KernelRoute<u32> {
        match map_route(m, Some(Upsert::Dump)) {
            Ok(Mapped::Kernel4(k, Some(Upsert::Dump))) => k,
            other => panic!("not a kernel-decides route: {other:?}"),
        }
    }

    #[test]
    fn unrepresentable_routes_become_kernel_decides_routes_over_their_prefix() {
        let mut nat = v4_message(NlType::Nat);
        let k = stand_in(&nat);
        assert_eq!(k.reason, "route-type");
        assert_eq!(
            (
                k.route.prefix,
                k.route.plen,
                k.route.table,
                k.route.info.priority
            ),
            (0x0a09_0000, 16, 254, 5)
        );
        assert_eq!(k.route.route_type, RouteType::Kernel);
        assert!(k.route.info.nexthops.is_empty());
        nat.header.kind = NlType::Unicast;
        nat.attributes.push(RouteAttribute::NhId(7));
        let Ok(Mapped::Route4Gone(r)) = map_route(&nat, None) else {
            panic!("a route through nexthop object 7");
        };
        assert_eq!(r.info.nh_object.map(|o| o.id()), Some(7));
        assert!(r.info.nexthops.is_empty(), "compat-mode expansion dropped");

        let mut from = v4_message(NlType::Unicast);
        from.header.source_prefix_length = 8;
        let k = stand_in(&from);
        assert_eq!((k.reason, k.route.info.priority), ("source-specific", 0));

        let mut encap = v4_message(NlType::Unicast);
        encap.attributes.push(RouteAttribute::EncapType(
            netlink_packet_route::route::RouteLwEnCapType::Mpls,
        ));
        assert_eq!(stand_in(&encap).reason, "encap");

        let mut odd = v4_message(NlType::Unicast);
        odd.attributes
            .push(RouteAttribute::Other(netlink_packet_core::DefaultNla::new(
                99,
                vec![0; 4],
            )));
        assert_eq!(stand_in(&odd).reason, "route-attribute");

        // A gateway of a family the route cannot take (IPv4 on an IPv6 route; the kernel
        // refuses RTA_VIA on IPv6 routes, but a message saying so is still not followed).
        let mut v4_gw = v4_message(NlType::Unicast);
        v4_gw.header.address_family = AddressFamily::Inet6;
        v4_gw.attributes = vec![
            RouteAttribute::Destination(RouteAddress::Inet6("2001:db8::".parse().unwrap())),
            RouteAttribute::Via(RouteVia::Inet(Ipv4Addr::new(10, 1, 0, 2))),
            RouteAttribute::Oif(3),
        ];
        v4_gw.header.destination_prefix_length = 32;
        let Ok(Mapped::Kernel6(k, _)) = map_route(&v4_gw, Some(Upsert::Dump)) else {
            panic!("not a kernel-decides route");
        };
        assert_eq!(k.reason, "gateway-family");
        // Two kernel routes behind one stand-in are told apart by their origin.
        assert_ne!(stand_in(&odd).origin, stand_in(&encap).origin);
        assert_eq!(stand_in(&encap).origin, stand_in(&encap).origin);

        let mut mixed = v4_message(NlType::Unicast);
        mixed
            .attributes
            .push(RouteAttribute::PrefSource(RouteAddress::Inet6(
                Ipv6Addr::LOCALHOST,
            )));
        assert!(matches!(
            map_route(&mixed, None),
            Err(MapError::Family { .. })
        ));
        let mut host_bits = v4_message(NlType::Unicast);
        host_bits.header.destination_prefix_length = 8;
        assert!(matches!(
            map_route(&host_bits, None),
            Err(MapError::Route(_))
        ));
    }

    #[test]
    fn cloned_routes_and_other_families_are_ignored() {
        let mut m = v4_message(NlType::Unicast);
        m.header.flags = RouteFlags::Cloned;
        assert_eq!(
            map_route(&m, None),
            Ok(Mapped::Ignored(Ignored::ClonedRoute))
        );
        let mut mpls = v4_message(NlType::Unicast);
        mpls.header.address_family = AddressFamily::Mpls;
        assert_eq!(map_route(&mpls, None), Ok(Mapped::Ignored(Ignored::Family)));
    }
}
