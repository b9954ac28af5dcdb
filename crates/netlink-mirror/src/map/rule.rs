//! `RTM_NEWRULE` / `RTM_DELRULE` to fib-trie rules.
#![forbid(unsafe_code)]

use fib_trie::{FibRule, RuleAction};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::rule::{RuleAction as NlAction, RuleAttribute, RuleFlags, RuleMessage};

use super::{Ignored, Mapped, RuleEntry, key_of};
use crate::error::MapError;
use crate::key::IpKey;

const MESSAGE: &str = "rule";

/// Maps a rule message (`new`: `RTM_NEWRULE`, else `RTM_DELRULE`).
///
/// # Errors
/// Selectors the FIB does not model (uid range, IP protocol, ports, tunnel id, realms,
/// `suppress_prefixlength`, `suppress_ifgroup`, `l3mdev`) and unknown actions are
/// [`MapError::RuleFeature`]; mismatched addresses [`MapError::Family`].
pub fn map_rule(msg: &RuleMessage, new: bool) -> Result<Mapped, MapError> {
    match msg.header.family {
        AddressFamily::Inet => {
            let r = rule_of::<u32>(msg)?;
            Ok(if new {
                Mapped::Rule4(r)
            } else {
                Mapped::Rule4Gone(r)
            })
        }
        AddressFamily::Inet6 => {
            let r = rule_of::<u128>(msg)?;
            Ok(if new {
                Mapped::Rule6(r)
            } else {
                Mapped::Rule6Gone(r)
            })
        }
        _ => Ok(Mapped::Ignored(Ignored::Family)),
    }
}

fn rule_of<K: IpKey>(msg: &RuleMessage) -> Result<RuleEntry<K>, MapError> {
    let h = &msg.header;
    let (mut src, mut dst, mut table, mut goto, mut priority) =
        (None, None, u32::from(h.table), None, 0);
    let (mut fwmark, mut fwmask) = (None, None);
    let (mut iifname, mut oifname) = (None, None);
    for a in &msg.attributes {
        match a {
            RuleAttribute::Source(ip) => src = Some((key_of::<K>(*ip, MESSAGE)?, h.src_len)),
            RuleAttribute::Destination(ip) => dst = Some((key_of::<K>(*ip, MESSAGE)?, h.dst_len)),
            RuleAttribute::Iifname(n) => iifname = Some(n.clone()),
            RuleAttribute::Oifname(n) => oifname = Some(n.clone()),
            RuleAttribute::Goto(g) => goto = Some(*g),
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::FwMark(m) => fwmark = Some(*m),
            RuleAttribute::FwMask(m) => fwmask = Some(*m),
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Protocol(_) | RuleAttribute::Other(_) => {}
            // Values that mean "not set" are accepted; anything else the FIB cannot match on.
            RuleAttribute::SuppressPrefixLen(u32::MAX)
            | RuleAttribute::SuppressIfGroup(u32::MAX) => {}
            RuleAttribute::SuppressPrefixLen(_) => {
                return Err(MapError::RuleFeature("suppress_prefixlength"));
            }
            RuleAttribute::SuppressIfGroup(_) => {
                return Err(MapError::RuleFeature("suppress_ifgroup"));
            }
            RuleAttribute::L3MDev(false) | RuleAttribute::TunId(0) => {}
            RuleAttribute::L3MDev(true) => return Err(MapError::RuleFeature("l3mdev")),
            RuleAttribute::TunId(_) => return Err(MapError::RuleFeature("tun_id")),
            RuleAttribute::Realm(_) => return Err(MapError::RuleFeature("realms")),
            RuleAttribute::UidRange(r) if r.start == 0 && r.end == u32::MAX => {}
            RuleAttribute::UidRange(_) => return Err(MapError::RuleFeature("uidrange")),
            RuleAttribute::IpProtocol(p) if u8::from(*p) == 0 => {}
            RuleAttribute::IpProtocol(_) => return Err(MapError::RuleFeature("ipproto")),
            RuleAttribute::SourcePortRange(_) => return Err(MapError::RuleFeature("sport")),
            RuleAttribute::DestinationPortRange(_) => return Err(MapError::RuleFeature("dport")),
            _ => return Err(MapError::RuleFeature("an unknown attribute")),
        }
    }
    let action = match h.action {
        NlAction::ToTable => RuleAction::Lookup(table),
        NlAction::Goto => RuleAction::Goto(goto.ok_or(MapError::Missing {
            message: MESSAGE,
            attribute: "FRA_GOTO",
        })?),
        NlAction::Nop => RuleAction::Nop,
        NlAction::Blackhole => RuleAction::Blackhole,
        NlAction::Unreachable => RuleAction::Unreachable,
        NlAction::Prohibit => RuleAction::Prohibit,
        _ => return Err(MapError::RuleFeature("an unknown action")),
    };
    for (k, l) in [src, dst].into_iter().flatten() {
        fib_trie::check_prefix(k, l).map_err(fib_trie::RuleError::from)?;
    }
    let mut rule = FibRule::new(priority, action);
    rule.src = src;
    rule.dst = dst;
    rule.tos = h.tos;
    // A mark without a mask compares every bit (the kernel's default mask).
    rule.fwmark = fwmark.unwrap_or(0);
    rule.fwmask = fwmask.unwrap_or(if fwmark.is_some() { u32::MAX } else { 0 });
    rule.invert = h.flags.contains(RuleFlags::Invert);
    Ok(RuleEntry {
        rule,
        iifname,
        oifname,
    })
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use netlink_packet_route::rule::RulePortRange;

    use super::*;

    fn message() -> RuleMessage {
        let mut m = RuleMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.action = NlAction::ToTable;
        m.header.src_len = 8;
        m.header.table = 252;
        m.attributes = vec![
            RuleAttribute::Priority(100),
            RuleAttribute::Table(1000),
            RuleAttribute::Source(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0))),
            RuleAttribute::FwMark(7),
            RuleAttribute::Iifname("veth0".into()),
        ];
        m
    }

    #[test]
    fn maps_selectors_action_and_names() {
        let Mapped::Rule4(e) = map_rule(&message(), true).unwrap() else {
            panic!()
        };
        assert_eq!(e.rule.priority, 100);
        assert_eq!(e.rule.action, RuleAction::Lookup(1000));
        assert_eq!(e.rule.src, Some((0x0a00_0000, 8)));
        assert_eq!((e.rule.fwmark, e.rule.fwmask), (7, u32::MAX));
        assert_eq!(e.iifname.as_deref(), Some("veth0"));
    }

    #[test]
    fn unmodelled_selectors_are_typed_errors() {
        let mut m = message();
        m.attributes
            .push(RuleAttribute::SourcePortRange(RulePortRange {
                start: 1,
                end: 2,
            }));
        assert_eq!(map_rule(&m, true), Err(MapError::RuleFeature("sport")));
        let mut s = message();
        s.attributes.push(RuleAttribute::SuppressPrefixLen(0));
        assert_eq!(
            map_rule(&s, true),
            Err(MapError::RuleFeature("suppress_prefixlength"))
        );
        let mut ok = message();
        ok.attributes
            .push(RuleAttribute::SuppressPrefixLen(u32::MAX));
        assert!(map_rule(&ok, true).is_ok());
        let mut goto = message();
        goto.header.action = NlAction::Goto;
        assert!(matches!(
            map_rule(&goto, true),
            Err(MapError::Missing { .. })
        ));
    }
}
