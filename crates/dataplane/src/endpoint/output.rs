//! The output path of locally originated UDP datagrams (the kernel's `udp_sendmsg` →
//! `ip_route_output` → `ip_finish_output2` / `ip6_finish_output2`): headers written in front
//! of the payload with full checksums, an output route lookup, the source address when the
//! endpoint has none, the egress link and the neighbour (the queue's hold buffer and a
//! resolution request while it is unresolved).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crossbeam_epoch::Guard;
use fib_trie::{Flow, Scope};

use crate::route::{self, Egress, Hop, Route};
use crate::verdict::DropReason;
use crate::wire::Family;
use crate::wire::ethernet::{ADDR_LEN, EthernetFrame, EthernetRepr, HEADER_LEN as ETH_LEN};
use crate::wire::ip::IpRepr;
use crate::wire::ipv4::{self, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Repr};
use crate::wire::l4::{UDP_HEADER_LEN, UdpRepr, protocol};
use crate::{Queue, Tables, Verdict};

/// The loopback interface's index, the input interface of output route lookups (as the
/// kernel's `flowi4_iif = LOOPBACK_IFINDEX`), which `iif lo` rules match.
pub const LOOPBACK_IFINDEX: u32 = 1;
/// The TTL / hop limit of datagrams the endpoints send (the kernel's default
/// `ip_default_ttl` and IPv6 `hop_limit`).
pub const DEFAULT_TTL: u8 = 64;
/// The TTL / hop limit of the reflector's answers (RFC 5357 §4.2: 255).
pub const REFLECTOR_TTL: u8 = 255;
/// Bytes in front of the payload the headers need at most: Ethernet, IPv6, UDP.
pub const MAX_HEADERS: usize = ETH_LEN + ipv6::HEADER_LEN + UDP_HEADER_LEN;

/// Why a datagram from an endpoint was not sent; counted per endpoint.
macro_rules! send_errors {
    ($($(#[$m:meta])* $v:ident = $label:literal,)*) => {
        /// Why a datagram from an endpoint was not sent (the kernel's `sendmsg` errno in
        /// brackets); each is counted per endpoint.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum SendError { $($(#[$m])* $v,)* }
        impl SendError {
            /// Every cause, in counter order.
            pub const ALL: &'static [SendError] = &[$(SendError::$v,)*];
            /// The number of causes.
            pub const COUNT: usize = Self::ALL.len();
            /// A stable snake_case name (a metrics label).
            pub const fn name(self) -> &'static str {
                match self { $(SendError::$v => $label,)* }
            }
        }
    };
}

send_errors! {
    /// The endpoint's transmit queue is full (`EAGAIN`).
    QueueFull = "queue_full",
    /// Larger than the endpoint's datagram buffers, or than the path MTU (`EMSGSIZE`).
    TooBig = "too_big",
    /// The endpoint is not connected and no destination was given (`EDESTADDRREQ`).
    NotConnected = "not_connected",
    /// The destination's family does not fit the endpoint (`EAFNOSUPPORT`).
    Family = "family",
    /// To one of this host's own addresses: the dataplane has no loopback.
    LocalDestination = "local_destination",
    /// No route, or an unreachable, prohibit or blackhole route (`ENETUNREACH`,
    /// `EHOSTUNREACH`, `EACCES`, `EINVAL`).
    NoRoute = "no_route",
    /// A broadcast, multicast or "kernel decides" route, or an egress interface the dataplane
    /// does not serve: only the kernel could send it.
    KernelPath = "kernel_path",
    /// The egress link is unknown, down or not Ethernet (`ENETDOWN`).
    LinkDown = "link_down",
    /// No usable source address on the egress interface (`EADDRNOTAVAIL`).
    NoSource = "no_source",
    /// The neighbour is unresolved and the hold buffer is full.
    HoldFull = "hold_full",
    /// No spare frame for the datagram.
    PoolEmpty = "pool_empty",
    /// The endpoint was closed.
    Closed = "closed",
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for SendError {}

impl SendError {
    /// The drop reason of a frame whose answer could not be sent.
    pub(crate) fn drop_reason(self) -> DropReason {
        match self {
            SendError::TooBig => DropReason::TooBig,
            SendError::NoRoute => DropReason::NoRoute,
            SendError::LinkDown => DropReason::EgressDown,
            SendError::HoldFull => DropReason::HoldFull,
            SendError::PoolEmpty => DropReason::PoolEmpty,
            _ => DropReason::Unsendable,
        }
    }
}

/// The network layer's view of a datagram to send: IPv4 or IPv6 addresses (a v4-mapped IPv6
/// address is IPv4), the source possibly unspecified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addrs {
    pub(crate) family: Family,
    pub(crate) src: u128,
    pub(crate) sport: u16,
    pub(crate) dst: u128,
    pub(crate) dport: u16,
}

impl Addrs {
    /// From socket addresses: the destination decides the family.
    pub(crate) fn new(src: SocketAddr, dst: SocketAddr) -> Result<Addrs, SendError> {
        let (family, d) = family_bits(dst.ip());
        let (src_family, s) = family_bits(src.ip());
        let s = match (family, src_family) {
            (a, b) if a == b => s,
            // An unspecified source of the other family (a dual-stack endpoint bound to `::`).
            _ if src.ip().is_unspecified() => 0,
            _ => return Err(SendError::Family),
        };
        Ok(Addrs {
            family,
            src: s,
            sport: src.port(),
            dst: d,
            dport: dst.port(),
        })
    }
}

/// `(family, bits)`: IPv4 and v4-mapped addresses as IPv4.
fn family_bits(ip: IpAddr) -> (Family, u128) {
    match ip {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => (Family::V4, u128::from(u32::from(v4))),
            None => (Family::V6, u128::from(a)),
        },
    }
}

/// The output route of a datagram: the egress and, when `src` is unspecified, the source
/// address the kernel would choose (the route's preferred source, else the egress
/// interface's address by `inet_select_addr` / RFC 6724).
///
/// # Errors
/// [`SendError::LocalDestination`], [`SendError::NoRoute`], [`SendError::KernelPath`],
/// [`SendError::NoSource`].
pub(crate) fn output_route(
    tables: &Tables,
    guard: &Guard,
    family: Family,
    src: u128,
    dst: u128,
    tos: u8,
) -> Result<(Egress, u128), SendError> {
    if route::is_local_dst(tables, guard, family, dst) {
        return Err(SendError::LocalDestination);
    }
    let egress = match route::output_lookup(tables, guard, family, src, dst, tos, LOOPBACK_IFINDEX)
    {
        Ok(e) => e,
        Err(Route::Local) => return Err(SendError::LocalDestination),
        Err(Route::Reject(_)) => return Err(SendError::NoRoute),
        Err(Route::Drop(_)) => return Err(SendError::LinkDown),
        Err(Route::Punt(_) | Route::Forward(_)) => return Err(SendError::KernelPath),
    };
    if src != 0 {
        return Ok((egress, src));
    }
    let chosen =
        if family.is_v6() {
            let prefsrc = tables
                .fib6
                .lookup(&out_flow(src, dst, tos), guard)
                .ok()
                .and_then(|r| r.alias.info.prefsrc);
            prefsrc.or_else(|| {
                tables
                    .addrs
                    .select_src_v6(egress.oif, Ipv6Addr::from(dst), guard)
                    .map(u128::from)
            })
        } else {
            let flow = out_flow(src as u32, dst as u32, tos);
            let found = tables.fib4.lookup(&flow, guard).ok();
            let prefsrc = found.as_ref().and_then(|r| r.alias.info.prefsrc);
            // `fib_result_prefsrc`: the route's preferred source, else an address of the next
            // hop's device by `inet_select_addr(dev, gateway, route scope)`.
            prefsrc.map(u128::from).or_else(|| {
                let scope = found.map_or(0, |r| r.alias.info.scope.0);
                // An IPv6 gateway (`via inet6`): `fib_info_update_nhc_saddr` passes
                // `fib_nh_gw4`, which shares its bytes with the IPv6 address (the first four).
                let gateway = (egress.next_hop != dst || egress.next_hop_family == Family::V6)
                    .then(|| match egress.next_hop_family {
                        Family::V6 => {
                            let [a, b, c, d, ..] = egress.next_hop.to_be_bytes();
                            Ipv4Addr::new(a, b, c, d)
                        }
                        Family::V4 => Ipv4Addr::from(egress.next_hop as u32),
                    });
                tables
                    .addrs
                    .select_src_v4(egress.oif, gateway, addr_table::Scope(scope), guard)
                    .map(|a| u128::from(u32::from(a)))
            })
        };
    chosen.map(|s| (egress, s)).ok_or(SendError::NoSource)
}

fn out_flow<K: Copy + Default>(src: K, dst: K, tos: u8) -> Flow<K> {
    Flow {
        dst,
        src,
        tos: tos & route::DSCP_MASK,
        iif: LOOPBACK_IFINDEX,
        oif: 0,
        mark: 0,
        scope: Scope::UNIVERSE,
    }
}

/// Writes the Ethernet (MACs left zero), IP and UDP headers in front of the `len`-byte payload
/// at `chunk[payload..]`, with the UDP checksum over the payload; returns where the frame
/// starts.
///
/// # Errors
/// [`SendError::TooBig`] when the headroom before `payload` is too small or the datagram is
/// longer than an IP packet may be.
pub(crate) fn emit(
    chunk: &mut [u8],
    payload: usize,
    len: usize,
    a: &Addrs,
    ttl: u8,
) -> Result<usize, SendError> {
    let ip_len = a.family.header_len();
    let udp_len = u16::try_from(UDP_HEADER_LEN + len).map_err(|_| SendError::TooBig)?;
    let start = payload
        .checked_sub(ETH_LEN + ip_len + UDP_HEADER_LEN)
        .ok_or(SendError::TooBig)?;
    if payload + len > chunk.len()
        || (a.family == Family::V4 && usize::from(udp_len) + ipv4::HEADER_LEN > ipv4::MAX_TOTAL_LEN)
    {
        return Err(SendError::TooBig);
    }
    let (eth, rest) = chunk[start..payload + len].split_at_mut(ETH_LEN);
    EthernetRepr {
        dst: [0; ADDR_LEN],
        src: [0; ADDR_LEN],
        ethertype: a.family.ethertype(),
        tci: None,
    }
    .emit(&mut EthernetFrame::new_unchecked(eth));
    let payload_len = usize::from(udp_len);
    let ip = match a.family {
        Family::V6 => IpRepr::Ipv6(Ipv6Repr {
            src: a.src.into(),
            dst: a.dst.into(),
            next_header: protocol::UDP,
            hop_limit: ttl,
            traffic_class: 0,
            payload_len,
        }),
        // ID 0 with DF: what the kernel sends for an unconnected UDP socket under the
        // default path-MTU discovery (`IP_PMTUDISC_WANT`).
        Family::V4 => IpRepr::Ipv4(Ipv4Repr {
            src: (a.src as u32).into(),
            dst: (a.dst as u32).into(),
            protocol: protocol::UDP,
            ttl,
            tos: 0,
            ident: 0,
            dont_frag: true,
            payload_len,
        }),
    };
    let (header, datagram) = rest.split_at_mut(ip_len);
    ip.emit(header);
    UdpRepr {
        src_port: a.sport,
        dst_port: a.dport,
    }
    .emit(datagram, &ip);
    Ok(start)
}

impl Queue {
    /// Sends a locally built frame (`chunk[start..start + len]`: an Ethernet header whose MACs
    /// are to be filled, then the IP packet) out of `egress`: the egress link's MAC as the
    /// source, the neighbour's as the destination; an unresolved neighbour holds the frame in
    /// the queue's hold buffer and asks for a resolution. Returns `Transmit` (send the frame)
    /// or `Held` (recycle the chunk).
    ///
    /// # Errors
    /// [`SendError::KernelPath`], [`SendError::LinkDown`], [`SendError::TooBig`] (larger than
    /// the path MTU: no local fragmentation), [`SendError::HoldFull`].
    #[allow(
        clippy::too_many_arguments,
        reason = "the batch's arguments, the frame and its route"
    )]
    pub(crate) fn output_frame(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        now: u64,
        chunk: &mut [u8],
        (start, len): (usize, usize),
        family: Family,
        egress: &Egress,
    ) -> Result<Verdict, SendError> {
        if route::unserved(tables, egress.oif).is_some() {
            return Err(SendError::KernelPath);
        }
        let hop = match route::complete(
            egress,
            route::link_answer(
                tables,
                guard,
                egress.next_hop_family,
                egress.oif,
                egress.next_hop,
            ),
        ) {
            Route::Forward(hop) => hop,
            _ => return Err(SendError::LinkDown),
        };
        if len - ETH_LEN > hop.mtu as usize {
            return Err(SendError::TooBig);
        }
        let frame = &mut chunk[start..start + len];
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..ETH_LEN]);
        eth.set_src_addr(hop.src_mac());
        match hop.dst_mac() {
            Some(mac) => {
                eth.set_dst_addr(mac);
                Ok(Verdict::Transmit { ifindex: hop.oif })
            }
            None => self.hold_local(frame, &hop, family, now, tables, guard),
        }
    }

    fn hold_local(
        &mut self,
        frame: &[u8],
        hop: &Hop,
        family: Family,
        now: u64,
        tables: &Tables,
        guard: &Guard,
    ) -> Result<Verdict, SendError> {
        match self
            .hold
            .hold(frame, hop, family, now, &mut self.counters, tables, guard)
        {
            Ok(()) => Ok(Verdict::Held),
            Err(_) => Err(SendError::HoldFull),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_emit_v4_and_v6_checksums_verify() {
        for (src, dst) in [
            ("192.0.2.1:862", "198.51.100.7:40000"),
            ("[2001:db8::1]:862", "[2001:db8:1::7]:40000"),
        ] {
            let a = Addrs::new(src.parse().unwrap(), dst.parse().unwrap()).unwrap();
            let mut chunk = [0u8; 256];
            let payload = 128;
            chunk[payload..payload + 5].copy_from_slice(b"hello");
            let start = emit(&mut chunk, payload, 5, &a, 64).unwrap();
            let frame = &chunk[start..payload + 5];
            let parsed = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
            let Some(etherparse::TransportSlice::Udp(udp)) = parsed.transport else {
                panic!("not UDP")
            };
            assert_eq!((udp.source_port(), udp.destination_port()), (862, 40000));
            assert_eq!(udp.payload(), b"hello");
            let ip = etherparse::IpHeaders::from_slice(&frame[14..]).unwrap().0;
            let sum = match ip {
                etherparse::IpHeaders::Ipv4(h, _) => {
                    assert_eq!(h.header_checksum, h.calc_header_checksum());
                    assert_eq!(h.time_to_live, 64);
                    udp.to_header().calc_checksum_ipv4(&h, b"hello").unwrap()
                }
                etherparse::IpHeaders::Ipv6(h, _) => {
                    udp.to_header().calc_checksum_ipv6(&h, b"hello").unwrap()
                }
            };
            assert_eq!(udp.checksum(), sum);
        }
    }

    #[test]
    fn test_emit_needs_headroom() {
        let a = Addrs::new(
            "192.0.2.1:1".parse().unwrap(),
            "192.0.2.2:2".parse().unwrap(),
        )
        .unwrap();
        let mut chunk = [0u8; 64];
        assert_eq!(emit(&mut chunk, 41, 1, &a, 64), Err(SendError::TooBig));
        assert_eq!(emit(&mut chunk, 42, 1, &a, 64), Ok(0));
        assert_eq!(emit(&mut chunk, 42, 30, &a, 64), Err(SendError::TooBig));
    }

    #[test]
    fn mapped_destinations_are_ipv4() {
        let a = Addrs::new(
            "[::]:5".parse().unwrap(),
            "[::ffff:192.0.2.9]:7".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(a.family, Family::V4);
        assert_eq!(
            (a.src, a.dst as u32),
            (0, u32::from(Ipv4Addr::new(192, 0, 2, 9)))
        );
        assert_eq!(
            Addrs::new(
                "[2001:db8::1]:5".parse().unwrap(),
                "192.0.2.9:7".parse().unwrap()
            ),
            Err(SendError::Family)
        );
    }
}
