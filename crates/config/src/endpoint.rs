//! The `[[endpoint]]` tables of the configuration file (in-dataplane UDP services: a STAMP /
//! TWAMP-light reflector, a UDP echo) and their validation.
//!
//! ```toml
//! [[endpoint]]
//! service = "stamp"            # RFC 8762 stateless reflector; answers TWAMP-light too
//! bind = "0.0.0.0:862"         # "[::]:862" takes IPv4 and IPv6
//! error_estimate_ns = 1000     # the timestamps' error estimate (default: the clock's resolution)
//! clock_synchronized = true    # the S bit: the clock is synchronised to UTC (default false)
//! ```
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use dataplane::endpoint::{ErrorEstimate, Service};
use serde::Deserialize;

/// One `[[endpoint]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EndpointFile {
    /// `stamp` or `echo`.
    pub service: String,
    /// The address and port to bind (`0.0.0.0:862`, `[::]:7`, a local address).
    pub bind: String,
    /// The error estimate of the reflector's timestamps, in nanoseconds.
    pub error_estimate_ns: Option<u64>,
    /// Whether the clock is synchronised to UTC (the error estimate's S bit).
    pub clock_synchronized: Option<bool>,
    /// `SO_REUSEADDR`: may share its port with other `reuseaddr` endpoints.
    pub reuseaddr: Option<bool>,
    /// `SO_REUSEPORT`: joins a group of endpoints on the same address and port.
    pub reuseport: Option<bool>,
}

/// A validated endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointSpec {
    /// What answers it.
    pub service: Service,
    /// Where it is bound.
    pub bind: SocketAddr,
    /// `SO_REUSEADDR` and `SO_REUSEPORT`.
    pub options: udp_socktab::SockOptions,
}

/// The resolution of `CLOCK_REALTIME` in nanoseconds, the default error estimate of the
/// reflector's timestamps (the operator knows the clock's real error: `error_estimate_ns`).
pub fn clock_resolution_ns() -> u64 {
    nix::time::clock_getres(nix::time::ClockId::CLOCK_REALTIME)
        .map(|t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(1)
        .max(1)
}

/// Checks the `[[endpoint]]` tables, adding every problem to `problems`.
///
/// ```
/// use xfwd_config::endpoint::{EndpointFile, validate};
/// let mut problems = Vec::new();
/// let ok = EndpointFile { service: "echo".into(), bind: "[::]:7".into(), ..Default::default() };
/// let bad = EndpointFile { service: "chargen".into(), bind: "nowhere".into(), ..Default::default() };
/// let specs = validate(&[ok, bad], &mut problems);
/// assert_eq!(specs.len(), 1);
/// assert_eq!(problems.len(), 2);
/// ```
pub fn validate(files: &[EndpointFile], problems: &mut Vec<String>) -> Vec<EndpointSpec> {
    let mut specs = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let bind = match f.bind.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                problems.push(format!(
                    "endpoint {i}: bind = {:?} is not an address:port",
                    f.bind
                ));
                None
            }
        };
        let service = match f.service.as_str() {
            "stamp" | "twamp-light" => {
                let ns = f.error_estimate_ns.unwrap_or_else(clock_resolution_ns);
                Some(Service::Stamp {
                    error: ErrorEstimate::from_nanos(ns, f.clock_synchronized.unwrap_or(false)),
                })
            }
            "echo" => {
                if f.error_estimate_ns.is_some() || f.clock_synchronized.is_some() {
                    problems.push(format!("endpoint {i}: echo takes no clock settings"));
                }
                Some(Service::Echo)
            }
            other => {
                problems.push(format!(
                    "endpoint {i}: service = {other:?}; must be \"stamp\" or \"echo\""
                ));
                None
            }
        };
        if let (Some(service), Some(bind)) = (service, bind) {
            if bind.port() == 0 {
                problems.push(format!("endpoint {i}: a service needs a fixed port"));
            } else {
                let options = udp_socktab::SockOptions {
                    reuseaddr: f.reuseaddr.unwrap_or(false),
                    reuseport: f.reuseport.unwrap_or(false),
                    ..udp_socktab::SockOptions::default()
                };
                specs.push(EndpointSpec {
                    service,
                    bind,
                    options,
                });
            }
        }
    }
    specs
}
