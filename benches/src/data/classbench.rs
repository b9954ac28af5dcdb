//! ClassBench packet classification rule sets and a packet trace.
//!
//! ```no_run
//! use xfwd_benches::data::classbench::{self, RuleSet};
//!
//! let rules = RuleSet::Fw10k.load()?;
//! let trace = classbench::fw_10k_trace()?;
//! let first_match = rules.iter().position(|rule| rule.matches(&trace[0]));
//! assert!(first_match.is_some());
//! # Ok::<(), xfwd_benches::data::Error>(())
//! ```

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use super::{Error, Prefix, numbered_lines, read_xz};

/// One of the shipped ClassBench rule sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleSet {
    /// Access-control-list style rules (9,826).
    Acl10k,
    /// Firewall style rules (9,388); [`fw_10k_trace`] was generated from them.
    Fw10k,
    /// IP-chain style rules (9,569).
    Ipc10k,
}

impl RuleSet {
    /// Every shipped rule set.
    pub const ALL: [RuleSet; 3] = [RuleSet::Acl10k, RuleSet::Fw10k, RuleSet::Ipc10k];

    /// The file name inside [`data_dir`](super::data_dir).
    pub fn file_name(self) -> &'static str {
        match self {
            RuleSet::Acl10k => "acl_10k.xz",
            RuleSet::Fw10k => "fw_10k.xz",
            RuleSet::Ipc10k => "ipc_10k.xz",
        }
    }

    /// The number of rules in the set.
    pub fn rule_count(self) -> usize {
        match self {
            RuleSet::Acl10k => 9_826,
            RuleSet::Fw10k => 9_388,
            RuleSet::Ipc10k => 9_569,
        }
    }

    /// Decompresses and parses the set, in priority order (the first rule wins).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Parse`] on a bad line or a rule count
    /// other than [`rule_count`](Self::rule_count).
    pub fn load(self) -> Result<Vec<Rule>, Error> {
        let file = self.file_name();
        let rules = parse_rules(&read_xz(file)?, file)?;
        expect_count(file, rules.len(), self.rule_count())?;
        Ok(rules)
    }
}

/// A ClassBench rule: a 5-tuple pattern plus TCP flags under a mask.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Source address prefix.
    pub src: Prefix<Ipv4Addr>,
    /// Destination address prefix.
    pub dst: Prefix<Ipv4Addr>,
    /// Source port range (inclusive; `0..=65535` is any).
    pub src_ports: RangeInclusive<u16>,
    /// Destination port range (inclusive).
    pub dst_ports: RangeInclusive<u16>,
    /// IP protocol value, compared under `proto_mask`.
    pub proto: u8,
    /// Protocol mask: `0xff` for an exact protocol, `0` for any.
    pub proto_mask: u8,
    /// TCP flags value, to compare under `flags_mask` (the trace has no flags to compare).
    pub flags: u16,
    /// TCP flags mask: `0` for any.
    pub flags_mask: u16,
}

impl Rule {
    /// Whether the rule's 5-tuple matches a packet header (flags are not compared: the trace
    /// does not carry TCP flags, see [`TraceHeader::flags`]).
    pub fn matches(&self, header: &TraceHeader) -> bool {
        self.src.contains(header.src)
            && self.dst.contains(header.dst)
            && self.src_ports.contains(&header.src_port)
            && self.dst_ports.contains(&header.dst_port)
            && header.proto & self.proto_mask == self.proto & self.proto_mask
    }
}

/// A packet header of a ClassBench trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceHeader {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// IP protocol.
    pub proto: u8,
    /// The sixth field, kept as it is. Its values (mostly 0, 0x02001000 and 0xffffffff) do not
    /// follow the rules' flag masks, so it is no TCP flags field and [`Rule::matches`] ignores it.
    pub flags: u32,
    /// Index (from 0) of the rule the header was generated from; it matches that rule, and an
    /// earlier rule may match it too.
    pub rule: usize,
}

/// The 93,880 packet headers generated from [`RuleSet::Fw10k`].
///
/// # Errors
/// As [`RuleSet::load`].
pub fn fw_10k_trace() -> Result<Vec<TraceHeader>, Error> {
    const FILE: &str = "fw_10k_trace.xz";
    let trace = parse_trace(&read_xz(FILE)?, FILE)?;
    expect_count(FILE, trace.len(), 93_880)?;
    Ok(trace)
}

fn expect_count(file: &str, found: usize, expected: usize) -> Result<(), Error> {
    if found == expected {
        Ok(())
    } else {
        Err(Error::parse(
            file,
            found,
            format!("expected {expected} entries, found {found}"),
        ))
    }
}

/// Parses rules in ClassBench format; `source` names the input in errors.
///
/// ```
/// use xfwd_benches::data::classbench;
///
/// let line = "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t53 : 53\t0x11/0xFF\t0x0000/0x0000\n";
/// let rules = classbench::parse_rules(line, "<input>")?;
/// assert_eq!(rules[0].dst_ports, 53..=53);
/// assert_eq!((rules[0].proto, rules[0].proto_mask), (17, 0xff));
/// # Ok::<(), xfwd_benches::data::Error>(())
/// ```
pub fn parse_rules(text: &str, source: &str) -> Result<Vec<Rule>, Error> {
    numbered_lines(text)
        .map(|(line_no, line)| parse_rule(line).map_err(|r| Error::parse(source, line_no, r)))
        .collect()
}

fn parse_rule(line: &str) -> Result<Rule, String> {
    let line = line.strip_prefix('@').ok_or("a rule starts with `@`")?;
    let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
    let [src, dst, src_ports, dst_ports, proto, flags] = fields[..] else {
        return Err(format!(
            "expected 6 tab-separated fields, found {}",
            fields.len()
        ));
    };
    let (proto, proto_mask) = masked(proto, u8::from_str_radix)?;
    let (flags, flags_mask) = masked(flags, u16::from_str_radix)?;
    Ok(Rule {
        src: src.parse()?,
        dst: dst.parse()?,
        src_ports: port_range(src_ports)?,
        dst_ports: port_range(dst_ports)?,
        proto,
        proto_mask,
        flags,
        flags_mask,
    })
}

fn port_range(field: &str) -> Result<RangeInclusive<u16>, String> {
    let bad = || format!("`{field}` is not a port range `lo : hi`");
    let (lo, hi) = field.split_once(':').ok_or_else(bad)?;
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo > hi {
        return Err(bad());
    }
    Ok(lo..=hi)
}

fn masked<T, E>(field: &str, parse: fn(&str, u32) -> Result<T, E>) -> Result<(T, T), String> {
    let bad = || format!("`{field}` is not `0xVALUE/0xMASK`");
    let (value, mask) = field.split_once('/').ok_or_else(bad)?;
    let hex = |s: &str| {
        let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
        parse(digits, 16).ok()
    };
    Ok((hex(value).ok_or_else(bad)?, hex(mask).ok_or_else(bad)?))
}

/// Parses a trace: seven whitespace-separated decimal fields per header.
///
/// ```
/// use xfwd_benches::data::classbench;
///
/// let trace = classbench::parse_trace("167772161\t3232235777\t1024\t53\t17\t0\t4\n", "<input>")?;
/// assert_eq!(trace[0].src, std::net::Ipv4Addr::new(10, 0, 0, 1));
/// assert_eq!(trace[0].rule, 4);
/// # Ok::<(), xfwd_benches::data::Error>(())
/// ```
pub fn parse_trace(text: &str, source: &str) -> Result<Vec<TraceHeader>, Error> {
    numbered_lines(text)
        .map(|(line_no, line)| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let header = match fields[..] {
                [src, dst, sport, dport, proto, flags, rule] => (|| {
                    Some(TraceHeader {
                        src: Ipv4Addr::from(src.parse::<u32>().ok()?),
                        dst: Ipv4Addr::from(dst.parse::<u32>().ok()?),
                        src_port: sport.parse().ok()?,
                        dst_port: dport.parse().ok()?,
                        proto: proto.parse().ok()?,
                        flags: flags.parse().ok()?,
                        rule: rule.parse().ok()?,
                    })
                })(),
                _ => None,
            };
            header.ok_or_else(|| {
                Error::parse(
                    source,
                    line_no,
                    "expected 7 decimal fields: src dst sport dport proto flags rule",
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_malformed_rules() {
        for bad in [
            "10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x11/0xFF\t0x0000/0x0000",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x11/0xFF",
            "@10.0.0.0/8\t0.0.0.0/0\t9 : 1\t0 : 65535\t0x11/0xFF\t0x0000/0x0000",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65536\t0 : 65535\t0x11/0xFF\t0x0000/0x0000",
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t0 : 65535\t17/0xFF\t0x0000/0x0000",
            "@10.0.0.1/8\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x11/0xFF\t0x0000/0x0000",
        ] {
            let err = parse_rules(bad, "t").unwrap_err();
            assert!(matches!(err, Error::Parse { line: 1, .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn rejects_malformed_trace() {
        for bad in [
            "1 2 3 4 5 6",
            "1 2 3 70000 5 6 7",
            "1 2 3 4 5 6 x",
            "1 2 3 4 5 6 7 8",
        ] {
            assert!(parse_trace(bad, "t").is_err(), "{bad}");
        }
    }

    #[test]
    fn matching_honours_masks() {
        let rule = &parse_rules(
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 90\t0x06/0xFF\t0x1000/0x1000",
            "t",
        )
        .unwrap()[0];
        let header = TraceHeader {
            src: Ipv4Addr::new(10, 9, 8, 7),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            src_port: 4000,
            dst_port: 85,
            proto: 6,
            flags: 0x0200_1000,
            rule: 0,
        };
        assert!(rule.matches(&header));
        assert!(rule.matches(&TraceHeader { flags: 0, ..header }));
        assert!(!rule.matches(&TraceHeader {
            proto: 17,
            ..header
        }));
        assert!(!rule.matches(&TraceHeader {
            dst_port: 91,
            ..header
        }));
        assert!(!rule.matches(&TraceHeader {
            src: Ipv4Addr::new(11, 0, 0, 0),
            ..header
        }));
    }
}
