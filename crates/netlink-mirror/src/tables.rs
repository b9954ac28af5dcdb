//! The tables a mirror fills, shared in `Arc`s with the dataplane.
#![forbid(unsafe_code)]

use std::sync::Arc;

use addr_table::{AddrConfig, AddrTable, AddrWriter, NetnsId};
use dst_cache::Generation;
use fib_trie::Fib;
use neigh_table::{DevConfTable, DevConfWriter, LinkTable, NeighTable};
use policy_tree::PolicyDb;
/// The one writer of each table (the mirror's control thread keeps them); the same type as
/// `dataplane::TableWriters`.
pub use table_writers::TableWriters;

use crate::kernel_routes::KernelRouteBook;
use crate::nexthops::NexthopTable;

/// Every table one namespace's mirror keeps. The dataplane's `Tables` holds the same `Arc`s
/// under the same field names. Readers use them lock-free under an epoch guard. The `Arc`s
/// only read: the tables change through their writers ([`TableWriters`]), which the mirror's
/// control thread owns.
#[derive(Clone, Debug)]
pub struct MirroredTables {
    /// Interfaces (`RTM_NEWLINK`).
    pub links: Arc<LinkTable>,
    /// Neighbours (`RTM_NEWNEIGH`).
    pub neigh: Arc<NeighTable>,
    /// Local addresses (`RTM_NEWADDR`).
    pub addrs: Arc<AddrTable>,
    /// IPv4 routes of every table, and IPv4 rules.
    pub fib4: Arc<Fib<u32>>,
    /// IPv6 routes of every table, and IPv6 rules.
    pub fib6: Arc<Fib<u128>>,
    /// xfrm policies.
    pub policies: Arc<PolicyDb>,
    /// Nexthop objects (`RTM_NEWNEXTHOP`); routes hold their objects directly.
    pub nexthops: Arc<NexthopTable>,
    /// The kernel routes the FIBs cannot represent, behind their "kernel decides" stand-ins.
    pub kernel_routes: Arc<KernelRouteBook>,
    /// Bumped after every applied change (dst-cache entries made before are stale).
    pub generation: Arc<Generation>,
    /// The devices' forwarding switches (`RTM_NEWNETCONF`); a device not reported yet is
    /// left to the kernel.
    pub devconf: Arc<DevConfTable>,
}

impl MirroredTables {
    /// Empty tables for the namespace `netns` (`promote_secondaries` as the namespace's
    /// sysctl) and their writers: the mirror's control thread keeps these (a test may stand
    /// in for it; dropping them freezes the tables).
    ///
    /// ```
    /// use fib_trie::{Flow, InsertFlags, NextHop, Route};
    /// use netlink_mirror::MirroredTables;
    ///
    /// let (tables, mut writers) = MirroredTables::new(addr_table::NetnsId(1), false);
    /// writers.fib4.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(1), 2)]), InsertFlags::ADD)?;
    /// let guard = crossbeam_epoch::pin();
    /// assert!(tables.fib4.lookup(&Flow::to(0x0808_0808), &guard).is_ok());
    /// # Ok::<(), fib_trie::RouteError>(())
    /// ```
    pub fn new(netns: NetnsId, promote_secondaries: bool) -> (Self, TableWriters) {
        let config = AddrConfig {
            promote_secondaries,
            ..AddrConfig::default()
        };
        let writers = TableWriters::new(
            // The default parameters are valid, so this cannot fail.
            AddrWriter::with_config(netns, config).unwrap_or_else(|_| AddrWriter::new(netns)),
            DevConfWriter::followed(),
        );
        let tables = MirroredTables {
            links: Arc::clone(writers.links.reader()),
            neigh: Arc::clone(writers.neigh.reader()),
            addrs: Arc::clone(writers.addrs.reader()),
            fib4: Arc::clone(writers.fib4.reader()),
            fib6: Arc::clone(writers.fib6.reader()),
            policies: Arc::clone(writers.policies.reader()),
            nexthops: Arc::new(NexthopTable::default()),
            kernel_routes: Arc::new(KernelRouteBook::default()),
            generation: Arc::new(Generation::new()),
            devconf: Arc::clone(writers.devconf.reader()),
        };
        (tables, writers)
    }
}
