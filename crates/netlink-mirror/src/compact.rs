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
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    parked: Option<(JoinHandle<()>, mpsc::Sender<()>)>,
    /// Rebuild on the calling thread (the control thread): no thread, one arena.
    here: bool,
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
        let spawned = std::thread::Builder::new()
            .name("xfwd-compact".into())
            .spawn(move || {
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
        let rebuilt = rebuilt.unwrap_or_else(|| rule.apply(&mut w4, &mut w6));
        *fib4 = w4;
        *fib6 = w6;
        rebuilt
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        if let Some((thread, exit)) = self.parked.take() {
            drop(exit);
            let _ = thread.join();
        }
    }
}
