//! Giving freed heap memory back to the kernel after the tables changed.
//!
//! The `xfwd` binary's global allocator is jemalloc ([`Allocator`], with its statistics
//! compiled in), not glibc's malloc: under glibc a mass delete and re-add of the whole
//! bgp-full-v4 (a link flap: 1,072,528 routes) left about 34 MiB of free heap resident in
//! pieces `malloc_trim` could not return, so the full-table soak grew by 23-26% where 5% is
//! allowed (`docs/forwarder.md`, "Memory after mass changes", with the measurements).
//! jemalloc keeps small objects of one size class together in page-sized slabs, and a slab
//! that empties becomes free pages that go back to the kernel (below): what a cycle frees is
//! returned, except the room left inside slabs that still hold live objects.
//!
//! jemalloc returns freed pages (its *dirty* pages) to the kernel on its own, by decay: a page
//! freed now is returned within `dirty_decay_ms` (10 s by default), by a background thread
//! ([`configure`] turns them on; without them only when the arena is used again). [`Trimmer`]
//! in addition purges every arena ([`trim`], `arena.<all>.purge`) once the tables have
//! changed and have then been quiet for a moment (or every 10 s under steady churn, and one
//! and four seconds after each bulk rebuild), from the link monitor's thread, never on a run loop:
//! after a mass change the freed pages go back at once rather than over the next seconds.
//! [`memory`] says where the memory is, by jemalloc's own counts.

use std::time::{Duration, Instant};

/// Decides when to trim: after the table generation changed, once it has stayed the same for
/// [`Trimmer::QUIET`] (a burst of changes is over), or after [`Trimmer::MAX_WAIT`] under
/// changes that never pause; at most once per [`Trimmer::PERIOD`]; and
/// [`Trimmer::AFTER_REBUILD`] and [`Trimmer::AFTER_REBUILD_AGAIN`] after each bulk rebuild of
/// the tables ([`Trimmer::due_with`]).
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
    /// The last bulk rebuild, and how many of its trims are done.
    rebuilt_at: Option<(Instant, usize)>,
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
    /// that time resident (soak of 2026-11-28, release build). A trim of a fragmented heap
    /// holds the arenas' locks for tens of milliseconds (25-80 ms measured on a 70 MiB heap
    /// with 42 MiB free in small pieces, load 18), so trims stay rare otherwise.
    pub const AFTER_REBUILD: Duration = Duration::from_secs(1);
    /// And once more this long after a bulk rebuild: a refill's last changes and the old
    /// tables' nodes freed after the first trim stayed resident as jemalloc's dirty pages
    /// until the next periodic trim or their decay, up to 10 s later, into the samples the
    /// soak counts (13 MiB at 304-311 s in the full-table soak of 2026-11-29 06:09, the
    /// live heap flat; `docs/forwarder.md`, "Memory after mass changes").
    pub const AFTER_REBUILD_AGAIN: Duration = Duration::from_secs(4);

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
    /// makes a trim due [`Trimmer::AFTER_REBUILD`] later, and another
    /// [`Trimmer::AFTER_REBUILD_AGAIN`] after the rebuild.
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
    /// assert!(!trimmer.due_with(at(2400), 12, 1), "not again yet");
    /// assert!(trimmer.due_with(at(4300), 13, 1), "and once more");
    /// assert!(!trimmer.due_with(at(9000), 14, 1), "no more: the periodic trims after");
    /// ```
    pub fn due_with(&mut self, now: Instant, generation: u64, rebuilds: u64) -> bool {
        if rebuilds != self.rebuilds {
            self.rebuilds = rebuilds;
            self.rebuilt_at = Some((now, 0));
        }
        if let Some((at, done)) = self.rebuilt_at
            && let Some(&after) = [Self::AFTER_REBUILD, Self::AFTER_REBUILD_AGAIN].get(done)
            && now.duration_since(at) >= after
        {
            self.rebuilt_at = (done == 0).then_some((at, 1));
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

/// The global allocator the `xfwd` binary (and this crate's tests) declares: jemalloc.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: forwarder::trim::Allocator = forwarder::trim::Allocator {};
/// let _boxed = Box::new(7u64);
/// ```
pub type Allocator = tikv_jemallocator::Jemalloc;

/// `arena.<i>.purge` for every arena (`MALLCTL_ARENAS_ALL`).
const PURGE_ALL: &std::ffi::CStr = c"arena.4096.purge";

/// Returns jemalloc's freed pages of every arena to the kernel now (`arena.<all>.purge`),
/// rather than as they decay; whether jemalloc took the request (false if it is not the
/// process's allocator with this interface).
///
/// ```
/// let _purged: bool = forwarder::trim::trim();
/// ```
pub fn trim() -> bool {
    // SAFETY: the name is a NUL-terminated C string; the purge control reads and writes
    // nothing (all four pointers null, the length 0), which is what jemalloc requires of it;
    // it takes the arenas' own locks and may be called from any thread at any time.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        ) == 0
    }
}

/// Where the process's memory is, as the allocator and the tables count it, in bytes
/// (jemalloc's statistics, refreshed first): `heap_allocated` (`stats.allocated`: what the
/// program holds), `heap_active` (`stats.active`: the pages those allocations are in; the
/// difference is free room inside pages in use), `heap_resident` (`stats.resident`: at most
/// this much of the allocator's memory is resident: active pages, freed pages not yet
/// returned, its metadata), `heap_retained` (`stats.retained`: address space kept for reuse
/// but returned to the kernel, not resident), `fast_arenas` (the FIBs' fast structures'
/// arenas, mapped apart from the allocator). Only `fast_arenas` if jemalloc's statistics
/// cannot be read.
///
/// ```
/// let memory = forwarder::trim::memory();
/// assert!(memory.iter().any(|(name, _)| name == "fast_arenas"));
/// ```
pub fn memory() -> Vec<(String, u64)> {
    use tikv_jemalloc_ctl::{epoch, stats};
    let mut out = Vec::new();
    // The statistics are a snapshot taken at each epoch.
    if epoch::advance().is_ok() {
        for (name, read) in [
            ("heap_allocated", stats::allocated::read as fn() -> _),
            ("heap_active", stats::active::read),
            ("heap_resident", stats::resident::read),
            ("heap_retained", stats::retained::read),
        ] {
            if let Ok(bytes) = read() {
                out.push((name.to_owned(), bytes as u64));
            }
        }
    }
    out.push((
        "fast_arenas".to_owned(),
        (fib_trie::FastLpm::<u32>::arena_bytes_in_process()) as u64,
    ));
    out
}

/// Sets jemalloc up for a long-running router; whether it took the settings. Called once by
/// `xfwd run` before any thread starts: background threads return freed pages to the
/// kernel as they decay (`background_thread`), so memory freed by one burst of changes does
/// not wait for the next allocation in its arena.
///
/// ```
/// let _configured: bool = forwarder::trim::configure();
/// ```
pub fn configure() -> bool {
    tikv_jemalloc_ctl::background_thread::write(true).is_ok()
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
        // This crate's tests allocate through jemalloc, as the binary does (lib.rs).
        let before = memory();
        let blocks: Vec<Box<[u8; 1024]>> = (0..4096).map(|_| Box::new([1u8; 1024])).collect();
        let after = memory();
        let allocated = |m: &[(String, u64)]| part(m, "heap_allocated");
        assert!(allocated(&after) >= allocated(&before) + (4 << 20) - (64 << 10));
        assert!(part(&after, "heap_active") >= allocated(&after));
        assert!(part(&after, "heap_resident") >= part(&after, "heap_active"));
        drop(blocks);
    }

    #[test]
    fn releases_what_was_freed() {
        // 64 MiB in small blocks, then freed: jemalloc keeps the emptied pages as dirty (to
        // return them as they decay, 10 s later) until purged. Other tests of this binary run
        // alongside: the bound leaves them 16 MiB.
        let blocks: Vec<Box<[u8; 4096]>> = (0..16_384).map(|_| Box::new([1u8; 4096])).collect();
        let kept: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([2u8; 64])).collect();
        drop(blocks);
        let freed = part(&memory(), "heap_resident");
        assert!(trim(), "the purge was refused");
        let purged = part(&memory(), "heap_resident");
        assert!(
            purged + (48 << 20) <= freed,
            "resident {freed} bytes before the purge, {purged} after"
        );
        assert_eq!(kept.iter().map(|b| b[0] as usize).sum::<usize>(), 128);
    }

    #[test]
    fn background_threads_can_be_turned_on() {
        assert!(configure());
        assert!(tikv_jemalloc_ctl::background_thread::read().unwrap());
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
