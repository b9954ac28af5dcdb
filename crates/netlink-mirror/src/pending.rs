//! Events that arrive while a dump runs, kept as the bytes the kernel sent until the dump
//! ends.
//!
//! A dump's replies and the events on the other socket are not ordered with each other, so
//! events are applied after the dump (they are newer than or as new as what it held). A mass
//! change during a dump (100,000 route adds) queues as many events. Kept decoded, each is a
//! message with its own attribute vector: about a quarter of a kilobyte in several small
//! allocations, made between the allocations of the routes the dump inserts meanwhile.
//! Freed after the dump, they leave holes among long-lived trie nodes that the allocator
//! cannot hand back (the resident memory of the soak grew in steps at each such dump). Kept
//! as bytes, they take the size of the datagrams (about 80 bytes a route) in one buffer,
//! released whole when it is drained.
#![forbid(unsafe_code)]

use netlink_packet_core::{NetlinkDeserializable, NetlinkPayload};

use crate::socket::decode;

/// A buffer kept after [`PendingEvents::drain`] up to this capacity; a larger one (from a
/// burst) is freed.
const RETAIN: usize = 256 << 10;

/// Event datagrams in arrival order, each stored as its length (4 bytes, native order) and
/// its bytes.
///
/// ```ignore
/// let mut pending = PendingEvents::default();
/// pending.push_datagram(sock.datagram());
/// pending.drain::<RtnlMessage>(|flags, msg| apply(flags, msg), |kind, e| log(kind, e));
/// ```
#[derive(Debug, Default)]
pub(crate) struct PendingEvents {
    bytes: Vec<u8>,
    datagrams: usize,
}

impl PendingEvents {
    /// Keeps one datagram's bytes (a datagram longer than `u32::MAX` bytes cannot come from
    /// a socket; it would be cut).
    pub fn push_datagram(&mut self, datagram: &[u8]) {
        let len = u32::try_from(datagram.len()).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(&len.to_ne_bytes());
        self.bytes.extend_from_slice(&datagram[..len as usize]);
        self.datagrams += 1;
    }

    /// How many datagrams are kept.
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Bytes kept (datagrams and their lengths).
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Decodes the kept datagrams in order, handing each event with its netlink flags to
    /// `each` and each undecodable message's type and error to `bad`; leaves the buffer
    /// empty, and frees it if a burst grew it past [`RETAIN`].
    pub fn drain<I: NetlinkDeserializable>(
        &mut self,
        mut each: impl FnMut(u16, I),
        mut bad: impl FnMut(u16, String),
    ) {
        let mut rest = &self.bytes[..];
        while let Some((len, tail)) = rest.split_first_chunk::<4>() {
            let len = u32::from_ne_bytes(*len) as usize;
            let (datagram, tail) = tail.split_at(len.min(tail.len()));
            decode::<I>(
                datagram,
                |m| {
                    if let NetlinkPayload::InnerMessage(msg) = m.payload {
                        each(m.header.flags, msg);
                    }
                },
                &mut bad,
            );
            rest = tail;
        }
        self.datagrams = 0;
        if self.bytes.capacity() > RETAIN {
            self.bytes = Vec::new();
        } else {
            self.bytes.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage};
    use netlink_packet_route::RouteNetlinkMessage;
    use netlink_packet_route::link::LinkMessage;

    fn datagram(msgs: &[(u32, u16)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(index, flags) in msgs {
            let mut link = LinkMessage::default();
            link.header.index = index;
            let mut header = NetlinkHeader::default();
            header.flags = flags;
            let mut m = NetlinkMessage::new(
                header,
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)),
            );
            m.finalize();
            let mut bytes = vec![0; m.buffer_len()];
            m.serialize(&mut bytes);
            out.extend_from_slice(&bytes);
        }
        out
    }

    fn drained(p: &mut PendingEvents) -> (Vec<(u16, u32)>, Vec<u16>) {
        let (mut got, mut bad) = (Vec::new(), Vec::new());
        p.drain::<RouteNetlinkMessage>(
            |flags, m| match m {
                RouteNetlinkMessage::NewLink(l) => got.push((flags, l.header.index)),
                other => panic!("unexpected {:?}", other.message_type()),
            },
            |kind, _| bad.push(kind),
        );
        (got, bad)
    }

    #[test]
    fn datagrams_come_back_in_order_with_every_message_and_flags() {
        let mut p = PendingEvents::default();
        p.push_datagram(&datagram(&[(1, 0x100), (2, 0)]));
        p.push_datagram(&datagram(&[(3, 0x400)]));
        assert_eq!(p.len(), 2);
        let (got, bad) = drained(&mut p);
        assert_eq!(got, vec![(0x100, 1), (0, 2), (0x400, 3)]);
        assert!(bad.is_empty());
        assert_eq!((p.len(), p.bytes()), (0, 0));
        assert_eq!(drained(&mut p), (vec![], vec![]));
    }

    #[test]
    fn a_truncated_message_is_reported_and_the_next_datagram_still_decodes() {
        let mut p = PendingEvents::default();
        let whole = datagram(&[(7, 0)]);
        p.push_datagram(&whole[..whole.len() - 4]);
        p.push_datagram(&whole);
        let (got, bad) = drained(&mut p);
        assert_eq!(got, vec![(0, 7)]);
        assert_eq!(bad.len(), 1, "the cut message, by its type");
    }

    #[test]
    fn a_burst_buffer_is_freed_and_a_small_one_reused() {
        let mut p = PendingEvents::default();
        let one = datagram(&[(1, 0)]);
        for _ in 0..(2 * RETAIN / one.len()) {
            p.push_datagram(&one);
        }
        assert!(p.bytes.capacity() > RETAIN);
        let (got, _) = drained(&mut p);
        assert_eq!(got.len(), 2 * RETAIN / one.len());
        assert_eq!(p.bytes.capacity(), 0, "the burst's buffer went back");
        p.push_datagram(&one);
        let cap = p.bytes.capacity();
        drained(&mut p);
        assert_eq!(
            p.bytes.capacity(),
            cap,
            "a small buffer is kept for the next dump"
        );
    }
}
