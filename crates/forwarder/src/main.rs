//! `xfwd`: see `xfwd --help` and docs/forwarder.md.

use std::process::ExitCode;

use clap::Parser;
use forwarder::cli::{Cli, Command, LogFormat, check_config, probe, route, run, show, stats};

/// jemalloc: memory freed by a mass change of routes goes back to the kernel (see `trim`).
#[global_allocator]
static ALLOCATOR: forwarder::trim::Allocator = forwarder::trim::Allocator {};

fn main() -> ExitCode {
    // Before any thread: jemalloc's background threads return freed pages (see `trim`).
    forwarder::trim::configure();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| {
            // Queries print their answer on stdout: only warnings on stderr unless asked.
            let quiet = matches!(cli.command, Command::Route { .. } | Command::Show(_));
            let level = if quiet && cli.log == "info" {
                "warn"
            } else {
                &cli.log
            };
            tracing_subscriber::EnvFilter::try_new(level)
        })
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    forwarder::cli::set_json_errors(cli.log_format == LogFormat::Json);
    let result = match &cli.command {
        Command::Run(args) => run(args),
        Command::CheckConfig(args) => check_config(args),
        Command::Stats(args) => stats(args),
        Command::Probe(args) => probe(args),
        Command::Route { command } => route(command),
        Command::Show(args) => show(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            forwarder::cli::fatal(&format_args!("{error:#}"));
            ExitCode::FAILURE
        }
    }
}
