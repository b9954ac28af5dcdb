//! `xfwd-mirror`: mirrors a namespace and answers `route get` / `show` from the mirror, until
//! the `xfwd` binary carries these subcommands.

use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use netlink_mirror::cli::{RouteGetArgs, ShowArgs, route_get, show};
use netlink_mirror::{Mirror, MirrorOptions, NetnsSpec};

/// How long the first synchronisation may take (a full BGP table takes seconds).
const SYNC_TIMEOUT: Duration = Duration::from_secs(300);

/// Answers from xfwd's mirror of a network namespace's kernel state.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Route lookups.
    Route {
        #[command(subcommand)]
        command: RouteCommand,
    },
    /// Lists mirrored state.
    Show(ShowArgs),
}

#[derive(Subcommand, Debug)]
enum RouteCommand {
    /// Looks an address up as `ip route get` does.
    Get(RouteGetArgs),
}

fn mirror(netns: Option<&str>) -> anyhow::Result<netlink_mirror::MirrorHandle> {
    let spec = netns.map_or(NetnsSpec::Current, NetnsSpec::parse);
    let handle = Mirror::start(spec.clone(), MirrorOptions::default())
        .with_context(|| format!("starting the mirror of {spec:?}"))?;
    handle
        .wait_synced(SYNC_TIMEOUT)
        .context("synchronising the mirror")?;
    Ok(handle)
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Route {
            command: RouteCommand::Get(args),
        } => {
            let m = mirror(args.netns.as_deref())?;
            match route_get(m.tables(), &args) {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(2);
                }
            }
        }
        Command::Show(args) => {
            let m = mirror(args.netns.as_deref())?;
            print!("{}", show(m.tables(), &args));
        }
    }
    Ok(())
}
