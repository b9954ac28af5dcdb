//! The one rule every reader entry point enforces: the `Guard` a caller passes must pin the
//! collector this crate retires memory into, crossbeam-epoch's default collector.
//!
//! Writers retire replaced memory with `Guard::defer_destroy` on guards from
//! `crossbeam_epoch::pin()`, so only a pin of the default collector holds that memory alive.
//! A guard of another `Collector` (or `crossbeam_epoch::unprotected()`) would let a reader
//! dereference memory the default collector has already freed, from safe code; every public
//! function taking a `Guard` therefore calls [`check_guard`] once, and the crate-private
//! functions it calls trust the guard it checked.

use crossbeam_epoch::{self as epoch, Guard};

/// Panics unless `guard` pins the default collector (the guard of `crossbeam_epoch::pin()`).
///
/// Costs a few loads and one predictable branch: the guard's collector against the default one
/// (two `Arc` pointers compared).
#[inline(always)]
pub(crate) fn check_guard(guard: &Guard) {
    match guard.collector() {
        Some(c) if c == epoch::default_collector() => {}
        _ => foreign_guard(),
    }
}

#[cold]
#[inline(never)]
fn foreign_guard() -> ! {
    panic!(concat!(
        env!("CARGO_PKG_NAME"),
        ": pass a guard from crossbeam_epoch::pin() (the default collector)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_guard_passes() {
        check_guard(&epoch::pin());
    }

    #[test]
    #[should_panic(expected = "the default collector")]
    fn foreign_collector_is_refused() {
        let collector = epoch::Collector::new();
        let handle = collector.register();
        check_guard(&handle.pin());
    }

    #[test]
    #[should_panic(expected = "the default collector")]
    fn unprotected_is_refused() {
        // SAFETY: the guard is only compared, never used to load a pointer.
        check_guard(unsafe { epoch::unprotected() });
    }
}
