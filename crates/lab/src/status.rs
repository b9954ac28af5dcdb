//! A report of what of a lab exists, for `cargo xtask lab status` and for tests.

use std::fmt;

use crate::command::ip;
use crate::netns;
use crate::{Lab, Role};

/// What exists of a lab, node by node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabStatus {
    /// The lab's prefix.
    pub prefix: String,
    /// One entry per role, in [`Role::ALL`] order.
    pub nodes: Vec<NodeStatus>,
}

/// What exists of one node of a lab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's role.
    pub role: Role,
    /// Its namespace's name.
    pub netns: String,
    /// What is inside, when the namespace exists.
    pub detail: Option<NodeDetail>,
}

/// The contents of a node's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDetail {
    /// `ip -brief address` lines: name, state, addresses.
    pub interfaces: Vec<String>,
    /// Routes in the main IPv4 table.
    pub ipv4_routes: usize,
    /// Routes in the main IPv6 table.
    pub ipv6_routes: usize,
    /// Whether IPv4 and IPv6 forwarding are both on, if that could be read.
    pub forwarding: Option<bool>,
}

impl LabStatus {
    pub(crate) fn probe(lab: &Lab) -> Self {
        let nodes = Role::ALL
            .iter()
            .map(|&role| {
                let name = lab.netns(role);
                let detail = netns::exists(&name).then(|| NodeDetail::probe(&name));
                NodeStatus {
                    role,
                    netns: name,
                    detail,
                }
            })
            .collect();
        LabStatus {
            prefix: lab.prefix().to_owned(),
            nodes,
        }
    }

    /// Whether every namespace of the lab exists.
    pub fn is_up(&self) -> bool {
        self.nodes.iter().all(|node| node.detail.is_some())
    }

    /// Whether none of the lab's namespaces exists.
    pub fn is_down(&self) -> bool {
        self.nodes.iter().all(|node| node.detail.is_none())
    }
}

impl NodeDetail {
    fn probe(netns: &str) -> Self {
        let lines = |args: &[&str]| -> Vec<String> {
            let mut full = vec!["-n", netns];
            full.extend_from_slice(args);
            ip(full)
                .map(|out| {
                    out.lines()
                        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                        .collect()
                })
                .unwrap_or_default()
        };
        let forwarding = netns::run_in(netns, || {
            let on = |path| std::fs::read_to_string(path).map(|v| v.trim() == "1");
            Ok::<_, std::io::Error>(
                on("/proc/sys/net/ipv4/ip_forward")?
                    && on("/proc/sys/net/ipv6/conf/all/forwarding")?,
            )
        })
        .ok()
        .and_then(Result::ok);
        NodeDetail {
            interfaces: lines(&["-brief", "address", "show"]),
            ipv4_routes: lines(&["-4", "route", "show", "table", "main"]).len(),
            ipv6_routes: lines(&["-6", "route", "show", "table", "main"]).len(),
            forwarding,
        }
    }
}

impl fmt::Display for LabStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let present = self.nodes.iter().filter(|n| n.detail.is_some()).count();
        let state = match present {
            0 => "down",
            n if n == self.nodes.len() => "up",
            _ => "partly up (run `lab down` to clean up)",
        };
        writeln!(
            f,
            "lab {}: {state}, {present}/{} namespaces",
            self.prefix,
            self.nodes.len()
        )?;
        for node in &self.nodes {
            let Some(detail) = &node.detail else {
                writeln!(f, "  {:<3}  {}: absent", node.role, node.netns)?;
                continue;
            };
            let forwarding = match detail.forwarding {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            };
            writeln!(
                f,
                "  {:<3}  {}: {} IPv4 / {} IPv6 routes, forwarding {forwarding}",
                node.role, node.netns, detail.ipv4_routes, detail.ipv6_routes
            )?;
            for line in &detail.interfaces {
                writeln!(f, "         {line}")?;
            }
        }
        Ok(())
    }
}
