//! policy-tree benchmarks (issue 6, seed 004): policy lookup cost against the number of
//! policies (the seed's non-matching dummies, ClassBench sets), insert and update cost, and
//! lookups while a writer changes the database. Method and goals: `policy-tree.md` beside this
//! file.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use policy_tree::{
    Action, Direction, Flow, LinearDb, Mark, PolicyDb, PolicySpec, PolicyType, PolicyWriter,
    PortMatch, Prefix, Selector, TemplateId,
};
use xfwd_benches::data::classbench::{self, Rule, RuleSet};

/// Flows per iteration of a lookup benchmark.
const BATCH: usize = 256;
/// The tunnel every dummy benchmark's flows match (the selftest's ESP policy).
const TUNNEL_PRIORITY: u32 = 100;

fn sel(src: Prefix, dst: Prefix) -> Selector {
    Selector::new(src, dst).expect("one family")
}

fn v4(a: u8, b: u8, c: u8, len: u8) -> Prefix {
    Prefix::new(Ipv4Addr::new(a, b, c, 0).into(), len).expect("valid length")
}

/// `n` distinct block policies at priority 0 that match no benchmark flow, in the shape of the
/// kernel selftest's `do_dummies4`: nested /30, /29 and /24 source and destination pairs (all
/// saddr:daddr policies of the tree), 3 per (b, a) pair, outside 10.0.0.0/16.
fn dummies(n: usize) -> Vec<PolicySpec> {
    (0..n)
        .map(|k| {
            let len = [30, 29, 24][k % 3];
            let a = ((k / 3) % 256) as u8;
            let b = ((k / 768) % 256) as u8;
            let c = (k / (768 * 256)) as u8;
            PolicySpec::new(
                sel(v4(11 + 2 * c, b, 1, len), v4(12 + 2 * c, b, a, len)),
                Direction::Out,
            )
            .action(Action::Block)
        })
        .collect()
}

/// The tunnel policy: 10.0.1.0/24 -> 10.0.2.0/24 through IPsec.
fn tunnel() -> PolicySpec {
    PolicySpec::new(sel(v4(10, 0, 1, 24), v4(10, 0, 2, 24)), Direction::Out)
        .priority(TUNNEL_PRIORITY)
        .action(Action::Ipsec(TemplateId(1)))
}

/// `BATCH` flows through the tunnel.
fn tunnel_flows() -> Vec<Flow> {
    (0..BATCH)
        .map(|i| {
            Flow::v4(
                Ipv4Addr::new(10, 0, 1, (i % 251) as u8 + 1),
                Ipv4Addr::new(10, 0, 2, (i * 7 % 251) as u8 + 1),
            )
            .proto(6)
            .ports(40000 + i as u16, 443)
        })
        .collect()
}

fn build(specs: &[PolicySpec]) -> (PolicyWriter, LinearDb) {
    let mut db = PolicyWriter::new();
    let mut linear = LinearDb::new();
    for spec in specs {
        // ClassBench sets repeat selectors once ports are widened: keep the first.
        if db.add(*spec).is_ok() {
            linear.add(*spec).expect("same admission as policy-tree");
        }
    }
    (db, linear)
}

/// The sum of (index + 1) of every answer: equal across engines or a bug.
fn checksum_tree(db: &PolicyDb, flows: &[Flow], dir: Direction) -> u64 {
    let guard = crossbeam_epoch::pin();
    flows
        .iter()
        .map(|f| {
            db.lookup(f, dir, &guard)
                .map_or(0, |p| u64::from(p.index) + 1)
        })
        .sum()
}

fn checksum_linear(db: &LinearDb, flows: &[Flow], dir: Direction) -> u64 {
    flows
        .iter()
        .map(|f| db.lookup(f, dir).map_or(0, |p| u64::from(p.index) + 1))
        .sum()
}

/// Times both engines on one set of policies and flows, after checking they agree.
fn lookup_pair(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    parameter: &str,
    specs: &[PolicySpec],
    flows: &[Flow],
    dir: Direction,
) {
    let (db, linear) = build(specs);
    let sum = checksum_tree(&db, flows, dir);
    assert_eq!(sum, checksum_linear(&linear, flows, dir), "{parameter}");
    c.throughput(Throughput::Elements(flows.len() as u64));
    c.bench_with_input(BenchmarkId::new("policy-tree", parameter), &(), |b, ()| {
        b.iter(|| {
            // One pin per batch, as a run loop does.
            let guard = crossbeam_epoch::pin();
            for f in flows {
                black_box(db.lookup(black_box(f), dir, &guard));
            }
        });
    });
    c.bench_with_input(BenchmarkId::new("linear-scan", parameter), &(), |b, ()| {
        b.iter(|| {
            for f in flows {
                black_box(linear.lookup(black_box(f), dir));
            }
        });
    });
}

/// The seed's scenario: `n` non-matching dummies in front of the one policy that matches.
fn lookup_dummies(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/lookup-dummies");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let flows = tunnel_flows();
    for n in [0, 1_000, 10_000, 100_000] {
        let mut specs = dummies(n);
        specs.push(tunnel());
        lookup_pair(&mut group, &n.to_string(), &specs, &flows, Direction::Out);
    }
    group.finish();
}

fn ports(range: &RangeInclusive<u16>) -> PortMatch {
    if range.start() == range.end() {
        PortMatch::exact(*range.start())
    } else {
        PortMatch::ANY
    }
}

/// ClassBench rules as forward policies (see `benches/data/README.md`): prefixes and protocol
/// as selectors, single-port ranges exact and others wildcards, the line as priority.
fn classbench_specs(rules: &[Rule]) -> Vec<PolicySpec> {
    rules
        .iter()
        .enumerate()
        .map(|(line, r)| {
            let p = |x: &xfwd_benches::data::Prefix<Ipv4Addr>| {
                Prefix::new(x.addr.into(), x.len).expect("loader checked the length")
            };
            let selector = sel(p(&r.src), p(&r.dst))
                .proto(if r.proto_mask == 0xff { r.proto } else { 0 })
                .sport(ports(&r.src_ports))
                .dport(ports(&r.dst_ports));
            PolicySpec::new(selector, Direction::Fwd)
                .priority(line as u32)
                .action(Action::Ipsec(TemplateId(line as u32)))
        })
        .collect()
}

/// Flows aimed at `rules`: for every `step`-th rule, addresses inside its prefixes and ports
/// inside its ranges.
fn aimed(rules: &[Rule], count: usize) -> Vec<Flow> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let step = (rules.len() / count).max(1);
    rules
        .iter()
        .step_by(step)
        .take(count)
        .map(|r| {
            let host = |p: &xfwd_benches::data::Prefix<Ipv4Addr>, noise: u64| {
                let span = u32::MAX.checked_shr(u32::from(p.len)).unwrap_or(0);
                Ipv4Addr::from(u32::from(p.addr) | (noise as u32 & span))
            };
            let pick = |range: &RangeInclusive<u16>, noise: u64| {
                range.start() + (noise % (u64::from(range.end() - range.start()) + 1)) as u16
            };
            Flow::v4(host(&r.src, next()), host(&r.dst, next()))
                .proto(r.proto)
                .ports(pick(&r.src_ports, next()), pick(&r.dst_ports, next()))
        })
        .collect()
}

/// The fw_10k set cut to its first `n` rules, looked up with fw_10k trace headers.
fn lookup_fw(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/lookup-fw");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let rules = RuleSet::Fw10k.load().expect("fw_10k loads");
    let trace = classbench::fw_10k_trace().expect("fw_10k trace loads");
    let step = trace.len() / BATCH;
    let flows: Vec<Flow> = trace
        .iter()
        .step_by(step)
        .take(BATCH)
        .map(|h| {
            Flow::v4(h.src, h.dst)
                .proto(h.proto)
                .ports(h.src_port, h.dst_port)
        })
        .collect();
    let specs = classbench_specs(&rules);
    for n in [10, 100, 1_000, specs.len()] {
        lookup_pair(
            &mut group,
            &n.to_string(),
            &specs[..n],
            &flows,
            Direction::Fwd,
        );
    }
    group.finish();
}

/// Each whole ClassBench set with packets aimed at its rules.
fn lookup_classbench(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/lookup-classbench");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    for set in RuleSet::ALL {
        let rules = set.load().expect("set loads");
        let flows = aimed(&rules, BATCH);
        let name = set.file_name().trim_end_matches(".xz");
        lookup_pair(
            &mut group,
            name,
            &classbench_specs(&rules),
            &flows,
            Direction::Fwd,
        );
    }
    group.finish();
}

/// Building a database of `n` dummies one add at a time (each add published for readers).
fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/insert");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for n in [1_000, 10_000, 100_000, 1_000_000] {
        let specs = dummies(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("policy-tree", n), &specs, |b, specs| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut db = PolicyWriter::new();
                    let start = Instant::now();
                    for s in specs {
                        db.add(*s).expect("distinct dummies");
                    }
                    total += start.elapsed();
                    drop(db);
                }
                total
            });
        });
        group.bench_with_input(BenchmarkId::new("linear-scan", n), &specs, |b, specs| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut db = LinearDb::new();
                    let start = Instant::now();
                    for s in specs {
                        db.add(*s).expect("distinct dummies");
                    }
                    total += start.elapsed();
                    drop(db);
                }
                total
            });
        });
    }
    group.finish();
}

/// One add and one delete of a policy that merges tree nodes, with `n` dummies loaded.
fn update(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/update");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    // Covers three dummy destination nodes of the first source block: the add merges them,
    // the delete leaves the merged node (nodes are not split again).
    let cover = PolicySpec::new(sel(v4(11, 0, 1, 24), v4(12, 0, 0, 22)), Direction::Out)
        .priority(5)
        .action(Action::Block);
    let churn = PolicySpec::new(sel(v4(10, 9, 0, 24), v4(10, 8, 0, 24)), Direction::Out);
    for n in [1_000, 10_000, 100_000] {
        let (mut db, mut linear) = build(&dummies(n));
        db.add(cover).expect("new");
        linear.add(cover).expect("new");
        group.throughput(Throughput::Elements(2));
        group.bench_with_input(BenchmarkId::new("policy-tree", n), &(), |b, ()| {
            b.iter(|| {
                db.add(churn).expect("absent");
                db.delete(
                    &churn.selector,
                    Direction::Out,
                    PolicyType::Main,
                    0,
                    Mark::ANY,
                )
                .expect("present");
            });
        });
        group.bench_with_input(BenchmarkId::new("linear-scan", n), &(), |b, ()| {
            b.iter(|| {
                linear.add(churn).expect("absent");
                linear
                    .delete(
                        &churn.selector,
                        Direction::Out,
                        PolicyType::Main,
                        0,
                        Mark::ANY,
                    )
                    .expect("present");
            });
        });
    }
    group.finish();
}

/// Lookups of the tunnel flows while another thread adds and deletes policies in the same bin
/// as fast as it can: policy-tree's readers run lock-free; the linear scan needs a lock.
fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy-tree/contended");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    let n = 10_000;
    let mut specs = dummies(n);
    specs.push(tunnel());
    let flows = tunnel_flows();
    let churn: Vec<PolicySpec> = (0..64u8)
        .map(|i| {
            PolicySpec::new(sel(v4(10, 9, i, 24), v4(10, 0, 2, 26)), Direction::Out)
                .action(Action::Block)
        })
        .collect();
    let (db, linear) = build(&specs);
    let expected = checksum_tree(&db, &flows, Direction::Out);
    assert_eq!(expected, checksum_linear(&linear, &flows, Direction::Out));
    group.throughput(Throughput::Elements(flows.len() as u64));

    // The run loop holds the database; the writer thread owns its writer.
    let reader = Arc::clone(db.reader());
    let mut db = db;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, churn) = (stop.clone(), churn.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for s in &churn {
                    db.add(*s).expect("absent");
                }
                for s in &churn {
                    db.delete(&s.selector, Direction::Out, PolicyType::Main, 0, Mark::ANY)
                        .expect("present");
                }
            }
        })
    };
    group.bench_with_input(BenchmarkId::new("policy-tree", n), &(), |b, ()| {
        b.iter(|| {
            let guard = crossbeam_epoch::pin();
            for f in &flows {
                black_box(reader.lookup(black_box(f), Direction::Out, &guard));
            }
        });
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");

    let linear = Arc::new(RwLock::new(linear));
    stop.store(false, Ordering::Relaxed);
    let writer = {
        let (linear, stop) = (linear.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for s in &churn {
                    let mut db = linear.write().expect("no panics");
                    db.add(*s).expect("absent");
                }
                for s in &churn {
                    let mut db = linear.write().expect("no panics");
                    db.delete(&s.selector, Direction::Out, PolicyType::Main, 0, Mark::ANY)
                        .expect("present");
                }
            }
        })
    };
    group.bench_with_input(BenchmarkId::new("linear-scan-rwlock", n), &(), |b, ()| {
        b.iter(|| {
            // One read lock per batch, as one pin per batch.
            let db = linear.read().expect("no panics");
            for f in &flows {
                black_box(db.lookup(black_box(f), Direction::Out));
            }
        });
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    group.finish();
}

criterion_group!(
    benches,
    lookup_dummies,
    lookup_fw,
    lookup_classbench,
    insert,
    update,
    contended
);
criterion_main!(benches);
