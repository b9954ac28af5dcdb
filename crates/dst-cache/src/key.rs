//! The key of a cached forwarding decision.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a forwarding decision depends on at input: the destination address, the TOS/DSCP byte
/// and the ingress interface (the kernel's input route key, minus the source address, which
/// the per-hit checks still validate).
///
/// IPv4 and IPv6 keys never compare equal, even for `1.2.3.4` and `::1.2.3.4`.
///
/// ```
/// use std::net::Ipv4Addr;
/// use dst_cache::FlowKey;
///
/// let key = FlowKey::v4(Ipv4Addr::new(192, 0, 2, 1), 0, 3);
/// assert_eq!(key.dst(), Ipv4Addr::new(192, 0, 2, 1));
/// assert_ne!(key, FlowKey::v6("::192.0.2.1".parse().unwrap(), 0, 3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    addr: u128,
    iif: u32,
    tos: u8,
    v6: bool,
}

impl FlowKey {
    /// The key of an IPv4 destination.
    pub const fn v4(dst: Ipv4Addr, tos: u8, iif: u32) -> Self {
        FlowKey {
            addr: dst.to_bits() as u128,
            iif,
            tos,
            v6: false,
        }
    }

    /// The key of an IPv6 destination (`tos` is the traffic class).
    pub const fn v6(dst: Ipv6Addr, tos: u8, iif: u32) -> Self {
        FlowKey {
            addr: dst.to_bits(),
            iif,
            tos,
            v6: true,
        }
    }

    /// The key of either family.
    pub const fn new(dst: IpAddr, tos: u8, iif: u32) -> Self {
        match dst {
            IpAddr::V4(v4) => Self::v4(v4, tos, iif),
            IpAddr::V6(v6) => Self::v6(v6, tos, iif),
        }
    }

    /// The destination address.
    pub const fn dst(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from_bits(self.addr))
        } else {
            IpAddr::V4(Ipv4Addr::from_bits(self.addr as u32))
        }
    }

    /// The TOS/DSCP byte (IPv4) or traffic class (IPv6).
    pub const fn tos(&self) -> u8 {
        self.tos
    }

    /// The ingress interface index.
    pub const fn iif(&self) -> u32 {
        self.iif
    }
}
