//! The few rtnetlink requests the binary makes itself (no `ip` at run time): read one link
//! (index, MAC, flags, the XDP program attached), bring a link up, detach an XDP program.
//!
//! Each call opens its own `NETLINK_ROUTE` socket in the calling thread's network namespace,
//! sends one request with `NLM_F_ACK` and reads until the kernel's answer for that sequence
//! number; a kernel error comes back as the `io::Error` of its errno. These run at start-up and
//! shutdown only, never per packet.
#![forbid(unsafe_code)]

use std::io;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkFlags, LinkMessage, LinkXdp, XdpAttached,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// `XDP_FLAGS_SKB_MODE` and `XDP_FLAGS_DRV_MODE` (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// How an XDP program is attached to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (native).
    Driver,
    /// Generic (skb) mode.
    Generic,
    /// Offloaded to the NIC.
    Hardware,
    /// Several programs in different modes.
    Multiple,
}

/// The XDP attachment of a link, as `RTM_GETLINK` reports it (`IFLA_XDP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpState {
    /// The attachment mode.
    pub mode: XdpMode,
    /// The program's id (with several programs, the first one reported).
    pub prog_id: u32,
}

/// What the binary needs to know about one link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    /// The interface index.
    pub index: u32,
    /// The hardware address, when the link has a 6-byte one.
    pub mac: Option<[u8; 6]>,
    /// Whether the link is administratively up.
    pub up: bool,
    /// The attached XDP program, if any.
    pub xdp: Option<XdpState>,
}

impl LinkState {
    /// Reads the link state out of an `RTM_NEWLINK` message.
    ///
    /// ```
    /// use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkXdp, XdpAttached};
    /// use forwarder::rtnl::{LinkState, XdpMode, XdpState};
    ///
    /// let mut message = LinkMessage::default();
    /// message.header.index = 7;
    /// message.attributes = vec![
    ///     LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9]),
    ///     LinkAttribute::Xdp(vec![LinkXdp::Attached(XdpAttached::Driver), LinkXdp::ProgId(42)]),
    /// ];
    /// let state = LinkState::from_message(&message);
    /// assert_eq!(state.mac, Some([2, 0, 0, 0, 0, 9]));
    /// assert_eq!(state.xdp, Some(XdpState { mode: XdpMode::Driver, prog_id: 42 }));
    /// ```
    pub fn from_message(message: &LinkMessage) -> LinkState {
        let mut state = LinkState {
            index: message.header.index,
            mac: None,
            up: message.header.flags.contains(LinkFlags::Up),
            xdp: None,
        };
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::Address(bytes) => state.mac = bytes.as_slice().try_into().ok(),
                LinkAttribute::Xdp(nlas) => state.xdp = xdp_state(nlas),
                _ => {}
            }
        }
        state
    }
}

fn xdp_state(nlas: &[LinkXdp]) -> Option<XdpState> {
    let mut mode = None;
    let (mut any, mut first) = (None, None);
    for nla in nlas {
        match nla {
            LinkXdp::Attached(attached) => {
                mode = match attached {
                    XdpAttached::None => return None,
                    XdpAttached::Driver => Some(XdpMode::Driver),
                    XdpAttached::SocketBuffer => Some(XdpMode::Generic),
                    XdpAttached::Hardware => Some(XdpMode::Hardware),
                    XdpAttached::Multiple | XdpAttached::Other(_) => Some(XdpMode::Multiple),
                    _ => Some(XdpMode::Multiple),
                }
            }
            LinkXdp::ProgId(id) => any = Some(*id),
            LinkXdp::DrvProgId(id) | LinkXdp::SkbProgId(id) | LinkXdp::HwProgId(id) => {
                first = first.or(Some(*id));
            }
            _ => {}
        }
    }
    Some(XdpState {
        mode: mode?,
        prog_id: any.or(first)?,
    })
}

/// The link named `name` in the calling thread's namespace.
///
/// # Errors
/// `NotFound` (`ENODEV`) when there is no such link, or the socket's error.
pub fn link(name: &str) -> io::Result<LinkState> {
    let mut message = LinkMessage::default();
    message.attributes = vec![
        LinkAttribute::IfName(name.to_owned()),
        // Keep the answer small: no VF or statistics blocks.
        LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]),
    ];
    let mut found = None;
    request(RouteNetlinkMessage::GetLink(message), |reply| {
        if let RouteNetlinkMessage::NewLink(link) = reply {
            found = Some(LinkState::from_message(&link));
        }
    })?;
    found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no link {name}")))
}

/// Sets `IFF_UP` on the link with index `index` (`ip link set dev DEV up`).
///
/// # Errors
/// The kernel's error (`EPERM` without `CAP_NET_ADMIN`, `ENODEV`).
pub fn set_up(index: u32) -> io::Result<()> {
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.header.flags = LinkFlags::Up;
    message.header.change_mask = LinkFlags::Up;
    request(RouteNetlinkMessage::SetLink(message), |_| {})
}

/// Detaches the XDP program of `mode` from the link `index` (`ip link set dev DEV xdp off`,
/// or `xdpgeneric off` for [`XdpMode::Generic`]).
///
/// # Errors
/// The kernel's error (`EPERM` without `CAP_NET_ADMIN`, `EBUSY` when the program is attached
/// through a BPF link that only its owner can release).
pub fn detach_xdp(index: u32, mode: XdpMode) -> io::Result<()> {
    let mut nlas = vec![LinkXdp::Fd(-1)];
    match mode {
        XdpMode::Driver => nlas.push(LinkXdp::Flags(XDP_FLAGS_DRV_MODE)),
        XdpMode::Generic => nlas.push(LinkXdp::Flags(XDP_FLAGS_SKB_MODE)),
        XdpMode::Hardware | XdpMode::Multiple => {}
    }
    let mut message = LinkMessage::default();
    message.header.index = index;
    message.attributes = vec![LinkAttribute::Xdp(nlas)];
    request(RouteNetlinkMessage::SetLink(message), |_| {})
}

/// Sends `payload` as a dump request (`NLM_F_DUMP`) and hands each object of the answer to
/// `each`; a part of the answer the crate cannot decode is handed over as its raw bytes
/// (`Err`), so that the caller can still tell it was there.
///
/// # Errors
/// The socket's or the kernel's error (`EINVAL` for a request the kernel does not know).
pub fn dump(
    payload: RouteNetlinkMessage,
    each: impl FnMut(Result<RouteNetlinkMessage, &[u8]>),
) -> io::Result<()> {
    exchange(payload, NLM_F_REQUEST | NLM_F_DUMP, each)
}

/// Sends `payload` with `NLM_F_ACK` and hands each reply for it to `each` until the ack.
fn request(
    payload: RouteNetlinkMessage,
    mut each: impl FnMut(RouteNetlinkMessage),
) -> io::Result<()> {
    exchange(payload, NLM_F_REQUEST | NLM_F_ACK, |reply| {
        // The requests of this module are answered by objects the crate decodes; anything
        // else is not what was asked for.
        if let Ok(inner) = reply {
            each(inner);
        }
    })
}

/// Sends `payload` with `flags` and hands each reply for it to `each` until the ack or the
/// end of the dump.
fn exchange(
    payload: RouteNetlinkMessage,
    flags: u16,
    mut each: impl FnMut(Result<RouteNetlinkMessage, &[u8]>),
) -> io::Result<()> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = 1;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    socket.send(&bytes, 0)?;

    let mut buffer = Vec::with_capacity(64 * 1024);
    loop {
        buffer.clear();
        socket.recv(&mut buffer, 0)?;
        let mut rest = &buffer[..];
        while rest.len() >= 16 {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            if len < 16 || len > rest.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink message of {len} bytes with {} left", rest.len()),
                ));
            }
            let bytes = &rest[..len];
            rest = rest.get((len + 3) & !3..).unwrap_or_default();
            let reply = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) {
                Ok(reply) => reply,
                // An object netlink-packet-route cannot decode (an attribute it parses
                // strictly): the caller sees its bytes, header and all.
                Err(_) if is_ours_and_an_object(bytes) => {
                    each(Err(bytes));
                    continue;
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            };
            if reply.header.sequence_number != 1 {
                continue;
            }
            match reply.payload {
                NetlinkPayload::InnerMessage(inner) => each(Ok(inner)),
                NetlinkPayload::Error(error) => {
                    return match error.code {
                        None => Ok(()), // the ack
                        Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                    };
                }
                NetlinkPayload::Done(_) => return Ok(()),
                _ => {}
            }
        }
    }
}

/// A message of this exchange (sequence number 1) that is neither an error nor the end of a
/// dump: an object of the answer.
fn is_ours_and_an_object(bytes: &[u8]) -> bool {
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
    let sequence = u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    sequence == 1 && kind != NLMSG_ERROR && kind != NLMSG_DONE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_xdp_attachments() {
        assert_eq!(xdp_state(&[LinkXdp::Attached(XdpAttached::None)]), None);
        assert_eq!(
            xdp_state(&[
                LinkXdp::Attached(XdpAttached::SocketBuffer),
                LinkXdp::ProgId(5)
            ]),
            Some(XdpState {
                mode: XdpMode::Generic,
                prog_id: 5
            })
        );
        // Several programs: no ProgId, one id per mode.
        assert_eq!(
            xdp_state(&[
                LinkXdp::Attached(XdpAttached::Multiple),
                LinkXdp::SkbProgId(9),
                LinkXdp::DrvProgId(8),
            ]),
            Some(XdpState {
                mode: XdpMode::Multiple,
                prog_id: 9
            })
        );
    }

    #[test]
    fn reads_the_loopback_link() {
        // Every namespace has `lo`, index 1 in a fresh one; no privileges needed to read it.
        let lo = link("lo").expect("reading lo");
        assert!(lo.index > 0);
        assert_eq!(lo.xdp, None);
        let missing = link("xfwd-no-such0").unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENODEV), "{missing}");
    }
}
