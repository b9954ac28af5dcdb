//! The mirrored tables as `ip -j` prints them: the same keys and value forms as iproute2's
//! JSON output for routes (`ip -j route show table all`), addresses (`ip -j addr`),
//! neighbours (`ip -j neigh`), links (`ip -j link`), rules (`ip -j rule`), nexthop objects
//! (`ip -j nexthop`) and `ip -j route get`, so that scripts written against `ip -j` read
//! xfwd's answers. xfrm policies (which `ip xfrm` prints only as text) are objects with the
//! keys of their text form.
//!
//! Where xfwd knows something `ip` does not say, it adds a key of its own: `kernel_decides`
//! (why a route or nexthop is punted to the kernel). What the mirror does not keep, it leaves
//! out rather than guessing: the IPv6 route preference (`pref`), address lifetimes, link
//! statistics, qdisc and group, the `uid` of `route get`. Keys are in alphabetical order
//! (JSON objects are unordered; `ip` prints them in its own order).
//!
//! ```
//! use netlink_mirror::MirroredTables;
//! use netlink_mirror::cli::{RouteGetArgs, ShowWhat};
//! use fib_trie::{InsertFlags, NextHop, Route};
//!
//! let (t, mut writers) = MirroredTables::new(addr_table::NetnsId(1), false);
//! writers.fib4.insert(&Route::unicast(0x0a09_0000, 16, 254, vec![NextHop::new(Some(0x0a01_0004), 2)]), InsertFlags::ADD).unwrap();
//! let routes = netlink_mirror::json::show(&t, ShowWhat::Routes);
//! assert_eq!(routes[0]["dst"], "10.9.0.0/16");
//! assert_eq!(routes[0]["gateway"], "10.1.0.4");
//! let args = RouteGetArgs { addr: "10.9.1.1".parse().unwrap(), selectors: vec![], netns: None };
//! let answer = netlink_mirror::cli::route_answer(&t, &args).unwrap();
//! assert_eq!(netlink_mirror::json::route_get(&answer)[0]["dev"], "if2");
//! ```
#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use crossbeam_epoch::Guard;
use fib_trie::{Fib, FibRule, Gateway, RouteType, RuleAction, Scope, ids};
use neigh_table::LinkFlags;
use policy_tree::{Action, Direction, PolicyType};
use serde_json::{Map, Value, json};

use crate::cli::{
    RouteAnswer, ShowWhat, dev_name, prefix_text, protocol_name, route_hops, scope_name,
    table_name, type_name,
};
use crate::kernel_routes::key_of;
use crate::key::IpKey;
use crate::tables::MirroredTables;

/// Lists what `what` names as `ip -j` does: a JSON array of objects.
pub fn show(t: &MirroredTables, what: ShowWhat) -> Value {
    let guard = crossbeam_epoch::pin();
    let list = match what {
        ShowWhat::Routes => {
            let book = &t.kernel_routes;
            let mut list = routes(t, &t.fib4, &guard, |r| {
                book.v4().get(&key_of(r)).map(|s| s.reason)
            });
            list.extend(routes(t, &t.fib6, &guard, |r| {
                book.v6().get(&key_of(r)).map(|s| s.reason)
            }));
            list
        }
        ShowWhat::Addrs => addrs(t, &guard),
        ShowWhat::Neigh => neighbours(t, &guard),
        ShowWhat::Rules => {
            let mut list: Vec<Value> = t
                .fib4
                .rules(&guard)
                .iter()
                .map(|r| rule(t, r, &guard))
                .collect();
            list.extend(t.fib6.rules(&guard).iter().map(|r| rule(t, r, &guard)));
            list
        }
        ShowWhat::Policies => policies(t),
        ShowWhat::Links => t
            .links
            .to_vec()
            .iter()
            .map(|l| link(t, l, &guard))
            .collect(),
        ShowWhat::Nexthops => nexthops(t, &guard),
    };
    Value::Array(list)
}

/// `ip -j route get`'s answer: an array of one object (`dst`, `from`, `gateway`, `dev`,
/// `table`, `prefsrc`, `flags`, `mark`, `iif`, `metric`, `metrics`, and `cache` for IPv4).
///
/// ```
/// use netlink_mirror::cli::RouteAnswer;
/// let answer = RouteAnswer {
///     route_type: fib_trie::RouteType::Unicast, dst: "192.0.2.1".parse().unwrap(), from: None,
///     gateway: Some("10.0.0.1".into()), oif: Some(2), dev: Some("eth1".into()), table: 254,
///     prefsrc: None, iif: None, mark: 0, metric: 0, metrics: Default::default(),
/// };
/// assert_eq!(
///     netlink_mirror::json::route_get(&answer).to_string(),
///     r#"[{"cache":[],"dev":"eth1","dst":"192.0.2.1","flags":[],"gateway":"10.0.0.1"}]"#
/// );
/// ```
pub fn route_get(a: &RouteAnswer) -> Value {
    let mut o = Map::new();
    if a.route_type != RouteType::Unicast {
        o.insert("type".into(), type_name(a.route_type).into());
    }
    o.insert("dst".into(), a.dst.to_string().into());
    if let Some(f) = a.from {
        o.insert("from".into(), f.to_string().into());
    }
    if let Some(g) = &a.gateway {
        gateway(&mut o, g);
    }
    if let Some(d) = &a.dev {
        o.insert("dev".into(), d.clone().into());
    }
    if a.table != ids::MAIN {
        o.insert("table".into(), table_name(a.table).into());
    }
    if let Some(s) = a.prefsrc {
        o.insert("prefsrc".into(), s.to_string().into());
    }
    o.insert("flags".into(), json!([]));
    if a.mark != 0 {
        o.insert("mark".into(), a.mark.into());
    }
    if let Some(i) = &a.iif {
        o.insert("iif".into(), i.clone().into());
    }
    if a.dst.is_ipv6() {
        o.insert("metric".into(), a.metric.into());
    } else {
        let cache = if a.route_type == RouteType::Local {
            json!(["local"])
        } else {
            json!([])
        };
        o.insert("cache".into(), cache);
    }
    if !a.metrics.is_empty() {
        o.insert("metrics".into(), metrics(&a.metrics));
    }
    Value::Array(vec![Value::Object(o)])
}

/// A `via` text as `ip -j` keys it: `gateway`, or `via: {family, host}` for an IPv6 gateway
/// of an IPv4 route.
fn gateway(o: &mut Map<String, Value>, via: &str) {
    match via.strip_prefix("inet6 ") {
        Some(host) => {
            o.insert("via".into(), json!({"family": "inet6", "host": host}));
        }
        None => {
            o.insert("gateway".into(), via.into());
        }
    }
}

/// Route metrics as `ip -j` prints them: an array of one object, each metric by `ip`'s name
/// with its value, times in milliseconds (`rtt` is kept in 1/8 ms, `rttvar` in 1/4 ms), the
/// congestion control algorithm as `congestion`; locks are not shown (as in `ip -j`).
fn metrics(m: &fib_trie::Metrics) -> Value {
    use fib_trie::Metrics as M;
    let mut o = Map::new();
    for (id, v) in m.iter() {
        let name = match id {
            M::MTU => "mtu",
            M::WINDOW => "window",
            M::RTT => "rtt",
            M::RTTVAR => "rttvar",
            M::SSTHRESH => "ssthresh",
            M::CWND => "cwnd",
            M::ADVMSS => "advmss",
            M::REORDERING => "reordering",
            M::HOPLIMIT => "hoplimit",
            M::INITCWND => "initcwnd",
            M::FEATURES => "features",
            M::RTO_MIN => "rto_min",
            M::INITRWND => "initrwnd",
            M::QUICKACK => "quickack",
            M::FASTOPEN_NO_COOKIE => "fastopen_no_cookie",
            _ => {
                o.insert(format!("metric{id}"), v.into());
                continue;
            }
        };
        let v = match id {
            M::RTT => v / 8,
            M::RTTVAR => v / 4,
            _ => v,
        };
        o.insert(name.into(), v.into());
    }
    if let Some(cc) = m.cc_algo() {
        o.insert("congestion".into(), cc.into());
    }
    json!([o])
}

fn hop_flags(flags: u32) -> Value {
    let mut list = Vec::new();
    for (bit, name) in [
        (fib_trie::NextHopFlags::DEAD.0, "dead"),
        (fib_trie::NextHopFlags::ONLINK.0, "onlink"),
        (fib_trie::NextHopFlags::LINKDOWN.0, "linkdown"),
    ] {
        if flags & bit != 0 {
            list.push(Value::from(name));
        }
    }
    Value::Array(list)
}

fn via<K: IpKey>(g: Gateway<K>) -> String {
    crate::cli::via_text(g)
}

fn routes<K: IpKey>(
    t: &MirroredTables,
    fib: &Fib<K>,
    guard: &Guard,
    reason: impl Fn(&fib_trie::Route<K>) -> Option<&'static str>,
) -> Vec<Value> {
    let v6 = K::FAMILY == libc::AF_INET6 as u8;
    let mut list = Vec::new();
    for id in fib.table_ids() {
        let Some(table) = fib.table(id, guard) else {
            continue;
        };
        for (prefix, plen, a) in table.dump(guard) {
            let info = &a.info;
            let mut o = Map::new();
            if a.route_type != RouteType::Unicast {
                o.insert("type".into(), type_name(a.route_type).into());
            }
            o.insert("dst".into(), prefix_text(prefix, plen).into());
            if let Some(n) = &info.nh_object {
                o.insert("nhid".into(), n.id().into());
            }
            // A route through a nexthop object lists the object's next hops, as the kernel's
            // dump does.
            let hops = route_hops(info, guard);
            if let [h] = hops {
                if let Some(g) = h.gateway {
                    gateway(&mut o, &via(g));
                }
                o.insert("dev".into(), dev_name(t, h.ifindex, guard).into());
            }
            if id != ids::MAIN {
                o.insert("table".into(), table_name(id).into());
            }
            if info.protocol != 3 {
                o.insert("protocol".into(), protocol_name(info.protocol).into());
            }
            if info.scope != Scope::UNIVERSE {
                o.insert("scope".into(), scope_name(info.scope.0).into());
            }
            if let Some(s) = info.prefsrc {
                o.insert("prefsrc".into(), s.to_ip().to_string().into());
            }
            if v6 || info.priority != 0 {
                o.insert("metric".into(), info.priority.into());
            }
            let flags = match hops {
                [h] => hop_flags(h.flags.0),
                _ => json!([]),
            };
            o.insert("flags".into(), flags);
            if !info.metrics.is_empty() {
                o.insert("metrics".into(), metrics(&info.metrics));
            }
            if hops.len() > 1 {
                let hops: Vec<Value> = hops
                    .iter()
                    .map(|h| {
                        let mut n = Map::new();
                        if let Some(g) = h.gateway {
                            gateway(&mut n, &via(g));
                        }
                        n.insert("dev".into(), dev_name(t, h.ifindex, guard).into());
                        n.insert("weight".into(), h.weight.into());
                        n.insert("flags".into(), hop_flags(h.flags.0));
                        Value::Object(n)
                    })
                    .collect();
                o.insert("nexthops".into(), Value::Array(hops));
            }
            if a.route_type == RouteType::Kernel {
                let r = fib_trie::Route {
                    prefix,
                    plen,
                    table: a.table,
                    tos: a.tos,
                    route_type: a.route_type,
                    info: (*a.info).clone(),
                };
                o.insert(
                    "kernel_decides".into(),
                    reason(&r).unwrap_or("unknown").into(),
                );
            } else if let Some(n) = &info.nh_object {
                if matches!(n.load(guard), fib_trie::NexthopGroup::Kernel) {
                    o.insert("kernel_decides".into(), "nexthop".into());
                }
            }
            list.push(Value::Object(o));
        }
    }
    list
}

fn mac_text(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// A link's `IFF_*` flags in the order and spelling of `ip` (`NO-CARRIER` for a link that is
/// up without carrier).
fn link_flags(flags: LinkFlags) -> Value {
    let mut list = Vec::new();
    if flags.contains(LinkFlags::UP) && !flags.contains(LinkFlags::RUNNING) {
        list.push("NO-CARRIER");
    }
    for (flag, name) in [
        (LinkFlags::LOOPBACK, "LOOPBACK"),
        (LinkFlags::BROADCAST, "BROADCAST"),
        (LinkFlags::POINTOPOINT, "POINTOPOINT"),
        (LinkFlags::MULTICAST, "MULTICAST"),
        (LinkFlags::NOARP, "NOARP"),
        (LinkFlags::PROMISC, "PROMISC"),
        (LinkFlags::MASTER, "MASTER"),
        (LinkFlags::SLAVE, "SLAVE"),
        (LinkFlags::UP, "UP"),
        (LinkFlags::LOWER_UP, "LOWER_UP"),
        (LinkFlags::DORMANT, "DORMANT"),
    ] {
        if flags.contains(flag) {
            list.push(name);
        }
    }
    json!(list)
}

fn link_object(t: &MirroredTables, l: &neigh_table::Link, guard: &Guard) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("ifindex".into(), l.ifindex.into());
    o.insert("ifname".into(), l.name.clone().into());
    o.insert("flags".into(), link_flags(l.flags));
    o.insert("mtu".into(), l.mtu.into());
    o.insert("operstate".into(), l.oper.to_string().into());
    if let Some(m) = l.master {
        o.insert("master".into(), dev_name(t, m, guard).into());
    }
    let loopback = l.flags.contains(LinkFlags::LOOPBACK);
    o.insert(
        "link_type".into(),
        if loopback { "loopback" } else { "ether" }.into(),
    );
    if let Some(m) = l.mac {
        o.insert("address".into(), mac_text(m).into());
        let broadcast = if loopback { [0; 6] } else { [0xff; 6] };
        o.insert("broadcast".into(), mac_text(broadcast).into());
    }
    if let Some(kind) = &l.kind {
        o.insert("linkinfo".into(), json!({ "info_kind": kind }));
    }
    o
}

fn link(t: &MirroredTables, l: &neigh_table::Link, guard: &Guard) -> Value {
    Value::Object(link_object(t, l, guard))
}

fn addrs(t: &MirroredTables, guard: &Guard) -> Vec<Value> {
    use std::collections::BTreeMap;
    let mut per_link: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
    for (ifindex, list) in t.addrs.interfaces::<Ipv4Addr>(guard) {
        for a in list {
            let mut o = Map::new();
            o.insert("family".into(), "inet".into());
            o.insert("local".into(), a.addr.to_string().into());
            o.insert("prefixlen".into(), a.prefix_len.into());
            o.insert("scope".into(), scope_name(a.scope.0).into());
            if a.is_secondary() {
                o.insert("secondary".into(), true.into());
            }
            let label = a
                .label
                .map_or_else(|| dev_name(t, ifindex, guard), |l| l.to_string());
            o.insert("label".into(), label.into());
            per_link.entry(ifindex).or_default().push(Value::Object(o));
        }
    }
    for (ifindex, list) in t.addrs.interfaces::<Ipv6Addr>(guard) {
        for a in list {
            let mut o = Map::new();
            o.insert("family".into(), "inet6".into());
            o.insert("local".into(), a.addr.to_string().into());
            o.insert("prefixlen".into(), a.prefix_len.into());
            o.insert("scope".into(), scope_name(a.scope.0).into());
            for (flag, name) in [
                (addr_table::IfaFlags::NODAD, "nodad"),
                (addr_table::IfaFlags::TENTATIVE, "tentative"),
                (addr_table::IfaFlags::DEPRECATED, "deprecated"),
                (addr_table::IfaFlags::DADFAILED, "dadfailed"),
                (addr_table::IfaFlags::OPTIMISTIC, "optimistic"),
            ] {
                if a.flags.contains(flag) {
                    o.insert(name.into(), true.into());
                }
            }
            per_link.entry(ifindex).or_default().push(Value::Object(o));
        }
    }
    let mut out = Vec::new();
    for l in t.links.to_vec() {
        let mut o = link_object(t, &l, guard);
        o.insert(
            "addr_info".into(),
            Value::Array(per_link.remove(&l.ifindex).unwrap_or_default()),
        );
        out.push(Value::Object(o));
    }
    // Addresses of interfaces the link table does not hold (yet): by index.
    for (ifindex, list) in per_link {
        out.push(json!({"ifindex": ifindex, "ifname": format!("if{ifindex}"), "addr_info": list}));
    }
    out
}

fn neighbours(t: &MirroredTables, guard: &Guard) -> Vec<Value> {
    t.neigh
        .to_vec()
        .into_iter()
        .map(|n| {
            let mut o = Map::new();
            o.insert("dst".into(), n.addr.to_string().into());
            o.insert("dev".into(), dev_name(t, n.ifindex, guard).into());
            if let Some(m) = n.lladdr {
                o.insert("lladdr".into(), mac_text(m).into());
            }
            let state: Vec<Value> = n
                .state
                .to_string()
                .split_whitespace()
                .map(Value::from)
                .collect();
            o.insert("state".into(), Value::Array(state));
            Value::Object(o)
        })
        .collect()
}

fn rule<K: IpKey>(t: &MirroredTables, r: &FibRule<K>, guard: &Guard) -> Value {
    let mut o = Map::new();
    o.insert("priority".into(), r.priority.into());
    if r.invert {
        o.insert("not".into(), true.into());
    }
    match r.src {
        Some((k, l)) => {
            o.insert("src".into(), k.to_ip().to_string().into());
            o.insert("srclen".into(), l.into());
        }
        None => {
            o.insert("src".into(), "all".into());
        }
    }
    if let Some((k, l)) = r.dst {
        o.insert("dst".into(), k.to_ip().to_string().into());
        o.insert("dstlen".into(), l.into());
    }
    if r.tos != 0 {
        o.insert("tos".into(), format!("{:#x}", r.tos).into());
    }
    if r.fwmask != 0 {
        o.insert("fwmark".into(), format!("{:#x}", r.fwmark).into());
        if r.fwmask != u32::MAX {
            o.insert("fwmask".into(), format!("{:#x}", r.fwmask).into());
        }
    }
    if r.iif != 0 {
        o.insert("iif".into(), dev_name(t, r.iif, guard).into());
    }
    if r.oif != 0 {
        o.insert("oif".into(), dev_name(t, r.oif, guard).into());
    }
    match r.action {
        RuleAction::Lookup(id) => {
            o.insert("table".into(), table_name(id).into());
        }
        RuleAction::Goto(p) => {
            o.insert("action".into(), "goto".into());
            o.insert("target".into(), p.into());
        }
        RuleAction::Nop => {
            o.insert("action".into(), "nop".into());
        }
        RuleAction::Blackhole => {
            o.insert("action".into(), "blackhole".into());
        }
        RuleAction::Unreachable => {
            o.insert("action".into(), "unreachable".into());
        }
        RuleAction::Prohibit => {
            o.insert("action".into(), "prohibit".into());
        }
        RuleAction::Kernel => {
            o.insert("kernel_decides".into(), "rule".into());
        }
    }
    Value::Object(o)
}

fn policies(t: &MirroredTables) -> Vec<Value> {
    t.policies
        .dump()
        .into_iter()
        .map(|p| {
            let dir = match p.dir {
                Direction::In => "in",
                Direction::Out => "out",
                Direction::Fwd => "fwd",
            };
            let mut o = Map::new();
            o.insert("src".into(), p.selector.src.to_string().into());
            o.insert("dst".into(), p.selector.dst.to_string().into());
            if p.selector.proto != 0 {
                o.insert("proto".into(), p.selector.proto.into());
            }
            o.insert("dir".into(), dir.into());
            o.insert("priority".into(), p.priority.into());
            let (action, tmpl, level) = match p.action {
                Action::Allow => ("allow", None, None),
                Action::Block => ("block", None, None),
                Action::Ipsec(id) => ("allow", Some(id.0), None),
                Action::IpsecOptional(id) => ("allow", Some(id.0), Some("use")),
                Action::Punt => ("kernel", None, None),
            };
            o.insert("action".into(), action.into());
            if let Some(tmpl) = tmpl {
                o.insert("tmpl".into(), tmpl.into());
            }
            if let Some(level) = level {
                o.insert("level".into(), level.into());
            }
            if matches!(p.action, Action::Punt) {
                o.insert("kernel_decides".into(), "policy".into());
            }
            if p.ptype == PolicyType::Sub {
                o.insert("ptype".into(), "sub".into());
            }
            if p.if_id != 0 {
                o.insert("if_id".into(), p.if_id.into());
            }
            if p.selector.ifindex != 0 {
                o.insert("ifindex".into(), p.selector.ifindex.into());
            }
            if p.mark != policy_tree::Mark::ANY {
                o.insert(
                    "mark".into(),
                    json!({"value": format!("{:#x}", p.mark.value), "mask": format!("{:#x}", p.mark.mask)}),
                );
            }
            o.insert("index".into(), p.index.into());
            Value::Object(o)
        })
        .collect()
}

fn nexthops(t: &MirroredTables, guard: &Guard) -> Vec<Value> {
    use crate::map::NexthopSpec;
    let nexthops = t.nexthops.lock();
    nexthops
        .iter()
        .map(|(id, e)| {
            let mut o = Map::new();
            o.insert("id".into(), id.into());
            let mut flags = json!([]);
            match &e.spec {
                NexthopSpec::Single {
                    gateway: gw,
                    ifindex,
                    flags: f,
                    ..
                } => {
                    if let Some(g) = gw {
                        o.insert("gateway".into(), g.to_string().into());
                    }
                    if *ifindex != 0 {
                        o.insert("dev".into(), dev_name(t, *ifindex, guard).into());
                        // The kernel gives a device nexthop link scope when it has a gateway,
                        // host scope without one.
                        let scope = if gw.is_some() { "link" } else { "host" };
                        o.insert("scope".into(), scope.into());
                    }
                    flags = hop_flags(*f);
                }
                NexthopSpec::Blackhole => {
                    o.insert("blackhole".into(), Value::Null);
                }
                NexthopSpec::Group { members, buckets } => {
                    let list: Vec<Value> = members
                        .iter()
                        .map(|(m, w)| {
                            if *w == 1 {
                                json!({ "id": m })
                            } else {
                                json!({ "id": m, "weight": w })
                            }
                        })
                        .collect();
                    o.insert("group".into(), Value::Array(list));
                    if let Some(n) = buckets {
                        o.insert("type".into(), "resilient".into());
                        o.insert("resilient_args".into(), json!({ "buckets": n }));
                    }
                }
                NexthopSpec::Unrepresentable(why) => {
                    o.insert("kernel_decides".into(), (*why).into());
                }
            }
            o.insert("flags".into(), flags);
            Value::Object(o)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use addr_table::NetnsId;
    use fib_trie::{InsertFlags, NextHop, Route};
    use neigh_table::{Link, OperState};
    use policy_tree::{Action, Direction, PolicySpec, Prefix, Selector, TemplateId};

    use super::*;
    use crate::cli::{RouteGetArgs, route_answer};

    /// As `ip -j route show` prints `mtu 1400 rtt 10ms advmss lock 1360 congctl cubic`
    /// (iproute2 6.1): `[{"mtu":1400,"rtt":10,"advmss":1360,"congestion":"cubic"}]`.
    #[test]
    fn metrics_in_ip_json_form() {
        let mut m = fib_trie::Metrics::default();
        m.set(fib_trie::Metrics::MTU, 1400);
        m.set(fib_trie::Metrics::RTT, 80);
        m.set(fib_trie::Metrics::ADVMSS, 1360);
        m.lock(fib_trie::Metrics::ADVMSS);
        m.set_cc_algo(Some("cubic"));
        assert_eq!(
            metrics(&m),
            json!([{"mtu": 1400, "rtt": 10, "advmss": 1360, "congestion": "cubic"}])
        );
    }

    #[test]
    fn links_flags_as_ip_prints_them() {
        let (t, mut writers) = MirroredTables::new(NetnsId(1), false);
        let mut l = Link::new(2, "eth0");
        l.flags = LinkFlags::UP | LinkFlags::BROADCAST | LinkFlags::MULTICAST;
        l.oper = OperState::DOWN;
        l.mac = Some([2, 0, 0, 0, 0, 1]);
        writers.links.upsert(l);
        let links = show(&t, ShowWhat::Links);
        assert_eq!(
            links[0]["flags"],
            json!(["NO-CARRIER", "BROADCAST", "MULTICAST", "UP"]),
            "up without carrier (not RUNNING)"
        );
        assert_eq!(links[0]["operstate"], "DOWN");
        assert_eq!(links[0]["address"], "02:00:00:00:00:01");
        assert_eq!(links[0]["broadcast"], "ff:ff:ff:ff:ff:ff");
    }

    #[test]
    fn via_inet6_rules_and_policies() {
        let (t, mut writers) = MirroredTables::new(NetnsId(1), false);
        writers.links.upsert(Link::new(2, "eth0"));
        let mut hop = NextHop::new(None, 2);
        hop.gateway = Some(Gateway::Inet6(0xfe80_0000_0000_0000_0000_0000_0000_0001));
        writers
            .fib4
            .insert(
                &Route::unicast(0x0a00_0000, 8, 254, vec![hop]),
                InsertFlags::ADD,
            )
            .unwrap();
        let routes = show(&t, ShowWhat::Routes);
        assert_eq!(
            routes[0]["via"],
            json!({"family": "inet6", "host": "fe80::1"})
        );
        assert_eq!(routes[0]["dev"], "eth0");
        let args = RouteGetArgs {
            addr: "10.1.1.1".parse().unwrap(),
            selectors: vec![],
            netns: None,
        };
        let got = route_get(&route_answer(&t, &args).unwrap());
        assert_eq!(got[0]["via"]["host"], "fe80::1", "{got}");

        let mut rule = FibRule::new(10, RuleAction::Goto(20));
        rule.invert = true;
        rule.src = Some((0x0a00_0000u32, 8));
        writers.fib4.add_rule(rule).unwrap();
        let rules = show(&t, ShowWhat::Rules);
        let goto = rules
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["priority"] == 10)
            .unwrap();
        assert_eq!(
            goto,
            &json!({"priority": 10, "not": true, "src": "10.0.0.0", "srclen": 8,
                    "action": "goto", "target": 20})
        );

        let selector = Selector::new(
            Prefix::new("10.0.0.0".parse().unwrap(), 8).unwrap(),
            Prefix::new("192.0.2.0".parse().unwrap(), 24).unwrap(),
        )
        .unwrap();
        writers
            .policies
            .add(
                PolicySpec::new(selector, Direction::Fwd)
                    .priority(5)
                    .action(Action::Ipsec(TemplateId(3))),
            )
            .unwrap();
        let policies = show(&t, ShowWhat::Policies);
        let p = &policies[0];
        assert_eq!(
            (
                &p["src"],
                &p["dst"],
                &p["dir"],
                &p["priority"],
                &p["action"],
                &p["tmpl"]
            ),
            (
                &json!("10.0.0.0/8"),
                &json!("192.0.2.0/24"),
                &json!("fwd"),
                &json!(5),
                &json!("allow"),
                &json!(3)
            ),
            "{p}"
        );
    }
}
