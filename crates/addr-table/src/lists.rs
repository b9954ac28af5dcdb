//! The duplicate lists of a table by 32-bit index: what a slot's one-word value part holds
//! for a key with several objects (a pointer would take two words and so a slot of 12 bytes
//! for a `u32 -> u32` table, where a key and an index take 8).
//!
//! A [`ListSlab`] is a segmented array of list pointers: segment `k` holds `2^k` entries and
//! is allocated when first needed; segments never move or shrink while the table lives, so a
//! reader reaches an entry with two loads (the segment, the entry) and no lock. Entry `i` is
//! in segment `log2(i + 1)`. Only the writer (under the table's writer lock) allocates
//! segments, sets entries and recycles indices ([`SlabState`]).
//!
//! **Reuse of an index** is safe without a grace period because a reader resolves an index
//! *before* it validates the line it copied it from ([`Line::find`](crate::bucket)): the
//! writer clears the slot (a `meta` store, release) before it clears the entry or stores a
//! new list in it (release), so a reader whose acquire load of the entry sees either of those
//! stores then sees the cleared slot's `meta` when it validates, and drops the copy. The list
//! a validated entry points to is retired through the epoch, so it stays readable while the
//! reader's guard is pinned.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::bucket::DupList;

/// Segments: enough for every `u32` index (`log2(u32::MAX + 1) = 32`).
const SEGMENTS: usize = 33;

/// The writer's side of a [`ListSlab`]: free indices and the next never-used one.
#[derive(Default)]
pub(crate) struct SlabState {
    free: Vec<u32>,
    next: u32,
}

/// A table's duplicate lists by index (see the module documentation).
pub(crate) struct ListSlab<V> {
    /// Segment `k`: `2^k` entries, or null until first needed.
    segments: [AtomicPtr<AtomicPtr<DupList<V>>>; SEGMENTS],
}

/// Segment and offset of index `i`.
#[inline(always)]
fn place(i: u32) -> (usize, usize) {
    let n = u64::from(i) + 1;
    let k = (63 - n.leading_zeros()) as usize;
    (k, (n - (1 << k)) as usize)
}

impl<V> ListSlab<V> {
    /// An empty slab (no segment allocated).
    pub(crate) fn new() -> Self {
        ListSlab {
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// The entry of index `i`, when its segment exists.
    #[inline(always)]
    fn entry(&self, i: u32) -> Option<&AtomicPtr<DupList<V>>> {
        let (k, off) = place(i);
        let seg = self.segments[k].load(Ordering::Acquire);
        if seg.is_null() {
            return None;
        }
        // SAFETY: a non-null segment `k` was allocated with `2^k` entries
        // (`ensure_segment`) and lives until the slab is dropped; `off < 2^k` by `place`.
        Some(unsafe { &*seg.add(off) })
    }

    /// The list at index `i`, or null (no such list: an index from a copy a writer changed
    /// meanwhile, which the reader's validation then rejects). Any `i` is safe to ask.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> *const DupList<V> {
        match self.entry(i) {
            Some(e) => e.load(Ordering::Acquire),
            None => ptr::null(),
        }
    }

    /// A free index, its segment allocated. Writer only (`state` is the writer's).
    pub(crate) fn reserve(&self, state: &mut SlabState) -> u32 {
        let i = match state.free.pop() {
            Some(i) => i,
            None => {
                let i = state.next;
                // More lists than keys is impossible, and keys are bounded well below this.
                state.next = i.checked_add(1).expect("addr-table: 2^32 duplicate lists");
                i
            }
        };
        self.ensure_segment(place(i).0);
        i
    }

    /// Publishes `list` at index `i` (from [`reserve`](Self::reserve)), before any slot
    /// refers to it. Writer only.
    pub(crate) fn set(&self, i: u32, list: *mut DupList<V>) {
        if let Some(e) = self.entry(i) {
            e.store(list, Ordering::Release);
        }
    }

    /// Clears index `i` and makes it free for reuse, after the last slot that referred to it
    /// was cleared (its list is retired by the caller). Writer only.
    pub(crate) fn release(&self, state: &mut SlabState, i: u32) {
        if let Some(e) = self.entry(i) {
            e.store(ptr::null_mut(), Ordering::Release);
            state.free.push(i);
        }
    }

    /// Calls `f` on every list the slab holds (the table's drop frees them).
    pub(crate) fn for_each(&mut self, mut f: impl FnMut(*mut DupList<V>)) {
        for (k, seg) in self.segments.iter_mut().enumerate() {
            let seg = *seg.get_mut();
            if seg.is_null() {
                continue;
            }
            for off in 0..1usize << k {
                // SAFETY: as in `entry`.
                let p = unsafe { &*seg.add(off) }.load(Ordering::Relaxed);
                if !p.is_null() {
                    f(p);
                }
            }
        }
    }

    fn ensure_segment(&self, k: usize) {
        if self.segments[k].load(Ordering::Relaxed).is_null() {
            let seg: Box<[AtomicPtr<DupList<V>>]> = (0..1usize << k)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect();
            // Release: a reader that sees the segment sees its null entries.
            self.segments[k].store(Box::into_raw(seg).cast(), Ordering::Release);
        }
    }
}

impl<V> Drop for ListSlab<V> {
    /// Frees the segments (not the lists: the table's drop frees those first).
    fn drop(&mut self) {
        for (k, seg) in self.segments.iter_mut().enumerate() {
            let seg = *seg.get_mut();
            if !seg.is_null() {
                // SAFETY: allocated in `ensure_segment` as a boxed slice of `2^k` entries,
                // freed once, here.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(seg, 1 << k)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_cover_every_index_once() {
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(1), (1, 0));
        assert_eq!(place(2), (1, 1));
        assert_eq!(place(3), (2, 0));
        assert_eq!(place(u32::MAX - 1), (31, (1 << 31) - 1));
        assert_eq!(place(u32::MAX), (32, 0));
        let mut seen = std::collections::HashSet::new();
        for i in 0..200u32 {
            let (k, off) = place(i);
            assert!(off < 1 << k);
            assert!(seen.insert((k, off)));
        }
    }

    #[test]
    fn reserve_set_get_release_reuse() {
        let slab: ListSlab<u32> = ListSlab::new();
        let mut st = SlabState::default();
        // Any index is safe to ask, allocated or not.
        assert!(slab.get(0).is_null());
        assert!(slab.get(u32::MAX).is_null());
        let lists: Vec<_> = (0..10).map(|v| DupList::alloc(v, v, v + 100)).collect();
        let idx: Vec<u32> = lists
            .iter()
            .map(|&p| {
                let i = slab.reserve(&mut st);
                slab.set(i, p);
                i
            })
            .collect();
        assert_eq!(idx, (0..10).collect::<Vec<_>>());
        for (&i, &p) in idx.iter().zip(&lists) {
            assert!(std::ptr::eq(slab.get(i), p));
        }
        assert!(slab.get(10).is_null());
        slab.release(&mut st, 3);
        assert!(slab.get(3).is_null());
        assert_eq!(slab.reserve(&mut st), 3);
        slab.set(3, lists[3]);
        let mut slab = slab;
        let mut n = 0;
        slab.for_each(|p| {
            n += 1;
            // SAFETY: each list was allocated above and is freed once, here.
            unsafe { DupList::free(p) };
        });
        assert_eq!(n, 10);
    }
}
