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
//! control thread's, and the parked arena's holes are not reused (measured and open:
//! `docs/forwarder.md`, "Memory after mass changes").

use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use fib_trie::FibWriter;

/// Rebuilds worn tables on a thread of their own; keeps the last such thread parked.
#[derive(Debug, Default)]
pub(crate) struct Compactor {
    parked: Option<(JoinHandle<()>, mpsc::Sender<()>)>,
}

impl Compactor {
    /// [`FibWriter::compact`] of both families' FIBs, run on a new thread (the writers are
    /// moved there and back); returns how many tables were rebuilt. Runs on the calling
    /// thread if no thread can be started.
    pub(crate) fn compact(
        &mut self,
        fib4: &mut FibWriter<u32>,
        fib6: &mut FibWriter<u128>,
    ) -> usize {
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
                let rebuilt = writers
                    .as_mut()
                    .map_or(0, |(w4, w6)| w4.compact() + w6.compact());
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
        let rebuilt = rebuilt.unwrap_or_else(|| w4.compact() + w6.compact());
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
