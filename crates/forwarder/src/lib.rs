//! xfwd's forwarder: the `xfwd` binary's parts, a user-space router on AF_XDP.
//!
//! What it renders: the kernel's receive path split in two. An XDP program of our own
//! ([`xdp`], `bpf/xfwd.bpf.c`) keeps the kernel's share (ARP, IPv6 neighbour discovery,
//! multicast, link-local and packets for the host's own addresses) and redirects every other
//! IPv4/IPv6 frame into an AF_XDP socket; one run loop per receive queue ([`runloop`]) takes
//! them in batches of 64 and hands each batch to an [`engine::Engine`] as `dataplane::Frame`s
//! (the UMEM chunks themselves, the packet at the kernel's headroom offset), like a NAPI poll
//! hands a budget of packets to the stack under one `rcu_read_lock`: the loop pins the epoch
//! once per batch, and acts on each frame's `dataplane::Verdict`.
//!
//! Invariants:
//! - per run loop, one UMEM shared by its sockets on every interface: a frame received on
//!   one interface is sent out of another without a copy in user space; every frame is owned
//!   by exactly one of: the free list, a fill ring, an RX ring, the engine (during
//!   `process`), a pending TX list, a TX ring, a completion ring;
//! - every frame is counted once, by the engine, by verdict and by drop or punt reason
//!   (`dataplane::Counters`); the loop counts only the verdicts it could not carry out;
//! - the packet path neither allocates, locks nor makes a syscall per packet (syscalls are
//!   per batch: TX kicks, fill-ring wakeups, poll when idle; all in the [`afxdp`] crate);
//! - the XDP program is attached through BPF links: it is detached on shutdown and also when
//!   the process dies (SIGKILL), so a crash leaves no program behind.
//!
//! Engines: [`router::Router`] (the default: the `dataplane` pipeline over the tables a
//! `netlink-mirror` keeps of the namespace, started by [`startup::routing`], whose observer
//! also feeds the XDP program's local-address map through [`locals::LocalAddrFeed`]) and
//! [`bare::Bare`] (port forwarding with MAC rewrite, no lookups: the AF_XDP ceiling).
//!
//! Modules by concern, dependencies pointing one way: the packet path ([`runloop`],
//! [`engine`], [`router`], [`bare`]), counters ([`counters`], [`board`]), start-up
//! ([`startup`], [`app`]), reports ([`stats`], [`serve`]), the command line ([`cli`]).
//!
//! ```no_run
//! use std::sync::{Arc, atomic::AtomicBool};
//! use forwarder::{app, bare::BareRoute, config::ConfigFile, startup};
//!
//! let config = ConfigFile { interfaces: Some(vec!["eth0".into(), "eth1".into()]), ..Default::default() }
//!     .validate(None)?;
//! let ports = app::resolve_ports(&config)?;
//! let routes = vec![BareRoute { ingress: ports[0].ifindex, egress: ports[1].ifindex,
//!                               src_mac: ports[1].mac, dst_mac: [2, 0, 0, 0, 0, 1] }];
//! app::run(&config, startup::bare(routes), None, Arc::new(AtomicBool::new(false)), None)?; // until the flag is set
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod app;
pub mod bare;
pub mod board;
pub mod bypass_watch;
pub mod cache_report;
pub mod channels;
pub mod cli;
pub use xfwd_config as config;
pub mod counters;
pub mod endpoints;
pub mod engine;
pub mod explain;
pub mod locals;
pub mod metrics;
pub mod netfilter;
pub mod notify;
pub mod probe;
pub mod punt;
pub mod query;
pub mod router;
pub mod rtnl;
pub mod runloop;
pub mod serve;
pub mod startup;
pub mod stats;
pub mod tc;
pub mod trim;
pub mod xdp;

// The tests allocate as the binary does (`trim`: jemalloc, whose counts they check).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: trim::Allocator = trim::Allocator {};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
