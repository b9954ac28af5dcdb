//! Questions asked of a running xfwd on the lab, checked against the kernel of its namespace
//! (privileged): `xfwd route get` answers the `ip route get` line and then what the pipeline
//! does with such a packet (egress and neighbour as the kernel's route and neighbour table
//! say; the ICMP error of an unreachable route; a local destination punted), `-j` prints
//! what `ip -j` prints (routes, addresses, neighbours, links, rules, nexthop objects, route
//! get), also from a fresh mirror; `xfwd show cache` lists the route cache entries traffic
//! made.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use xfwd_lab::{Lab, Role, topology};

mod common;
use common::{XFWD, Xfwd, resolve_dst};

fn ip(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    let text = stdout(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every key of `ours` (but `extras`, xfwd's own) has the kernel's value.
fn agrees(ours: &Value, kernel: &Value, extras: &[&str]) -> Result<(), String> {
    let (Some(ours), Some(kernel)) = (ours.as_object(), kernel.as_object()) else {
        return Err(format!("not objects: {ours} / {kernel}"));
    };
    for (k, v) in ours {
        if extras.contains(&k.as_str()) {
            continue;
        }
        if kernel.get(k) != Some(v) {
            return Err(format!(
                "{k}: ours {v}, the kernel's {:?} (ours {ours:?}, kernel {kernel:?})",
                kernel.get(k)
            ));
        }
    }
    Ok(())
}

/// The lines of `ip route get`'s answer as xfwd prints them: without the `uid` of output
/// routes, the IPv6 route preference (which the mirror does not keep) and an empty `cache`
/// line.
fn kernel_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let mut words: Vec<&str> = l.split_whitespace().collect();
            for key in ["uid", "pref"] {
                if let Some(i) = words.iter().position(|w| *w == key) {
                    words.drain(i..(i + 2).min(words.len()));
                }
            }
            let indent = if l.starts_with(' ') { "    " } else { "" };
            format!("{indent}{}", words.join(" "))
        })
        .filter(|l| l.trim() != "cache")
        .collect()
}

/// xfwd's `route get` answer: the route's lines and the pipeline's (the last).
fn split(text: &str) -> (Vec<String>, String) {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_owned()).collect();
    let pipeline = lines.pop().unwrap_or_default();
    (lines, pipeline)
}

/// What identifies a route in a listing.
fn route_key(r: &Value) -> String {
    format!(
        "{} {} {} {} {}",
        r["type"].as_str().unwrap_or("unicast"),
        r["dst"],
        r["table"].as_str().unwrap_or("main"),
        r["dev"],
        r["gateway"]
    )
}

/// Compares xfwd's `show WHAT -j` (`ours`) with `ip -j`'s listing: each of our objects has
/// its counterpart (same identity) whose values agree on every key we print, and both list
/// as many.
fn compare_lists(
    what: &str,
    ours: &Value,
    kernel: &[Value],
    key: impl Fn(&Value) -> String,
    extras: &[&str],
) -> Result<(), String> {
    let ours = ours.as_array().ok_or("not an array")?;
    if ours.len() != kernel.len() {
        return Err(format!(
            "{what}: {} objects, the kernel {}:\n{ours:#?}\n{kernel:#?}",
            ours.len(),
            kernel.len()
        ));
    }
    for o in ours {
        let k = key(o);
        let twins: Vec<&Value> = kernel.iter().filter(|x| key(x) == k).collect();
        if !twins.iter().any(|t| agrees(o, t, extras).is_ok()) {
            let why: Vec<String> = twins
                .iter()
                .map(|t| agrees(o, t, extras).unwrap_err())
                .collect();
            return Err(format!("{what}: {k} has no equal in the kernel's: {why:?}"));
        }
    }
    Ok(())
}

/// Asks again until `check` passes (the lab's IPv6 addresses may finish duplicate address
/// detection, neighbours may change state, meanwhile).
fn eventually(what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Traffic to the IPv6 target fills the route cache; `show cache` lists the entry with the
/// egress and neighbour the pipeline uses, and no longer once a route change invalidates it.
fn check_route_cache(lab: &Lab, xfwd: &Xfwd) {
    let fwd = lab.netns(Role::Fwd);
    let src6 = topology::SRC0.ipv6.to_string();
    let v6_target = "2001:db8:1::1";
    // Before any custom rule: once there is one, the cache stays out of use, as the kernel's
    // input route hints. IPv6: the lab's IPv4 may validate sources (rp_filter inherited from
    // the host), and such decisions are never cached.
    let dst0_v6 = topology::DST0.ipv6.to_string();
    // A neighbour change (dst0 resolved again, its state refreshed) starts a new route
    // generation, which leaves earlier entries dead: send again until an entry is listed.
    let mut entry = Value::Null;
    eventually("a route cache entry for the IPv6 target", || {
        let probe = Command::new(XFWD)
            .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
            .args(["--iface", "src0", "--to-mac", &topology::FWD0.mac_string()])
            .args(["--src", &src6, "--dst", v6_target])
            .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
            .args(["--count", "20", "--rate", "5000"])
            .output()
            .unwrap();
        assert!(probe.status.success(), "{probe:?}");
        let cache = json(&xfwd.ask(&["show", "cache", "-j"]));
        entry = cache
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["dst"] == v6_target)
            .cloned()
            .ok_or(format!("no entry for {v6_target}: {cache}"))?;
        // The text form, asked right after (the same entry, unless a neighbour changed).
        let text = stdout(&xfwd.ask(&["show", "cache"]));
        let line = format!("{v6_target} iif fwd0 queue 0 forward nexthop {dst0_v6} dev fwd1");
        if !text.lines().any(|l| l.starts_with(&line)) {
            return Err(format!("no line {line:?} in {text}"));
        }
        Ok(())
    });
    assert_eq!(entry["decision"], "forward", "{entry}");
    assert_eq!(entry["iif"], "fwd0", "{entry}");
    assert_eq!(entry["dev"], "fwd1", "{entry}");
    assert_eq!(entry["lladdr"], topology::DST0.mac_string(), "{entry}");
    // A route change invalidates it: the listing shows valid entries only.
    stdout(&ip(
        &fwd,
        &["route", "add", "2001:db8:1::1/128", "via", &dst0_v6],
    ));
    eventually("the cache entry invalidated", || {
        let cache = json(&xfwd.ask(&["show", "cache", "-j"]));
        let stale = cache
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["dst"] == v6_target);
        (!stale).then_some(()).ok_or(cache.to_string())
    });
}

#[test]
fn route_get_json_and_cache_from_the_running_pipeline() {
    if !xfwd_lab::privileged("route_get_json_and_cache_from_the_running_pipeline") {
        return;
    }
    let lab = Lab::unique("fwdq")
        .unwrap()
        .with_extra_prefixes(4, 24)
        .unwrap()
        .up_scoped()
        .unwrap();
    let fwd = lab.netns(Role::Fwd);
    // Nexthop objects and a route through them, an unreachable route, a route in table 100
    // (a rule to it comes later), a route with metrics.
    let dst0 = topology::DST0.ipv4.to_string();
    for args in [
        vec!["nexthop", "add", "id", "100", "via", &dst0, "dev", "fwd1"],
        vec!["nexthop", "add", "id", "101", "group", "100"],
        vec!["nexthop", "add", "id", "102", "blackhole"],
        vec!["route", "add", "198.19.0.0/16", "nhid", "101"],
        vec!["route", "add", "unreachable", "198.51.100.0/24"],
        vec![
            "route",
            "add",
            "198.19.7.0/24",
            "via",
            &dst0,
            "table",
            "100",
        ],
        vec![
            "route",
            "add",
            "198.19.8.0/24",
            "via",
            &dst0,
            "mtu",
            "1400",
            "rtt",
            "10ms",
            "advmss",
            "lock",
            "1360",
            "congctl",
            "cubic",
        ],
    ] {
        stdout(&ip(&fwd, &args));
    }
    resolve_dst(&fwd);
    let xfwd = Xfwd::start(&lab, 'q');
    check_route_cache(&lab, &xfwd);

    // The pipeline against the kernel, for packets arriving on fwd0 from src0.
    let src4 = topology::SRC0.ipv4.to_string();
    let src6 = topology::SRC0.ipv6.to_string();
    let v4_target = "198.18.2.1";
    let v6_target = "2001:db8:1::1";
    for (target, src, ttl) in [(v4_target, &src4, 63), (v6_target, &src6, 63)] {
        let question = [target, "from", src, "iif", "fwd0"];
        let kernel = stdout(&ip(&fwd, &[&["route", "get"][..], &question].concat()));
        let ours = stdout(&xfwd.ask(&[&["route", "get"][..], &question].concat()));
        let (route, pipeline) = split(&ours);
        assert_eq!(route, kernel_lines(&kernel), "the ip route get lines");
        let kernel_first = kernel.lines().next().unwrap();
        let dev = kernel_first
            .split_whitespace()
            .skip_while(|w| *w != "dev")
            .nth(1)
            .unwrap();
        let gateway = kernel_first
            .split_whitespace()
            .skip_while(|w| *w != "via")
            .nth(1)
            .unwrap();
        let neigh = stdout(&ip(&fwd, &["neigh", "show", gateway, "dev", dev]));
        let lladdr = neigh
            .split_whitespace()
            .skip_while(|w| *w != "lladdr")
            .nth(1)
            .unwrap();
        assert_eq!(
            pipeline,
            format!("    xfwd transmit dev {dev} lladdr {lladdr} ttl {ttl} (from {src} iif fwd0)"),
            "the pipeline sends it where the kernel's route and neighbour say"
        );
        // JSON: ip -j route get's object, with the pipeline's answer under "xfwd".
        let kernel = json(&ip(
            &fwd,
            &[&["-j", "route", "get"][..], &question].concat(),
        ));
        let ours = json(&xfwd.ask(&[&["route", "get", "-j"][..], &question].concat()));
        agrees(&ours[0], &kernel[0], &["xfwd"]).unwrap();
        assert_eq!(ours[0]["xfwd"]["verdict"], "transmit", "{ours}");
        assert_eq!(ours[0]["xfwd"]["dev"], dev, "{ours}");
        assert_eq!(ours[0]["xfwd"]["lladdr"], lladdr, "{ours}");
    }
    // Without selectors: the packet enters on the first served interface from a neighbour
    // there; the route line is the kernel's output route.
    let kernel = stdout(&ip(&fwd, &["route", "get", v4_target]));
    let ours = stdout(&xfwd.ask(&["route", "get", v4_target]));
    let (route, pipeline) = split(&ours);
    assert_eq!(route, kernel_lines(&kernel));
    assert!(pipeline.starts_with("    xfwd transmit dev fwd1"), "{ours}");
    // Through nexthop objects, a rule's table, and a route with metrics.
    stdout(&ip(
        &fwd,
        &["rule", "add", "fwmark", "7", "lookup", "100", "pref", "100"],
    ));
    std::thread::sleep(Duration::from_millis(300));
    for question in [
        vec!["198.19.0.1", "from", &src4, "iif", "fwd0"],
        vec!["198.19.7.1", "mark", "7"],
        vec!["198.19.8.1"],
    ] {
        let kernel = json(&ip(
            &fwd,
            &[&["-j", "route", "get"][..], &question].concat(),
        ));
        let ours = json(&xfwd.ask(&[&["route", "get", "-j"][..], &question].concat()));
        agrees(&ours[0], &kernel[0], &["xfwd"]).unwrap();
    }
    // An unreachable route: the kernel's refusal, and the pipeline's ICMP host unreachable
    // back out of fwd0.
    let question = ["198.51.100.1", "from", &src4, "iif", "fwd0"];
    let kernel = ip(&fwd, &[&["route", "get"][..], &question].concat());
    let ours = xfwd.ask(&[&["route", "get"][..], &question].concat());
    assert_eq!(ours.status.code(), Some(2), "{ours:?}");
    let (kernel_err, our_err) = (
        String::from_utf8_lossy(&kernel.stderr),
        String::from_utf8_lossy(&ours.stderr),
    );
    let (route, pipeline) = split(&our_err);
    assert_eq!(route, kernel_lines(&kernel_err));
    assert_eq!(
        pipeline,
        format!("    xfwd reply icmp type 3 code 1 dev fwd0 (from {src4} iif fwd0)"),
        "{our_err}"
    );
    // fwd0's own address: the kernel's (punted as local).
    let local = topology::FWD0.ipv4.to_string();
    let question = [local.as_str(), "from", &src4, "iif", "fwd0"];
    let kernel = stdout(&ip(&fwd, &[&["route", "get"][..], &question].concat()));
    let ours = stdout(&xfwd.ask(&[&["route", "get"][..], &question].concat()));
    let (route, pipeline) = split(&ours);
    assert_eq!(route, kernel_lines(&kernel));
    assert!(pipeline.starts_with("    xfwd punt local"), "{ours}");

    // `show -j` as `ip -j`, from the instance and from a fresh mirror.
    let kernel_routes = || {
        let mut all = json(&ip(&fwd, &["-j", "route", "show", "table", "all"]))
            .as_array()
            .unwrap()
            .clone();
        all.extend(
            json(&ip(&fwd, &["-6", "-j", "route", "show", "table", "all"]))
                .as_array()
                .unwrap()
                .iter()
                // `ip route show table all` without -6 lists IPv6 routes of the local table
                // as well; keep one of each.
                .filter(|r| !all.contains(r))
                .cloned()
                .collect::<Vec<_>>(),
        );
        all
    };
    let id = |x: &Value| format!("{}", x["id"]);
    let ifindex = |x: &Value| format!("{}", x["ifindex"]);
    let rules = || {
        let mut all = json(&ip(&fwd, &["-j", "rule"])).as_array().unwrap().clone();
        all.extend(
            json(&ip(&fwd, &["-6", "-j", "rule"]))
                .as_array()
                .unwrap()
                .clone(),
        );
        all
    };
    // An xfrm policy (direction in: forwarded traffic never looks it up). `ip xfrm` has no
    // JSON; the policy's fields are checked one by one, with the index the kernel gave it.
    stdout(&ip(
        &fwd,
        &[
            "xfrm",
            "policy",
            "add",
            "src",
            "203.0.113.0/24",
            "dst",
            "198.51.100.0/24",
            "proto",
            "udp",
            "dir",
            "in",
            "priority",
            "10",
            "action",
            "block",
        ],
    ));
    let kernel_policy = stdout(&ip(&fwd, &["-s", "xfrm", "policy", "list"]));
    let index: u64 = kernel_policy
        .split_whitespace()
        .skip_while(|w| *w != "index")
        .nth(1)
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("no index in {kernel_policy}"));
    for fresh in [false, true] {
        let show = |what: &str| {
            if fresh {
                json(
                    &Command::new(XFWD)
                        .args(["show", what, "-j", "--netns", &fwd])
                        .output()
                        .unwrap(),
                )
            } else {
                json(&xfwd.ask(&["show", what, "-j"]))
            }
        };
        let from = if fresh {
            "a fresh mirror"
        } else {
            "the instance"
        };
        eventually(&format!("routes from {from}"), || {
            compare_lists("routes", &show("routes"), &kernel_routes(), route_key, &[])
        });
        eventually(&format!("links from {from}"), || {
            let kernel: Vec<Value> = json(&ip(&fwd, &["-d", "-j", "link"]))
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let mut l = l.clone();
                    // `ip -d` adds the kind's own data; xfwd names the kind.
                    if let Some(kind) = l["linkinfo"]["info_kind"].as_str() {
                        l["linkinfo"] = serde_json::json!({ "info_kind": kind });
                    }
                    l
                })
                .collect();
            compare_lists("links", &show("links"), &kernel, ifindex, &[])
        });
        eventually(&format!("addresses from {from}"), || {
            let kernel = json(&ip(&fwd, &["-d", "-j", "addr"]));
            let ours = show("addrs");
            for link in ours.as_array().unwrap() {
                let twin = kernel
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|k| k["ifindex"] == link["ifindex"])
                    .ok_or(format!("no link {}", link["ifindex"]))?;
                let (a, b) = (
                    link["addr_info"].as_array().unwrap(),
                    twin["addr_info"].as_array().unwrap(),
                );
                if a.len() != b.len() {
                    return Err(format!("addresses of {}: {a:?} / {b:?}", link["ifname"]));
                }
                for addr in a {
                    let twin = b
                        .iter()
                        .find(|x| x["local"] == addr["local"])
                        .ok_or(format!("no {}", addr["local"]))?;
                    agrees(addr, twin, &[])?;
                }
            }
            Ok(())
        });
        eventually(&format!("neighbours from {from}"), || {
            let kernel = json(&ip(&fwd, &["-j", "neigh"]));
            let key = |n: &Value| format!("{} {}", n["dst"], n["dev"]);
            compare_lists(
                "neigh",
                &show("neigh"),
                kernel.as_array().unwrap(),
                key,
                &[],
            )
        });
        eventually(&format!("rules from {from}"), || {
            let ours = show("rules");
            let kernel = Value::Array(rules());
            (ours == kernel)
                .then_some(())
                .ok_or(format!("{ours} / {kernel}"))
        });
        eventually(&format!("policies from {from}"), || {
            let wanted = serde_json::json!([{
                "src": "203.0.113.0/24", "dst": "198.51.100.0/24", "proto": 17, "dir": "in",
                "priority": 10, "action": "block", "index": index,
            }]);
            let ours = show("policies");
            (ours == wanted)
                .then_some(())
                .ok_or(format!("{ours} / {wanted} ({kernel_policy})"))
        });
        eventually(&format!("nexthops from {from}"), || {
            let kernel = json(&ip(&fwd, &["-j", "nexthop"]));
            compare_lists(
                "nexthops",
                &show("nexthops"),
                kernel.as_array().unwrap(),
                id,
                &[],
            )
        });
    }

    // No instance: the caches exist only in one.
    let none = Command::new(XFWD)
        .args(["show", "cache", "--netns", &fwd])
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("only in a running instance"),
        "{none:?}"
    );
}
