//! A STAMP session-sender (RFC 8762, unauthenticated; TWAMP-light reflectors answer it too) on
//! a kernel UDP socket: test packets with sequence numbers and transmit timestamps at a paced
//! rate, answers matched by sequence number, and a report of loss, duplicates, reordering and
//! the round-trip delay percentiles, both as seen (T4 − T1) and without the reflector's
//! residence time ((T4 − T1) − (T3 − T2), RFC 8762 §4.1). A UDP echo (RFC 862) answers too:
//! its answer is the test packet unchanged, counted as an echo with its round trip only (no
//! reflector timestamps), so one sender compares a STAMP reflector with any echo service.
//!
//! Timestamps are `CLOCK_REALTIME` in NTP format, so a reflector on the same machine (another
//! network namespace) also gives one-way delays; across machines they need synchronised clocks
//! and are not reported.
//!
//! ```no_run
//! use pktgen::stamp::{StampConfig, run};
//! let mut config = StampConfig::new("198.18.0.1:862".parse()?);
//! config.count = 1000;
//! config.rate = 1000.0;
//! let report = run(&config)?;
//! println!("lost {} p99 {:?}", report.lost, report.rtt.map(|l| l.p99_ns));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dataplane::endpoint::reflect::{self, ErrorEstimate, STAMP_LEN, StampReply};
use serde::{Deserialize, Serialize};

use crate::pacer::Pacer;
use crate::stats::{Histogram, Latency};

/// What to send.
#[derive(Clone, Debug, PartialEq)]
pub struct StampConfig {
    /// The reflector.
    pub target: SocketAddr,
    /// The local address to bind (port 0: any); `None` takes the target family's wildcard.
    pub bind: Option<SocketAddr>,
    /// Test packets to send.
    pub count: u32,
    /// Test packets per second.
    pub rate: f64,
    /// The UDP payload size of a test packet (at least 44 bytes; the rest zero padding).
    pub size: usize,
    /// How long to wait for late answers after the last test packet.
    pub linger: Duration,
    /// The error estimate of our timestamps.
    pub error: ErrorEstimate,
}

impl StampConfig {
    /// 100 test packets of 44 bytes at 100 per second to `target`, answers awaited for 1 s.
    pub fn new(target: SocketAddr) -> StampConfig {
        StampConfig {
            target,
            bind: None,
            count: 100,
            rate: 100.0,
            size: STAMP_LEN,
            linger: Duration::from_secs(1),
            error: ErrorEstimate::from_nanos(1_000, false),
        }
    }
}

/// What came back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StampReport {
    /// Test packets sent.
    pub sent: u64,
    /// Distinct test packets answered.
    pub received: u64,
    /// Sent and never answered.
    pub lost: u64,
    /// Answers to a test packet answered before.
    pub duplicates: u64,
    /// Answers whose sequence number was below one answered before.
    pub reordered: u64,
    /// Answers that were not a reflector's answer to one of ours (too short, unknown sequence
    /// number, or a sender timestamp that is not ours).
    pub foreign: u64,
    /// Of `received`, the answers that were our test packet echoed unchanged (a UDP echo
    /// service, not a STAMP reflector): only their round trip is measured.
    #[serde(default)]
    pub echoes: u64,
    /// Round-trip delays T4 − T1.
    pub rtt: Option<Latency>,
    /// Round-trip delays without the reflector's residence, (T4 − T1) − (T3 − T2).
    pub net_rtt: Option<Latency>,
    /// The reflector's residence times T3 − T2.
    pub residence: Option<Latency>,
    /// Forward one-way delays T2 − T1 (meaningful with one clock or synchronised clocks).
    pub forward: Option<Latency>,
    /// The TTL / hop limit the reflector saw, of the last answer.
    pub sender_ttl: Option<u8>,
    /// Seconds from the first test packet to the end of the wait.
    pub seconds: f64,
    /// Seconds from the first test packet to the last (answers per second of sending:
    /// `received / send_seconds`).
    #[serde(default)]
    pub send_seconds: f64,
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Bookkeeping of one session: which test packets went when, which were answered.
#[derive(Debug)]
pub struct Session {
    sent_at: Vec<u64>,
    answered: Vec<bool>,
    highest: Option<u32>,
    report: StampReport,
    rtt: Histogram,
    net: Histogram,
    residence: Histogram,
    forward: Histogram,
}

impl Session {
    /// A session of up to `count` test packets.
    pub fn new(count: u32) -> Session {
        Session {
            sent_at: Vec::with_capacity(count as usize),
            answered: Vec::with_capacity(count as usize),
            highest: None,
            report: StampReport::default(),
            rtt: Histogram::default(),
            net: Histogram::default(),
            residence: Histogram::default(),
            forward: Histogram::default(),
        }
    }

    /// Notes test packet `seq` (the next one) sent at `t1` (NTP).
    pub fn sent(&mut self, t1: u64) -> u32 {
        let seq = self.sent_at.len() as u32;
        self.sent_at.push(t1);
        self.answered.push(false);
        self.report.sent += 1;
        seq
    }

    /// Takes an answer received at `t4_ns` (Unix nanoseconds).
    pub fn answer(&mut self, bytes: &[u8], t4_ns: u64) {
        let reply = StampReply::parse(bytes)
            .ok()
            .filter(|r| self.sent_at.get(r.sender_seq as usize) == Some(&r.sender_tx));
        let Some(r) = reply else {
            match self.echoed(bytes) {
                Some(seq) => self.echo(seq, t4_ns),
                None => self.report.foreign += 1,
            }
            return;
        };
        let seq = r.sender_seq;
        let t1 = self.sent_at[seq as usize];
        if !self.first_answer(seq) {
            return;
        }
        let ns = reflect::unix_nanos_from_ntp;
        let (t1, t2, t3) = (ns(t1), ns(r.rx), ns(r.tx));
        let rtt = t4_ns.saturating_sub(t1);
        let residence = t3.saturating_sub(t2);
        self.rtt.record(rtt);
        self.residence.record(residence);
        self.net.record(rtt.saturating_sub(residence));
        self.forward.record(t2.saturating_sub(t1));
        self.report.sender_ttl = Some(r.sender_ttl);
    }

    /// The sequence number of `bytes` if they are one of our test packets unchanged: its
    /// sequence number and transmit timestamp ours, the rest of the header zero (an echo
    /// service's answer; a STAMP reflector's fills the sender's fields from byte 16 on).
    fn echoed(&self, bytes: &[u8]) -> Option<u32> {
        if bytes.len() < STAMP_LEN || bytes[16..STAMP_LEN].iter().any(|&b| b != 0) {
            return None;
        }
        let seq = u32::from_be_bytes(bytes[0..4].try_into().ok()?);
        let t1 = u64::from_be_bytes(bytes[4..12].try_into().ok()?);
        (self.sent_at.get(seq as usize) == Some(&t1)).then_some(seq)
    }

    /// Counts test packet `seq` answered by an echo at `t4_ns`: its round trip only.
    fn echo(&mut self, seq: u32, t4_ns: u64) {
        if !self.first_answer(seq) {
            return;
        }
        self.report.echoes += 1;
        let t1 = reflect::unix_nanos_from_ntp(self.sent_at[seq as usize]);
        let rtt = t4_ns.saturating_sub(t1);
        self.rtt.record(rtt);
    }

    /// Marks `seq` answered: false (counted as a duplicate) when it was before; counts the
    /// answer and whether it came out of order.
    fn first_answer(&mut self, seq: u32) -> bool {
        if std::mem::replace(&mut self.answered[seq as usize], true) {
            self.report.duplicates += 1;
            return false;
        }
        self.report.received += 1;
        if self.highest.is_some_and(|h| seq < h) {
            self.report.reordered += 1;
        }
        self.highest = self.highest.max(Some(seq));
        true
    }

    /// The report.
    pub fn report(&self) -> StampReport {
        StampReport {
            lost: self.report.sent - self.report.received,
            rtt: self.rtt.summary(),
            net_rtt: self.net.summary(),
            residence: self.residence.summary(),
            forward: self.forward.summary(),
            ..self.report.clone()
        }
    }
}

/// Runs a session: sends `count` test packets at `rate`, takes answers as they come, waits
/// `linger` after the last one (or until every test packet was answered).
///
/// # Errors
/// When the socket cannot be opened or a send fails.
pub fn run(config: &StampConfig) -> std::io::Result<StampReport> {
    let bind = config.bind.unwrap_or_else(|| {
        if config.target.is_ipv4() {
            "0.0.0.0:0".parse().unwrap_or(config.target)
        } else {
            "[::]:0".parse().unwrap_or(config.target)
        }
    });
    let socket = UdpSocket::bind(bind)?;
    socket.set_nonblocking(true)?;
    let size = config.size.max(STAMP_LEN);
    let mut packet = vec![0u8; size];
    let mut buf = vec![0u8; 65536];
    let mut session = Session::new(config.count);
    let start = Instant::now();
    let mono = |at: Instant| at.duration_since(start).as_nanos() as u64;
    let mut pacer = Pacer::new(Some(config.rate), 0);
    let mut done_at: Option<Instant> = None;
    let mut send_seconds = 0.0;
    loop {
        let now = Instant::now();
        if session.report.sent < u64::from(config.count) {
            let allowed = pacer.allowance(mono(now), 64);
            for _ in 0..allowed {
                if session.report.sent >= u64::from(config.count) {
                    break;
                }
                let t1 = reflect::ntp_from_unix_nanos(wall_ns());
                let seq = session.report.sent as u32;
                reflect::stamp_request(&mut packet, size, seq, t1, config.error)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                match socket.send_to(&packet, config.target) {
                    Ok(_) => {
                        session.sent(t1);
                        pacer.sent(1);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        } else if done_at.is_none() {
            done_at = Some(now);
            send_seconds = now.duration_since(start).as_secs_f64();
        }
        loop {
            match socket.recv_from(&mut buf) {
                Ok((n, from)) if from == config.target || from.ip() == config.target.ip() => {
                    session.answer(&buf[..n], wall_ns());
                }
                Ok(_) => session.report.foreign += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(e),
            }
        }
        if let Some(done) = done_at {
            let all = session.report.received >= session.report.sent;
            if all || done.elapsed() >= config.linger {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let mut report = session.report();
    report.seconds = start.elapsed().as_secs_f64();
    report.send_seconds = send_seconds;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reflector on a loopback socket, answering `count` test packets (every other one twice,
    /// the first one never).
    fn reflector(count: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            for i in 0..count {
                let (n, from) = socket.recv_from(&mut buf).unwrap();
                if i == 0 {
                    continue;
                }
                let now = wall_ns();
                let rx = reflect::ntp_from_unix_nanos(now);
                let tx = reflect::ntp_from_unix_nanos(now + 1000);
                let len = reflect::stamp(&mut buf, n, rx, tx, ErrorEstimate(1), 64).unwrap();
                socket.send_to(&buf[..len], from).unwrap();
                if i % 2 == 0 {
                    socket.send_to(&buf[..len], from).unwrap();
                }
            }
        });
        (addr, handle)
    }

    #[test]
    fn a_session_counts_loss_duplicates_and_delays() {
        let (addr, handle) = reflector(20);
        let mut config = StampConfig::new(addr);
        config.count = 20;
        config.rate = 2000.0;
        config.size = 100;
        config.linger = Duration::from_millis(300);
        let r = run(&config).unwrap();
        handle.join().unwrap();
        assert_eq!((r.sent, r.received, r.lost), (20, 19, 1));
        assert_eq!(r.duplicates, 9); // i = 2, 4, ..., 18
        assert_eq!((r.reordered, r.foreign), (0, 0));
        let (rtt, net, res) = (r.rtt.unwrap(), r.net_rtt.unwrap(), r.residence.unwrap());
        assert!(rtt.min_ns > 0 && net.max_ns <= rtt.max_ns);
        // The residence the reflector wrote: 1 µs (the histogram's buckets are within 3.2%).
        assert!((968..=1001).contains(&res.p50_ns), "{res:?}");
        assert_eq!(r.sender_ttl, Some(64));
    }

    #[test]
    fn an_echo_answers_with_its_round_trip_only() {
        let mut s = Session::new(3);
        let t1 = reflect::ntp_from_unix_nanos(5_000_000_000);
        s.sent(t1);
        s.sent(t1 + 1);
        let mut request = [0u8; 64];
        reflect::stamp_request(&mut request, 64, 1, t1 + 1, ErrorEstimate(1)).unwrap();
        s.answer(&request, 5_000_250_000);
        s.answer(&request, 5_000_260_000);
        let mut not_ours = request;
        not_ours[11] ^= 0x40; // another transmit timestamp
        s.answer(&not_ours, 5_000_270_000);
        let r = s.report();
        assert_eq!(
            (r.received, r.echoes, r.duplicates, r.foreign, r.lost),
            (1, 1, 1, 1, 1)
        );
        let rtt = r.rtt.unwrap();
        assert!((242_000..=250_000).contains(&rtt.p50_ns), "{rtt:?}");
        assert!(
            r.residence.is_none() && r.forward.is_none() && r.net_rtt.is_none(),
            "no reflector timestamps"
        );
    }

    #[test]
    fn answers_that_are_not_ours_are_foreign() {
        let mut s = Session::new(2);
        let t1 = reflect::ntp_from_unix_nanos(5_000_000_000);
        s.sent(t1);
        let mut answer = [0u8; 44];
        reflect::stamp_request(&mut answer, 44, 0, t1, ErrorEstimate(1)).unwrap();
        let mut reflected = answer;
        reflect::stamp(&mut reflected, 44, t1, t1, ErrorEstimate(1), 1).unwrap();
        s.answer(&reflected[..40], 6_000_000_000); // too short
        let mut wrong_ts = reflected;
        wrong_ts[28] ^= 1; // not our timestamp
        s.answer(&wrong_ts, 6_000_000_000);
        let mut unknown = reflected;
        unknown[27] = 9; // sequence number never sent
        s.answer(&unknown, 6_000_000_000);
        s.answer(&reflected, 6_000_000_000);
        let r = s.report();
        assert_eq!((r.foreign, r.received, r.lost), (3, 1, 0));
        assert_eq!(r.rtt.unwrap().p50_ns, 1_000_000_000);
    }
}
