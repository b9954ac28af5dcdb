//! xfwd's forwarding pipeline, sans IO (work in progress).
#![forbid(unsafe_code)]

pub mod wire;
