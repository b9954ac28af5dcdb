//! [`ZeroedArray`]: the fixed-size arrays of a bucket table (its lines and its tags), zeroed,
//! and backed by transparent huge pages when they are large enough to gain from them.
//!
//! A lookup in a table of 100,000 or 1,000,000 addresses reads a line at a random place in 2 or
//! 32 MiB of lines: with 4 KiB pages nearly every lookup also misses the first-level TLB (this
//! CPU's reaches 768 KiB) and, at 1M, the second one, and waits for a page walk as well as for
//! the line. An array of at least 2 MiB is therefore aligned to 2 MiB and advised
//! `MADV_HUGEPAGE` before it is first touched, so the kernel backs it with 2 MiB pages where
//! it can (this host's transparent huge pages are `madvise`-only: nothing gets them unasked).
//! Such an array is mapped straight from the kernel (fresh memory, never touched: what the
//! allocator recycles is already on 4 KiB pages, which the advice does not replace) and
//! unmapped when the table is freed. The advice is one `madvise` call when a table is
//! allocated (never per lookup); if it fails or no huge page is free, the array simply stays
//! on 4 KiB pages.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Size and alignment of a transparent huge page on x86-64 and most aarch64 kernels.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Types whose all-zero bytes are a valid value (atomics and arrays of them).
///
/// # Safety
/// Every bit pattern of zeros must be a valid, initialised value of the type.
pub(crate) unsafe trait Zeroable {}

// SAFETY: an `AtomicU32` of zero bytes is the value 0.
unsafe impl Zeroable for AtomicU32 {}
// SAFETY: an `AtomicU64` of zero bytes is the value 0.
unsafe impl Zeroable for AtomicU64 {}

/// A fixed-size array of `len` zeroed `T` with [`ZeroedArray::layout`]: from 2 MiB on, 2 MiB
/// aligned, mapped fresh and advised `MADV_HUGEPAGE` ([`map_huge`]), else from the global
/// allocator; freed the same way.
pub(crate) struct ZeroedArray<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the array owns its `T`s like a `Box<[T]>` does.
unsafe impl<T: Zeroable + Send> Send for ZeroedArray<T> {}
// SAFETY: shared access hands out `&T` only, like a `Box<[T]>`.
unsafe impl<T: Zeroable + Sync> Sync for ZeroedArray<T> {}

impl<T: Zeroable> ZeroedArray<T> {
    /// The layout of `len` `T`s: `T`'s own alignment, or [`HUGE_PAGE`] from that size on (not
    /// under Miri, which has no use for it).
    fn layout(len: usize) -> Layout {
        let array = Layout::array::<T>(len).expect("bucket table size fits in memory");
        if array.size() >= HUGE_PAGE && !cfg!(miri) {
            array
                .align_to(HUGE_PAGE)
                .expect("huge page alignment is valid")
        } else {
            array
        }
    }

    /// `len` zeroed `T`s (`len` at least 1, `T` not zero-sized).
    pub(crate) fn new(len: usize) -> Self {
        const { assert!(size_of::<T>() > 0) };
        assert!(len > 0, "an array of at least one element");
        let layout = Self::layout(len);
        let p = if mapped(layout) {
            map_huge(layout)
        } else {
            // SAFETY: the layout's size is non-zero (`len` > 0, `T` not zero-sized).
            unsafe { alloc::alloc(layout) }
        };
        let Some(ptr) = NonNull::new(p) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `p` is valid for writes of `layout.size()` bytes (just allocated or mapped);
        // for a mapping this is the first touch, after the advice, so its page faults take
        // huge pages where the kernel has them.
        unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        ZeroedArray {
            ptr: ptr.cast(),
            len,
        }
    }

    /// Number of elements.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Element `i`, unchecked.
    ///
    /// # Safety
    /// `i < self.len()`.
    #[inline(always)]
    pub(crate) unsafe fn get_unchecked(&self, i: usize) -> &T {
        // SAFETY: in bounds (the caller's promise) of an allocation of `len` initialised `T`s
        // (zeroed, and `T: Zeroable`), alive as long as `self`.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }

    /// The addresses of the array's bytes (diagnostics: where its memory sits).
    pub(crate) fn address_range(&self) -> std::ops::Range<usize> {
        let start = self.ptr.as_ptr() as usize;
        start..start + self.len * size_of::<T>()
    }

    /// The elements.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised `T`s (zeroed, `T: Zeroable`), alive as long as `self`;
        // only shared references are ever made.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        let layout = Self::layout(self.len);
        // SAFETY: every `T` is zero-initialised or was written through `&T` (atomics); `T`s
        // of this crate have no drop glue to run (atomics), and the memory came from
        // `map_huge` (if `mapped`) or `alloc::alloc` with exactly this layout.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            if mapped(layout) {
                unmap(self.ptr.as_ptr().cast(), layout);
            } else {
                alloc::dealloc(self.ptr.as_ptr().cast(), layout);
            }
        }
    }
}

/// Whether an array of `layout` is mapped from the kernel by [`map_huge`] rather than taken
/// from the global allocator: from [`HUGE_PAGE`] on, on Linux, not under Miri.
///
/// The allocator would hand back memory it recycles (a bucket table freed after a rehash, a
/// hashbrown table that grew), already backed by 4 KiB pages, which `MADV_HUGEPAGE` does not
/// replace (only `khugepaged`, minutes later, may): measured 2026-11-29 (branch addrhuge,
/// example `addr_huge copies=4`), processes that built four 1M tables in a row left the 2 MiB
/// tag array on 4 KiB pages in 3 of 8 tables. Fresh anonymous memory, advised before its
/// first write, takes huge pages at its first faults whenever the kernel has them: fib-trie's
/// arena (`crates/fib-trie/src/fast/arena.rs`) maps its chunks the same way.
#[inline(always)]
fn mapped(layout: Layout) -> bool {
    cfg!(all(target_os = "linux", not(miri))) && layout.size() >= HUGE_PAGE
}

/// Fresh memory for `layout` (at least [`HUGE_PAGE`] bytes, aligned to it), mapped from the
/// kernel, never touched, advised `MADV_HUGEPAGE`; null if the kernel has none to give.
#[cfg(all(target_os = "linux", not(miri)))]
fn map_huge(layout: Layout) -> *mut u8 {
    debug_assert!(layout.size() >= HUGE_PAGE && layout.align() == HUGE_PAGE);
    let size = mapped_size(layout);
    let span = size + HUGE_PAGE;
    // SAFETY: an anonymous private mapping of `span` bytes, owned by us; the parts before
    // and after the `size` bytes at the first `HUGE_PAGE` boundary are unmapped again and
    // never used (both page-aligned, `size` being a multiple of `HUGE_PAGE`); the advice
    // only changes how the kernel backs the memory, never its contents or validity, and its
    // result is ignored (a hint).
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
            return std::ptr::null_mut();
        }
        let raw = raw.cast::<u8>();
        let head = raw.addr().next_multiple_of(HUGE_PAGE) - raw.addr();
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        let base = raw.add(head);
        let tail = span - head - size;
        if tail > 0 {
            libc::munmap(base.add(size).cast(), tail);
        }
        libc::madvise(base.cast(), size, libc::MADV_HUGEPAGE);
        base
    }
}

/// Bytes mapped for `layout`: its size rounded up to whole huge pages (the tables' arrays are
/// whole already: a power of two of lines or tags, of at least [`HUGE_PAGE`] bytes).
#[cfg(all(target_os = "linux", not(miri)))]
fn mapped_size(layout: Layout) -> usize {
    layout.size().next_multiple_of(HUGE_PAGE)
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn map_huge(_: Layout) -> *mut u8 {
    unreachable!("arrays are mapped on Linux only")
}

/// Gives back an array's mapping.
///
/// # Safety
/// `p` and `layout` must come from one call of [`map_huge`], and nothing may use the memory
/// afterwards.
unsafe fn unmap(p: *mut u8, layout: Layout) {
    // SAFETY: by the caller's guarantee, `p..p + mapped_size(layout)` is exactly what
    // `map_huge` kept mapped, unused from now on.
    #[cfg(all(target_os = "linux", not(miri)))]
    unsafe {
        libc::munmap(p.cast(), mapped_size(layout));
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (p, layout);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn arrays_are_zeroed_aligned_and_writable() {
        // Under Miri only the small one (no huge alignment there).
        let sizes: &[usize] = if cfg!(miri) {
            &[1, 3, 100]
        } else {
            &[1, 3, 100, HUGE_PAGE / 4]
        };
        for &len in sizes {
            let a = ZeroedArray::<AtomicU32>::new(len);
            assert_eq!(a.as_slice().len(), len);
            assert!(a.as_slice().iter().all(|x| x.load(Ordering::Relaxed) == 0));
            // SAFETY: `len - 1 < len`.
            unsafe { a.get_unchecked(len - 1) }.store(7, Ordering::Relaxed);
            assert_eq!(a.as_slice()[len - 1].load(Ordering::Relaxed), 7);
            let huge = len * 4 >= HUGE_PAGE && !cfg!(miri);
            let align = if huge { HUGE_PAGE } else { 4 };
            assert_eq!(a.as_slice().as_ptr() as usize % align, 0, "{len}");
            let range = a.address_range();
            assert_eq!(range.start, a.as_slice().as_ptr() as usize);
            assert_eq!(range.len(), len * 4);
            // The bucket tags' element: 8 bytes.
            let a = ZeroedArray::<AtomicU64>::new(len);
            assert!(a.as_slice().iter().all(|x| x.load(Ordering::Relaxed) == 0));
            // SAFETY: `len - 1 < len`.
            unsafe { a.get_unchecked(len - 1) }.store(u64::MAX, Ordering::Relaxed);
            assert_eq!(a.as_slice()[len - 1].load(Ordering::Relaxed), u64::MAX);
            let huge = len * 8 >= HUGE_PAGE && !cfg!(miri);
            let align = if huge { HUGE_PAGE } else { 8 };
            assert_eq!(a.as_slice().as_ptr() as usize % align, 0, "{len}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "arrays are mapped only outside Miri")]
    fn mapped_arrays_of_any_length_are_zeroed_and_given_back() {
        // Whole huge pages and not (the mapping rounds up), mapped and unmapped repeatedly:
        // each new array reads as zeros whatever the previous one held.
        for round in 0..8u64 {
            for len in [HUGE_PAGE / 8, HUGE_PAGE / 8 + 3, 3 * HUGE_PAGE / 8 + 1] {
                let layout = ZeroedArray::<AtomicU64>::layout(len);
                assert!(mapped(layout) || !cfg!(target_os = "linux"));
                let a = ZeroedArray::<AtomicU64>::new(len);
                assert_eq!(a.as_slice().as_ptr() as usize % HUGE_PAGE, 0);
                assert_eq!(a.address_range().len(), len * 8);
                assert!(a.as_slice().iter().all(|x| x.load(Ordering::Relaxed) == 0));
                for x in a.as_slice() {
                    x.store(round + 1, Ordering::Relaxed);
                }
                // SAFETY: `len - 1 < len`.
                let last = unsafe { a.get_unchecked(len - 1) };
                assert_eq!(last.load(Ordering::Relaxed), round + 1);
            }
        }
        // Below the threshold: the global allocator.
        assert!(!mapped(ZeroedArray::<AtomicU64>::layout(HUGE_PAGE / 8 - 1)));
    }
}
