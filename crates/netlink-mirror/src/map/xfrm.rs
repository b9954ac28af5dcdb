//! `XFRM_MSG_NEWPOLICY` / `UPDPOLICY` / `DELPOLICY` / `FLUSHPOLICY` to policy-tree entries,
//! and `XFRM_MSG_NEWSPDINFO` to the hash thresholds.
//!
//! netlink-packet-xfrm 0.5 decodes these messages completely (policy info, id, templates,
//! type, if_id, mark), so the mirror uses it as it is. Selectors keep their host bits (the
//! kernel's identity); a policy whose decision the mirror cannot evaluate (a security context,
//! an unknown action) becomes an [`Action::Punt`] entry: packets it would decide go to the
//! kernel, never past it.
#![forbid(unsafe_code)]

use std::net::IpAddr;

use netlink_packet_xfrm::policy::SpdInfoAttrs;
use netlink_packet_xfrm::{
    Selector as XfrmSelector, UserPolicyInfo, XFRM_POLICY_ALLOW, XFRM_POLICY_BLOCK,
    XFRM_POLICY_TYPE_MAIN, XFRM_POLICY_TYPE_SUB, XfrmAttrs, XfrmMessage,
};
use policy_tree::{
    Action, Direction, HThresh, Mark, PolicySpec, PolicyType, PortMatch, Prefix, Selector,
    TemplateId,
};

use super::{Ignored, Mapped, PolicyKey};
use crate::error::MapError;

const MESSAGE: &str = "xfrm policy";

/// Maps an xfrm message. A policy with templates gets [`Action::Ipsec`] (or
/// [`Action::IpsecOptional`] when every template is `level use`) with its own index as
/// the template id (the dataplane does not apply transforms; the id says which policy's
/// templates a packet needs).
///
/// # Errors
/// Per-socket directions and unknown policy types ([`MapError::PolicyFeature`]), addresses the
/// selector cannot hold ([`MapError::Policy`]).
pub fn map_xfrm(msg: &XfrmMessage) -> Result<Mapped, MapError> {
    match msg {
        XfrmMessage::AddPolicy(m) | XfrmMessage::UpdatePolicy(m) => {
            spec_of(&m.user_policy_info, &m.nlas).map(Mapped::Policy)
        }
        XfrmMessage::DeletePolicy(m) => {
            // Notifications carry the whole policy in XFRMA_POLICY: its index names it
            // exactly. Without it, the id's selector with type, if_id and mark does.
            let index = m.nlas.iter().find_map(|a| match a {
                XfrmAttrs::PolicyInfo(info) if info.index != 0 => Some(info.index),
                _ => None,
            });
            let id = &m.user_policy_id;
            if let Some(index) = index.or((id.index != 0).then_some(id.index)) {
                return Ok(Mapped::PolicyIndexGone(index));
            }
            let (ptype, if_id, mark, _) = extras(&m.nlas)?;
            Ok(Mapped::PolicyGone(PolicyKey {
                selector: selector_of(&id.selector)?,
                dir: direction(id.direction)?,
                ptype,
                if_id,
                mark,
            }))
        }
        XfrmMessage::GetPolicyDefault(m) | XfrmMessage::SetPolicyDefault(m) => {
            let block = |v: u8| v == netlink_packet_xfrm::XFRM_USERPOLICY_BLOCK;
            let u = &m.user_policy;
            Ok(Mapped::PolicyDefaults([
                block(u.input),
                block(u.output),
                block(u.forward),
            ]))
        }
        XfrmMessage::NewSpdInfo(m) => {
            let mut h = HThresh::default();
            for a in &m.nlas {
                match a {
                    SpdInfoAttrs::SpdIpv4HThresh(t) => (h.lbits4, h.rbits4) = (t.lbits, t.rbits),
                    SpdInfoAttrs::SpdIpv6HThresh(t) => (h.lbits6, h.rbits6) = (t.lbits, t.rbits),
                    _ => {}
                }
            }
            h.validate()?;
            Ok(Mapped::PolicyHThresh(h))
        }
        XfrmMessage::FlushPolicy(m) => Ok(Mapped::PolicyFlush(ptype(m.nlas.iter().find_map(
            |a| match a {
                XfrmAttrs::PolicyType(t) => Some(t.ptype),
                _ => None,
            },
        ))?)),
        _ => Ok(Mapped::Ignored(Ignored::XfrmNonPolicy)),
    }
}

fn direction(d: u8) -> Result<Direction, MapError> {
    Direction::of_index(u32::from(d))
        .filter(|_| d < 3)
        .ok_or(MapError::PolicyFeature("a per-socket direction"))
}

fn ptype(t: Option<u8>) -> Result<PolicyType, MapError> {
    match t {
        None | Some(XFRM_POLICY_TYPE_MAIN) => Ok(PolicyType::Main),
        Some(XFRM_POLICY_TYPE_SUB) => Ok(PolicyType::Sub),
        Some(_) => Err(MapError::PolicyFeature("an unknown policy type")),
    }
}

/// The policy type, if_id and mark among the attributes, and whether a security context
/// (which the mirror cannot evaluate) is present.
fn extras(nlas: &[XfrmAttrs]) -> Result<(PolicyType, u32, Mark, bool), MapError> {
    let (mut t, mut if_id, mut mark, mut ctx) = (None, 0, Mark::ANY, false);
    for a in nlas {
        match a {
            XfrmAttrs::PolicyType(p) => t = Some(p.ptype),
            XfrmAttrs::IfId(i) => if_id = *i,
            XfrmAttrs::Mark(m) => {
                mark = Mark {
                    value: m.value,
                    mask: m.mask,
                };
            }
            XfrmAttrs::SecurityContext(_) => ctx = true,
            _ => {}
        }
    }
    Ok((ptype(t)?, if_id, mark, ctx))
}

fn selector_of(s: &XfrmSelector) -> Result<Selector, MapError> {
    let (src, dst) = match i32::from(s.family) {
        libc::AF_INET => (IpAddr::V4(s.saddr.to_ipv4()), IpAddr::V4(s.daddr.to_ipv4())),
        libc::AF_INET6 => (IpAddr::V6(s.saddr.to_ipv6()), IpAddr::V6(s.daddr.to_ipv6())),
        other => {
            return Err(MapError::Family {
                message: MESSAGE,
                detail: format!("selector family {other}"),
            });
        }
    };
    let ifindex =
        u32::try_from(s.ifindex).map_err(|_| MapError::PolicyFeature("a negative ifindex"))?;
    Ok(Selector::new(
        Prefix::new(src, s.prefixlen_s)?,
        Prefix::new(dst, s.prefixlen_d)?,
    )?
    .proto(s.proto)
    .sport(PortMatch::masked(s.sport, s.sport_mask))
    .dport(PortMatch::masked(s.dport, s.dport_mask))
    .ifindex(ifindex))
}

fn spec_of(info: &UserPolicyInfo, nlas: &[XfrmAttrs]) -> Result<PolicySpec, MapError> {
    let (ptype, if_id, mark, ctx) = extras(nlas)?;
    let templates: Vec<_> = nlas
        .iter()
        .filter_map(|a| match a {
            XfrmAttrs::Template(t) => Some(t),
            _ => None,
        })
        .flatten()
        .collect();
    let optional = templates.iter().all(|t| t.optional != 0);
    let action = match (info.action, !templates.is_empty()) {
        // A security context takes part in the kernel's match (the LSM decides): the mirror
        // cannot evaluate it, the kernel must.
        _ if ctx => Action::Punt,
        (XFRM_POLICY_ALLOW, false) => Action::Allow,
        (XFRM_POLICY_ALLOW, true) if optional => Action::IpsecOptional(TemplateId(info.index)),
        (XFRM_POLICY_ALLOW, true) => Action::Ipsec(TemplateId(info.index)),
        (XFRM_POLICY_BLOCK, _) => Action::Block,
        _ => Action::Punt,
    };
    Ok(
        PolicySpec::new(selector_of(&info.selector)?, direction(info.direction)?)
            .ptype(ptype)
            .if_id(if_id)
            .mark(mark)
            .priority(info.priority)
            .action(action)
            .index(info.index),
    )
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use netlink_packet_xfrm::policy::{DelGetMessage, ModifyMessage};
    use netlink_packet_xfrm::{Address, Mark, UserPolicyId, UserTemplate};

    use super::*;

    fn info() -> UserPolicyInfo {
        let mut i = UserPolicyInfo::default();
        i.selector.family = libc::AF_INET as u16;
        i.selector
            .source_prefix(&IpAddr::V4(Ipv4Addr::new(10, 0, 1, 0)), 24);
        i.selector
            .destination_prefix(&IpAddr::V4(Ipv4Addr::new(10, 0, 2, 0)), 24);
        i.selector.proto = 6;
        i.selector.dport = 443;
        i.selector.dport_mask = 0xffff;
        i.priority = 100;
        i.index = 0x11;
        i.direction = 2;
        i
    }

    #[test]
    fn maps_selector_priority_direction_and_templates() {
        let m = XfrmMessage::AddPolicy(ModifyMessage {
            user_policy_info: info(),
            nlas: vec![XfrmAttrs::Template(vec![UserTemplate::default()])],
        });
        let Mapped::Policy(p) = map_xfrm(&m).unwrap() else {
            panic!()
        };
        assert_eq!(
            (p.dir, p.priority, p.index),
            (Direction::Fwd, 100, Some(0x11))
        );
        assert_eq!(p.action, Action::Ipsec(TemplateId(0x11)));
        assert_eq!(p.selector.dport, PortMatch::exact(443));
        assert_eq!(p.selector.src, "10.0.1.0/24".parse().unwrap());
    }

    #[test]
    fn host_bits_marks_and_contexts() {
        let mut i = info();
        i.selector
            .source_prefix(&IpAddr::V4(Ipv4Addr::new(10, 100, 1, 3)), 25);
        let m = XfrmMessage::UpdatePolicy(ModifyMessage {
            user_policy_info: i,
            nlas: vec![XfrmAttrs::Mark(Mark {
                value: 5,
                mask: 0xf,
            })],
        });
        let Mapped::Policy(p) = map_xfrm(&m).unwrap() else {
            panic!()
        };
        assert_eq!(p.selector.src.to_string(), "10.100.1.3/25");
        assert_eq!(
            p.mark,
            policy_tree::Mark {
                value: 5,
                mask: 0xf
            }
        );
        let ctx = XfrmMessage::AddPolicy(ModifyMessage {
            user_policy_info: info(),
            nlas: vec![XfrmAttrs::SecurityContext(Default::default())],
        });
        let Mapped::Policy(p) = map_xfrm(&ctx).unwrap() else {
            panic!()
        };
        assert_eq!(p.action, Action::Punt);
    }

    #[test]
    fn delete_notifications_name_the_index() {
        let id = UserPolicyId {
            selector: info().selector,
            direction: 2,
            ..Default::default()
        };
        let m = XfrmMessage::DeletePolicy(DelGetMessage {
            user_policy_id: id,
            nlas: vec![XfrmAttrs::PolicyInfo(info())],
        });
        assert_eq!(map_xfrm(&m), Ok(Mapped::PolicyIndexGone(0x11)));
    }

    #[test]
    fn delete_uses_the_id_and_socket_policies_are_refused() {
        let id = UserPolicyId {
            selector: info().selector,
            direction: 1,
            ..Default::default()
        };
        let Mapped::PolicyGone(k) = map_xfrm(&XfrmMessage::DeletePolicy(DelGetMessage {
            user_policy_id: id,
            nlas: vec![XfrmAttrs::IfId(5)],
        }))
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (k.dir, k.if_id, k.ptype),
            (Direction::Out, 5, PolicyType::Main)
        );
        let mut sock = info();
        sock.direction = 3;
        let m = XfrmMessage::AddPolicy(ModifyMessage {
            user_policy_info: sock,
            nlas: vec![],
        });
        assert!(matches!(map_xfrm(&m), Err(MapError::PolicyFeature(_))));
        let _ = Address::default();
    }
}
