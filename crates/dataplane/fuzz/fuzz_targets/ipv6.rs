//! The IPv6 view and the bounded extension-header walk: no panic, the upper layer's offset
//! lies inside the payload, the bound holds.
#![no_main]

use dataplane::wire::ipv6::{Ipv6Packet, walk_extensions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ip) = Ipv6Packet::new_checked(data) {
        let _ = (ip.traffic_class(), ip.hop_limit(), ip.src_addr(), ip.dst_addr());
        if let Ok(upper) = walk_extensions(ip.next_header(), ip.payload(), 8) {
            assert!(upper.offset <= ip.payload().len());
            assert!(upper.headers <= 8);
        }
    }
});
