//! Typed errors of the crate.
#![forbid(unsafe_code)]

/// Invalid [`Params`](crate::Params) for an [`RhlTable`](crate::RhlTable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// `min_size` is not a power of two, or is below [`MIN_SIZE_FLOOR`](crate::rhltable::MIN_SIZE_FLOOR).
    #[error("min_size {0} must be a power of two of at least 4")]
    MinSize(usize),
    /// `max_size` is not a power of two, or is above [`MAX_SIZE_CEILING`](crate::rhltable::MAX_SIZE_CEILING).
    #[error("max_size {0} must be a power of two of at most 2^30")]
    MaxSize(usize),
    /// `max_size` is smaller than `min_size`.
    #[error("max_size {max_size} is below min_size {min_size}")]
    MaxBelowMin {
        /// The requested minimum.
        min_size: usize,
        /// The requested maximum.
        max_size: usize,
    },
}

/// Why an [`RhlTable::insert`](crate::RhlTable::insert) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The table already holds the most distinct keys it may (twice `max_size`, as the
    /// kernel's `max_elems`); the key was new, so nothing was inserted.
    #[error("table full: {max_elems} distinct keys")]
    TableFull {
        /// The limit that was reached.
        max_elems: usize,
    },
}
