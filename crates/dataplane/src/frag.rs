//! IPv4 fragmentation in place of the kernel's `ip_fragment`, into spare frames.

use crate::pool::FramePool;
use crate::verdict::DropReason;
use crate::wire::ethernet;
use crate::wire::ipv4::{self, DF, FRAGMENT_UNIT, Ipv4Packet, MF, OFFSET_MASK, copied_options};

/// The smallest MTU an IPv4 link may have (RFC 791): 60 bytes of header and 8 of data.
pub const MIN_V4_MTU: u32 = 68;

/// Sends `frame` (an untagged Ethernet header with its final MACs, then a valid IPv4 packet of
/// `ip_len` bytes whose TTL is already decremented) as fragments of at most `mtu` bytes of IP
/// out of `oif`, each in a spare frame from `pool`. The first fragment keeps every option,
/// the others only those with the copy flag; each fragment's data except the last is a
/// multiple of 8 bytes; MF is set on all but the last, which keeps the original's MF (the
/// packet may itself be a fragment). Returns the number of fragments sent.
///
/// # Errors
/// [`DropReason::BadMtu`] below 68 bytes (or too small for the header's options),
/// [`DropReason::PoolEmpty`] when the pool runs out or hands out a chunk too small (fragments
/// already sent stay sent: the receiver's reassembly times them out).
pub fn fragment_v4<P: FramePool>(
    frame: &[u8],
    ip_len: usize,
    mtu: u32,
    oif: u32,
    pool: &mut P,
) -> Result<usize, DropReason> {
    let l2 = ethernet::HEADER_LEN;
    let ip = Ipv4Packet::new_unchecked(&frame[l2..l2 + ip_len]);
    let hlen = ip.header_len();
    let mtu = usize::try_from(mtu)
        .unwrap_or(usize::MAX)
        .min(ipv4::MAX_TOTAL_LEN);
    if mtu < MIN_V4_MTU as usize || mtu < hlen + FRAGMENT_UNIT {
        return Err(DropReason::BadMtu);
    }
    let mut later_options = [0u8; ipv4::MAX_OPTIONS_LEN];
    let later_opts_len = copied_options(ip.options(), &mut later_options);
    let later_hlen = ipv4::HEADER_LEN + later_opts_len;
    let word = ip.flags_offset();
    let base = usize::from(word & OFFSET_MASK) * FRAGMENT_UNIT;
    let last_mf = word & MF != 0;
    let payload = ip.payload();

    let mut sent = 0;
    let mut pos = 0;
    while pos < payload.len() || (pos == 0 && payload.is_empty()) {
        let first = pos == 0;
        let this_hlen = if first { hlen } else { later_hlen };
        let room = (mtu - this_hlen) / FRAGMENT_UNIT * FRAGMENT_UNIT;
        let n = (payload.len() - pos).min(room);
        let last = pos + n == payload.len();
        let total = l2 + this_hlen + n;
        let Some(handle) = pool.alloc() else {
            return Err(DropReason::PoolEmpty);
        };
        let chunk = pool.chunk(handle);
        if chunk.len() < total {
            pool.free(handle);
            return Err(DropReason::PoolEmpty);
        }
        // The fragment: the Ethernet header, the IP header (every option in the first, the
        // copied ones in the others), then its share of the payload.
        let (eth, packet) = chunk[..total].split_at_mut(l2);
        eth.copy_from_slice(&frame[..l2]);
        let (header, data) = packet.split_at_mut(this_hlen);
        if first {
            header.copy_from_slice(&ip.packet()[..hlen]);
        } else {
            let (fixed, options) = header.split_at_mut(ipv4::HEADER_LEN);
            fixed.copy_from_slice(&ip.packet()[..ipv4::HEADER_LEN]);
            options.copy_from_slice(&later_options[..later_opts_len]);
        }
        data.copy_from_slice(&payload[pos..pos + n]);
        {
            let mut h = Ipv4Packet::new_unchecked(header);
            h.set_version_header_len(this_hlen);
            h.set_total_len((this_hlen + n) as u16);
            let mf = if last { last_mf } else { true };
            let offset = (((base + pos) / FRAGMENT_UNIT) as u16) & OFFSET_MASK;
            h.set_flags_offset(
                (word & !(DF | MF | OFFSET_MASK)) | if mf { MF } else { 0 } | offset,
            );
            h.fill_checksum();
        }
        pool.send(handle, 0, total, oif);
        sent += 1;
        pos += n;
        if n == 0 {
            break;
        }
    }
    Ok(sent)
}
