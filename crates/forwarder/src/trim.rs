//! Giving freed heap memory back to the kernel after the tables changed.
//!
//! A mass delete and re-add of routes (a link going down takes every route through it; a
//! routing daemon installs them again) builds new trie nodes while the old ones wait for the
//! epoch to pass, then frees the old ones. glibc keeps freed memory in its arenas for reuse
//! and returns to the kernel only what lies at the top of a heap, so resident memory stays at
//! the high-water mark of such a cycle. [`Trimmer`] calls `malloc_trim(0)` (which also
//! releases whole free pages inside the arenas with `MADV_DONTNEED`) from the link monitor's
//! thread once the tables have changed and have then been quiet for a moment (or every
//! 10 s under steady churn, and a second after each bulk rebuild), never on a run loop. What
//! a trim cannot return (free pieces smaller than a page between live nodes) the mirror
//! avoids: it collects its epoch garbage as it goes, and rebuilds worn tables in bulk on a
//! thread of its own, in an arena of their own (`docs/forwarder.md`, "Memory after mass
//! changes"). [`memory`] says where the memory is.
//!
//! [`fix_mmap_threshold`] keeps large temporary buffers (a dump's record of routes, the events
//! kept during a dump, a dump of a whole table) out of the heap: glibc's default threshold
//! rises to the size of each large block freed (up to 32 MiB), after which such buffers are
//! carved from the heap among long-lived trie nodes, and their holes stay resident. Fixed at
//! 128 KiB, they are mapped and unmapped whole (measured with `netlink_mirror`'s ignored test
//! `sync_tests::memory_redump_cycles`: 100,000 routes deleted and re-added during a re-dump,
//! six times; resident memory settles at 59.8 MiB instead of 69.5 MiB).

use std::time::{Duration, Instant};

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
    /// that time resident (soak of 2026-11-28, release build). A trim of a fragmented heap
    /// holds the arenas' locks for tens of milliseconds (25-80 ms measured on a 70 MiB heap
    /// with 42 MiB free in small pieces, load 18), so trims stay rare otherwise.
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

/// Returns free heap memory to the kernel (`malloc_trim(0)`); whether any was released.
/// Does nothing (false) where the C library is not glibc.
///
/// ```
/// let _released: bool = forwarder::trim::trim();
/// ```
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers and only walks glibc's own arenas under their
        // locks; it is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Where the process's memory is, as the allocator and the tables count it, in bytes:
/// `heap_in_use` (glibc's `uordblks`: allocated blocks in its heaps), `heap_free` (`fordblks`:
/// free blocks in its heaps, resident or returned by a trim), `heap_mapped` (`hblkhd`: blocks
/// mapped on their own, at least the mmap threshold each), `fast_arenas` (the FIBs' fast
/// structures' arenas, mapped apart from the allocator). Empty where the C library is not
/// glibc (the arenas alone then).
///
/// ```
/// let memory = forwarder::trim::memory();
/// assert!(memory.iter().any(|(name, _)| name == "fast_arenas"));
/// ```
pub fn memory() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes nothing and returns a copy of glibc's counters, taken under
        // its arenas' locks; it is safe to call from any thread at any time.
        let m = unsafe { libc::mallinfo2() };
        out.push(("heap_in_use".to_owned(), m.uordblks as u64));
        out.push(("heap_free".to_owned(), m.fordblks as u64));
        out.push(("heap_mapped".to_owned(), m.hblkhd as u64));
    }
    out.push((
        "fast_arenas".to_owned(),
        (fib_trie::FastLpm::<u32>::arena_bytes_in_process()) as u64,
    ));
    out
}

/// The mmap threshold [`fix_mmap_threshold`] sets: glibc's default starting value.
pub const MMAP_THRESHOLD: usize = 128 << 10;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (which also stops its dynamic
/// adjustment), so that every block at least that large is mapped on its own and returned to
/// the kernel when freed; whether the setting was taken. Does nothing (false) where the C
/// library is not glibc. Called once by `xfwd run` before any thread starts.
///
/// ```
/// let _fixed: bool = forwarder::trim::fix_mmap_threshold();
/// ```
pub fn fix_mmap_threshold() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two integers and sets a parameter of glibc's allocator under
        // its lock; it is safe to call from any thread at any time.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_stay_mapped_after_one_is_freed() {
        assert!(fix_mmap_threshold());
        // Freed once, a 4 MiB block would raise glibc's dynamic threshold to 4 MiB and the
        // next one would be carved from the heap; with the threshold fixed each is mapped on
        // its own: its chunk starts a page, 16 bytes (the chunk header) before the block.
        for round in 0..3 {
            let big = vec![1u8; 4 << 20];
            assert_eq!(
                big.as_ptr() as usize % 4096,
                16,
                "round {round}: not a mapping"
            );
            drop(big);
        }
    }

    #[test]
    fn memory_counts_what_is_allocated() {
        let before = memory();
        let heap = |m: &[(String, u64)]| m.iter().find(|(n, _)| n == "heap_in_use").unwrap().1;
        let blocks: Vec<Box<[u8; 1024]>> = (0..4096).map(|_| Box::new([1u8; 1024])).collect();
        let after = memory();
        assert!(heap(&after) >= heap(&before) + (4 << 20) - (64 << 10));
        drop(blocks);
    }

    #[test]
    fn releases_what_was_freed() {
        // 64 MiB in blocks below the mmap threshold (so they live in the heap), then freed:
        // glibc keeps most of it until trimmed.
        let blocks: Vec<Box<[u8; 4096]>> = (0..16_384).map(|_| Box::new([1u8; 4096])).collect();
        let kept: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([2u8; 64])).collect();
        drop(blocks);
        assert!(trim(), "64 MiB freed and nothing released");
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
