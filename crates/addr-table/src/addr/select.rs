//! Source address selection: the kernel's `inet_select_addr` for IPv4 and a simplified
//! RFC 6724 for IPv6.
//!
//! IPv6 candidates are the outgoing interface's addresses that are usable (not tentative
//! unless optimistic, not failed DAD). Among them, pairwise, the first rule that decides:
//!
//! 1. prefer the destination address itself;
//! 2. prefer the appropriate scope: the smallest scope not below the destination's, else the
//!    largest;
//! 3. avoid deprecated addresses;
//! 6. prefer an address whose RFC 6724 default-policy label matches the destination's;
//! 7. prefer public over temporary addresses (the kernel's default, `use_tempaddr` < 2;
//!    RFC 6724 prefers temporary);
//! 8. prefer the longest prefix shared with the destination (counted up to the candidate's own
//!    prefix length);
//!
//! then the interface's list order. Rule 4 (home addresses) and rule 5 (addresses of other
//! interfaces) do not apply: candidates are limited to the outgoing interface, as with
//! `strict` selection, and mobile IPv6 is out of scope.
#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::net::{Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;

use super::entry::IfAddr;
use super::family::{Family, ipv6_scope};
use super::flags::{IfaFlags, Scope};
use super::table::AddrTable;

/// The RFC 6724 default policy table's labels (section 2.1), longest prefix first.
const POLICY_LABELS: [(u128, u8, u8); 9] = [
    (1, 128, 0),                  // ::1/128
    (0xffff_0000_0000, 96, 4),    // ::ffff:0:0/96
    (0, 96, 3),                   // ::/96
    (0x2001_u128 << 112, 32, 5),  // 2001::/32
    (0x2002_u128 << 112, 16, 2),  // 2002::/16
    (0x3ffe_u128 << 112, 16, 12), // 3ffe::/16
    (0xfec0_u128 << 112, 10, 11), // fec0::/10
    (0xfc00_u128 << 112, 7, 13),  // fc00::/7
    (0, 0, 1),                    // ::/0
];

/// The RFC 6724 default-policy label of `addr`.
pub fn policy_label(addr: Ipv6Addr) -> u8 {
    let bits = addr.to_bits();
    POLICY_LABELS
        .iter()
        .filter(|(prefix, len, _)| {
            let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
            bits & mask == *prefix & mask
        })
        .max_by_key(|(_, len, _)| *len)
        .map_or(1, |(_, _, label)| *label)
}

fn common_prefix_len(a: Ipv6Addr, b: Ipv6Addr, cap: u8) -> u32 {
    (a.to_bits() ^ b.to_bits())
        .leading_zeros()
        .min(u32::from(cap))
}

/// Whether `a` is a better source than `b` for `dst` (`Less` = `a` wins).
fn compare_v6(a: &IfAddr<Ipv6Addr>, b: &IfAddr<Ipv6Addr>, dst: Ipv6Addr) -> Ordering {
    // Rule 1: the destination itself.
    let same = |x: &IfAddr<Ipv6Addr>| x.addr != dst;
    let by_same = same(a).cmp(&same(b));
    if by_same != Ordering::Equal {
        return by_same;
    }
    // Rule 2: appropriate scope.
    let (sa, sb, sd) = (ipv6_scope(a.addr), ipv6_scope(b.addr), ipv6_scope(dst));
    if sa != sb {
        return if sa < sb {
            if sa < sd {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        } else if sb < sd {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // Rule 3: avoid deprecated.
    let dep = |x: &IfAddr<Ipv6Addr>| x.flags.contains(IfaFlags::DEPRECATED);
    let by_dep = dep(a).cmp(&dep(b));
    if by_dep != Ordering::Equal {
        return by_dep;
    }
    // Rule 6: matching label.
    let ld = policy_label(dst);
    let label = |x: &IfAddr<Ipv6Addr>| policy_label(x.addr) != ld;
    let by_label = label(a).cmp(&label(b));
    if by_label != Ordering::Equal {
        return by_label;
    }
    // Rule 7 (kernel default): public before temporary.
    let tmp = |x: &IfAddr<Ipv6Addr>| x.flags.contains(IfaFlags::TEMPORARY);
    let by_tmp = tmp(a).cmp(&tmp(b));
    if by_tmp != Ordering::Equal {
        return by_tmp;
    }
    // Rule 8: longest matching prefix.
    common_prefix_len(b.addr, dst, b.prefix_len).cmp(&common_prefix_len(a.addr, dst, a.prefix_len))
}

impl AddrTable {
    /// The IPv4 source address for a packet out of `ifindex` to `dst` within `scope` (the
    /// kernel's `inet_select_addr`): the first primary address of the interface whose scope
    /// is within `scope` and whose subnet holds `dst`, else the first primary within `scope`;
    /// if the interface has none, the first primary of any interface (by ascending ifindex,
    /// where the kernel walks devices in registration order) within `scope` that is not
    /// link-scoped. `dst = None` takes the first eligible primary. VRFs are not modelled.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn select_src_v4(
        &self,
        ifindex: u32,
        dst: Option<Ipv4Addr>,
        scope: Scope,
        guard: &Guard,
    ) -> Option<Ipv4Addr> {
        let eligible =
            |a: &&IfAddr<Ipv4Addr>| !a.is_secondary() && a.scope.min(Scope::HOST) <= scope;
        let mut first = None;
        for a in self
            .addrs::<Ipv4Addr>(ifindex, guard)
            .iter()
            .filter(eligible)
        {
            match dst {
                Some(d) if d.in_subnet(a.addr, a.prefix_len) => return Some(a.addr),
                None => return Some(a.addr),
                Some(_) => {
                    first.get_or_insert(a.addr);
                }
            }
        }
        if first.is_some() {
            return first;
        }
        self.interfaces::<Ipv4Addr>(guard).find_map(|(_, list)| {
            list.iter()
                .find(|a| !a.is_secondary() && a.scope != Scope::LINK && a.scope <= scope)
                .map(|a| a.addr)
        })
    }

    /// The IPv6 source address for a packet out of `ifindex` to `dst`: the best usable address
    /// of the interface under the rules of the [module documentation](self).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn select_src_v6(&self, ifindex: u32, dst: Ipv6Addr, guard: &Guard) -> Option<Ipv6Addr> {
        self.addrs::<Ipv6Addr>(ifindex, guard)
            .iter()
            .filter(|a| <Ipv6Addr as Family>::answers(a.flags))
            .reduce(|best, a| {
                if compare_v6(a, best, dst) == Ordering::Less {
                    a
                } else {
                    best
                }
            })
            .map(|a| a.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_labels() {
        let l = |s: &str| policy_label(s.parse().unwrap());
        assert_eq!(l("::1"), 0);
        assert_eq!(l("::ffff:192.0.2.1"), 4);
        assert_eq!(l("2002::1"), 2);
        assert_eq!(l("2001::1"), 5);
        assert_eq!(l("2001:db8::1"), 1, "2001:db8::/32 is not 2001::/32");
        assert_eq!(l("fd00::1"), 13);
        assert_eq!(l("fec0::1"), 11);
        assert_eq!(l("3ffe::1"), 12);
        assert_eq!(l("::10.0.0.1"), 3);
        assert_eq!(l("2a00::1"), 1);
    }
}
