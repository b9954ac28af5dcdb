//! Addresses in the form the tables keep them: every address as the 128 bits of an IPv6
//! address, IPv4 ones v4-mapped (`::ffff:a.b.c.d`), plus the IPv4 view the kernel keeps beside
//! an IPv6 socket's address (`inet_rcv_saddr`, `inet_daddr`).
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 view of an IPv6 socket bound or connected to a native (not v4-mapped) IPv6
/// address: 127.0.0.6, the kernel's `LOOPBACK4_IPV6`. It takes part in bind conflicts.
pub(crate) const LOOPBACK4_IPV6: u32 = u32::from_be_bytes([127, 0, 0, 6]);

/// `::ffff:a.b.c.d` for the IPv4 address `v4`.
pub(crate) const fn mapped(v4: u32) -> u128 {
    0xffff_0000_0000 | v4 as u128
}

/// Whether `a` is v4-mapped (`::ffff:0:0/96`).
pub(crate) const fn is_mapped(a: u128) -> bool {
    a >> 32 == 0xffff
}

/// The IPv4 view of an IPv6 address: 0 for `::`, the embedded address when v4-mapped, else
/// [`LOOPBACK4_IPV6`].
pub(crate) const fn v4_view(a: u128) -> u32 {
    if a == 0 {
        0
    } else if is_mapped(a) {
        a as u32
    } else {
        LOOPBACK4_IPV6
    }
}

/// Whether an IPv6 address reads as an IPv4 one for IPv4 packets: `::` or v4-mapped.
pub(crate) const fn has_v4_meaning(a: u128) -> bool {
    a == 0 || is_mapped(a)
}

/// The 128-bit form of an address: IPv4 as v4-mapped.
pub(crate) fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => mapped(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address back in the family of its socket.
pub(crate) fn to_ip(a: u128, v4_family: bool) -> IpAddr {
    if v4_family {
        IpAddr::V4(Ipv4Addr::from(a as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

/// Whether an address is multicast (or the IPv4 limited broadcast), which any socket may bind
/// without owning it.
pub(crate) fn is_group_address(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views() {
        let a = Ipv4Addr::new(192, 0, 2, 1);
        let m = mapped(u32::from(a));
        assert_eq!(Ipv6Addr::from(m), a.to_ipv6_mapped());
        assert!(is_mapped(m) && has_v4_meaning(m) && has_v4_meaning(0));
        assert_eq!(v4_view(m), u32::from(a));
        assert_eq!(v4_view(0), 0);
        let native = u128::from("2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v4_view(native), LOOPBACK4_IPV6);
        assert!(!has_v4_meaning(native));
        assert_eq!(to_ip(m, true), IpAddr::V4(a));
        assert_eq!(bits(IpAddr::V4(a)), m);
    }
}
