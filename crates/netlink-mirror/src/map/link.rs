//! `RTM_NEWLINK` / `RTM_DELLINK` to link-table entries.
#![forbid(unsafe_code)]

use neigh_table::{Link, LinkFlags, OperState};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};

use super::{Ignored, Mapped};
use crate::error::MapError;

/// Maps a link message (`new`: `RTM_NEWLINK`, else `RTM_DELLINK`).
///
/// Per-family notifications (`AF_BRIDGE` port state, ...) are [`Ignored::Family`].
///
/// # Errors
/// [`MapError::Missing`] without an interface name on `RTM_NEWLINK`.
pub fn map_link(msg: &LinkMessage, new: bool) -> Result<Mapped, MapError> {
    let h = &msg.header;
    if h.interface_family != AddressFamily::Unspec {
        return Ok(Mapped::Ignored(Ignored::Family));
    }
    if !new {
        return Ok(Mapped::LinkGone(h.index));
    }
    let mut link = Link::new(h.index, "");
    let mut named = false;
    link.flags = LinkFlags(h.flags.bits());
    for a in &msg.attributes {
        match a {
            LinkAttribute::IfName(n) => {
                link.name.clone_from(n);
                named = true;
            }
            LinkAttribute::Address(mac) => link.mac = <[u8; 6]>::try_from(mac.as_slice()).ok(),
            LinkAttribute::Mtu(m) => link.mtu = *m,
            LinkAttribute::OperState(s) => link.oper = OperState(u8::from(*s)),
            LinkAttribute::Controller(m) => link.master = (*m != 0).then_some(*m),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        link.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    if !named {
        return Err(MapError::Missing {
            message: "link",
            attribute: "IFLA_IFNAME",
        });
    }
    Ok(Mapped::Link(link))
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::{InfoKind, LinkFlags as NlFlags, State};

    use super::*;

    #[test]
    fn maps_name_mac_mtu_state_master_and_kind() {
        let mut m = LinkMessage::default();
        m.header.index = 7;
        m.header.flags = NlFlags::Up | NlFlags::Running | NlFlags::LowerUp;
        m.attributes = vec![
            LinkAttribute::IfName("veth0".into()),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
            LinkAttribute::Mtu(9000),
            LinkAttribute::OperState(State::Up),
            LinkAttribute::Controller(3),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let Mapped::Link(l) = map_link(&m, true).unwrap() else {
            panic!()
        };
        assert_eq!((l.ifindex, l.name.as_str(), l.mtu), (7, "veth0", 9000));
        assert_eq!(l.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!((l.master, l.kind.as_deref()), (Some(3), Some("veth")));
        assert!(l.is_up());
        assert_eq!(map_link(&m, false), Ok(Mapped::LinkGone(7)));
    }

    #[test]
    fn non_ethernet_addresses_and_missing_names() {
        let mut m = LinkMessage::default();
        m.header.index = 9;
        m.attributes = vec![LinkAttribute::Address(vec![10, 0, 0, 1])];
        assert!(matches!(map_link(&m, true), Err(MapError::Missing { .. })));
        m.attributes.push(LinkAttribute::IfName("gre0".into()));
        let Mapped::Link(l) = map_link(&m, true).unwrap() else {
            panic!()
        };
        assert_eq!(l.mac, None);
        m.header.interface_family = AddressFamily::Bridge;
        assert_eq!(map_link(&m, true), Ok(Mapped::Ignored(Ignored::Family)));
    }
}
