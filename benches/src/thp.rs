//! Where a benchmark's table sits in memory: how much of an address range is on transparent
//! huge pages, read from `/proc/self` (Linux; elsewhere every answer is `None`).
//!
//! Two sources, the exact one first:
//! - **Pages**: `/proc/self/pagemap` gives each 4 KiB page's frame and `/proc/kpageflags` that
//!   frame's flags (`KPF_THP`), so [`placement`] counts the range's own pages on huge pages,
//!   and how many distinct 2 MiB physical frames hold them. Both files need `CAP_SYS_ADMIN`
//!   for frame numbers (root); without it they read as zero and this source is skipped.
//! - **Mapping**: the `AnonHugePages` of the `/proc/self/smaps` mapping that holds the range's
//!   first byte; the mapping may hold other allocations too (the kernel merges neighbouring
//!   anonymous mappings with the same flags), so it bounds rather than counts.
//!
//! Read once after a table is built, never while one is timed.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;

const PAGE: usize = 4096;
/// `KPF_THP` in `/proc/kpageflags` (`include/uapi/linux/kernel-page-flags.h`).
const KPF_THP: u64 = 1 << 22;
/// Present bit and frame number field of a `/proc/self/pagemap` entry.
const PM_PRESENT: u64 = 1 << 63;
const PM_PFN: u64 = (1 << 55) - 1;

/// What is known of where an address range sits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Bytes of the range.
    pub bytes: usize,
    /// Of its 4 KiB pages: present, and on transparent huge pages (`None`: frame numbers not
    /// readable, not root).
    pub pages: Option<(usize, usize)>,
    /// Distinct 2 MiB-aligned physical frames holding its present pages (`None` as above).
    pub frames_2m: Option<usize>,
    /// The `/proc/self/smaps` mapping holding the range's start: its size and its
    /// `AnonHugePages`, in bytes.
    pub mapping: Option<(usize, usize)>,
}

impl Placement {
    /// The share of the range on huge pages, from the pages if readable, else `None`.
    pub fn huge_share(&self) -> Option<f64> {
        let (_, huge) = self.pages?;
        Some(huge as f64 * PAGE as f64 / self.bytes.max(1) as f64)
    }

    /// One line for a report: `32.0 MiB: 100% on huge pages (8192 of 8192 pages, 16 2 MiB
    /// frames); mapping 34.0 MiB, 32.0 MiB AnonHugePages`.
    pub fn describe(&self) -> String {
        let mib = |b: usize| b as f64 / f64::from(1 << 20);
        let mut s = format!("{:.1} MiB", mib(self.bytes));
        match (self.pages, self.frames_2m) {
            (Some((present, huge)), Some(frames)) => {
                let total = self.bytes.div_ceil(PAGE);
                s.push_str(&format!(
                    ": {:.0}% on huge pages ({huge} of {total} pages, {present} present, in {frames} 2 MiB physical frames)",
                    100.0 * huge as f64 / total.max(1) as f64
                ));
            }
            _ => s.push_str(": pages not readable (not root)"),
        }
        if let Some((size, huge)) = self.mapping {
            s.push_str(&format!(
                "; its mapping {:.1} MiB, {:.1} MiB AnonHugePages",
                mib(size),
                mib(huge)
            ));
        }
        s
    }
}

/// Where `range` (addresses of this process) sits: see the module's sources.
pub fn placement(range: Range<usize>) -> Placement {
    let (pages, frames_2m) = match pages(&range) {
        Some((present, huge, frames)) => (Some((present, huge)), Some(frames)),
        None => (None, None),
    };
    Placement {
        bytes: range.len(),
        pages,
        frames_2m,
        mapping: mapping_of(range.start),
    }
}

/// Present pages, pages on THP and distinct 2 MiB physical frames of `range`, or `None` where
/// frame numbers cannot be read.
fn pages(range: &Range<usize>) -> Option<(usize, usize, usize)> {
    if range.is_empty() {
        return None;
    }
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let flags = File::open("/proc/kpageflags").ok()?;
    let first = range.start / PAGE;
    let count = (range.end - 1) / PAGE - first + 1;
    let mut entries = vec![0u8; count * 8];
    pagemap
        .read_exact_at(&mut entries, (first * 8) as u64)
        .ok()?;
    let (mut present, mut huge) = (0, 0);
    let mut frames = Vec::new();
    let mut word = [0u8; 8];
    for entry in entries.chunks_exact(8) {
        let e = u64::from_le_bytes(entry.try_into().expect("8 bytes"));
        if e & PM_PRESENT == 0 {
            continue;
        }
        let pfn = e & PM_PFN;
        if pfn == 0 {
            // Frame numbers hidden: not root.
            return None;
        }
        present += 1;
        frames.push(pfn >> 9);
        flags.read_exact_at(&mut word, pfn * 8).ok()?;
        huge += usize::from(u64::from_le_bytes(word) & KPF_THP != 0);
    }
    frames.sort_unstable();
    frames.dedup();
    Some((present, huge, frames.len()))
}

/// Size and `AnonHugePages` (bytes) of the `/proc/self/smaps` mapping holding `addr`.
pub fn mapping_of(addr: usize) -> Option<(usize, usize)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut current: Option<usize> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next()?;
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            current = (lo..hi).contains(&addr).then_some(hi - lo);
            continue;
        }
        if let (Some(size), "AnonHugePages:") = (current, first) {
            let kib: usize = fields.next()?.parse().ok()?;
            return Some((size, kib * 1024));
        }
    }
    None
}

/// The process's `AnonHugePages` in bytes (`/proc/self/smaps_rollup`).
pub fn anon_huge_total() -> Option<usize> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    rollup.lines().find_map(|line| {
        let kib = line
            .strip_prefix("AnonHugePages:")?
            .split_whitespace()
            .next()?;
        Some(kib.parse::<usize>().ok()? * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_range_is_found_and_described() {
        let v = vec![1u8; 3 << 20];
        let range = v.as_ptr() as usize..v.as_ptr() as usize + v.len();
        let p = placement(range.clone());
        assert_eq!(p.bytes, 3 << 20);
        if cfg!(target_os = "linux") {
            let (size, huge) = p.mapping.expect("the vector's mapping");
            assert!(size >= v.len() && huge <= size, "{p:?}");
            if let Some((present, huge)) = p.pages {
                // Written, so every page is present.
                assert_eq!(
                    present,
                    (3 << 20) / PAGE + usize::from(range.start % PAGE != 0)
                );
                assert!(huge <= present);
            }
            assert!(anon_huge_total().is_some());
        }
        assert!(p.describe().starts_with("3.0 MiB"));
        assert_eq!(placement(0..0).pages, None);
    }
}
