//! The one rule every reader entry point enforces: the `Guard` a caller passes must pin the
//! collector this crate retires memory into, crossbeam-epoch's default collector. The check
//! (and why a guard of another `Collector` or `unprotected()` must be refused) lives in the
//! shared `epoch-guard` crate; this module names the crate in its panic.

use crossbeam_epoch::Guard;

/// Panics unless `guard` pins the default collector (the guard of `crossbeam_epoch::pin()`),
/// with this crate's name in the message.
#[inline(always)]
pub(crate) fn check_guard(guard: &Guard) {
    epoch_guard::check_guard(guard, env!("CARGO_PKG_NAME"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_epoch as epoch;

    #[test]
    fn default_guard_passes() {
        check_guard(&epoch::pin());
    }

    #[test]
    #[should_panic(expected = "policy-tree: pass a guard from crossbeam_epoch::pin()")]
    fn foreign_collector_is_refused_in_this_crates_name() {
        let collector = epoch::Collector::new();
        let handle = collector.register();
        check_guard(&handle.pin());
    }
}
