//! What the mirror tells an [`Observer`] after each applied change.
#![forbid(unsafe_code)]

use fib_trie::{FibRule, Route};
use neigh_table::{Link, Neighbour};
use policy_tree::{HThresh, Policy, PolicyType};

use crate::map::AddrEntry;

/// Whether an object appeared (or changed), or went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeOp {
    /// Added, or changed in place (the object as it now is).
    Added,
    /// Removed (the object as it was).
    Removed,
}

/// One change applied to the mirrored tables, published before the observer hears of it
/// (readers already see it, and the generation was bumped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// An interface.
    Link(ChangeOp, Link),
    /// An interface address (the forwarder keeps its XDP local-address map in step).
    Addr(ChangeOp, AddrEntry),
    /// An IPv4 route.
    Route4(ChangeOp, Route<u32>),
    /// An IPv6 route.
    Route6(ChangeOp, Route<u128>),
    /// A neighbour (a resolved one releases held packets).
    Neigh(ChangeOp, Neighbour),
    /// An IPv4 policy rule.
    Rule4(ChangeOp, FibRule<u32>),
    /// An IPv6 policy rule.
    Rule6(ChangeOp, FibRule<u128>),
    /// An xfrm policy.
    Policy(ChangeOp, Policy),
    /// Every policy of a type was flushed.
    PolicyFlush(PolicyType),
    /// New hash thresholds (every policy list re-sorted as the kernel's rebuild does).
    PolicyHThresh(HThresh),
    /// New default policies (block?) for in, out and fwd.
    PolicyDefaults([bool; 3]),
    /// A nexthop object (by id): added or replaced (every route through it, and every group
    /// containing it, changed with it), or removed (its routes were removed before).
    Nexthop(ChangeOp, u32),
    /// A device's forwarding switches (`forwarding`, `rp_filter`) of a family (IPv6 when
    /// `true`), or of `all` (-1) / `default` (-2), as they now are ([`ChangeOp::Removed`]: the
    /// device is gone).
    Netconf(ChangeOp, bool, i32),
}

/// Hears of every applied change, on the mirror's control thread. Keep it quick: the
/// control thread applies nothing else meanwhile.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use netlink_mirror::{Change, Observer};
///
/// #[derive(Default)]
/// struct CountNeigh(AtomicUsize);
/// impl Observer for CountNeigh {
///     fn on_change(&self, change: &Change) {
///         if matches!(change, Change::Neigh(..)) {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// ```
pub trait Observer: Send + Sync {
    /// Called once per applied change, after it is published.
    fn on_change(&self, change: &Change);
}
