//! Privileged tests of xfwd's in-dataplane UDP endpoints on the virtual lab (each test its
//! own lab): the STAMP reflector and the echo service configured in the TOML file answer
//! kernel senders in `src` over IPv4 and IPv6 with correct fields; kernel sockets in `fwd`
//! keep receiving their datagrams beside them (the XDP program steers only the endpoints'
//! ports; a port nobody holds gets the kernel's port unreachable); a configured port that a
//! kernel socket holds is refused with `EADDRINUSE`;
//! `xfwd stats` counts per endpoint.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dataplane::endpoint::reflect::{self, ErrorEstimate, StampReply};
use xfwd_lab::{Lab, LabGuard, Role, topology};

mod common;
use common::Xfwd;

/// `xfwd run` (routing mode) on fwd0 and fwd1 with `config_text` as its configuration file;
/// returns the command, its control socket and the file (which the caller removes).
fn command(lab: &Lab, config_text: &str) -> (Command, PathBuf, PathBuf) {
    let config = std::env::temp_dir().join(format!("{}.toml", lab.prefix()));
    std::fs::write(&config, config_text).unwrap();
    let (mut command, control) = Xfwd::command(lab, "fwd0,fwd1", 'e');
    command.arg("--config").arg(&config);
    (command, control, config)
}

/// A running `xfwd` with its configuration file, both gone when dropped.
struct Configured {
    xfwd: Xfwd,
    config: PathBuf,
}

impl Configured {
    fn start(lab: &Lab, config_text: &str) -> Configured {
        let (command, control, config) = command(lab, config_text);
        Configured {
            xfwd: Xfwd::spawn(command, control),
            config,
        }
    }
}

impl std::ops::Deref for Configured {
    type Target = Xfwd;
    fn deref(&self) -> &Xfwd {
        &self.xfwd
    }
}

impl Drop for Configured {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

fn lab(tag: &str) -> LabGuard {
    Lab::unique(tag).unwrap().up_scoped().unwrap()
}

fn socket_in(lab: &Lab, role: Role, addr: SocketAddr) -> UdpSocket {
    let s = xfwd_lab::netns::run_in(&lab.netns(role), || UdpSocket::bind(addr))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

fn any(v6: bool) -> SocketAddr {
    if v6 { "[::]:0" } else { "0.0.0.0:0" }.parse().unwrap()
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Sends `payload` from `sender` to `to` until an answer from `to` arrives (the first
/// datagrams may wait for neighbour resolution); the answer and the wall-clock window in which
/// the successful request was sent and answered.
fn exchange(sender: &UdpSocket, to: SocketAddr, payload: &[u8]) -> (Vec<u8>, u64, u64) {
    let mut buf = [0u8; 2048];
    for _ in 0..25 {
        let before = unix_nanos();
        sender.send_to(payload, to).unwrap();
        while let Ok((n, from)) = sender.recv_from(&mut buf) {
            if from == to {
                return (buf[..n].to_vec(), before, unix_nanos());
            }
        }
    }
    panic!("no answer from {to}");
}

const CONFIG: &str = r#"
[[endpoint]]
service = "stamp"
bind = "[::]:862"
error_estimate_ns = 5000
clock_synchronized = true

[[endpoint]]
service = "echo"
bind = "0.0.0.0:7"
reuseaddr = true

[[endpoint]]
service = "stamp"
bind = "198.18.0.1:7"
reuseaddr = true
"#;

fn endpoint<'a>(stats: &'a serde_json::Value, service: &str) -> &'a serde_json::Value {
    stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["service"] == service)
        .unwrap_or_else(|| panic!("no {service} endpoint in {stats}"))
}

#[test]
fn reflector_and_echo_answer_beside_kernel_sockets() {
    if !xfwd_lab::privileged("reflector_and_echo_answer_beside_kernel_sockets") {
        return;
    }
    let lab = lab("ep");
    // Kernel sockets in fwd: one on a specific address, one on the IPv6 wildcard.
    let fwd4 = IpAddr::V4(topology::FWD0.ipv4);
    let fwd6 = IpAddr::V6(topology::FWD0.ipv6);
    let kernel_specific = socket_in(&lab, Role::Fwd, SocketAddr::new(fwd4, 5555));
    let kernel_wild = socket_in(&lab, Role::Fwd, "[::]:5556".parse().unwrap());
    let xfwd = Configured::start(&lab, CONFIG);

    // STAMP over IPv4 and IPv6 (the reflector is bound to the dual-stack wildcard).
    let mut seq = 0;
    for ip in [fwd4, fwd6] {
        let sender = socket_in(&lab, Role::Src, any(ip.is_ipv6()));
        let to = SocketAddr::new(ip, 862);
        seq += 100;
        let mut test = [0u8; 44];
        let sent_ts = reflect::ntp_from_unix_nanos(unix_nanos());
        let sender_error = ErrorEstimate::from_nanos(1, false);
        reflect::stamp_request(&mut test, 44, seq, sent_ts, sender_error).unwrap();
        let (answer, before, after) = exchange(&sender, to, &test);
        assert_eq!(answer.len(), 44);
        let r = StampReply::parse(&answer).unwrap();
        assert_eq!((r.seq, r.sender_seq, r.sender_tx), (seq, seq, sent_ts));
        assert_eq!(r.sender_error, sender_error);
        // src's kernel sends with TTL / hop limit 64, and fwd is its first hop.
        assert_eq!(r.sender_ttl, 64, "{ip}");
        assert_eq!(r.error, ErrorEstimate::from_nanos(5000, true));
        let (rx, tx) = (
            reflect::unix_nanos_from_ntp(r.rx),
            reflect::unix_nanos_from_ntp(r.tx),
        );
        // One clock on the machine: the reflector's times lie inside the exchange.
        assert!(
            before <= rx && rx <= tx && tx <= after,
            "{before} <= {rx} <= {tx} <= {after}"
        );
    }

    // Port 7: the STAMP endpoint bound to fwd0's address takes its datagrams (a specific
    // address beats the wildcard, by the kernel's rules), the echo on the wildcard those to
    // fwd1's address.
    let sender = socket_in(&lab, Role::Src, any(false));
    let mut test = [0u8; 44];
    reflect::stamp_request(&mut test, 44, 7, 1 << 40, ErrorEstimate(1)).unwrap();
    let (answer, ..) = exchange(&sender, SocketAddr::new(fwd4, 7), &test);
    assert_eq!(StampReply::parse(&answer).unwrap().sender_tx, 1 << 40);
    assert_ne!(answer, test);
    let fwd1 = IpAddr::V4(topology::FWD1.ipv4);
    let (answer, ..) = exchange(&sender, SocketAddr::new(fwd1, 7), &test);
    assert_eq!(answer, test, "echoed unchanged");

    // The kernel's sockets still get their datagrams (the XDP program passes them).
    let mut buf = [0u8; 64];
    for (socket, to) in [
        (&kernel_specific, SocketAddr::new(fwd4, 5555)),
        (&kernel_wild, SocketAddr::new(fwd6, 5556)),
        (&kernel_wild, SocketAddr::new(fwd4, 5556)),
    ] {
        let sender = socket_in(&lab, Role::Src, any(to.is_ipv6()));
        let mut got = None;
        for _ in 0..20 {
            sender.send_to(b"for the kernel", to).unwrap();
            if let Ok(n) = socket.recv(&mut buf) {
                got = Some(buf[..n].to_vec());
                break;
            }
        }
        assert_eq!(got.as_deref(), Some(&b"for the kernel"[..]), "{to}");
    }

    // A port nobody holds: the kernel answers port unreachable, as without xfwd (a connected
    // sender sees ECONNREFUSED), over IPv4 and IPv6.
    for ip in [fwd4, fwd6] {
        let sender = socket_in(&lab, Role::Src, any(ip.is_ipv6()));
        sender.connect(SocketAddr::new(ip, 5557)).unwrap();
        let mut refused = false;
        for _ in 0..20 {
            let _ = sender.send(b"nobody");
            match sender.recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    refused = true;
                    break;
                }
                Ok(n) => panic!("{ip}:5557 answered {:?}", &buf[..n]),
                Err(_) => {}
            }
        }
        assert!(refused, "no port unreachable from {ip}:5557");
    }

    // pktgen's STAMP session-sender against the reflector: nothing lost at 1000 per second,
    // every answer matched, delays measured.
    let mut session = pktgen::stamp::StampConfig::new(SocketAddr::new(fwd6, 862));
    (session.count, session.rate, session.size) = (300, 1000.0, 128);
    session.linger = Duration::from_secs(2);
    let report = xfwd_lab::netns::run_in(&lab.netns(Role::Src), || pktgen::stamp::run(&session))
        .unwrap()
        .unwrap();
    assert_eq!(
        (report.sent, report.received, report.lost),
        (300, 300, 0),
        "{report:?}"
    );
    assert_eq!((report.duplicates, report.foreign), (0, 0), "{report:?}");
    let rtt = report.rtt.unwrap();
    assert!(rtt.min_ns > 0 && rtt.p50_ns <= rtt.p99_ns, "{rtt:?}");
    assert_eq!(report.sender_ttl, Some(64));

    let stats = xfwd.stats().unwrap();
    let stamp = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["local"] == "[::]:862")
        .unwrap();
    assert!(stamp["received"].as_u64().unwrap() >= 302, "{stamp}");
    assert_eq!(stamp["received"], stamp["sent"], "{stamp}");
    assert_eq!(stamp["local"], "[::]:862");
    let echo = endpoint(&stats, "echo");
    assert!(echo["sent"].as_u64().unwrap() >= 1, "{echo}");
    assert_eq!(stats["endpoints"].as_array().unwrap().len(), 3);
    let xdp: Vec<(String, u64)> = serde_json::from_value(stats["xdp"].clone()).unwrap();
    let get = |k: &str| xdp.iter().find(|(n, _)| n == k).map_or(0, |x| x.1);
    assert!(get("local_udp") >= 3, "{xdp:?}");
    assert!(get("pass_local") >= 3, "{xdp:?}");
}

#[test]
fn a_port_a_kernel_socket_holds_is_refused() {
    if !xfwd_lab::privileged("a_port_a_kernel_socket_holds_is_refused") {
        return;
    }
    let lab = lab("epbusy");
    let _kernel = socket_in(&lab, Role::Fwd, "0.0.0.0:7".parse().unwrap());
    let (mut command, control, config) = command(&lab, CONFIG);
    let out = command.output().unwrap();
    let _ = std::fs::remove_file(&config);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("echo endpoint 0.0.0.0:7") && stderr.contains("in use by a kernel socket"),
        "{stderr}"
    );
    assert!(!control.exists());
}
