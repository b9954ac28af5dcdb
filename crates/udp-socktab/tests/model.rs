//! Differential test: the writer and the lock-free lookup against the brute-force
//! [`Reference`], over random sequences of socket calls in three namespaces (two sharing a
//! small global table, one with its own), small address and port pools so that sockets
//! collide, share ports, join groups and exhaust the port range; after every call both agree
//! on its result and on every socket's state and group, and random and exhaustive lookups
//! agree on the receiving socket.

use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;
use udp_socktab::reference::Reference;
use udp_socktab::{
    Family, Lookup, NetnsConfig, NetnsId, SockId, SockOptions, SockTable, TableConfig, Writer,
};

const V4: [&str; 5] = ["0.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.9", "224.0.0.5"];
const V6: [&str; 7] = [
    "::",
    "2001:db8::1",
    "2001:db8::2",
    "::ffff:10.0.0.1",
    "::ffff:10.0.0.2",
    "::ffff:0.0.0.0",
    "2001:db8::9",
];
const PEERS4: [&str; 3] = ["192.0.2.1", "192.0.2.2", "10.0.0.2"];
const PEERS6: [&str; 4] = [
    "2001:db8:1::1",
    "2001:db8:1::2",
    "::ffff:192.0.2.1",
    "2001:db8::2",
];
const PORTS: [u16; 4] = [0, 1000, 1001, 53];
const RANGE: (u16, u16) = (1000, 1007);

#[derive(Clone, Debug)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop_oneof![3 => Just(0u32), 1 => 1..3u32], 0..3u8, any::<bool>(), prop::bool::weighted(0.7), prop_oneof![3 => Just(0u32), 1 => 1..3u32], prop_oneof![5 => Just(0u32), 1 => Just(1)])
            .prop_map(|(ns, family, reuseaddr, reuseport, dev, uid)| Op::Socket { ns, family, reuseaddr, reuseport, dev, uid }),
        6 => (0..24usize, prop::bool::weighted(0.05), prop_oneof![3 => Just(0usize), 3 => Just(1), 2 => Just(3), 1 => 0..7usize], prop_oneof![1 => Just(0usize), 3 => Just(1), 1 => 2..4usize])
            .prop_map(|(sock, v6, addr, port)| Op::Bind { sock, v6, addr, port }),
        2 => (0..24usize, prop::bool::weighted(0.1), 0..4usize, prop_oneof![Just(7000u16), Just(7001), Just(0)], prop_oneof![2 => Just(1usize), 1 => Just(3), 1 => 0..7usize])
            .prop_map(|(sock, v6, peer, port, src)| Op::Connect { sock, v6, peer, port, src }),
        1 => (0..24usize).prop_map(|sock| Op::Disconnect { sock }),
        1 => (0..24usize).prop_map(|sock| Op::Close { sock }),
        1 => (0..24usize, 0..3u32).prop_map(|(sock, dev)| Op::SetDev { sock, dev }),
        1 => (0..24usize, prop::option::of(0..2u32)).prop_map(|(sock, cpu)| Op::SetCpu { sock, cpu }),
        3 => (prop_oneof![3 => Just(0u32), 1 => 1..3u32], any::<bool>(), 0..4usize, prop_oneof![Just(7000u16), Just(7001), Just(9)], 0..7usize, 1..4usize, 0..3u32, any::<u32>(), 0..2u32)
            .prop_map(|(ns, v6, src, sport, dst, dport, dif, hash, cpu)| Op::Lookup { ns, v6, src, sport, dst, dport, dif, hash, cpu }),
    ]
}

struct World {
    writer: Writer,
    table: std::sync::Arc<SockTable>,
    model: Reference,
    netns: Vec<NetnsId>,
    ids: Vec<SockId>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl World {
    fn new(seed: u64) -> World {
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

    fn lookup_both(&self, key: &Lookup) -> Result<(), TestCaseError> {
        let guard = crossbeam_epoch::pin();
        let ours = self.table.lookup(key, &guard).map(|s| s.id());
        let want = self.model.lookup(key);
        prop_assert_eq!(ours, want, "lookup {:?}", key);
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
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
                let a = if want_v6 {
                    ip(V6[addr % V6.len()])
                } else {
                    ip(V4[addr % V4.len()])
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
                prop_assert_eq!(
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
                let p = if want_v6 {
                    ip(PEERS6[peer % PEERS6.len()])
                } else {
                    ip(PEERS4[peer % PEERS4.len()])
                };
                let s = if want_v6 {
                    ip(V6[src % V6.len()])
                } else {
                    ip(V4[src % V4.len()])
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
                prop_assert_eq!(
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
                prop_assert_eq!(
                    self.writer.disconnect(id).map_err(errno),
                    self.model.disconnect(id).map_err(errno)
                );
            }
            Op::Close { sock } => {
                let id = self.sock(sock);
                prop_assert_eq!(
                    self.writer.close(id).map_err(errno),
                    self.model.close(id).map_err(errno)
                );
            }
            Op::SetDev { sock, dev } => {
                let id = self.sock(sock);
                prop_assert_eq!(
                    self.writer.set_bound_dev_if(id, dev).map_err(errno),
                    self.model.set_bound_dev_if(id, dev).map_err(errno)
                );
            }
            Op::SetCpu { sock, cpu } => {
                let id = self.sock(sock);
                prop_assert_eq!(
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
                let (s, d) = if v6 {
                    (ip(PEERS6[src % PEERS6.len()]), ip(V6[dst % V6.len()]))
                } else {
                    (ip(PEERS4[src % PEERS4.len()]), ip(V4[dst % V4.len()]))
                };
                let key = Lookup {
                    netns: self.netns[ns as usize],
                    src: SocketAddr::new(s, sport),
                    dst: SocketAddr::new(d, PORTS[dport]),
                    ifindex: dif,
                    hash,
                    cpu,
                };
                self.lookup_both(&key)?;
                // A receiving socket notes the CPU, in both.
                let guard = crossbeam_epoch::pin();
                if let Some(sk) = self.table.lookup(&key, &guard) {
                    sk.record_incoming_cpu(cpu);
                    self.model.record_incoming_cpu(sk.id(), cpu);
                }
            }
        }
        self.check_states()
    }

    fn check_states(&self) -> Result<(), TestCaseError> {
        for &id in &self.ids {
            let (ours, theirs) = (self.writer.sock(id), self.model.sock(id));
            prop_assert_eq!(ours.is_some(), theirs.is_some());
            let (Some(ours), Some(theirs)) = (ours, theirs) else {
                continue;
            };
            prop_assert_eq!(ours.family(), theirs.family, "{:?}", id);
            prop_assert_eq!(
                ours.local_addr(),
                SocketAddr::new(theirs.local, theirs.port),
                "{:?}",
                id
            );
            prop_assert_eq!(
                ours.remote_addr(),
                theirs.remote.map(|(a, p)| SocketAddr::new(a, p)),
                "{:?}",
                id
            );
            prop_assert_eq!(ours.bound_dev_if(), theirs.options.bound_dev_if);
            prop_assert_eq!(
                self.writer.reuseport_group(id),
                self.model.reuseport_group(id),
                "group of {:?}",
                id
            );
        }
        Ok(())
    }

    /// Every lookup the pools can form, in every namespace.
    fn sweep(&self) -> Result<(), TestCaseError> {
        for &ns in &self.netns {
            for v6 in [false, true] {
                let (srcs, dsts): (&[&str], &[&str]) =
                    if v6 { (&PEERS6, &V6) } else { (&PEERS4, &V4) };
                for s in srcs {
                    for d in dsts {
                        for dport in &PORTS[1..] {
                            for sport in [7000, 7001] {
                                for dif in 0..3 {
                                    let key = Lookup {
                                        netns: ns,
                                        src: SocketAddr::new(ip(s), sport),
                                        dst: SocketAddr::new(ip(d), *dport),
                                        ifindex: dif,
                                        hash: u32::from(sport).wrapping_mul(0x9e37_79b9) ^ dif,
                                        cpu: 0,
                                    };
                                    self.lookup_both(&key)?;
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn writer_and_lookup_agree_with_reference(seed in any::<u64>(), ops in prop::collection::vec(op(), 1..100)) {
        let mut world = World::new(seed);
        for op in &ops {
            world.apply(op)?;
        }
        world.sweep()?;
    }
}
