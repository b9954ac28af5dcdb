//! Selectors (what a policy matches) and flows (what is looked up).

use std::net::IpAddr;

use crate::Error;
use crate::addr::{Family, Prefix, to_bits};

/// A port under a mask, as in `struct xfrm_selector` (`sport`, `sport_mask`): a flow's port `p`
/// matches when `(p ^ port) & mask == 0`. A zero mask matches every port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortMatch {
    /// The port value.
    pub port: u16,
    /// The bits of the port that are compared.
    pub mask: u16,
}

impl PortMatch {
    /// Any port.
    pub const ANY: PortMatch = PortMatch { port: 0, mask: 0 };

    /// Exactly `port`.
    pub const fn exact(port: u16) -> PortMatch {
        PortMatch {
            port,
            mask: u16::MAX,
        }
    }

    /// `port` under `mask` (the port is masked, so `masked(0x1234, 0xff00)` equals
    /// `masked(0x1200, 0xff00)`).
    pub const fn masked(port: u16, mask: u16) -> PortMatch {
        PortMatch {
            port: port & mask,
            mask,
        }
    }

    /// Whether a flow's port matches.
    #[inline]
    pub const fn matches(&self, port: u16) -> bool {
        (port ^ self.port) & self.mask == 0
    }
}

/// What a policy matches: the kernel's `struct xfrm_selector`.
///
/// Build one with [`Selector::new`] and the chaining setters; the fields are public for reading
/// and pattern matching. The database checks at insertion that both prefixes are of one family.
///
/// ```
/// use policy_tree::{PortMatch, Selector};
///
/// let sel = Selector::new("10.0.1.0/24".parse()?, "10.0.2.0/24".parse()?)?
///     .proto(6)
///     .dport(PortMatch::exact(443));
/// assert_eq!(sel.dport, PortMatch::exact(443));
/// # Ok::<(), policy_tree::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    /// Source prefix (`saddr/prefixlen_s`).
    pub src: Prefix,
    /// Destination prefix (`daddr/prefixlen_d`).
    pub dst: Prefix,
    /// IP protocol; 0 matches any protocol.
    pub proto: u8,
    /// Source port under a mask.
    pub sport: PortMatch,
    /// Destination port under a mask.
    pub dport: PortMatch,
    /// Interface index the flow must use; 0 matches any interface.
    pub ifindex: u32,
}

impl Selector {
    /// A selector for `src` to `dst`, any protocol, port and interface.
    ///
    /// # Errors
    /// [`Error::FamilyMismatch`] when the prefixes are of different families.
    pub fn new(src: Prefix, dst: Prefix) -> Result<Selector, Error> {
        if src.family != dst.family {
            return Err(Error::FamilyMismatch);
        }
        Ok(Selector {
            src,
            dst,
            proto: 0,
            sport: PortMatch::ANY,
            dport: PortMatch::ANY,
            ifindex: 0,
        })
    }

    /// A selector matching every flow of a family.
    pub const fn any(family: Family) -> Selector {
        Selector {
            src: Prefix::any(family),
            dst: Prefix::any(family),
            proto: 0,
            sport: PortMatch::ANY,
            dport: PortMatch::ANY,
            ifindex: 0,
        }
    }

    /// With IP protocol `proto` (0: any).
    #[must_use]
    pub const fn proto(mut self, proto: u8) -> Selector {
        self.proto = proto;
        self
    }

    /// With a source port match.
    #[must_use]
    pub const fn sport(mut self, sport: PortMatch) -> Selector {
        self.sport = sport;
        self
    }

    /// With a destination port match.
    #[must_use]
    pub const fn dport(mut self, dport: PortMatch) -> Selector {
        self.dport = dport;
        self
    }

    /// With an interface index (0: any).
    #[must_use]
    pub const fn ifindex(mut self, ifindex: u32) -> Selector {
        self.ifindex = ifindex;
        self
    }

    /// The selector's address family (that of its prefixes).
    pub const fn family(&self) -> Family {
        self.dst.family
    }

    /// Whether a flow matches: the kernel's selector match (addresses under their prefixes,
    /// ports under their masks, protocol and interface unless wildcards) plus the family.
    #[inline]
    pub fn matches(&self, flow: &Flow) -> bool {
        self.dst.family == flow.family
            && self.dst.contains_bits(flow.daddr)
            && self.src.contains_bits(flow.saddr)
            && self.dport.matches(flow.dport)
            && self.sport.matches(flow.sport)
            && (self.proto == 0 || self.proto == flow.proto)
            && (self.ifindex == 0 || self.ifindex == flow.ifindex)
    }

    /// Whether both prefixes are of one family.
    pub(crate) fn is_consistent(&self) -> bool {
        self.src.family == self.dst.family
    }
}

/// A flow to look up: the parts of the kernel's `struct flowi` a policy lookup reads.
///
/// For ICMP, put the type and code where the ports go, as the kernel does.
///
/// ```
/// use std::net::Ipv4Addr;
/// use policy_tree::Flow;
///
/// let flow = Flow::v4(Ipv4Addr::new(10, 0, 1, 2), Ipv4Addr::new(10, 0, 2, 2))
///     .proto(17)
///     .ports(5353, 53)
///     .ifindex(3);
/// assert_eq!(flow.daddr(), "10.0.2.2".parse::<std::net::IpAddr>().unwrap());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub(crate) family: Family,
    pub(crate) saddr: u128,
    pub(crate) daddr: u128,
    pub(crate) proto: u8,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) ifindex: u32,
    pub(crate) if_id: u32,
    pub(crate) mark: u32,
}

impl Flow {
    /// A flow between two addresses of one family; protocol, ports, interface and if_id 0.
    ///
    /// # Errors
    /// [`Error::FamilyMismatch`] when the addresses are of different families.
    pub fn new(saddr: IpAddr, daddr: IpAddr) -> Result<Flow, Error> {
        let family = Family::of(&saddr);
        if family != Family::of(&daddr) {
            return Err(Error::FamilyMismatch);
        }
        Ok(Flow {
            family,
            saddr: to_bits(saddr),
            daddr: to_bits(daddr),
            proto: 0,
            sport: 0,
            dport: 0,
            ifindex: 0,
            if_id: 0,
            mark: 0,
        })
    }

    /// An IPv4 flow.
    pub fn v4(saddr: std::net::Ipv4Addr, daddr: std::net::Ipv4Addr) -> Flow {
        Flow {
            family: Family::V4,
            saddr: to_bits(saddr.into()),
            daddr: to_bits(daddr.into()),
            proto: 0,
            sport: 0,
            dport: 0,
            ifindex: 0,
            if_id: 0,
            mark: 0,
        }
    }

    /// An IPv6 flow.
    pub fn v6(saddr: std::net::Ipv6Addr, daddr: std::net::Ipv6Addr) -> Flow {
        Flow {
            family: Family::V6,
            saddr: to_bits(saddr.into()),
            daddr: to_bits(daddr.into()),
            proto: 0,
            sport: 0,
            dport: 0,
            ifindex: 0,
            if_id: 0,
            mark: 0,
        }
    }

    /// With IP protocol `proto`.
    #[must_use]
    pub const fn proto(mut self, proto: u8) -> Flow {
        self.proto = proto;
        self
    }

    /// With source and destination ports.
    #[must_use]
    pub const fn ports(mut self, sport: u16, dport: u16) -> Flow {
        self.sport = sport;
        self.dport = dport;
        self
    }

    /// With the interface index a `dev` selector compares (the kernel's `flowi_oif`): for the
    /// in and fwd checks and the out lookup of a forwarded packet, the egress interface of its
    /// route (`skb_dst(skb)->dev`); for a reverse decode (ICMP errors), the ingress one.
    #[must_use]
    pub const fn ifindex(mut self, ifindex: u32) -> Flow {
        self.ifindex = ifindex;
        self
    }

    /// With the packet's mark (`skb->mark`, 0 for a packet from the wire unless a firewall
    /// rule sets one): policies whose [`Mark`](crate::Mark) does not match are skipped.
    #[must_use]
    pub const fn mark(mut self, mark: u32) -> Flow {
        self.mark = mark;
        self
    }

    /// With the xfrm interface id (`if_id`): only policies of this if_id match.
    #[must_use]
    pub const fn if_id(mut self, if_id: u32) -> Flow {
        self.if_id = if_id;
        self
    }

    /// The address family.
    pub const fn family(&self) -> Family {
        self.family
    }

    /// The source address.
    pub fn saddr(&self) -> IpAddr {
        crate::addr::from_bits(self.family, self.saddr)
    }

    /// The destination address.
    pub fn daddr(&self) -> IpAddr {
        crate::addr::from_bits(self.family, self.daddr)
    }

    /// The IP protocol.
    pub const fn protocol(&self) -> u8 {
        self.proto
    }

    /// Source and destination ports.
    pub const fn port_pair(&self) -> (u16, u16) {
        (self.sport, self.dport)
    }

    /// The xfrm interface id.
    pub const fn interface_id(&self) -> u32 {
        self.if_id
    }

    /// The interface index `dev` selectors compare.
    pub const fn interface(&self) -> u32 {
        self.ifindex
    }

    /// The packet's mark.
    pub const fn packet_mark(&self) -> u32 {
        self.mark
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(src: &str, dst: &str) -> Selector {
        Selector::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap()
    }

    #[test]
    fn selector_match_follows_every_field() {
        let flow = Flow::new("10.0.1.2".parse().unwrap(), "10.0.2.2".parse().unwrap())
            .unwrap()
            .proto(6)
            .ports(40000, 443)
            .ifindex(7);
        let base = sel("10.0.1.0/24", "10.0.2.0/24");
        assert!(base.matches(&flow));
        assert!(base.proto(6).dport(PortMatch::exact(443)).matches(&flow));
        assert!(!base.proto(17).matches(&flow));
        assert!(!base.dport(PortMatch::exact(80)).matches(&flow));
        assert!(base.sport(PortMatch::masked(40000, 0xff00)).matches(&flow));
        assert!(!base.sport(PortMatch::masked(0x1000, 0xf000)).matches(&flow));
        assert!(base.ifindex(7).matches(&flow));
        assert!(!base.ifindex(8).matches(&flow));
        assert!(!sel("10.0.1.0/24", "10.0.3.0/24").matches(&flow));
        assert!(!sel("10.0.9.0/24", "10.0.2.0/24").matches(&flow));
        assert!(!Selector::any(Family::V6).matches(&flow));
        assert!(Selector::any(Family::V4).matches(&flow));
    }

    #[test]
    fn family_mismatch_is_an_error() {
        assert_eq!(
            Selector::new("10.0.0.0/8".parse().unwrap(), "::/0".parse().unwrap()),
            Err(Error::FamilyMismatch)
        );
        assert_eq!(
            Flow::new("10.0.0.1".parse().unwrap(), "::1".parse().unwrap()),
            Err(Error::FamilyMismatch)
        );
    }
}
