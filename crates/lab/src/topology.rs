//! The lab's fixed wiring: three nodes, two veth links, their MACs and addresses.
//!
//! ```text
//!  src                     fwd                          dst
//!  src0 ───── veth ───── fwd0   fwd1 ───── veth ───── dst0   (+ extra prefixes on dst's lo)
//!  198.18.0.2/24    198.18.0.1/24   198.18.1.1/24    198.18.1.2/24
//!  2001:db8:0:1::2/64  2001:db8:0:1::1/64  2001:db8:0:2::1/64  2001:db8:0:2::2/64
//! ```
//!
//! IPv4 addresses come from 198.18.0.0/15, the block RFC 2544 reserves for benchmarking network
//! devices; IPv6 ones from 2001:db8::/32, the documentation prefix. Neither is routed anywhere
//! outside the lab's namespaces.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A node of the lab: each is a network namespace named `PREFIX-ROLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The traffic source; its default routes point at `fwd`.
    Src,
    /// The router under test; IPv4 and IPv6 forwarding enabled.
    Fwd,
    /// The traffic sink, owner of the extra prefixes; its default routes point at `fwd`.
    Dst,
}

impl Role {
    /// All roles, in the order the lab creates them.
    pub const ALL: [Role; 3] = [Role::Src, Role::Fwd, Role::Dst];

    /// The role's name, the suffix of its namespace name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Src => "src",
            Role::Fwd => "fwd",
            Role::Dst => "dst",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One end of a veth link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The node it lives in.
    pub role: Role,
    /// Its name inside that node's namespace.
    pub name: &'static str,
    /// Its fixed MAC address (locally administered).
    pub mac: [u8; 6],
    /// Its IPv4 address.
    pub ipv4: Ipv4Addr,
    /// Its IPv6 address.
    pub ipv6: Ipv6Addr,
}

/// The IPv4 prefix length of every link.
pub const LINK_IPV4_LEN: u8 = 24;
/// The IPv6 prefix length of every link.
pub const LINK_IPV6_LEN: u8 = 64;

impl Interface {
    /// The MAC address as `ip` writes it.
    ///
    /// ```
    /// assert_eq!(xfwd_lab::topology::SRC0.mac_string(), "02:58:46:00:00:01");
    /// ```
    pub fn mac_string(&self) -> String {
        format_mac(self.mac)
    }
}

/// A MAC address as `ip` writes it: six lower-case hex pairs joined by colons.
///
/// ```
/// assert_eq!(xfwd_lab::topology::format_mac([2, 0, 0xab, 0, 0, 1]), "02:00:ab:00:00:01");
/// ```
pub fn format_mac(mac: [u8; 6]) -> String {
    mac.map(|byte| format!("{byte:02x}")).join(":")
}

const fn mac(last: u8) -> [u8; 6] {
    // 0x02: locally administered unicast; 0x58 0x46: "XF".
    [0x02, 0x58, 0x46, 0x00, 0x00, last]
}

const fn v6(subnet: u16, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, subnet, 0, 0, 0, host)
}

/// `src`'s interface, facing `fwd`.
pub const SRC0: Interface = Interface {
    role: Role::Src,
    name: "src0",
    mac: mac(1),
    ipv4: Ipv4Addr::new(198, 18, 0, 2),
    ipv6: v6(1, 2),
};
/// `fwd`'s interface facing `src`.
pub const FWD0: Interface = Interface {
    role: Role::Fwd,
    name: "fwd0",
    mac: mac(2),
    ipv4: Ipv4Addr::new(198, 18, 0, 1),
    ipv6: v6(1, 1),
};
/// `fwd`'s interface facing `dst`.
pub const FWD1: Interface = Interface {
    role: Role::Fwd,
    name: "fwd1",
    mac: mac(3),
    ipv4: Ipv4Addr::new(198, 18, 1, 1),
    ipv6: v6(2, 1),
};
/// `dst`'s interface, facing `fwd`.
pub const DST0: Interface = Interface {
    role: Role::Dst,
    name: "dst0",
    mac: mac(4),
    ipv4: Ipv4Addr::new(198, 18, 1, 2),
    ipv6: v6(2, 2),
};

/// The veth links, each as (the end created first, its peer).
pub const LINKS: [(Interface, Interface); 2] = [(SRC0, FWD0), (FWD1, DST0)];

/// The interfaces of all links.
pub const INTERFACES: [Interface; 4] = [SRC0, FWD0, FWD1, DST0];
