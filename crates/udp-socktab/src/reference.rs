//! The brute-force reference: every socket in one vector, every lookup scoring all of them,
//! every bind checking all of them; chain order kept as insertion stamps instead of chains.
//!
//! It follows the same socket calls as the [`Writer`](crate::Writer) with the rules written
//! out again over `IpAddr`s, and serves as the oracle of the differential tests and as the
//! linear-scan baseline of the benchmarks. For a bind to port 0 it lists every free port and
//! lets the caller pick one (the tests pick what the writer picked, and so check that the
//! writer's pick was free).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::DEFAULT_LOCAL_PORT_RANGE;
use crate::error::Error;
use crate::sock::{Family, Lookup, NetnsId, SockId, SockOptions};

/// One socket of the reference.
#[derive(Clone, Debug)]
pub struct RefSock {
    /// Identity.
    pub id: SockId,
    /// Namespace.
    pub netns: NetnsId,
    /// Family (dual-stack sockets bound to a native IPv6 address become IPv6-only).
    pub family: Family,
    /// Options it was opened with (the bound device may change).
    pub options: SockOptions,
    /// Bound address, in the socket's family (IPv6 sockets keep v4-mapped ones as such).
    pub local: IpAddr,
    /// Local port, 0 when not hashed.
    pub port: u16,
    /// The peer, when connected.
    pub remote: Option<(IpAddr, u16)>,
    hashed: bool,
    addr_lock: bool,
    port_lock: bool,
    /// hash4 membership: the tuple and the stamp of insertion.
    h4: Option<((u128, u16, u128, u16), u64)>,
    port_stamp: u64,
    port_tail: bool,
    h2_stamp: u64,
    h2_tail: bool,
    group: Option<usize>,
    incoming_cpu: Option<u32>,
    cpu_set: bool,
}

#[derive(Clone, Debug, Default)]
struct RefGroup {
    members: Vec<SockId>,
    has_conns: bool,
    cpu_count: u32,
}

#[derive(Clone, Debug)]
struct RefNetns {
    local: Vec<(IpAddr, u32)>,
    range: (u16, u16),
    reserved: Vec<u16>,
}

/// The reference model.
#[derive(Clone, Debug, Default)]
pub struct Reference {
    socks: Vec<RefSock>,
    groups: Vec<RefGroup>,
    netns: HashMap<NetnsId, RefNetns>,
    stamp: u64,
}

/// The v4 meaning of an address as a socket of `family` holds it: IPv4 sockets their address,
/// IPv6 ones 0.0.0.0 for `::`, the embedded address when v4-mapped, else 127.0.0.6.
fn v4_of(local: IpAddr) -> Ipv4Addr {
    match local {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) if a.is_unspecified() => Ipv4Addr::UNSPECIFIED,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::new(127, 0, 0, 6)),
    }
}

fn canon(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) if a.is_unspecified() => u128::from(Ipv4Addr::UNSPECIFIED.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn wildcard(family: Family) -> IpAddr {
    if family.is_v4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    }
}

impl RefSock {
    fn v6only(&self) -> bool {
        self.family == Family::V6Only
    }

    /// `inet_rcv_saddr_equal(self, other, wildcard)`.
    fn addr_overlaps(&self, other: &RefSock, wild: bool) -> bool {
        let v4_rule = |a: Ipv4Addr, b: Ipv4Addr| {
            a == b || (wild && (a.is_unspecified() || b.is_unspecified()))
        };
        if self.family.is_v4() {
            return !other.v6only() && v4_rule(v4_of(self.local), v4_of(other.local));
        }
        let IpAddr::V6(mine) = self.local else {
            return false;
        };
        let theirs = match other.local {
            IpAddr::V6(a) => Some(a),
            IpAddr::V4(_) => None,
        };
        let mine_mapped = mine.to_ipv4_mapped().is_some();
        let theirs_mapped = theirs.is_none_or(|a| a.to_ipv4_mapped().is_some());
        let mine_any = mine.is_unspecified();
        let theirs_any = theirs.is_some_and(|a| a.is_unspecified());
        if mine_mapped && theirs_mapped {
            return !other.v6only() && v4_rule(v4_of(self.local), v4_of(other.local));
        }
        (mine_any && theirs_any)
            || (theirs_any && wild && !(other.v6only() && mine_mapped))
            || (mine_any && wild && !(self.v6only() && theirs_mapped))
            || theirs == Some(mine)
    }

    /// Conflict of binding `self` with bound `other` (same namespace and port):
    /// `None` apart, `Some(true)` shares by `SO_REUSEPORT`, `Some(false)` conflicts.
    fn stands(&self, other: &RefSock) -> Option<bool> {
        let (a, b) = (&self.options, &other.options);
        let overlap = !(a.reuseaddr && b.reuseaddr)
            && (a.bound_dev_if == 0 || b.bound_dev_if == 0 || a.bound_dev_if == b.bound_dev_if)
            && self.addr_overlaps(other, true);
        overlap.then_some(a.reuseport && b.reuseport && self.group.is_none() && a.uid == b.uid)
    }

    fn h2_key(&self) -> u128 {
        match self.local {
            IpAddr::V6(a) if a.to_ipv4_mapped().is_some() || a.is_unspecified() => {
                canon(IpAddr::V4(v4_of(self.local)))
            }
            other => canon(other),
        }
    }
}

impl Reference {
    /// An empty model.
    pub fn new() -> Reference {
        Reference::default()
    }

    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    /// Adds a namespace under the id the writer gave it.
    pub fn add_netns(&mut self, id: NetnsId, range: Option<(u16, u16)>) {
        self.netns.insert(
            id,
            RefNetns {
                local: Vec::new(),
                range: range.unwrap_or(DEFAULT_LOCAL_PORT_RANGE),
                reserved: Vec::new(),
            },
        );
    }

    /// Adds a local address held by interface `ifindex` (0: unknown).
    pub fn add_local_addr(&mut self, netns: NetnsId, addr: IpAddr, ifindex: u32) {
        if let Some(ns) = self.netns.get_mut(&netns) {
            ns.local.push((addr, ifindex));
        }
    }

    /// Reserves a port against port-0 binds.
    pub fn reserve_port(&mut self, netns: NetnsId, port: u16) {
        if let Some(ns) = self.netns.get_mut(&netns) {
            ns.reserved.push(port);
        }
    }

    /// Opens a socket under the id the writer gave it.
    pub fn socket(&mut self, id: SockId, netns: NetnsId, family: Family, options: SockOptions) {
        self.socks.push(RefSock {
            id,
            netns,
            family,
            options,
            local: wildcard(family),
            port: 0,
            remote: None,
            hashed: false,
            addr_lock: false,
            port_lock: false,
            h4: None,
            port_stamp: 0,
            port_tail: false,
            h2_stamp: 0,
            h2_tail: false,
            group: None,
            incoming_cpu: None,
            cpu_set: false,
        });
    }

    /// A socket by id.
    pub fn sock(&self, id: SockId) -> Option<&RefSock> {
        self.socks.iter().find(|s| s.id == id)
    }

    /// Every open socket, in the order they were opened.
    pub fn socks(&self) -> &[RefSock] {
        &self.socks
    }

    /// The model cut down to what a [`lookup`](Self::lookup) in `netns` to local port `port`
    /// can see, for tests that make many such lookups: the sockets of that namespace and port,
    /// and every member of a `SO_REUSEPORT` group. Its lookups with that namespace and
    /// destination port answer as this model's do (the exact match and both hash2 passes
    /// consider only sockets of the key's namespace and destination port, and a group's pick
    /// reads its members), each scanning a few sockets instead of all; other calls on it do
    /// not follow the kernel.
    pub fn for_port(&self, netns: NetnsId, port: u16) -> Reference {
        let members: Vec<SockId> = self
            .groups
            .iter()
            .flat_map(|g| g.members.iter().copied())
            .collect();
        let mut cut = self.clone();
        cut.socks
            .retain(|s| (s.netns == netns && s.port == port) || members.contains(&s.id));
        cut
    }

    fn idx(&self, id: SockId) -> Result<usize, Error> {
        self.socks
            .iter()
            .position(|s| s.id == id)
            .ok_or(Error::UnknownSocket(id))
    }

    /// Whether `a` may be bound; a host- or link-scope IPv6 address (`::1`, `fe80::/10`) by a
    /// socket bound to device `dev` must be held by that device.
    fn is_local(&self, netns: NetnsId, a: IpAddr, dev: u32) -> bool {
        let scoped = match a {
            IpAddr::V6(v6) => v6.is_loopback() || v6.is_unicast_link_local(),
            IpAddr::V4(_) => false,
        };
        let on_dev = |d: u32| !scoped || dev == 0 || d == 0 || d == dev;
        a.is_unspecified()
            || a.is_multicast()
            || a == IpAddr::V4(Ipv4Addr::BROADCAST)
            || self
                .netns
                .get(&netns)
                .is_some_and(|ns| ns.local.iter().any(|(l, d)| *l == a && on_dev(*d)))
    }

    /// The bound sockets of `s`'s namespace and port in port chain order.
    fn port_peers(&self, s: &RefSock, port: u16) -> Vec<&RefSock> {
        let mut peers: Vec<&RefSock> = self
            .socks
            .iter()
            .filter(|o| o.hashed && o.id != s.id && o.netns == s.netns && o.port == port)
            .collect();
        // Head-inserted sockets newest first, then the tail-inserted (IPv6 SO_REUSEPORT) oldest
        // first.
        peers.sort_by_key(|o| {
            (
                o.port_tail,
                if o.port_tail {
                    i128::from(o.port_stamp)
                } else {
                    -i128::from(o.port_stamp)
                },
            )
        });
        peers
    }

    fn port_ok_explicit(&self, s: &RefSock, port: u16) -> bool {
        for o in self.port_peers(s, port) {
            match s.stands(o) {
                None => {}
                Some(shares) => return shares,
            }
        }
        true
    }

    /// Every port a bind to port 0 of `s` may pick: in range, not reserved, no conflict.
    fn free_ports(&self, s: &RefSock) -> Vec<u16> {
        let ns = &self.netns[&s.netns];
        (ns.range.0..=ns.range.1)
            .filter(|p| !ns.reserved.contains(p))
            .filter(|p| {
                self.port_peers(s, *p)
                    .iter()
                    .all(|o| s.stands(o) != Some(false))
            })
            .collect()
    }

    /// Binds; for port 0, `pick` chooses among the free ports (`None`: none chosen).
    ///
    /// # Errors
    /// As [`Writer::bind`](crate::Writer::bind).
    pub fn bind(
        &mut self,
        id: SockId,
        addr: SocketAddr,
        pick: impl FnOnce(&[u16]) -> Option<u16>,
    ) -> Result<SocketAddr, Error> {
        let i = self.idx(id)?;
        let s = &self.socks[i];
        let already = s.hashed || s.remote.is_some();
        let (local, family) = match (s.family, addr.ip()) {
            (Family::V4, IpAddr::V4(a)) => {
                if !self.is_local(s.netns, a.into(), s.options.bound_dev_if) {
                    return Err(Error::AddrNotAvailable);
                }
                if already {
                    return Err(Error::InvalidArgument("bound"));
                }
                (IpAddr::V4(a), Family::V4)
            }
            (Family::V4, IpAddr::V6(_)) | (_, IpAddr::V4(_)) => {
                return Err(Error::AddrFamilyNotSupported);
            }
            (family, IpAddr::V6(a)) => {
                if already {
                    return Err(Error::InvalidArgument("bound"));
                }
                match a.to_ipv4_mapped() {
                    Some(_) if family == Family::V6Only => {
                        return Err(Error::InvalidArgument("v6only"));
                    }
                    Some(v4)
                        if !v4.is_unspecified()
                            && !self.is_local(s.netns, v4.into(), s.options.bound_dev_if) =>
                    {
                        return Err(Error::AddrNotAvailable);
                    }
                    Some(_) => (IpAddr::V6(a), family),
                    None if !self.is_local(s.netns, a.into(), s.options.bound_dev_if) => {
                        return Err(Error::AddrNotAvailable);
                    }
                    None if a.is_unspecified() => (IpAddr::V6(a), family),
                    None => (IpAddr::V6(a), Family::V6Only),
                }
            }
        };
        let mut cand = s.clone();
        cand.local = local;
        cand.family = family;
        let port = self
            .hash_in(&mut cand, addr.port(), pick)
            .ok_or(Error::AddrInUse)?;
        cand.addr_lock = match local {
            IpAddr::V4(a) => !a.is_unspecified(),
            IpAddr::V6(a) => !a.is_unspecified(),
        };
        cand.port_lock = addr.port() != 0;
        self.socks[i] = cand;
        Ok(SocketAddr::new(addr.ip(), port))
    }

    /// Checks or picks the port, then hashes `cand`: stamps, group.
    fn hash_in(
        &mut self,
        cand: &mut RefSock,
        port: u16,
        pick: impl FnOnce(&[u16]) -> Option<u16>,
    ) -> Option<u16> {
        let port = if port == 0 {
            let free = self.free_ports(cand);
            let p = pick(&free)?;
            free.contains(&p).then_some(p)?
        } else {
            self.port_ok_explicit(cand, port).then_some(port)?
        };
        cand.port = port;
        cand.hashed = true;
        cand.port_stamp = self.next_stamp();
        cand.h2_stamp = cand.port_stamp;
        cand.h2_tail = cand.options.reuseport && !cand.family.is_v4();
        cand.port_tail = cand.h2_tail;
        if cand.options.reuseport {
            let mate = self.port_peers(cand, port).into_iter().find(|o| {
                o.family == cand.family
                    && o.options.bound_dev_if == cand.options.bound_dev_if
                    && o.options.reuseport
                    && o.options.uid == cand.options.uid
                    && cand.addr_overlaps(o, false)
            });
            let g = match mate.map(|m| (m.id, m.group)) {
                Some((_, Some(g))) => g,
                Some((mid, None)) => {
                    let g = self.new_group();
                    self.join(mid, g);
                    g
                }
                None => self.new_group(),
            };
            self.groups[g].members.push(cand.id);
            if cand.cpu_set {
                self.groups[g].cpu_count += 1;
            }
            cand.group = Some(g);
        }
        Some(port)
    }

    fn new_group(&mut self) -> usize {
        self.groups.push(RefGroup::default());
        self.groups.len() - 1
    }

    fn join(&mut self, id: SockId, g: usize) {
        let i = self.idx(id).expect("live");
        self.socks[i].group = Some(g);
        self.groups[g].members.push(id);
        if self.socks[i].cpu_set {
            self.groups[g].cpu_count += 1;
        }
    }

    fn leave(&mut self, i: usize) {
        if let Some(g) = self.socks[i].group.take() {
            let id = self.socks[i].id;
            let members = &mut self.groups[g].members;
            if let Some(k) = members.iter().position(|m| *m == id) {
                members.swap_remove(k);
            }
            if self.socks[i].cpu_set {
                self.groups[g].cpu_count -= 1;
            }
        }
    }

    /// Moves a socket to the head of its (new) hash2 chain when its key changed.
    fn rehash2(&mut self, i: usize, old_key: u128) {
        if self.socks[i].h2_key() != old_key {
            let stamp = self.next_stamp();
            let s = &mut self.socks[i];
            s.h2_stamp = stamp;
            s.h2_tail = false;
        }
    }

    /// Connects; an autobind picks its port with `pick`.
    ///
    /// # Errors
    /// As [`Writer::connect`](crate::Writer::connect).
    pub fn connect(
        &mut self,
        id: SockId,
        remote: SocketAddr,
        source: IpAddr,
        pick: impl FnOnce(&[u16]) -> Option<u16>,
    ) -> Result<SocketAddr, Error> {
        let i = self.idx(id)?;
        let s = &self.socks[i];
        // The peer as an IPv4 address (IPv4 flow) or a native IPv6 one.
        let peer: Result<Ipv4Addr, Ipv6Addr> = match (s.family, remote.ip()) {
            (Family::V6Only, IpAddr::V4(_)) | (Family::V4, IpAddr::V6(_)) => {
                return Err(Error::AddrFamilyNotSupported);
            }
            (_, IpAddr::V4(a)) => Ok(a),
            (f, IpAddr::V6(a)) => match a.to_ipv4_mapped() {
                Some(_) if f == Family::V6Only => return Err(Error::NetworkUnreachable),
                Some(v4) => Ok(v4),
                None => Err(a),
            },
        };
        let unspecified = match peer {
            Ok(a) => a.is_unspecified(),
            Err(a) => a.is_unspecified(),
        };
        if unspecified {
            return Err(Error::InvalidArgument("peer"));
        }
        let local_is_v4ish = match s.local {
            IpAddr::V4(_) => true,
            IpAddr::V6(a) => a.is_unspecified() || a.to_ipv4_mapped().is_some(),
        };
        let bound_any = match peer {
            Ok(_) if !local_is_v4ish => return Err(Error::NetworkUnreachable),
            Ok(_) => v4_of(s.local).is_unspecified(),
            Err(_) => match s.local {
                IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => {
                    return Err(Error::AddrFamilyNotSupported);
                }
                local => local.is_unspecified(),
            },
        };
        let src: Option<IpAddr> = match (peer, source) {
            (Ok(_), IpAddr::V4(a)) if !a.is_unspecified() => Some(a.into()),
            (Ok(_), IpAddr::V6(a)) => a
                .to_ipv4_mapped()
                .filter(|v| !v.is_unspecified())
                .map(IpAddr::V4),
            (Err(_), IpAddr::V6(a)) if !a.is_unspecified() && a.to_ipv4_mapped().is_none() => {
                Some(a.into())
            }
            _ => None,
        };
        if bound_any && src.is_none() {
            return Err(Error::InvalidArgument("source"));
        }
        if !s.hashed {
            let mut cand = s.clone();
            self.hash_in(&mut cand, 0, pick).ok_or(Error::Again)?;
            self.socks[i] = cand;
        }
        let in_h4 = self.socks[i].h4.is_some();
        if bound_any {
            let old_key = self.socks[i].h2_key();
            let src = src.expect("checked");
            self.socks[i].local = match (self.socks[i].family, src) {
                (Family::V4, a) => a,
                (_, IpAddr::V4(a)) => IpAddr::V6(a.to_ipv6_mapped()),
                (_, a) => a,
            };
            self.leave(i);
            self.rehash2(i, old_key);
        } else if let Some(g) = self.socks[i].group {
            self.groups[g].has_conns = true;
        }
        if in_h4 {
            self.leave(i);
        }
        let family = self.socks[i].family;
        let peer_ip = match (family, peer) {
            (Family::V4, Ok(a)) => IpAddr::V4(a),
            (_, Ok(a)) => IpAddr::V6(a.to_ipv6_mapped()),
            (_, Err(a)) => IpAddr::V6(a),
        };
        let s = &mut self.socks[i];
        s.remote = Some((peer_ip, remote.port()));
        let tuple = (s.h2_key(), s.port, canon(peer_ip), remote.port());
        let keep = s.h4.is_some_and(|(t, _)| t == tuple);
        if !keep {
            let stamp = self.next_stamp();
            self.socks[i].h4 = Some((tuple, stamp));
        }
        let s = &self.socks[i];
        Ok(SocketAddr::new(s.local, s.port))
    }

    /// Disconnects.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn disconnect(&mut self, id: SockId) -> Result<(), Error> {
        let i = self.idx(id)?;
        let old_key = self.socks[i].h2_key();
        let s = &mut self.socks[i];
        s.remote = None;
        s.options.bound_dev_if = 0;
        if !s.addr_lock {
            s.local = wildcard(s.family);
            if s.port_lock && s.hashed {
                if let Some((_, stamp)) = s.h4 {
                    let zero = canon(wildcard(s.family));
                    s.h4 = Some(((zero, s.port, zero, 0), stamp));
                }
                self.leave(i);
                self.rehash2(i, old_key);
            }
        }
        if !self.socks[i].port_lock && self.socks[i].hashed {
            self.unhash(i);
        }
        Ok(())
    }

    fn unhash(&mut self, i: usize) {
        self.leave(i);
        let s = &mut self.socks[i];
        s.hashed = false;
        s.port = 0;
        s.h4 = None;
    }

    /// Sets `SO_BINDTODEVICE`.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn set_bound_dev_if(&mut self, id: SockId, ifindex: u32) -> Result<(), Error> {
        let i = self.idx(id)?;
        self.socks[i].options.bound_dev_if = ifindex;
        if self.socks[i].hashed {
            self.leave(i);
        }
        Ok(())
    }

    /// Sets `SO_INCOMING_CPU`.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn set_incoming_cpu(&mut self, id: SockId, cpu: Option<u32>) -> Result<(), Error> {
        let i = self.idx(id)?;
        let cpu = cpu.filter(|c| i32::try_from(*c).is_ok());
        let s = &mut self.socks[i];
        s.incoming_cpu = cpu;
        let was = std::mem::replace(&mut s.cpu_set, cpu.is_some());
        if let (Some(g), true) = (s.group, was != cpu.is_some()) {
            let count = &mut self.groups[g].cpu_count;
            *count = if cpu.is_some() {
                *count + 1
            } else {
                *count - 1
            };
        }
        Ok(())
    }

    /// Notes a datagram received on `cpu` (what [`Sock::record_incoming_cpu`] does).
    ///
    /// [`Sock::record_incoming_cpu`]: crate::Sock::record_incoming_cpu
    pub fn record_incoming_cpu(&mut self, id: SockId, cpu: u32) {
        if let Ok(i) = self.idx(id) {
            self.socks[i].incoming_cpu = i32::try_from(cpu).ok().map(|_| cpu);
        }
    }

    /// Closes.
    ///
    /// # Errors
    /// [`Error::UnknownSocket`].
    pub fn close(&mut self, id: SockId) -> Result<(), Error> {
        let i = self.idx(id)?;
        self.unhash(i);
        self.socks.remove(i);
        Ok(())
    }

    /// The score of `s` for the packet, -1 for no match; `at_any`: the wildcard pass.
    fn score(&self, s: &RefSock, key: &Lookup, at_any: bool) -> i32 {
        if !s.hashed || s.netns != key.netns || s.port != key.dst.port() {
            return -1;
        }
        let cpu_bonus = i32::from(s.incoming_cpu.is_some_and(|c| c == key.cpu));
        let dev = s.options.bound_dev_if;
        if dev != 0 && dev != key.ifindex {
            return -1;
        }
        match (key.src.ip(), key.dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let takes_v4 = match (s.family, s.local) {
                    (Family::V4, _) => true,
                    (Family::V6DualStack, IpAddr::V6(a)) => {
                        a.is_unspecified() || a.to_ipv4_mapped().is_some()
                    }
                    _ => false,
                };
                let want = if at_any { Ipv4Addr::UNSPECIFIED } else { dst };
                if !takes_v4 || v4_of(s.local) != want {
                    return -1;
                }
                let mut score = if s.family.is_v4() { 2 } else { 1 };
                if let Some((peer, pport)) = s.remote {
                    if v4_of(peer) != src {
                        return -1;
                    }
                    score += 4;
                    if pport != 0 {
                        if pport != key.src.port() {
                            return -1;
                        }
                        score += 4;
                    }
                }
                score + 4 * i32::from(dev != 0) + cpu_bonus
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let want = if at_any { Ipv6Addr::UNSPECIFIED } else { dst };
                if s.family.is_v4() || s.local != IpAddr::V6(want) {
                    return -1;
                }
                let mut score = 0;
                if let Some((peer, pport)) = s.remote {
                    if pport != 0 {
                        if pport != key.src.port() {
                            return -1;
                        }
                        score += 1;
                    }
                    if peer != IpAddr::V6(src) {
                        return -1;
                    }
                    score += 1;
                }
                score + i32::from(dev != 0) + cpu_bonus
            }
            _ => -1,
        }
    }

    fn select(&self, g: usize, key: &Lookup) -> Option<SockId> {
        let group = &self.groups[g];
        let n = group.members.len();
        if n == 0 {
            return None;
        }
        let start = ((u64::from(key.hash) * n as u64) >> 32) as usize;
        let order = (0..n).map(|k| self.sock(group.members[(start + k) % n]).expect("member"));
        let mut unconnected = order.filter(|s| s.remote.is_none()).peekable();
        let first = unconnected.peek().map(|s| s.id);
        if group.cpu_count == 0 {
            return first;
        }
        unconnected
            .find(|s| s.incoming_cpu == Some(key.cpu))
            .map(|s| s.id)
            .or(first)
    }

    /// One hash2 pass: candidates in chain order, the kernel's scoring loop.
    fn pass(&self, key: &Lookup, at_any: bool) -> Option<SockId> {
        let mut chain: Vec<&RefSock> = self
            .socks
            .iter()
            .filter(|s| self.score(s, key, at_any) >= 0)
            .collect();
        chain.sort_by_key(|s| {
            (
                s.h2_tail,
                if s.h2_tail {
                    s.h2_stamp as i128
                } else {
                    -(s.h2_stamp as i128)
                },
            )
        });
        let mut result = None;
        let mut badness = -1;
        for s in chain {
            let score = self.score(s, key, at_any);
            if score <= badness {
                continue;
            }
            badness = score;
            if s.remote.is_some() {
                result = Some(s.id);
                continue;
            }
            let Some(g) = s.group else {
                result = Some(s.id);
                continue;
            };
            let Some(pick) = self.select(g, key) else {
                result = Some(s.id);
                continue;
            };
            if !self.groups[g].has_conns {
                return Some(pick);
            }
            result = Some(pick);
            badness = badness.max(self.score(self.sock(pick).expect("member"), key, at_any));
        }
        result
    }

    /// The socket the kernel would deliver to.
    pub fn lookup(&self, key: &Lookup) -> Option<SockId> {
        let exact = self
            .socks
            .iter()
            .filter(|s| {
                let dev = s.options.bound_dev_if;
                s.netns == key.netns
                    && s.h4.is_some()
                    && s.remote.is_some_and(|(peer, pport)| {
                        canon(peer) == canon(key.src.ip()) && pport == key.src.port()
                    })
                    && canon(s.local) == canon(key.dst.ip())
                    && s.port == key.dst.port()
                    && (dev == 0 || dev == key.ifindex)
                    && (key.dst.is_ipv4() || !s.family.is_v4())
                    && key.src.is_ipv4() == key.dst.is_ipv4()
            })
            .max_by_key(|s| s.h4.map(|(_, stamp)| stamp));
        if let Some(s) = exact {
            return Some(s.id);
        }
        self.pass(key, false).or_else(|| self.pass(key, true))
    }

    /// The socket's `SO_REUSEPORT` group: members in order, `has_conns`, the
    /// `SO_INCOMING_CPU` count (as [`Writer::reuseport_group`](crate::Writer::reuseport_group)).
    pub fn reuseport_group(&self, id: SockId) -> Option<(Vec<SockId>, bool, u32)> {
        self.group_of(self.sock(id)?)
    }

    /// [`reuseport_group`](Self::reuseport_group) of a socket of [`socks`](Self::socks),
    /// without looking it up.
    pub fn group_of(&self, s: &RefSock) -> Option<(Vec<SockId>, bool, u32)> {
        let g = &self.groups[s.group?];
        Some((g.members.clone(), g.has_conns, g.cpu_count))
    }

    /// Every free port a bind of `id` to `addr` with port 0 could pick (for tests).
    pub fn free_ports_for(&self, id: SockId, addr: IpAddr) -> Vec<u16> {
        let Some(s) = self.sock(id) else {
            return Vec::new();
        };
        let mut cand = s.clone();
        cand.local = addr;
        self.free_ports(&cand)
    }
}
