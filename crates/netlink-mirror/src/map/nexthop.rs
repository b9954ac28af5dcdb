//! `RTM_NEWNEXTHOP` / `RTM_DELNEXTHOP` to nexthop object specifications.
#![forbid(unsafe_code)]

use std::net::IpAddr;

use super::{Ignored, Mapped};
use crate::error::MapError;
use crate::nl_nexthop::{
    NEXTHOP_GRP_TYPE_MPATH, NEXTHOP_GRP_TYPE_RES, NexthopAttribute, NexthopMessage,
    ResGroupAttribute,
};

const MESSAGE: &str = "nexthop";

/// What a nexthop object is, as the kernel reported it (`ip nexthop show`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NexthopSpec {
    /// A single next hop: a gateway and/or a device (`via GW dev DEV [onlink]`).
    Single {
        /// The nexthop's family (`AF_INET`, `AF_INET6`).
        family: u8,
        /// The gateway, if any.
        gateway: Option<IpAddr>,
        /// The output interface (0 when none was given).
        ifindex: u32,
        /// `RTNH_F_*` flags (onlink, dead, linkdown).
        flags: u32,
    },
    /// `blackhole`.
    Blackhole,
    /// A group of other nexthops with weights (`group 1/2,3`), resilient when `buckets` is
    /// set (`type resilient buckets N`).
    Group {
        /// Member ids and weights (1 to 65536).
        members: Vec<(u32, u32)>,
        /// The resilient group's bucket count; `None` for hash-threshold groups.
        buckets: Option<u16>,
    },
    /// A nexthop the FIB cannot represent (named by the reason): routes using it go to the
    /// kernel.
    Unrepresentable(&'static str),
}

/// Maps a nexthop message: `new` for `RTM_NEWNEXTHOP`, else `RTM_DELNEXTHOP`.
///
/// ```
/// use netlink_mirror::map::{map_nexthop, Mapped, NexthopSpec};
/// use netlink_mirror::nl_nexthop::{NexthopAttribute, NexthopMessage};
///
/// let mut m = NexthopMessage::default();
/// m.attributes = vec![NexthopAttribute::Id(4), NexthopAttribute::Blackhole];
/// assert_eq!(map_nexthop(&m, true), Ok(Mapped::Nexthop(4, NexthopSpec::Blackhole)));
/// ```
///
/// # Errors
/// [`MapError::Missing`] without `NHA_ID`; a family error for a gateway of no known family.
pub fn map_nexthop(msg: &NexthopMessage, new: bool) -> Result<Mapped, MapError> {
    let mut id = None;
    let (mut gateway, mut ifindex, mut group, mut group_type, mut buckets) =
        (None, 0, None, NEXTHOP_GRP_TYPE_MPATH, None);
    let (mut blackhole, mut fdb, mut encap) = (false, false, false);
    for a in &msg.attributes {
        match a {
            NexthopAttribute::Id(i) => id = Some(*i),
            NexthopAttribute::Group(g) => group = Some(g),
            NexthopAttribute::GroupType(t) => group_type = *t,
            NexthopAttribute::Blackhole => blackhole = true,
            NexthopAttribute::Oif(i) => ifindex = *i,
            NexthopAttribute::Gateway(g) => gateway = Some(*g),
            NexthopAttribute::EncapType(_) | NexthopAttribute::Encap(_) => encap = true,
            NexthopAttribute::Fdb => fdb = true,
            NexthopAttribute::ResGroup(list) => {
                for r in list {
                    if let ResGroupAttribute::Buckets(n) = r {
                        buckets = Some(*n);
                    }
                }
            }
            // Dump filters, statistics and newer attributes do not change forwarding.
            _ => {}
        }
    }
    let id = id.ok_or(MapError::Missing {
        message: MESSAGE,
        attribute: "NHA_ID",
    })?;
    if !new {
        return Ok(Mapped::NexthopGone(id));
    }
    if fdb {
        return Ok(Mapped::Ignored(Ignored::FdbNexthop));
    }
    let spec = if encap {
        NexthopSpec::Unrepresentable("nexthop-encap")
    } else if blackhole {
        NexthopSpec::Blackhole
    } else if let Some(g) = group {
        let members = g.iter().map(|e| (e.id, e.weight)).collect();
        match group_type {
            NEXTHOP_GRP_TYPE_MPATH => NexthopSpec::Group {
                members,
                buckets: None,
            },
            NEXTHOP_GRP_TYPE_RES => NexthopSpec::Group {
                members,
                buckets: Some(buckets.unwrap_or(0)),
            },
            _ => NexthopSpec::Unrepresentable("nexthop-group-type"),
        }
    } else {
        let family = msg.header.family;
        let known = [libc::AF_INET as u8, libc::AF_INET6 as u8];
        if !known.contains(&family) {
            return Err(MapError::Family {
                message: MESSAGE,
                detail: format!("nexthop {id} of family {family}"),
            });
        }
        NexthopSpec::Single {
            family,
            gateway,
            ifindex,
            flags: msg.header.flags,
        }
    };
    Ok(Mapped::Nexthop(id, spec))
}

#[cfg(test)]
mod tests {
    use crate::nl_nexthop::{NexthopGroupEntry, NexthopHeader};

    use super::*;

    fn msg(family: u8, attributes: Vec<NexthopAttribute>) -> NexthopMessage {
        NexthopMessage {
            header: NexthopHeader {
                family,
                scope: 0,
                protocol: 4,
                flags: 4,
            },
            attributes,
        }
    }

    #[test]
    fn single_group_resilient_fdb_and_encap() {
        let single = msg(
            libc::AF_INET as u8,
            vec![
                NexthopAttribute::Id(1),
                NexthopAttribute::Gateway("10.1.0.2".parse().unwrap()),
                NexthopAttribute::Oif(3),
            ],
        );
        assert_eq!(
            map_nexthop(&single, true),
            Ok(Mapped::Nexthop(
                1,
                NexthopSpec::Single {
                    family: libc::AF_INET as u8,
                    gateway: Some("10.1.0.2".parse().unwrap()),
                    ifindex: 3,
                    flags: 4
                }
            ))
        );
        assert_eq!(map_nexthop(&single, false), Ok(Mapped::NexthopGone(1)));
        let entries = vec![
            NexthopGroupEntry { id: 1, weight: 1 },
            NexthopGroupEntry { id: 2, weight: 3 },
        ];
        let res = msg(
            0,
            vec![
                NexthopAttribute::Id(5),
                NexthopAttribute::GroupType(NEXTHOP_GRP_TYPE_RES),
                NexthopAttribute::Group(entries),
                NexthopAttribute::ResGroup(vec![ResGroupAttribute::Buckets(16)]),
            ],
        );
        assert_eq!(
            map_nexthop(&res, true),
            Ok(Mapped::Nexthop(
                5,
                NexthopSpec::Group {
                    members: vec![(1, 1), (2, 3)],
                    buckets: Some(16)
                }
            ))
        );
        let fdb = msg(
            libc::AF_INET as u8,
            vec![NexthopAttribute::Id(6), NexthopAttribute::Fdb],
        );
        assert_eq!(
            map_nexthop(&fdb, true),
            Ok(Mapped::Ignored(Ignored::FdbNexthop))
        );
        let encap = msg(
            libc::AF_INET as u8,
            vec![NexthopAttribute::Id(7), NexthopAttribute::EncapType(1)],
        );
        assert_eq!(
            map_nexthop(&encap, true),
            Ok(Mapped::Nexthop(
                7,
                NexthopSpec::Unrepresentable("nexthop-encap")
            ))
        );
        let odd = msg(
            0,
            vec![
                NexthopAttribute::Id(8),
                NexthopAttribute::GroupType(9),
                NexthopAttribute::Group(Vec::new()),
            ],
        );
        assert_eq!(
            map_nexthop(&odd, true),
            Ok(Mapped::Nexthop(
                8,
                NexthopSpec::Unrepresentable("nexthop-group-type")
            ))
        );
        assert!(matches!(
            map_nexthop(&msg(2, vec![]), true),
            Err(MapError::Missing { .. })
        ));
    }
}
