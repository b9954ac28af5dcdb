//! The tables a mirror fills, shared in `Arc`s with the dataplane.
#![forbid(unsafe_code)]

use std::sync::Arc;

use addr_table::{AddrConfig, AddrTable, NetnsId};
use dst_cache::Generation;
use fib_trie::Fib;
use neigh_table::{DevConfTable, LinkTable, NeighTable};
use policy_tree::PolicyDb;

use crate::kernel_routes::KernelRouteBook;
use crate::nexthops::NexthopTable;

/// Every table one namespace's mirror keeps. The dataplane's `Tables` holds the same `Arc`s
/// under the same field names. Readers use them lock-free under an epoch guard; only the
/// mirror's control thread writes them.
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
    /// Empty tables for the namespace `netns`; `promote_secondaries` as the namespace's sysctl.
    pub fn new(netns: NetnsId, promote_secondaries: bool) -> Self {
        let config = AddrConfig {
            promote_secondaries,
            ..AddrConfig::default()
        };
        MirroredTables {
            links: Arc::new(LinkTable::new()),
            neigh: Arc::new(NeighTable::new()),
            // The default parameters are valid, so this cannot fail.
            addrs: Arc::new(
                AddrTable::with_config(netns, config).unwrap_or_else(|_| AddrTable::new(netns)),
            ),
            fib4: Arc::new(Fib::new()),
            fib6: Arc::new(Fib::new()),
            policies: Arc::new(PolicyDb::new()),
            nexthops: Arc::new(NexthopTable::default()),
            kernel_routes: Arc::new(KernelRouteBook::default()),
            generation: Arc::new(Generation::new()),
            devconf: Arc::new(DevConfTable::followed()),
        }
    }
}
