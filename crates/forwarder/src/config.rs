//! The forwarder's configuration: a TOML file, overridden by command-line flags, validated as
//! a whole (every problem reported at once).
//!
//! ```toml
//! interfaces = ["fwd0", "fwd1"]
//! queues = 1
//! cpus = [1]                 # one per queue; default: the q-th CPU of the affinity mask (round robin)
//! busy_poll = false
//! zero_copy = false          # veth has no zero-copy
//! xdp_mode = "native"        # or "generic"
//! metrics = "127.0.0.1:9587" # Prometheus text, loopback only
//! control_socket = "/run/xfwd/xfwd.sock"
//! punt_device = "xfwd-punt"  # "" turns the punt path off
//!
//! [rings]
//! rx = 1024
//! tx = 1024
//! frame_size = 2048
//!
//! [bare]                     # port forwarding without lookups (xfwd run --bare)
//! enabled = true
//! peer_macs = { fwd0 = "02:58:46:00:00:01", fwd1 = "02:58:46:00:00:04" }
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::punt::{DEFAULT_PUNT_DEVICE, parse_mac};
use crate::runloop::RingSizes;
use crate::xdp::{MAX_PORTS, QUEUES_PER_PORT};

/// Where the control socket lives by default (`/run/xfwd/<netns>.sock` with `--netns`).
pub const DEFAULT_CONTROL_DIR: &str = "/run/xfwd";

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

/// The bare processor's section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BareFile {
    /// Use the bare processor.
    #[serde(default)]
    pub enabled: bool,
    /// Per egress interface, the MAC written as destination.
    #[serde(default)]
    pub peer_macs: BTreeMap<String, String>,
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
    /// Rings.
    #[serde(default)]
    pub rings: RingsFile,
    /// Bare mode.
    #[serde(default)]
    pub bare: BareFile,
    /// In-dataplane UDP endpoints (`[[endpoint]]`: a STAMP reflector, an echo).
    #[serde(default)]
    pub endpoint: Vec<crate::endpoints::EndpointFile>,
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
    /// robin; see [`crate::app::default_cpu`]).
    pub cpus: Option<Vec<usize>>,
    /// Busy polling.
    pub busy_poll: bool,
    /// Zero-copy.
    pub zero_copy: bool,
    /// XDP mode.
    pub xdp_mode: XdpMode,
    /// Metrics listener (loopback).
    pub metrics: Option<SocketAddr>,
    /// Control socket.
    pub control_socket: PathBuf,
    /// Punt device.
    pub punt_device: Option<String>,
    /// Rings.
    pub rings: RingSizes,
    /// Bare mode: peer MAC per interface; None = the routing pipeline.
    pub bare: Option<BTreeMap<String, [u8; 6]>>,
    /// In-dataplane UDP endpoints (routing mode).
    pub endpoints: Vec<crate::endpoints::EndpointSpec>,
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
                Ok(addr) if addr.ip().is_loopback() => Some(addr),
                Ok(addr) => {
                    problems.push(format!(
                        "metrics = {addr}: only loopback addresses are served (127.0.0.1:PORT or [::1]:PORT)"
                    ));
                    None
                }
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
        let endpoints = crate::endpoints::validate(&self.endpoint, &mut problems);
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
            rings,
            bare,
            endpoints,
        })
    }
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
            metrics = "10.0.0.1:80"
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
            "only loopback",
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
