//! `xfwd-gen`: send UDP probes from an AF_XDP socket (`tx`), or count them on the far side
//! (`rx`). Run it inside the interface's network namespace (`ip netns exec NS xfwd-gen ...`).
//!
//! ```sh
//! # in dst: count until 500 ms pass without a probe
//! xfwd-gen rx --iface dst0 --flows 512 --idle-exit-ms 500
//! # in src: 1 Mpps of 64-byte frames for 5 s, 512 destinations from a prefix list
//! xfwd-gen tx --iface src0 --src-mac 02:58:46:00:00:01 --dst-mac 02:58:46:00:00:02 \
//!     --src-ip 198.18.0.2 --prefixes routes.txt --destinations 512 --rate 1000000 --duration 5
//! # STAMP / TWAMP-light session-sender (kernel UDP socket): loss and round-trip delays
//! xfwd-gen --netns src stamp --to 198.18.0.1:862 --count 10000 --rate 1000
//! # a UDP echo (RFC 862) on a kernel socket, the peer of xfwd's echo and reflector
//! xfwd-gen --netns fwd echo --bind '[::]:9' --seconds 60
//! ```

use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use pktgen::{Endpoints, FlowSet, FrameSize, PortRange, Prefix, Receiver, RxConfig, TxConfig};

/// xfwd's AF_XDP traffic generator and receiver.
#[derive(Debug, Parser)]
#[command(name = "xfwd-gen", version, about)]
struct Cli {
    /// Enter this named network namespace (/run/netns/NAME) first. Unlike `ip netns exec`, the
    /// mount namespace stays, so libxdp finds bpffs.
    #[arg(long, global = true)]
    netns: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// Moves the process (its only thread so far) into the named network namespace.
fn enter_netns(name: &str) -> anyhow::Result<()> {
    let path = std::path::Path::new("/run/netns").join(name);
    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering network namespace {name}"))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send UDP probes.
    Tx(TxArgs),
    /// Receive probes and count them per flow.
    Rx(RxArgs),
    /// Send STAMP test packets to a reflector (RFC 8762; TWAMP-light reflectors answer too)
    /// from a kernel UDP socket: loss and round-trip delay percentiles.
    Stamp(StampArgs),
    /// Answer every UDP datagram with itself (RFC 862) from a kernel UDP socket: the kernel's
    /// side of a comparison with xfwd's in-dataplane echo and reflector.
    Echo(EchoArgs),
}

/// Options of `xfwd-gen echo`.
#[derive(Debug, Args)]
struct EchoArgs {
    /// The address to bind, ADDRESS:PORT (`[::]:PORT` takes IPv4 too).
    #[arg(long)]
    bind: std::net::SocketAddr,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    seconds: Option<f64>,
}

/// A kernel UDP echo: `recvfrom` then `sendto` per datagram, one thread, like the simplest
/// echo server; prints how many it answered when it stops.
fn echo(args: EchoArgs) -> anyhow::Result<()> {
    let socket =
        std::net::UdpSocket::bind(args.bind).with_context(|| format!("binding {}", args.bind))?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut buf = vec![0u8; 65536];
    let mut answered = 0u64;
    while deadline.is_none_or(|d| Instant::now() < d) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                if socket.send_to(&buf[..n], from).is_ok() {
                    answered += 1;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("receiving"),
        }
    }
    println!("answered {answered}");
    Ok(())
}

/// Options of `xfwd-gen stamp`.
#[derive(Debug, Args)]
struct StampArgs {
    /// The reflector, ADDRESS:PORT (STAMP's port is 862).
    #[arg(long)]
    to: std::net::SocketAddr,
    /// The local address to send from, ADDRESS:PORT (default: any).
    #[arg(long)]
    from: Option<std::net::SocketAddr>,
    /// Test packets to send.
    #[arg(long, default_value_t = 1000)]
    count: u32,
    /// Test packets per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// UDP payload bytes per test packet (44..).
    #[arg(long, default_value_t = 44)]
    size: usize,
    /// Milliseconds to wait for late answers after the last test packet.
    #[arg(long, default_value_t = 1000)]
    linger_ms: u64,
    /// Print the report as one JSON line on stdout.
    #[arg(long)]
    json: bool,
}

fn stamp(args: StampArgs) -> anyhow::Result<()> {
    use pktgen::stamp::{StampConfig, run};
    let mut config = StampConfig::new(args.to);
    config.bind = args.from;
    config.count = args.count;
    config.rate = args.rate;
    config.size = args.size;
    config.linger = Duration::from_millis(args.linger_ms);
    let report = run(&config).with_context(|| format!("STAMP session to {}", args.to))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!(
        "sent {} answered {} (echoed {}) lost {} duplicates {} reordered {} foreign {} in {:.2} s",
        report.sent,
        report.received,
        report.echoes,
        report.lost,
        report.duplicates,
        report.reordered,
        report.foreign,
        report.seconds
    );
    for (name, l) in [
        ("round trip", report.rtt),
        ("round trip - reflector", report.net_rtt),
        ("reflector residence", report.residence),
        ("forward (one clock)", report.forward),
    ] {
        if let Some(l) = l {
            println!(
                "{name:>24}: min {} p50 {} p90 {} p99 {} p99.9 {} max {} ns",
                l.min_ns, l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.max_ns
            );
        }
    }
    Ok(())
}

/// Options of `xfwd-gen tx`.
#[derive(Debug, Args)]
struct TxArgs {
    /// The interface to send from.
    #[arg(long)]
    iface: String,
    /// Source MAC (the sending interface's), aa:bb:cc:dd:ee:ff.
    #[arg(long, value_parser = parse_mac)]
    src_mac: [u8; 6],
    /// Destination MAC (the next hop's).
    #[arg(long, value_parser = parse_mac)]
    dst_mac: [u8; 6],
    /// IPv4 source address (needed for IPv4 destinations).
    #[arg(long)]
    src_ip: Option<Ipv4Addr>,
    /// IPv6 source address (needed for IPv6 destinations).
    #[arg(long)]
    src_ip6: Option<Ipv6Addr>,
    /// A file of destination prefixes, one per line (`PREFIX [anything]`, `#` comments).
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Destination prefixes (or addresses) on the command line, comma-separated.
    #[arg(long, value_delimiter = ',')]
    dst: Vec<Prefix>,
    /// How many destinations to draw from the prefixes (default: one per prefix).
    #[arg(long)]
    destinations: Option<usize>,
    /// UDP source ports, PORT or FIRST-LAST; flows = destinations × source ports × destination ports.
    #[arg(long, default_value = "1024")]
    src_ports: PortRange,
    /// UDP destination ports, PORT or FIRST-LAST.
    #[arg(long, default_value = "9")]
    dst_ports: PortRange,
    /// Frame size with FCS, 64..=1518 (84.. for IPv6), or `imix` (7×64, 4×594, 1×1518).
    #[arg(long, default_value = "64")]
    size: FrameSize,
    /// Packets per second over all queues (default: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Packets to send.
    #[arg(long)]
    count: Option<u64>,
    /// Seconds to send.
    #[arg(long)]
    duration: Option<f64>,
    /// TX queue ids, one thread each, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    queues: Vec<u32>,
    /// CPUs to pin the queue threads to, in turn, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// UMEM frames per queue.
    #[arg(long, default_value_t = 4096)]
    frames: u32,
    /// The largest batch per ring operation.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Print the report as one JSON line on stdout.
    #[arg(long)]
    json: bool,
}

/// Options of `xfwd-gen rx`.
#[derive(Debug, Args)]
struct RxArgs {
    /// The interface to receive on.
    #[arg(long)]
    iface: String,
    /// Flow ids below this are counted per flow.
    #[arg(long)]
    flows: usize,
    /// RX queue ids, one thread each, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    queues: Vec<u32>,
    /// CPUs to pin the queue threads to, in turn, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// UMEM frames per queue.
    #[arg(long, default_value_t = 4096)]
    frames: u32,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Stop once this many milliseconds pass without a frame, after the first one.
    #[arg(long)]
    idle_exit_ms: Option<u64>,
    /// Controlled over stdin: print `ready`, then answer each line `report` with a JSON line
    /// (counts since the previous one); stop at `quit` or end of input.
    #[arg(long, conflicts_with_all = ["duration", "idle_exit_ms"])]
    control: bool,
    /// Include per-flow counts in the JSON.
    #[arg(long)]
    per_flow: bool,
    /// Print the report as one JSON line on stdout.
    #[arg(long)]
    json: bool,
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("`{s}`: expected six hex pairs joined by colons"));
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        *byte =
            u8::from_str_radix(part, 16).map_err(|_| format!("`{s}`: bad hex pair `{part}`"))?;
    }
    Ok(mac)
}

fn tx(args: TxArgs) -> anyhow::Result<()> {
    let mut prefixes = args.dst.clone();
    if let Some(path) = &args.prefixes {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        prefixes.extend(pktgen::flow::parse_prefix_list(&text)?);
    }
    let count = args.destinations.unwrap_or(prefixes.len());
    let destinations: Vec<IpAddr> = pktgen::flow::destinations(&prefixes, count);
    let endpoints = Endpoints {
        src_mac: args.src_mac,
        dst_mac: args.dst_mac,
        src_v4: args.src_ip,
        src_v6: args.src_ip6,
    };
    let flows = FlowSet::new(endpoints, &destinations, args.src_ports, args.dst_ports)?;
    let config = TxConfig {
        iface: args.iface,
        queues: args.queues,
        cpus: args.cpus,
        size: args.size,
        rate: args.rate,
        count: args.count,
        duration: args.duration.map(Duration::from_secs_f64),
        frames: args.frames,
        batch: args.batch,
    };
    let report = pktgen::transmit(&config, &flows)?;
    eprintln!(
        "sent {} probes of {} flows in {:.3} s: {:.0} pps, {:.1} ns CPU per probe",
        report.sent,
        flows.len(),
        report.elapsed_ns as f64 * 1e-9,
        report.pps,
        report.cpu_ns as f64 / report.sent.max(1) as f64
    );
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

fn print_rx(report: &pktgen::RxReport, json: bool, per_flow: bool) -> anyhow::Result<()> {
    let s = &report.summary;
    eprintln!(
        "received {} probes ({} flows, {} out of order, {} in gaps, {} other frames); latency {}",
        s.received,
        s.flows_seen,
        s.out_of_order,
        s.gaps,
        s.foreign,
        s.latency.map_or("-".into(), |l| format!(
            "p50 {} µs, p99 {} µs, max {} µs",
            l.p50_ns / 1000,
            l.p99_ns / 1000,
            l.max_ns / 1000
        ))
    );
    if json {
        let mut report = report.clone();
        if !per_flow {
            report.flows.clear();
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
        out.flush()?;
    }
    Ok(())
}

fn rx(args: RxArgs) -> anyhow::Result<()> {
    let config = RxConfig {
        iface: args.iface.clone(),
        queues: args.queues.clone(),
        cpus: args.cpus.clone(),
        flows: args.flows,
        frames: args.frames,
    };
    let mut receiver = Receiver::start(&config)?;
    if args.control {
        println!("ready");
        std::io::stdout().flush()?;
        for line in std::io::stdin().lock().lines() {
            match line?.trim() {
                "report" => print_rx(&receiver.report()?, true, args.per_flow)?,
                "quit" => break,
                "" => {}
                other => bail!("unknown control command `{other}` (report, quit)"),
            }
        }
        return Ok(());
    }
    if args.duration.is_none() && args.idle_exit_ms.is_none() {
        bail!("give --duration, --idle-exit-ms or --control");
    }
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let idle = args.idle_exit_ms.map(Duration::from_millis);
    let (mut last_count, mut last_change) = (0, Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let count = receiver.frames_seen();
        if count != last_count {
            (last_count, last_change) = (count, now);
        } else if idle.is_some_and(|i| count > 0 && now - last_change >= i) {
            break;
        }
    }
    print_rx(&receiver.stop()?, args.json, args.per_flow)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = cli
        .netns
        .as_deref()
        .map_or(Ok(()), enter_netns)
        .and_then(|()| match cli.command {
            Command::Tx(args) => tx(args),
            Command::Rx(args) => rx(args),
            Command::Stamp(args) => stamp(args),
            Command::Echo(args) => echo(args),
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xfwd-gen: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_macs_and_rejects_bad_arguments() {
        assert_eq!(
            parse_mac("02:58:46:00:00:0a"),
            Ok([2, 0x58, 0x46, 0, 0, 10])
        );
        assert!(parse_mac("02:58:46:00:00").is_err());
        assert!(parse_mac("02:58:46:00:00:zz").is_err());
        let ok = [
            "xfwd-gen",
            "tx",
            "--iface",
            "a",
            "--src-mac",
            "02:00:00:00:00:01",
            "--dst-mac",
            "02:00:00:00:00:02",
            "--dst",
            "10.0.0.0/8",
            "--size",
            "imix",
            "--count",
            "5",
        ];
        assert!(Cli::try_parse_from(ok).is_ok());
        for bad in [
            &["xfwd-gen", "tx", "--iface", "a"][..],
            &[
                "xfwd-gen",
                "rx",
                "--iface",
                "a",
                "--flows",
                "1",
                "--control",
                "--duration",
                "1",
            ],
            &[
                "xfwd-gen",
                "tx",
                "--iface",
                "a",
                "--src-mac",
                "x",
                "--dst-mac",
                "y",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let mut bad_size = ok.to_vec();
        bad_size[12] = "big";
        assert!(Cli::try_parse_from(bad_size).is_err());
    }
}
