//! netlink-mirror: how long a mirror takes to copy a namespace holding bgp-full-v4 from
//! start (dump and apply), and how many kernel route events per second it keeps up with.
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
    let m = Mirror::start(
        NetnsSpec::Name(ns.name().to_owned()),
        MirrorOptions::default(),
    )
    .expect("mirror");
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
        let ns = namespace(&format!("sync{stride}"));
        let chosen: Vec<_> = table.iter().step_by(stride).collect();
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
        // Every mirror must hold what the kernel holds (the kernel's connected routes too).
        let expected = main_routes(&start(&ns));
        assert!(
            expected >= chosen.len(),
            "mirror holds {expected} of {} routes",
            chosen.len()
        );
        group.throughput(Throughput::Elements(chosen.len() as u64));
        group.bench_function(BenchmarkId::new("netlink-mirror", chosen.len()), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let m = start(&ns);
                    total += t.elapsed();
                    assert_eq!(main_routes(&m), expected);
                }
                total
            });
        });
    }
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
    events(&mut c);
    c.final_summary();
}
