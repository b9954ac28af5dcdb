//! The writer's side: namespaces, sockets and their state changes (bind, connect,
//! disconnect, close), published into the shared [`SockTable`] copy-on-write.
//!
//! The writer also keeps the kernel's first hash table, by port (`udp_table.hash`), which only
//! writers use: for bind conflicts, for the port search and to find a `SO_REUSEPORT` group to
//! join. Its chains take new sockets at the head, IPv6 `SO_REUSEPORT` ones at the tail, like
//! the kernel's (the order decides which socket an explicit bind meets first).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use crossbeam_epoch::Guard;

use crate::addr::{self, has_v4_meaning, is_mapped, mapped};
use crate::config::{NetnsConfig, TableConfig, check_port_range};
use crate::conflict::{Standing, joins, standing};
use crate::error::{ConfigError, Error};
use crate::hash::port_slot;
use crate::reuseport::{GroupCell, GroupSnap, reciprocal_scale};
use crate::sock::{Family, NetnsId, Sock, SockId, SockOptions};
use crate::table::{NetnsEntry, NetnsVec, SockTable, UdpTable};

/// The bits of the port search's per-slot bitmap: 65536 ports over at least 128 slots
/// (`PORTS_PER_CHAIN`).
const PORTS_PER_CHAIN: usize = 65536 / crate::config::MIN_CHILD_HASH_ENTRIES as usize;

/// A connected socket's hash4 key: local address, local port, peer address, peer port.
type Tuple4 = (u128, u16, u128, u16);

/// The hash2 identity of an address: `::` and `0.0.0.0` are one, as are `a.b.c.d` and
/// `::ffff:a.b.c.d` (they share hash2 chains).
fn hash_key(a: u128) -> u128 {
    if has_v4_meaning(a) {
        mapped(a as u32)
    } else {
        a
    }
}

/// The wildcard address of a family, in the tables' form.
fn any_of(family: Family) -> u128 {
    if family.is_v4() { mapped(0) } else { 0 }
}

/// xorshift64*: the writer's random numbers (namespace mixes, port search starts).
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: Option<u64>) -> Rng {
        let seed = seed.unwrap_or_else(|| {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(0x7564_702d_736f_636b_u64)
        });
        Rng(seed | 1)
    }

    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

/// A namespace as the writer keeps it.
#[derive(Debug)]
struct NsState {
    entry: Arc<NetnsEntry>,
    /// The port hash of the namespace's own table, if it has one.
    child_ports: Option<Vec<Vec<SockId>>>,
    /// Local addresses and the interfaces holding them (0: unknown).
    local: HashMap<IpAddr, HashSet<u32>>,
    port_range: (u16, u16),
    /// `ip_local_reserved_ports`, one bit per port.
    reserved: Box<[u64]>,
}

/// A socket as the writer keeps it.
#[derive(Debug)]
struct SockState {
    rec: Arc<Sock>,
    /// In the port hash and hash2 (`sk_hashed`).
    hashed: bool,
    /// `SOCK_BINDADDR_LOCK`: bound to a specific address by bind.
    bindaddr_lock: bool,
    /// `SOCK_BINDPORT_LOCK`: bound to an explicit port by bind.
    bindport_lock: bool,
    /// In hash4, under this tuple (`udp_hashed4` and `udp_lrpa_hash`). A disconnected socket
    /// may stay there, never matching, as in the kernel.
    h4: Option<Tuple4>,
    /// `SO_INCOMING_CPU` set explicitly (counts in its group).
    cpu_set: bool,
}

/// The one writer of a [`SockTable`]: every change goes through `&mut Writer`, so changes are
/// serialized; lookups run meanwhile and see each socket's old or new record. It derefs to the
/// table for reads; there is only one:
///
/// ```compile_fail,E0599
/// let (_table, writer) = udp_socktab::SockTable::new(udp_socktab::TableConfig::default()).unwrap();
/// let second = writer.clone();
/// ```
///
/// ```
/// use udp_socktab::{Error, Family, NetnsConfig, SockOptions, SockTable, TableConfig};
///
/// let (_table, mut w) = SockTable::new(TableConfig::default())?;
/// let ns = w.add_netns(NetnsConfig { child_hash_entries: 128, ..NetnsConfig::default() })?;
/// w.add_local_addr(ns, "192.0.2.1".parse()?, 2)?;
/// let a = w.socket(ns, Family::V4, SockOptions::default())?;
/// let b = w.socket(ns, Family::V6DualStack, SockOptions::default())?;
/// w.bind(a, "192.0.2.1:53".parse()?)?;
/// // `::` overlaps every IPv4 address of a dual-stack socket.
/// assert_eq!(w.bind(b, "[::]:53".parse()?), Err(Error::AddrInUse));
/// let port = w.bind(b, "[::]:0".parse()?)?.port();
/// assert!((32768..=60999).contains(&port));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Writer {
    table: Arc<SockTable>,
    global_ports: Vec<Vec<SockId>>,
    netns: Vec<Option<NsState>>,
    socks: HashMap<SockId, SockState>,
    next_sock: u64,
    rng: Rng,
}

impl SockTable {
    /// Builds an empty table and its one writer. Readers share the returned `Arc`.
    ///
    /// # Errors
    /// [`ConfigError::HashEntries`] for a bad global table size.
    pub fn new(config: TableConfig) -> Result<(Arc<SockTable>, Writer), ConfigError> {
        let entries = config.entries()?;
        let table = Arc::new(SockTable::with_entries(entries));
        let writer = Writer {
            table: Arc::clone(&table),
            global_ports: vec![Vec::new(); entries as usize],
            netns: Vec::new(),
            socks: HashMap::new(),
            next_sock: 1,
            rng: Rng::new(config.seed),
        };
        Ok((table, writer))
    }
}

impl std::ops::Deref for Writer {
    type Target = SockTable;

    fn deref(&self) -> &SockTable {
        &self.table
    }
}

impl Writer {
    /// The table this writer changes.
    pub fn table(&self) -> &Arc<SockTable> {
        &self.table
    }

    /// The table this writer changes, to share with readers: [`table`](Self::table) under the
    /// name every xfwd table crate's writer gives it.
    pub fn reader(&self) -> &Arc<SockTable> {
        &self.table
    }

    // ---- namespaces -------------------------------------------------------------------------

    /// Creates a namespace: with its own table when `config.child_hash_entries` is nonzero (the
    /// kernel reads `udp_child_hash_entries` at namespace creation), else sharing the global
    /// table with a random hash mix of its own.
    ///
    /// # Errors
    /// [`ConfigError::ChildHashEntries`] or [`ConfigError::PortRange`] for a bad configuration.
    pub fn add_netns(&mut self, config: NetnsConfig) -> Result<NetnsId, ConfigError> {
        let child = config.child_entries()?;
        let id = NetnsId(u32::try_from(self.netns.len()).unwrap_or(u32::MAX));
        let entry = Arc::new(NetnsEntry {
            mix: self.rng.next_u32(),
            child: child.map(UdpTable::new),
        });
        self.netns.push(Some(NsState {
            entry,
            child_ports: child.map(|n| vec![Vec::new(); n as usize]),
            local: HashMap::new(),
            port_range: config.local_port_range,
            reserved: vec![0; 1024].into_boxed_slice(),
        }));
        self.publish_netns();
        Ok(id)
    }

    /// Removes a namespace, closing its sockets first.
    ///
    /// # Errors
    /// [`Error::UnknownNetns`].
    pub fn remove_netns(&mut self, netns: NetnsId) -> Result<(), Error> {
        self.ns(netns)?;
        let mut ids: Vec<SockId> = self
            .socks
            .iter()
            .filter(|(_, s)| s.rec.netns == netns)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        for id in ids {
            self.close(id)?;
        }
        self.netns[netns.0 as usize] = None;
        self.publish_netns();
        Ok(())
    }

    /// Makes `addr`, held by interface `ifindex` (0: unknown), one of the namespace's local
    /// addresses: sockets may bind it. As in the kernel, a socket bound to a device may bind a
    /// host- or link-scope IPv6 address (`::1`, `fe80::/10`) only if that device holds it;
    /// other addresses are not checked against the device.
    ///
    /// # Errors
    /// [`Error::UnknownNetns`].
    pub fn add_local_addr(
        &mut self,
        netns: NetnsId,
        addr: IpAddr,
        ifindex: u32,
    ) -> Result<(), Error> {
        self.ns_mut(netns)?
            .local
            .entry(addr)
            .or_default()
            .insert(ifindex);
        Ok(())
    }

    /// Removes a local address from interface `ifindex` (sockets bound to it stay bound, as in
    /// the kernel).
    ///
    /// # Errors
    /// [`Error::UnknownNetns`].
    pub fn remove_local_addr(
        &mut self,
        netns: NetnsId,
        addr: IpAddr,
        ifindex: u32,
    ) -> Result<(), Error> {
        let ns = self.ns_mut(netns)?;
        if let Some(devs) = ns.local.get_mut(&addr) {
            devs.remove(&ifindex);
            if devs.is_empty() {
                ns.local.remove(&addr);
            }
        }
        Ok(())
    }

    /// Sets `ip_local_port_range` of a namespace.
    ///
    /// # Errors
    /// [`ConfigError::PortRange`] unless `1 <= low <= high`; [`ConfigError::UnknownNetns`].
    pub fn set_local_port_range(
        &mut self,
        netns: NetnsId,
        low: u16,
        high: u16,
    ) -> Result<(), ConfigError> {
        check_port_range((low, high))?;
        let ns = self
            .ns_mut(netns)
            .map_err(|_| ConfigError::UnknownNetns(netns))?;
        ns.port_range = (low, high);
        Ok(())
    }

    /// Adds or removes a port of `ip_local_reserved_ports`: port 0 binds never pick it
    /// (explicit binds still may).
    ///
    /// # Errors
    /// [`Error::UnknownNetns`].
    pub fn set_reserved_port(
        &mut self,
        netns: NetnsId,
        port: u16,
        reserved: bool,
    ) -> Result<(), Error> {
        let ns = self.ns_mut(netns)?;
        let (word, bit) = (usize::from(port) / 64, port % 64);
        if reserved {
            ns.reserved[word] |= 1 << bit;
        } else {
            ns.reserved[word] &= !(1 << bit);
        }
        Ok(())
    }

    fn ns(&self, netns: NetnsId) -> Result<&NsState, Error> {
        self.netns
            .get(netns.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::UnknownNetns(netns))
    }

    fn ns_mut(&mut self, netns: NetnsId) -> Result<&mut NsState, Error> {
        self.netns
            .get_mut(netns.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::UnknownNetns(netns))
    }

    fn publish_netns(&self) {
        let entries = self
            .netns
            .iter()
            .map(|ns| ns.as_ref().map(|ns| Arc::clone(&ns.entry)))
            .collect();
        let guard = crossbeam_epoch::pin();
        self.table.publish_netns(NetnsVec { entries }, &guard);
    }

    /// The namespace's table (global or own) and hash mix.
    fn udp_table(&self, netns: NetnsId) -> (Arc<NetnsEntry>, u32) {
        let entry = Arc::clone(
            &self.netns[netns.0 as usize]
                .as_ref()
                .expect("live netns")
                .entry,
        );
        let mix = entry.mix;
        (entry, mix)
    }

    fn ports(&self, netns: NetnsId) -> &Vec<Vec<SockId>> {
        match &self.netns[netns.0 as usize] {
            Some(NsState {
                child_ports: Some(ports),
                ..
            }) => ports,
            _ => &self.global_ports,
        }
    }

    fn ports_mut(&mut self, netns: NetnsId) -> &mut Vec<Vec<SockId>> {
        match &mut self.netns[netns.0 as usize] {
            Some(NsState {
                child_ports: Some(ports),
                ..
            }) => ports,
            _ => &mut self.global_ports,
        }
    }

    // ---- sockets ----------------------------------------------------------------------------

    /// Opens an unbound socket.
    ///
    /// # Errors
    /// [`Error::UnknownNetns`].
    pub fn socket(
        &mut self,
        netns: NetnsId,
        family: Family,
        options: SockOptions,
    ) -> Result<SockId, Error> {
        self.ns(netns)?;
        let id = SockId(self.next_sock);
        self.next_sock += 1;
        let any = any_of(family);
        let mut rec = Sock {
            id,
            netns,
            family,
            rcv_saddr: 0,
            rcv_saddr4: 0,
            daddr: 0,
            daddr4: 0,
            num: 0,
            dport: 0,
            connected: false,
            bound_dev_if: options.bound_dev_if,
            reuse: options.reuseaddr,
            reuseport: options.reuseport,
            uid: options.uid,
            incoming_cpu: AtomicI32::new(-1),
            group: None,
        };
        rec.set_rcv_saddr(any);
        rec.set_daddr(any);
        self.socks.insert(
            id,
            SockState {
                rec: Arc::new(rec),
                hashed: false,
                bindaddr_lock: false,
                bindport_lock: false,
                h4: None,
                cpu_set: false,
            },
        );
        Ok(id)
    }

    /// The current record of a socket (what lookups see, or will see once bound).
    pub fn sock(&self, id: SockId) -> Option<&Sock> {
        self.socks.get(&id).map(|s| &*s.rec)
    }

    /// The ids of the open sockets, in no particular order.
    pub fn sock_ids(&self) -> impl Iterator<Item = SockId> + '_ {
        self.socks.keys().copied()
    }

    /// The current records of the open sockets, in no particular order.
    pub fn socks(&self) -> impl Iterator<Item = &Sock> + '_ {
        self.socks.values().map(|s| &*s.rec)
    }

    /// The members of the socket's `SO_REUSEPORT` group in the kernel's order (`socks[]`),
    /// whether the group ever had a connected member, and the count of members with
    /// `SO_INCOMING_CPU`; `None` when it is in no group.
    pub fn reuseport_group(&self, id: SockId) -> Option<(Vec<SockId>, bool, u32)> {
        let guard = crossbeam_epoch::pin();
        let group = self.socks.get(&id)?.rec.group.as_ref()?;
        let snap = group.load(&guard)?;
        Some((
            snap.socks.iter().map(|s| s.id).collect(),
            snap.has_conns,
            snap.incoming_cpu,
        ))
    }

    fn state(&self, id: SockId) -> Result<&SockState, Error> {
        self.socks.get(&id).ok_or(Error::UnknownSocket(id))
    }

    /// Binds a socket (`bind(2)`): an explicit port is checked against the bound sockets of
    /// the namespace (`SO_REUSEADDR`, `SO_REUSEPORT` with the same owner, bound device,
    /// wildcard and dual-stack overlap); port 0 picks a free port of the local port range.
    /// Returns the bound address.
    ///
    /// # Errors
    /// [`Error::AddrFamilyNotSupported`] for an address of the other family;
    /// [`Error::AddrNotAvailable`] for an address that is not local (wildcard, multicast and
    /// the IPv4 broadcast address always may be bound); [`Error::InvalidArgument`] when bound
    /// already or binding an IPv6-only socket to a v4-mapped address; [`Error::AddrInUse`].
    pub fn bind(&mut self, id: SockId, addr: SocketAddr) -> Result<SocketAddr, Error> {
        let state = self.state(id)?;
        let rec = &state.rec;
        let already = state.hashed || rec.connected;
        let (a, family) = match (rec.family, addr) {
            (Family::V4, SocketAddr::V4(sa)) => {
                let a = mapped(u32::from(*sa.ip()));
                self.check_local(rec.netns, IpAddr::V4(*sa.ip()), rec.bound_dev_if)?;
                if already {
                    return Err(Error::InvalidArgument("socket is bound already"));
                }
                (a, Family::V4)
            }
            (_, SocketAddr::V4(_)) | (Family::V4, SocketAddr::V6(_)) => {
                return Err(Error::AddrFamilyNotSupported);
            }
            (family, SocketAddr::V6(sa)) => {
                if already {
                    return Err(Error::InvalidArgument("socket is bound already"));
                }
                let a = u128::from(*sa.ip());
                if is_mapped(a) {
                    if family == Family::V6Only {
                        return Err(Error::InvalidArgument(
                            "IPV6_V6ONLY socket, v4-mapped address",
                        ));
                    }
                    let v4 = std::net::Ipv4Addr::from(a as u32);
                    if !v4.is_unspecified() {
                        self.check_local(rec.netns, IpAddr::V4(v4), rec.bound_dev_if)?;
                    }
                    (a, family)
                } else {
                    self.check_local(rec.netns, IpAddr::V6(*sa.ip()), rec.bound_dev_if)?;
                    // A native specific address makes the socket IPv6-only.
                    (a, if a == 0 { family } else { Family::V6Only })
                }
            }
        };
        let port = self
            .hash_into(id, a, family, addr.port())
            .ok_or(Error::AddrInUse)?;
        let state = self.socks.get_mut(&id).expect("checked above");
        state.bindaddr_lock = if family.is_v4() {
            a as u32 != 0
        } else {
            a != 0
        };
        state.bindport_lock = addr.port() != 0;
        Ok(SocketAddr::new(addr.ip(), port))
    }

    /// Whether `addr` may be bound in the namespace by a socket bound to device `dev`.
    fn check_local(&self, netns: NetnsId, addr: IpAddr, dev: u32) -> Result<(), Error> {
        let ns = self.ns(netns)?;
        let held = ns.local.get(&addr).is_some_and(|devs| {
            let scoped = match addr {
                IpAddr::V6(a) => a.is_loopback() || a.is_unicast_link_local(),
                IpAddr::V4(_) => false,
            };
            !scoped || dev == 0 || devs.contains(&0) || devs.contains(&dev)
        });
        if addr.is_unspecified() || addr::is_group_address(addr) || held {
            Ok(())
        } else {
            Err(Error::AddrNotAvailable)
        }
    }

    /// `udp_lib_get_port` and hashing: checks or picks the port, then puts the socket into
    /// the port hash, its `SO_REUSEPORT` group and hash2. `None`: port taken / none free.
    fn hash_into(&mut self, id: SockId, a: u128, family: Family, port: u16) -> Option<u16> {
        let old = &self.socks[&id].rec;
        let netns = old.netns;
        let mut next = old.copy();
        next.family = family;
        next.set_rcv_saddr(a);
        let port = if port == 0 {
            self.pick_port(&next)?
        } else {
            next.num = port;
            self.port_free(&next).then_some(port)?
        };
        next.num = port;
        let (entry, mix) = self.udp_table(netns);
        let mask = entry.child.as_ref().unwrap_or(&self.table.global).mask;
        let slot = port_slot(mix, port, mask);
        let guard = crossbeam_epoch::pin();
        if next.reuseport {
            let mate = self.ports(netns)[slot].iter().copied().find(|sid| {
                let sk2 = &self.socks[sid].rec;
                *sid != id && sk2.netns == netns && sk2.num == port && joins(&next, sk2)
            });
            next.group = Some(match mate {
                Some(mate) => self.group_of_or_alloc(mate, &guard),
                None => Arc::new(GroupCell::default()),
            });
        }
        // sk_add_node_rcu: IPv6 SO_REUSEPORT sockets join the port chain at its tail.
        let tail = next.reuseport && !next.family.is_v4();
        let chain = &mut self.ports_mut(netns)[slot];
        if tail {
            chain.push(id);
        } else {
            chain.insert(0, id);
        }
        self.publish(id, next, true, None, false, &guard);
        Some(port)
    }

    /// `sk2`'s group, making it one (`reuseport_alloc`) when a rehash took it out of its own.
    fn group_of_or_alloc(&mut self, mate: SockId, guard: &Guard) -> Arc<GroupCell> {
        let state = &self.socks[&mate];
        if let Some(group) = &state.rec.group {
            return Arc::clone(group);
        }
        let group = Arc::new(GroupCell::default());
        let mut next = state.rec.copy();
        next.group = Some(Arc::clone(&group));
        let (hashed, h4) = (state.hashed, state.h4);
        self.publish(mate, next, hashed, h4, false, guard);
        group
    }

    /// The explicit-port check (`udp_lib_lport_inuse` without bitmap): the port chain from its
    /// head; the first socket that shares by `SO_REUSEPORT` ends the search as free.
    fn port_free(&self, sk: &Sock) -> bool {
        let (entry, mix) = self.udp_table(sk.netns);
        let mask = entry.child.as_ref().unwrap_or(&self.table.global).mask;
        for sid in &self.ports(sk.netns)[port_slot(mix, sk.num, mask)] {
            let sk2 = &self.socks[sid].rec;
            if sk2.id == sk.id || sk2.netns != sk.netns || sk2.num != sk.num {
                continue;
            }
            match standing(sk, sk2) {
                Standing::Apart => {}
                Standing::Shares => return true,
                Standing::Conflicts => return false,
            }
        }
        true
    }

    /// The port search (`udp_lib_get_port` with port 0): a random first port in the range;
    /// for each slot from there on, a bitmap of the ports its sockets keep from `sk`, then the
    /// slot's ports in steps of an odd multiple of the table size from the first one; the first
    /// port in range, free and not reserved wins.
    fn pick_port(&mut self, sk: &Sock) -> Option<u16> {
        let netns = sk.netns;
        let (low, high) = self.ns(netns).ok()?.port_range;
        let (entry, mix) = self.udp_table(netns);
        let table = entry.child.as_ref().unwrap_or(&self.table.global);
        let (mask, log, size) = (table.mask, table.log, table.mask + 1);
        let remaining = usize::from(high - low) + 1;
        let rand = self.rng.next_u32();
        let mut first = (reciprocal_scale(rand, remaining) as u16).wrapping_add(low);
        // An odd multiple of the table size: stepping by it from `first` visits every port of
        // `first`'s slot.
        let step = ((rand | 1).wrapping_mul(size)) as u16;
        let last = first.wrapping_add(size as u16);
        let ns = self.ns(netns).ok()?;
        let ports = self.ports(netns);
        let mut bitmap = [0u64; PORTS_PER_CHAIN / 64];
        loop {
            bitmap.fill(0);
            for sid in &ports[port_slot(mix, first, mask)] {
                let sk2 = &self.socks[sid].rec;
                if sk2.id != sk.id && sk2.netns == netns && standing(sk, sk2) == Standing::Conflicts
                {
                    let bit = (u32::from(sk2.num) >> log) as usize;
                    bitmap[bit / 64] |= 1 << (bit % 64);
                }
            }
            let mut snum = first;
            loop {
                let bit = (u32::from(snum) >> log) as usize;
                let reserved = ns.reserved[usize::from(snum) / 64] >> (snum % 64) & 1 == 1;
                if (low..=high).contains(&snum)
                    && bitmap[bit / 64] >> (bit % 64) & 1 == 0
                    && !reserved
                {
                    return Some(snum);
                }
                snum = snum.wrapping_add(step);
                if snum == first {
                    break;
                }
            }
            first = first.wrapping_add(1);
            if first == last {
                return None;
            }
        }
    }

    /// Connects a socket (`connect(2)`): an unbound socket first gets a port (autobind); one
    /// bound to the wildcard takes `source` (the address the caller's route lookup chose) and
    /// moves to the head of its new hash2 chain, leaving its `SO_REUSEPORT` group; then it
    /// enters hash4. Returns the local address.
    ///
    /// An IPv6 socket connects to an IPv4 peer given as `SocketAddr::V4` or v4-mapped.
    ///
    /// # Errors
    /// [`Error::AddrFamilyNotSupported`] (also: bound to a v4-mapped address, native IPv6
    /// peer), [`Error::NetworkUnreachable`] (IPv6-only socket and v4-mapped peer, or bound to a
    /// native IPv6 address and an IPv4 peer);
    /// [`Error::InvalidArgument`] for an unspecified peer or a source of the wrong family;
    /// [`Error::Again`] when autobind finds no port.
    pub fn connect(
        &mut self,
        id: SockId,
        remote: SocketAddr,
        source: IpAddr,
    ) -> Result<SocketAddr, Error> {
        let rec = &self.state(id)?.rec;
        let family = rec.family;
        let (raddr, v4flow) = match (family, remote) {
            (Family::V4 | Family::V6DualStack, SocketAddr::V4(sa)) => {
                (mapped(u32::from(*sa.ip())), true)
            }
            (Family::V4, SocketAddr::V6(_)) | (Family::V6Only, SocketAddr::V4(_)) => {
                return Err(Error::AddrFamilyNotSupported);
            }
            (_, SocketAddr::V6(sa)) => {
                let a = u128::from(*sa.ip());
                if is_mapped(a) && family == Family::V6Only {
                    return Err(Error::NetworkUnreachable);
                }
                (a, is_mapped(a))
            }
        };
        if (v4flow && raddr as u32 == 0) || raddr == 0 {
            return Err(Error::InvalidArgument("unspecified peer"));
        }
        // The bound address must speak the peer's family.
        let bound = rec.rcv_saddr;
        let bound_any = if v4flow {
            if !has_v4_meaning(bound) {
                return Err(Error::NetworkUnreachable);
            }
            rec.rcv_saddr4 == 0
        } else {
            if is_mapped(bound) {
                return Err(Error::AddrFamilyNotSupported);
            }
            bound == 0
        };
        let src = match source {
            IpAddr::V4(s) if v4flow && !s.is_unspecified() => Some(mapped(u32::from(s))),
            IpAddr::V6(s) if v4flow && is_mapped(u128::from(s)) && u128::from(s) as u32 != 0 => {
                Some(u128::from(s))
            }
            IpAddr::V6(s) if !v4flow && !s.is_unspecified() && !is_mapped(u128::from(s)) => {
                Some(u128::from(s))
            }
            _ => None,
        };
        if bound_any && src.is_none() {
            return Err(Error::InvalidArgument(
                "source address does not fit the peer",
            ));
        }
        if !self.socks[&id].hashed {
            // inet_autobind: bind to port 0 at the bound (wildcard) address.
            self.hash_into(id, bound, family, 0).ok_or(Error::Again)?;
        }
        let guard = crossbeam_epoch::pin();
        let state = &self.socks[&id];
        let mut next = state.rec.copy();
        let rehashed = bound_any;
        if let (true, Some(src)) = (bound_any, src) {
            // The route's source becomes the bound address: a rehash, which leaves the group.
            next.set_rcv_saddr(if next.family.is_v4() {
                mapped(src as u32)
            } else {
                src
            });
            next.group = None;
        }
        // A socket already in hash4 is rehashed again (udp_lib_hash4 → rehash): that also
        // takes it out of its group, after has_conns was set on it.
        if state.h4.is_some() {
            next.group = None;
        }
        next.set_daddr(if next.family.is_v4() {
            mapped(raddr as u32)
        } else {
            raddr
        });
        next.dport = remote.port();
        next.connected = true;
        let tuple = (
            hash_key(next.rcv_saddr),
            next.num,
            hash_key(next.daddr),
            next.dport,
        );
        let local = next.local_addr();
        self.publish(id, next, true, Some(tuple), !rehashed, &guard);
        Ok(local)
    }

    /// Disconnects a socket (`connect(2)` with `AF_UNSPEC`, the kernel's `__udp_disconnect`):
    /// forgets the peer and the bound device; a local address that bind did not set goes back
    /// to the wildcard (a rehash, leaving the `SO_REUSEPORT` group); a port that bind did not
    /// set is given up (the socket is unhashed).
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn disconnect(&mut self, id: SockId) -> Result<(), Error> {
        let state = self.state(id)?;
        let mut next = state.rec.copy();
        let any = any_of(next.family);
        next.connected = false;
        next.set_daddr(any);
        next.dport = 0;
        next.bound_dev_if = 0;
        let mut h4 = state.h4;
        let hashed = state.hashed;
        if !state.bindaddr_lock {
            next.set_rcv_saddr(any);
            if state.bindport_lock && hashed {
                next.group = None;
                h4 = h4.map(|_| (hash_key(any), next.num, hash_key(any), 0));
            }
        }
        let guard = crossbeam_epoch::pin();
        if !state.bindport_lock {
            if hashed {
                self.unhash(id, next, &guard);
            } else {
                self.publish(id, next, false, None, false, &guard);
            }
        } else {
            self.publish(id, next, hashed, h4, false, &guard);
        }
        Ok(())
    }

    /// Sets `SO_BINDTODEVICE` (0: none). On a bound socket this is a rehash, which takes it
    /// out of its `SO_REUSEPORT` group, as in the kernel.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn set_bound_dev_if(&mut self, id: SockId, ifindex: u32) -> Result<(), Error> {
        let state = self.state(id)?;
        let mut next = state.rec.copy();
        next.bound_dev_if = ifindex;
        if state.hashed {
            next.group = None;
        }
        let (hashed, h4) = (state.hashed, state.h4);
        let guard = crossbeam_epoch::pin();
        self.publish(id, next, hashed, h4, false, &guard);
        Ok(())
    }

    /// Sets `SO_INCOMING_CPU` (`None`: -1). A group with such members prefers, for a lookup
    /// on CPU c, a member whose incoming CPU is c.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn set_incoming_cpu(&mut self, id: SockId, cpu: Option<u32>) -> Result<(), Error> {
        let state = self.socks.get_mut(&id).ok_or(Error::UnknownSocket(id))?;
        let value = cpu.and_then(|c| i32::try_from(c).ok()).unwrap_or(-1);
        state.rec.incoming_cpu.store(value, Ordering::Relaxed);
        let was = std::mem::replace(&mut state.cpu_set, value >= 0);
        if was != state.cpu_set {
            if let Some(group) = state.rec.group.clone() {
                let up = state.cpu_set;
                let guard = crossbeam_epoch::pin();
                edit_group(&group, &guard, |_, _, count| {
                    *count = if up {
                        *count + 1
                    } else {
                        count.saturating_sub(1)
                    };
                });
            }
        }
        Ok(())
    }

    /// Closes a socket: out of every table and its group.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn close(&mut self, id: SockId) -> Result<(), Error> {
        let state = self.state(id)?;
        if state.hashed {
            let mut next = state.rec.copy();
            next.group = None;
            let guard = crossbeam_epoch::pin();
            self.unhash(id, next, &guard);
        }
        self.socks.remove(&id);
        Ok(())
    }

    /// `udp_lib_unhash`: out of the port hash, hash2, hash4 and the group; port back to 0.
    fn unhash(&mut self, id: SockId, mut next: Sock, guard: &Guard) {
        let netns = next.netns;
        let port = self.socks[&id].rec.num;
        let (entry, mix) = self.udp_table(netns);
        let mask = entry.child.as_ref().unwrap_or(&self.table.global).mask;
        let chain = &mut self.ports_mut(netns)[port_slot(mix, port, mask)];
        chain.retain(|s| *s != id);
        next.group = None;
        next.num = 0;
        self.publish(id, next, false, None, false, guard);
    }

    /// Publishes `next` as socket `id`'s record wherever lookups can meet it: moves it between
    /// hash2 chains when its address changed (to the head of the new chain; a fresh
    /// `SO_REUSEPORT` IPv6 socket goes to the tail, as in the kernel), in or out of hash4
    /// under tuple `h4`, and in or out of groups (a leaver's place in the group takes the last
    /// member). `conns` sets `has_conns` on the group the socket was in.
    fn publish(
        &mut self,
        id: SockId,
        next: Sock,
        hashed: bool,
        h4: Option<Tuple4>,
        conns: bool,
        guard: &Guard,
    ) {
        let state = &self.socks[&id];
        let old = Arc::clone(&state.rec);
        let (was_hashed, old_h4, cpu_set) = (state.hashed, state.h4, state.cpu_set);
        let next = Arc::new(next);
        let (entry, mix) = self.udp_table(next.netns);
        let table: &UdpTable = entry.child.as_ref().unwrap_or(&self.table.global);

        // Groups first: a new member may be picked as soon as it is published.
        let same_group = match (&old.group, &next.group) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if same_group {
            edit_group(
                old.group.as_ref().expect("same group"),
                guard,
                |socks, has_conns, _| {
                    *has_conns |= conns;
                    if let Some(s) = socks.iter_mut().find(|s| s.id == id) {
                        *s = Arc::clone(&next);
                    }
                },
            );
        } else {
            if let Some(group) = &old.group {
                edit_group(group, guard, |socks, has_conns, count| {
                    *has_conns |= conns;
                    if let Some(i) = socks.iter().position(|s| s.id == id) {
                        socks.swap_remove(i);
                        if cpu_set {
                            *count = count.saturating_sub(1);
                        }
                    }
                });
            }
            if let Some(group) = &next.group {
                edit_group(group, guard, |socks, _, count| {
                    socks.push(Arc::clone(&next));
                    if cpu_set {
                        *count += 1;
                    }
                });
            }
        }

        // hash2.
        let old_slot = table.slot2(mix, old.rcv_saddr, old.num);
        let new_slot = table.slot2(mix, next.rcv_saddr, next.num);
        let same_key = hash_key(old.rcv_saddr) == hash_key(next.rcv_saddr) && old.num == next.num;
        if was_hashed && hashed && same_key {
            let mut chain = table.hash2[old_slot].chain.to_vec(guard);
            if let Some(s) = chain.iter_mut().find(|s| s.id == id) {
                *s = Arc::clone(&next);
            }
            table.hash2[old_slot].chain.publish(chain, guard);
        } else {
            if hashed {
                let mut chain = table.hash2[new_slot].chain.to_vec(guard);
                if !was_hashed && next.reuseport && !next.family.is_v4() {
                    chain.push(Arc::clone(&next));
                } else {
                    chain.insert(0, Arc::clone(&next));
                }
                table.hash2[new_slot].chain.publish(chain, guard);
            }
            if was_hashed {
                let mut chain = table.hash2[old_slot].chain.to_vec(guard);
                chain.retain(|s| s.id != id || Arc::ptr_eq(s, &next));
                table.hash2[old_slot].chain.publish(chain, guard);
            }
        }

        // hash4, and the hash4 users counted in hash2 slots.
        let slot4 = |t: Tuple4| table.slot4(mix, t.0, t.1, t.2, t.3);
        match (old_h4, h4) {
            (Some(o), Some(n)) if o == n => {
                let mut chain = table.hash4[slot4(o)].to_vec(guard);
                if let Some(s) = chain.iter_mut().find(|s| s.id == id) {
                    *s = Arc::clone(&next);
                }
                table.hash4[slot4(o)].publish(chain, guard);
            }
            _ => {
                if let Some(n) = h4 {
                    table.hash2[new_slot]
                        .hash4_cnt
                        .fetch_add(1, Ordering::Release);
                    let mut chain = table.hash4[slot4(n)].to_vec(guard);
                    chain.insert(0, Arc::clone(&next));
                    table.hash4[slot4(n)].publish(chain, guard);
                }
                if let Some(o) = old_h4 {
                    let mut chain = table.hash4[slot4(o)].to_vec(guard);
                    chain.retain(|s| s.id != id || Arc::ptr_eq(s, &next));
                    table.hash4[slot4(o)].publish(chain, guard);
                    table.hash2[old_slot]
                        .hash4_cnt
                        .fetch_sub(1, Ordering::Release);
                }
            }
        }

        let state = self.socks.get_mut(&id).expect("publishing a live socket");
        state.rec = next;
        state.hashed = hashed;
        state.h4 = h4;
    }
}

/// Publishes a new version of a group made by `f` from a copy of the current members, the
/// `has_conns` flag and the `SO_INCOMING_CPU` count.
fn edit_group(
    group: &GroupCell,
    guard: &Guard,
    f: impl FnOnce(&mut Vec<Arc<Sock>>, &mut bool, &mut u32),
) {
    let (mut socks, mut has_conns, mut count) = match group.load(guard) {
        Some(snap) => (snap.socks.to_vec(), snap.has_conns, snap.incoming_cpu),
        None => (Vec::new(), false, 0),
    };
    f(&mut socks, &mut has_conns, &mut count);
    group.publish(
        Some(GroupSnap {
            socks: socks.into_boxed_slice(),
            has_conns,
            incoming_cpu: count,
        }),
        guard,
    );
}
