//! The `xfwd` command line: `run`, `stats`, `probe`, and `route get` / `show` answered from a
//! netlink mirror of the namespace (the same tables the routing pipeline reads).
#![forbid(unsafe_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::app;
use crate::bare::BareRoute;
use crate::config::{
    Config, ConfigError, ConfigFile, DEFAULT_CONFIG_PATH, XdpMode, default_control_socket,
};
use crate::serve::query_stats;

/// Exit status for a bad command line or configuration (sysexits EX_USAGE).
pub const EX_USAGE: u8 = 64;

/// Exit status when netfilter rules act on forwarded traffic and the configuration does not
/// say `netfilter = "bypass"`, or tc acts on a served interface without `tc = "bypass"`, or
/// either cannot be read (sysexits EX_CONFIG).
pub const EX_NETFILTER: u8 = 78;

/// xfwd: a user-space IPv4/IPv6 router on AF_XDP.
#[derive(Debug, Parser)]
#[command(name = "xfwd", version, about)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax; RUST_LOG overrides).
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
    /// Log format on stderr: `text` for people, `json` (one object per line: timestamp,
    /// level, target, fields) for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal).
    Text,
    /// One JSON object per line.
    Json,
}

/// Whether the final messages of `run` and `check-config` (why xfwd refuses to start or the
/// configuration is invalid) and of a failed command go to the JSON log (`--log-format json`)
/// rather than to stderr as text.
static JSON_ERRORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends the messages of [`fatal`] to the log as JSON objects when `json` (`--log-format
/// json`; call it once the log subscriber is installed).
pub fn set_json_errors(json: bool) {
    JSON_ERRORS.store(json, std::sync::atomic::Ordering::Relaxed);
}

/// The message a command ends on: `xfwd: MESSAGE` on stderr, or with `--log-format json` an
/// error event of its own (one JSON line, the message's lines in its `message` field), so that
/// a log collector sees why xfwd stopped.
pub fn fatal(message: &dyn std::fmt::Display) {
    if JSON_ERRORS.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::error!(target: "xfwd", "{message}");
    } else {
        eprintln!("xfwd: {message}");
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Forward between interfaces until SIGINT/SIGTERM; SIGHUP reloads the configuration
    /// (the `[pipeline]` settings that can change live; the rest is named as needing a
    /// restart).
    Run(RunArgs),
    /// Validate the configuration `run` would use (the file and these flags) and print it;
    /// exit status 64 with every problem listed when it is invalid.
    CheckConfig(RunArgs),
    /// Live per-queue counters and rates of the running instance (over its control socket).
    Stats(StatsArgs),
    /// Send complete UDP test frames from one namespace and check what arrives in another.
    Probe(ProbeArgs),
    /// Route lookups (`xfwd route get ADDR [from A] [iif D] [oif D] [mark N] [--netns NS]`),
    /// printed like `ip route get`: asked of the running instance over its control socket
    /// when one answers (then followed by what its pipeline does with such a packet), else
    /// from a fresh mirror of the namespace; `-j` prints JSON as `ip -j route get`.
    Route {
        /// What to do.
        #[command(subcommand)]
        command: RouteCommand,
    },
    /// List the tables: routes, addrs, neigh, rules, policies, links, nexthops (the running
    /// instance's when one answers on the control socket, else a fresh mirror's), or the run
    /// loops' route caches (cache: a running instance's only); `-j` prints JSON as `ip -j`.
    Show(ShowCmd),
}

/// `xfwd route ...`.
#[derive(Debug, Subcommand)]
pub enum RouteCommand {
    /// The route the pipeline would use for a destination.
    Get(RouteGetCmd),
}

/// `xfwd show`'s arguments.
#[derive(Debug, Args)]
pub struct ShowCmd {
    /// What to show (`cache`: the run loops' route caches, only from a running instance).
    pub what: crate::query::Shown,
    /// The network namespace (a name under /run/netns or a path); the current one if absent.
    #[arg(long)]
    pub netns: Option<String>,
    /// Print JSON as `ip -j` does (the same keys as iproute2's JSON output).
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Ask the instance on this control socket (and fail when none answers); default: the
    /// one of `--netns`, else a fresh mirror when nobody answers there.
    #[arg(long)]
    pub control: Option<PathBuf>,
}

/// `xfwd route get`'s arguments.
#[derive(Debug, Args)]
pub struct RouteGetCmd {
    /// The lookup.
    #[command(flatten)]
    pub args: netlink_mirror::cli::RouteGetArgs,
    /// Print JSON as `ip -j route get` does (with the pipeline's answer under `xfwd`).
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Ask the instance on this control socket (and fail when none answers); default: the
    /// one of `--netns`, else a fresh mirror when nobody answers there.
    #[arg(long)]
    pub control: Option<PathBuf>,
}

/// Asks the running instance (`control`, else the default socket of `netns`); `None` when
/// nobody answers on the default socket.
///
/// # Errors
/// When `control` was given and nobody answers there, or the answer is malformed.
fn ask_instance(
    control: Option<&Path>,
    netns: Option<&str>,
    query: &crate::serve::Query,
) -> anyhow::Result<Option<Result<String, String>>> {
    let path = control.map_or_else(|| default_control_socket(netns), Path::to_owned);
    let answer = crate::serve::query_tables(&path, query)?;
    if answer.is_none() && control.is_some() {
        anyhow::bail!("no xfwd answers on {}", path.display());
    }
    if answer.is_some() {
        tracing::debug!(socket = %path.display(), "answered by the running instance");
    }
    Ok(answer)
}

/// Starts a mirror of `netns` (the current namespace if `None`) and waits until it is synced.
///
/// # Errors
/// When the namespace cannot be entered or the mirror does not sync.
pub fn mirror(netns: Option<&str>) -> anyhow::Result<netlink_mirror::MirrorHandle> {
    use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};
    let spec = netns.map_or(NetnsSpec::Current, NetnsSpec::parse);
    let handle = Mirror::start(spec.clone(), MirrorOptions::default())
        .with_context(|| format!("starting the mirror of {spec:?}"))?;
    handle
        .wait_synced(crate::startup::SYNC_TIMEOUT)
        .context("synchronising the mirror")?;
    Ok(handle)
}

/// `xfwd route get`: prints the route (and, from a running instance, what its pipeline
/// does with such a packet); exit status 2 when there is none (with the kernel's message on
/// stderr).
///
/// # Errors
/// When no instance answers and the mirror cannot start.
pub fn route(command: &RouteCommand) -> anyhow::Result<u8> {
    let RouteCommand::Get(cmd) = command;
    let args = &cmd.args;
    let query = crate::query::Query::RouteGet {
        args: args.clone(),
        json: cmd.json,
    };
    let answer = match ask_instance(cmd.control.as_deref(), args.netns.as_deref(), &query)? {
        Some(answer) => answer,
        None => {
            let mirror = mirror(args.netns.as_deref())?;
            crate::query::route_get(mirror.tables(), args, Ok(None), cmd.json)
        }
    };
    match answer {
        Ok(text) => {
            println!("{}", text.trim_end());
            Ok(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(2)
        }
    }
}

/// `xfwd show`.
///
/// # Errors
/// When no instance answers and the mirror cannot start, the instance has no tables, or
/// `cache` is asked of no running instance.
pub fn show(cmd: &ShowCmd) -> anyhow::Result<u8> {
    let query = crate::query::Query::Show {
        what: cmd.what,
        json: cmd.json,
    };
    match ask_instance(cmd.control.as_deref(), cmd.netns.as_deref(), &query)? {
        Some(Ok(text)) => print!("{text}"),
        Some(Err(e)) => anyhow::bail!("{e}"),
        None => {
            let Some(table) = cmd.what.table() else {
                anyhow::bail!(
                    "no xfwd answers on {}: route caches exist only in a running instance",
                    cmd.control
                        .clone()
                        .unwrap_or_else(|| default_control_socket(cmd.netns.as_deref()))
                        .display()
                );
            };
            let mirror = mirror(cmd.netns.as_deref())?;
            print!(
                "{}",
                crate::query::show_table(mirror.tables(), table, cmd.json)
            );
        }
    }
    Ok(0)
}

/// `xfwd probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Namespace to send from.
    #[arg(long)]
    pub from_netns: Option<String>,
    /// Interface to send from.
    #[arg(long)]
    pub iface: String,
    /// Ethernet destination of sent frames (the forwarder's MAC on that link).
    #[arg(long)]
    pub to_mac: String,
    /// IP source address.
    #[arg(long)]
    pub src: std::net::IpAddr,
    /// IP destinations, used in turn (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub dst: Vec<std::net::IpAddr>,
    /// Namespace to capture in.
    #[arg(long)]
    pub to_netns: Option<String>,
    /// Interface to capture on.
    #[arg(long)]
    pub capture: String,
    /// Frames to send.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Frames per second (0 = as fast as possible).
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// TTL / hop limit of sent frames.
    #[arg(long, default_value_t = 64)]
    pub ttl: u8,
    /// UDP payload bytes.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    /// Milliseconds to wait for stragglers after the last frame.
    #[arg(long, default_value_t = 500)]
    pub linger_ms: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `xfwd run`.
#[derive(Debug, Args, Default, Clone)]
pub struct RunArgs {
    /// Interfaces to serve, comma-separated (overrides the file's `interfaces`).
    #[arg(long, value_delimiter = ',')]
    pub iface: Vec<String>,
    /// Run loops = receive queues used on every interface (default 1).
    #[arg(long)]
    pub queues: Option<u32>,
    /// Enter this network namespace (`ip netns` name) first.
    #[arg(long)]
    pub netns: Option<String>,
    /// TOML configuration file (flags override its values); default /etc/xfwd/xfwd.toml when
    /// it exists.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Busy polling on the sockets; the loops spin instead of sleeping.
    #[arg(long)]
    pub busy_poll: bool,
    /// Serve Prometheus metrics on this address:port (bound before entering --netns, so it
    /// lives in the caller's namespace). A non-loopback address exposes the counters to the
    /// network: put it behind a firewall.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Bare port forwarding: frames from one interface of a pair leave through the other with
    /// MACs rewritten, no lookups (the AF_XDP ceiling). Pairs: 1st+2nd, 3rd+4th, ...
    #[arg(long)]
    pub bare: bool,
    /// Bare mode: the MAC behind an interface, written as destination of frames sent there
    /// (IF=aa:bb:cc:dd:ee:ff; repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub peer_mac: Vec<String>,
    /// CPU per queue, comma-separated (default: queue q on the q-th CPU xfwd may run on,
    /// round robin).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// Zero-copy AF_XDP (drivers that support it; not veth).
    #[arg(long)]
    pub zero_copy: bool,
    /// XDP attach mode.
    #[arg(long, value_enum)]
    pub xdp_mode: Option<XdpMode>,
    /// Control socket path (default /run/xfwd/xfwd.sock, or /run/xfwd/NETNS.sock).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Punt device name (a TAP created in the forwarder's namespace).
    #[arg(long)]
    pub punt_device: Option<String>,
    /// No punt device: frames the pipeline punts are dropped and counted.
    #[arg(long, conflicts_with = "punt_device")]
    pub no_punt: bool,
    /// Netfilter rules (nftables, iptables) acting on forwarded traffic: refuse to start
    /// (default), or bypass them (frames xfwd forwards never see them).
    #[arg(long, value_enum)]
    pub netfilter: Option<crate::config::BypassMode>,
    /// tc on the served interfaces (filters, tcx programs, shaping qdiscs): refuse to start
    /// (default), or bypass it (frames xfwd forwards never see it).
    #[arg(long, value_enum)]
    pub tc: Option<crate::config::BypassMode>,
    /// RX ring entries per socket (power of two; the fill ring gets twice as many).
    #[arg(long)]
    pub rx_ring: Option<u32>,
    /// TX ring entries per socket (power of two).
    #[arg(long)]
    pub tx_ring: Option<u32>,
    /// UMEM chunk size, 2048 or 4096.
    #[arg(long)]
    pub frame_size: Option<u32>,
}

/// `xfwd stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The instance's namespace (finds /run/xfwd/NETNS.sock).
    #[arg(long)]
    pub netns: Option<String>,
    /// Control socket path (overrides --netns).
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Print every this many seconds (rates between prints).
    #[arg(long)]
    pub watch: Option<f64>,
    /// With --watch: stop after this many prints.
    #[arg(long)]
    pub count: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl RunArgs {
    /// The configuration file read: `--config`, else [`DEFAULT_CONFIG_PATH`] when it exists.
    pub fn config_path(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            let default = PathBuf::from(DEFAULT_CONFIG_PATH);
            default.exists().then_some(default)
        })
    }

    /// The configuration: the file (if any) overridden by the flags, validated.
    ///
    /// # Errors
    /// A [`ConfigError`] listing what is wrong.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let mut file = match self.config_path() {
            Some(path) => ConfigFile::load(&path)?,
            None => ConfigFile::default(),
        };
        if !self.iface.is_empty() {
            file.interfaces = Some(self.iface.clone());
        }
        file.queues = self.queues.or(file.queues);
        file.cpus = self.cpus.clone().or(file.cpus);
        if self.busy_poll {
            file.busy_poll = Some(true);
        }
        if self.zero_copy {
            file.zero_copy = Some(true);
        }
        file.xdp_mode = self.xdp_mode.or(file.xdp_mode);
        file.netfilter = self.netfilter.or(file.netfilter);
        file.tc = self.tc.or(file.tc);
        file.metrics = self.metrics.clone().or(file.metrics);
        file.control_socket = self.control.clone().or(file.control_socket);
        if self.no_punt {
            file.punt_device = Some(String::new());
        } else if let Some(name) = &self.punt_device {
            file.punt_device = Some(name.clone());
        }
        file.rings.rx = self.rx_ring.or(file.rings.rx);
        file.rings.tx = self.tx_ring.or(file.rings.tx);
        file.rings.frame_size = self.frame_size.or(file.rings.frame_size);
        if self.bare {
            file.bare.enabled = true;
        }
        let mut bad = Vec::new();
        for pair in &self.peer_mac {
            match pair.split_once('=') {
                Some((name, mac)) => {
                    file.bare.peer_macs.insert(name.to_owned(), mac.to_owned());
                }
                None => bad.push(format!("--peer-mac {pair:?} is not IF=MAC")),
            }
        }
        match file.validate(self.netns.as_deref()) {
            Ok(config) if bad.is_empty() => Ok(config),
            Ok(_) => Err(ConfigError::Invalid(bad)),
            Err(ConfigError::Invalid(mut problems)) => {
                problems.extend(bad);
                Err(ConfigError::Invalid(problems))
            }
            Err(other) => Err(other),
        }
    }
}

/// Enters the named network namespace for the calling thread (and the threads it spawns).
///
/// # Errors
/// When the namespace does not exist or setns(2) fails.
pub fn enter_netns(name: &str) -> anyhow::Result<()> {
    let path = Path::new("/run/netns").join(name);
    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering network namespace {name}"))
}

/// `xfwd run`: returns the process exit status.
pub fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let config = match args.config() {
        Ok(config) => config,
        Err(error) => {
            fatal(&error);
            return Ok(EX_USAGE);
        }
    };
    // Bound before entering the namespace: metrics stay reachable from the caller's loopback.
    let metrics = match config.metrics {
        Some(addr) => {
            Some(TcpListener::bind(addr).with_context(|| format!("binding metrics on {addr}"))?)
        }
        None => None,
    };
    if let Some(netns) = &args.netns {
        enter_netns(netns)?;
    }
    // Fail closed: rules xfwd would bypass stop it here, before any interface is touched.
    let bypass = config.netfilter == crate::config::BypassMode::Bypass;
    match crate::netfilter::check(&config.interfaces, bypass) {
        Ok(bypassed) => {
            for chain in bypassed {
                tracing::warn!(%chain, "netfilter = \"bypass\": not applied to forwarded traffic");
            }
        }
        Err(error) => {
            fatal(&error);
            return Ok(EX_NETFILTER);
        }
    }
    let bypass = config.tc == crate::config::BypassMode::Bypass;
    match crate::tc::check(&config.interfaces, bypass) {
        Ok((bypassed, warnings)) => {
            for hook in bypassed {
                tracing::warn!(%hook, "tc = \"bypass\": not applied to forwarded traffic");
            }
            for warning in warnings {
                tracing::warn!("{warning}");
            }
        }
        Err(error) => {
            fatal(&error);
            return Ok(EX_NETFILTER);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let requested = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, requested.clone())
        .context("installing signal handlers")?;
    let reload = {
        let args = RunArgs {
            config: args.config_path(),
            ..args.clone()
        };
        app::Reload {
            requested,
            load: Box::new(move || args.config()),
        }
    };
    match &config.bare {
        Some(peer_macs) => {
            let ports = app::resolve_ports(&config)?;
            let mut routes = Vec::new();
            for pair in ports.chunks(2) {
                let [a, b] = pair else { continue };
                for (from, to) in [(a, b), (b, a)] {
                    routes.push(BareRoute {
                        ingress: from.ifindex,
                        egress: to.ifindex,
                        src_mac: to.mac,
                        dst_mac: peer_macs[&to.name],
                    });
                }
            }
            app::run(
                &config,
                crate::startup::bare(routes),
                metrics,
                stop,
                Some(reload),
            )?;
        }
        None => {
            let served: Vec<u32> = app::resolve_ports(&config)?
                .iter()
                .map(|p| p.ifindex)
                .collect();
            let served = std::sync::Arc::new(dataplane::Served::new(&served));
            let engine = crate::startup::routing(config.pipeline, served, &config.endpoints)?;
            app::run(&config, engine, metrics, stop, Some(reload))?;
        }
    }
    Ok(0)
}

/// `xfwd check-config`: validates what `xfwd run` with the same arguments would use, without
/// touching any interface; prints a summary (exit 0) or every problem (exit 64).
pub fn check_config(args: &RunArgs) -> anyhow::Result<u8> {
    let source = args
        .config_path()
        .map_or_else(|| "flags only".to_owned(), |p| p.display().to_string());
    match args.config() {
        Ok(config) => {
            println!("{source}: valid");
            println!("{}", describe(&config));
            Ok(0)
        }
        Err(error) => {
            fatal(&format_args!("{source}: {error}"));
            Ok(EX_USAGE)
        }
    }
}

/// A few lines saying what a configuration runs.
fn describe(config: &Config) -> String {
    let p = &config.pipeline;
    let mode = if config.bare.is_some() {
        "bare (MAC rewrite between interface pairs, no lookups)".to_owned()
    } else {
        format!(
            "router; pipeline: route cache {}, ICMP {}/s burst {}, hold {} frames ({} bytes per neighbour, {} ms), vlan {:?}, {} extension headers, policy mark {}",
            p.dst_cache.map_or("off".to_owned(), |c| format!(
                "{} entries, {}-way",
                c.entries, c.ways
            )),
            p.icmp_rate,
            p.icmp_burst,
            p.hold_frames,
            p.hold_bytes_per_neighbour,
            p.hold_timeout_ns / 1_000_000,
            p.vlan,
            p.max_extension_headers,
            p.policy_mark
        )
    };
    format!(
        "interfaces {} × {} queue(s); {mode}; control {}; punt {}; metrics {}; netfilter {}; tc {}",
        config.interfaces.join(","),
        config.queues,
        config.control_socket.display(),
        config.punt_device.as_deref().unwrap_or("off"),
        config.metrics.map_or("off".to_owned(), |a| a.to_string()),
        match config.netfilter {
            crate::config::BypassMode::Refuse => "refuse",
            crate::config::BypassMode::Bypass => "bypass",
        },
        match config.tc {
            crate::config::BypassMode::Refuse => "refuse",
            crate::config::BypassMode::Bypass => "bypass",
        },
    )
}

/// `xfwd probe`: exit status 0 when every frame arrived with valid checksums.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<u8> {
    use crate::probe::{Capture, ProbeSpec, send};
    let Some(to_mac) = crate::punt::parse_mac(&args.to_mac) else {
        eprintln!("xfwd: --to-mac {:?} is not aa:bb:cc:dd:ee:ff", args.to_mac);
        return Ok(EX_USAGE);
    };
    let enter = |ns: &Option<String>| ns.as_deref().map_or(Ok(()), enter_netns);
    let (iface, from) = (args.iface.clone(), args.from_netns.clone());
    let src_mac = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<[u8; 6]> {
            enter(&from)?;
            app::links()?
                .remove(&iface)
                .and_then(|v| v.mac)
                .with_context(|| format!("no MAC for {iface}"))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("panicked"))?
    })?;
    let spec = ProbeSpec {
        tx_iface: args.iface.clone(),
        tx_src_mac: src_mac,
        tx_dst_mac: to_mac,
        src_ip: args.src,
        dst_ips: args.dst.clone(),
        ttl: args.ttl,
        count: args.count,
        rate: args.rate,
        payload_len: args.payload,
        rx_iface: args.capture.clone(),
        linger: Duration::from_millis(args.linger_ms),
    };
    let run_id = std::process::id()
        ^ (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()));
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    let done = AtomicBool::new(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let report = std::thread::scope(|s| -> anyhow::Result<_> {
        let capture = s.spawn(|| -> anyhow::Result<_> {
            enter(&args.to_netns)?;
            let capture = Capture::open(&spec.rx_iface);
            let _ = ready_tx.send(());
            Ok(capture?.collect(run_id, &done, spec.linger))
        });
        let _ = ready_rx.recv();
        let sender = s.spawn(|| -> anyhow::Result<_> {
            enter(&args.from_netns)?;
            send(&spec, run_id, &stop)
        });
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("sender panicked"));
        done.store(true, std::sync::atomic::Ordering::Release);
        let mut report = capture
            .join()
            .map_err(|_| anyhow::anyhow!("capture panicked"))??;
        let (sent, seconds) = sent??;
        report.sent = sent;
        report.send_seconds = seconds;
        Ok(report)
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "sent {} in {:.2} s, received {} ({} distinct, {:.2}% delivered), bad checksums {}",
            report.sent,
            report.send_seconds,
            report.received,
            report.unique,
            report.delivery() * 100.0,
            report.bad_checksum
        );
        for (src, dst, n) in &report.macs {
            println!("  {n} frames {src} -> {dst}");
        }
        for (ttl, n) in &report.ttls {
            println!("  {n} frames with TTL/hop limit {ttl}");
        }
    }
    let ok = report.sent == args.count && report.unique == report.sent && report.bad_checksum == 0;
    Ok(if ok { 0 } else { 1 })
}

/// `xfwd stats`.
pub fn stats(args: &StatsArgs) -> anyhow::Result<u8> {
    let path = args
        .control
        .clone()
        .unwrap_or_else(|| default_control_socket(args.netns.as_deref()));
    let mut previous = None;
    let mut printed = 0u64;
    loop {
        let now = query_stats(&path)?;
        if args.json {
            println!("{}", serde_json::to_string(&now)?);
        } else {
            print!("{}", now.render(previous.as_ref()));
        }
        printed += 1;
        let Some(every) = args.watch else { break };
        if args.count.is_some_and(|n| printed >= n) {
            break;
        }
        if !args.json {
            println!();
        }
        previous = Some(now);
        std::thread::sleep(Duration::from_secs_f64(every.max(0.1)));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(args).unwrap();
        match cli.command {
            Command::Run(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_become_a_config() {
        let args = run_args(&[
            "xfwd",
            "run",
            "--iface",
            "fwd0,fwd1",
            "--bare",
            "--peer-mac",
            "fwd0=02:58:46:00:00:01,fwd1=02:58:46:00:00:04",
            "--queues",
            "2",
            "--netns",
            "lab-fwd",
            "--no-punt",
            "--metrics",
            "127.0.0.1:9587",
        ]);
        let config = args.config().unwrap();
        assert_eq!(config.interfaces, ["fwd0", "fwd1"]);
        assert_eq!(config.queues, 2);
        assert_eq!(config.punt_device, None);
        assert_eq!(config.control_socket, Path::new("/run/xfwd/lab-fwd.sock"));
        assert_eq!(config.bare.unwrap().len(), 2);
    }

    #[test]
    fn bad_flags_are_all_reported() {
        let args = run_args(&[
            "xfwd",
            "run",
            "--bare",
            "--peer-mac",
            "nonsense",
            "--rx-ring",
            "3",
        ]);
        let text = args.config().unwrap_err().to_string();
        for needle in [
            "no interfaces",
            "rings.rx = 3",
            "\"nonsense\" is not IF=MAC",
        ] {
            assert!(text.contains(needle), "{needle:?} missing in {text}");
        }
        assert!(Cli::try_parse_from(["xfwd", "run", "--no-punt", "--punt-device", "x"]).is_err());
        assert!(Cli::try_parse_from(["xfwd", "run", "--queues", "-1"]).is_err());
    }

    #[test]
    fn config_file_and_flags_merge() {
        let dir = std::env::temp_dir().join(format!("xfwd-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.toml");
        std::fs::write(&path, "interfaces = [\"eth0\"]\nqueues = 4\n").unwrap();
        let args = run_args(&[
            "xfwd",
            "run",
            "--config",
            path.to_str().unwrap(),
            "--queues",
            "2",
        ]);
        let config = args.config().unwrap();
        assert_eq!(
            (config.interfaces.as_slice(), config.queues),
            (&["eth0".to_owned()][..], 2)
        );
        std::fs::write(&path, "interfaces = 3\n").unwrap();
        let text = args.config().unwrap_err().to_string();
        assert!(text.contains("x.toml"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
