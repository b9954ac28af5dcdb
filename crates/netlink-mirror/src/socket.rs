//! A non-blocking netlink socket: subscribe, send requests, receive batches of messages.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable,
};
use netlink_sys::{Socket, SocketAddr};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::MirrorError;

/// What one receive produced.
pub(crate) enum Recv {
    /// Some bytes (one datagram, possibly several messages) are in the buffer.
    Data,
    /// Nothing to read now.
    Empty,
    /// The kernel dropped messages for want of buffer space (`ENOBUFS`).
    Overrun,
}

/// One decoded message with the header fields the control thread needs.
pub(crate) struct Message<I> {
    pub header: NetlinkHeader,
    pub payload: NetlinkPayload<I>,
}

/// What the control thread needs of a netlink socket: send requests, receive datagrams,
/// decode them, open the socket again, wait for readiness. [`NlSocket`] is the kernel's;
/// the sync tests put a scripted kernel behind it (`control_tests`), so that the control
/// loop's handling of interrupted dumps and overruns runs without root.
pub(crate) trait NlIo: Sized {
    /// The socket's port id (the `nlmsg_pid` of replies to its requests).
    fn port(&self) -> u32;

    /// Sends `payload` as a request with `flags` (besides `NLM_F_REQUEST`); returns its
    /// sequence number.
    fn request<I: NetlinkSerializable>(&mut self, payload: I, flags: u16) -> io::Result<u32>;

    /// Sends a dump request for `payload`.
    fn dump<I: NetlinkSerializable>(&mut self, payload: I) -> io::Result<u32> {
        self.request(payload, NLM_F_DUMP)
    }

    /// Reads one datagram into the buffer.
    fn recv(&mut self) -> io::Result<Recv>;

    /// The bytes of the last datagram read.
    fn datagram(&self) -> &[u8];

    /// Decodes the messages of the last datagram; undecodable ones are reported through
    /// `bad` with their message type.
    fn messages<I: NetlinkDeserializable>(
        &self,
        each: impl FnMut(Message<I>),
        bad: impl FnMut(u16, String),
    ) {
        decode(self.datagram(), each, bad);
    }

    /// Replaces the socket by a fresh one opened the same way: the kernel forgets a dump in
    /// progress on the old one, and whatever it had queued.
    fn reopen(&mut self) -> Result<(), MirrorError>;

    /// Waits up to `timeout` until one of `socks` is readable; says which are.
    fn wait_any(socks: &[&Self], timeout: Duration) -> io::Result<Vec<bool>>;
}

/// A netlink socket of one protocol, subscribed to some groups.
pub(crate) struct NlSocket {
    sock: Socket,
    port: u32,
    seq: u32,
    buf: Vec<u8>,
    /// How it was opened, to open it again ([`NlSocket::reopen`]).
    protocol: isize,
    groups: Vec<u32>,
    rcvbuf_asked: usize,
}

/// Receive buffer for one datagram (dump parts are at most a few tens of KiB).
const RECV_BUF: usize = 1 << 20;

impl NlSocket {
    /// Opens a socket of `protocol` in the calling thread's network namespace, subscribed to
    /// `groups`, with a receive buffer of `rcvbuf` bytes (forced past `rmem_max` when allowed).
    pub fn open(protocol: isize, groups: &[u32], rcvbuf: usize) -> Result<Self, MirrorError> {
        let err = |what| move |source| MirrorError::Socket { what, source };
        let mut sock = Socket::new(protocol).map_err(err("socket"))?;
        let addr = sock.bind_auto().map_err(err("bind"))?;
        sock.set_non_blocking(true).map_err(err("non-blocking"))?;
        let size = usize::min(rcvbuf, i32::MAX as usize / 2);
        if nix::sys::socket::setsockopt(
            &sock.as_fd(),
            nix::sys::socket::sockopt::RcvBufForce,
            &size,
        )
        .is_err()
        {
            // Without CAP_NET_ADMIN: as much as rmem_max allows.
            sock.set_rx_buf_sz(size as libc::c_int)
                .map_err(err("SO_RCVBUF"))?;
        }
        for &g in groups {
            sock.add_membership(g).map_err(err("add_membership"))?;
        }
        Ok(NlSocket {
            sock,
            port: addr.port_number(),
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
            protocol,
            groups: groups.to_vec(),
            rcvbuf_asked: rcvbuf,
        })
    }

    /// The receive buffer size the kernel granted.
    pub fn rcvbuf(&self) -> usize {
        self.sock.get_rx_buf_sz().unwrap_or(0)
    }
}

impl NlIo for NlSocket {
    /// Replaces the socket by a fresh one opened the same way (in the calling thread's
    /// namespace): the kernel forgets a dump in progress on the old one, and whatever it had
    /// queued.
    fn reopen(&mut self) -> Result<(), MirrorError> {
        let fresh = NlSocket::open(self.protocol, &self.groups, self.rcvbuf_asked)?;
        let seq = self.seq;
        *self = fresh;
        self.seq = seq;
        Ok(())
    }

    /// The socket's port id (the `nlmsg_pid` of replies to its requests).
    fn port(&self) -> u32 {
        self.port
    }

    /// Sends `payload` as a request with `flags` (besides `NLM_F_REQUEST`); returns its
    /// sequence number.
    fn request<I: NetlinkSerializable>(&mut self, payload: I, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1).max(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);
        self.sock.send_to(&bytes, &SocketAddr::new(0, 0), 0)?;
        Ok(self.seq)
    }

    /// Reads one datagram into the buffer.
    fn recv(&mut self) -> io::Result<Recv> {
        self.buf.clear();
        match self.sock.recv(&mut self.buf, 0) {
            Ok(_) => Ok(Recv::Data),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Recv::Empty),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(Recv::Overrun),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Recv::Empty),
            Err(e) => Err(e),
        }
    }

    /// The bytes of the last datagram read.
    fn datagram(&self) -> &[u8] {
        &self.buf
    }

    fn wait_any(socks: &[&Self], timeout: Duration) -> io::Result<Vec<bool>> {
        poll_any(socks, timeout)
    }
}

/// Decodes the messages of one datagram `buf`; undecodable ones are reported through `bad`
/// with their message type. A length that overruns the datagram ends it.
pub(crate) fn decode<I: NetlinkDeserializable>(
    buf: &[u8],
    mut each: impl FnMut(Message<I>),
    mut bad: impl FnMut(u16, String),
) {
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if len < 16 || len > rest.len() {
            bad(
                kind,
                format!("message length {len} with {} bytes left", rest.len()),
            );
            return;
        }
        match NetlinkMessage::<I>::deserialize(&rest[..len]) {
            Ok(m) => {
                let (header, payload) = m.into_parts();
                each(Message { header, payload });
            }
            Err(e) => bad(kind, e.to_string()),
        }
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..).unwrap_or_default();
    }
}

/// Waits up to `timeout` until one of `socks` is readable; says which are.
fn poll_any(socks: &[&NlSocket], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut fds: Vec<PollFd<'_>> = socks
        .iter()
        .map(|s| PollFd::new(s.sock.as_fd(), PollFlags::POLLIN))
        .collect();
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(vec![false; socks.len()]),
        Err(e) => return Err(e.into()),
    }
    Ok(fds
        .iter()
        .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}
