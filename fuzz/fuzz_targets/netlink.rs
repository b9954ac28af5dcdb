//! Arbitrary bytes as a stream of rtnetlink messages into the mirror's decode, mapping and
//! applying (events and dumps with their sweeps): never a panic on bad input, and the FIB's
//! fast lookup and LC-trie walk agree afterwards.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = netlink_mirror::fuzzing::apply_messages(data);
});
