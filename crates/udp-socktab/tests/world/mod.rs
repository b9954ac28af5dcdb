//! The differential model of the writer and the lock-free lookup against the brute-force
//! [`Reference`]: small address and port pools so that sockets collide, share ports, join
//! groups and exhaust the port range; after every call both must agree on its result and on
//! every socket's state and group. Shared by the proptest (`tests/model.rs`) and the fuzz
//! target `socktab_ops` (`fuzz/fuzz_targets/socktab_ops.rs`, which includes this file).
//!
//! Its cost is the fuzz target's rate, so the checks are made without redundant work: the
//! pools are parsed once, the per-call state comparison walks both sides' open sockets side by
//! side instead of looking every id made so far up in both (a scan of the reference each),
//! and the exhaustive sweep asks, per namespace and port, a copy of the reference cut down to
//! the sockets such a lookup can see ([`Reference::for_port`]); the proptest's sweep also
//! checks that the cut copy answers as the whole reference.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

use crossbeam_epoch::Guard;

use udp_socktab::reference::Reference;
use udp_socktab::{
    Family, Lookup, NetnsConfig, NetnsId, SockId, SockOptions, SockTable, TableConfig, Writer,
};

/// Returns an error naming both sides unless they are equal.
macro_rules! check_eq {
    ($a:expr, $b:expr $(,)?) => {
        check_eq!($a, $b, "")
    };
    ($a:expr, $b:expr, $($fmt:tt)+) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{:?} != {:?}: {}", a, b, format!($($fmt)+)));
        }
    }};
}

/// Local addresses.
pub const V4: [&str; 5] = ["0.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.9", "224.0.0.5"];
/// A pool.
pub const V6: [&str; 7] = [
    "::",
    "2001:db8::1",
    "2001:db8::2",
    "::ffff:10.0.0.1",
    "::ffff:10.0.0.2",
    "::ffff:0.0.0.0",
    "2001:db8::9",
];
/// A pool.
pub const PEERS4: [&str; 3] = ["192.0.2.1", "192.0.2.2", "10.0.0.2"];
/// A pool.
pub const PEERS6: [&str; 4] = [
    "2001:db8:1::1",
    "2001:db8:1::2",
    "::ffff:192.0.2.1",
    "2001:db8::2",
];
/// A pool.
pub const PORTS: [u16; 4] = [0, 1000, 1001, 53];
/// A pool.
pub const RANGE: (u16, u16) = (1000, 1007);

/// The pools above, parsed once: [`V4`], [`V6`], [`PEERS4`], [`PEERS6`].
struct Pools {
    v4: Vec<IpAddr>,
    v6: Vec<IpAddr>,
    peers4: Vec<IpAddr>,
    peers6: Vec<IpAddr>,
}

static POOLS: LazyLock<Pools> = LazyLock::new(|| {
    let parse = |pool: &[&str]| pool.iter().map(|s| ip(s)).collect();
    Pools {
        v4: parse(&V4),
        v6: parse(&V6),
        peers4: parse(&PEERS4),
        peers6: parse(&PEERS6),
    }
});

/// One socket call or lookup, its arguments as indices into the pools above.
#[derive(Clone, Debug)]
pub enum Op {
    #[allow(missing_docs)]
    Socket {
        ns: u32,
        family: u8,
        reuseaddr: bool,
        reuseport: bool,
        dev: u32,
        uid: u32,
    },
    Bind {
        sock: usize,
        v6: bool,
        addr: usize,
        port: usize,
    },
    Connect {
        sock: usize,
        v6: bool,
        peer: usize,
        port: u16,
        src: usize,
    },
    Disconnect {
        sock: usize,
    },
    Close {
        sock: usize,
    },
    SetDev {
        sock: usize,
        dev: u32,
    },
    SetCpu {
        sock: usize,
        cpu: Option<u32>,
    },
    Lookup {
        ns: u32,
        v6: bool,
        src: usize,
        sport: u16,
        dst: usize,
        dport: usize,
        dif: u32,
        hash: u32,
        cpu: u32,
    },
}

/// The writer and its table beside the reference, with the namespaces and sockets made so far.
pub struct World {
    writer: Writer,
    table: std::sync::Arc<SockTable>,
    model: Reference,
    netns: Vec<NetnsId>,
    ids: Vec<SockId>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Looks `key` up in the table and in `model` (the reference, or a cut of it that sees the
/// key's namespace and port); returns the table's answer when they agree.
fn lookup_both<'g>(
    table: &'g SockTable,
    model: &Reference,
    key: &Lookup,
    guard: &'g Guard,
) -> Result<Option<&'g udp_socktab::Sock>, String> {
    let ours = table.lookup(key, guard);
    let want = model.lookup(key);
    check_eq!(ours.map(|s| s.id()), want, "lookup {:?}", key);
    Ok(ours)
}

impl World {
    /// Three namespaces (two sharing the global table, one with its own) with local addresses
    /// and a reserved port, in both.
    pub fn new(seed: u64) -> World {
        let (table, mut writer) = SockTable::new(TableConfig {
            hash_entries: 256,
            seed: Some(seed),
        })
        .unwrap();
        let mut model = Reference::new();
        let mut netns = Vec::new();
        for child in [0, 0, 128] {
            let ns = writer
                .add_netns(NetnsConfig {
                    child_hash_entries: child,
                    local_port_range: RANGE,
                })
                .unwrap();
            model.add_netns(ns, Some(RANGE));
            for (a, dev) in [
                ("10.0.0.1", 1),
                ("10.0.0.2", 2),
                ("2001:db8::1", 1),
                ("2001:db8::2", 2),
            ] {
                writer.add_local_addr(ns, ip(a), dev).unwrap();
                model.add_local_addr(ns, ip(a), dev);
            }
            writer.set_reserved_port(ns, 1003, true).unwrap();
            model.reserve_port(ns, 1003);
            netns.push(ns);
        }
        World {
            writer,
            table,
            model,
            netns,
            ids: Vec::new(),
        }
    }

    fn sock(&self, k: usize) -> SockId {
        self.ids
            .get(k % self.ids.len().max(1))
            .copied()
            .unwrap_or(SockId(u64::MAX))
    }

    fn family_of(&self, id: SockId) -> Option<Family> {
        self.writer.sock(id).map(|s| s.family())
    }

    /// Applies `op` to both; an error says where they disagree.
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        let errno = |e: udp_socktab::Error| e.errno().unwrap_or(-1);
        match *op {
            Op::Socket {
                ns,
                family,
                reuseaddr,
                reuseport,
                dev,
                uid,
            } => {
                let family = [Family::V4, Family::V6DualStack, Family::V6Only][family as usize];
                let opts = SockOptions {
                    reuseaddr,
                    reuseport,
                    bound_dev_if: dev,
                    uid,
                };
                let ns = self.netns[ns as usize];
                let id = self.writer.socket(ns, family, opts).unwrap();
                self.model.socket(id, ns, family, opts);
                self.ids.push(id);
            }
            Op::Bind {
                sock,
                v6,
                addr,
                port,
            } => {
                let id = self.sock(sock);
                let want_v6 = self.family_of(id).is_some_and(|f| !f.is_v4()) != v6;
                let pools = &*POOLS;
                let a = if want_v6 {
                    pools.v6[addr % V6.len()]
                } else {
                    pools.v4[addr % V4.len()]
                };
                let sa = SocketAddr::new(a, PORTS[port]);
                let ours = self.writer.bind(id, sa);
                let theirs = self.model.bind(id, sa, |free| match ours {
                    Ok(got) => Some(got.port()),
                    Err(_) => {
                        assert!(
                            free.is_empty(),
                            "writer found no port, but {free:?} were free"
                        );
                        None
                    }
                });
                check_eq!(
                    ours.map_err(errno),
                    theirs.map_err(errno),
                    "bind {:?} {}",
                    id,
                    sa
                );
            }
            Op::Connect {
                sock,
                v6,
                peer,
                port,
                src,
            } => {
                let id = self.sock(sock);
                let want_v6 = self.family_of(id).is_some_and(|f| !f.is_v4()) != v6;
                let pools = &*POOLS;
                let (p, s) = if want_v6 {
                    (pools.peers6[peer % PEERS6.len()], pools.v6[src % V6.len()])
                } else {
                    (pools.peers4[peer % PEERS4.len()], pools.v4[src % V4.len()])
                };
                let remote = SocketAddr::new(p, port);
                let ours = self.writer.connect(id, remote, s);
                let theirs = self.model.connect(id, remote, s, |free| match ours {
                    Ok(got) => Some(got.port()),
                    Err(_) => {
                        assert!(
                            free.is_empty(),
                            "autobind found no port, but {free:?} were free"
                        );
                        None
                    }
                });
                check_eq!(
                    ours.map_err(errno),
                    theirs.map_err(errno),
                    "connect {:?} {} from {}",
                    id,
                    remote,
                    s
                );
            }
            Op::Disconnect { sock } => {
                let id = self.sock(sock);
                check_eq!(
                    self.writer.disconnect(id).map_err(errno),
                    self.model.disconnect(id).map_err(errno)
                );
            }
            Op::Close { sock } => {
                let id = self.sock(sock);
                check_eq!(
                    self.writer.close(id).map_err(errno),
                    self.model.close(id).map_err(errno)
                );
            }
            Op::SetDev { sock, dev } => {
                let id = self.sock(sock);
                check_eq!(
                    self.writer.set_bound_dev_if(id, dev).map_err(errno),
                    self.model.set_bound_dev_if(id, dev).map_err(errno)
                );
            }
            Op::SetCpu { sock, cpu } => {
                let id = self.sock(sock);
                check_eq!(
                    self.writer.set_incoming_cpu(id, cpu).map_err(errno),
                    self.model.set_incoming_cpu(id, cpu).map_err(errno)
                );
            }
            Op::Lookup {
                ns,
                v6,
                src,
                sport,
                dst,
                dport,
                dif,
                hash,
                cpu,
            } => {
                let pools = &*POOLS;
                let (s, d) = if v6 {
                    (pools.peers6[src % PEERS6.len()], pools.v6[dst % V6.len()])
                } else {
                    (pools.peers4[src % PEERS4.len()], pools.v4[dst % V4.len()])
                };
                let key = Lookup {
                    netns: self.netns[ns as usize],
                    src: SocketAddr::new(s, sport),
                    dst: SocketAddr::new(d, PORTS[dport]),
                    ifindex: dif,
                    hash,
                    cpu,
                };
                let guard = crossbeam_epoch::pin();
                // A receiving socket notes the CPU, in both.
                if let Some(sk) = lookup_both(&self.table, &self.model, &key, &guard)? {
                    sk.record_incoming_cpu(cpu);
                    self.model.record_incoming_cpu(sk.id(), cpu);
                }
            }
        }
        self.check_states()
    }

    /// Both hold the same open sockets, and every socket's state and group agree: the
    /// writer's sockets sorted by id, side by side with the reference's (kept in the order
    /// they were opened, so by id; were they not, the ids would differ and the check fail),
    /// with no lookup by id in either; the writer's group is asked for only of a socket in
    /// one (of any other it is `None`), under one pinned guard (the writer's
    /// `reuseport_group` pins again inside it, cheaply).
    fn check_states(&self) -> Result<(), String> {
        let _guard = crossbeam_epoch::pin();
        let theirs_all = self.model.socks();
        let mut ours_all: Vec<&udp_socktab::Sock> = self.writer.socks().collect();
        ours_all.sort_unstable_by_key(|s| s.id());
        check_eq!(ours_all.len(), theirs_all.len(), "open sockets");
        for (ours, theirs) in ours_all.into_iter().zip(theirs_all) {
            let id = theirs.id;
            check_eq!(ours.id(), id, "open sockets, in id order");
            check_eq!(ours.family(), theirs.family, "{:?}", id);
            check_eq!(
                ours.local_addr(),
                SocketAddr::new(theirs.local, theirs.port),
                "{:?}",
                id
            );
            check_eq!(
                ours.remote_addr(),
                theirs.remote.map(|(a, p)| SocketAddr::new(a, p)),
                "{:?}",
                id
            );
            check_eq!(ours.bound_dev_if(), theirs.options.bound_dev_if);
            let group = if ours.in_reuseport_group() {
                self.writer.reuseport_group(id)
            } else {
                None
            };
            check_eq!(group, self.model.group_of(theirs), "group of {:?}", id);
        }
        Ok(())
    }

    /// Every lookup the pools can form, in every namespace (2,322), each against the
    /// reference cut down to its namespace and port ([`Reference::for_port`]).
    pub fn sweep(&self) -> Result<(), String> {
        self.sweep_with(false)
    }

    /// [`sweep`](Self::sweep), each lookup also asked of the whole reference, which must
    /// answer as the cut one (the proptest's sweep: it checks the cut).
    pub fn sweep_checking_cut(&self) -> Result<(), String> {
        self.sweep_with(true)
    }

    fn sweep_with(&self, whole: bool) -> Result<(), String> {
        let pools = &*POOLS;
        let guard = crossbeam_epoch::pin();
        for &ns in &self.netns {
            for dport in &PORTS[1..] {
                let cut = self.model.for_port(ns, *dport);
                for v6 in [false, true] {
                    let (srcs, dsts) = if v6 {
                        (&pools.peers6, &pools.v6)
                    } else {
                        (&pools.peers4, &pools.v4)
                    };
                    for &s in srcs {
                        for &d in dsts {
                            for sport in [7000, 7001] {
                                for dif in 0..3 {
                                    let key = Lookup {
                                        netns: ns,
                                        src: SocketAddr::new(s, sport),
                                        dst: SocketAddr::new(d, *dport),
                                        ifindex: dif,
                                        hash: u32::from(sport).wrapping_mul(0x9e37_79b9) ^ dif,
                                        cpu: 0,
                                    };
                                    lookup_both(&self.table, &cut, &key, &guard)?;
                                    if whole {
                                        check_eq!(
                                            cut.lookup(&key),
                                            self.model.lookup(&key),
                                            "cut reference, lookup {:?}",
                                            key
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
