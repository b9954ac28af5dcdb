//! Addresses as fib-trie keys: `u32` for IPv4, `u128` for IPv6, and back.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib_trie::{Gateway, TrieKey};

/// A fib-trie key that converts to and from an IP address of its family.
pub trait IpKey: TrieKey {
    /// `AF_INET` or `AF_INET6`.
    const FAMILY: u8;
    /// The family's name for messages ("IPv4", "IPv6").
    const NAME: &'static str;
    /// The key of `ip` when it is of this family.
    fn from_ip(ip: IpAddr) -> Option<Self>;
    /// The address this key stands for.
    fn to_ip(self) -> IpAddr;
    /// `ip` as the gateway of a route of this family, when the kernel accepts it there: an
    /// address of this family, or an IPv6 address on an IPv4 route (`via inet6`, RFC 8950).
    ///
    /// ```
    /// use fib_trie::Gateway;
    /// use netlink_mirror::key::IpKey;
    ///
    /// let ll: std::net::IpAddr = "fe80::1".parse().unwrap();
    /// assert_eq!(u32::gateway_of(ll), Some(Gateway::Inet6(0xfe80 << 112 | 1)));
    /// assert_eq!(u128::gateway_of("10.0.0.1".parse().unwrap()), None);
    /// ```
    fn gateway_of(ip: IpAddr) -> Option<Gateway<Self>> {
        match (Self::from_ip(ip), ip) {
            (Some(k), _) => Some(Gateway::Same(k)),
            (None, IpAddr::V6(a)) if Self::FAMILY == libc::AF_INET as u8 => {
                Some(Gateway::Inet6(u128::from(a)))
            }
            (None, _) => None,
        }
    }
    /// The address a gateway stands for.
    ///
    /// ```
    /// use fib_trie::Gateway;
    /// use netlink_mirror::key::IpKey;
    ///
    /// assert_eq!(u32::gateway_ip(Gateway::Inet6(1)), "::1".parse::<std::net::IpAddr>().unwrap());
    /// ```
    fn gateway_ip(g: Gateway<Self>) -> IpAddr {
        match g {
            Gateway::Same(k) => k.to_ip(),
            Gateway::Inet6(a) => IpAddr::V6(Ipv6Addr::from(a)),
        }
    }
}

impl IpKey for u32 {
    const FAMILY: u8 = libc::AF_INET as u8;
    const NAME: &'static str = "IPv4";
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(a) => Some(u32::from(a)),
            IpAddr::V6(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }
}

impl IpKey for u128 {
    const FAMILY: u8 = libc::AF_INET6 as u8;
    const NAME: &'static str = "IPv6";
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V6(a) => Some(u128::from(a)),
            IpAddr::V4(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_the_other_family() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(u32::from_ip(v4).map(IpKey::to_ip), Some(v4));
        assert_eq!(u128::from_ip(v6).map(IpKey::to_ip), Some(v6));
        assert_eq!(u32::from_ip(v6), None);
        assert_eq!(u128::from_ip(v4), None);
    }

    #[test]
    fn ipv4_routes_take_gateways_of_both_families_ipv6_routes_only_their_own() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(u32::gateway_of(v4).map(u32::gateway_ip), Some(v4));
        assert!(matches!(u32::gateway_of(v6), Some(Gateway::Inet6(_))));
        assert_eq!(u32::gateway_of(v6).map(u32::gateway_ip), Some(v6));
        assert_eq!(u128::gateway_of(v6).map(u128::gateway_ip), Some(v6));
        assert!(matches!(u128::gateway_of(v6), Some(Gateway::Same(_))));
        assert_eq!(u128::gateway_of(v4), None);
    }
}
