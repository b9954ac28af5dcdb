//! The neighbour table (the kernel's `arp_tbl` and `nd_tbl` as one map keyed by interface and
//! address).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::{self as epoch, Guard};

use crate::cow_map::CowMap;

/// A neighbour's NUD state (the kernel's `NUD_*` bits, `ndm_state`).
///
/// ```
/// use neigh_table::NudState;
/// assert!(NudState::STALE.is_valid());
/// assert!(!(NudState::INCOMPLETE | NudState::FAILED).is_valid());
/// assert_eq!(NudState::REACHABLE.to_string(), "REACHABLE");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NudState(pub u16);

impl NudState {
    /// No state (`NUD_NONE`).
    pub const NONE: NudState = NudState(0x00);
    /// Resolution in progress (`NUD_INCOMPLETE`).
    pub const INCOMPLETE: NudState = NudState(0x01);
    /// Confirmed recently (`NUD_REACHABLE`).
    pub const REACHABLE: NudState = NudState(0x02);
    /// Usable, not confirmed recently (`NUD_STALE`).
    pub const STALE: NudState = NudState(0x04);
    /// Usable, confirmation pending (`NUD_DELAY`).
    pub const DELAY: NudState = NudState(0x08);
    /// Usable, being probed (`NUD_PROBE`).
    pub const PROBE: NudState = NudState(0x10);
    /// Resolution failed (`NUD_FAILED`).
    pub const FAILED: NudState = NudState(0x20);
    /// No resolution needed (`NUD_NOARP`).
    pub const NOARP: NudState = NudState(0x40);
    /// Configured statically (`NUD_PERMANENT`).
    pub const PERMANENT: NudState = NudState(0x80);

    /// The states whose link-layer address may be used (`NUD_VALID`).
    pub const VALID: NudState = NudState(0x80 | 0x40 | 0x02 | 0x10 | 0x04 | 0x08);

    const NAMES: [(NudState, &'static str); 8] = [
        (Self::INCOMPLETE, "INCOMPLETE"),
        (Self::REACHABLE, "REACHABLE"),
        (Self::STALE, "STALE"),
        (Self::DELAY, "DELAY"),
        (Self::PROBE, "PROBE"),
        (Self::FAILED, "FAILED"),
        (Self::NOARP, "NOARP"),
        (Self::PERMANENT, "PERMANENT"),
    ];

    /// Whether any of `other`'s bits are set.
    pub fn intersects(self, other: NudState) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether the link-layer address may be used to send (`state & NUD_VALID`).
    pub fn is_valid(self) -> bool {
        self.intersects(Self::VALID)
    }
}

impl std::ops::BitOr for NudState {
    type Output = NudState;
    fn bitor(self, rhs: NudState) -> NudState {
        NudState(self.0 | rhs.0)
    }
}

/// Names as `ip neigh` prints them, separated by spaces; `NONE` for no bits.
impl fmt::Display for NudState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let mut first = true;
        let mut rest = self.0;
        for (state, name) in Self::NAMES {
            if self.intersects(state) {
                if !first {
                    f.write_str(" ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !state.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

/// A neighbour entry's flags (the kernel's `NTF_*` bits, `ndm_flags`).
///
/// ```
/// use neigh_table::NeighFlags;
/// assert!(NeighFlags(0x80).contains(NeighFlags::ROUTER));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NeighFlags(pub u8);

impl NeighFlags {
    /// `NTF_USE`: a request to resolve (only in requests to the kernel).
    pub const USE: NeighFlags = NeighFlags(0x01);
    /// `NTF_SELF`.
    pub const SELF: NeighFlags = NeighFlags(0x02);
    /// `NTF_MASTER`.
    pub const MASTER: NeighFlags = NeighFlags(0x04);
    /// `NTF_PROXY`: a proxy entry, not a neighbour.
    pub const PROXY: NeighFlags = NeighFlags(0x08);
    /// `NTF_EXT_LEARNED`.
    pub const EXT_LEARNED: NeighFlags = NeighFlags(0x10);
    /// `NTF_OFFLOADED`.
    pub const OFFLOADED: NeighFlags = NeighFlags(0x20);
    /// `NTF_STICKY`.
    pub const STICKY: NeighFlags = NeighFlags(0x40);
    /// `NTF_ROUTER`: an IPv6 router.
    pub const ROUTER: NeighFlags = NeighFlags(0x80);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: NeighFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One neighbour: an address on an interface and, once resolved, its link-layer address.
///
/// ```
/// use neigh_table::{NeighFlags, Neighbour, NudState};
/// let mac = [2, 0, 0, 0, 0, 1];
/// let n = Neighbour::new(2, "192.0.2.1".parse()?, Some(mac), NudState::STALE);
/// assert_eq!(n.usable_mac(), Some(mac));
/// let pending = Neighbour { state: NudState::INCOMPLETE, lladdr: None, ..n };
/// assert_eq!(pending.usable_mac(), None);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Neighbour {
    /// The interface the neighbour is on (`ndm_ifindex`).
    pub ifindex: u32,
    /// Its network address (`NDA_DST`).
    pub addr: IpAddr,
    /// Its link-layer address (`NDA_LLADDR`), once known.
    pub lladdr: Option<[u8; 6]>,
    /// NUD state.
    pub state: NudState,
    /// `NTF_*` flags.
    pub flags: NeighFlags,
}

impl Neighbour {
    /// A neighbour without flags.
    pub fn new(ifindex: u32, addr: IpAddr, lladdr: Option<[u8; 6]>, state: NudState) -> Self {
        Neighbour {
            ifindex,
            addr,
            lladdr,
            state,
            flags: NeighFlags::default(),
        }
    }

    /// The MAC to send to, when the state allows it (`NUD_VALID`) and one is known.
    pub fn usable_mac(&self) -> Option<[u8; 6]> {
        if self.state.is_valid() {
            self.lladdr
        } else {
            None
        }
    }
}

/// Neighbours by (interface, address), readable without locks under an epoch guard.
///
/// Readers (the packet path) call [`lookup`](Self::lookup) and friends with a pinned guard;
/// the control plane changes it through its one [`NeighWriter`](crate::NeighWriter) (a shared
/// `NeighTable` has no method that changes it), and every change bumps
/// [`generation`](Self::generation), so a hold queue can notice cheaply that something changed.
///
/// ```
/// use std::net::Ipv4Addr;
/// use neigh_table::{NeighWriter, Neighbour, NudState};
///
/// let mut writer = NeighWriter::new();
/// let table = writer.reader().clone(); // a run loop's `Arc<NeighTable>`
/// let gw = Ipv4Addr::new(192, 0, 2, 1);
/// let before = table.generation();
/// assert!(writer.upsert(Neighbour::new(2, gw.into(), Some([2, 0, 0, 0, 0, 1]), NudState::REACHABLE)));
/// assert!(table.generation() > before);
///
/// let guard = crossbeam_epoch::pin(); // once per batch
/// let n = table.lookup_v4(2, gw, &guard).expect("resolved");
/// assert_eq!(n.usable_mac(), Some([2, 0, 0, 0, 0, 1]));
/// assert!(table.lookup_v4(3, gw, &guard).is_none()); // another interface
/// ```
pub struct NeighTable {
    map: CowMap<(u32, IpAddr), Neighbour>,
}

impl fmt::Debug for NeighTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NeighTable")
            .field("len", &self.len())
            .field("generation", &self.generation())
            .finish()
    }
}

impl NeighTable {
    /// An empty table (its writer: [`NeighWriter::new`](crate::NeighWriter::new)).
    pub(crate) fn new() -> Self {
        NeighTable { map: CowMap::new() }
    }

    /// The neighbour `addr` on `ifindex`. An IPv4-mapped IPv6 address is a different key
    /// from the IPv4 address, as in the kernel's separate ARP and ND tables.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup<'g>(
        &self,
        ifindex: u32,
        addr: IpAddr,
        guard: &'g Guard,
    ) -> Option<&'g Neighbour> {
        self.map.get(&(ifindex, addr), guard)
    }

    /// [`lookup`](Self::lookup) for an IPv4 address (the ARP table).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_v4<'g>(
        &self,
        ifindex: u32,
        addr: Ipv4Addr,
        guard: &'g Guard,
    ) -> Option<&'g Neighbour> {
        self.lookup(ifindex, IpAddr::V4(addr), guard)
    }

    /// [`lookup`](Self::lookup) for an IPv6 address (the ND table).
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_v6<'g>(
        &self,
        ifindex: u32,
        addr: Ipv6Addr,
        guard: &'g Guard,
    ) -> Option<&'g Neighbour> {
        self.lookup(ifindex, IpAddr::V6(addr), guard)
    }

    /// A counter bumped after every change is published.
    pub fn generation(&self) -> u64 {
        self.map.generation()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`NeighWriter::upsert`](crate::NeighWriter::upsert). Writer only.
    pub(crate) fn upsert(&self, n: Neighbour) -> bool {
        self.map.upsert((n.ifindex, n.addr), n).1
    }

    /// [`NeighWriter::remove`](crate::NeighWriter::remove). Writer only.
    pub(crate) fn remove(&self, ifindex: u32, addr: IpAddr) -> Option<Neighbour> {
        self.map.remove(&(ifindex, addr))
    }

    /// [`NeighWriter::remove_ifindex`](crate::NeighWriter::remove_ifindex). Writer only.
    pub(crate) fn remove_ifindex(&self, ifindex: u32) -> usize {
        self.map.remove_where(|k, _| k.0 == ifindex).len()
    }

    /// [`NeighWriter::retain`](crate::NeighWriter::retain). Writer only.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&Neighbour) -> bool) -> usize {
        self.map.remove_where(|_, n| !keep(n)).len()
    }

    /// Every entry, sorted by interface and address (a dump; allocates).
    pub fn to_vec(&self) -> Vec<Neighbour> {
        let guard = &epoch::pin();
        let mut out = Vec::with_capacity(self.len());
        self.map.for_each(guard, |_, n| out.push(n.clone()));
        out.sort_by_key(|n| (n.ifindex, n.addr));
        out
    }
}
