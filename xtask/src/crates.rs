//! The workspace's publishable library crates, found through `cargo metadata`: what
//! `cargo xtask test` packages and whose examples it runs.

use std::process::Command;

use anyhow::Context as _;

/// Examples that are profiling aids (they want arguments, data files or minutes under
/// `valgrind`), not embedding examples: built by `cargo test`, not run.
pub const PROFILING_AIDS: &[&str] = &["build_prof", "update_prof", "lookup_cost"];

/// A publishable crate of the workspace and its examples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryCrate {
    /// The package name.
    pub name: String,
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
        crates.push(LibraryCrate { name, examples });
    }
    Ok(crates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_publishable_crates_and_their_examples() {
        let metadata = br#"{"packages":[
            {"name":"fib-trie","publish":null,"targets":[
                {"name":"fib_trie","kind":["lib"]},
                {"name":"concurrent_lookups","kind":["example"]},
                {"name":"build_prof","kind":["example"]}]},
            {"name":"forwarder","publish":[],"targets":[{"name":"xfwd","kind":["bin"]}]}]}"#;
        let crates = parse(metadata).unwrap();
        assert_eq!(
            crates,
            vec![LibraryCrate {
                name: "fib-trie".into(),
                examples: vec!["concurrent_lookups".into()],
            }]
        );
        assert!(parse(b"{}").is_err());
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
