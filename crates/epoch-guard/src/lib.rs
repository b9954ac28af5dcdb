//! The one rule every reader entry point of an epoch-protected structure must enforce: the
//! [`Guard`] a caller passes must pin the collector the structure retires memory into,
//! crossbeam-epoch's default collector.
//!
//! Writers retire replaced memory with `Guard::defer_destroy` on guards from
//! `crossbeam_epoch::pin()`, so only a pin of the default collector holds that memory alive.
//! A guard of another [`Collector`] (or `crossbeam_epoch::unprotected()`) would let a reader
//! dereference memory the default collector has already freed, from safe code; every public
//! function taking a `Guard` therefore calls [`check_guard`] once, and the private functions
//! it calls trust the guard it checked. The panic names the crate that refused the guard.
//!
//! Used by xfwd's table crates (fib-trie, neigh-table, policy-tree, udp-socktab, addr-table).
//!
//! ```
//! use crossbeam_epoch::{self as epoch, Atomic, Guard};
//! use std::sync::atomic::Ordering;
//!
//! /// A value readers load under a guard; the writer retires old ones into the default
//! /// collector.
//! struct Cell {
//!     value: Atomic<u64>,
//! }
//!
//! impl Cell {
//!     fn get<'g>(&self, guard: &'g Guard) -> Option<&'g u64> {
//!         epoch_guard::check_guard(guard, "my-crate");
//!         // SAFETY: `guard` pins the default collector, which the writer retires into.
//!         unsafe { self.value.load(Ordering::Acquire, guard).as_ref() }
//!     }
//! }
//!
//! let cell = Cell { value: Atomic::new(7) };
//! assert_eq!(cell.get(&epoch::pin()), Some(&7));
//!
//! // A guard of another collector is refused.
//! let other = epoch::Collector::new();
//! let handle = other.register();
//! let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
//!     cell.get(&handle.pin()).copied()
//! }));
//! assert!(refused.is_err());
//! # drop(unsafe { cell.value.into_owned() });
//! ```
#![warn(missing_docs)]

use crossbeam_epoch::{self as epoch, Collector, Guard};

/// The epoch-based reclamation whose guards this crate checks, re-exported: its
/// [`Guard`](crossbeam_epoch::Guard) and [`Collector`](crossbeam_epoch::Collector) are in this
/// crate's API, and a caller that pins through this path always holds the version the crate
/// was built with.
///
/// ```
/// epoch_guard::check_guard(&epoch_guard::crossbeam_epoch::pin(), "my-crate");
/// ```
pub use crossbeam_epoch;

/// Panics unless `guard` pins the default collector (the guard of `crossbeam_epoch::pin()`);
/// `owner` names the refusing crate in the message (`env!("CARGO_PKG_NAME")`).
///
/// Costs a few loads and one predictable branch: the guard's collector against the default one
/// (two `Arc` pointers compared).
///
/// ```
/// epoch_guard::check_guard(&crossbeam_epoch::pin(), "my-crate");
/// ```
#[inline(always)]
pub fn check_guard(guard: &Guard, owner: &'static str) {
    check_guard_against(guard, epoch::default_collector(), owner);
}

/// [`check_guard`] against a `default` collector looked up once and kept (the lookup of
/// `crossbeam_epoch::default_collector()` goes through a `OnceLock`; a structure read millions
/// of times a second keeps its address instead).
///
/// ```
/// let default = crossbeam_epoch::default_collector();
/// epoch_guard::check_guard_against(&crossbeam_epoch::pin(), default, "my-crate");
/// ```
#[inline(always)]
pub fn check_guard_against(guard: &Guard, default: &'static Collector, owner: &'static str) {
    match guard.collector() {
        Some(c) if c == default => {}
        _ => foreign_guard(owner),
    }
}

#[cold]
#[inline(never)]
fn foreign_guard(owner: &'static str) -> ! {
    panic!("{owner}: pass a guard from crossbeam_epoch::pin() (the default collector)")
}

/// Test support for crates that follow this rule: runs `f` with a guard of a fresh
/// [`Collector`] and with `crossbeam_epoch::unprotected()`, and panics unless both calls panic
/// with [`check_guard`]'s message for `owner`. `what` names the entry point under test in the
/// failure message. Use it in a test per public entry point that takes a `Guard`.
///
/// ```
/// use crossbeam_epoch::Guard;
///
/// fn entry_point(guard: &Guard) {
///     epoch_guard::check_guard(guard, "my-crate");
/// }
///
/// epoch_guard::assert_refused("my-crate", "entry_point", entry_point);
/// ```
///
/// # Panics
/// If `f` accepts either guard, or panics with another message.
pub fn assert_refused(owner: &str, what: &str, f: impl Fn(&Guard)) {
    let collector = Collector::new();
    let handle = collector.register();
    let foreign = handle.pin();
    // SAFETY: the call under test must refuse the guard before loading anything through it;
    // if it does not, this function panics as soon as the call returns.
    let unprotected = unsafe { epoch::unprotected() };
    let expected = format!("{owner}: pass a guard from crossbeam_epoch::pin()");
    for (kind, guard) in [("foreign", &foreign), ("unprotected", unprotected)] {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(guard)))
            .err()
            .unwrap_or_else(|| panic!("{what} accepted a {kind} guard"));
        let msg = err
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| err.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(
            msg.contains(&expected),
            "{what} with a {kind} guard panicked with {msg:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "noop accepted a foreign guard")]
    fn assert_refused_catches_an_entry_point_that_accepts() {
        assert_refused("owner", "noop", |_| {});
    }

    #[test]
    #[should_panic(expected = "other with a foreign guard panicked with")]
    fn assert_refused_catches_another_owners_message() {
        assert_refused("owner", "other", |g| check_guard(g, "someone-else"));
    }

    #[test]
    fn default_guard_passes() {
        check_guard(&epoch::pin(), "t");
        check_guard_against(&epoch::pin(), epoch::default_collector(), "t");
    }

    #[test]
    #[should_panic(
        expected = "owner: pass a guard from crossbeam_epoch::pin() (the default collector)"
    )]
    fn foreign_collector_is_refused() {
        let collector = epoch::Collector::new();
        let handle = collector.register();
        check_guard(&handle.pin(), "owner");
    }

    #[test]
    #[should_panic(expected = "the default collector")]
    fn unprotected_is_refused() {
        // SAFETY: the guard is only compared, never used to load a pointer.
        check_guard(unsafe { epoch::unprotected() }, "owner");
    }

    #[test]
    #[should_panic(expected = "the default collector")]
    fn a_kept_collector_refuses_a_foreign_guard_too() {
        let collector = epoch::Collector::new();
        let handle = collector.register();
        check_guard_against(&handle.pin(), epoch::default_collector(), "owner");
    }
}
