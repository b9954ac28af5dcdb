//! The scenarios of the kernel selftest `tools/testing/selftests/net/xfrm_policy.sh`, rendered
//! as lookups: where the script pings through namespaces and counts IPsec-protected packets with
//! an iptables rule, we ask the databases of the two gateways (ns3, ns4) which policy decides
//! the flow, and check every answer against the linear scan as well.
//!
//! Topology of the script: ns1 (10.0.1.2) ─ ns3 ═ESP tunnel═ ns4 ─ ns2 (10.0.2.2); ns3 and ns4
//! encrypt 10.0.1.0/24 <-> 10.0.2.0/24 (and dead:1::/64 <-> dead:2::/64) at priority 100.

use std::net::IpAddr;

use policy_tree::{
    Action, Direction, Family, Flow, HThresh, LinearDb, PolicySpec, PolicyType, PolicyWriter,
    Prefix, Selector, TemplateId,
};

const ESP: Action = Action::Ipsec(TemplateId(1));
const DIRECT: Action = Action::Ipsec(TemplateId(2));

fn sel(src: &str, dst: &str) -> Selector {
    Selector::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap()
}

fn any_to(dst: &str) -> Selector {
    let dst: Prefix = dst.parse().unwrap();
    Selector::new(Prefix::any(dst.family()), dst).unwrap()
}

/// A gateway's policy database and its reference twin.
struct Gateway {
    db: PolicyWriter,
    reference: LinearDb,
}

impl Gateway {
    fn new() -> Gateway {
        Gateway {
            db: PolicyWriter::new(),
            reference: LinearDb::new(),
        }
    }

    fn add(&mut self, spec: PolicySpec) {
        let ours = self.db.add(spec).unwrap();
        assert_eq!(Ok(ours), self.reference.add(spec));
    }

    fn update(&mut self, spec: PolicySpec) {
        let ours = self.db.update(spec).unwrap();
        assert_eq!(Ok(ours), self.reference.update(spec));
    }

    fn set_hthresh(&mut self, hthresh: HThresh) {
        self.db.set_hthresh(hthresh).unwrap();
        self.reference.set_hthresh(hthresh).unwrap();
    }

    fn flush(&mut self) {
        assert_eq!(
            self.db.flush(PolicyType::Main),
            self.reference.flush(PolicyType::Main)
        );
        assert!(self.db.is_empty());
    }

    /// The action deciding a flow, checked against the reference.
    fn decide(&self, src: &str, dst: &str, dir: Direction) -> Option<Action> {
        let flow = Flow::new(src.parse().unwrap(), dst.parse().unwrap())
            .unwrap()
            .proto(1);
        let guard = crossbeam_epoch::pin();
        let ours = self.db.lookup(&flow, dir, &guard);
        assert_eq!(ours, self.reference.lookup(&flow, dir), "{src} -> {dst}");
        ours.map(|p| p.action)
    }

    /// `ip xfrm policy get` through the published structure.
    fn get(&self, selector: &Selector, dir: Direction) -> bool {
        let guard = crossbeam_epoch::pin();
        let found = self.db.get(
            selector,
            dir,
            PolicyType::Main,
            0,
            policy_tree::Mark::ANY,
            &guard,
        );
        assert_eq!(
            found,
            self.reference
                .get(selector, dir, PolicyType::Main, 0, policy_tree::Mark::ANY)
        );
        found.is_some()
    }
}

/// `do_esp_policy`: encrypt `lnet` -> `rnet` on the way out, accept decrypted `rnet` ->
/// `lnet` for forwarding.
fn do_esp(gw: &mut Gateway, lnet: &str, rnet: &str) {
    gw.add(
        PolicySpec::new(sel(lnet, rnet), Direction::Out)
            .priority(100)
            .action(ESP),
    );
    gw.add(
        PolicySpec::new(sel(rnet, lnet), Direction::Fwd)
            .priority(100)
            .action(ESP),
    );
}

/// `do_exception`: `plain` leaves unencrypted (priority 10), `encrypt` through the tunnel by a
/// direct policy (priority 1).
fn do_exception(gw: &mut Gateway, encrypt: &str, plain: &str) {
    gw.add(PolicySpec::new(any_to(plain), Direction::Out).priority(10));
    gw.add(
        PolicySpec::new(any_to(encrypt), Direction::Out)
            .priority(1)
            .action(DIRECT),
    );
}

/// `do_dummies4`: policies at priority 0 (better than the tunnel's) that match no test flow,
/// with nested prefixes (/30 inside /29 inside /24) and wildcard sides.
fn do_dummies4(gw: &mut Gateway) {
    for i in 10..=16 {
        let block = |s: Selector, d: Direction| PolicySpec::new(s, d).action(Action::Block);
        gw.add(block(any_to(&format!("10.{i}.99.0/30")), Direction::Out));
        gw.add(block(
            sel(&format!("10.{i}.99.0/30"), "0.0.0.0/0"),
            Direction::Out,
        ));
        for j in 32..=64 {
            for len in [30, 29, 24] {
                gw.add(block(
                    sel(&format!("10.{i}.1.0/{len}"), &format!("10.{i}.{j}.0/{len}")),
                    Direction::Out,
                ));
            }
            gw.add(block(
                sel(&format!("10.{i}.{j}.0/24"), &format!("10.{i}.1.0/24")),
                Direction::Fwd,
            ));
        }
    }
}

/// `do_dummies6`.
fn do_dummies6(gw: &mut Gateway) {
    for i in 10..=16 {
        for j in 32..=64 {
            let block = |s: Selector, d: Direction| PolicySpec::new(s, d).action(Action::Block);
            gw.add(block(
                sel(&format!("dead:{i}::/64"), &format!("dead:{i}:{j}::/64")),
                Direction::Out,
            ));
            gw.add(block(
                sel(&format!("dead:{i}:{j}::/64"), &format!("dead:{i}::/24")),
                Direction::Fwd,
            ));
        }
    }
}

/// `do_overlap`: forward block policies whose destination nodes must merge.
fn do_overlap(gw: &mut Gateway) {
    let block = |s, d| {
        PolicySpec::new(sel(s, d), Direction::Fwd)
            .priority(200)
            .action(Action::Block)
    };
    gw.add(block("10.1.0.0/24", "10.0.0.0/24"));
    gw.add(block("10.2.0.0/24", "10.0.0.0/24"));
    gw.add(block("10.2.0.0/24", "10.0.1.0/24"));
    gw.add(block("10.1.0.0/24", "10.0.0.0/23"));
}

/// `check_xfrm` for one host number: whether the two gateways send a ping to `.ip` (and the
/// reply) through the tunnel, i.e. whether the out policy asks for IPsec.
fn tunnelled(ns3: &Gateway, ns4: &Gateway, ip: u8) -> [bool; 2] {
    let ipsec = |a: Option<Action>| matches!(a, Some(Action::Ipsec(_)));
    [
        ipsec(ns3.decide("10.0.1.2", &format!("10.0.2.{ip}"), Direction::Out)),
        ipsec(ns4.decide("10.0.2.2", &format!("10.0.1.{ip}"), Direction::Out)),
    ]
}

/// `check_exceptions`: .254 bypasses the tunnel, .253 uses it through the direct policy, .2
/// through the network policy; IPv6 likewise.
fn check_exceptions(ns3: &Gateway, ns4: &Gateway, what: &str) {
    assert_eq!(tunnelled(ns3, ns4, 254), [false, false], "{what}: .254");
    assert_eq!(tunnelled(ns3, ns4, 253), [true, true], "{what}: .253");
    assert_eq!(tunnelled(ns3, ns4, 2), [true, true], "{what}: .2");
    assert_eq!(
        ns3.decide("10.0.1.2", "10.0.2.253", Direction::Out),
        Some(DIRECT)
    );
    assert_eq!(
        ns3.decide("10.0.1.2", "10.0.2.2", Direction::Out),
        Some(ESP)
    );
    // Decrypted traffic from the tunnel is accepted for forwarding.
    assert_eq!(
        ns3.decide("10.0.2.2", "10.0.1.2", Direction::Fwd),
        Some(ESP)
    );
    assert_eq!(
        ns4.decide("10.0.1.2", "10.0.2.2", Direction::Fwd),
        Some(ESP)
    );
    for (gw, src, dst) in [
        (ns3, "dead:1::2", "dead:2::"),
        (ns4, "dead:2::2", "dead:1::"),
    ] {
        let to = |host: &str| gw.decide(src, &format!("{dst}{host}"), Direction::Out);
        assert_eq!(to("2"), Some(ESP), "{what}: v6 network policy");
        assert_eq!(to("fd"), Some(DIRECT), "{what}: v6 direct policy");
    }
}

/// The script's setup up to the point where exceptions are installed.
fn setup() -> (Gateway, Gateway) {
    let (mut ns3, mut ns4) = (Gateway::new(), Gateway::new());
    do_esp(&mut ns3, "10.0.1.0/24", "10.0.2.0/24");
    do_esp(&mut ns3, "dead:1::/64", "dead:2::/64");
    do_esp(&mut ns4, "10.0.2.0/24", "10.0.1.0/24");
    do_esp(&mut ns4, "dead:2::/64", "dead:1::/64");
    do_dummies4(&mut ns3);
    do_dummies6(&mut ns4);
    // do_esp_policy_get_check
    for (gw, l, r) in [
        (&ns3, "10.0.1.0/24", "10.0.2.0/24"),
        (&ns4, "10.0.2.0/24", "10.0.1.0/24"),
        (&ns3, "dead:1::/64", "dead:2::/64"),
        (&ns4, "dead:2::/64", "dead:1::/64"),
    ] {
        assert!(gw.get(&sel(l, r), Direction::Out));
        assert!(gw.get(&sel(r, l), Direction::Fwd));
    }
    (ns3, ns4)
}

fn install_exceptions(ns3: &mut Gateway, ns4: &mut Gateway) {
    do_exception(ns3, "10.0.2.253/32", "10.0.2.240/28");
    do_exception(ns4, "10.0.1.253/32", "10.0.1.240/28");
    do_exception(ns3, "dead:2::fd/128", "dead:2:f0::/96");
    do_exception(ns4, "dead:1::fd/128", "dead:1:f0::/96");
}

#[test]
fn nested_non_matching_dummies_do_not_capture_traffic() {
    let (ns3, ns4) = setup();
    // Before the exceptions every host of the peer network goes through the tunnel, although
    // ~1000 dummies with a better priority sit in the same bins.
    for ip in [2, 253, 254] {
        assert_eq!(tunnelled(&ns3, &ns4, ip), [true, true], ".{ip}");
    }
    // The dummies do match their own flows.
    assert_eq!(
        ns3.decide("10.12.1.1", "10.12.40.1", Direction::Out),
        Some(Action::Block)
    );
    assert_eq!(
        ns4.decide("dead:12::1", "dead:12:40::1", Direction::Out),
        Some(Action::Block)
    );
    // Nested /30, /29, /24 sources merge into one /24 source node under each /24 destination
    // node; the /30 wildcard-side dummies sit in the any:daddr and saddr:any classes.
    let out = ns3
        .db
        .bin_shape(Direction::Out, PolicyType::Main, Family::V4, 0)
        .unwrap();
    assert_eq!(out.any, 0);
    assert_eq!(out.src_nodes.len(), 7);
    assert_eq!(out.dst_nodes.len(), 7 * 34 + 1);
    let node = out
        .dst_nodes
        .iter()
        .find(|n| n.prefix == "10.12.40.0/24".parse().unwrap())
        .unwrap();
    assert_eq!(node.policies, 0);
    assert_eq!(node.src_nodes.len(), 1);
    assert_eq!(node.src_nodes[0].prefix, "10.12.1.0/24".parse().unwrap());
    assert_eq!(node.src_nodes[0].policies, 3);
    assert_eq!(ns3.db.len(), 4 + 7 * (2 + 33 * 4));
}

#[test]
fn exceptions_at_better_priority_win() {
    let (mut ns3, mut ns4) = setup();
    install_exceptions(&mut ns3, &mut ns4);
    check_exceptions(&ns3, &ns4, "exceptions");
    // The exception range's other hosts bypass too; hosts outside it do not.
    assert_eq!(
        ns3.decide("10.0.1.2", "10.0.2.241", Direction::Out),
        Some(Action::Allow)
    );
    assert_eq!(
        ns3.decide("10.0.1.2", "10.0.2.239", Direction::Out),
        Some(ESP)
    );
}

#[test]
fn overlap_merges_destination_nodes_and_their_source_trees() {
    let (mut ns3, mut ns4) = setup();
    install_exceptions(&mut ns3, &mut ns4);
    let shape = |gw: &Gateway| {
        gw.db
            .bin_shape(Direction::Fwd, PolicyType::Main, Family::V4, 0)
            .unwrap()
    };
    let prefixes = |nodes: &[policy_tree::NodeShape]| -> Vec<String> {
        nodes.iter().map(|n| n.prefix.to_string()).collect()
    };

    // All but the last policy of do_overlap: two /24 destination nodes, each with two source
    // nodes (10.0.1.0/24 holds the tunnel's fwd policy from 10.0.2.0/24).
    let block = |s, d| {
        PolicySpec::new(sel(s, d), Direction::Fwd)
            .priority(200)
            .action(Action::Block)
    };
    ns3.add(block("10.1.0.0/24", "10.0.0.0/24"));
    ns3.add(block("10.2.0.0/24", "10.0.0.0/24"));
    ns3.add(block("10.2.0.0/24", "10.0.1.0/24"));
    let before = shape(&ns3);
    let node = |s: &policy_tree::BinShape, p: &str| {
        s.dst_nodes
            .iter()
            .find(|n| n.prefix.to_string() == p)
            .cloned()
    };
    let n0 = node(&before, "10.0.0.0/24").unwrap();
    let n1 = node(&before, "10.0.1.0/24").unwrap();
    assert_eq!(prefixes(&n0.src_nodes), ["10.1.0.0/24", "10.2.0.0/24"]);
    assert_eq!(prefixes(&n1.src_nodes), ["10.0.2.0/24", "10.2.0.0/24"]);

    // The /23 covers both nodes: they merge into one, and so do their source trees (the two
    // 10.2.0.0/24 source nodes become one holding both policies).
    ns3.add(block("10.1.0.0/24", "10.0.0.0/23"));
    let after = shape(&ns3);
    assert!(node(&after, "10.0.0.0/24").is_none());
    assert!(node(&after, "10.0.1.0/24").is_none());
    let merged = node(&after, "10.0.0.0/23").unwrap();
    assert_eq!(
        prefixes(&merged.src_nodes),
        ["10.0.2.0/24", "10.1.0.0/24", "10.2.0.0/24"]
    );
    let counts: Vec<usize> = merged.src_nodes.iter().map(|n| n.policies).collect();
    assert_eq!(counts, [1, 2, 2]);
    assert_eq!(after.dst_nodes.len(), before.dst_nodes.len() - 1);

    check_exceptions(&ns3, &ns4, "exceptions and block policies");
    // The merged policies still decide their own flows.
    assert_eq!(
        ns3.decide("10.1.0.1", "10.0.1.1", Direction::Fwd),
        Some(Action::Block)
    );
    assert_eq!(
        ns3.decide("10.2.0.1", "10.0.0.1", Direction::Fwd),
        Some(Action::Block)
    );
    assert_eq!(ns3.decide("10.3.0.1", "10.0.0.1", Direction::Fwd), None);

    // Deleting every policy of the merged node prunes it.
    for (s, d) in [
        ("10.1.0.0/24", "10.0.0.0/24"),
        ("10.2.0.0/24", "10.0.0.0/24"),
        ("10.2.0.0/24", "10.0.1.0/24"),
        ("10.1.0.0/24", "10.0.0.0/23"),
        ("10.0.2.0/24", "10.0.1.0/24"),
    ] {
        let s = sel(s, d);
        let ours = ns3.db.delete(
            &s,
            Direction::Fwd,
            PolicyType::Main,
            0,
            policy_tree::Mark::ANY,
        );
        assert_eq!(
            ours,
            ns3.reference.delete(
                &s,
                Direction::Fwd,
                PolicyType::Main,
                0,
                policy_tree::Mark::ANY
            )
        );
        assert!(ours.is_ok());
    }
    assert!(node(&shape(&ns3), "10.0.0.0/23").is_none());
}

#[test]
fn hthresh_changes_and_back() {
    let (mut ns3, mut ns4) = setup();
    install_exceptions(&mut ns3, &mut ns4);
    do_overlap(&mut ns3);
    let all_v4_v6 = |l4, r4, l6, r6| HThresh {
        lbits4: l4,
        rbits4: r4,
        lbits6: l6,
        rbits6: r6,
    };
    for gw in [&mut ns3, &mut ns4] {
        gw.set_hthresh(all_v4_v6(28, 24, 126, 125));
    }
    check_exceptions(&ns3, &ns4, "after hthresh changes");
    // Out policies need /24 destinations and /28 sources to be exact now.
    assert!(ns3.db.counts().exact[Direction::Out as usize] > 0);

    // Full flush, then the tunnel and the exceptions again.
    ns3.flush();
    assert_eq!(ns3.db.counts(), policy_tree::Counts::default());
    do_esp(&mut ns3, "10.0.1.0/24", "10.0.2.0/24");
    do_exception(&mut ns3, "10.0.2.253/32", "10.0.2.240/28");
    // Move the inexact policies to the hash table: the exact tunnel policy (priority 100) and
    // the still inexact /28 exception (priority 10, any source) must be weighed together.
    ns3.set_hthresh(all_v4_v6(16, 16, 128, 128));
    assert_eq!(ns3.db.counts().exact[Direction::Out as usize], 1);
    assert_eq!(tunnelled(&ns3, &ns4, 254), [false, false]);
    assert_eq!(tunnelled(&ns3, &ns4, 253), [true, true]);
    assert_eq!(tunnelled(&ns3, &ns4, 2), [true, true]);

    // Restore the original thresholds: everything back to the trees.
    for gw in [&mut ns3, &mut ns4] {
        gw.set_hthresh(HThresh::default());
    }
    assert_eq!(ns3.db.counts().exact, [0, 0, 0]);
    assert_eq!(tunnelled(&ns3, &ns4, 254), [false, false]);
    assert_eq!(tunnelled(&ns3, &ns4, 253), [true, true]);
    assert_eq!(tunnelled(&ns3, &ns4, 2), [true, true]);
}

#[test]
fn hthresh_repeat_with_updates() {
    // check_hthresh_repeat: updating exact IPv6 policies between threshold changes must keep
    // working (a kernel bug once left a stale policy behind here).
    let mut ns1 = Gateway::new();
    let h = HThresh {
        lbits6: 0,
        rbits6: 28,
        ..HThresh::default()
    };
    let a = sel("e000:0001::0000", "ff01::0014:0000:0001");
    let b = sel("e000:0001::0000", "ff01::01");
    for _ in 0..10 {
        for s in [a, b] {
            ns1.update(PolicySpec::new(s, Direction::In).priority(100).action(ESP));
            ns1.set_hthresh(h);
        }
    }
    assert_eq!(ns1.db.len(), 2);
    assert!(ns1.get(&a, Direction::In) && ns1.get(&b, Direction::In));
    assert_eq!(ns1.db.counts().exact[Direction::In as usize], 2);
    assert_eq!(ns1.decide("e000:1::", "ff01::1", Direction::In), Some(ESP));
    assert_eq!(ns1.decide("e000:1::", "ff01::2", Direction::In), None);
}

/// A small xorshift for shuffles (deterministic per round).
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

#[test]
fn random_order_inserts_are_all_retrievable() {
    // check_random_order: 100 rounds of /24 (IPv4) and /56 (IPv6) destinations in random order;
    // after each round every policy must be found by `get` and by a lookup.
    let mut gw = Gateway::new();
    let v4: Vec<String> = (0..=255)
        .step_by(16)
        .map(|j| format!("{j}.0.0.0/24"))
        .collect();
    let v6: Vec<String> = (0..=255)
        .step_by(16)
        .map(|j| format!("e000:0000:{j:02x}00::/56"))
        .collect();
    for (family, dsts) in [("v4", &v4), ("v6", &v6)] {
        for round in 0..100 {
            gw.flush();
            let mut order = dsts.clone();
            shuffle(&mut order, round);
            for dst in &order {
                gw.add(PolicySpec::new(any_to(dst), Direction::Out).priority(10));
            }
            for dst in dsts {
                assert!(
                    gw.get(&any_to(dst), Direction::Out),
                    "{family} round {round}: {dst} lost"
                );
                let p: Prefix = dst.parse().unwrap();
                let src: IpAddr = if p.family() == Family::V4 {
                    "192.0.2.1".parse().unwrap()
                } else {
                    "2001:db8::1".parse().unwrap()
                };
                let flow = Flow::new(src, p.addr()).unwrap();
                let guard = crossbeam_epoch::pin();
                let found = gw.db.lookup(&flow, Direction::Out, &guard).unwrap();
                assert_eq!(found.selector, any_to(dst));
            }
        }
    }
}
