//! Addresses as fib-trie keys: `u32` for IPv4, `u128` for IPv6, and back.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib_trie::TrieKey;

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
}
