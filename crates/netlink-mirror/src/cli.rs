//! The command line as library code, so the `xfwd` binary can reuse it: `route get` in the
//! format of `ip route get`, and `show routes|addrs|neigh|rules|policies`.
//!
//! The formatting functions are always there; the clap derives on [`RouteGetArgs`],
//! [`ShowArgs`] and [`ShowWhat`] (so a binary can embed them as subcommands) come with the
//! crate's `cli` feature, which also builds the `xfwd-mirror` binary.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use addr_table::Scope as AddrScope;
use crossbeam_epoch::Guard;
use fib_trie::multipath::{HashFields, HashKeys, MultipathPolicy};
use fib_trie::{
    Fib, FibAlias, FibResult, FibRule, Flow, Gateway, LookupError, NextHop, RouteType, RuleAction,
    Scope, ids,
};
use policy_tree::{Action, Direction, PolicyType};

use crate::kernel_routes::key_of;
use crate::key::IpKey;
use crate::tables::MirroredTables;

/// `route get ADDR [from ADDR] [iif DEV] [oif DEV] [mark N] [tos T] [ipproto P] [sport N]
/// [dport N] [--netns NS]`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RouteGetArgs {
    /// The destination address.
    pub addr: IpAddr,
    /// Selectors as `ip route get` takes them: `from ADDR`, `iif DEV`, `oif DEV`, `mark N`,
    /// `tos N`.
    #[cfg_attr(feature = "cli", arg(value_name = "SELECTOR"))]
    pub selectors: Vec<String>,
    /// The network namespace (a name under /run/netns or a path); the current one if absent.
    #[cfg_attr(feature = "cli", arg(long))]
    pub netns: Option<String>,
}

/// What `show` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ShowWhat {
    /// Routes of every table, IPv4 then IPv6 (`ip route show table all`).
    Routes,
    /// Interface addresses.
    Addrs,
    /// Neighbours.
    Neigh,
    /// Policy rules, IPv4 then IPv6.
    Rules,
    /// xfrm policies.
    Policies,
    /// Interfaces.
    Links,
    /// Nexthop objects (`ip nexthop show`).
    Nexthops,
}

/// `show routes|addrs|neigh|rules|policies|links [--netns NS]`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ShowArgs {
    /// What to list.
    pub what: ShowWhat,
    /// The network namespace (a name under /run/netns or a path); the current one if absent.
    #[cfg_attr(feature = "cli", arg(long))]
    pub netns: Option<String>,
}

/// Why `route get` printed no route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// A selector that is not understood.
    #[error("bad selector: {0}")]
    Selector(String),
    /// `iif`/`oif` names no interface.
    #[error("Cannot find device \"{0}\"")]
    NoDevice(String),
    /// `from` is of another family than the destination.
    #[error("from {0} is not of the destination's family")]
    Family(IpAddr),
    /// The lookup failed as the kernel's would, with its errno's text.
    #[error("RTNETLINK answers: {}", errno_text(.0.errno()))]
    Lookup(LookupError),
}

fn errno_text(errno: i32) -> &'static str {
    match errno {
        libc::ENETUNREACH => "Network is unreachable",
        libc::EINVAL => "Invalid argument",
        libc::EHOSTUNREACH => "No route to host",
        libc::EACCES => "Permission denied",
        _ => "Unknown error",
    }
}

/// Parsed `route get` selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Selectors {
    from: Option<IpAddr>,
    iif: Option<String>,
    oif: Option<String>,
    mark: u32,
    tos: u8,
    ipproto: u8,
    sport: u16,
    dport: u16,
}

fn parse_selectors(words: &[String]) -> Result<Selectors, CliError> {
    let mut s = Selectors::default();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| CliError::Selector(format!("{w} needs a value")))?;
        let bad = || CliError::Selector(format!("{w} {value}"));
        let number = |v: &str| {
            v.strip_prefix("0x").map_or_else(
                || v.parse::<u32>().ok(),
                |h| u32::from_str_radix(h, 16).ok(),
            )
        };
        match w.as_str() {
            "from" => s.from = Some(value.parse().map_err(|_| bad())?),
            "iif" => s.iif = Some(value.clone()),
            "oif" => s.oif = Some(value.clone()),
            "mark" => s.mark = number(value).ok_or_else(bad)?,
            "ipproto" => {
                s.ipproto = match value.as_str() {
                    "tcp" => 6,
                    "udp" => 17,
                    "icmp" => 1,
                    "ipv6-icmp" | "icmpv6" => 58,
                    "sctp" => 132,
                    v => number(v)
                        .and_then(|p| u8::try_from(p).ok())
                        .ok_or_else(bad)?,
                }
            }
            "sport" => s.sport = value.parse().map_err(|_| bad())?,
            "dport" => s.dport = value.parse().map_err(|_| bad())?,
            "tos" | "dsfield" => {
                s.tos = number(value)
                    .and_then(|t| u8::try_from(t).ok())
                    .ok_or_else(bad)?
            }
            _ => return Err(bad()),
        }
    }
    Ok(s)
}

pub(crate) fn dev_name(t: &MirroredTables, ifindex: u32, guard: &Guard) -> String {
    t.links
        .get(ifindex, guard)
        .map_or_else(|| format!("if{ifindex}"), |l| l.name.clone())
}

fn dev_index(t: &MirroredTables, name: &str, guard: &Guard) -> Result<u32, CliError> {
    t.links
        .by_name(name, guard)
        .map(|l| l.ifindex)
        .ok_or_else(|| CliError::NoDevice(name.to_owned()))
}

/// The name `ip` prints for a table id.
pub fn table_name(id: u32) -> String {
    match id {
        ids::LOCAL => "local".into(),
        ids::MAIN => "main".into(),
        ids::DEFAULT => "default".into(),
        n => n.to_string(),
    }
}

/// The keyword `ip` prints for a route type.
pub fn type_name(t: RouteType) -> &'static str {
    match t {
        RouteType::Unicast => "unicast",
        RouteType::Local => "local",
        RouteType::Broadcast => "broadcast",
        RouteType::Anycast => "anycast",
        RouteType::Multicast => "multicast",
        RouteType::Blackhole => "blackhole",
        RouteType::Unreachable => "unreachable",
        RouteType::Prohibit => "prohibit",
        RouteType::Throw => "throw",
        RouteType::Kernel => "kernel",
    }
}

/// The multipath hash of a `route get` query: the pipeline's
/// ([`fib_trie::multipath::flow_hash`], over the fields of the family's policy; the addresses
/// when the kernel chooses), so both name the same member. Not the kernel's hash: with ECMP,
/// the next hop printed may differ from the one `ip route get` names.
fn flow_hash(fields: Option<HashFields>, src: IpAddr, dst: IpAddr, sel: &Selectors) -> u32 {
    let wide = |a: IpAddr| match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    let keys = HashKeys {
        src: wide(src),
        dst: wide(dst),
        proto: sel.ipproto,
        sport: sel.sport,
        dport: sel.dport,
        flowlabel: 0,
    };
    let fields = fields.unwrap_or(HashFields::SRC_IP.with(HashFields::DST_IP));
    fib_trie::multipath::flow_hash(fields, &keys)
}

/// Looks `args.addr` up in the mirrored tables and prints the answer as `ip route get` does:
/// the type when not unicast, the address, `from` when given, `via`, `dev`, `table` when not
/// main, `src` (IPv6: always `from`, `iif`, and the metric); IPv4 answers have their cache
/// line when it says something (`<local>`, the route's metrics, `iif`). The `uid` the kernel
/// prints for output routes and the IPv6 route preference (`pref medium`: the mirror does not
/// keep it) are left out.
///
/// ```
/// use netlink_mirror::MirroredTables;
/// use netlink_mirror::cli::{route_get, RouteGetArgs};
/// use fib_trie::{InsertFlags, NextHop, Route};
///
/// let (t, mut writers) = MirroredTables::new(addr_table::NetnsId(1), false);
/// writers.fib4.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(0x0a00_0001), 2)]), InsertFlags::ADD).unwrap();
/// let args = RouteGetArgs { addr: "8.8.8.8".parse().unwrap(), selectors: vec![], netns: None };
/// assert_eq!(route_get(&t, &args).unwrap(), "8.8.8.8 via 10.0.0.1 dev if2");
/// ```
///
/// # Errors
/// Bad selectors, unknown devices, and lookup failures ([`CliError::Lookup`], printed as the
/// kernel's answer).
pub fn route_get(t: &MirroredTables, args: &RouteGetArgs) -> Result<String, CliError> {
    route_answer(t, args).map(|a| a.to_string())
}

/// What `route get` found, field by field as `ip route get` prints them; rendered as text by
/// its `Display` (the `ip route get` line) and as `ip -j route get`'s object by
/// [`json::route_get`](crate::json::route_get).
///
/// ```
/// use netlink_mirror::MirroredTables;
/// use netlink_mirror::cli::{route_answer, RouteGetArgs};
/// use fib_trie::{InsertFlags, NextHop, Route};
///
/// let (t, mut writers) = MirroredTables::new(addr_table::NetnsId(1), false);
/// writers.fib4.insert(&Route::unicast(0, 0, 254, vec![NextHop::new(Some(0x0a00_0001), 2)]), InsertFlags::ADD).unwrap();
/// let args = RouteGetArgs { addr: "8.8.8.8".parse().unwrap(), selectors: vec![], netns: None };
/// let answer = route_answer(&t, &args).unwrap();
/// assert_eq!((answer.gateway.as_deref(), answer.oif), (Some("10.0.0.1"), Some(2)));
/// assert_eq!(answer.to_string(), "8.8.8.8 via 10.0.0.1 dev if2");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteAnswer {
    /// The route's type.
    pub route_type: RouteType,
    /// The destination looked up.
    pub dst: IpAddr,
    /// `from`: the selector's source, or `::` for IPv6 without one (as `ip` prints it).
    pub from: Option<IpAddr>,
    /// The gateway as `ip` prints it after `via` (`inet6 fe80::1` for an IPv6 gateway of an
    /// IPv4 route).
    pub gateway: Option<String>,
    /// The output interface (the loopback device for local destinations).
    pub oif: Option<u32>,
    /// Its name.
    pub dev: Option<String>,
    /// The table the answer came from (local and main are one table without custom rules:
    /// main).
    pub table: u32,
    /// The source address the kernel would pick (none with `from` or `iif`).
    pub prefsrc: Option<IpAddr>,
    /// The `iif` selector's device name.
    pub iif: Option<String>,
    /// The `mark` selector (0: none).
    pub mark: u32,
    /// The route's priority (printed for IPv6).
    pub metric: u32,
    /// The route's metrics (`mtu 1400`).
    pub metrics: fib_trie::Metrics,
}

impl std::fmt::Display for RouteAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = self.dst.is_ipv6();
        if self.route_type != RouteType::Unicast {
            write!(f, "{} ", type_name(self.route_type))?;
        }
        write!(f, "{}", self.dst)?;
        if let Some(from) = self.from {
            write!(f, " from {from}")?;
        }
        if let Some(gw) = &self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(dev) = &self.dev {
            write!(f, " dev {dev}")?;
        }
        if self.table != ids::MAIN {
            write!(f, " table {}", table_name(self.table))?;
        }
        if let Some(s) = self.prefsrc {
            write!(f, " src {s}")?;
        }
        if v6 {
            write!(f, " metric {}", self.metric)?;
            if let Some(iif) = &self.iif {
                write!(f, " iif {iif}")?;
            }
            if !self.metrics.is_empty() {
                write!(f, " {}", self.metrics)?;
            }
            return Ok(());
        }
        // `ip route get` shows an IPv4 answer's cache flags, metrics and input interface on
        // the cached route's line.
        let mut cache = Vec::new();
        if self.route_type == RouteType::Local {
            cache.push("<local>".to_owned());
        }
        if !self.metrics.is_empty() {
            cache.push(self.metrics.to_string());
        }
        if let Some(iif) = &self.iif {
            cache.push(format!("iif {iif}"));
        }
        if !cache.is_empty() {
            write!(f, "\n    cache {}", cache.join(" "))?;
        }
        Ok(())
    }
}

/// Looks `args.addr` up in the mirrored tables as [`route_get`] does, and returns the answer
/// field by field.
///
/// # Errors
/// As [`route_get`].
pub fn route_answer(t: &MirroredTables, args: &RouteGetArgs) -> Result<RouteAnswer, CliError> {
    let sel = parse_selectors(&args.selectors)?;
    let guard = crossbeam_epoch::pin();
    let iif = sel
        .iif
        .as_deref()
        .map(|n| dev_index(t, n, &guard))
        .transpose()?;
    let oif = sel
        .oif
        .as_deref()
        .map(|n| dev_index(t, n, &guard))
        .transpose()?;
    match args.addr {
        IpAddr::V4(d) => {
            let from = match sel.from {
                None => None,
                Some(IpAddr::V4(f)) => Some(u32::from(f)),
                Some(other) => return Err(CliError::Family(other)),
            };
            get::<u32>(t, &t.fib4, u32::from(d), from, iif, oif, &sel, &guard)
        }
        IpAddr::V6(d) => {
            let from = match sel.from {
                None => None,
                Some(IpAddr::V6(f)) => Some(u128::from(f)),
                Some(other) => return Err(CliError::Family(other)),
            };
            get::<u128>(t, &t.fib6, u128::from(d), from, iif, oif, &sel, &guard)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn get<K: IpKey>(
    t: &MirroredTables,
    fib: &Fib<K>,
    dst: K,
    from: Option<K>,
    iif: Option<u32>,
    oif: Option<u32>,
    sel: &Selectors,
    guard: &Guard,
) -> Result<RouteAnswer, CliError> {
    let flow = Flow {
        dst,
        src: from.unwrap_or(K::ZERO),
        tos: sel.tos,
        iif: iif.unwrap_or(0),
        oif: oif.unwrap_or(0),
        mark: sel.mark,
        scope: Scope::UNIVERSE,
    };
    let v6 = K::FAMILY == libc::AF_INET6 as u8;
    // An IPv4 input route on a device with forwarding off: the kernel answers "No route to
    // host" for whatever is not local or broadcast (`ip_route_input_slow`). IPv6 routes
    // input as usual and drops in `ip6_forward`, so `route get` shows the route.
    let forwarding_off = !v6
        && iif.is_some_and(|i| {
            t.devconf.ingress(i, false, guard) == neigh_table::Ingress::ForwardingOff
        });
    let r: FibResult<'_, K> = match fib.lookup(&flow, guard) {
        Err(_) if forwarding_off => return Err(CliError::Lookup(LookupError::Unreachable)),
        r => r.map_err(CliError::Lookup)?,
    };
    if forwarding_off && !matches!(r.route_type(), RouteType::Local | RouteType::Broadcast) {
        return Err(CliError::Lookup(LookupError::Unreachable));
    }
    let rtype = r.route_type();
    let hop: Option<&NextHop<K>> = if r.nexthops().len() > 1 {
        let fields = match fib.multipath_policy() {
            MultipathPolicy::Fields(f) => Some(f),
            MultipathPolicy::Kernel(_) => None,
        };
        r.select_path(flow_hash(fields, flow.src.to_ip(), dst.to_ip(), sel))
    } else {
        r.nexthops().get(r.nh_sel)
    };
    // Packets to local addresses leave through the loopback device.
    let out_dev = if matches!(rtype, RouteType::Local) {
        t.links
            .to_vec()
            .into_iter()
            .find(|l| l.flags.contains(neigh_table::LinkFlags::LOOPBACK))
            .map(|l| l.ifindex)
    } else {
        hop.map(|h| h.ifindex)
    };
    // Without custom rules the kernel looks local and main up as one table: main.
    let table = match r.table() {
        ids::LOCAL if !fib.has_custom_rules() => ids::MAIN,
        id => id,
    };
    // With `from`, the flow's source is that address and the kernel prints no `src`; input
    // routes (`iif`) have none either.
    let prefsrc = if iif.is_some() || from.is_some() {
        None
    } else {
        prefsrc::<K>(t, r.alias, dst, hop, guard)
    };
    Ok(RouteAnswer {
        route_type: rtype,
        dst: dst.to_ip(),
        from: from
            .map(|f| f.to_ip())
            .or(v6.then_some(IpAddr::V6(Ipv6Addr::UNSPECIFIED))),
        gateway: hop.and_then(|h| h.gateway).map(via_text),
        oif: out_dev,
        dev: out_dev.map(|i| dev_name(t, i, guard)),
        table,
        prefsrc,
        iif: iif.and(sel.iif.clone()),
        mark: sel.mark,
        metric: r.alias.info.priority,
        metrics: r.alias.info.metrics.clone(),
    })
}

/// A gateway as `ip` prints it after `via`: the address, with `inet6 ` before an IPv6 gateway
/// of an IPv4 route (`via inet6 fe80::1`).
pub(crate) fn via_text<K: IpKey>(g: Gateway<K>) -> String {
    match g {
        Gateway::Same(k) => k.to_ip().to_string(),
        Gateway::Inet6(a) => format!("inet6 {}", Ipv6Addr::from(a)),
    }
}

/// The source address the kernel would pick (`fib_result_prefsrc`, or the destination
/// itself for local routes).
fn prefsrc<K: IpKey>(
    t: &MirroredTables,
    alias: &FibAlias<K>,
    dst: K,
    hop: Option<&NextHop<K>>,
    guard: &Guard,
) -> Option<IpAddr> {
    if let Some(p) = alias.info.prefsrc {
        return Some(p.to_ip());
    }
    if alias.route_type == RouteType::Local {
        return Some(dst.to_ip());
    }
    let hop = hop?;
    match dst.to_ip() {
        IpAddr::V4(_) => {
            // An IPv6 gateway (`via inet6`) selects as no gateway does (the kernel passes 0).
            let gw = hop.gateway.map(|g| match K::gateway_ip(g) {
                IpAddr::V4(a) => a,
                IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
            });
            t.addrs
                .select_src_v4(hop.ifindex, gw, AddrScope(alias.info.scope.0), guard)
                .map(IpAddr::V4)
        }
        IpAddr::V6(d) => t.addrs.select_src_v6(hop.ifindex, d, guard).map(IpAddr::V6),
    }
}

/// Lists what `args.what` names, one object per line (multipath next hops indented).
pub fn show(t: &MirroredTables, args: &ShowArgs) -> String {
    let guard = crossbeam_epoch::pin();
    let mut out = String::new();
    match args.what {
        ShowWhat::Routes => {
            let book = &t.kernel_routes;
            show_routes(t, &t.fib4, &mut out, &guard, |r| {
                book.v4().get(&key_of(r)).map(|s| s.reason)
            });
            show_routes(t, &t.fib6, &mut out, &guard, |r| {
                book.v6().get(&key_of(r)).map(|s| s.reason)
            });
        }
        ShowWhat::Addrs => {
            for (ifindex, list) in t.addrs.interfaces::<Ipv4Addr>(&guard) {
                for a in list {
                    let _ = writeln!(
                        out,
                        "{}: {} inet {}/{} scope {}{}",
                        ifindex,
                        dev_name(t, ifindex, &guard),
                        a.addr,
                        a.prefix_len,
                        scope_name(a.scope.0),
                        if a.is_secondary() { " secondary" } else { "" }
                    );
                }
            }
            for (ifindex, list) in t.addrs.interfaces::<Ipv6Addr>(&guard) {
                for a in list {
                    let _ = writeln!(
                        out,
                        "{}: {} inet6 {}/{} scope {}",
                        ifindex,
                        dev_name(t, ifindex, &guard),
                        a.addr,
                        a.prefix_len,
                        scope_name(a.scope.0)
                    );
                }
            }
        }
        ShowWhat::Neigh => {
            for n in t.neigh.to_vec() {
                let _ = write!(out, "{} dev {}", n.addr, dev_name(t, n.ifindex, &guard));
                if let Some(m) = n.lladdr {
                    let _ = write!(
                        out,
                        " lladdr {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                        m[0], m[1], m[2], m[3], m[4], m[5]
                    );
                }
                let _ = writeln!(out, " {}", n.state);
            }
        }
        ShowWhat::Rules => {
            for r in t.fib4.rules(&guard) {
                let _ = writeln!(out, "{}", rule_text(t, r, &guard));
            }
            for r in t.fib6.rules(&guard) {
                let _ = writeln!(out, "{}", rule_text(t, r, &guard));
            }
        }
        ShowWhat::Policies => {
            for p in t.policies.dump() {
                let dir = match p.dir {
                    Direction::In => "in",
                    Direction::Out => "out",
                    Direction::Fwd => "fwd",
                };
                let action = match p.action {
                    Action::Allow => "allow".to_owned(),
                    Action::Block => "block".to_owned(),
                    Action::Ipsec(id) => format!("allow tmpl {}", id.0),
                    Action::IpsecOptional(id) => format!("allow tmpl {} level use", id.0),
                    Action::Punt => "kernel (not evaluated here)".to_owned(),
                };
                let _ = write!(out, "src {} dst {}", p.selector.src, p.selector.dst);
                if p.selector.proto != 0 {
                    let _ = write!(out, " proto {}", p.selector.proto);
                }
                let _ = write!(out, " dir {dir} priority {} action {action}", p.priority);
                if p.ptype == PolicyType::Sub {
                    let _ = write!(out, " ptype sub");
                }
                if p.if_id != 0 {
                    let _ = write!(out, " if_id {}", p.if_id);
                }
                if p.selector.ifindex != 0 {
                    let _ = write!(out, " dev {}", p.selector.ifindex);
                }
                if p.mark != policy_tree::Mark::ANY {
                    let _ = write!(out, " mark {:#x}/{:#x}", p.mark.value, p.mark.mask);
                }
                let _ = writeln!(out, " index {}", p.index);
            }
        }
        ShowWhat::Nexthops => show_nexthops(t, &mut out, &guard),
        ShowWhat::Links => {
            for l in t.links.to_vec() {
                let _ = writeln!(
                    out,
                    "{}: {} mtu {} state {}{}",
                    l.ifindex,
                    l.name,
                    l.mtu,
                    l.oper,
                    if l.is_up() { " up" } else { "" }
                );
            }
        }
    }
    out
}

/// Nexthop objects as `ip nexthop show` prints them: `id N via GW dev DEV [onlink]`,
/// `id N dev DEV`, `id N blackhole`, `id N group A/W,B type resilient buckets K`; objects the
/// FIB cannot represent say why (`kernel decides: REASON`).
fn show_nexthops(t: &MirroredTables, out: &mut String, guard: &Guard) {
    use crate::map::NexthopSpec;
    let nexthops = t.nexthops.lock();
    for (id, e) in nexthops.iter() {
        let _ = write!(out, "id {id}");
        match &e.spec {
            NexthopSpec::Single {
                gateway,
                ifindex,
                flags,
                ..
            } => {
                if let Some(g) = gateway {
                    let _ = write!(out, " via {g}");
                }
                if *ifindex != 0 {
                    let _ = write!(out, " dev {}", dev_name(t, *ifindex, guard));
                }
                if flags & fib_trie::NextHopFlags::ONLINK.0 != 0 {
                    out.push_str(" onlink");
                }
                if flags & fib_trie::NextHopFlags::DEAD.0 != 0 {
                    out.push_str(" dead");
                }
                if flags & fib_trie::NextHopFlags::LINKDOWN.0 != 0 {
                    out.push_str(" linkdown");
                }
            }
            NexthopSpec::Blackhole => out.push_str(" blackhole"),
            NexthopSpec::Group { members, buckets } => {
                let list: Vec<String> = members
                    .iter()
                    .map(|(m, w)| {
                        if *w == 1 {
                            m.to_string()
                        } else {
                            format!("{m}/{w}")
                        }
                    })
                    .collect();
                let _ = write!(out, " group {}", list.join(","));
                if let Some(n) = buckets {
                    let _ = write!(out, " type resilient buckets {n}");
                }
            }
            NexthopSpec::Unrepresentable(why) => {
                let _ = write!(out, " kernel decides: {why}");
            }
        }
        out.push('\n');
    }
}

/// A route's destination as `ip` prints it: `default` for a zero-length prefix, the bare
/// address for a host route (/32, /128), else `ADDR/LEN`.
///
/// ```
/// use netlink_mirror::cli::prefix_text;
///
/// assert_eq!(prefix_text(0u32, 0), "default");
/// assert_eq!(prefix_text(0x0a00_0001u32, 32), "10.0.0.1");
/// assert_eq!(prefix_text(0x0a00_0000u32, 8), "10.0.0.0/8");
/// ```
pub fn prefix_text<K: IpKey>(prefix: K, plen: u8) -> String {
    if plen == 0 {
        "default".into()
    } else if plen == K::BITS {
        prefix.to_ip().to_string()
    } else {
        format!("{}/{plen}", prefix.to_ip())
    }
}

/// The name `ip` prints for a route protocol (`/etc/iproute2/rt_protos`), else the number.
///
/// ```
/// assert_eq!(netlink_mirror::cli::protocol_name(186), "bgp");
/// assert_eq!(netlink_mirror::cli::protocol_name(77), "77");
/// ```
pub fn protocol_name(protocol: u8) -> String {
    match protocol {
        0 => "unspec",
        1 => "redirect",
        2 => "kernel",
        3 => "boot",
        4 => "static",
        8 => "gated",
        9 => "ra",
        10 => "mrt",
        11 => "zebra",
        12 => "bird",
        13 => "dnrouted",
        14 => "xorp",
        15 => "ntk",
        16 => "dhcp",
        17 => "mrouted",
        18 => "keepalived",
        42 => "babel",
        99 => "openr",
        186 => "bgp",
        187 => "isis",
        188 => "ospf",
        189 => "rip",
        192 => "eigrp",
        n => return n.to_string(),
    }
    .into()
}

pub(crate) fn scope_name(s: u8) -> String {
    match s {
        0 => "global".into(),
        200 => "site".into(),
        253 => "link".into(),
        254 => "host".into(),
        255 => "nowhere".into(),
        n => n.to_string(),
    }
}

fn show_routes<K: IpKey>(
    t: &MirroredTables,
    fib: &Fib<K>,
    out: &mut String,
    guard: &Guard,
    reason: impl Fn(&fib_trie::Route<K>) -> Option<&'static str>,
) {
    for id in fib.table_ids() {
        let Some(table) = fib.table(id, guard) else {
            continue;
        };
        for (prefix, plen, a) in table.dump(guard) {
            if a.route_type != RouteType::Unicast {
                let _ = write!(out, "{} ", type_name(a.route_type));
            }
            let _ = write!(out, "{}", prefix_text(prefix, plen));
            let info = &a.info;
            if let Some(o) = &info.nh_object {
                let _ = write!(out, " nhid {}", o.id());
            }
            // A route through a nexthop object lists the object's next hops, as the kernel's
            // dump does.
            let hops = route_hops(info, guard);
            if let [h] = hops {
                if let Some(g) = h.gateway {
                    let _ = write!(out, " via {}", via_text(g));
                }
                let _ = write!(out, " dev {}", dev_name(t, h.ifindex, guard));
            }
            if id != ids::MAIN {
                let _ = write!(out, " table {}", table_name(id));
            }
            // `ip` leaves out `proto boot` (what `ip route add` sets).
            if info.protocol != 3 {
                let _ = write!(out, " proto {}", protocol_name(info.protocol));
            }
            if info.scope != Scope::UNIVERSE {
                let _ = write!(out, " scope {}", scope_name(info.scope.0));
            }
            if let Some(s) = info.prefsrc {
                let _ = write!(out, " src {}", s.to_ip());
            }
            if info.priority != 0 {
                let _ = write!(out, " metric {}", info.priority);
            }
            if !info.metrics.is_empty() {
                let _ = write!(out, " {}", info.metrics);
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
                let _ = write!(out, " kernel-decides {}", reason(&r).unwrap_or("unknown"));
            } else if let Some(o) = &info.nh_object {
                if matches!(o.load(guard), fib_trie::NexthopGroup::Kernel) {
                    out.push_str(" kernel-decides nexthop");
                }
            }
            out.push('\n');
            if hops.len() > 1 {
                for h in hops {
                    let _ = write!(out, "\tnexthop");
                    if let Some(g) = h.gateway {
                        let _ = write!(out, " via {}", via_text(g));
                    }
                    let _ = writeln!(
                        out,
                        " dev {} weight {}",
                        dev_name(t, h.ifindex, guard),
                        h.weight
                    );
                }
            }
        }
    }
}

/// A route's next hops: its own, or those of the nexthop object it holds (none for a
/// blackhole or unrepresentable object).
pub(crate) fn route_hops<'g, K: IpKey>(
    info: &'g fib_trie::RouteInfo<K>,
    guard: &'g Guard,
) -> &'g [NextHop<K>] {
    match &info.nh_object {
        Some(o) => match o.load(guard) {
            fib_trie::NexthopGroup::Hops { nexthops, .. } => nexthops.as_slice(),
            _ => &[],
        },
        None => &info.nexthops,
    }
}

fn rule_text<K: IpKey>(t: &MirroredTables, r: &FibRule<K>, guard: &Guard) -> String {
    let mut s = format!("{}:\t", r.priority);
    if r.invert {
        s.push_str("not ");
    }
    match r.src {
        Some((k, l)) => {
            let _ = write!(s, "from {}/{l}", k.to_ip());
        }
        None => s.push_str("from all"),
    }
    if let Some((k, l)) = r.dst {
        let _ = write!(s, " to {}/{l}", k.to_ip());
    }
    if r.tos != 0 {
        let _ = write!(s, " tos {:#x}", r.tos);
    }
    if r.fwmask != 0 {
        let _ = write!(s, " fwmark {:#x}/{:#x}", r.fwmark, r.fwmask);
    }
    if r.iif != 0 {
        let _ = write!(s, " iif {}", dev_name(t, r.iif, guard));
    }
    if r.oif != 0 {
        let _ = write!(s, " oif {}", dev_name(t, r.oif, guard));
    }
    match r.action {
        RuleAction::Lookup(id) => {
            let _ = write!(s, " lookup {}", table_name(id));
        }
        RuleAction::Goto(p) => {
            let _ = write!(s, " goto {p}");
        }
        RuleAction::Nop => s.push_str(" nop"),
        RuleAction::Blackhole => s.push_str(" blackhole"),
        RuleAction::Unreachable => s.push_str(" unreachable"),
        RuleAction::Prohibit => s.push_str(" prohibit"),
        // The stand-in of a kernel rule the FIB cannot represent (xfwd's own word).
        RuleAction::Kernel => s.push_str(" kernel-decides rule"),
    }
    s
}

#[cfg(test)]
mod tests {
    use addr_table::{IfAddr, NetnsId};
    use fib_trie::{InsertFlags, Route};
    use neigh_table::{Link, LinkFlags};

    use super::*;

    fn tables() -> (MirroredTables, crate::TableWriters) {
        let (t, mut writers) = MirroredTables::new(NetnsId(1), false);
        let mut lo = Link::new(1, "lo");
        lo.flags = LinkFlags::UP | LinkFlags::LOOPBACK;
        writers.links.upsert(lo);
        writers.links.upsert(Link::new(2, "d0"));
        writers
            .addrs
            .add(IfAddr::new(Ipv4Addr::new(10, 1, 0, 1), 24, 2))
            .unwrap();
        let gw = u32::from(Ipv4Addr::new(10, 1, 0, 4));
        writers
            .fib4
            .insert(
                &Route::unicast(0x0a09_0000, 16, 254, vec![NextHop::new(Some(gw), 2)]),
                InsertFlags::ADD,
            )
            .unwrap();
        let mut connected = Route::unicast(0x0a01_0000, 24, 254, vec![NextHop::new(None, 2)]);
        connected.info.scope = Scope::LINK;
        connected.info.prefsrc = Some(0x0a01_0001);
        writers.fib4.insert(&connected, InsertFlags::ADD).unwrap();
        let mut local = Route::unicast(0x0a01_0001, 32, 255, vec![NextHop::new(None, 2)]);
        local.route_type = RouteType::Local;
        local.info.scope = Scope::HOST;
        local.info.prefsrc = Some(0x0a01_0001);
        writers.fib4.insert(&local, InsertFlags::ADD).unwrap();
        writers
            .fib4
            .insert(
                &Route::reject(0x0a0a_0000, 16, 254, RouteType::Blackhole),
                InsertFlags::ADD,
            )
            .unwrap();
        (t, writers)
    }

    fn get(t: &MirroredTables, line: &str) -> Result<String, CliError> {
        let mut words = line.split_whitespace().map(str::to_owned);
        let addr = words.next().unwrap().parse().unwrap();
        route_get(
            t,
            &RouteGetArgs {
                addr,
                selectors: words.collect(),
                netns: None,
            },
        )
    }

    #[test]
    fn formats_like_ip_route_get() {
        let (t, _writers) = tables();
        assert_eq!(
            get(&t, "10.9.1.1").unwrap(),
            "10.9.1.1 via 10.1.0.4 dev d0 src 10.1.0.1"
        );
        assert_eq!(
            get(&t, "10.1.0.1").unwrap(),
            "local 10.1.0.1 dev lo src 10.1.0.1\n    cache <local>"
        );
        assert_eq!(
            get(&t, "10.1.0.7 from 10.1.0.1").unwrap(),
            "10.1.0.7 from 10.1.0.1 dev d0"
        );
        assert_eq!(
            get(&t, "8.8.8.8").unwrap_err().to_string(),
            "RTNETLINK answers: Network is unreachable"
        );
        assert_eq!(
            get(&t, "10.10.0.1").unwrap_err().to_string(),
            "RTNETLINK answers: Invalid argument"
        );
        assert_eq!(
            get(&t, "10.9.1.1 iif nope"),
            Err(CliError::NoDevice("nope".into()))
        );
        assert!(matches!(
            get(&t, "10.9.1.1 from"),
            Err(CliError::Selector(_))
        ));
    }

    #[test]
    fn table_is_printed_when_not_main() {
        let (t, mut writers) = tables();
        writers
            .fib4
            .insert(
                &Route::unicast(0, 0, 100, vec![NextHop::new(Some(0x0a01_0005), 2)]),
                InsertFlags::ADD,
            )
            .unwrap();
        let mut rule = FibRule::new(10, RuleAction::Lookup(100));
        rule.fwmark = 7;
        rule.fwmask = u32::MAX;
        writers.fib4.add_rule(rule).unwrap();
        assert_eq!(
            get(&t, "8.8.8.8 mark 7").unwrap(),
            "8.8.8.8 via 10.1.0.5 dev d0 table 100 src 10.1.0.1"
        );
        // With custom rules, local answers come from the local table by name.
        assert_eq!(
            get(&t, "10.1.0.1").unwrap(),
            "local 10.1.0.1 dev lo table local src 10.1.0.1\n    cache <local>"
        );
        let listing = show(
            &t,
            &ShowArgs {
                what: ShowWhat::Rules,
                netns: None,
            },
        );
        assert!(
            listing.contains("10:\tfrom all fwmark 0x7/0xffffffff lookup 100"),
            "{listing}"
        );
        let routes = show(
            &t,
            &ShowArgs {
                what: ShowWhat::Routes,
                netns: None,
            },
        );
        assert!(
            routes.contains("blackhole 10.10.0.0/16 proto static"),
            "{routes}"
        );
    }
}
