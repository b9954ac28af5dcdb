//! The punt path: frames that reached user space but belong to the kernel's stack are
//! written into a TAP device, from which the kernel receives them as if they had arrived on
//! a link of their own.
//!
//! Design and limits (see also `docs/forwarder.md`):
//! - One TAP device per xfwd instance (default `xfwd-punt`), created in the forwarder's
//!   namespace, up, without addresses; every run loop writes to the same descriptor (a
//!   `write(2)` of one frame is atomic on a TAP).
//! - The destination MAC is rewritten to the TAP's own MAC, otherwise the kernel would see a
//!   frame for another host and drop it.
//! - The kernel sees the TAP as the ingress interface, not the original one: reverse-path
//!   filtering must be off or loose for it (xfwd sets `rp_filter = 0` on the TAP; the
//!   effective value is the maximum of `all` and the device's), and anything keyed by ingress
//!   interface (policy routing `iif`, netfilter `-i`, link-local scope) sees the TAP.
//! - Replies leave through the kernel's ordinary route and do not come back through xfwd:
//!   replies on the forwarder's own links go out directly.
//! - One `write(2)` per punted frame: the punt path is a slow path, rate bounded by the
//!   caller's engine, not a way to forward in bulk.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;

use anyhow::{Context, bail};
use dataplane::wire::ethernet::{self, EthernetFrame};

use crate::rtnl;

pub use xfwd_config::{DEFAULT_PUNT_DEVICE, parse_mac};

/// An open TAP device.
#[derive(Debug)]
pub struct Punt {
    file: File,
    name: String,
    mac: [u8; 6],
}

impl Punt {
    /// Creates (or attaches to) the TAP device `name` in the calling thread's namespace,
    /// brings it up and turns reverse-path filtering off on it.
    ///
    /// # Errors
    /// When /dev/net/tun cannot be opened, the name is invalid, or a netlink request fails.
    pub fn open(name: &str) -> anyhow::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            bail!(
                "punt device name {name:?} must have 1..{} bytes",
                libc::IFNAMSIZ
            );
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .context("opening /dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid value to fill in.
        let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in request.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which `request` is; the descriptor is
        // open for the call's duration.
        let result = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) };
        if result < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("creating TAP device {name}"));
        }
        // Through rtnetlink, not `ip`: no iproute2 at run time.
        let link = rtnl::link(name).with_context(|| format!("reading TAP device {name}"))?;
        rtnl::set_up(link.index).with_context(|| format!("bringing TAP device {name} up"))?;
        let _ = std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/rp_filter"), "0");
        let _ = std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/accept_local"), "1");
        let mac = link
            .mac
            .with_context(|| format!("TAP device {name} has no MAC address"))?;
        Ok(Punt {
            file,
            name: name.to_owned(),
            mac,
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device's MAC (written as destination of punted frames).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Hands one frame to the kernel; rewrites its destination MAC first.
    ///
    /// # Errors
    /// When the frame is shorter than an Ethernet header or the write fails.
    pub fn inject(&self, frame: &mut [u8]) -> std::io::Result<()> {
        if frame.len() < ethernet::HEADER_LEN {
            return Err(std::io::Error::other("runt frame"));
        }
        EthernetFrame::new_unchecked(&mut frame[..]).set_dst_addr(self.mac);
        (&self.file).write_all(frame)
    }
}
