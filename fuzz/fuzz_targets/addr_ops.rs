//! Operation sequences on addr-table's resizable hash table (`RhlTable`, what `AddrTable`
//! keeps its addresses in) against a `HashMap<key, Vec<value>>` reference: inserts (duplicates
//! included), removals from the middle of a key's list, removals of a whole key, updates and
//! forced ends of a rehash, over few keys (long lists) or many (growing and shrinking across
//! migrations). After each operation every key's objects, newest first, and the counts must
//! equal the reference's; at the end a walk of the table must give the reference.
#![no_main]

use std::collections::HashMap;

use addr_table::{Params, RhlWriter, SeedMode};
use libfuzzer_sys::fuzz_target;

/// The reference: each key's objects, newest first, and how many objects there are in all
/// (kept as the lists change: summing the lists after every operation cost a walk of the
/// map per operation); checked against the lists at the end.
#[derive(Default)]
struct Reference(HashMap<u32, Vec<u32>>, usize);

impl Reference {
    fn remove(&mut self, k: u32, v: u32) -> bool {
        let Some(list) = self.0.get_mut(&k) else {
            return false;
        };
        let Some(at) = list.iter().position(|x| *x == v) else {
            return false;
        };
        list.remove(at);
        self.1 -= 1;
        if list.is_empty() {
            self.0.remove(&k);
        }
        true
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, ops)) = data.split_first() else {
        return;
    };
    // Few keys (long duplicate lists) or many (resizes).
    let keys: u32 = if mode & 1 == 0 { 8 } else { 300 };
    let params = Params {
        min_size: 4,
        seed: SeedMode::Deterministic(u64::from(mode)),
        ..Params::default()
    };
    let mut table = RhlWriter::<u32, u32>::with_params(params).expect("valid parameters");
    let mut reference = Reference::default();
    for op in ops.chunks_exact(4) {
        let k = u32::from(u16::from_le_bytes([op[1], op[2]])) % keys;
        let v = u32::from(op[3] & 3);
        match op[0] % 8 {
            0..=3 => {
                table.insert(k, v).expect("no chain of 17 keys by chance");
                reference.0.entry(k).or_default().insert(0, v);
                reference.1 += 1;
            }
            4 | 5 => {
                let want = reference.remove(k, v);
                assert_eq!(table.remove(&k, |x| *x == v), want, "remove {k} {v}");
            }
            6 => {
                let want = reference.0.remove(&k).map_or(0, |l| l.len());
                reference.1 -= want;
                assert_eq!(table.remove_all(&k), want, "remove all {k}");
            }
            _ => {
                let to = u32::from(op[3] >> 2 & 3);
                let want = reference
                    .0
                    .get_mut(&k)
                    .and_then(|l| l.iter_mut().find(|x| **x == v))
                    .map(|x| *x = to)
                    .is_some();
                let got = table.update(&k, |x| *x == v, |x| *x = to);
                assert_eq!(got, want, "update {k} {v} -> {to}");
                if op[3] & 0x80 != 0 {
                    table.finish_rehash();
                }
            }
        }
        let guard = crossbeam_epoch::pin();
        for probe in [k, (k + 1) % keys] {
            let want: &[u32] = reference.0.get(&probe).map_or(&[], |l| l.as_slice());
            let got: Vec<u32> = table.get_all(&probe, &guard).collect();
            assert_eq!(got, want, "key {probe}");
            assert_eq!(table.get(&probe, &guard), want.first().copied());
        }
        assert_eq!(table.len(), reference.0.len());
        assert_eq!(table.objects(), reference.1);
    }
    assert_eq!(
        reference.1,
        reference.0.values().map(Vec::len).sum::<usize>(),
        "the reference's count"
    );
    let mut seen: HashMap<u32, Vec<u32>> = HashMap::new();
    table.for_each(|k, v| seen.entry(*k).or_default().push(*v));
    assert_eq!(seen, reference.0);
});
