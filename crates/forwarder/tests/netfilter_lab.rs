//! Netfilter rules on forwarded traffic against the live kernel (privileged; needs `nft`,
//! `iptables-nft` and `iptables-legacy`, which `cargo xtask setup` installs).
//!
//! In throwaway namespaces, rulesets are written with the real tools and
//! `forwarder::netfilter::forwarding_chains` must list exactly the chains that could change
//! forwarded traffic (a forward rule, a drop policy, a NAT prerouting rule, iptables-nft and
//! legacy iptables rules, a netdev ingress chain on a served device) and none of the others
//! (input/output chains, empty accepting chains, netdev chains on other devices). Then in the
//! lab, `xfwd run` refuses to start with a forward rule present (exit 78, naming the chain) and
//! starts with `--netfilter bypass`; and a forward rule added while xfwd runs diverts every
//! frame to the kernel, which applies it, until it is removed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forwarder::netfilter::{FilterChain, forwarding_chains};
use xfwd_lab::netns::Netns;
use xfwd_lab::{Lab, Role};

mod common;
use common::XFWD;

fn netns(tag: &str) -> Netns {
    Netns::create(&format!("xfwd-nf-{}-{tag}", std::process::id())).expect("create netns")
}

/// Runs `tool ARGS` inside `ns` (`ip netns exec`), which must succeed.
fn run(ns: &str, tool: &str, args: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, tool])
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `nft -f -` with a whole ruleset.
fn nft(ns: &str, ruleset: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ruleset.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft: {}\n{ruleset}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn chains(ns: &Netns, served: &[&str]) -> Vec<FilterChain> {
    let served: Vec<String> = served.iter().map(|s| (*s).to_owned()).collect();
    let mut found = ns.run(|| forwarding_chains(&served)).unwrap().unwrap();
    found.sort_by(|a, b| (a.source, &a.table, &a.chain).cmp(&(b.source, &b.table, &b.chain)));
    found
}

fn names(found: &[FilterChain]) -> Vec<String> {
    found
        .iter()
        .map(|c| format!("{} {} {} {}", c.source, c.family, c.table, c.chain))
        .collect()
}

#[test]
fn chains_on_the_forwarding_path_are_found() {
    if !xfwd_lab::privileged("chains_on_the_forwarding_path_are_found") {
        return;
    }
    let ns = netns("find");
    ns.ip(["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .unwrap();
    assert_eq!(names(&chains(&ns, &["d0"])), Vec::<String>::new(), "fresh");

    // Chains that cannot change forwarded traffic: input/output rules, empty accepting base
    // chains, a netdev chain on a device xfwd does not serve.
    nft(
        ns.name(),
        "table inet quiet {
           chain in {
             type filter hook input priority 0; policy drop;
             tcp dport 22 accept
           }
           chain out {
             type filter hook output priority 0;
             ip daddr 192.0.2.1 drop
           }
           chain fw { type filter hook forward priority 0; policy accept; }
           chain pre { type filter hook prerouting priority 0; }
         }
         table netdev other {
           chain ing {
             type filter hook ingress device d1 priority 0;
             drop
           }
         }",
    );
    assert_eq!(names(&chains(&ns, &["d0"])), Vec::<String>::new(), "quiet");

    // Chains that can: a forward rule, a drop policy, NAT, a netdev ingress chain on d0.
    nft(
        ns.name(),
        "table inet f {
           chain fw {
             type filter hook forward priority 0;
             ip daddr 10.9.9.9 drop
           }
         }
         table ip6 p {
           chain post { type filter hook postrouting priority 0; policy drop; }
         }
         table ip n {
           chain pre {
             type nat hook prerouting priority -100;
             tcp dport 80 dnat to 10.0.0.1
           }
         }
         table netdev d {
           chain ing {
             type filter hook ingress device d0 priority 0;
             counter
           }
         }",
    );
    let found = chains(&ns, &["d0"]);
    assert_eq!(
        names(&found),
        [
            "nftables netdev d ing",
            "nftables inet f fw",
            "nftables ip n pre",
            "nftables ip6 p post",
        ],
        "{found:#?}"
    );
    let post = found.iter().find(|c| c.chain == "post").unwrap();
    assert!(post.policy_drop && post.rules == 0, "{post:?}");
    assert_eq!(found[0].devices, ["d0"]);
    assert_eq!(found[0].hook, "ingress");
    // The netdev chain on d1 shows up once d1 is served.
    assert_eq!(chains(&ns, &["d0", "d1"]).len(), 5);

    // iptables-nft's rules are nftables chains; legacy iptables has its own tables.
    run(ns.name(), "nft", "flush ruleset");
    assert_eq!(names(&chains(&ns, &["d0"])), Vec::<String>::new());
    run(
        ns.name(),
        "iptables-nft",
        "-A FORWARD -s 198.51.100.0/24 -j DROP",
    );
    run(ns.name(), "iptables-nft", "-A INPUT -j ACCEPT");
    assert_eq!(names(&chains(&ns, &["d0"])), ["nftables ip filter FORWARD"]);
    run(ns.name(), "nft", "flush ruleset");
    run(ns.name(), "iptables-legacy", "-L -n");
    assert_eq!(
        names(&chains(&ns, &["d0"])),
        Vec::<String>::new(),
        "an empty legacy filter table"
    );
    run(ns.name(), "iptables-legacy", "-P FORWARD DROP");
    let found = chains(&ns, &["d0"]);
    assert_eq!(names(&found), ["iptables-legacy ip filter FORWARD"]);
    assert!(found[0].policy_drop && found[0].rules == 0, "{found:?}");
    run(ns.name(), "iptables-legacy", "-P FORWARD ACCEPT");
    run(ns.name(), "iptables-legacy", "-A INPUT -j ACCEPT");
    assert_eq!(names(&chains(&ns, &["d0"])), Vec::<String>::new());
    run(
        ns.name(),
        "iptables-legacy",
        "-t nat -A POSTROUTING -o d1 -j MASQUERADE",
    );
    run(
        ns.name(),
        "iptables-legacy",
        "-t nat -A POSTROUTING -o d0 -j MASQUERADE",
    );
    run(ns.name(), "ip6tables-legacy", "-A FORWARD -j ACCEPT");
    let found = chains(&ns, &["d0"]);
    assert_eq!(
        names(&found),
        [
            "ip6tables-legacy ip6 filter FORWARD",
            "iptables-legacy ip nat POSTROUTING",
        ],
        "{found:#?}"
    );
    assert_eq!(found[1].rules, 2);
}

#[test]
fn xfwd_refuses_to_bypass_a_forward_rule_unless_told() {
    if !xfwd_lab::privileged("xfwd_refuses_to_bypass_a_forward_rule_unless_told") {
        return;
    }
    let lab = Lab::unique("nf").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    nft(
        &fwd,
        "table inet guard {
           chain fw {
             type filter hook forward priority 0;
             ip saddr 10.66.0.0/16 drop
           }
         }",
    );
    let control = format!("/run/xfwd/test-{}.sock", lab.prefix());
    let punt = format!("n{}", std::process::id() % 100_000);
    let xfwd = |extra: &[&str]| {
        Command::new(XFWD)
            .args(["run", "--netns", &fwd, "--iface", "fwd0,fwd1"])
            .args(["--control", &control, "--punt-device", &punt])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // Refused before touching an interface: exit 78, the chain named.
    let out = xfwd(&[]).wait_with_output().unwrap();
    common::assert_refused(
        &out,
        "nftables: inet guard fw (hook forward): 1 rule",
        "netfilter",
        &fwd,
    );

    // Told to bypass: it starts (answers on its control socket) and warns.
    let mut child = xfwd(&["--netfilter", "bypass"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let out = Command::new(XFWD)
            .args(["stats", "--json", "--control", &control])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        if out.status.success() {
            break true;
        }
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    common::terminate(&mut child);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(started, "xfwd --netfilter bypass did not start: {stderr}");
    assert!(stderr.contains("inet guard fw"), "warned: {stderr}");
}

/// `xfwd probe` of `count` UDP frames from src0's address to dst0's, captured on dst0.
fn probe(lab: &Lab, count: u64) -> forwarder::probe::ProbeReport {
    use xfwd_lab::topology::{DST0, FWD0, SRC0};
    let out = Command::new(XFWD)
        .args(["probe", "--json", "--from-netns", &lab.netns(Role::Src)])
        .args(["--iface", "src0", "--to-mac", &FWD0.mac_string()])
        .args([
            "--src",
            &SRC0.ipv4.to_string(),
            "--dst",
            &DST0.ipv4.to_string(),
        ])
        .args(["--to-netns", &lab.netns(Role::Dst), "--capture", "dst0"])
        .args(["--count", &count.to_string(), "--rate", "2000"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Frames xfwd's run loops received, and the XDP program's `pass_diverted` count.
fn received_and_diverted(xfwd: &common::Xfwd) -> (u64, u64, Vec<String>) {
    let stats = xfwd.stats().expect("xfwd answers");
    let rx = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|q| q["ports"].as_array().unwrap())
        .map(|p| p["rx_packets"].as_u64().unwrap())
        .sum();
    let diverted = stats["xdp"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv[0] == "pass_diverted")
        .map_or(0, |kv| kv[1].as_u64().unwrap());
    let reasons = stats["diverted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    (rx, diverted, reasons)
}

/// Waits (up to 10 s, the watch reads every 2 s) until xfwd says it diverts (`on`) or not.
fn wait_diverting(xfwd: &common::Xfwd, on: bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, reasons) = received_and_diverted(xfwd);
        if reasons.is_empty() != on {
            return reasons;
        }
        assert!(Instant::now() < deadline, "diverting never became {on}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_forward_rule_added_while_running_diverts_to_the_kernel() {
    if !xfwd_lab::privileged("a_forward_rule_added_while_running_diverts_to_the_kernel") {
        return;
    }
    let lab = Lab::unique("nfdiv").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    common::resolve_dst(&fwd);
    let xfwd = common::Xfwd::start(&lab, 'd');

    // Forwarded by xfwd.
    let (rx0, _, _) = received_and_diverted(&xfwd);
    let r = probe(&lab, 200);
    assert_eq!(r.unique, 200, "{r:?}");
    assert_eq!(r.ttls, [(63, 200)]);
    let (rx1, diverted1, reasons) = received_and_diverted(&xfwd);
    assert!(rx1 >= rx0 + 200, "xfwd forwarded them: {rx0} -> {rx1}");
    assert!(reasons.is_empty());

    // A firewall rule appears: the kernel forwards every frame, and applies it.
    let src = xfwd_lab::topology::SRC0.ipv4;
    nft(
        &fwd,
        &format!(
            "table inet later {{
               chain fw {{
                 type filter hook forward priority 0;
                 ip saddr {src} drop
               }}
             }}"
        ),
    );
    let reasons = wait_diverting(&xfwd, true);
    assert_eq!(
        reasons,
        ["nftables: inet later fw (hook forward): 1 rule"],
        "named"
    );
    let r = probe(&lab, 200);
    assert_eq!(r.received, 0, "the kernel's rule dropped them: {r:?}");
    let (rx2, diverted2, _) = received_and_diverted(&xfwd);
    assert!(
        diverted2 >= diverted1 + 200,
        "passed to the kernel by the XDP program: {diverted1} -> {diverted2}"
    );
    assert!(rx2 < rx1 + 200, "not through xfwd's loops: {rx1} -> {rx2}");

    // The rule goes: xfwd forwards again.
    run(&fwd, "nft", "delete table inet later");
    wait_diverting(&xfwd, false);
    let r = probe(&lab, 200);
    assert_eq!(r.unique, 200, "{r:?}");
    let (rx3, _, _) = received_and_diverted(&xfwd);
    assert!(rx3 >= rx2 + 200, "xfwd forwards again: {rx2} -> {rx3}");
}
