//! Per-device forwarding switches: the `net.ipv4.conf.{all,default,DEV}` and
//! `net.ipv6.conf.{all,default,DEV}` values that decide whether a packet arriving on a device
//! may be forwarded at all (`forwarding`) and whether its source must pass reverse-path
//! validation (`rp_filter`), as the kernel reports them in `RTM_NEWNETCONF`.
//!
//! What the kernel does with them (`ip_route_input_slow`, `ip6_forward`):
//! - IPv4 forwards a packet only when the ingress device's own `forwarding` is on (setting
//!   `all` sets every device); otherwise every non-local destination answers "host
//!   unreachable".
//! - IPv6 forwards only when `net.ipv6.conf.all.forwarding` is on, or the ingress device's
//!   `force_forwarding` (Linux 6.17 and later; netconf does not report it: the mirror reads it
//!   from sysctl, [`DevConfTable::set_force_forwarding`]).
//! - IPv4 validates the source of a packet when `max(all.rp_filter, DEV.rp_filter)` is 1
//!   (strict: the reverse route must leave through the ingress device) or 2 (loose: some
//!   route must reach the source).
//!
//! [`DevConfTable::ingress`] answers for one packet: forward, or why the kernel must decide.
//! A device the table has never heard of takes the `default` entry (a new device starts with
//! it), and without one, the kernel decides.
//!
//! ```
//! use neigh_table::{DevConf, DevConfWriter, Ingress, NETCONF_ALL, NETCONF_DEFAULT};
//!
//! let mut t = DevConfWriter::followed();
//! let guard = crossbeam_epoch::pin();
//! assert_eq!(t.ingress(3, false, &guard), Ingress::Unknown);
//! t.update(false, NETCONF_DEFAULT, DevConf { forwarding: Some(true), rp_filter: Some(0) });
//! t.update(false, NETCONF_ALL, DevConf { forwarding: Some(true), rp_filter: Some(0) });
//! t.update(false, 3, DevConf { forwarding: Some(false), rp_filter: None });
//! assert_eq!(t.ingress(3, false, &guard), Ingress::ForwardingOff);
//! assert_eq!(t.ingress(4, false, &guard), Ingress::Forward);
//! t.update(false, NETCONF_ALL, DevConf { forwarding: None, rp_filter: Some(2) });
//! assert_eq!(t.ingress(4, false, &guard), Ingress::RpFilter { strict: false });
//! ```

use std::fmt;

use crossbeam_epoch::Guard;

use crate::cow_map::CowMap;
use crate::guard::check_guard;

/// `NETCONFA_IFINDEX_ALL`: the `all` entry.
pub const NETCONF_ALL: i32 = -1;
/// `NETCONFA_IFINDEX_DEFAULT`: the `default` entry (new devices start with it).
pub const NETCONF_DEFAULT: i32 = -2;

/// The switches of one entry, as far as the kernel has reported them (`None`: not yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevConf {
    /// `forwarding`.
    pub forwarding: Option<bool>,
    /// `rp_filter` (0 off, 1 strict, 2 loose; IPv4 only).
    pub rp_filter: Option<u8>,
}

impl DevConf {
    /// `self` with the values `newer` reports (a notification carries only what changed).
    ///
    /// ```
    /// use neigh_table::DevConf;
    ///
    /// let a = DevConf { forwarding: Some(true), rp_filter: Some(1) };
    /// let b = a.merged(DevConf { forwarding: None, rp_filter: Some(0) });
    /// assert_eq!(b, DevConf { forwarding: Some(true), rp_filter: Some(0) });
    /// ```
    pub fn merged(self, newer: DevConf) -> DevConf {
        DevConf {
            forwarding: newer.forwarding.or(self.forwarding),
            rp_filter: newer.rp_filter.or(self.rp_filter),
        }
    }
}

/// What the switches say about a packet arriving on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// Forwarding is on and no source validation is asked for.
    Forward,
    /// Forwarding is off for this packet (the kernel answers "host unreachable" or drops).
    ForwardingOff,
    /// Reverse-path filtering is on for the device: the source must be routed back out of
    /// the ingress device (`strict`, `rp_filter` 1) or at all (loose, 2).
    RpFilter {
        /// Strict (1) rather than loose (2).
        strict: bool,
    },
    /// The table has no entry for the device nor a default (not yet synchronised).
    Unknown,
}

/// The switches of one namespace, by (family, netconf ifindex), readable without locks;
/// changed only through its one [`DevConfWriter`](crate::DevConfWriter).
pub struct DevConfTable {
    map: CowMap<(bool, i32), DevConf>,
    /// `net.ipv4.conf.{all,DEV}.accept_local` (not in netconf: read from sysctl), by netconf
    /// ifindex; only the entries that are on.
    accept_local: CowMap<i32, ()>,
    /// `net.ipv6.conf.DEV.force_forwarding` (not in netconf: read from sysctl), by ifindex;
    /// only the devices where it is on.
    force_forwarding: CowMap<i32, ()>,
    /// `net.ipv{4,6}.neigh.DEV.unres_qlen_bytes` (the neighbour table's `QUEUE_LENBYTES`;
    /// not notified by the kernel: read from sysctl), by (IPv6, ifindex): the bytes the
    /// kernel queues per unresolved neighbour on that device.
    queue_bytes: CowMap<(bool, i32), u32>,
    /// Forward everything when nothing is known (a table nobody follows).
    permissive: bool,
}

impl fmt::Debug for DevConfTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevConfTable")
            .field("entries", &self.map.len())
            .field("permissive", &self.permissive)
            .finish()
    }
}

impl DevConfTable {
    /// [`DevConfWriter::permissive`](crate::DevConfWriter::permissive). Writer only.
    pub(crate) fn permissive() -> Self {
        DevConfTable {
            map: CowMap::new(),
            accept_local: CowMap::new(),
            force_forwarding: CowMap::new(),
            queue_bytes: CowMap::new(),
            permissive: true,
        }
    }

    /// [`DevConfWriter::followed`](crate::DevConfWriter::followed). Writer only.
    pub(crate) fn followed() -> Self {
        DevConfTable {
            map: CowMap::new(),
            accept_local: CowMap::new(),
            force_forwarding: CowMap::new(),
            queue_bytes: CowMap::new(),
            permissive: false,
        }
    }

    /// [`DevConfWriter::update`](crate::DevConfWriter::update). Writer only.
    pub(crate) fn update(&self, v6: bool, ifindex: i32, conf: DevConf) -> bool {
        let guard = crossbeam_epoch::pin();
        let old = self.map.get(&(v6, ifindex), &guard).copied();
        let new = old.unwrap_or_default().merged(conf);
        if old == Some(new) {
            return false;
        }
        self.map.upsert((v6, ifindex), new).1
    }

    /// [`DevConfWriter::remove`](crate::DevConfWriter::remove). Writer only.
    pub(crate) fn remove(&self, ifindex: i32) -> bool {
        self.accept_local.remove_where(|i, _| *i == ifindex);
        self.force_forwarding.remove_where(|i, _| *i == ifindex);
        self.queue_bytes.remove_where(|(_, i), _| *i == ifindex);
        !self.map.remove_where(|(_, i), _| *i == ifindex).is_empty()
    }

    /// [`DevConfWriter::set_accept_local`](crate::DevConfWriter::set_accept_local). Writer only.
    pub(crate) fn set_accept_local(&self, ifindex: i32, on: bool) -> bool {
        set_flag(&self.accept_local, ifindex, on)
    }

    /// [`DevConfWriter::set_force_forwarding`](crate::DevConfWriter::set_force_forwarding). Writer only.
    pub(crate) fn set_force_forwarding(&self, ifindex: i32, on: bool) -> bool {
        set_flag(&self.force_forwarding, ifindex, on)
    }

    /// [`DevConfWriter::set_queue_bytes`](crate::DevConfWriter::set_queue_bytes). Writer only.
    pub(crate) fn set_queue_bytes(&self, v6: bool, ifindex: i32, bytes: Option<u32>) -> bool {
        let guard = crossbeam_epoch::pin();
        if self.queue_bytes.get(&(v6, ifindex), &guard).copied() == bytes {
            return false;
        }
        match bytes {
            Some(b) => {
                self.queue_bytes.upsert((v6, ifindex), b);
            }
            None => {
                self.queue_bytes.remove_where(|k, _| *k == (v6, ifindex));
            }
        }
        true
    }

    /// The bytes the kernel queues per unresolved neighbour (`unres_qlen_bytes`) of the ARP
    /// (`v6` false) or ND table on `ifindex`, if the mirror has read it.
    ///
    /// ```
    /// use neigh_table::DevConfWriter;
    ///
    /// let mut t = DevConfWriter::followed();
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(t.queue_bytes(3, false, &guard), None);
    /// assert!(t.set_queue_bytes(false, 3, Some(65_536)));
    /// assert!(!t.set_queue_bytes(false, 3, Some(65_536)), "unchanged");
    /// assert_eq!(t.queue_bytes(3, false, &guard), Some(65_536));
    /// assert_eq!(t.queue_bytes(3, true, &guard), None, "ND has its own");
    /// ```
    #[inline]
    pub fn queue_bytes(&self, ifindex: u32, v6: bool, guard: &Guard) -> Option<u32> {
        if self.queue_bytes.len() == 0 {
            return None;
        }
        let i = i32::try_from(ifindex).ok()?;
        self.queue_bytes.get(&(v6, i), guard).copied()
    }

    /// Whether an IPv4 packet arriving on `ifindex` may carry one of the host's own addresses
    /// as its source (`IN_DEV_ACCEPT_LOCAL`: `all` or the device's `accept_local`); the
    /// kernel's default (off) makes it a martian.
    ///
    /// ```
    /// use neigh_table::{DevConfWriter, NETCONF_ALL};
    ///
    /// let mut t = DevConfWriter::followed();
    /// let guard = crossbeam_epoch::pin();
    /// assert!(!t.accepts_local(3, &guard));
    /// t.set_accept_local(3, true);
    /// assert!(t.accepts_local(3, &guard) && !t.accepts_local(4, &guard));
    /// t.set_accept_local(NETCONF_ALL, true);
    /// assert!(t.accepts_local(4, &guard));
    /// ```
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector), even when no
    /// entry is on.
    #[inline]
    pub fn accepts_local(&self, ifindex: u32, guard: &Guard) -> bool {
        check_guard(guard);
        if self.accept_local.len() == 0 {
            return false;
        }
        self.accept_local.get(&NETCONF_ALL, guard).is_some()
            || i32::try_from(ifindex).is_ok_and(|i| self.accept_local.get(&i, guard).is_some())
    }

    /// The entry of `ifindex` for a family, as reported.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn get(&self, v6: bool, ifindex: i32, guard: &Guard) -> Option<DevConf> {
        self.map.get(&(v6, ifindex), guard).copied()
    }

    /// A counter bumped after every change is published.
    pub fn generation(&self) -> u64 {
        self.map.generation()
    }

    /// What the kernel does with a packet of family `v6` arriving on `ifindex`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector), even when the
    /// table is permissive and empty.
    #[inline]
    pub fn ingress(&self, ifindex: u32, v6: bool, guard: &Guard) -> Ingress {
        check_guard(guard);
        if self.permissive && self.map.len() == 0 {
            return Ingress::Forward;
        }
        let get = |i: i32| self.map.get(&(v6, i), guard).copied();
        let dev = i32::try_from(ifindex).ok().and_then(get);
        let Some(dev) = dev.or_else(|| get(NETCONF_DEFAULT)) else {
            return Ingress::Unknown;
        };
        let all = get(NETCONF_ALL).unwrap_or_default();
        let forwarding = if v6 {
            // `ip6_forward`: all's switch, or the ingress device's force_forwarding.
            let forced = self.force_forwarding.len() != 0
                && i32::try_from(ifindex)
                    .is_ok_and(|i| self.force_forwarding.get(&i, guard).is_some());
            if forced { Some(true) } else { all.forwarding }
        } else {
            dev.forwarding
        };
        match forwarding {
            None => return Ingress::Unknown,
            Some(false) => return Ingress::ForwardingOff,
            Some(true) => {}
        }
        if !v6 {
            let rp = dev.rp_filter.unwrap_or(0).max(all.rp_filter.unwrap_or(0));
            if rp != 0 {
                return Ingress::RpFilter { strict: rp == 1 };
            }
        }
        Ingress::Forward
    }
}

/// Puts `ifindex` in `flags` (`on`) or takes it out; returns whether that changed anything.
fn set_flag(flags: &CowMap<i32, ()>, ifindex: i32, on: bool) -> bool {
    let guard = crossbeam_epoch::pin();
    if flags.get(&ifindex, &guard).is_some() == on {
        return false;
    }
    if on {
        flags.upsert(ifindex, ());
    } else {
        flags.remove_where(|i, _| *i == ifindex);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(rp: u8) -> DevConf {
        DevConf {
            forwarding: Some(true),
            rp_filter: Some(rp),
        }
    }

    #[test]
    fn ipv4_follows_the_device_ipv6_follows_all() {
        let t = DevConfTable::followed();
        let g = crossbeam_epoch::pin();
        for v6 in [false, true] {
            t.update(v6, NETCONF_ALL, on(0));
            t.update(v6, NETCONF_DEFAULT, on(0));
            t.update(v6, 5, on(0));
        }
        assert_eq!(t.ingress(5, false, &g), Ingress::Forward);
        assert_eq!(t.ingress(5, true, &g), Ingress::Forward);
        let off = DevConf {
            forwarding: Some(false),
            rp_filter: None,
        };
        // IPv4: the device's own switch.
        assert!(t.update(false, 5, off));
        assert!(!t.update(false, 5, off), "no change");
        assert_eq!(t.ingress(5, false, &g), Ingress::ForwardingOff);
        assert_eq!(t.ingress(6, false, &g), Ingress::Forward, "default");
        // IPv6: a device's switch does not forward; `all` does.
        t.update(true, 5, off);
        assert_eq!(t.ingress(5, true, &g), Ingress::Forward);
        t.update(true, NETCONF_ALL, off);
        assert_eq!(t.ingress(6, true, &g), Ingress::ForwardingOff);
        // ... or the ingress device's force_forwarding (IPv6 only).
        assert!(t.set_force_forwarding(6, true));
        assert!(!t.set_force_forwarding(6, true), "no change");
        assert_eq!(t.ingress(6, true, &g), Ingress::Forward);
        assert_eq!(t.ingress(7, true, &g), Ingress::ForwardingOff);
        t.update(false, NETCONF_ALL, off);
        t.update(false, 6, off);
        assert_eq!(
            t.ingress(6, false, &g),
            Ingress::ForwardingOff,
            "IPv4 ignores it"
        );
        assert!(t.remove(6));
        assert_eq!(t.ingress(6, true, &g), Ingress::ForwardingOff, "forgotten");
    }

    #[test]
    fn rp_filter_is_the_larger_of_all_and_the_device_ipv4_only() {
        let t = DevConfTable::followed();
        let g = crossbeam_epoch::pin();
        for v6 in [false, true] {
            t.update(v6, NETCONF_ALL, on(0));
            t.update(v6, NETCONF_DEFAULT, on(0));
        }
        t.update(false, 2, on(1));
        assert_eq!(t.ingress(2, false, &g), Ingress::RpFilter { strict: true });
        assert_eq!(t.ingress(3, false, &g), Ingress::Forward);
        t.update(false, 2, on(0));
        t.update(false, NETCONF_ALL, on(2));
        assert_eq!(t.ingress(2, false, &g), Ingress::RpFilter { strict: false });
        assert_eq!(t.ingress(2, true, &g), Ingress::Forward, "IPv6 has none");
        assert!(t.remove(2));
        assert_eq!(
            t.ingress(2, false, &g),
            Ingress::RpFilter { strict: false },
            "default and all"
        );
    }

    #[test]
    fn unknown_devices_are_left_to_the_kernel_unless_permissive() {
        let g = crossbeam_epoch::pin();
        let t = DevConfTable::followed();
        assert_eq!(t.ingress(1, false, &g), Ingress::Unknown);
        t.update(false, NETCONF_ALL, on(0));
        assert_eq!(t.ingress(1, false, &g), Ingress::Unknown, "no default");
        assert_eq!(
            DevConfTable::permissive().ingress(1, false, &g),
            Ingress::Forward
        );
    }
}
