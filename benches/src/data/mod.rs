//! The shipped data sets: real routing tables and ClassBench rule sets.
//!
//! Each set is an xz-compressed text file in `benches/data/` (see the README there for origins
//! and licences). Loading decompresses the whole file in memory and parses every line; a line that
//! does not parse is reported with its file and line number, never skipped.

pub mod classbench;
mod error;
mod prefix;
pub mod routes;

use std::io::Read;
use std::path::PathBuf;

pub use error::Error;
pub use prefix::{Prefix, PrefixAddr};

/// The directory holding the data files: `benches/data/` of this repository.
///
/// ```
/// assert!(xfwd_benches::data::data_dir().join("README.md").is_file());
/// ```
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Reads and decompresses the xz file `name` of [`data_dir`] into a string.
///
/// ```
/// let text = xfwd_benches::data::read_xz("fw_10k.xz")?;
/// assert!(text.starts_with('@'));
/// # Ok::<(), xfwd_benches::data::Error>(())
/// ```
pub fn read_xz(name: &str) -> Result<String, Error> {
    let path = data_dir().join(name);
    let file = std::fs::File::open(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let mut text = String::new();
    liblzma::read::XzDecoder::new(std::io::BufReader::new(file))
        .read_to_string(&mut text)
        .map_err(|source| Error::Io { path, source })?;
    Ok(text)
}

/// Splits `text` into numbered, non-empty lines (numbers from 1, as editors show them).
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim_end()))
        .filter(|(_, line)| !line.is_empty())
}
