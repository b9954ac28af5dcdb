//! Rebuilding worn FIB tables in bulk ([`fib_trie::FibWriter::compact`]) on a thread of their
//! own, so that the rebuilt tables land in a malloc arena of their own.
//!
//! glibc gives each thread an arena of its own (up to eight per core) and puts a thread's
//! arena up for reuse when the thread exits. A table rebuilt on the control thread takes its
//! nodes from the holes that the churn before left in the control thread's heap, and the old
//! nodes it frees then leave new holes between the new ones: freed memory the allocator cannot
//! return, since each hole is smaller than a page (measured, `sync_tests::memory_redump_cycles`:
//! 100,000 routes, resident memory stays 14 MiB above the bulk-loaded level though the live
//! bytes are back to it). Rebuilt on a fresh thread, the new nodes come from that thread's
//! arena, packed; the old ones, freed, empty the arenas they were in, which `malloc_trim`
//! returns to the kernel. The thread of the last rebuild stays parked until the next rebuild's
//! thread has taken its arena, so that the next rebuild gets another arena (the one the
//! rebuild before last used, emptied since: they alternate) rather than the one holding the
//! live tables.
//!
//! Where the C library gives threads no arenas of their own (or they are all taken), the
//! rebuild is the same, only the placement is lost. jemalloc (the `xfwd` binary's allocator)
//! gives a new thread the arena with the fewest threads, so the same holds there; but single
//! changes after a rebuild then free nodes in the parked thread's arena and allocate in the
//! control thread's, and the parked arena's holes are not reused. So a table that grew by
//! single changes after its last rebuild by an eighth of its routes or more is rebuilt once
//! more ([`Compactor::compact_grown`], which the control thread calls every
//! [`crate::control::GROWN_CHECK`] once caught up): after a routing daemon's re-add of the
//! whole table the refilled table is rebuilt in bulk, not left with its last two thirds
//! inserted one by one. Measured (`sync_tests::memory_redump_cycles`, the whole bgp-full-v4,
//! jemalloc; `docs/forwarder.md`, "Memory after mass changes"): a delete/re-add cycle left
//! +12.1-12.4% over the bulk-loaded table before, +3.8-4.2% with the growth rebuild; rebuilt
//! on the control thread instead (one arena) +8.1-8.4% without it and +8.6-8.8% with it, so the
//! rebuild keeps its thread.
//!
//! Which arena a new thread gets is not which arena the live tables are in, though: the
//! control thread calls [`Compactor::compact`] at each round it has caught up, and each call
//! starts a thread (which rebuilds only if a table is worn), so the parked arena and the one
//! after it take turns with every round, whether anything was rebuilt or not; and once the
//! embedder's threads hold all of the allocator's automatic arenas, a new thread shares one
//! with them. So a rebuild could land in the arena that held the tables it replaced, among
//! their nodes and the holes they leave when freed. With the feature `jemalloc-arenas` (the
//! `xfwd` binary's) the rebuild's thread allocates in one of two arenas of jemalloc's made
//! for the purpose (`arenas.create`; automatic selection gives them to no other thread), and
//! a rebuild goes to the one that does not hold the live tables: the slot is switched only
//! after a rebuild, so the old tables' arena empties entirely once readers unpin.

use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use fib_trie::FibWriter;

/// A table grown by single changes since its last rebuild by at least this fraction (one
/// over it) of its routes is rebuilt by [`Compactor::compact_grown`]: a refill's last eighth
/// inserted one route at a time leaves little free room (measured, `docs/forwarder.md`).
pub(crate) const GROWN_DIVISOR: usize = 8;

/// Which tables a rebuild takes.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// [`FibWriter::compact`]'s worn tables.
    Worn,
    /// [`FibWriter::compact_grown`]'s, with [`GROWN_DIVISOR`].
    Grown,
}

impl Rule {
    fn apply(self, fib4: &mut FibWriter<u32>, fib6: &mut FibWriter<u128>) -> usize {
        match self {
            Rule::Worn => fib4.compact() + fib6.compact(),
            Rule::Grown => fib4.compact_grown(GROWN_DIVISOR) + fib6.compact_grown(GROWN_DIVISOR),
        }
    }
}

/// Rebuilds worn tables on a thread of their own (keeping the last such thread parked), or
/// on the calling thread ([`Compactor::on_calling_thread`]).
#[derive(Debug)]
pub(crate) struct Compactor {
    parked: Option<(JoinHandle<()>, mpsc::Sender<()>)>,
    /// Rebuild on the calling thread (the control thread): no thread, one arena.
    here: bool,
    /// Which of the two rebuild arenas (module `arenas`) the next rebuild allocates in: the
    /// one that does not hold the tables of the last rebuild. `None`: the thread's own arena.
    slot: Option<usize>,
}

impl Default for Compactor {
    fn default() -> Self {
        Compactor {
            parked: None,
            here: false,
            slot: arenas::available().then_some(0),
        }
    }
}

impl Compactor {
    /// A compactor that rebuilds on the thread that calls [`Compactor::compact`]: the
    /// memory diagnosis's comparison (`XFWD_COMPACT_HERE`; under jemalloc it left more free
    /// room than a thread of their own, `docs/forwarder.md`).
    #[cfg(test)]
    pub(crate) fn on_calling_thread() -> Self {
        Compactor {
            parked: None,
            here: true,
            slot: None,
        }
    }

    /// A compactor whose rebuilds allocate in whichever arena the allocator gives their
    /// thread, as without the feature `jemalloc-arenas` (`XFWD_AUTO_ARENAS`: the memory
    /// diagnosis's comparison).
    #[cfg(test)]
    pub(crate) fn with_automatic_arenas() -> Self {
        Compactor {
            parked: None,
            here: false,
            slot: None,
        }
    }

    /// [`FibWriter::compact`] of both families' FIBs, run on a new thread (the writers are
    /// moved there and back), or here if so configured; returns how many tables were
    /// rebuilt. Runs on the calling thread if no thread can be started.
    pub(crate) fn compact(
        &mut self,
        fib4: &mut FibWriter<u32>,
        fib6: &mut FibWriter<u128>,
    ) -> usize {
        self.rebuild(fib4, fib6, Rule::Worn)
    }

    /// [`Compactor::compact`], and also each table grown by single changes since its last
    /// rebuild by at least [`GROWN_DIVISOR`]th of its routes ([`FibWriter::compact_grown`]):
    /// for a caller that sees the growth is over.
    pub(crate) fn compact_grown(
        &mut self,
        fib4: &mut FibWriter<u32>,
        fib6: &mut FibWriter<u128>,
    ) -> usize {
        self.rebuild(fib4, fib6, Rule::Grown)
    }

    fn rebuild(
        &mut self,
        fib4: &mut FibWriter<u32>,
        fib6: &mut FibWriter<u128>,
        rule: Rule,
    ) -> usize {
        if self.here {
            let rebuilt = rule.apply(fib4, fib6);
            // What the rebuild retired waits in this thread's bag: to the global queue.
            crossbeam_epoch::pin().flush();
            return rebuilt;
        }
        type Writers = (FibWriter<u32>, FibWriter<u128>);
        // The writers travel through a slot, so that they come back even if no thread starts.
        let slot: Arc<Mutex<Option<Writers>>> = Arc::new(Mutex::new(Some((
            std::mem::take(fib4),
            std::mem::take(fib6),
        ))));
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let theirs = Arc::clone(&slot);
        let arena = self.slot;
        let spawned = std::thread::Builder::new()
            .name("xfwd-compact".into())
            .spawn(move || {
                if let Some(arena) = arena {
                    arenas::bind(arena);
                }
                let mut writers = theirs.lock().unwrap_or_else(|p| p.into_inner());
                let rebuilt = writers.as_mut().map_or(0, |(w4, w6)| rule.apply(w4, w6));
                drop(writers);
                // What the rebuild retired waits in this thread's bag: to the global queue.
                crossbeam_epoch::pin().flush();
                // The receiver waits for this; if it is gone, so is the mirror.
                let _ = done_tx.send(rebuilt);
                // Parked, holding this thread's arena, until the next rebuild has begun.
                let _ = exit_rx.recv();
            });
        let rebuilt = match spawned {
            Ok(handle) => {
                // Nothing sent: the rebuild panicked (the writers are still in the slot).
                let rebuilt = done_rx.recv().unwrap_or(0);
                if let Some((previous, exit)) = self.parked.replace((handle, exit_tx)) {
                    drop(exit);
                    let _ = previous.join();
                }
                Some(rebuilt)
            }
            Err(e) => {
                tracing::debug!(error = %e, "no thread for the compaction; rebuilding here");
                None
            }
        };
        let (mut w4, mut w6) = slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .expect("the writers are put back in the slot");
        let rebuilt = match rebuilt {
            Some(rebuilt) => {
                // The new tables are in this slot's arena now: the next rebuild goes to the
                // other one, which empties as the old tables are freed.
                if rebuilt > 0
                    && let Some(slot) = &mut self.slot
                {
                    *slot ^= 1;
                }
                rebuilt
            }
            None => rule.apply(&mut w4, &mut w6),
        };
        *fib4 = w4;
        *fib6 = w6;
        rebuilt
    }
}

/// The two jemalloc arenas that bulk rebuilds allocate in, taken in turn (feature
/// `jemalloc-arenas`; see the module documentation).
#[cfg(feature = "jemalloc-arenas")]
mod arenas {
    use std::sync::OnceLock;

    /// The two arenas' indices, created at the first use; `None` if jemalloc refused.
    static ARENAS: OnceLock<Option<[u32; 2]>> = OnceLock::new();

    fn get() -> Option<[u32; 2]> {
        *ARENAS.get_or_init(|| Some([create()?, create()?]))
    }

    /// A new arena of jemalloc's (`arenas.create`): automatic arena selection never gives
    /// it to a thread, so only a thread bound to it ([`bind`]) allocates there.
    #[allow(unsafe_code)]
    fn create() -> Option<u32> {
        let mut index: u32 = 0;
        let mut len = std::mem::size_of::<u32>();
        // SAFETY: `arenas.create` writes an `unsigned` (u32) to `oldp`, of the size `oldlenp`
        // gives; no new value is passed. Tested by `tests::rebuilds_alternate_between_their_arenas`.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"arenas.create".as_ptr(),
                (&raw mut index).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0).then_some(index)
    }

    /// Whether the rebuild arenas exist (created now if not yet).
    pub(super) fn available() -> bool {
        get().is_some()
    }

    /// Binds the calling thread to rebuild arena `slot` (0 or 1): what it allocates from now
    /// on comes from there. Does nothing if the arenas could not be created.
    #[allow(unsafe_code)]
    pub(super) fn bind(slot: usize) {
        let Some(arenas) = get() else { return };
        let mut index = arenas[slot & 1];
        // SAFETY: `thread.arena` reads an `unsigned` (u32) from `newp`, of `newlen` bytes; no
        // old value is asked for. Tested by `tests::rebuilds_alternate_between_their_arenas`.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"thread.arena".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&raw mut index).cast(),
                std::mem::size_of::<u32>(),
            )
        };
        if rc != 0 {
            tracing::debug!(rc, "the rebuild thread kept its own arena");
        }
    }

    /// The arena the calling thread allocates in (`thread.arena`).
    #[cfg(test)]
    #[allow(unsafe_code)]
    pub(super) fn current() -> u32 {
        let mut index: u32 = u32::MAX;
        let mut len = std::mem::size_of::<u32>();
        // SAFETY: as in `create`: an `unsigned` written to `oldp`.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"thread.arena".as_ptr(),
                (&raw mut index).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0);
        index
    }

    /// The two arenas' indices.
    #[cfg(test)]
    pub(super) fn indices() -> Option<[u32; 2]> {
        get()
    }
}

/// Without the feature `jemalloc-arenas`: the thread keeps the arena it was given.
#[cfg(not(feature = "jemalloc-arenas"))]
mod arenas {
    pub(super) fn available() -> bool {
        false
    }

    pub(super) fn bind(_slot: usize) {}
}

impl Drop for Compactor {
    fn drop(&mut self) {
        if let Some((thread, exit)) = self.parked.take() {
            drop(exit);
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fib_trie::{InsertFlags, NextHop, Route};

    /// A table of `n` routes inserted one by one: worn ([`FibWriter::compact`] rebuilds it).
    fn worn(n: u32) -> FibWriter<u32> {
        let mut fib = FibWriter::<u32>::new();
        let hop = vec![NextHop::new(Some(0x0a00_0001), 2)];
        for i in 0..n {
            let route = Route::unicast(0x0b00_0000 | i << 8, 24, 254, hop.clone());
            fib.insert(&route, InsertFlags::ADD).unwrap();
        }
        fib
    }

    #[test]
    fn the_slot_moves_on_only_after_a_rebuild() {
        let mut compactor = Compactor::default();
        let first = compactor.slot;
        assert_eq!(first.is_some(), cfg!(feature = "jemalloc-arenas"));
        let (mut fib4, mut fib6) = (worn(5_000), FibWriter::<u128>::new());
        assert_eq!(compactor.compact(&mut fib4, &mut fib6), 1);
        let after = compactor.slot;
        assert_eq!(
            after,
            first.map(|s| s ^ 1),
            "the next rebuild goes to the other arena"
        );
        assert_eq!(compactor.compact(&mut fib4, &mut fib6), 0);
        assert_eq!(compactor.slot, after, "nothing rebuilt: the slot stays");
    }

    #[cfg(feature = "jemalloc-arenas")]
    #[test]
    fn rebuilds_alternate_between_their_arenas() {
        let [a, b] = arenas::indices().expect("jemalloc made the rebuild arenas");
        assert_ne!(a, b);
        let bound = |slot| {
            std::thread::spawn(move || {
                let before = arenas::current();
                arenas::bind(slot);
                (before, arenas::current())
            })
            .join()
            .unwrap()
        };
        let (own, first) = bound(0);
        assert_eq!(first, a);
        assert_ne!(own, a, "no thread is given a rebuild arena unasked");
        assert_eq!(bound(1).1, b);
        assert_eq!(bound(2).1, a);
    }
}
