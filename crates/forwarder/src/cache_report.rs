//! `xfwd show cache`: the valid entries of every run loop's route cache, asked of the loops
//! themselves (each cache is owned by its loop alone, `&mut self`, no locks on the packet
//! path).
//!
//! The control thread [`ask`](CacheBoard::ask)s: it bumps a request number and waits (at
//! most a timeout) until every registered queue has answered it. Each router looks at the
//! number once per loop turn (one atomic load; idle loops turn at least every 50 ms) and,
//! when it changed, copies its cache's valid entries into the board. The copy allocates, in
//! the turn after a request, never per packet.
#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dataplane::route::{Reject, Route};
use serde::Serialize;

/// One valid route cache entry of one queue: the key (destination, TOS, ingress) and the
/// decision a hit gives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CachedRoute {
    /// The run loop (queue) whose cache holds it.
    pub queue: u32,
    /// The destination address.
    pub dst: IpAddr,
    /// The TOS byte (IPv6: traffic class) of the key.
    pub tos: u8,
    /// The ingress interface index of the key.
    pub iif: u32,
    /// What a hit decides: `forward`, `local`, `punt`, `blackhole`, `unreachable`,
    /// `prohibit`, `no_route`, `drop`.
    pub decision: &'static str,
    /// Forward: the egress interface index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oif: Option<u32>,
    /// Forward: the next hop (the gateway, or the destination on a connected route).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
    /// Forward: the next hop's MAC address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lladdr: Option<String>,
    /// Forward: the path MTU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Punt or drop: the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// Milliseconds until the entry expires; `None`: it lasts until the routes change.
    pub expires_ms: Option<u64>,
}

impl CachedRoute {
    /// The report of one entry of `queue`'s cache at `now` (the router's clock, ns).
    ///
    /// ```
    /// use dataplane::route::{Reject, Route};
    /// use forwarder::cache_report::CachedRoute;
    /// let key = dst_cache::FlowKey::v4("192.0.2.1".parse().unwrap(), 0, 3);
    /// let entry = CachedRoute::new(1, &key, &Route::Reject(Reject::Blackhole), u64::MAX, 0);
    /// assert_eq!((entry.decision, entry.iif, entry.expires_ms), ("blackhole", 3, None));
    /// ```
    pub fn new(
        queue: u32,
        key: &dst_cache::FlowKey,
        route: &Route,
        expires: u64,
        now: u64,
    ) -> Self {
        let mut entry = CachedRoute {
            queue,
            dst: key.dst(),
            tos: key.tos(),
            iif: key.iif(),
            decision: "forward",
            oif: None,
            next_hop: None,
            lladdr: None,
            mtu: None,
            reason: None,
            expires_ms: (expires != u64::MAX).then(|| expires.saturating_sub(now) / 1_000_000),
        };
        match route {
            Route::Forward(hop) => {
                entry.oif = Some(hop.oif);
                entry.next_hop = Some(dataplane::route::ip_of(hop.next_hop_family, hop.next_hop()));
                entry.lladdr = hop.dst_mac().map(mac_text);
                entry.mtu = Some(hop.mtu);
            }
            Route::Local => entry.decision = "local",
            Route::Punt(reason) => {
                entry.decision = "punt";
                entry.reason = Some(reason.name());
            }
            Route::Reject(reject) => {
                entry.decision = match reject {
                    Reject::Blackhole => "blackhole",
                    Reject::NoRoute => "no_route",
                    Reject::Unreachable => "unreachable",
                    Reject::Prohibit => "prohibit",
                }
            }
            Route::Drop(reason) => {
                entry.decision = "drop";
                entry.reason = Some(reason.name());
            }
        }
        entry
    }
}

/// A MAC address as `ip` prints it.
pub(crate) fn mac_text(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Where the control thread asks for the route caches and the run loops answer.
///
/// ```
/// use std::time::Duration;
/// use forwarder::cache_report::CacheBoard;
///
/// let board = std::sync::Arc::new(CacheBoard::default());
/// board.register();
/// let loop_side = board.clone();
/// let run_loop = std::thread::spawn(move || {
///     let mut seen = 0;
///     loop {
///         if let Some(request) = loop_side.poll(&mut seen) {
///             loop_side.answer(0, request, Vec::new());
///             return;
///         }
///         std::thread::sleep(Duration::from_millis(1));
///     }
/// });
/// let answers = board.ask(Duration::from_secs(5)).unwrap();
/// assert_eq!(answers, Vec::new());
/// run_loop.join().unwrap();
/// ```
#[derive(Debug, Default)]
pub struct CacheBoard {
    request: AtomicU64,
    queues: AtomicUsize,
    answers: Mutex<Vec<(u32, u64, Vec<CachedRoute>)>>,
}

impl CacheBoard {
    /// Counts one more run loop that answers.
    pub fn register(&self) {
        self.queues.fetch_add(1, Ordering::Relaxed);
    }

    /// A request made since `seen` (which it updates), if any: one atomic load when none.
    pub fn poll(&self, seen: &mut u64) -> Option<u64> {
        let request = self.request.load(Ordering::Acquire);
        if request == *seen {
            return None;
        }
        *seen = request;
        Some(request)
    }

    /// A loop's answer to `request`: its cache's valid entries.
    pub fn answer(&self, queue: u32, request: u64, entries: Vec<CachedRoute>) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers.retain(|(q, _, _)| *q != queue);
        answers.push((queue, request, entries));
    }

    /// Asks every registered loop for its entries and waits for all answers, sorted by queue
    /// and then by destination.
    ///
    /// # Errors
    /// The queues that did not answer within `timeout` (a loop stuck or gone).
    pub fn ask(&self, timeout: Duration) -> Result<Vec<CachedRoute>, String> {
        let request = self.request.fetch_add(1, Ordering::AcqRel) + 1;
        let queues = self.queues.load(Ordering::Relaxed);
        let deadline = Instant::now() + timeout;
        loop {
            {
                let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
                let done: Vec<&(u32, u64, Vec<CachedRoute>)> =
                    answers.iter().filter(|(_, r, _)| *r >= request).collect();
                if done.len() >= queues {
                    let mut all: Vec<CachedRoute> = done
                        .iter()
                        .flat_map(|(_, _, e)| e.iter().cloned())
                        .collect();
                    all.sort_by_key(|a| (a.queue, a.dst, a.iif));
                    return Ok(all);
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "{} of {queues} run loops answered within {timeout:?}",
                        done.len()
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
