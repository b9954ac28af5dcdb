//! One endpoint's bounded queues and counters, shared by the embedder's threads and every run
//! loop: received datagrams waiting to be read, datagrams waiting to be sent. Buffers are
//! allocated when the endpoint is made and then only move between a free list and a queue
//! (lock-free `ArrayQueue`s), so neither side allocates or locks per datagram.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_queue::ArrayQueue;

use super::Service;
use super::output::SendError;

/// Where a received datagram came from and went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMeta {
    /// The sender's address and port.
    pub src: SocketAddr,
    /// The address and port it was sent to (one of ours).
    pub dst: SocketAddr,
    /// The interface it came in on.
    pub ifindex: u32,
    /// When the run loop received it (the run loop's monotonic clock, nanoseconds).
    pub received_ns: u64,
    /// The datagram's length; more than was copied when the caller's buffer was shorter (the
    /// rest is lost, as with `MSG_TRUNC`).
    pub len: usize,
}

/// A received datagram in its buffer.
struct Incoming {
    buf: Box<[u8]>,
    meta: RecvMeta,
}

/// A datagram to send in its buffer.
pub(crate) struct Outgoing {
    pub(crate) buf: Box<[u8]>,
    pub(crate) len: usize,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
}

/// What an endpoint has done, copied out of its shared counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams the run loops matched to this endpoint.
    pub received: u64,
    /// Of those, dropped because the receive queue was full (the kernel's `SO_RCVBUF`
    /// overflow, `UDP_MIB_RCVBUFERRORS`).
    pub rx_queue_full: u64,
    /// Of those, dropped because they were longer than the endpoint's buffers.
    pub rx_too_big: u64,
    /// Test packets shorter than a session-sender header (reflector only).
    pub rx_malformed: u64,
    /// Datagrams sent (or held for their neighbour), answers of a service included.
    pub sent: u64,
    /// Datagrams not sent, by cause, indexed like [`SendError::ALL`].
    pub send_errors: [u64; SendError::COUNT],
}

impl EndpointStats {
    /// The count of one send error.
    pub fn send_errors_of(&self, e: SendError) -> u64 {
        self.send_errors[e as usize]
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) rx_queue_full: AtomicU64,
    pub(crate) rx_too_big: AtomicU64,
    pub(crate) rx_malformed: AtomicU64,
    pub(crate) sent: AtomicU64,
    pub(crate) send_errors: [AtomicU64; SendError::COUNT],
}

/// An endpoint's shared state.
pub(crate) struct Mailbox {
    pub(crate) service: Service,
    /// The largest datagram the buffers hold.
    size: usize,
    free: ArrayQueue<Box<[u8]>>,
    rx: ArrayQueue<Incoming>,
    tx_free: ArrayQueue<Box<[u8]>>,
    pub(crate) tx: ArrayQueue<Outgoing>,
    /// Local address and peer: read by `send`/`send_to` (the embedder's calls), written by
    /// bind and connect.
    pub(crate) addrs: Mutex<(SocketAddr, Option<SocketAddr>)>,
    pub(crate) counters: Counters,
}

impl Mailbox {
    /// Queues of `depth` buffers of `size` bytes each way (a service needs none).
    pub(crate) fn new(service: Service, depth: usize, size: usize, local: SocketAddr) -> Self {
        let depth = if matches!(service, Service::Socket) {
            depth.max(1)
        } else {
            1
        };
        let size = if matches!(service, Service::Socket) {
            size
        } else {
            0
        };
        let fill = |q: &ArrayQueue<Box<[u8]>>| {
            for _ in 0..depth {
                let _ = q.push(vec![0; size].into_boxed_slice());
            }
        };
        let (free, tx_free) = (ArrayQueue::new(depth), ArrayQueue::new(depth));
        fill(&free);
        fill(&tx_free);
        Mailbox {
            service,
            size,
            free,
            rx: ArrayQueue::new(depth),
            tx_free,
            tx: ArrayQueue::new(depth),
            addrs: Mutex::new((local, None)),
            counters: Counters::default(),
        }
    }

    /// A run loop's delivery: copies `payload` into a free buffer and queues it; counted.
    pub(crate) fn deliver(&self, payload: &[u8], meta: RecvMeta) {
        self.counters.received.fetch_add(1, Relaxed);
        let Some(mut buf) = self.free.pop() else {
            self.counters.rx_queue_full.fetch_add(1, Relaxed);
            return;
        };
        if payload.len() > buf.len() {
            self.counters.rx_too_big.fetch_add(1, Relaxed);
            let _ = self.free.push(buf);
            return;
        }
        buf[..payload.len()].copy_from_slice(payload);
        // Cannot fail: as many buffers as queue slots exist.
        let _ = self.rx.push(Incoming { buf, meta });
    }

    /// The embedder's read: the next datagram copied into `out`.
    pub(crate) fn recv(&self, out: &mut [u8]) -> Option<(usize, RecvMeta)> {
        let Incoming { buf, meta } = self.rx.pop()?;
        let n = meta.len.min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        let _ = self.free.push(buf);
        Some((n, meta))
    }

    /// The embedder's send: copies `payload` into a free transmit buffer and queues it for the
    /// run loops.
    pub(crate) fn queue_send(
        &self,
        payload: &[u8],
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Result<(), SendError> {
        if payload.len() > self.size {
            return Err(self.count_error(SendError::TooBig));
        }
        let Some(mut buf) = self.tx_free.pop() else {
            return Err(self.count_error(SendError::QueueFull));
        };
        buf[..payload.len()].copy_from_slice(payload);
        let _ = self.tx.push(Outgoing {
            buf,
            len: payload.len(),
            src,
            dst,
        });
        Ok(())
    }

    /// Gives a transmit buffer back once its datagram left.
    pub(crate) fn recycle_tx(&self, buf: Box<[u8]>) {
        let _ = self.tx_free.push(buf);
    }

    /// Counts a send error and returns it.
    pub(crate) fn count_error(&self, e: SendError) -> SendError {
        self.counters.send_errors[e as usize].fetch_add(1, Relaxed);
        e
    }

    pub(crate) fn stats(&self) -> EndpointStats {
        let c = &self.counters;
        EndpointStats {
            received: c.received.load(Relaxed),
            rx_queue_full: c.rx_queue_full.load(Relaxed),
            rx_too_big: c.rx_too_big.load(Relaxed),
            rx_malformed: c.rx_malformed.load(Relaxed),
            sent: c.sent.load(Relaxed),
            send_errors: std::array::from_fn(|i| c.send_errors[i].load(Relaxed)),
        }
    }

    pub(crate) fn local(&self) -> SocketAddr {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}
