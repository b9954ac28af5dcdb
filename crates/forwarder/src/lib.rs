//! xfwd's forwarder: the `xfwd` binary's parts, a user-space router on AF_XDP.
//!
//! What it renders: the kernel's receive path split in two. An XDP program of our own
//! ([`xdp`], `bpf/xfwd.bpf.c`) keeps the kernel's share (ARP, IPv6 neighbour discovery,
//! multicast, link-local and packets for the host's own addresses) and redirects every other
//! IPv4/IPv6 frame into an AF_XDP socket; one run loop per receive queue ([`runloop`]) takes
//! them in batches of 64 and hands each batch to a [`processor::Processor`], like a NAPI poll
//! hands a budget of packets to the stack under one `rcu_read_lock`: the loop pins the epoch
//! once per batch.
//!
//! Invariants:
//! - per run loop, one UMEM shared by its sockets on every interface: a frame received on
//!   one interface is sent out of another without a copy in user space; every frame is owned
//!   by exactly one of: the free list, a fill ring, an RX ring, the processor (during
//!   `process`), a pending TX list, a TX ring, a completion ring;
//! - the packet path neither allocates, locks nor makes a syscall per packet (syscalls are
//!   per batch: TX kicks, fill-ring wakeups, poll when idle);
//! - the XDP program is attached through BPF links: it is detached on shutdown and also when
//!   the process dies (SIGKILL), so a crash leaves no program behind.
//!
//! Processors: [`router::Router`] (the default: the `dataplane` pipeline over the tables a
//! `netlink-mirror` keeps of the namespace, whose observer also feeds the XDP program's
//! local-address map through [`locals::LocalAddrFeed`]) and [`bare::Bare`] (port forwarding
//! with MAC rewrite, no lookups: the AF_XDP ceiling).
//!
//! ```no_run
//! use std::sync::{Arc, atomic::AtomicBool};
//! use forwarder::{app, bare::{Bare, BareRoute, BARE_DROP_REASONS}, config::ConfigFile};
//!
//! let config = ConfigFile { interfaces: Some(vec!["eth0".into(), "eth1".into()]), ..Default::default() }
//!     .validate(None)?;
//! let ports = app::resolve_ports(&config)?;
//! let routes = vec![BareRoute { ingress: ports[0].ifindex, egress: ports[1].ifindex,
//!                               src_mac: ports[1].mac, dst_mac: [2, 0, 0, 0, 0, 1] }];
//! let pipeline = app::Pipeline { mode: "bare", make: Arc::new(move |_| Ok(Bare::new(routes.clone()))),
//!                                drop_reasons: BARE_DROP_REASONS, generation: None,
//!                                report: None, locals: None,
//!                                udp_ports: None };
//! app::run(&config, pipeline, None, Arc::new(AtomicBool::new(false)))?; // until the flag is set
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod app;
pub mod bare;
pub mod channels;
pub mod cli;
pub mod config;
pub mod counters;
pub mod endpoints;
pub mod locals;
pub mod probe;
pub mod processor;
pub mod punt;
pub mod router;
pub mod runloop;
pub mod serve;
pub mod stats;
pub mod xdp;
