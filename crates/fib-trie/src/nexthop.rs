//! Nexthop objects (`struct nexthop`, net/ipv4/nexthop.c): next hops that live apart from the
//! routes using them (`ip nexthop add id N ...`, `ip route add ... nhid N`).
//!
//! A route holding a [`NexthopObject`] in [`RouteInfo::nh_object`](crate::RouteInfo) has no
//! next hops of its own: a lookup reads the object's current [`NexthopGroup`] instead. Replacing
//! an object's group is one pointer store, seen by every route using it at once, as in the
//! kernel (where `replace_nexthop` swaps `nh->nh_grp` or `nh->nh_info` under RCU); the routes
//! themselves are not touched.
//!
//! Readers load the group under their epoch guard (the one they pinned for the batch); the
//! writer ([`NexthopWriter::replace`]) swaps the pointer and retires the old group with
//! `defer_destroy`, so a reader holding it keeps a valid group until it unpins.
//!
//! Who writes shows in the types, as for the crate's other structures: an object's one writer
//! is its [`NexthopWriter`] (not `Clone`, `&mut self` to replace); routes and readers hold the
//! `Arc<NexthopObject>` of [`NexthopWriter::reader`], which has no method that changes it. An
//! object made with [`NexthopObject::new`] alone has no writer: its group never changes.
//!
//! ```
//! use std::sync::Arc;
//! use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, NexthopGroup, NexthopWriter, Route};
//!
//! let mut nh = NexthopWriter::new(7, NexthopGroup::hops(vec![NextHop::new(Some(1), 2)]));
//! let mut fib = FibWriter::<u32>::new();
//! fib.insert(&Route::via_object(0x0a00_0000, 8, 254, Arc::clone(nh.reader())), InsertFlags::ADD)?;
//! nh.replace(NexthopGroup::hops(vec![NextHop::new(Some(9), 3)]));
//! let guard = crossbeam_epoch::pin();
//! let r = fib.lookup(&Flow::to(0x0a01_0101), &guard).unwrap();
//! assert_eq!(r.nexthops()[0].gateway_same(), Some(9));
//! # Ok::<(), fib_trie::RouteError>(())
//! ```
//!
//! A reader cannot replace the group of an object it reached through a lookup:
//!
//! ```compile_fail,E0624
//! use std::sync::Arc;
//! use fib_trie::{FibWriter, Flow, InsertFlags, NextHop, NexthopGroup, NexthopWriter, Route};
//!
//! let nh = NexthopWriter::new(7, NexthopGroup::hops(vec![NextHop::new(Some(1), 2)]));
//! let mut fib = FibWriter::<u32>::new();
//! fib.insert(&Route::via_object(0x0a00_0000, 8, 254, Arc::clone(nh.reader())), InsertFlags::ADD)?;
//! let guard = crossbeam_epoch::pin();
//! let r = fib.lookup(&Flow::to(0x0a01_0101), &guard).unwrap();
//! let object: &Arc<_> = r.alias.info.nh_object.as_ref().unwrap();
//! object.replace(NexthopGroup::Blackhole); // private: the writer's
//! # Ok::<(), fib_trie::RouteError>(())
//! ```
//!
//! And an object has one writer:
//!
//! ```compile_fail,E0599
//! let nh = fib_trie::NexthopWriter::<u32>::new(7, fib_trie::NexthopGroup::Blackhole);
//! let second = nh.clone();
//! ```

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::guard::check_guard;
use crate::route::{NextHop, RouteType};

/// What a nexthop object currently stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NexthopGroup<K> {
    /// Next hops: one for a single nexthop, several (with weights) for a group. `buckets` is
    /// the resilient group's bucket table (`ip nexthop bucket`): bucket `i` sends to
    /// `nexthops[buckets[i]]`; empty for hash-threshold groups and single next hops.
    Hops {
        /// The next hops, in group order.
        nexthops: Vec<NextHop<K>>,
        /// Resilient groups: the index into `nexthops` of each bucket.
        buckets: Vec<u16>,
    },
    /// A `blackhole` nexthop (or a group of one): routes using it discard, as blackhole routes.
    Blackhole,
    /// Something the FIB cannot represent (an encapsulation, an IPv4 gateway for IPv6 routes, an
    /// unknown object): routes using it are "kernel decides" routes ([`RouteType::Kernel`]).
    Kernel,
}

impl<K> NexthopGroup<K> {
    /// A single nexthop or a hash-threshold group of these next hops.
    pub fn hops(nexthops: Vec<NextHop<K>>) -> Self {
        NexthopGroup::Hops {
            nexthops,
            buckets: Vec::new(),
        }
    }

    /// A resilient group: `nexthops` with their weights spread over `buckets` buckets as the
    /// kernel spreads them when the group is created (`nh_res_group_rebalance`): next hop `i`
    /// wants `round(buckets * (w_0 + ... + w_i) / total) - round(buckets * (w_0 + ... +
    /// w_(i-1)) / total)` buckets, and the buckets are handed out in index order to the
    /// underweight next hops, the last one first (the kernel's list of underweight next hops
    /// is built by `list_add`, at its head).
    ///
    /// ```
    /// use fib_trie::{NextHop, NexthopGroup};
    ///
    /// let mut a = NextHop::new(Some(1u32), 2);
    /// a.weight = 3;
    /// let g = NexthopGroup::resilient(vec![a, NextHop::new(Some(2), 2)], 8);
    /// assert_eq!(g.buckets(), [1, 1, 0, 0, 0, 0, 0, 0]);
    /// ```
    pub fn resilient(nexthops: Vec<NextHop<K>>, buckets: u16) -> Self {
        let total: u64 = nexthops.iter().map(|h| u64::from(h.weight)).sum();
        let mut table = Vec::with_capacity(usize::from(buckets));
        {
            let (mut cumulative, mut prev) = (0u64, 0u64);
            let mut wants = Vec::with_capacity(nexthops.len());
            for h in &nexthops {
                cumulative += u64::from(h.weight);
                // DIV_ROUND_CLOSEST(num_buckets * cumulative weight, total weight); no
                // buckets at all without weight.
                let Some(upper) = (u64::from(buckets) * cumulative + total / 2).checked_div(total)
                else {
                    break;
                };
                wants.push(upper - prev);
                prev = upper;
            }
            for (i, want) in wants.iter().enumerate().rev() {
                let index = u16::try_from(i).unwrap_or(u16::MAX);
                table.extend(std::iter::repeat_n(index, *want as usize));
            }
        }
        NexthopGroup::Hops {
            nexthops,
            buckets: table,
        }
    }

    /// The type a unicast route using this group behaves as.
    pub fn route_type(&self) -> RouteType {
        match self {
            NexthopGroup::Hops { .. } => RouteType::Unicast,
            NexthopGroup::Blackhole => RouteType::Blackhole,
            NexthopGroup::Kernel => RouteType::Kernel,
        }
    }

    /// The next hops (none for blackhole and kernel groups).
    pub fn nexthops(&self) -> &[NextHop<K>] {
        match self {
            NexthopGroup::Hops { nexthops, .. } => nexthops,
            _ => &[],
        }
    }

    /// The resilient bucket table (empty unless resilient).
    pub fn buckets(&self) -> &[u16] {
        match self {
            NexthopGroup::Hops { buckets, .. } => buckets,
            _ => &[],
        }
    }
}

/// A nexthop object: an id and its current group, replaceable while routes use it.
///
/// Objects compare equal only to themselves (the same allocation): a route names an object,
/// and a new object of an old id is another object. Hashing uses the id.
pub struct NexthopObject<K> {
    id: u32,
    current: Atomic<NexthopGroup<K>>,
}

impl<K> NexthopObject<K> {
    /// An object with this id and group, which never changes (no writer has it); for an
    /// object whose group is replaced, see [`NexthopWriter::new`].
    pub fn new(id: u32, group: NexthopGroup<K>) -> Self {
        NexthopObject {
            id,
            current: Atomic::new(group),
        }
    }

    /// The object's id (`NHA_ID`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The current group, kept alive by `guard`.
    ///
    /// # Panics
    /// If `guard` is not from `crossbeam_epoch::pin()` (the default collector).
    #[inline]
    pub fn load<'g>(&self, guard: &'g Guard) -> &'g NexthopGroup<K> {
        check_guard(guard);
        self.load_pinned(guard)
    }

    /// [`load`](Self::load) under a guard the caller already checked.
    #[inline(always)]
    pub(crate) fn load_pinned<'g>(&self, guard: &'g Guard) -> &'g NexthopGroup<K> {
        let ptr = self.current.load(Ordering::Acquire, guard);
        // SAFETY: `current` is never null (set in `new`, only replaced by `replace` with another
        // group), and a replaced group is retired with `defer_destroy`, so it lives as long as
        // `guard` is pinned.
        unsafe { ptr.deref() }
    }

    /// Makes `group` the object's group: one store, seen by every route using the object. The
    /// old group is freed once every reader that may hold it has unpinned. Private: only the
    /// object's [`NexthopWriter`] replaces.
    fn replace(&self, group: NexthopGroup<K>) {
        let guard = &epoch::pin();
        let old = self
            .current
            .swap(Owned::new(group), Ordering::AcqRel, guard);
        // SAFETY: `old` was just unlinked by the swap and is retired once; readers that loaded
        // it are pinned, so it is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
    }

    /// A copy of the current group (slow path: for display and comparison).
    pub fn snapshot(&self) -> NexthopGroup<K>
    where
        K: Clone,
    {
        self.load(&epoch::pin()).clone()
    }
}

/// The one writer of a [`NexthopObject`]: the group changes only through it. Routes and
/// readers hold the `Arc` of [`reader`](Self::reader); the writer derefs to the object for its
/// own reads. Not `Clone`.
///
/// ```
/// use fib_trie::{NexthopGroup, NexthopWriter};
///
/// let mut nh = NexthopWriter::<u32>::new(3, NexthopGroup::Blackhole);
/// let object = std::sync::Arc::clone(nh.reader()); // for routes: read only
/// nh.replace(NexthopGroup::Kernel);
/// assert_eq!(object.snapshot(), NexthopGroup::Kernel);
/// assert_eq!(nh.id(), 3);
/// ```
#[derive(Debug)]
pub struct NexthopWriter<K> {
    object: Arc<NexthopObject<K>>,
}

impl<K> NexthopWriter<K> {
    /// A new object with this id and group, and its writer.
    pub fn new(id: u32, group: NexthopGroup<K>) -> Self {
        NexthopWriter {
            object: Arc::new(NexthopObject::new(id, group)),
        }
    }

    /// The object, for routes ([`Route::via_object`](crate::Route::via_object)) and readers.
    pub fn reader(&self) -> &Arc<NexthopObject<K>> {
        &self.object
    }

    /// Makes `group` the object's group: one store, seen by every route using the object. The
    /// old group is freed once every reader that may hold it has unpinned.
    pub fn replace(&mut self, group: NexthopGroup<K>) {
        self.object.replace(group);
    }
}

impl<K> Deref for NexthopWriter<K> {
    type Target = NexthopObject<K>;

    fn deref(&self) -> &NexthopObject<K> {
        &self.object
    }
}

impl<K> Drop for NexthopObject<K> {
    fn drop(&mut self) {
        // SAFETY: the object is being dropped, so no route holds it and no lookup can reach it;
        // the group pointer is freed once.
        unsafe {
            let guard = epoch::unprotected();
            drop(self.current.load(Ordering::Relaxed, guard).into_owned());
        }
    }
}

impl<K: std::fmt::Debug> std::fmt::Debug for NexthopObject<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let guard = epoch::pin();
        f.debug_struct("NexthopObject")
            .field("id", &self.id)
            .field("group", self.load(&guard))
            .finish()
    }
}

impl<K> PartialEq for NexthopObject<K> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl<K> Eq for NexthopObject<K> {}

impl<K> std::hash::Hash for NexthopObject<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_reader_keeps_the_group_it_loaded_across_a_replace() {
        let mut obj =
            NexthopWriter::<u32>::new(1, NexthopGroup::hops(vec![NextHop::new(Some(1), 2)]));
        let guard = epoch::pin();
        let before = obj.load(&guard);
        obj.replace(NexthopGroup::Blackhole);
        obj.replace(NexthopGroup::Kernel);
        // Still the first group: retired, not freed, while `guard` is pinned.
        assert_eq!(before.nexthops()[0].gateway_same(), Some(1));
        drop(guard);
        assert_eq!(obj.snapshot(), NexthopGroup::Kernel);
    }

    #[test]
    fn objects_are_equal_only_to_themselves() {
        let a = Arc::new(NexthopObject::<u32>::new(5, NexthopGroup::Blackhole));
        let b = Arc::new(NexthopObject::<u32>::new(5, NexthopGroup::Blackhole));
        assert_eq!(a, Arc::clone(&a));
        assert_ne!(a, b);
    }

    #[test]
    fn resilient_buckets_follow_the_weights() {
        let hop = |w| {
            let mut h = NextHop::new(Some(1u32), 1);
            h.weight = w;
            h
        };
        let NexthopGroup::Hops { buckets, .. } =
            NexthopGroup::resilient(vec![hop(1), hop(1), hop(2)], 16)
        else {
            unreachable!()
        };
        let count = |i| buckets.iter().filter(|&&b| b == i).count();
        assert_eq!((buckets.len(), count(0), count(1), count(2)), (16, 4, 4, 8));
        assert!(
            buckets.windows(2).all(|w| w[0] >= w[1]),
            "last next hop first"
        );
        assert_eq!(
            NexthopGroup::<u32>::resilient(Vec::new(), 8).buckets(),
            &[] as &[u16]
        );
    }
}
