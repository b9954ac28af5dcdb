//! Spare frames: where the pipeline's extra output frames come from and where they go.

/// The caller's supply of spare frames (free UMEM chunks) and the way out for the extra frames
/// the pipeline makes: IPv4 fragments, ICMP errors that need a copy of the original, and frames
/// released from the hold buffer.
///
/// Frames are named by an opaque handle (a UMEM address, an index). The pipeline calls
/// [`alloc`](Self::alloc), writes into [`chunk`](Self::chunk) and then either
/// [`send`](Self::send)s the frame or [`free`](Self::free)s it; it never keeps a handle past
/// the call that allocated it. An empty pool is not an error for the caller: the pipeline
/// counts [`DropReason::PoolEmpty`](crate::DropReason::PoolEmpty) and goes on.
pub trait FramePool {
    /// Takes a free chunk, or `None` when there is none.
    fn alloc(&mut self) -> Option<u64>;
    /// The whole chunk of a handle from [`alloc`](Self::alloc), headroom included.
    fn chunk(&mut self, handle: u64) -> &mut [u8];
    /// Queues `len` bytes at `offset` of the chunk for transmission out of `ifindex`; the chunk
    /// belongs to the caller again.
    fn send(&mut self, handle: u64, offset: usize, len: usize, ifindex: u32);
    /// Gives back an allocated chunk that was not sent.
    fn free(&mut self, handle: u64);
}

/// A frame sent through a [`HeapPool`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The egress interface.
    pub ifindex: u32,
    /// The frame's bytes.
    pub bytes: Vec<u8>,
}

/// A [`FramePool`] of heap chunks for tests, examples and simulations: it allocates up to
/// `capacity` chunks of `chunk_size` bytes and records what is sent (allocating per frame, so
/// not for a run loop).
///
/// ```
/// use dataplane::{FramePool, HeapPool};
/// let mut pool = HeapPool::new(2048, 1);
/// let h = pool.alloc().unwrap();
/// pool.chunk(h)[..3].copy_from_slice(b"abc");
/// pool.send(h, 0, 3, 7);
/// assert_eq!(pool.sent[0].bytes, b"abc");
/// assert!(pool.alloc().is_some()); // the sent chunk came back
/// ```
#[derive(Clone, Debug)]
pub struct HeapPool {
    chunks: Vec<Vec<u8>>,
    free: Vec<u64>,
    /// Frames sent, in order.
    pub sent: Vec<Sent>,
}

impl HeapPool {
    /// A pool of `capacity` chunks of `chunk_size` bytes.
    pub fn new(chunk_size: usize, capacity: usize) -> Self {
        HeapPool {
            chunks: vec![vec![0; chunk_size]; capacity],
            free: (0..capacity as u64).rev().collect(),
            sent: Vec::new(),
        }
    }

    /// Chunks currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

impl FramePool for HeapPool {
    fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    fn chunk(&mut self, handle: u64) -> &mut [u8] {
        &mut self.chunks[handle as usize]
    }

    fn send(&mut self, handle: u64, offset: usize, len: usize, ifindex: u32) {
        let bytes = self.chunks[handle as usize][offset..offset + len].to_vec();
        self.sent.push(Sent { ifindex, bytes });
        self.free.push(handle);
    }

    fn free(&mut self, handle: u64) {
        self.free.push(handle);
    }
}
