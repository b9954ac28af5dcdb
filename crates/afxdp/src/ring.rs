//! The system calls around the rings: TX kicks, fill-ring wakeups, sleeping until a socket is
//! readable, busy polling, and the kernel's per-socket statistics.

use std::os::fd::AsRawFd;

use xsk_rs::socket::Fd;
use xsk_rs::{FillQueue, RxQueue, TxQueue};

use crate::Error;

/// Kicks the kernel to send what the TX ring holds (`sendto` with no data), when the ring
/// asks for it (`need_wakeup`); `Ok(true)` when a kick was made. Copy mode sends at most 32
/// frames per kick, so call it on every turn while frames are in flight. Transient errors
/// (`ENOBUFS`, `EAGAIN`, `EBUSY`, `ENETDOWN`) only mean "try again later" and count as a kick.
///
/// # Errors
/// Any other error of `sendto` (the socket itself is broken).
pub fn kick_tx(tx: &TxQueue) -> std::io::Result<bool> {
    if !tx.needs_wakeup() {
        return Ok(false);
    }
    tx.wakeup()?;
    Ok(true)
}

/// Wakes the kernel to take buffers from the fill ring (a zero-timeout `poll` on the socket),
/// when the fill ring asks for it; true when a wakeup was made. `rx` is the RX ring of the
/// socket that owns the fill ring.
pub fn wake_fill(fill: &FillQueue, rx: &RxQueue) -> bool {
    if !fill.needs_wakeup() {
        return false;
    }
    let mut pollfd = libc::pollfd {
        fd: rx.fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pollfd` is one valid, initialised pollfd; poll(2) writes only its `revents`.
    unsafe { libc::poll(&mut pollfd, 1, 0) };
    true
}

/// Sleeps until one of `fds` is readable or `timeout_ms` passed (0: do not sleep); returns
/// how many are readable (0 on timeout or error: the caller just looks at its rings again).
/// Negative descriptors are skipped (poll(2)'s convention: negate a descriptor to leave it
/// out).
pub fn wait_readable(fds: &mut [libc::pollfd], timeout_ms: i32) -> usize {
    for pollfd in fds.iter_mut() {
        pollfd.events = libc::POLLIN;
    }
    // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfds; poll(2) writes only
    // their `revents`.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    usize::try_from(ready).unwrap_or(0)
}

/// A pollfd that waits for `rx`'s socket to become readable, for [`wait_readable`].
pub fn pollfd(rx: &RxQueue) -> libc::pollfd {
    libc::pollfd {
        fd: rx.fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Turns on busy polling for a socket (Linux 5.11+): `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`
/// (`usecs`) and `SO_BUSY_POLL_BUDGET` (`budget` packets).
///
/// # Errors
/// [`Error::SocketOption`] naming the option the kernel refused.
pub fn set_busy_poll(fd: &impl AsRawFd, usecs: i32, budget: i32) -> Result<(), Error> {
    const SO_PREFER_BUSY_POLL: libc::c_int = 69;
    const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
    for (name, option, value) in [
        ("SO_PREFER_BUSY_POLL", SO_PREFER_BUSY_POLL, 1),
        ("SO_BUSY_POLL", libc::SO_BUSY_POLL, usecs),
        ("SO_BUSY_POLL_BUDGET", SO_BUSY_POLL_BUDGET, budget),
    ] {
        let value: libc::c_int = value;
        // SAFETY: setsockopt reads one c_int from `value`, whose size is passed; the
        // descriptor is borrowed for the call.
        let result = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result < 0 {
            return Err(Error::SocketOption {
                option: name,
                source: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// A socket's `XDP_STATISTICS`: the kernel's counts of what it could not deliver or send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Frames dropped for other reasons than a full ring (`rx_dropped`).
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when the kernel needed a buffer.
    pub rx_fill_ring_empty: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty: u64,
}

/// Reads a socket's `XDP_STATISTICS` (one `getsockopt`) through the descriptor of any of its
/// rings (`rx.fd()`, `tx.fd()`); `None` when the kernel refuses (the interface is gone).
pub fn statistics(fd: &Fd) -> Option<Statistics> {
    let s = fd.xdp_statistics().ok()?;
    Some(Statistics {
        rx_dropped: s.rx_dropped(),
        rx_ring_full: s.rx_ring_full(),
        rx_fill_ring_empty: s.rx_fill_ring_empty_descs(),
        rx_invalid_descs: s.rx_invalid_descs(),
        tx_invalid_descs: s.tx_invalid_descs(),
        tx_ring_empty: s.tx_ring_empty_descs(),
    })
}
