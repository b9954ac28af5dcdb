//! Route metrics (`RTA_METRICS`): what a route says about its path, the kernel's
//! `fib_metrics` array.
//!
//! Of these only the path MTU changes how a router forwards (a packet larger than the route's
//! MTU needs fragmenting or an ICMP error); the others are TCP parameters for locally
//! originated connections. They are all kept, because two routes that differ only in metrics
//! are different routes to the kernel (different `fib_info`s) and a mirror must show them as
//! `ip route` does.
#![forbid(unsafe_code)]

use std::fmt;

/// The metrics of a route: `RTAX_*` values, the lock mask and the congestion control
/// algorithm. An absent metric is `None` (the kernel stores 0 for "unset").
///
/// ```
/// use fib_trie::Metrics;
///
/// let mut m = Metrics::default();
/// m.set(Metrics::MTU, 1400);
/// m.lock(Metrics::MTU);
/// m.set(Metrics::ADVMSS, 1360);
/// assert_eq!(m.mtu(), Some(1400));
/// assert!(m.is_locked(Metrics::MTU));
/// assert_eq!(m.to_string(), "mtu lock 1400 advmss 1360");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Metrics {
    /// `RTAX_MTU`, inline because forwarding reads it; 0 when unset.
    mtu: u32,
    /// `RTAX_LOCK`: bit `1 << id` set when metric `id` is locked.
    locked: u32,
    /// The other numeric metrics, sorted by id, without zeros.
    others: Box<[(u16, u32)]>,
    /// `RTAX_CC_ALGO`: the congestion control algorithm's name.
    cc_algo: Option<Box<str>>,
}

impl Metrics {
    /// `RTAX_LOCK`: the mask of locked metrics (kept apart: see [`Metrics::lock`]).
    pub const LOCK: u16 = 1;
    /// `RTAX_MTU`: the path MTU.
    pub const MTU: u16 = 2;
    /// `RTAX_WINDOW`.
    pub const WINDOW: u16 = 3;
    /// `RTAX_RTT`.
    pub const RTT: u16 = 4;
    /// `RTAX_RTTVAR`.
    pub const RTTVAR: u16 = 5;
    /// `RTAX_SSTHRESH`.
    pub const SSTHRESH: u16 = 6;
    /// `RTAX_CWND`.
    pub const CWND: u16 = 7;
    /// `RTAX_ADVMSS`.
    pub const ADVMSS: u16 = 8;
    /// `RTAX_REORDERING`.
    pub const REORDERING: u16 = 9;
    /// `RTAX_HOPLIMIT`.
    pub const HOPLIMIT: u16 = 10;
    /// `RTAX_INITCWND`.
    pub const INITCWND: u16 = 11;
    /// `RTAX_FEATURES`.
    pub const FEATURES: u16 = 12;
    /// `RTAX_RTO_MIN`.
    pub const RTO_MIN: u16 = 13;
    /// `RTAX_INITRWND`.
    pub const INITRWND: u16 = 14;
    /// `RTAX_QUICKACK`.
    pub const QUICKACK: u16 = 15;
    /// `RTAX_CC_ALGO` (a name: [`Metrics::cc_algo`]).
    pub const CC_ALGO: u16 = 16;
    /// `RTAX_FASTOPEN_NO_COOKIE`.
    pub const FASTOPEN_NO_COOKIE: u16 = 17;

    /// Whether no metric is set.
    pub fn is_empty(&self) -> bool {
        self.mtu == 0 && self.locked == 0 && self.others.is_empty() && self.cc_algo.is_none()
    }

    /// The path MTU, if the route sets one.
    #[inline]
    pub fn mtu(&self) -> Option<u32> {
        (self.mtu != 0).then_some(self.mtu)
    }

    /// The value of numeric metric `id` (`RTAX_*`), if set. [`Metrics::LOCK`] answers the
    /// lock mask.
    pub fn get(&self, id: u16) -> Option<u32> {
        let v = match id {
            Self::MTU => self.mtu,
            Self::LOCK => self.locked,
            _ => match self.others.binary_search_by_key(&id, |&(i, _)| i) {
                Ok(at) => self.others[at].1,
                Err(_) => 0,
            },
        };
        (v != 0).then_some(v)
    }

    /// Sets numeric metric `id` to `value` (0 unsets it, as in the kernel). Setting
    /// [`Metrics::LOCK`] replaces the lock mask; [`Metrics::CC_ALGO`] is a name and ignored
    /// here (see [`Metrics::set_cc_algo`]).
    pub fn set(&mut self, id: u16, value: u32) {
        match id {
            Self::MTU => self.mtu = value,
            Self::LOCK => self.locked = value,
            Self::CC_ALGO => {}
            _ => {
                let mut others = std::mem::take(&mut self.others).into_vec();
                match (others.binary_search_by_key(&id, |&(i, _)| i), value) {
                    (Ok(at), 0) => {
                        others.remove(at);
                    }
                    (Ok(at), v) => others[at].1 = v,
                    (Err(_), 0) => {}
                    (Err(at), v) => others.insert(at, (id, v)),
                }
                self.others = others.into_boxed_slice();
            }
        }
    }

    /// Locks metric `id`: the kernel then never overrides it (for example with a learnt
    /// path MTU). `ip route` shows `mtu lock 1400`.
    pub fn lock(&mut self, id: u16) {
        if id < 32 {
            self.locked |= 1 << id;
        }
    }

    /// Whether metric `id` is locked.
    pub fn is_locked(&self, id: u16) -> bool {
        id < 32 && self.locked & (1 << id) != 0
    }

    /// The congestion control algorithm (`congctl`), if set.
    pub fn cc_algo(&self) -> Option<&str> {
        self.cc_algo.as_deref()
    }

    /// Sets the congestion control algorithm (`None` unsets it).
    pub fn set_cc_algo(&mut self, name: Option<&str>) {
        self.cc_algo = name.map(Box::from);
    }

    /// The numeric metrics that are set, by id (without the lock mask), in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u32)> + '_ {
        let mtu = self.mtu().map(|v| (Self::MTU, v));
        mtu.into_iter().chain(self.others.iter().copied())
    }
}

/// The name `ip route` gives metric `id`.
fn name(id: u16) -> Option<&'static str> {
    Some(match id {
        Metrics::MTU => "mtu",
        Metrics::WINDOW => "window",
        Metrics::RTT => "rtt",
        Metrics::RTTVAR => "rttvar",
        Metrics::SSTHRESH => "ssthresh",
        Metrics::CWND => "cwnd",
        Metrics::ADVMSS => "advmss",
        Metrics::REORDERING => "reordering",
        Metrics::HOPLIMIT => "hoplimit",
        Metrics::INITCWND => "initcwnd",
        Metrics::FEATURES => "features",
        Metrics::RTO_MIN => "rto_min",
        Metrics::INITRWND => "initrwnd",
        Metrics::QUICKACK => "quickack",
        Metrics::FASTOPEN_NO_COOKIE => "fastopen_no_cookie",
        _ => return None,
    })
}

/// The metrics as `ip route show` prints them (`mtu lock 1400 advmss 1360 congctl cubic`),
/// with raw numbers (times in the kernel's units) and unknown ids as `metric<id>`.
impl fmt::Display for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for (id, v) in self.iter() {
            match name(id) {
                Some(n) => write!(f, "{sep}{n}")?,
                None => write!(f, "{sep}metric{id}")?,
            }
            if self.is_locked(id) {
                f.write_str(" lock")?;
            }
            write!(f, " {v}")?;
            sep = " ";
        }
        if let Some(cc) = &self.cc_algo {
            let lock = if self.is_locked(Self::CC_ALGO) {
                " lock"
            } else {
                ""
            };
            write!(f, "{sep}congctl{lock} {cc}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_and_unset_keep_the_others_sorted() {
        let mut m = Metrics::default();
        assert!(m.is_empty());
        m.set(Metrics::HOPLIMIT, 64);
        m.set(Metrics::ADVMSS, 1360);
        m.set(Metrics::MTU, 1400);
        m.set(Metrics::RTT, 5);
        let got: Vec<_> = m.iter().collect();
        assert_eq!(
            got,
            [
                (Metrics::MTU, 1400),
                (Metrics::RTT, 5),
                (Metrics::ADVMSS, 1360),
                (Metrics::HOPLIMIT, 64)
            ]
        );
        m.set(Metrics::RTT, 0);
        m.set(Metrics::MTU, 0);
        assert_eq!((m.get(Metrics::RTT), m.mtu()), (None, None));
        assert_eq!(m.get(Metrics::ADVMSS), Some(1360));
        m.set(Metrics::ADVMSS, 0);
        m.set(Metrics::HOPLIMIT, 0);
        assert!(m.is_empty());
    }

    #[test]
    fn equal_metrics_compare_and_hash_equal_whatever_the_order_set() {
        use std::hash::{BuildHasher, RandomState};
        let mut a = Metrics::default();
        a.set(Metrics::WINDOW, 10);
        a.set(Metrics::CWND, 3);
        let mut b = Metrics::default();
        b.set(Metrics::CWND, 3);
        b.set(Metrics::WINDOW, 10);
        let s = RandomState::new();
        assert_eq!(a, b);
        assert_eq!(s.hash_one(&a), s.hash_one(&b));
    }

    #[test]
    fn locks_and_names_render_like_ip_route() {
        let mut m = Metrics::default();
        m.set(Metrics::MTU, 1280);
        m.lock(Metrics::MTU);
        m.set(Metrics::INITCWND, 10);
        m.set(30, 7);
        m.set_cc_algo(Some("bbr"));
        assert_eq!(
            m.to_string(),
            "mtu lock 1280 initcwnd 10 metric30 7 congctl bbr"
        );
        assert_eq!(m.get(Metrics::LOCK), Some(1 << Metrics::MTU));
        m.lock(40); // beyond the mask: ignored, not a panic
        assert!(!m.is_locked(40));
    }
}
