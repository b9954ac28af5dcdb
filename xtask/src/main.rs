//! xfwd's workflows, run as `cargo xtask COMMAND` (see `cargo xtask --help`).
//!
//! One module per command, each with its own clap options and entry function; failures carry
//! the command that failed as context.

mod bench;
mod crates;
mod demo;
mod e2e;
mod endpoints;
mod exec;
mod fuzz;
mod lab;
mod miri;
mod mirror_oracle;
mod msrv;
mod package;
mod setup;
mod soak;
mod test;

use clap::{Parser, Subcommand};

/// Workflows for developing and running xfwd.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: xfwd forwarding traffic across the virtual lab, checked and summarised.
    Demo(demo::Options),
    /// Install the Debian packages the build and tests need, and mount bpffs (as root).
    Setup(setup::Options),
    /// Manage the virtual lab: network namespaces src ─ fwd ─ dst joined by veth pairs.
    Lab(lab::Options),
    /// Run setup, every test, clippy and rustfmt; print a summary.
    Test(test::Options),
    /// Run a criterion benchmark of benches/ and write its report with plots to docs/benchmarks/.
    Bench(bench::Options),
    /// Compare the netlink mirror's route lookups with the kernel's on all of bgp-full-v4 (root).
    MirrorOracle(mirror_oracle::Options),
    /// Fuzz one cargo-fuzz target (or each in turn) with nightly; prints executions and coverage.
    Fuzz(fuzz::Options),
    /// Run the unit tests of the table crates with `unsafe` under Miri (nightly).
    Miri(miri::Options),
    /// Build xfwd's Debian package (cargo-deb) and check it: unpacked, started from its unit.
    Package(package::Options),
    /// Run xfwd for minutes on its own lab under route churn and faults (root); report.
    Soak(soak::Options),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(options) => demo::run(&options),
        Command::Setup(options) => setup::run(&options),
        Command::Lab(options) => lab::run(&options),
        Command::Test(options) => test::run(&options),
        Command::Bench(options) => bench::run(&options),
        Command::MirrorOracle(options) => mirror_oracle::run(&options),
        Command::Fuzz(options) => fuzz::run(&options),
        Command::Miri(options) => miri::run(&options),
        Command::Package(options) => package::run(&options),
        Command::Soak(options) => soak::run(&options),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn rejects_bad_arguments() {
        use clap::Parser;
        for bad in [
            &["xtask", "lab"][..],
            &["xtask", "lab", "up", "--extra-prefixes", "-1"],
            &["xtask", "lab", "up", "--extra-ipv4-len", "300"],
            &["xtask", "nosuch"],
        ] {
            assert!(super::Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        assert!(super::Cli::try_parse_from(["xtask", "lab", "--prefix", "x", "status"]).is_ok());
    }
}
