//! Netfilter rules on the paths of forwarded traffic, found at start so that xfwd can refuse
//! to bypass them (docs/forwarder.md, "What xfwd bypasses").
//!
//! Frames xfwd forwards never reach the kernel's IP stack: nftables and iptables chains on the
//! prerouting, forward and postrouting hooks, conntrack and NAT, and netdev ingress/egress
//! chains on the served devices never see them. [`forwarding_chains`] lists every chain that
//! could change what happens to such a frame:
//!
//! - **nftables** (iptables-nft included), read over netlink (`NETLINK_NETFILTER`,
//!   `NFT_MSG_GETCHAIN` and `NFT_MSG_GETRULE` dumps of every family): base chains of the `ip`,
//!   `ip6` and `inet` families on `prerouting`, `forward` or `postrouting` (and `inet`
//!   `ingress`), and `netdev` chains on `ingress`/`egress` of a served device, that hold a
//!   rule or have policy `drop`;
//! - **legacy iptables** (`iptables-legacy`, `ip6tables-legacy`): the tables instantiated in
//!   the namespace (`/proc/thread-self/net/ip{,6}_tables_names`: the calling thread's
//!   namespace, which `/proc/net` is not after a setns(2) of one thread), read with
//!   `IPT_SO_GET_INFO` / `IPT_SO_GET_ENTRIES`: built-in `PREROUTING`, `FORWARD` and
//!   `POSTROUTING` chains that hold a rule or have policy `DROP`.
//!
//! Empty chains with policy accept (what `iptables -L` leaves behind) change nothing and are
//! not listed. The nfnetlink framing is written by hand in this one module (there is no
//! netlink-packet crate for nf_tables; candidates for upstreaming: the chain and rule
//! attribute parsers).

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use netlink_packet_core::{NetlinkBuffer, NlasIterator};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// What a chain on the path of forwarded traffic holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterChain {
    /// Who owns it: `nftables` (iptables-nft included) or `iptables-legacy` /
    /// `ip6tables-legacy`.
    pub source: &'static str,
    /// The family (`ip`, `ip6`, `inet`, `netdev`).
    pub family: &'static str,
    /// The table.
    pub table: String,
    /// The chain.
    pub chain: String,
    /// The hook (`prerouting`, `forward`, `postrouting`, `ingress`, `egress`).
    pub hook: &'static str,
    /// The devices of a `netdev` (or `inet` ingress) chain.
    pub devices: Vec<String>,
    /// Its rules.
    pub rules: usize,
    /// Its policy drops what no rule accepts.
    pub policy_drop: bool,
}

impl fmt::Display for FilterChain {
    /// ```
    /// use forwarder::netfilter::FilterChain;
    /// let c = FilterChain {
    ///     source: "nftables", family: "inet", table: "filter".into(), chain: "fw".into(),
    ///     hook: "forward", devices: vec![], rules: 2, policy_drop: true,
    /// };
    /// assert_eq!(c.to_string(), "nftables: inet filter fw (hook forward): 2 rules, policy drop");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {} {} (hook {}",
            self.source, self.family, self.table, self.chain, self.hook
        )?;
        if !self.devices.is_empty() {
            write!(f, " on {}", self.devices.join(","))?;
        }
        write!(
            f,
            "): {} rule{}",
            self.rules,
            if self.rules == 1 { "" } else { "s" }
        )?;
        if self.policy_drop {
            f.write_str(", policy drop")?;
        }
        Ok(())
    }
}

/// Every chain of the calling thread's namespace that could change forwarded traffic
/// arriving on or leaving by the devices `served` (see the module documentation).
///
/// ```no_run
/// // As root, in the forwarder's namespace:
/// for chain in forwarder::netfilter::forwarding_chains(&["eth0".into()])? {
///     println!("{chain}");
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// When the netlink dump or the iptables socket options fail (other than nf_tables or
/// ip_tables not being there at all).
pub fn forwarding_chains(served: &[String]) -> io::Result<Vec<FilterChain>> {
    let mut out = nft_chains(served)?;
    for v6 in [false, true] {
        out.extend(legacy_chains(v6)?);
    }
    Ok(out)
}

/// The refusal of [`check`]: the chains xfwd would bypass.
#[derive(Debug)]
pub struct Bypassed(pub Vec<FilterChain>);

impl fmt::Display for Bypassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "netfilter rules act on forwarded traffic, which xfwd would bypass \
             (frames it forwards never see nftables/iptables, conntrack or NAT):"
        )?;
        for chain in &self.0 {
            writeln!(f, "  {chain}")?;
        }
        write!(
            f,
            "remove them, or set `netfilter = \"bypass\"` in the configuration \
             (--netfilter bypass) to forward without them (docs/forwarder.md)"
        )
    }
}

impl std::error::Error for Bypassed {}

/// The start-up check: `Ok` with the chains bypassed (empty when there are none, or when
/// `bypass` allows them), else the refusal naming them.
///
/// # Errors
/// [`Bypassed`] when a chain could change forwarded traffic and `bypass` is false; an
/// [`io::Error`] (as `anyhow`) when the ruleset cannot be read (xfwd then does not start
/// either: it cannot tell).
pub fn check(served: &[String], bypass: bool) -> anyhow::Result<Vec<FilterChain>> {
    let chains = forwarding_chains(served)
        .map_err(|e| anyhow::anyhow!("reading the netfilter ruleset (refusing to start): {e}"))?;
    if chains.is_empty() || bypass {
        return Ok(chains);
    }
    Err(Bypassed(chains).into())
}

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_GETRULE: u16 = 7;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr` then `struct nfgenmsg`.
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;

const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_DEV: u16 = 3;
const NFTA_HOOK_DEVS: u16 = 4;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
/// `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`, set on some attribute types.
const NLA_TYPE_MASK: u16 = 0x3fff;

const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_NETDEV: u8 = 5;
const NFPROTO_IPV6: u8 = 10;
const NF_DROP: u32 = 0;

/// The hook a base chain of `family` sits on, when forwarded traffic passes it (the `inet`
/// and `netdev` ingress/egress hooks only on a served device).
fn forwarding_hook(family: u8, hook: u32, on_served: bool) -> Option<&'static str> {
    match (family, hook) {
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, 0) => Some("prerouting"),
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, 2) => Some("forward"),
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, 4) => Some("postrouting"),
        (NFPROTO_INET, 5) if on_served => Some("ingress"),
        (NFPROTO_NETDEV, 0) if on_served => Some("ingress"),
        (NFPROTO_NETDEV, 1) if on_served => Some("egress"),
        _ => None,
    }
}

fn family_name(family: u8) -> &'static str {
    match family {
        NFPROTO_INET => "inet",
        NFPROTO_IPV4 => "ip",
        NFPROTO_IPV6 => "ip6",
        NFPROTO_NETDEV => "netdev",
        _ => "other",
    }
}

/// One nf_tables message of a dump: its family and attributes (type, value).
struct NftMessage {
    family: u8,
    attributes: Vec<(u16, Vec<u8>)>,
}

impl NftMessage {
    fn get(&self, kind: u16) -> Option<&[u8]> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, v)| v.as_slice())
    }

    fn string(&self, kind: u16) -> String {
        self.get(kind).map(c_string).unwrap_or_default()
    }
}

/// A NUL-terminated string attribute.
fn c_string(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// A big-endian `u32` attribute (nf_tables' numbers are in network order).
fn be_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

/// The attributes of a nested or top-level attribute area.
fn attributes(area: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    NlasIterator::new(area)
        .map(|nla| {
            let nla = nla.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            Ok((nla.kind() & NLA_TYPE_MASK, nla.value().to_vec()))
        })
        .collect()
}

/// Dumps every nf_tables object of message type `msg` (all families). `Ok(vec![])` when the
/// kernel has no nf_tables.
fn nft_dump(msg: u16) -> io::Result<Vec<NftMessage>> {
    let mut sock = match Socket::new(NETLINK_NETFILTER) {
        Ok(sock) => sock,
        // No nfnetlink in this kernel: no nf_tables either.
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let seq = 1u32;
    let mut request = [0u8; NLMSG_HDRLEN + NFGENMSG_LEN];
    request[..4].copy_from_slice(&((NLMSG_HDRLEN + NFGENMSG_LEN) as u32).to_ne_bytes());
    request[4..6].copy_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | msg).to_ne_bytes());
    request[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nfgenmsg: family NFPROTO_UNSPEC (every family), version NFNETLINK_V0, res_id 0.
    sock.send(&request, 0)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = sock.recv(&mut &mut buf[..], 0)?;
        let mut at = 0;
        while at + NLMSG_HDRLEN <= n {
            let message = NetlinkBuffer::new_checked(&buf[at..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let len = message.length() as usize;
            let payload = message.payload();
            match message.message_type() {
                NLMSG_DONE => return Ok(out),
                NLMSG_ERROR => {
                    let code = payload
                        .get(..4)
                        .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])));
                    if code == 0 {
                        return Ok(out);
                    }
                    // No nf_tables in this kernel: nothing to bypass there.
                    if [libc::EPROTONOSUPPORT, libc::EOPNOTSUPP, libc::ENOENT].contains(&-code) {
                        return Ok(Vec::new());
                    }
                    return Err(io::Error::from_raw_os_error(-code));
                }
                _ => {
                    let family = payload.first().copied().unwrap_or(0);
                    out.push(NftMessage {
                        family,
                        attributes: attributes(payload.get(NFGENMSG_LEN..).unwrap_or_default())?,
                    });
                }
            }
            // Messages are 4-byte aligned.
            at += (len + 3) & !3;
            if len == 0 {
                break;
            }
        }
    }
}

/// The nftables chains on the path of forwarded traffic that hold a rule or drop by policy.
fn nft_chains(served: &[String]) -> io::Result<Vec<FilterChain>> {
    let chains = nft_dump(NFT_MSG_GETCHAIN)?;
    if chains.is_empty() {
        return Ok(Vec::new());
    }
    let mut rules = BTreeMap::<(u8, String, String), usize>::new();
    for rule in nft_dump(NFT_MSG_GETRULE)? {
        let key = (
            rule.family,
            rule.string(NFTA_RULE_TABLE),
            rule.string(NFTA_RULE_CHAIN),
        );
        *rules.entry(key).or_default() += 1;
    }
    let mut out = Vec::new();
    for chain in &chains {
        let Some(hook) = chain.get(NFTA_CHAIN_HOOK) else {
            // A regular chain: only reached by a jump from a base chain (which has a rule).
            continue;
        };
        let hook = attributes(hook)?;
        let Some(hooknum) = hook
            .iter()
            .find(|(k, _)| *k == NFTA_HOOK_HOOKNUM)
            .and_then(|(_, v)| be_u32(v))
        else {
            continue;
        };
        let mut devices = Vec::new();
        for (kind, value) in &hook {
            match *kind {
                NFTA_HOOK_DEV => devices.push(c_string(value)),
                NFTA_HOOK_DEVS => {
                    devices.extend(attributes(value)?.iter().map(|(_, v)| c_string(v)));
                }
                _ => {}
            }
        }
        // The kernel reports a single device both ways.
        devices.sort();
        devices.dedup();
        let on_served = devices.iter().any(|d| served.contains(d));
        let Some(hook_name) = forwarding_hook(chain.family, hooknum, on_served) else {
            continue;
        };
        let table = chain.string(NFTA_CHAIN_TABLE);
        let name = chain.string(NFTA_CHAIN_NAME);
        let count = rules
            .get(&(chain.family, table.clone(), name.clone()))
            .copied()
            .unwrap_or(0);
        let policy_drop = chain.get(NFTA_CHAIN_POLICY).and_then(be_u32) == Some(NF_DROP);
        if count > 0 || policy_drop {
            out.push(FilterChain {
                source: "nftables",
                family: family_name(chain.family),
                table,
                chain: name,
                hook: hook_name,
                devices,
                rules: count,
                policy_drop,
            });
        }
    }
    Ok(out)
}

/// `IPT_SO_GET_INFO` / `IP6T_SO_GET_INFO`.
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` / `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `struct ipt_getinfo`: name[32], valid_hooks, hook_entry[5], underflow[5], num_entries,
/// size.
const GETINFO_LEN: usize = 84;
/// `sizeof(struct ipt_get_entries)`: name[32], size, then the 8-aligned entry table.
const GET_ENTRIES_HEADER: usize = 40;
/// The offset of `target_offset` in `struct ipt_entry` (after `struct ipt_ip` and `nfcache`)
/// and `struct ip6t_entry` (after `struct ip6t_ip6`).
const TARGET_OFFSET_V4: usize = 88;
const TARGET_OFFSET_V6: usize = 140;
/// `struct xt_entry_target`'s header, before a standard target's verdict.
const XT_TARGET_HEADER: usize = 32;
/// A standard target's verdict for `DROP` (`-NF_DROP - 1`).
const VERDICT_DROP: i32 = -1;

/// The legacy iptables built-in chains on the path of forwarded traffic that hold a rule or
/// have policy `DROP`.
fn legacy_chains(v6: bool) -> io::Result<Vec<FilterChain>> {
    let names = if v6 {
        "/proc/thread-self/net/ip6_tables_names"
    } else {
        "/proc/thread-self/net/ip_tables_names"
    };
    let names = match std::fs::read_to_string(names) {
        Ok(text) => text,
        // ip_tables not loaded: no legacy table anywhere.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        // The list is root's to read (mode 0440) and probing table names would create the
        // tables: an unprivileged xfwd (the service's user with capabilities) cannot tell.
        // Said once per process: the running instance reads the rules again every few
        // seconds (`bypass_watch`).
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    path = names,
                    "legacy iptables not checked: its table list is readable by root only \
                     (nftables and iptables-nft rules are checked)"
                );
            });
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for table in names.lines().map(str::trim).filter(|t| !t.is_empty()) {
        let (info, entries) = legacy_table(v6, table)?;
        out.extend(legacy_table_chains(v6, table, &info, &entries));
    }
    Ok(out)
}

/// The built-in chains of one legacy table's `ipt_getinfo` (`info`) and entry table
/// (`entries`) that are on the path of forwarded traffic and hold a rule or drop by policy.
fn legacy_table_chains(v6: bool, table: &str, info: &[u8], entries: &[u8]) -> Vec<FilterChain> {
    let word = |at: usize| -> u32 {
        info.get(at..at + 4)
            .map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
    };
    let valid_hooks = word(32);
    let target_offset_at = if v6 {
        TARGET_OFFSET_V6
    } else {
        TARGET_OFFSET_V4
    };
    let mut out = Vec::new();
    for (hook, chain, hook_name) in [
        (0, "PREROUTING", "prerouting"),
        (2, "FORWARD", "forward"),
        (4, "POSTROUTING", "postrouting"),
    ] {
        if valid_hooks & (1 << hook) == 0 {
            continue;
        }
        let entry = word(36 + 4 * hook) as usize;
        let underflow = word(56 + 4 * hook) as usize;
        // The chain's rules are the entries from its hook entry up to its policy (the
        // underflow entry); count them by walking next_offset.
        let mut rules = 0;
        let mut at = entry;
        while at < underflow {
            let next = entries
                .get(at + target_offset_at + 2..at + target_offset_at + 4)
                .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]])) as usize;
            if next == 0 {
                break;
            }
            rules += 1;
            at += next;
        }
        let policy_drop = entries
            .get(underflow + target_offset_at..underflow + target_offset_at + 2)
            .map(|b| usize::from(u16::from_ne_bytes([b[0], b[1]])))
            .and_then(|target| {
                let v = underflow + target + XT_TARGET_HEADER;
                entries.get(v..v + 4)
            })
            .is_some_and(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])) == VERDICT_DROP);
        if rules > 0 || policy_drop {
            out.push(FilterChain {
                source: if v6 {
                    "ip6tables-legacy"
                } else {
                    "iptables-legacy"
                },
                family: if v6 { "ip6" } else { "ip" },
                table: table.to_owned(),
                chain: chain.to_owned(),
                hook: hook_name,
                devices: Vec::new(),
                rules,
                policy_drop,
            });
        }
    }
    out
}

/// One legacy table's `ipt_getinfo` and entry table, read over a UDP socket (any IPv4/IPv6
/// socket reaches ip_tables' options; a raw one would need `CAP_NET_RAW`).
fn legacy_table(v6: bool, table: &str) -> io::Result<(Vec<u8>, Vec<u8>)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    let (domain, level) = if v6 {
        (libc::AF_INET6, libc::IPPROTO_IPV6)
    } else {
        (libc::AF_INET, libc::IPPROTO_IP)
    };
    // SAFETY: socket(2) with constant arguments; the descriptor is checked and owned below.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new, valid descriptor owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = table.as_bytes();
    if name.len() >= 32 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("iptables table name {table:?} too long"),
        ));
    }
    let mut info = vec![0u8; GETINFO_LEN];
    info[..name.len()].copy_from_slice(name);
    getsockopt(sock.as_raw_fd(), level, SO_GET_INFO, &mut info)?;
    let size = u32::from_ne_bytes(info[80..84].try_into().unwrap_or([0; 4])) as usize;
    let mut entries = vec![0u8; GET_ENTRIES_HEADER + size];
    entries[..name.len()].copy_from_slice(name);
    entries[32..36].copy_from_slice(&(size as u32).to_ne_bytes());
    getsockopt(sock.as_raw_fd(), level, SO_GET_ENTRIES, &mut entries)?;
    Ok((info, entries.split_off(GET_ENTRIES_HEADER)))
}

/// getsockopt(2) into `buf` (which also carries the request, as ip_tables' options do).
fn getsockopt(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut len = libc::socklen_t::try_from(buf.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer too large"))?;
    // SAFETY: `buf` is valid for writes of `len` bytes for the duration of the call, and the
    // kernel writes at most `len` bytes (it checks the length of every ip_tables option).
    let r = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_on_the_forwarding_path() {
        assert_eq!(forwarding_hook(NFPROTO_INET, 2, false), Some("forward"));
        assert_eq!(forwarding_hook(NFPROTO_IPV4, 0, false), Some("prerouting"));
        assert_eq!(forwarding_hook(NFPROTO_IPV6, 4, false), Some("postrouting"));
        // input and output: local traffic, which the kernel still handles.
        assert_eq!(forwarding_hook(NFPROTO_INET, 1, false), None);
        assert_eq!(forwarding_hook(NFPROTO_INET, 3, false), None);
        // netdev chains matter on the served devices only.
        assert_eq!(forwarding_hook(NFPROTO_NETDEV, 0, false), None);
        assert_eq!(forwarding_hook(NFPROTO_NETDEV, 0, true), Some("ingress"));
        assert_eq!(forwarding_hook(NFPROTO_NETDEV, 1, true), Some("egress"));
    }

    /// A legacy filter table as the kernel returns it: INPUT, FORWARD (one rule), OUTPUT,
    /// each policy a standard target; FORWARD's policy `policy`.
    fn filter_table(policy: i32) -> (Vec<u8>, Vec<u8>) {
        // Entries of 112 (ipt_entry) + 40 (xt_standard_target, padded) bytes.
        const E: usize = 152;
        let mut entries = vec![0u8; 6 * E];
        for i in 0..6 {
            let at = i * E;
            entries[at + 88..at + 90].copy_from_slice(&112u16.to_ne_bytes());
            entries[at + 90..at + 92].copy_from_slice(&(E as u16).to_ne_bytes());
            let verdict = if i == 3 { policy } else { -2 };
            entries[at + 112 + 32..at + 112 + 36].copy_from_slice(&verdict.to_ne_bytes());
        }
        let mut info = vec![0u8; GETINFO_LEN];
        info[32..36].copy_from_slice(&0b01110u32.to_ne_bytes());
        // INPUT: entry 0 (policy); FORWARD: rule at 1, policy at 2... laid out as
        // INPUT policy (0), FORWARD rule (1), FORWARD rule (2), FORWARD policy (3), OUTPUT
        // policy (4), ERROR (5).
        for (hook, entry, underflow) in [(1, 0, 0), (2, E, 3 * E), (3, 4 * E, 4 * E)] {
            info[36 + 4 * hook..40 + 4 * hook].copy_from_slice(&(entry as u32).to_ne_bytes());
            info[56 + 4 * hook..60 + 4 * hook].copy_from_slice(&(underflow as u32).to_ne_bytes());
        }
        (info, entries)
    }

    #[test]
    fn legacy_forward_rules_and_policy() {
        let (info, entries) = filter_table(-2);
        let chains = legacy_table_chains(false, "filter", &info, &entries);
        assert_eq!(chains.len(), 1);
        assert_eq!(chains[0].chain, "FORWARD");
        assert_eq!(chains[0].rules, 2);
        assert!(!chains[0].policy_drop);
        let (info, entries) = filter_table(VERDICT_DROP);
        assert!(legacy_table_chains(false, "filter", &info, &entries)[0].policy_drop);
    }

    #[test]
    fn legacy_truncated_table_is_not_a_panic() {
        let (info, _) = filter_table(-2);
        let chains = legacy_table_chains(false, "filter", &info, &[0u8; 7]);
        // Nothing readable: no rule counted, no policy seen.
        assert!(chains.is_empty());
        assert!(legacy_table_chains(true, "filter", &[], &[]).is_empty());
    }
}
