//! A per-queue input route cache with lazy invalidation, keyed buckets and adaptive bypass.
//!
//! This renders the input `dst_cache` proposed for Linux in 2024 (an RFC that was not merged):
//! a small, fixed, per-CPU hash table of recent input routing decisions, 512 entries in buckets
//! of 4, that is never walked or garbage-collected. Entries carry the route generation they
//! were computed under and an expiry; a lookup that meets a stale entry clears it and misses
//! ("lazy invalidation"), so one atomic increment of the shared [`Generation`] invalidates every
//! cache of every run loop at once.
//!
//! Answers to the objections raised against route caches:
//! - **memory**: fixed per queue ([`DstCache::memory_bytes`]; entries hold interface ids and
//!   addresses, never references to devices that may go away);
//! - **floods**: the table never grows; the bucket comes from a keyed hash with a random
//!   per-cache key (foldhash's quality hasher, seeded per cache and per process), so a sender
//!   cannot aim at a bucket without knowing the key; and the **adaptive bypass**
//!   ([`BypassConfig`]) turns the cache off when its hit rate falls below a threshold, probing
//!   one lookup in `probe_every` (and fewer, down to one in `probe_every_max`, while the probes
//!   keep missing) to notice when it would pay again, so that a miss-only stream costs little
//!   more than no cache at all; its **cost rule** ([`cost`], for callers that hand lookups
//!   over in vectors: [`DstCache::cost_sample`]) turns it off also when its hits, timed on
//!   sampled vectors, are not cheaper than the caller's path without it, and on again when
//!   they are cheaper by 1/32.
//!
//! The kernel's merged mechanism, the per-batch [`RouteHint`], is here as the baseline.
//!
//! What may be done: one run loop owns a [`DstCache`] (`&mut self` on every call: no atomics or
//! locks on the hit path) and takes one [`Snapshot`] of the shared [`Generation`] per batch; the
//! control plane bumps the generation after each change it has published, and toggles caching
//! off while custom policy rules exist. Time is the caller's monotonic `now`, in any unit.
//!
//! No epoch guards: unlike xfwd's epoch-protected table crates (whose public functions taking a
//! `crossbeam_epoch::Guard` refuse one of a foreign collector), this crate has no `unsafe`,
//! retires nothing and takes no `Guard`; a hit returns a copy of the decision.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use dst_cache::{Config, Decision, DstCache, FlowKey, Generation, Lookup};
//!
//! let generation = Generation::new(); // shared with the control plane in an Arc
//! let mut cache = DstCache::new(Config::default())?;
//! let decision = Decision::unicast(2, None, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], 1500);
//!
//! let snapshot = generation.snapshot(); // once per batch
//! for dst in [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 1)] {
//!     let key = FlowKey::v4(dst, 0, 1);
//!     let forward = match cache.lookup(&key, snapshot, 0) {
//!         Lookup::Hit(decision) => decision,
//!         Lookup::Miss(token) => {
//!             let decision = decision; // the full FIB + neighbour lookup goes here
//!             cache.insert(token, decision, 0, u64::MAX);
//!             decision
//!         }
//!         Lookup::Bypass => decision, // the full lookup, not cached
//!     };
//!     assert_eq!(forward.oif, 2);
//! }
//! assert_eq!((cache.counters().misses, cache.counters().hits), (1, 1));
//! # Ok::<(), dst_cache::ConfigError>(())
//! ```
#![forbid(unsafe_code)]

mod bypass;
mod cache;
mod config;
pub mod cost;
mod decision;
mod generation;
mod hint;
mod key;

pub use cache::{Counters, DstCache, Lookup, MissToken};
pub use config::{BypassConfig, Config, ConfigError, MAX_ENTRIES};
pub use cost::CostArm;
pub use decision::{Cacheable, Decision, DecisionFlags, RouteKind};
pub use generation::{Generation, Snapshot};
pub use hint::RouteHint;
pub use key::FlowKey;
