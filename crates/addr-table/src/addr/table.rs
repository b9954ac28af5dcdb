//! [`AddrTable`]: one network namespace's local addresses, IPv4 and IPv6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use super::AddrError;
use super::entry::{IfAddr, NetnsId};
use super::family::{Family, Removal};
use super::flags::IfaFlags;
use crate::inline::Inline;
use crate::rhltable::{Params, RhlTable, check_guard};

/// What the address hash holds per address: enough to answer `dev_find` without touching the
/// interface lists, in one 32-bit word inline in the hash's bucket line (the interface index,
/// 31 bits as the kernel's positive `int`, and whether the address answers), so that an IPv4
/// slot takes 8 bytes and a line holds six. The interface lists hold the full [`IfAddr`]
/// (prefix length, flags, scope, lifetimes).
///
/// The hash does not keep the prefix length: the objects of one address are told apart by
/// their interface (IPv6 allows an address once per interface; IPv4 allows it again on the
/// same interface only with another prefix length, and those objects then answer the same
/// lookups, so which of them the hash drops first does not matter).
///
/// ```
/// use std::net::Ipv4Addr;
/// use addr_table::{AddrWriter, IfAddr, NetnsId};
///
/// let mut t = AddrWriter::new(NetnsId(1));
/// t.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 1), 24, 2))?;
/// let guard = crossbeam_epoch::pin();
/// let l = t.family::<Ipv4Addr>().hash().get(&0xc000_0201, &guard).unwrap();
/// assert_eq!((l.ifindex(), l.answers()), (2, true));
/// # Ok::<(), addr_table::AddrError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr {
    /// The interface index (at most `i32::MAX`, checked by the writer) in bits 0..31, and
    /// in bit 31 whether the address does **not** answer `dev_find` (IPv6: tentative and
    /// not optimistic, or failed DAD; IPv4: never), computed from its flags by the writer.
    /// Clear when it answers, so that the word of an address that answers is its ifindex,
    /// with nothing to mask off on `dev_find`'s hit.
    word: u32,
}

/// The largest interface index (the kernel's is a positive `int`).
const IFINDEX_MAX: u32 = i32::MAX as u32;

/// [`LocalAddr`]'s bit: the address does not answer.
const SILENT: u32 = 1 << 31;

impl LocalAddr {
    fn of<A: Family>(a: &IfAddr<A>) -> Self {
        LocalAddr::new(a.ifindex, A::answers(a.flags))
    }

    fn new(ifindex: u32, answers: bool) -> Self {
        LocalAddr {
            word: (ifindex & IFINDEX_MAX) | if answers { 0 } else { SILENT },
        }
    }

    /// The interface holding the address.
    pub fn ifindex(&self) -> u32 {
        self.word & IFINDEX_MAX
    }

    /// Whether the address counts as local for [`AddrTable::dev_find`] and
    /// [`AddrTable::is_local`] (its flags as of the last add or update).
    pub fn answers(&self) -> bool {
        self.word & SILENT == 0
    }

    /// The ifindex of an address that answers: the word as it is (its `SILENT` bit is clear).
    #[inline(always)]
    fn answering_ifindex(&self) -> u32 {
        debug_assert!(self.answers());
        self.word
    }
}

impl std::fmt::Debug for LocalAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalAddr")
            .field("ifindex", &self.ifindex())
            .field("answers", &self.answers())
            .finish()
    }
}

impl Inline for LocalAddr {
    const WORDS: usize = 1;

    #[inline(always)]
    fn store(self, words: &mut [u32]) {
        words[0] = self.word;
    }

    #[inline(always)]
    fn load(words: &[u32]) -> Self {
        LocalAddr { word: words[0] }
    }
}

/// One interface's addresses in kernel order.
#[derive(Debug)]
struct DevAddrs<A> {
    ifindex: u32,
    addrs: Arc<[IfAddr<A>]>,
}

/// Every interface's list, sorted by ifindex; replaced whole on each change (copy on write,
/// sharing the lists of the interfaces that did not change).
#[derive(Debug)]
struct DevList<A> {
    devs: Vec<DevAddrs<A>>,
}

impl<A> DevList<A> {
    fn get(&self, ifindex: u32) -> &[IfAddr<A>] {
        match self.devs.binary_search_by_key(&ifindex, |d| d.ifindex) {
            Ok(i) => &self.devs[i].addrs,
            Err(_) => &[],
        }
    }
}

/// One family's half of an [`AddrTable`]: the address hash ([`RhlTable`]) for `dev_find` and
/// the per-interface lists for iteration, source selection and lifetimes.
#[derive(Debug)]
pub struct FamilyTable<A: Family> {
    local: RhlTable<A::Key, LocalAddr>,
    devs: Atomic<DevList<A>>,
}

impl<A: Family> FamilyTable<A> {
    fn new(params: Params) -> Result<Self, AddrError> {
        Ok(FamilyTable {
            local: RhlTable::with_params(params)?,
            devs: Atomic::new(DevList { devs: Vec::new() }),
        })
    }

    /// The interface lists, as of now.
    fn dev_list<'g>(&'g self, guard: &'g Guard) -> &'g DevList<A> {
        check_guard(guard);
        let list = self.devs.load(Ordering::Acquire, guard);
        // SAFETY: `devs` is never null (set in `new`, only ever swapped for another list); a
        // replaced list is retired through the default collector, which `guard` pins, so it
        // outlives `'g`.
        unsafe { list.deref() }
    }

    /// The address hash (for benchmarks and diagnostics).
    pub fn hash(&self) -> &RhlTable<A::Key, LocalAddr> {
        &self.local
    }

    /// Replaces `ifindex`'s list with `addrs` (removing the interface when empty). Writer only.
    fn publish(&self, ifindex: u32, addrs: Vec<IfAddr<A>>, guard: &Guard) {
        let cur = self.dev_list(guard);
        let mut devs: Vec<DevAddrs<A>> = cur
            .devs
            .iter()
            .map(|d| DevAddrs {
                ifindex: d.ifindex,
                addrs: d.addrs.clone(),
            })
            .collect();
        match devs.binary_search_by_key(&ifindex, |d| d.ifindex) {
            Ok(i) if addrs.is_empty() => {
                devs.remove(i);
            }
            Ok(i) => devs[i].addrs = addrs.into(),
            Err(_) if addrs.is_empty() => {}
            Err(i) => devs.insert(
                i,
                DevAddrs {
                    ifindex,
                    addrs: addrs.into(),
                },
            ),
        }
        let old = self
            .devs
            .swap(Owned::new(DevList { devs }), Ordering::AcqRel, guard);
        // SAFETY: `old` is no longer reachable from `devs`; readers that loaded it pinned
        // before this swap, and the default collector frees it after they unpin.
        unsafe { guard.defer_destroy(old) };
    }

    fn hash_remove(&self, a: &IfAddr<A>) {
        let removed = self
            .local
            .remove(&a.addr.key(), |l| l.ifindex() == a.ifindex);
        debug_assert!(removed, "hash and lists agree");
    }

    fn hash_set_flags(&self, a: &IfAddr<A>) {
        let changed = self.local.update(
            &a.addr.key(),
            |l| l.ifindex() == a.ifindex,
            |l| *l = LocalAddr::new(l.ifindex(), A::answers(a.flags)),
        );
        debug_assert!(changed, "hash and lists agree");
    }

    fn add(&self, mut entry: IfAddr<A>) -> Result<IfAddr<A>, AddrError> {
        if entry.prefix_len > A::MAX_PREFIX_LEN {
            return Err(AddrError::PrefixLen {
                prefix_len: entry.prefix_len,
                max: A::MAX_PREFIX_LEN,
            });
        }
        if entry.ifindex == 0 {
            return Err(AddrError::ZeroIfindex);
        }
        if entry.ifindex > IFINDEX_MAX {
            return Err(AddrError::IfindexRange(entry.ifindex));
        }
        let guard = &epoch::pin();
        let mut list = self.dev_list(guard).get(entry.ifindex).to_vec();
        let slot = A::place(&list, &mut entry)?;
        self.local.insert(entry.addr.key(), LocalAddr::of(&entry))?;
        list.insert(slot, entry);
        self.publish(entry.ifindex, list, guard);
        Ok(entry)
    }

    fn remove(
        &self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
        promote: bool,
    ) -> Result<Removal<A>, AddrError> {
        let guard = &epoch::pin();
        let mut list = self.dev_list(guard).get(ifindex).to_vec();
        let index = list
            .iter()
            .position(|x| x.addr == addr && x.prefix_len == prefix_len)
            .ok_or(AddrError::NotFound)?;
        let removal = A::remove_at(&mut list, index, promote);
        self.publish(ifindex, list, guard);
        for a in &removal.removed {
            self.hash_remove(a);
        }
        if let Some(p) = &removal.promoted {
            self.hash_set_flags(p);
        }
        Ok(removal)
    }

    fn update(
        &self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
        change: impl FnOnce(&mut IfAddr<A>),
    ) -> Result<IfAddr<A>, AddrError> {
        let guard = &epoch::pin();
        let mut list = self.dev_list(guard).get(ifindex).to_vec();
        let x = list
            .iter_mut()
            .find(|x| x.addr == addr && x.prefix_len == prefix_len)
            .ok_or(AddrError::NotFound)?;
        let secondary = x.flags.contains(IfaFlags::SECONDARY);
        let (addr0, plen0, if0) = (x.addr, x.prefix_len, x.ifindex);
        change(x);
        // Identity and the computed IPv4 SECONDARY bit are not the caller's to change.
        (x.addr, x.prefix_len, x.ifindex) = (addr0, plen0, if0);
        if A::MAX_PREFIX_LEN == 32 {
            x.flags = if secondary {
                x.flags.with(IfaFlags::SECONDARY)
            } else {
                x.flags.without(IfaFlags::SECONDARY)
            };
        }
        let updated = *x;
        self.publish(ifindex, list, guard);
        self.hash_set_flags(&updated);
        Ok(updated)
    }

    fn remove_interface(&self, ifindex: u32) -> Vec<IfAddr<A>> {
        let guard = &epoch::pin();
        let list = self.dev_list(guard).get(ifindex).to_vec();
        self.publish(ifindex, Vec::new(), guard);
        for a in &list {
            self.hash_remove(a);
        }
        list
    }

    fn sweep(&self, now: Instant, promote: bool) -> FamilySweep<A> {
        let mut out = FamilySweep {
            expired: Vec::new(),
            promoted: Vec::new(),
            deprecated: Vec::new(),
        };
        // Walk the interface lists (never the hash), as the kernel's check_lifetime does.
        loop {
            let guard = &epoch::pin();
            let due = self
                .dev_list(guard)
                .devs
                .iter()
                .flat_map(|d| d.addrs.iter())
                .find(|a| a.valid_until.is_some_and(|t| t <= now))
                .copied();
            let Some(a) = due else { break };
            if let Ok(r) = self.remove(a.addr, a.prefix_len, a.ifindex, promote) {
                out.expired.extend(r.removed);
                out.promoted.extend(r.promoted);
            }
        }
        let guard = &epoch::pin();
        let stale: Vec<IfAddr<A>> = self
            .dev_list(guard)
            .devs
            .iter()
            .flat_map(|d| d.addrs.iter())
            .filter(|a| {
                a.preferred_until.is_some_and(|t| t <= now)
                    && !a.flags.contains(IfaFlags::DEPRECATED)
            })
            .copied()
            .collect();
        for a in stale {
            if let Ok(u) = self.update(a.addr, a.prefix_len, a.ifindex, |x| {
                x.flags = x.flags.with(IfaFlags::DEPRECATED);
            }) {
                out.deprecated.push(u);
            }
        }
        out
    }

    fn next_deadline(&self) -> Option<Instant> {
        let guard = &epoch::pin();
        self.dev_list(guard)
            .devs
            .iter()
            .flat_map(|d| d.addrs.iter())
            .flat_map(|a| {
                let preferred = a
                    .preferred_until
                    .filter(|_| !a.flags.contains(IfaFlags::DEPRECATED));
                [a.valid_until, preferred]
            })
            .flatten()
            .min()
    }

    #[inline]
    fn dev_find(&self, addr: A, ifindex: Option<u32>, guard: &Guard) -> Option<u32> {
        // IPv4 addresses always answer (their `SILENT` bit is never set): no test of the bit
        // (a constant per family), and the word of an address that answers is its ifindex.
        let answers = |l: &LocalAddr| A::ALWAYS_ANSWERS || l.answers();
        match ifindex {
            // The common case (`is_local`, `__ip_dev_find` without a device) on its own path.
            None => self.local.find_map(&addr.key(), guard, |l| {
                answers(l).then(|| l.answering_ifindex())
            }),
            Some(i) => self.local.find_map(&addr.key(), guard, |l| {
                (answers(l) && l.answering_ifindex() == i).then_some(i)
            }),
        }
    }
}

impl<A: Family> Drop for FamilyTable<A> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader can hold the current list; retired ones are owned by
        // the collector.
        drop(unsafe {
            self.devs
                .load(Ordering::Relaxed, epoch::unprotected())
                .into_owned()
        });
    }
}

/// What a [`sweep`](AddrTable::sweep) did to one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySweep<A> {
    /// Addresses whose valid lifetime ran out, removed (with IPv4 secondaries that went with
    /// an expired primary).
    pub expired: Vec<IfAddr<A>>,
    /// IPv4 secondaries promoted in place of an expired primary.
    pub promoted: Vec<IfAddr<A>>,
    /// Addresses whose preferred lifetime ran out, now flagged `DEPRECATED`.
    pub deprecated: Vec<IfAddr<A>>,
}

/// What a [`sweep`](AddrTable::sweep) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// IPv4 changes.
    pub v4: FamilySweep<Ipv4Addr>,
    /// IPv6 changes.
    pub v6: FamilySweep<Ipv6Addr>,
}

/// How an [`AddrTable`] behaves where the kernel has a sysctl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddrConfig {
    /// `net.ipv4.conf.*.promote_secondaries`: when an IPv4 primary goes, promote the first
    /// secondary of its subnet instead of removing them all. Kernel default: off (many
    /// distributions turn it on; mirror the namespace's sysctl).
    pub promote_secondaries: bool,
    /// Sizing of both address hashes (default: 32 buckets, as the seed post).
    pub params: Params,
}

/// The local addresses of one network namespace, IPv4 and IPv6: the user-space counterpart of
/// the kernel's per-namespace `inet_addr_lst` / `inet6_addr_lst` (as rhltables) and of each
/// device's address list.
///
/// Readers pass a `&Guard` and never lock. A table shared with readers has no method that
/// changes it: its one [`AddrWriter`](crate::AddrWriter) makes it and changes it. Writes
/// take effect in the hash and the interface lists one after the other, so a reader racing a
/// write may see the address in one and not yet in the other, as in the kernel.
///
/// ```
/// use std::net::Ipv4Addr;
/// use addr_table::{AddrWriter, IfAddr, NetnsId};
///
/// let mut writer = AddrWriter::new(NetnsId(1));
/// let table = writer.reader().clone(); // a run loop's `Arc<AddrTable>`: read only
/// writer.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 1), 24, 2))?;
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(table.dev_find(Ipv4Addr::new(192, 0, 2, 1), None, &guard), Some(2));
/// assert!(table.is_local("192.0.2.1".parse().unwrap(), &guard));
/// # Ok::<(), addr_table::AddrError>(())
/// ```
#[derive(Debug)]
pub struct AddrTable {
    netns: NetnsId,
    config: AddrConfig,
    pub(crate) v4: FamilyTable<Ipv4Addr>,
    pub(crate) v6: FamilyTable<Ipv6Addr>,
    writer: Mutex<()>,
}

impl AddrTable {
    /// [`AddrWriter::new`](crate::AddrWriter::new). Writer only.
    pub(crate) fn new(netns: NetnsId) -> Self {
        // The default parameters are valid.
        Self::with_config(netns, AddrConfig::default()).unwrap_or_else(|_| unreachable!())
    }

    /// [`AddrWriter::with_config`](crate::AddrWriter::with_config). Writer only.
    pub(crate) fn with_config(netns: NetnsId, config: AddrConfig) -> Result<Self, AddrError> {
        Ok(AddrTable {
            netns,
            config,
            v4: FamilyTable::new(config.params)?,
            v6: FamilyTable::new(config.params)?,
            writer: Mutex::new(()),
        })
    }

    /// The namespace this table belongs to.
    pub fn netns(&self) -> NetnsId {
        self.netns
    }

    /// The configuration.
    pub fn config(&self) -> &AddrConfig {
        &self.config
    }

    /// One family's half (for its address hash's statistics).
    pub fn family<A: Family>(&self) -> &FamilyTable<A> {
        A::of(self)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- writers -------------------------------------------------------------------------

    /// [`AddrWriter::add`](crate::AddrWriter::add). Writer only.
    pub(crate) fn add<A: Family>(&self, entry: IfAddr<A>) -> Result<IfAddr<A>, AddrError> {
        let _w = self.lock();
        A::of(self).add(entry)
    }

    /// [`AddrWriter::remove`](crate::AddrWriter::remove). Writer only.
    pub(crate) fn remove<A: Family>(
        &self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
    ) -> Result<Removal<A>, AddrError> {
        let _w = self.lock();
        A::of(self).remove(addr, prefix_len, ifindex, self.config.promote_secondaries)
    }

    /// [`AddrWriter::update`](crate::AddrWriter::update). Writer only.
    pub(crate) fn update<A: Family>(
        &self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
        change: impl FnOnce(&mut IfAddr<A>),
    ) -> Result<IfAddr<A>, AddrError> {
        let _w = self.lock();
        A::of(self).update(addr, prefix_len, ifindex, change)
    }

    /// [`AddrWriter::remove_interface`](crate::AddrWriter::remove_interface). Writer only.
    pub(crate) fn remove_interface(
        &self,
        ifindex: u32,
    ) -> (Vec<IfAddr<Ipv4Addr>>, Vec<IfAddr<Ipv6Addr>>) {
        let _w = self.lock();
        (
            self.v4.remove_interface(ifindex),
            self.v6.remove_interface(ifindex),
        )
    }

    /// [`AddrWriter::sweep`](crate::AddrWriter::sweep). Writer only.
    pub(crate) fn sweep(&self, now: Instant) -> Sweep {
        let _w = self.lock();
        Sweep {
            v4: self.v4.sweep(now, self.config.promote_secondaries),
            v6: self.v6.sweep(now, false),
        }
    }

    /// [`AddrWriter::finish_rehash`](crate::AddrWriter::finish_rehash). Writer only.
    pub(crate) fn finish_rehash(&self) {
        let _w = self.lock();
        self.v4.local.finish_rehash();
        self.v6.local.finish_rehash();
    }

    /// The earliest instant at which a [`sweep`](Self::sweep) would change something.
    pub fn next_deadline(&self) -> Option<Instant> {
        let _w = self.lock();
        [self.v4.next_deadline(), self.v6.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    // ---- readers -------------------------------------------------------------------------

    /// Which interface holds the local address `addr` (the kernel's `__ip_dev_find`; for
    /// IPv6, `ipv6_chk_addr`): the newest holder, or with `Some(ifindex)` that interface only.
    /// IPv6 addresses that are tentative (and not optimistic) or failed DAD do not count.
    ///
    /// Unlike the kernel, there is no fallback to the local routing table: that is the FIB's.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    #[inline]
    pub fn dev_find<A: Family>(&self, addr: A, ifindex: Option<u32>, guard: &Guard) -> Option<u32> {
        A::of(self).dev_find(addr, ifindex, guard)
    }

    /// [`dev_find`](Self::dev_find) for either family.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    #[inline]
    pub fn dev_find_ip(&self, addr: IpAddr, ifindex: Option<u32>, guard: &Guard) -> Option<u32> {
        match addr {
            IpAddr::V4(a) => self.dev_find(a, ifindex, guard),
            IpAddr::V6(a) => self.dev_find(a, ifindex, guard),
        }
    }

    /// Whether `addr` is a local address of this namespace.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    #[inline]
    pub fn is_local(&self, addr: IpAddr, guard: &Guard) -> bool {
        self.dev_find_ip(addr, None, guard).is_some()
    }

    /// An interface's addresses in kernel order: IPv4 primaries (narrow scope first, then in
    /// insertion order) followed by secondaries in insertion order; IPv6 by scope, widest
    /// first, newest first within a scope.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn addrs<'g, A: Family>(&'g self, ifindex: u32, guard: &'g Guard) -> &'g [IfAddr<A>] {
        A::of(self).dev_list(guard).get(ifindex)
    }

    /// Every interface with addresses of family `A`, by ascending ifindex, with its list.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()`.
    pub fn interfaces<'g, A: Family>(
        &'g self,
        guard: &'g Guard,
    ) -> impl Iterator<Item = (u32, &'g [IfAddr<A>])> + 'g {
        A::of(self)
            .dev_list(guard)
            .devs
            .iter()
            .map(|d| (d.ifindex, &d.addrs[..]))
    }

    /// Number of distinct local addresses of family `A`.
    pub fn len<A: Family>(&self) -> usize {
        A::of(self).local.len()
    }

    /// Whether the namespace has no address of either family.
    pub fn is_empty(&self) -> bool {
        self.v4.local.is_empty() && self.v6.local.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addr_word_of_an_answering_address_is_its_ifindex() {
        for ifindex in [1, 2, 0x1234_5678, IFINDEX_MAX] {
            for answers in [true, false] {
                let l = LocalAddr::new(ifindex, answers);
                assert_eq!((l.ifindex(), l.answers()), (ifindex, answers));
                let mut w = [0];
                l.store(&mut w);
                assert_eq!(LocalAddr::load(&w), l);
                // What `dev_find`'s hit returns without masking.
                assert_eq!(w[0] == ifindex, answers, "{l:?}");
                if answers {
                    assert_eq!(l.answering_ifindex(), ifindex);
                }
            }
        }
        // IPv4 addresses always answer: their word is their ifindex, whatever the flags.
        let a = IfAddr::new(Ipv4Addr::new(192, 0, 2, 1), 24, 7).with_flags(IfaFlags::TENTATIVE);
        assert_eq!(LocalAddr::of(&a).word, 7);
        let a = IfAddr::new(Ipv6Addr::LOCALHOST, 128, 7).with_flags(IfaFlags::TENTATIVE);
        assert!(!LocalAddr::of(&a).answers());
        assert_eq!(
            format!("{:?}", LocalAddr::of(&a)),
            "LocalAddr { ifindex: 7, answers: false }"
        );
    }
}
