//! netlink-mirror: how long a mirror takes to copy a namespace holding bgp-full-v4 from
//! start (dump and apply), with plain routes and through nexthop objects, how long one
//! nexthop group replace under the full table takes to reach it, and how many kernel route
//! events per second it keeps up with.
//! PRIVILEGED: it creates network namespaces, so it runs as root only (else it says so and
//! measures nothing). Notes in `netlink-mirror.md`; run with `cargo xtask bench netlink-mirror`.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use netlink_mirror::{Mirror, MirrorHandle, MirrorOptions, NetnsSpec};
use xfwd_benches::data::routes::BGP_FULL_V4;
use xfwd_lab::netns::Netns;

const NEXT_HOPS: u32 = 4;
/// Route changes per iteration of the events group.
const BURST: u32 = 20_000;

fn ip_batch(ns: &Netns, lines: impl Iterator<Item = String>) -> Duration {
    let path = std::env::temp_dir().join(format!("{}.batch", ns.name()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("batch file"));
    for l in lines {
        writeln!(f, "{l}").expect("write");
    }
    drop(f);
    let t = Instant::now();
    let status = Command::new("ip")
        .args(["-n", ns.name(), "-force", "-batch"])
        .arg(&path)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("ip -batch");
    assert!(
        status.success() || status.code() == Some(1),
        "ip -batch failed"
    );
    let took = t.elapsed();
    let _ = std::fs::remove_file(&path);
    took
}

fn namespace(tag: &str) -> Netns {
    let ns = Netns::create(&format!("xfwd-nlm-bench-{}-{tag}", std::process::id())).expect("netns");
    ip_batch(
        &ns,
        (0..NEXT_HOPS).flat_map(|i| {
            [
                format!("link add d{i} type veth peer name p{i}"),
                format!("link set d{i} up"),
                format!("link set p{i} up"),
                format!("addr add 10.255.{i}.1/24 dev d{i}"),
            ]
        }),
    );
    ns
}

fn start(ns: &Netns) -> MirrorHandle {
    start_named(ns.name())
}

fn start_named(name: &str) -> MirrorHandle {
    let m =
        Mirror::start(NetnsSpec::Name(name.to_owned()), MirrorOptions::default()).expect("mirror");
    m.wait_synced(Duration::from_secs(600))
        .expect("synchronised");
    m
}

fn main_routes(m: &MirrorHandle) -> usize {
    let g = crossbeam_epoch::pin();
    m.tables()
        .fib4
        .table(254, &g)
        .map_or(0, |t| t.route_count())
}

/// Time from `Mirror::start` to the first synchronisation, for a spread tenth of the table
/// and the whole of it.
fn initial_sync(c: &mut Criterion) {
    let table = BGP_FULL_V4.load().expect("bgp-full-v4");
    let mut group = c.benchmark_group("netlink-mirror/initial-sync");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(5));
    for stride in [10, 1] {
        let chosen: Vec<_> = table.iter().step_by(stride).collect();
        // Loaded when the benchmark runs (a filter that skips it loads nothing).
        let mut loaded: Option<(Netns, usize)> = None;
        group.throughput(Throughput::Elements(chosen.len() as u64));
        group.bench_function(BenchmarkId::new("netlink-mirror", chosen.len()), |b| {
            let (ns, expected) = loaded.get_or_insert_with(|| {
                let ns = namespace(&format!("sync{stride}"));
                ip_batch(
                    &ns,
                    chosen.iter().map(|r| {
                        format!(
                            "route add {} via 10.255.{}.2",
                            r.prefix,
                            r.origin_asn % NEXT_HOPS
                        )
                    }),
                );
                // Every mirror must hold what the kernel holds (its connected routes too).
                let expected = main_routes(&start(&ns));
                assert!(
                    expected >= chosen.len(),
                    "mirror holds {expected} of {} routes",
                    chosen.len()
                );
                (ns, expected)
            });
            let (ns, expected) = (&*ns, *expected);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let m = start(ns);
                    total += t.elapsed();
                    assert_eq!(main_routes(&m), expected);
                }
                total
            });
        });
    }
    group.finish();
}

/// The nexthop objects of the `nexthop-objects` group (as the oracle test installs them):
/// one per next hop, a group of one (hash-threshold), a resilient group, a blackhole.
const OBJECTS: [&str; 8] = [
    "nexthop add id 1 via 10.255.0.2 dev d0",
    "nexthop add id 2 via 10.255.1.2 dev d1",
    "nexthop add id 3 via 10.255.2.2 dev d2",
    "nexthop add id 4 via 10.255.3.2 dev d3",
    "nexthop add id 10 group 1",
    "nexthop add id 11 group 2 type resilient buckets 16",
    "link set lo up",
    "nexthop add id 12 blackhole",
];
/// The object ids the routes are spread over (a seventh of them through group 10).
const OBJECT_IDS: [u32; 7] = [1, 2, 3, 4, 10, 11, 12];

/// A namespace holding the whole of bgp-full-v4 through nexthop objects, and a prefix routed
/// through group 10.
fn objects_namespace() -> (Netns, String) {
    let table = BGP_FULL_V4.load().expect("bgp-full-v4");
    let ns = namespace("nhobj");
    ip_batch(&ns, OBJECTS.iter().map(|l| (*l).to_owned()));
    ip_batch(
        &ns,
        table.iter().map(|r| {
            let id = OBJECT_IDS[r.origin_asn as usize % OBJECT_IDS.len()];
            format!("route add {} nhid {id}", r.prefix)
        }),
    );
    let probe = table
        .iter()
        .find(|r| OBJECT_IDS[r.origin_asn as usize % OBJECT_IDS.len()] == 10)
        .expect("a route through group 10")
        .prefix
        .to_string();
    (ns, probe)
}

/// The egress device the mirror holds for the route of `prefix` (its first address).
fn egress_of(m: &MirrorHandle, prefix: &str) -> Option<u32> {
    let (addr, _) = prefix.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let g = crossbeam_epoch::pin();
    let r = m
        .tables()
        .fib4
        .lookup(&fib_trie::Flow::to(u32::from(addr)), &g)
        .ok()?;
    r.nexthops().first().map(|h| h.ifindex)
}

/// Through nexthop objects: the initial sync of the full table (next to `initial-sync`'s
/// plain routes, same run), and one group replace under it: `ip-nexthop-replace` is the time
/// `ip nexthop replace` takes (the kernel applying it, plus starting `ip`), `netlink-mirror`
/// the time from the start of that command until a running mirror's route through the group
/// uses the new next hop.
fn nexthop_objects(c: &mut Criterion) {
    let mut group = c.benchmark_group("netlink-mirror/nexthop-objects");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(5));
    let routes = BGP_FULL_V4.load().expect("bgp-full-v4").len();
    // Loaded once, when the first benchmark of the group that runs needs it (a filter that
    // skips the group loads nothing).
    let mut loaded: Option<(Netns, String, usize)> = None;
    let mut load = || -> (String, String, usize) {
        let (ns, probe, expected) = loaded.get_or_insert_with(|| {
            let (ns, probe) = objects_namespace();
            let expected = main_routes(&start(&ns));
            assert!(expected >= routes, "mirror holds {expected} of {routes}");
            (ns, probe, expected)
        });
        (ns.name().to_owned(), probe.clone(), *expected)
    };
    group.throughput(Throughput::Elements(routes as u64));
    group.bench_function(BenchmarkId::new("initial-sync", routes), |b| {
        let (name, _, expected) = load();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let m = start_named(&name);
                total += t.elapsed();
                assert_eq!(main_routes(&m), expected);
            }
            total
        });
    });
    group.throughput(Throughput::Elements(1));
    // Group 10 alternates between next hop 1 (d0) and 3 (d2).
    let replace = |name: &str, to: u32| {
        Command::new("ip")
            .args(["-n", name, "nexthop", "replace", "id", "10", "group"])
            .arg(to.to_string())
            .spawn()
            .expect("ip nexthop replace")
    };
    let finish = |mut child: std::process::Child| {
        assert!(child.wait().expect("ip").success(), "ip nexthop replace");
    };
    group.bench_function(BenchmarkId::new("ip-nexthop-replace", routes), |b| {
        let (name, _, _) = load();
        let mut to = 3;
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let t = Instant::now();
                    finish(replace(&name, to));
                    to = if to == 3 { 1 } else { 3 };
                    t.elapsed()
                })
                .sum()
        });
        finish(replace(&name, 1));
    });
    group.bench_function(BenchmarkId::new("netlink-mirror-replace", routes), |b| {
        let (name, probe, _) = load();
        let m = start_named(&name);
        // Interface indices are the namespace's: ask the mirror's link table.
        let index = |i: u32| {
            let g = crossbeam_epoch::pin();
            m.tables()
                .links
                .by_name(&format!("d{i}"), &g)
                .map(|l| l.ifindex)
                .expect("link")
        };
        let (d0, d2) = (index(0), index(2));
        let mut to = 3;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let want = if to == 3 { d2 } else { d0 };
                // Polled while `ip` runs: the kernel sends the RTM_NEWNEXTHOP first, then
                // re-announces every route through the group before `ip` gets its answer.
                let t = Instant::now();
                let child = replace(&name, to);
                while egress_of(&m, &probe) != Some(want) {
                    assert!(
                        t.elapsed() < Duration::from_secs(120),
                        "mirror did not follow"
                    );
                    std::thread::sleep(Duration::from_micros(200));
                }
                total += t.elapsed();
                finish(child);
                // The re-announcements drained before the next change.
                std::thread::sleep(Duration::from_secs(2));
                to = if to == 3 { 1 } else { 3 };
            }
            total
        });
        assert_eq!(m.stats().errors.len(), 0, "{:?}", m.stats().errors);
    });
    group.finish();
}

/// Sustained events: bursts of route adds, then deletes, made by `ip -batch`; `ip-batch` is
/// the time the kernel takes to make them (no mirror running), `netlink-mirror` the time until
/// a running mirror has applied them all.
fn events(c: &mut Criterion) {
    let mut group = c.benchmark_group("netlink-mirror/events");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(u64::from(BURST)));
    let base = u32::from(Ipv4Addr::new(30, 0, 0, 0));
    let burst = move |add: bool| {
        (0..BURST).map(move |i| {
            let p = Ipv4Addr::from(base + i);
            if add {
                format!("route add {p}/32 via 10.255.{}.2", i % NEXT_HOPS)
            } else {
                format!("route del {p}/32")
            }
        })
    };
    let plain = namespace("events-plain");
    group.bench_function(BenchmarkId::new("ip-batch", BURST), |b| {
        let mut add = true;
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let took = ip_batch(&plain, burst(add));
                    add = !add;
                    took
                })
                .sum()
        });
    });
    drop(plain);
    let ns = namespace("events");
    let m = start(&ns);
    let connected = main_routes(&m);
    group.bench_function(BenchmarkId::new("netlink-mirror", BURST), |b| {
        let mut add = true;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let want = if add {
                    connected + BURST as usize
                } else {
                    connected
                };
                let t = Instant::now();
                ip_batch(&ns, burst(add));
                while main_routes(&m) != want {
                    assert!(
                        t.elapsed() < Duration::from_secs(120),
                        "mirror did not follow"
                    );
                    std::thread::sleep(Duration::from_micros(200));
                }
                total += t.elapsed();
                add = !add;
            }
            total
        });
    });
    assert_eq!(m.stats().errors.len(), 0, "{:?}", m.stats().errors);
    group.finish();
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("netlink-mirror bench: needs root (network namespaces); nothing measured");
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    initial_sync(&mut c);
    nexthop_objects(&mut c);
    events(&mut c);
    c.final_summary();
}
