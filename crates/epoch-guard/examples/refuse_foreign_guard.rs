//! A reader entry point that checks its guard: a pin of the default collector passes, a guard
//! of another collector is refused with the owner's name (`cargo run -p epoch-guard --example
//! refuse_foreign_guard`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_epoch as epoch;

fn main() {
    epoch_guard::check_guard(&epoch::pin(), "example");
    let other = epoch::Collector::new();
    let handle = other.register();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let refused = catch_unwind(AssertUnwindSafe(|| {
        epoch_guard::check_guard(&handle.pin(), "example")
    }));
    std::panic::set_hook(previous);
    let err = refused.expect_err("a foreign guard must be refused");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(
        msg,
        "example: pass a guard from crossbeam_epoch::pin() (the default collector)"
    );
    println!("default guard accepted; foreign guard refused: {msg}");
}
