//! The few system calls around the rings: clocks and CPU pinning.
#![forbid(unsafe_code)]

use nix::sched::{CpuSet, sched_setaffinity};
use nix::sys::resource::{UsageWho, getrusage};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;

use crate::GenError;

/// CLOCK_MONOTONIC in nanoseconds: the probes' time base, the same in every network namespace
/// of the machine (a vDSO call, no system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, timespec_ns)
}

/// CPU time the calling thread has used (user and system), in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, timespec_ns)
}

/// CPU time the whole process has used so far (user and system, all threads), in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| {
        let ns = |t: nix::sys::time::TimeVal| {
            t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1_000
        };
        ns(u.user_time()) + ns(u.system_time())
    })
}

fn timespec_ns(t: nix::sys::time::TimeSpec) -> u64 {
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Pins the calling thread to `cpu`.
///
/// # Errors
/// [`GenError::Pin`] when the CPU does not exist or is not allowed.
pub fn pin_to(cpu: usize) -> Result<(), GenError> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|source| GenError::Pin { cpu, source })?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|source| GenError::Pin { cpu, source })
}
