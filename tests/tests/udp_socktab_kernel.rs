//! udp-socktab against the live kernel (privileged): in a throwaway namespace, generated
//! scenarios of real UDP sockets (IPv4, dual-stack and IPv6-only; wildcard, specific and
//! v4-mapped addresses; `SO_REUSEADDR`, `SO_REUSEPORT`, `SO_BINDTODEVICE`; connected and not)
//! are bound in the kernel and in udp-socktab, which must accept and refuse the same binds and
//! connects; then datagrams sent inside the namespace show which socket the kernel delivers
//! each one to, and udp-socktab must pick the same socket (for a `SO_REUSEPORT` group, whose
//! flow hash is the kernel's own: a member of the group udp-socktab picks from).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::SockAddr;
use udp_socktab::{
    Family, Lookup, NetnsConfig, SockId, SockOptions, SockTable, TableConfig, Writer,
};

mod socket_kernel_common;
use socket_kernel_common::{Gen, errno, kernel_receiver, kernel_socket, veth_netns};

/// The port every scenario socket binds.
const PORT: u16 = 5000;
/// The senders: (address, port); each is also a peer that scenario sockets may connect to.
const SENDERS: [(&str, u16); 4] = [
    ("10.0.0.1", 7001),
    ("127.0.0.1", 7002),
    ("2001:db8::1", 7003),
    ("::1", 7004),
];
/// The destinations: every local address of the namespace.
const DESTS: [&str; 4] = ["10.0.0.1", "127.0.0.1", "2001:db8::1", "::1"];

/// One socket of a scenario.
#[derive(Clone, Debug)]
struct Spec {
    family: Family,
    addr: &'static str,
    reuseaddr: bool,
    reuseport: bool,
    /// 0: none, 1: `lo`, 2: `ve0`.
    dev: u8,
    /// Index into `SENDERS`.
    connect: Option<usize>,
}

fn random_spec(g: &mut Gen) -> Spec {
    let family = [Family::V4, Family::V6DualStack, Family::V6Only][g.below(3)];
    let addr = match family {
        Family::V4 => ["0.0.0.0", "0.0.0.0", "10.0.0.1", "127.0.0.1"][g.below(4)],
        _ => [
            "::",
            "::",
            "2001:db8::1",
            "::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ][g.below(6)],
    };
    let dev = [0, 0, 0, 1, 2][g.below(5)] as u8;
    // Routing is the caller's part of connect: a socket bound to a device may have no route to
    // a peer on another device (the kernel answers ENETUNREACH or EINVAL), so such peers are
    // left out.
    let peers: Vec<usize> = (0..SENDERS.len())
        .filter(|&i| match family {
            Family::V4 => i < 2,
            Family::V6Only => i >= 2,
            Family::V6DualStack => true,
        })
        .filter(|&i| dev == 0 || (dev == 1) == (i % 2 == 1))
        .collect();
    Spec {
        family,
        addr,
        reuseaddr: g.chance(40),
        reuseport: g.chance(50),
        dev,
        connect: g.chance(25).then(|| peers[g.below(peers.len())]),
    }
}

/// The reuseport_addr_any pattern: wildcard IPv4 and IPv6 reuseport sockets bound before and
/// after one specific-address socket; the specific one must receive.
fn addr_any_scenarios() -> Vec<Vec<Spec>> {
    let rp = |family, addr| Spec {
        family,
        addr,
        reuseaddr: false,
        reuseport: true,
        dev: 0,
        connect: None,
    };
    let mut out = Vec::new();
    for specific in [
        rp(Family::V4, "10.0.0.1"),
        rp(Family::V6DualStack, "2001:db8::1"),
        rp(Family::V6DualStack, "::ffff:10.0.0.1"),
    ] {
        for before in [true, false] {
            let mut s = vec![rp(Family::V4, "0.0.0.0"), rp(Family::V6Only, "::")];
            if specific.addr.starts_with("::ffff") {
                s = vec![rp(Family::V4, "0.0.0.0")];
            }
            let wild = s.clone();
            if before {
                s.push(specific.clone());
                s.extend(wild);
            } else {
                s.insert(0, specific.clone());
                s.extend(wild);
            }
            out.push(s);
        }
    }
    out
}

fn ours_errno<T>(r: &Result<T, udp_socktab::Error>) -> i32 {
    r.as_ref().err().map_or(0, |e| e.errno().unwrap_or(-1))
}

/// Pins the calling thread to CPU 0, so that loopback deliveries run there too and sockets'
/// incoming CPU is predictable.
fn pin_cpu0() {
    let mut set = nix::sched::CpuSet::new();
    set.set(0).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
}

/// Runs one scenario inside the namespace; returns a description of the first disagreement.
fn run_scenario(specs: &[Spec], ve0: u32) -> Result<usize, String> {
    let (table, mut w): (_, Writer) = SockTable::new(TableConfig::default()).unwrap();
    let ns = w.add_netns(NetnsConfig::default()).unwrap();
    for a in DESTS {
        let dev = if a.parse::<IpAddr>().unwrap().is_loopback() {
            1
        } else {
            ve0
        };
        w.add_local_addr(ns, a.parse().unwrap(), dev).unwrap();
    }
    let dev_index = |d: u8| [0, 1, ve0][usize::from(d)];
    let dev_name = |d: u8| [None, Some(&b"lo"[..]), Some(&b"ve0"[..])][usize::from(d)];

    // Bind, in order, in both.
    let mut socks: Vec<(UdpSocket, SockId, &Spec)> = Vec::new();
    for spec in specs {
        let k = kernel_socket(spec.family, spec.reuseaddr, spec.reuseport);
        k.bind_device(dev_name(spec.dev)).unwrap();
        let addr = SocketAddr::new(spec.addr.parse().unwrap(), PORT);
        let kernel = k.bind(&SockAddr::from(addr));
        let opts = SockOptions {
            reuseaddr: spec.reuseaddr,
            reuseport: spec.reuseport,
            bound_dev_if: dev_index(spec.dev),
            uid: 0,
        };
        let id = w.socket(ns, spec.family, opts).unwrap();
        let ours = w.bind(id, addr);
        if errno(&kernel) != ours_errno(&ours) {
            return Err(format!("bind {spec:?}: kernel {kernel:?}, ours {ours:?}"));
        }
        if kernel.is_ok() {
            k.set_nonblocking(true).unwrap();
            socks.push((k.into(), id, spec));
        } else {
            w.close(id).unwrap();
        }
    }
    // Connect some, in both.
    for (k, id, spec) in &socks {
        let Some(peer) = spec.connect else { continue };
        let (a, p) = SENDERS[peer];
        let remote = SocketAddr::new(a.parse().unwrap(), p);
        let kernel = k.connect(remote);
        // The route's source for a local peer is the peer address itself.
        let ours = w.connect(*id, remote, a.parse().unwrap());
        if errno(&kernel) != ours_errno(&ours) {
            return Err(format!(
                "connect {spec:?} to {remote}: kernel {kernel:?}, ours {ours:?}"
            ));
        }
        if let (Ok(()), Ok(local)) = (&kernel, &ours) {
            let klocal = k.local_addr().unwrap();
            if canonical(klocal) != canonical(*local) {
                return Err(format!(
                    "connect {spec:?}: kernel local {klocal}, ours {local}"
                ));
            }
        }
    }

    // Deliver: every sender to every destination of its family.
    let senders: Vec<UdpSocket> = SENDERS
        .iter()
        .map(|(a, p)| UdpSocket::bind(SocketAddr::new(a.parse().unwrap(), *p)).unwrap())
        .collect();
    let mut checked = 0;
    for (si, sender) in senders.iter().enumerate() {
        let src = SocketAddr::new(SENDERS[si].0.parse().unwrap(), SENDERS[si].1);
        for d in DESTS {
            let dst = SocketAddr::new(d.parse().unwrap(), PORT);
            if src.is_ipv4() != dst.is_ipv4() {
                continue;
            }
            let payload = format!("{si}->{d}");
            sender.send_to(payload.as_bytes(), dst).unwrap();
            let got = kernel_receiver(socks.iter().map(|(s, _, _)| s), payload.as_bytes());
            // Local delivery comes in on the device that holds the address (loopback: `lo`).
            let ifindex = if dst.ip().is_loopback() { 1 } else { ve0 };
            let key = Lookup {
                netns: ns,
                src,
                dst,
                ifindex,
                hash: 0,
                cpu: 0,
            };
            let guard = crossbeam_epoch::pin();
            let ours = table.lookup(&key, &guard).map(|s| s.id());
            let kernel = got.map(|i| socks[i].1);
            let agree = match (kernel, ours) {
                (Some(k), Some(o)) if k != o => {
                    // A SO_REUSEPORT pick: the kernel's member must be in the group we picked from.
                    w.reuseport_group(o)
                        .is_some_and(|(members, _, _)| members.contains(&k) && members.contains(&o))
                }
                (k, o) => k == o,
            };
            if !agree {
                return Err(format!(
                    "{src} -> {dst}: kernel delivered to {kernel:?}, ours {ours:?}; sockets {:?}",
                    socks
                        .iter()
                        .map(|(_, id, s)| (
                            id,
                            w.sock(*id).map(|r| (r.local_addr(), r.remote_addr())),
                            *s
                        ))
                        .collect::<Vec<_>>()
                ));
            }
            // The kernel notes the CPU of a connected socket's deliveries; so do we.
            if let Some(i) = got {
                if let Some(sk) = w.sock(socks[i].1).filter(|s| s.is_connected()) {
                    sk.record_incoming_cpu(0);
                }
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// An address with IPv4 and v4-mapped written alike.
fn canonical(a: SocketAddr) -> (IpAddr, u16) {
    let ip = match a.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    (ip, a.port())
}

#[test]
fn udp_socktab_picks_the_kernels_socket() {
    if !xfwd_lab::privileged("udp_socktab_picks_the_kernels_socket") {
        return;
    }
    let lab = xfwd_lab::Lab::unique("udp").unwrap();
    let ns = veth_netns(lab.prefix(), &[("10.0.0.1", 24), ("2001:db8::1", 64)]);
    let result = ns
        .run(|| {
            pin_cpu0();
            std::thread::sleep(Duration::from_millis(50));
            let ve0 = nix::net::if_::if_nametoindex("ve0").unwrap();
            let mut scenarios = addr_any_scenarios();
            let fixed = scenarios.len();
            let mut g = Gen(0x5eed_0d95 ^ 0x2520_aec5);
            for _ in 0..120 {
                let n = 1 + g.below(6);
                scenarios.push((0..n).map(|_| random_spec(&mut g)).collect());
            }
            let mut deliveries = 0;
            for (i, specs) in scenarios.iter().enumerate() {
                match run_scenario(specs, ve0) {
                    Ok(n) => deliveries += n,
                    Err(e) => {
                        let kind = if i < fixed { "addr_any" } else { "generated" };
                        return Err(format!("scenario {i} ({kind}) {specs:#?}: {e}"));
                    }
                }
            }
            Ok((scenarios.len(), deliveries))
        })
        .unwrap();
    let (scenarios, deliveries) = result.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{scenarios} scenarios, {deliveries} deliveries compared");
    assert!(deliveries >= scenarios * 4);
}
