//! Whole-chunk access and commits on a real UMEM (registering one needs CAP_NET_RAW: root).

use afxdp::{Commit, UmemOptions, XDP_PACKET_HEADROOM, chunk_mut, commit, open_umem};

/// A small UMEM, or `None` (test skipped) without the privilege, unless `CI=true`.
fn umem(frame_size: u32) -> Option<(afxdp::Umem, Vec<afxdp::FrameDesc>)> {
    let options = UmemOptions {
        frame_size,
        frames: 8,
        fill_ring: 8,
        comp_ring: 8,
    };
    match open_umem(&options) {
        Ok(pair) => Some(pair),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: no UMEM without CAP_NET_RAW ({e})");
            None
        }
        Err(e) => panic!("CI=true: a UMEM is needed: {e}"),
    }
}

#[test]
fn chunk_is_the_whole_frame_with_the_xdp_headroom_as_offset() {
    for frame_size in [2048u32, 4096] {
        let Some((umem, mut descs)) = umem(frame_size) else {
            return;
        };
        let size = frame_size as usize;
        for (i, desc) in descs.iter_mut().enumerate() {
            // SAFETY: descriptors straight from `open_umem`: on no ring, owned by this test.
            let (chunk, offset) = unsafe { chunk_mut(&umem, desc, size) };
            assert_eq!((chunk.len(), offset), (size, XDP_PACKET_HEADROOM));
            chunk.fill(i as u8);
        }
        // Each chunk is its own: no two overlap, and the data segment is the chunk's tail.
        for (i, desc) in descs.iter_mut().enumerate() {
            // SAFETY: as above.
            let data = unsafe { umem.data_mut(desc) }.contents_mut().as_mut_ptr();
            // SAFETY: as above.
            let (chunk, offset) = unsafe { chunk_mut(&umem, desc, size) };
            assert!(chunk.iter().all(|b| *b == i as u8), "chunk {i} overwritten");
            assert_eq!(chunk[offset..].as_mut_ptr(), data);
        }
    }
}

#[test]
fn a_wrong_frame_size_gives_the_data_segment_only() {
    let Some((umem, mut descs)) = umem(4096) else {
        return;
    };
    // SAFETY: a descriptor straight from `open_umem`, owned by this test.
    let (chunk, offset) = unsafe { chunk_mut(&umem, &mut descs[1], 2048) };
    assert_eq!((chunk.len(), offset), (4096 - XDP_PACKET_HEADROOM, 0));
    // SAFETY: as above.
    let (chunk, offset) = unsafe { chunk_mut(&umem, &mut descs[1], 3000) };
    assert_eq!((chunk.len(), offset), (4096 - XDP_PACKET_HEADROOM, 0));
}

#[test]
fn commit_sets_the_length_and_moves_a_moved_packet_back() {
    let Some((umem, mut descs)) = umem(2048) else {
        return;
    };
    let desc = &mut descs[0];
    let packet: Vec<u8> = (0..100u8).collect();
    // In place: the packet where the kernel put it.
    // SAFETY: a descriptor straight from `open_umem`, owned by this test; each slice below
    // is dropped before the next call borrows the descriptor again.
    let (chunk, offset) = unsafe { chunk_mut(&umem, desc, 2048) };
    chunk[offset..offset + 100].copy_from_slice(&packet);
    // SAFETY: as above.
    let done = unsafe { commit(&umem, desc, 2048, offset, 100) };
    assert_eq!(done, Commit::InPlace);
    assert_eq!(desc.lengths().data(), 100);
    // SAFETY: as above.
    assert_eq!(unsafe { umem.data_mut(desc) }.contents(), &packet[..]);

    // A tag fell away at the front: the rest moves back to the data start.
    // SAFETY: as above.
    let done = unsafe { commit(&umem, desc, 2048, offset + 4, 96) };
    assert_eq!(done, Commit::Shifted);
    // SAFETY: as above.
    assert_eq!(unsafe { umem.data_mut(desc) }.contents(), &packet[4..]);

    // Grown into the headroom (an ICMP error in front of its quote).
    // SAFETY: as above.
    let (chunk, _) = unsafe { chunk_mut(&umem, desc, 2048) };
    chunk[offset - 28..offset].fill(0xee);
    // SAFETY: as above.
    let done = unsafe { commit(&umem, desc, 2048, offset - 28, 124) };
    assert_eq!(done, Commit::Shifted);
    // SAFETY: as above.
    let data = unsafe { umem.data_mut(desc) };
    assert_eq!(&data.contents()[..28], &[0xee; 28]);
    assert_eq!(&data.contents()[28..], &packet[4..]);

    // Too long for the room between the data start and the chunk's end, or outside the chunk.
    for (at, len) in [(0, 2000), (2000, 100), (usize::MAX, 2)] {
        // SAFETY: as above.
        let done = unsafe { commit(&umem, desc, 2048, at, len) };
        assert_eq!(done, Commit::DoesNotFit);
    }
    assert_eq!(desc.lengths().data(), 124, "unchanged by a refused commit");
}
