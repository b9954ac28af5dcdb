//! Every shipped data set loads completely and has the shape its README documents.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use xfwd_benches::data::classbench::{self, RuleSet};
use xfwd_benches::data::routes::{self, Route};
use xfwd_benches::data::{Prefix, PrefixAddr};

/// The share of routes of length `len`, in per mille, rounded to the nearest.
fn per_mille<A>(table: &[Route<A>], len: u8) -> usize {
    let count = table.iter().filter(|r| r.prefix.len == len).count();
    (count * 1000 + table.len() / 2) / table.len()
}

fn assert_unique<A: PrefixAddr + std::hash::Hash>(table: &[Route<A>]) {
    let distinct: HashSet<Prefix<A>> = table.iter().map(|r| r.prefix).collect();
    assert_eq!(distinct.len(), table.len(), "duplicate prefixes");
}

#[test]
fn bgp_full_v4() {
    let table = routes::BGP_FULL_V4.load().unwrap();
    assert_eq!(table.len(), 1_072_529);
    assert_unique(&table);
    assert!(table.iter().any(|r| r.prefix.len == 0));
    assert_eq!(per_mille(&table, 24), 526);
    let private: Prefix<Ipv4Addr> = "10.0.0.0/8".parse().unwrap();
    assert!(table.iter().any(|r| private.contains(r.prefix.addr)));
}

#[test]
fn bgp_full_v6() {
    let table = routes::BGP_FULL_V6.load().unwrap();
    assert_eq!(table.len(), 176_388);
    assert_unique(&table);
    assert!(table.iter().any(|r| r.prefix.len == 0));
    assert_eq!(per_mille(&table, 48), 470);
    assert_eq!(per_mille(&table, 32), 129);
}

#[test]
fn dfz_v4() {
    let table = routes::DFZ_V4.load().unwrap();
    assert_eq!(table.len(), 886_117);
    assert_unique(&table);
    assert!(
        table.iter().all(|r| r.prefix.len > 0),
        "the DFZ has no default route"
    );
    assert_eq!(per_mille(&table, 24), 584);
}

#[test]
fn classbench_rule_sets() {
    for set in RuleSet::ALL {
        let rules = set.load().unwrap();
        assert_eq!(rules.len(), set.rule_count(), "{set:?}");
        assert!(
            rules
                .iter()
                .all(|r| r.proto_mask == 0 || r.proto_mask == 0xff),
            "{set:?}"
        );
    }
}

#[test]
fn fw_10k_trace_matches_its_rules() {
    let rules = RuleSet::Fw10k.load().unwrap();
    let trace = classbench::fw_10k_trace().unwrap();
    assert_eq!(trace.len(), 93_880);
    for (i, header) in trace.iter().enumerate() {
        let rule = rules
            .get(header.rule)
            .unwrap_or_else(|| panic!("header {i}: no rule"));
        assert!(
            rule.matches(header),
            "header {i} does not match rule {}",
            header.rule
        );
    }
}
