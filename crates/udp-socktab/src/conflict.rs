//! Bind conflicts: when two sockets' addresses overlap (`inet_rcv_saddr_equal`), when a bound
//! socket keeps another from its port (`udp_lib_lport_inuse`), and which bound socket a new
//! `SO_REUSEPORT` socket joins (`udp_reuseport_add_sock`).
#![forbid(unsafe_code)]

use crate::addr::is_mapped;
use crate::sock::{Family, Sock};

/// The kind of a bound IPv6 address, as `ipv6_addr_type` tells them apart here.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AddrType {
    Any,
    Mapped,
    Other,
}

fn addr_type(a: u128) -> AddrType {
    if a == 0 {
        AddrType::Any
    } else if is_mapped(a) {
        AddrType::Mapped
    } else {
        AddrType::Other
    }
}

/// `inet_rcv_saddr_equal(sk, sk2, match_wildcard)`: whether `sk`'s bound address overlaps
/// `sk2`'s. Asymmetric, as in the kernel: `sk`'s family picks the rules, and only `sk2`'s
/// `IPV6_V6ONLY` counts when `sk` is IPv4, where an IPv6 socket's IPv4 view (127.0.0.6 for a
/// native address) stands for its address.
pub(crate) fn rcv_saddr_equal(sk: &Sock, sk2: &Sock, match_wildcard: bool) -> bool {
    let sk2_v6only = sk2.family == Family::V6Only;
    if sk.family.is_v4() {
        if sk2_v6only {
            return false;
        }
        return sk.rcv_saddr4 == sk2.rcv_saddr4
            || (match_wildcard && (sk.rcv_saddr4 == 0 || sk2.rcv_saddr4 == 0));
    }
    let sk_v6only = sk.family == Family::V6Only;
    let t1 = addr_type(sk.rcv_saddr);
    let t2 = if sk2.family.is_v4() {
        AddrType::Mapped
    } else {
        addr_type(sk2.rcv_saddr)
    };
    if t1 == AddrType::Mapped && t2 == AddrType::Mapped {
        if sk2_v6only {
            return false;
        }
        return sk.rcv_saddr4 == sk2.rcv_saddr4
            || (match_wildcard && (sk.rcv_saddr4 == 0 || sk2.rcv_saddr4 == 0));
    }
    if t1 == AddrType::Any && t2 == AddrType::Any {
        return true;
    }
    if t2 == AddrType::Any && match_wildcard && !(sk2_v6only && t1 == AddrType::Mapped) {
        return true;
    }
    if t1 == AddrType::Any && match_wildcard && !(sk_v6only && t2 == AddrType::Mapped) {
        return true;
    }
    !sk2.family.is_v4() && sk.rcv_saddr == sk2.rcv_saddr
}

/// How a bound socket `sk2` of the same namespace and port stands towards binding `sk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// No overlap (different address, device, or both `SO_REUSEADDR`).
    Apart,
    /// Overlapping, but both `SO_REUSEPORT` with the same owner: `sk` may share the port.
    /// (In the explicit-port check the first such socket met ends the search: the kernel's
    /// early `return 0`.)
    Shares,
    /// Overlapping: `sk` may not have the port.
    Conflicts,
}

/// The body of `udp_lib_lport_inuse` for one `sk2` (namespace and port already checked).
pub(crate) fn standing(sk: &Sock, sk2: &Sock) -> Standing {
    let overlap = (!sk2.reuse || !sk.reuse)
        && (sk2.bound_dev_if == 0 || sk.bound_dev_if == 0 || sk2.bound_dev_if == sk.bound_dev_if)
        && rcv_saddr_equal(sk, sk2, true);
    if !overlap {
        Standing::Apart
    } else if sk2.reuseport && sk.reuseport && sk.group.is_none() && sk.uid == sk2.uid {
        Standing::Shares
    } else {
        Standing::Conflicts
    }
}

/// Whether a new `SO_REUSEPORT` socket `sk` joins bound socket `sk2`'s group (namespace and
/// port already checked): same family and `IPV6_V6ONLY`, same device, `sk2` has
/// `SO_REUSEPORT` with the same owner, and the same address (wildcards not widened).
pub(crate) fn joins(sk: &Sock, sk2: &Sock) -> bool {
    sk2.family == sk.family
        && sk2.bound_dev_if == sk.bound_dev_if
        && sk2.reuseport
        && sk2.uid == sk.uid
        && rcv_saddr_equal(sk, sk2, false)
}
