//! netlink-mirror (design note written below once the pieces exist).
pub mod error;
pub mod key;
pub mod map;
