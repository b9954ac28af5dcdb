//! policy-tree on the ClassBench rule sets: every lookup of the fw_10k trace, and of packets
//! aimed at every rule of each set, equals the linear scan's.
//!
//! Rules become forward policies as `benches/data/README.md` suggests: the source and
//! destination prefixes and the protocol as selectors, a port range as an exact port when it
//! holds one port and as a wildcard otherwise, the line number as insertion order and as
//! priority (or, in the tie variant, a coarser priority so that insertion order decides ties).
//! Rules whose selector repeats an earlier one's (ports widened) are skipped, in both databases.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use policy_tree::{
    Action, Direction, Error, Flow, LinearDb, PolicyDb, PolicySpec, PolicyWriter, PortMatch,
    Prefix, Selector, TemplateId,
};
use xfwd_benches::data::classbench::{self, Rule, RuleSet, TraceHeader};

fn ports(range: &RangeInclusive<u16>) -> PortMatch {
    if range.start() == range.end() {
        PortMatch::exact(*range.start())
    } else {
        PortMatch::ANY
    }
}

fn spec(line: usize, rule: &Rule, priority: u32) -> PolicySpec {
    let prefix = |p: &xfwd_benches::data::Prefix<Ipv4Addr>| {
        Prefix::new(p.addr.into(), p.len).expect("loader checked the length")
    };
    let selector = Selector::new(prefix(&rule.src), prefix(&rule.dst))
        .unwrap()
        .proto(if rule.proto_mask == 0xff {
            rule.proto
        } else {
            0
        })
        .sport(ports(&rule.src_ports))
        .dport(ports(&rule.dst_ports));
    let action = match line % 3 {
        0 => Action::Allow,
        1 => Action::Block,
        _ => Action::Ipsec(TemplateId(line as u32)),
    };
    PolicySpec::new(selector, Direction::Fwd)
        .priority(priority)
        .action(action)
}

/// Loads `rules` into both databases; returns how many were skipped as duplicates.
fn load(rules: &[Rule], priority: impl Fn(usize) -> u32) -> (PolicyWriter, LinearDb, usize) {
    let mut db = PolicyWriter::new();
    let mut reference = LinearDb::new();
    let mut skipped = 0;
    for (line, rule) in rules.iter().enumerate() {
        let spec = spec(line, rule, priority(line));
        let ours = db.add(spec);
        assert_eq!(ours, reference.add(spec));
        match ours {
            Ok(_) => {}
            Err(Error::Exists { .. }) => skipped += 1,
            Err(e) => panic!("rule {line}: {e}"),
        }
    }
    (db, reference, skipped)
}

fn flow(h: &TraceHeader) -> Flow {
    Flow::v4(h.src, h.dst)
        .proto(h.proto)
        .ports(h.src_port, h.dst_port)
}

/// Packets aimed at each rule: its prefixes' first and last addresses, its lowest ports.
fn aimed(rules: &[Rule]) -> Vec<Flow> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    rules
        .iter()
        .map(|r| {
            let host = |p: &xfwd_benches::data::Prefix<Ipv4Addr>, noise: u64| {
                let span = u32::MAX.checked_shr(u32::from(p.len)).unwrap_or(0);
                Ipv4Addr::from(u32::from(p.addr) | (noise as u32 & span))
            };
            let pick = |range: &RangeInclusive<u16>, noise: u64| {
                let width = u64::from(range.end() - range.start()) + 1;
                range.start() + (noise % width) as u16
            };
            Flow::v4(host(&r.src, next()), host(&r.dst, next()))
                .proto(r.proto)
                .ports(pick(&r.src_ports, next()), pick(&r.dst_ports, next()))
        })
        .collect()
}

/// Compares every lookup; returns how many found a policy.
fn compare(db: &PolicyDb, reference: &LinearDb, flows: &[Flow], what: &str) -> usize {
    let guard = crossbeam_epoch::pin();
    let mut hits = 0;
    for (i, f) in flows.iter().enumerate() {
        let ours = db.lookup(f, Direction::Fwd, &guard);
        let want = reference.lookup(f, Direction::Fwd);
        assert_eq!(ours, want, "{what}: packet {i} {f:?}");
        hits += usize::from(ours.is_some());
    }
    hits
}

#[test]
fn fw_10k_trace_equals_linear_scan() {
    let rules = RuleSet::Fw10k.load().unwrap();
    let trace = classbench::fw_10k_trace().unwrap();
    let (db, reference, skipped) = load(&rules, |line| line as u32);
    assert_eq!(db.len() + skipped, rules.len());
    // The linear scan is slow in a debug build: every 7th header by default, all when
    // optimised.
    let step = if cfg!(debug_assertions) { 7 } else { 1 };
    let flows: Vec<Flow> = trace.iter().step_by(step).map(flow).collect();
    let hits = compare(&db, &reference, &flows, "fw_10k trace");
    // Every header was generated from a rule it matches, and no rule is lost by widening.
    assert_eq!(hits, flows.len());
}

#[test]
fn every_set_with_aimed_packets_and_ties_equals_linear_scan() {
    for set in RuleSet::ALL {
        let rules = set.load().unwrap();
        let flows = aimed(&rules);
        // Distinct priorities, then coarse ones where insertion order breaks ties.
        for (what, coarse) in [("priority = line", 1), ("priority = line / 64", 64)] {
            let (db, reference, _) = load(&rules, |line| (line / coarse) as u32);
            let hits = compare(&db, &reference, &flows, &format!("{set:?} {what}"));
            assert!(hits > flows.len() / 2, "{set:?}: only {hits} hits");
            let counts = db.counts();
            assert_eq!(
                counts.inexact + counts.exact.iter().sum::<usize>(),
                db.len()
            );
        }
    }
}
