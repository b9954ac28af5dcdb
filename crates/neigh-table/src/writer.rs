//! The writers: the one handle through which each table of this crate changes.
//!
//! Readers share a table as an `Arc` and only read it: every method that changes it is on its
//! writer ([`NeighWriter`], [`LinkWriter`], [`DevConfWriter`]), which makes the table, is not
//! `Clone` and takes `&mut self` for every change. So a run loop holding the `Arc`s cannot
//! change neighbours, links or switches, and the control plane's changes are serialized by the
//! borrow checker. Each change is published as before (a copied bucket chain swapped in, the
//! old one retired into crossbeam-epoch's default collector). A writer derefs to its table for
//! its own reads, and [`reader`](NeighWriter::reader) gives the `Arc` to share.
//!
//! A reader cannot write:
//!
//! ```compile_fail,E0624
//! use neigh_table::{Neighbour, NeighWriter, NudState};
//!
//! let writer = NeighWriter::new();
//! let table = std::sync::Arc::clone(writer.reader());
//! table.upsert(Neighbour::new(2, "192.0.2.1".parse().unwrap(), None, NudState::STALE));
//! ```
//!
//! ```compile_fail,E0624
//! let writer = neigh_table::LinkWriter::new();
//! writer.reader().remove(2);
//! ```
//!
//! ```compile_fail,E0624
//! let writer = neigh_table::DevConfWriter::followed();
//! writer.reader().set_accept_local(2, true);
//! ```
//!
//! And there is one writer per table:
//!
//! ```compile_fail,E0599
//! let writer = neigh_table::NeighWriter::new();
//! let second = writer.clone();
//! ```

use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

use crate::devconf::{DevConf, DevConfTable};
use crate::link::{Link, LinkTable};
use crate::neigh::{NeighTable, Neighbour};

/// The one writer of a [`NeighTable`] (the control plane's, from `RTM_NEWNEIGH` and
/// `RTM_DELNEIGH`); it derefs to the table for reads.
///
/// ```
/// use neigh_table::{NeighWriter, Neighbour, NudState};
///
/// let mut writer = NeighWriter::new();
/// let table = writer.reader().clone();
/// let gw = "192.0.2.1".parse()?;
/// writer.upsert(Neighbour::new(2, gw, Some([2, 0, 0, 0, 0, 1]), NudState::REACHABLE));
/// // The writer and its readers see one table.
/// assert_eq!(writer.to_vec(), table.to_vec());
/// assert_eq!(writer.remove(2, gw).map(|n| n.addr), Some(gw));
/// assert!(table.is_empty());
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Debug)]
pub struct NeighWriter {
    table: Arc<NeighTable>,
}

impl Default for NeighWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for NeighWriter {
    type Target = NeighTable;

    fn deref(&self) -> &NeighTable {
        &self.table
    }
}

impl NeighWriter {
    /// An empty table and its writer.
    pub fn new() -> Self {
        NeighWriter {
            table: Arc::new(NeighTable::new()),
        }
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<NeighTable> {
        &self.table
    }

    /// Adds or replaces the entry for (`n.ifindex`, `n.addr`) (`RTM_NEWNEIGH`); returns whether
    /// anything changed (an identical entry does not bump the generation).
    pub fn upsert(&mut self, n: Neighbour) -> bool {
        self.table.upsert(n)
    }

    /// Removes one entry (`RTM_DELNEIGH`).
    pub fn remove(&mut self, ifindex: u32, addr: IpAddr) -> Option<Neighbour> {
        self.table.remove(ifindex, addr)
    }

    /// Removes every entry on `ifindex` (the interface went away); returns how many.
    pub fn remove_ifindex(&mut self, ifindex: u32) -> usize {
        self.table.remove_ifindex(ifindex)
    }

    /// Keeps the entries `keep` accepts (after a resynchronising dump); returns how many were
    /// removed.
    pub fn retain(&mut self, keep: impl FnMut(&Neighbour) -> bool) -> usize {
        self.table.retain(keep)
    }
}

/// The one writer of a [`LinkTable`] (the control plane's, from `RTM_NEWLINK` and
/// `RTM_DELLINK`); it derefs to the table for reads.
#[derive(Debug)]
pub struct LinkWriter {
    table: Arc<LinkTable>,
}

impl Default for LinkWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for LinkWriter {
    type Target = LinkTable;

    fn deref(&self) -> &LinkTable {
        &self.table
    }
}

impl LinkWriter {
    /// An empty table and its writer.
    pub fn new() -> Self {
        LinkWriter {
            table: Arc::new(LinkTable::new()),
        }
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<LinkTable> {
        &self.table
    }

    /// Adds or replaces the link with `link.ifindex`; returns whether anything changed.
    pub fn upsert(&mut self, link: Link) -> bool {
        self.table.upsert(link)
    }

    /// Removes a link (`RTM_DELLINK`).
    pub fn remove(&mut self, ifindex: u32) -> Option<Link> {
        self.table.remove(ifindex)
    }

    /// Keeps the links `keep` accepts; returns how many were removed.
    pub fn retain(&mut self, keep: impl FnMut(&Link) -> bool) -> usize {
        self.table.retain(keep)
    }
}

/// The one writer of a [`DevConfTable`] (the control plane's, from `RTM_NEWNETCONF` and the
/// sysctls netconf does not report); it derefs to the table for reads.
#[derive(Debug)]
pub struct DevConfWriter {
    table: Arc<DevConfTable>,
}

impl Deref for DevConfWriter {
    type Target = DevConfTable;

    fn deref(&self) -> &DevConfTable {
        &self.table
    }
}

impl DevConfWriter {
    /// A table for a namespace configured as a router, which nobody follows: every device
    /// forwards both families, without source validation, until entries say otherwise.
    ///
    /// ```
    /// use neigh_table::{DevConfWriter, Ingress};
    ///
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(DevConfWriter::permissive().ingress(1, true, &guard), Ingress::Forward);
    /// ```
    pub fn permissive() -> Self {
        DevConfWriter {
            table: Arc::new(DevConfTable::permissive()),
        }
    }

    /// A table a mirror fills from the kernel: a device without an entry (nor a `default`
    /// one) is [`Ingress::Unknown`](crate::Ingress::Unknown), left to the kernel.
    ///
    /// ```
    /// use neigh_table::{DevConfWriter, Ingress};
    ///
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(DevConfWriter::followed().ingress(1, true, &guard), Ingress::Unknown);
    /// ```
    pub fn followed() -> Self {
        DevConfWriter {
            table: Arc::new(DevConfTable::followed()),
        }
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<DevConfTable> {
        &self.table
    }

    /// Merges what the kernel reported for `ifindex` ([`NETCONF_ALL`](crate::NETCONF_ALL),
    /// [`NETCONF_DEFAULT`](crate::NETCONF_DEFAULT) or a device) of family IPv6 (`v6`) or IPv4;
    /// returns whether anything changed.
    pub fn update(&mut self, v6: bool, ifindex: i32, conf: DevConf) -> bool {
        self.table.update(v6, ifindex, conf)
    }

    /// Forgets a device (`RTM_DELNETCONF`, or the device is gone); returns whether it was
    /// known.
    pub fn remove(&mut self, ifindex: i32) -> bool {
        self.table.remove(ifindex)
    }

    /// Sets `net.ipv4.conf.{all,DEV}.accept_local` of `ifindex`
    /// ([`NETCONF_ALL`](crate::NETCONF_ALL) or a device); returns whether it changed.
    pub fn set_accept_local(&mut self, ifindex: i32, on: bool) -> bool {
        self.table.set_accept_local(ifindex, on)
    }

    /// Sets `net.ipv6.conf.DEV.force_forwarding` of device `ifindex`: IPv6 packets arriving
    /// on it are forwarded even while `net.ipv6.conf.all.forwarding` is off (`ip6_forward`);
    /// returns whether it changed.
    ///
    /// ```
    /// use neigh_table::{DevConf, DevConfWriter, Ingress, NETCONF_ALL, NETCONF_DEFAULT};
    ///
    /// let mut t = DevConfWriter::followed();
    /// let off = DevConf { forwarding: Some(false), rp_filter: None };
    /// t.update(true, NETCONF_ALL, off);
    /// t.update(true, NETCONF_DEFAULT, off);
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(t.ingress(3, true, &guard), Ingress::ForwardingOff);
    /// t.set_force_forwarding(3, true);
    /// assert_eq!(t.ingress(3, true, &guard), Ingress::Forward);
    /// assert_eq!(t.ingress(4, true, &guard), Ingress::ForwardingOff);
    /// ```
    pub fn set_force_forwarding(&mut self, ifindex: i32, on: bool) -> bool {
        self.table.set_force_forwarding(ifindex, on)
    }

    /// Sets (or forgets, `None`) the bytes the kernel queues per unresolved neighbour of the
    /// ARP (`v6` false) or ND table on `ifindex` (`unres_qlen_bytes`); whether it changed.
    /// Forgotten with the device ([`remove`](Self::remove)). See
    /// [`DevConfTable::queue_bytes`](crate::DevConfTable::queue_bytes).
    pub fn set_queue_bytes(&mut self, v6: bool, ifindex: i32, bytes: Option<u32>) -> bool {
        self.table.set_queue_bytes(v6, ifindex, bytes)
    }
}
