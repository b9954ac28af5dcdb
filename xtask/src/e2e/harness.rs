//! The lab side of the end-to-end benchmark: the lab and its routes, the receiver, one trial,
//! the NDR/PDR search, NAPI threads and counters.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use xfwd_lab::topology::{DST0, FWD0, FWD1, SRC0};
use xfwd_lab::{LabGuard, Role};

use super::{Case, Point, Settings, display};
use crate::exec::describe;

/// Flow ids the receiver counts per flow (the largest flow count of a run).
const MAX_FLOWS: usize = 65_536;
/// Time for the last probes of a trial to cross the lab before the receiver reports.
const SETTLE: Duration = Duration::from_millis(250);
/// Lowest rate a search tries.
const MIN_RATE: f64 = 1_000.0;
/// How long an AF_XDP forwarder may take to start forwarding (it loads the full table).
const FORWARDER_START: Duration = Duration::from_secs(240);
/// Clock ticks per second of /proc's CPU times (USER_HZ).
const TICK_NS: u64 = 10_000_000;

/// Latency percentiles as the receiver prints them.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Smallest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// The fields of `xfwd-gen rx`'s JSON report the harness uses.
#[derive(Clone, Debug, Default, Deserialize)]
struct RxJson {
    received: u64,
    out_of_order: u64,
    latency: Option<Latency>,
    cpu_ns: u64,
    xdp: XdpJson,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct XdpJson {
    rx_dropped: u64,
    rx_ring_full: u64,
}

/// The fields of `xfwd-gen tx`'s JSON report the harness uses.
#[derive(Clone, Debug, Default, Deserialize)]
struct TxJson {
    sent: u64,
    pps: f64,
    cpu_ns: u64,
}

/// Where lost packets were dropped, as the interfaces and sockets count them.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Drops {
    /// src0's TX drops: fwd0's receive ring was full (the forwarder did not keep up).
    pub fwd_ingress: u64,
    /// fwd1's TX drops: dst0's receive ring was full (the receiving side did not keep up).
    pub dst_ingress: u64,
    /// The receiver's AF_XDP socket: ring full or no fill buffer.
    pub rx_socket: u64,
}

/// CPU time of each side during a trial, nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// The generator's thread (its sendto calls include the kernel's copy-mode transmit).
    pub gen_ns: u64,
    /// fwd0/fwd1 NAPI threads plus the AF_XDP forwarder process.
    pub fwd_ns: u64,
    /// dst0's NAPI thread plus the receiver process.
    pub rx_ns: u64,
    /// Softirq time on all CPUs outside the NAPI threads (from /proc/stat).
    pub softirq_ns: u64,
}

/// One trial at a fixed offered rate (or unlimited).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Trial {
    /// Rate asked of the generator; None: as fast as it goes.
    pub offered: Option<f64>,
    /// The rate it achieved.
    pub tx_pps: f64,
    /// Probes sent.
    pub sent: u64,
    /// Probes received.
    pub received: u64,
    /// Probes received after a later one of their flow.
    pub out_of_order: u64,
    /// Packets fwd0 accepted (the forwarder's input).
    pub fwd_in: u64,
    /// Packets fwd1 delivered to dst0 (the forwarder's output, and the kernel's for what it
    /// forwarded). veth reports as its TX count what its peer took from the ring, so frames
    /// still in dst0's ring are not in it yet; one it could not queue is a TX drop instead.
    #[serde(default)]
    pub fwd_out: u64,
    /// Packets the kernel's IP stack in fwd forwarded (should be ~0 except for the kernel case).
    #[serde(default)]
    pub kernel_forwarded: u64,
    /// 1 − received / sent.
    pub loss: f64,
    /// Latency percentiles.
    pub latency: Option<Latency>,
    /// Where losses happened.
    pub drops: Drops,
    /// CPU time per side.
    pub cpu: Cpu,
    /// Trial length, seconds.
    pub secs: f64,
}

impl Trial {
    /// Received probes per second.
    pub fn rx_pps(&self) -> f64 {
        self.received as f64 / self.secs.max(1e-9)
    }
}

/// A child process killed when dropped.
struct Process {
    child: Child,
    what: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("bench e2e: {} ignored SIGTERM; killing it", self.what);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The long-running receiver in dst (`xfwd-gen rx --control`).
struct Receiver {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _process: Process,
}

impl Receiver {
    fn start(
        generator: &Path,
        netns: &str,
        cpu: usize,
        rt: Option<u8>,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let mut last_error = None;
        // A socket of a receiver that just exited may take a moment to let go of the queue.
        for _ in 0..5 {
            let mut command = rt_command(rt);
            command
                .arg(generator)
                .args(["--netns", netns, "rx", "--iface", DST0.name, "--control"])
                .args([
                    "--flows",
                    &MAX_FLOWS.to_string(),
                    "--cpus",
                    &cpu.to_string(),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(log)?);
            let mut child = command
                .spawn()
                .with_context(|| format!("starting `{}`", describe(&command)))?;
            let stdin = child.stdin.take().context("receiver stdin")?;
            let mut stdout = BufReader::new(child.stdout.take().context("receiver stdout")?);
            let process = Process {
                child,
                what: "the receiver".into(),
            };
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            if line.trim() == "ready" {
                return Ok(Receiver {
                    stdin,
                    stdout,
                    _process: process,
                });
            }
            drop(process);
            last_error = Some(std::fs::read_to_string(log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(500));
        }
        bail!(
            "the receiver did not start: {}",
            last_error.unwrap_or_default().lines().last().unwrap_or("")
        )
    }

    fn report(&mut self) -> anyhow::Result<RxJson> {
        writeln!(self.stdin, "report")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        serde_json::from_str(&line).with_context(|| format!("receiver report `{}`", line.trim()))
    }
}

/// `chrt -f PRIO` (SCHED_FIFO) when `rt` is set, else a plain `env`: the program follows.
fn rt_command(rt: Option<u8>) -> Command {
    match rt {
        Some(priority) => {
            let mut command = Command::new("chrt");
            command.args(["-f", &priority.to_string()]);
            command
        }
        None => Command::new("env"),
    }
}

/// Gives a thread SCHED_FIFO `priority` (`chrt -f -p`).
fn make_rt(pid: u32, priority: u8) -> anyhow::Result<()> {
    let status = Command::new("chrt")
        .args(["-f", "-p", &priority.to_string(), &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("chrt -f -p {priority} {pid}: {status}");
    }
    Ok(())
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(args: I) -> anyhow::Result<String> {
    let mut command = Command::new("ip");
    command.args(args);
    let out = command.output().with_context(|| describe(&command))?;
    if !out.status.success() {
        bail!(
            "`{}`: {}",
            describe(&command),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a shell command inside `netns` with its own /sys (`ip netns exec`), failing on error.
fn in_netns(netns: &str, shell: &str) -> anyhow::Result<()> {
    ip(["netns", "exec", netns, "sh", "-c", shell]).map(drop)
}

/// (packets, dropped) of an interface's RX and TX, from `ip -s -j link`.
fn link_counters(netns: &str, dev: &str) -> anyhow::Result<[u64; 4]> {
    let text = ip(["-n", netns, "-s", "-j", "link", "show", "dev", dev])?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let stats = &json[0]["stats64"];
    let get = |dir: &str, key: &str| stats[dir][key].as_u64().unwrap_or(0);
    Ok([
        get("rx", "packets"),
        get("rx", "dropped"),
        get("tx", "packets"),
        get("tx", "dropped"),
    ])
}

/// Packets the kernel of `netns` has forwarded so far (IPv4 ForwDatagrams + IPv6
/// OutForwDatagrams): near zero while XDP or an AF_XDP forwarder does the work, so a case
/// cannot silently measure the kernel instead.
fn kernel_forwarded(netns: &str) -> anyhow::Result<u64> {
    let text = ip([
        "netns",
        "exec",
        netns,
        "cat",
        "/proc/net/snmp",
        "/proc/net/snmp6",
    ])?;
    Ok(parse_forwarded(&text))
}

/// ForwDatagrams of the `Ip:` table plus `Ip6OutForwDatagrams`, from /proc/net/snmp{,6} text.
fn parse_forwarded(text: &str) -> u64 {
    let mut lines = text.lines();
    let mut total = 0;
    while let Some(line) = lines.next() {
        if let Some(names) = line
            .strip_prefix("Ip: ")
            .filter(|l| l.starts_with("Forwarding"))
        {
            let values = lines.next().unwrap_or_default();
            let index = names.split_whitespace().position(|n| n == "ForwDatagrams");
            total += index
                .and_then(|i| values.split_whitespace().nth(i + 1)?.parse::<u64>().ok())
                .unwrap_or(0);
        } else if let Some(value) = line.strip_prefix("Ip6OutForwDatagrams") {
            total += value.trim().parse::<u64>().unwrap_or(0);
        }
    }
    total
}

/// Softirq time of all CPUs so far (ns), from the `cpu` line of /proc/stat.
fn softirq_ns() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()?
                .split_whitespace()
                .nth(7)?
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |t| t * TICK_NS)
}

/// User + system CPU time of a process or thread (ns), and its start time (ticks since boot).
fn proc_times(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime, start) = (
        fields.get(11)?.parse::<u64>().ok()?,
        fields.get(12)?.parse::<u64>().ok()?,
        fields.get(19)?.parse::<u64>().ok()?,
    );
    Some(((utime + stime) * TICK_NS, start))
}

/// Seconds since boot in clock ticks (comparable to a process start time).
fn uptime_ticks() -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| (s * 100.0) as u64)
}

/// Kernel threads named `napi/DEV-ID` for one of `devs`, started at or after `since` ticks.
fn napi_threads(devs: &[&str], since: u64) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let Some(name) = comm.strip_prefix("napi/") else {
            continue;
        };
        let ours = devs
            .iter()
            .any(|d| name.strip_prefix(d).is_some_and(|r| r.starts_with('-')));
        if ours && proc_times(pid).is_some_and(|(_, start)| start + 1 >= since) {
            found.push((pid, comm.to_owned()));
        }
    }
    found
}

/// Pins a thread or process to one CPU.
fn pin(pid: u32, cpu: usize) -> anyhow::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid as i32), &set)
        .with_context(|| format!("pinning {pid} to CPU {cpu}"))
}

/// dst0's addresses as permanent neighbours in `fwd` (dst's kernel never answers ARP or ND
/// once the receiver's XDP program takes every frame).
pub(crate) fn static_neighbours(fwd: &str) -> anyhow::Result<()> {
    for (family, addr) in [("-4", DST0.ipv4.to_string()), ("-6", DST0.ipv6.to_string())] {
        ip([
            "-n",
            fwd,
            family,
            "neigh",
            "replace",
            &addr,
            "lladdr",
            &DST0.mac_string(),
            "dev",
            FWD1.name,
            "nud",
            "permanent",
        ])?;
    }
    Ok(())
}

/// The lab with its receiver running.
pub struct Lab {
    lab: Option<LabGuard>,
    generator: PathBuf,
    settings: Settings,
    work: PathBuf,
    receiver: Option<Receiver>,
    /// dst0's NAPI threads (the receiving side).
    rx_napi: Vec<u32>,
    destinations: PathBuf,
    notes: Vec<String>,
}

impl Lab {
    /// Brings the lab up: static neighbours for dst0 in fwd (dst's kernel never sees ARP once
    /// the receiver's XDP program takes every frame), transmit offloads off on src0 and fwd1 (so
    /// that fwd0 and dst0 take the packets through their NAPI threads), the receiver on dst0,
    /// threaded NAPI on dst0.
    pub fn up(
        prefix: &str,
        generator: &Path,
        settings: &Settings,
        work: &Path,
    ) -> anyhow::Result<Self> {
        let lab = xfwd_lab::Lab::new(prefix)?
            .up_scoped()
            .with_context(|| format!("bench e2e: bringing up the lab {prefix} (`cargo xtask lab --prefix {prefix} down` removes a stale one)"))?;
        static_neighbours(&lab.netns(Role::Fwd))?;
        for (role, dev) in [(Role::Src, SRC0.name), (Role::Fwd, FWD1.name)] {
            in_netns(
                &lab.netns(role),
                &format!("ethtool -K {dev} tso off gso off >/dev/null"),
            )
            .context("ethtool (Debian package ethtool)")?;
        }
        let mut this = Lab {
            generator: generator.to_owned(),
            settings: settings.clone(),
            work: work.to_owned(),
            receiver: None,
            rx_napi: Vec::new(),
            destinations: work.join("destinations.txt"),
            notes: Vec::new(),
            lab: Some(lab),
        };
        this.start_receiver()?;
        Ok(this)
    }

    pub(crate) fn netns(&self, role: Role) -> String {
        self.lab.as_ref().map(|l| l.netns(role)).unwrap_or_default()
    }

    /// (Re)starts the receiver on dst0 (after dst0 was re-created, say).
    pub(crate) fn start_receiver(&mut self) -> anyhow::Result<()> {
        self.receiver = None;
        let since = uptime_ticks();
        let dst = self.netns(Role::Dst);
        self.receiver = Some(Receiver::start(
            &self.generator,
            &dst,
            self.settings.rx_cpu,
            self.settings.rt,
            &self.work.join("rx.log"),
        )?);
        in_netns(
            &dst,
            &format!("echo 1 > /sys/class/net/{}/threaded", DST0.name),
        )?;
        self.rx_napi = napi_threads(&[DST0.name], since)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        if self.rx_napi.is_empty() {
            self.notes.push("dst0's NAPI thread was not found: the receiving kernel's CPU time is missing from rx".into());
        }
        for &pid in &self.rx_napi {
            pin(pid, self.settings.rx_cpu)?;
            if let Some(priority) = self.settings.rt {
                make_rt(pid, priority)?;
            }
        }
        Ok(())
    }

    /// Loads bgp-full-v4 (or its first `limit` routes) into fwd's FIB via dst with `ip -batch`,
    /// and writes the destinations file: 8192 of the loaded prefixes spread evenly over the
    /// table, from which the generator draws its N destinations (again evenly). Returns
    /// (routes loaded, seconds).
    pub fn load_routes(&mut self, limit: Option<usize>) -> anyhow::Result<(usize, f64)> {
        let routes = xfwd_benches::data::routes::BGP_FULL_V4
            .load()
            .context("bench e2e: loading bgp-full-v4")?;
        let bench_block = xfwd_benches::data::Prefix::<std::net::Ipv4Addr> {
            addr: std::net::Ipv4Addr::new(198, 18, 0, 0),
            len: 15,
        };
        // Skip the default route and anything inside the lab's own block.
        let usable: Vec<_> = routes
            .iter()
            .map(|r| r.prefix)
            .filter(|p| p.len > 0 && !(p.len >= 15 && bench_block.contains(p.addr)))
            .take(limit.unwrap_or(usize::MAX))
            .collect();
        let mut batch = String::with_capacity(usable.len() * 48);
        for p in &usable {
            batch.push_str(&format!(
                "route add {p} via {} dev {}\n",
                DST0.ipv4, FWD1.name
            ));
        }
        let path = self.work.join("routes.batch");
        std::fs::write(&path, batch)?;
        let start = Instant::now();
        eprintln!("bench e2e: loading {} routes into fwd", usable.len());
        ip(["-n", &self.netns(Role::Fwd), "-batch", &display(&path)])?;
        let seconds = start.elapsed().as_secs_f64();
        // The generator draws N destinations evenly from this list (one per prefix here).
        let count = 8192.min(usable.len());
        let mut list = String::new();
        for i in 0..count {
            list.push_str(&format!("{}\n", usable[i * usable.len() / count]));
        }
        std::fs::write(&self.destinations, list)?;
        Ok((usable.len(), seconds))
    }

    /// The lab itself (to re-create a link).
    pub(crate) fn guard(&self) -> Option<&LabGuard> {
        self.lab.as_ref()
    }

    /// The `ip -batch` file of the routes [`load_routes`](Self::load_routes) loaded.
    pub(crate) fn routes_batch(&self) -> PathBuf {
        self.work.join("routes.batch")
    }

    /// The destinations file the generator draws its flows from.
    pub(crate) fn destinations(&self) -> &Path {
        &self.destinations
    }

    /// Adds a note to the run's report.
    pub fn note(&mut self, note: String) {
        // A forwarder started again (the matched load) says the same thing again: once is enough.
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Notes gathered so far.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Resets fwd's interfaces: no XDP program, GRO off (their NAPI instances and threads go).
    fn reset_fwd(&self) -> anyhow::Result<()> {
        let fwd = self.netns(Role::Fwd);
        for dev in [FWD0.name, FWD1.name] {
            ip(["-n", &fwd, "link", "set", "dev", dev, "xdp", "off"])?;
            in_netns(&fwd, &format!("ethtool -K {dev} gro off >/dev/null"))?;
        }
        Ok(())
    }

    /// Measures one case at every (size, flows).
    pub fn run_case(
        &mut self,
        case: Case,
        command: &str,
        xdp_object: &Path,
        sizes: &[u16],
        flows: &[usize],
    ) -> anyhow::Result<Vec<Point>> {
        self.with_case(case, command, xdp_object, |lab, fwd_pids, mut forwarder| {
            let mut points = Vec::new();
            for &size in sizes {
                for &n in flows {
                    eprintln!("bench e2e: {} {size} B {n} flows", case.label());
                    let point = lab.point(case, size, n, fwd_pids)?;
                    still_running(case, forwarder.as_deref_mut())?;
                    points.push(point);
                }
            }
            Ok(points)
        })
    }

    /// Runs `case` (as [`run_case`](Self::run_case) sets it up) for `trials` trials at the
    /// offered `rate` with `size`-byte frames over `flows` flows: the forwarder's CPU time per
    /// packet at a load every case sustains.
    #[allow(clippy::too_many_arguments, reason = "one trial set's parameters")]
    pub fn run_fixed(
        &mut self,
        case: Case,
        command: &str,
        xdp_object: &Path,
        rate: f64,
        size: u16,
        flows: usize,
        trials: usize,
    ) -> anyhow::Result<Vec<Trial>> {
        let secs = self.settings.trial_secs;
        self.with_case(case, command, xdp_object, |lab, fwd_pids, mut forwarder| {
            let mut out = Vec::with_capacity(trials);
            for i in 0..trials {
                eprintln!(
                    "bench e2e: {} at {rate:.0} pps, {size} B {flows} flows, trial {}/{trials}",
                    case.label(),
                    i + 1
                );
                out.push(lab.trial(Some(rate), size, flows, None, fwd_pids, Some(secs))?);
                still_running(case, forwarder.as_deref_mut())?;
            }
            Ok(out)
        })
    }

    /// Sets `case` up in fwd (the kernel's GRO, the XDP program, or the forwarder's process
    /// from `command`), waits until it forwards, pins its threads, runs `body` with the
    /// forwarder's threads and process, and takes it down again.
    fn with_case<T>(
        &mut self,
        case: Case,
        command: &str,
        xdp_object: &Path,
        body: impl FnOnce(&mut Self, &[u32], Option<&mut Process>) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        self.reset_fwd()?;
        if self.receiver.is_none() {
            self.start_receiver()?;
        }
        let fwd = self.netns(Role::Fwd);
        let since = uptime_ticks();
        let mut forwarder = None;
        match case {
            Case::Kernel => in_netns(&fwd, &format!("ethtool -K {} gro on >/dev/null", FWD0.name))?,
            Case::Xdp => {
                ip([
                    "-n",
                    &fwd,
                    "link",
                    "set",
                    "dev",
                    FWD0.name,
                    "xdpdrv",
                    "obj",
                    &display(xdp_object),
                    "sec",
                    "xdp",
                ])?;
            }
            Case::Bare | Case::Xfwd => {
                let line = command
                    .replace("{fwd0}", FWD0.name)
                    .replace("{fwd1}", FWD1.name)
                    .replace("{netns}", &fwd)
                    .replace("{cpu}", &self.settings.fwd_cpu.to_string());
                let log = self.work.join(format!("{}.log", case.label()));
                let mut spawn = Command::new("nsenter");
                spawn
                    .arg(format!("--net={}", display(&xfwd_lab::netns::path(&fwd))))
                    .args(self.settings.rt.map_or(Vec::new(), |p| {
                        vec!["chrt".to_owned(), "-f".to_owned(), p.to_string()]
                    }))
                    .args([
                        "taskset",
                        "-c",
                        &self.settings.fwd_cpu.to_string(),
                        "sh",
                        "-c",
                    ])
                    .arg(format!("exec {line}"))
                    .stdin(Stdio::null())
                    .stdout(std::fs::File::create(&log)?)
                    .stderr(std::fs::File::create(log.with_extension("err.log"))?);
                eprintln!("bench e2e: + {}", describe(&spawn));
                let child = spawn.spawn().with_context(|| describe(&spawn))?;
                forwarder = Some(Process {
                    child,
                    what: case.label().into(),
                });
            }
        }
        let result = self
            .start_case(case, forwarder.as_mut(), since)
            .and_then(|fwd_pids| body(self, &fwd_pids, forwarder.as_mut()));
        drop(forwarder);
        self.reset_fwd()?;
        result
    }

    /// Waits until the forwarder forwards, pins (and prioritises) fwd's NAPI threads; returns
    /// the threads and process whose CPU time is the forwarder's.
    fn start_case(
        &mut self,
        case: Case,
        mut forwarder: Option<&mut Process>,
        since: u64,
    ) -> anyhow::Result<Vec<u32>> {
        if let Some(process) = forwarder.as_deref_mut() {
            // Kernel forwarding stays on (a faithful router may read the sysctl); the probe
            // only counts when the kernel forwarded (almost) none of it.
            let start = Instant::now();
            loop {
                if let Ok(Some(status)) = process.child.try_wait() {
                    let log = self.work.join(format!("{}.err.log", case.label()));
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let last = text.lines().rev().find(|l| !l.trim().is_empty());
                    bail!(
                        "{} exited ({status}) before forwarding: {}",
                        case.label(),
                        last.unwrap_or("(no output)").trim()
                    );
                }
                let probe = self.trial(Some(20_000.0), 64, 1, Some(2_000), &[], None)?;
                let by_kernel = probe.kernel_forwarded * 100 > probe.sent;
                if probe.received >= probe.sent * 99 / 100 && probe.sent > 0 && !by_kernel {
                    self.note(format!(
                        "{} forwarded {:.0} s after its start (start-up and table loading included)",
                        case.label(),
                        start.elapsed().as_secs_f64()
                    ));
                    break;
                }
                if start.elapsed() > FORWARDER_START {
                    bail!(
                        "{} did not forward within {FORWARDER_START:?}",
                        case.label()
                    );
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        let fwd = self.netns(Role::Fwd);
        for dev in [FWD0.name, FWD1.name] {
            // Fails with EOPNOTSUPP on an interface without NAPI (fwd1 in the kernel case).
            let _ = in_netns(&fwd, &format!("echo 1 > /sys/class/net/{dev}/threaded"));
        }
        let napi: Vec<(u32, String)> = napi_threads(&[FWD0.name, FWD1.name], since);
        if napi.is_empty() {
            self.notes.push(format!("{}: no NAPI thread of fwd0/fwd1 found; the kernel's forwarding time is missing from fwd", case.label()));
        }
        for (pid, _) in &napi {
            pin(*pid, self.settings.fwd_cpu)?;
            if let Some(priority) = self.settings.rt {
                make_rt(*pid, priority)?;
            }
        }
        let mut fwd_pids: Vec<u32> = napi.iter().map(|(p, _)| *p).collect();
        if let Some(process) = forwarder.as_deref() {
            fwd_pids.push(process.child.id());
        }
        Ok(fwd_pids)
    }

    /// NDR and PDR by binary search, then latency at half NDR.
    fn point(
        &mut self,
        case: Case,
        size: u16,
        flows: usize,
        fwd_pids: &[u32],
    ) -> anyhow::Result<Point> {
        let s = self.settings.clone();
        let mut trials = 0;
        let mut run = |this: &mut Self, rate: Option<f64>| {
            trials += 1;
            this.trial(rate, size, flows, None, fwd_pids, Some(s.trial_secs))
        };
        let max = run(self, None)?;
        let top = max.tx_pps;
        let (ndr, pdr, generator_limited) = if max.sent > 0 && max.received >= max.sent {
            (Some(max.clone()), Some(max.clone()), true)
        } else {
            let guess = max.rx_pps() * 0.95;
            let ndr = search(self, &mut run, MIN_RATE, top, guess, s.precision, |t| {
                t.received >= t.sent && t.sent > 0
            })?;
            let pdr = if max.loss <= s.pdr_loss {
                Some(max.clone())
            } else {
                let floor = ndr
                    .as_ref()
                    .map_or(MIN_RATE, |t| t.offered.unwrap_or(MIN_RATE));
                let pass = |t: &Trial| t.sent > 0 && t.loss <= s.pdr_loss;
                let found = search(self, &mut run, floor, top, max.rx_pps(), s.precision, pass)?;
                // PDR ≥ NDR by definition: a noisier search below it does not lower it.
                match (found, &ndr) {
                    (Some(p), Some(n)) if p.tx_pps < n.tx_pps => Some(n.clone()),
                    (found, ndr) => found.or(ndr.clone()),
                }
            };
            (ndr, pdr, false)
        };
        let latency = match &ndr {
            Some(t) if t.tx_pps > 2.0 * MIN_RATE => Some(run(self, Some(t.tx_pps / 2.0))?),
            _ => None,
        };
        Ok(Point {
            case,
            size,
            flows,
            max,
            ndr,
            pdr,
            generator_limited,
            latency,
            trials,
        })
    }

    /// One trial: the generator in src at `rate` for the trial length (or `count` probes),
    /// then the receiver's counts and everybody's CPU time.
    pub(crate) fn trial(
        &mut self,
        rate: Option<f64>,
        size: u16,
        flows: usize,
        count: Option<u64>,
        fwd_pids: &[u32],
        seconds: Option<f64>,
    ) -> anyhow::Result<Trial> {
        let (src, fwd) = (self.netns(Role::Src), self.netns(Role::Fwd));
        let receiver = self.receiver.as_mut().context("no receiver")?;
        receiver.report()?; // counts start now
        let cpu_of = |pids: &[u32]| {
            pids.iter()
                .filter_map(|&p| proc_times(p))
                .map(|(t, _)| t)
                .sum::<u64>()
        };
        let before = (
            link_counters(&src, SRC0.name)?,
            link_counters(&fwd, FWD0.name)?,
            link_counters(&fwd, FWD1.name)?,
            cpu_of(fwd_pids),
            cpu_of(&self.rx_napi),
            softirq_ns(),
            kernel_forwarded(&fwd)?,
        );
        // The generator stays at normal priority: it spins between batches, and a spinning
        // real-time thread would trip the kernel's RT throttling (50 ms stalls every second)
        // for the receiver on the same CPU.
        let mut command = rt_command(None);
        command
            .arg(&self.generator)
            .args(["--netns", &src, "tx", "--iface", SRC0.name, "--json"])
            .args([
                "--src-mac",
                &SRC0.mac_string(),
                "--dst-mac",
                &FWD0.mac_string(),
            ])
            .args(["--src-ip", &SRC0.ipv4.to_string()])
            .arg("--prefixes")
            .arg(&self.destinations)
            .args([
                "--destinations",
                &flows.to_string(),
                "--size",
                &size.to_string(),
            ])
            .args(["--cpus", &self.settings.gen_cpu.to_string()]);
        if let Some(rate) = rate {
            command.args(["--rate", &format!("{rate:.0}")]);
        }
        if let Some(count) = count {
            command.args(["--count", &count.to_string()]);
        }
        if let Some(seconds) = seconds {
            command.args(["--duration", &format!("{seconds}")]);
        }
        let out = command.output().with_context(|| describe(&command))?;
        if !out.status.success() {
            bail!(
                "`{}`: {}",
                describe(&command),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let tx: TxJson = serde_json::from_slice(&out.stdout).context("generator report")?;
        std::thread::sleep(SETTLE);
        let rx = self.receiver.as_mut().context("no receiver")?.report()?;
        let after = (
            link_counters(&src, SRC0.name)?,
            link_counters(&fwd, FWD0.name)?,
            link_counters(&fwd, FWD1.name)?,
            cpu_of(fwd_pids),
            cpu_of(&self.rx_napi),
            softirq_ns(),
            kernel_forwarded(&fwd)?,
        );
        let fwd_time = after.3.saturating_sub(before.3);
        let napi_rx = after.4.saturating_sub(before.4);
        let secs_run = seconds.unwrap_or(tx.sent as f64 / tx.pps.max(1.0));
        Ok(Trial {
            offered: rate,
            tx_pps: tx.pps,
            sent: tx.sent,
            received: rx.received,
            out_of_order: rx.out_of_order,
            fwd_in: after.1[0].saturating_sub(before.1[0]),
            fwd_out: after.2[2].saturating_sub(before.2[2]),
            kernel_forwarded: after.6.saturating_sub(before.6),
            loss: if tx.sent == 0 {
                0.0
            } else {
                1.0 - rx.received as f64 / tx.sent as f64
            },
            latency: rx.latency,
            drops: Drops {
                fwd_ingress: after.0[3].saturating_sub(before.0[3]),
                dst_ingress: after.2[3].saturating_sub(before.2[3]),
                rx_socket: rx.xdp.rx_dropped + rx.xdp.rx_ring_full,
            },
            cpu: Cpu {
                gen_ns: tx.cpu_ns,
                fwd_ns: fwd_time,
                rx_ns: napi_rx + rx.cpu_ns,
                softirq_ns: after.5.saturating_sub(before.5),
            },
            secs: secs_run,
        })
    }
}

/// Fails if the forwarder process of `case` has exited.
fn still_running(case: Case, forwarder: Option<&mut Process>) -> anyhow::Result<()> {
    if let Some(process) = forwarder
        && let Ok(Some(status)) = process.child.try_wait()
    {
        bail!("{} exited ({status}) during the measurement", case.label());
    }
    Ok(())
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.receiver = None;
        // Dropping the guard takes the lab down.
        self.lab = None;
    }
}

/// Binary search for the highest rate in [lo, hi] whose trial passes, starting at `guess`;
/// returns the best passing trial.
fn search<C>(
    lab: &mut C,
    run: &mut impl FnMut(&mut C, Option<f64>) -> anyhow::Result<Trial>,
    mut lo: f64,
    mut hi: f64,
    guess: f64,
    precision: f64,
    pass: impl Fn(&Trial) -> bool,
) -> anyhow::Result<Option<Trial>> {
    let mut best: Option<Trial> = None;
    let mut rate = if guess > lo && guess < hi {
        guess
    } else {
        (lo + hi) / 2.0
    };
    // The floor itself is tried only when everything above it failed.
    let mut tried_floor = false;
    loop {
        let trial = run(lab, Some(rate))?;
        if pass(&trial) {
            lo = rate;
            best = Some(trial);
        } else {
            hi = rate;
        }
        if hi - lo <= precision * hi {
            if best.is_none() && !tried_floor && lo > 0.0 {
                tried_floor = true;
                rate = lo;
                continue;
            }
            return Ok(best);
        }
        rate = (lo + hi) / 2.0;
        if rate < MIN_RATE {
            return Ok(best);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake device that forwards everything up to `capacity` pps and loses the excess, or
    /// loses a little everywhere above `lossy`.
    fn fake(
        capacity: f64,
        lossy: f64,
    ) -> impl FnMut(&mut u32, Option<f64>) -> anyhow::Result<Trial> {
        move |count: &mut u32, rate: Option<f64>| {
            *count += 1;
            let rate = rate.unwrap_or(1e9);
            let sent = (rate * 2.0) as u64;
            let through = if rate <= capacity {
                1.0
            } else {
                capacity / rate
            };
            let through = if rate > lossy {
                through * 0.998
            } else {
                through
            };
            let received = (sent as f64 * through) as u64;
            Ok(Trial {
                offered: Some(rate),
                tx_pps: rate,
                sent,
                received,
                loss: 1.0 - received as f64 / sent as f64,
                secs: 2.0,
                ..Trial::default()
            })
        }
    }

    #[test]
    fn search_brackets_the_capacity() {
        for (capacity, guess) in [
            (300_000.0, 290_000.0),
            (12_345.0, 500_000.0),
            (999_000.0, 1.0),
        ] {
            let mut count = 0;
            let mut run = fake(capacity, f64::INFINITY);
            let pass = |t: &Trial| t.received >= t.sent;
            let best = search(
                &mut count,
                &mut run,
                MIN_RATE,
                1_000_000.0,
                guess,
                0.02,
                pass,
            )
            .unwrap()
            .expect("a rate passes");
            assert!(best.tx_pps <= capacity, "{capacity}: {}", best.tx_pps);
            assert!(
                best.tx_pps >= capacity - 0.02 * 1_000_000.0,
                "{capacity}: {}",
                best.tx_pps
            );
            assert!(count <= 12, "{count} trials");
        }
    }

    #[test]
    fn search_reports_nothing_when_every_rate_fails() {
        let mut count = 0;
        let mut run = fake(100.0, f64::INFINITY);
        let pass = |t: &Trial| t.received >= t.sent;
        let best = search(&mut count, &mut run, MIN_RATE, 1_000_000.0, 0.0, 0.1, pass).unwrap();
        assert!(best.is_none());
        assert!(count < 20);
    }

    #[test]
    fn pdr_passes_where_ndr_fails() {
        // Loses 0.2% everywhere above 50 kpps: NDR stops there, PDR (≤ 0.5%) goes to capacity.
        let mut count = 0;
        let mut run = fake(400_000.0, 50_000.0);
        let ndr = search(
            &mut count,
            &mut run,
            MIN_RATE,
            1e6,
            390_000.0,
            0.02,
            |t: &Trial| t.received >= t.sent,
        )
        .unwrap()
        .unwrap();
        let pdr = search(
            &mut count,
            &mut run,
            ndr.tx_pps,
            1e6,
            390_000.0,
            0.02,
            |t: &Trial| t.loss <= 0.005,
        )
        .unwrap()
        .unwrap();
        assert!(
            ndr.tx_pps <= 50_000.0 && ndr.tx_pps > 30_000.0,
            "{}",
            ndr.tx_pps
        );
        assert!(
            pdr.tx_pps > 380_000.0 && pdr.tx_pps <= 400_000.0,
            "{}",
            pdr.tx_pps
        );
    }

    #[test]
    fn forwarded_counts_parse() {
        let text = "Ip: Forwarding DefaultTTL InReceives ForwDatagrams OutRequests\n\
                    Ip: 1 64 1000 900 5\n\
                    Icmp: InMsgs ForwDatagrams\nIcmp: 7 7\n\
                    Ip6InReceives                   \t50\n\
                    Ip6OutForwDatagrams             \t42\n";
        assert_eq!(parse_forwarded(text), 942);
        assert_eq!(parse_forwarded(""), 0);
    }

    #[test]
    fn proc_stat_fields_parse() {
        let (_cpu, start) = proc_times(std::process::id()).expect("our own /proc entry");
        assert!(start > 0);
        assert!(uptime_ticks() >= start);
    }
}
