//! Operation sequences on the LC-trie against `ReferenceLpm`: inserts, removes, bulk loads
//! into an emptied trie, with the direct table forced on or off; after every operation a few
//! lookups (plain, filtered and batched) must answer as the reference, at the first and last
//! address of each prefix changed and one past it (the direct-table slots it touched), and at
//! the end of one input in two with the direct table on, the whole direct table must check
//! out.
//!
//! Built by cargo-fuzz (`cfg(fuzzing)`), the trie's direct table has 2^8 slots instead of
//! 2^16 (as under Miri; the same code): with 2^16, a change of a prefix shorter than /16
//! rewrote up to 65,536 slots, each with the sanitizers' comparison callbacks (perf: 80% of
//! the time in `__sanitizer_cov_trace_*cmp*`, within `LcTrie::remove` and `insert`), and the
//! target ran 4 inputs per second under load. Slot-wide prefixes are now /0 to /8, and the
//! keys (clustered in a few /16s) fall in 4 of the 256 slots.
#![no_main]

use crossbeam_epoch as epoch;
use fib_trie::{ReferenceLpm, TrieWriter};
use libfuzzer_sys::fuzz_target;

/// Reads the input a few bytes at a time; runs out quietly.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes([
            self.byte()?,
            self.byte()?,
            self.byte()?,
            self.byte()?,
        ]))
    }
}

fn canonical(key: u32, plen: u8) -> u32 {
    key & u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0)
}

/// A prefix length from one byte.
fn length(l: u8) -> u8 {
    l % 33
}

/// The first and last address of `key/plen` and the one after it.
fn edges(key: u32, plen: u8) -> [u32; 3] {
    let last = key | !u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0);
    [key, last, last.wrapping_add(1) & 0x0303_ffff]
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mut trie = TrieWriter::<u32, u32>::new();
    let mut reference = ReferenceLpm::<u32, u32>::new();
    let mut probes = Vec::new();
    let mode = input.byte().unwrap_or(0);
    let direct = mode & 1 == 1;
    if direct {
        trie.enable_direct_table();
    }
    while let Some(op) = input.byte() {
        match op % 8 {
            // Insert a prefix (keys clustered in a few /16s so prefixes nest).
            0..=3 => {
                let (Some(k), Some(l)) = (input.u32(), input.byte()) else {
                    break;
                };
                let plen = length(l);
                let key = canonical(k & 0x0303_ffff, plen);
                let value = u32::from(op) << 16 | u32::from(l);
                let a = trie.insert(key, plen, value).is_ok();
                let b = reference.insert(key, plen, value).is_ok();
                assert_eq!(a, b);
                probes.push(key | (k & !u32::MAX.checked_shl(32 - u32::from(plen)).unwrap_or(0)));
                probes.extend(edges(key, plen));
            }
            // Remove a prefix.
            4 | 5 => {
                let (Some(k), Some(l)) = (input.u32(), input.byte()) else {
                    break;
                };
                let plen = length(l);
                let key = canonical(k & 0x0303_ffff, plen);
                let a = trie.remove(key, plen).ok();
                let b = reference.remove(key, plen).ok();
                assert_eq!(a, b, "remove {key:#x}/{plen}");
                probes.extend(edges(key, plen));
            }
            // Empty the trie by single removes and load the same prefixes in bulk.
            6 => {
                let guard = epoch::pin();
                let mut all = Vec::new();
                trie.for_each(&guard, |k, aliases| {
                    for a in aliases {
                        all.push((k, 32 - a.slen, a.value));
                    }
                });
                drop(guard);
                for &(k, l, _) in &all {
                    trie.remove(k, l).unwrap();
                }
                // In list order: duplicates of one prefix keep their order, as in the reference.
                trie.insert_many(all.iter().copied()).unwrap();
            }
            // Probe an address.
            _ => {
                let Some(k) = input.u32() else { break };
                probes.push(k & 0x0303_ffff);
            }
        }
        let guard = epoch::pin();
        for &p in probes.iter().rev().take(7) {
            let got = trie
                .lookup(p, &guard, |_| true)
                .map(|m| (m.key, m.plen, *m.value));
            let want = reference.lookup(p, |_| true).map(|(k, l, v)| (k, l, *v));
            assert_eq!(got, want, "lookup {p:#x}");
            let odd = |v: &u32| v % 2 == 1;
            let got = trie.lookup(p, &guard, |v| odd(v)).map(|m| *m.value);
            let want = reference.lookup(p, |v| odd(v)).map(|(_, _, v)| *v);
            assert_eq!(got, want, "filtered lookup {p:#x}");
        }
    }
    let guard = epoch::pin();
    let mut out = vec![None; probes.len()];
    trie.lookup_batch(&probes, &mut out, &guard, |_| true);
    for (p, o) in probes.iter().zip(&out) {
        let want = reference.lookup(*p, |_| true).map(|(_, _, v)| *v);
        assert_eq!(o.as_ref().map(|m| *m.value), want, "batched {p:#x}");
    }
    if direct && mode & 2 == 2 {
        trie.check_direct_table().unwrap();
    }
});
