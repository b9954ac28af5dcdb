//! Helpers shared by the netlink-mirror privileged tests.
#![allow(dead_code, reason = "each test file uses a different subset")]

use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use std::net::IpAddr;

use netlink_mirror::cli::{RouteGetArgs, ShowArgs, ShowWhat, route_get, show};
use netlink_mirror::{Mirror, MirrorHandle, MirrorOptions, MirroredTables, NetnsSpec};
use xfwd_lab::netns::Netns;

/// How long a mirror may take to follow a change made with `ip`.
pub const CONVERGE: Duration = Duration::from_secs(10);

/// A throwaway namespace `xfwd-nlm-<pid>-<tag>`, deleted on drop.
pub fn netns(tag: &str) -> Netns {
    Netns::create(&format!("xfwd-nlm-{}-{tag}", std::process::id())).expect("create netns")
}

/// Starts a mirror of `ns` and waits for its first synchronisation.
pub fn mirror(ns: &Netns, options: MirrorOptions) -> MirrorHandle {
    let m = Mirror::start(NetnsSpec::Name(ns.name().to_owned()), options).expect("start mirror");
    m.wait_synced(Duration::from_secs(600))
        .expect("synchronised");
    m
}

/// Everything the mirror holds, as sorted lines of `show` (so insertion order does not matter).
pub fn snapshot(t: &MirroredTables) -> Vec<String> {
    let mut lines = Vec::new();
    for what in [
        ShowWhat::Links,
        ShowWhat::Addrs,
        ShowWhat::Routes,
        ShowWhat::Neigh,
        ShowWhat::Rules,
        ShowWhat::Policies,
        ShowWhat::Nexthops,
    ] {
        let text = show(t, &ShowArgs { what, netns: None });
        lines.extend(text.lines().map(|l| format!("{what:?}: {l}")));
    }
    lines.sort();
    lines
}

/// Waits until `live` holds what a fresh dump of the namespace holds.
pub fn converge(live: &MirrorHandle, ns: &Netns, timeout: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if let Some(why) = live.failure() {
            return Err(format!(
                "the mirror stopped: {why}; stats {:?}",
                live.stats()
            ));
        }
        let fresh = mirror(ns, MirrorOptions::default());
        let want = snapshot(fresh.tables());
        let got = snapshot(live.tables());
        if want == got {
            return Ok(());
        }
        if start.elapsed() > timeout {
            let missing: Vec<_> = want.iter().filter(|l| !got.contains(l)).collect();
            let extra: Vec<_> = got.iter().filter(|l| !want.contains(l)).collect();
            return Err(format!(
                "mirror differs from a fresh dump after {timeout:?}:\nmissing {missing:#?}\nextra {extra:#?}\nstats {:?}",
                live.stats()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `check` holds of the mirror's tables.
pub fn wait_for(live: &MirrorHandle, what: &str, check: impl Fn(&MirroredTables) -> bool) {
    let start = Instant::now();
    while !check(live.tables()) {
        assert!(
            start.elapsed() < CONVERGE,
            "{what}: not seen within {CONVERGE:?}; stats {:?}",
            live.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `ip -n NS -force -batch FILE` with these lines; returns stdout.
pub fn ip_batch(ns: &Netns, lines: impl IntoIterator<Item = String>) -> String {
    let path = std::env::temp_dir().join(format!("{}.batch", ns.name()));
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("batch file"));
        for l in lines {
            writeln!(f, "{l}").expect("write batch");
        }
    }
    let out = Command::new("ip")
        .args(["-n", ns.name(), "-force", "-batch"])
        .arg(&path)
        .output()
        .expect("run ip -batch");
    let _ = std::fs::remove_file(&path);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The fields of an `ip route get` answer that the mirror renders: type, destination, via,
/// dev, src, table, path MTU (absent ones empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GetFields {
    pub kind: String,
    pub dst: String,
    pub via: String,
    pub dev: String,
    pub src: String,
    pub table: String,
    pub mtu: String,
}

/// Parses one line of `ip route get` output (or of `route_get`).
pub fn get_fields(line: &str) -> GetFields {
    let mut words = line.split_whitespace().peekable();
    let mut f = GetFields::default();
    const TYPES: [&str; 8] = [
        "local",
        "broadcast",
        "anycast",
        "multicast",
        "blackhole",
        "unreachable",
        "prohibit",
        "throw",
    ];
    if let Some(w) = words.peek() {
        if TYPES.contains(w) {
            f.kind = (*w).to_owned();
            words.next();
        }
    }
    f.dst = words.next().unwrap_or_default().to_owned();
    while let Some(w) = words.next() {
        let slot = match w {
            "via" => {
                // A gateway of another family: `via inet6 fe80::1` (RFC 8950).
                if let Some(family) = words.next_if(|w| matches!(*w, "inet" | "inet6")) {
                    f.via.push_str(family);
                    f.via.push(' ');
                }
                &mut f.via
            }
            "dev" => &mut f.dev,
            "src" => &mut f.src,
            "table" => &mut f.table,
            "mtu" => {
                if words.peek() == Some(&"lock") {
                    words.next();
                    f.mtu.push_str("lock ");
                }
                &mut f.mtu
            }
            _ => continue,
        };
        slot.push_str(words.next().unwrap_or_default());
    }
    f
}

pub fn ip(ns: &Netns, line: &str) {
    ns.ip(line.split_whitespace())
        .unwrap_or_else(|e| panic!("ip {line}: {e}"));
}

/// Two veth pairs inside `ns`: d0 (10.1.0.1/24, 2001:db8:1::1/64) and d1 (10.2.0.1/24,
/// 2001:db8:2::1/64), peers p0/p1 in the same namespace, all up.
pub fn two_links(ns: &Netns) {
    for i in 0..2 {
        ip(ns, &format!("link add d{i} type veth peer name p{i}"));
        ip(ns, &format!("link set d{i} up"));
        ip(ns, &format!("link set p{i} up"));
        ip(ns, &format!("addr add 10.{}.0.1/24 dev d{i}", i + 1));
        ip(
            ns,
            &format!("addr add 2001:db8:{}::1/64 dev d{i} nodad", i + 1),
        );
    }
}

/// `route get` from the mirror equals `ip route get` in type, via, dev, src, table and MTU
/// (IPv4 shows it on a second, `cache`, line).
pub fn same_answer(ns: &Netns, t: &MirroredTables, query: &str) {
    let kernel = ns.ip(["route", "get"].into_iter().chain(query.split_whitespace()));
    let mut words = query.split_whitespace().map(str::to_owned);
    let addr: IpAddr = words.next().unwrap().parse().unwrap();
    let ours = route_get(
        t,
        &RouteGetArgs {
            addr,
            selectors: words.collect(),
            netns: None,
        },
    );
    match (kernel, ours) {
        (Ok(k), Ok(o)) => assert_eq!(
            get_fields(&k),
            get_fields(&o),
            "route get {query}: kernel {k:?}, mirror {o:?}"
        ),
        (Err(k), Err(o)) => {
            let o = o.to_string();
            assert!(
                k.to_string().contains(&o),
                "route get {query}: kernel {k}, mirror {o}"
            );
        }
        (k, o) => panic!("route get {query}: kernel {k:?}, mirror {o:?}"),
    }
}
