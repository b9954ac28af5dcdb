//! Applying mapped messages to the tables: idempotent upserts, tolerant deletes, and the
//! sweep that removes what a resynchronising dump no longer holds.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use addr_table::{AddrError, IfAddr};
use fib_trie::{
    Fib, FibAlias, FibRule, FibWriter, InsertFlags, NextHop, Route, RouteError, RouteInfo,
    RouteSelector, RouteType, RuleError,
};
use neigh_table::Link;

use crate::change::{Change, ChangeOp, Observer};
use crate::error::MapError;
use crate::kernel_routes::{KernelRoutes, StandInChange, StandInKey, key_of};
use crate::key::IpKey;
use crate::map::KernelRoute;
use crate::map::{AddrEntry, Mapped, PolicyKey, RuleEntry, Upsert};
use crate::nexthops::ObjectFamily;
use crate::stats::{Counters, inc};
use crate::tables::{MirroredTables, TableWriters};

/// The kinds of objects, each dumped on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Interfaces.
    Link,
    /// Addresses of both families.
    Addr,
    /// IPv4 routes.
    Route4,
    /// IPv6 routes.
    Route6,
    /// Neighbours of both families.
    Neigh,
    /// IPv4 rules.
    Rule4,
    /// IPv6 rules.
    Rule6,
    /// xfrm policies.
    Policy,
    /// Nexthop objects (dumped before routes, which name them).
    Nexthop,
    /// IPv4 per-device switches (`RTM_GETNETCONF`).
    Netconf4,
    /// IPv6 per-device switches.
    Netconf6,
}

/// A route's identity for sweeping: everything a leaf's alias holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RouteId<K> {
    prefix: K,
    plen: u8,
    table: u32,
    tos: u8,
    route_type: RouteType,
    info: RouteInfo<K>,
}

impl<K: IpKey> RouteId<K> {
    fn of_alias(prefix: K, plen: u8, a: &FibAlias<K>) -> Self {
        RouteId {
            prefix,
            plen,
            table: a.table,
            tos: a.tos,
            route_type: a.route_type,
            info: (*a.info).clone(),
        }
    }
    fn into_route(self) -> Route<K> {
        Route {
            prefix: self.prefix,
            plen: self.plen,
            table: self.table,
            tos: self.tos,
            route_type: self.route_type,
            info: self.info,
        }
    }
}

/// A route's 64-bit digest (SipHash with fixed keys): a million routes are swept against
/// 8 MiB of digests rather than copies; a collision (odds about n²/2⁶⁵) would keep one stale
/// route.
fn digest<K: IpKey>(
    prefix: K,
    plen: u8,
    table: u32,
    tos: u8,
    t: RouteType,
    info: &RouteInfo<K>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (prefix, plen, table, tos, t, info).hash(&mut h);
    h.finish()
}

/// What one dump of a kind held, to sweep the rest afterwards.
#[derive(Default)]
pub(crate) struct Seen {
    links: HashSet<u32>,
    addrs: HashSet<(u32, IpAddr, u8)>,
    routes4: HashSet<u64>,
    routes6: HashSet<u64>,
    neigh: HashSet<(u32, IpAddr)>,
    rules4: HashSet<RuleEntry<u32>>,
    rules6: HashSet<RuleEntry<u128>>,
    policies: HashSet<PolicyKey>,
    nexthops: HashSet<u32>,
    kernel4: HashSet<(StandInKey<u32>, u64)>,
    kernel6: HashSet<(StandInKey<u128>, u64)>,
}

impl Seen {
    /// Records a dumped object; the digests of routes only when `routes` (a dump into an
    /// empty FIB needs none: see `Applier::into_empty4`).
    pub fn record(&mut self, m: &Mapped, routes: bool) {
        match m {
            Mapped::Link(l) => {
                self.links.insert(l.ifindex);
            }
            Mapped::Addr(a) => {
                self.addrs.insert((a.ifindex(), a.addr(), a.prefix_len()));
            }
            Mapped::Route4(r, _) if routes => {
                self.routes4.insert(digest(
                    r.prefix,
                    r.plen,
                    r.table,
                    r.tos,
                    r.route_type,
                    &r.info,
                ));
            }
            Mapped::Route6(r, _) if routes => {
                self.routes6.insert(digest(
                    r.prefix,
                    r.plen,
                    r.table,
                    r.tos,
                    r.route_type,
                    &r.info,
                ));
            }
            Mapped::Neigh(n) => {
                self.neigh.insert((n.ifindex, n.addr));
            }
            Mapped::Nexthop(id, _) => {
                self.nexthops.insert(*id);
            }
            Mapped::Kernel4(k, Some(_)) => {
                let r = &k.route;
                if routes {
                    self.routes4.insert(digest(
                        r.prefix,
                        r.plen,
                        r.table,
                        r.tos,
                        r.route_type,
                        &r.info,
                    ));
                }
                self.kernel4.insert((key_of(r), k.origin));
            }
            Mapped::Kernel6(k, Some(_)) => {
                let r = &k.route;
                if routes {
                    self.routes6.insert(digest(
                        r.prefix,
                        r.plen,
                        r.table,
                        r.tos,
                        r.route_type,
                        &r.info,
                    ));
                }
                self.kernel6.insert((key_of(r), k.origin));
            }
            Mapped::Rule4(r) => {
                self.rules4.insert(r.clone());
            }
            Mapped::Rule6(r) => {
                self.rules6.insert(r.clone());
            }
            Mapped::Policy(p) => {
                self.policies.insert(PolicyKey {
                    selector: p.selector,
                    dir: p.dir,
                    ptype: p.ptype,
                    if_id: p.if_id,
                    mark: p.mark,
                });
            }
            _ => {}
        }
    }
}

/// Rules as the kernel named them, and the FIB rule installed for each.
struct RuleBook<K> {
    installed: HashMap<RuleEntry<K>, FibRule<K>>,
}

impl<K> Default for RuleBook<K> {
    fn default() -> Self {
        RuleBook {
            installed: HashMap::new(),
        }
    }
}

/// An interface index no interface has: a rule naming a missing device never matches.
pub const DETACHED_IFINDEX: u32 = u32::MAX;

/// Applies mapped messages to the tables; owned by the control thread.
pub(crate) struct Applier {
    pub tables: MirroredTables,
    /// The tables' writers: only the applier changes the tables.
    pub writers: TableWriters,
    observer: Option<Arc<dyn Observer>>,
    pub counters: Arc<Counters>,
    rules4: RuleBook<u32>,
    rules6: RuleBook<u128>,
    /// Set when a link went down or away: the kernel then flushes routes silently.
    pub routes_need_redump: bool,
    /// The kinds of "kernel decides" routes already logged (each is logged once).
    logged_kinds: HashSet<&'static str>,
    /// Routes of a dump into an empty FIB, loaded at once when the dump ends.
    bulk4: Option<Bulk<u32>>,
    bulk6: Option<Bulk<u128>>,
    /// The last route dump of the family began with an empty FIB: afterwards the FIB holds
    /// exactly what the dump held (events that arrive meanwhile are applied after the sweep),
    /// so the sweep has no route to look for and the dump keeps no digests of them.
    into_empty4: bool,
    into_empty6: bool,
}

/// The routes of one dump, kept to be loaded together ([`Fib::insert_many`]).
struct Bulk<K> {
    routes: Vec<Route<K>>,
    /// IPv6 gateway routes by key (table, prefix, length, tos, metric, type): a later one
    /// replaces the earlier, as [`upsert_route`] does one by one.
    gateway: HashMap<(u32, K, u8, u8, u32, RouteType), usize>,
}

impl<K: IpKey> Bulk<K> {
    fn new() -> Self {
        Bulk {
            routes: Vec::new(),
            gateway: HashMap::new(),
        }
    }

    fn push(&mut self, r: Route<K>) {
        if K::FAMILY == libc::AF_INET6 as u8 && has_gateway(&r) {
            let key = (
                r.table,
                r.prefix,
                r.plen,
                r.tos,
                r.info.priority,
                r.route_type,
            );
            if let Some(&at) = self.gateway.get(&key) {
                self.routes[at] = r;
                return;
            }
            self.gateway.insert(key, self.routes.len());
        }
        self.routes.push(r);
    }
}

/// The writer of a family's FIB among the mirror's writers.
trait FibOf: IpKey {
    fn fib(w: &mut TableWriters) -> &mut FibWriter<Self>;
}

impl FibOf for u32 {
    fn fib(w: &mut TableWriters) -> &mut FibWriter<u32> {
        &mut w.fib4
    }
}

impl FibOf for u128 {
    fn fib(w: &mut TableWriters) -> &mut FibWriter<u128> {
        &mut w.fib6
    }
}

/// Whether `fib` holds no route in any table.
fn is_empty<K: IpKey>(fib: &Fib<K>) -> bool {
    let guard = crossbeam_epoch::pin();
    fib.table_ids()
        .into_iter()
        .all(|id| fib.table(id, &guard).is_none_or(|t| t.route_count() == 0))
}

/// The outcome of applying one message.
type Applied = Result<Option<Change>, MapError>;

impl Applier {
    pub fn new(
        tables: MirroredTables,
        writers: TableWriters,
        observer: Option<Arc<dyn Observer>>,
        counters: Arc<Counters>,
    ) -> Self {
        Applier {
            tables,
            writers,
            observer,
            counters,
            rules4: RuleBook::default(),
            rules6: RuleBook::default(),
            routes_need_redump: false,
            logged_kinds: HashSet::new(),
            bulk4: None,
            bulk6: None,
            into_empty4: false,
            into_empty6: false,
        }
    }

    /// Starts (or restarts) a dump of `kind`: a route dump into a FIB that holds no route yet
    /// (the initial synchronisation) keeps its routes to load them at once at its end.
    pub fn begin_dump(&mut self, kind: Kind) {
        match kind {
            Kind::Route4 => {
                self.bulk4 = is_empty(&self.tables.fib4).then(Bulk::new);
                self.into_empty4 = self.bulk4.is_some();
            }
            Kind::Route6 => {
                self.bulk6 = is_empty(&self.tables.fib6).then(Bulk::new);
                self.into_empty6 = self.bulk6.is_some();
            }
            _ => {}
        }
    }

    /// Ends a dump of `kind` (before its sweep): loads the routes kept since
    /// [`begin_dump`](Self::begin_dump) with one bulk build per table, then reports each as
    /// applied. If the load refuses them, they are applied one by one (each refusal counted).
    pub fn end_dump(&mut self, kind: Kind) {
        match kind {
            Kind::Route4 => {
                if let Some(bulk) = self.bulk4.take() {
                    self.load(bulk.routes, Mapped::Route4, |r| {
                        Change::Route4(ChangeOp::Added, r)
                    });
                }
            }
            Kind::Route6 => {
                if let Some(bulk) = self.bulk6.take() {
                    self.load(bulk.routes, Mapped::Route6, |r| {
                        Change::Route6(ChangeOp::Added, r)
                    });
                }
            }
            _ => {}
        }
    }

    fn load<K: FibOf>(
        &mut self,
        routes: Vec<Route<K>>,
        mapped: fn(Route<K>, Upsert) -> Mapped,
        change: fn(Route<K>) -> Change,
    ) {
        match K::fib(&mut self.writers).insert_many(&routes) {
            Ok(_) => {
                for r in routes {
                    self.changed(&change(r));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "bulk load refused; applying one by one");
                for r in routes {
                    self.apply(mapped(r, Upsert::Dump));
                }
            }
        }
    }

    /// Applies one mapped message, counts it, publishes, bumps the generation and tells the
    /// observer. Routes of a dump started by [`begin_dump`](Self::begin_dump) are kept for
    /// its end instead.
    pub fn apply(&mut self, m: Mapped) {
        let m = match (m, &mut self.bulk4, &mut self.bulk6) {
            (Mapped::Route4(r, Upsert::Dump), Some(bulk), _) => return bulk.push(r),
            (Mapped::Route6(r, Upsert::Dump), _, Some(bulk)) => return bulk.push(r),
            (m, _, _) => m,
        };
        let result = self.apply_inner(m);
        self.finish(result);
    }

    /// Applies one dumped message and records it in `seen` as applied (a route through a
    /// nexthop object as attached to it, since the kernel may report it as a blackhole).
    pub fn apply_dumped(&mut self, m: Mapped, seen: &mut Seen) {
        let m = match m {
            Mapped::Route4(r, u) => attach(&self.tables, r).map(|r| Mapped::Route4(r, u)),
            Mapped::Route6(r, u) => attach(&self.tables, r).map(|r| Mapped::Route6(r, u)),
            other => Ok(other),
        };
        match m {
            Ok(m) => {
                let routes = match &m {
                    Mapped::Route4(..) | Mapped::Kernel4(..) => !self.into_empty4,
                    Mapped::Route6(..) | Mapped::Kernel6(..) => !self.into_empty6,
                    _ => true,
                };
                seen.record(&m, routes);
                self.apply(m);
            }
            Err(e) => self.map_failed(&e),
        }
    }

    /// Applies a message whose mapping failed: counted and logged.
    pub fn map_failed(&self, e: &MapError) {
        self.counters.error(e.kind());
        tracing::warn!(error = %e, kind = e.kind(), "netlink message not mirrored");
    }

    fn finish(&self, result: Applied) {
        match result {
            Ok(Some(change)) => self.changed(&change),
            Ok(None) => inc(&self.counters.unchanged),
            Err(e) => self.map_failed(&e),
        }
    }

    fn changed(&self, change: &Change) {
        inc(&self.counters.applied);
        self.tables.generation.bump();
        // The writer collects what it retires, one change at a time. crossbeam's collector
        // frees at most 8 bags (512 objects) per 128 pins of any thread; a mass change (the
        // 100,000 deletes of a sweep after a link went down, several retired nodes each)
        // retires faster than the run loops' pins collect: measured in the soak, the heap's
        // bytes in use rose from 10 to 70 MiB during such a sweep and fell back only in the
        // ten seconds after it, leaving a heap that size. `flush` hands this thread's bag to
        // the global queue and collects up to 8 bags whose epoch has passed.
        crossbeam_epoch::pin().flush();
        tracing::trace!(?change, "applied");
        if let Some(o) = &self.observer {
            o.on_change(change);
        }
    }

    fn apply_inner(&mut self, m: Mapped) -> Applied {
        use ChangeOp::{Added, Removed};
        let t = self.tables.clone();
        let rule = matches!(
            m,
            Mapped::Rule4(_) | Mapped::Rule6(_) | Mapped::Rule4Gone(_) | Mapped::Rule6Gone(_)
        );
        Ok(match m {
            Mapped::Link(l) => {
                let old = t.links.get(l.ifindex, &crossbeam_epoch::pin()).cloned();
                if !self.writers.links.upsert(l.clone()) {
                    return Ok(None);
                }
                // `IFF_UP` cleared (not a carrier loss): the kernel removes the IPv4 routes.
                let up = neigh_table::LinkFlags::UP;
                let went_down = old
                    .as_ref()
                    .is_some_and(|o| o.flags.contains(up) && !l.flags.contains(up));
                if went_down {
                    self.routes_need_redump = true;
                }
                if old.as_ref().is_none_or(|o| o.name != l.name) {
                    self.relink_rules();
                }
                Some(Change::Link(Added, l))
            }
            Mapped::LinkGone(ifindex) => {
                let Some(old) = self.writers.links.remove(ifindex) else {
                    return Ok(None);
                };
                self.routes_need_redump = true;
                self.relink_rules();
                Some(Change::Link(Removed, old))
            }
            Mapped::Addr(a) => self.add_addr(a)?,
            Mapped::AddrGone(a) => {
                let removed = match &a {
                    AddrEntry::V4(e) => self
                        .writers
                        .addrs
                        .remove(e.addr, e.prefix_len, e.ifindex)
                        .map(drop),
                    AddrEntry::V6(e) => self
                        .writers
                        .addrs
                        .remove(e.addr, e.prefix_len, e.ifindex)
                        .map(drop),
                };
                match removed {
                    Ok(()) => Some(Change::Addr(Removed, a)),
                    Err(AddrError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            Mapped::Route4(r, u) => {
                let r = attach(&t, r)?;
                upsert_route(&mut self.writers.fib4, &r, u)?.then_some(Change::Route4(Added, r))
            }
            Mapped::Route6(r, u) => {
                let r = attach(&t, r)?;
                upsert_route(&mut self.writers.fib6, &r, u)?.then_some(Change::Route6(Added, r))
            }
            Mapped::Kernel4(k, u) => {
                let changed = self.kernel_route(&mut t.kernel_routes.v4(), k, u);
                self.count_kernel_routes();
                changed?.map(|(op, r)| Change::Route4(op, r))
            }
            Mapped::Kernel6(k, u) => {
                let changed = self.kernel_route(&mut t.kernel_routes.v6(), k, u);
                self.count_kernel_routes();
                changed?.map(|(op, r)| Change::Route6(op, r))
            }
            Mapped::Netconf(v6, ifindex, conf) => self
                .writers
                .devconf
                .update(v6, ifindex, conf)
                .then_some(Change::Netconf(Added, v6, ifindex)),
            Mapped::NetconfGone(ifindex) => self
                .writers
                .devconf
                .remove(ifindex)
                .then_some(Change::Netconf(Removed, false, ifindex)),
            Mapped::Nexthop(id, spec) => {
                let changed = t.nexthops.lock().upsert(id, spec);
                self.count_kernel_routes();
                changed.then_some(Change::Nexthop(Added, id))
            }
            Mapped::NexthopGone(id) => {
                let gone = t.nexthops.lock().remove(id);
                if gone.is_empty() {
                    return Ok(None);
                }
                // The kernel removes the routes through a deleted object without notifying.
                for r in routes_through(&t.fib4, &gone) {
                    if delete_route(&mut self.writers.fib4, &r)? {
                        self.changed(&Change::Route4(Removed, r));
                    }
                }
                for r in routes_through(&t.fib6, &gone) {
                    if delete_route(&mut self.writers.fib6, &r)? {
                        self.changed(&Change::Route6(Removed, r));
                    }
                }
                for g in gone.iter().filter(|&&g| g != id) {
                    self.changed(&Change::Nexthop(Removed, *g));
                }
                self.count_kernel_routes();
                Some(Change::Nexthop(Removed, id))
            }
            Mapped::Route4Gone(r) => {
                let Ok(r) = attach(&t, r) else {
                    // Its object is gone, and with it every route through it.
                    return Ok(None);
                };
                delete_route(&mut self.writers.fib4, &r)?.then_some(Change::Route4(Removed, r))
            }
            Mapped::Route6Gone(r) => {
                let Ok(r) = attach(&t, r) else {
                    return Ok(None);
                };
                delete_route(&mut self.writers.fib6, &r)?.then_some(Change::Route6(Removed, r))
            }
            Mapped::Neigh(n) => self
                .writers
                .neigh
                .upsert(n.clone())
                .then_some(Change::Neigh(Added, n)),
            Mapped::NeighGone { ifindex, addr } => self
                .writers
                .neigh
                .remove(ifindex, addr)
                .map(|n| Change::Neigh(Removed, n)),
            Mapped::Rule4(r) => {
                let kernel = self.kernel_rule(r.kernel.as_ref(), r.rule.priority);
                let changed = add_rule(&mut self.writers.fib4, &mut self.rules4, &t, r);
                if kernel {
                    self.count_kernel_routes();
                }
                changed?.map(|r| Change::Rule4(Added, r))
            }
            Mapped::Rule6(r) => {
                let kernel = self.kernel_rule(r.kernel.as_ref(), r.rule.priority);
                let changed = add_rule(&mut self.writers.fib6, &mut self.rules6, &t, r);
                if kernel {
                    self.count_kernel_routes();
                }
                changed?.map(|r| Change::Rule6(Added, r))
            }
            Mapped::Rule4Gone(r) => {
                let changed = del_rule(&mut self.writers.fib4, &mut self.rules4, &r);
                if r.kernel.is_some() {
                    self.count_kernel_routes();
                }
                changed?.map(|r| Change::Rule4(Removed, r))
            }
            Mapped::Rule6Gone(r) => {
                let changed = del_rule(&mut self.writers.fib6, &mut self.rules6, &r);
                if r.kernel.is_some() {
                    self.count_kernel_routes();
                }
                changed?.map(|r| Change::Rule6(Removed, r))
            }
            Mapped::Policy(spec) => self.upsert_policy(spec)?,
            Mapped::PolicyGone(k) => {
                match self
                    .writers
                    .policies
                    .delete(&k.selector, k.dir, k.ptype, k.if_id, k.mark)
                {
                    Ok(p) => Some(Change::Policy(Removed, p)),
                    Err(policy_tree::Error::NotFound) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            Mapped::PolicyIndexGone(index) => match self.writers.policies.delete_by_index(index) {
                Ok(p) => Some(Change::Policy(Removed, p)),
                Err(policy_tree::Error::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            Mapped::PolicyFlush(ptype) => {
                (self.writers.policies.flush(ptype) > 0).then_some(Change::PolicyFlush(ptype))
            }
            Mapped::PolicyDefaults(block) => {
                let db = &mut self.writers.policies;
                let dirs = policy_tree::Direction::ALL;
                if dirs
                    .iter()
                    .all(|&d| db.default_blocks(d) == block[d as usize])
                {
                    return Ok(None);
                }
                for d in dirs {
                    db.set_default_block(d, block[d as usize]);
                }
                Some(Change::PolicyDefaults(block))
            }
            Mapped::PolicyHThresh(h) => {
                if t.policies.hthresh() == h {
                    return Ok(None);
                }
                self.writers.policies.set_hthresh(h)?;
                Some(Change::PolicyHThresh(h))
            }
            Mapped::Ignored(i) => {
                self.counters.ignored(i.name());
                return Ok(None);
            }
        })
        .inspect(|_| {
            if !rule {
                return;
            }
            let custom = t.fib4.has_custom_rules() || t.fib6.has_custom_rules();
            if custom == t.generation.snapshot().enabled {
                t.generation.set_custom_rules(custom);
            }
        })
    }

    /// Logs the first kernel rule of each kind the FIB cannot represent (whether `kernel`
    /// is one: then true).
    fn kernel_rule(&mut self, kernel: Option<&crate::map::KernelRule>, priority: u32) -> bool {
        let Some(k) = kernel else {
            return false;
        };
        if self.logged_kinds.insert(k.reason) {
            tracing::warn!(
                kind = k.reason,
                priority,
                "a kernel rule the FIB cannot represent: the kernel decides for every flow it \
                 could match (further rules of this kind are counted in the stats as \
                 kernel_decides, not logged)"
            );
        }
        true
    }

    /// Adds (`upsert` is `Some`) or removes a kernel route the FIB cannot represent: its
    /// stand-in is inserted with the first kernel route behind it (before the routes of the
    /// same key: "kernel decides" wins a tie) and deleted with the last.
    fn kernel_route<K: FibOf>(
        &mut self,
        book: &mut KernelRoutes<K>,
        k: KernelRoute<K>,
        upsert: Option<Upsert>,
    ) -> Result<Option<(ChangeOp, Route<K>)>, MapError> {
        if upsert.is_none() {
            return Ok(match book.remove(&k) {
                StandInChange::Delete => delete_route(K::fib(&mut self.writers), &k.route)?
                    .then_some((ChangeOp::Removed, k.route)),
                _ => None,
            });
        }
        if self.logged_kinds.insert(k.reason) {
            tracing::warn!(
                kind = k.reason,
                route = ?(k.route.prefix, k.route.plen, k.route.table),
                "a kernel route the FIB cannot represent: the kernel decides for its prefix \
                 (further routes of this kind are counted in the stats as kernel_decides, \
                 not logged)"
            );
        }
        if book.add(&k) != StandInChange::Insert {
            return Ok(None);
        }
        let fib = K::fib(&mut self.writers);
        fib.table_or_create(k.route.table);
        match fib.insert(&k.route, InsertFlags::PREPEND) {
            Ok(()) => Ok(Some((ChangeOp::Added, k.route))),
            Err(RouteError::Exists) => Ok(None),
            Err(e) => {
                book.remove(&k);
                Err(e.into())
            }
        }
    }

    /// Publishes how many kernel routes stand behind stand-ins, by kind.
    /// Nexthop objects the FIB cannot represent are counted too (by their reason,
    /// `nexthop-encap`, `nexthop-group-type`): the routes through them are handed to the kernel;
    /// and so are rules (`rule-dport`, `rule-uidrange`, ...): the flows they could match are.
    fn count_kernel_routes(&self) {
        let mut counts = self.tables.kernel_routes.counts();
        for (_, e) in self.tables.nexthops.lock().iter() {
            if let crate::map::NexthopSpec::Unrepresentable(why) = e.spec {
                *counts.entry(why).or_default() += 1;
            }
        }
        let rules4 = self
            .rules4
            .installed
            .keys()
            .filter_map(|e| e.kernel.as_ref());
        let rules6 = self
            .rules6
            .installed
            .keys()
            .filter_map(|e| e.kernel.as_ref());
        for k in rules4.chain(rules6) {
            *counts.entry(k.reason).or_default() += 1;
        }
        *self
            .counters
            .kernel_decides
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = counts;
    }

    fn add_addr(&mut self, a: AddrEntry) -> Applied {
        fn one<A: addr_table::Family + Copy + PartialEq>(
            table: &mut addr_table::AddrWriter,
            e: IfAddr<A>,
        ) -> Result<bool, MapError> {
            match table.add(e) {
                Ok(_) => Ok(true),
                Err(AddrError::Exists) => {
                    let mut changed = false;
                    table.update(e.addr, e.prefix_len, e.ifindex, |cur| {
                        let secondary = cur.flags.contains(addr_table::IfaFlags::SECONDARY);
                        let mut want = e;
                        if secondary {
                            want.flags = want.flags.with(addr_table::IfaFlags::SECONDARY);
                        }
                        // Lifetimes are deadlines from the message's arrival: a change of a
                        // second is not a change.
                        let same = cur.scope == want.scope
                            && cur.flags == want.flags
                            && cur.label == want.label
                            && cur.valid_until.is_some() == want.valid_until.is_some()
                            && cur.preferred_until.is_some() == want.preferred_until.is_some();
                        if !same {
                            changed = true;
                        }
                        cur.scope = want.scope;
                        cur.flags = want.flags;
                        cur.label = want.label;
                        cur.valid_until = want.valid_until;
                        cur.preferred_until = want.preferred_until;
                    })?;
                    Ok(changed)
                }
                Err(e) => Err(e.into()),
            }
        }
        let changed = match &a {
            AddrEntry::V4(e) => one(&mut self.writers.addrs, *e)?,
            AddrEntry::V6(e) => one(&mut self.writers.addrs, *e)?,
        };
        Ok(changed.then_some(Change::Addr(ChangeOp::Added, a)))
    }

    /// A policy as the kernel reports it (new, updated or dumped): unchanged when the same
    /// index, priority and action are there; a policy of the same identity under another
    /// index (deleted and added again while events were lost) is replaced by a new one; else
    /// an update, which keeps the list place when the priority is unchanged, as the kernel's.
    fn upsert_policy(&mut self, spec: policy_tree::PolicySpec) -> Applied {
        use ChangeOp::{Added, Removed};
        let db = Arc::clone(&self.tables.policies);
        let guard = crossbeam_epoch::pin();
        let old = db
            .get(
                &spec.selector,
                spec.dir,
                spec.ptype,
                spec.if_id,
                spec.mark,
                &guard,
            )
            .copied();
        drop(guard);
        if let Some(p) = old {
            if Some(p.index) == spec.index && p.priority == spec.priority && p.action == spec.action
            {
                return Ok(None);
            }
            if spec.index.is_some_and(|i| i != p.index) {
                self.writers.policies.delete_by_index(p.index)?;
                self.changed(&Change::Policy(Removed, p));
            }
        }
        // An index held by a policy the kernel no longer has (events lost): that one is gone.
        if let Some(index) = spec.index {
            if let Some(stale) = db.get_by_index(index) {
                if old.is_none_or(|p| p.index != index) {
                    self.writers.policies.delete_by_index(index)?;
                    self.changed(&Change::Policy(Removed, stale));
                }
            }
        }
        if spec.action == policy_tree::Action::Punt {
            self.counters.ignored("policy-punt");
            tracing::warn!(
                index = spec.index,
                "xfrm policy the mirror cannot evaluate: what it matches goes to the kernel"
            );
        }
        Ok(Some(Change::Policy(
            Added,
            self.writers.policies.update(spec)?,
        )))
    }

    /// Re-resolves the interface names of rules after a link appeared, went or was renamed.
    fn relink_rules(&mut self) {
        let t = self.tables.clone();
        let changes4 = relink(&mut self.writers.fib4, &mut self.rules4, &t);
        let changes6 = relink(&mut self.writers.fib6, &mut self.rules6, &t);
        for c in changes4.into_iter().map(|(op, r)| Change::Rule4(op, r)) {
            self.changed(&c);
        }
        for c in changes6.into_iter().map(|(op, r)| Change::Rule6(op, r)) {
            self.changed(&c);
        }
    }

    /// Removes what the dump of `kind` did not hold (a resynchronisation).
    pub fn sweep(&mut self, kind: Kind, seen: &Seen) {
        let t = self.tables.clone();
        let mut gone = Vec::new();
        match kind {
            Kind::Link => {
                for l in t.links.to_vec() {
                    if !seen.links.contains(&l.ifindex) {
                        gone.push(Mapped::LinkGone(l.ifindex));
                    }
                }
            }
            Kind::Addr => {
                let guard = crossbeam_epoch::pin();
                for (_, list) in t.addrs.interfaces::<Ipv4Addr>(&guard) {
                    for a in list.iter().rev() {
                        if !seen
                            .addrs
                            .contains(&(a.ifindex, IpAddr::V4(a.addr), a.prefix_len))
                        {
                            gone.push(Mapped::AddrGone(AddrEntry::V4(*a)));
                        }
                    }
                }
                for (_, list) in t.addrs.interfaces::<Ipv6Addr>(&guard) {
                    for a in list {
                        if !seen
                            .addrs
                            .contains(&(a.ifindex, IpAddr::V6(a.addr), a.prefix_len))
                        {
                            gone.push(Mapped::AddrGone(AddrEntry::V6(*a)));
                        }
                    }
                }
            }
            Kind::Route4 => {
                let unseen = t.kernel_routes.v4().unseen(&seen.kernel4);
                gone.extend(unseen.into_iter().map(|k| Mapped::Kernel4(k, None)));
                // After a dump into an empty FIB, nothing but the dump's routes is there.
                if !self.into_empty4 {
                    let stale = stale_routes(&t.fib4, &seen.routes4);
                    gone.extend(stale.into_iter().map(Mapped::Route4Gone));
                }
            }
            Kind::Route6 => {
                let unseen = t.kernel_routes.v6().unseen(&seen.kernel6);
                gone.extend(unseen.into_iter().map(|k| Mapped::Kernel6(k, None)));
                if !self.into_empty6 {
                    let stale = stale_routes(&t.fib6, &seen.routes6);
                    gone.extend(stale.into_iter().map(Mapped::Route6Gone));
                }
            }
            Kind::Neigh => {
                for n in t.neigh.to_vec() {
                    if !seen.neigh.contains(&(n.ifindex, n.addr)) {
                        gone.push(Mapped::NeighGone {
                            ifindex: n.ifindex,
                            addr: n.addr,
                        });
                    }
                }
            }
            Kind::Rule4 => {
                let stale = stale_rules(&t.fib4, &mut self.rules4, &seen.rules4);
                for r in stale {
                    if self.writers.fib4.delete_rule(&r).is_ok() {
                        inc(&self.counters.swept);
                        self.changed(&Change::Rule4(ChangeOp::Removed, r));
                    }
                }
                self.count_kernel_routes();
            }
            Kind::Rule6 => {
                let stale = stale_rules(&t.fib6, &mut self.rules6, &seen.rules6);
                for r in stale {
                    if self.writers.fib6.delete_rule(&r).is_ok() {
                        inc(&self.counters.swept);
                        self.changed(&Change::Rule6(ChangeOp::Removed, r));
                    }
                }
                self.count_kernel_routes();
            }
            Kind::Nexthop => {
                let ids: Vec<u32> = t.nexthops.lock().iter().map(|(id, _)| id).collect();
                for id in ids {
                    if !seen.nexthops.contains(&id) {
                        gone.push(Mapped::NexthopGone(id));
                    }
                }
            }
            // Devices' switches go with their devices (`RTM_DELNETCONF`); a stale entry of a
            // device that is gone is never asked for.
            Kind::Netconf4 | Kind::Netconf6 => {}
            Kind::Policy => {
                for p in t.policies.dump() {
                    let key = PolicyKey {
                        selector: p.selector,
                        dir: p.dir,
                        ptype: p.ptype,
                        if_id: p.if_id,
                        mark: p.mark,
                    };
                    if !seen.policies.contains(&key) {
                        gone.push(Mapped::PolicyGone(key));
                    }
                }
            }
        }
        for m in gone {
            if let Ok(Some(c)) = self.apply_inner(m) {
                inc(&self.counters.swept);
                self.changed(&c);
            }
        }
    }
}

/// Gives a route through a nexthop object (mapped with a stand-in of that id) the mirrored
/// object of its id. The kernel reports a unicast route as a blackhole while its object is a
/// blackhole (`fib_dump_info`); such a route is unicast again here, so that it follows a
/// later replace of the object. A route added as `blackhole ... nhid N` through an object
/// that is not a blackhole stays a blackhole.
fn attach<K: ObjectFamily>(t: &MirroredTables, mut r: Route<K>) -> Result<Route<K>, MapError> {
    if let Some(stand_in) = &r.info.nh_object {
        let id = stand_in.id();
        let object = t
            .nexthops
            .lock()
            .object::<K>(id)
            .ok_or(MapError::NexthopObject(id))?;
        if r.route_type == RouteType::Blackhole
            && object.snapshot() == fib_trie::NexthopGroup::Blackhole
        {
            r.route_type = RouteType::Unicast;
        }
        r.info.nh_object = Some(object);
    }
    Ok(r)
}

/// The routes of `fib` through any of the objects `ids` (a walk of every table, as the
/// kernel's `fib_flush` after a nexthop removal).
fn routes_through<K: IpKey>(fib: &Fib<K>, ids: &[u32]) -> Vec<Route<K>> {
    let guard = crossbeam_epoch::pin();
    let mut out = Vec::new();
    for id in fib.table_ids() {
        if let Some(table) = fib.table(id, &guard) {
            for (prefix, plen, a) in table.dump(&guard) {
                if a.info
                    .nh_object
                    .as_ref()
                    .is_some_and(|o| ids.contains(&o.id()))
                {
                    out.push(RouteId::of_alias(prefix, plen, a).into_route());
                }
            }
        }
    }
    out
}

/// Routes of `fib` that `seen` does not hold.
fn stale_routes<K: IpKey>(fib: &Fib<K>, seen: &HashSet<u64>) -> Vec<Route<K>> {
    let guard = crossbeam_epoch::pin();
    let mut out = Vec::new();
    for id in fib.table_ids() {
        if let Some(table) = fib.table(id, &guard) {
            for (prefix, plen, a) in table.dump(&guard) {
                if !seen.contains(&digest(prefix, plen, a.table, a.tos, a.route_type, &a.info)) {
                    out.push(RouteId::of_alias(prefix, plen, a).into_route());
                }
            }
        }
    }
    out
}

fn flags_of(u: Upsert) -> InsertFlags {
    match u {
        Upsert::Dump | Upsert::Append => InsertFlags::APPEND,
        Upsert::Prepend => InsertFlags::PREPEND,
        Upsert::Replace => InsertFlags::REPLACE,
    }
}

fn same_hop<K: PartialEq>(a: &NextHop<K>, b: &NextHop<K>) -> bool {
    a.gateway == b.gateway && a.ifindex == b.ifindex
}

/// The aliases of `r`'s table, prefix, length, tos and metric (its "key" in the kernel's words).
fn same_key<K: IpKey>(fib: &Fib<K>, r: &Route<K>) -> Vec<Route<K>> {
    let guard = crossbeam_epoch::pin();
    let Some(table) = fib.table(r.table, &guard) else {
        return Vec::new();
    };
    let slen = K::BITS - r.plen;
    // While local and main share one trie, it holds both tables' routes: keep this table's.
    table
        .trie(&guard)
        .get(r.prefix, &guard)
        .unwrap_or_default()
        .iter()
        .filter(|a| {
            a.value.table == r.table
                && a.slen == slen
                && a.value.tos == r.tos
                && a.value.info.priority == r.info.priority
        })
        .map(|a| RouteId::of_alias(r.prefix, r.plen, &a.value).into_route())
        .collect()
}

/// Inserts a route; `Ok(false)` when it was already there.
///
/// IPv6 merges gateway routes of one key into one multipath route and notifies the merged
/// route whole, so an IPv6 gateway route replaces the gateway route of its key.
fn upsert_route<K: IpKey>(
    fib: &mut FibWriter<K>,
    r: &Route<K>,
    u: Upsert,
) -> Result<bool, MapError> {
    if K::FAMILY == libc::AF_INET6 as u8 && u != Upsert::Replace && has_gateway(r) {
        if let Some(old) = same_key(fib, r)
            .into_iter()
            .find(|o| o.route_type == r.route_type && has_gateway(o))
        {
            if old == *r {
                return Ok(false);
            }
            fib.delete(&RouteSelector::exact(&old))?;
            fib.table_or_create(r.table);
            fib.insert(r, InsertFlags::APPEND)?;
            return Ok(true);
        }
    }
    fib.table_or_create(r.table);
    match fib.insert(r, flags_of(u)) {
        Ok(()) => Ok(true),
        Err(RouteError::Exists) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn has_gateway<K>(r: &Route<K>) -> bool {
    r.info.nexthops.iter().any(|h| h.gateway.is_some())
}

/// Deletes a route; `Ok(false)` when it was not there. An IPv6 delete of some next hops of
/// a multipath route removes those next hops.
fn delete_route<K: IpKey>(fib: &mut FibWriter<K>, r: &Route<K>) -> Result<bool, MapError> {
    match fib.delete(&RouteSelector::exact(r)) {
        Ok(_) => return Ok(true),
        Err(RouteError::NotFound) => {}
        Err(e) => return Err(e.into()),
    }
    if K::FAMILY != libc::AF_INET6 as u8 || r.info.nexthops.is_empty() {
        return Ok(false);
    }
    let Some(old) = same_key(fib, r).into_iter().find(|o| {
        o.route_type == r.route_type
            && o.info.nexthops.len() > r.info.nexthops.len()
            && r.info
                .nexthops
                .iter()
                .all(|h| o.info.nexthops.iter().any(|x| same_hop(h, x)))
    }) else {
        return Ok(false);
    };
    let mut rest = old.clone();
    rest.info
        .nexthops
        .retain(|x| !r.info.nexthops.iter().any(|h| same_hop(h, x)));
    fib.delete(&RouteSelector::exact(&old))?;
    fib.insert(&rest, InsertFlags::APPEND)?;
    Ok(true)
}

fn resolve_name(t: &MirroredTables, name: &Option<String>) -> u32 {
    name.as_ref().map_or(0, |n| {
        t.links
            .by_name(n, &crossbeam_epoch::pin())
            .map_or(DETACHED_IFINDEX, |l: &Link| l.ifindex)
    })
}

fn resolved<K: IpKey>(t: &MirroredTables, e: &RuleEntry<K>) -> FibRule<K> {
    let mut r = e.rule.clone();
    r.iif = resolve_name(t, &e.iifname);
    r.oif = resolve_name(t, &e.oifname);
    r
}

fn add_rule<K: IpKey>(
    fib: &mut FibWriter<K>,
    book: &mut RuleBook<K>,
    t: &MirroredTables,
    e: RuleEntry<K>,
) -> Result<Option<FibRule<K>>, MapError> {
    if book.installed.contains_key(&e) {
        return Ok(None);
    }
    let rule = resolved(t, &e);
    let changed = match fib.add_rule(rule.clone()) {
        Ok(()) => true,
        // The default rules exist from the start.
        Err(RuleError::Exists) => false,
        Err(err) => return Err(err.into()),
    };
    book.installed.insert(e, rule.clone());
    Ok(changed.then_some(rule))
}

fn del_rule<K: IpKey>(
    fib: &mut FibWriter<K>,
    book: &mut RuleBook<K>,
    e: &RuleEntry<K>,
) -> Result<Option<FibRule<K>>, MapError> {
    let Some(rule) = book.installed.remove(e) else {
        // Never seen as added (a default rule, or a rule we refused): delete what it names.
        let mut plain = e.rule.clone();
        if e.iifname.is_some() || e.oifname.is_some() {
            return Ok(None);
        }
        plain.iif = 0;
        return Ok(fib.delete_rule(&plain).ok().map(|()| plain));
    };
    if book.installed.values().any(|r| *r == rule) {
        // Another kernel rule stands behind the same "kernel decides" stand-in.
        return Ok(None);
    }
    match fib.delete_rule(&rule) {
        Ok(()) => Ok(Some(rule)),
        Err(RuleError::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

fn relink<K: IpKey>(
    fib: &mut FibWriter<K>,
    book: &mut RuleBook<K>,
    t: &MirroredTables,
) -> Vec<(ChangeOp, FibRule<K>)> {
    let mut changes = Vec::new();
    let moved: Vec<(RuleEntry<K>, FibRule<K>)> = book
        .installed
        .iter()
        .filter(|(e, _)| e.iifname.is_some() || e.oifname.is_some())
        .filter_map(|(e, installed)| {
            let now = resolved(t, e);
            (now != *installed).then(|| (e.clone(), now))
        })
        .collect();
    for (e, now) in moved {
        let Some(installed) = book.installed.insert(e, now.clone()) else {
            continue;
        };
        // A "kernel decides" stand-in other kernel rules still stand behind stays.
        if !book.installed.values().any(|r| *r == installed) && fib.delete_rule(&installed).is_ok()
        {
            changes.push((ChangeOp::Removed, installed));
        }
        if fib.add_rule(now.clone()).is_ok() {
            changes.push((ChangeOp::Added, now));
        }
    }
    changes
}

/// Rules of `fib` no dumped entry installed; forgets book entries the dump did not hold.
fn stale_rules<K: IpKey>(
    fib: &Fib<K>,
    book: &mut RuleBook<K>,
    seen: &HashSet<RuleEntry<K>>,
) -> Vec<FibRule<K>> {
    book.installed.retain(|e, _| seen.contains(e));
    let keep: HashSet<&FibRule<K>> = book.installed.values().collect();
    let guard = crossbeam_epoch::pin();
    fib.rules(&guard)
        .iter()
        .filter(|r| !keep.contains(r))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applier() -> Applier {
        let (tables, writers) = MirroredTables::new(addr_table::NetnsId(1), false);
        Applier::new(tables, writers, None, Arc::new(Counters::default()))
    }

    fn route<K: IpKey>(
        prefix: K,
        plen: u8,
        table: u32,
        metric: u32,
        hops: &[(Option<K>, u32)],
    ) -> Route<K> {
        let mut r = Route::unicast(
            prefix,
            plen,
            table,
            hops.iter().map(|&(g, i)| NextHop::new(g, i)).collect(),
        );
        r.info.priority = metric;
        r
    }

    fn dump<K: IpKey>(fib: &Fib<K>) -> Vec<(u32, K, u8, FibAlias<K>)> {
        let guard = crossbeam_epoch::pin();
        let mut out = Vec::new();
        for id in fib.table_ids() {
            for (k, l, a) in fib.table(id, &guard).unwrap().dump(&guard) {
                out.push((id, k, l, a.clone()));
            }
        }
        out
    }

    /// A dump into empty tables is loaded at its end and gives the tables that applying each
    /// entry as it came gives: same routes in the same order, IPv6 gateway routes of one key
    /// merged as one by one, every route reported once.
    #[test]
    fn an_initial_dump_loads_at_once_as_one_by_one() {
        let v4 = vec![
            route(0x0a00_0000u32, 8, 254, 0, &[(Some(0x0a00_0001), 2)]),
            route(0x0a00_0000, 8, 254, 10, &[(None, 3)]),
            route(0x0a00_0000, 8, 254, 0, &[(None, 4)]),
            route(0x0a00_0001, 32, 255, 0, &[(None, 2)]),
            route(0x0a00_0000, 8, 100, 0, &[(None, 5)]),
            route(0x0a00_0000, 8, 254, 0, &[(Some(0x0a00_0001), 2)]),
        ];
        let v6 = vec![
            route(0x2001_0db8u128 << 96, 32, 254, 1024, &[(Some(1), 2)]),
            route(0x2001_0db8u128 << 96, 32, 254, 1024, &[(Some(2), 3)]),
            route(0x2001_0db9u128 << 96, 32, 254, 1024, &[(None, 3)]),
        ];
        let mut bulk = applier();
        let mut one = applier();
        bulk.begin_dump(Kind::Route4);
        bulk.begin_dump(Kind::Route6);
        for r in &v4 {
            bulk.apply(Mapped::Route4(r.clone(), Upsert::Dump));
            one.apply(Mapped::Route4(r.clone(), Upsert::Dump));
        }
        for r in &v6 {
            bulk.apply(Mapped::Route6(r.clone(), Upsert::Dump));
            one.apply(Mapped::Route6(r.clone(), Upsert::Dump));
        }
        assert!(is_empty(&bulk.tables.fib4), "kept until the dump ends");
        bulk.end_dump(Kind::Route4);
        bulk.end_dump(Kind::Route6);
        assert_eq!(dump(&bulk.tables.fib4), dump(&one.tables.fib4));
        assert_eq!(dump(&bulk.tables.fib6), dump(&one.tables.fib6));
        assert_eq!(dump(&bulk.tables.fib6).len(), 2);
        // A dump into tables that hold routes applies entries one by one.
        bulk.begin_dump(Kind::Route4);
        assert!(bulk.bulk4.is_none());
        let extra = route(0x0b00_0000u32, 8, 254, 0, &[(None, 2)]);
        bulk.apply(Mapped::Route4(extra, Upsert::Dump));
        assert_eq!(
            dump(&bulk.tables.fib4).len(),
            dump(&one.tables.fib4).len() + 1
        );
    }
}
