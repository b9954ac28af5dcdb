//! Cross-crate benchmarks of xfwd, and the loader of the real-world data sets that the benchmarks
//! and the integration tests share.
//!
//! The data sets (full BGP tables, ClassBench rule sets and a packet trace) ship xz-compressed in
//! `benches/data/`; [`data`] decompresses and parses them in memory with typed errors. The
//! criterion benchmarks live in `benches/benches/`, one file per table crate, each measuring its
//! crate beside the peers named in its issue.
//!
//! ```no_run
//! use xfwd_benches::data::routes;
//!
//! let table = routes::BGP_FULL_V4.load()?;
//! println!("{} IPv4 prefixes", table.len());
//! # Ok::<(), xfwd_benches::data::Error>(())
//! ```
#![deny(unsafe_code)]

pub mod data;
#[cfg(feature = "dpdk")]
#[allow(unsafe_code, reason = "FFI to DPDK's rte_fib and rte_fib6")]
pub mod dpdk;
pub mod order;
#[cfg(unix)]
pub mod thp;
