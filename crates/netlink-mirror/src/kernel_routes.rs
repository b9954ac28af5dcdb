//! "Kernel decides" routes: the kernel routes the FIB cannot represent (an encapsulation, a
//! source-specific route, an unknown route type or attribute, a gateway of the other family),
//! each standing behind a [`RouteType::Kernel`](fib_trie::RouteType::Kernel) route over its
//! prefix, in its table, with its tos and metric. The dataplane hands packets that land on one
//! to the kernel. Several kernel routes may share a stand-in (the sources of one IPv6
//! destination); it stays while any of them does.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use fib_trie::Route;

use crate::map::KernelRoute;

/// What identifies a stand-in: table, prefix, length, tos, metric.
pub type StandInKey<K> = (u32, K, u8, u8, u32);

/// One stand-in and the kernel routes behind it.
#[derive(Clone, Debug)]
pub struct StandIn<K> {
    /// The route in the FIB.
    pub route: Route<K>,
    /// Why the kernel's routes cannot be represented.
    pub reason: &'static str,
    /// Digests of the kernel routes behind it.
    pub origins: HashSet<u64>,
}

/// The stand-ins of one family.
#[derive(Debug)]
pub struct KernelRoutes<K> {
    by_key: HashMap<StandInKey<K>, StandIn<K>>,
}

impl<K> Default for KernelRoutes<K> {
    fn default() -> Self {
        KernelRoutes {
            by_key: HashMap::new(),
        }
    }
}

/// What adding or removing a kernel route does to the FIB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandInChange {
    /// The stand-in is new: insert it.
    Insert,
    /// The stand-in lost its last kernel route: delete it.
    Delete,
    /// The stand-in stays as it is (another kernel route behind it, or nothing new).
    Keep,
}

/// The key of `r`'s stand-in.
pub fn key_of<K: Copy>(r: &Route<K>) -> StandInKey<K> {
    (r.table, r.prefix, r.plen, r.tos, r.info.priority)
}

impl<K: fib_trie::TrieKey> KernelRoutes<K> {
    /// Records the kernel route `k`.
    pub fn add(&mut self, k: &KernelRoute<K>) -> StandInChange {
        let key = key_of(&k.route);
        match self.by_key.get_mut(&key) {
            Some(s) => {
                s.origins.insert(k.origin);
                StandInChange::Keep
            }
            None => {
                self.by_key.insert(
                    key,
                    StandIn {
                        route: k.route.clone(),
                        reason: k.reason,
                        origins: HashSet::from([k.origin]),
                    },
                );
                StandInChange::Insert
            }
        }
    }

    /// Forgets the kernel route `k`.
    pub fn remove(&mut self, k: &KernelRoute<K>) -> StandInChange {
        let key = key_of(&k.route);
        let Some(s) = self.by_key.get_mut(&key) else {
            return StandInChange::Keep;
        };
        if !s.origins.remove(&k.origin) || !s.origins.is_empty() {
            return StandInChange::Keep;
        }
        self.by_key.remove(&key);
        StandInChange::Delete
    }

    /// The stand-in of `key`, if any.
    pub fn get(&self, key: &StandInKey<K>) -> Option<&StandIn<K>> {
        self.by_key.get(key)
    }

    /// Every kernel route not in `seen` (a resynchronising dump's keys and origins).
    pub fn unseen(&self, seen: &HashSet<(StandInKey<K>, u64)>) -> Vec<KernelRoute<K>> {
        let mut out = Vec::new();
        for (key, s) in &self.by_key {
            for &origin in &s.origins {
                if !seen.contains(&(*key, origin)) {
                    out.push(KernelRoute {
                        route: s.route.clone(),
                        reason: s.reason,
                        origin,
                    });
                }
            }
        }
        out
    }

    /// How many kernel routes stand behind stand-ins, by reason.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for s in self.by_key.values() {
            *out.entry(s.reason).or_default() += s.origins.len() as u64;
        }
        out
    }
}

/// The stand-ins of both families, shared by the control thread (which writes) and `show`.
#[derive(Debug, Default)]
pub struct KernelRouteBook {
    v4: Mutex<KernelRoutes<u32>>,
    v6: Mutex<KernelRoutes<u128>>,
}

impl KernelRouteBook {
    /// The IPv4 stand-ins.
    pub fn v4(&self) -> MutexGuard<'_, KernelRoutes<u32>> {
        self.v4.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The IPv6 stand-ins.
    pub fn v6(&self) -> MutexGuard<'_, KernelRoutes<u128>> {
        self.v6.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many kernel routes of both families the kernel decides for, by reason.
    ///
    /// ```
    /// use netlink_mirror::kernel_routes::KernelRouteBook;
    ///
    /// assert!(KernelRouteBook::default().counts().is_empty());
    /// ```
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        let mut out = self.v4().counts();
        for (k, v) in self.v6().counts() {
            *out.entry(k).or_default() += v;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use fib_trie::RouteType;

    use super::*;

    fn kr(origin: u64) -> KernelRoute<u128> {
        let mut route = Route::reject(0, 0, 254, RouteType::Kernel);
        route.info.priority = 0;
        KernelRoute {
            route,
            reason: "source-specific",
            origin,
        }
    }

    #[test]
    fn a_stand_in_stays_while_a_kernel_route_is_behind_it() {
        let mut b = KernelRoutes::default();
        assert_eq!(b.add(&kr(1)), StandInChange::Insert);
        assert_eq!(b.add(&kr(2)), StandInChange::Keep);
        assert_eq!(b.add(&kr(2)), StandInChange::Keep, "idempotent");
        assert_eq!(b.counts().get("source-specific"), Some(&2));
        assert_eq!(b.remove(&kr(1)), StandInChange::Keep);
        assert_eq!(b.remove(&kr(3)), StandInChange::Keep, "never added");
        assert_eq!(b.unseen(&HashSet::new()).len(), 1);
        assert_eq!(b.remove(&kr(2)), StandInChange::Delete);
        assert!(b.counts().is_empty());
    }
}
