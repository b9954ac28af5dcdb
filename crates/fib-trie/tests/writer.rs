//! The writer handles: readers hold the `Arc` the writer hands out (they cannot write: see the
//! `compile_fail` doctests of `src/writer.rs`) and see exactly what the writer published, from
//! another thread too, and after the writer is gone.

use std::sync::Arc;

use crossbeam_epoch as epoch;
use fib_trie::{
    Fib, FibRule, FibWriter, Flow, InsertFlags, NextHop, Route, RouteSelector, RuleAction,
    TrieWriter,
};
use rand::{RngExt, SeedableRng, rngs::StdRng};

/// Everything a reader can see of a FIB: per table its routes (prefix, length, first
/// interface), the rules, and the answers to `probes`.
type View = (
    Vec<(u32, Vec<(u32, u8, u32)>)>,
    Vec<FibRule<u32>>,
    Vec<String>,
);

fn view(fib: &Fib<u32>, probes: &[u32]) -> View {
    let guard = epoch::pin();
    let tables = fib
        .table_ids()
        .into_iter()
        .map(|id| {
            let dump = fib.table(id, &guard).unwrap().dump(&guard);
            let dump = dump
                .iter()
                .map(|(k, l, a)| (*k, *l, a.info.nexthops[0].ifindex))
                .collect();
            (id, dump)
        })
        .collect();
    let answers = probes
        .iter()
        .map(|&d| {
            format!(
                "{:?}",
                fib.lookup(
                    &Flow {
                        mark: d & 1,
                        ..Flow::to(d)
                    },
                    &guard
                )
                .map(|r| (r.table(), r.plen, r.nexthops()[r.nh_sel].ifindex))
            )
        })
        .collect();
    (tables, fib.rules(&guard).to_vec(), answers)
}

#[test]
fn readers_see_what_the_fib_writer_published() {
    let mut writer = FibWriter::<u32>::new();
    // Taken before any change, as the dataplane's tables are.
    let reader: Arc<Fib<u32>> = Arc::clone(writer.reader());
    let mut rng = StdRng::seed_from_u64(18);
    let mut live = Vec::new();
    for i in 0..2000u32 {
        let table = [254, 254, 100][i as usize % 3];
        let plen = rng.random_range(8..=28u8);
        let prefix = rng.random::<u32>() & u32::MAX << (32 - plen);
        let r = Route::unicast(prefix, plen, table, vec![NextHop::new(None, 1 + i % 7)]);
        if writer.insert(&r, InsertFlags::ADD).is_ok() {
            live.push(r);
        }
        if i == 1000 {
            let mut rule = FibRule::new(100, RuleAction::Lookup(100));
            (rule.fwmark, rule.fwmask) = (1, 1);
            writer.add_rule(rule).unwrap();
        }
    }
    for r in live.iter().step_by(3) {
        writer.delete(&RouteSelector::exact(r)).unwrap();
    }
    let probes: Vec<u32> = (0..4000).map(|_| rng.random()).collect();
    let expected = view(&writer, &probes);
    assert_eq!(view(&reader, &probes), expected);
    // From another thread, and with the writer gone (the tables are frozen, not freed).
    drop(writer);
    let probes2 = probes.clone();
    let seen = std::thread::spawn(move || view(&reader, &probes2))
        .join()
        .unwrap();
    assert_eq!(seen, expected);
}

#[test]
fn readers_see_what_the_trie_writer_published() {
    let mut writer = TrieWriter::<u32, u32>::new();
    let reader = Arc::clone(writer.reader());
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..5000u32 {
        let plen = rng.random_range(0..=32u8);
        let key = rng.random::<u32>() & u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0);
        writer.insert(key, plen, i).unwrap();
        if i % 4 == 0 {
            writer.remove(key, plen).unwrap();
        }
    }
    let dump = |t: &fib_trie::LcTrie<u32, u32>| {
        let guard = epoch::pin();
        let mut out = Vec::new();
        t.for_each(&guard, |k, aliases| {
            out.extend(aliases.iter().map(|a| (k, a.slen, a.value)))
        });
        out
    };
    assert_eq!(dump(&reader), dump(&writer));
    assert_eq!(reader.alias_count(), writer.alias_count());
    let guard = epoch::pin();
    for _ in 0..2000 {
        let k = rng.random::<u32>();
        let a = reader
            .lookup(k, &guard, |_| true)
            .map(|m| (m.plen, *m.value));
        assert_eq!(
            a,
            writer
                .lookup(k, &guard, |_| true)
                .map(|m| (m.plen, *m.value))
        );
    }
}
