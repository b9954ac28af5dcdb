//! Local addresses per network namespace in a resizable, epoch-protected hash multimap: a
//! user-space rendering of the kernel's `rhltable` as proposed to replace `inet_addr_lst`.
//!
//! TODO design note
#![warn(missing_docs)]

pub mod addr;
mod bucket;
pub mod error;
pub mod fixed;
pub mod rhltable;
pub mod seed;

pub use addr::AddrError;
pub use addr::entry::{IfAddr, Label, NetnsId};
pub use addr::family::{Family, Removal};
pub use addr::flags::{IfaFlags, Scope};
pub use addr::table::{AddrConfig, AddrTable, FamilySweep, LocalAddr, Sweep};
pub use bucket::Dups;
pub use error::{InsertError, ParamsError};
pub use fixed::FixedTable;
pub use rhltable::{Params, RehashCounts, RhlTable, TableStats};
pub use seed::SeedMode;
