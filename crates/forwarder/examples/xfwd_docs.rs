//! Writes xfwd's man page and shell completions, generated from its clap command line (so
//! they always match `--help`): `OUT/xfwd.1` and a page per subcommand (`OUT/xfwd-run.1`,
//! ...), `OUT/xfwd.bash`, `OUT/_xfwd` (zsh) and
//! `OUT/xfwd.fish`. `cargo xtask package` runs it and puts them in the Debian package.
//!
//! ```sh
//! cargo run -p forwarder --example xfwd_docs -- target/xfwd-docs
//! man -l target/xfwd-docs/xfwd.1
//! ```

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use forwarder::cli::Cli;

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/xfwd-docs".into()),
    );
    let files = generate(&out)?;
    println!("{}: {}", out.display(), files.join(", "));
    Ok(())
}

/// Writes the man pages and completion scripts into `out` (created if missing); returns the
/// names of the files written. `tests/docs.rs` runs it too.
pub fn generate(out: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(out)?;
    let command = Cli::command().name("xfwd");

    // xfwd.1, and one page per subcommand (xfwd-run.1, xfwd-show.1, ...) with its options.
    clap_mangen::generate_to(command.clone(), out)?;
    let mut files: Vec<String> = std::fs::read_dir(out)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".1"))
        .collect();
    files.sort();

    for (shell, file) in [
        (Shell::Bash, "xfwd.bash"),
        (Shell::Zsh, "_xfwd"),
        (Shell::Fish, "xfwd.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command.clone(), "xfwd", &mut script);
        std::fs::write(out.join(file), script)?;
        files.push(file.to_owned());
    }
    Ok(files)
}
