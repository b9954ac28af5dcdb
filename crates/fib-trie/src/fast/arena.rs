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

use std::alloc::{Layout, handle_alloc_error};
#[cfg(not(all(target_os = "linux", not(miri))))]
use std::alloc::{alloc, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The size and alignment of a chunk: one x86-64 huge page.
pub(crate) const CHUNK: usize = 2 << 20;

/// The bytes of all arenas' chunks live in the process (they bypass the global allocator).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The bytes of all arenas' chunks live in the process.
pub(crate) fn mapped() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

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
        let base = map(layout);
        MAPPED.fetch_add(size, Ordering::Relaxed);
        Chunk { base, layout }
    }

    fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base.as_ptr().addr()) < self.layout.size()
    }
}

/// Fresh memory for `layout` (a multiple of [`CHUNK`], aligned to it). On Linux, mapped
/// straight from the kernel, never touched before, and advised for transparent huge pages
/// before its first write, so that its first faults can take huge pages (memory the
/// allocator recycles is already backed by small pages, which the advice does not replace).
/// Elsewhere (and under Miri), from the global allocator.
#[cfg(all(target_os = "linux", not(miri)))]
fn map(layout: Layout) -> NonNull<u8> {
    let (size, span) = (layout.size(), layout.size() + CHUNK);
    // SAFETY: an anonymous private mapping of `span` bytes, owned by us; the parts before
    // and after the aligned `size` bytes are unmapped again and never used; the advice only
    // changes how the kernel backs the memory, never its contents or validity.
    unsafe {
        let raw = libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if raw == libc::MAP_FAILED {
            handle_alloc_error(layout)
        }
        let raw = raw.cast::<u8>();
        let head = raw.addr().next_multiple_of(CHUNK) - raw.addr();
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        let base = raw.add(head);
        let tail = span - head - size;
        if tail > 0 {
            libc::munmap(base.add(size).cast(), tail);
        }
        libc::madvise(base.cast(), size, libc::MADV_HUGEPAGE);
        NonNull::new_unchecked(base)
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn map(layout: Layout) -> NonNull<u8> {
    // SAFETY: the layout's size is non-zero (at least one `CHUNK`).
    NonNull::new(unsafe { alloc(layout) }).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Gives a chunk's memory back.
///
/// # Safety
/// `base` and `layout` must come from one call of [`map`], and nothing may use the memory
/// afterwards.
unsafe fn unmap(base: NonNull<u8>, layout: Layout) {
    // SAFETY: by the caller's guarantee, `base..base + size` is exactly what `map` kept
    // mapped (or allocated with this layout), unused from now on.
    #[cfg(all(target_os = "linux", not(miri)))]
    unsafe {
        libc::munmap(base.as_ptr().cast(), layout.size());
    }
    // SAFETY: as above.
    #[cfg(not(all(target_os = "linux", not(miri))))]
    unsafe {
        dealloc(base.as_ptr(), layout)
    };
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
            // SAFETY: each chunk was mapped by `Chunk::new` with this layout and is given back
            // once, here; nodes in it are no longer reachable (the arena's owner is gone).
            unsafe { unmap(c.base, c.layout) };
            MAPPED.fetch_sub(c.layout.size(), Ordering::Relaxed);
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

    /// Room for `layout` whose first cache line's worth of bytes does not straddle two cache
    /// lines: packed after the previous allocation where it fits in the current line, else
    /// at the start of the next line (a node's header and its first entries are then read
    /// with one miss, as on the heap, without padding every node to a whole line).
    pub(crate) fn alloc_unsplit(&mut self, layout: Layout) -> NonNull<u8> {
        const LINE: usize = 64;
        let at = self.top.next_multiple_of(layout.align());
        let head = layout.size().min(LINE);
        let align = if at % LINE + head > LINE {
            LINE
        } else {
            layout.align()
        };
        self.alloc(
            layout
                .align_to(align)
                .expect("a cache line is a valid alignment"),
        )
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
        assert_eq!(
            d.as_ptr().addr() - c.as_ptr().addr(),
            64,
            "no padding after a node"
        );
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
        // Unsplit: a 40-byte node after 24 bytes fits in the line; the next one would
        // straddle it and starts the next line; a large one starts on a line.
        let mut b = ArenaBuilder::default();
        let node = |size| Layout::from_size_align(size, 8).unwrap();
        let first = b.alloc_unsplit(node(24)).as_ptr().addr();
        let at = |p: NonNull<u8>| p.as_ptr().addr() - first;
        assert_eq!(at(b.alloc_unsplit(node(40))), 24);
        assert_eq!(at(b.alloc_unsplit(node(16))), 64);
        assert_eq!(at(b.alloc_unsplit(node(200))), 128);
        assert_eq!(at(b.alloc_unsplit(node(8))), 328);
        drop(b.finish());
        assert!(!arena.contains(&*outside));
        assert!(!Arena::default().contains(a.as_ptr()));
    }
}
