//! Giving freed heap memory back to the kernel after the tables changed.
//!
//! The `xfwd` binary's global allocator is mimalloc ([`Allocator`]: mimalloc 3, counting the
//! bytes xfwd holds), not glibc's malloc: under glibc a mass delete and re-add of the whole
//! bgp-full-v4 (a link flap: 1,072,528 routes) left about 34 MiB of free heap resident in
//! pieces `malloc_trim` could not return, so the full-table soak grew by 23-26% where 5% is
//! allowed. mimalloc allocates each size class from pages of its own (64 KiB) per thread,
//! frees into the page an object came from whatever thread frees it, and returns a page's
//! memory once it is empty: the same bgp-full-v4 cycle in one process
//! (`netlink_mirror`'s `sync_tests::memory_redump_cycles`) grows resident memory by 1-2%
//! under mimalloc, 12% under jemalloc and about 24% under glibc (`docs/forwarder.md`,
//! "Memory after mass changes", with the measurements).
//!
//! mimalloc returns empty pages to the kernel on its own, shortly (10 ms, `purge_delay`)
//! after they empty, the next time their thread allocates or frees. [`Trimmer`] in addition
//! collects ([`trim`], `mi_collect(true)`) once the tables have changed and have then been
//! quiet for a moment (or every 10 s under steady churn, and a second after each bulk
//! rebuild), from the link monitor's thread, never on a run loop. [`memory`] says where the
//! memory is.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mimalloc::MiMalloc;

/// Decides when to trim: after the table generation changed, once it has stayed the same for
/// [`Trimmer::QUIET`] (a burst of changes is over), or after [`Trimmer::MAX_WAIT`] under
/// changes that never pause; at most once per [`Trimmer::PERIOD`]; and
/// [`Trimmer::AFTER_REBUILD`] after each bulk rebuild of the tables ([`Trimmer::due_with`]).
///
/// ```
/// use std::time::{Duration, Instant};
/// use forwarder::trim::Trimmer;
///
/// let start = Instant::now();
/// let mut trimmer = Trimmer::new(start, 7);
/// assert!(!trimmer.due(start + Duration::from_secs(60), 7), "nothing changed");
/// assert!(!trimmer.due(start + Duration::from_secs(61), 8), "changing now");
/// assert!(trimmer.due(start + Duration::from_secs(63), 8), "quiet since");
/// assert!(!trimmer.due(start + Duration::from_secs(64), 8), "done already");
/// ```
#[derive(Debug, Clone)]
pub struct Trimmer {
    trimmed_at: Instant,
    trimmed_generation: u64,
    seen: u64,
    seen_at: Instant,
    rebuilds: u64,
    rebuilt_at: Option<Instant>,
}

impl Trimmer {
    /// How long the generation must stay unchanged before a trim.
    pub const QUIET: Duration = Duration::from_secs(1);
    /// The least time between two trims.
    pub const PERIOD: Duration = Duration::from_secs(5);
    /// Under changes that never pause (steady route churn), a trim after this long anyway.
    pub const MAX_WAIT: Duration = Duration::from_secs(10);
    /// After a bulk rebuild, a trim this long after it whatever [`Trimmer::PERIOD`] and
    /// [`Trimmer::MAX_WAIT`] say: the old tables (about 10 MiB at 100,000 routes) are freed
    /// once readers unpin, and under steady churn the next periodic trim came 5-9 s later, all
    /// that time resident (soak of 2026-11-28, release build, glibc). Under glibc a trim of a
    /// fragmented heap held the arenas' locks for tens of milliseconds (25-80 ms measured on
    /// a 70 MiB heap with 42 MiB free in small pieces, load 18), so trims stay rare
    /// otherwise; mimalloc's collection of that cost is not measured.
    pub const AFTER_REBUILD: Duration = Duration::from_secs(1);

    /// Starts at `now` with the tables at `generation` (nothing to trim yet).
    pub fn new(now: Instant, generation: u64) -> Self {
        Trimmer {
            trimmed_at: now,
            trimmed_generation: generation,
            seen: generation,
            seen_at: now,
            rebuilds: 0,
            rebuilt_at: None,
        }
    }

    /// Whether to trim now, the tables being at `generation`; when it says yes, it counts the
    /// trim as done.
    pub fn due(&mut self, now: Instant, generation: u64) -> bool {
        self.due_with(now, generation, self.rebuilds)
    }

    /// [`Trimmer::due`], with `rebuilds` the bulk rebuilds of the tables so far: a change of it
    /// makes a trim due [`Trimmer::AFTER_REBUILD`] later.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use forwarder::trim::Trimmer;
    ///
    /// let start = Instant::now();
    /// let mut trimmer = Trimmer::new(start, 7);
    /// let at = |s| start + Duration::from_millis(s);
    /// // Steady churn: the generation moves at every look.
    /// assert!(!trimmer.due_with(at(100), 8, 0));
    /// assert!(!trimmer.due_with(at(200), 9, 1), "rebuilt just now");
    /// assert!(!trimmer.due_with(at(900), 10, 1));
    /// assert!(trimmer.due_with(at(1300), 11, 1), "a second after the rebuild");
    /// assert!(!trimmer.due_with(at(2400), 12, 1), "once");
    /// ```
    pub fn due_with(&mut self, now: Instant, generation: u64, rebuilds: u64) -> bool {
        if rebuilds != self.rebuilds {
            self.rebuilds = rebuilds;
            self.rebuilt_at = Some(now);
        }
        if let Some(at) = self.rebuilt_at
            && now.duration_since(at) >= Self::AFTER_REBUILD
        {
            self.rebuilt_at = None;
            self.trimmed_at = now;
            self.trimmed_generation = generation;
            return true;
        }
        if generation != self.seen {
            self.seen = generation;
            self.seen_at = now;
            return false;
        }
        let since_trim = now.duration_since(self.trimmed_at);
        let due = generation != self.trimmed_generation
            && since_trim >= Self::PERIOD
            && (now.duration_since(self.seen_at) >= Self::QUIET || since_trim >= Self::MAX_WAIT);
        if due {
            self.trimmed_at = now;
            self.trimmed_generation = generation;
        }
        due
    }
}

/// The global allocator the `xfwd` binary (and this crate's tests) declares: mimalloc, with
/// a count of the bytes allocated through it ([`memory`]'s `heap_allocated`; one relaxed
/// atomic addition per allocation, and no allocation is made per packet).
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: forwarder::trim::Allocator = forwarder::trim::Allocator;
/// let _boxed = Box::new(7u64);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct Allocator;

/// Bytes allocated through [`Allocator`] and not yet freed.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to mimalloc's `GlobalAlloc` with the arguments it was given,
// so mimalloc's guarantees are the caller's; the counter is arithmetic on the side and never
// touches the memory.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let ptr = unsafe { MiMalloc.alloc(layout) };
        if !ptr.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !ptr.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from mimalloc, with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and the caller's contract for `realloc` unchanged.
        let new = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

/// Returns mimalloc's free memory to the kernel now (`mi_collect(true)`: the calling
/// thread's heap, the pages other threads abandoned, and every empty page waiting for its
/// purge); always true (kept for the callers' logs).
///
/// ```
/// let _collected: bool = forwarder::trim::trim();
/// ```
pub fn trim() -> bool {
    // SAFETY: mi_collect takes a flag, touches only mimalloc's own structures under its own
    // synchronisation, and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
    true
}

/// Where the process's memory is, as the allocator and the tables count it, in bytes:
/// `heap_allocated` (what xfwd holds from its allocator: [`Allocator`]'s count, 0 where it is
/// not the global allocator), `heap_committed` (memory mimalloc has committed from the
/// kernel: pages in use and empty pages not yet purged), `fast_arenas` (the FIBs' fast
/// structures' arenas, mapped apart from the allocator).
///
/// ```
/// let memory = forwarder::trim::memory();
/// assert!(memory.iter().any(|(name, _)| name == "fast_arenas"));
/// ```
pub fn memory() -> Vec<(String, u64)> {
    let mut committed = 0usize;
    let mut unused = [0usize; 7];
    let [elapsed, user, system, rss, peak_rss, peak_commit, faults] = &mut unused;
    // SAFETY: every pointer is to a live, writable usize of this frame, which is all
    // mi_process_info writes to.
    unsafe {
        libmimalloc_sys::mi_process_info(
            elapsed,
            user,
            system,
            rss,
            peak_rss,
            &mut committed,
            peak_commit,
            faults,
        )
    };
    vec![
        (
            "heap_allocated".to_owned(),
            ALLOCATED.load(Ordering::Relaxed) as u64,
        ),
        ("heap_committed".to_owned(), committed as u64),
        (
            "fast_arenas".to_owned(),
            (fib_trie::FastLpm::<u32>::arena_bytes_in_process()) as u64,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(m: &[(String, u64)], name: &str) -> u64 {
        m.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in {m:?}"))
            .1
    }

    #[test]
    fn memory_counts_what_is_allocated() {
        // This crate's tests allocate as the binary does (lib.rs). Other tests of this binary
        // run alongside: the bound leaves them 1 MiB.
        let before = part(&memory(), "heap_allocated");
        let blocks: Vec<Box<[u8; 1024]>> = (0..4096).map(|_| Box::new([1u8; 1024])).collect();
        let after = memory();
        assert!(part(&after, "heap_allocated") >= before + (4 << 20) - (1 << 20));
        assert!(part(&after, "heap_committed") >= 4 << 20);
        drop(blocks);
    }

    #[test]
    fn releases_what_was_freed() {
        // 64 MiB in small blocks, then freed: collected, mimalloc's committed memory falls
        // (other tests of this binary run alongside: the bound leaves them 16 MiB).
        let blocks: Vec<Box<[u8; 4096]>> = (0..16_384).map(|_| Box::new([1u8; 4096])).collect();
        let kept: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([2u8; 64])).collect();
        let full = part(&memory(), "heap_committed");
        drop(blocks);
        assert!(trim());
        let collected = part(&memory(), "heap_committed");
        assert!(
            collected + (48 << 20) <= full,
            "committed {full} bytes before the free, {collected} after the collection"
        );
        assert_eq!(kept.iter().map(|b| b[0] as usize).sum::<usize>(), 128);
    }

    #[test]
    fn waits_for_a_quiet_moment_and_a_period() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut trimmer = Trimmer::new(t0, 0);
        // A burst of changes: never while they go on.
        for s in 0..10 {
            assert!(!trimmer.due(at(s), s + 1));
        }
        assert!(trimmer.due(at(11), 10));
        // Changes right after a trim wait for the period.
        assert!(!trimmer.due(at(12), 11));
        assert!(!trimmer.due(at(14), 11));
        assert!(trimmer.due(at(16), 11));
        assert!(!trimmer.due(at(100), 11));
    }

    #[test]
    fn trims_under_steady_churn_too() {
        // The link monitor asks every 200 ms; the generation moves every second.
        let t0 = Instant::now();
        let mut trimmer = Trimmer::new(t0, 0);
        let trims = (0..150u64)
            .filter(|&tick| trimmer.due(t0 + Duration::from_millis(200 * tick), tick / 5 + 1))
            .count();
        assert_eq!(trims, 2, "at 10 s and 20 s of 30");
    }
}
