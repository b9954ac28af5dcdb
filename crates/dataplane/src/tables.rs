//! One network namespace's tables, as the pipeline reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use addr_table::{AddrTable, AddrWriter, NetnsId};
use dst_cache::Generation;
use fib_trie::Fib;
use neigh_table::{DevConfTable, DevConfWriter, LinkTable, NeighTable};
use policy_tree::PolicyDb;
pub use table_writers::TableWriters;
use udp_socktab::SockTable;

use crate::PeerLimiter;

/// Buckets of [`Tables::icmp_peers`] made by [`Tables::new`] (64 KiB).
pub const ICMP_PEER_SLOTS: usize = 8192;

/// One network namespace's view: every table the pipeline reads, shared in `Arc`s between the
/// control plane that fills them (the netlink mirror) and every run loop that reads them.
///
/// The `Arc`s only read: each table changes through its one writer, which the control plane
/// keeps ([`TableWriters`], made with the tables by [`Tables::new`]); a run loop holding
/// `Tables` cannot change routes, neighbours, links, addresses or policies.
///
/// The contract with the writer: after it has **published** any change to links, neighbours,
/// addresses, routes or rules, it calls `generation.bump()` (route caches of every queue are
/// then stale), and it calls `generation.set_custom_rules(true)` while policy routing rules
/// other than the kernel's three defaults exist (caching by destination is then wrong).
///
/// ```
/// use dataplane::Tables;
/// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
///
/// let (sockets, mut writer) = SockTable::new(TableConfig::default())?;
/// let sock_netns = writer.add_netns(NetnsConfig::default())?;
/// let (tables, _writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
/// assert!(tables.fib4.table(254, &crossbeam_epoch::pin()).is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Tables {
    /// Interfaces: MAC, MTU, up or down.
    pub links: Arc<LinkTable>,
    /// Neighbours (ARP and NDP): the next hops' MAC addresses.
    pub neigh: Arc<NeighTable>,
    /// Local addresses: local delivery, martian sources, ICMP source selection.
    pub addrs: Arc<AddrTable>,
    /// IPv4 routes and rules.
    pub fib4: Arc<Fib<u32>>,
    /// IPv6 routes and rules.
    pub fib6: Arc<Fib<u128>>,
    /// IPsec security policies; the pipeline consults direction fwd.
    pub policies: Arc<PolicyDb>,
    /// UDP sockets of local endpoints (may be shared by several namespaces).
    pub sockets: Arc<SockTable>,
    /// The route generation every queue's route cache checks.
    pub generation: Arc<Generation>,
    /// This namespace's id in `sockets`.
    pub sock_netns: udp_socktab::NetnsId,
    /// The interfaces the pipeline transmits on (the forwarder's `--iface`); a route out of
    /// any other (a management NIC, a VLAN, a bond, a tunnel) is punted for the kernel to
    /// forward. `None`: every interface.
    pub served: Option<Arc<Served>>,
    /// The ingress devices' forwarding switches (`forwarding`, `rp_filter`): a packet the
    /// kernel would not forward, or whose source it would validate, is punted to it.
    /// [`Tables::new`] starts permissive (a router: forward everywhere); a mirror fills a
    /// followed table.
    pub devconf: Arc<DevConfTable>,
    /// ICMP errors per destination, shared by every queue of the namespace (the kernel's
    /// per-peer limit); a mirror sets its intervals and masks from the namespace's sysctls.
    pub icmp_peers: Arc<PeerLimiter>,
}

impl Tables {
    /// Empty tables for the namespace `netns` (the FIBs with their default tables and rules),
    /// sharing `sockets`, where this namespace is `sock_netns`, and their writers (for the
    /// control plane, or a test standing in for it; dropping them freezes the tables).
    ///
    /// ```
    /// use dataplane::Tables;
    /// use fib_trie::{Flow, InsertFlags, NextHop, Route};
    /// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
    ///
    /// let (sockets, mut sock_writer) = SockTable::new(TableConfig::default())?;
    /// let sock_netns = sock_writer.add_netns(NetnsConfig::default())?;
    /// let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
    /// writers.fib4.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(1), 2)]), InsertFlags::ADD)?;
    /// tables.generation.bump();
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(tables.fib4.lookup(&Flow::to(0x0808_0808), &guard).unwrap().plen, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        netns: NetnsId,
        sockets: Arc<SockTable>,
        sock_netns: udp_socktab::NetnsId,
    ) -> (Self, TableWriters) {
        let writers = TableWriters::new(AddrWriter::new(netns), DevConfWriter::permissive());
        let tables = Tables {
            links: Arc::clone(writers.links.reader()),
            neigh: Arc::clone(writers.neigh.reader()),
            addrs: Arc::clone(writers.addrs.reader()),
            fib4: Arc::clone(writers.fib4.reader()),
            fib6: Arc::clone(writers.fib6.reader()),
            policies: Arc::clone(writers.policies.reader()),
            sockets,
            generation: Arc::new(Generation::new()),
            sock_netns,
            served: None,
            devconf: Arc::clone(writers.devconf.reader()),
            icmp_peers: Arc::new(PeerLimiter::new(ICMP_PEER_SLOTS)),
        };
        (tables, writers)
    }
}

/// The interfaces a pipeline transmits on ([`Tables::served`]): one slot per served port, each
/// holding that port's current ifindex. Readers look it up lock-free; the forwarder
/// [`replace`](Self::replace)s a slot when the port's interface is deleted and re-created
/// under the same name (a new ifindex), without rebuilding the tables.
///
/// Ifindex 0 (no interface) is never served.
///
/// ```
/// use dataplane::Served;
///
/// let served = Served::new(&[2, 3]);
/// assert!(served.contains(3) && !served.contains(7) && !served.contains(0));
/// assert!(served.replace(1, 7)); // port 1's interface is now ifindex 7
/// assert!(served.contains(7) && !served.contains(3));
/// assert!(!served.replace(5, 9)); // no slot 5
/// ```
#[derive(Debug)]
pub struct Served {
    slots: Box<[AtomicU32]>,
}

impl Served {
    /// One slot per entry of `ifindexes`, in that order.
    pub fn new(ifindexes: &[u32]) -> Self {
        Served {
            slots: ifindexes.iter().map(|&i| AtomicU32::new(i)).collect(),
        }
    }

    /// Whether `ifindex` is in a slot.
    #[inline]
    pub fn contains(&self, ifindex: u32) -> bool {
        ifindex != 0
            && self
                .slots
                .iter()
                .any(|s| s.load(Ordering::Relaxed) == ifindex)
    }

    /// Puts `ifindex` in slot `slot` (0: the port has no interface now); false when there is
    /// no such slot.
    pub fn replace(&self, slot: usize, ifindex: u32) -> bool {
        match self.slots.get(slot) {
            Some(s) => {
                s.store(ifindex, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The ifindexes, slot by slot.
    pub fn ifindexes(&self) -> Vec<u32> {
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }
}
