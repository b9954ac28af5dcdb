//! The whole pipeline over one batch of arbitrary frames (split at 0xfe bytes), against
//! the test fixture's tables (routes of every type, neighbours resolved and not, a UDP socket,
//! policies), every VLAN mode, with and without headroom; then a hold-buffer release.
#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::sync::OnceLock;

use dataplane::{Config, Frame, HeapPool, Queue, VlanMode};
use libfuzzer_sys::fuzz_target;

static FIXTURE: OnceLock<common::Fixture> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let fx = FIXTURE.get_or_init(common::fixture);
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let vlan = [VlanMode::Drop, VlanMode::Punt, VlanMode::Route][usize::from(mode % 3)];
    let headroom = if mode & 4 != 0 { 256 } else { 0 };
    let mut queue = Queue::new(Config { vlan, ..Config::default() }).unwrap();
    let parts: Vec<&[u8]> = data.split(|&b| b == 0xfe).take(64).collect();
    let mut chunks: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| {
            let mut c = vec![0u8; headroom + p.len() + if mode & 8 != 0 { 2048 } else { 0 }];
            c[headroom..headroom + p.len()].copy_from_slice(p);
            c
        })
        .collect();
    let mut frames: Vec<Frame<'_>> = chunks
        .iter_mut()
        .zip(&parts)
        .map(|(c, p)| Frame::new(c, headroom, p.len(), common::IN))
        .collect();
    let mut pool = HeapPool::new(2048, 16);
    let guard = crossbeam_epoch::pin();
    queue.process_batch(&fx.tables, &guard, 0, &mut frames, &mut pool);
    queue.release_held(&fx.tables, &guard, 10_000_000_000, &mut pool);
    let c = queue.counters();
    assert_eq!(c.rx, frames.len() as u64);
    assert_eq!(c.transmit + c.punt + c.deliver + c.reply + c.held + c.consumed + c.dropped, c.rx);
});
