//! What a running instance reports: a [`Stats`] snapshot (served over the control socket and
//! as Prometheus text), and the rates between two snapshots that `xfwd stats` prints.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::counters::QueueSnapshot;
use crate::router::PipelineSnapshot;

/// Everything a running instance reports at one moment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Seconds since start.
    pub uptime_seconds: f64,
    /// `bare` or `router`.
    pub mode: String,
    /// The served interfaces.
    pub interfaces: Vec<String>,
    /// Which interfaces are up (same order).
    pub up: Vec<bool>,
    /// Per run loop.
    pub queues: Vec<QueueSnapshot>,
    /// The XDP program's counters, summed over CPUs.
    pub xdp: Vec<(String, u64)>,
    /// Addresses in the XDP program's local set.
    pub local_addresses: usize,
    /// The mirrored kernel state's generation, when a mirror runs.
    pub netlink_generation: Option<u64>,
    /// The routing pipeline's counters per queue (routing mode).
    #[serde(default)]
    pub pipeline: Vec<PipelineSnapshot>,
    /// The netlink mirror's counters (routing mode): applied, unchanged, swept, dumps,
    /// dump_restarts, resyncs, route_redumps, overruns, errors, resolve_*.
    #[serde(default)]
    pub mirror: Vec<(String, u64)>,
    /// Kernel routes the mirror cannot represent, each standing behind a "kernel decides"
    /// route whose packets go to the kernel, by kind (`encap`, `source-specific`,
    /// `route-type`, `route-attribute`, `gateway-family`, `nexthop-encap`, ...): a gauge.
    #[serde(default)]
    pub kernel_decides: Vec<(String, u64)>,
    /// In-dataplane UDP endpoints and their counters (routing mode).
    #[serde(default)]
    pub endpoints: Vec<crate::endpoints::EndpointSnapshot>,
}

impl Stats {
    /// Frames received by all loops.
    pub fn rx_packets(&self) -> u64 {
        self.queues.iter().map(QueueSnapshot::rx_packets).sum()
    }
    /// Frames sent by all loops.
    pub fn tx_packets(&self) -> u64 {
        self.queues.iter().map(QueueSnapshot::tx_packets).sum()
    }
    /// Frames dropped by all loops.
    pub fn dropped(&self) -> u64 {
        self.queues.iter().map(QueueSnapshot::dropped).sum()
    }
    /// Frames punted by all loops.
    pub fn punted(&self) -> u64 {
        self.queues.iter().map(|q| q.punted).sum()
    }
    /// The routing pipeline's counters of one group (`verdicts`, `drops`, `punts`,
    /// `icmp_sent`, `events`, `dst_cache`) summed over queues.
    pub fn pipeline_sum(&self, group: &str) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for q in &self.pipeline {
            let pairs = match group {
                "verdicts" => &q.verdicts,
                "drops" => &q.drops,
                "punts" => &q.punts,
                "icmp_sent" => &q.icmp_sent,
                "events" => &q.events,
                _ => &q.dst_cache,
            };
            for (name, n) in pairs {
                match out.iter_mut().find(|(k, _)| k == name) {
                    Some((_, total)) => *total += n,
                    None => out.push((name.clone(), *n)),
                }
            }
        }
        out
    }

    /// Drops summed over queues by reason.
    pub fn drops_by_reason(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for (name, n) in self.queues.iter().flat_map(|q| &q.drops) {
            match out.iter_mut().find(|(k, _)| k == name) {
                Some((_, total)) => *total += n,
                None => out.push((name.clone(), *n)),
            }
        }
        out
    }

    /// Human-readable table; with `previous`, packet rates since it.
    pub fn render(&self, previous: Option<&Stats>) -> String {
        let mut out = String::new();
        let dt = previous.map(|p| self.uptime_seconds - p.uptime_seconds);
        let _ = writeln!(
            out,
            "xfwd ({}) up {:.1} s, {} queue(s), {} local address(es){}",
            self.mode,
            self.uptime_seconds,
            self.queues.len(),
            self.local_addresses,
            self.netlink_generation
                .map_or(String::new(), |g| format!(", netlink generation {g}"))
        );
        let _ = writeln!(
            out,
            "{:<6} {:<12} {:>4} {:>14} {:>14} {:>12} {:>12}",
            "queue", "iface", "up", "rx pkts", "tx pkts", "rx pps", "tx pps"
        );
        for q in &self.queues {
            for (i, p) in q.ports.iter().enumerate() {
                let prev = previous
                    .and_then(|s| s.queues.iter().find(|x| x.queue == q.queue))
                    .and_then(|x| x.ports.get(i));
                let rate = |now: u64, before: Option<u64>| match (dt, before) {
                    (Some(dt), Some(b)) if dt > 0.0 => {
                        format!("{:.0}", (now - b.min(now)) as f64 / dt)
                    }
                    _ => "-".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "{:<6} {:<12} {:>4} {:>14} {:>14} {:>12} {:>12}",
                    q.queue,
                    p.iface,
                    if self.up.get(i).copied().unwrap_or(false) {
                        "yes"
                    } else {
                        "no"
                    },
                    p.rx_packets,
                    p.tx_packets,
                    rate(p.rx_packets, prev.map(|p| p.rx_packets)),
                    rate(p.tx_packets, prev.map(|p| p.tx_packets)),
                );
            }
        }
        let _ = writeln!(
            out,
            "total: rx {} tx {} punted {} dropped {}",
            self.rx_packets(),
            self.tx_packets(),
            self.punted(),
            self.dropped()
        );
        for (reason, n) in self.drops_by_reason() {
            let _ = writeln!(out, "  drop {reason}: {n}");
        }
        let join = |pairs: &[(String, u64)], all: bool| -> String {
            let text: Vec<String> = pairs
                .iter()
                .filter(|(_, n)| all || *n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            if text.is_empty() {
                "-".to_owned()
            } else {
                text.join(", ")
            }
        };
        if !self.pipeline.is_empty() {
            for group in [
                "verdicts",
                "drops",
                "punts",
                "icmp_sent",
                "events",
                "dst_cache",
            ] {
                let _ = writeln!(
                    out,
                    "pipeline {group}: {}",
                    join(&self.pipeline_sum(group), group == "verdicts")
                );
            }
        }
        if !self.mirror.is_empty() {
            let _ = writeln!(out, "mirror: {}", join(&self.mirror, false));
        }
        if !self.kernel_decides.is_empty() {
            let _ = writeln!(
                out,
                "kernel decides (routes not mirrored): {}",
                join(&self.kernel_decides, false)
            );
        }
        for e in &self.endpoints {
            let _ = writeln!(
                out,
                "endpoint {} {}: received {}, sent {}, rx dropped {}{}",
                e.service,
                e.local,
                e.received,
                e.sent,
                e.rx_dropped,
                if e.send_errors.is_empty() {
                    String::new()
                } else {
                    format!(", not sent: {}", join(&e.send_errors, false))
                }
            );
        }
        let xdp: Vec<String> = self
            .xdp
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "xdp: {}",
            if xdp.is_empty() {
                "-".to_owned()
            } else {
                xdp.join(", ")
            }
        );
        out
    }

    /// Prometheus text exposition (format 0.0.4).
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP xfwd_{name} {help}\n# TYPE xfwd_{name} {kind}");
            format!("xfwd_{name}")
        };
        let mut lines: Vec<String> = Vec::new();
        let name = family("uptime_seconds", "gauge", "Seconds since xfwd started.");
        lines.push(format!("{name} {}", self.uptime_seconds));
        let mut per_port =
            |metric: &str, help: &str, get: &dyn Fn(&crate::counters::PortSnapshot) -> u64| {
                let name = family(metric, "counter", help);
                for q in &self.queues {
                    for p in &q.ports {
                        lines.push(format!(
                            "{name}{{queue=\"{}\",iface=\"{}\"}} {}",
                            q.queue,
                            p.iface,
                            get(p)
                        ));
                    }
                }
            };
        per_port(
            "rx_packets_total",
            "Frames received from AF_XDP sockets.",
            &|p| p.rx_packets,
        );
        per_port(
            "rx_bytes_total",
            "Bytes received from AF_XDP sockets.",
            &|p| p.rx_bytes,
        );
        per_port("tx_packets_total", "Frames put on TX rings.", &|p| {
            p.tx_packets
        });
        per_port("tx_bytes_total", "Bytes put on TX rings.", &|p| p.tx_bytes);
        per_port("tx_wakeups_total", "sendto(2) kicks of TX rings.", &|p| {
            p.tx_wakeups
        });
        per_port("xdp_rx_dropped_total", "XDP_STATISTICS rx_dropped.", &|p| {
            p.xdp_rx_dropped
        });
        per_port(
            "xdp_rx_ring_full_total",
            "XDP_STATISTICS rx_ring_full.",
            &|p| p.xdp_rx_ring_full,
        );
        per_port(
            "xdp_rx_fill_ring_empty_total",
            "XDP_STATISTICS rx_fill_ring_empty_descs.",
            &|p| p.xdp_rx_fill_ring_empty,
        );
        per_port(
            "xdp_rx_invalid_descs_total",
            "XDP_STATISTICS rx_invalid_descs.",
            &|p| p.xdp_rx_invalid_descs,
        );
        per_port(
            "xdp_tx_invalid_descs_total",
            "XDP_STATISTICS tx_invalid_descs.",
            &|p| p.xdp_tx_invalid_descs,
        );
        per_port(
            "xdp_tx_ring_empty_total",
            "XDP_STATISTICS tx_ring_empty_descs.",
            &|p| p.xdp_tx_ring_empty,
        );
        let name = family(
            "drops_total",
            "counter",
            "Frames dropped, by queue and reason.",
        );
        for q in &self.queues {
            for (reason, n) in &q.drops {
                lines.push(format!(
                    "{name}{{queue=\"{}\",reason=\"{reason}\"}} {n}",
                    q.queue
                ));
            }
        }
        let name = family(
            "punted_total",
            "counter",
            "Frames handed to the kernel through the punt device.",
        );
        for q in &self.queues {
            lines.push(format!("{name}{{queue=\"{}\"}} {}", q.queue, q.punted));
        }
        let name = family(
            "batches_total",
            "counter",
            "Batches processed (one epoch pin each).",
        );
        for q in &self.queues {
            lines.push(format!("{name}{{queue=\"{}\"}} {}", q.queue, q.batches));
        }
        let name = family(
            "epoch_pin_age_seconds",
            "gauge",
            "How long the queue's current batch has held the epoch pinned (epoch lag).",
        );
        for q in &self.queues {
            lines.push(format!(
                "{name}{{queue=\"{}\"}} {}",
                q.queue, q.epoch_pin_age_seconds
            ));
        }
        let name = family(
            "xdp_program_total",
            "counter",
            "Verdicts of the XDP program, by kind.",
        );
        for (kind, n) in &self.xdp {
            lines.push(format!("{name}{{kind=\"{kind}\"}} {n}"));
        }
        let name = family(
            "local_addresses",
            "gauge",
            "Addresses the XDP program passes to the kernel.",
        );
        lines.push(format!("{name} {}", self.local_addresses));
        let name = family(
            "interface_up",
            "gauge",
            "1 when the interface is up with carrier.",
        );
        for (iface, up) in self.interfaces.iter().zip(&self.up) {
            lines.push(format!("{name}{{iface=\"{iface}\"}} {}", u8::from(*up)));
        }
        if let Some(generation) = self.netlink_generation {
            let name = family(
                "netlink_generation",
                "gauge",
                "Changes applied from the kernel's tables.",
            );
            lines.push(format!("{name} {generation}"));
        }
        if !self.pipeline.is_empty() {
            for (group, metric, label, help) in [
                (
                    "verdicts",
                    "pipeline_frames_total",
                    "verdict",
                    "Frames of the routing pipeline by verdict (rx: all).",
                ),
                (
                    "drops",
                    "pipeline_drops_total",
                    "reason",
                    "Frames the routing pipeline dropped, by reason.",
                ),
                (
                    "punts",
                    "pipeline_punts_total",
                    "reason",
                    "Frames the routing pipeline punted, by reason.",
                ),
                (
                    "icmp_sent",
                    "pipeline_icmp_sent_total",
                    "kind",
                    "ICMP errors sent, by kind.",
                ),
                (
                    "events",
                    "pipeline_events_total",
                    "event",
                    "Routing pipeline events (hold buffer, fragments, ICMP suppressed, resolutions).",
                ),
                (
                    "dst_cache",
                    "dst_cache_total",
                    "result",
                    "Route cache lookups by result (hits, misses, ...).",
                ),
            ] {
                let name = family(metric, "counter", help);
                for q in &self.pipeline {
                    let pairs = match group {
                        "verdicts" => &q.verdicts,
                        "drops" => &q.drops,
                        "punts" => &q.punts,
                        "icmp_sent" => &q.icmp_sent,
                        "events" => &q.events,
                        _ => &q.dst_cache,
                    };
                    for (key, n) in pairs {
                        lines.push(format!(
                            "{name}{{queue=\"{}\",{label}=\"{key}\"}} {n}",
                            q.queue
                        ));
                    }
                }
            }
        }
        if !self.mirror.is_empty() {
            let name = family(
                "netlink_mirror_total",
                "counter",
                "Netlink mirror counters (applied, resyncs, overruns, resolutions, ...).",
            );
            for (key, n) in &self.mirror {
                lines.push(format!("{name}{{counter=\"{key}\"}} {n}"));
            }
        }
        if !self.kernel_decides.is_empty() {
            let name = family(
                "netlink_mirror_kernel_decides",
                "gauge",
                "Kernel routes the mirror cannot represent, handed to the kernel, by kind.",
            );
            for (kind, n) in &self.kernel_decides {
                lines.push(format!("{name}{{kind=\"{kind}\"}} {n}"));
            }
        }
        if !self.endpoints.is_empty() {
            let name = family(
                "endpoint_datagrams_total",
                "counter",
                "Datagrams of in-dataplane UDP endpoints: received, sent, rx_dropped, not sent by cause.",
            );
            for e in &self.endpoints {
                let labels = format!("service=\"{}\",local=\"{}\"", e.service, e.local);
                for (what, n) in [
                    ("received", e.received),
                    ("sent", e.sent),
                    ("rx_dropped", e.rx_dropped),
                ] {
                    lines.push(format!("{name}{{{labels},counter=\"{what}\"}} {n}"));
                }
                for (cause, n) in &e.send_errors {
                    lines.push(format!(
                        "{name}{{{labels},counter=\"not_sent_{cause}\"}} {n}"
                    ));
                }
            }
        }
        // Families first (HELP/TYPE), then samples grouped: Prometheus accepts samples of a
        // family only after its TYPE line, so interleave by family prefix.
        let mut text = String::new();
        for block in out.split("# HELP ").filter(|b| !b.is_empty()) {
            let metric = block.split_whitespace().next().unwrap_or_default();
            text.push_str("# HELP ");
            text.push_str(block);
            for line in &lines {
                let sample = line.split(['{', ' ']).next().unwrap_or_default();
                if sample == metric {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::PortSnapshot;

    fn sample(rx: u64) -> Stats {
        Stats {
            uptime_seconds: rx as f64 / 100.0,
            mode: "bare".into(),
            interfaces: vec!["fwd0".into(), "fwd1".into()],
            up: vec![true, false],
            queues: vec![QueueSnapshot {
                queue: 0,
                ports: vec![
                    PortSnapshot {
                        iface: "fwd0".into(),
                        rx_packets: rx,
                        ..Default::default()
                    },
                    PortSnapshot {
                        iface: "fwd1".into(),
                        tx_packets: rx / 2,
                        ..Default::default()
                    },
                ],
                drops: vec![("runt".into(), 3)],
                ..Default::default()
            }],
            xdp: vec![("redirect".into(), rx), ("pass_arp".into(), 0)],
            local_addresses: 4,
            netlink_generation: None,
            ..Stats::default()
        }
    }

    #[test]
    fn renders_rates_and_drops() {
        let before = sample(100);
        let after = sample(300);
        let text = after.render(Some(&before));
        assert!(text.contains("fwd0"), "{text}");
        // 200 frames in 2 seconds.
        assert!(text.contains(" 100 "), "{text}");
        assert!(text.contains("drop runt: 3"), "{text}");
        assert!(
            text.contains("redirect 300") && !text.contains("pass_arp"),
            "{text}"
        );
    }

    #[test]
    fn prometheus_groups_samples_under_their_family() {
        let text = sample(10).prometheus();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap().to_owned();
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "sample outside its family: {line}");
            }
        }
        assert!(text.contains("xfwd_rx_packets_total{queue=\"0\",iface=\"fwd0\"} 10"));
        assert!(text.contains("xfwd_drops_total{queue=\"0\",reason=\"runt\"} 3"));
        assert!(text.contains("xfwd_interface_up{iface=\"fwd1\"} 0"));
        assert!(!text.contains("netlink_generation"));
    }

    #[test]
    fn kernel_decides_is_a_gauge_by_kind_and_printed() {
        let mut s = sample(10);
        s.kernel_decides = vec![("encap".into(), 2), ("source-specific".into(), 1)];
        let text = s.prometheus();
        assert!(
            text.contains("# TYPE xfwd_netlink_mirror_kernel_decides gauge"),
            "{text}"
        );
        assert!(
            text.contains("xfwd_netlink_mirror_kernel_decides{kind=\"encap\"} 2"),
            "{text}"
        );
        let shown = s.render(None);
        assert!(shown.contains("kernel decides"), "{shown}");
        assert!(shown.contains("encap 2"), "{shown}");
    }
}
