//! What the pipeline decided for a frame, and why it punted or dropped one.

use udp_socktab::SockId;

use crate::wire::Family;
use crate::wire::icmp::{IcmpRepr, v4_code, v6_code};

/// Defines a reason enum with a stable snake_case name per variant (for metrics labels) and
/// the list of all variants (for counters indexed by reason).
macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $label:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every reason, in counter order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
            /// The number of reasons.
            pub const COUNT: usize = Self::ALL.len();

            /// A stable snake_case name (a metrics label).
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)*
                }
            }
        }
    };
}

reasons! {
    /// Why a frame was dropped. Every drop is counted under its reason; none is silent.
    DropReason {
        /// The frame is shorter than its headers announce (Ethernet, VLAN tag, IP header or
        /// total/payload length, IPv6 extension header), or its offset/length lie outside the
        /// chunk.
        Truncated = "truncated",
        /// The IP version field does not match the EtherType.
        BadVersion = "bad_version",
        /// An IPv4 header length below 20 bytes or beyond the total length.
        BadHeaderLen = "bad_header_len",
        /// A wrong IPv4 header checksum.
        BadChecksum = "bad_checksum",
        /// An 802.1Q/802.1ad tagged frame while tags are configured to be dropped.
        Vlan = "vlan",
        /// More than one VLAN tag.
        VlanStack = "vlan_stack",
        /// The destination MAC address is another host's (the kernel's `PACKET_OTHERHOST`).
        OtherHost = "other_host",
        /// The ingress interface is not in the link table.
        UnknownIngress = "unknown_ingress",
        /// A source address no packet may carry: multicast, limited broadcast, 0/8, loopback,
        /// one of this host's own IPv4 addresses, or the IPv6 unspecified address when forwarding.
        MartianSource = "martian_source",
        /// A destination no packet may carry: 0/8 or loopback (IPv4), unspecified or loopback
        /// (IPv6).
        MartianDestination = "martian_destination",
        /// IPv6 forwarding is off (`net.ipv6.conf.all.forwarding`): `ip6_forward` drops. (IPv4
        /// answers ICMP host unreachable instead.)
        ForwardingOff = "forwarding_off",
        /// The source failed reverse-path filtering (`rp_filter` strict or loose on the ingress
        /// device), as the kernel's `fib_validate_source` drops it.
        RpFilter = "rp_filter",
        /// A blackhole route or rule.
        Blackhole = "blackhole",
        /// No route, or an ICMP net unreachable that was not sent.
        NoRoute = "no_route",
        /// An unreachable route whose ICMP host unreachable was not sent.
        Unreachable = "unreachable",
        /// A prohibit route whose ICMP administratively prohibited was not sent.
        Prohibited = "prohibited",
        /// A forwarding policy (xfrm direction fwd) blocks the flow.
        PolicyBlock = "policy_block",
        /// An xfrm policy requires IPsec (a template not `level use`) that a packet from the
        /// wire cannot have.
        PolicyTemplate = "policy_template",
        /// TTL or hop limit ran out and the time exceeded error was not sent.
        TtlExceeded = "ttl_exceeded",
        /// Larger than the egress MTU with DF set (or IPv6), and the error was not sent.
        TooBig = "too_big",
        /// An IPv6 packet with a link-local source would leave its link, and the error was not
        /// sent.
        BeyondScope = "beyond_scope",
        /// The route's egress interface is not in the link table.
        NoEgressLink = "no_egress_link",
        /// The egress interface is down.
        EgressDown = "egress_down",
        /// The egress interface has no MAC address (not Ethernet).
        EgressNotEthernet = "egress_not_ethernet",
        /// An MTU too small to fragment into (IPv4 needs 68).
        BadMtu = "bad_mtu",
        /// The neighbour is unresolved and its hold queue (or the queue's) is full.
        HoldFull = "hold_full",
        /// The neighbour is unresolved and the frame is larger than a hold slot.
        HoldTooLarge = "hold_too_large",
        /// A spare frame was needed (fragments, an ICMP error without room in place) and the
        /// pool had none, or one too small.
        PoolEmpty = "pool_empty",
        /// The answer of an in-dataplane endpoint's service that the dataplane cannot send (to
        /// one of our own addresses, by a route only the kernel can take); counted on the
        /// endpoint by cause.
        Unsendable = "unsendable",
    }
}

reasons! {
    /// Why a frame goes to the kernel rather than being forwarded here.
    PuntReason {
        /// ARP (the kernel resolves neighbours).
        Arp = "arp",
        /// Another EtherType (LLDP, LACP, ...).
        OtherEthertype = "other_ethertype",
        /// A tagged frame while tags are configured to be punted.
        Vlan = "vlan",
        /// A broadcast or multicast destination MAC address.
        LinkMulticast = "link_multicast",
        /// An IP multicast destination (IGMP, MLD, neighbour discovery, routing protocols).
        Multicast = "multicast",
        /// The limited broadcast or a broadcast route.
        Broadcast = "broadcast",
        /// A local destination that no registered UDP endpoint takes.
        Local = "local",
        /// An IPv6 hop-by-hop options header (the kernel processes it; router alert).
        HopByHop = "hop_by_hop",
        /// More IPv6 extension headers than the configured bound.
        ExtensionLimit = "extension_limit",
        /// ICMPv6 neighbour discovery (router/neighbour solicitation and advertisement,
        /// redirect).
        NeighbourDiscovery = "neighbour_discovery",
        /// An IPv6 link-local destination (never forwarded).
        LinkLocal = "link_local",
        /// An out policy asks for IPsec (the kernel applies its states).
        Ipsec = "ipsec",
        /// An xfrm policy whose decision the policy database leaves to the kernel (one the
        /// mirror cannot evaluate, or a priority tie only the kernel's history breaks).
        PolicyKernel = "policy_kernel",
        /// A "kernel decides" route or rule: the mirror could not represent the kernel's
        /// route for this destination (an encapsulation, a source-specific route, ...) or a
        /// policy rule that could match the packet (ports, an IP protocol, a uid range,
        /// `suppress_prefixlength`, ...), so the kernel routes the packet.
        KernelRoute = "kernel_route",
        /// The route leaves through an interface the pipeline does not transmit on (not in
        /// the forwarder's `--iface`): the kernel forwards the packet.
        UnservedEgress = "unserved_egress",
        /// The ingress device's forwarding switches are not known (yet): the kernel decides.
        IngressConf = "ingress_conf",
        /// A multipath route while the namespace's multipath hash policy is one xfwd does not
        /// follow (a hash seed, inner headers): the kernel chooses the member.
        MultipathHash = "multipath_hash",
        /// An IPv4 source that is one of the host's addresses, on a device with
        /// `accept_local` on: not a martian there; the kernel validates and routes it.
        AcceptLocal = "accept_local",
        /// The control plane knows its tables lag the kernel's (a dump, a resynchronisation
        /// or a backlog of events in progress: [`dst_cache::Generation::set_behind`]): the
        /// route answer may be stale or missing, so the kernel routes the packet.
        MirrorBehind = "mirror_behind",
    }
}

reasons! {
    /// The ICMP errors the pipeline generates.
    IcmpError {
        /// ICMPv4 destination unreachable, network unreachable (no route).
        NetUnreachable = "net_unreachable",
        /// ICMPv4 destination unreachable, host unreachable (unreachable route).
        HostUnreachable = "host_unreachable",
        /// ICMPv4 destination unreachable, communication administratively prohibited.
        AdminProhibited = "admin_prohibited",
        /// ICMPv4 destination unreachable, fragmentation needed and DF set.
        FragNeeded = "frag_needed",
        /// ICMPv4 time exceeded in transit.
        TimeExceeded = "time_exceeded",
        /// ICMPv6 destination unreachable, no route.
        V6NoRoute = "v6_no_route",
        /// ICMPv6 destination unreachable, administratively prohibited.
        V6AdminProhibited = "v6_admin_prohibited",
        /// ICMPv6 destination unreachable, beyond scope of source address.
        V6BeyondScope = "v6_beyond_scope",
        /// ICMPv6 packet too big.
        V6PacketTooBig = "v6_packet_too_big",
        /// ICMPv6 time exceeded, hop limit exceeded in transit.
        V6TimeExceeded = "v6_time_exceeded",
    }
}

impl IcmpError {
    /// The family of the error (and of the packet it is about).
    pub const fn family(self) -> Family {
        match self {
            IcmpError::NetUnreachable
            | IcmpError::HostUnreachable
            | IcmpError::AdminProhibited
            | IcmpError::FragNeeded
            | IcmpError::TimeExceeded => Family::V4,
            IcmpError::V6NoRoute
            | IcmpError::V6AdminProhibited
            | IcmpError::V6BeyondScope
            | IcmpError::V6PacketTooBig
            | IcmpError::V6TimeExceeded => Family::V6,
        }
    }

    /// The message, with `mtu` as the next hop's MTU of "fragmentation needed" and "packet
    /// too big".
    pub const fn repr(self, mtu: u32) -> IcmpRepr {
        let code = match self {
            IcmpError::FragNeeded | IcmpError::V6PacketTooBig => {
                return IcmpRepr::PacketTooBig { mtu };
            }
            IcmpError::TimeExceeded | IcmpError::V6TimeExceeded => return IcmpRepr::TimeExceeded,
            IcmpError::NetUnreachable => v4_code::NET_UNREACHABLE,
            IcmpError::HostUnreachable => v4_code::HOST_UNREACHABLE,
            IcmpError::AdminProhibited => v4_code::ADMIN_PROHIBITED,
            IcmpError::V6NoRoute => v6_code::NO_ROUTE,
            IcmpError::V6AdminProhibited => v6_code::ADMIN_PROHIBITED,
            IcmpError::V6BeyondScope => v6_code::BEYOND_SCOPE,
        };
        IcmpRepr::DstUnreachable { code }
    }

    /// The ICMP type and code.
    pub const fn type_code(self) -> (u8, u8) {
        self.repr(0).type_code(self.family())
    }

    /// Whether the error is IPv6's.
    pub const fn is_v6(self) -> bool {
        self.family().is_v6()
    }

    /// Whether the rate limit applies: every error but the path-MTU ones, as the kernel exempts
    /// "fragmentation needed" (`icmpv4_mask_allow`) and "packet too big" (`icmpv6_ratemask`).
    pub const fn is_rate_limited(self) -> bool {
        !matches!(self, IcmpError::FragNeeded | IcmpError::V6PacketTooBig)
    }

    /// The drop reason of the packet that caused the error when the error is not sent.
    pub const fn drop_reason(self) -> DropReason {
        match self {
            IcmpError::NetUnreachable | IcmpError::V6NoRoute => DropReason::NoRoute,
            IcmpError::HostUnreachable => DropReason::Unreachable,
            IcmpError::AdminProhibited | IcmpError::V6AdminProhibited => DropReason::Prohibited,
            IcmpError::FragNeeded | IcmpError::V6PacketTooBig => DropReason::TooBig,
            IcmpError::TimeExceeded | IcmpError::V6TimeExceeded => DropReason::TtlExceeded,
            IcmpError::V6BeyondScope => DropReason::BeyondScope,
        }
    }
}

/// What to do with one frame of a batch.
///
/// After [`Queue::process_batch`](crate::Queue::process_batch), a frame's `offset` and `len`
/// describe the bytes to send for `Transmit` and `Reply` (they may have moved: a VLAN tag
/// removed, an ICMP error built in place); for every other verdict the chunk may be recycled
/// at once (for `Punt` and `Deliver`, after handing the unchanged bytes on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Not processed (the initial value).
    #[default]
    Pending,
    /// Send the rewritten frame out of this interface.
    Transmit {
        /// The egress interface index.
        ifindex: u32,
    },
    /// Hand the unchanged frame to the kernel.
    Punt(PuntReason),
    /// Deliver the datagram to a local UDP endpoint registered in the socket table.
    Deliver {
        /// The receiving socket.
        socket: SockId,
        /// The offset of the UDP payload from the frame's start.
        payload: u16,
    },
    /// The frame was turned into an ICMP error (in place); send it out of this interface.
    Reply {
        /// The interface to send the error from (the ingress interface).
        ifindex: u32,
    },
    /// Copied into the queue's hold buffer until its neighbour resolves; recycle the chunk.
    Held,
    /// Its content left in spare frames from the pool (IPv4 fragments, or an ICMP error that
    /// needed a copy); recycle the chunk.
    Consumed,
    /// Dropped and counted.
    Drop(DropReason),
}
