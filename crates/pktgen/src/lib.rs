//! pktgen: xfwd's traffic generator and receiver on AF_XDP, the instrument of the end-to-end
//! benchmark (`cargo xtask bench e2e`).
//!
//! The generator plays the role the kernel's `pktgen` module and TRex play elsewhere: it sends
//! UDP probes over IPv4 and IPv6 from AF_XDP TX rings, over N destinations taken from a prefix
//! list and over port ranges ([`FlowSet`]), at a fixed frame size (64..=1518, FCS included) or
//! IMIX, at a rate in packets per second, for a count or a duration, from one thread per queue.
//! The receiver takes frames from an AF_XDP socket on the far side of the device under test and
//! counts per flow what arrived, what came out of order and what is missing, and the latency
//! from the send time each probe carries.
//!
//! # Design
//! - **Frames are prebuilt.** Each flow's headers are computed once ([`Template`]), with the
//!   partial sums of both checksums; sending a probe copies 48 (IPv4) or 68 (IPv6) bytes into a
//!   UMEM frame and patches lengths, sequence number, send time and the two checksums. The
//!   padding behind the probe header is never written, so it stays zero (an IPv4 probe clears
//!   the 20 bytes where an IPv6 probe sent earlier from the same UMEM frame had its header).
//! - **Probe header** (18 bytes, right after UDP): magic `XF`, flow id (u32), sequence number
//!   within the flow (u32), send time (u64 ns of CLOCK_MONOTONIC, which every network namespace
//!   of a machine shares, so sender and receiver in different namespaces compare times).
//! - **Invariants.** Flow ids are indexes into the [`FlowSet`]; queue `i` of `Q` sends the flows
//!   whose id ≡ i (mod Q), in order, so each flow's sequence numbers leave one ring in order: any
//!   reordering the receiver sees happened on the path.
//! - **Per-packet work**: no allocation, no lock, one `sendto` per batch (copy mode needs it), one
//!   clock read per batch (the time all probes of a batch carry).
//! - **Copy mode only**: veth has no zero-copy AF_XDP; the generator binds with `XDP_COPY` and
//!   `need_wakeup` and loads no XDP program (`INHIBIT_PROG_LOAD`); the receiver lets libxdp
//!   load its redirect program on its queue.
//!
//! ```no_run
//! use std::time::Duration;
//! use pktgen::{Endpoints, FlowSet, PortRange, Receiver, RxConfig, TxConfig};
//!
//! let ends = Endpoints {
//!     src_mac: [0x02, 0x58, 0x46, 0, 0, 1],
//!     dst_mac: [0x02, 0x58, 0x46, 0, 0, 2],
//!     src_v4: Some("198.18.0.2".parse()?),
//!     src_v6: None,
//! };
//! let prefixes = pktgen::flow::parse_prefix_list("198.18.2.0/24\n198.18.3.0/24\n")?;
//! let dsts = pktgen::flow::destinations(&prefixes, 2);
//! let flows = FlowSet::new(ends, &dsts, PortRange::single(1024), "9-10".parse()?)?;
//! // In dst's namespace:
//! let mut receiver = Receiver::start(&RxConfig::new("dst0", flows.len()))?;
//! // In src's namespace:
//! let mut tx = TxConfig::new("src0");
//! tx.count = Some(10_000);
//! tx.rate = Some(100_000.0);
//! let sent = pktgen::transmit(&tx, &flows)?;
//! std::thread::sleep(Duration::from_millis(100));
//! let got = receiver.stop()?;
//! println!("sent {} received {} p99 {:?}", sent.sent, got.summary.received,
//!          got.summary.latency.map(|l| l.p99_ns));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
pub mod flow;
pub mod frame;
pub mod pacer;
pub mod rx;
pub mod stamp;
pub mod stats;
pub mod sys;
pub mod tx;
pub mod xsk;

pub use error::GenError;
pub use flow::{Endpoints, Flow, FlowSet, PortRange, Prefix};
pub use frame::{FrameSize, Probe, Template};
pub use rx::{Receiver, RxConfig, RxReport};
pub use stats::{FlowCounts, Latency, RxStats, RxSummary};
pub use tx::{TxConfig, TxReport, transmit};
