//! In-dataplane UDP endpoints of the `xfwd` binary: the `[[endpoint]]` tables of the
//! configuration file (a STAMP / TWAMP-light reflector, a UDP echo), the kernel's sockets as
//! seen through `sock_diag` (an endpoint never takes a port a kernel socket holds), and the
//! XDP program's map of endpoint ports kept in step with binds and closes.
//!
//! ```toml
//! [[endpoint]]
//! service = "stamp"            # RFC 8762 stateless reflector; answers TWAMP-light too
//! bind = "0.0.0.0:862"         # "[::]:862" takes IPv4 and IPv6
//! error_estimate_ns = 1000     # the timestamps' error estimate (default: the clock's resolution)
//! clock_synchronized = true    # the S bit: the clock is synchronised to UTC (default false)
//!
//! [[endpoint]]
//! service = "echo"             # RFC 862
//! bind = "[::]:7"
//! reuseaddr = true             # SO_REUSEADDR: may share port 7 with another endpoint
//! ```
//!
//! Among endpoints the kernel's rules choose (udp-socktab): a connected one, else the one bound
//! to the datagram's destination address, else a wildcard one; IPv4 sockets before dual-stack
//! ones; so an endpoint on `192.0.2.1:7` takes that address's datagrams from one on `[::]:7`
//! when both set `reuseaddr` (as two kernel sockets would need to).
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use dataplane::endpoint::{EndpointInfo, KernelSockets, PortObserver};
use serde::{Deserialize, Serialize};

use crate::xdp::XdpProgram;

pub use xfwd_config::endpoint::{EndpointFile, EndpointSpec, clock_resolution_ns, validate};

/// The XDP program's set of endpoint ports: filled before the program is attached, then kept
/// in step with every bind and close.
#[derive(Default)]
pub struct UdpPortFeed {
    state: Mutex<PortFeedState>,
}

/// The ports with endpoints, and the program once it is loaded.
#[derive(Default)]
struct PortFeedState {
    ports: BTreeSet<u16>,
    program: Option<Arc<Mutex<XdpProgram>>>,
}

impl std::fmt::Debug for UdpPortFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpPortFeed")
            .field("ports", &self.ports())
            .finish()
    }
}

impl UdpPortFeed {
    /// The ports with endpoints.
    pub fn ports(&self) -> Vec<u16> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.ports.iter().copied().collect()
    }

    /// Puts every port into `xdp`'s map (before the program is attached).
    ///
    /// # Errors
    /// When the map refuses a port.
    pub fn fill(&self, xdp: &mut XdpProgram) -> Result<(), crate::xdp::XdpError> {
        for port in self.ports() {
            xdp.add_udp_port(port)?;
        }
        Ok(())
    }

    /// From now on, binds and closes go straight to `xdp`.
    pub fn attach(&self, xdp: Arc<Mutex<XdpProgram>>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.program = Some(xdp);
    }

    /// The [`PortObserver`] the endpoints report to.
    pub fn observer(self: &Arc<Self>) -> Box<dyn PortObserver> {
        Box::new(FeedObserver(self.clone()))
    }
}

struct FeedObserver(Arc<UdpPortFeed>);

impl PortObserver for FeedObserver {
    fn port_added(&mut self, port: u16) -> Result<(), String> {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(xdp) = &state.program {
            let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
            program.add_udp_port(port).map_err(|e| e.to_string())?;
        }
        state.ports.insert(port);
        Ok(())
    }

    fn port_removed(&mut self, port: u16) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        state.ports.remove(&port);
        if let Some(xdp) = &state.program {
            xdp.lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove_udp_port(port);
        }
    }
}

/// A kernel UDP socket's bound address, as `sock_diag` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelUdpSocket {
    /// Its local address and port.
    pub local: SocketAddr,
    /// The interface it is bound to (0: none).
    pub ifindex: u32,
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
/// `struct inet_diag_msg` up to and including `idiag_inode`.
const INET_DIAG_MSG_LEN: usize = 72;

/// Every UDP socket of the calling thread's network namespace, of both families, from
/// `sock_diag` (`SOCK_DIAG_BY_FAMILY` dumps of `inet_diag`).
///
/// # Errors
/// When the netlink socket cannot be opened or the kernel answers with an error.
pub fn kernel_udp_sockets() -> std::io::Result<Vec<KernelUdpSocket>> {
    let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    let mut out = Vec::new();
    for (seq, family) in [(1u32, libc::AF_INET as u8), (2, libc::AF_INET6 as u8)] {
        socket.send(&request(seq, family), 0)?;
        'dump: loop {
            let (buf, _) = socket.recv_from_full()?;
            let mut at = 0;
            while at + NLMSG_HDRLEN <= buf.len() {
                let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default());
                let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap_or_default());
                let len = len as usize;
                if len < NLMSG_HDRLEN || at + len > buf.len() {
                    return Err(std::io::Error::other("sock_diag: truncated message"));
                }
                let body = &buf[at + NLMSG_HDRLEN..at + len];
                match kind {
                    NLMSG_DONE => break 'dump,
                    NLMSG_ERROR => {
                        let errno = i32::from_ne_bytes(body[..4].try_into().unwrap_or_default());
                        if errno != 0 {
                            return Err(std::io::Error::from_raw_os_error(-errno));
                        }
                    }
                    SOCK_DIAG_BY_FAMILY => out.extend(parse_diag(body)),
                    _ => {}
                }
                at += (len + 3) & !3;
            }
        }
    }
    Ok(out)
}

/// A dump request for the UDP sockets of `family` in every state.
fn request(seq: u32, family: u8) -> [u8; NLMSG_HDRLEN + 56] {
    let mut msg = [0u8; NLMSG_HDRLEN + 56];
    msg[0..4].copy_from_slice(&((NLMSG_HDRLEN + 56) as u32).to_ne_bytes());
    msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    msg[8..12].copy_from_slice(&seq.to_ne_bytes());
    let req = &mut msg[NLMSG_HDRLEN..];
    req[0] = family;
    req[1] = libc::IPPROTO_UDP as u8;
    req[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    msg
}

/// One `inet_diag_msg`: family, then the socket id (ports big-endian, addresses, interface).
fn parse_diag(body: &[u8]) -> Option<KernelUdpSocket> {
    if body.len() < INET_DIAG_MSG_LEN {
        return None;
    }
    let id = &body[4..52];
    let port = u16::from_be_bytes([id[0], id[1]]);
    let src: [u8; 16] = id[4..20].try_into().ok()?;
    let ifindex = u32::from_ne_bytes(id[36..40].try_into().ok()?);
    let ip = match i32::from(body[0]) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(src)),
        _ => return None,
    };
    Some(KernelUdpSocket {
        local: SocketAddr::new(ip, port),
        ifindex,
    })
}

/// Whether a kernel socket bound at `kernel` keeps an endpoint from binding `ours`: the same
/// port, and addresses that overlap (equal after v4-mapping, or either a wildcard). A kernel
/// IPv6 wildcard socket counts as dual-stack (`sock_diag`'s message does not say), so it
/// blocks IPv4 binds too: refusing a bind the kernel would allow is the safe side.
///
/// ```
/// use forwarder::endpoints::overlaps;
/// let a = |s: &str| s.parse().unwrap();
/// assert!(overlaps(a("0.0.0.0:53"), a("192.0.2.1:53")));
/// assert!(overlaps(a("[::]:53"), a("192.0.2.1:53")));
/// assert!(overlaps(a("192.0.2.1:53"), a("[::ffff:192.0.2.1]:53")));
/// assert!(!overlaps(a("192.0.2.2:53"), a("192.0.2.1:53")));
/// assert!(!overlaps(a("0.0.0.0:54"), a("192.0.2.1:53")));
/// ```
pub fn overlaps(kernel: SocketAddr, ours: SocketAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let (k, o) = (canon(kernel.ip()), canon(ours.ip()));
    kernel.port() == ours.port() && (k.is_unspecified() || o.is_unspecified() || k == o)
}

/// The kernel's sockets through `sock_diag`, for [`dataplane::endpoint::Endpoints`].
#[derive(Debug, Default)]
pub struct SockDiag;

impl KernelSockets for SockDiag {
    fn holds(&mut self, addr: SocketAddr) -> Result<bool, String> {
        let sockets = kernel_udp_sockets().map_err(|e| format!("sock_diag: {e}"))?;
        Ok(sockets.iter().any(|s| overlaps(s.local, addr)))
    }
}

/// One endpoint's counters, for `xfwd stats` and Prometheus.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EndpointSnapshot {
    /// `stamp`, `echo` or `socket`.
    pub service: String,
    /// The bound address.
    pub local: String,
    /// Datagrams received.
    pub received: u64,
    /// Datagrams sent (answers of a service).
    pub sent: u64,
    /// Datagrams dropped at receive: queue full, too large, malformed test packets.
    pub rx_dropped: u64,
    /// Datagrams not sent, by cause (every cause, zeros too).
    pub send_errors: Vec<(String, u64)>,
}

impl From<&EndpointInfo> for EndpointSnapshot {
    fn from(e: &EndpointInfo) -> Self {
        let s = &e.stats;
        EndpointSnapshot {
            service: e.service.name().to_owned(),
            local: e.local.to_string(),
            received: s.received,
            sent: s.sent,
            rx_dropped: s.rx_queue_full + s.rx_too_big + s.rx_malformed,
            send_errors: dataplane::endpoint::SendError::ALL
                .iter()
                .map(|&c| (c.name().to_owned(), s.send_errors_of(c)))
                .collect(),
        }
    }
}

/// The endpoints of a namespace, shared by the control paths (binds, stats).
pub type SharedEndpoints = Arc<Mutex<dataplane::endpoint::Endpoints>>;

/// The namespace's endpoints: `writer` (of `tables.sockets`) taken over, the mirror's local
/// `addresses` made bindable, binds checked against the kernel's sockets, each configured
/// service bound; returns the endpoints and the port set for the XDP program.
///
/// # Errors
/// When a configured endpoint cannot be bound (`EADDRINUSE` when a kernel socket or another
/// endpoint holds its port, `EADDRNOTAVAIL` for an address that is not local).
pub fn open(
    writer: udp_socktab::Writer,
    tables: dataplane::Tables,
    addresses: &BTreeSet<IpAddr>,
    specs: &[EndpointSpec],
) -> anyhow::Result<(Arc<Mutex<dataplane::endpoint::Endpoints>>, Arc<UdpPortFeed>)> {
    use anyhow::Context;
    use dataplane::endpoint::{BindOptions, EndpointConfig, Endpoints};

    let mut endpoints = Endpoints::new(writer, tables, EndpointConfig::default())
        .context("creating the endpoints")?;
    for &addr in addresses {
        endpoints
            .add_local_addr(addr, 0)
            .context("adding a local address to the socket table")?;
    }
    endpoints.set_kernel_sockets(Box::new(SockDiag));
    let feed = Arc::new(UdpPortFeed::default());
    endpoints
        .set_port_observer(feed.observer())
        .context("steering endpoint ports")?;
    for spec in specs {
        let bound = endpoints
            .bind(
                spec.bind,
                BindOptions {
                    options: spec.options,
                    ..BindOptions::service(spec.service)
                },
            )
            .with_context(|| {
                format!("binding the {} endpoint {}", spec.service.name(), spec.bind)
            })?;
        tracing::info!(service = spec.service.name(), local = %bound.local_addr(), "endpoint bound");
    }
    Ok((Arc::new(Mutex::new(endpoints)), feed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::endpoint::Service;

    #[test]
    fn services_parse_and_clock_settings_apply() {
        let mut problems = Vec::new();
        let specs = validate(
            &[
                EndpointFile {
                    service: "stamp".into(),
                    bind: "0.0.0.0:862".into(),
                    error_estimate_ns: Some(1000),
                    clock_synchronized: Some(true),
                    ..EndpointFile::default()
                },
                EndpointFile {
                    service: "echo".into(),
                    bind: "[::]:0".into(),
                    ..EndpointFile::default()
                },
            ],
            &mut problems,
        );
        assert_eq!(
            problems,
            vec!["endpoint 1: a service needs a fixed port".to_owned()]
        );
        let Service::Stamp { error } = specs[0].service else {
            panic!("not stamp")
        };
        assert!(error.synchronized());
        assert!((1000.0..1010.0).contains(&error.nanos()));
    }

    #[test]
    fn stats_print_and_export_each_endpoint() {
        let stats = crate::stats::Stats {
            endpoints: vec![EndpointSnapshot {
                service: "stamp".into(),
                local: "[::]:862".into(),
                received: 10,
                sent: 9,
                rx_dropped: 0,
                send_errors: vec![("no_route".into(), 1), ("hold_full".into(), 0)],
            }],
            ..crate::stats::Stats::default()
        };
        let text = stats.render(None);
        assert!(
            text.contains(
                "endpoint stamp [::]:862: received 10, sent 9, rx dropped 0, not sent: no_route 1"
            ),
            "{text}"
        );
        let prom = crate::metrics::exposition(&stats);
        for line in [
            "# TYPE xfwd_endpoint_received_total counter",
            "xfwd_endpoint_received_total{local=\"[::]:862\",service=\"stamp\"} 10",
            "xfwd_endpoint_sent_total{local=\"[::]:862\",service=\"stamp\"} 9",
            "xfwd_endpoint_rx_dropped_total{local=\"[::]:862\",service=\"stamp\"} 0",
            "xfwd_endpoint_not_sent_total{cause=\"no_route\",local=\"[::]:862\",service=\"stamp\"} 1",
            "xfwd_endpoint_not_sent_total{cause=\"hold_full\",local=\"[::]:862\",service=\"stamp\"} 0",
        ] {
            assert!(prom.contains(line), "{line} not in {prom}");
        }
    }

    #[test]
    fn sock_diag_lists_a_socket_we_bind() {
        // Any process may list its namespace's sockets; no privilege needed.
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = socket.local_addr().unwrap();
        let listed = kernel_udp_sockets().unwrap();
        assert!(
            listed.iter().any(|s| s.local == local),
            "{local} not in {listed:?}"
        );
        assert!(
            SockDiag
                .holds(SocketAddr::new("0.0.0.0".parse().unwrap(), local.port()))
                .unwrap()
        );
        drop(socket);
    }
}
