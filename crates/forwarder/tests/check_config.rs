//! `xfwd check-config` as a user runs it (no privileges needed: nothing is touched).

use std::process::Command;

const XFWD: &str = env!("CARGO_BIN_EXE_xfwd");

fn check(text: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("xfwd-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{:x}.toml", text.len() * 31 + extra.len()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(XFWD)
        .args(["check-config", "--config"])
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
