//! netlink-mirror (design note written below once the pieces exist).
pub mod apply;
pub mod change;
pub mod cli;
mod control;
pub mod error;
pub mod key;
pub mod map;
mod mirror;
pub mod netns;
mod resolver;
mod socket;
pub mod stats;
pub mod tables;

pub use change::{Change, ChangeOp, Observer};
pub use error::{MapError, MirrorError};
pub use mirror::{DEFAULT_RCVBUF, Mirror, MirrorHandle, MirrorOptions};
pub use netns::NetnsSpec;
pub use resolver::NeighResolver;
pub use stats::MirrorStats;
pub use tables::MirroredTables;
