//! The Ethernet view: once checked, no accessor panics.
#![no_main]

use dataplane::wire::ethernet::EthernetFrame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = EthernetFrame::new_checked(data) {
        let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.vlan_id());
        let _ = (f.inner_ethertype(), f.header_len(), f.payload().len());
    }
});
