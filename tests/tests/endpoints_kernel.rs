//! The dataplane's endpoints against the live kernel (privileged): in a throwaway namespace,
//! generated scenarios of UDP sockets (IPv4, dual-stack and IPv6-only; wildcard, specific and
//! v4-mapped addresses; `SO_REUSEADDR`, `SO_REUSEPORT`) are bound as kernel sockets and, in the
//! same order, as `dataplane::endpoint` endpoints: the binds must succeed or fail alike (port 0
//! included: both must find a free port); then a datagram to every local address is sent to
//! the kernel's sockets and, as a frame, through the pipeline and `EndpointRx::handle_batch`:
//! the endpoint that receives it must be the twin of the kernel's socket (for a `SO_REUSEPORT`
//! group, whose flow hash is the kernel's own, a member of the same group), and where the
//! kernel has no socket, the pipeline must give the datagram to the kernel.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use dataplane::endpoint::{BindOptions, Endpoint, EndpointConfig, EndpointRx, Endpoints};
use dataplane::{Config, Frame, HeapPool, PuntReason, Queue, Tables, Verdict};
use neigh_table::{Link, LinkFlags, OperState};
use socket2::SockAddr;
use udp_socktab::{Family, NetnsConfig, SockOptions, SockTable, TableConfig};

mod socket_kernel_common;
use socket_kernel_common::{Gen, errno, kernel_receiver, kernel_socket, veth_netns};

const PORT: u16 = 5000;
/// The namespace's addresses (on ve0), the destinations of every datagram.
const DESTS: [&str; 4] = ["10.0.0.1", "10.0.0.3", "2001:db8::1", "2001:db8::3"];
/// The remote sender of the frames given to the pipeline (a local source would be martian).
const REMOTE: [&str; 2] = ["10.0.0.2", "2001:db8::2"];
const VE0_MAC: [u8; 6] = [2, 0, 0, 0, 0xe0, 1];

#[derive(Clone, Debug)]
struct Spec {
    family: Family,
    addr: &'static str,
    port: u16,
    reuseaddr: bool,
    reuseport: bool,
}

fn random_spec(g: &mut Gen) -> Spec {
    let family = [Family::V4, Family::V6DualStack, Family::V6Only][g.below(3)];
    let addr = match family {
        Family::V4 => ["0.0.0.0", "0.0.0.0", "10.0.0.1", "10.0.0.3"][g.below(4)],
        _ => ["::", "::", "2001:db8::1", "2001:db8::3", "::ffff:10.0.0.1"][g.below(5)],
    };
    Spec {
        family,
        addr,
        port: if g.chance(10) { 0 } else { PORT },
        reuseaddr: g.chance(40),
        reuseport: g.chance(50),
    }
}

fn frame(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let eth = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0xe0, 2], VE0_MAC);
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!(),
    };
    let mut out = Vec::new();
    ip.udp(src.port(), dst.port())
        .write(&mut out, payload)
        .unwrap();
    out
}

/// Compares one scenario; returns the datagrams compared and how many a socket received.
fn run_scenario(specs: &[Spec], ve0: u32) -> Result<(usize, usize), String> {
    let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
    let sock_ns = writer.add_netns(NetnsConfig::default()).unwrap();
    // The kernel's port range, so that port 0 has the same space to search.
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let mut it = range.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    let (low, high) = (it.next().unwrap(), it.next().unwrap());
    writer.set_local_port_range(sock_ns, low, high).unwrap();
    let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_ns);
    let mut link = Link {
        mac: Some(VE0_MAC),
        ..Link::new(ve0, "ve0".to_string())
    };
    (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
    writers.links.upsert(link);
    let mut endpoints = Endpoints::new(writer, tables.clone(), EndpointConfig::default()).unwrap();
    for d in DESTS {
        let ip: IpAddr = d.parse().unwrap();
        match ip {
            IpAddr::V4(a) => {
                writers
                    .addrs
                    .add(addr_table::IfAddr::new(a, 24, ve0))
                    .unwrap();
            }
            IpAddr::V6(a) => {
                writers
                    .addrs
                    .add(addr_table::IfAddr::new(a, 64, ve0))
                    .unwrap();
            }
        }
        endpoints.add_local_addr(ip, ve0).unwrap();
    }
    tables.generation.bump();
    let mut rx: EndpointRx = endpoints.rx();
    let mut queue = Queue::new(Config::default()).unwrap();
    let mut pool = HeapPool::new(2048, 4);

    let mut kernel_socks: Vec<UdpSocket> = Vec::new();
    let mut ours: Vec<Endpoint> = Vec::new();
    for spec in specs {
        let k = kernel_socket(spec.family, spec.reuseaddr, spec.reuseport);
        let addr = SocketAddr::new(spec.addr.parse().unwrap(), spec.port);
        let kernel = k.bind(&SockAddr::from(addr));
        let options = SockOptions {
            reuseaddr: spec.reuseaddr,
            reuseport: spec.reuseport,
            ..SockOptions::default()
        };
        let opts = BindOptions {
            family: Some(spec.family),
            options,
            ..BindOptions::default()
        };
        let mine = endpoints.bind(addr, opts);
        let mine_errno = mine.as_ref().err().map_or(0, |e| e.errno().unwrap_or(-1));
        if errno(&kernel) != mine_errno {
            return Err(format!("bind {spec:?}: kernel {kernel:?}, ours {mine:?}"));
        }
        if let (Ok(()), Ok(e)) = (kernel, mine) {
            if spec.port == 0 {
                // Each chose a free port at random: keep only sockets on the scenario port.
                continue;
            }
            k.set_nonblocking(true).unwrap();
            kernel_socks.push(k.into());
            ours.push(e);
        }
    }
    let senders: Vec<UdpSocket> = ["10.0.0.1:7001", "[2001:db8::1]:7002"]
        .iter()
        .map(|a| UdpSocket::bind(a).unwrap())
        .collect();
    let (mut checked, mut received) = (0, 0);
    for (n, d) in DESTS.iter().enumerate() {
        let dst = SocketAddr::new(d.parse().unwrap(), PORT);
        let v6 = dst.is_ipv6();
        let payload = format!("datagram {n}");
        senders[usize::from(v6)]
            .send_to(payload.as_bytes(), dst)
            .unwrap();
        let kernel = kernel_receiver(kernel_socks.iter(), payload.as_bytes());

        let src = SocketAddr::new(REMOTE[usize::from(v6)].parse().unwrap(), 7000);
        let bytes = frame(src, dst, payload.as_bytes());
        let mut chunk = vec![0u8; 2048];
        chunk[..bytes.len()].copy_from_slice(&bytes);
        let guard = crossbeam_epoch::pin();
        let mut frames = [Frame::new(&mut chunk, 0, bytes.len(), ve0)];
        queue.process_batch(&tables, &guard, 0, &mut frames, &mut pool);
        let first = frames[0].verdict;
        rx.handle_batch(&mut queue, &tables, &guard, 0, &mut || 0, &mut frames);
        let mut buf = [0u8; 64];
        let mine: Vec<usize> = ours
            .iter()
            .enumerate()
            .filter(|(_, e)| e.recv_from(&mut buf).is_some())
            .map(|(i, _)| i)
            .collect();
        let agree = match (kernel, mine.as_slice()) {
            (None, []) => first == Verdict::Punt(PuntReason::Local),
            (Some(k), [o]) if k == *o => true,
            (Some(k), [o]) => {
                // A SO_REUSEPORT pick: the kernel's member must be in our pick's group.
                let group = |i: usize| {
                    endpoints
                        .writer()
                        .reuseport_group(ours[i].id())
                        .map(|(m, _, _)| m)
                };
                group(*o).is_some_and(|m| m.contains(&ours[k].id()))
            }
            _ => false,
        };
        if !agree {
            let bound: Vec<_> = ours.iter().map(|e| (e.id(), e.local_addr())).collect();
            return Err(format!(
                "{src} -> {dst}: kernel socket {kernel:?}, our endpoints {mine:?} ({first:?}); bound {bound:?}"
            ));
        }
        checked += 1;
        received += usize::from(kernel.is_some());
    }
    Ok((checked, received))
}

#[test]
fn endpoints_receive_what_the_kernel_sockets_would() {
    if !xfwd_lab::privileged("endpoints_receive_what_the_kernel_sockets_would") {
        return;
    }
    let lab = xfwd_lab::Lab::unique("epk").unwrap();
    let ns = veth_netns(
        lab.prefix(),
        &[
            ("10.0.0.1", 24),
            ("10.0.0.3", 24),
            ("2001:db8::1", 64),
            ("2001:db8::3", 64),
        ],
    );
    let result = ns
        .run(|| {
            std::thread::sleep(Duration::from_millis(50));
            let ve0 = nix::net::if_::if_nametoindex("ve0").unwrap();
            let mut g = Gen(0x00e0_d901_75ee_d5e1);
            let (mut deliveries, mut received) = (0, 0);
            for i in 0..150 {
                let n = 1 + g.below(6);
                let specs: Vec<Spec> = (0..n).map(|_| random_spec(&mut g)).collect();
                match run_scenario(&specs, ve0) {
                    Ok((k, r)) => {
                        deliveries += k;
                        received += r;
                    }
                    Err(e) => return Err(format!("scenario {i} {specs:#?}: {e}")),
                }
            }
            Ok((deliveries, received))
        })
        .unwrap();
    let (deliveries, received) = result.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{deliveries} datagrams compared, {received} received by a socket");
    assert_eq!(deliveries, 150 * DESTS.len());
    // Most scenarios bind something on the port: the comparison is mostly of deliveries.
    assert!(received >= deliveries / 3, "{received} of {deliveries}");
}
