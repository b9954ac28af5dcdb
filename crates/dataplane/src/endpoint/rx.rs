//! A run loop's side of the endpoints: the batch's `Deliver` frames into receive queues or
//! answered in place by a service, and the endpoints' queued datagrams sent.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::Guard;
use udp_socktab::SockId;

use super::Service;
use super::mailbox::{Mailbox, RecvMeta};
use super::output::{self, Addrs, SendError};
use super::reflect;
use super::registry::Registry;
use crate::pool::FramePool;
use crate::route::Egress;
use crate::wire::Family;
use crate::wire::ethernet::EthernetFrame;
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6;
use crate::wire::ipv6::Ipv6Packet;
use crate::wire::l4::{UDP_HEADER_LEN, UdpPacket};
use crate::{DropReason, Frame, PuntReason, Queue, Tables, Verdict};

/// Where a spare frame's payload starts: room for the largest headers (Ethernet, IPv6, UDP).
const TX_HEADROOM: usize = 128;

/// A received datagram's addresses and TTL, read from a frame the pipeline delivered.
struct Datagram {
    family: Family,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    ttl: u8,
    /// The payload's offset in the chunk and its length.
    payload: usize,
    len: usize,
}

/// Reads what the pipeline validated, through the headers' views: the IP version and
/// addresses at the network header after the Ethernet header (and tag), the UDP header before
/// the payload.
fn datagram(frame: &Frame<'_>, payload: u16) -> Option<Datagram> {
    let bytes = frame.bytes();
    let eth = EthernetFrame::new_checked(bytes).ok()?;
    let ip = bytes.get(eth.header_len()..)?;
    let p = usize::from(payload);
    let udp = UdpPacket::new_unchecked(
        bytes
            .get(p.checked_sub(UDP_HEADER_LEN)?..p)?
            .first_chunk::<UDP_HEADER_LEN>()?,
    );
    let len = usize::from(udp.len()).checked_sub(UDP_HEADER_LEN)?;
    bytes.get(p..p + len)?;
    let (family, src, dst, ttl) = match Family::of_packet(ip)? {
        Family::V4 => {
            let h = Ipv4Packet::new_unchecked(ip.first_chunk::<{ ipv4::HEADER_LEN }>()?);
            let (src, dst) = (h.src_addr(), h.dst_addr());
            (Family::V4, IpAddr::V4(src), IpAddr::V4(dst), h.ttl())
        }
        Family::V6 => {
            let h = Ipv6Packet::new_unchecked(ip.first_chunk::<{ ipv6::HEADER_LEN }>()?);
            let (src, dst) = (h.src_addr(), h.dst_addr());
            (Family::V6, IpAddr::V6(src), IpAddr::V6(dst), h.hop_limit())
        }
    };
    Some(Datagram {
        family,
        src,
        dst,
        sport: udp.src_port(),
        dport: udp.dst_port(),
        ttl,
        payload: frame.offset + p,
        len,
    })
}

/// One run loop's view of the endpoints (from [`Endpoints::rx`](super::Endpoints::rx)).
pub struct EndpointRx {
    registry: Arc<Registry>,
    seen: u64,
    map: Arc<HashMap<SockId, Arc<Mailbox>>>,
}

impl std::fmt::Debug for EndpointRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointRx")
            .field("endpoints", &self.map.len())
            .finish()
    }
}

impl EndpointRx {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        let (seen, map) = registry.snapshot();
        EndpointRx {
            registry,
            seen,
            map,
        }
    }

    /// Re-reads the set of endpoints if it changed (one atomic load when it did not).
    fn refresh(&mut self) {
        if self.registry.version.load(Ordering::Acquire) != self.seen {
            (self.seen, self.map) = self.registry.snapshot();
        }
    }

    fn mailbox(&mut self, socket: SockId) -> Option<Arc<Mailbox>> {
        if let Some(m) = self.map.get(&socket) {
            return Some(m.clone());
        }
        // Bound after this batch's snapshot: look again.
        self.refresh();
        self.map.get(&socket).cloned()
    }

    /// Hands the batch's [`Verdict::Deliver`] frames (after [`Queue::process_batch`]) to their
    /// endpoints and sets their final verdict: an embedder's socket gets a copy of the
    /// datagram (`Consumed`: recycle the chunk); echo and STAMP answers are built in place and
    /// routed (`Transmit` with the frame's new `offset`/`len`, or `Held` for the neighbour);
    /// a datagram that cannot be answered is `Drop` (counted on the endpoint by cause); a
    /// socket no endpoint owns any more goes to the kernel (`Punt`). `now` is the queue's
    /// monotonic clock (the hold buffer's), `wall` the Unix time in nanoseconds for the
    /// reflector's timestamps (read once per batch for the receive time, once per answer for
    /// the transmit time). Returns the number of frames handled.
    pub fn handle_batch(
        &mut self,
        queue: &mut Queue,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        wall: &mut dyn FnMut() -> u64,
        frames: &mut [Frame<'_>],
    ) -> usize {
        self.refresh();
        let mut rx_wall = None;
        let mut handled = 0;
        for frame in frames.iter_mut() {
            let Verdict::Deliver { socket, payload } = frame.verdict else {
                continue;
            };
            handled += 1;
            let Some(mailbox) = self.mailbox(socket) else {
                frame.verdict = Verdict::Punt(PuntReason::Local);
                continue;
            };
            let Some(d) = datagram(frame, payload) else {
                frame.verdict = Verdict::Drop(DropReason::Truncated);
                continue;
            };
            frame.verdict = match mailbox.service {
                Service::Socket => {
                    let meta = RecvMeta {
                        src: SocketAddr::new(d.src, d.sport),
                        dst: SocketAddr::new(d.dst, d.dport),
                        ifindex: frame.ifindex,
                        received_ns: now,
                        len: d.len,
                    };
                    mailbox.deliver(&frame.chunk[d.payload..d.payload + d.len], meta);
                    Verdict::Consumed
                }
                Service::Echo => {
                    mailbox.counters.received.fetch_add(1, Ordering::Relaxed);
                    answer(queue, tables, guard, now, frame, &d, d.len, &mailbox)
                }
                Service::Stamp { error } => {
                    mailbox.counters.received.fetch_add(1, Ordering::Relaxed);
                    let rx = *rx_wall.get_or_insert_with(|| reflect::ntp_from_unix_nanos(wall()));
                    let tx = reflect::ntp_from_unix_nanos(wall());
                    match reflect::stamp(&mut frame.chunk[d.payload..], d.len, rx, tx, error, d.ttl)
                    {
                        Ok(len) => answer(queue, tables, guard, now, frame, &d, len, &mailbox),
                        Err(_) => {
                            mailbox
                                .counters
                                .rx_malformed
                                .fetch_add(1, Ordering::Relaxed);
                            Verdict::Drop(DropReason::Truncated)
                        }
                    }
                }
            };
        }
        handled
    }

    /// Sends up to `budget` datagrams the endpoints queued ([`Endpoint::send_to`]), each in a
    /// spare frame from `pool` (sent through it, or held for the neighbour); returns how many
    /// left or were held. Call it every run-loop turn.
    ///
    /// [`Endpoint::send_to`]: super::Endpoint::send_to
    pub fn poll_transmit<P: FramePool>(
        &mut self,
        queue: &mut Queue,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        pool: &mut P,
        budget: usize,
    ) -> usize {
        self.refresh();
        let mut sent = 0;
        let map = self.map.clone();
        for mailbox in map.values() {
            while sent < budget {
                let Some(out) = mailbox.tx.pop() else { break };
                match send_one(queue, tables, guard, now, pool, &out) {
                    Ok(()) => {
                        mailbox.counters.sent.fetch_add(1, Ordering::Relaxed);
                        sent += 1;
                    }
                    Err(e) => {
                        mailbox.count_error(e);
                    }
                }
                mailbox.recycle_tx(out.buf);
            }
        }
        sent
    }
}

/// Routes and sends one queued datagram in a spare frame.
fn send_one<P: FramePool>(
    queue: &mut Queue,
    tables: &Tables,
    guard: &Guard,
    now: u64,
    pool: &mut P,
    out: &super::mailbox::Outgoing,
) -> Result<(), SendError> {
    let mut a = Addrs::new(out.src, out.dst)?;
    let (egress, src) = output::output_route(tables, guard, a.family, a.src, a.dst, 0)?;
    a.src = src;
    let handle = pool.alloc().ok_or(SendError::PoolEmpty)?;
    let chunk = pool.chunk(handle);
    let result = (|| {
        let end = TX_HEADROOM + out.len;
        chunk
            .get_mut(TX_HEADROOM..end)
            .ok_or(SendError::TooBig)?
            .copy_from_slice(&out.buf[..out.len]);
        let start = output::emit(chunk, TX_HEADROOM, out.len, &a, output::DEFAULT_TTL)?;
        let verdict = queue.output_frame(
            tables,
            guard,
            now,
            chunk,
            (start, end - start),
            a.family,
            &egress,
        )?;
        Ok((verdict, start, end - start))
    })();
    match result {
        Ok((Verdict::Transmit { ifindex }, start, len)) => {
            pool.send(handle, start, len, ifindex);
            Ok(())
        }
        Ok(_) => {
            pool.free(handle);
            Ok(())
        }
        Err(e) => {
            pool.free(handle);
            Err(e)
        }
    }
}

/// Turns a delivered frame into the service's answer of `len` payload bytes (already at the
/// payload's place): from the address and port it was sent to, back to its sender, routed.
#[allow(
    clippy::too_many_arguments,
    reason = "the batch's arguments and the datagram"
)]
fn answer(
    queue: &mut Queue,
    tables: &Tables,
    guard: &Guard,
    now: u64,
    frame: &mut Frame<'_>,
    d: &Datagram,
    len: usize,
    mailbox: &Mailbox,
) -> Verdict {
    let result = (|| {
        let a = Addrs::new(
            SocketAddr::new(d.dst, d.dport),
            SocketAddr::new(d.src, d.sport),
        )?;
        // A link-local sender is answered on the link it came from (its scope), as the
        // kernel's reply would take the ingress interface as the scope id.
        let egress = if d.family.is_v6() && ipv6::in_prefix(a.dst, ipv6::LINK_LOCAL) {
            Egress {
                oif: frame.ifindex,
                next_hop: a.dst,
                next_hop_family: Family::V6,
                multipath: false,
                route_mtu: None,
                source_checked: false,
            }
        } else {
            output::output_route(tables, guard, d.family, a.src, a.dst, 0)?.0
        };
        let start = output::emit(frame.chunk, d.payload, len, &a, output::REFLECTOR_TTL)?;
        let flen = d.payload + len - start;
        let verdict = queue.output_frame(
            tables,
            guard,
            now,
            frame.chunk,
            (start, flen),
            a.family,
            &egress,
        )?;
        Ok((verdict, start, flen))
    })();
    match result {
        Ok((verdict, start, flen)) => {
            mailbox.counters.sent.fetch_add(1, Ordering::Relaxed);
            if let Verdict::Transmit { .. } = verdict {
                frame.offset = start;
                frame.len = flen;
            }
            verdict
        }
        Err(e) => Verdict::Drop(mailbox.count_error(e).drop_reason()),
    }
}
