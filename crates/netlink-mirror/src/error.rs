//! Errors: starting a mirror ([`MirrorError`]) and mapping one kernel message ([`MapError`]).
#![forbid(unsafe_code)]

use std::path::PathBuf;

/// Why a mirror could not start or stopped working.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The network namespace file could not be opened or entered.
    #[error("cannot enter network namespace {path}: {source}")]
    Netns {
        /// The namespace file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A netlink socket could not be opened, configured or subscribed.
    #[error("netlink socket ({what}): {source}")]
    Socket {
        /// The step that failed.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The control thread could not be spawned.
    #[error("cannot spawn the control thread: {0}")]
    Thread(std::io::Error),
    /// The control thread ended before its first synchronisation.
    #[error("the control thread stopped: {0}")]
    Stopped(String),
    /// `wait_synced` timed out.
    #[error("not synchronised within {0:?}")]
    Timeout(std::time::Duration),
}

/// Why one kernel message could not be mirrored. Every such message is counted (by
/// [`MapError::kind`]) and logged; none is dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The bytes did not decode as the message they claim to be.
    #[error("undecodable message: {0}")]
    Decode(String),
    /// A required attribute is missing.
    #[error("{message}: missing {attribute}")]
    Missing {
        /// The message type.
        message: &'static str,
        /// The attribute.
        attribute: &'static str,
    },
    /// An address of the wrong family, or a family neither IPv4 nor IPv6.
    #[error("{message}: address family mismatch ({detail})")]
    Family {
        /// The message type.
        message: &'static str,
        /// What was found.
        detail: String,
    },
    /// A route type the FIB does not hold (`RTN_NAT`, `RTN_XRESOLVE`, unknown values).
    #[error("route type {0} cannot be mirrored")]
    RouteType(u8),
    /// A source-specific (IPv6 subtree, `from PREFIX`) route.
    #[error("source-specific route (from /{0}) cannot be mirrored")]
    SourceSpecific(u8),
    /// A route through a nexthop object (`nhid N`) the mirror has not been told of.
    #[error("route through unknown nexthop object {0}")]
    NexthopObject(u32),
    /// A route with lightweight-tunnel encapsulation (MPLS, seg6, ...).
    #[error("route with encapsulation cannot be mirrored")]
    Encap,
    /// A route attribute the mirror does not know (by `RTA_*` number).
    #[error("route attribute {0} cannot be mirrored")]
    RouteAttribute(u16),
    /// A gateway of the other family (an IPv4 route via an IPv6 gateway, RFC 5549).
    #[error("gateway of the other family ({0}) cannot be mirrored")]
    GatewayFamily(String),
    /// A route the FIB refused as malformed (bad prefix, missing next hop, ...).
    #[error("route refused by the FIB: {0}")]
    Route(#[from] fib_trie::RouteError),
    /// A rule the FIB refused (bad prefix, backward goto).
    #[error("rule refused by the FIB: {0}")]
    Rule(#[from] fib_trie::RuleError),
    /// An address the address table refused.
    #[error("address refused by the table: {0}")]
    Addr(#[from] addr_table::AddrError),
    /// A policy the policy database refused.
    #[error("policy refused by the database: {0}")]
    Policy(#[from] policy_tree::Error),
    /// An xfrm policy feature the policy database does not model (marks, socket policies, ...).
    #[error("xfrm policy uses {0}, which cannot be mirrored")]
    PolicyFeature(&'static str),
}

impl MapError {
    /// For a route the FIB cannot represent but the kernel routes by: the kind of its
    /// "kernel decides" stand-in (a punt route over its prefix); `None` for errors that are
    /// not about a route's meaning (undecodable, refused, ...).
    pub fn kernel_decides(&self) -> Option<&'static str> {
        match self {
            MapError::RouteType(_) => Some("route-type"),
            MapError::SourceSpecific(_) => Some("source-specific"),
            MapError::Encap => Some("encap"),
            MapError::RouteAttribute(_) => Some("route-attribute"),
            MapError::GatewayFamily(_) => Some("gateway-family"),
            _ => None,
        }
    }

    /// A short stable name for counting errors by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            MapError::Decode(_) => "decode",
            MapError::Missing { .. } => "missing-attribute",
            MapError::Family { .. } => "family",
            MapError::RouteType(_) => "route-type",
            MapError::SourceSpecific(_) => "source-specific-route",
            MapError::NexthopObject(_) => "nexthop-object",
            MapError::Encap => "route-encap",
            MapError::RouteAttribute(_) => "route-attribute",
            MapError::GatewayFamily(_) => "gateway-family",
            MapError::Route(_) => "route-refused",
            MapError::Rule(_) => "rule-refused",
            MapError::Addr(_) => "addr-refused",
            MapError::Policy(_) => "policy-refused",
            MapError::PolicyFeature(_) => "policy-feature",
        }
    }
}
