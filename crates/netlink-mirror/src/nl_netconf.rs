//! Per-device configuration messages (`RTM_NEWNETCONF`, `RTM_DELNETCONF`, `RTM_GETNETCONF`;
//! `struct netconfmsg` and the `NETCONFA_*` attributes of include/uapi/linux/netconf.h), which
//! netlink-packet-route 0.34 does not have, written in that crate's style (an attribute enum
//! implementing `Nla` and `Parseable<NlaBuffer>`, a message implementing `Emitable` and
//! `Parseable`) so it can be upstreamed as its `netconf` module.
//!
//! ```
//! use netlink_mirror::nl_netconf::{NetconfAttribute, NetconfMessage};
//! use netlink_packet_core::{Emitable, Parseable};
//!
//! let m = NetconfMessage {
//!     family: libc::AF_INET as u8,
//!     attributes: vec![NetconfAttribute::Ifindex(3), NetconfAttribute::Forwarding(1)],
//! };
//! let mut bytes = vec![0; m.buffer_len()];
//! m.emit(&mut bytes);
//! assert_eq!(NetconfMessage::parse(&bytes[..]).unwrap(), m);
//! ```
#![forbid(unsafe_code)]

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, ErrorContext, Nla, NlaBuffer, NlasIterator, Parseable,
    emit_u32, parse_u32,
};

/// `RTM_NEWNETCONF`.
pub const RTM_NEWNETCONF: u16 = 80;
/// `RTM_DELNETCONF`.
pub const RTM_DELNETCONF: u16 = 81;
/// `RTM_GETNETCONF`.
pub const RTM_GETNETCONF: u16 = 82;
/// `RTNLGRP_IPV4_NETCONF`.
pub const RTNLGRP_IPV4_NETCONF: u32 = 24;
/// `RTNLGRP_IPV6_NETCONF`.
pub const RTNLGRP_IPV6_NETCONF: u32 = 25;

const NETCONFA_IFINDEX: u16 = 1;
const NETCONFA_FORWARDING: u16 = 2;
const NETCONFA_RP_FILTER: u16 = 3;

/// `struct netconfmsg` (one family byte), padded to the netlink alignment.
const NETCONF_HEADER_LEN: usize = 4;

/// A netconf attribute.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum NetconfAttribute {
    /// `NETCONFA_IFINDEX`: a device, or -1 (`all`), -2 (`default`).
    Ifindex(i32),
    /// `NETCONFA_FORWARDING`.
    Forwarding(i32),
    /// `NETCONFA_RP_FILTER` (IPv4).
    RpFilter(i32),
    /// Anything else (`mc_forwarding`, `proxy_neigh`, ...).
    Other(DefaultNla),
}

impl Nla for NetconfAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::Ifindex(_) | Self::Forwarding(_) | Self::RpFilter(_) => 4,
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Ifindex(_) => NETCONFA_IFINDEX,
            Self::Forwarding(_) => NETCONFA_FORWARDING,
            Self::RpFilter(_) => NETCONFA_RP_FILTER,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::Ifindex(v) | Self::Forwarding(v) | Self::RpFilter(v) => {
                emit_u32(buffer, *v as u32).expect("a 4-byte value");
            }
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for NetconfAttribute {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let payload = buf.value();
        let int = |what: &'static str| -> Result<i32, DecodeError> {
            Ok(parse_u32(payload).context(what)? as i32)
        };
        Ok(match buf.kind() {
            NETCONFA_IFINDEX => Self::Ifindex(int("invalid NETCONFA_IFINDEX")?),
            NETCONFA_FORWARDING => Self::Forwarding(int("invalid NETCONFA_FORWARDING")?),
            NETCONFA_RP_FILTER => Self::RpFilter(int("invalid NETCONFA_RP_FILTER")?),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// A netconf message: the family and the attributes.
#[derive(Debug, PartialEq, Eq, Clone, Default)]
pub struct NetconfMessage {
    /// `ncm_family` (`AF_INET`, `AF_INET6`).
    pub family: u8,
    /// The attributes.
    pub attributes: Vec<NetconfAttribute>,
}

impl Emitable for NetconfMessage {
    fn buffer_len(&self) -> usize {
        NETCONF_HEADER_LEN + self.attributes.as_slice().buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        buffer[..NETCONF_HEADER_LEN].fill(0);
        buffer[0] = self.family;
        self.attributes
            .as_slice()
            .emit(&mut buffer[NETCONF_HEADER_LEN..]);
    }
}

impl Parseable<[u8]> for NetconfMessage {
    fn parse(buf: &[u8]) -> Result<Self, DecodeError> {
        let Some(&family) = buf.first() else {
            return Err(DecodeError::from("netconfmsg too short"));
        };
        let attributes = NlasIterator::new(buf.get(NETCONF_HEADER_LEN..).unwrap_or_default())
            .map(|nla| NetconfAttribute::parse(&nla?))
            .collect::<Result<_, _>>()
            .context("failed to parse netconf message NLAs")?;
        Ok(NetconfMessage { family, attributes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse() {
        // `net.ipv4.conf.all` as the kernel dumps it: family, pad, IFINDEX -1, FORWARDING 1,
        // RP_FILTER 2.
        let mut b = vec![2u8, 0, 0, 0];
        for (kind, v) in [(1u16, -1i32), (2, 1), (3, 2)] {
            b.extend_from_slice(&8u16.to_ne_bytes());
            b.extend_from_slice(&kind.to_ne_bytes());
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let m = NetconfMessage::parse(&b[..]).unwrap();
        assert_eq!(m.family, 2);
        assert_eq!(
            m.attributes,
            [
                NetconfAttribute::Ifindex(-1),
                NetconfAttribute::Forwarding(1),
                NetconfAttribute::RpFilter(2)
            ]
        );
    }

    #[test]
    fn test_impossible_len() {
        assert!(NetconfMessage::parse(&[][..]).is_err());
        assert!(NetconfMessage::parse(&[2u8, 0, 0, 0, 8, 0, 1, 0, 1][..]).is_err());
        // Only the header: no attributes.
        assert_eq!(
            NetconfMessage::parse(&[10u8][..]).unwrap().attributes,
            Vec::new()
        );
    }
}
