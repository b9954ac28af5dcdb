//! `RTM_NEWNEIGH` / `RTM_DELNEIGH` to neighbour-table entries.
#![forbid(unsafe_code)]

use std::net::IpAddr;

use neigh_table::{NeighFlags, Neighbour, NudState};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage,
};

use super::{Ignored, Mapped};
use crate::error::MapError;

const MESSAGE: &str = "neighbour";

/// Maps a neighbour message (`new`: `RTM_NEWNEIGH`, else `RTM_DELNEIGH`).
///
/// Bridge FDB entries and other families are [`Ignored::Family`], proxy entries
/// [`Ignored::ProxyNeigh`], multicast addresses [`Ignored::MulticastNeigh`]. A link-layer address that is not 6 bytes long is kept as `None`.
///
/// # Errors
/// A missing or mismatched destination address.
pub fn map_neigh(msg: &NeighbourMessage, new: bool) -> Result<Mapped, MapError> {
    let h = &msg.header;
    if !matches!(h.family, AddressFamily::Inet | AddressFamily::Inet6) {
        return Ok(Mapped::Ignored(Ignored::Family));
    }
    if h.flags.contains(NeighbourFlags::Proxy) {
        return Ok(Mapped::Ignored(Ignored::ProxyNeigh));
    }
    let (mut dst, mut lladdr) = (None, None);
    for a in &msg.attributes {
        match a {
            NeighbourAttribute::Destination(d) => dst = Some(d),
            NeighbourAttribute::LinkLayerAddress(l) => {
                lladdr = <[u8; 6]>::try_from(l.as_slice()).ok();
            }
            _ => {}
        }
    }
    let addr = match (h.family, dst) {
        (AddressFamily::Inet, Some(NeighbourAddress::Inet(a))) => IpAddr::V4(*a),
        (AddressFamily::Inet6, Some(NeighbourAddress::Inet6(a))) => IpAddr::V6(*a),
        (_, None) => {
            return Err(MapError::Missing {
                message: MESSAGE,
                attribute: "NDA_DST",
            });
        }
        (family, Some(other)) => {
            return Err(MapError::Family {
                message: MESSAGE,
                detail: format!("{other:?} in a {family:?} message"),
            });
        }
    };
    if addr.is_multicast() {
        return Ok(Mapped::Ignored(Ignored::MulticastNeigh));
    }
    if !new {
        return Ok(Mapped::NeighGone {
            ifindex: h.ifindex,
            addr,
        });
    }
    Ok(Mapped::Neigh(Neighbour {
        ifindex: h.ifindex,
        addr,
        lladdr,
        state: NudState(u16::from(h.state)),
        flags: NeighFlags(h.flags.bits()),
    }))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use netlink_packet_route::neighbour::NeighbourState;

    use super::*;

    fn message() -> NeighbourMessage {
        let mut m = NeighbourMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.ifindex = 4;
        m.header.state = NeighbourState::Reachable;
        m.attributes = vec![
            NeighbourAttribute::Destination(NeighbourAddress::Inet(Ipv4Addr::new(10, 0, 0, 2))),
            NeighbourAttribute::LinkLayerAddress(vec![2, 0, 0, 0, 0, 2]),
        ];
        m
    }

    #[test]
    fn maps_address_mac_and_state() {
        let Mapped::Neigh(n) = map_neigh(&message(), true).unwrap() else {
            panic!()
        };
        assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, 2]));
        assert_eq!(n.state, NudState::REACHABLE);
        assert_eq!(
            map_neigh(&message(), false),
            Ok(Mapped::NeighGone {
                ifindex: 4,
                addr: "10.0.0.2".parse().unwrap()
            })
        );
    }

    #[test]
    fn fdb_proxy_and_bad_destinations() {
        let mut m = message();
        m.header.family = AddressFamily::Bridge;
        assert_eq!(map_neigh(&m, true), Ok(Mapped::Ignored(Ignored::Family)));
        let mut p = message();
        p.header.flags = NeighbourFlags::Proxy;
        assert_eq!(
            map_neigh(&p, true),
            Ok(Mapped::Ignored(Ignored::ProxyNeigh))
        );
        let mut v6 = message();
        v6.header.family = AddressFamily::Inet6;
        assert!(matches!(map_neigh(&v6, true), Err(MapError::Family { .. })));
        let mut mcast = message();
        mcast.attributes[0] =
            NeighbourAttribute::Destination(NeighbourAddress::Inet(Ipv4Addr::new(224, 0, 0, 1)));
        assert_eq!(
            map_neigh(&mcast, true),
            Ok(Mapped::Ignored(Ignored::MulticastNeigh))
        );
        let mut none = message();
        none.attributes.clear();
        assert!(matches!(
            map_neigh(&none, true),
            Err(MapError::Missing { .. })
        ));
    }
}
