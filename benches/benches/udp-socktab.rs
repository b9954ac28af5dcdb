//! udp-socktab benchmarks (see `udp-socktab.md` beside this file for the method and goals).
//!
//! - `udp-socktab/netns-noise`: one flow's lookup in namespace A while namespace B holds N
//!   sockets; A with its own table (`udp-socktab`) or sharing the global one with B
//!   (`shared-global`). Prints the chain lengths each lookup walks.
//! - `udp-socktab/hash4-connected`: the lookup of connected sockets' flows when C connected
//!   sockets and one unconnected socket share a port: with hash4 (`udp-socktab`) and without
//!   (`hash2-only`, the kernel before 6.13).
//! - `udp-socktab/hash4-unconnected`: the same tables, flows for the unconnected socket.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use udp_socktab::{
    Family, Lookup, NetnsConfig, NetnsId, SockOptions, SockTable, TableConfig, Writer,
};

/// Lookups per iteration (one epoch pin per batch, as a run loop does).
const BATCH: usize = 256;
/// Populations of namespace B (sockets).
const NOISE: [usize; 5] = [1, 1 << 16, 1 << 18, 1 << 20, 1 << 21];
/// Connected sockets on the one port of the hash4 experiment.
const CONNECTED: [usize; 3] = [1, 500, 10_000];

fn v4(a: u32, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port)
}

/// Sockets of B: (address, port) pairs over 10.1.0.0/16 and ports 1..=65535, each its own.
fn add_noise(w: &mut Writer, ns: NetnsId, from: usize, to: usize) {
    for i in from..to {
        let addr = 0x0a01_0000 + (i / 65535) as u32;
        let port = (i % 65535) as u16 + 1;
        if i % 65535 == 0 {
            w.add_local_addr(ns, IpAddr::V4(Ipv4Addr::from(addr)), 2)
                .unwrap();
        }
        let s = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
        w.bind(s, v4(addr, port)).unwrap();
    }
}

/// Frees what the writer retired while building (crossbeam's collector would otherwise have
/// the timed lookups' pins free it, bit by bit).
fn drain_garbage() {
    for _ in 0..50_000 {
        crossbeam_epoch::pin().flush();
    }
}

/// Runs `BATCH` lookups of `keys` (cycling) under one pin; returns the checksum of the answers.
fn batch(keys: &[Lookup], f: impl Fn(&Lookup, &crossbeam_epoch::Guard) -> u64) -> u64 {
    let guard = crossbeam_epoch::pin();
    let mut sum = 0u64;
    for k in 0..BATCH {
        sum = sum.wrapping_add(f(&keys[k % keys.len()], &guard));
    }
    sum
}

fn netns_noise(c: &mut Criterion) {
    let (table, mut w) = SockTable::new(TableConfig {
        hash_entries: 65536,
        seed: Some(2520),
    })
    .unwrap();
    let b = w.add_netns(NetnsConfig::default()).unwrap();
    let shared = w.add_netns(NetnsConfig::default()).unwrap();
    let own = w
        .add_netns(NetnsConfig {
            child_hash_entries: 128,
            ..NetnsConfig::default()
        })
        .unwrap();
    // A's server: the wildcard address, like an iperf3 server before its peer connects.
    let mut keys = Vec::new();
    for ns in [shared, own] {
        let s = w.socket(ns, Family::V4, SockOptions::default()).unwrap();
        w.bind(s, v4(0, 5201)).unwrap();
        keys.push(Lookup {
            netns: ns,
            src: v4(0xc000_0201, 40000),
            dst: v4(0xc000_0202, 5201),
            ifindex: 2,
            hash: 0x1234_5678,
            cpu: 0,
        });
    }
    let mut group = c.benchmark_group("udp-socktab/netns-noise");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(BATCH as u64));
    let mut have = 0;
    let mut chains = String::from(
        "| sockets in B | B built in | mean hash2 chain | longest | A walks (daddr, ANY): shared-global | own table |\n|---:|---:|---:|---:|---|---|\n",
    );
    for n in NOISE {
        let started = Instant::now();
        add_noise(&mut w, b, have, n);
        have = n;
        drain_garbage();
        let lengths = |k: &Lookup| table.visited_chain_lengths(k).unwrap();
        let all = table.chain_lengths(b).unwrap();
        eprintln!(
            "netns-noise: B holds {n} sockets (built in {:.1?}); mean hash2 chain {:.2}, longest {}; \
             A's lookup walks (at daddr, at ANY): shared-global {:?}, own table {:?}",
            started.elapsed(),
            all.iter().sum::<usize>() as f64 / all.len() as f64,
            all.iter().max().unwrap(),
            lengths(&keys[0]),
            lengths(&keys[1]),
        );
        chains.push_str(&format!(
            "| {n} | {:.1?} | {:.2} | {} | {:?} | {:?} |\n",
            started.elapsed(),
            all.iter().sum::<usize>() as f64 / all.len() as f64,
            all.iter().max().unwrap(),
            lengths(&keys[0]),
            lengths(&keys[1]),
        ));
        let id = |sk: Option<&udp_socktab::Sock>| sk.map_or(0, |s| s.local_addr().port() as u64);
        let shared_sum = batch(&keys[..1], |k, g| id(table.lookup(k, g)));
        let own_sum = batch(&keys[1..], |k, g| id(table.lookup(k, g)));
        assert_eq!(
            shared_sum, own_sum,
            "both configurations must find A's socket"
        );
        assert_eq!(shared_sum, 5201 * BATCH as u64);
        let t = Arc::clone(&table);
        group.bench_with_input(
            BenchmarkId::new("udp-socktab", n),
            &keys[1..],
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(t.lookup(k, g))))),
        );
        group.bench_with_input(
            BenchmarkId::new("shared-global", n),
            &keys[..1],
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(t.lookup(k, g))))),
        );
    }
    group.finish();
    // Chain lengths are not times: the report appends this table (see benches/README.md).
    let home = std::env::var_os("CRITERION_HOME").map_or_else(
        || std::path::PathBuf::from("target/criterion"),
        std::path::PathBuf::from,
    );
    let table = format!("## udp-socktab/netns-noise: chain lengths\n\n{chains}");
    if let Err(e) = std::fs::create_dir_all(&home)
        .and_then(|()| std::fs::write(home.join("udp-socktab-chains.md"), table))
    {
        eprintln!("cannot write the chain-length table: {e}");
    }
}

fn hash4(c: &mut Criterion) {
    let mut connected_group = c.benchmark_group("udp-socktab/hash4-connected");
    connected_group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(BATCH as u64));
    let mut tables = Vec::new();
    for n in CONNECTED {
        let (table, mut w) = SockTable::new(TableConfig {
            hash_entries: 65536,
            seed: Some(613),
        })
        .unwrap();
        let ns = w.add_netns(NetnsConfig::default()).unwrap();
        let local = 0x0a00_0001;
        w.add_local_addr(ns, IpAddr::V4(Ipv4Addr::from(local)), 2)
            .unwrap();
        let reuse = SockOptions {
            reuseaddr: true,
            ..SockOptions::default()
        };
        let listener = w.socket(ns, Family::V4, reuse).unwrap();
        w.bind(listener, v4(local, 4433)).unwrap();
        let mut flows = Vec::new();
        for i in 0..n {
            let s = w.socket(ns, Family::V4, reuse).unwrap();
            w.bind(s, v4(local, 4433)).unwrap();
            let peer = v4(
                0xc633_6400 + (i / 50_000) as u32,
                10_000 + (i % 50_000) as u16,
            );
            w.connect(s, peer, IpAddr::V4(Ipv4Addr::from(local)))
                .unwrap();
            flows.push(peer);
        }
        let key = |src: SocketAddr, k: usize| Lookup {
            netns: ns,
            src,
            dst: v4(local, 4433),
            ifindex: 2,
            hash: k as u32,
            cpu: 0,
        };
        // 64 connected flows spread over the set; 64 flows from strangers (to the listener).
        let conn_keys: Vec<Lookup> = (0..64)
            .map(|k| key(flows[k * flows.len() / 64], k))
            .collect();
        let stranger_keys: Vec<Lookup> = (0..64)
            .map(|k| key(v4(0xcb00_7100 + k as u32, 53), k))
            .collect();
        drain_garbage();
        tables.push((n, table, w, conn_keys, stranger_keys));
    }
    let id = |sk: Option<&udp_socktab::Sock>| sk.map_or(0, |s| s.id().0);
    for (n, table, _w, conn_keys, _) in &tables {
        let with = batch(conn_keys, |k, g| id(table.lookup(k, g)));
        let without = batch(conn_keys, |k, g| id(table.lookup_hash2_only(k, g)));
        assert_eq!(
            with, without,
            "hash4 and hash2 must find the same connected sockets"
        );
        connected_group.bench_with_input(
            BenchmarkId::new("udp-socktab", n),
            conn_keys,
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(table.lookup(k, g))))),
        );
        connected_group.bench_with_input(
            BenchmarkId::new("hash2-only", n),
            conn_keys,
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(table.lookup_hash2_only(k, g))))),
        );
    }
    connected_group.finish();
    let mut stranger_group = c.benchmark_group("udp-socktab/hash4-unconnected");
    stranger_group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(BATCH as u64));
    for (n, table, _w, _, stranger_keys) in &tables {
        let with = batch(stranger_keys, |k, g| id(table.lookup(k, g)));
        let without = batch(stranger_keys, |k, g| id(table.lookup_hash2_only(k, g)));
        assert_eq!(with, without, "both must find the unconnected socket");
        stranger_group.bench_with_input(
            BenchmarkId::new("udp-socktab", n),
            stranger_keys,
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(table.lookup(k, g))))),
        );
        stranger_group.bench_with_input(
            BenchmarkId::new("hash2-only", n),
            stranger_keys,
            |bench, k| bench.iter(|| black_box(batch(k, |k, g| id(table.lookup_hash2_only(k, g))))),
        );
    }
    stranger_group.finish();
}

criterion_group!(benches, netns_noise, hash4);
criterion_main!(benches);
