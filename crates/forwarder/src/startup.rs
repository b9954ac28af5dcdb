//! What each engine needs at start-up, as an [`EngineSpec`]: for the routing engine the
//! control plane (the netlink mirror of the namespace, the dataplane's [`Tables`] over the
//! mirror's, the configured in-dataplane UDP endpoints, one [`Router`] per queue) and what it
//! adds to the reports (the pipeline's counters per queue, the mirror's counters, the
//! endpoints' counters); for the bare engine its port pairs.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use dataplane::{Queue, Tables};
use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
use udp_socktab::{NetnsConfig, SockTable, TableConfig};

use crate::board::CounterBoard;
use crate::cache_report::CacheBoard;
use crate::engine::{EngineSpec, LiveConfig};
use crate::locals::LocalAddrFeed;
use crate::router::{Resolve, Router};
use crate::serve::Query;
use crate::stats::Stats;

/// How long `xfwd run` waits for the mirror's first synchronisation (a full BGP table takes
/// seconds).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `xfwd show cache` waits for every run loop to copy its route cache (an idle loop
/// turns at least every 50 ms).
const CACHE_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts the netlink mirror of the calling thread's namespace, waits until it is synced,
/// and returns the routing engine over its tables (one [`Router`] per queue, each a
/// `dataplane::Queue` with `config` and its queue id). The mirror's observer feeds the XDP
/// program's local-address set. The mirror stops when the returned spec (its report holds the
/// handle) is dropped.
///
/// Routes out of interfaces other than `served` (the ifindexes of `--iface`) are punted: the
/// kernel forwards those packets.
///
/// `endpoints` (the `[[endpoint]]` tables) are bound in the socket table over the mirror's
/// local addresses, each checked against the namespace's kernel sockets
/// ([`crate::endpoints::open`]); every router answers them, and their ports go to the XDP
/// program ([`EngineSpec::udp_ports`]).
///
/// # Errors
/// When the configuration is out of range, the mirror cannot start or sync, the socket table
/// cannot be made, or an endpoint cannot be bound (`EADDRINUSE`: a kernel socket or another
/// endpoint holds its port; `EADDRNOTAVAIL`: not a local address).
pub fn routing(
    config: dataplane::Config,
    served: Arc<dataplane::Served>,
    endpoints: &[crate::endpoints::EndpointSpec],
) -> anyhow::Result<EngineSpec<Router>> {
    config.validate().context("pipeline configuration")?;
    let feed = Arc::new(LocalAddrFeed::default());
    let options = MirrorOptions {
        observer: Some(feed.clone()),
        ..MirrorOptions::default()
    };
    let started = Instant::now();
    let mirror =
        Mirror::start(NetnsSpec::Current, options).context("starting the netlink mirror")?;
    mirror
        .wait_synced(SYNC_TIMEOUT)
        .context("waiting for the netlink mirror's first synchronisation")?;
    let m = mirror.tables().clone();
    tracing::info!(
        links = m.links.len(),
        neighbours = m.neigh.len(),
        local_addresses = feed.addresses().len(),
        seconds = started.elapsed().as_secs_f64(),
        "kernel state mirrored"
    );
    let (sockets, mut writer) =
        SockTable::new(TableConfig::default()).context("creating the UDP socket table")?;
    let sock_netns = writer
        .add_netns(NetnsConfig::default())
        .context("creating the UDP socket table")?;
    let tables = dataplane_tables(
        &m,
        sockets,
        sock_netns,
        Some(served.clone()),
        icmp_peer_limiter(),
    );
    let icmp_peers = tables.icmp_peers.clone();
    let (endpoints, udp_ports) =
        crate::endpoints::open(writer, tables.clone(), &feed.addresses(), endpoints)?;
    let board = CounterBoard::default();
    let resolver = mirror.resolver();
    let live = Arc::new(LiveConfig::default());
    let caches = Arc::new(CacheBoard::default());
    let make = {
        let board = board.clone();
        let live = live.clone();
        let caches = caches.clone();
        let tables = tables.clone();
        let endpoints = endpoints.clone();
        move |queue: u32| -> anyhow::Result<Router> {
            let dp = Queue::new(dataplane::Config {
                queue_id: queue,
                ..config
            })?;
            let counters = board.register(queue);
            let resolver = resolver.clone();
            let resolve: Resolve = Box::new(move |ifindex, addr| resolver.request(ifindex, addr));
            let rx = endpoints.lock().unwrap_or_else(|e| e.into_inner()).rx();
            Ok(Router::new(dp, tables.clone(), resolve, counters)
                .follow(live.clone())
                .report_cache(caches.clone())
                .with_endpoints(rx))
        }
    };
    let generation = {
        let g = m.generation.clone();
        move || g.snapshot().generation
    };
    let mirror = Arc::new(mirror);
    let rebuilds = {
        let mirror = mirror.clone();
        move || mirror.compactions()
    };
    let query: crate::serve::QueryFn = {
        let mirror = mirror.clone();
        let live = live.clone();
        // Read at each question: a re-created interface has a new ifindex.
        let served = served.clone();
        Arc::new(move |query: &Query| match query {
            Query::Show { what, json } => match what.table() {
                Some(table) => Ok(crate::query::show_table(mirror.tables(), table, *json)),
                None => {
                    let entries = caches.ask(CACHE_ANSWER_TIMEOUT)?;
                    Ok(crate::query::show_cache(mirror.tables(), &entries, *json))
                }
            },
            Query::RouteGet { args, json } => {
                let pipeline = crate::explain::explain(
                    &tables,
                    &live.current(config),
                    args,
                    &served.ifindexes(),
                );
                crate::query::route_get(mirror.tables(), args, pipeline, *json)
            }
        })
    };
    let report = move |stats: &mut Stats| {
        stats.pipeline = board.snapshots();
        stats.endpoints = endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .list()
            .iter()
            .map(crate::endpoints::EndpointSnapshot::from)
            .collect();
        stats.memory = crate::trim::memory();
        let ms = mirror.stats();
        stats.mirror = vec![
            ("applied".into(), ms.applied),
            ("unchanged".into(), ms.unchanged),
            ("swept".into(), ms.swept),
            ("dumps".into(), ms.dumps),
            ("dump_restarts".into(), ms.dump_restarts),
            ("resyncs".into(), ms.resyncs),
            ("route_redumps".into(), ms.route_redumps),
            ("compactions".into(), ms.compactions),
            ("behind".into(), ms.behind),
            ("overruns".into(), ms.overruns),
            ("errors".into(), ms.errors.values().sum()),
            ("resolve_requested".into(), ms.resolve_requested),
            ("resolve_sent".into(), ms.resolve_sent),
            ("resolve_errors".into(), ms.resolve_errors),
            ("resolve_rate_limited".into(), ms.resolve_rate_limited),
            ("resolve_queue_full".into(), ms.resolve_queue_full),
        ];
        stats.kernel_decides = ms
            .kernel_decides
            .iter()
            .map(|(kind, n)| ((*kind).to_owned(), *n))
            .collect();
    };
    Ok(EngineSpec {
        mode: "router",
        make: Arc::new(make),
        generation: Some(Arc::new(generation)),
        rebuilds: Some(Arc::new(rebuilds)),
        report: Arc::new(report),
        locals: Some(feed),
        live: Some(live),
        query: Some(query),
        served: Some(served),
        udp_ports: Some(udp_ports),
        icmp_peers: Some(icmp_peers),
    })
}

/// The bare engine (`xfwd run --bare`) over `routes`, its counters reported like the
/// router's.
pub fn bare(routes: Vec<crate::bare::BareRoute>) -> EngineSpec<crate::bare::Bare> {
    let board = CounterBoard::default();
    let make = {
        let board = board.clone();
        move |queue: u32| {
            Ok(crate::bare::Bare::new(
                routes.clone(),
                board.register(queue),
            ))
        }
    };
    EngineSpec {
        mode: "bare",
        make: Arc::new(make),
        generation: None,
        rebuilds: None,
        report: Arc::new(move |stats: &mut Stats| stats.pipeline = board.snapshots()),
        locals: None,
        live: None,
        query: None,
        served: None,
        udp_ports: None,
        icmp_peers: None,
    }
}

/// The namespace's per-destination ICMP limits, set from its sysctls
/// ([`read_icmp_sysctls`]); the instance reads them again every second.
/// The dataplane's [`Tables`] over the mirror's tables `m`, as the routing engine builds them:
/// the mirror's links, neighbours, addresses, FIBs, policies, generation and forwarding
/// switches shared (not copied), with the UDP socket table `sockets` (where this namespace is
/// `sock_netns`), the interfaces the pipeline may transmit on (`served`; `None`: all) and the
/// namespace's per-destination ICMP limiter.
///
/// ```no_run
/// use std::sync::Arc;
/// use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
/// use udp_socktab::{NetnsConfig, SockTable, TableConfig};
///
/// let mirror = Mirror::start(NetnsSpec::Current, MirrorOptions::default())?;
/// let (sockets, mut writer) = SockTable::new(TableConfig::default())?;
/// let netns = writer.add_netns(NetnsConfig::default())?;
/// let peers = dataplane::PeerLimiter::new(dataplane::ICMP_PEER_SLOTS);
/// let tables = forwarder::startup::dataplane_tables(mirror.tables(), sockets, netns, None, peers);
/// assert!(tables.served.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dataplane_tables(
    m: &netlink_mirror::MirroredTables,
    sockets: Arc<SockTable>,
    sock_netns: udp_socktab::NetnsId,
    served: Option<Arc<dataplane::Served>>,
    icmp_peers: dataplane::PeerLimiter,
) -> Tables {
    Tables {
        links: m.links.clone(),
        neigh: m.neigh.clone(),
        addrs: m.addrs.clone(),
        fib4: m.fib4.clone(),
        fib6: m.fib6.clone(),
        policies: m.policies.clone(),
        sockets,
        generation: m.generation.clone(),
        sock_netns,
        served,
        devconf: m.devconf.clone(),
        icmp_peers: Arc::new(icmp_peers),
    }
}

fn icmp_peer_limiter() -> dataplane::PeerLimiter {
    let peers = dataplane::PeerLimiter::new(dataplane::ICMP_PEER_SLOTS);
    read_icmp_sysctls(&peers);
    peers
}

/// Sets `peers` from the calling thread's namespace's sysctls (`net.ipv4.icmp_ratelimit`,
/// `icmp_ratemask`, `net.ipv6.icmp.ratelimit`, `ratemask`); an unreadable or malformed one
/// sets the kernel's default. Four small reads of `/proc/sys`, two atomic stores each:
/// cheap enough for the link monitor to call every second, so that a changed sysctl takes
/// effect as in the kernel, without a restart.
///
/// ```
/// let peers = dataplane::PeerLimiter::new(64);
/// forwarder::startup::read_icmp_sysctls(&peers);
/// ```
pub fn read_icmp_sysctls(peers: &dataplane::PeerLimiter) {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let number = |path: &str| read(path).and_then(|s| s.trim().parse::<u32>().ok());
    peers.set_v4(
        number("/proc/sys/net/ipv4/icmp_ratelimit").unwrap_or(dataplane::DEFAULT_INTERVAL_MS),
        number("/proc/sys/net/ipv4/icmp_ratemask").unwrap_or(dataplane::DEFAULT_V4_RATEMASK),
    );
    peers.set_v6(
        number("/proc/sys/net/ipv6/icmp/ratelimit").unwrap_or(dataplane::DEFAULT_INTERVAL_MS),
        read("/proc/sys/net/ipv6/icmp/ratemask")
            .and_then(|s| parse_bitmap(&s))
            .unwrap_or(dataplane::DEFAULT_V6_RATEMASK),
    );
}

/// A kernel bitmap list (`0-1,3-127`) over bits 0-127; bits from 128 up are ignored (ICMPv6
/// informational types are never limited). `None` when malformed.
fn parse_bitmap(text: &str) -> Option<u128> {
    let mut bits = 0u128;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (from, to) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        for bit in from..=to.min(127) {
            bits |= 1 << bit;
        }
    }
    Some(bits)
}

#[cfg(test)]
mod icmp_limit_tests {
    use super::parse_bitmap;

    #[test]
    fn the_kernels_bitmap_lists_parse() {
        assert_eq!(
            parse_bitmap("0-1,3-127\n"),
            Some(dataplane::DEFAULT_V6_RATEMASK)
        );
        assert_eq!(parse_bitmap("\n"), Some(0));
        assert_eq!(parse_bitmap("1,3"), Some(0b1010));
        assert_eq!(parse_bitmap("0-255"), Some(u128::MAX));
        assert_eq!(parse_bitmap("x"), None);
    }
}
