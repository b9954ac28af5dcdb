//! The Prometheus exposition of a [`Stats`] snapshot, through the `prometheus` crate (text
//! format 0.0.4, checked with `promtool check metrics`).
//!
//! Rules the families keep:
//! - every family is present from the first scrape, every reason with its zero, so `rate()`
//!   sees a series before its first increment (families of the routing engine's control plane,
//!   `xfwd_netlink_*`, only in routing mode);
//! - each frame is counted in one family: the engine's decision is in exactly one of
//!   `xfwd_pipeline_frames_total{verdict}` (transmit, deliver, reply, held, consumed),
//!   `xfwd_pipeline_drops_total{reason}` and `xfwd_pipeline_punts_total{reason}`, whose sum is
//!   the frames the engine saw; what happened after the decision has families of its own
//!   (`xfwd_loop_drops_total{reason}`: a verdict the run loop could not carry out;
//!   `xfwd_punted_total`: frames written to the punt device);
//! - counters are monotonic and end in `_total`; gauges are values that go up and down;
//! - `xfwd_build_info{version,mode}` is 1, and the `process_*` families (CPU, memory, file
//!   descriptors, threads, start time) come from the crate's process collector.
#![forbid(unsafe_code)]

use prometheus::core::Collector;
use prometheus::{Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::counters::{PortSnapshot, QueueSnapshot};
use crate::stats::Stats;

/// The content type of [`exposition`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The verdicts `xfwd_pipeline_frames_total` counts: every verdict but drops and punts, which
/// have their own families by reason.
const FRAME_VERDICTS: [&str; 5] = ["transmit", "deliver", "reply", "held", "consumed"];

/// A per-port counter family: name, help, and the value it reads from a port's snapshot.
type PortFamily = (&'static str, &'static str, fn(&PortSnapshot) -> u64);

/// A per-queue counter family: name, help, and the value it reads from a queue's snapshot.
type QueueFamily = (&'static str, &'static str, fn(&QueueSnapshot) -> u64);

/// Collects the families of one scrape.
struct Families {
    registry: Registry,
}

impl Families {
    fn register<C: Collector + Clone + 'static>(&self, collector: &C) {
        // Names are fixed and distinct: a registration error would be a bug caught by the
        // tests; the scrape goes on without the family rather than failing.
        let _ = self.registry.register(Box::new(collector.clone()));
    }

    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        let family = IntCounterVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|_| unreachable_family(name));
        self.register(&family);
        family
    }

    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        let family = GaugeVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|_| unreachable_family(name));
        self.register(&family);
        family
    }

    fn int_gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        let family = IntGaugeVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|_| unreachable_family(name));
        self.register(&family);
        family
    }
}

/// The names and labels passed above are constants that the tests exercise.
fn unreachable_family(name: &str) -> ! {
    panic!("metric family {name} has an invalid name or label (a bug)")
}

/// The Prometheus text of `stats` (and of this process).
///
/// ```
/// let stats = forwarder::stats::Stats { mode: "bare".into(), ..Default::default() };
/// let text = forwarder::metrics::exposition(&stats);
/// assert!(text.contains("xfwd_build_info{mode=\"bare\""));
/// assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
/// ```
pub fn exposition(stats: &Stats) -> String {
    let families = Families {
        registry: Registry::new(),
    };
    let f = &families;
    f.gauge(
        "xfwd_build_info",
        "xfwd's version and engine; always 1.",
        &["version", "mode"],
    )
    .with_label_values(&[env!("CARGO_PKG_VERSION"), stats.mode.as_str()])
    .set(1.0);
    f.gauge("xfwd_uptime_seconds", "Seconds since xfwd started.", &[])
        .with_label_values::<&str>(&[])
        .set(stats.uptime_seconds);

    let port_families: [PortFamily; 12] = [
        (
            "xfwd_rx_packets_total",
            "Frames received from AF_XDP sockets.",
            |p| p.rx_packets,
        ),
        (
            "xfwd_rx_bytes_total",
            "Bytes received from AF_XDP sockets.",
            |p| p.rx_bytes,
        ),
        ("xfwd_tx_packets_total", "Frames put on TX rings.", |p| {
            p.tx_packets
        }),
        ("xfwd_tx_bytes_total", "Bytes put on TX rings.", |p| {
            p.tx_bytes
        }),
        (
            "xfwd_tx_wakeups_total",
            "sendto(2) kicks of TX rings.",
            |p| p.tx_wakeups,
        ),
        (
            "xfwd_fill_wakeups_total",
            "poll(2) wakeups of fill rings.",
            |p| p.fill_wakeups,
        ),
        (
            "xfwd_xdp_rx_dropped_total",
            "XDP_STATISTICS rx_dropped.",
            |p| p.xdp_rx_dropped,
        ),
        (
            "xfwd_xdp_rx_ring_full_total",
            "XDP_STATISTICS rx_ring_full.",
            |p| p.xdp_rx_ring_full,
        ),
        (
            "xfwd_xdp_rx_fill_ring_empty_total",
            "XDP_STATISTICS rx_fill_ring_empty_descs.",
            |p| p.xdp_rx_fill_ring_empty,
        ),
        (
            "xfwd_xdp_rx_invalid_descs_total",
            "XDP_STATISTICS rx_invalid_descs.",
            |p| p.xdp_rx_invalid_descs,
        ),
        (
            "xfwd_xdp_tx_invalid_descs_total",
            "XDP_STATISTICS tx_invalid_descs.",
            |p| p.xdp_tx_invalid_descs,
        ),
        (
            "xfwd_xdp_tx_ring_empty_total",
            "XDP_STATISTICS tx_ring_empty_descs.",
            |p| p.xdp_tx_ring_empty,
        ),
    ];
    for (name, help, get) in port_families {
        let family = f.counter(name, help, &["queue", "iface"]);
        for q in &stats.queues {
            let queue = q.queue.to_string();
            for p in &q.ports {
                family
                    .with_label_values(&[queue.as_str(), p.iface.as_str()])
                    .inc_by(get(p));
            }
        }
    }

    let loop_drops = f.counter(
        "xfwd_loop_drops_total",
        "Frames whose verdict the run loop could not carry out (the engine counted the verdict), by reason.",
        &["queue", "reason"],
    );
    let per_queue: [QueueFamily; 5] = [
        (
            "xfwd_punted_total",
            "Frames written to the punt device.",
            |q| q.punted,
        ),
        (
            "xfwd_spare_sent_total",
            "Spare frames the engine sent (ICMP copies, fragments, released held packets).",
            |q| q.spare_sent,
        ),
        (
            "xfwd_shifted_total",
            "Forwarded frames moved back to their descriptor's data start.",
            |q| q.shifted,
        ),
        (
            "xfwd_batches_total",
            "Batches processed (one epoch pin each).",
            |q| q.batches,
        ),
        (
            "xfwd_idle_polls_total",
            "Times a run loop slept in poll(2).",
            |q| q.idle_polls,
        ),
    ];
    let per_queue: Vec<_> = per_queue
        .into_iter()
        .map(|(name, help, get)| (f.counter(name, help, &["queue"]), get))
        .collect();
    let pin_age = f.gauge(
        "xfwd_epoch_pin_age_seconds",
        "How long the queue's current batch has held the epoch pinned (epoch lag).",
        &["queue"],
    );
    for q in &stats.queues {
        let queue = q.queue.to_string();
        for (reason, n) in &q.drops {
            loop_drops
                .with_label_values(&[queue.as_str(), reason.as_str()])
                .inc_by(*n);
        }
        for (family, get) in &per_queue {
            family.with_label_values(&[queue.as_str()]).inc_by(get(q));
        }
        pin_age
            .with_label_values(&[queue.as_str()])
            .set(q.epoch_pin_age_seconds);
    }

    let xdp = f.counter(
        "xfwd_xdp_program_total",
        "Verdicts of the XDP program, by kind.",
        &["kind"],
    );
    for (kind, n) in &stats.xdp {
        xdp.with_label_values(&[kind.as_str()]).inc_by(*n);
    }
    f.int_gauge(
        "xfwd_local_addresses",
        "Addresses the XDP program passes to the kernel.",
        &[],
    )
    .with_label_values::<&str>(&[])
    .set(i64::try_from(stats.local_addresses).unwrap_or(i64::MAX));
    f.int_gauge(
        "xfwd_diverted_to_kernel",
        "1 while every frame goes to the kernel because netfilter rules or tc xfwd may not \
         bypass appeared after start (xfwd stats names them).",
        &[],
    )
    .with_label_values::<&str>(&[])
    .set(i64::from(!stats.diverted.is_empty()));
    // `xfwd stats`' memory block (routing mode); resident memory is the process collector's
    // `process_resident_memory_bytes`.
    let memory = f.int_gauge(
        "xfwd_memory_bytes",
        "Where the process's memory is, in bytes, by part: heap_allocated (what xfwd holds \
         from its allocator, jemalloc), heap_active (the pages those allocations are in), \
         heap_resident (at most this much of the allocator's memory is resident: active \
         pages, freed pages not yet returned, metadata), heap_retained (address space kept \
         for reuse, returned to the kernel), fast_arenas (the FIBs' fast lookup structures, \
         mapped apart from the allocator). Resident memory is process_resident_memory_bytes.",
        &["part"],
    );
    for (part, bytes) in &stats.memory {
        memory
            .with_label_values(&[part.as_str()])
            .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
    }
    let up = f.int_gauge(
        "xfwd_interface_up",
        "1 when the interface is up with carrier.",
        &["iface"],
    );
    for (iface, is_up) in stats.interfaces.iter().zip(&stats.up) {
        up.with_label_values(&[iface.as_str()])
            .set(i64::from(*is_up));
    }

    pipeline(f, stats);
    if stats.netlink_generation.is_some() {
        mirror(f, stats);
    }
    endpoints(f, stats);

    let _ = families.registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ));
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for families built above.
    let _ = TextEncoder::new().encode(&families.registry.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The engines' counters: each frame in one of frames / drops / punts.
fn pipeline(f: &Families, stats: &Stats) {
    let frames = f.counter(
        "xfwd_pipeline_frames_total",
        "Frames the engine decided, by verdict (drops and punts are in their own families).",
        &["queue", "verdict"],
    );
    let groups = [
        (
            "drops",
            f.counter(
                "xfwd_pipeline_drops_total",
                "Frames the engine dropped, by reason.",
                &["queue", "reason"],
            ),
        ),
        (
            "punts",
            f.counter(
                "xfwd_pipeline_punts_total",
                "Frames the engine handed to the kernel, by reason.",
                &["queue", "reason"],
            ),
        ),
        (
            "icmp_sent",
            f.counter(
                "xfwd_pipeline_icmp_sent_total",
                "ICMP errors the routing pipeline sent, by kind.",
                &["queue", "kind"],
            ),
        ),
        (
            "events",
            f.counter(
                "xfwd_pipeline_events_total",
                "Routing pipeline events (hold buffer, fragments, ICMP not sent, resolutions).",
                &["queue", "event"],
            ),
        ),
        (
            "dst_cache",
            f.counter(
                "xfwd_dst_cache_total",
                "Route cache lookups by result (hits, misses, ...).",
                &["queue", "result"],
            ),
        ),
    ];
    for p in &stats.pipeline {
        let queue = p.queue.to_string();
        for verdict in FRAME_VERDICTS {
            frames
                .with_label_values(&[queue.as_str(), verdict])
                .inc_by(p.verdict(verdict));
        }
        for (group, family) in &groups {
            let pairs = match *group {
                "drops" => &p.drops,
                "punts" => &p.punts,
                "icmp_sent" => &p.icmp_sent,
                "events" => &p.events,
                _ => &p.dst_cache,
            };
            for (key, n) in pairs {
                family
                    .with_label_values(&[queue.as_str(), key.as_str()])
                    .inc_by(*n);
            }
        }
    }
}

/// The routing engine's control plane: the netlink mirror.
fn mirror(f: &Families, stats: &Stats) {
    f.counter(
        "xfwd_netlink_changes_total",
        "Changes applied from the kernel's tables (the mirror's generation).",
        &[],
    )
    .with_label_values::<&str>(&[])
    .inc_by(stats.netlink_generation.unwrap_or(0));
    let counters = f.counter(
        "xfwd_netlink_mirror_total",
        "Netlink mirror counters (applied, resyncs, overruns, resolutions, ...).",
        &["counter"],
    );
    for (key, n) in &stats.mirror {
        counters.with_label_values(&[key.as_str()]).inc_by(*n);
    }
    let kinds = f.int_gauge(
        "xfwd_netlink_mirror_kernel_decides",
        "Kernel routes, nexthop objects and rules the mirror cannot represent, handed to the kernel, by kind.",
        &["kind"],
    );
    for (kind, n) in &stats.kernel_decides {
        kinds
            .with_label_values(&[kind.as_str()])
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
}

/// The in-dataplane UDP endpoints (routing mode): per endpoint (`service`, `local`) what it
/// received, sent and dropped at receive, and what it could not send by cause (every cause
/// with its zero).
fn endpoints(f: &Families, stats: &Stats) {
    if stats.endpoints.is_empty() {
        return;
    }
    let labels = ["service", "local"];
    let received = f.counter(
        "xfwd_endpoint_received_total",
        "Datagrams delivered to an in-dataplane UDP endpoint.",
        &labels,
    );
    let sent = f.counter(
        "xfwd_endpoint_sent_total",
        "Datagrams an in-dataplane UDP endpoint sent (a service's answers, a socket's sends).",
        &labels,
    );
    let rx_dropped = f.counter(
        "xfwd_endpoint_rx_dropped_total",
        "Datagrams an endpoint dropped at receive (queue full, too large, malformed test packet).",
        &labels,
    );
    let not_sent = f.counter(
        "xfwd_endpoint_not_sent_total",
        "Datagrams an endpoint could not send, by cause.",
        &["service", "local", "cause"],
    );
    for e in &stats.endpoints {
        let l = [e.service.as_str(), e.local.as_str()];
        received.with_label_values(&l).inc_by(e.received);
        sent.with_label_values(&l).inc_by(e.sent);
        rx_dropped.with_label_values(&l).inc_by(e.rx_dropped);
        for (cause, n) in &e.send_errors {
            not_sent
                .with_label_values(&[l[0], l[1], cause.as_str()])
                .inc_by(*n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::PipelineSnapshot;
    use dataplane::{Counters, DropReason, PuntReason, Verdict};

    /// A routing instance's snapshot: one queue, two ports, counters of a few frames.
    fn router() -> Stats {
        let mut c = Counters::default();
        for verdict in [
            Verdict::Transmit { ifindex: 2 },
            Verdict::Transmit { ifindex: 2 },
            Verdict::Drop(DropReason::Blackhole),
            Verdict::Punt(PuntReason::Arp),
            Verdict::Held,
        ] {
            c.count(verdict);
        }
        Stats {
            uptime_seconds: 1.5,
            mode: "router".into(),
            interfaces: vec!["fwd0".into(), "fwd1".into()],
            up: vec![true, false],
            queues: vec![QueueSnapshot {
                queue: 0,
                ports: ["fwd0", "fwd1"]
                    .iter()
                    .map(|iface| PortSnapshot {
                        iface: (*iface).into(),
                        rx_packets: 5,
                        ..Default::default()
                    })
                    .collect(),
                drops: vec![("tx_ring_full".into(), 0), ("egress_down".into(), 1)],
                punted: 1,
                ..Default::default()
            }],
            xdp: vec![("redirect".into(), 5), ("pass_arp".into(), 0)],
            local_addresses: 4,
            netlink_generation: Some(42),
            pipeline: vec![PipelineSnapshot::new(0, &c)],
            mirror: vec![("applied".into(), 40), ("resyncs".into(), 0)],
            kernel_decides: vec![("encap".into(), 2)],
            endpoints: vec![crate::endpoints::EndpointSnapshot {
                service: "stamp".into(),
                local: "[::]:862".into(),
                received: 3,
                sent: 2,
                rx_dropped: 0,
                send_errors: vec![("no_route".into(), 1), ("hold_full".into(), 0)],
            }],
            diverted: vec!["tc: fwd0 root: qdisc htb".into()],
            memory: vec![
                ("heap_allocated".into(), 7_340_032),
                ("heap_active".into(), 7_405_568),
                ("heap_resident".into(), 8_388_608),
                ("fast_arenas".into(), 4_194_304),
            ],
        }
    }

    /// The value of one series; `None` when absent.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// `promtool check metrics` (Debian package `prometheus`, installed by `cargo xtask
    /// setup`) accepts the text; without promtool the test is skipped, unless `CI=true`.
    fn promtool_accepts(text: &str) {
        use std::io::Write;
        let child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped: no promtool ({e}); `cargo xtask setup` installs it");
                return;
            }
            Err(e) => panic!("CI=true: promtool is needed: {e}"),
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn promtool_accepts_the_exposition_of_both_engines() {
        promtool_accepts(&exposition(&router()));
        let bare = Stats {
            mode: "bare".into(),
            netlink_generation: None,
            mirror: Vec::new(),
            kernel_decides: Vec::new(),
            endpoints: Vec::new(),
            ..router()
        };
        let text = exposition(&bare);
        assert!(!text.contains("xfwd_netlink"), "no mirror in bare mode");
        assert!(!text.contains("xfwd_endpoint"), "no endpoints in bare mode");
        promtool_accepts(&text);
    }

    #[test]
    fn each_frame_is_in_one_family_and_every_reason_has_its_zero() {
        let text = exposition(&router());
        let sum = |prefix: &str| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(prefix))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let decided = sum("xfwd_pipeline_frames_total{")
            + sum("xfwd_pipeline_drops_total{")
            + sum("xfwd_pipeline_punts_total{");
        assert_eq!(decided, 5.0, "the five frames, each once:\n{text}");
        assert!(!text.contains("verdict=\"rx\""), "{text}");
        assert!(!text.contains("verdict=\"dropped\""), "{text}");
        for reason in DropReason::ALL {
            let series = format!(
                "xfwd_pipeline_drops_total{{queue=\"0\",reason=\"{}\"}}",
                reason.name()
            );
            assert!(value(&text, &series).is_some(), "{series} missing");
        }
        assert_eq!(
            value(
                &text,
                "xfwd_pipeline_drops_total{queue=\"0\",reason=\"blackhole\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                "xfwd_pipeline_punts_total{queue=\"0\",reason=\"ttl\"}"
            ),
            None,
            "no made-up reasons"
        );
        assert_eq!(
            value(
                &text,
                "xfwd_loop_drops_total{queue=\"0\",reason=\"tx_ring_full\"}"
            ),
            Some(0.0)
        );
    }

    #[test]
    fn types_names_build_and_process_families() {
        let text = exposition(&router());
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut words = line.split(' ').skip(2);
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "counters and only counters end in _total: {line}"
            );
        }
        assert!(
            text.contains("# TYPE xfwd_netlink_changes_total counter"),
            "{text}"
        );
        assert_eq!(value(&text, "xfwd_netlink_changes_total"), Some(42.0));
        let build = format!(
            "xfwd_build_info{{mode=\"router\",version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(value(&text, &build), Some(1.0), "{text}");
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}: {text}"
            );
        }
        assert_eq!(
            value(&text, "xfwd_rx_packets_total{iface=\"fwd1\",queue=\"0\"}"),
            Some(5.0)
        );
        assert_eq!(value(&text, "xfwd_interface_up{iface=\"fwd1\"}"), Some(0.0));
        assert_eq!(value(&text, "xfwd_uptime_seconds"), Some(1.5));
        // `xfwd stats`' memory block, one gauge per part, with its help.
        assert!(text.contains("# TYPE xfwd_memory_bytes gauge"), "{text}");
        assert!(text.contains("# HELP xfwd_memory_bytes Where"), "{text}");
        for (part, bytes) in [
            ("heap_allocated", 7_340_032.0),
            ("heap_active", 7_405_568.0),
            ("heap_resident", 8_388_608.0),
            ("fast_arenas", 4_194_304.0),
        ] {
            let series = format!("xfwd_memory_bytes{{part=\"{part}\"}}");
            assert_eq!(value(&text, &series), Some(bytes), "{series}: {text}");
        }
    }
}
