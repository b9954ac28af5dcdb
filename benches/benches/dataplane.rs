//! dataplane: nanoseconds per packet through the whole sans-IO pipeline (parse, validate,
//! route, policy, rewrite) for batches of 64 frames of 64 bytes, with bgp-full-v4 (or
//! bgp-full-v6) in the FIB, against the number of flows (1, 100, 8k, 100k). Engines, side by
//! side in one run:
//! - `dataplane`: the vector pipeline (`Queue::process_batch`) with the route cache;
//! - `dst-cache-off`: the same without the route cache;
//! - `scalar`: the one-frame-at-a-time reference (`Queue::process_batch_reference`) with the
//!   route cache;
//! - `ceiling`: what no router can beat here: parse and validate, TTL decrement, MAC rewrite,
//!   no lookups.
//!
//! Notes in `dataplane.md`; run with `cargo xtask bench dataplane`.
//!
//! Instructions per packet (load-independent), in the same run: in a benchmark run (`--bench`),
//! unless `DATAPLANE_CALLGRIND=0` or `valgrind` is missing, the bench first runs itself under `valgrind --tool=callgrind` in
//! count-only mode (below) over every family and number of flows, and writes the instructions
//! per packet of each engine and of each stage of the vector pipeline to
//! `$CRITERION_HOME/dataplane-instructions.md` (which `cargo xtask bench dataplane` appends to
//! the report) and to stdout; then criterion times the engines.
//!
//! Count-only mode: with `DATAPLANE_PASSES=N` (and optionally `DATAPLANE_FAMILY=ipv4`,
//! `DATAPLANE_FLOWS=8192`, `DATAPLANE_ENGINES=dataplane,scalar`), the bench skips criterion and,
//! after the checking pass, pushes the stream N more times through each selected engine; after
//! the checking pass and after each engine it calls `engine_done`, so that callgrind's
//! `--dump-after='*engine_done*'` writes one profile part per engine.
//!
//! The route cache's cost (issue 17, item 4), in the same run after criterion: an A/B of the
//! vector pipeline with the route cache against without it that samples where each queue lands
//! in memory instead of fixing it (see [`ab_report`]); written to
//! `$CRITERION_HOME/dataplane-ab.md` (appended to the report) and stdout. `DATAPLANE_AB=0`
//! skips it, `DATAPLANE_AB=only` runs only it (no callgrind, no criterion);
//! `DATAPLANE_AB_ROUNDS` (default 24) and `DATAPLANE_AB_MS` (measured milliseconds per engine
//! and round, default 100) size it.
//!
//! Time per stage (diagnostics, not part of the report): built with the feature `stage-clock`
//! (`cargo bench -p xfwd-benches --bench dataplane --features stage-clock`),
//! `DATAPLANE_STAGES=only` times every stage of the vector pipeline with the route cache
//! (`dataplane::stage_clock`) at 1, 8k and 100k flows, both families interleaved round by
//! round (`DATAPLANE_AB_ROUNDS` rounds, default 24), and prints nanoseconds per packet per
//! stage, each lap's clock read subtracted; see [`stage_report`].
//!
//! Two variants of the pipeline in one binary (diagnostics): built with the feature
//! `ab-variant`, `DATAPLANE_AB=variant` times the variant under test
//! (`dataplane::stage_clock::VARIANT` set) against the other, interleaved block by block on
//! one queue, at 1, 8k and 100k flows, both families; see [`variant_report`].

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::wire::Family;
use dataplane::wire::ethernet::EthernetFrame;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::ipv6::Ipv6Packet;
use dataplane::{Config, Frame, HeapPool, Queue, Tables, Verdict};
use fib_trie::{FibWriter, InsertFlags, NextHop, Route};
use neigh_table::{
    DevConf, DevConfWriter, Link, LinkFlags, NETCONF_ALL, NETCONF_DEFAULT, Neighbour, NudState,
    OperState,
};
use rand::{RngExt, SeedableRng, rngs::StdRng};
use udp_socktab::{NetnsConfig, SockTable, TableConfig};
use xfwd_benches::data::routes;

/// Frames per batch (one epoch pin per batch), as an AF_XDP run loop takes them.
const BATCH: usize = 64;
/// Packets per iteration.
const PACKETS: usize = 4096;
/// UMEM-like chunks the frames cycle through.
const CHUNKS: usize = 1024;
const CHUNK_SIZE: usize = 2048;
const HEADROOM: usize = 256;
/// Frame length on the wire (without FCS).
const FRAME_LEN: usize = 64;
const FLOWS: [usize; 4] = [1, 100, 8192, 100_000];
/// Egress interfaces the routes spread over (by origin AS); the ingress is interface 1.
const INTERFACES: u32 = 64;
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];
const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn mac(i: u32) -> [u8; 6] {
    [2, 0, 0, 0, (i >> 8) as u8, i as u8]
}

fn gw4(i: u32) -> u32 {
    u32::from(Ipv4Addr::new(100, 64, i as u8, 1))
}

fn gw6(i: u32) -> u128 {
    0xfd00_0000_0000_0000_0000_0000_0000_0001 | (u128::from(i) << 64)
}

/// One namespace with bgp-full-v4 and bgp-full-v6 routed over 64 interfaces, every gateway's
/// neighbour resolved, no policies. Returns the tables and the announced prefixes.
#[allow(clippy::type_complexity, reason = "bench setup")]
fn tables() -> (Tables, Vec<(u32, u8)>, Vec<(u128, u8)>) {
    let (sockets, mut writer) = SockTable::new(TableConfig::default()).expect("sock table");
    let ns = writer.add_netns(NetnsConfig::default()).expect("netns");
    let (mut t, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, ns);
    for i in 1..=INTERFACES + 1 {
        let mut link = Link {
            mac: Some(mac(i)),
            ..Link::new(i, format!("eth{i}"))
        };
        link.flags = LinkFlags::UP | LinkFlags::RUNNING;
        link.oper = OperState::UP;
        writers.links.upsert(link);
        writers.neigh.upsert(Neighbour::new(
            i,
            IpAddr::V4(gw4(i).into()),
            Some([2, 0, 0, 1, 0, i as u8]),
            NudState::REACHABLE,
        ));
        writers.neigh.upsert(Neighbour::new(
            i,
            IpAddr::V6(gw6(i).into()),
            Some([2, 0, 0, 1, 0, i as u8]),
            NudState::REACHABLE,
        ));
    }
    let mut fib4 = FibWriter::new();
    let mut p4 = Vec::new();
    for r in routes::BGP_FULL_V4.load().expect("bgp-full-v4") {
        let (addr, len) = (u32::from(r.prefix.addr), r.prefix.len);
        let oif = 2 + r.origin_asn % INTERFACES;
        fib4.insert(
            &Route::unicast(addr, len, 254, vec![NextHop::new(Some(gw4(oif)), oif)]),
            InsertFlags::ADD,
        )
        .expect("unique prefixes");
        p4.push((addr, len));
    }
    let mut fib6 = FibWriter::new();
    let mut p6 = Vec::new();
    for r in routes::BGP_FULL_V6.load().expect("bgp-full-v6") {
        let (addr, len) = (u128::from(r.prefix.addr), r.prefix.len);
        let oif = 2 + r.origin_asn % INTERFACES;
        fib6.insert(
            &Route::unicast(addr, len, 254, vec![NextHop::new(Some(gw6(oif)), oif)]),
            InsertFlags::ADD,
        )
        .expect("unique prefixes");
        p6.push((addr, len));
    }
    // Frozen from here on: the writers are dropped, the run loops' `Arc`s keep the tables.
    t.fib4 = Arc::clone(fib4.reader());
    t.fib6 = Arc::clone(fib6.reader());
    t.devconf = Arc::clone(devconf().reader());
    t.generation.bump();
    // Building the tables left epoch-deferred frees behind; collect them now, so that no
    // engine's measurement (the first to pin often enough) pays for them.
    for _ in 0..100_000 {
        crossbeam_epoch::pin().flush();
    }
    (t, p4, p6)
}

/// The devices' switches as the netlink mirror follows them on a router: `all`, `default` and
/// every device forward both families; `rp_filter` is `DATAPLANE_RP_FILTER` (0 off, the
/// default; 1 strict; 2 loose, systemd's default) on `all`.
fn devconf() -> DevConfWriter {
    let rp_filter = std::env::var("DATAPLANE_RP_FILTER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut t = DevConfWriter::followed();
    for v6 in [false, true] {
        let on = DevConf {
            forwarding: Some(true),
            rp_filter: (!v6).then_some(0),
        };
        t.update(v6, NETCONF_DEFAULT, on);
        for i in 1..=INTERFACES + 1 {
            t.update(v6, i as i32, on);
        }
        t.update(
            v6,
            NETCONF_ALL,
            DevConf {
                rp_filter: (!v6).then_some(rp_filter),
                ..on
            },
        );
    }
    t
}

/// A 64-byte UDP frame from the host to `dst` (IPv4: 14 + 20 + 8 + 22; IPv6: 14 + 40 + 8 + 2).
fn frame(dst: IpAddr) -> Vec<u8> {
    let mut out = Vec::new();
    let builder = etherparse::PacketBuilder::ethernet2(HOST_MAC, IN_MAC);
    match dst {
        IpAddr::V4(d) => builder
            .ipv4([198, 18, 0, 1], d.octets(), 64)
            .udp(1024, 9)
            .write(&mut out, &[0; 22]),
        IpAddr::V6(d) => builder
            .ipv6(
                "2001:db8:18::1".parse::<Ipv6Addr>().unwrap().octets(),
                d.octets(),
                64,
            )
            .udp(1024, 9)
            .write(&mut out, &[0; 2]),
    }
    .expect("frame");
    assert_eq!(out.len(), FRAME_LEN);
    out
}

/// `count` destinations, each a random address inside a random announced prefix (not the
/// default route), as 64-byte frames; then a stream of `PACKETS` frames drawn uniformly.
fn stream(
    count: usize,
    v6: bool,
    p4: &[(u32, u8)],
    p6: &[(u128, u8)],
    rng: &mut StdRng,
) -> Vec<Vec<u8>> {
    let dests: Vec<Vec<u8>> = (0..count)
        .map(|_| {
            if v6 {
                let (a, l) = loop {
                    let p = p6[rng.random_range(0..p6.len())];
                    if p.1 > 0 {
                        break p;
                    }
                };
                let host = rng.random::<u128>().checked_shr(u32::from(l)).unwrap_or(0);
                frame(IpAddr::V6(Ipv6Addr::from(a | host)))
            } else {
                let (a, l) = loop {
                    let p = p4[rng.random_range(0..p4.len())];
                    if p.1 > 0 {
                        break p;
                    }
                };
                let host = rng.random::<u32>().checked_shr(u32::from(l)).unwrap_or(0);
                frame(IpAddr::V4(Ipv4Addr::from(a | host)))
            }
        })
        .collect();
    (0..PACKETS)
        .map(|_| dests[rng.random_range(0..dests.len())].clone())
        .collect()
}

/// The run loop's buffers: chunks the frames are received into.
struct Umem {
    chunks: Vec<Vec<u8>>,
    next: usize,
}

/// How a batch is processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    /// `Queue::process_batch`.
    Vector,
    /// `Queue::process_batch_reference`.
    Scalar,
    /// Parse, TTL, MACs; no lookups.
    Ceiling,
}

#[inline(never)]
fn run_vector(queue: &mut Queue, tables: &Tables, frames: &mut [Frame<'_>], pool: &mut HeapPool) {
    let guard = crossbeam_epoch::pin();
    queue.process_batch(tables, &guard, 0, frames, pool);
}

#[inline(never)]
fn run_scalar(queue: &mut Queue, tables: &Tables, frames: &mut [Frame<'_>], pool: &mut HeapPool) {
    let guard = crossbeam_epoch::pin();
    queue.process_batch_reference(tables, &guard, 0, frames, pool);
}

/// The ceiling: the pipeline's own parser and wire views, then the rewrite every forwarded
/// frame needs (TTL / hop limit, MACs), to one fixed egress.
#[inline(never)]
fn run_ceiling(config: &Config, frames: &mut [Frame<'_>]) {
    const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const DST_MAC: [u8; 6] = [2, 0, 0, 1, 0, 2];
    // One `Meta` parsed into in place (`parse` would move each out through its result).
    let mut meta = dataplane::parse::Meta::default();
    for f in frames.iter_mut() {
        let start = f.offset;
        let end = start + f.len;
        f.verdict = match dataplane::parse::parse_into(&f.chunk[start..end], config, &mut meta) {
            Ok(()) => {
                let ip = start + meta.l3();
                match meta.family {
                    Family::V6 => {
                        Ipv6Packet::new_unchecked(&mut f.chunk[ip..ip + 40]).decrement_hop_limit()
                    }
                    Family::V4 => {
                        Ipv4Packet::new_unchecked(&mut f.chunk[ip..ip + 20]).decrement_ttl()
                    }
                }
                let mut eth = EthernetFrame::new_unchecked(&mut f.chunk[start..ip]);
                eth.set_dst_addr(DST_MAC);
                eth.set_src_addr(SRC_MAC);
                Verdict::Transmit { ifindex: 2 }
            }
            Err(verdict) => verdict,
        };
    }
}

/// Pushes the stream through `queue` in batches of 64 (one pin per batch), each frame first
/// "received" (copied) into the next chunk; returns a checksum of the verdicts.
fn forward(
    engine: Engine,
    queue: &mut Queue,
    tables: &Tables,
    umem: &mut Umem,
    pool: &mut HeapPool,
    stream: &[Vec<u8>],
) -> u64 {
    let mut sum = 0u64;
    for batch in stream.chunks(BATCH) {
        let start = umem.next;
        umem.next = (umem.next + BATCH) % CHUNKS;
        let chunks = &mut umem.chunks[start..start + batch.len()];
        let mut frames: [Frame<'_>; BATCH] = std::array::from_fn(|_| Frame::new(&mut [], 0, 0, 1));
        for ((slot, chunk), bytes) in frames.iter_mut().zip(chunks.iter_mut()).zip(batch) {
            chunk[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
            *slot = Frame::new(chunk, HEADROOM, bytes.len(), 1);
        }
        let frames = &mut frames[..batch.len()];
        match engine {
            Engine::Vector => run_vector(queue, tables, frames, pool),
            Engine::Scalar => run_scalar(queue, tables, frames, pool),
            Engine::Ceiling => run_ceiling(queue.config(), frames),
        }
        for f in frames.iter() {
            sum += match f.verdict {
                Verdict::Transmit { ifindex } => {
                    u64::from(ifindex) + u64::from(f.chunk[f.offset + 5])
                }
                other => 1000 + format!("{other:?}").len() as u64,
            };
        }
    }
    sum
}

/// The engines of one run: name, how, route cache configuration.
const ENGINES: [(&str, Engine, bool); 4] = [
    ("dataplane", Engine::Vector, true),
    ("dst-cache-off", Engine::Vector, false),
    ("scalar", Engine::Scalar, true),
    ("ceiling", Engine::Ceiling, false),
];

/// A mark between engines for callgrind's `--dump-after` (count-only mode).
#[inline(never)]
fn engine_done() {
    black_box(());
}

/// The instruction-count mode's settings (see the module documentation).
struct CountOnly {
    passes: usize,
    engines: Option<String>,
    family: Option<String>,
    flows: Option<usize>,
}

impl CountOnly {
    fn from_env() -> Option<Self> {
        let passes = std::env::var("DATAPLANE_PASSES").ok()?.parse().ok()?;
        Some(CountOnly {
            passes,
            engines: std::env::var("DATAPLANE_ENGINES").ok(),
            family: std::env::var("DATAPLANE_FAMILY").ok(),
            flows: std::env::var("DATAPLANE_FLOWS")
                .ok()
                .and_then(|f| f.parse().ok()),
        })
    }

    fn wants_engine(&self, name: &str) -> bool {
        self.engines
            .as_deref()
            .is_none_or(|e| e.split(',').any(|e| e == name))
    }

    fn wants(&self, family: &str, flows: usize) -> bool {
        self.family.as_deref().is_none_or(|f| f == family) && self.flows.is_none_or(|n| n == flows)
    }
}

/// Passes per engine in the instruction count (after the checking pass).
const COUNT_PASSES: usize = 2;

/// The stages of the vector pipeline, in order, as callgrind names them (`stage_decide`
/// rewrites the plain transmits it passes; `stage_rewrite`, only for a vector with another
/// frame, rewrites the rest and gives the other frames' verdicts and counts).
const STAGES: [&str; 7] = [
    "stage_parse",
    "stage_probe",
    "stage_fib",
    "stage_egress",
    "stage_fill",
    "stage_decide",
    "stage_rewrite",
];

/// Runs this bench under callgrind in count-only mode and returns the report of instructions
/// per packet, per engine and per stage; `None` when valgrind is missing or it failed.
fn instruction_report() -> Option<String> {
    let dir = std::env::temp_dir().join(format!("xfwd-dataplane-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let out = dir.join("cg.out");
    let exe = std::env::current_exe().ok()?;
    eprintln!("dataplane: counting instructions under callgrind (a few minutes)");
    let status = std::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .args([
            "--collect-atstart=no",
            "--toggle-collect=*run_vector*",
            "--toggle-collect=*run_scalar*",
            "--toggle-collect=*run_ceiling*",
            "--dump-after=*engine_done*",
        ])
        .arg(&exe)
        .arg("--bench")
        .env("DATAPLANE_PASSES", COUNT_PASSES.to_string())
        .env_remove("DATAPLANE_FAMILY")
        .env_remove("DATAPLANE_FLOWS")
        .env_remove("DATAPLANE_ENGINES")
        .env_remove("DATAPLANE_AB")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("dataplane: callgrind failed ({status})");
        return None;
    }
    // One part per dump, in the order of the run: per family and number of flows, the
    // checking pass, then each engine.
    let mut parts: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| {
            let path = e.ok()?.path();
            let n = path.extension()?.to_str()?.parse().ok()?;
            Some((n, path))
        })
        .collect();
    parts.sort();
    let per_case = 1 + ENGINES.len();
    let packets = (COUNT_PASSES * PACKETS) as f64;
    let mut report = String::from(
        "## Instructions per packet (callgrind)\n\nCounted by the bench itself under \
         `valgrind --tool=callgrind` (load-independent), after a checking pass, over two \
         passes of the stream per engine; the stage columns split the vector pipeline's \
         (`dataplane` with the route cache, `off` without); `decide` includes the rewrite of \
         the plain transmits it passes, `rewrite` is the pass for a vector with another \
         frame. `ceiling / vector` is the share of the vector pipeline's instructions that \
         the ceiling engine needs.\n\n",
    );
    let mut header = String::from(
        "| family | flows | dataplane | dst-cache-off | scalar | ceiling | ceiling / vector |",
    );
    let mut rule = String::from("|---|---:|---:|---:|---:|---:|---:|");
    for stage in STAGES {
        header.push_str(&format!(
            " {} (cache / off) |",
            stage.trim_start_matches("stage_")
        ));
        rule.push_str("---:|");
    }
    report.push_str(&format!("{header}\n{rule}\n"));
    let cases = ["ipv4", "ipv6"]
        .into_iter()
        .flat_map(|family| FLOWS.into_iter().map(move |flows| (family, flows)));
    for (case, (family, flows)) in cases.enumerate() {
        let engine_costs: Vec<std::collections::HashMap<String, u64>> = (0..ENGINES.len())
            .map(|e| {
                parts
                    .get(case * per_case + 1 + e)
                    .map(|(_, path)| inclusive_costs(path))
                    .unwrap_or_default()
            })
            .collect();
        let per_packet = |e: usize, name: &str| {
            engine_costs[e]
                .get(name)
                .map_or(0.0, |&c| c as f64 / packets)
        };
        let totals = [
            per_packet(0, "run_vector"),
            per_packet(1, "run_vector"),
            per_packet(2, "run_scalar"),
            per_packet(3, "run_ceiling"),
        ];
        let mut row = format!(
            "| {family} | {flows} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} |",
            totals[0],
            totals[1],
            totals[2],
            totals[3],
            totals[3] / totals[0]
        );
        for stage in STAGES {
            row.push_str(&format!(
                " {:.0} / {:.0} |",
                per_packet(0, stage),
                per_packet(1, stage)
            ));
        }
        report.push_str(&row);
        report.push('\n');
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(report)
}

/// The inclusive instructions of the bench's engine functions and the pipeline's stages in one
/// callgrind part (`callgrind_annotate --inclusive=yes`; a function inlined from several
/// files shows several lines: the largest is the whole function).
fn inclusive_costs(path: &std::path::Path) -> std::collections::HashMap<String, u64> {
    let mut costs = std::collections::HashMap::new();
    let Ok(output) = std::process::Command::new("callgrind_annotate")
        .arg("--inclusive=yes")
        .arg("--threshold=100")
        .arg("--auto=no")
        .arg(path)
        .output()
    else {
        return costs;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut words = line.split_whitespace();
        let Some(count) = words
            .next()
            .and_then(|w| w.replace(',', "").parse::<u64>().ok())
        else {
            continue;
        };
        let Some(function) = line.split(':').next_back() else {
            continue;
        };
        let function = function.split_whitespace().next().unwrap_or("");
        let names = STAGES
            .iter()
            .chain(&["run_vector", "run_scalar", "run_ceiling"]);
        for name in names {
            if function == *name {
                let entry = costs.entry((*name).to_owned()).or_insert(0);
                *entry = (*entry).max(count);
            }
        }
    }
    costs
}

fn per_packet(c: &mut Criterion) {
    let count_only = CountOnly::from_env();
    let ab = std::env::var("DATAPLANE_AB").unwrap_or_default();
    let in_bench = std::env::args().any(|a| a == "--bench");
    if std::env::var("DATAPLANE_STAGES").is_ok_and(|v| v == "only") {
        let (tables, p4, p6) = tables();
        println!("{}", stage_report(&tables, &p4, &p6));
        return;
    }
    if ab == "variant" {
        let (tables, p4, p6) = tables();
        println!("{}", variant_report(&tables, &p4, &p6));
        return;
    }
    if ab == "only" {
        let (tables, p4, p6) = tables();
        write_section("dataplane-ab.md", &ab_report(&tables, &p4, &p6));
        return;
    }
    // Only in a benchmark run (`cargo bench`, not the harness's test mode), unless turned off.
    let wants_count = std::env::args().any(|a| a == "--bench")
        && std::env::var("DATAPLANE_CALLGRIND").map_or(true, |v| v != "0");
    let has_valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if count_only.is_none() && wants_count && has_valgrind {
        if let Some(report) = instruction_report() {
            write_section("dataplane-instructions.md", &report);
        }
    }
    let (tables, p4, p6) = tables();
    let mut rng = StdRng::seed_from_u64(9);
    let mut umem = Umem {
        chunks: vec![vec![0u8; CHUNK_SIZE]; CHUNKS],
        next: 0,
    };
    let mut pool = HeapPool::new(CHUNK_SIZE, 64);
    for (family, v6) in [("ipv4", false), ("ipv6", true)] {
        let mut g = c.benchmark_group(format!("dataplane/{family}"));
        g.sample_size(20);
        g.warm_up_time(std::time::Duration::from_millis(500));
        g.measurement_time(std::time::Duration::from_secs(2));
        g.throughput(Throughput::Elements(PACKETS as u64));
        for flows in FLOWS {
            let stream = stream(flows, v6, &p4, &p6, &mut rng);
            if count_only.as_ref().is_some_and(|c| !c.wants(family, flows)) {
                continue;
            }
            let mut queues: Vec<(&str, Engine, Queue)> = ENGINES
                .iter()
                .filter(|(name, _, _)| count_only.as_ref().is_none_or(|c| c.wants_engine(name)))
                .map(|&(name, engine, cache)| {
                    let config = Config {
                        dst_cache: cache.then(dst_cache::Config::default),
                        ..Config::default()
                    };
                    (name, engine, Queue::new(config).expect("config"))
                })
                .collect();
            // Every routing engine gives the same verdicts; all of them forward.
            let sums: Vec<u64> = queues
                .iter_mut()
                .filter(|(_, engine, _)| *engine != Engine::Ceiling)
                .map(|(_, engine, q)| forward(*engine, q, &tables, &mut umem, &mut pool, &stream))
                .collect();
            assert!(
                sums.windows(2).all(|w| w[0] == w[1]),
                "{family}/{flows}: {sums:?}"
            );
            for (_, engine, q) in &queues {
                let counters = q.counters();
                if *engine != Engine::Ceiling {
                    assert_eq!(
                        counters.transmit, counters.rx,
                        "{family}/{flows}: {counters:?}"
                    );
                }
            }
            if let Some(count) = &count_only {
                engine_done();
                for (_, engine, queue) in &mut queues {
                    for _ in 0..count.passes {
                        black_box(forward(
                            *engine, queue, &tables, &mut umem, &mut pool, &stream,
                        ));
                    }
                    engine_done();
                }
                continue;
            }
            for (name, engine, queue) in &mut queues {
                g.bench_function(BenchmarkId::new(*name, flows), |b| {
                    b.iter(|| {
                        black_box(forward(
                            *engine, queue, &tables, &mut umem, &mut pool, &stream,
                        ))
                    });
                });
            }
        }
        g.finish();
    }
    // The A/B after criterion, in a benchmark run only (not in the harness's test mode).
    if count_only.is_none() && in_bench && ab != "0" {
        write_section("dataplane-ab.md", &ab_report(&tables, &p4, &p6));
    }
}

/// Flows of the A/B: the two that item 4 names, and 100 (where a cache hit competes with the
/// FIB's ingress memo; informative).
const AB_FLOWS: [usize; 3] = [100, 8192, 100_000];
/// Stream passes per timed block of the A/B (about 0.3 ms of work: most blocks run between
/// two preemptions even on a loaded machine).
const AB_BLOCK: usize = 2;
/// The quantile of a round's block times that stands for the engine in that round: a low one,
/// the blocks no other process slowed down (on a quiet machine about the median).
const AB_QUANTILE: f64 = 0.2;

/// The A/B's settings from the environment (see the module documentation).
struct AbSettings {
    rounds: usize,
    per_engine: std::time::Duration,
}

impl AbSettings {
    fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(default)
        };
        AbSettings {
            rounds: var("DATAPLANE_AB_ROUNDS", 24).max(2) as usize,
            per_engine: std::time::Duration::from_millis(var("DATAPLANE_AB_MS", 100).max(1)),
        }
    }
}

/// A fresh vector-pipeline queue, with or without the route cache, boxed behind a heap
/// allocation of random size (0 to 64 KiB in cache lines) that is returned with it and must
/// live as long: so that every round places the queue's state (lanes, memos, cache) at another
/// offset, sampling the cache-set mapping instead of fixing one.
fn fresh_queue(cache: bool, rng: &mut StdRng) -> (Vec<u8>, Box<Queue>) {
    let pad = vec![0u8; 64 * rng.random_range(0..1024usize) + 1];
    let config = Config {
        dst_cache: cache.then(dst_cache::Config::default),
        ..Config::default()
    };
    (pad, Box::new(Queue::new(config).expect("config")))
}

/// Nanoseconds per packet of `AB_BLOCK` passes of the stream through `queue`.
fn ab_block(
    queue: &mut Queue,
    tables: &Tables,
    umem: &mut Umem,
    pool: &mut HeapPool,
    stream: &[Vec<u8>],
) -> f64 {
    let start = std::time::Instant::now();
    for _ in 0..AB_BLOCK {
        black_box(forward(Engine::Vector, queue, tables, umem, pool, stream));
    }
    start.elapsed().as_nanos() as f64 / (AB_BLOCK * stream.len()) as f64
}

/// The median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q`-quantile of sorted `v` (linear between ranks).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// One round's timed blocks of two contenders, interleaved A B B A (a drift of the machine's
/// speed within the round cancels out) until each has run `settings.per_engine`: `block(true)`
/// times a block of A, `block(false)` one of B, each in ns per packet of a stream of
/// `stream_len` frames. Returns the [`AB_QUANTILE`] of A's block times and of B's.
fn abba_round(
    settings: &AbSettings,
    stream_len: usize,
    mut block: impl FnMut(bool) -> f64,
) -> (f64, f64) {
    let (mut times_a, mut times_b) = (Vec::new(), Vec::new());
    let (mut spent_a, mut spent_b) = (0.0f64, 0.0f64);
    let budget = settings.per_engine.as_nanos() as f64;
    let block_packets = (AB_BLOCK * stream_len) as f64;
    let mut k = 0usize;
    while spent_a < budget || spent_b < budget {
        let a = k % 4 == 0 || k % 4 == 3;
        let t = block(a);
        let (spent, times) = if a {
            (&mut spent_a, &mut times_a)
        } else {
            (&mut spent_b, &mut times_b)
        };
        *spent += t * block_packets;
        times.push(t);
        k += 1;
    }
    times_a.sort_by(f64::total_cmp);
    times_b.sort_by(f64::total_cmp);
    (
        quantile(&times_a, AB_QUANTILE),
        quantile(&times_b, AB_QUANTILE),
    )
}

/// One A/B case: per round, fresh queues with and without the route cache (built in
/// alternating order, each behind a random pad), a warm-up of each, then timed blocks of each
/// interleaved A B B A … until each has run `per_engine`; the round's ratio is the
/// [`AB_QUANTILE`] of the block times with the cache over the same without. Returns the
/// per-round ratios and the medians over the rounds of those block times (with, without).
fn ab_case(
    tables: &Tables,
    umem: &mut Umem,
    pool: &mut HeapPool,
    stream: &[Vec<u8>],
    settings: &AbSettings,
    rng: &mut StdRng,
) -> (Vec<f64>, f64, f64) {
    let mut ratios = Vec::with_capacity(settings.rounds);
    let (mut all_on, mut all_off) = (Vec::new(), Vec::new());
    for round in 0..settings.rounds {
        let on_first = round % 2 == 0;
        let (pad_a, mut a) = fresh_queue(on_first, rng);
        let (pad_b, mut b) = fresh_queue(!on_first, rng);
        // Warm-up: the cache's bypass settles, the memos fill, the tables' paths are cached.
        for _ in 0..16 {
            ab_block(&mut a, tables, umem, pool, stream);
            ab_block(&mut b, tables, umem, pool, stream);
        }
        let (time_a, time_b) = abba_round(settings, stream.len(), |first| {
            let queue = if first { &mut a } else { &mut b };
            ab_block(queue, tables, umem, pool, stream)
        });
        let (on, off) = if on_first {
            (time_a, time_b)
        } else {
            (time_b, time_a)
        };
        ratios.push(on / off);
        all_on.push(on);
        all_off.push(off);
        drop((a, b, pad_a, pad_b));
    }
    (ratios, median(&mut all_on), median(&mut all_off))
}

/// The bootstrap 95% interval of the median of `ratios` (2,000 resamples, fixed seed).
fn bootstrap_median(ratios: &[f64]) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(4);
    let mut medians: Vec<f64> = (0..2000)
        .map(|_| {
            let mut sample: Vec<f64> = (0..ratios.len())
                .map(|_| ratios[rng.random_range(0..ratios.len())])
                .collect();
            median(&mut sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (quantile(&medians, 0.025), quantile(&medians, 0.975))
}

/// The route cache's cost against none (issue 17, item 4), as a Markdown section: for each
/// family and number of flows in [`AB_FLOWS`], [`ab_case`]'s rounds, the median of the
/// per-round ratios as a cost in percent with its bootstrap 95% interval and interquartile
/// range, and the verdict against the 1% bound (met when the interval's upper end is at most
/// +1%, not met when its lower end is above, else not resolved).
fn ab_report(tables: &Tables, p4: &[(u32, u8)], p6: &[(u128, u8)]) -> String {
    let settings = AbSettings::from_env();
    let mut umem = Umem {
        chunks: vec![vec![0u8; CHUNK_SIZE]; CHUNKS],
        next: 0,
    };
    let mut pool = HeapPool::new(CHUNK_SIZE, 64);
    let mut report = format!(
        "## The route cache's cost (A/B, issue 17 item 4)\n\nThe vector pipeline with the \
         route cache (default: 512 entries, adaptive bypass) against the same without it, in \
         {} rounds per case. Each round builds both queues afresh (in alternating order, each \
         behind a heap pad of random size, so each round samples another placement of lanes, \
         memos and cache in memory), warms them up, then times blocks of {} passes of the \
         same stream through each, interleaved A B B A, until each has run {} ms; the round's \
         ratio is the 20th percentile of the block times with the cache over the same without \
         (the blocks no other process slowed down). Cost: the \
         median of the rounds' ratios − 1, with its bootstrap 95% interval (2,000 resamples) \
         and the interquartile range of the rounds. Item 4 (at most 1% at 8k and 100k flows) \
         is *met* when the interval's upper end is at most +1%, *not met* when its lower end \
         is above +1%, else *not resolved*. 100 flows is shown for information.\n\n\
         | family | flows | with cache (ns) | without (ns) | cost (median) | 95% interval | \
         IQR of rounds | item 4 |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
        settings.rounds,
        AB_BLOCK,
        settings.per_engine.as_millis()
    );
    let mut rng = StdRng::seed_from_u64(0xab);
    for (family, v6) in [("ipv4", false), ("ipv6", true)] {
        for flows in AB_FLOWS {
            let stream = stream(flows, v6, p4, p6, &mut rng);
            let (mut ratios, on, off) =
                ab_case(tables, &mut umem, &mut pool, &stream, &settings, &mut rng);
            let cost = (median(&mut ratios) - 1.0) * 100.0;
            let (lo, hi) = bootstrap_median(&ratios);
            let (lo, hi) = ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0);
            let (q1, q3) = (
                (quantile(&ratios, 0.25) - 1.0) * 100.0,
                (quantile(&ratios, 0.75) - 1.0) * 100.0,
            );
            let verdict = if flows < 8192 {
                "(information)"
            } else if hi <= 1.0 {
                "**met**"
            } else if lo > 1.0 {
                "**not met**"
            } else {
                "not resolved"
            };
            let line = format!(
                "| {family} | {flows} | {on:.2} | {off:.2} | {cost:+.2}% | {lo:+.2}% … {hi:+.2}% \
                 | {q1:+.2}% … {q3:+.2}% | {verdict} |\n"
            );
            eprint!("dataplane A/B: {line}");
            report.push_str(&line);
        }
    }
    report
}

/// Nanoseconds per packet in each stage of the vector pipeline with the route cache
/// (`dataplane::stage_clock`, which needs the feature `stage-clock`), at 1, 8k and 100k flows,
/// IPv4 and IPv6. Each round builds a queue per case, warms it up, then times 8 passes of
/// each case's stream in turn, so that both families see the same load; a stage's figure is
/// the median over the rounds, with the cost of one clock read (measured in each round)
/// subtracted once per vector and stage.
#[cfg(feature = "stage-clock")]
fn stage_report(tables: &Tables, p4: &[(u32, u8)], p6: &[(u128, u8)]) -> String {
    use dataplane::stage_clock::{STAGES, read_cost, take};
    const PASSES: usize = 8;
    let rounds = AbSettings::from_env().rounds;
    let mut rng = StdRng::seed_from_u64(17);
    let mut umem = Umem {
        chunks: vec![vec![0u8; CHUNK_SIZE]; CHUNKS],
        next: 0,
    };
    let mut pool = HeapPool::new(CHUNK_SIZE, 64);
    let cases: Vec<(&str, usize, Vec<Vec<u8>>)> = [("ipv4", false), ("ipv6", true)]
        .into_iter()
        .flat_map(|(family, v6)| [1, 8192, 100_000].map(|flows| (family, v6, flows)))
        .map(|(family, v6, flows)| (family, flows, stream(flows, v6, p4, p6, &mut rng)))
        .collect();
    // Per case, per round: ns per packet per stage, then the whole pass.
    let mut samples = vec![vec![Vec::new(); STAGES.len() + 1]; cases.len()];
    for _ in 0..rounds {
        for (c, (_, _, stream)) in cases.iter().enumerate() {
            let (_pad, mut queue) = fresh_queue(true, &mut rng);
            for _ in 0..2 {
                black_box(forward(
                    Engine::Vector,
                    &mut queue,
                    tables,
                    &mut umem,
                    &mut pool,
                    stream,
                ));
            }
            let read = read_cost(10_000);
            let _ = take();
            let start = std::time::Instant::now();
            for _ in 0..PASSES {
                black_box(forward(
                    Engine::Vector,
                    &mut queue,
                    tables,
                    &mut umem,
                    &mut pool,
                    stream,
                ));
            }
            let whole = start.elapsed().as_nanos() as f64;
            let (sums, vectors) = take();
            let packets = (PASSES * stream.len()) as f64;
            for (s, sum) in sums.iter().enumerate() {
                let ns = (*sum as f64 - read * vectors as f64).max(0.0) / packets;
                samples[c][s].push(ns);
            }
            samples[c][STAGES.len()].push(whole / packets);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = format!(
        "## Time per stage (ns per packet, median of {rounds} rounds; clock reads subtracted)\n\n\
         | family | flows | whole (clock on) |"
    );
    for stage in STAGES {
        out.push_str(&format!(" {stage} |"));
    }
    out.push_str(&format!(
        "\n|---|---:|---:|{}\n",
        "---:|".repeat(STAGES.len())
    ));
    for ((family, flows, _), mut per_stage) in cases.iter().zip(samples) {
        let whole = median(&mut per_stage[STAGES.len()]);
        out.push_str(&format!("| {family} | {flows} | {whole:.2} |"));
        for stage in per_stage.iter_mut().take(STAGES.len()) {
            out.push_str(&format!(" {:.2} |", median(stage)));
        }
        out.push('\n');
    }
    out
}

/// Without the feature `stage-clock` there is nothing to time.
#[cfg(not(feature = "stage-clock"))]
fn stage_report(_: &Tables, _: &[(u32, u8)], _: &[(u128, u8)]) -> String {
    "DATAPLANE_STAGES needs the feature `stage-clock`: \
     cargo bench -p xfwd-benches --bench dataplane --features stage-clock"
        .to_owned()
}

/// The variant under test (`dataplane::stage_clock::VARIANT`, feature `ab-variant`) against
/// the other, in one binary: per case and round, a fresh queue with the route cache (behind a
/// random pad), warmed up, then blocks of [`AB_BLOCK`] passes with the switch on and off,
/// interleaved A B B A, until each has run `DATAPLANE_AB_MS`; the round's ratio is the
/// [`AB_QUANTILE`] of the block times with the variant over the same without. Prints the
/// median ratio − 1 with its bootstrap 95% interval.
#[cfg(feature = "ab-variant")]
fn variant_report(tables: &Tables, p4: &[(u32, u8)], p6: &[(u128, u8)]) -> String {
    use std::sync::atomic::Ordering;
    let settings = AbSettings::from_env();
    let switch = &dataplane::stage_clock::VARIANT;
    let mut umem = Umem {
        chunks: vec![vec![0u8; CHUNK_SIZE]; CHUNKS],
        next: 0,
    };
    let mut pool = HeapPool::new(CHUNK_SIZE, 64);
    let mut rng = StdRng::seed_from_u64(0xab);
    let mut out = format!(
        "## Variant A/B ({} rounds, {} ms per variant and round)\n\n\
         | family | flows | variant (ns) | other (ns) | change (median) | 95% interval |\n\
         |---|---:|---:|---:|---:|---:|\n",
        settings.rounds,
        settings.per_engine.as_millis()
    );
    for (family, v6) in [("ipv4", false), ("ipv6", true)] {
        for flows in [1, 8192, 100_000] {
            let stream = stream(flows, v6, p4, p6, &mut rng);
            let (mut ratios, mut all_a, mut all_b) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..settings.rounds {
                let (_pad, mut queue) = fresh_queue(true, &mut rng);
                for k in 0..32 {
                    switch.store(k % 2 == 0, Ordering::Relaxed);
                    ab_block(&mut queue, tables, &mut umem, &mut pool, &stream);
                }
                let (a, b) = abba_round(&settings, stream.len(), |on| {
                    switch.store(on, Ordering::Relaxed);
                    ab_block(&mut queue, tables, &mut umem, &mut pool, &stream)
                });
                ratios.push(a / b);
                all_a.push(a);
                all_b.push(b);
            }
            switch.store(true, Ordering::Relaxed);
            let change = (median(&mut ratios) - 1.0) * 100.0;
            let (lo, hi) = bootstrap_median(&ratios);
            out.push_str(&format!(
                "| {family} | {flows} | {:.2} | {:.2} | {change:+.2}% | {:+.2}% … {:+.2}% |\n",
                median(&mut all_a),
                median(&mut all_b),
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0
            ));
        }
    }
    out
}

/// Without the feature `ab-variant` there is no switch.
#[cfg(not(feature = "ab-variant"))]
fn variant_report(_: &Tables, _: &[(u32, u8)], _: &[(u128, u8)]) -> String {
    "DATAPLANE_AB=variant needs the feature `ab-variant`: \
     cargo bench -p xfwd-benches --bench dataplane --features ab-variant"
        .to_owned()
}

/// Writes a report section to `$CRITERION_HOME/NAME` (the report appends it) and stdout.
fn write_section(name: &str, text: &str) {
    println!("{text}");
    let dir = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/criterion"));
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(name), text);
    }
}

criterion_group!(benches, per_packet);
criterion_main!(benches);
