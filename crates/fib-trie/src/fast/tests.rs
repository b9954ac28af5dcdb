//! The fast structure against the LC-trie it is derived from, under random changes.

use crossbeam_epoch as epoch;
use proptest::prelude::*;

use super::node::step;
use super::*;
use crate::trie::LcTrie;

/// Keys at and around every prefix boundary, plus the given extra keys.
fn probes<K: TrieKey>(prefixes: &[(K, u8)], extra: &[K]) -> Vec<K> {
    let mut out = extra.to_vec();
    for &(k, plen) in prefixes {
        let host = !K::prefix_mask(plen);
        out.extend([
            k,
            k | host,
            k ^ K::from_usize(1),
            (k | host) ^ K::from_usize(1),
        ]);
        if plen > 0 {
            out.push(k ^ K::from_usize(1).shl(K::BITS - plen));
        }
        if k != K::ZERO {
            out.push(k ^ K::from_usize(1).shl(k.highest_bit().unwrap_or(0)));
        }
    }
    out
}

fn agree<K: TrieKey>(
    fast: &FastLpm<K>,
    trie: &LcTrie<K, u32>,
    keys: &[K],
) -> Result<(), TestCaseError> {
    let guard = &epoch::pin();
    let mut batch = vec![None; keys.len()];
    fast.lookup_batch(keys, &mut batch, guard);
    let view = fast.view(guard);
    for (&key, b) in keys.iter().zip(&batch) {
        let want = trie.lookup(key, guard, |_| true).map(|m| *m.value);
        prop_assert_eq!(fast.lookup(key, guard), want, "key {:?}", key);
        prop_assert_eq!(*b, want, "batched, key {:?}", key);
        prop_assert_eq!(view.lookup(key), want, "view, key {:?}", key);
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Op<K> {
    Insert(K, u8, u32),
    Remove(K, u8),
}

fn ops<K: TrieKey + Arbitrary>(max: usize) -> impl Strategy<Value = Vec<Op<K>>> {
    prop::collection::vec(any::<K>(), 1..5).prop_flat_map(move |bases| {
        let plen = prop_oneof![
            Just(0u8),
            Just(K::BITS),
            0..=K::BITS,
            (K::BITS / 4)..=(K::BITS / 4 * 3),
        ];
        let prefix = (prop::sample::select(bases), any::<K>(), plen, 0..=K::BITS)
            .prop_map(|(base, noise, plen, keep)| {
                let k = (base ^ (noise & !K::prefix_mask(keep))) & K::prefix_mask(plen);
                (k, plen)
            })
            .boxed();
        prop::collection::vec(
            prop_oneof![
                3 => (prefix.clone(), 0u32..8).prop_map(|((k, l), v)| Op::Insert(k, l, v)),
                1 => prefix.prop_map(|(k, l)| Op::Remove(k, l)),
            ],
            1..max,
        )
    })
}

fn run<K: TrieKey>(ops: &[Op<K>], extra: &[K]) -> Result<(), TestCaseError> {
    let trie = LcTrie::<K, u32>::new();
    let fast = FastLpm::<K>::new();
    let mut seen = Vec::new();
    for op in ops {
        match *op {
            Op::Insert(k, l, v) => {
                trie.insert(k, l, v).unwrap();
                fast.update(k, l, &mut &trie);
                seen.push((k, l));
            }
            Op::Remove(k, l) => {
                trie.remove(k, l).unwrap();
                fast.update(k, l, &mut &trie);
            }
        }
    }
    let keys = probes(&seen, extra);
    agree(&fast, &trie, &keys)?;
    // A whole rebuild gives the same answers.
    fast.rebuild(&mut &trie);
    agree(&fast, &trie, &keys)
}

proptest! {
    #[test]
    fn ipv4_updates_match_the_trie(ops in ops::<u32>(150), extra in prop::collection::vec(any::<u32>(), 50)) {
        run(&ops, &extra)?;
    }

    #[test]
    fn ipv6_updates_match_the_trie(ops in ops::<u128>(150), extra in prop::collection::vec(any::<u128>(), 50)) {
        run(&ops, &extra)?;
    }
}

/// Enough prefixes for the wide first level, then changes of every kind in it: prefixes
/// shorter than the first level, at it, inside nodes, and removals that empty a node.
fn wide<K: TrieKey>(seed: u64) {
    use rand::{RngExt, SeedableRng, rngs::StdRng};
    let mut rng = StdRng::seed_from_u64(seed);
    let random_key = |rng: &mut StdRng| {
        // Clustered in a few /8s (or /16s for IPv6) so nodes get deep and full.
        let top = K::from_usize(rng.random_range(0..4usize)).shl(K::BITS - 10);
        let low = K::from_usize(rng.random::<u64>() as usize).shl(K::BITS.saturating_sub(64));
        top | (low & !K::prefix_mask(10)) | K::from_usize(rng.random::<u32>() as usize)
    };
    let trie = LcTrie::<K, u32>::new();
    let mut prefixes = Vec::new();
    for i in 0..3000u32 {
        let plen = match i % 4 {
            0 => rng.random_range(K::BITS / 2..=K::BITS),
            1 => rng.random_range(12..=24),
            _ => rng.random_range(20..=K::BITS.min(64)),
        };
        let key = random_key(&mut rng) & K::prefix_mask(plen);
        trie.insert(key, plen, i % 50).unwrap();
        prefixes.push((key, plen));
    }
    let fast = FastLpm::<K>::new();
    fast.rebuild(&mut &trie);
    assert_eq!(fast.first_level_bits(), wide_bits::<K>());
    let extra: Vec<K> = (0..2000).map(|_| random_key(&mut rng)).collect();
    agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
    for round in 0..600u32 {
        let (key, plen) = if round % 3 == 0 {
            prefixes[rng.random_range(0..prefixes.len())]
        } else {
            let plen = rng.random_range(0..=K::BITS);
            (random_key(&mut rng) & K::prefix_mask(plen), plen)
        };
        if round % 2 == 0 {
            trie.remove(key, plen).unwrap();
        } else {
            trie.insert(key, plen, 1000 + round).unwrap();
            prefixes.push((key, plen));
        }
        fast.update(key, plen, &mut &trie);
        if round % 100 == 0 {
            agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
        }
    }
    agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
}

#[test]
fn wide_ipv4_tables_follow_every_kind_of_change() {
    wide::<u32>(1);
}

#[test]
fn wide_ipv6_tables_follow_every_kind_of_change() {
    wide::<u128>(2);
}

#[test]
fn an_empty_structure_answers_nothing() {
    let fast = FastLpm::<u32>::new();
    let guard = &epoch::pin();
    assert_eq!(fast.lookup(0x0102_0304, guard), None);
    assert!(fast.bytes() > 0);
}

/// Lone long prefixes in sparse regions take skip nodes (a /48 under a /32, a /30 under a
/// /24); lookups through them, around them and after changes inside, beside and above them
/// agree with the trie.
#[test]
fn sparse_regions_skip_and_follow_changes() {
    let trie = LcTrie::<u128, u32>::new();
    // Enough prefixes elsewhere for the wide first level.
    for i in 0..WIDE_AT as u128 {
        trie.insert((0x3000 << 112) | (i << 96), 32, 1).unwrap();
    }
    let net32 = 0x2001_0db8_u128 << 96;
    let lone48 = net32 | (0x00ab << 80);
    let mut prefixes = vec![(net32, 32), (lone48, 48)];
    trie.insert(net32, 32, 10).unwrap();
    trie.insert(lone48, 48, 11).unwrap();
    let fast = FastLpm::<u128>::new();
    fast.rebuild(&mut &trie);
    {
        let guard = &epoch::pin();
        let root = fast.root(guard);
        let mut entry = Entry::load(&root.slots()[root.slot_index(lone48)]);
        let mut depth = root.bits;
        let mut skipped = false;
        loop {
            match entry {
                Entry::Leaf(_) => break,
                Entry::Node(n) => {
                    // SAFETY: read under `guard`.
                    entry = unsafe { step(n, index_at(lone48, depth)) };
                    depth += STRIDE;
                }
                Entry::Direct(d, bits) => {
                    let index = lone48.shl(depth).shr_in_width(128 - bits).low_usize();
                    // SAFETY: read under `guard`.
                    entry = Entry::load(unsafe { node::direct_slot(d, index) });
                    depth += bits;
                }
                Entry::Skip(s) => {
                    skipped = true;
                    // SAFETY: read under `guard`.
                    let (len, next) = unsafe { skip_next(s) };
                    (entry, depth) = (Entry::load(next), len);
                }
            }
        }
        assert!(skipped, "the lone /48 is reached through a skip node");
    }
    agree(&fast, &trie, &probes(&prefixes, &[])).unwrap();
    let changes: [(u128, u8, Option<u32>); 6] = [
        (lone48 | (1 << 70), 58, Some(12)),     // below the skip's prefix
        (net32 | (0x00ac << 80), 48, Some(13)), // beside it: the region is rebuilt
        (net32, 40, Some(14)),                  // above it, inside the skipped bits
        (lone48, 48, None),
        (net32 | (0x00ac << 80), 48, None),
        (net32, 32, None),
    ];
    for (key, plen, answer) in changes {
        match answer {
            Some(a) => {
                trie.insert(key, plen, a).unwrap();
                prefixes.push((key, plen));
            }
            None => {
                trie.remove(key, plen).unwrap();
            }
        }
        fast.update(key, plen, &mut &trie);
        agree(&fast, &trie, &probes(&prefixes, &[])).unwrap();
    }
}

/// The entries on `key`'s path, from its first-level slot down to its answer.
fn path<K: TrieKey>(fast: &FastLpm<K>, key: K) -> Vec<Entry> {
    let guard = &epoch::pin();
    let root = fast.root(guard);
    let mut entry = Entry::load(&root.slots()[root.slot_index(key)]);
    let mut depth = root.bits;
    let mut out = vec![entry];
    loop {
        (entry, depth) = match entry {
            Entry::Leaf(_) => return out,
            // SAFETY: read under `guard`.
            Entry::Node(n) => (unsafe { step(n, index_at(key, depth)) }, depth + STRIDE),
            Entry::Skip(s) => {
                // SAFETY: read under `guard`.
                let (len, next) = unsafe { skip_next(s) };
                (Entry::load(next), len)
            }
            Entry::Direct(d, bits) => {
                let index = key.shl(depth).shr_in_width(K::BITS - bits).low_usize();
                // SAFETY: read under `guard`; `index` is below the node's `2^bits` slots.
                let slot = unsafe { node::direct_slot(d, index) };
                (Entry::load(slot), depth + bits)
            }
        };
        out.push(entry);
    }
}

/// A dense IPv6 /18 (many /32s, /40s, /44s and /48s, one /32 full of them) takes direct
/// nodes (/18 to /32, /32 to /44), so that a /48 is four loads away; lookups, and updates of
/// every kind through and around the direct nodes (a prefix covering a few of their slots,
/// one covering many, one below them, removals that empty a slot), agree with the trie, and
/// IPv4 never gets direct nodes.
#[test]
fn dense_ipv6_regions_go_direct_and_follow_changes() {
    use rand::{RngExt, SeedableRng, rngs::StdRng};
    let mut rng = StdRng::seed_from_u64(16);
    let trie = LcTrie::<u128, u32>::new();
    // Enough prefixes elsewhere for the wide first level.
    for i in 0..WIDE_AT as u128 {
        trie.insert((0x3000 << 112) | (i << 96), 32, 1).unwrap();
    }
    let region = 0x2a00_u128 << 112; // 2a00::/18 (and /16)
    let dense32 = region | (0x0123 << 96); // 2a00:123::/32
    let mut prefixes = Vec::new();
    let add = |prefixes: &mut Vec<(u128, u8)>, key: u128, plen: u8, answer: u32| {
        let key = key & u128::prefix_mask(plen);
        trie.insert(key, plen, answer).unwrap();
        prefixes.push((key, plen));
    };
    for i in 0..600u32 {
        let plen = [32, 40, 44, 48, 48, 36][i as usize % 6];
        let key = region | (u128::from(rng.random::<u64>()) << 48) & !u128::prefix_mask(18);
        add(&mut prefixes, key, plen, i % 7);
    }
    for i in 0..200u32 {
        let plen = [40, 44, 48, 48, 47, 64][i as usize % 6];
        let key = dense32 | (u128::from(rng.random::<u32>()) << 64);
        add(&mut prefixes, key, plen, 100 + i % 5);
    }
    add(&mut prefixes, dense32, 32, 99);
    let fast = FastLpm::<u128>::new();
    fast.rebuild(&mut &trie);
    let deep = prefixes.iter().rev().find(|p| p.1 == 48).unwrap().0 | 5;
    let on_path = path(&fast, deep);
    assert!(
        matches!(
            on_path[..],
            [
                Entry::Direct(_, 14),
                Entry::Direct(_, 12),
                Entry::Node(_),
                Entry::Leaf(_)
            ]
        ),
        "{on_path:?}"
    );
    // The diagnostic's addresses: the first-level slot, the two direct slots, the node's
    // header and the answer it picks; a key no prefix covers reads its slot only.
    let guard = &epoch::pin();
    let addrs = fast.lookup_path(deep, guard);
    let Entry::Node(node) = on_path[2] else {
        unreachable!()
    };
    assert_eq!(addrs.len(), 5, "{addrs:x?}");
    assert_eq!(addrs[3], node.as_ptr().addr());
    assert!(addrs[4] > addrs[3] && addrs[4] < addrs[3] + 16 + 64 * 8 + 64 * 4);
    assert_eq!(fast.lookup_path(0x5000 << 112, guard).len(), 1);
    let extra: Vec<u128> = (0..3000)
        .map(|i| {
            let base = if i % 2 == 0 { region } else { dense32 };
            let keep = if i % 2 == 0 { 18 } else { 32 };
            base | (rng.random::<u128>() & !u128::prefix_mask(keep))
        })
        .collect();
    agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
    // Changes: (key, plen) with an answer to insert, or None to remove.
    let mut changes: Vec<(u128, u8, Option<u32>)> = vec![
        (region | (0x0456 << 96), 31, Some(500)), // two slots of the /18's direct node
        (region | (0x0400 << 96), 24, Some(501)), // 256 of them
        (region | (0x0800 << 96), 23, Some(502)), // 512: the direct node is rebuilt
        (dense32 | (0x0ab << 84), 40, Some(503)), // 16 slots of the /32's
        (dense32 | (0xabc << 84), 44, Some(504)), // one slot of it
        (dense32 | (0xabc5 << 80), 48, Some(505)), // below it
        (dense32 | (0x7 << 92), 36, Some(506)),   // 256 slots of it
        (dense32 | (0x8 << 92), 33, Some(507)),   // 2048: rebuilt
        (region, 16, Some(508)),                  // above the direct node
        (region | (0x0456 << 96), 31, None),
        (region | (0x0800 << 96), 23, None),
        (dense32 | (0xabc << 84), 44, None),
        (dense32, 32, None),
        (region, 16, None),
    ];
    for &(k, l) in prefixes.iter().step_by(7) {
        changes.push((k, l, None));
    }
    for (key, plen, answer) in changes {
        match answer {
            Some(a) => add(&mut prefixes, key, plen, a),
            None => {
                trie.remove(key, plen).unwrap();
            }
        }
        fast.update(key, plen, &mut &trie);
        agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
    }
    // Removing the most of it folds everything back.
    for &(k, l) in &prefixes {
        if trie.remove(k, l).is_ok() {
            fast.update(k, l, &mut &trie);
        }
    }
    agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
    fast.rebuild(&mut &trie);
    agree(&fast, &trie, &probes(&prefixes, &extra)).unwrap();
}

#[test]
fn ipv4_never_goes_direct() {
    for depth in 0..32 {
        assert_eq!(direct_bits::<u32>(depth, 1 << 20), None);
    }
    assert_eq!(direct_bits::<u128>(18, DIRECT_AT - 1), None);
    assert_eq!(direct_bits::<u128>(18, DIRECT_AT), Some(14));
}
