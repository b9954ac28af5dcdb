//! The lab as a whole: bringing it up, taking it down, reporting what exists.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::netns::{self, Netns};
use crate::topology::{DST0, FWD0, FWD1, INTERFACES, LINK_IPV4_LEN, LINK_IPV6_LEN, LINKS, Role};
use crate::{LabError, LabStatus};

/// The first address of the block the extra IPv4 prefixes are carved from (after the links).
const EXTRA_IPV4_START: u32 = u32::from_be_bytes([198, 18, 2, 0]);
/// The end (exclusive) of that block: 198.18.0.0/15 ends at 198.19.255.255.
const EXTRA_IPV4_END: u32 = u32::from_be_bytes([198, 20, 0, 0]);
/// Extra IPv6 prefixes are the /64s of 2001:db8:1::/48, so at most 2^16 of them.
const EXTRA_IPV6_MAX: usize = 1 << 16;

/// The description of a lab: its name prefix and the extra prefixes routed behind `dst`.
///
/// The wiring itself is fixed ([`topology`](crate::topology)); a `Lab` names one instance of it,
/// so several labs (say, parallel tests) can exist at once under different prefixes.
///
/// ```no_run
/// use xfwd_lab::{Lab, Role};
///
/// let lab = Lab::new("xfwd-lab")?.with_extra_prefixes(100, 24)?;
/// lab.up()?;
/// assert_eq!(lab.netns(Role::Fwd), "xfwd-lab-fwd");
/// lab.down()?;
/// # Ok::<(), xfwd_lab::LabError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lab {
    prefix: String,
    extra_prefixes: usize,
    extra_ipv4_len: u8,
    queues: u32,
}

impl Lab {
    /// The prefix of the lab that `cargo xtask lab` manages by default.
    pub const DEFAULT_PREFIX: &'static str = "xfwd-lab";
    /// The default IPv4 length of the extra prefixes.
    pub const DEFAULT_EXTRA_IPV4_LEN: u8 = 24;
    /// The most RX/TX queues a lab veth can be given ([`with_queues`](Self::with_queues)).
    pub const MAX_QUEUES: u32 = 64;

    /// A lab whose namespaces are `PREFIX-src`, `PREFIX-fwd` and `PREFIX-dst`, with no extra
    /// prefixes.
    ///
    /// # Errors
    /// [`LabError::InvalidName`] unless the prefix is 1..=40 characters of `A-Za-z0-9-_`
    /// starting with a letter.
    pub fn new(prefix: &str) -> Result<Self, LabError> {
        netns::validate_name(prefix)?;
        Ok(Lab {
            prefix: prefix.to_owned(),
            extra_prefixes: 0,
            extra_ipv4_len: Self::DEFAULT_EXTRA_IPV4_LEN,
            queues: 1,
        })
    }

    /// A lab with a prefix no other lab of this machine uses: `xfwd-TAG-PID-N`.
    ///
    /// # Errors
    /// [`LabError::InvalidName`] when `tag` makes the prefix invalid.
    ///
    /// ```
    /// let a = xfwd_lab::Lab::unique("t")?;
    /// let b = xfwd_lab::Lab::unique("t")?;
    /// assert_ne!(a.prefix(), b.prefix());
    /// # Ok::<(), xfwd_lab::LabError>(())
    /// ```
    pub fn unique(tag: &str) -> Result<Self, LabError> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self::new(&format!("xfwd-{tag}-{}-{n}", std::process::id()))
    }

    /// Routes `count` extra IPv4 prefixes of length `ipv4_len` and as many IPv6 /64s behind
    /// `dst`: `fwd` routes them via `dst`, and `dst` accepts them as local (so it answers pings
    /// to any of their addresses).
    ///
    /// IPv4 prefixes are carved in order from 198.18.2.0 to the end of 198.18.0.0/15; IPv6
    /// ones are the /64s of 2001:db8:1::/48.
    ///
    /// # Errors
    /// [`LabError::TooManyPrefixes`] when `count` of them do not fit (at /24: 510).
    pub fn with_extra_prefixes(mut self, count: usize, ipv4_len: u8) -> Result<Self, LabError> {
        let max = match ipv4_len {
            16..=32 => {
                let step = 1u32 << (32 - ipv4_len);
                let start = EXTRA_IPV4_START.div_ceil(step) * step;
                (EXTRA_IPV4_END.saturating_sub(start) / step) as usize
            }
            _ => 0,
        }
        .min(EXTRA_IPV6_MAX);
        if count > max {
            return Err(LabError::TooManyPrefixes {
                count,
                ipv4_len,
                max,
            });
        }
        self.extra_prefixes = count;
        self.extra_ipv4_len = ipv4_len;
        Ok(self)
    }

    /// Gives every veth of the lab `queues` RX and `queues` TX queues on both ends (default 1,
    /// veth's own default), for multi-queue AF_XDP: on veth, a frame sent on TX queue *q*
    /// arrives on the peer's RX queue *q*.
    ///
    /// # Errors
    /// [`LabError::InvalidQueues`] unless `queues` is 1..=[`MAX_QUEUES`](Self::MAX_QUEUES).
    ///
    /// ```
    /// let lab = xfwd_lab::Lab::new("doc")?.with_queues(2)?;
    /// assert_eq!(lab.queues(), 2);
    /// assert!(xfwd_lab::Lab::new("doc")?.with_queues(0).is_err());
    /// # Ok::<(), xfwd_lab::LabError>(())
    /// ```
    pub fn with_queues(mut self, queues: u32) -> Result<Self, LabError> {
        if !(1..=Self::MAX_QUEUES).contains(&queues) {
            return Err(LabError::InvalidQueues(queues));
        }
        self.queues = queues;
        Ok(self)
    }

    /// RX (and TX) queues of each veth end.
    pub fn queues(&self) -> u32 {
        self.queues
    }

    /// The lab's name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The name of the namespace that plays `role`.
    pub fn netns(&self, role: Role) -> String {
        format!("{}-{}", self.prefix, role.name())
    }

    /// The extra IPv4 prefixes, as (network address, length).
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    ///
    /// let lab = xfwd_lab::Lab::new("doc")?.with_extra_prefixes(2, 24)?;
    /// let prefixes: Vec<_> = lab.extra_ipv4_prefixes().collect();
    /// assert_eq!(prefixes, [(Ipv4Addr::new(198, 18, 2, 0), 24), (Ipv4Addr::new(198, 18, 3, 0), 24)]);
    /// # Ok::<(), xfwd_lab::LabError>(())
    /// ```
    pub fn extra_ipv4_prefixes(&self) -> impl Iterator<Item = (Ipv4Addr, u8)> + use<> {
        let len = self.extra_ipv4_len;
        let step = 1u32 << (32 - u32::from(len));
        let start = EXTRA_IPV4_START.div_ceil(step) * step;
        (0..self.extra_prefixes as u32).map(move |i| (Ipv4Addr::from(start + i * step), len))
    }

    /// The extra IPv6 prefixes, as (network address, length).
    ///
    /// ```
    /// let lab = xfwd_lab::Lab::new("doc")?.with_extra_prefixes(2, 24)?;
    /// let last = lab.extra_ipv6_prefixes().last().unwrap();
    /// assert_eq!(last, ("2001:db8:1:1::".parse().unwrap(), 64));
    /// # Ok::<(), xfwd_lab::LabError>(())
    /// ```
    pub fn extra_ipv6_prefixes(&self) -> impl Iterator<Item = (Ipv6Addr, u8)> + use<> {
        // At most 2^16 prefixes (checked by `with_extra_prefixes`), so `i` fits the u16.
        (0..self.extra_prefixes)
            .map(|i| (Ipv6Addr::new(0x2001, 0xdb8, 1, i as u16, 0, 0, 0, 0), 64))
    }

    /// Creates the namespaces, links, addresses and routes.
    ///
    /// Either the whole lab comes up, or whatever this call created is removed again before the
    /// error is returned. Nothing outside the lab's own namespaces is touched.
    ///
    /// # Errors
    /// [`LabError::AlreadyUp`] when any of the lab's namespaces exists, else the first command
    /// that failed.
    pub fn up(&self) -> Result<(), LabError> {
        let existing: Vec<String> = Role::ALL
            .iter()
            .map(|&role| self.netns(role))
            .filter(|name| netns::exists(name))
            .collect();
        if !existing.is_empty() {
            return Err(LabError::AlreadyUp(existing));
        }
        // Each `Netns` deletes its namespace when dropped: an error below unwinds them all.
        let [src, fwd, dst] = Role::ALL.map(|role| Netns::create(&self.netns(role)));
        let (src, fwd, dst) = (src?, fwd?, dst?);
        let node = |role: Role| match role {
            Role::Src => &src,
            Role::Fwd => &fwd,
            Role::Dst => &dst,
        };

        for (end, peer) in LINKS {
            // Run inside the first end's namespace, so the host's namespace never sees either end.
            node(end.role).add_veth_queues(
                end.name,
                end.mac,
                node(peer.role).name(),
                peer.name,
                peer.mac,
                self.queues,
            )?;
        }
        for (end, peer) in LINKS {
            for iface in [end, peer] {
                let ns = node(iface.role);
                ns.ip([
                    "addr",
                    "add",
                    &format!("{}/{LINK_IPV4_LEN}", iface.ipv4),
                    "dev",
                    iface.name,
                ])?;
                let v6 = format!("{}/{LINK_IPV6_LEN}", iface.ipv6);
                ns.ip(["-6", "addr", "add", &v6, "dev", iface.name, "nodad"])?;
                ns.ip(["link", "set", iface.name, "up"])?;
            }
        }
        for iface in INTERFACES {
            wait_until_up(node(iface.role), iface.name)?;
        }
        for (role, gateway) in [(Role::Src, FWD0), (Role::Dst, FWD1)] {
            let ns = node(role);
            ns.ip(["route", "add", "default", "via", &gateway.ipv4.to_string()])?;
            ns.ip([
                "-6",
                "route",
                "add",
                "default",
                "via",
                &gateway.ipv6.to_string(),
            ])?;
        }
        fwd.run(enable_forwarding)?
            .map_err(|source| LabError::Enter {
                path: netns::path(fwd.name()),
                source,
            })?;
        self.add_extra_routes(fwd.name(), dst.name())?;

        for ns in [src, fwd, dst] {
            ns.keep();
        }
        Ok(())
    }

    /// Deletes the veth link `LINKS[link]` (0: `src0`–`fwd0`, 1: `fwd1`–`dst0`) and creates it
    /// again as [`up`](Self::up) made it: the same names, MACs, queues and addresses, up, with
    /// the peer's default route and (for link 1) the extra prefixes' routes in `fwd`, which the
    /// kernel removed with the link. The new interfaces have new ifindexes: this is how a soak
    /// test replaces an egress interface under a running forwarder.
    ///
    /// ```no_run
    /// use xfwd_lab::Lab;
    ///
    /// let lab = Lab::unique("relink")?.up_scoped()?;
    /// lab.recreate_link(1)?; // fwd1 and dst0 are new devices now
    /// # Ok::<(), xfwd_lab::LabError>(())
    /// ```
    ///
    /// # Errors
    /// [`LabError::InvalidLink`] for a link number other than 0 or 1, else the first command
    /// that failed (the link may then be missing: take the lab down).
    pub fn recreate_link(&self, link: usize) -> Result<(), LabError> {
        let &(end, peer) = LINKS.get(link).ok_or(LabError::InvalidLink(link))?;
        let end_ns = Netns::existing(&self.netns(end.role));
        let peer_ns = Netns::existing(&self.netns(peer.role));
        let result = (|| {
            if end_ns
                .ip(["-oneline", "link", "show", "dev", end.name])
                .is_ok()
            {
                end_ns.ip(["link", "del", end.name])?;
            }
            end_ns.add_veth_queues(
                end.name,
                end.mac,
                peer_ns.name(),
                peer.name,
                peer.mac,
                self.queues,
            )?;
            for (iface, ns) in [(end, &end_ns), (peer, &peer_ns)] {
                ns.ip([
                    "addr",
                    "add",
                    &format!("{}/{LINK_IPV4_LEN}", iface.ipv4),
                    "dev",
                    iface.name,
                ])?;
                let v6 = format!("{}/{LINK_IPV6_LEN}", iface.ipv6);
                ns.ip(["-6", "addr", "add", &v6, "dev", iface.name, "nodad"])?;
                ns.ip(["link", "set", iface.name, "up"])?;
            }
            wait_until_up(&end_ns, end.name)?;
            wait_until_up(&peer_ns, peer.name)?;
            let (outer, gateway) = if end.role == Role::Src {
                (&end_ns, peer)
            } else {
                (&peer_ns, end)
            };
            outer.ip([
                "route",
                "replace",
                "default",
                "via",
                &gateway.ipv4.to_string(),
            ])?;
            outer.ip([
                "-6",
                "route",
                "replace",
                "default",
                "via",
                &gateway.ipv6.to_string(),
            ])?;
            if end.name == FWD1.name && self.extra_prefixes > 0 {
                self.add_extra_via_dst(end_ns.name())?;
            }
            Ok(())
        })();
        end_ns.keep();
        peer_ns.keep();
        result
    }

    fn add_extra_via_dst(&self, fwd: &str) -> Result<(), LabError> {
        let mut via_dst = String::new();
        for (addr, len) in self.extra_ipv4_prefixes() {
            let _ = writeln!(
                via_dst,
                "route add {addr}/{len} via {} dev {}",
                DST0.ipv4, FWD1.name
            );
        }
        for (addr, len) in self.extra_ipv6_prefixes() {
            let _ = writeln!(
                via_dst,
                "route add {addr}/{len} via {} dev {}",
                DST0.ipv6, FWD1.name
            );
        }
        crate::command::ip_batch(fwd, &via_dst)
    }

    fn add_extra_routes(&self, fwd: &str, dst: &str) -> Result<(), LabError> {
        if self.extra_prefixes == 0 {
            return Ok(());
        }
        let mut local = String::new();
        for (addr, len) in self.extra_ipv4_prefixes() {
            let _ = writeln!(local, "route add local {addr}/{len} dev lo");
        }
        for (addr, len) in self.extra_ipv6_prefixes() {
            let _ = writeln!(local, "route add local {addr}/{len} dev lo");
        }
        self.add_extra_via_dst(fwd)?;
        crate::command::ip_batch(dst, &local)
    }

    /// Deletes the lab's namespaces (and with them its links and routes); returns the names
    /// deleted. Namespaces of other prefixes are never touched.
    ///
    /// # Errors
    /// The first `ip netns del` that failed (the others are still attempted).
    pub fn down(&self) -> Result<Vec<String>, LabError> {
        let mut deleted = Vec::new();
        let mut first_error = None;
        for role in Role::ALL.iter().rev() {
            let name = self.netns(*role);
            match netns::delete(&name) {
                Ok(true) => deleted.push(name),
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }

    /// What of the lab exists now: namespaces, interfaces, addresses, routes, forwarding.
    pub fn status(&self) -> LabStatus {
        LabStatus::probe(self)
    }

    /// Brings the lab up and returns a guard that takes it down when dropped (also when a test
    /// panics).
    ///
    /// # Errors
    /// As [`up`](Self::up).
    pub fn up_scoped(&self) -> Result<LabGuard, LabError> {
        self.up()?;
        Ok(LabGuard { lab: self.clone() })
    }
}

/// How long [`Lab::up`] waits for a veth to report carrier.
const LINK_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// Waits until `iface` in `ns` is operationally up (both veth ends are up and have carrier), so
/// that traffic sent right after [`Lab::up`] is not lost to a link still coming up.
fn wait_until_up(ns: &Netns, iface: &str) -> Result<(), LabError> {
    let deadline = Instant::now() + LINK_UP_TIMEOUT;
    loop {
        let line = ns.ip(["-oneline", "link", "show", "dev", iface])?;
        if line.contains("state UP") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LabError::LinkDown {
                netns: ns.name().to_owned(),
                iface: iface.to_owned(),
                timeout: LINK_UP_TIMEOUT,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sets IPv4 and IPv6 forwarding in the calling thread's network namespace.
fn enable_forwarding() -> std::io::Result<()> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")?;
    std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1")
}

/// A lab that is up, taken down when the guard is dropped.
#[derive(Debug)]
pub struct LabGuard {
    lab: Lab,
}

impl std::ops::Deref for LabGuard {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Err(e) = self.lab.down() {
            eprintln!("xfwd-lab: cannot take down lab {}: {e}", self.lab.prefix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::SRC0;

    #[test]
    fn extra_prefix_capacity() {
        let lab = Lab::new("t").unwrap();
        assert!(lab.clone().with_extra_prefixes(510, 24).is_ok());
        assert!(matches!(
            lab.clone().with_extra_prefixes(511, 24),
            Err(LabError::TooManyPrefixes { max: 510, .. })
        ));
        assert!(lab.clone().with_extra_prefixes(8000, 28).is_ok());
        assert!(lab.clone().with_extra_prefixes(1, 15).is_err());
        assert!(lab.clone().with_extra_prefixes(1, 33).is_err());
        let full = lab.clone().with_extra_prefixes(65_536, 32).unwrap();
        assert_eq!(full.extra_ipv6_prefixes().count(), 65_536);
        assert_eq!(
            full.extra_ipv4_prefixes().last(),
            Some((Ipv4Addr::new(198, 19, 1, 255), 32))
        );
        assert!(lab.with_extra_prefixes(65_537, 32).is_err());
    }

    #[test]
    fn extra_prefixes_are_aligned_and_disjoint_from_links() {
        for len in 17..=32 {
            let lab = Lab::new("t").unwrap().with_extra_prefixes(3, len).unwrap();
            for (addr, l) in lab.extra_ipv4_prefixes() {
                let bits = u32::from(addr);
                assert_eq!(l, len);
                assert_eq!(bits & ((1u64 << (32 - len)) - 1) as u32, 0, "{addr}/{len}");
                assert!(
                    (EXTRA_IPV4_START..EXTRA_IPV4_END).contains(&bits),
                    "{addr}/{len}"
                );
            }
        }
    }

    #[test]
    fn namespaces_are_named_after_the_prefix() {
        let lab = Lab::new("abc").unwrap();
        assert_eq!(
            Role::ALL.map(|r| lab.netns(r)),
            ["abc-src", "abc-fwd", "abc-dst"]
        );
        assert_eq!(SRC0.role, Role::Src);
        assert_eq!(DST0.role, Role::Dst);
    }

    /// `with_queues(2)` gives all four veth ends two RX and two TX queues; the default one.
    #[test]
    fn veth_queue_counts() {
        if !crate::privileged("veth_queue_counts") {
            return;
        }
        for queues in [1, 2] {
            let lab = Lab::unique("vq")
                .unwrap()
                .with_queues(queues)
                .unwrap()
                .up_scoped()
                .unwrap();
            for iface in INTERFACES {
                // The real queue counts (`ip -d` shows the allocated ones, which veth sets to
                // the number of possible CPUs when none are asked for): sysfs, as seen from
                // inside the namespace.
                let ns = lab.netns(iface.role);
                let dir = format!("/sys/class/net/{}/queues", iface.name);
                let listing = crate::command::ip(["netns", "exec", &ns, "ls", &dir]).unwrap();
                let count = |kind: &str| {
                    listing
                        .split_whitespace()
                        .filter(|q| q.starts_with(kind))
                        .count()
                };
                assert_eq!(
                    (count("rx-"), count("tx-")),
                    (queues as usize, queues as usize),
                    "{}: {listing}",
                    iface.name
                );
            }
        }
        assert!(matches!(
            Lab::new("t").unwrap().with_queues(65),
            Err(LabError::InvalidQueues(65))
        ));
    }

    /// `recreate_link(1)` gives fwd1 and dst0 new ifindexes with the same MACs, addresses,
    /// state and the routes the kernel removed with the old link.
    #[test]
    fn recreated_link_is_wired_as_before() {
        if !crate::privileged("recreated_link_is_wired_as_before") {
            return;
        }
        let lab = Lab::unique("relink")
            .unwrap()
            .with_extra_prefixes(2, 24)
            .unwrap()
            .up_scoped()
            .unwrap();
        let fwd = Netns::existing(&lab.netns(Role::Fwd));
        let show = |ns: &Netns| {
            ns.ip(["-oneline", "link", "show", "dev", FWD1.name])
                .unwrap()
        };
        let ifindex = |line: &str| line.split(':').next().unwrap().trim().to_owned();
        let before = show(&fwd);
        let routes_before = fwd.ip(["route", "show"]).unwrap();
        assert!(
            routes_before.contains("198.18.2.0/24 via"),
            "{routes_before}"
        );
        fwd.ip(["link", "del", FWD1.name]).unwrap();
        assert!(!fwd.ip(["route", "show"]).unwrap().contains("198.18.2.0/24"));
        lab.recreate_link(1).unwrap();
        let after = show(&fwd);
        assert_ne!(ifindex(&before), ifindex(&after), "a new device");
        assert!(
            after.contains(&FWD1.mac_string()) && after.contains("state UP"),
            "{after}"
        );
        assert_eq!(fwd.ip(["route", "show"]).unwrap(), routes_before);
        let dst = Netns::existing(&lab.netns(Role::Dst));
        assert!(
            dst.ip(["route", "show"])
                .unwrap()
                .contains("default via 198.18.1.1")
        );
        // While the old one still exists, it is replaced too.
        lab.recreate_link(0).unwrap();
        assert!(matches!(
            lab.recreate_link(2),
            Err(LabError::InvalidLink(2))
        ));
        fwd.keep();
        dst.keep();
    }

    /// A failure at any step of `up` leaves none of the lab's namespaces behind.
    #[test]
    fn failed_up_removes_what_it_made() {
        if !crate::privileged("failed_up_removes_what_it_made") {
            return;
        }
        let mut failures = 0;
        for n in 0.. {
            let lab = Lab::unique("failup")
                .unwrap()
                .with_extra_prefixes(2, 24)
                .unwrap();
            crate::command::fault::fail_after(n);
            let result = lab.up();
            let never_reached = crate::command::fault::clear();
            if never_reached {
                // `up` ran fewer than `n + 1` commands: every step has been failed once.
                assert!(result.is_ok(), "{result:?}");
                assert!(lab.status().is_up());
                lab.down().unwrap();
                assert!(lab.status().is_down());
                break;
            }
            let error = result.expect_err("the injected failure must surface");
            assert!(error.to_string().contains("injected failure"), "{error}");
            let status = lab.status();
            assert!(status.is_down(), "after failing command {n}: {status}");
            failures += 1;
        }
        assert!(failures > 10, "only {failures} steps were failed");
    }
}
