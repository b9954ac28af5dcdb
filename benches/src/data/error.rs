use std::path::PathBuf;

/// Why a data set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, read or decompressed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file that failed.
        path: PathBuf,
        /// The underlying error (xz format errors arrive as `InvalidData`).
        #[source]
        source: std::io::Error,
    },
    /// A line of the file does not have the expected form.
    #[error("{file}:{line}: {reason}")]
    Parse {
        /// The data set's file name, or `<input>` for text given directly.
        file: String,
        /// The line number, counted from 1.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
}

impl Error {
    pub(crate) fn parse(file: &str, line: usize, reason: impl Into<String>) -> Self {
        Error::Parse {
            file: file.to_owned(),
            line,
            reason: reason.into(),
        }
    }
}
