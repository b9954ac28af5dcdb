//! addr-table benchmarks (issues 4 and 23, seed 000): local address lookup (`dev_find`)
//! latency vs address count for hits and misses, read throughput while a writer churns, and
//! the memory of an empty and of a populated table.
//! Method and peers: `addr-table.md` beside this file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use addr_table::{AddrTable, AddrWriter, FixedTable, FixedWriter, IfAddr, NetnsId, RhlWriter};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use xfwd_benches::order::shuffled;

/// Counts live heap bytes, for the empty-table memory report (lookups never allocate, so the
/// counting does not touch the timed loops).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Address counts of the seed post's tables, plus 10k, 100k and 1M.
const COUNTS: [usize; 10] = [
    20, 100, 500, 700, 1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000,
];
/// The fixed 256-bucket table is built and measured up to this many addresses: at 1M its
/// chains hold ~3,900 addresses, a miss walks all of them, and one pass over the queries takes
/// minutes (the point it makes is already made at 100k).
const FIXED_MAX: usize = 100_000;
/// Lookups per iteration.
const BATCH: usize = 1024;
/// Addresses per interface (ifindex 2, 3, ...): a host with many addresses over several links.
const PER_IF: usize = 256;

/// `n` addresses from 198.18.0.0/15 (the benchmarking block), consecutive as an operator would
/// number them, and the interface of each.
fn addresses(n: usize) -> Vec<(Ipv4Addr, u32)> {
    (0..n)
        .map(|i| {
            (
                Ipv4Addr::from_bits(0xc612_0000 + i as u32),
                2 + (i / PER_IF) as u32,
            )
        })
        .collect()
}

/// `n` addresses from 10.0.0.0/8, none of which is ever added: the miss queries.
fn absent_addresses(n: usize) -> Vec<Ipv4Addr> {
    (0..n)
        .map(|i| Ipv4Addr::from_bits(0x0a00_0000 + i as u32))
        .collect()
}

/// The engines, each answering "which interface holds this local address".
struct Engines {
    addr_table: Arc<AddrTable>,
    /// The table's writer (one writer thread at a time takes it; readers never do).
    addr_writer: std::sync::Mutex<AddrWriter>,
    /// Only up to [`FIXED_MAX`] addresses.
    fixed: Option<Arc<FixedTable<Ipv4Addr, u32>>>,
    /// The fixed table's writer (taken as `addr_writer` is).
    fixed_writer: Option<std::sync::Mutex<FixedWriter<Ipv4Addr, u32>>>,
    hashbrown: hashbrown::HashMap<u32, u32>,
    papaya: papaya::HashMap<u32, u32>,
    dashmap: dashmap::DashMap<u32, u32>,
}

impl Engines {
    fn build(addrs: &[(Ipv4Addr, u32)]) -> Self {
        let mut writer = AddrWriter::new(NetnsId(1));
        for &(a, ifindex) in addrs {
            writer
                .add(IfAddr::new(a, 32, ifindex))
                .expect("fresh address");
        }
        // As the netlink mirror does after its initial dump: no rehash left half done.
        writer.finish_rehash();
        let mut fixed = (addrs.len() <= FIXED_MAX).then(|| FixedWriter::new(0x2545_f491));
        if let Some(fixed) = &mut fixed {
            for &(a, ifindex) in addrs {
                fixed.insert(a, ifindex);
            }
        }
        let e = Engines {
            addr_table: Arc::clone(writer.reader()),
            addr_writer: std::sync::Mutex::new(writer),
            fixed: fixed.as_ref().map(|w| Arc::clone(w.reader())),
            fixed_writer: fixed.map(std::sync::Mutex::new),
            hashbrown: addrs.iter().map(|&(a, i)| (a.to_bits(), i)).collect(),
            papaya: papaya::HashMap::new(),
            dashmap: dashmap::DashMap::new(),
        };
        for &(a, ifindex) in addrs {
            e.papaya.pin().insert(a.to_bits(), ifindex);
            e.dashmap.insert(a.to_bits(), ifindex);
        }
        e
    }

    /// The fixed table, present at the counts of the contended benchmark.
    fn fixed(&self) -> &FixedTable<Ipv4Addr, u32> {
        self.fixed
            .as_deref()
            .expect("the fixed table is built up to FIXED_MAX")
    }

    /// Sum of the answers over `queries` (0 for a miss), per engine (`None`: not built).
    fn checksums(&self, queries: &[Ipv4Addr]) -> [Option<u64>; 5] {
        let g = crossbeam_epoch::pin();
        let p = self.papaya.pin();
        let sum = |f: &dyn Fn(Ipv4Addr) -> Option<u32>| {
            Some(queries.iter().map(|&q| u64::from(f(q).unwrap_or(0))).sum())
        };
        [
            sum(&|q| self.addr_table.dev_find(q, None, &g)),
            self.fixed
                .as_ref()
                .and_then(|fixed| sum(&|q| fixed.get(&q, &g).copied())),
            sum(&|q| self.hashbrown.get(&q.to_bits()).copied()),
            sum(&|q| p.get(&q.to_bits()).copied()),
            sum(&|q| self.dashmap.get(&q.to_bits()).map(|r| *r)),
        ]
    }
}

/// Runs `BATCH` lookups per iteration, continuing through `queries` across iterations.
macro_rules! lookup_loop {
    ($b:expr, $queries:expr, |$q:ident| $lookup:expr) => {{
        let queries = $queries;
        let mut pos = 0;
        $b.iter(|| {
            let mut sum = 0u64;
            for _ in 0..BATCH {
                let $q = queries[pos];
                pos += 1;
                if pos == queries.len() {
                    pos = 0;
                }
                sum += u64::from(black_box($lookup).unwrap_or(0));
            }
            sum
        })
    }};
}

/// Times every engine on `queries` (each engine's answers were checked before).
fn lookup_engines(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    e: &Engines,
    n: usize,
    queries: &[Ipv4Addr],
) {
    group.bench_with_input(BenchmarkId::new("addr-table", n), queries, |b, queries| {
        let g = crossbeam_epoch::pin();
        lookup_loop!(b, queries, |q| e.addr_table.dev_find(q, None, &g))
    });
    if let Some(fixed) = &e.fixed {
        group.bench_with_input(BenchmarkId::new("fixed-256", n), queries, |b, queries| {
            let g = crossbeam_epoch::pin();
            lookup_loop!(b, queries, |q| fixed.get(&q, &g).copied())
        });
    }
    group.bench_with_input(BenchmarkId::new("hashbrown", n), queries, |b, queries| {
        lookup_loop!(b, queries, |q| e.hashbrown.get(&q.to_bits()).copied())
    });
    group.bench_with_input(BenchmarkId::new("papaya", n), queries, |b, queries| {
        let p = e.papaya.pin();
        lookup_loop!(b, queries, |q| p.get(&q.to_bits()).copied())
    });
    group.bench_with_input(BenchmarkId::new("dashmap", n), queries, |b, queries| {
        lookup_loop!(b, queries, |q| e.dashmap.get(&q.to_bits()).map(|r| *r))
    });
}

/// Hits (`addr-table/lookup`) and misses (`addr-table/lookup-miss`) at every count: the tables
/// are built once per count and serve both groups.
fn lookup(c: &mut Criterion) {
    let configure = |group: &mut criterion::BenchmarkGroup<'_, _>| {
        group.throughput(Throughput::Elements(BATCH as u64));
        group
            .sample_size(30)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
    };
    let built: Vec<(usize, Engines, Vec<Ipv4Addr>, Vec<Ipv4Addr>)> = COUNTS
        .iter()
        .map(|&n| {
            let addrs = addresses(n);
            let e = Engines::build(&addrs);
            let order = shuffled(n);
            let hits: Vec<Ipv4Addr> = order.iter().map(|&i| addrs[i].0).collect();
            let absent = absent_addresses(n);
            let misses: Vec<Ipv4Addr> = order.iter().map(|&i| absent[i]).collect();
            let want: u64 = addrs.iter().map(|&(_, i)| u64::from(i)).sum();
            let (hit_sums, miss_sums) = (e.checksums(&hits), e.checksums(&misses));
            for (engine, (hit, miss)) in hit_sums.into_iter().zip(miss_sums).enumerate() {
                if let (Some(hit), Some(miss)) = (hit, miss) {
                    assert_eq!(hit, want, "engine {engine} disagrees at {n} addresses");
                    assert_eq!(miss, 0, "engine {engine} answered a miss at {n} addresses");
                }
            }
            (n, e, hits, misses)
        })
        .collect();

    placement_report(&built);

    let mut group = c.benchmark_group("addr-table/lookup");
    configure(&mut group);
    for (n, e, hits, _) in &built {
        lookup_engines(&mut group, e, *n, hits);
    }
    group.finish();

    let mut group = c.benchmark_group("addr-table/lookup-miss");
    configure(&mut group);
    for (n, e, _, misses) in &built {
        lookup_engines(&mut group, e, *n, misses);
    }
    group.finish();
}

/// Sizes from which the placement of the tables' memory is reported: the ones whose tables
/// outgrow the L2 and the TLB's reach.
const PLACEMENT_MIN: usize = 100_000;

/// Where the largest tables' memory sits, before any is timed: the share of `addr-table`'s
/// bucket lines and tags and of hashbrown's slots on transparent huge pages, the 2 MiB
/// physical frames holding them, and their mappings' `AnonHugePages`
/// (`xfwd_benches::thp`; pages and frames need root). Printed and written beside criterion's
/// data as `addr-table-placement.md`, which `cargo xtask bench` appends to the report, so that
/// a run's outlier at these sizes can be checked against where its tables were.
fn placement_report(built: &[(usize, Engines, Vec<Ipv4Addr>, Vec<Ipv4Addr>)]) {
    let mut report = String::from(
        "\n## Placement of the largest tables (this run)\n\n\
         Read from `/proc/self` after the tables were built, before any was timed \
         (`xfwd_benches::thp`): each array's share on transparent huge pages (4 KiB pages \
         counted by their frames' `KPF_THP`; `?` without root), the distinct 2 MiB physical \
         frames holding it, and the `AnonHugePages` of the mapping that holds its start. \
         hashbrown's slots are the span of its keys' addresses (its control bytes excluded).\n\n\
         | addresses | array | MiB | on huge pages | 2 MiB frames | mapping MiB (AnonHugePages) |\n\
         |---:|---|---:|---:|---:|---|\n",
    );
    for (n, e, _, _) in built.iter().filter(|b| b.0 >= PLACEMENT_MIN) {
        let [lines, tags] = e.addr_table.family::<Ipv4Addr>().hash().bucket_arrays();
        let (lo, hi) = e.hashbrown.keys().fold((usize::MAX, 0), |(lo, hi), k| {
            let a = std::ptr::from_ref(k) as usize;
            (lo.min(a), hi.max(a + size_of::<(u32, u32)>()))
        });
        for (name, range) in [
            ("addr-table lines", lines),
            ("addr-table tags", tags),
            ("hashbrown slots", lo..hi),
        ] {
            let p = xfwd_benches::thp::placement(range);
            let mib = |b: usize| b as f64 / f64::from(1 << 20);
            report.push_str(&format!(
                "| {n} | {name} | {:.1} | {} | {} | {} |\n",
                mib(p.bytes),
                p.huge_share()
                    .map_or_else(|| "?".into(), |s| format!("{:.0}%", 100.0 * s)),
                p.frames_2m.map_or_else(|| "?".into(), |f| f.to_string()),
                p.mapping.map_or_else(
                    || "?".into(),
                    |(size, huge)| format!("{:.1} ({:.1})", mib(size), mib(huge))
                ),
            ));
        }
    }
    println!("addr-table/placement:{report}");
    let dir = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/criterion"));
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("addr-table-placement.md"), &report);
    }
}

/// A reader's batch of lookups, returning the sum of the answers.
type ReadFn = Arc<dyn Fn(&[Ipv4Addr]) -> u64 + Send + Sync>;
/// A writer's add (`true`) or remove of one address on one interface.
type WriteFn = Arc<dyn Fn(Ipv4Addr, u32, bool) + Send + Sync>;

/// A writer that adds and removes `churn` addresses in a loop until told to stop.
fn churn_writer(
    stop: Arc<AtomicBool>,
    churn: Vec<(Ipv4Addr, u32)>,
    op: impl Fn(Ipv4Addr, u32, bool) + Send + 'static,
) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut ops = 0;
        while !stop.load(Ordering::Relaxed) {
            for &(a, i) in &churn {
                op(a, i, true);
            }
            for &(a, i) in &churn {
                op(a, i, false);
            }
            ops += 2 * churn.len() as u64;
        }
        ops
    })
}

/// Two reader threads run `iters` batches each while the writer churns; returns the time
/// until both are done.
fn contended_run(iters: u64, queries: Arc<Vec<Ipv4Addr>>, read: ReadFn) -> Duration {
    let start = Arc::new(Barrier::new(3));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (queries, read, start) = (queries.clone(), read.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut sum = 0;
                let len = queries.len();
                for it in 0..iters as usize {
                    let from = (it * BATCH + r * len / 2) % len;
                    let chunk = &queries[from..(from + BATCH).min(len)];
                    sum += read(chunk);
                }
                black_box(sum)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for r in readers {
        r.join().expect("reader");
    }
    t0.elapsed()
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("addr-table/contended");
    group.throughput(Throughput::Elements(2 * BATCH as u64));
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for n in [1_000, 10_000] {
        let addrs = addresses(n);
        // The writer adds and removes 64 other addresses on their own interface.
        let churn: Vec<(Ipv4Addr, u32)> = (0..64)
            .map(|i| (Ipv4Addr::from_bits(0xcb00_7100 + i), 1))
            .collect();
        let e = Arc::new(Engines::build(&addrs));
        let mut queries: Vec<Ipv4Addr> = shuffled(n).into_iter().map(|i| addrs[i].0).collect();
        while queries.len() < 2 * BATCH {
            queries.extend_from_within(..);
        }
        let queries = Arc::new(queries);

        let mut run = |name: &str, read: ReadFn, op: WriteFn| {
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_custom(|iters| {
                    let stop = Arc::new(AtomicBool::new(false));
                    let op = op.clone();
                    let writer =
                        churn_writer(stop.clone(), churn.clone(), move |a, i, add| op(a, i, add));
                    let took = contended_run(iters, queries.clone(), read.clone());
                    stop.store(true, Ordering::Relaxed);
                    black_box(writer.join().expect("writer"));
                    took
                })
            });
        };
        let e1 = e.clone();
        let e2 = e.clone();
        run(
            "addr-table",
            Arc::new(move |qs| {
                let g = crossbeam_epoch::pin();
                qs.iter()
                    .map(|&q| u64::from(e1.addr_table.dev_find(q, None, &g).unwrap_or(0)))
                    .sum()
            }),
            Arc::new(move |a, i, add| {
                if add {
                    let _ = e2.addr_writer.lock().unwrap().add(IfAddr::new(a, 32, i));
                } else {
                    let _ = e2.addr_writer.lock().unwrap().remove(a, 32, i);
                }
            }),
        );
        let e1 = e.clone();
        let e2 = e.clone();
        run(
            "fixed-256",
            Arc::new(move |qs| {
                let g = crossbeam_epoch::pin();
                qs.iter()
                    .map(|&q| u64::from(e1.fixed().get(&q, &g).copied().unwrap_or(0)))
                    .sum()
            }),
            Arc::new(move |a, i, add| {
                let mut w = e2
                    .fixed_writer
                    .as_ref()
                    .expect("the fixed table is built up to FIXED_MAX")
                    .lock()
                    .unwrap();
                if add {
                    w.insert(a, i);
                } else {
                    w.remove(&a, |v| *v == i);
                }
            }),
        );
        let e1 = e.clone();
        let e2 = e.clone();
        run(
            "papaya",
            Arc::new(move |qs| {
                let p = e1.papaya.pin();
                qs.iter()
                    .map(|&q| u64::from(p.get(&q.to_bits()).copied().unwrap_or(0)))
                    .sum()
            }),
            Arc::new(move |a, i, add| {
                let p = e2.papaya.pin();
                if add {
                    p.insert(a.to_bits(), i);
                } else {
                    p.remove(&a.to_bits());
                }
            }),
        );
        let e1 = e.clone();
        let e2 = e.clone();
        run(
            "dashmap",
            Arc::new(move |qs| {
                qs.iter()
                    .map(|&q| u64::from(e1.dashmap.get(&q.to_bits()).map_or(0, |r| *r)))
                    .sum()
            }),
            Arc::new(move |a, i, add| {
                if add {
                    e2.dashmap.insert(a.to_bits(), i);
                } else {
                    e2.dashmap.remove(&a.to_bits());
                }
            }),
        );
    }
    group.finish();
}

/// Heap bytes plus the struct itself, for a value built by `make`.
///
/// The largest of three builds: nothing else allocates while one runs, but garbage that other
/// benchmarks retired (their threads' epoch bags, papaya's reclaimer) may still be freed inside
/// the window, and such a free only ever lowers the difference (below zero, the attempt is
/// discarded).
fn footprint<T>(make: impl Fn() -> T) -> usize {
    (0..3)
        .filter_map(|_| {
            flush_epoch();
            let before = LIVE.load(Ordering::Relaxed);
            let value = make();
            let heap = usize::try_from(LIVE.load(Ordering::Relaxed) - before).ok();
            let total = heap.map(|heap| heap + std::mem::size_of_val(&value));
            drop(value);
            total
        })
        .max()
        .expect("older garbage was freed inside every one of three measurements")
}

/// Bytes of `t`'s bucket arrays that addr-table maps straight from the kernel rather than
/// taking from the global allocator (arrays of 2 MiB and more, on Linux: `ZeroedArray` in
/// `crates/addr-table/src/array.rs`), which the counting allocator does not see.
fn mapped_arrays(t: &addr_table::RhlTable<u32, u32>) -> usize {
    t.bucket_arrays()
        .iter()
        .map(|r| r.len())
        .filter(|&bytes| cfg!(target_os = "linux") && bytes >= 2 << 20)
        .sum()
}

/// Lets the epoch collector free what this thread retired so far.
fn flush_epoch() {
    for _ in 0..16 {
        crossbeam_epoch::pin().flush();
    }
}

/// Memory of an empty per-namespace table (printed and written beside criterion's data), and
/// the time to create and drop one (a namespace's setup cost).
fn empty_netns(c: &mut Criterion) {
    let rows = [
        (
            "addr-table (IPv4 hash only)",
            footprint(RhlWriter::<u32, u64>::new),
        ),
        (
            "addr-table (AddrTable: IPv4 + IPv6)",
            footprint(|| AddrWriter::new(NetnsId(1))),
        ),
        (
            "fixed-256",
            footprint(|| FixedWriter::<Ipv4Addr, u32>::new(1)),
        ),
        ("hashbrown", footprint(hashbrown::HashMap::<u32, u32>::new)),
        ("papaya", footprint(papaya::HashMap::<u32, u32>::new)),
        ("dashmap", footprint(dashmap::DashMap::<u32, u32>::new)),
    ];
    let mut report = String::from("## Memory\n\n| table | bytes of an empty table |\n|---|---|\n");
    for (name, bytes) in rows {
        report.push_str(&format!("| {name} | {bytes} |\n"));
    }
    // Populated: 100,000 keys (u32 -> u32), the size where lookups leave the caches.
    let n = 100_000u32;
    let rhl = || {
        let mut t = RhlWriter::<u32, u32>::new();
        (0..n).for_each(|k| t.insert(k, k).expect("fresh key"));
        t.finish_rehash();
        // Let the epoch free the tables the growth retired.
        flush_epoch();
        t
    };
    let rows = [
        (
            "addr-table (RhlTable)",
            footprint(rhl) + mapped_arrays(rhl().reader()),
        ),
        (
            "fixed-256",
            footprint(|| {
                let mut t = FixedWriter::<u32, u32>::new(1);
                (0..n).for_each(|k| t.insert(k, k));
                t
            }),
        ),
        (
            "hashbrown",
            footprint(|| {
                (0..n)
                    .map(|k| (k, k))
                    .collect::<hashbrown::HashMap<u32, u32>>()
            }),
        ),
        (
            "papaya",
            footprint(|| {
                let t = papaya::HashMap::<u32, u32>::new();
                (0..n).for_each(|k| {
                    t.pin().insert(k, k);
                });
                t
            }),
        ),
        (
            "dashmap",
            footprint(|| {
                let t = dashmap::DashMap::<u32, u32>::new();
                (0..n).for_each(|k| {
                    t.insert(k, k);
                });
                t
            }),
        ),
    ];
    report.push_str("\n| table | bytes per key with 100,000 `u32 -> u32` keys |\n|---|---|\n");
    for (name, bytes) in rows {
        report.push_str(&format!(
            "| {name} | {:.1} |\n",
            bytes as f64 / f64::from(n)
        ));
    }
    println!("addr-table/memory:\n{report}");
    let dir = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/criterion"));
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("addr-table-memory.md"), &report);
    }

    let mut group = c.benchmark_group("addr-table/netns-new");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1));
    group.bench_function(BenchmarkId::new("addr-table", "empty"), |b| {
        b.iter(|| black_box(RhlWriter::<u32, u64>::new()))
    });
    group.bench_function(BenchmarkId::new("fixed-256", "empty"), |b| {
        b.iter(|| black_box(FixedWriter::<Ipv4Addr, u32>::new(1)))
    });
    group.finish();
}

/// One lookup's time (ns) per engine, group and address count, from criterion's saved
/// estimates of this run (`CRITERION_HOME/**/new/`): the regression slope, else the mean, per
/// iteration of `BATCH` lookups.
fn saved_lookup_times(home: &std::path::Path) -> Vec<(String, String, usize, f64)> {
    let mut found = Vec::new();
    let mut pending = vec![home.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
            if !path.ends_with("new") {
                pending.push(path);
                continue;
            }
            let read = |name: &str| -> Option<serde_json::Value> {
                serde_json::from_str(&std::fs::read_to_string(path.join(name)).ok()?).ok()
            };
            let (Some(bench), Some(est)) = (read("benchmark.json"), read("estimates.json")) else {
                continue;
            };
            let group = bench["group_id"].as_str().unwrap_or_default().to_owned();
            let engine = bench["function_id"].as_str().unwrap_or_default().to_owned();
            let n = bench["value_str"].as_str().and_then(|v| v.parse().ok());
            let per_iter = est["slope"]["point_estimate"]
                .as_f64()
                .or_else(|| est["mean"]["point_estimate"].as_f64());
            if let (Some(n), Some(per_iter)) = (n, per_iter) {
                found.push((group, engine, n, per_iter / BATCH as f64));
            }
        }
    }
    found
}

/// Issue 23's goals against this run's lookup times, written beside criterion's data
/// (`addr-table-goals.md` under `CRITERION_HOME`, which `cargo xtask bench addr-table`
/// appends to the report): per address count, `addr-table` over `hashbrown` (goal at most
/// 1.5), and the largest counts over the smallest (goal at most 1.2).
fn goals(_: &mut Criterion) {
    let home = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/criterion"));
    let times = saved_lookup_times(&home);
    if times.is_empty() {
        // A filtered run without the lookup groups: nothing to report.
        return;
    }
    let time = |group: &str, engine: &str, n: usize| {
        times
            .iter()
            .find(|(g, e, m, _)| g == group && e == engine && *m == n)
            .map(|t| t.3)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_owned(),
    };
    let ns = |t: Option<f64>| t.map_or_else(|| "–".to_owned(), |t| format!("{t:.1} ns"));
    let verdict = |a: Option<f64>, b: Option<f64>, goal: f64| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            if a / b <= goal {
                "met"
            } else {
                "not met"
            }
        }
        _ => "–",
    };
    let (hit, miss) = ("addr-table/lookup", "addr-table/lookup-miss");
    let mut report = String::from(
        "## Against the goals of issue 23 (this run)\n\n\
         Per lookup, `addr-table` (`dev_find`) over `hashbrown` on the same queries (goal: at \
         most 1.5× at every size):\n\n\
         | addresses | hits: addr-table | hits: hashbrown | hits: ratio | misses: addr-table | \
         misses: hashbrown | misses: ratio | goal |\n|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for &n in &COUNTS {
        let (h, hb) = (time(hit, "addr-table", n), time(hit, "hashbrown", n));
        let (m, mb) = (time(miss, "addr-table", n), time(miss, "hashbrown", n));
        let met = match (verdict(h, hb, 1.5), verdict(m, mb, 1.5)) {
            ("met", "met") => "met",
            ("–", _) | (_, "–") => "–",
            _ => "not met",
        };
        report.push_str(&format!(
            "| {n} | {} | {} | {} | {} | {} | {} | {met} |\n",
            ns(h),
            ns(hb),
            ratio(h, hb),
            ns(m),
            ns(mb),
            ratio(m, mb),
        ));
    }
    let smallest = COUNTS[0];
    report.push_str(&format!(
        "\nFlatness, `addr-table`'s time at the largest sizes over its time at {smallest} \
         addresses (goal: at most 1.2×), and `hashbrown`'s own growth over the same sizes in \
         this run (the floor the memory hierarchy sets; no goal):\n\n\
         | addresses | hits | goal | misses | goal | hashbrown hits | hashbrown misses |\n\
         |---:|---:|---|---:|---|---:|---:|\n"
    ));
    for &n in &COUNTS[COUNTS.len() - 2..] {
        let (h, h0) = (
            time(hit, "addr-table", n),
            time(hit, "addr-table", smallest),
        );
        let (m, m0) = (
            time(miss, "addr-table", n),
            time(miss, "addr-table", smallest),
        );
        let (hb, hb0) = (time(hit, "hashbrown", n), time(hit, "hashbrown", smallest));
        let (mb, mb0) = (
            time(miss, "hashbrown", n),
            time(miss, "hashbrown", smallest),
        );
        report.push_str(&format!(
            "| {n} | {} | {} | {} | {} | {} | {} |\n",
            ratio(h, h0),
            verdict(h, h0, 1.2),
            ratio(m, m0),
            verdict(m, m0, 1.2),
            ratio(hb, hb0),
            ratio(mb, mb0),
        ));
    }
    println!("{report}");
    if std::fs::create_dir_all(&home).is_ok() {
        let _ = std::fs::write(home.join("addr-table-goals.md"), &report);
    }
}

criterion_group!(benches, lookup, goals, contended, empty_netns);
criterion_main!(benches);
