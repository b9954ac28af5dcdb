//! The gate of privileged tests.

/// Whether a privileged test (network namespaces, veth, XDP) can run: `true` as root.
///
/// Not root, the test should return early; a note on stderr says it was skipped. Under
/// `CI=true` a test that cannot run is a failure, never a silent skip, so this panics.
///
/// # Panics
/// When not root and the environment has `CI=true`.
///
/// ```
/// if !xfwd_lab::privileged("example") {
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
