//! [`ZeroedArray`]: the fixed-size arrays of a bucket table (its lines and its tags), zeroed,
//! and backed by transparent huge pages when they are large enough to gain from them.
//!
//! A lookup in a table of 100,000 or 1,000,000 addresses reads a line at a random place in 2 or
//! 32 MiB of lines: with 4 KiB pages nearly every lookup also misses the first-level TLB (this
//! CPU's reaches 768 KiB) and, at 1M, the second one, and waits for a page walk as well as for
//! the line. An array of at least 2 MiB is therefore aligned to 2 MiB and advised
//! `MADV_HUGEPAGE` before it is first touched, so the kernel backs it with 2 MiB pages where
//! it can (this host's transparent huge pages are `madvise`-only: nothing gets them unasked).
//! The advice is one `madvise` call when a table is allocated (never per lookup); if it fails
//! or no huge page is free, the array simply stays on 4 KiB pages.

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

/// A fixed-size array of `len` zeroed `T`, allocated with [`ZeroedArray::layout`] (2 MiB
/// aligned and advised `MADV_HUGEPAGE` from 2 MiB on) and freed with the same layout.
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
        // SAFETY: the layout's size is non-zero (`len` > 0, `T` not zero-sized).
        let p = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(p) else {
            alloc::handle_alloc_error(layout)
        };
        advise_huge_pages(p, layout);
        // SAFETY: `p` is valid for writes of `layout.size()` bytes (just allocated); zeroing
        // it after the advice is the first touch, so its page faults take huge pages.
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
        // SAFETY: every `T` is zero-initialised or was written through `&T` (atomics); `T`s
        // of this crate have no drop glue to run (atomics), and the memory came from
        // `alloc::alloc` with exactly this layout.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len));
        }
    }
}

/// Asks the kernel to back the 2 MiB-aligned memory at `p` with huge pages (a hint: failures
/// are ignored, and arrays below [`HUGE_PAGE`] are left alone).
fn advise_huge_pages(p: *mut u8, layout: Layout) {
    #[cfg(all(target_os = "linux", not(miri)))]
    if layout.size() >= HUGE_PAGE && layout.align() >= HUGE_PAGE {
        // SAFETY: `p` starts an allocation of `layout.size()` bytes aligned to the page size,
        // owned by the caller; `madvise` only records advice for that range (no memory is
        // read or written through it), and its result is ignored.
        unsafe {
            libc::madvise(p.cast(), layout.size(), libc::MADV_HUGEPAGE);
        }
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
}
