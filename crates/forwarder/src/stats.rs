//! What a running instance reports: a [`Stats`] snapshot (served over the control socket and,
//! through [`metrics`](crate::metrics), as Prometheus text), and the rates between two
//! snapshots that `xfwd stats` prints.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::board::PipelineSnapshot;
use crate::counters::QueueSnapshot;

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
    /// Why every frame goes to the kernel now: netfilter rules or tc that xfwd may not
    /// bypass, found after start ([`crate::bypass_watch`]); empty while xfwd forwards.
    #[serde(default)]
    pub diverted: Vec<String>,
    /// Where the process's memory is, in bytes ([`crate::trim::memory`]): `heap_allocated`,
    /// `heap_active`, `heap_resident`, `heap_retained` (jemalloc's counts), `fast_arenas`.
    #[serde(default)]
    pub memory: Vec<(String, u64)>,
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
    /// Frames dropped: by the engines (their `dropped` verdicts) and by the loops (verdicts
    /// they could not carry out); each frame is in one of the two at most.
    pub fn dropped(&self) -> u64 {
        let engines: u64 = self.pipeline.iter().map(|p| p.verdict("dropped")).sum();
        engines + self.queues.iter().map(QueueSnapshot::dropped).sum::<u64>()
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

    /// The loops' drops (verdicts they could not carry out) summed over queues by reason,
    /// the reasons with a count only.
    pub fn drops_by_reason(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for (name, n) in self
            .queues
            .iter()
            .flat_map(|q| &q.drops)
            .filter(|(_, n)| *n > 0)
        {
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
        if !self.diverted.is_empty() {
            let _ = writeln!(
                out,
                "DIVERTED: every frame goes to the kernel while these act on forwarded traffic:"
            );
            for reason in &self.diverted {
                let _ = writeln!(out, "  {reason}");
            }
        }
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
            let _ = writeln!(out, "  not carried out, {reason}: {n}");
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
                "kernel decides (routes and rules not mirrored): {}",
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
                if e.send_errors.iter().all(|(_, n)| *n == 0) {
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
        assert!(text.contains("not carried out, runt: 3"), "{text}");
        assert!(
            text.contains("redirect 300") && !text.contains("pass_arp"),
            "{text}"
        );
    }

    #[test]
    fn kernel_decides_is_a_gauge_by_kind_and_printed() {
        let mut s = sample(10);
        s.kernel_decides = vec![("encap".into(), 2), ("source-specific".into(), 1)];
        s.netlink_generation = Some(1);
        let text = crate::metrics::exposition(&s);
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
