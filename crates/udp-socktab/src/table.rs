//! The reader's side: [`SockTable`] with the global [`UdpTable`], the namespaces' child tables,
//! and the lookup (`__udp4_lib_lookup` / `__udp6_lib_lookup`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_epoch::{Atomic, Guard, Owned};

use crate::chain::ChainHead;
use crate::guard::check_guard;
use crate::hash;
use crate::reuseport::select_by_hash;
use crate::sock::{Key, Lookup, NetnsId, Sock};

/// A hash2 slot: the chain of sockets by (local address, port) and how many sockets of this
/// slot are also in hash4 (`hash4_cnt`: no hash4 lookup when zero).
#[derive(Debug, Default)]
pub(crate) struct Slot2 {
    pub(crate) chain: ChainHead,
    pub(crate) hash4_cnt: AtomicU32,
}

/// One `udp_table`: hash2 and hash4 slots (as many of each), read by lookups. Its hash (by port)
/// chains are only used by the writer, which keeps them itself.
#[derive(Debug)]
pub(crate) struct UdpTable {
    pub(crate) mask: u32,
    pub(crate) log: u32,
    pub(crate) hash2: Box<[Slot2]>,
    pub(crate) hash4: Box<[ChainHead]>,
}

impl UdpTable {
    /// A table of `entries` slots (a power of two).
    pub(crate) fn new(entries: u32) -> UdpTable {
        debug_assert!(entries.is_power_of_two());
        UdpTable {
            mask: entries - 1,
            log: entries.trailing_zeros(),
            hash2: (0..entries).map(|_| Slot2::default()).collect(),
            hash4: (0..entries).map(|_| ChainHead::default()).collect(),
        }
    }

    /// The number of slots.
    pub(crate) fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// The hash2 slot of (address, port) in a namespace with hash mix `mix`.
    pub(crate) fn slot2(&self, mix: u32, addr: u128, port: u16) -> usize {
        (hash::portaddr_hash(mix, addr, port) & self.mask) as usize
    }

    /// The hash4 slot of a 4-tuple.
    pub(crate) fn slot4(
        &self,
        mix: u32,
        laddr: u128,
        lport: u16,
        faddr: u128,
        fport: u16,
    ) -> usize {
        (hash::ehash(mix, laddr, lport, faddr, fport) & self.mask) as usize
    }

    /// `udp4_lib_lookup4`: the first connected socket with exactly this 4-tuple.
    fn lookup4<'g>(&self, mix: u32, key: &Key, guard: &'g Guard) -> Option<&'g Sock> {
        let slot = self.slot4(mix, key.daddr, key.dport, key.saddr, key.sport);
        self.hash4[slot]
            .load(guard)
            .iter()
            .map(|sk| &**sk)
            .find(|sk| sk.matches4(key))
    }

    /// `udp4_lib_lookup2`: the best-scoring socket of one hash2 chain, where the first
    /// unconnected socket to reach a new best score hands over to its `SO_REUSEPORT` group; if
    /// that group never had a connected member, the group's pick is the answer at once.
    fn lookup2<'g>(&self, slot: usize, key: &Key, guard: &'g Guard) -> Option<&'g Sock> {
        let mut result: Option<&'g Sock> = None;
        // IPv6 scores start at 0, so a first match must beat -1 (IPv4 ones start at 1).
        let mut badness = -1;
        for sk in self.hash2[slot].chain.load(guard) {
            let sk: &'g Sock = sk;
            let score = key.score(sk);
            if score <= badness {
                continue;
            }
            badness = score;
            if sk.connected {
                result = Some(sk);
                continue;
            }
            let Some(group) = sk.group.as_deref().and_then(|g| g.load(guard)) else {
                result = Some(sk);
                continue;
            };
            let Some(pick) = select_by_hash(group, key.hash, key.cpu) else {
                result = Some(sk);
                continue;
            };
            if !group.has_conns {
                return Some(pick);
            }
            // The group has had connections: keep scoring, from the pick's own score.
            result = Some(pick);
            badness = badness.max(key.score(pick));
        }
        result
    }

    /// The whole lookup in this table: hash4 (when the destination's hash2 slot has hash4
    /// users), hash2 at the destination address, hash2 at the wildcard address.
    pub(crate) fn lookup<'g>(&self, mix: u32, key: &Key, guard: &'g Guard) -> Option<&'g Sock> {
        let slot = self.slot2(mix, key.daddr, key.dport);
        if self.hash2[slot].hash4_cnt.load(Ordering::Acquire) != 0 {
            if let Some(sk) = self.lookup4(mix, key, guard) {
                return Some(sk);
            }
        }
        self.lookup_hash2(mix, key, guard)
    }

    /// hash2 at the destination address, then at the wildcard.
    pub(crate) fn lookup_hash2<'g>(
        &self,
        mix: u32,
        key: &Key,
        guard: &'g Guard,
    ) -> Option<&'g Sock> {
        let slot = self.slot2(mix, key.daddr, key.dport);
        if let Some(sk) = self.lookup2(slot, key, guard) {
            return Some(sk);
        }
        let any = key.at_any();
        let slot = self.slot2(mix, any.daddr, any.dport);
        self.lookup2(slot, &any, guard)
    }

    /// The hash2 chain lengths at a destination and at the wildcard of its port.
    pub(crate) fn visited_lengths(&self, mix: u32, key: &Key, guard: &Guard) -> (usize, usize) {
        let at = self.slot2(mix, key.daddr, key.dport);
        let any = key.at_any();
        let at_any = self.slot2(mix, any.daddr, any.dport);
        (
            self.hash2[at].chain.load(guard).len(),
            self.hash2[at_any].chain.load(guard).len(),
        )
    }

    /// The length of every hash2 chain (writer or statistics use).
    pub(crate) fn hash2_lengths(&self, guard: &Guard) -> Vec<usize> {
        self.hash2
            .iter()
            .map(|s| s.chain.load(guard).len())
            .collect()
    }
}

/// A namespace as readers see it: its hash mix and, when it has one, its own table.
#[derive(Debug)]
pub(crate) struct NetnsEntry {
    pub(crate) mix: u32,
    pub(crate) child: Option<UdpTable>,
}

/// The namespaces, indexed by [`NetnsId`]; replaced whole when one is added or removed.
#[derive(Debug, Default)]
pub(crate) struct NetnsVec {
    pub(crate) entries: Box<[Option<Arc<NetnsEntry>>]>,
}

/// The socket tables as lookups see them: shared (in an `Arc`) between the run loops, which
/// call [`SockTable::lookup`] under their epoch guard, and the one [`Writer`](crate::Writer)
/// that changes them.
#[derive(Debug)]
pub struct SockTable {
    pub(crate) global: UdpTable,
    pub(crate) netns: Atomic<NetnsVec>,
}

impl SockTable {
    pub(crate) fn with_entries(entries: u32) -> SockTable {
        SockTable {
            global: UdpTable::new(entries),
            netns: Atomic::new(NetnsVec::default()),
        }
    }

    /// The namespace entry, valid while `guard` is pinned.
    pub(crate) fn netns_entry<'g>(
        &self,
        netns: NetnsId,
        guard: &'g Guard,
    ) -> Option<&'g NetnsEntry> {
        let shared = self.netns.load(Ordering::Acquire, guard);
        // SAFETY: a namespace vector is freed only through `defer_destroy` after the writer
        // unlinked it (`publish_netns`), or when the table is dropped (no reader left); the
        // vector is never null after construction.
        let vec = unsafe { shared.as_ref() }?;
        vec.entries.get(netns.0 as usize)?.as_deref()
    }

    /// The table a namespace's sockets live in, with the namespace's hash mix.
    pub(crate) fn table_of<'g>(
        &'g self,
        netns: NetnsId,
        guard: &'g Guard,
    ) -> Option<(&'g UdpTable, u32)> {
        let entry = self.netns_entry(netns, guard)?;
        Some((entry.child.as_ref().unwrap_or(&self.global), entry.mix))
    }

    /// Replaces the namespace vector (writer only).
    pub(crate) fn publish_netns(&self, vec: NetnsVec, guard: &Guard) {
        let old = self.netns.swap(Owned::new(vec), Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: unlinked by the swap above by the single writer, so retired once;
            // readers that loaded it are protected by their guards until it is destroyed.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Finds the socket that receives a datagram, as the kernel's `__udp4_lib_lookup` /
    /// `__udp6_lib_lookup` would: hash4 exact match → hash2 at the destination address →
    /// hash2 at the wildcard address, best score first, `SO_REUSEPORT` groups picked from by
    /// flow hash. Lock-free: no allocation, lock or write (beyond none at all) per call.
    ///
    /// `None` for an unknown namespace, a source and destination of different families, or
    /// no matching socket.
    ///
    /// ```
    /// use udp_socktab::{Family, Lookup, NetnsConfig, SockOptions, SockTable, TableConfig};
    ///
    /// let (table, mut writer) = SockTable::new(TableConfig::default())?;
    /// let ns = writer.add_netns(NetnsConfig::default())?;
    /// let s = writer.socket(ns, Family::V4, SockOptions::default())?;
    /// writer.bind(s, "0.0.0.0:53".parse()?)?;
    ///
    /// let guard = crossbeam_epoch::pin();
    /// let key = Lookup {
    ///     netns: ns,
    ///     src: "192.0.2.7:4000".parse()?,
    ///     dst: "192.0.2.1:53".parse()?,
    ///     ifindex: 2,
    ///     hash: 7,
    ///     cpu: 0,
    /// };
    /// assert_eq!(table.lookup(&key, &guard).map(|sk| sk.id()), Some(s));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup<'g>(&'g self, lookup: &Lookup, guard: &'g Guard) -> Option<&'g Sock> {
        check_guard(guard);
        let key = Key::new(lookup)?;
        let (table, mix) = self.table_of(key.netns, guard)?;
        table.lookup(mix, &key, guard)
    }

    /// The lookup without its hash4 step, as kernels before 6.13 did it: hash2 at the
    /// destination, then at the wildcard. The benchmarks' baseline for connected sockets; it
    /// finds the same socket as [`SockTable::lookup`] except among connected sockets of one
    /// 4-tuple, where hash4 and hash2 order them differently.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    pub fn lookup_hash2_only<'g>(&'g self, lookup: &Lookup, guard: &'g Guard) -> Option<&'g Sock> {
        check_guard(guard);
        let key = Key::new(lookup)?;
        let (table, mix) = self.table_of(key.netns, guard)?;
        table.lookup_hash2(mix, &key, guard)
    }

    /// The hash2 chain lengths of the table that `netns` uses (the global one when it has
    /// none of its own): for reports on how full chains are.
    pub fn chain_lengths(&self, netns: NetnsId) -> Option<Vec<usize>> {
        let guard = crossbeam_epoch::pin();
        let (table, _) = self.table_of(netns, &guard)?;
        Some(table.hash2_lengths(&guard))
    }

    /// The lengths of the two hash2 chains a lookup walks (at the destination address, at the
    /// wildcard), for reports; `None` for an unknown namespace or mixed families.
    pub fn visited_chain_lengths(&self, lookup: &Lookup) -> Option<(usize, usize)> {
        let key = Key::new(lookup)?;
        let guard = crossbeam_epoch::pin();
        let (table, mix) = self.table_of(key.netns, &guard)?;
        Some(table.visited_lengths(mix, &key, &guard))
    }

    /// The number of slots of the table that `netns` uses.
    pub fn entries_of(&self, netns: NetnsId) -> Option<u32> {
        let guard = crossbeam_epoch::pin();
        self.table_of(netns, &guard).map(|(t, _)| t.entries())
    }

    /// Empties every group a socket in `table` belongs to, breaking group ↔ record cycles.
    fn clear_groups(table: &UdpTable, guard: &Guard) {
        for slot in table.hash2.iter() {
            for sk in slot.chain.load(guard) {
                if let Some(group) = &sk.group {
                    group.publish(None, guard);
                }
            }
        }
    }
}

impl Drop for SockTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader holds the table any more and no writer can change
        // it, so what is unlinked here can be freed at once.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        SockTable::clear_groups(&self.global, guard);
        let vec = self
            .netns
            .swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, guard);
        if !vec.is_null() {
            // SAFETY: as above; the vector was unlinked just now and nobody else can see it.
            let vec = unsafe { vec.into_owned() };
            for entry in vec.entries.iter().flatten() {
                if let Some(child) = &entry.child {
                    SockTable::clear_groups(child, guard);
                }
            }
        }
    }
}
