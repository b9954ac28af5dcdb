//! The bare processor: port forwarding with MAC rewriting and no lookups at all.
//!
//! Every frame received on one interface of a pair leaves through the other, with its
//! Ethernet source set to the egress interface's MAC and its destination to the configured
//! peer MAC behind the egress interface. Nothing else is read or written (no TTL, no
//! checksum): it measures what AF_XDP and the run loop cost, the ceiling a full pipeline
//! can approach (`xfwd run --bare`).
#![forbid(unsafe_code)]

use crossbeam_epoch::Guard;

use crate::processor::{FramePool, PacketBuf, Processor, Verdict};

/// Drop reasons of the bare processor.
pub const BARE_DROP_REASONS: &[&str] = &["runt", "no_pair"];
const DROP_RUNT: u16 = 0;
const DROP_NO_PAIR: u16 = 1;

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
/// use forwarder::bare::{Bare, BareRoute};
/// use forwarder::processor::{Processor, Verdict, VecFrame, PacketBuf};
///
/// let route = BareRoute { ingress: 1, egress: 2, src_mac: [2; 6], dst_mac: [4; 6] };
/// let mut bare = Bare::new(vec![route]);
/// let mut frames = [VecFrame::new(&[0u8; 60], 2048)];
/// let mut verdicts = [Verdict::default()];
/// bare.process(1, &mut frames, &mut verdicts, &crossbeam_epoch::pin(), &mut dataplane::HeapPool::new(2048, 0));
/// assert_eq!(verdicts[0], Verdict::Transmit { ifindex: 2 });
/// assert_eq!(&frames[0].data()[..12], &[4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2]);
/// ```
#[derive(Debug, Clone)]
pub struct Bare {
    routes: Vec<BareRoute>,
}

impl Bare {
    /// A processor with these directions (the first one for an ingress wins).
    pub fn new(routes: Vec<BareRoute>) -> Self {
        Bare { routes }
    }
}

impl Processor for Bare {
    fn process<F: PacketBuf, S: FramePool>(
        &mut self,
        ingress: u32,
        frames: &mut [F],
        verdicts: &mut [Verdict],
        _guard: &Guard,
        _spare: &mut S,
    ) {
        let Some(route) = self.routes.iter().find(|r| r.ingress == ingress) else {
            verdicts.fill(Verdict::Drop(DROP_NO_PAIR));
            return;
        };
        for (frame, verdict) in frames.iter_mut().zip(verdicts.iter_mut()) {
            let data = frame.data_mut();
            *verdict = if data.len() < 14 {
                Verdict::Drop(DROP_RUNT)
            } else {
                data[..6].copy_from_slice(&route.dst_mac);
                data[6..12].copy_from_slice(&route.src_mac);
                Verdict::Transmit {
                    ifindex: route.egress,
                }
            };
        }
    }

    fn drop_reasons(&self) -> &'static [&'static str] {
        BARE_DROP_REASONS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::VecFrame;

    #[test]
    fn rewrites_macs_and_keeps_the_rest() {
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
        let mut bare = Bare::new(routes);
        let payload: Vec<u8> = (0..100u8).collect();
        let mut frames = vec![
            VecFrame::new(&payload, 2048),
            VecFrame::new(&payload[..13], 2048),
        ];
        let mut verdicts = [Verdict::Undecided; 2];
        bare.process(
            6,
            &mut frames,
            &mut verdicts,
            &crossbeam_epoch::pin(),
            &mut dataplane::HeapPool::new(2048, 0),
        );
        assert_eq!(
            verdicts,
            [Verdict::Transmit { ifindex: 5 }, Verdict::Drop(0)]
        );
        assert_eq!(&frames[0].data()[..6], &[0xd; 6]);
        assert_eq!(&frames[0].data()[6..12], &[0xc; 6]);
        assert_eq!(&frames[0].data()[12..], &payload[12..]);
        assert_eq!(frames[1].data(), &payload[..13], "a runt stays untouched");

        let mut verdicts = [Verdict::Undecided; 2];
        bare.process(
            9,
            &mut frames,
            &mut verdicts,
            &crossbeam_epoch::pin(),
            &mut dataplane::HeapPool::new(2048, 0),
        );
        assert_eq!(verdicts, [Verdict::Drop(DROP_NO_PAIR); 2]);
        assert_eq!(bare.drop_reasons()[DROP_NO_PAIR as usize], "no_pair");
    }
}
