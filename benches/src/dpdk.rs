//! DPDK's longest-prefix-match tables through FFI, as benchmark peers of `fib-trie`:
//! `rte_fib` with the DIR-24-8 algorithm for IPv4 and `rte_fib6` with its TRIE algorithm for
//! IPv6 (Debian's `libdpdk-dev`, DPDK 22.11; only with the `dpdk` feature).
//!
//! The few functions and structures used are declared by hand from the installed headers
//! (`/usr/include/dpdk/rte_fib.h`, `rte_fib6.h`, `rte_eal.h`). The environment abstraction layer
//! is initialised once per process, without hugepages, PCI or shared configuration
//! ([`eal_init`], called by the constructors), and the thread's CPU affinity is restored
//! afterwards (EAL pins the calling thread to its main lcore).
//!
//! Next hops are `u32` ids below 2^31 (the tables use 4-byte entries whose top bit is DPDK's);
//! a lookup that matches nothing answers 0, so ids start at 1.
//!
//! ```no_run
//! use xfwd_benches::dpdk::RteFib;
//!
//! let mut fib = RteFib::new(16, 1)?;
//! fib.add(0x0a00_0000, 8, 7)?;
//! let mut hops = [0u64; 2];
//! fib.lookup_bulk(&[0x0a01_0203, 0x0b00_0000], &mut hops);
//! assert_eq!(hops, [7, 0]);
//! # Ok::<(), xfwd_benches::dpdk::DpdkError>(())
//! ```

use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors of the DPDK peers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DpdkError {
    /// `rte_eal_init` failed (its return value and `rte_errno` are not recoverable here).
    #[error("rte_eal_init failed ({0})")]
    EalInit(i32),
    /// Creating a table failed (usually too little EAL memory).
    #[error("{0}_create failed")]
    Create(&'static str),
    /// Adding or deleting a route failed with this negative errno.
    #[error("{op} of {prefix} failed: errno {errno}")]
    Route {
        /// `add` or `delete`.
        op: &'static str,
        /// The prefix, as text.
        prefix: String,
        /// The errno DPDK returned (positive).
        errno: i32,
    },
    /// A next hop id DPDK's 4-byte entries cannot hold (0 is "no route", the limit is 2^31 - 1).
    #[error("next hop id {0} out of range 1..2^31")]
    NextHop(u64),
}

/// The EAL memory (MiB of ordinary pages) for the tables of one process: a DIR-24-8 table with
/// 4-byte entries is 64 MiB before its tbl8 groups and its RIB.
pub const EAL_MEMORY_MIB: u32 = 1536;

// `enum rte_fib_type`, `enum rte_fib_dir24_8_nh_sz`, `enum rte_fib6_type`,
// `enum rte_fib_trie_nh_sz` (rte_fib.h, rte_fib6.h).
const RTE_FIB_DIR24_8: c_int = 1;
const RTE_FIB_DIR24_8_4B: c_int = 2;
const RTE_FIB6_TRIE: c_int = 1;
const RTE_FIB6_TRIE_4B: c_int = 2;
/// `SOCKET_ID_ANY`.
const SOCKET_ID_ANY: c_int = -1;

/// `struct rte_fib_conf` with its `dir24_8` union member (the union's only member).
#[repr(C)]
struct RteFibConf {
    fib_type: c_int,
    default_nh: u64,
    max_routes: c_int,
    rib_ext_sz: c_uint,
    nh_sz: c_int,
    num_tbl8: u32,
}

/// `struct rte_fib6_conf` with its `trie` union member (the union's only member).
#[repr(C)]
struct RteFib6Conf {
    fib_type: c_int,
    default_nh: u64,
    max_routes: c_int,
    rib_ext_sz: c_uint,
    nh_sz: c_int,
    num_tbl8: u32,
}

#[link(name = "rte_eal")]
unsafe extern "C" {
    fn rte_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
}

#[link(name = "rte_fib")]
unsafe extern "C" {
    fn rte_fib_create(name: *const c_char, socket_id: c_int, conf: *mut RteFibConf) -> *mut c_void;
    fn rte_fib_free(fib: *mut c_void);
    fn rte_fib_add(fib: *mut c_void, ip: u32, depth: u8, next_hop: u64) -> c_int;
    fn rte_fib_delete(fib: *mut c_void, ip: u32, depth: u8) -> c_int;
    fn rte_fib_lookup_bulk(fib: *mut c_void, ips: *mut u32, next_hops: *mut u64, n: c_int)
    -> c_int;
    fn rte_fib6_create(
        name: *const c_char,
        socket_id: c_int,
        conf: *mut RteFib6Conf,
    ) -> *mut c_void;
    fn rte_fib6_free(fib: *mut c_void);
    fn rte_fib6_add(fib: *mut c_void, ip: *const [u8; 16], depth: u8, next_hop: u64) -> c_int;
    fn rte_fib6_delete(fib: *mut c_void, ip: *const [u8; 16], depth: u8) -> c_int;
    fn rte_fib6_lookup_bulk(
        fib: *mut c_void,
        ips: *mut [u8; 16],
        next_hops: *mut u64,
        n: c_int,
    ) -> c_int;
}

/// Initialises DPDK's EAL once per process: no hugepages, no PCI scan, no shared
/// configuration, [`EAL_MEMORY_MIB`] of memory, a file prefix unique to the process, errors
/// only in the log, no telemetry socket. Later calls return the first call's result.
///
/// # Errors
/// [`DpdkError::EalInit`] when the EAL refuses to start.
pub fn eal_init() -> Result<(), DpdkError> {
    static EAL: OnceLock<Result<(), DpdkError>> = OnceLock::new();
    EAL.get_or_init(|| {
        let args = [
            "xfwd-bench".to_owned(),
            "--no-huge".into(),
            "--no-pci".into(),
            "--no-shconf".into(),
            "--no-telemetry".into(),
            "-m".into(),
            EAL_MEMORY_MIB.to_string(),
            "--log-level=*:error".into(),
            format!("--file-prefix=xfwd-bench-{}", std::process::id()),
        ];
        // EAL may keep pointers into argv: the strings live for the rest of the process.
        let mut argv: Vec<*mut c_char> = args
            .iter()
            .map(|a| CString::new(a.as_str()).expect("no NUL").into_raw())
            .collect();
        let argc = c_int::try_from(argv.len()).expect("few arguments");
        let affinity = Affinity::current();
        // SAFETY: `argv` holds `argc` valid NUL-terminated strings that are never freed; the
        // EAL is initialised at most once (inside this `OnceLock`).
        let rc = unsafe { rte_eal_init(argc, argv.as_mut_ptr()) };
        std::mem::forget(argv);
        if let Some(affinity) = affinity {
            affinity.restore();
        }
        if rc < 0 {
            Err(DpdkError::EalInit(rc))
        } else {
            Ok(())
        }
    })
    .clone()
}

/// The calling thread's CPU set, to undo the EAL's pinning to one lcore.
struct Affinity(libc::cpu_set_t);

impl Affinity {
    fn current() -> Option<Self> {
        // SAFETY: `cpu_set_t` is plain data; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed.
        let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        (rc == 0).then_some(Affinity(set))
    }

    fn restore(&self) {
        // SAFETY: `self.0` is a valid `cpu_set_t` of the size passed. A failure leaves the
        // thread pinned, which only costs speed.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

/// A unique name for a DPDK object (names are global within the process).
fn unique_name(kind: &str) -> CString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    CString::new(format!("xfwd-{kind}-{n}")).expect("no NUL")
}

fn check_next_hop(nh: u64) -> Result<(), DpdkError> {
    if nh == 0 || nh >= 1 << 31 {
        return Err(DpdkError::NextHop(nh));
    }
    Ok(())
}

fn route_result(
    rc: c_int,
    op: &'static str,
    prefix: impl FnOnce() -> String,
) -> Result<(), DpdkError> {
    if rc < 0 {
        return Err(DpdkError::Route {
            op,
            prefix: prefix(),
            errno: -rc,
        });
    }
    Ok(())
}

/// The number of 256-entry tbl8 groups to configure for these prefix lengths: DPDK reserves
/// groups per route, not per distinct /24, so this is its own upper bound: one group per stride
/// (24..32, 32..40, ...) a prefix extends past /24.
pub fn tbl8_groups(plens: impl IntoIterator<Item = u8>) -> usize {
    plens
        .into_iter()
        .map(|plen| usize::from(plen.saturating_sub(24)).div_ceil(8))
        .sum()
}

/// An `rte_fib` DIR-24-8 table (IPv4) with 4-byte next hops.
#[derive(Debug)]
pub struct RteFib {
    fib: NonNull<c_void>,
}

// SAFETY: the table is plain memory owned by this handle; DPDK's lookups only read it and its
// writers need `&mut self`, so sharing `&RteFib` between threads shares reads only.
unsafe impl Send for RteFib {}
// SAFETY: as above.
unsafe impl Sync for RteFib {}

impl RteFib {
    /// An empty table for up to `max_routes` routes using up to `num_tbl8` groups for prefixes
    /// longer than /24 (see [`tbl8_groups`]). Initialises the EAL if needed.
    ///
    /// # Errors
    /// [`DpdkError::EalInit`], or [`DpdkError::Create`] when DPDK cannot allocate the table.
    pub fn new(max_routes: usize, num_tbl8: usize) -> Result<Self, DpdkError> {
        eal_init()?;
        let mut conf = RteFibConf {
            fib_type: RTE_FIB_DIR24_8,
            default_nh: 0,
            max_routes: c_int::try_from(max_routes.max(1))
                .map_err(|_| DpdkError::Create("rte_fib"))?,
            rib_ext_sz: 0,
            nh_sz: RTE_FIB_DIR24_8_4B,
            num_tbl8: u32::try_from(num_tbl8.max(1)).map_err(|_| DpdkError::Create("rte_fib"))?,
        };
        let name = unique_name("fib");
        // SAFETY: `name` is NUL-terminated and `conf` a valid `rte_fib_conf` for the call.
        let fib = unsafe { rte_fib_create(name.as_ptr(), SOCKET_ID_ANY, &mut conf) };
        NonNull::new(fib)
            .map(|fib| RteFib { fib })
            .ok_or(DpdkError::Create("rte_fib"))
    }

    /// Adds (or replaces) `ip/depth` with next hop `nh` (host byte order, as DPDK takes it).
    ///
    /// # Errors
    /// [`DpdkError::NextHop`] for an id outside `1..2^31`, [`DpdkError::Route`] when DPDK
    /// refuses (bad depth, no tbl8 group left).
    pub fn add(&mut self, ip: u32, depth: u8, nh: u64) -> Result<(), DpdkError> {
        check_next_hop(nh)?;
        // SAFETY: `self.fib` is a live table; `&mut self` excludes concurrent use.
        let rc = unsafe { rte_fib_add(self.fib.as_ptr(), ip, depth, nh) };
        route_result(rc, "add", || {
            format!("{}/{depth}", std::net::Ipv4Addr::from(ip))
        })
    }

    /// Deletes `ip/depth`.
    ///
    /// # Errors
    /// [`DpdkError::Route`] when DPDK refuses (for example no such route).
    pub fn delete(&mut self, ip: u32, depth: u8) -> Result<(), DpdkError> {
        // SAFETY: `self.fib` is a live table; `&mut self` excludes concurrent use.
        let rc = unsafe { rte_fib_delete(self.fib.as_ptr(), ip, depth) };
        route_result(rc, "delete", || {
            format!("{}/{depth}", std::net::Ipv4Addr::from(ip))
        })
    }

    /// Looks up every address of `ips` (host byte order), writing each next hop (0: no route)
    /// to `out`, which must be as long (the excess of either is ignored).
    pub fn lookup_bulk(&self, ips: &[u32], out: &mut [u64]) {
        let n = ips.len().min(out.len());
        let n = c_int::try_from(n).unwrap_or(c_int::MAX);
        // SAFETY: both buffers hold at least `n` elements. DPDK's lookup only reads `ips`
        // (its data-path function takes `const uint32_t *`; the API lacks the `const`) and
        // only reads the table, which `&self` keeps alive and unchanged.
        unsafe {
            rte_fib_lookup_bulk(
                self.fib.as_ptr(),
                ips.as_ptr().cast_mut(),
                out.as_mut_ptr(),
                n,
            );
        }
    }
}

impl Drop for RteFib {
    fn drop(&mut self) {
        // SAFETY: the table is live and freed once; no lookup can still borrow it.
        unsafe { rte_fib_free(self.fib.as_ptr()) };
    }
}

/// An `rte_fib6` TRIE table (IPv6) with 4-byte next hops.
#[derive(Debug)]
pub struct RteFib6 {
    fib: NonNull<c_void>,
}

// SAFETY: as for `RteFib`: owned memory, reads through `&self`, writes through `&mut self`.
unsafe impl Send for RteFib6 {}
// SAFETY: as above.
unsafe impl Sync for RteFib6 {}

impl RteFib6 {
    /// An empty table for up to `max_routes` routes using up to `num_tbl8` groups for prefixes
    /// longer than /24 (see [`tbl8_groups`]). Initialises the EAL if needed.
    ///
    /// # Errors
    /// [`DpdkError::EalInit`], or [`DpdkError::Create`] when DPDK cannot allocate the table.
    pub fn new(max_routes: usize, num_tbl8: usize) -> Result<Self, DpdkError> {
        eal_init()?;
        let mut conf = RteFib6Conf {
            fib_type: RTE_FIB6_TRIE,
            default_nh: 0,
            max_routes: c_int::try_from(max_routes.max(1))
                .map_err(|_| DpdkError::Create("rte_fib6"))?,
            rib_ext_sz: 0,
            nh_sz: RTE_FIB6_TRIE_4B,
            num_tbl8: u32::try_from(num_tbl8.max(1)).map_err(|_| DpdkError::Create("rte_fib6"))?,
        };
        let name = unique_name("fib6");
        // SAFETY: `name` is NUL-terminated and `conf` a valid `rte_fib6_conf` for the call.
        let fib = unsafe { rte_fib6_create(name.as_ptr(), SOCKET_ID_ANY, &mut conf) };
        NonNull::new(fib)
            .map(|fib| RteFib6 { fib })
            .ok_or(DpdkError::Create("rte_fib6"))
    }

    /// Adds (or replaces) `ip/depth` with next hop `nh`.
    ///
    /// # Errors
    /// As [`RteFib::add`].
    pub fn add(&mut self, ip: u128, depth: u8, nh: u64) -> Result<(), DpdkError> {
        check_next_hop(nh)?;
        let bytes = ip.to_be_bytes();
        // SAFETY: `self.fib` is a live table (`&mut self`: no concurrent use); `bytes` is the
        // 16-byte address in network order DPDK reads.
        let rc = unsafe { rte_fib6_add(self.fib.as_ptr(), &bytes, depth, nh) };
        route_result(rc, "add", || {
            format!("{}/{depth}", std::net::Ipv6Addr::from(ip))
        })
    }

    /// Deletes `ip/depth`.
    ///
    /// # Errors
    /// As [`RteFib::delete`].
    pub fn delete(&mut self, ip: u128, depth: u8) -> Result<(), DpdkError> {
        let bytes = ip.to_be_bytes();
        // SAFETY: as in `add`.
        let rc = unsafe { rte_fib6_delete(self.fib.as_ptr(), &bytes, depth) };
        route_result(rc, "delete", || {
            format!("{}/{depth}", std::net::Ipv6Addr::from(ip))
        })
    }

    /// Looks up every address of `ips` (16 bytes each, network order: see [`v6_bytes`]),
    /// writing each next hop (0: no route) to `out`, which must be as long.
    pub fn lookup_bulk(&self, ips: &[[u8; 16]], out: &mut [u64]) {
        let n = ips.len().min(out.len());
        let n = c_int::try_from(n).unwrap_or(c_int::MAX);
        // SAFETY: both buffers hold at least `n` elements; DPDK's lookup only reads `ips` and
        // the table, which `&self` keeps alive and unchanged.
        unsafe {
            rte_fib6_lookup_bulk(
                self.fib.as_ptr(),
                ips.as_ptr().cast_mut(),
                out.as_mut_ptr(),
                n,
            );
        }
    }
}

/// IPv6 keys as the byte arrays [`RteFib6::lookup_bulk`] takes.
pub fn v6_bytes(keys: &[u128]) -> Vec<[u8; 16]> {
    keys.iter().map(|k| k.to_be_bytes()).collect()
}

impl Drop for RteFib6 {
    fn drop(&mut self) {
        // SAFETY: the table is live and freed once; no lookup can still borrow it.
        unsafe { rte_fib6_free(self.fib.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib_trie::ReferenceLpm;
    use rand::{RngExt, SeedableRng, rngs::StdRng};

    /// Random prefixes around a few bases (so they nest), with /0, /24, /25, /32 among them.
    fn random_prefixes(rng: &mut StdRng, n: usize) -> Vec<(u32, u8)> {
        let bases: Vec<u32> = (0..8).map(|_| rng.random()).collect();
        let mut out = vec![(0, 0)];
        for _ in 0..n {
            let base = bases[rng.random_range(0..bases.len())] ^ (rng.random::<u32>() >> 20);
            let plen = [8, 16, 20, 24, 25, 28, 30, 32][rng.random_range(0..8)];
            let plen = if rng.random_bool(0.3) {
                rng.random_range(0..=32)
            } else {
                plen
            };
            let mask = if plen == 0 {
                0
            } else {
                u32::MAX << (32 - plen)
            };
            out.push((base & mask, plen));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn rte_fib_matches_the_reference() {
        let mut rng = StdRng::seed_from_u64(1);
        let prefixes = random_prefixes(&mut rng, 3000);
        let groups = tbl8_groups(prefixes.iter().map(|p| p.1));
        let mut fib = RteFib::new(prefixes.len(), groups + 16).expect("rte_fib");
        let mut reference = ReferenceLpm::new();
        for (i, &(k, l)) in prefixes.iter().enumerate() {
            let nh = i as u64 + 1;
            fib.add(k, l, nh).expect("add");
            reference.insert(k, l, nh).expect("canonical");
        }
        let check = |fib: &RteFib, reference: &ReferenceLpm<u32, u64>, rng: &mut StdRng| {
            let keys: Vec<u32> = (0..20_000)
                .map(|i| {
                    if i % 2 == 0 {
                        rng.random()
                    } else {
                        let (k, l) = prefixes[rng.random_range(0..prefixes.len())];
                        let host = if l == 32 { 0 } else { rng.random::<u32>() >> l };
                        k | host
                    }
                })
                .collect();
            let mut hops = vec![0; keys.len()];
            fib.lookup_bulk(&keys, &mut hops);
            for (&key, &nh) in keys.iter().zip(&hops) {
                let want = reference.lookup(key, |_| true).map_or(0, |(_, _, v)| *v);
                assert_eq!(nh, want, "{}", std::net::Ipv4Addr::from(key));
            }
        };
        check(&fib, &reference, &mut rng);
        // Not /0 or /1: DPDK 22.11 then rewrites the more-specifics under the deleted prefix
        // with its parent's next hop (seen here with thousands of them; a handful is fine).
        // The benches never delete such prefixes.
        for &(k, l) in prefixes.iter().step_by(2).filter(|p| p.1 >= 2) {
            fib.delete(k, l).expect("delete");
            reference.remove(k, l).expect("canonical");
        }
        check(&fib, &reference, &mut rng);
        assert!(matches!(fib.add(1 << 24, 8, 0), Err(DpdkError::NextHop(0))));
        assert!(matches!(
            fib.add(1 << 24, 33, 1),
            Err(DpdkError::Route { .. })
        ));
    }

    #[test]
    fn rte_fib6_matches_the_reference() {
        let mut rng = StdRng::seed_from_u64(2);
        let v4 = random_prefixes(&mut rng, 2000);
        // Spread the IPv4 shapes over IPv6 lengths: /0../32 become /0../64 and /128 hosts.
        let mut prefixes: Vec<(u128, u8)> = v4
            .iter()
            .map(|&(k, l)| {
                let plen = if l == 32 { 128 } else { l * 2 };
                let key = (u128::from(k) << 96) | (u128::from(rng.random::<u32>()) << 64);
                let mask = if plen == 0 {
                    0
                } else {
                    u128::MAX << (128 - plen)
                };
                (key & mask, plen)
            })
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        let groups = tbl8_groups(prefixes.iter().map(|p| p.1));
        let mut fib = RteFib6::new(prefixes.len(), groups + 16).expect("rte_fib6");
        let mut reference = ReferenceLpm::new();
        for (i, &(k, l)) in prefixes.iter().enumerate() {
            let nh = i as u64 + 1;
            fib.add(k, l, nh).expect("add");
            reference.insert(k, l, nh).expect("canonical");
        }
        let keys: Vec<u128> = (0..20_000)
            .map(|i| {
                if i % 2 == 0 {
                    (u128::from(rng.random::<u64>()) << 64) | u128::from(rng.random::<u64>())
                } else {
                    let (k, l) = prefixes[rng.random_range(0..prefixes.len())];
                    let host =
                        u128::from(rng.random::<u64>()) | (u128::from(rng.random::<u64>()) << 64);
                    let host = if l == 128 { 0 } else { host >> l };
                    k | host
                }
            })
            .collect();
        let mut hops = vec![0; keys.len()];
        fib.lookup_bulk(&v6_bytes(&keys), &mut hops);
        for (&key, &nh) in keys.iter().zip(&hops) {
            let want = reference.lookup(key, |_| true).map_or(0, |(_, _, v)| *v);
            assert_eq!(nh, want, "{}", std::net::Ipv6Addr::from(key));
        }
    }

    #[test]
    fn tbl8_groups_counts_strides_past_24() {
        assert_eq!(
            tbl8_groups([0, 8, 24, 25, 32, 33, 48, 128]),
            1 + 1 + 2 + 3 + 13
        );
    }
}
