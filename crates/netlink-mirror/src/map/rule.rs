//! `RTM_NEWRULE` / `RTM_DELRULE` to fib-trie rules.
#![forbid(unsafe_code)]

use fib_trie::{FibRule, RuleAction};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::rule::{RuleAction as NlAction, RuleAttribute, RuleFlags, RuleMessage};

use super::{Ignored, KernelRule, Mapped, RuleEntry, key_of};
use crate::error::MapError;
use crate::key::IpKey;

const MESSAGE: &str = "rule";

/// Maps a rule message (`new`: `RTM_NEWRULE`, else `RTM_DELRULE`).
///
/// A rule with a selector the FIB does not model (uid range, IP protocol, ports, tunnel id,
/// realms, `l3mdev`, an attribute this crate does not decode), a `suppress_prefixlength`/`suppress_ifgroup` or an unknown action fails
/// closed: it becomes a "kernel decides" stand-in ([`RuleAction::Kernel`]) at its priority
/// over the selectors the FIB does model (over everything for a `not` rule), so every flow
/// the kernel rule could match is handed to the kernel, which applies it. The entry keeps the
/// whole message in [`RuleEntry::kernel`], so that distinct kernel rules sharing a stand-in
/// stay distinct.
///
/// # Errors
/// Mismatched addresses [`MapError::Family`]; a goto without its target
/// [`MapError::Missing`]; a prefix that is not canonical [`MapError::Rule`].
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
    // The first thing the FIB cannot model, if any: the rule is then a stand-in.
    let mut unmodelled: Option<&'static str> = None;
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
            // Who added the rule; it selects nothing.
            RuleAttribute::Protocol(_) => {}
            // Values that mean "not set" are accepted; anything else the FIB cannot match on.
            RuleAttribute::SuppressPrefixLen(u32::MAX)
            | RuleAttribute::SuppressIfGroup(u32::MAX)
            | RuleAttribute::L3MDev(false)
            | RuleAttribute::TunId(0) => {}
            RuleAttribute::UidRange(r) if r.start == 0 && r.end == u32::MAX => {}
            RuleAttribute::IpProtocol(p) if u8::from(*p) == 0 => {}
            a => {
                unmodelled.get_or_insert(match a {
                    RuleAttribute::SuppressPrefixLen(_) => "rule-suppress-prefixlength",
                    RuleAttribute::SuppressIfGroup(_) => "rule-suppress-ifgroup",
                    RuleAttribute::L3MDev(_) => "rule-l3mdev",
                    RuleAttribute::TunId(_) => "rule-tun-id",
                    RuleAttribute::Realm(_) => "rule-realms",
                    RuleAttribute::UidRange(_) => "rule-uidrange",
                    RuleAttribute::IpProtocol(_) => "rule-ipproto",
                    RuleAttribute::SourcePortRange(_) => "rule-sport",
                    RuleAttribute::DestinationPortRange(_) => "rule-dport",
                    // Attributes this crate does not decode are selectors it cannot
                    // evaluate (the kernel sends them only when set: `dscp`, `flowlabel`,
                    // port masks, ...).
                    _ => "rule-attribute",
                });
            }
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
        _ => {
            unmodelled.get_or_insert("rule-action");
            RuleAction::Kernel
        }
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
    let Some(reason) = unmodelled else {
        return Ok(RuleEntry {
            rule,
            iifname,
            oifname,
            kernel: None,
        });
    };
    // The stand-in matches a superset of what the kernel rule matches: the conjunction of the
    // selectors the FIB models. For a `not` rule, whose match is the negation of all of them,
    // no subset of the selectors gives a superset: the stand-in matches every flow.
    rule.action = RuleAction::Kernel;
    if rule.invert {
        rule = FibRule::new(priority, RuleAction::Kernel);
        (iifname, oifname) = (None, None);
    }
    Ok(RuleEntry {
        rule,
        iifname,
        oifname,
        kernel: Some(KernelRule {
            reason,
            message: format!("{h:?} {:?}", msg.attributes),
        }),
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

    fn entry(m: &RuleMessage) -> RuleEntry<u32> {
        match map_rule(m, true) {
            Ok(Mapped::Rule4(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unmodelled_selectors_and_actions_become_kernel_stand_ins() {
        let mut m = message();
        m.attributes
            .push(RuleAttribute::SourcePortRange(RulePortRange {
                start: 1,
                end: 2,
            }));
        let e = entry(&m);
        // Over the selectors the FIB models, at the rule's priority.
        assert_eq!(e.rule.action, RuleAction::Kernel);
        assert_eq!(e.rule.priority, 100);
        assert_eq!(e.rule.src, Some((0x0a00_0000, 8)));
        assert_eq!((e.rule.fwmark, e.rule.fwmask), (7, u32::MAX));
        assert_eq!(e.iifname.as_deref(), Some("veth0"));
        assert_eq!(e.kernel.as_ref().map(|k| k.reason), Some("rule-sport"));
        // Another port range: the same stand-in, another kernel rule.
        let mut other = message();
        other
            .attributes
            .push(RuleAttribute::SourcePortRange(RulePortRange {
                start: 3,
                end: 4,
            }));
        let o = entry(&other);
        assert_eq!(o.rule, e.rule);
        assert_ne!(o, e);
        let mut s = message();
        s.attributes.push(RuleAttribute::SuppressPrefixLen(0));
        assert_eq!(
            entry(&s).kernel.map(|k| k.reason),
            Some("rule-suppress-prefixlength")
        );
        let mut ok = message();
        ok.attributes
            .push(RuleAttribute::SuppressPrefixLen(u32::MAX));
        let ok = entry(&ok);
        assert_eq!(
            (ok.rule.action, ok.kernel),
            (RuleAction::Lookup(1000), None)
        );
        // `not` with an unmodelled selector: no subset of its selectors covers its match.
        let mut not = m.clone();
        not.header.flags = RuleFlags::Invert;
        let n = entry(&not);
        assert_eq!(n.rule, FibRule::new(100, RuleAction::Kernel));
        assert_eq!(n.iifname, None);
        // An attribute this crate does not decode (FRA_DSCP, 23).
        let mut dscp = message();
        dscp.attributes
            .push(RuleAttribute::Other(netlink_packet_core::DefaultNla::new(
                23,
                vec![0x2e],
            )));
        assert_eq!(
            entry(&dscp).kernel.map(|k| k.reason),
            Some("rule-attribute")
        );
        // An action the FIB does not know.
        let mut nat = message();
        nat.header.action = NlAction::Other(42);
        let a = entry(&nat);
        assert_eq!(
            (a.rule.action, a.kernel.map(|k| k.reason)),
            (RuleAction::Kernel, Some("rule-action"))
        );
        let mut goto = message();
        goto.header.action = NlAction::Goto;
        assert!(matches!(
            map_rule(&goto, true),
            Err(MapError::Missing { .. })
        ));
    }
}
