//! The forwarding decision a cache entry holds, and which decisions may be cached.

use std::net::IpAddr;

/// A value the cache may hold: a `Copy` forwarding decision that knows whether it is cacheable.
///
/// The dataplane may cache its own decision type; [`Decision`] is the one this crate offers.
pub trait Cacheable: Copy {
    /// Whether this decision may be cached. The kernel never caches broadcast or multicast
    /// routes (they depend on more than the destination) nor multipath ones (the next hop
    /// depends on the flow hash, not only on the key).
    fn is_cacheable(&self) -> bool;
}

/// The route type a decision came from (the kernel's `RTN_*` types that input routing yields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// Forward to a gateway or a directly connected host.
    Unicast,
    /// Deliver locally.
    Local,
    /// A broadcast destination (never cached).
    Broadcast,
    /// An anycast address of this host.
    Anycast,
    /// A multicast destination (never cached).
    Multicast,
    /// Drop silently.
    Blackhole,
    /// Drop with ICMP destination unreachable.
    Unreachable,
    /// Drop with ICMP administratively prohibited.
    Prohibit,
}

/// Flags of a decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecisionFlags(u8);

impl DecisionFlags {
    /// No flags.
    pub const EMPTY: Self = DecisionFlags(0);
    /// The route had several next hops and one was chosen by the flow hash (never cached).
    pub const MULTIPATH: Self = DecisionFlags(1);
    /// The packet leaves through the interface it came in on: the kernel would send an ICMP
    /// redirect.
    pub const REDIRECT: Self = DecisionFlags(1 << 1);
    /// No IPsec policy check is needed for this route (the kernel's `IPSKB_NOPOLICY`).
    pub const NO_POLICY: Self = DecisionFlags(1 << 2);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both sets of flags.
    pub const fn union(self, other: Self) -> Self {
        DecisionFlags(self.0 | other.0)
    }
}

/// What the dataplane needs to forward a packet without another lookup.
///
/// ```
/// use dst_cache::{Cacheable, Decision, DecisionFlags, RouteKind};
///
/// let mut decision = Decision::unicast(2, "192.0.2.1".parse().ok(), [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
/// assert!(decision.is_cacheable());
/// decision.flags = DecisionFlags::MULTIPATH;
/// assert!(!decision.is_cacheable());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Egress interface index.
    pub oif: u32,
    /// The gateway, or `None` when the destination is on the link.
    pub next_hop: Option<IpAddr>,
    /// Source MAC address to write (the egress interface's).
    pub src_mac: [u8; 6],
    /// Destination MAC address to write (the next hop's, from the neighbour table).
    pub dst_mac: [u8; 6],
    /// MTU of the path.
    pub mtu: u32,
    /// The route type.
    pub kind: RouteKind,
    /// Flags.
    pub flags: DecisionFlags,
}

impl Decision {
    /// A unicast decision with no flags.
    pub const fn unicast(
        oif: u32,
        next_hop: Option<IpAddr>,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        mtu: u32,
    ) -> Self {
        Decision {
            oif,
            next_hop,
            src_mac,
            dst_mac,
            mtu,
            kind: RouteKind::Unicast,
            flags: DecisionFlags::EMPTY,
        }
    }
}

impl Cacheable for Decision {
    fn is_cacheable(&self) -> bool {
        !matches!(self.kind, RouteKind::Broadcast | RouteKind::Multicast)
            && !self.flags.contains(DecisionFlags::MULTIPATH)
    }
}
