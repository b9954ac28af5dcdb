//! The bare engine: port forwarding with MAC rewriting and no lookups at all.
//!
//! Every frame received on one interface of a pair leaves through the other, with its
//! Ethernet source set to the egress interface's MAC and its destination to the configured
//! peer MAC behind the egress interface. Nothing else is read or written (no TTL, no
//! checksum): it measures what AF_XDP and the run loop cost, the ceiling a full pipeline
//! can approach (`xfwd run --bare`). It speaks the same frame contract as the routing engine
//! (`dataplane::Frame` in, `dataplane::Verdict` out, each frame counted once in
//! `dataplane::Counters`): a frame shorter than an Ethernet header is dropped as
//! `truncated`, one from an interface without a pair as `unknown_ingress`.
#![forbid(unsafe_code)]

use std::time::Instant;

use crossbeam_epoch::Guard;
use dataplane::wire::ethernet::{self, EthernetFrame};
use dataplane::{Counters, DropReason, Frame, FramePool, Verdict};

use crate::board::{Publisher, SharedCounters};
use crate::engine::Engine;

/// One direction: frames from `ingress` leave through `egress` with these MACs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BareRoute {
    /// Receiving interface.
    pub ingress: u32,
    /// Sending interface.
    pub egress: u32,
    /// Written as the Ethernet source: the egress interface's MAC.
    pub src_mac: [u8; 6],
    /// Written as the Ethernet destination: the next hop behind the egress interface.
    pub dst_mac: [u8; 6],
}

/// Port forwarding between fixed pairs.
///
/// ```
/// use dataplane::{Frame, HeapPool, Verdict};
/// use forwarder::bare::{Bare, BareRoute};
/// use forwarder::engine::Engine;
///
/// let route = BareRoute { ingress: 1, egress: 2, src_mac: [2; 6], dst_mac: [4; 6] };
/// let shared = forwarder::board::SharedCounters::default();
/// let mut bare = Bare::new(vec![route], shared.clone());
/// let mut chunk = [0u8; 2048];
/// let mut frames = [Frame::new(&mut chunk, 256, 60, 1)];
/// bare.process(&mut frames, &crossbeam_epoch::pin(), &mut HeapPool::new(2048, 0));
/// assert_eq!(frames[0].verdict, Verdict::Transmit { ifindex: 2 });
/// assert_eq!(&frames[0].bytes()[..12], &[4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2]);
/// drop(bare); // publishes its counters
/// assert_eq!(shared.lock().unwrap().transmit, 1);
/// ```
#[derive(Debug)]
pub struct Bare {
    routes: Vec<BareRoute>,
    counters: Counters,
    publisher: Publisher,
    clock: Instant,
}

impl Bare {
    /// An engine with these directions (the first one for an ingress wins), publishing its
    /// counters into `shared`.
    pub fn new(routes: Vec<BareRoute>, shared: SharedCounters) -> Self {
        Bare {
            routes,
            counters: Counters::default(),
            publisher: Publisher::new(shared),
            clock: Instant::now(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Engine for Bare {
    fn process<P: FramePool>(&mut self, frames: &mut [Frame<'_>], _guard: &Guard, _pool: &mut P) {
        for frame in frames.iter_mut() {
            let route = self.routes.iter().find(|r| r.ingress == frame.ifindex);
            let end = frame.offset.saturating_add(frame.len);
            let header = frame
                .chunk
                .get_mut(frame.offset..end)
                // An Ethernet header is the least a frame must have to be rewritten.
                .filter(|bytes| bytes.len() >= ethernet::HEADER_LEN);
            frame.verdict = match (route, header) {
                (None, _) => Verdict::Drop(DropReason::UnknownIngress),
                (Some(_), None) => Verdict::Drop(DropReason::Truncated),
                (Some(route), Some(bytes)) => {
                    let mut eth = EthernetFrame::new_unchecked(bytes);
                    eth.set_dst_addr(route.dst_mac);
                    eth.set_src_addr(route.src_mac);
                    Verdict::Transmit {
                        ifindex: route.egress,
                    }
                }
            };
            self.counters.count(frame.verdict);
        }
    }

    fn turn<P: FramePool>(&mut self, _guard: &Guard, _pool: &mut P) {
        let now = self.clock.elapsed().as_nanos() as u64;
        let counters = &self.counters;
        self.publisher.tick(now, || counters.clone());
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        self.publisher.flush(self.counters.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_macs_keeps_the_rest_and_counts_each_frame_once() {
        let routes = vec![
            BareRoute {
                ingress: 5,
                egress: 6,
                src_mac: [0xa; 6],
                dst_mac: [0xb; 6],
            },
            BareRoute {
                ingress: 6,
                egress: 5,
                src_mac: [0xc; 6],
                dst_mac: [0xd; 6],
            },
        ];
        let shared = SharedCounters::default();
        let mut bare = Bare::new(routes, shared.clone());
        let payload: Vec<u8> = (0..100u8).collect();
        let (mut a, mut b, mut c) = ([0u8; 512], [0u8; 512], [0u8; 512]);
        a[64..164].copy_from_slice(&payload);
        b[64..77].copy_from_slice(&payload[..13]);
        c[64..164].copy_from_slice(&payload);
        let mut frames = [
            Frame::new(&mut a, 64, 100, 6),
            Frame::new(&mut b, 64, 13, 6),
            Frame::new(&mut c, 64, 100, 9),
        ];
        bare.process(
            &mut frames,
            &crossbeam_epoch::pin(),
            &mut dataplane::HeapPool::new(2048, 0),
        );
        let verdicts: Vec<Verdict> = frames.iter().map(|f| f.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Transmit { ifindex: 5 },
                Verdict::Drop(DropReason::Truncated),
                Verdict::Drop(DropReason::UnknownIngress)
            ]
        );
        let out = frames[0].bytes();
        assert_eq!(&out[..6], &[0xd; 6]);
        assert_eq!(&out[6..12], &[0xc; 6]);
        assert_eq!(&out[12..], &payload[12..]);
        assert_eq!(frames[1].bytes(), &payload[..13], "a runt stays untouched");
        assert_eq!(frames[2].bytes(), &payload[..], "no pair: untouched");

        let counted = bare.counters().clone();
        assert_eq!((counted.rx, counted.transmit, counted.dropped), (3, 1, 2));
        assert_eq!(counted.drops_of(DropReason::Truncated), 1);
        assert_eq!(counted.drops_of(DropReason::UnknownIngress), 1);
        drop(bare);
        assert_eq!(*shared.lock().unwrap(), counted, "published when dropped");
    }
}
