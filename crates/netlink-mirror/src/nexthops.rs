//! The mirrored nexthop objects (`ip nexthop`): each id's specification as the kernel reported
//! it, and the two fib-trie objects (IPv4 and IPv6 views) that routes through it share.
//!
//! Routes hold the objects, not copies of their next hops: replacing a nexthop (or a member of
//! a group) re-resolves the objects concerned and stores each once, and every route using them
//! follows at once, as in the kernel. The table itself is the control thread's (and the CLI's):
//! lookups never touch it.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use fib_trie::{NextHop, NextHopFlags, NexthopGroup, NexthopObject, NexthopWriter};

use crate::key::IpKey;
use crate::map::NexthopSpec;

/// One nexthop object: its specification and its per-family views.
#[derive(Debug)]
pub struct NexthopEntry {
    /// What the kernel reported.
    pub spec: NexthopSpec,
    /// The object IPv4 routes use (its writer: [`NexthopWriter::reader`] is the object).
    pub v4: NexthopWriter<u32>,
    /// The object IPv6 routes use.
    pub v6: NexthopWriter<u128>,
}

/// The nexthop objects of one namespace, by id.
///
/// ```
/// use netlink_mirror::map::NexthopSpec;
/// use netlink_mirror::nexthops::NexthopTable;
///
/// let t = NexthopTable::default();
/// t.lock().upsert(1, NexthopSpec::Blackhole);
/// assert_eq!(t.lock().object4(1).map(|o| o.id()), Some(1));
/// ```
#[derive(Debug, Default)]
pub struct NexthopTable {
    entries: Mutex<Nexthops>,
}

impl NexthopTable {
    /// The objects, locked (the control thread writes; `show` reads).
    pub fn lock(&self) -> MutexGuard<'_, Nexthops> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The objects by id (see [`NexthopTable`]).
#[derive(Debug, Default)]
pub struct Nexthops {
    by_id: BTreeMap<u32, NexthopEntry>,
}

/// A family's view of nexthop objects: which object a route of that family uses.
pub trait ObjectFamily: IpKey {
    /// The object of `entry` routes of this family use.
    fn object(entry: &NexthopEntry) -> &Arc<NexthopObject<Self>>;
}

impl ObjectFamily for u32 {
    fn object(entry: &NexthopEntry) -> &Arc<NexthopObject<u32>> {
        entry.v4.reader()
    }
}

impl ObjectFamily for u128 {
    fn object(entry: &NexthopEntry) -> &Arc<NexthopObject<u128>> {
        entry.v6.reader()
    }
}

impl Nexthops {
    /// The specification of `id`.
    pub fn get(&self, id: u32) -> Option<&NexthopSpec> {
        self.by_id.get(&id).map(|e| &e.spec)
    }

    /// Every object, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &NexthopEntry)> {
        self.by_id.iter().map(|(id, e)| (*id, e))
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The object routes of family `K` through `id` use.
    pub fn object<K: ObjectFamily>(&self, id: u32) -> Option<Arc<NexthopObject<K>>> {
        self.by_id.get(&id).map(|e| Arc::clone(K::object(e)))
    }

    /// The object IPv4 routes through `id` use.
    pub fn object4(&self, id: u32) -> Option<Arc<NexthopObject<u32>>> {
        self.object::<u32>(id)
    }

    /// Adds or replaces `id`; returns whether anything changed. The objects of `id` and of
    /// every group containing it are re-resolved, each with one store.
    pub fn upsert(&mut self, id: u32, spec: NexthopSpec) -> bool {
        if let Some(e) = self.by_id.get_mut(&id) {
            if e.spec == spec {
                return false;
            }
            e.spec = spec;
        } else {
            let v4 = NexthopWriter::new(id, NexthopGroup::Kernel);
            let v6 = NexthopWriter::new(id, NexthopGroup::Kernel);
            self.by_id.insert(id, NexthopEntry { spec, v4, v6 });
        }
        self.refresh(id);
        true
    }

    /// Removes `id` and drops it from the groups that contain it; returns the ids removed:
    /// `id`, and groups left without members (removed too, as the kernel does). Their routes
    /// are the caller's to remove.
    pub fn remove(&mut self, id: u32) -> Vec<u32> {
        let mut gone = Vec::new();
        let mut queue = vec![id];
        while let Some(id) = queue.pop() {
            if self.by_id.remove(&id).is_none() {
                continue;
            }
            gone.push(id);
            let holders: Vec<u32> = self.groups_containing(id);
            for g in holders {
                let Some(e) = self.by_id.get_mut(&g) else {
                    continue;
                };
                if let NexthopSpec::Group { members, .. } = &mut e.spec {
                    members.retain(|(m, _)| *m != id);
                    if members.is_empty() {
                        queue.push(g);
                        continue;
                    }
                }
                self.refresh(g);
            }
        }
        gone
    }

    fn groups_containing(&self, id: u32) -> Vec<u32> {
        self.by_id
            .iter()
            .filter(|(_, e)| {
                matches!(&e.spec, NexthopSpec::Group { members, .. }
                    if members.iter().any(|(m, _)| *m == id))
            })
            .map(|(g, _)| *g)
            .collect()
    }

    /// Re-resolves `id` and the groups containing it.
    fn refresh(&mut self, id: u32) {
        let mut ids = vec![id];
        ids.extend(self.groups_containing(id));
        for i in ids {
            let Some(spec) = self.by_id.get(&i).map(|e| &e.spec) else {
                continue;
            };
            let (v4, v6) = (self.resolve::<u32>(spec), self.resolve::<u128>(spec));
            if let Some(e) = self.by_id.get_mut(&i) {
                e.v4.replace(v4);
                e.v6.replace(v6);
            }
        }
    }

    /// What `spec` means for routes of family `K`.
    pub fn resolve<K: ObjectFamily>(&self, spec: &NexthopSpec) -> NexthopGroup<K> {
        match spec {
            NexthopSpec::Blackhole => NexthopGroup::Blackhole,
            NexthopSpec::Unrepresentable(_) => NexthopGroup::Kernel,
            NexthopSpec::Single { .. } => match single::<K>(spec, 1) {
                Some(h) => NexthopGroup::hops(vec![h]),
                None => NexthopGroup::Kernel,
            },
            NexthopSpec::Group { members, buckets } => {
                if let [(only, _)] = members.as_slice() {
                    if matches!(self.get(*only), Some(NexthopSpec::Blackhole)) {
                        return NexthopGroup::Blackhole;
                    }
                }
                let mut hops = Vec::with_capacity(members.len());
                for (m, weight) in members {
                    let Some(h) = self.get(*m).and_then(|s| single::<K>(s, *weight)) else {
                        // A member that is missing, nested, a blackhole among others, or of a
                        // gateway this family cannot hold: the kernel decides.
                        return NexthopGroup::Kernel;
                    };
                    hops.push(h);
                }
                match buckets {
                    Some(n) => NexthopGroup::resilient(hops, *n),
                    None => NexthopGroup::hops(hops),
                }
            }
        }
    }
}

/// A single nexthop as a next hop of family `K` with `weight`, if it is one this family can
/// hold: IPv4 routes take IPv4 and IPv6 gateways (RFC 8950), IPv6 routes IPv6 ones.
fn single<K: IpKey>(spec: &NexthopSpec, weight: u32) -> Option<NextHop<K>> {
    let NexthopSpec::Single {
        gateway,
        ifindex,
        flags,
        ..
    } = spec
    else {
        return None;
    };
    let gateway = match gateway {
        None => None,
        Some(g) => Some(K::gateway_of(*g)?),
    };
    Some(NextHop {
        gateway,
        ifindex: *ifindex,
        // Weights beyond 65535 (the kernel allows 65536) are clamped.
        weight: u16::try_from(weight).unwrap_or(u16::MAX).max(1),
        flags: NextHopFlags(*flags),
    })
}

/// The gateway of a single nexthop, for display.
pub fn gateway_of(spec: &NexthopSpec) -> Option<IpAddr> {
    match spec {
        NexthopSpec::Single { gateway, .. } => *gateway,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use fib_trie::Gateway;

    use super::*;

    fn single4(gw: &str, ifindex: u32) -> NexthopSpec {
        NexthopSpec::Single {
            family: libc::AF_INET as u8,
            gateway: Some(gw.parse().unwrap()),
            ifindex,
            flags: 0,
        }
    }

    #[test]
    fn a_member_replace_reaches_its_groups_with_one_store_each() {
        let t = NexthopTable::default();
        let mut n = t.lock();
        n.upsert(1, single4("10.1.0.2", 3));
        n.upsert(2, single4("10.2.0.2", 4));
        n.upsert(
            10,
            NexthopSpec::Group {
                members: vec![(1, 1), (2, 2)],
                buckets: None,
            },
        );
        let group = n.object4(10).unwrap();
        let gws = |g: &Arc<NexthopObject<u32>>| -> Vec<_> {
            g.snapshot()
                .nexthops()
                .iter()
                .map(|h| (h.gateway_same(), h.weight))
                .collect()
        };
        assert_eq!(
            gws(&group),
            [(Some(0x0a01_0002), 1), (Some(0x0a02_0002), 2)]
        );
        assert!(!n.upsert(1, single4("10.1.0.2", 3)), "same spec: no change");
        assert!(n.upsert(1, single4("10.1.0.9", 3)));
        assert_eq!(
            gws(&group),
            [(Some(0x0a01_0009), 1), (Some(0x0a02_0002), 2)]
        );
        // The IPv6 view of IPv4 gateways: the kernel decides (never used by the kernel).
        assert_eq!(
            n.object::<u128>(10).unwrap().snapshot(),
            NexthopGroup::Kernel
        );
        assert_eq!(n.remove(2), vec![2]);
        assert_eq!(gws(&group), [(Some(0x0a01_0009), 1)]);
        assert_eq!(n.remove(1), vec![1, 10], "the emptied group goes too");
        assert!(n.is_empty());
    }

    #[test]
    fn blackholes_and_ipv6_gateways_of_ipv4_routes() {
        let t = NexthopTable::default();
        let mut n = t.lock();
        n.upsert(1, NexthopSpec::Blackhole);
        n.upsert(
            2,
            NexthopSpec::Group {
                members: vec![(1, 1)],
                buckets: None,
            },
        );
        assert_eq!(n.object4(2).unwrap().snapshot(), NexthopGroup::Blackhole);
        n.upsert(
            3,
            NexthopSpec::Single {
                family: libc::AF_INET6 as u8,
                gateway: Some("fe80::1".parse().unwrap()),
                ifindex: 2,
                flags: 0,
            },
        );
        // IPv4 routes through an IPv6 nexthop (RFC 8950): the gateway keeps its family.
        let ll = u128::from("fe80::1".parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(
            n.object4(3).unwrap().snapshot(),
            NexthopGroup::hops(vec![NextHop::via_inet6(ll, 2)])
        );
        assert_eq!(
            n.object::<u128>(3).unwrap().snapshot().nexthops()[0].gateway_same(),
            Some(ll)
        );
        // A group mixing both families serves IPv4 routes.
        n.upsert(4, single4("10.1.0.2", 3));
        n.upsert(
            5,
            NexthopSpec::Group {
                members: vec![(3, 1), (4, 1)],
                buckets: None,
            },
        );
        let group = n.object4(5).unwrap().snapshot();
        assert_eq!(
            group
                .nexthops()
                .iter()
                .map(|h| h.gateway)
                .collect::<Vec<_>>(),
            [Some(Gateway::Inet6(ll)), Some(Gateway::Same(0x0a01_0002))]
        );
        assert_eq!(
            n.object::<u128>(5).unwrap().snapshot(),
            NexthopGroup::Kernel
        );
    }
}
