//! Operation sequences on the policy database against the linear scan: adds, deletes and
//! threshold changes, then lookups of flows near the selectors must agree.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use policy_tree::{
    Direction, Flow, LinearDb, Mark, PolicySpec, PolicyType, PolicyWriter, Selector,
};

fuzz_target!(|data: &[u8]| {
    let mut db = PolicyWriter::new();
    let mut linear = LinearDb::new();
    let mut flows = Vec::new();
    for chunk in data.chunks_exact(8) {
        let src = Ipv4Addr::new(10, chunk[0] & 3, chunk[1], chunk[2]);
        let dst = Ipv4Addr::new(10, chunk[3] & 3, chunk[4], chunk[5]);
        let (sl, dl) = (chunk[6] % 33, chunk[7] % 33);
        flows.push((src, dst));
        let Ok(sel) = Selector::new(
            format!("{src}/{sl}").parse().unwrap(),
            format!("{dst}/{dl}").parse().unwrap(),
        ) else {
            continue;
        };
        let prio = u32::from(chunk[7] >> 5);
        if chunk[0] & 0x80 == 0 {
            let spec = PolicySpec::new(sel, Direction::Fwd).priority(prio);
            let a = db.add(spec.clone()).is_ok();
            let b = linear.add(spec).is_ok();
            assert_eq!(a, b);
        } else {
            let a = db
                .delete(&sel, Direction::Fwd, PolicyType::Main, 0, Mark::default())
                .is_ok();
            let b = linear
                .delete(&sel, Direction::Fwd, PolicyType::Main, 0, Mark::default())
                .is_ok();
            assert_eq!(a, b);
        }
        let guard = crossbeam_epoch::pin();
        for &(s, d) in flows.iter().rev().take(4) {
            let flow = Flow::new(IpAddr::V4(s), IpAddr::V4(d)).unwrap();
            let got = db
                .lookup(&flow, Direction::Fwd, &guard)
                .map(|p| (p.priority, p.selector));
            let want = linear
                .lookup(&flow, Direction::Fwd)
                .map(|p| (p.priority, p.selector));
            assert_eq!(got, want);
        }
    }
});
