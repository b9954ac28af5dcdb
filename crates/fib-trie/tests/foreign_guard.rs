//! Every public reader entry point refuses a guard that does not pin the default collector:
//! the crate retires replaced memory into that collector, so a pin of any other collector (or
//! `unprotected()`) would not keep what the reader borrows alive.

use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard};
use fib_trie::{
    FastLpmWriter, FibAlias, FibWriter, Flow, InsertFlags, NextHop, NexthopGroup, NexthopObject,
    Route, TrieWriter,
};

/// Both a foreign collector's guard and `unprotected()` must panic with the crate's message.
fn refused(what: &str, f: impl Fn(&Guard)) {
    epoch_guard::assert_refused("fib-trie", what, f);
}

fn fib() -> (FibWriter<u32>, Arc<NexthopObject<u32>>) {
    let mut fib = FibWriter::<u32>::new();
    let obj = Arc::new(NexthopObject::new(
        7,
        NexthopGroup::hops(vec![NextHop::new(Some(1), 2)]),
    ));
    fib.insert(
        &Route::unicast(0x0a00_0000, 8, 254, vec![NextHop::new(Some(9), 2)]),
        InsertFlags::ADD,
    )
    .unwrap();
    fib.insert(
        &Route::via_object(0x0b00_0000, 8, 254, Arc::clone(&obj)),
        InsertFlags::ADD,
    )
    .unwrap();
    (fib, obj)
}

#[test]
fn fib_entry_points_refuse_a_foreign_guard() {
    let (fib, _) = fib();
    let flow = Flow::to(0x0a01_0203);
    refused("Fib::lookup", |g| {
        let _ = fib.lookup(&flow, g);
    });
    refused("Fib::lookup_walk", |g| {
        let _ = fib.lookup_walk(&flow, g);
    });
    refused("Fib::table", |g| {
        let _ = fib.table(254, g);
    });
    refused("Fib::lookup_batch", |g| {
        fib.lookup_batch(&[flow, flow], g, |_, r| {
            let _ = r;
        });
    });
    refused("Fib::rules", |g| {
        let _ = fib.rules(g);
    });
}

#[test]
fn table_entry_points_refuse_a_foreign_guard() {
    let (mut fib, _) = fib();
    let main = fib.table_or_create(254);
    let flow = Flow::to(0x0a01_0203);
    refused("FibTable::lookup", |g| {
        let _ = main.lookup(&flow, g);
    });
    refused("FibTable::lookup_walk", |g| {
        let _ = main.lookup_walk(&flow, g);
    });
    refused("FibTable::trie", |g| {
        let _ = main.trie(g);
    });
    refused("FibTable::dump", |g| {
        let _ = main.dump(g);
    });
}

#[test]
fn trie_entry_points_refuse_a_foreign_guard() {
    let mut trie = TrieWriter::<u32, u32>::new();
    trie.insert(0x0a00_0000, 8, 1).unwrap();
    refused("LcTrie::lookup", |g| {
        let _ = trie.lookup(0x0a01_0203, g, |_| true);
    });
    refused("LcTrie::lookup_batch", |g| {
        let mut out = [None, None];
        trie.lookup_batch(&[1, 2], &mut out, g, |_| true);
    });
    refused("LcTrie::get", |g| {
        let _ = trie.get(0x0a00_0000, g);
    });
    refused("LcTrie::for_each", |g| trie.for_each(g, |_, _| {}));
    refused("LcTrie::stats", |g| {
        let _ = trie.stats(g);
    });
}

#[test]
fn fast_lpm_entry_points_refuse_a_foreign_guard() {
    let mut trie = TrieWriter::<u32, u32>::new();
    trie.insert(0x0a00_0000, 8, 1).unwrap();
    let mut fast = FastLpmWriter::<u32>::new();
    fast.rebuild(&mut &*trie);
    let reader = Arc::clone(fast.reader());
    assert_eq!(reader.lookup(0x0a01_0203, &epoch::pin()), Some(1));
    refused("FastLpm::lookup", |g| {
        let _ = reader.lookup(0x0a01_0203, g);
    });
    refused("FastLpm::view", |g| {
        let _ = reader.view(g).lookup(0x0a01_0203);
    });
    refused("FastLpm::lookup_batch", |g| {
        let mut out = [None, None];
        reader.lookup_batch(&[1, 2], &mut out, g);
    });
    // Checked before the batch's first key: an empty batch refuses too.
    refused("FastLpm::lookup_batch (empty)", |g| {
        reader.lookup_batch(&[], &mut [], g);
    });
}

#[test]
fn nexthop_entry_points_refuse_a_foreign_guard() {
    let (mut fib, obj) = fib();
    refused("NexthopObject::load", |g| {
        let _ = obj.load(g);
    });
    let main = fib.table_or_create(254);
    let guard = epoch::pin();
    let alias: FibAlias<u32> = main
        .dump(&guard)
        .into_iter()
        .find(|(k, _, _)| *k == 0x0b00_0000)
        .map(|(_, _, a)| a.clone())
        .unwrap();
    refused("FibAlias::resolve", |g| {
        let _ = alias.resolve(g);
    });
}

#[test]
fn default_guard_is_accepted_everywhere() {
    let (fib, obj) = fib();
    let guard = epoch::pin();
    let r = fib.lookup(&Flow::to(0x0b01_0101), &guard).unwrap();
    assert_eq!(r.nexthops()[0].gateway, Some(fib_trie::Gateway::Same(1)));
    assert_eq!(
        obj.load(&guard).nexthops()[0].gateway,
        Some(fib_trie::Gateway::Same(1))
    );
    assert_eq!(fib.table(254, &guard).unwrap().dump(&guard).len(), 2);
}
