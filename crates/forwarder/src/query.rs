//! Questions about the running instance's tables (`xfwd show`, `xfwd route get`), their
//! one-line wire form on the control socket, and how they are answered from a set of
//! mirrored tables, as text or as `ip -j`'s JSON.
//!
//! ```
//! use forwarder::query::{Query, Shown};
//! let q = Query::Show { what: Shown::Cache, json: true };
//! assert_eq!(q.line(), "json show cache");
//! assert_eq!(Query::parse("json show cache"), Some(q));
//! ```
#![forbid(unsafe_code)]

use netlink_mirror::MirroredTables;
use netlink_mirror::cli::{RouteGetArgs, ShowArgs, ShowWhat};

/// What `xfwd show` lists: the mirrored tables, or the run loops' route caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shown {
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
    /// The valid entries of every run loop's route cache (only a running instance has them).
    Cache,
}

impl Shown {
    /// The mirrored table it lists; `None` for the route cache.
    ///
    /// ```
    /// use forwarder::query::Shown;
    /// assert_eq!(Shown::Neigh.table(), Some(netlink_mirror::cli::ShowWhat::Neigh));
    /// assert_eq!(Shown::Cache.table(), None);
    /// ```
    pub fn table(self) -> Option<ShowWhat> {
        Some(match self {
            Shown::Routes => ShowWhat::Routes,
            Shown::Addrs => ShowWhat::Addrs,
            Shown::Neigh => ShowWhat::Neigh,
            Shown::Rules => ShowWhat::Rules,
            Shown::Policies => ShowWhat::Policies,
            Shown::Links => ShowWhat::Links,
            Shown::Nexthops => ShowWhat::Nexthops,
            Shown::Cache => return None,
        })
    }

    fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }
}

/// A question about the running instance's tables, asked over the control socket: the same
/// answers as `xfwd show` / `xfwd route get` computed from a fresh mirror, but from the tables
/// the running pipeline reads, in milliseconds; `json`: as `ip -j` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// `xfwd show WHAT`.
    Show {
        /// What to list.
        what: Shown,
        /// As JSON.
        json: bool,
    },
    /// `xfwd route get ADDR [SELECTOR...]`.
    RouteGet {
        /// The lookup.
        args: RouteGetArgs,
        /// As JSON.
        json: bool,
    },
}

impl Query {
    /// The request line (`[json] show WHAT`, `[json] route-get ADDR SELECTOR...`).
    pub fn line(&self) -> String {
        let (json, words) = match self {
            Query::Show { what, json } => (*json, vec!["show".to_owned(), what.name()]),
            Query::RouteGet { args, json } => {
                let mut words = vec!["route-get".to_owned(), args.addr.to_string()];
                words.extend(args.selectors.iter().cloned());
                (*json, words)
            }
        };
        let line = words.join(" ");
        if json { format!("json {line}") } else { line }
    }

    /// Parses a request line; `None` when it is not a query.
    pub fn parse(line: &str) -> Option<Query> {
        use clap::ValueEnum;
        let mut words = line.split_whitespace().peekable();
        let json = words.next_if_eq(&"json").is_some();
        match words.next()? {
            "show" => {
                let what = Shown::from_str(words.next()?, false).ok()?;
                words.next().is_none().then_some(Query::Show { what, json })
            }
            "route-get" => Some(Query::RouteGet {
                args: RouteGetArgs {
                    addr: words.next()?.parse().ok()?,
                    selectors: words.map(str::to_owned).collect(),
                    netns: None,
                },
                json,
            }),
            _ => None,
        }
    }
}

/// Lists a mirrored table as text (`xfwd show`) or as `ip -j`'s JSON array (one line).
///
/// ```
/// use netlink_mirror::{MirroredTables, cli::ShowWhat};
/// let (t, _writers) = MirroredTables::new(addr_table::NetnsId(1), false);
/// assert_eq!(forwarder::query::show_table(&t, ShowWhat::Links, true), "[]\n");
/// ```
pub fn show_table(t: &MirroredTables, what: ShowWhat, json: bool) -> String {
    if json {
        format!("{}\n", netlink_mirror::json::show(t, what))
    } else {
        netlink_mirror::cli::show(t, &ShowArgs { what, netns: None })
    }
}

fn dev_name(t: &MirroredTables, ifindex: u32) -> String {
    let guard = crossbeam_epoch::pin();
    t.links
        .get(ifindex, &guard)
        .map_or_else(|| format!("if{ifindex}"), |l| l.name.clone())
}

/// Lists the route caches' entries (from [`CacheBoard::ask`](crate::cache_report::CacheBoard::ask)),
/// one line each, or as a JSON array whose objects name devices as `ip -j` does (`iif`,
/// `dev`).
///
/// ```
/// use dataplane::route::{Reject, Route};
/// use forwarder::cache_report::CachedRoute;
/// let (t, mut writers) = netlink_mirror::MirroredTables::new(addr_table::NetnsId(1), false);
/// writers.links.upsert(neigh_table::Link::new(3, "eth1"));
/// let key = dst_cache::FlowKey::v4("192.0.2.1".parse().unwrap(), 0, 3);
/// let entries = [CachedRoute::new(0, &key, &Route::Reject(Reject::Prohibit), u64::MAX, 0)];
/// assert_eq!(forwarder::query::show_cache(&t, &entries, false), "192.0.2.1 iif eth1 queue 0 prohibit\n");
/// let json: serde_json::Value = serde_json::from_str(&forwarder::query::show_cache(&t, &entries, true)).unwrap();
/// assert_eq!((json[0]["iif"].as_str(), json[0]["decision"].as_str()), (Some("eth1"), Some("prohibit")));
/// ```
pub fn show_cache(
    t: &MirroredTables,
    entries: &[crate::cache_report::CachedRoute],
    json: bool,
) -> String {
    use std::fmt::Write as _;
    if json {
        let list: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let mut v = serde_json::to_value(e).unwrap_or_default();
                v["iif"] = dev_name(t, e.iif).into();
                if let Some(oif) = e.oif {
                    v["dev"] = dev_name(t, oif).into();
                    if let Some(o) = v.as_object_mut() {
                        o.remove("oif");
                    }
                }
                v
            })
            .collect();
        return format!("{}\n", serde_json::Value::Array(list));
    }
    let mut out = String::new();
    for e in entries {
        let _ = write!(out, "{} iif {}", e.dst, dev_name(t, e.iif));
        if e.tos != 0 {
            let _ = write!(out, " tos {:#04x}", e.tos);
        }
        let _ = write!(out, " queue {} {}", e.queue, e.decision);
        if let Some(r) = e.reason {
            let _ = write!(out, " {r}");
        }
        if let Some(nh) = e.next_hop {
            let _ = write!(out, " nexthop {nh}");
        }
        if let Some(oif) = e.oif {
            let _ = write!(out, " dev {}", dev_name(t, oif));
        }
        if let Some(l) = &e.lladdr {
            let _ = write!(out, " lladdr {l}");
        }
        if let Some(m) = e.mtu {
            let _ = write!(out, " mtu {m}");
        }
        if let Some(ms) = e.expires_ms {
            let _ = write!(out, " expires {ms}ms");
        }
        out.push('\n');
    }
    out
}

/// `route get` from the mirrored tables (the `ip route get` line or object), followed by the
/// pipeline's own answer for such a packet (see [`explain`](crate::explain)): as a second
/// line `    xfwd VERDICT ...`, or as the object's `xfwd` key. `Err` carries the kernel's
/// message (and the pipeline's line) when there is no route.
///
/// # Errors
/// As [`netlink_mirror::cli::route_get`].
pub fn route_get(
    t: &MirroredTables,
    args: &RouteGetArgs,
    pipeline: Result<Option<crate::explain::PipelineAnswer>, String>,
    json: bool,
) -> Result<String, String> {
    let xfwd_line = match &pipeline {
        Ok(Some(p)) => Some(format!("    {p}")),
        Ok(None) => None,
        Err(e) => Some(format!("    xfwd cannot say: {e}")),
    };
    let answer = match netlink_mirror::cli::route_answer(t, args) {
        Ok(a) => a,
        Err(e) => {
            let mut text = e.to_string();
            if let Some(line) = xfwd_line {
                text.push('\n');
                text.push_str(&line);
            }
            return Err(text);
        }
    };
    if json {
        let mut value = netlink_mirror::json::route_get(&answer);
        let xfwd = match pipeline {
            Ok(Some(p)) => serde_json::to_value(p).unwrap_or_default(),
            Ok(None) => serde_json::Value::Null,
            Err(e) => serde_json::json!({ "error": e }),
        };
        if !xfwd.is_null() {
            value[0]["xfwd"] = xfwd;
        }
        return Ok(format!("{value}\n"));
    }
    let mut text = answer.to_string();
    if let Some(line) = xfwd_line {
        text.push('\n');
        text.push_str(&line);
    }
    text.push('\n');
    Ok(text)
}
