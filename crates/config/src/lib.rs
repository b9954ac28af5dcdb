//! The forwarder's configuration: a TOML file (by default [`DEFAULT_CONFIG_PATH`] when it
//! exists), overridden by command-line flags, validated as a whole (every problem reported at
//! once; `xfwd check-config` only validates). On SIGHUP `xfwd run` reads it again, applies the
//! `[pipeline]` settings that can change live and names the ones that need a restart.
//!
//! ```toml
//! interfaces = ["fwd0", "fwd1"]
//! queues = 1
//! cpus = [1]                 # one per queue; default: the q-th CPU of the affinity mask (round robin)
//! busy_poll = false
//! zero_copy = false          # veth has no zero-copy
//! xdp_mode = "native"        # or "generic"
//! metrics = "127.0.0.1:9587" # Prometheus text (any address; loopback unless scraped remotely)
//! control_socket = "/run/xfwd/xfwd.sock"
//! punt_device = "xfwd-punt"  # "" turns the punt path off
//! netfilter = "refuse"       # "bypass": start even if nftables/iptables rules act on forwarded traffic
//! tc = "refuse"              # "bypass": start even if tc filters, tcx programs or a shaping qdisc sit on a served interface
//!
//! [rings]
//! rx = 1024
//! tx = 1024
//! frame_size = 2048
//!
//! [pipeline]                 # the routing pipeline, per queue (defaults shown)
//! route_cache = 512          # entries (a power of two), or "off"    (restart)
//! route_cache_ways = 4       # entries per bucket                    (restart)
//! icmp_rate = 1000           # ICMP errors per second, 0: none        (live)
//! icmp_burst = 50            #                                        (live)
//! hold_frames = 256          # frames waiting for a neighbour         (restart)
//! hold_bytes_per_neighbour = 212992 # the kernel's unres_qlen_bytes    (restart)
//! hold_timeout_ms = 3000     #                                        (restart)
//! vlan = "drop"              # tagged frames: "drop", "punt", "route" (live)
//! max_extension_headers = 8  # IPv6 headers walked before a punt     (live)
//! policy_mark = 0            # the mark xfrm policy lookups see       (live)
//!
//! # [bare]                   # port forwarding without lookups (xfwd run --bare) instead
//! # enabled = true
//! # peer_macs = { fwd0 = "02:58:46:00:00:01", fwd1 = "02:58:46:00:00:04" }
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

pub mod endpoint;

/// Interfaces one XDP program can serve (`MAX_PORTS` in the XDP program's C source).
pub const MAX_PORTS: u32 = 64;
/// Receive queues per interface that can have a socket (`QUEUES_PER_PORT` in the C source).
pub const QUEUES_PER_PORT: u32 = 64;

/// Default name of the punt device.
pub const DEFAULT_PUNT_DEVICE: &str = "xfwd-punt";

/// Ring and frame sizes of a run loop.
///
/// ```
/// let sizes = xfwd_config::RingSizes::default();
/// assert_eq!((sizes.rx, sizes.tx, sizes.frame_size), (1024, 1024, 2048));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    /// RX ring entries per socket (power of two).
    pub rx: u32,
    /// TX ring entries per socket (power of two).
    pub tx: u32,
    /// UMEM chunk size: 2048 or 4096.
    pub frame_size: u32,
}

impl Default for RingSizes {
    fn default() -> Self {
        RingSizes {
            rx: 1024,
            tx: 1024,
            frame_size: 2048,
        }
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
///
/// ```
/// assert_eq!(xfwd_config::parse_mac("02:58:46:00:00:0a"), Some([2, 0x58, 0x46, 0, 0, 10]));
/// assert_eq!(xfwd_config::parse_mac("02:58:46:00:00"), None);
/// ```
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Where the control socket lives by default (`/run/xfwd/<netns>.sock` with `--netns`).
pub const DEFAULT_CONTROL_DIR: &str = "/run/xfwd";

/// The configuration file `xfwd run` and `xfwd check-config` read when no `--config` is given
/// and it exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/xfwd/xfwd.toml";

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or wrong types.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Values that parse but make no sense, every one listed.
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// XDP attachment mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver (XDP_FLAGS_DRV_MODE); veth supports it.
    #[default]
    Native,
    /// Generic (skb) mode, for drivers without native XDP.
    Generic,
}

/// Ring sizes as written in the file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RingsFile {
    /// RX ring entries.
    pub rx: Option<u32>,
    /// TX ring entries.
    pub tx: Option<u32>,
    /// UMEM chunk size.
    pub frame_size: Option<u32>,
}

/// The bare engine's section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BareFile {
    /// Use the bare engine.
    #[serde(default)]
    pub enabled: bool,
    /// Per egress interface, the MAC written as destination.
    #[serde(default)]
    pub peer_macs: BTreeMap<String, String>,
}

/// What tagged frames get, as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VlanFile {
    /// `dataplane::VlanMode::Drop`.
    Drop,
    /// `dataplane::VlanMode::Punt`.
    Punt,
    /// `dataplane::VlanMode::Route`.
    Route,
}

/// The route cache's size as written in the file: a number of entries, or `"off"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RouteCacheFile {
    /// Entries (a power of two).
    Entries(usize),
    /// `"off"`: every packet does the full lookup.
    Word(Off),
}

/// The word `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Off {
    /// `"off"`.
    Off,
}

/// The routing pipeline's section, every key optional (`dataplane::Config::default()`
/// otherwise).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// Route cache entries per queue, or `"off"`.
    pub route_cache: Option<RouteCacheFile>,
    /// Route cache entries per bucket.
    pub route_cache_ways: Option<usize>,
    /// ICMP errors per second (0: none).
    pub icmp_rate: Option<u32>,
    /// ICMP burst.
    pub icmp_burst: Option<u32>,
    /// Frames the hold buffer keeps per queue.
    pub hold_frames: Option<usize>,
    /// Bytes held per unresolved neighbour (the kernel's `unres_qlen_bytes`).
    pub hold_bytes_per_neighbour: Option<usize>,
    /// How long a frame may wait for its neighbour, in milliseconds.
    pub hold_timeout_ms: Option<u64>,
    /// Tagged frames.
    pub vlan: Option<VlanFile>,
    /// IPv6 extension headers walked before a punt.
    pub max_extension_headers: Option<usize>,
    /// The mark xfrm policy lookups see.
    pub policy_mark: Option<u32>,
}

impl PipelineFile {
    /// The pipeline configuration these keys give over the defaults, or the problems.
    fn to_config(&self, problems: &mut Vec<String>) -> dataplane::Config {
        let mut config = dataplane::Config::default();
        let cache_defaults = dst_cache_defaults();
        config.dst_cache = match self.route_cache {
            Some(RouteCacheFile::Word(Off::Off)) => {
                if self.route_cache_ways.is_some() {
                    problems.push("pipeline.route_cache_ways with route_cache = \"off\"".into());
                }
                None
            }
            entries => Some(dataplane::DstCacheConfig {
                entries: match entries {
                    Some(RouteCacheFile::Entries(n)) => n,
                    _ => cache_defaults.entries,
                },
                ways: self.route_cache_ways.unwrap_or(cache_defaults.ways),
                ..cache_defaults
            }),
        };
        config.icmp_rate = self.icmp_rate.unwrap_or(config.icmp_rate);
        config.icmp_burst = self.icmp_burst.unwrap_or(config.icmp_burst);
        config.hold_frames = self.hold_frames.unwrap_or(config.hold_frames);
        config.hold_bytes_per_neighbour = self
            .hold_bytes_per_neighbour
            .unwrap_or(config.hold_bytes_per_neighbour);
        if let Some(ms) = self.hold_timeout_ms {
            if ms == 0 {
                problems.push("pipeline.hold_timeout_ms = 0; must be at least 1".into());
            }
            config.hold_timeout_ns = ms.saturating_mul(1_000_000);
        }
        config.vlan = match self.vlan {
            None => config.vlan,
            Some(VlanFile::Drop) => dataplane::VlanMode::Drop,
            Some(VlanFile::Punt) => dataplane::VlanMode::Punt,
            Some(VlanFile::Route) => dataplane::VlanMode::Route,
        };
        config.max_extension_headers = self
            .max_extension_headers
            .unwrap_or(config.max_extension_headers);
        config.policy_mark = self.policy_mark.unwrap_or(config.policy_mark);
        if let Err(e) = config.validate() {
            problems.push(format!("pipeline: {e}"));
        }
        config
    }
}

/// The route cache's defaults (the pipeline's).
fn dst_cache_defaults() -> dataplane::DstCacheConfig {
    dataplane::Config::default().dst_cache.unwrap_or_default()
}

/// The file, every key optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Interfaces to serve.
    pub interfaces: Option<Vec<String>>,
    /// Run loops (= receive queues per interface).
    pub queues: Option<u32>,
    /// CPU per queue.
    pub cpus: Option<Vec<usize>>,
    /// Busy polling.
    pub busy_poll: Option<bool>,
    /// Zero-copy sockets.
    pub zero_copy: Option<bool>,
    /// XDP mode.
    pub xdp_mode: Option<XdpMode>,
    /// Metrics address.
    pub metrics: Option<String>,
    /// Control socket path.
    pub control_socket: Option<PathBuf>,
    /// Punt device ("" = none).
    pub punt_device: Option<String>,
    /// Netfilter rules on forwarded traffic: refuse to start (default), or bypass them.
    pub netfilter: Option<BypassMode>,
    /// tc on the served interfaces: refuse to start (default), or bypass it.
    pub tc: Option<BypassMode>,
    /// Rings.
    #[serde(default)]
    pub rings: RingsFile,
    /// The routing pipeline.
    #[serde(default)]
    pub pipeline: PipelineFile,
    /// Bare mode.
    #[serde(default)]
    pub bare: BareFile,
    /// In-dataplane UDP endpoints (`[[endpoint]]`: a STAMP reflector, an echo).
    #[serde(default)]
    pub endpoint: Vec<crate::endpoint::EndpointFile>,
}

impl ConfigFile {
    /// Reads and parses a file.
    ///
    /// # Errors
    /// [`ConfigError::Read`] or [`ConfigError::Parse`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (`path` names it in errors).
    ///
    /// # Errors
    /// [`ConfigError::Parse`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })
    }
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Interfaces, in slot order.
    pub interfaces: Vec<String>,
    /// Run loops.
    pub queues: u32,
    /// CPU per queue (None: loop q on the q-th CPU of the process's affinity mask, round
    /// robin; see `forwarder::app::default_cpu`).
    pub cpus: Option<Vec<usize>>,
    /// Busy polling.
    pub busy_poll: bool,
    /// Zero-copy.
    pub zero_copy: bool,
    /// XDP mode.
    pub xdp_mode: XdpMode,
    /// Metrics listener (any address; loopback by habit).
    pub metrics: Option<SocketAddr>,
    /// Control socket.
    pub control_socket: PathBuf,
    /// Punt device.
    pub punt_device: Option<String>,
    /// What to do about netfilter rules acting on forwarded traffic.
    pub netfilter: BypassMode,
    /// What to do about tc on the served interfaces (filters, tcx programs, shaping qdiscs).
    pub tc: BypassMode,
    /// Rings.
    pub rings: RingSizes,
    /// Bare mode: peer MAC per interface; None = the routing pipeline.
    pub bare: Option<BTreeMap<String, [u8; 6]>>,
    /// The routing pipeline's configuration (`queue_id` 0: each run loop sets its own).
    pub pipeline: dataplane::Config,
    /// In-dataplane UDP endpoints (`[[endpoint]]`, routing mode).
    pub endpoints: Vec<crate::endpoint::EndpointSpec>,
}

impl Config {
    /// The settings of `self` that differ from `running` and need a restart: everything
    /// outside `[pipeline]` (the `[[endpoint]]` list too), and the pipeline's sizes ([`dataplane::Config::needs_restart`]).
    /// The rest (`[pipeline]`: ICMP rate and burst, VLAN mode, extension headers, policy
    /// mark) a running instance takes on SIGHUP.
    ///
    /// ```
    /// use xfwd_config::ConfigFile;
    /// let file = |text: &str| ConfigFile::parse(text, "x.toml".as_ref()).unwrap().validate(None).unwrap();
    /// let running = file("interfaces = [\"eth0\"]");
    /// let new = file("interfaces = [\"eth0\"]\nqueues = 2\n[pipeline]\nicmp_rate = 5\nhold_frames = 8");
    /// assert_eq!(new.needs_restart(&running), ["queues", "pipeline.hold_frames"]);
    /// ```
    pub fn needs_restart(&self, running: &Config) -> Vec<String> {
        let mut fixed: Vec<String> = [
            ("interfaces", self.interfaces != running.interfaces),
            ("queues", self.queues != running.queues),
            ("cpus", self.cpus != running.cpus),
            ("busy_poll", self.busy_poll != running.busy_poll),
            ("zero_copy", self.zero_copy != running.zero_copy),
            ("xdp_mode", self.xdp_mode != running.xdp_mode),
            ("metrics", self.metrics != running.metrics),
            (
                "control_socket",
                self.control_socket != running.control_socket,
            ),
            ("punt_device", self.punt_device != running.punt_device),
            ("netfilter", self.netfilter != running.netfilter),
            ("tc", self.tc != running.tc),
            ("rings", self.rings != running.rings),
            ("bare", self.bare != running.bare),
            ("endpoint", self.endpoints != running.endpoints),
        ]
        .into_iter()
        .filter(|(_, differs)| *differs)
        .map(|(name, _)| name.to_owned())
        .collect();
        fixed.extend(
            self.pipeline
                .needs_restart(&running.pipeline)
                .into_iter()
                .map(|name| format!("pipeline.{name}")),
        );
        fixed
    }
}

impl ConfigFile {
    /// Checks every value, returning all problems at once. `netns` names the default
    /// control socket.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing each problem.
    pub fn validate(&self, netns: Option<&str>) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let interfaces = self.interfaces.clone().unwrap_or_default();
        if interfaces.is_empty() {
            problems.push("no interfaces (--iface IF[,IF...] or `interfaces = [...]`)".to_owned());
        }
        if interfaces.len() > MAX_PORTS as usize {
            problems.push(format!(
                "{} interfaces; at most {MAX_PORTS}",
                interfaces.len()
            ));
        }
        for (i, name) in interfaces.iter().enumerate() {
            if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ',']) {
                problems.push(format!("interface name {name:?} is not a valid Linux name"));
            }
            if interfaces[..i].contains(name) {
                problems.push(format!("interface {name} is listed twice"));
            }
        }
        let queues = self.queues.unwrap_or(1);
        if queues == 0 || queues > QUEUES_PER_PORT {
            problems.push(format!("queues = {queues}; must be 1..={QUEUES_PER_PORT}"));
        }
        if let Some(cpus) = &self.cpus {
            if cpus.len() != queues as usize {
                problems.push(format!(
                    "cpus lists {} CPUs for {queues} queues; give one per queue",
                    cpus.len()
                ));
            }
            let online = std::thread::available_parallelism().map_or(1, |n| n.get());
            for cpu in cpus {
                if *cpu >= online.max(1024) {
                    problems.push(format!("cpu {cpu} does not exist"));
                }
            }
        }
        let metrics = match &self.metrics {
            None => None,
            Some(text) => match text.parse::<SocketAddr>() {
                // Any address: a non-loopback one exposes the counters (no secrets, but
                // interface names and traffic volumes) to whoever reaches it; see
                // docs/forwarder.md.
                Ok(addr) => Some(addr),
                Err(_) => {
                    problems.push(format!("metrics = {text:?} is not an address:port"));
                    None
                }
            },
        };
        let mut rings = RingSizes::default();
        for (name, value, slot) in [
            ("rings.rx", self.rings.rx, &mut rings.rx),
            ("rings.tx", self.rings.tx, &mut rings.tx),
        ] {
            if let Some(value) = value {
                if !value.is_power_of_two() || !(64..=16384).contains(&value) {
                    problems.push(format!(
                        "{name} = {value}; must be a power of two in 64..=16384"
                    ));
                }
                *slot = value;
            }
        }
        if let Some(size) = self.rings.frame_size {
            if size != 2048 && size != 4096 {
                problems.push(format!("rings.frame_size = {size}; must be 2048 or 4096"));
            }
            rings.frame_size = size;
        }
        let bare = if self.bare.enabled {
            let mut macs = BTreeMap::new();
            for (name, text) in &self.bare.peer_macs {
                if !interfaces.contains(name) {
                    problems.push(format!(
                        "peer MAC for {name}, which is not a served interface"
                    ));
                }
                match parse_mac(text) {
                    Some(mac) => {
                        macs.insert(name.clone(), mac);
                    }
                    None => problems.push(format!(
                        "peer MAC {text:?} of {name} is not aa:bb:cc:dd:ee:ff"
                    )),
                }
            }
            for name in &interfaces {
                if !self.bare.peer_macs.contains_key(name) {
                    problems.push(format!(
                        "bare mode needs the peer MAC behind {name} (--peer-mac {name}=MAC)"
                    ));
                }
            }
            if interfaces.len() % 2 != 0 {
                problems.push(format!(
                    "bare mode forwards between pairs of interfaces; {} given",
                    interfaces.len()
                ));
            }
            Some(macs)
        } else {
            None
        };
        let pipeline = self.pipeline.to_config(&mut problems);
        let control_socket = self
            .control_socket
            .clone()
            .unwrap_or_else(|| default_control_socket(netns));
        let punt_device = match self.punt_device.as_deref() {
            None => Some(DEFAULT_PUNT_DEVICE.to_owned()),
            Some("") => None,
            Some(name) if name.len() < 16 => Some(name.to_owned()),
            Some(name) => {
                problems.push(format!("punt_device {name:?} is longer than 15 bytes"));
                None
            }
        };
        let endpoints = crate::endpoint::validate(&self.endpoint, &mut problems);
        if bare.is_some() && !endpoints.is_empty() {
            problems.push("endpoints need the routing pipeline, not bare mode".to_owned());
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        Ok(Config {
            interfaces,
            queues,
            cpus: self.cpus.clone(),
            busy_poll: self.busy_poll.unwrap_or(false),
            zero_copy: self.zero_copy.unwrap_or(false),
            xdp_mode: self.xdp_mode.unwrap_or_default(),
            metrics,
            control_socket,
            punt_device,
            netfilter: self.netfilter.unwrap_or_default(),
            tc: self.tc.unwrap_or_default(),
            rings,
            bare,
            pipeline,
            endpoints,
        })
    }
}

/// What `xfwd run` does when something frames xfwd forwards would never see could change
/// them: nftables or iptables rules (`netfilter`, `forwarder::netfilter`), or tc on a served
/// interface (`tc`, `forwarder::tc`).
///
/// ```
/// use xfwd_config::{ConfigFile, BypassMode};
/// let file = ConfigFile::parse("interfaces = [\"eth0\"]\nnetfilter = \"bypass\"", "x.toml".as_ref()).unwrap();
/// let config = file.validate(None).unwrap();
/// assert_eq!(config.netfilter, BypassMode::Bypass);
/// assert_eq!(config.tc, BypassMode::Refuse);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BypassMode {
    /// Refuse to start, naming what would be bypassed (the default).
    #[default]
    Refuse,
    /// Start anyway: the rules (or tc) do not apply to the traffic xfwd forwards (they still
    /// apply to what it punts to the kernel and to local traffic).
    Bypass,
}

/// `/run/xfwd/xfwd.sock`, or `/run/xfwd/<netns>.sock` for an instance in a namespace.
pub fn default_control_socket(netns: Option<&str>) -> PathBuf {
    Path::new(DEFAULT_CONTROL_DIR).join(format!("{}.sock", netns.unwrap_or("xfwd")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn full_file_validates() {
        let file = parse(
            r#"
            interfaces = ["fwd0", "fwd1"]
            queues = 2
            cpus = [0, 1]
            metrics = "127.0.0.1:9587"
            punt_device = ""
            [rings]
            rx = 512
            frame_size = 4096
            [bare]
            enabled = true
            peer_macs = { fwd0 = "02:58:46:00:00:01", fwd1 = "02:58:46:00:00:04" }
            "#,
        )
        .unwrap();
        let config = file.validate(Some("lab-fwd")).unwrap();
        assert_eq!(config.queues, 2);
        assert_eq!(config.rings.rx, 512);
        assert_eq!(config.rings.tx, RingSizes::default().tx);
        assert_eq!(config.rings.frame_size, 4096);
        assert_eq!(config.punt_device, None);
        assert_eq!(config.control_socket, Path::new("/run/xfwd/lab-fwd.sock"));
        assert_eq!(config.bare.unwrap()["fwd1"], [2, 0x58, 0x46, 0, 0, 4]);
    }

    #[test]
    fn unknown_keys_and_bad_types_name_the_place() {
        let err = parse("interfaces = [\"a\"]\nqueus = 2\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("queus") && text.contains("test.toml"),
            "{text}"
        );
        let err = parse("queues = \"two\"").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn every_problem_is_reported() {
        let file = parse(
            r#"
            interfaces = ["fwd0", "fwd0", "a-name-far-too-long"]
            queues = 0
            metrics = "10.0.0.1"
            [rings]
            rx = 1000
            frame_size = 1500
            [bare]
            enabled = true
            peer_macs = { fwd0 = "zz", eth9 = "02:00:00:00:00:01" }
            "#,
        )
        .unwrap();
        let ConfigError::Invalid(problems) = file.validate(None).unwrap_err() else {
            panic!("expected Invalid");
        };
        for needle in [
            "listed twice",
            "not a valid Linux name",
            "queues = 0",
            "is not an address:port",
            "rings.rx = 1000",
            "frame_size = 1500",
            "\"zz\"",
            "eth9, which is not",
            "pairs of interfaces",
            "peer MAC behind a-name-far-too-long",
        ] {
            assert!(
                problems.iter().any(|p| p.contains(needle)),
                "missing {needle:?} in {problems:#?}"
            );
        }
    }

    #[test]
    fn pipeline_table_sets_the_dataplane_config() {
        let config = parse(
            r#"
            interfaces = ["fwd0"]
            [pipeline]
            route_cache = 1024
            route_cache_ways = 8
            icmp_rate = 10
            icmp_burst = 2
            hold_frames = 16
            hold_bytes_per_neighbour = 4096
            hold_timeout_ms = 500
            vlan = "route"
            max_extension_headers = 4
            policy_mark = 7
            "#,
        )
        .unwrap()
        .validate(None)
        .unwrap();
        let p = config.pipeline;
        let cache = p.dst_cache.unwrap();
        assert_eq!((cache.entries, cache.ways), (1024, 8));
        assert_eq!((p.icmp_rate, p.icmp_burst), (10, 2));
        assert_eq!((p.hold_frames, p.hold_bytes_per_neighbour), (16, 4096));
        assert_eq!(p.hold_timeout_ns, 500_000_000);
        assert_eq!(p.vlan, dataplane::VlanMode::Route);
        assert_eq!((p.max_extension_headers, p.policy_mark), (4, 7));

        let off = parse("interfaces = [\"fwd0\"]\n[pipeline]\nroute_cache = \"off\"\n")
            .unwrap()
            .validate(None)
            .unwrap();
        assert_eq!(off.pipeline.dst_cache, None);
        let defaults = parse("interfaces = [\"fwd0\"]")
            .unwrap()
            .validate(None)
            .unwrap();
        assert_eq!(defaults.pipeline, dataplane::Config::default());
    }

    #[test]
    fn pipeline_problems_are_reported_with_the_rest() {
        let ConfigError::Invalid(problems) = parse(
            r#"
            queues = 0
            [pipeline]
            route_cache = 1000
            hold_timeout_ms = 0
            "#,
        )
        .unwrap()
        .validate(None)
        .unwrap_err() else {
            panic!("expected Invalid");
        };
        for needle in ["queues = 0", "pipeline: dst-cache", "hold_timeout_ms = 0"] {
            assert!(
                problems.iter().any(|p| p.contains(needle)),
                "missing {needle:?} in {problems:#?}"
            );
        }
        for text in [
            "[pipeline]\nvlan = \"tagged\"",
            "[pipeline]\nroute_cache = \"on\"",
            "[pipeline]\nicmp = 3",
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("test.toml"), "{text}: {err}");
        }
        let problems = match parse(
            "interfaces = [\"a\"]\n[pipeline]\nroute_cache = \"off\"\nroute_cache_ways = 2",
        )
        .unwrap()
        .validate(None)
        {
            Err(ConfigError::Invalid(problems)) => problems,
            other => panic!("{other:?}"),
        };
        assert!(problems[0].contains("route_cache_ways"), "{problems:?}");
    }

    #[test]
    fn what_needs_a_restart_is_named() {
        let config = |text: &str| parse(text).unwrap().validate(None).unwrap();
        let running = config("interfaces = [\"a\", \"b\"]");
        let live = config(
            "interfaces = [\"a\", \"b\"]\n[pipeline]\nicmp_rate = 1\nvlan = \"punt\"\npolicy_mark = 3",
        );
        assert!(live.needs_restart(&running).is_empty());
        let fixed = config(
            "interfaces = [\"b\", \"a\"]\nbusy_poll = true\npunt_device = \"\"\n[rings]\nrx = 512\n[pipeline]\nroute_cache = \"off\"\nhold_timeout_ms = 1",
        );
        assert_eq!(
            fixed.needs_restart(&running),
            [
                "interfaces",
                "busy_poll",
                "punt_device",
                "rings",
                "pipeline.dst_cache",
                "pipeline.hold_timeout_ns"
            ]
        );
    }

    #[test]
    fn empty_file_needs_interfaces() {
        let err = parse("").unwrap().validate(None).unwrap_err().to_string();
        assert!(err.contains("no interfaces"), "{err}");
        let ok = ConfigFile {
            interfaces: Some(vec!["eth0".into()]),
            ..ConfigFile::default()
        }
        .validate(None)
        .unwrap();
        assert_eq!(ok.control_socket, Path::new("/run/xfwd/xfwd.sock"));
        assert_eq!(ok.punt_device.as_deref(), Some(DEFAULT_PUNT_DEVICE));
        assert_eq!(ok.bare, None);
    }
}
