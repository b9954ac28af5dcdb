//! The workspace's publishable library crates, found through `cargo metadata`: what
//! `cargo xtask test` packages and whose examples it runs.

use std::process::Command;

use anyhow::Context as _;

/// Examples that are profiling aids (they want arguments, data files or minutes under
/// `valgrind`), not embedding examples: built by `cargo test`, not run.
pub const PROFILING_AIDS: &[&str] = &["build_prof", "update_prof", "lookup_cost", "placement"];

/// A publishable crate of the workspace and its examples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryCrate {
    /// The package name.
    pub name: String,
    /// The package version.
    pub version: String,
    /// Its `examples/` programs, profiling aids left out.
    pub examples: Vec<String>,
}

/// The workspace members that may be published (`publish` not `false`), in metadata order.
pub fn publishable(cargo: &str) -> anyhow::Result<Vec<LibraryCrate>> {
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&output.stdout)
}

fn parse(metadata: &[u8]) -> anyhow::Result<Vec<LibraryCrate>> {
    let value: serde_json::Value =
        serde_json::from_slice(metadata).context("parsing cargo metadata")?;
    let packages = value["packages"]
        .as_array()
        .context("cargo metadata without packages")?;
    let mut crates = Vec::new();
    for package in packages {
        // `publish`: null means any registry; `[]` is `publish = false`.
        let unpublished = package["publish"].as_array().is_some_and(Vec::is_empty);
        if unpublished {
            continue;
        }
        let name = package["name"]
            .as_str()
            .context("a package without a name")?
            .to_owned();
        let version = package["version"]
            .as_str()
            .context("a package without a version")?
            .to_owned();
        let examples = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "example"))
            })
            .filter_map(|t| t["name"].as_str())
            .filter(|n| !PROFILING_AIDS.contains(n))
            .map(str::to_owned)
            .collect();
        crates.push(LibraryCrate {
            name,
            version,
            examples,
        });
    }
    Ok(crates)
}

/// Removes what earlier runs of `cargo package` unpacked of `libraries` in cargo's local
/// overlay registries (`$CARGO_HOME/registry/src/-HASH/NAME-VERSION`). Cargo verifies a
/// package by compiling it from there against its packaged siblings, and it unpacks a
/// `NAME-VERSION` only once: as long as the version does not change, a later run would compile
/// the sources of the first one. Only the overlay registries (directory names beginning with
/// `-`) are touched, never a crates.io download. Returns how many copies were removed.
pub fn forget_unpacked(libraries: &[LibraryCrate]) -> usize {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    home.map_or(0, |h| {
        forget_unpacked_in(&h.join("registry").join("src"), libraries)
    })
}

/// [`forget_unpacked`] below the registry sources directory `src`.
fn forget_unpacked_in(src: &std::path::Path, libraries: &[LibraryCrate]) -> usize {
    let Ok(registries) = std::fs::read_dir(src) else {
        return 0;
    };
    let mut removed = 0;
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for library in libraries {
            let unpacked = registry
                .path()
                .join(format!("{}-{}", library.name, library.version));
            if unpacked.is_dir() && std::fs::remove_dir_all(&unpacked).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_publishable_crates_and_their_examples() {
        let metadata = br#"{"packages":[
            {"name":"fib-trie","version":"0.1.0","publish":null,"targets":[
                {"name":"fib_trie","kind":["lib"]},
                {"name":"concurrent_lookups","kind":["example"]},
                {"name":"build_prof","kind":["example"]}]},
            {"name":"forwarder","version":"0.1.0","publish":[],"targets":[{"name":"xfwd","kind":["bin"]}]}]}"#;
        let crates = parse(metadata).unwrap();
        assert_eq!(
            crates,
            vec![LibraryCrate {
                name: "fib-trie".into(),
                version: "0.1.0".into(),
                examples: vec!["concurrent_lookups".into()],
            }]
        );
        assert!(parse(b"{}").is_err());
    }

    #[test]
    fn forgets_only_our_unpacked_packages_in_overlay_registries() {
        let src = std::env::temp_dir().join(format!("xtask-forget-{}", std::process::id()));
        let dirs = [
            "-0123abcd/fib-trie-0.1.0",
            "-0123abcd/fib-trie-0.2.0",
            "-0123abcd/serde-1.0.0",
            "index.crates.io-1949cf8c6b5b557f/fib-trie-0.1.0",
        ];
        for d in dirs {
            std::fs::create_dir_all(src.join(d).join("src")).unwrap();
        }
        let fib = LibraryCrate {
            name: "fib-trie".into(),
            version: "0.1.0".into(),
            examples: Vec::new(),
        };
        assert_eq!(forget_unpacked_in(&src, &[fib]), 1);
        let left: Vec<bool> = dirs.iter().map(|d| src.join(d).is_dir()).collect();
        std::fs::remove_dir_all(&src).unwrap();
        assert_eq!(left, [false, true, true, true]);
    }

    #[test]
    fn finds_the_workspace_library_crates() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let crates = publishable(&cargo).unwrap();
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        for library in ["fib-trie", "dataplane", "netlink-mirror"] {
            assert!(names.contains(&library), "{names:?}");
        }
        for binary in ["forwarder", "xtask", "xfwd-lab"] {
            assert!(!names.contains(&binary), "{names:?}");
        }
        let dataplane = crates.iter().find(|c| c.name == "dataplane").unwrap();
        assert!(dataplane.examples.contains(&"forwarder".to_owned()));
    }
}
