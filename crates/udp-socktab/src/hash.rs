//! The table's hash functions, each mixing in the namespace's `net_hash_mix` value:
//! `udp_hashfn` (port), `ipv4_portaddr_hash`/`ipv6_portaddr_hash` (hash2) and `udp_ehashfn`
//! (hash4).
//!
//! As in the kernel, `0.0.0.0` and `::` hash alike, and so do `a.b.c.d` and `::ffff:a.b.c.d`,
//! so an IPv4 packet finds dual-stack IPv6 sockets in the same hash2 chain as IPv4 ones. The
//! mixing function is our own (a 64-bit multiply-xorshift finalizer), not the kernel's jhash.
#![forbid(unsafe_code)]

use crate::addr::has_v4_meaning;

/// The 64-bit finalizer of MurmurHash3 (public domain), a cheap full-avalanche mixer.
const fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// The address part of hash2: IPv4-meaning addresses (`::`, v4-mapped) by their 32 bits.
const fn addr_hash(a: u128, mix: u32) -> u32 {
    let seed = (mix as u64) << 32 | 0x9e37_79b9;
    if has_v4_meaning(a) {
        fmix64((a as u32) as u64 ^ seed) as u32
    } else {
        fmix64(fmix64((a >> 64) as u64 ^ seed) ^ a as u64) as u32
    }
}

/// hash2: the local address and port (`ipv6_portaddr_hash`); the caller masks it.
pub(crate) const fn portaddr_hash(mix: u32, addr: u128, port: u16) -> u32 {
    addr_hash(addr, mix) ^ port as u32
}

/// The port hash's slot: `(port + net_hash_mix) & mask` (`udp_hashfn`).
pub(crate) const fn port_slot(mix: u32, port: u16, mask: u32) -> usize {
    ((port as u32).wrapping_add(mix) & mask) as usize
}

/// hash4: local address and port, remote address and port (`udp_ehashfn`).
pub(crate) const fn ehash(mix: u32, laddr: u128, lport: u16, faddr: u128, fport: u16) -> u32 {
    let seed = (mix as u64) << 32 | ((lport as u64) << 16 | fport as u64);
    let l = fmix64((laddr >> 64) as u64 ^ (laddr as u64).rotate_left(17) ^ seed);
    fmix64(l ^ (faddr >> 64) as u64 ^ (faddr as u64).rotate_left(29)) as u32
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::addr::{bits, mapped};

    #[test]
    fn ipv4_and_mapped_hash_alike() {
        let v4 = Ipv4Addr::new(10, 1, 2, 3);
        // An IPv4 socket's address and a dual-stack socket bound to `::ffff:10.1.2.3` (as the
        // standard library maps it) land in one hash2 chain.
        assert_eq!(
            portaddr_hash(7, bits(IpAddr::V4(v4)), 53),
            portaddr_hash(7, bits(IpAddr::V6(v4.to_ipv6_mapped())), 53)
        );
        // `::` and `0.0.0.0` share a chain.
        assert_eq!(
            portaddr_hash(7, bits(IpAddr::V6(Ipv6Addr::UNSPECIFIED)), 53),
            portaddr_hash(7, bits(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), 53)
        );
        // IPv6 addresses with the same low 32 bits that are not v4-mapped hash as IPv6.
        let h4 = portaddr_hash(7, mapped(u32::from(v4)), 53);
        for other in ["::10.1.2.3", "2001:db8::10.1.2.3", "::fffe:10.1.2.3"] {
            let a = u128::from(other.parse::<Ipv6Addr>().unwrap());
            assert_ne!(portaddr_hash(7, a, 53), h4, "{other}");
        }
        // The namespace's mix moves the chain.
        assert_ne!(h4, portaddr_hash(8, mapped(u32::from(v4)), 53));
        assert_eq!(port_slot(3, 65535, 0xff), 2);
    }

    #[test]
    fn addresses_apart_by_any_stride_spread_over_the_chains() {
        // 4096 addresses one stride apart, one port, 256 chains: 16 per chain on average. A
        // hash that kept the addresses' structure (an identity, or one that drops some bits)
        // piles strided addresses up in a few chains.
        for (mix, stride) in [(0u32, 1u32), (0, 256), (0x5bd1_e995, 1 << 20), (3, 1 << 16)] {
            let addr = |i: u32| 0x0a00_0000u32.wrapping_add(i.wrapping_mul(stride));
            let mut v4 = [0u32; 256];
            let mut v6 = [0u32; 256];
            let mut four = [0u32; 256];
            for i in 0..4096 {
                v4[(portaddr_hash(mix, mapped(addr(i)), 53) & 0xff) as usize] += 1;
                let a = 0x2001_0db8_u128 << 96 | u128::from(addr(i));
                v6[(portaddr_hash(mix, a, 53) & 0xff) as usize] += 1;
                let h = ehash(mix, mapped(0xc000_0201), 53, mapped(addr(i)), 40000);
                four[(h & 0xff) as usize] += 1;
            }
            for (name, chains) in [("hash2 v4", v4), ("hash2 v6", v6), ("hash4", four)] {
                assert!(
                    chains.iter().all(|&n| n <= 40),
                    "{name}, stride {stride}: {chains:?}"
                );
            }
        }
    }
}
