//! tc on the served interfaces against the live kernel (privileged; `tc` from iproute2).
//!
//! In a throwaway namespace, qdiscs and filters are added with the real `tc`, and
//! `forwarder::tc::served_hooks` must list exactly what forwarded traffic would bypass: filters
//! on a served device's `clsact` (each direction) or `ingress` qdisc or on its root qdisc, and
//! a shaping root qdisc; not a FIFO root qdisc, an empty `clsact`, or anything on a device xfwd
//! does not serve. A BPF program attached through tcx (loaded and linked with the raw `bpf(2)`
//! calls, since the suite builds no BPF object for it) is found by name. Then in the lab, `xfwd run` refuses to start with an ingress filter on a
//! served interface (exit 78, the filter named) and starts with `--tc bypass`.

use std::process::{Command, Stdio};

use forwarder::tc::{TcFinding, TcHook, served_hooks};
use xfwd_lab::netns::Netns;
use xfwd_lab::{Lab, Role};

mod common;
use common::Xfwd;

/// Runs `tc ARGS` inside `ns`, which must succeed.
fn tc(ns: &str, args: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc"])
        .args(args.split_whitespace())
        .output()
        .expect("tc");
    assert!(
        out.status.success(),
        "tc {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn hooks(ns: &Netns, served: &[&str]) -> Vec<String> {
    let served: Vec<String> = served.iter().map(|s| (*s).to_owned()).collect();
    let (found, warnings) = ns.run(|| served_hooks(&served)).unwrap().unwrap();
    assert!(
        warnings.is_empty(),
        "as root every check runs: {warnings:?}"
    );
    let mut found: Vec<String> = found.iter().map(TcHook::to_string).collect();
    found.sort();
    found
}

#[test]
fn tc_on_served_devices_is_found() {
    if !xfwd_lab::privileged("tc_on_served_devices_is_found") {
        return;
    }
    let ns = Netns::create(&format!("xfwd-tc-{}-find", std::process::id())).unwrap();
    ns.ip(["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .unwrap();
    ns.ip(["link", "add", "e0", "type", "veth", "peer", "name", "e1"])
        .unwrap();
    assert_eq!(hooks(&ns, &["d0", "d1"]), Vec::<String>::new(), "fresh");

    // Nothing that changes forwarding: an empty clsact, a FIFO root qdisc, filters and a
    // shaper on a device that is not served.
    tc(ns.name(), "qdisc add dev d0 clsact");
    tc(ns.name(), "qdisc add dev d1 root pfifo limit 100");
    tc(ns.name(), "qdisc add dev e0 root handle 1: htb");
    tc(ns.name(), "qdisc add dev e0 ingress");
    tc(
        ns.name(),
        "filter add dev e0 ingress protocol ip u32 match ip dst 10.0.0.1/32 action mirred egress redirect dev e1",
    );
    assert_eq!(hooks(&ns, &["d0", "d1"]), Vec::<String>::new(), "quiet");

    // What does: filters in both directions of d0's clsact, a shaping root qdisc on d1 with a
    // filter of its own.
    tc(
        ns.name(),
        "filter add dev d0 ingress protocol ip prio 3 u32 match ip dst 10.0.0.1/32 action mirred egress redirect dev d1",
    );
    tc(
        ns.name(),
        "filter add dev d0 ingress protocol ip prio 4 u32 match ip src 10.0.0.9/32 action mirred egress redirect dev d1",
    );
    tc(
        ns.name(),
        "filter add dev d0 egress protocol ip prio 7 u32 match ip dst 10.0.0.2/32",
    );
    tc(ns.name(), "qdisc replace dev d1 root handle 1: htb");
    tc(
        ns.name(),
        "filter add dev d1 parent 1: protocol ip u32 match ip dst 10.0.0.0/8 flowid 1:1",
    );
    assert_eq!(
        hooks(&ns, &["d0", "d1"]),
        [
            "tc: d0 egress: 1 filter list (u32)",
            "tc: d0 ingress: 2 filter lists (u32)",
            "tc: d1 root: 1 filter list (u32)",
            "tc: d1 root: qdisc htb",
        ]
    );
    // Only the served devices count.
    assert_eq!(
        hooks(&ns, &["d1"]),
        ["tc: d1 root: 1 filter list (u32)", "tc: d1 root: qdisc htb"]
    );

    // The classic ingress qdisc's filters, and a token bucket shaper.
    tc(ns.name(), "qdisc del dev d0 clsact");
    tc(ns.name(), "qdisc add dev d0 ingress");
    tc(
        ns.name(),
        "filter add dev d0 ingress protocol ip u32 match ip dst 10.0.0.1/32 action mirred egress redirect dev d1",
    );
    tc(
        ns.name(),
        "qdisc replace dev d1 root tbf rate 1mbit burst 32kbit latency 400ms",
    );
    let (found, _) = ns
        .run(|| served_hooks(&["d0".into(), "d1".into()]))
        .unwrap()
        .unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|h| h.device == "d0"
            && h.point == "ingress"
            && matches!(&h.what, TcFinding::Filters { lists: 1, .. })),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|h| h.device == "d1" && h.what == TcFinding::Qdisc("tbf".into())),
        "{found:?}"
    );
}

/// A SCHED_CLS program of two instructions (`r0 = TCX_NEXT; exit`) named `name`, attached
/// to `ifindex`'s tcx ingress through a BPF link; both descriptors stay open (the program
/// attached) until dropped.
fn attach_tcx(ifindex: u32, name: &str) -> std::io::Result<[std::os::fd::OwnedFd; 2]> {
    use std::os::fd::{FromRawFd, OwnedFd};
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_LINK_CREATE: libc::c_long = 28;
    const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
    const BPF_TCX_INGRESS: u32 = 46;
    // mov64 r0, -1 (TCX_NEXT); exit
    let insns: [u64; 2] = [0xffff_ffff_0000_00b7, 0x95];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_SCHED_CLS.to_ne_bytes());
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    // prog_name[16] at offset 48, after log_level, log_size, log_buf, kern_version,
    // prog_flags.
    attr[48..48 + name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `attr` is a zeroed `union bpf_attr` prefix of 128 bytes whose pointers
    // (`insns`, `license`) outlive the call; the kernel reads at most `attr.len()` bytes.
    let prog = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_ptr(), attr.len()) };
    if prog < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel just returned, owned by nobody else.
    let prog = unsafe { OwnedFd::from_raw_fd(prog as i32) };
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(std::os::fd::AsRawFd::as_raw_fd(&prog) as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    attr[8..12].copy_from_slice(&BPF_TCX_INGRESS.to_ne_bytes());
    // SAFETY: as above; `link_create` holds no pointers here.
    let link = unsafe { libc::syscall(libc::SYS_bpf, BPF_LINK_CREATE, attr.as_ptr(), attr.len()) };
    if link < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    let link = unsafe { OwnedFd::from_raw_fd(link as i32) };
    Ok([prog, link])
}

#[test]
fn tcx_programs_on_served_devices_are_found() {
    if !xfwd_lab::privileged("tcx_programs_on_served_devices_are_found") {
        return;
    }
    let ns = Netns::create(&format!("xfwd-tc-{}-tcx", std::process::id())).unwrap();
    ns.ip(["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .unwrap();
    let found = ns
        .run(|| {
            let index = forwarder::rtnl::link("d0").unwrap().index;
            let _attached = attach_tcx(index, "xfwd_tcx_test").expect("attaching through tcx");
            let served = ["d0".to_owned(), "d1".to_owned()];
            served_hooks(&served).unwrap()
        })
        .unwrap();
    let attached: Vec<String> = found.0.iter().map(TcHook::to_string).collect();
    assert_eq!(attached, ["tc: d0 ingress: tcx programs xfwd_tcx_test"]);
    assert!(found.1.is_empty(), "{:?}", found.1);
    // Detached with its link: nothing left.
    assert_eq!(hooks(&ns, &["d0", "d1"]), Vec::<String>::new());
}

#[test]
fn xfwd_refuses_to_bypass_tc_unless_told() {
    if !xfwd_lab::privileged("xfwd_refuses_to_bypass_tc_unless_told") {
        return;
    }
    let lab = Lab::unique("tc").unwrap().up_scoped().unwrap();
    let fwd = lab.netns(Role::Fwd);
    tc(&fwd, "qdisc add dev fwd0 clsact");
    tc(
        &fwd,
        "filter add dev fwd0 ingress protocol ip u32 match ip src 10.66.0.0/16 action mirred egress redirect dev fwd1",
    );

    // Refused before touching an interface: exit 78, the filter named.
    let (mut command, _) = Xfwd::command(&lab, "fwd0,fwd1", 't');
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    common::assert_refused(&out, "tc: fwd0 ingress: 1 filter list (u32)", "tc", &fwd);

    // Told to bypass: it starts and answers (Xfwd::spawn waits for its control socket).
    let (mut command, control) = Xfwd::command(&lab, "fwd0,fwd1", 't');
    command.args(["--tc", "bypass"]);
    let mut running = Xfwd::spawn(command, control);
    assert!(running.signal("-TERM").success(), "clean exit");
}
