//! The vector pipeline against the one-frame-at-a-time reference: random batches (both
//! families, VLAN tags, malformed frames, local, multipath, unreachable and held destinations,
//! sources with and without a route back, runs of one flow) with the tables changing between
//! batches (routes, addresses, links, neighbours, policies, rules, and the devices' forwarding
//! and `rp_filter` switches) must get identical verdicts, bytes, spare frames, hold-buffer
//! behaviour and counters; with in-dataplane endpoints (echo, STAMP, an embedder's socket)
//! after the pipeline, identical answers, deliveries and endpoint counters too.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use addr_table::IfAddr;
use common::*;
use dataplane::endpoint::{
    BindOptions, Endpoint, EndpointConfig, EndpointInfo, EndpointRx, Endpoints, ErrorEstimate,
    RecvMeta, Service,
};
use dataplane::{Config, Counters, Frame, HeapPool, Queue, Resolution, Tables, Verdict, VlanMode};
use fib_trie::{InsertFlags, NextHop, Route, RouteSelector, RouteType};
use neigh_table::{
    DevConf, DevConfWriter, Link, LinkFlags, NETCONF_ALL, NETCONF_DEFAULT, Neighbour, NudState,
    OperState,
};
use policy_tree::{
    Action, Direction, Mark, PolicySpec, PolicyType, PortMatch, Selector, TemplateId,
};
use proptest::prelude::*;

/// A source that a table change makes one of our own addresses.
const FLIP4: [u8; 4] = [10, 0, 2, 50];
/// A source without a route back (fails reverse-path filtering, strict or loose).
const NO_ROUTE_BACK4: [u8; 4] = [172, 16, 0, 9];

/// The MAC address the gateway 10.0.2.254 moves to ([`Change::GatewayMac`]).
const MOVED_GW_MAC: [u8; 6] = [2, 0, 0, 0, 0x5e, 0xfe];

/// The first byte of a source MAC that makes the test's frame arrive on OUT instead of IN.
const ARRIVES_ON_OUT: u8 = 0x06;

/// One frame as the batch strategy builds it.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let src4 = prop_oneof![
        4 => Just(HOST4),
        1 => Just(FLIP4),
        1 => Just(LOCAL4),
        1 => Just(NO_ROUTE_BACK4),
    ];
    let dst4 = prop_oneof![
        Just([8, 8, 8, 8]),
        Just([8, 8, 4, 4]),
        Just([8, 9, 1, 1]),
        Just([10, 0, 2, 7]),
        Just([10, 0, 2, 50]),
        Just([100, 64, 0, 1]),
        Just([100, 65, 0, 9]),
        Just([100, 66, 0, 1]),
        Just([100, 67, 0, 1]),
        Just([100, 70, 3, 4]),
        Just([100, 70, 9, 9]),
        Just([9, 9, 9, 9]),
        Just([192, 0, 2, 9]),
        Just([198, 51, 100, 1]),
        Just([203, 0, 113, 1]),
        Just(LOCAL4),
        any::<[u8; 4]>(),
    ];
    let src6 = prop_oneof![4 => Just(HOST6), 1 => Just("fe80::1"), 1 => Just(LOCAL6)];
    let dst6 = prop_oneof![
        Just("2001:db8:100::9"),
        Just("2001:db8:44::1"),
        Just("2001:db8:dead::1"),
        Just("2001:db8:bad::1"),
        Just("2001:db8:b1ac::1"),
        Just("2001:db8:2::77"),
        Just("2001:db8:9::1"),
        Just(LOCAL6),
    ];
    let ttl = prop_oneof![Just(0u8), Just(1), Just(2), Just(64)];
    let payload = prop_oneof![4 => 0usize..64, 1 => 500usize..1500];
    // 4789: the fixture's raw sockets; 7, 862, 5353: the endpoints of
    // `the_vector_pipeline_delivers_to_endpoints_as_the_reference`.
    let dport = prop_oneof![
        4 => Just(4789u16),
        4 => Just(53),
        1 => Just(7),
        1 => Just(862),
        1 => Just(5353),
    ];
    let base = prop_oneof![
        6 => (src4, dst4, ttl.clone(), dport.clone(), payload.clone(), any::<bool>()).prop_map(
            |(s, d, ttl, port, n, df)| {
                let mut f = udp4(s, d, ttl, port, n);
                if !df {
                    patch4(&mut f, |h| h.dont_fragment = false);
                }
                f
            }
        ),
        3 => (src6, dst6, ttl, dport, payload).prop_map(|(s, d, hop, port, n)| udp6(s, d, hop, port, n)),
        1 => proptest::collection::vec(any::<u8>(), 0..80),
    ];
    (
        base,
        0u8..11,
        any::<u16>(),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    )
        .prop_map(|(mut f, shape, tci, flips)| {
            match shape {
                // An 802.1Q tag.
                0 | 1 if f.len() >= 14 => {
                    let mut tag = vec![0x81, 0x00];
                    tag.extend_from_slice(&(tci & 0x0fff).to_be_bytes());
                    f.splice(12..12, tag);
                }
                // Malformed: bytes flipped, or cut short.
                2 if !f.is_empty() => {
                    for (at, byte) in flips {
                        let i = at % f.len();
                        f[i] = byte;
                    }
                }
                3 if !f.is_empty() => f.truncate(usize::from(tci) % f.len()),
                // For another host on the link (OUT's MAC arriving on IN), or broadcast.
                8 if f.len() >= 14 => f[..6].copy_from_slice(&OUT_MAC),
                9 if f.len() >= 14 => f[..6].fill(0xff),
                // Arriving on OUT, for OUT's MAC (the parse stage's device is the vector's
                // first frame's: frames of another device take its general path).
                10 if f.len() >= 14 => {
                    f[..6].copy_from_slice(&OUT_MAC);
                    f[6] = ARRIVES_ON_OUT;
                }
                _ => {}
            }
            f
        })
}

/// A batch: frames, some repeated back to back (runs of one destination), the repeats of an
/// IPv4 frame from the same or from other hosts.
fn batch() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec((frame(), 1usize..4, any::<bool>()), 1..40).prop_map(|runs| {
        runs.into_iter()
            .flat_map(|(f, n, other_hosts)| {
                (0..n).map(move |i| {
                    let mut f = f.clone();
                    let plain_v4 = f.len() >= 34
                        && f[12..14] == [0x08, 0x00]
                        && etherparse::Ipv4Header::from_slice(&f[14..]).is_ok();
                    if other_hosts && plain_v4 {
                        patch4(&mut f, |h| h.source[3] = h.source[3].wrapping_add(i as u8));
                    }
                    f
                })
            })
            .collect()
    })
}

/// A change the control plane publishes between batches (then bumps the generation).
#[derive(Clone, Copy, Debug)]
enum Change {
    /// 10.0.2.50 becomes one of ours on OUT, or stops being.
    OwnAddress,
    /// The neighbour 10.0.2.200 resolves, or goes back to incomplete.
    Neighbour,
    /// The gateway 10.0.2.254 on OUT (of 8.0.0.0/8, whose decision the ingress memo keeps,
    /// with the prepared Ethernet addresses) answers from another MAC address, or from its
    /// own again; the neighbour stays reachable throughout.
    GatewayMac,
    /// OUT goes down, or up.
    EgressLink,
    /// OUT's MTU goes to 1000, or back to 1500.
    EgressMtu,
    /// 100.70.0.0/16 appears as a multipath route (via OUT and SMALL), or goes.
    Multipath,
    /// 8.8.0.0/16 becomes unreachable, or reachable again.
    Unreachable,
    /// Every policy goes (the pipeline stops looking), or comes back.
    Policies,
    /// The control plane reports custom rules (route caches step aside), or none again.
    CustomRules,
    /// IPv4 forwarding goes off on IN (and IPv6 forwarding on `all`), or on again.
    Forwarding,
    /// `net.ipv4.conf.all.rp_filter` steps from 0 to 1 (strict), 2 (loose), back to 0.
    RpFilter,
    /// IN's IPv4 entry is forgotten (the `default` entry answers for it), or reported again.
    DeviceEntry,
    /// 172.16.0.0/16 via IN appears (a route back to `NO_ROUTE_BACK4`), or goes.
    ReturnRoute,
    /// 8.0.0.0/8 is deleted and added again through the other gateway (10.0.4.254 on SMALL
    /// instead of 10.0.2.254 on OUT, or back): the fast structure's answers of the old route
    /// are retired and their ids may be reused by the new one, which the ingress memo must
    /// not take for the old.
    Regateway,
    /// [`Change::Regateway`] published, and the next batch runs before the writer bumps the
    /// generation (as a queue may see a writer between the two). Only without the route
    /// cache: the cache is invalidated by the generation alone (as the kernel's cached input
    /// routes are by `rt_genid`), so in that window it may still answer with the old route,
    /// and whether it does depends on what evicted the entry first, which the vector
    /// pipeline (every probe of a vector before its fills) and the reference (probe and fill
    /// packet by packet) order differently; both answers are ones the kernel could give.
    /// With the cache it is [`Change::Regateway`].
    RegatewayLate,
}

fn change() -> impl Strategy<Value = Option<Change>> {
    prop_oneof![
        2 => Just(None),
        1 => prop_oneof![
            Just(Change::OwnAddress),
            Just(Change::Neighbour),
            Just(Change::GatewayMac),
            Just(Change::EgressLink),
            Just(Change::EgressMtu),
            Just(Change::Multipath),
            Just(Change::Unreachable),
            Just(Change::Policies),
            Just(Change::CustomRules),
            Just(Change::Forwarding),
            Just(Change::RpFilter),
            Just(Change::DeviceEntry),
            Just(Change::ReturnRoute),
            Just(Change::Regateway),
            Just(Change::RegatewayLate),
        ]
        .prop_map(Some),
    ]
}

fn v4(a: [u8; 4]) -> u32 {
    u32::from_be_bytes(a)
}

/// The state the changes toggle.
#[derive(Default)]
struct Toggles {
    own: bool,
    neighbour: bool,
    /// 10.0.2.254 answers from `MOVED_GW_MAC`.
    gateway_moved: bool,
    down: bool,
    small_mtu: bool,
    multipath: bool,
    unreachable: bool,
    no_policies: bool,
    custom_rules: bool,
    forwarding_off: bool,
    rp_filter: u8,
    device_gone: bool,
    return_route: bool,
    /// 8.0.0.0/8 goes through 10.0.4.254 on SMALL.
    regateway: bool,
    /// The last change is published but the generation not bumped yet.
    late_bump: bool,
}

/// The device switches the batches start with: both families forward on every device, no
/// reverse-path filtering (a followed table, as the netlink mirror fills it).
fn followed_devconf() -> DevConfWriter {
    let mut t = DevConfWriter::followed();
    let on = DevConf {
        forwarding: Some(true),
        rp_filter: Some(0),
    };
    for v6 in [false, true] {
        t.update(v6, NETCONF_ALL, on);
        t.update(v6, NETCONF_DEFAULT, on);
    }
    t.update(false, IN as i32, on);
    t
}

/// IN's IPv4 entry as the toggles have it.
fn in_entry(toggles: &Toggles) -> DevConf {
    DevConf {
        forwarding: Some(!toggles.forwarding_off),
        rp_filter: Some(0),
    }
}

fn out_link(up: bool, mtu: u32) -> Link {
    let mut link = Link {
        mac: Some(OUT_MAC),
        mtu,
        ..Link::new(OUT, format!("eth{OUT}"))
    };
    if up {
        link.flags = LinkFlags::UP | LinkFlags::RUNNING;
        link.oper = OperState::UP;
    }
    link
}

/// The fixture's policies (a fwd block and an out IPsec policy) and the test's own fwd block of
/// UDP port 53 to 8.8.8.0/24 (ports are read from the frame only for policy lookups).
fn policy_selectors() -> [(Selector, Direction, Action); 3] {
    let sel = |s: &str, d: &str| Selector::new(s.parse().unwrap(), d.parse().unwrap()).unwrap();
    [
        (
            sel("0.0.0.0/0", "8.8.8.0/24")
                .proto(17)
                .dport(PortMatch::exact(53)),
            Direction::Fwd,
            Action::Block,
        ),
        (
            sel("0.0.0.0/0", "8.8.4.4/32"),
            Direction::Fwd,
            Action::Block,
        ),
        (
            sel("0.0.0.0/0", "8.9.0.0/16"),
            Direction::Out,
            Action::Ipsec(TemplateId(1)),
        ),
    ]
}

fn apply(fx: &mut Fixture, toggles: &mut Toggles, change: Change) {
    match change {
        Change::OwnAddress => {
            toggles.own = !toggles.own;
            let a = IfAddr::new(Ipv4Addr::from(FLIP4), 24, OUT);
            if toggles.own {
                fx.writers().addrs.add(a).unwrap();
            } else {
                fx.writers()
                    .addrs
                    .remove(Ipv4Addr::from(FLIP4), 24, OUT)
                    .unwrap();
            }
        }
        Change::Neighbour => {
            toggles.neighbour = !toggles.neighbour;
            let (mac, state) = if toggles.neighbour {
                (Some([2, 0, 0, 0, 0, 0xc8]), NudState::REACHABLE)
            } else {
                (None, NudState::INCOMPLETE)
            };
            fx.writers().neigh.upsert(Neighbour::new(
                OUT,
                IpAddr::V4([10, 0, 2, 200].into()),
                mac,
                state,
            ));
        }
        Change::GatewayMac => {
            toggles.gateway_moved = !toggles.gateway_moved;
            let mac = if toggles.gateway_moved {
                MOVED_GW_MAC
            } else {
                GW_MAC
            };
            fx.writers().neigh.upsert(Neighbour::new(
                OUT,
                IpAddr::V4([10, 0, 2, 254].into()),
                Some(mac),
                NudState::REACHABLE,
            ));
        }
        Change::EgressLink | Change::EgressMtu => {
            if let Change::EgressLink = change {
                toggles.down = !toggles.down;
            } else {
                toggles.small_mtu = !toggles.small_mtu;
            }
            let mtu = if toggles.small_mtu { 1000 } else { 1500 };
            fx.writers().links.upsert(out_link(!toggles.down, mtu));
        }
        Change::Multipath => {
            toggles.multipath = !toggles.multipath;
            let route = Route::unicast(
                v4([100, 70, 0, 0]),
                16,
                254,
                vec![
                    NextHop::new(Some(v4([10, 0, 2, 254])), OUT),
                    NextHop::new(Some(v4([10, 0, 4, 254])), SMALL),
                ],
            );
            if toggles.multipath {
                fx.writers().fib4.insert(&route, InsertFlags::ADD).unwrap();
            } else {
                fx.writers()
                    .fib4
                    .delete(&RouteSelector::exact(&route))
                    .unwrap();
            }
        }
        Change::Unreachable => {
            toggles.unreachable = !toggles.unreachable;
            let route = Route::reject(v4([8, 8, 0, 0]), 16, 254, RouteType::Unreachable);
            if toggles.unreachable {
                fx.writers().fib4.insert(&route, InsertFlags::ADD).unwrap();
            } else {
                fx.writers()
                    .fib4
                    .delete(&RouteSelector::exact(&route))
                    .unwrap();
            }
        }
        Change::CustomRules => {
            toggles.custom_rules = !toggles.custom_rules;
            // Bumps the generation itself.
            fx.tables.generation.set_custom_rules(toggles.custom_rules);
        }
        Change::Forwarding => {
            toggles.forwarding_off = !toggles.forwarding_off;
            if !toggles.device_gone {
                fx.writers()
                    .devconf
                    .update(false, IN as i32, in_entry(toggles));
            }
            let all6 = DevConf {
                forwarding: Some(!toggles.forwarding_off),
                rp_filter: None,
            };
            fx.writers().devconf.update(true, NETCONF_ALL, all6);
        }
        Change::RpFilter => {
            toggles.rp_filter = (toggles.rp_filter + 1) % 3;
            let all = DevConf {
                forwarding: None,
                rp_filter: Some(toggles.rp_filter),
            };
            fx.writers().devconf.update(false, NETCONF_ALL, all);
        }
        Change::DeviceEntry => {
            toggles.device_gone = !toggles.device_gone;
            if toggles.device_gone {
                // Forgets both families' entries of IN (only IPv4 has one here).
                fx.writers().devconf.remove(IN as i32);
            } else {
                fx.writers()
                    .devconf
                    .update(false, IN as i32, in_entry(toggles));
            }
        }
        Change::ReturnRoute => {
            toggles.return_route = !toggles.return_route;
            let route = Route::unicast(v4([172, 16, 0, 0]), 16, 254, vec![NextHop::new(None, IN)]);
            if toggles.return_route {
                fx.writers().fib4.insert(&route, InsertFlags::ADD).unwrap();
            } else {
                fx.writers()
                    .fib4
                    .delete(&RouteSelector::exact(&route))
                    .unwrap();
            }
        }
        Change::Regateway | Change::RegatewayLate => {
            let via = |regateway| {
                let hop = if regateway {
                    NextHop::new(Some(v4([10, 0, 4, 254])), SMALL)
                } else {
                    NextHop::new(Some(v4([10, 0, 2, 254])), OUT)
                };
                Route::unicast(v4([8, 0, 0, 0]), 8, 254, vec![hop])
            };
            let old = via(toggles.regateway);
            toggles.regateway = !toggles.regateway;
            fx.writers()
                .fib4
                .delete(&RouteSelector::exact(&old))
                .unwrap();
            // Let the retired answers' ids come free (the epoch moves on once nothing pinned
            // before the delete is left), so that the insert may take one of them.
            for _ in 0..4 {
                crossbeam_epoch::pin().flush();
            }
            let new = via(toggles.regateway);
            fx.writers().fib4.insert(&new, InsertFlags::ADD).unwrap();
            if let Change::RegatewayLate = change {
                toggles.late_bump = true;
                return;
            }
        }
        Change::Policies => {
            toggles.no_policies = !toggles.no_policies;
            for (selector, dir, action) in policy_selectors() {
                if toggles.no_policies {
                    fx.writers()
                        .policies
                        .delete(&selector, dir, PolicyType::Main, 0, Mark::ANY)
                        .unwrap();
                } else {
                    fx.writers()
                        .policies
                        .add(PolicySpec::new(selector, dir).action(action))
                        .unwrap();
                }
            }
        }
    }
    fx.tables.generation.bump();
}

/// What one queue did with one batch: every observable outcome.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    frames: Vec<(Verdict, Vec<u8>)>,
    /// What the embedder's endpoint received (with endpoints).
    delivered: Vec<(Vec<u8>, RecvMeta)>,
    /// Every endpoint's counters after the batch (with endpoints).
    endpoints: Vec<EndpointInfo>,
    sent: Vec<dataplane::Sent>,
    resolutions: Vec<Resolution>,
    released: usize,
    held: usize,
    counters: Counters,
}

/// A namespace's endpoints after the pipeline: the services and an embedder's socket.
struct WithEndpoints<'a> {
    endpoints: &'a Endpoints,
    rx: &'a mut EndpointRx,
    socket: &'a Endpoint,
}

fn run(
    queue: &mut Queue,
    vector: bool,
    tables: &Tables,
    frames: &[Vec<u8>],
    headroom: usize,
    now: u64,
) -> Observed {
    run_with(queue, vector, tables, frames, headroom, now, None)
}

fn run_with(
    queue: &mut Queue,
    vector: bool,
    tables: &Tables,
    frames: &[Vec<u8>],
    headroom: usize,
    now: u64,
    mut endpoints: Option<WithEndpoints<'_>>,
) -> Observed {
    let mut chunks: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut c = vec![0u8; (headroom + f.len()).max(2048)];
            c[headroom..headroom + f.len()].copy_from_slice(f);
            c
        })
        .collect();
    let mut batch: Vec<Frame<'_>> = chunks
        .iter_mut()
        .zip(frames)
        .map(|(c, f)| {
            let ifindex = if f.get(6) == Some(&ARRIVES_ON_OUT) {
                OUT
            } else {
                IN
            };
            Frame::new(c, headroom, f.len(), ifindex)
        })
        .collect();
    let mut pool = HeapPool::new(2048, 8);
    let guard = crossbeam_epoch::pin();
    if vector {
        queue.process_batch(tables, &guard, now, &mut batch, &mut pool);
    } else {
        queue.process_batch_reference(tables, &guard, now, &mut batch, &mut pool);
    }
    let mut delivered = Vec::new();
    let mut infos = Vec::new();
    if let Some(e) = &mut endpoints {
        // A wall clock that moves by the answer: receive and transmit timestamps differ.
        let mut wall = 1_700_000_000_000_000_000 + now;
        e.rx.handle_batch(
            queue,
            tables,
            &guard,
            now,
            &mut || {
                wall += 1000;
                wall
            },
            &mut batch,
        );
        let mut buf = [0u8; 2048];
        while let Some((n, meta)) = e.socket.recv_from(&mut buf) {
            delivered.push((buf[..n].to_vec(), meta));
        }
        infos = e.endpoints.list();
    }
    let released = queue.release_held(tables, &guard, now + 500_000_000, &mut pool);
    let resolutions = std::iter::from_fn(|| queue.poll_resolution()).collect();
    let mut counters = queue.counters();
    // The route cache's own hit/miss counts depend on when it is probed (see `vector.rs`);
    // everything else must match.
    counters.dst_cache = Default::default();
    Observed {
        frames: batch
            .iter()
            .map(|f| (f.verdict, f.bytes().to_vec()))
            .collect(),
        delivered,
        endpoints: infos,
        sent: pool.sent,
        resolutions,
        released,
        held: queue.held(),
        counters,
    }
}

fn config(vlan: VlanMode, small_cache: bool, cache: bool) -> Config {
    let dst_cache = cache.then(|| dst_cache::Config {
        seed: Some(7),
        ..if small_cache {
            dst_cache::Config {
                entries: 8,
                ways: 2,
                ..dst_cache::Config::default()
            }
        } else {
            dst_cache::Config::default()
        }
    });
    Config {
        vlan,
        dst_cache,
        icmp_burst: 4,
        hold_frames: 8,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn the_vector_pipeline_matches_the_reference(
        batches in proptest::collection::vec((batch(), change()), 1..6),
        vlan in prop_oneof![Just(VlanMode::Route), Just(VlanMode::Drop), Just(VlanMode::Punt)],
        small_cache in any::<bool>(),
        cache in prop_oneof![3 => Just(true), 1 => Just(false)],
        headroom in prop_oneof![Just(0usize), Just(256)],
    ) {
        let mut fx = fixture();
        let devconf = followed_devconf();
        fx.tables.devconf = Arc::clone(devconf.reader());
        fx.writers().devconf = devconf;
        let (selector, dir, action) = policy_selectors()[0];
        fx.writers().policies.add(PolicySpec::new(selector, dir).action(action)).unwrap();
        fx.tables.generation.bump();
        let mut toggles = Toggles::default();
        let config = config(vlan, small_cache, cache);
        let mut vector = Queue::new(config).unwrap();
        let mut reference = Queue::new(config).unwrap();
        let reference_fx = twin(&fx);
        for (i, (frames, change)) in batches.iter().enumerate() {
            let now = i as u64 * 700_000_000;
            let a = run(&mut vector, true, &fx.tables, frames, headroom, now);
            let b = run(&mut reference, false, &reference_fx.tables, frames, headroom, now);
            prop_assert_eq!(&a, &b, "batch {}", i);
            prop_assert!(a.frames.iter().all(|(v, _)| *v != Verdict::Pending));
            if std::mem::take(&mut toggles.late_bump) {
                fx.tables.generation.bump();
            }
            if let Some(change) = change {
                let change = match change {
                    Change::RegatewayLate if cache => Change::Regateway,
                    change => *change,
                };
                apply(&mut fx, &mut toggles, change);
            }
        }
    }
}

/// The fixture's tables (with the change policy) and endpoints over them: an echo on `[::]:7`
/// (dual-stack), STAMP reflectors on `10.0.1.1:862` and `[2001:db8:1::1]:862`, and an
/// embedder's socket on `0.0.0.0:5353` with a queue of 4 (it overflows).
fn fixture_with_endpoints() -> (Fixture, Endpoints, Endpoint) {
    let (mut fx, writer) = fixture_and_writer();
    let (selector, dir, action) = policy_selectors()[0];
    fx.writers()
        .policies
        .add(PolicySpec::new(selector, dir).action(action))
        .unwrap();
    // The senders' neighbour entries (answers leave at once; others' wait in the hold buffer).
    for host in [IpAddr::V4(HOST4.into()), IpAddr::V6(HOST6.parse().unwrap())] {
        fx.writers().neigh.upsert(Neighbour::new(
            IN,
            host,
            Some(HOST_MAC),
            NudState::REACHABLE,
        ));
    }
    fx.tables.generation.bump();
    let config = EndpointConfig {
        queue_depth: 4,
        ..EndpointConfig::default()
    };
    let mut endpoints = Endpoints::new(writer, fx.tables.clone(), config).unwrap();
    endpoints
        .bind(
            "[::]:7".parse().unwrap(),
            BindOptions::service(Service::Echo),
        )
        .unwrap();
    let stamp = Service::Stamp {
        error: ErrorEstimate::from_nanos(1000, true),
    };
    for local in ["10.0.1.1:862", "[2001:db8:1::1]:862"] {
        endpoints
            .bind(local.parse().unwrap(), BindOptions::service(stamp))
            .unwrap();
    }
    let socket = endpoints
        .bind("0.0.0.0:5353".parse().unwrap(), BindOptions::default())
        .unwrap();
    (fx, endpoints, socket)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Endpoints see the same `Deliver` frames from both pipelines: two identical namespaces
    /// (tables, socket tables, endpoints), one driven by the vector pipeline and one by the
    /// reference, each batch's `Deliver` frames answered or queued by the namespace's
    /// endpoints; answers (bytes, verdicts, held), deliveries and every endpoint's counters
    /// are identical.
    #[test]
    fn the_vector_pipeline_delivers_to_endpoints_as_the_reference(
        batches in proptest::collection::vec((batch(), change()), 1..5),
        cache in prop_oneof![3 => Just(true), 1 => Just(false)],
        headroom in prop_oneof![Just(0usize), Just(256)],
    ) {
        let (mut fa, ea, sa) = fixture_with_endpoints();
        let (mut fb, eb, sb) = fixture_with_endpoints();
        let (mut ra, mut rb) = (ea.rx(), eb.rx());
        let (mut ta, mut tb) = (Toggles::default(), Toggles::default());
        let config = config(VlanMode::Route, false, cache);
        let mut vector = Queue::new(config).unwrap();
        let mut reference = Queue::new(config).unwrap();
        for (i, (frames, change)) in batches.iter().enumerate() {
            let now = i as u64 * 700_000_000;
            let with = |endpoints, rx, socket| Some(WithEndpoints { endpoints, rx, socket });
            let a = run_with(&mut vector, true, &fa.tables, frames, headroom, now, with(&ea, &mut ra, &sa));
            let b = run_with(&mut reference, false, &fb.tables, frames, headroom, now, with(&eb, &mut rb, &sb));
            prop_assert_eq!(&a, &b, "batch {}", i);
            let undecided = |v: &Verdict| matches!(v, Verdict::Pending | Verdict::Deliver { .. });
            prop_assert!(!a.frames.iter().any(|(v, _)| undecided(v)), "every frame decided");
            if let Some(change) = change {
                apply(&mut fa, &mut ta, *change);
                apply(&mut fb, &mut tb, *change);
            }
        }
    }
}

/// The endpoint proptest's batches do reach the endpoints: a fixed batch to each service and
/// the socket, through both pipelines, answered and delivered alike.
#[test]
fn endpoints_answer_alike_after_both_pipelines() {
    let (fa, ea, sa) = fixture_with_endpoints();
    let (fb, eb, sb) = fixture_with_endpoints();
    let (mut ra, mut rb) = (ea.rx(), eb.rx());
    let frames = vec![
        udp4(HOST4, LOCAL4, 64, 7, 10),
        udp4(HOST4, LOCAL4, 64, 862, 44),
        udp6(HOST6, LOCAL6, 64, 862, 44),
        udp6(HOST6, LOCAL6, 64, 7, 3),
        udp4(HOST4, LOCAL4, 64, 5353, 5),
        udp4(HOST4, LOCAL4, 64, 862, 10),
    ];
    let config = config(VlanMode::Route, false, true);
    let (mut qa, mut qb) = (Queue::new(config).unwrap(), Queue::new(config).unwrap());
    let with = |endpoints, rx, socket| {
        Some(WithEndpoints {
            endpoints,
            rx,
            socket,
        })
    };
    let a = run_with(
        &mut qa,
        true,
        &fa.tables,
        &frames,
        256,
        0,
        with(&ea, &mut ra, &sa),
    );
    let b = run_with(
        &mut qb,
        false,
        &fb.tables,
        &frames,
        256,
        0,
        with(&eb, &mut rb, &sb),
    );
    assert_eq!(a, b);
    let verdicts: Vec<Verdict> = a.frames.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Transmit { ifindex: IN },
            Verdict::Transmit { ifindex: IN },
            Verdict::Transmit { ifindex: IN },
            Verdict::Transmit { ifindex: IN },
            Verdict::Consumed,
            Verdict::Drop(dataplane::DropReason::Truncated),
        ],
        "echo, STAMP (v4, v6), echo (v6), the socket, a STAMP packet too short"
    );
    assert_eq!(a.delivered.len(), 1);
    assert_eq!(a.delivered[0].0, vec![0x5a; 5]);
    let received: u64 = a.endpoints.iter().map(|e| e.stats.received).sum();
    assert_eq!(received, 6);
}

/// Runs of one flow cost one probe: the route cache counts one miss and then hits, as the
/// reference does, and a generation bump is noticed by the first frame of the next batch.
#[test]
fn a_run_of_one_flow_is_probed_once_and_counted_as_hits() {
    let fx = fixture();
    let mut queue = Queue::new(Config::default()).unwrap();
    let frames = vec![udp4(HOST4, [8, 8, 8, 8], 64, 53, 0); 100];
    let out = run(&mut queue, true, &fx.tables, &frames, 256, 0);
    assert!(
        out.frames
            .iter()
            .all(|(v, _)| *v == Verdict::Transmit { ifindex: OUT })
    );
    let c = queue.counters().dst_cache;
    assert_eq!((c.misses, c.hits), (1, 99));
    fx.tables.generation.bump();
    run(&mut queue, true, &fx.tables, &frames[..2], 256, 0);
    let c = queue.counters().dst_cache;
    assert_eq!((c.misses, c.hits, c.stale), (2, 100, 1));
}

/// The own-source check is memoised per route generation: a new address takes effect with the
/// bump that publishes it.
#[test]
fn an_own_source_is_noticed_after_the_bump() {
    let mut fx = fixture();
    let mut queue = Queue::new(Config::default()).unwrap();
    let frame = udp4(FLIP4, [8, 8, 8, 8], 64, 53, 0);
    let out = run(
        &mut queue,
        true,
        &fx.tables,
        std::slice::from_ref(&frame),
        256,
        0,
    );
    assert_eq!(out.frames[0].0, Verdict::Transmit { ifindex: OUT });
    let mut toggles = Toggles::default();
    apply(&mut fx, &mut toggles, Change::OwnAddress);
    let out = run(
        &mut queue,
        true,
        &fx.tables,
        std::slice::from_ref(&frame),
        256,
        0,
    );
    assert_eq!(
        out.frames[0].0,
        Verdict::Drop(dataplane::DropReason::MartianSource)
    );
}
