//! The xfwd virtual lab: three network namespaces, `src` ─veth─ `fwd` ─veth─ `dst`, on which
//! every privileged test, the demo and the end-to-end benchmarks run.
//!
//! ```text
//!  PREFIX-src              PREFIX-fwd                    PREFIX-dst
//!  src0 ───── veth ───── fwd0   fwd1 ───── veth ───── dst0   (+ N extra prefixes)
//! ```
//!
//! The wiring is described once, in [`topology`]: interface names, fixed MACs, IPv4 addresses
//! from the benchmarking block 198.18.0.0/15 and IPv6 ones from 2001:db8::/32. `src` and `dst`
//! route everything via `fwd`, which forwards IPv4 and IPv6; optional extra prefixes are routed
//! by `fwd` to `dst`, which accepts them as local.
//!
//! A [`Lab`] names one instance by its prefix, so several labs can coexist (tests use
//! [`Lab::unique`]). [`Lab::up`] either builds all of it or removes what it built;
//! [`Lab::down`] removes only the lab's own namespaces; nothing ever touches the host's
//! namespace: each veth pair is created inside one of the lab's namespaces.
//!
//! Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
//!
//! ```no_run
//! use xfwd_lab::{Lab, Role, topology};
//!
//! let lab = Lab::unique("doc")?.up_scoped()?; // taken down when `lab` is dropped
//! let fwd = lab.netns(Role::Fwd);
//! let index = xfwd_lab::netns::run_in(&fwd, || nix::net::if_::if_nametoindex(topology::FWD0.name))?;
//! assert!(index.is_ok());
//! print!("{}", lab.status());
//! # Ok::<(), xfwd_lab::LabError>(())
//! ```
#![forbid(unsafe_code)]

mod command;
mod error;
mod lab;
pub mod netns;
mod privilege;
mod status;
pub mod topology;

pub use error::LabError;
pub use lab::{Lab, LabGuard};
pub use privilege::privileged;
pub use status::{LabStatus, NodeDetail, NodeStatus};
pub use topology::Role;
