//! `RTM_NEWADDR` / `RTM_DELADDR` to addr-table entries.
#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use addr_table::{IfAddr, IfaFlags, Label, Scope};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};

use super::{AddrEntry, Ignored, Mapped};
use crate::error::MapError;

const MESSAGE: &str = "address";
/// `INFINITY_LIFE_TIME`: a lifetime that never runs out.
const INFINITE: u32 = u32::MAX;

/// Maps an address message (`new`: `RTM_NEWADDR`, else `RTM_DELADDR`).
///
/// Lifetimes become deadlines from now. The IPv4 `SECONDARY` flag is left to the table, which
/// computes it from the order of the addresses.
///
/// # Errors
/// A missing or mismatched address, a label the table refuses.
pub fn map_addr(msg: &AddressMessage, new: bool) -> Result<Mapped, MapError> {
    let h = &msg.header;
    let (mut local, mut address, mut label, mut flags, mut lifetimes) =
        (None, None, None, u32::from(h.flags.bits()), None);
    for a in &msg.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Label(l) => label = Some(l.as_str()),
            AddressAttribute::Flags(f) => flags = f.bits(),
            AddressAttribute::CacheInfo(c) => lifetimes = Some((c.ifa_valid, c.ifa_preferred)),
            _ => {}
        }
    }
    // IFA_LOCAL is the local address; IFA_ADDRESS is the peer on point-to-point links and
    // the local address otherwise (IPv6 sends only IFA_ADDRESS).
    let ip = local.or(address).ok_or(MapError::Missing {
        message: MESSAGE,
        attribute: "IFA_LOCAL/IFA_ADDRESS",
    })?;
    let flags = IfaFlags(flags).without(IfaFlags::SECONDARY);
    let deadline = |secs: u32| {
        (secs != INFINITE).then(|| Instant::now() + Duration::from_secs(u64::from(secs)))
    };
    let (valid, preferred) = lifetimes.map_or((None, None), |(v, p)| (deadline(v), deadline(p)));
    let scope = Scope(u8::from(h.scope));
    let entry = match (h.family, ip) {
        (AddressFamily::Inet, IpAddr::V4(a)) => {
            let mut e = IfAddr::new(a, h.prefix_len, h.index)
                .with_scope(scope)
                .with_flags(flags)
                .with_lifetimes(valid, preferred);
            if let Some(l) = label {
                e = e.with_label(Label::new(l)?);
            }
            AddrEntry::V4(e)
        }
        (AddressFamily::Inet6, IpAddr::V6(a)) => AddrEntry::V6(
            IfAddr::new(a, h.prefix_len, h.index)
                .with_scope(scope)
                .with_flags(flags)
                .with_lifetimes(valid, preferred),
        ),
        (AddressFamily::Inet | AddressFamily::Inet6, ip) => {
            return Err(MapError::Family {
                message: MESSAGE,
                detail: format!("{ip} in a {:?} message", h.family),
            });
        }
        _ => return Ok(Mapped::Ignored(Ignored::Family)),
    };
    Ok(if new {
        Mapped::Addr(entry)
    } else {
        Mapped::AddrGone(entry)
    })
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use netlink_packet_route::address::CacheInfo;

    use super::*;

    fn v4(attrs: Vec<AddressAttribute>) -> AddressMessage {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.prefix_len = 24;
        m.header.index = 3;
        m.attributes = attrs;
        m
    }

    #[test]
    fn local_wins_over_the_peer_address() {
        let m = v4(vec![
            AddressAttribute::Address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
            AddressAttribute::Local(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            AddressAttribute::Label("d0:x".into()),
        ]);
        let Mapped::Addr(AddrEntry::V4(a)) = map_addr(&m, true).unwrap() else {
            panic!()
        };
        assert_eq!(
            (a.addr, a.prefix_len, a.ifindex),
            (Ipv4Addr::new(10, 0, 0, 1), 24, 3)
        );
        assert_eq!(a.label.unwrap().as_str(), "d0:x");
    }

    #[test]
    fn finite_lifetimes_become_deadlines_and_clear_permanent() {
        let mut m = v4(vec![
            AddressAttribute::Address(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
            AddressAttribute::CacheInfo({
                let mut c = CacheInfo::default();
                c.ifa_preferred = 100;
                c.ifa_valid = INFINITE;
                c
            }),
        ]);
        m.header.family = AddressFamily::Inet6;
        let Mapped::AddrGone(AddrEntry::V6(a)) = map_addr(&m, false).unwrap() else {
            panic!()
        };
        assert!(a.valid_until.is_none());
        assert!(a.preferred_until.is_some());
        assert!(!a.flags.contains(IfaFlags::PERMANENT));
    }

    #[test]
    fn missing_or_mismatched_addresses_are_errors() {
        assert!(matches!(
            map_addr(&v4(vec![]), true),
            Err(MapError::Missing { .. })
        ));
        let m = v4(vec![AddressAttribute::Address(IpAddr::V6(
            Ipv6Addr::LOCALHOST,
        ))]);
        assert!(matches!(map_addr(&m, true), Err(MapError::Family { .. })));
    }
}
