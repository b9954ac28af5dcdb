//! The link table: what the packet path needs to know about each interface.

use std::fmt;

use crossbeam_epoch::{self as epoch, Guard};

use crate::cow_map::CowMap;

/// Interface flags (the kernel's `IFF_*` bits, `ifi_flags`).
///
/// ```
/// use neigh_table::LinkFlags;
/// let flags = LinkFlags::UP | LinkFlags::LOWER_UP;
/// assert!(flags.contains(LinkFlags::UP));
/// assert!(!flags.contains(LinkFlags::LOOPBACK));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LinkFlags(pub u32);

impl LinkFlags {
    /// `IFF_UP`: administratively up.
    pub const UP: LinkFlags = LinkFlags(0x1);
    /// `IFF_BROADCAST`.
    pub const BROADCAST: LinkFlags = LinkFlags(0x2);
    /// `IFF_LOOPBACK`.
    pub const LOOPBACK: LinkFlags = LinkFlags(0x8);
    /// `IFF_POINTOPOINT`.
    pub const POINTOPOINT: LinkFlags = LinkFlags(0x10);
    /// `IFF_RUNNING`: operationally up (RFC 2863 UP or UNKNOWN).
    pub const RUNNING: LinkFlags = LinkFlags(0x40);
    /// `IFF_NOARP`: no neighbour resolution on this link.
    pub const NOARP: LinkFlags = LinkFlags(0x80);
    /// `IFF_PROMISC`.
    pub const PROMISC: LinkFlags = LinkFlags(0x100);
    /// `IFF_MASTER`: a bond or team master.
    pub const MASTER: LinkFlags = LinkFlags(0x400);
    /// `IFF_SLAVE`.
    pub const SLAVE: LinkFlags = LinkFlags(0x800);
    /// `IFF_MULTICAST`.
    pub const MULTICAST: LinkFlags = LinkFlags(0x1000);
    /// `IFF_LOWER_UP`: carrier present.
    pub const LOWER_UP: LinkFlags = LinkFlags(0x1_0000);
    /// `IFF_DORMANT`.
    pub const DORMANT: LinkFlags = LinkFlags(0x2_0000);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: LinkFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for LinkFlags {
    type Output = LinkFlags;
    fn bitor(self, rhs: LinkFlags) -> LinkFlags {
        LinkFlags(self.0 | rhs.0)
    }
}

/// RFC 2863 operational state (the kernel's `IF_OPER_*`, `IFLA_OPERSTATE`).
///
/// ```
/// use neigh_table::OperState;
/// assert_eq!(OperState::UP.to_string(), "UP");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OperState(pub u8);

impl OperState {
    /// `IF_OPER_UNKNOWN` (drivers that do not report it, e.g. loopback).
    pub const UNKNOWN: OperState = OperState(0);
    /// `IF_OPER_NOTPRESENT`.
    pub const NOTPRESENT: OperState = OperState(1);
    /// `IF_OPER_DOWN`.
    pub const DOWN: OperState = OperState(2);
    /// `IF_OPER_LOWERLAYERDOWN`.
    pub const LOWERLAYERDOWN: OperState = OperState(3);
    /// `IF_OPER_TESTING`.
    pub const TESTING: OperState = OperState(4);
    /// `IF_OPER_DORMANT`.
    pub const DORMANT: OperState = OperState(5);
    /// `IF_OPER_UP`.
    pub const UP: OperState = OperState(6);
}

/// The state's name as `ip link` prints it.
impl fmt::Display for OperState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Self::UNKNOWN => "UNKNOWN",
            Self::NOTPRESENT => "NOTPRESENT",
            Self::DOWN => "DOWN",
            Self::LOWERLAYERDOWN => "LOWERLAYERDOWN",
            Self::TESTING => "TESTING",
            Self::DORMANT => "DORMANT",
            Self::UP => "UP",
            OperState(other) => return write!(f, "{other}"),
        };
        f.write_str(name)
    }
}

/// One interface as mirrored from `RTM_NEWLINK`.
///
/// ```
/// use neigh_table::{Link, LinkFlags, OperState};
/// let mut link = Link::new(2, "eth0");
/// link.flags = LinkFlags::UP | LinkFlags::RUNNING | LinkFlags::LOWER_UP;
/// link.oper = OperState::UP;
/// assert!(link.is_up());
/// link.oper = OperState::LOWERLAYERDOWN;
/// assert!(!link.is_up());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Link {
    /// Interface index (`ifi_index`).
    pub ifindex: u32,
    /// Name (`IFLA_IFNAME`).
    pub name: String,
    /// Hardware address (`IFLA_ADDRESS`) when it is an Ethernet one.
    pub mac: Option<[u8; 6]>,
    /// MTU (`IFLA_MTU`).
    pub mtu: u32,
    /// `IFF_*` flags.
    pub flags: LinkFlags,
    /// Operational state.
    pub oper: OperState,
    /// The master device (`IFLA_MASTER`: a VRF, bridge or bond).
    pub master: Option<u32>,
    /// The link kind (`IFLA_INFO_KIND`: "veth", "vrf", ...).
    pub kind: Option<String>,
}

impl Link {
    /// A link that is down, with no MAC, MTU 1500, no master and no kind.
    pub fn new(ifindex: u32, name: impl Into<String>) -> Self {
        Link {
            ifindex,
            name: name.into(),
            mac: None,
            mtu: 1500,
            flags: LinkFlags::default(),
            oper: OperState::DOWN,
            master: None,
            kind: None,
        }
    }

    /// Whether packets can be sent: administratively up and with carrier (operational state
    /// UP, or UNKNOWN with `IFF_RUNNING` or `IFF_LOWER_UP` for drivers that do not report one).
    pub fn is_up(&self) -> bool {
        self.flags.contains(LinkFlags::UP)
            && (self.oper == OperState::UP
                || (self.oper == OperState::UNKNOWN
                    && (self.flags.contains(LinkFlags::RUNNING)
                        || self.flags.contains(LinkFlags::LOWER_UP))))
    }
}

/// Links by interface index, readable without locks under an epoch guard; changed only
/// through its one [`LinkWriter`](crate::LinkWriter).
///
/// ```
/// use neigh_table::{Link, LinkWriter};
/// let mut links = LinkWriter::new();
/// links.upsert(Link { mtu: 9000, ..Link::new(3, "fwd1") });
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(links.get(3, &guard).map(|l| l.mtu), Some(9000));
/// assert_eq!(links.by_name("fwd1", &guard).map(|l| l.ifindex), Some(3));
/// ```
pub struct LinkTable {
    map: CowMap<u32, Link>,
}

impl fmt::Debug for LinkTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkTable")
            .field("len", &self.len())
            .field("generation", &self.generation())
            .finish()
    }
}

impl LinkTable {
    /// An empty table (its writer: [`LinkWriter::new`](crate::LinkWriter::new)).
    pub(crate) fn new() -> Self {
        LinkTable { map: CowMap::new() }
    }

    /// The link with this index.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn get<'g>(&self, ifindex: u32, guard: &'g Guard) -> Option<&'g Link> {
        self.map.get(&ifindex, guard)
    }

    /// The link with this name (a scan: for the control plane and the CLI, not the packet path).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn by_name<'g>(&self, name: &str, guard: &'g Guard) -> Option<&'g Link> {
        let mut found = None;
        self.map.for_each(guard, |_, link| {
            if link.name == name {
                found = Some(link);
            }
        });
        found
    }

    /// A counter bumped after every change is published.
    pub fn generation(&self) -> u64 {
        self.map.generation()
    }

    /// The number of links.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`LinkWriter::upsert`](crate::LinkWriter::upsert). Writer only.
    pub(crate) fn upsert(&self, link: Link) -> bool {
        self.map.upsert(link.ifindex, link).1
    }

    /// [`LinkWriter::remove`](crate::LinkWriter::remove). Writer only.
    pub(crate) fn remove(&self, ifindex: u32) -> Option<Link> {
        self.map.remove(&ifindex)
    }

    /// [`LinkWriter::retain`](crate::LinkWriter::retain). Writer only.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&Link) -> bool) -> usize {
        self.map.remove_where(|_, l| !keep(l)).len()
    }

    /// Every link, sorted by index (allocates).
    pub fn to_vec(&self) -> Vec<Link> {
        let guard = &epoch::pin();
        let mut out = Vec::with_capacity(self.len());
        self.map.for_each(guard, |_, l| out.push(l.clone()));
        out.sort_by_key(|l| l.ifindex);
        out
    }
}
