//! What the running pipeline would do with one packet: `xfwd route get` asked of a running
//! instance sends a UDP packet built for the question (destination, `from`, `iif`, `tos`)
//! through a private [`dataplane::Queue`] over the very tables the run loops read, with the
//! running configuration, and reports its verdict: the egress and the neighbour's MAC, the
//! ICMP error it would answer, the punt or drop reason, or that it would be held while the
//! neighbour resolves.
//!
//! The private queue has no route cache and its own hold buffer (of one slot), counters and
//! ICMP token bucket (so a question neither counts as traffic nor spends the run loops' ICMP budget),
//! and its neighbour resolution requests are dropped: `route get` never sends ARP or ND, as
//! the kernel's does not.
//!
//! Without `iif`, the packet enters on the first interface xfwd serves; without `from`, its
//! source is a neighbour on the ingress link (the interface's own address plus one), so that
//! reverse-path filtering passes as it would for a directly attached sender. Both are printed.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::wire::Family;
use dataplane::wire::ethernet::EthernetFrame;
use dataplane::wire::icmp::IcmpPacket;
use dataplane::wire::ip::IpRepr;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::ipv6::Ipv6Packet;
use dataplane::{HeapPool, Queue, Tables, Verdict};
use serde::Serialize;

use crate::cache_report::mac_text;

/// The pipeline's answer for one packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PipelineAnswer {
    /// `transmit`, `reply` (an ICMP error back to the sender), `punt`, `drop`, `held`,
    /// `deliver` or `fragment`.
    pub verdict: &'static str,
    /// The interface the packet entered on.
    pub iif: String,
    /// The packet's source address.
    pub from: IpAddr,
    /// `transmit`: the egress interface; `reply`: the interface the error leaves from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// `transmit`: the next hop's MAC address (the rewritten destination MAC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lladdr: Option<String>,
    /// `transmit`: the hop limit or TTL the packet leaves with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// `reply`: the ICMP (or ICMPv6) type and code of the error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp: Option<(u8, u8)>,
    /// `punt` or `drop`: the reason, as counted in the metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

impl std::fmt::Display for PipelineAnswer {
    /// `xfwd transmit dev fwd1 lladdr 02:00:00:00:00:01 ttl 63 (from 10.0.0.2 iif fwd0)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "xfwd {}", self.verdict)?;
        if let Some(r) = self.reason {
            write!(f, " {r}")?;
        }
        if let Some((t, c)) = self.icmp {
            write!(f, " icmp type {t} code {c}")?;
        }
        if let Some(d) = &self.dev {
            write!(f, " dev {d}")?;
        }
        if let Some(l) = &self.lladdr {
            write!(f, " lladdr {l}")?;
        }
        if let Some(t) = self.ttl {
            write!(f, " ttl {t}")?;
        }
        write!(f, " (from {} iif {})", self.from, self.iif)
    }
}

/// The selectors the pipeline takes from a `route get` question (`mark` and `oif` are not
/// packet fields: frames from the wire carry no mark, and `oif` asks for an output route).
#[derive(Debug, Default)]
struct Question {
    from: Option<IpAddr>,
    iif: Option<String>,
    tos: u8,
    oif: bool,
}

fn question(selectors: &[String]) -> Result<Question, String> {
    let mut q = Question::default();
    let mut it = selectors.iter();
    while let Some(word) = it.next() {
        let value = it.next().ok_or_else(|| format!("{word} needs a value"))?;
        match word.as_str() {
            "from" => q.from = Some(value.parse().map_err(|_| format!("from {value}"))?),
            "iif" => q.iif = Some(value.clone()),
            "oif" => q.oif = true,
            "tos" | "dsfield" => {
                let v = value.strip_prefix("0x").map_or_else(
                    || value.parse::<u8>().ok(),
                    |h| u8::from_str_radix(h, 16).ok(),
                );
                q.tos = v.ok_or_else(|| format!("{word} {value}"))?;
            }
            _ => {}
        }
    }
    Ok(q)
}

/// A directly attached sender's address on `ifindex`: the interface's first address of the
/// destination's family plus one (minus one when that is the subnet's last address).
fn neighbour_source(tables: &Tables, ifindex: u32, v6: bool) -> Option<IpAddr> {
    let guard = crossbeam_epoch::pin();
    if v6 {
        let list = tables
            .addrs
            .interfaces::<Ipv6Addr>(&guard)
            .into_iter()
            .find(|(i, _)| *i == ifindex)?
            .1;
        let a = list.iter().find(|a| !a.addr.is_unicast_link_local())?;
        let host = u128::MAX >> a.prefix_len.min(127);
        let bits = a.addr.to_bits();
        let next = if bits & host == host {
            bits - 1
        } else {
            bits + 1
        };
        Some(IpAddr::V6(Ipv6Addr::from_bits(next)))
    } else {
        let list = tables
            .addrs
            .interfaces::<Ipv4Addr>(&guard)
            .into_iter()
            .find(|(i, _)| *i == ifindex)?
            .1;
        let a = list.first()?;
        let host = u32::MAX >> a.prefix_len.min(31);
        let bits = a.addr.to_bits();
        let next = if (bits + 1) & host == host {
            bits - 1
        } else {
            bits + 1
        };
        Some(IpAddr::V4(Ipv4Addr::from_bits(next)))
    }
}

/// Sends one packet for `args` through a private queue of the pipeline over `tables`, with
/// `config`; `served` are the interfaces xfwd serves (the first is the default ingress).
/// `None` when the question is not one for the pipeline (`oif`: an output route).
///
/// # Errors
/// When the packet cannot be built: no served interface, an unknown `iif`, no source address
/// to use, `from` of the other family, or an ingress without an Ethernet address.
pub fn explain(
    tables: &Tables,
    config: &dataplane::Config,
    args: &netlink_mirror::cli::RouteGetArgs,
    served: &[u32],
) -> Result<Option<PipelineAnswer>, String> {
    let q = question(&args.selectors)?;
    if q.oif {
        return Ok(None);
    }
    let guard = crossbeam_epoch::pin();
    let ingress = match &q.iif {
        Some(name) => tables
            .links
            .by_name(name, &guard)
            .ok_or_else(|| format!("Cannot find device \"{name}\""))?,
        None => {
            let first = served.first().ok_or("no interface is served")?;
            tables
                .links
                .get(*first, &guard)
                .ok_or("the served interface is not in the link table")?
        }
    };
    let (iif, iif_name) = (ingress.ifindex, ingress.name.clone());
    let ingress_mac = ingress
        .mac
        .ok_or_else(|| format!("{iif_name} has no Ethernet address"))?;
    let v6 = args.addr.is_ipv6();
    let from = match q.from {
        Some(f) if f.is_ipv6() != v6 => {
            return Err(format!("from {f} is not of the destination's family"));
        }
        Some(f) => f,
        None => neighbour_source(tables, iif, v6)
            .ok_or_else(|| format!("{iif_name} has no address to derive a sender from"))?,
    };
    let sender = [0x02, 0x78, 0x66, 0x77, 0x64, 0x01];
    let builder = etherparse::PacketBuilder::ethernet2(sender, ingress_mac);
    let builder = match (from, args.addr) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = etherparse::Ipv4Header::new(
                0,
                64,
                etherparse::IpNumber::UDP,
                s.octets(),
                d.octets(),
            )
            .map_err(|e| e.to_string())?;
            ip.dscp = etherparse::IpDscp::try_new(q.tos >> 2).map_err(|e| e.to_string())?;
            ip.ecn = etherparse::IpEcn::try_new(q.tos & 3).map_err(|e| e.to_string())?;
            builder.ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = etherparse::Ipv6Header {
                traffic_class: q.tos,
                next_header: etherparse::IpNumber::UDP,
                hop_limit: 64,
                source: s.octets(),
                destination: d.octets(),
                ..Default::default()
            };
            builder.ip(etherparse::IpHeaders::Ipv6(ip, Default::default()))
        }
        (s, d) => return Err(format!("from {s} is not of the family of {d}")),
    };
    let mut packet = Vec::new();
    builder
        .udp(49152, 33434)
        .write(&mut packet, b"xfwd route get")
        .map_err(|e| e.to_string())?;
    drop(guard);

    // One hold slot is enough for one packet (none when holding is off): a question does not
    // allocate the run loops' whole hold buffer.
    let mut queue = Queue::new(dataplane::Config {
        dst_cache: None,
        hold_frames: config.hold_frames.min(1),
        resolution_queue: 1,
        ..*config
    })
    .map_err(|e| e.to_string())?;
    let headroom = 256;
    let mut chunk = vec![0u8; 4096];
    chunk[headroom..headroom + packet.len()].copy_from_slice(&packet);
    let mut frames = [dataplane::Frame::new(
        &mut chunk,
        headroom,
        packet.len(),
        iif,
    )];
    let mut pool = HeapPool::new(4096, 4);
    let guard = crossbeam_epoch::pin();
    queue.process_batch(tables, &guard, 0, &mut frames, &mut pool);
    let name = |i: u32| {
        tables
            .links
            .get(i, &guard)
            .map_or_else(|| format!("if{i}"), |l| l.name.clone())
    };
    let mut answer = PipelineAnswer {
        verdict: "",
        iif: iif_name,
        from,
        dev: None,
        lladdr: None,
        ttl: None,
        icmp: None,
        reason: None,
    };
    let frame = &frames[0];
    match frame.verdict {
        Verdict::Transmit { ifindex } => {
            let bytes = frame.bytes();
            answer.verdict = "transmit";
            answer.dev = Some(name(ifindex));
            answer.lladdr = bytes
                .get(..6)
                .map(|m| mac_text(m.try_into().unwrap_or([0; 6])));
            answer.ttl = ip_ttl(bytes);
        }
        Verdict::Reply { ifindex } => {
            answer.verdict = "reply";
            answer.dev = Some(name(ifindex));
            answer.icmp = icmp_of(frame.bytes());
        }
        Verdict::Punt(reason) => {
            answer.verdict = "punt";
            answer.reason = Some(reason.name());
        }
        Verdict::Drop(reason) => {
            answer.verdict = "drop";
            answer.reason = Some(reason.name());
        }
        Verdict::Held => answer.verdict = "held",
        Verdict::Deliver { .. } => answer.verdict = "deliver",
        Verdict::Consumed | Verdict::Pending => match pool.sent.first() {
            Some(sent) if icmp_of(&sent.bytes).is_some() => {
                answer.verdict = "reply";
                answer.dev = Some(name(sent.ifindex));
                answer.icmp = icmp_of(&sent.bytes);
            }
            Some(sent) => {
                answer.verdict = "fragment";
                answer.dev = Some(name(sent.ifindex));
            }
            None => answer.verdict = "consumed",
        },
    }
    Ok(Some(answer))
}

/// The TTL or hop limit of an untagged Ethernet frame's IP packet.
fn ip_ttl(frame: &[u8]) -> Option<u8> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let family = Family::of_ethertype(eth.ethertype())?;
    IpRepr::parse(family, eth.payload())
        .ok()
        .map(|ip| ip.hop_limit())
}

/// The ICMP (or ICMPv6) type and code of an untagged Ethernet frame carrying an ICMP error.
fn icmp_of(frame: &[u8]) -> Option<(u8, u8)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let family = Family::of_ethertype(eth.ethertype())?;
    let type_code = |protocol: u8, message: &[u8]| {
        let icmp = IcmpPacket::new_checked(message).ok()?;
        (protocol == family.icmp_protocol()).then(|| (icmp.msg_type(), icmp.code()))
    };
    match family {
        Family::V4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
            type_code(ip.protocol(), ip.payload())
        }
        Family::V6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            type_code(ip.next_header(), ip.payload())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib_trie::{InsertFlags, NextHop, Route, RouteType};
    use neigh_table::{Link, LinkFlags, Neighbour, NudState, OperState};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    fn tables() -> (Tables, dataplane::TableWriters) {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let sock_netns = writer.add_netns(NetnsConfig::default()).unwrap();
        let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
        for (ifindex, mac) in [(1, [2, 0, 0, 0, 0, 1]), (2, [2, 0, 0, 0, 0, 2])] {
            let mut link = Link {
                mac: Some(mac),
                ..Link::new(ifindex, format!("eth{ifindex}"))
            };
            (link.flags, link.oper) = (LinkFlags::UP | LinkFlags::RUNNING, OperState::UP);
            writers.links.upsert(link);
        }
        writers
            .addrs
            .add(addr_table::IfAddr::new(
                Ipv4Addr::new(198, 51, 100, 1),
                24,
                1,
            ))
            .unwrap();
        let gw = Ipv4Addr::new(192, 0, 2, 1);
        writers
            .fib4
            .insert(
                &Route::unicast(0x0a00_0000, 8, 254, vec![NextHop::new(Some(gw.into()), 2)]),
                InsertFlags::ADD,
            )
            .unwrap();
        writers
            .fib4
            .insert(
                &Route::reject(0x0b00_0000, 8, 254, RouteType::Unreachable),
                InsertFlags::ADD,
            )
            .unwrap();
        writers.neigh.upsert(Neighbour::new(
            2,
            gw.into(),
            Some([2, 0, 0, 0, 0, 9]),
            NudState::REACHABLE,
        ));
        tables.generation.bump();
        (tables, writers)
    }

    fn ask(tables: &Tables, line: &str) -> Result<Option<PipelineAnswer>, String> {
        let mut words = line.split_whitespace().map(str::to_owned);
        let args = netlink_mirror::cli::RouteGetArgs {
            addr: words.next().unwrap().parse().unwrap(),
            selectors: words.collect(),
            netns: None,
        };
        explain(tables, &dataplane::Config::default(), &args, &[1])
    }

    #[test]
    fn answers_what_the_pipeline_does() {
        let (t, mut writers) = tables();
        let a = ask(&t, "10.1.2.3").unwrap().unwrap();
        assert_eq!(
            a.to_string(),
            "xfwd transmit dev eth2 lladdr 02:00:00:00:00:09 ttl 63 (from 198.51.100.2 iif eth1)"
        );
        let a = ask(&t, "11.1.2.3 from 198.51.100.7").unwrap().unwrap();
        assert_eq!((a.verdict, a.icmp), ("reply", Some((3, 1))), "{a}");
        assert_eq!(a.dev.as_deref(), Some("eth1"));
        let a = ask(&t, "12.0.0.1").unwrap().unwrap();
        assert_eq!(
            (a.verdict, a.icmp),
            ("reply", Some((3, 0))),
            "no route: {a}"
        );
        let a = ask(&t, "198.51.100.1").unwrap().unwrap();
        assert_eq!((a.verdict, a.reason), ("punt", Some("local")), "{a}");
        let a = ask(&t, "10.1.2.3 from 127.0.0.1").unwrap().unwrap();
        assert_eq!(
            (a.verdict, a.reason),
            ("drop", Some("martian_source")),
            "{a}"
        );
        assert_eq!(ask(&t, "10.1.2.3 oif eth2"), Ok(None), "an output route");
        assert!(ask(&t, "10.1.2.3 iif nope").is_err());
        assert!(ask(&t, "10.1.2.3 from 2001:db8::1").is_err());
        // A neighbour not yet resolved: held (and no resolution leaves the private queue).
        writers.neigh.upsert(Neighbour::new(
            2,
            Ipv4Addr::new(192, 0, 2, 1).into(),
            None,
            NudState::INCOMPLETE,
        ));
        t.generation.bump();
        let a = ask(&t, "10.1.2.3").unwrap().unwrap();
        assert_eq!(a.verdict, "held", "{a}");
    }
}
