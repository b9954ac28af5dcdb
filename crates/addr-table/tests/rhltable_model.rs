//! Differential tests of `RhlTable` (and the `FixedTable` baseline) against a
//! `HashMap<K, Vec<V>>` model, duplicates and resize boundaries included.

use std::collections::HashMap;

use addr_table::{FixedTable, FixedWriter, Params, RhlTable, RhlWriter, SeedMode};
use crossbeam_epoch as epoch;
use proptest::prelude::*;

/// The model: each key's objects, newest first.
#[derive(Default, Debug)]
struct Model(HashMap<u32, Vec<u32>>);

impl Model {
    fn insert(&mut self, k: u32, v: u32) {
        self.0.entry(k).or_default().insert(0, v);
    }
    fn remove(&mut self, k: u32, v: u32) -> bool {
        let Some(list) = self.0.get_mut(&k) else {
            return false;
        };
        let Some(pos) = list.iter().position(|x| *x == v) else {
            return false;
        };
        list.remove(pos);
        if list.is_empty() {
            self.0.remove(&k);
        }
        true
    }
    /// Changes the newest object of `k` equal to `from` into `to`.
    fn update(&mut self, k: u32, from: u32, to: u32) -> bool {
        let Some(x) = self
            .0
            .get_mut(&k)
            .and_then(|l| l.iter_mut().find(|x| **x == from))
        else {
            return false;
        };
        *x = to;
        true
    }
    fn remove_all(&mut self, k: u32) -> usize {
        self.0.remove(&k).map_or(0, |l| l.len())
    }
    fn objects(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u32),
    Remove(u32, u32),
    RemoveAll(u32),
    Update(u32, u32, u32),
    Finish,
}

fn op(keys: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys, 0..4u32).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (0..keys, 0..4u32).prop_map(|(k, v)| Op::Remove(k, v)),
        1 => (0..keys).prop_map(Op::RemoveAll),
        2 => (0..keys, 0..4u32, 0..4u32).prop_map(|(k, from, to)| Op::Update(k, from, to)),
        1 => Just(Op::Finish),
    ]
}

fn small_params(seed: u64) -> Params {
    Params {
        min_size: 4,
        seed: SeedMode::Deterministic(seed),
        ..Params::default()
    }
}

/// Checks every key's objects, the counts and the load-factor invariant.
/// `fixed` is `None` once the sequence updated a value (the baseline has no update).
fn check(
    table: &RhlTable<u32, u32>,
    fixed: Option<&FixedTable<u32, u32>>,
    model: &Model,
    keys: u32,
) {
    let guard = epoch::pin();
    for k in 0..keys {
        let want: &[u32] = model.0.get(&k).map_or(&[], |l| l.as_slice());
        let got: Vec<u32> = table.get_all(&k, &guard).collect();
        assert_eq!(got, want, "rhltable key {k}");
        assert_eq!(
            table.get(&k, &guard),
            want.first().copied(),
            "rhltable get {k}"
        );
        assert_eq!(table.contains_key(&k, &guard), !want.is_empty());
        assert_eq!(
            table.find(&k, &guard, |v| v % 2 == 1),
            want.iter().copied().find(|v| v % 2 == 1),
            "rhltable find {k}"
        );
        if let Some(fixed) = fixed {
            let got: Vec<u32> = fixed.get_all(&k, &guard).copied().collect();
            assert_eq!(got, want, "fixed key {k}");
        }
    }
    assert_eq!(table.len(), model.0.len());
    assert_eq!(table.objects(), model.objects());
    if let Some(fixed) = fixed {
        assert_eq!(fixed.len(), model.objects());
    }
    let stats = table.stats();
    assert_eq!(
        (stats.keys, stats.objects),
        (model.0.len(), model.objects())
    );
    // The newest table is never above 7/8 load, and never below 30% unless at its smallest
    // (the lines `min_size` takes: one line of 6 slots for `min_size` 4).
    let min = table.params().min_size;
    let smallest = RhlWriter::<u32, u32>::with_params(*table.params())
        .unwrap()
        .stats()
        .size;
    assert!(stats.size >= min);
    assert!(stats.keys * 8 <= stats.size * 7, "{stats:?}");
    assert!(
        stats.size == smallest || stats.keys * 10 >= stats.size * 3,
        "{stats:?}"
    );
    assert_eq!(stats.rehashes.reseeds, 0, "no chain of 17 by chance");
}

fn run(ops: &[Op], keys: u32, seed: u64) {
    let mut table = RhlWriter::with_params(small_params(seed)).unwrap();
    let mut fixed = FixedWriter::new(0x5eed);
    let mut model = Model::default();
    let mut updated = false;
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                table.insert(k, v).unwrap();
                fixed.insert(k, v);
                model.insert(k, v);
            }
            Op::Remove(k, v) => {
                let want = model.remove(k, v);
                assert_eq!(table.remove(&k, |x| *x == v), want, "remove {k} {v}");
                let fixed_removed = fixed.remove(&k, |x| *x == v);
                // After an update the baseline (which has none) holds other values.
                assert!(updated || fixed_removed == want);
            }
            Op::RemoveAll(k) => {
                let want = model.remove_all(k);
                assert_eq!(table.remove_all(&k), want);
                while fixed.remove(&k, |_| true) {}
            }
            Op::Update(k, from, to) => {
                let want = model.update(k, from, to);
                let got = table.update(&k, |x| *x == from, |x| *x = to);
                assert_eq!(got, want, "update {k} {from} -> {to}");
                updated = true;
            }
            Op::Finish => table.finish_rehash(),
        }
        check(&table, (!updated).then_some(&*fixed), &model, keys);
    }
    // Everything the table holds, walked under the writer lock, is the model.
    let mut seen: HashMap<u32, Vec<u32>> = HashMap::new();
    table.for_each(|k, v| seen.entry(*k).or_default().push(*v));
    assert_eq!(seen, model.0);
}

proptest! {
    /// Few keys, many duplicates: lists of objects per key, removal from the middle.
    #[test]
    fn matches_model_with_duplicates(ops in proptest::collection::vec(op(12), 1..200), seed: u64) {
        run(&ops, 12, seed);
    }

    /// Enough keys to grow from 4 buckets to 256 and shrink back, across migrations.
    #[test]
    fn matches_model_across_resizes(ops in proptest::collection::vec(op(160), 1..600), seed: u64) {
        run(&ops, 160, seed);
    }
}

/// Grows 0 → n keys then removes them, checking the model after every step: every grow and
/// shrink boundary from one line (6 slots, size 6) up to 256 lines (size 1536) is crossed in
/// both directions.
#[test]
fn every_resize_boundary_up_and_down() {
    let n = 700u32;
    let mut table = RhlWriter::with_params(small_params(1)).unwrap();
    let mut fixed = FixedWriter::new(1);
    let mut model = Model::default();
    for k in 0..n {
        table.insert(k, k * 3).unwrap();
        fixed.insert(k, k * 3);
        model.insert(k, k * 3);
        if k % 7 == 0 {
            check(&table, Some(&*fixed), &model, n);
        }
    }
    check(&table, Some(&*fixed), &model, n);
    let grown = table.stats();
    assert_eq!(grown.size, 1536);
    assert_eq!(grown.rehashes.grows, 8, "6 → 12 → ... → 1536");
    for k in 0..n {
        assert!(table.remove(&k, |v| *v == k * 3));
        assert!(fixed.remove(&k, |v| *v == k * 3));
        model.remove(k, k * 3);
        if k % 7 == 0 {
            check(&table, Some(&*fixed), &model, n);
        }
    }
    check(&table, Some(&*fixed), &model, n);
    let shrunk = table.stats();
    assert_eq!(shrunk.size, 6);
    assert!(shrunk.rehashes.shrinks >= 3, "{shrunk:?}");
}

/// The exact thresholds with the default 32 buckets in lines of 4 slots (`u32 -> u64`):
/// grow when the 29th key arrives (29 > 7/8 * 32), shrink from 64 when fewer than 19.2 keys
/// remain (19 * 10 < 64 * 3).
#[test]
fn thresholds_of_the_default_table() {
    let mut table: RhlWriter<u32, u64> = RhlWriter::new();
    for k in 0..28 {
        table.insert(k, 0).unwrap();
    }
    let s = table.stats();
    assert_eq!((s.size, s.migrating_from), (32, None));
    // Duplicates do not count towards the load.
    for _ in 0..100 {
        table.insert(0, 1).unwrap();
    }
    assert_eq!(table.stats().size, 32);
    table.insert(28, 0).unwrap();
    let s = table.stats();
    assert_eq!((s.size, s.migrating_from), (64, Some(32)));
    table.finish_rehash();
    assert_eq!(table.stats().migrating_from, None);
    for k in (20..29).rev() {
        assert_eq!(table.remove_all(&k), 1);
    }
    assert_eq!(table.stats().size, 64, "20 keys: 20 * 10 >= 64 * 3");
    assert_eq!(table.remove_all(&19), 1);
    assert_eq!(
        table.stats().size,
        32,
        "19 keys: shrink to max(32, roundup(28))"
    );
    // Never below min_size.
    for k in 0..19 {
        table.remove_all(&k);
    }
    assert_eq!(table.stats().size, 32);
    assert!(table.is_empty());
    assert_eq!(table.objects(), 0);
}

/// The same with lines of 6 slots (`u32 -> ()`, as `u32 -> u32`): the default `min_size`
/// 32 takes 8 lines, size 48; grow when the 43rd key arrives (43 > 7/8 * 48), shrink from 96
/// when fewer than 28.8 keys remain (28 * 10 < 96 * 3), to the 8 lines that 28 * 3 / 2 = 42
/// units need.
#[test]
fn thresholds_of_the_default_table_of_six_slot_lines() {
    let mut table: RhlWriter<u32, ()> = RhlWriter::new();
    for k in 0..42 {
        table.insert(k, ()).unwrap();
    }
    let s = table.stats();
    assert_eq!((s.size, s.buckets, s.slots_per_bucket), (48, 8, 6));
    assert_eq!(s.migrating_from, None);
    for _ in 0..100 {
        table.insert(0, ()).unwrap();
    }
    assert_eq!(table.stats().size, 48);
    table.insert(42, ()).unwrap();
    let s = table.stats();
    assert_eq!((s.size, s.migrating_from), (96, Some(48)));
    table.finish_rehash();
    for k in (29..43).rev() {
        assert_eq!(table.remove_all(&k), 1);
    }
    assert_eq!(table.stats().size, 96, "29 keys: 29 * 10 >= 96 * 3");
    assert_eq!(table.remove_all(&28), 1);
    assert_eq!(table.stats().size, 48, "28 keys: shrink to 8 lines");
    for k in 0..28 {
        table.remove_all(&k);
    }
    assert_eq!(table.stats().size, 48, "never below min_size's lines");
    assert!(table.is_empty());
}

#[test]
fn bad_params_are_typed_errors() {
    use addr_table::ParamsError;
    let p = |min_size, max_size| Params {
        min_size,
        max_size,
        ..Params::default()
    };
    assert_eq!(
        RhlWriter::<u32, ()>::with_params(p(3, 64)).unwrap_err(),
        ParamsError::MinSize(3)
    );
    assert_eq!(
        RhlWriter::<u32, ()>::with_params(p(2, 64)).unwrap_err(),
        ParamsError::MinSize(2)
    );
    assert_eq!(
        RhlWriter::<u32, ()>::with_params(p(32, 48)).unwrap_err(),
        ParamsError::MaxSize(48)
    );
    assert_eq!(
        RhlWriter::<u32, ()>::with_params(p(64, 32)).unwrap_err(),
        ParamsError::MaxBelowMin {
            min_size: 64,
            max_size: 32
        }
    );
}

#[test]
fn table_full_at_twice_max_size() {
    use addr_table::InsertError;
    let mut table = RhlWriter::with_params(Params {
        min_size: 4,
        max_size: 8,
        ..Params::default()
    })
    .unwrap();
    for k in 0..16u32 {
        table.insert(k, k).unwrap();
    }
    assert_eq!(
        table.insert(16, 0),
        Err(InsertError::TableFull { max_elems: 16 })
    );
    // A duplicate of an existing key is still accepted.
    table.insert(3, 33).unwrap();
    assert_eq!(table.len(), 16);
    // One line of 6 slots (size 6): a second would take the table above `max_size`.
    assert_eq!(table.stats().size, 6);
}

#[test]
#[should_panic(expected = "default collector")]
fn a_guard_of_another_collector_is_refused() {
    let table: RhlWriter<u32, u32> = RhlWriter::new();
    let collector = epoch::Collector::new();
    let handle = collector.register();
    let guard = handle.pin();
    let _ = table.get(&1, &guard);
}

/// A rehash completes within `MIGRATE_WRITES` writes of any kind, so a table does not stay
/// half migrated (readers probing two tables) long after a burst of updates.
#[test]
fn a_rehash_completes_within_a_bounded_number_of_writes() {
    use addr_table::rhltable::MIGRATE_WRITES;
    let mut table: RhlWriter<u32, u32> = RhlWriter::new();
    // 1344 keys fill 1536 (256 lines of 6 slots) to 7/8; the 1345th starts a growth.
    for k in 0..1344 {
        table.insert(k, 0).unwrap();
    }
    table.finish_rehash();
    assert_eq!(table.stats().size, 1536);
    table.insert(1344, 0).unwrap();
    assert_eq!(table.stats().migrating_from, Some(1536));
    let mut writes = 1;
    while table.stats().migrating_from.is_some() {
        // Duplicates and removals of absent keys are writes too.
        if writes % 2 == 0 {
            table.insert(writes, 1).unwrap();
        } else {
            assert!(!table.remove(&1_000_000, |_| true));
        }
        writes += 1;
        assert!(
            writes as usize <= MIGRATE_WRITES,
            "still migrating after {writes} writes"
        );
    }
    let guard = epoch::pin();
    for k in 0..897 {
        assert!(table.contains_key(&k, &guard));
    }
}
