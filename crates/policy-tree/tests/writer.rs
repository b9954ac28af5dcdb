//! The writer handle: readers hold the `Arc<PolicyDb>` the writer hands out (they cannot
//! write: see the `compile_fail` doctests of `src/writer.rs`) and see exactly what the writer
//! published, from another thread too.

use std::net::Ipv4Addr;
use std::sync::Arc;

use policy_tree::{
    Direction, Flow, HThresh, PolicyDb, PolicySpec, PolicyType, PolicyWriter, Selector,
};

fn answers(db: &PolicyDb) -> Vec<Option<u32>> {
    let guard = crossbeam_epoch::pin();
    (0..=255u8)
        .flat_map(|a| (0..=255u8).step_by(17).map(move |b| (a, b)))
        .map(|(a, b)| {
            let flow = Flow::v4(Ipv4Addr::new(10, 0, a, 1), Ipv4Addr::new(10, 1, b, 1));
            db.lookup(&flow, Direction::Fwd, &guard).map(|p| p.index)
        })
        .collect()
}

#[test]
fn readers_see_what_the_policy_writer_published() {
    let mut writer = PolicyWriter::new();
    let reader = Arc::clone(writer.reader());
    for a in 0..=255u8 {
        let src = format!("10.0.{a}.0/{}", 20 + a % 13)
            .parse()
            .unwrap_or_else(|_| "10.0.0.0/8".parse().unwrap());
        let dst = format!("10.1.{}.0/24", a.wrapping_mul(7)).parse().unwrap();
        if let Ok(sel) = Selector::new(src, dst) {
            let _ = writer.add(PolicySpec::new(sel, Direction::Fwd).priority(u32::from(a % 5)));
        }
    }
    writer
        .set_hthresh(HThresh {
            lbits4: 24,
            rbits4: 24,
            ..HThresh::default()
        })
        .unwrap();
    let first = writer.dump()[0];
    writer.delete_by_index(first.index).unwrap();
    assert_eq!(reader.dump(), writer.dump());
    assert_eq!(answers(&reader), answers(&writer));
    let expected = answers(&writer);
    writer.flush(PolicyType::Sub);
    drop(writer);
    let seen = std::thread::spawn(move || answers(&reader)).join().unwrap();
    assert_eq!(seen, expected);
}
