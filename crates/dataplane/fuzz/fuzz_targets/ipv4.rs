//! The IPv4 view and the options walk: once checked, no accessor panics; the payload lies
//! inside the buffer; copied options stay within 40 bytes.
#![no_main]

use dataplane::wire::ipv4::{Ipv4Packet, copied_options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ip) = Ipv4Packet::new_checked(data) {
        let _ = (ip.version(), ip.tos(), ip.ident(), ip.frag_offset(), ip.ttl(), ip.protocol());
        let _ = (ip.src_addr(), ip.dst_addr(), ip.verify_checksum(), ip.is_fragment());
        assert!(ip.header_len() + ip.payload().len() <= data.len());
        let mut out = [0u8; 40];
        let n = copied_options(ip.options(), &mut out);
        assert!(n <= 40 && n % 4 == 0);
    }
});
