//! `xfwd check-config` as a user runs it (no privileges needed: nothing is touched).

use std::process::Command;

const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

fn check(text: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    run_with("check-config", text, extra)
}

/// `xfwd SUBCOMMAND --config FILE EXTRA...` with `text` in FILE: exit status, stdout, stderr.
fn run_with(subcommand: &str, text: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("xfwd-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{:x}.toml", text.len() * 31 + extra.len()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(XFWD)
        .args([subcommand, "--config"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_valid_file_is_described() {
    let (code, out, err) = check(
        "interfaces = [\"eth0\", \"eth1\"]\n[pipeline]\nroute_cache = \"off\"\nicmp_rate = 10\nvlan = \"punt\"\n",
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("valid"), "{out}");
    assert!(out.contains("eth0,eth1"), "{out}");
    assert!(out.contains("route cache off"), "{out}");
    assert!(out.contains("ICMP 10/s"), "{out}");
    assert!(out.contains("Punt"), "{out}");
}

#[test]
fn flags_are_checked_with_the_file() {
    let (code, out, err) = check("interfaces = [\"eth0\"]\n", &["--queues", "4"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("4 queue(s)"), "{out}");
}

#[test]
fn every_problem_is_listed_with_status_64() {
    let (code, _, err) = check(
        "queues = 0\n[pipeline]\nroute_cache = 1000\nhold_bytes_per_neighbour = 0\n",
        &[],
    );
    assert_eq!(code, Some(64), "{err}");
    for needle in ["no interfaces", "queues = 0", "pipeline:"] {
        assert!(err.contains(needle), "{needle:?} missing: {err}");
    }
    let (code, _, err) = check("[pipeline]\nvlan = \"sometimes\"\n", &[]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("vlan"), "{err}");
}

/// With `--log-format json`, why `run` and `check-config` stop is a JSON error event on stderr
/// (what a log collector reads), not a line of text.
#[test]
fn refusals_are_json_with_the_json_log_format() {
    for command in ["check-config", "run"] {
        let (code, out, err) = run_with(command, "queues = 0\n", &["--log-format", "json"]);
        assert_eq!(code, Some(64), "{command}: {err}");
        assert!(out.is_empty(), "{command}: {out}");
        let events: Vec<serde_json::Value> = err
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        assert_eq!(events.len(), 1, "{command}: {err}");
        assert_eq!(events[0]["level"], "ERROR", "{err}");
        let message = events[0]["fields"]["message"].as_str().unwrap();
        assert!(
            message.contains("no interfaces") && message.contains("queues = 0"),
            "{command}: {message}"
        );
    }
}
