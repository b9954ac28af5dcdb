//! The XDP program's local-address set fed by the netlink mirror: every address the mirror
//! sees appear or go ([`netlink_mirror::Change::Addr`]) is added to or removed from the
//! program's map on the mirror's control thread, right after the address table changed, so
//! packets for the host's own addresses go to the kernel from the moment it has them.
//!
//! An address may sit on several interfaces: it leaves the map only when the last one loses it.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use netlink_mirror::{Change, ChangeOp, Observer};

use crate::xdp::XdpProgram;

#[derive(Default)]
struct FeedState {
    /// Address → interfaces holding it.
    owners: BTreeMap<IpAddr, BTreeSet<u32>>,
    /// The program, once loaded (until the instance stops).
    xdp: Option<Arc<Mutex<XdpProgram>>>,
}

/// A mirror [`Observer`] keeping the XDP program's local set equal to the namespace's
/// addresses.
#[derive(Default)]
pub struct LocalAddrFeed {
    state: Mutex<FeedState>,
}

impl std::fmt::Debug for LocalAddrFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalAddrFeed")
            .field("addresses", &self.addresses().len())
            .finish()
    }
}

impl LocalAddrFeed {
    /// The addresses seen so far.
    pub fn addresses(&self) -> BTreeSet<IpAddr> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.owners.keys().copied().collect()
    }

    /// Makes `xdp`'s local set equal to the addresses seen so far (before the program is
    /// attached: traffic for them goes to the kernel from the first packet).
    pub fn fill(&self, xdp: &mut XdpProgram) {
        sync(xdp, &self.addresses());
    }

    /// From now on, changes go straight to `xdp` (after one full synchronisation).
    pub fn attach(&self, xdp: Arc<Mutex<XdpProgram>>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        {
            let wanted: BTreeSet<IpAddr> = state.owners.keys().copied().collect();
            let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
            sync(&mut program, &wanted);
        }
        state.xdp = Some(xdp);
    }

    /// Lets go of the program (so that its last owner detaches it on shutdown).
    pub fn detach(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).xdp = None;
    }
}

fn sync(xdp: &mut XdpProgram, wanted: &BTreeSet<IpAddr>) {
    let current: BTreeSet<IpAddr> = xdp.locals().into_iter().collect();
    for gone in current.difference(wanted) {
        xdp.remove_local(*gone);
    }
    for new in wanted.difference(&current) {
        if let Err(e) = xdp.add_local(*new) {
            tracing::warn!(%new, "local address not added: {e}");
        }
    }
}

impl Observer for LocalAddrFeed {
    fn on_change(&self, change: &Change) {
        let Change::Addr(op, entry) = change else {
            return;
        };
        let (addr, ifindex) = (entry.addr(), entry.ifindex());
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let FeedState { owners, xdp } = &mut *state;
        match op {
            ChangeOp::Added => {
                let holders = owners.entry(addr).or_default();
                let first = holders.is_empty();
                holders.insert(ifindex);
                if first && let Some(xdp) = xdp {
                    let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
                    match program.add_local(addr) {
                        Ok(()) => tracing::debug!(%addr, "local address added"),
                        Err(e) => tracing::warn!(%addr, "local address not added: {e}"),
                    }
                }
            }
            ChangeOp::Removed => {
                let Some(holders) = owners.get_mut(&addr) else {
                    return;
                };
                holders.remove(&ifindex);
                if holders.is_empty() {
                    owners.remove(&addr);
                    if let Some(xdp) = xdp {
                        xdp.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove_local(addr);
                        tracing::info!(%addr, "local address removed");
                    }
                }
            }
        }
    }
}
