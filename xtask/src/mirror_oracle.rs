//! `cargo xtask mirror-oracle`: the netlink mirror against the live kernel on the whole
//! bgp-full-v4 table (1,072,529 routes) and a million random addresses, in release: the full
//! run of the test that CI runs on a subset (`tests/tests/netlink_mirror_oracle.rs`).

use std::process::Command;

use anyhow::{Context as _, bail};
use clap::Args;

use crate::exec::{exec, is_root};

/// Default number of random addresses looked up in the kernel and in the mirror.
const LOOKUPS: usize = 1_000_000;

/// Options of `mirror-oracle`.
#[derive(Debug, Args)]
pub struct Options {
    /// How many random addresses to compare.
    #[arg(long, default_value_t = LOOKUPS)]
    lookups: usize,
    /// Load every n-th prefix instead of all of them (1: the whole table).
    #[arg(long, default_value_t = 1)]
    stride: usize,
    /// Install the routes through kernel nexthop objects (single nexthops, a group, a
    /// resilient group, a blackhole), as routing daemons do, and replace one group afterwards.
    #[arg(long)]
    nexthop_objects: bool,
}

/// Runs the oracle test in release with the full table.
pub fn run(options: &Options) -> anyhow::Result<()> {
    if !is_root() {
        bail!("mirror-oracle creates a network namespace: run it as root");
    }
    let routes = if options.stride <= 1 {
        "all".to_owned()
    } else {
        options.stride.to_string()
    };
    exec(
        Command::new(env!("CARGO"))
            .args([
                "test",
                "--release",
                "-p",
                "xfwd-tests",
                "--test",
                "netlink_mirror_oracle",
            ])
            .arg(if options.nexthop_objects {
                "kernel_oracle_bgp_full_v4_nexthop_objects"
            } else {
                "kernel_oracle_bgp_full_v4"
            })
            .args(["--", "--exact", "--nocapture"])
            .env("XFWD_ORACLE_ROUTES", routes)
            .env("XFWD_ORACLE_LOOKUPS", options.lookups.to_string()),
    )
    .context("mirror-oracle")
}
