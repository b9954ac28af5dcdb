//! Start-up, run and shutdown of a forwarder instance in the calling thread's namespace.
//!
//! Order of start-up (every step's resources are released if a later one fails, because each
//! is an owned value dropped on the error path):
//! 1. find the interfaces (index, MAC, addresses) with getifaddrs(3) and check that each has
//!    at least `queues` receive and transmit queues ([`channels`](crate::channels));
//! 2. load the XDP program, give each interface its XSKMAP block, fill the local-address set;
//! 3. open one run loop per queue (UMEM + one socket per interface), register the sockets;
//! 4. attach the XDP program to every interface (traffic starts flowing to the sockets);
//! 5. open the punt device and the control socket; start the loop threads (pinned), the
//!    control and metrics threads;
//! 6. watch the links every [`MONITOR_PERIOD`] (up/down, removal, addresses) until stopped.
//!
//! On stop (SIGINT/SIGTERM set the flag): the loops finish their turn and close their
//! sockets, the XDP program is detached from every interface, the control socket file and
//! the punt device are removed.
//!
//! On reload (SIGHUP sets [`Reload::requested`]): the link monitor reads the configuration
//! again; a valid one's live `[pipeline]` settings go to the engines (applied between two
//! batches), and every other change is named in a warning as needing a restart; an invalid
//! one changes nothing.

use std::collections::BTreeSet;
use std::net::{IpAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::net::if_::InterfaceFlags;

use crate::config::{Config, ConfigError, XdpMode};
use crate::counters::QueueCounters;
use crate::engine::{Engine, EngineSpec, LiveConfig};
use crate::punt::Punt;
use crate::runloop::{LoopOptions, PortSpec, PortState, QueueLoop};
use crate::serve::{ControlSocket, SnapshotFn, serve_metrics, spawn_named};
use crate::stats::Stats;
use crate::xdp::{XDP_COUNTERS, XdpProgram};

/// How often the link monitor looks at the interfaces.
pub const MONITOR_PERIOD: Duration = Duration::from_millis(200);

/// One interface as getifaddrs(3) reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkView {
    /// Index.
    pub ifindex: u32,
    /// MAC, when it has one.
    pub mac: Option<[u8; 6]>,
    /// Up with carrier (IFF_UP and IFF_RUNNING).
    pub up: bool,
    /// Its IPv4 and IPv6 addresses.
    pub addrs: Vec<IpAddr>,
}

/// All interfaces of the calling thread's namespace, by name.
///
/// # Errors
/// When getifaddrs(3) fails.
pub fn links() -> anyhow::Result<std::collections::BTreeMap<String, LinkView>> {
    let mut out = std::collections::BTreeMap::<String, LinkView>::new();
    for entry in nix::ifaddrs::getifaddrs().context("getifaddrs")? {
        let view = out.entry(entry.interface_name.clone()).or_default();
        let Some(address) = entry.address else {
            continue;
        };
        if let Some(link) = address.as_link_addr() {
            view.ifindex = link.ifindex() as u32;
            view.mac = link.addr().filter(|m| *m != [0; 6]);
            view.up = entry.flags.contains(InterfaceFlags::IFF_UP)
                && entry.flags.contains(InterfaceFlags::IFF_RUNNING);
        } else if let Some(v4) = address.as_sockaddr_in() {
            view.addrs.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = address.as_sockaddr_in6() {
            view.addrs.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(out)
}

/// Every local address of the namespace (all interfaces, as the kernel's weak host model
/// accepts any of them on any link).
fn local_addresses(views: &std::collections::BTreeMap<String, LinkView>) -> BTreeSet<IpAddr> {
    views
        .values()
        .flat_map(|v| v.addrs.iter().copied())
        .collect()
}

/// Brings the XDP program's local set in line with `wanted`.
fn sync_locals(xdp: &mut XdpProgram, wanted: &BTreeSet<IpAddr>, current: &mut BTreeSet<IpAddr>) {
    for gone in current.difference(wanted).copied().collect::<Vec<_>>() {
        xdp.remove_local(gone);
        current.remove(&gone);
        tracing::info!(%gone, "local address removed");
    }
    for new in wanted.difference(current).copied().collect::<Vec<_>>() {
        match xdp.add_local(new) {
            Ok(()) => {
                current.insert(new);
                tracing::debug!(%new, "local address added");
            }
            Err(e) => tracing::warn!(%new, "local address not added: {e}"),
        }
    }
}

/// How a running instance reloads its configuration.
pub struct Reload {
    /// Set (by SIGHUP) to ask for a reload; cleared when it is done.
    pub requested: Arc<AtomicBool>,
    /// Reads and validates the configuration again (the file and the command line's flags).
    pub load: Box<dyn Fn() -> Result<Config, ConfigError> + Send>,
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload")
            .field("requested", &self.requested)
            .finish_non_exhaustive()
    }
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The configuration did not load or validate: nothing changed.
    Refused(String),
    /// The live settings were published to the engines (`live`: whether an engine takes
    /// them); `restart` names what changed but only takes effect after a restart.
    Applied {
        /// An engine follows the live settings.
        live: bool,
        /// Settings that changed and need a restart.
        restart: Vec<String>,
    },
}

impl Reload {
    /// Reloads now: validates the configuration again, publishes its pipeline settings to
    /// `live` (each engine applies what can change live), and says what needs a restart
    /// compared with `running`.
    pub fn apply(&self, running: &Config, live: Option<&LiveConfig>) -> Reloaded {
        let new = match (self.load)() {
            Ok(config) => config,
            Err(e) => return Reloaded::Refused(e.to_string()),
        };
        if let Some(live) = live {
            live.publish(new.pipeline);
        }
        Reloaded::Applied {
            live: live.is_some(),
            restart: new.needs_restart(running),
        }
    }
}

/// The interfaces of `config`, found in the calling thread's namespace.
///
/// # Errors
/// When an interface does not exist or has no MAC.
pub fn resolve_ports(config: &Config) -> anyhow::Result<Vec<PortSpec>> {
    let views = links()?;
    config
        .interfaces
        .iter()
        .map(|name| {
            let view = views
                .get(name)
                .filter(|v| v.ifindex != 0)
                .with_context(|| format!("no interface {name} in this namespace"))?;
            let mac = view
                .mac
                .with_context(|| format!("{name} has no Ethernet address"))?;
            Ok(PortSpec {
                name: name.clone(),
                ifindex: view.ifindex,
                mac,
            })
        })
        .collect()
}

/// Runs an instance until `stop` is set (or every interface is gone).
///
/// `metrics` is a listener bound beforehand (so that it can live in another namespace than
/// the forwarder). `reload`, when given, is checked by the link monitor (SIGHUP).
///
/// # Errors
/// Any start-up failure (everything started so far is undone), or every interface vanishing.
pub fn run<E: Engine + 'static>(
    config: &Config,
    engine: EngineSpec<E>,
    metrics: Option<TcpListener>,
    stop: Arc<AtomicBool>,
    reload: Option<Reload>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut ports = resolve_ports(config)?;
    for port in &ports {
        if let Some(found) = crate::channels::device_queues(&port.name) {
            found
                .check(&port.name, config.queues)
                .map_err(anyhow::Error::msg)?;
        }
    }
    let mut xdp = XdpProgram::load()?;
    for (slot, port) in ports.iter().enumerate() {
        xdp.set_port(port.ifindex, slot as u32)?;
    }
    if let Some(feed) = &engine.udp_ports {
        feed.fill(&mut xdp)?;
    }
    let mut locals = BTreeSet::new();
    match &engine.locals {
        Some(feed) => feed.fill(&mut xdp),
        None => sync_locals(&mut xdp, &local_addresses(&links()?), &mut locals),
    }
    let states: Arc<[PortState]> = ports.iter().map(|_| PortState::default()).collect();
    let options = LoopOptions {
        sizes: config.rings,
        zero_copy: config.zero_copy,
        busy_poll: config.busy_poll,
    };
    let mut loops = Vec::new();
    let mut counters = Vec::new();
    for queue in 0..config.queues {
        let queue_counters = Arc::new(QueueCounters::new(queue, ports.len()));
        loops.push(QueueLoop::open(
            queue,
            &ports,
            states.clone(),
            &options,
            &mut xdp,
            queue_counters.clone(),
        )?);
        counters.push(queue_counters);
    }
    for port in &ports {
        xdp.attach(
            &port.name,
            port.ifindex,
            config.xdp_mode == XdpMode::Generic,
        )?;
    }
    let punt = match &config.punt_device {
        Some(name) => Some(Arc::new(Punt::open(name)?)),
        None => None,
    };
    let control = ControlSocket::bind(&config.control_socket)?;
    let xdp = Arc::new(Mutex::new(xdp));
    if let Some(feed) = &engine.locals {
        feed.attach(xdp.clone());
    }
    if let Some(feed) = &engine.udp_ports {
        feed.attach(xdp.clone());
    }

    let port_names: Vec<String> = ports.iter().map(|p| p.name.clone()).collect();
    // Why every frame goes to the kernel now (netfilter or tc that appeared after start).
    let diverted: Arc<Mutex<Vec<String>>> = Arc::default();
    let snapshot: SnapshotFn = {
        let diverted = diverted.clone();
        let xdp = xdp.clone();
        let counters = counters.clone();
        let states = states.clone();
        let names = port_names.clone();
        let generation = engine.generation.clone();
        let report = engine.report.clone();
        let mode = engine.mode;
        Arc::new(move || {
            let (xdp_counters, local_addresses) = {
                let program = xdp.lock().unwrap_or_else(|e| e.into_inner());
                (program.counters(), program.locals().len())
            };
            let mut stats = Stats {
                uptime_seconds: started.elapsed().as_secs_f64(),
                mode: mode.to_owned(),
                interfaces: names.clone(),
                up: states
                    .iter()
                    .map(|s| s.up.load(Ordering::Relaxed) && !s.gone.load(Ordering::Relaxed))
                    .collect(),
                queues: counters.iter().map(|c| c.snapshot(&names)).collect(),
                xdp: XDP_COUNTERS
                    .iter()
                    .zip(xdp_counters)
                    .map(|(k, n)| ((*k).to_owned(), n))
                    .collect(),
                local_addresses,
                netlink_generation: generation.as_ref().map(|g| g()),
                diverted: diverted.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                ..Stats::default()
            };
            report(&mut stats);
            stats
        })
    };

    let allowed = allowed_cpus();
    let mut threads = Vec::new();
    let (acks_to_main, acks) = std::sync::mpsc::channel::<u32>();
    let mut loop_set = LoopSet {
        pause: Arc::new(AtomicBool::new(false)),
        acks,
        senders: Vec::new(),
        options,
        counters: counters.clone(),
        states: states.clone(),
        generic: config.xdp_mode == XdpMode::Generic,
        queues: config.queues,
        served: engine.served.clone(),
    };
    let result = (|| -> anyhow::Result<()> {
        for (index, queue_loop) in loops.drain(..).enumerate() {
            let cpu = match &config.cpus {
                Some(cpus) => Some(cpus[index]),
                None => default_cpu(&allowed, index),
            };
            let make = engine.make.clone();
            let punt = punt.clone();
            let stop = stop.clone();
            let pause = loop_set.pause.clone();
            let acks = acks_to_main.clone();
            let (to_loop, reopened) = std::sync::mpsc::channel::<QueueLoop>();
            loop_set.senders.push(to_loop);
            tracing::debug!(queue = index, ?cpu, "run loop CPU");
            threads.push(spawn_named(&format!("xfwd-q{index}"), move || {
                if let Some(cpu) = cpu {
                    pin_to_cpu(cpu);
                }
                let mut engine = match make(index as u32) {
                    Ok(engine) => engine,
                    Err(e) => {
                        tracing::error!(queue = index, "no engine: {e:#}");
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                };
                // The engine (its route cache, hold buffer, counters) outlives the loops: a
                // re-created interface reopens the sockets, not the pipeline.
                let mut current = Some(queue_loop);
                while let Some(mut queue_loop) = current.take() {
                    queue_loop.run(&mut engine, punt.as_deref(), &stop, &pause);
                    // Its sockets close here, so that the reopened loop can bind the queues.
                    drop(queue_loop);
                    if stop.load(Ordering::Relaxed) || acks.send(index as u32).is_err() {
                        break;
                    }
                    current = reopened.recv().ok();
                }
            })?);
        }
        {
            let snapshot = snapshot.clone();
            let stop = stop.clone();
            let query = engine.query.clone();
            threads.push(spawn_named("xfwd-control", move || {
                control.serve(&*snapshot, query.as_ref(), &stop);
            })?);
        }
        if let Some(listener) = metrics {
            let snapshot = snapshot.clone();
            let stop = stop.clone();
            threads.push(spawn_named("xfwd-metrics", move || {
                serve_metrics(&listener, &*snapshot, &stop);
            })?);
        }
        tracing::info!(
            mode = engine.mode,
            interfaces = %port_names.join(","),
            queues = config.queues,
            control = %config.control_socket.display(),
            punt = punt.as_ref().map_or("off", |p| p.name()),
            "forwarding"
        );
        crate::notify::ready(&format!("forwarding on {}", port_names.join(",")));
        let poll_addresses = engine.locals.is_none();
        let generation = engine.generation.clone();
        let rebuilds = engine.rebuilds.clone();
        let mut trimmer = generation
            .as_ref()
            .map(|g| crate::trim::Trimmer::new(Instant::now(), g()));
        let icmp_peers = engine.icmp_peers.clone();
        let mut icmp_read = Instant::now();
        let mut watch = crate::bypass_watch::BypassWatch::new(
            config.interfaces.clone(),
            config.netfilter,
            config.tc,
        );
        let mut on_turn = || {
            // Rules xfwd may not bypass, appearing after start: the kernel forwards meanwhile.
            if let Some(divert) = watch.poll(Instant::now()) {
                let on = matches!(divert, crate::bypass_watch::Divert::Start(_));
                match &divert {
                    crate::bypass_watch::Divert::Start(reasons) => tracing::error!(
                        ?reasons,
                        "rules xfwd may not bypass act on forwarded traffic: every frame goes \
                         to the kernel until they are gone (or set bypass in the configuration)"
                    ),
                    crate::bypass_watch::Divert::Stop => {
                        tracing::warn!("the rules are gone: xfwd forwards again")
                    }
                }
                let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(error) = program.set_divert(on) {
                    tracing::error!(%error, "setting the XDP program's divert switch");
                }
                *diverted.lock().unwrap_or_else(|e| e.into_inner()) = watch.diverting().to_vec();
            }
            // The ICMP rate-limit sysctls are followed as the kernel follows them.
            if let Some(peers) = &icmp_peers
                && icmp_read.elapsed() >= crate::engine::ICMP_SYSCTL_PERIOD
            {
                crate::startup::read_icmp_sysctls(peers);
                icmp_read = Instant::now();
            }
            if let Some(reload) = &reload {
                if reload.requested.swap(false, Ordering::Relaxed) {
                    log_reload(&reload.apply(config, engine.live.as_deref()));
                }
            }
            // Memory freed by table changes goes back to the kernel once they are over.
            if let (Some(trimmer), Some(generation)) = (trimmer.as_mut(), &generation)
                && trimmer.due_with(
                    Instant::now(),
                    generation(),
                    rebuilds.as_ref().map_or(0, |r| r()),
                )
            {
                let released = crate::trim::trim();
                tracing::debug!(released, "heap trimmed after table changes");
            }
        };
        loop {
            let exit = monitor(
                &ports,
                &states,
                &xdp,
                poll_addresses.then_some(&mut locals),
                &stop,
                &mut on_turn,
            )?;
            match exit {
                MonitorExit::Stopped => return Ok(()),
                MonitorExit::Recreated(found) => {
                    loop_set.reopen(&found, &mut ports, &xdp, &stop)?;
                }
            }
        }
    })();

    stop.store(true, Ordering::Relaxed);
    crate::notify::stopping();
    // A paused loop's thread waits for its next loop: closing the channels ends the wait.
    drop(loop_set);
    for thread in threads {
        let _ = thread.join();
    }
    let final_stats = snapshot();
    tracing::info!(
        rx = final_stats.rx_packets(),
        tx = final_stats.tx_packets(),
        dropped = final_stats.dropped(),
        punted = final_stats.punted(),
        "stopped; detaching the XDP program"
    );
    drop(snapshot);
    if let Some(feed) = &engine.locals {
        feed.detach();
    }
    // The last owner of the program detaches it from every interface.
    drop(xdp);
    result
}

/// Logs what a reload did.
fn log_reload(reloaded: &Reloaded) {
    match reloaded {
        Reloaded::Refused(e) => tracing::error!("configuration not reloaded, nothing changed: {e}"),
        Reloaded::Applied { live, restart } => {
            if *live {
                tracing::info!("configuration reloaded: [pipeline] live settings applied");
            } else {
                tracing::info!("configuration reloaded: this engine has no live settings");
            }
            if !restart.is_empty() {
                tracing::warn!(
                    "changed but only after a restart: {} (still running with the old values)",
                    restart.join(", ")
                );
            }
        }
    }
}

/// Why [`monitor`] returned.
enum MonitorExit {
    /// `stop` was set.
    Stopped,
    /// Every removed interface exists again (same name, new ifindex): port slot and its new
    /// spec, for [`LoopSet::reopen`].
    Recreated(Vec<(usize, PortSpec)>),
}

/// Watches the links until `stop`: marks ports up/down/gone and (with `locals`) keeps the
/// local set in step; calls `on_turn` every period (reloads). Returns when every removed
/// interface has been created again under its name, for the loops to be reopened.
fn monitor(
    ports: &[PortSpec],
    states: &[PortState],
    xdp: &Mutex<XdpProgram>,
    mut locals: Option<&mut BTreeSet<IpAddr>>,
    stop: &AtomicBool,
    on_turn: &mut dyn FnMut(),
) -> anyhow::Result<MonitorExit> {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(MONITOR_PERIOD);
        on_turn();
        let Ok(views) = links() else { continue };
        let mut recreated = Vec::new();
        let mut still_gone = 0;
        for (slot, (port, state)) in ports.iter().zip(states).enumerate() {
            if state.gone.load(Ordering::Relaxed) {
                match views.get(&port.name) {
                    Some(view) if view.ifindex != 0 && view.ifindex != port.ifindex => {
                        match view.mac {
                            Some(mac) => {
                                state.up.store(view.up, Ordering::Relaxed);
                                recreated.push((
                                    slot,
                                    PortSpec {
                                        name: port.name.clone(),
                                        ifindex: view.ifindex,
                                        mac,
                                    },
                                ));
                            }
                            None => still_gone += 1,
                        }
                    }
                    _ => still_gone += 1,
                }
                continue;
            }
            match views.get(&port.name).filter(|v| v.ifindex == port.ifindex) {
                None => {
                    tracing::error!(
                        iface = %port.name,
                        "interface removed; its socket is closed to traffic (served again when re-created)"
                    );
                    state.gone.store(true, Ordering::Relaxed);
                    state.up.store(false, Ordering::Relaxed);
                    let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
                    program.remove_port(port.ifindex);
                    program.detach(port.ifindex);
                }
                Some(view) => {
                    if state.up.swap(view.up, Ordering::Relaxed) != view.up {
                        if view.up {
                            tracing::info!(iface = %port.name, "link up");
                        } else {
                            tracing::warn!(iface = %port.name, "link down; frames for it are dropped");
                        }
                    }
                }
            }
        }
        if let Some(locals) = locals.as_deref_mut() {
            let wanted = local_addresses(&views);
            if wanted != *locals {
                let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
                sync_locals(&mut program, &wanted, locals);
            }
        }
        if !recreated.is_empty() && still_gone == 0 {
            return Ok(MonitorExit::Recreated(recreated));
        }
        if states.iter().all(|s| s.gone.load(Ordering::Relaxed)) && recreated.is_empty() {
            bail!("every interface is gone");
        }
    }
    Ok(MonitorExit::Stopped)
}

/// The run loops' threads as the main thread steers them: paused, given new loops.
struct LoopSet {
    /// Set: every loop returns from its run and closes its sockets, then waits for a new loop.
    pause: Arc<AtomicBool>,
    /// Queue numbers of the loops that have paused.
    acks: std::sync::mpsc::Receiver<u32>,
    /// Where each queue's thread takes its new loop.
    senders: Vec<std::sync::mpsc::Sender<QueueLoop>>,
    options: LoopOptions,
    counters: Vec<Arc<QueueCounters>>,
    states: Arc<[PortState]>,
    generic: bool,
    queues: u32,
    served: Option<Arc<dataplane::Served>>,
}

impl LoopSet {
    /// How long the loops may take to pause (each looks at the flag at least every 50 ms).
    const PAUSE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Further tries at opening the loops, 100 ms apart.
    const OPEN_TRIES: u32 = 20;

    /// One loop per queue over every port (all or none).
    fn open_loops(
        &self,
        ports: &[PortSpec],
        program: &mut XdpProgram,
    ) -> anyhow::Result<Vec<QueueLoop>> {
        self.counters
            .iter()
            .enumerate()
            .map(|(queue, counters)| {
                QueueLoop::open(
                    queue as u32,
                    ports,
                    self.states.clone(),
                    &self.options,
                    program,
                    counters.clone(),
                )
            })
            .collect()
    }

    /// Serves re-created interfaces: pauses every loop (their sockets close), gives each
    /// re-created port its new ifindex in `ports`, the XDP program's port map and the
    /// engine's served set, opens new loops on every port, attaches the program to the new
    /// interfaces and hands the loops back to their threads (engines, counters and tables
    /// carry on). The other interfaces pause for as long as this takes (milliseconds).
    fn reopen(
        &mut self,
        recreated: &[(usize, PortSpec)],
        ports: &mut [PortSpec],
        xdp: &Mutex<XdpProgram>,
        stop: &AtomicBool,
    ) -> anyhow::Result<()> {
        let names: Vec<&str> = recreated.iter().map(|(_, p)| p.name.as_str()).collect();
        for (_, spec) in recreated {
            if let Some(found) = crate::channels::device_queues(&spec.name) {
                found
                    .check(&spec.name, self.queues)
                    .map_err(anyhow::Error::msg)?;
            }
        }
        tracing::debug!("pausing the run loops");
        self.pause.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + Self::PAUSE_TIMEOUT;
        for _ in 0..self.senders.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.acks.recv_timeout(left).is_err() {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                bail!("a run loop did not pause to serve the re-created interfaces");
            }
        }
        tracing::debug!("run loops paused; reopening");
        let mut program = xdp.lock().unwrap_or_else(|e| e.into_inner());
        for (slot, spec) in recreated {
            ports[*slot] = spec.clone();
            program.set_port(spec.ifindex, *slot as u32)?;
            if let Some(served) = &self.served {
                served.replace(*slot, spec.ifindex);
            }
        }
        // A socket just closed can hold its queue a moment longer, and a new device may not
        // take a bind at once: a few tries.
        let mut tries = 0;
        let loops = loop {
            match self.open_loops(ports, &mut program) {
                Ok(loops) => break loops,
                Err(e) if tries < Self::OPEN_TRIES => {
                    tries += 1;
                    tracing::debug!("reopening the run loops (try {tries}): {e:#}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.context("reopening the run loops")),
            }
        };
        tracing::debug!("run loops reopened; attaching");
        for (slot, spec) in recreated {
            program.attach(&spec.name, spec.ifindex, self.generic)?;
            self.states[*slot].gone.store(false, Ordering::Relaxed);
        }
        drop(program);
        self.pause.store(false, Ordering::Relaxed);
        for (sender, queue_loop) in self.senders.iter().zip(loops) {
            sender
                .send(queue_loop)
                .map_err(|_| anyhow::anyhow!("a run loop's thread has ended"))?;
        }
        tracing::info!(interfaces = %names.join(","), "re-created interfaces served again");
        Ok(())
    }
}

/// The CPUs the process may run on (its affinity mask: `taskset`, a cgroup cpuset), in
/// increasing order; empty when the mask cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect()
}

/// The CPU run loop `index` is pinned to without `--cpus`: the `index`-th allowed CPU, round
/// robin when there are more loops than CPUs (two loops then share a CPU); `None` (not
/// pinned) when no CPU is known.
///
/// ```
/// use forwarder::app::default_cpu;
/// assert_eq!(default_cpu(&[2, 3], 0), Some(2));
/// assert_eq!(default_cpu(&[2, 3], 3), Some(3));
/// assert_eq!(default_cpu(&[], 0), None);
/// ```
pub fn default_cpu(allowed: &[usize], index: usize) -> Option<usize> {
    (!allowed.is_empty()).then(|| allowed[index % allowed.len()])
}

/// Pins the calling thread to `cpu` (a warning when the kernel refuses).
fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set
        .set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        tracing::warn!(cpu, "not pinned: {e}");
    }
}
