//! Helpers shared by xfwd's integration tests (the tests themselves are in `tests/tests/`).
//!
//! Privileged tests (network namespaces, veth, XDP) start with [`privileged`]: as root they run;
//! otherwise they are skipped with a note, except under `CI=true`, where a test that cannot run
//! fails, so CI never passes on silently skipped tests.

/// Whether the calling privileged test can run: `true` as root.
///
/// # Panics
/// When not root and the environment has `CI=true`.
///
/// ```
/// if !xfwd_tests::privileged("example") {
///     return; // skipped: not root, not CI
/// }
/// // ... create namespaces, veth pairs ...
/// ```
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} needs root, and CI=true does not allow skipping it");
    }
    eprintln!("skipping {test}: needs root (run `cargo xtask test` as root)");
    false
}
