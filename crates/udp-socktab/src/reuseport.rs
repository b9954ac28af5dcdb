//! `SO_REUSEPORT` groups (the kernel's `sock_reuseport`): the array of member sockets in join
//! order, whether any member ever connected (`has_conns`), and whether a member asked for
//! `SO_INCOMING_CPU`; and the selection of a member by flow hash.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Owned};

use crate::sock::Sock;

/// One published version of a group.
#[derive(Debug)]
pub(crate) struct GroupSnap {
    /// The members in the kernel's `socks[]` order: joiners append, a leaver's slot takes the
    /// last member.
    pub(crate) socks: Box<[Arc<Sock>]>,
    /// Set when a member connects, never cleared (`reuseport_has_conns_set`).
    pub(crate) has_conns: bool,
    /// How many members set `SO_INCOMING_CPU`; when nonzero, selection prefers a member whose
    /// incoming CPU is the looking-up CPU.
    pub(crate) incoming_cpu: u32,
}

/// A group: what member records point to (`sk_reuseport_cb`); its membership is swapped whole.
#[derive(Debug, Default)]
pub(crate) struct GroupCell {
    snap: Atomic<GroupSnap>,
}

impl GroupCell {
    /// The current version, valid while `guard` is pinned; `None` when the group is empty.
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> Option<&'g GroupSnap> {
        let shared = self.snap.load(Ordering::Acquire, guard);
        // SAFETY: versions are freed only by `publish` (unlinked first, then `defer_destroy`,
        // so after every guard pinned now) or by `Drop` (when no record points to the cell, so
        // no reader can reach it).
        unsafe { shared.as_ref() }
    }

    /// Publishes a new version (writer only); an empty group publishes nothing, which also
    /// breaks the cycle between a group and its members' records.
    pub(crate) fn publish(&self, snap: Option<GroupSnap>, guard: &Guard) {
        let next = match snap {
            Some(snap) if !snap.socks.is_empty() => Owned::new(snap).into_shared(guard),
            _ => crossbeam_epoch::Shared::null(),
        };
        let old = self.snap.swap(next, Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: unlinked by the swap above by the single writer, so retired once, and
            // protected for readers by their guards until destroyed.
            unsafe { guard.defer_destroy(old) };
        }
    }
}

impl Drop for GroupCell {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: the last record pointing to the cell is gone, so no reader can
        // reach the cell, and the writer no longer holds it.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let old = self
                .snap
                .swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, guard);
            if !old.is_null() {
                drop(old.into_owned());
            }
        }
    }
}

/// `reciprocal_scale`: maps a 32-bit hash onto `0..n` as `(hash * n) >> 32`.
pub(crate) fn reciprocal_scale(hash: u32, n: usize) -> usize {
    ((u64::from(hash) * n as u64) >> 32) as usize
}

/// `reuseport_select_sock_by_hash`: from the member at `reciprocal_scale(hash, n)` onwards
/// (wrapping), the first unconnected member; when the group has incoming-CPU members, the first
/// unconnected member whose incoming CPU is `cpu`, else the first unconnected one met.
pub(crate) fn select_by_hash(snap: &GroupSnap, hash: u32, cpu: i32) -> Option<&Sock> {
    let n = snap.socks.len();
    if n == 0 {
        return None;
    }
    let start = reciprocal_scale(hash, n);
    let mut first_valid = None;
    for k in 0..n {
        let sk = &*snap.socks[(start + k) % n];
        if sk.connected {
            continue;
        }
        if snap.incoming_cpu == 0 || sk.incoming_cpu.load(Ordering::Relaxed) == cpu {
            return Some(sk);
        }
        first_valid.get_or_insert(sk);
    }
    first_valid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_spreads_over_members() {
        assert_eq!(reciprocal_scale(0, 5), 0);
        assert_eq!(reciprocal_scale(u32::MAX, 5), 4);
        assert_eq!(reciprocal_scale(1 << 31, 4), 2);
        assert_eq!(reciprocal_scale(12345, 1), 0);
    }
}
