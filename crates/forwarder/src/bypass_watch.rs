//! Netfilter and tc watched while xfwd runs: what it may not bypass diverts every frame to
//! the kernel until it is gone.
//!
//! The start-up checks ([`crate::netfilter::check`], [`crate::tc::check`]) refuse to start
//! when rules or tc act on forwarded traffic. Rules can also appear later (a firewall
//! reloaded, a container started). [`BypassWatch`] reads both again every [`WATCH_PERIOD`]
//! in the link monitor's thread; when something appears that the configuration does not
//! allow xfwd to bypass (`netfilter = "refuse"`, `tc = "refuse"`, the defaults), or the
//! ruleset cannot be read, it asks for the XDP program's `divert` switch
//! ([`crate::xdp::XdpProgram::set_divert`]): every frame then goes to the kernel, which
//! forwards it through those rules, until they are gone and xfwd forwards again. Fail closed:
//! the kernel decides rather than xfwd forwarding past a firewall.
//!
//! With `bypass`, what appears later is logged once and forwarded past, as at start.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::config::BypassMode;

/// How often the watch reads the rules again.
pub const WATCH_PERIOD: Duration = Duration::from_secs(2);

/// What the watch asks of the XDP program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Divert {
    /// Every frame to the kernel, for these reasons (chains, tc hooks, a read error).
    Start(Vec<String>),
    /// Decide per frame again.
    Stop,
}

/// Reads netfilter and tc every [`WATCH_PERIOD`] and says when to divert.
///
/// ```no_run
/// use forwarder::bypass_watch::{BypassWatch, Divert};
/// use forwarder::config::BypassMode;
/// // As root, in the forwarder's namespace:
/// let mut watch = BypassWatch::new(vec!["eth0".into()], BypassMode::Refuse, BypassMode::Refuse);
/// if let Some(Divert::Start(reasons)) = watch.poll(std::time::Instant::now()) {
///     eprintln!("diverting to the kernel: {reasons:?}");
/// }
/// ```
#[derive(Debug)]
pub struct BypassWatch {
    interfaces: Vec<String>,
    netfilter: BypassMode,
    tc: BypassMode,
    next: Option<Instant>,
    diverting: Vec<String>,
    logged: BTreeSet<String>,
}

impl BypassWatch {
    /// A watch over the served `interfaces` under the configured modes; the first
    /// [`poll`](Self::poll) reads after one period (the start-up checks have just run).
    pub fn new(interfaces: Vec<String>, netfilter: BypassMode, tc: BypassMode) -> BypassWatch {
        BypassWatch {
            interfaces,
            netfilter,
            tc,
            next: None,
            diverting: Vec::new(),
            logged: BTreeSet::new(),
        }
    }

    /// Reads the rules when a period has passed since the last read; `Some` when the
    /// divert switch must change.
    pub fn poll(&mut self, now: Instant) -> Option<Divert> {
        let due = *self.next.get_or_insert(now + WATCH_PERIOD);
        if now < due {
            return None;
        }
        self.next = Some(now + WATCH_PERIOD);
        let refused = self.refused();
        self.update(refused)
    }

    /// Why every frame goes to the kernel now (empty: it does not).
    pub fn diverting(&self) -> &[String] {
        &self.diverting
    }

    /// The new state from what the last read refused: a change, or `None`.
    fn update(&mut self, refused: Vec<String>) -> Option<Divert> {
        if refused == self.diverting {
            return None;
        }
        let was = !self.diverting.is_empty();
        self.diverting = refused;
        match (was, self.diverting.is_empty()) {
            (_, false) => Some(Divert::Start(self.diverting.clone())),
            (true, true) => Some(Divert::Stop),
            (false, true) => None,
        }
    }

    /// What xfwd may not bypass now, as text; what it may is logged once.
    fn refused(&mut self) -> Vec<String> {
        let mut refused = Vec::new();
        match crate::netfilter::forwarding_chains(&self.interfaces) {
            Ok(chains) => {
                let text = chains.iter().map(ToString::to_string);
                self.sort(text, self.netfilter, "netfilter", &mut refused);
            }
            Err(e) => refused.push(format!("netfilter ruleset unreadable: {e}")),
        }
        match crate::tc::served_hooks(&self.interfaces) {
            Ok((hooks, warnings)) => {
                let text = hooks.iter().map(ToString::to_string);
                self.sort(text, self.tc, "tc", &mut refused);
                for warning in warnings {
                    if self.logged.insert(warning.clone()) {
                        tracing::warn!("{warning}");
                    }
                }
            }
            Err(e) => refused.push(format!("tc unreadable: {e}")),
        }
        refused
    }

    /// Puts each found item into `refused` under `refuse`, else logs it once as bypassed.
    fn sort(
        &mut self,
        found: impl Iterator<Item = String>,
        mode: BypassMode,
        key: &str,
        refused: &mut Vec<String>,
    ) {
        for item in found {
            match mode {
                BypassMode::Refuse => refused.push(item),
                BypassMode::Bypass => {
                    if self.logged.insert(item.clone()) {
                        tracing::warn!(%item, "{key} = \"bypass\": not applied to forwarded traffic");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> BypassWatch {
        BypassWatch::new(vec![], BypassMode::Refuse, BypassMode::Refuse)
    }

    #[test]
    fn diverts_while_something_is_refused_and_resumes_after() {
        let mut w = watch();
        assert_eq!(w.update(vec![]), None, "nothing, nothing to change");
        let chain = "nftables: inet f fw (hook forward): 1 rule".to_owned();
        assert_eq!(
            w.update(vec![chain.clone()]),
            Some(Divert::Start(vec![chain.clone()]))
        );
        assert_eq!(w.diverting(), std::slice::from_ref(&chain));
        assert_eq!(w.update(vec![chain.clone()]), None, "unchanged");
        let more = vec![chain.clone(), "tc: eth0 root: qdisc htb".to_owned()];
        assert_eq!(
            w.update(more.clone()),
            Some(Divert::Start(more)),
            "new reasons"
        );
        assert_eq!(w.update(vec![]), Some(Divert::Stop));
        assert!(w.diverting().is_empty());
        assert_eq!(w.update(vec![]), None);
    }

    #[test]
    fn reads_once_per_period() {
        let mut w = watch();
        let t0 = Instant::now();
        // The first read is one period after the first poll.
        assert_eq!(w.next, None);
        let _ = w.poll(t0);
        assert_eq!(w.next, Some(t0 + WATCH_PERIOD));
        let _ = w.poll(t0 + WATCH_PERIOD / 2);
        assert_eq!(w.next, Some(t0 + WATCH_PERIOD), "not due: no read");
    }

    #[test]
    fn bypassed_items_are_not_refused() {
        let mut w = BypassWatch::new(vec![], BypassMode::Bypass, BypassMode::Refuse);
        let mut refused = Vec::new();
        w.sort(
            ["nftables: inet f fw (hook forward): 1 rule".to_owned()].into_iter(),
            BypassMode::Bypass,
            "netfilter",
            &mut refused,
        );
        assert!(refused.is_empty());
        assert_eq!(w.logged.len(), 1, "logged once");
        w.sort(
            ["tc: eth0 root: qdisc htb".to_owned()].into_iter(),
            BypassMode::Refuse,
            "tc",
            &mut refused,
        );
        assert_eq!(refused, ["tc: eth0 root: qdisc htb"]);
    }
}
