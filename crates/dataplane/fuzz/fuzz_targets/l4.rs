//! Ports of every protocol number and the UDP view: no panic; a checked UDP length fits.
#![no_main]

use dataplane::wire::l4::{UdpPacket, ports};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&proto, rest)) = data.split_first() else {
        return;
    };
    let _ = ports(proto, rest);
    if let Ok(udp) = UdpPacket::new_checked(rest) {
        assert!(usize::from(udp.len()) <= rest.len());
        let _ = (udp.src_port(), udp.dst_port(), udp.checksum());
    }
});
