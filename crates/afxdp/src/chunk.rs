//! A frame's whole UMEM chunk, and handing a rewritten packet back to its descriptor.

use xsk_rs::{FrameDesc, Umem};

/// The whole chunk of `desc`'s frame (`frame_size` bytes: headroom, packet, tailroom) and the
/// offset of the packet's first byte in it. The packet's length is `desc.lengths().data()`.
///
/// `frame_size` is the UMEM's chunk size (a power of two); when `desc`'s address does not lie
/// in a chunk of that size (the wrong size was passed), only the data segment is returned,
/// with offset 0, which is still correct, only without headroom.
///
/// # Safety
/// The caller owns `desc`'s frame: it was consumed from an RX or completion ring of a socket
/// on `umem` (or taken from `umem`'s initial descriptors) and is on no ring now, and no other
/// reference to the frame's bytes lives while the returned slice does.
///
/// ```no_run
/// # let (umem, mut descs) = afxdp::open_umem(&afxdp::UmemOptions::default())?;
/// // SAFETY: a descriptor straight from `open_umem`: on no ring, not referenced elsewhere.
/// let (chunk, offset) = unsafe { afxdp::chunk_mut(&umem, &mut descs[0], 2048) };
/// assert_eq!((chunk.len(), offset), (2048, afxdp::XDP_PACKET_HEADROOM));
/// # Ok::<(), afxdp::Error>(())
/// ```
pub unsafe fn chunk_mut<'a>(
    umem: &'a Umem,
    desc: &'a mut FrameDesc,
    frame_size: usize,
) -> (&'a mut [u8], usize) {
    let offset = desc.addr() & frame_size.wrapping_sub(1);
    // SAFETY: the caller owns the frame (this function's contract), so xsk-rs may hand out
    // its data segment mutably.
    let mut data = unsafe { umem.data_mut(desc) };
    let capacity = data.cursor().buf_len();
    let start = data.contents_mut().as_mut_ptr();
    if !frame_size.is_power_of_two() || offset + capacity != frame_size {
        // SAFETY: `start..start + capacity` is the data segment xsk-rs just handed out for
        // `'a`, and `data` is not used again.
        return (
            unsafe { std::slice::from_raw_parts_mut(start, capacity) },
            0,
        );
    }
    // SAFETY: a UMEM is one mapping of equal chunks of `frame_size` bytes, aligned to it; the
    // data segment starts `offset` bytes into its chunk and runs to the chunk's end
    // (`offset + capacity == frame_size`, checked above), so `start - offset` is the chunk's
    // first byte and the `frame_size` bytes from there are that chunk, inside the mapping.
    // The caller owns the whole frame, headroom included, for `'a` (the descriptor stays
    // borrowed mutably that long), so nothing else reads or writes these bytes meanwhile.
    let chunk = unsafe { std::slice::from_raw_parts_mut(start.sub(offset), frame_size) };
    (chunk, offset)
}

/// How [`commit`] handed a packet to its descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// The packet starts where the descriptor's data does: only the length was set.
    InPlace,
    /// The packet's start had moved (xsk-rs cannot move a descriptor's address): its bytes
    /// were moved back to the descriptor's data start.
    Shifted,
    /// The packet does not fit between the descriptor's data start and the chunk's end (or
    /// lies outside the chunk): the descriptor is unchanged; do not send it.
    DoesNotFit,
}

/// Makes `desc` describe the `len` bytes at `offset` of its chunk (the offsets of
/// [`chunk_mut`] with the same `frame_size`), ready for a TX ring.
///
/// # Safety
/// As for [`chunk_mut`]: the caller owns `desc`'s frame and holds no other reference to it.
///
/// ```no_run
/// # let (umem, mut descs) = afxdp::open_umem(&afxdp::UmemOptions::default())?;
/// let desc = &mut descs[0];
/// // SAFETY: a descriptor straight from `open_umem`, owned here.
/// let (chunk, offset) = unsafe { afxdp::chunk_mut(&umem, desc, 2048) };
/// chunk[offset + 4..offset + 64].fill(0xab); // a packet whose first 4 bytes fell away
/// // SAFETY: as above; `chunk` is no longer used.
/// let done = unsafe { afxdp::commit(&umem, desc, 2048, offset + 4, 60) };
/// assert_eq!(done, afxdp::Commit::Shifted);
/// assert_eq!(desc.lengths().data(), 60);
/// # Ok::<(), afxdp::Error>(())
/// ```
pub unsafe fn commit(
    umem: &Umem,
    desc: &mut FrameDesc,
    frame_size: usize,
    offset: usize,
    len: usize,
) -> Commit {
    // SAFETY: this function's contract is `chunk_mut`'s.
    let (chunk, data_start) = unsafe { chunk_mut(umem, desc, frame_size) };
    let fits = offset
        .checked_add(len)
        .is_some_and(|end| end <= chunk.len())
        && data_start + len <= chunk.len();
    if !fits {
        return Commit::DoesNotFit;
    }
    let done = if offset == data_start {
        Commit::InPlace
    } else {
        chunk.copy_within(offset..offset + len, data_start);
        Commit::Shifted
    };
    // SAFETY: as above; `chunk` is no longer used.
    let mut data = unsafe { umem.data_mut(desc) };
    data.cursor().set_pos(len);
    done
}
