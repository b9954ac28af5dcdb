//! `cargo xtask lab up | down | status`: the virtual lab of `xfwd-lab`.

use anyhow::{Context, bail};
use xfwd_lab::Lab;

use crate::exec::is_root;

/// Options of `cargo xtask lab`.
#[derive(Debug, clap::Args)]
pub struct Options {
    #[command(subcommand)]
    action: Action,
    /// Name prefix of the lab's namespaces (PREFIX-src, PREFIX-fwd, PREFIX-dst).
    #[arg(long, global = true, default_value = Lab::DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Create the namespaces, veth links, addresses, routes; enable forwarding in fwd.
    Up {
        /// Extra prefixes routed behind dst (IPv4 ones, and as many IPv6 /64s).
        #[arg(long, default_value_t = 0)]
        extra_prefixes: usize,
        /// IPv4 length of the extra prefixes (16..=32; /24 fits 510, /28 8160).
        #[arg(long, default_value_t = Lab::DEFAULT_EXTRA_IPV4_LEN)]
        extra_ipv4_len: u8,
    },
    /// Delete the lab's namespaces (and everything in them); nothing else.
    Down,
    /// Show which of the lab's namespaces exist and what they hold.
    Status,
}

/// Runs the lab action.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let lab = Lab::new(&options.prefix).context("lab")?;
    if !is_root() {
        bail!("lab: needs root (network namespaces); run `sudo cargo xtask lab ...`");
    }
    match options.action {
        Action::Up {
            extra_prefixes,
            extra_ipv4_len,
        } => {
            let lab = lab
                .with_extra_prefixes(extra_prefixes, extra_ipv4_len)
                .context("lab up")?;
            lab.up().context("lab up")?;
            print!("{}", lab.status());
        }
        Action::Down => {
            let deleted = lab.down().context("lab down")?;
            match deleted.as_slice() {
                [] => println!("lab {}: nothing to remove", lab.prefix()),
                names => println!("lab {}: removed {}", lab.prefix(), names.join(", ")),
            }
        }
        Action::Status => print!("{}", lab.status()),
    }
    Ok(())
}
