//! The memory a bulk build places its nodes in: 2 MiB chunks, 2 MiB-aligned, filled front to
//! back in build order, with no per-node allocation and no padding, and given to the kernel
//! as candidates for transparent huge pages (`madvise(MADV_HUGEPAGE)`).
//!
//! A lookup of a random key misses the data TLB on most of its loads when the structure is
//! spread over thousands of 4 KiB pages; in 2 MiB pages the whole structure of a full table
//! (a few MiB) is covered by a handful of TLB entries. Where the kernel gives no huge pages
//! (THP disabled, no memory to compact, Miri), the chunks are ordinary memory and everything
//! works the same, a little slower.
//!
//! Nodes in an arena are never freed one by one: a node an update replaces stays in the
//! arena, dead, until the whole arena goes with the structure it was built for (a rebuild
//! retires the old root, its arena with it). Nodes built by updates come from the global
//! allocator as before; [`Arena::contains`] tells the two apart when a subtree is freed.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr::NonNull;

/// The size and alignment of a chunk: one x86-64 huge page.
pub(crate) const CHUNK: usize = 2 << 20;

/// One chunk of an arena.
struct Chunk {
    base: NonNull<u8>,
    layout: Layout,
}

impl Chunk {
    /// A fresh chunk of at least `size` bytes (a multiple of [`CHUNK`]), aligned to
    /// [`CHUNK`], advised for huge pages.
    fn new(size: usize) -> Chunk {
        let size = size.div_ceil(CHUNK) * CHUNK;
        let layout = Layout::from_size_align(size, CHUNK).expect("a chunk is a few MiB");
        // SAFETY: the layout's size is non-zero (at least one `CHUNK`).
        let Some(base) = NonNull::new(unsafe { alloc(layout) }) else {
            handle_alloc_error(layout)
        };
        advise_huge(base, size);
        Chunk { base, layout }
    }

    fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base.as_ptr().addr()) < self.layout.size()
    }
}

/// Asks the kernel to back `size` bytes at `base` with transparent huge pages. Advice only:
/// where it is refused, the memory stays in small pages.
fn advise_huge(base: NonNull<u8>, size: usize) {
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: `base..base + size` is one live allocation of ours, aligned to a page;
    // `MADV_HUGEPAGE` changes how the kernel backs it, never its contents or validity.
    unsafe {
        libc::madvise(base.as_ptr().cast(), size, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (base, size);
}

/// A finished arena: its chunks, freed when the last owner drops it.
#[derive(Default)]
pub(crate) struct Arena {
    chunks: Vec<Chunk>,
    used: usize,
}

// SAFETY: an arena is plain memory; after the build that filled it, the nodes in it are
// read (and their child slots atomically written) through the structure that owns it.
unsafe impl Send for Arena {}
// SAFETY: as above; `Arena`'s own methods only read its chunk list.
unsafe impl Sync for Arena {}

impl Arena {
    /// Whether `p` points into one of the arena's chunks (a node placed by the build).
    pub(crate) fn contains<T>(&self, p: *const T) -> bool {
        self.chunks.iter().any(|c| c.contains(p.addr()))
    }

    /// The bytes the arena's chunks occupy.
    pub(crate) fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.layout.size()).sum()
    }

    /// The bytes its nodes took when it was built (without the unused tail of each chunk).
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for c in &self.chunks {
            // SAFETY: each chunk was allocated by `Chunk::new` with this layout and is freed
            // once, here; nodes in it are no longer reachable (the arena's owner is gone).
            unsafe { dealloc(c.base.as_ptr(), c.layout) };
        }
    }
}

/// An arena being filled by a build.
#[derive(Default)]
pub(crate) struct ArenaBuilder {
    arena: Arena,
    /// Bytes used in the last chunk.
    top: usize,
}

impl ArenaBuilder {
    /// Room for `layout` (its size rounded to its alignment), in the current chunk or in a
    /// new one. The memory is uninitialised.
    pub(crate) fn alloc(&mut self, layout: Layout) -> NonNull<u8> {
        let align = layout.align();
        if let Some(last) = self.arena.chunks.last() {
            let at = self.top.next_multiple_of(align);
            if at + layout.size() <= last.layout.size() {
                self.top = at + layout.size();
                self.arena.used += layout.size();
                // SAFETY: `at + size` is within the chunk's allocation.
                return unsafe { last.base.add(at) };
            }
        }
        let chunk = Chunk::new(layout.size().max(CHUNK));
        let base = chunk.base;
        self.arena.chunks.push(chunk);
        self.top = layout.size();
        self.arena.used += layout.size();
        base
    }

    /// The filled arena.
    pub(crate) fn finish(self) -> Arena {
        self.arena
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_packed_aligned_and_contained() {
        let mut b = ArenaBuilder::default();
        let a = b.alloc(Layout::from_size_align(20, 8).unwrap());
        let c = b.alloc(Layout::from_size_align(64, 64).unwrap());
        let d = b.alloc(Layout::from_size_align(24, 8).unwrap());
        assert_eq!(a.as_ptr().addr() % CHUNK, 0, "chunks are huge-page aligned");
        assert_eq!(c.as_ptr().addr() - a.as_ptr().addr(), 64);
        assert_eq!(d.as_ptr().addr() - c.as_ptr().addr(), 64, "no padding after a node");
        // A request larger than what is left opens a new chunk.
        let e = b.alloc(Layout::from_size_align(CHUNK - 100, 8).unwrap());
        assert_eq!(e.as_ptr().addr() % CHUNK, 0);
        let arena = b.finish();
        assert_eq!(arena.bytes(), 2 * CHUNK);
        assert_eq!(arena.used(), 20 + 64 + 24 + CHUNK - 100);
        for p in [a, c, d, e] {
            assert!(arena.contains(p.as_ptr()));
        }
        let outside = Box::new(0u64);
        assert!(!arena.contains(&*outside));
        assert!(!Arena::default().contains(a.as_ptr()));
    }
}
