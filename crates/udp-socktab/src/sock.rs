//! Sockets: the identifiers, the options a socket is opened with, and [`Sock`], the immutable
//! record of one socket's state that the tables' chains point to.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::addr::{self, has_v4_meaning, v4_view};
use crate::reuseport::GroupCell;

/// A socket's identity, handed out by [`Writer::socket`](crate::Writer::socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SockId(pub u64);

/// A network namespace's identity, handed out by
/// [`Writer::add_netns`](crate::Writer::add_netns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NetnsId(pub u32);

/// A socket's address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `AF_INET`.
    V4,
    /// `AF_INET6` receiving IPv4 too (`IPV6_V6ONLY` off): `::` and `::ffff:a.b.c.d` addresses
    /// take IPv4 packets.
    V6DualStack,
    /// `AF_INET6` with `IPV6_V6ONLY`. Binding a dual-stack socket to a native (not v4-mapped)
    /// IPv6 address makes it IPv6-only, as in the kernel.
    V6Only,
}

impl Family {
    /// Whether this is an IPv4 socket.
    pub fn is_v4(self) -> bool {
        self == Family::V4
    }
}

/// The socket options that decide where a socket may bind and which packets it takes; set at
/// [`Writer::socket`](crate::Writer::socket).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockOptions {
    /// `SO_REUSEADDR`: may share a port with other `SO_REUSEADDR` sockets.
    pub reuseaddr: bool,
    /// `SO_REUSEPORT`: may share an address and port with `SO_REUSEPORT` sockets of the same
    /// owner, in one group among which packets are spread by flow hash.
    pub reuseport: bool,
    /// `SO_BINDTODEVICE`: takes only packets that came in on this interface (0: any).
    pub bound_dev_if: u32,
    /// The owner's user id; `SO_REUSEPORT` sharing needs the same owner.
    pub uid: u32,
}

/// The record of one socket, as lookups see it. Records are immutable once published, except
/// for the incoming CPU ([`Sock::record_incoming_cpu`]); a change of state publishes a new
/// record in every chain that held the old one.
#[derive(Debug)]
pub struct Sock {
    pub(crate) id: SockId,
    pub(crate) netns: NetnsId,
    pub(crate) family: Family,
    /// The bound address (`sk_v6_rcv_saddr`; IPv4 sockets' v4-mapped).
    pub(crate) rcv_saddr: u128,
    /// The kernel's `inet_rcv_saddr`: the IPv4 view of `rcv_saddr`.
    pub(crate) rcv_saddr4: u32,
    /// The connected peer (`::` / `::ffff:0.0.0.0` when none).
    pub(crate) daddr: u128,
    /// The kernel's `inet_daddr`: the IPv4 view of `daddr`.
    pub(crate) daddr4: u32,
    /// The local port (`inet_num`).
    pub(crate) num: u16,
    /// The connected peer's port (0 when none).
    pub(crate) dport: u16,
    /// `TCP_ESTABLISHED`: connected.
    pub(crate) connected: bool,
    pub(crate) bound_dev_if: u32,
    pub(crate) reuse: bool,
    pub(crate) reuseport: bool,
    pub(crate) uid: u32,
    /// `sk_incoming_cpu`, -1 for none.
    pub(crate) incoming_cpu: AtomicI32,
    /// The `SO_REUSEPORT` group (`sk_reuseport_cb`).
    pub(crate) group: Option<Arc<GroupCell>>,
}

impl Sock {
    /// The socket's identity.
    pub fn id(&self) -> SockId {
        self.id
    }

    /// Its network namespace.
    pub fn netns(&self) -> NetnsId {
        self.netns
    }

    /// Its family (after bind: a dual-stack socket bound to a native IPv6 address is IPv6-only).
    pub fn family(&self) -> Family {
        self.family
    }

    /// The bound (or, once connected, the chosen source) address and the local port.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(addr::to_ip(self.rcv_saddr, self.family.is_v4()), self.num)
    }

    /// The peer, when connected.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.connected
            .then(|| SocketAddr::new(addr::to_ip(self.daddr, self.family.is_v4()), self.dport))
    }

    /// Whether the socket is connected (`TCP_ESTABLISHED`).
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// The interface it is bound to (`SO_BINDTODEVICE`), 0 for none.
    pub fn bound_dev_if(&self) -> u32 {
        self.bound_dev_if
    }

    /// `SO_REUSEADDR`.
    pub fn reuseaddr(&self) -> bool {
        self.reuse
    }

    /// `SO_REUSEPORT`.
    pub fn reuseport(&self) -> bool {
        self.reuseport
    }

    /// Whether the socket is in a `SO_REUSEPORT` group now (binding puts it in one; a rehash
    /// on connect or disconnect takes it out, as in the kernel).
    pub fn in_reuseport_group(&self) -> bool {
        self.group.is_some()
    }

    /// The CPU the socket last received on, or the one `SO_INCOMING_CPU` set.
    pub fn incoming_cpu(&self) -> Option<u32> {
        u32::try_from(self.incoming_cpu.load(Ordering::Relaxed)).ok()
    }

    /// Notes that the socket received a packet on `cpu` (the kernel's
    /// `sk_incoming_cpu_update`): a reader may call this on a socket a lookup returned. A
    /// socket whose incoming CPU equals the looking-up CPU scores one point more.
    pub fn record_incoming_cpu(&self, cpu: u32) {
        let cpu = i32::try_from(cpu).unwrap_or(-1);
        if self.incoming_cpu.load(Ordering::Relaxed) != cpu {
            self.incoming_cpu.store(cpu, Ordering::Relaxed);
        }
    }

    /// Whether the socket's local address reads as IPv4 for IPv4 packets.
    pub(crate) fn takes_v4(&self) -> bool {
        match self.family {
            Family::V4 => true,
            Family::V6DualStack => has_v4_meaning(self.rcv_saddr),
            Family::V6Only => false,
        }
    }

    /// The kernel's `compute_score` for an IPv4 packet (`udp.c`): -1 unless namespace, port
    /// and bound address match and the socket takes IPv4; base 2 for `AF_INET`, 1 for a
    /// dual-stack IPv6 socket; +4 for a matching connected peer address, +4 for its port, +4
    /// for a matching bound device (a mismatch is no match), +1 for the incoming CPU.
    pub(crate) fn compute_score_v4(&self, key: &Key) -> i32 {
        if self.netns != key.netns || self.num != key.dport || !self.takes_v4() {
            return -1;
        }
        if self.rcv_saddr4 != key.daddr as u32 {
            return -1;
        }
        let mut score = if self.family.is_v4() { 2 } else { 1 };
        if self.daddr4 != 0 {
            if self.daddr4 != key.saddr as u32 {
                return -1;
            }
            score += 4;
        }
        if self.dport != 0 {
            if self.dport != key.sport {
                return -1;
            }
            score += 4;
        }
        if self.bound_dev_if != 0 {
            if self.bound_dev_if != key.dif {
                return -1;
            }
            score += 4;
        }
        if self.incoming_cpu.load(Ordering::Relaxed) == key.cpu {
            score += 1;
        }
        score
    }

    /// The kernel's `compute_score` for an IPv6 packet (`ipv6/udp.c`): -1 unless namespace,
    /// port and exact bound address match on an IPv6 socket; then +1 each for a matching
    /// connected port, peer address and bound device, and for the incoming CPU.
    pub(crate) fn compute_score_v6(&self, key: &Key) -> i32 {
        if self.netns != key.netns || self.num != key.dport || self.family.is_v4() {
            return -1;
        }
        if self.rcv_saddr != key.daddr {
            return -1;
        }
        let mut score = 0;
        if self.dport != 0 {
            if self.dport != key.sport {
                return -1;
            }
            score += 1;
        }
        if self.daddr != 0 {
            if self.daddr != key.saddr {
                return -1;
            }
            score += 1;
        }
        if self.bound_dev_if != 0 {
            if self.bound_dev_if != key.dif {
                return -1;
            }
            score += 1;
        }
        if self.incoming_cpu.load(Ordering::Relaxed) == key.cpu {
            score += 1;
        }
        score
    }

    /// The kernel's `inet_match`/`inet6_match` for hash4: the exact 4-tuple of a connected
    /// socket, its namespace and a matching bound device.
    pub(crate) fn matches4(&self, key: &Key) -> bool {
        self.connected
            && self.netns == key.netns
            && self.num == key.dport
            && self.dport == key.sport
            && self.rcv_saddr == key.daddr
            && self.daddr == key.saddr
            && (key.v4 || !self.family.is_v4())
            && (self.bound_dev_if == 0 || self.bound_dev_if == key.dif)
    }

    /// A copy of this record with the same fields, for a writer to change and publish.
    pub(crate) fn copy(&self) -> Sock {
        Sock {
            incoming_cpu: AtomicI32::new(self.incoming_cpu.load(Ordering::Relaxed)),
            group: self.group.clone(),
            ..*self
        }
    }

    /// Sets the bound address, keeping the IPv4 view in step.
    pub(crate) fn set_rcv_saddr(&mut self, a: u128) {
        self.rcv_saddr = a;
        self.rcv_saddr4 = v4_view(a);
    }

    /// Sets the peer, keeping the IPv4 view in step.
    pub(crate) fn set_daddr(&mut self, a: u128) {
        self.daddr = a;
        self.daddr4 = v4_view(a);
    }
}

/// What a lookup is asked: one received datagram's addresses and where it came in.
///
/// ```
/// use std::net::SocketAddr;
/// use udp_socktab::{Lookup, NetnsId};
///
/// let key = Lookup {
///     netns: NetnsId(0),
///     src: "192.0.2.7:40000".parse::<SocketAddr>().unwrap(),
///     dst: "192.0.2.1:53".parse::<SocketAddr>().unwrap(),
///     ifindex: 2,
///     hash: 0x1234_5678,
///     cpu: 0,
/// };
/// assert!(key.src.is_ipv4());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The namespace the packet arrived in.
    pub netns: NetnsId,
    /// Its source address and port.
    pub src: SocketAddr,
    /// Its destination address and port; of the same family as `src`, else nothing matches.
    pub dst: SocketAddr,
    /// The interface it came in on (`dif`).
    pub ifindex: u32,
    /// The flow hash that picks a member of a `SO_REUSEPORT` group (the kernel's
    /// `udp_ehashfn` of the 4-tuple; any well-spread hash of it will do).
    pub hash: u32,
    /// The CPU doing the lookup, compared with sockets' incoming CPU.
    pub cpu: u32,
}

/// A [`Lookup`] in the tables' form.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Key {
    pub(crate) netns: NetnsId,
    pub(crate) v4: bool,
    pub(crate) saddr: u128,
    pub(crate) sport: u16,
    pub(crate) daddr: u128,
    pub(crate) dport: u16,
    pub(crate) dif: u32,
    pub(crate) hash: u32,
    pub(crate) cpu: i32,
}

impl Key {
    /// The key of a lookup; `None` when source and destination differ in family.
    pub(crate) fn new(lookup: &Lookup) -> Option<Key> {
        let v4 = match (lookup.src.ip(), lookup.dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => true,
            (IpAddr::V6(_), IpAddr::V6(_)) => false,
            _ => return None,
        };
        Some(Key {
            netns: lookup.netns,
            v4,
            saddr: addr::bits(lookup.src.ip()),
            sport: lookup.src.port(),
            daddr: addr::bits(lookup.dst.ip()),
            dport: lookup.dst.port(),
            dif: lookup.ifindex,
            hash: lookup.hash,
            cpu: i32::try_from(lookup.cpu).unwrap_or(i32::MIN),
        })
    }

    /// The same key with the destination address replaced by the wildcard of its family.
    pub(crate) fn at_any(&self) -> Key {
        Key {
            daddr: if self.v4 { addr::mapped(0) } else { 0 },
            ..*self
        }
    }

    /// The score of a socket for this key, by the packet's family.
    pub(crate) fn score(&self, sk: &Sock) -> i32 {
        if self.v4 {
            sk.compute_score_v4(self)
        } else {
            sk.compute_score_v6(self)
        }
    }
}
