//! What a report records about the run: date, machine, toolchain, commit.

use std::process::Command;

/// Facts about the machine and the build, as (name, value) pairs in report order.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    facts: Vec<(&'static str, String)>,
}

impl Machine {
    /// Reads the facts of this machine; a fact that cannot be read says "unknown".
    pub fn probe(command: &str) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let cpu = field(&cpuinfo, "model name")
            .unwrap_or("unknown")
            .to_owned();
        let memory = field(&meminfo, "MemTotal")
            .and_then(|v| v.trim_end_matches(" kB").trim().parse::<u64>().ok())
            .map_or("unknown".into(), |kib| {
                format!("{:.1} GiB", kib as f64 / 1048576.0)
            });
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into());
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .map_or("unknown".into(), |one| {
                format!("{one} (1-minute average when the report was written; above 0.5 means other work shared the CPUs)")
            });
        let commit = output("git", &["rev-parse", "--short", "HEAD"]);
        let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
        Machine {
            facts: vec![
                ("date", output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])),
                ("command", format!("`{command}`")),
                ("cpu", format!("{cpu}, {cores} cores available")),
                ("memory", memory),
                ("kernel", kernel),
                ("load", load),
                ("rustc", output("rustc", &["--version"])),
                (
                    "commit",
                    if dirty {
                        format!("{commit} (with local changes)")
                    } else {
                        commit
                    },
                ),
            ],
        }
    }

    /// Adds a fact after the others.
    pub fn note(&mut self, key: &'static str, value: String) {
        self.facts.push((key, value));
    }

    /// The facts, in report order.
    pub fn facts(&self) -> &[(&'static str, String)] {
        &self.facts
    }
}

/// The value of the first `key : value` line of a /proc file.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.split_once(':').filter(|(k, _)| k.trim() == key))
        .map(|(_, v)| v.trim())
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_fields() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Some CPU @ 2.00GHz\nflags\t\t: fpu\n";
        assert_eq!(field(cpuinfo, "model name"), Some("Some CPU @ 2.00GHz"));
        assert_eq!(
            field("MemTotal:       24572376 kB\n", "MemTotal"),
            Some("24572376 kB")
        );
        assert_eq!(field(cpuinfo, "missing"), None);
    }

    #[test]
    fn probes_this_machine() {
        let machine = Machine::probe("cargo xtask bench t");
        let keys: Vec<_> = machine.facts().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "date", "command", "cpu", "memory", "kernel", "load", "rustc", "commit"
            ]
        );
        assert!(machine.facts()[2].1.contains("cores available"));
    }
}
