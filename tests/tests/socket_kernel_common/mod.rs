//! Helpers shared by the tests that compare UDP socket lookups with the live kernel
//! (`udp_socktab_kernel.rs`, `endpoints_kernel.rs`): the scenario generator, kernel sockets
//! opened as a scenario specifies, the namespace with its veth pair, and the question of
//! which kernel socket received a datagram.

use std::net::{IpAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};
use udp_socktab::Family;
use xfwd_lab::netns::Netns;

/// xorshift64: the scenario generator (seeded, so a failure can be replayed).
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with the given chance.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The errno of a kernel call, 0 for success.
pub fn errno<T>(r: &std::io::Result<T>) -> i32 {
    r.as_ref()
        .err()
        .map_or(0, |e| e.raw_os_error().unwrap_or(-1))
}

/// An unbound kernel UDP socket of `family` with the scenario's `SO_REUSEADDR`,
/// `SO_REUSEPORT` and (for IPv6) `IPV6_V6ONLY`.
pub fn kernel_socket(family: Family, reuseaddr: bool, reuseport: bool) -> Socket {
    let domain = if family.is_v4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let k = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    if !family.is_v4() {
        k.set_only_v6(family == Family::V6Only).unwrap();
    }
    k.set_reuse_address(reuseaddr).unwrap();
    k.set_reuse_port(reuseport).unwrap();
    k
}

/// A throwaway namespace `<prefix>-k` with a veth pair `ve0`/`ve1` up and `addrs` (with
/// their prefix lengths; IPv6 without duplicate address detection) on `ve0`.
pub fn veth_netns(prefix: &str, addrs: &[(&str, u8)]) -> Netns {
    let ns = Netns::create(&format!("{prefix}-k")).unwrap();
    ns.ip(["link", "add", "ve0", "type", "veth", "peer", "name", "ve1"])
        .unwrap();
    ns.ip(["link", "set", "ve0", "up"]).unwrap();
    ns.ip(["link", "set", "ve1", "up"]).unwrap();
    for (a, len) in addrs {
        let cidr = format!("{a}/{len}");
        if a.parse::<IpAddr>().unwrap().is_ipv6() {
            ns.ip(["addr", "add", &cidr, "dev", "ve0", "nodad"])
                .unwrap();
        } else {
            ns.ip(["addr", "add", &cidr, "dev", "ve0"]).unwrap();
        }
    }
    ns
}

/// Which of `socks` received `payload` (waiting up to 50 ms for it), if any. Panics if two
/// did, or if a datagram of an earlier send arrives late.
pub fn kernel_receiver<'a>(
    socks: impl Iterator<Item = &'a UdpSocket> + Clone,
    payload: &[u8],
) -> Option<usize> {
    let mut fds: Vec<libc::pollfd> = socks
        .clone()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of pollfd of the given length for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
    if n <= 0 {
        return None;
    }
    let mut found = None;
    let mut buf = [0u8; 64];
    for (i, s) in socks.enumerate() {
        while let Ok((len, _)) = s.recv_from(&mut buf) {
            assert_eq!(
                &buf[..len],
                payload,
                "a datagram of an earlier send arrived late"
            );
            assert!(found.is_none(), "one datagram, two receivers");
            found = Some(i);
        }
    }
    found
}
