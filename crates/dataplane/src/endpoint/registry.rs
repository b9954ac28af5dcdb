//! The control side: binds, connects and closes over the socket table's writer, the set of
//! endpoints the run loops read, and the hooks that keep the kernel's sockets and the traffic
//! steering in step.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use udp_socktab::{Family, SockId, SockOptions, Writer};

use super::Service;
use super::mailbox::{EndpointStats, Mailbox, RecvMeta};
use super::output::{self, SendError};
use super::rx::EndpointRx;
use crate::Tables;

/// How many ports a bind to port 0 tries when the table's search keeps landing on ports that
/// kernel sockets hold.
pub const KERNEL_PORT_RETRIES: usize = 64;

/// Sizes of every endpoint's queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Datagrams an endpoint's receive queue holds (and its transmit queue); more are dropped
    /// and counted. Services need none.
    pub queue_depth: usize,
    /// The largest datagram payload an endpoint receives or sends (bytes); larger ones are
    /// dropped and counted.
    pub max_datagram: usize,
}

impl Default for EndpointConfig {
    /// 256 datagrams of up to 2048 bytes each way (the payload of a 2 KiB UMEM chunk fits).
    fn default() -> Self {
        EndpointConfig {
            queue_depth: 256,
            max_datagram: 2048,
        }
    }
}

/// How to open an endpoint: its socket's family and options, and what answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindOptions {
    /// The socket's family; `None` takes the bind address's (IPv6 addresses give a dual-stack
    /// socket, as `socket(AF_INET6)` with the default `IPV6_V6ONLY` off).
    pub family: Option<Family>,
    /// `SO_REUSEADDR`, `SO_REUSEPORT`, `SO_BINDTODEVICE`, owner.
    pub options: SockOptions,
    /// The embedder's socket or a built-in service.
    pub service: Service,
}

impl Default for BindOptions {
    fn default() -> Self {
        BindOptions {
            family: None,
            options: SockOptions::default(),
            service: Service::Socket,
        }
    }
}

impl BindOptions {
    /// A built-in service with default socket options.
    ///
    /// ```
    /// use dataplane::endpoint::{BindOptions, Service};
    /// assert_eq!(BindOptions::service(Service::Echo).service, Service::Echo);
    /// ```
    pub fn service(service: Service) -> BindOptions {
        BindOptions {
            service,
            ..BindOptions::default()
        }
    }
}

/// Why an endpoint call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// The socket call failed by the kernel's rules (its errno in [`udp_socktab::Error::errno`]),
    /// `AddrInUse` among them when one of our endpoints holds the port.
    #[error(transparent)]
    Socket(#[from] udp_socktab::Error),
    /// `EADDRINUSE`: a kernel socket of the namespace holds this port on an overlapping
    /// address (or, for port 0, every port tried).
    #[error("address in use by a kernel socket: {0}")]
    KernelAddrInUse(SocketAddr),
    /// The kernel's sockets could not be listed; the bind is refused (fail closed).
    #[error("cannot check the kernel's sockets: {0}")]
    KernelCheck(String),
    /// The traffic steering refused the port (the forwarder's XDP map); the bind is undone.
    #[error("cannot steer the port to the dataplane: {0}")]
    Steering(String),
    /// Connect found no route or no source address to the peer.
    #[error("no route to the peer: {}", .0.name())]
    Route(SendError),
    /// The socket table in the tables is not the writer's.
    #[error("the tables' socket table is not the writer's")]
    ForeignTable,
}

impl EndpointError {
    /// The kernel's errno for the error, where there is one.
    ///
    /// ```
    /// use dataplane::endpoint::EndpointError;
    /// let e = EndpointError::KernelAddrInUse("0.0.0.0:53".parse().unwrap());
    /// assert_eq!(e.errno(), Some(98));
    /// ```
    pub fn errno(&self) -> Option<i32> {
        match self {
            EndpointError::Socket(e) => e.errno(),
            EndpointError::KernelAddrInUse(_) => Some(98),
            EndpointError::Route(SendError::NoSource) => Some(99),
            EndpointError::Route(_) => Some(101),
            _ => None,
        }
    }

    /// Whether this is `EADDRINUSE`, from our endpoints or the kernel's sockets.
    pub fn is_addr_in_use(&self) -> bool {
        matches!(
            self,
            EndpointError::Socket(udp_socktab::Error::AddrInUse)
                | EndpointError::KernelAddrInUse(_)
        )
    }
}

/// The kernel's own UDP sockets in the namespace (the forwarder asks `sock_diag`), which an
/// endpoint must not shadow.
pub trait KernelSockets: Send {
    /// Whether a kernel UDP socket holds `addr`'s port on an address that overlaps `addr`'s
    /// (equal, or either one a wildcard).
    ///
    /// # Errors
    /// When the kernel cannot be asked; the bind is then refused.
    fn holds(&mut self, addr: SocketAddr) -> Result<bool, String>;
}

/// Told when a port gains its first endpoint and loses its last (the forwarder keeps its XDP
/// program's map of ports in step).
pub trait PortObserver: Send {
    /// `port` has an endpoint now.
    ///
    /// # Errors
    /// When the port cannot be steered; the bind is undone.
    fn port_added(&mut self, port: u16) -> Result<(), String>;
    /// `port` has no endpoint any more.
    fn port_removed(&mut self, port: u16);
}

/// The endpoints the run loops read: replaced whole on every change, with a version they
/// compare once per batch.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) version: AtomicU64,
    pub(crate) map: Mutex<Arc<HashMap<SockId, Arc<Mailbox>>>>,
}

impl Registry {
    pub(crate) fn snapshot(&self) -> (u64, Arc<HashMap<SockId, Arc<Mailbox>>>) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        (self.version.load(Ordering::Acquire), map.clone())
    }

    fn change(&self, f: impl FnOnce(&mut HashMap<SockId, Arc<Mailbox>>)) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::clone(&map);
        f(&mut next);
        *map = Arc::new(next);
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// An endpoint as the embedder holds it: read and send from any thread.
#[derive(Clone)]
pub struct Endpoint {
    id: SockId,
    mailbox: Arc<Mailbox>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("local", &self.local_addr())
            .field("service", &self.mailbox.service)
            .finish()
    }
}

impl Endpoint {
    /// Its socket in the table.
    pub fn id(&self) -> SockId {
        self.id
    }

    /// The bound address (after port 0: the port the search chose; after connect: the source
    /// address the route chose, when bound to a wildcard).
    pub fn local_addr(&self) -> SocketAddr {
        self.mailbox.local()
    }

    /// The connected peer.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.mailbox.peer()
    }

    /// What answers it.
    pub fn service(&self) -> Service {
        self.mailbox.service
    }

    /// The next received datagram, copied into `buf` (a longer one is cut, its whole length
    /// in [`RecvMeta::len`]); `None` when the queue is empty. Never blocks.
    pub fn recv_from(&self, buf: &mut [u8]) -> Option<(usize, RecvMeta)> {
        self.mailbox.recv(buf)
    }

    /// Queues a datagram to `dst` for the run loops to send (from the endpoint's address, or
    /// the one the route chooses when it is bound to a wildcard).
    ///
    /// # Errors
    /// [`SendError::QueueFull`] (`EAGAIN`), [`SendError::TooBig`], [`SendError::Family`];
    /// each is counted. Routing errors are found and counted by the run loop.
    pub fn send_to(&self, payload: &[u8], dst: SocketAddr) -> Result<(), SendError> {
        let local = self.local_addr();
        output::Addrs::new(local, dst).map_err(|e| self.mailbox.count_error(e))?;
        self.mailbox.queue_send(payload, local, dst)
    }

    /// Queues a datagram to the connected peer.
    ///
    /// # Errors
    /// [`SendError::NotConnected`], and those of [`send_to`](Self::send_to).
    pub fn send(&self, payload: &[u8]) -> Result<(), SendError> {
        match self.peer_addr() {
            Some(peer) => self.send_to(payload, peer),
            None => Err(self.mailbox.count_error(SendError::NotConnected)),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> EndpointStats {
        self.mailbox.stats()
    }
}

/// One endpoint in a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Its socket.
    pub id: SockId,
    /// Its bound address.
    pub local: SocketAddr,
    /// Its peer, if connected.
    pub peer: Option<SocketAddr>,
    /// What answers it.
    pub service: Service,
    /// Its counters.
    pub stats: EndpointStats,
}

/// The control side of a namespace's endpoints: owns the socket table's writer.
pub struct Endpoints {
    writer: Writer,
    tables: Tables,
    config: EndpointConfig,
    registry: Arc<Registry>,
    /// Endpoints per bound port (the steering's reference counts).
    ports: BTreeMap<u16, usize>,
    kernel: Option<Box<dyn KernelSockets>>,
    observer: Option<Box<dyn PortObserver>>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl Endpoints {
    /// The endpoints of the namespace `tables.sock_netns`, over `writer` (the writer of
    /// `tables.sockets`).
    ///
    /// # Errors
    /// [`EndpointError::ForeignTable`] when `tables.sockets` is not `writer`'s table.
    pub fn new(
        writer: Writer,
        tables: Tables,
        config: EndpointConfig,
    ) -> Result<Endpoints, EndpointError> {
        if !Arc::ptr_eq(writer.table(), &tables.sockets) {
            return Err(EndpointError::ForeignTable);
        }
        Ok(Endpoints {
            writer,
            tables,
            config,
            registry: Arc::default(),
            ports: BTreeMap::new(),
            kernel: None,
            observer: None,
        })
    }

    /// From now on, binds are checked against the kernel's sockets.
    pub fn set_kernel_sockets(&mut self, kernel: Box<dyn KernelSockets>) {
        self.kernel = Some(kernel);
    }

    /// From now on, ports gained and lost are reported to `observer` (which is first told
    /// every port bound so far).
    ///
    /// # Errors
    /// [`EndpointError::Steering`] when the observer refuses a port bound so far.
    pub fn set_port_observer(
        &mut self,
        mut observer: Box<dyn PortObserver>,
    ) -> Result<(), EndpointError> {
        for &port in self.ports.keys() {
            observer.port_added(port).map_err(EndpointError::Steering)?;
        }
        self.observer = Some(observer);
        Ok(())
    }

    /// The socket table's writer, to read sockets and `SO_REUSEPORT` groups.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The socket table's writer (for namespaces, reserved ports, the local port range).
    pub fn writer_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }

    /// A run loop's side: one per run loop.
    pub fn rx(&self) -> EndpointRx {
        EndpointRx::new(self.registry.clone())
    }

    /// Makes `addr` (held by `ifindex`) one the endpoints may bind (the mirror's addresses).
    ///
    /// # Errors
    /// [`udp_socktab::Error::UnknownNetns`].
    pub fn add_local_addr(&mut self, addr: IpAddr, ifindex: u32) -> Result<(), EndpointError> {
        let ns = self.tables.sock_netns;
        Ok(self.writer.add_local_addr(ns, addr, ifindex)?)
    }

    /// `addr` left `ifindex` (endpoints bound to it stay bound, as in the kernel).
    ///
    /// # Errors
    /// [`udp_socktab::Error::UnknownNetns`].
    pub fn remove_local_addr(&mut self, addr: IpAddr, ifindex: u32) -> Result<(), EndpointError> {
        let ns = self.tables.sock_netns;
        Ok(self.writer.remove_local_addr(ns, addr, ifindex)?)
    }

    /// Opens and binds an endpoint (`socket` + `bind`): port 0 takes a free port by the
    /// kernel's search; a port a kernel socket holds is refused (port 0 searches on).
    ///
    /// # Errors
    /// [`EndpointError::Socket`] with the kernel's rules ([`udp_socktab::Error::AddrInUse`]
    /// among our endpoints, `AddrNotAvailable` for an address not local, ...),
    /// [`EndpointError::KernelAddrInUse`], [`EndpointError::KernelCheck`],
    /// [`EndpointError::Steering`].
    pub fn bind(&mut self, addr: SocketAddr, opts: BindOptions) -> Result<Endpoint, EndpointError> {
        let family = opts.family.unwrap_or(match addr {
            SocketAddr::V4(_) => Family::V4,
            SocketAddr::V6(_) => Family::V6DualStack,
        });
        if addr.port() != 0 {
            self.check_kernel(addr)?;
        }
        let mut rejected = Vec::new();
        let result = self.bind_searching(addr, family, opts, &mut rejected);
        for id in rejected {
            let _ = self.writer.close(id);
        }
        let (id, bound) = result?;
        if let Err(e) = self.add_port(bound.port()) {
            let _ = self.writer.close(id);
            return Err(e);
        }
        let mailbox = Arc::new(Mailbox::new(
            opts.service,
            self.config.queue_depth,
            self.config.max_datagram,
            bound,
        ));
        let shared = mailbox.clone();
        self.registry.change(|map| {
            map.insert(id, shared);
        });
        Ok(Endpoint { id, mailbox })
    }

    fn bind_searching(
        &mut self,
        addr: SocketAddr,
        family: Family,
        opts: BindOptions,
        rejected: &mut Vec<SockId>,
    ) -> Result<(SockId, SocketAddr), EndpointError> {
        for _ in 0..KERNEL_PORT_RETRIES {
            let id = self
                .writer
                .socket(self.tables.sock_netns, family, opts.options)?;
            let bound = match self.writer.bind(id, addr) {
                Ok(bound) => bound,
                Err(e) => {
                    let _ = self.writer.close(id);
                    return Err(e.into());
                }
            };
            if addr.port() != 0 {
                return Ok((id, bound));
            }
            // A port the kernel holds stays bound (so the search moves on) until the end.
            match self.check_kernel(bound) {
                Ok(()) => return Ok((id, bound)),
                Err(EndpointError::KernelAddrInUse(_)) => rejected.push(id),
                Err(e) => {
                    let _ = self.writer.close(id);
                    return Err(e);
                }
            }
        }
        Err(EndpointError::KernelAddrInUse(addr))
    }

    fn check_kernel(&mut self, addr: SocketAddr) -> Result<(), EndpointError> {
        let Some(kernel) = &mut self.kernel else {
            return Ok(());
        };
        match kernel.holds(addr) {
            Ok(false) => Ok(()),
            Ok(true) => Err(EndpointError::KernelAddrInUse(addr)),
            Err(e) => Err(EndpointError::KernelCheck(e)),
        }
    }

    fn add_port(&mut self, port: u16) -> Result<(), EndpointError> {
        if !self.ports.contains_key(&port) {
            if let Some(observer) = &mut self.observer {
                observer.port_added(port).map_err(EndpointError::Steering)?;
            }
        }
        *self.ports.entry(port).or_insert(0) += 1;
        Ok(())
    }

    fn remove_port(&mut self, port: u16) {
        if let Some(count) = self.ports.get_mut(&port) {
            *count -= 1;
            if *count == 0 {
                self.ports.remove(&port);
                if let Some(observer) = &mut self.observer {
                    observer.port_removed(port);
                }
            }
        }
    }

    /// Connects an endpoint (`connect(2)`): the source address is the one the output route
    /// to `peer` chooses when the endpoint is bound to a wildcard; from then on it takes only
    /// `peer`'s datagrams (hash4) and [`Endpoint::send`] goes to `peer`. Returns the local
    /// address.
    ///
    /// # Errors
    /// [`EndpointError::Route`] when no route or source address reaches `peer`; the socket
    /// table's errors.
    pub fn connect(
        &mut self,
        endpoint: &Endpoint,
        peer: SocketAddr,
    ) -> Result<SocketAddr, EndpointError> {
        let local = endpoint.local_addr();
        let a = output::Addrs::new(local, peer).map_err(EndpointError::Route)?;
        let source = {
            let guard = crossbeam_epoch::pin();
            let (_, src) = output::output_route(&self.tables, &guard, a.family, a.src, a.dst, 0)
                .map_err(EndpointError::Route)?;
            crate::route::ip_of(a.family, src)
        };
        let old_port = local.port();
        let bound = self.writer.connect(endpoint.id, peer, source)?;
        if bound.port() != old_port {
            // Autobind of an unbound socket cannot happen (endpoints are bound), but keep the
            // steering right whatever the table did.
            self.add_port(bound.port())?;
            self.remove_port(old_port);
        }
        *endpoint
            .mailbox
            .addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = (bound, Some(peer));
        Ok(bound)
    }

    /// Closes an endpoint: out of the socket table, then of the run loops' set (datagrams in
    /// flight in a run loop's batch are dropped and counted there); its port stops being
    /// steered when it was the port's last endpoint.
    ///
    /// # Errors
    /// [`udp_socktab::Error::UnknownSocket`] when it was closed already.
    pub fn close(&mut self, endpoint: &Endpoint) -> Result<(), EndpointError> {
        let port = endpoint.local_addr().port();
        self.writer.close(endpoint.id)?;
        self.registry.change(|map| {
            map.remove(&endpoint.id);
        });
        self.remove_port(port);
        Ok(())
    }

    /// Every open endpoint with its counters.
    pub fn list(&self) -> Vec<EndpointInfo> {
        let (_, map) = self.registry.snapshot();
        let mut out: Vec<EndpointInfo> = map
            .iter()
            .map(|(&id, m)| EndpointInfo {
                id,
                local: m.local(),
                peer: m.peer(),
                service: m.service,
                stats: m.stats(),
            })
            .collect();
        out.sort_by_key(|e| e.id);
        out
    }

    /// The ports that have endpoints.
    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports.keys().copied()
    }
}
