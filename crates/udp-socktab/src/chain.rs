//! A hash chain: an immutable array of socket records behind one atomic pointer, replaced
//! whole by the writer (copy-on-write) and read under an epoch guard.
//!
//! The kernel's chains are RCU hlists that a writer links into in place; an array that is
//! swapped whole keeps the same order rules (insert at head or tail, remove without reordering)
//! and gives a reader one pointer to follow per chain instead of one per socket.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Owned};

use crate::sock::Sock;

/// One published version of a chain.
#[derive(Debug)]
struct Chain {
    socks: Box<[Arc<Sock>]>,
}

/// The head of a chain: null when empty.
#[derive(Debug, Default)]
pub(crate) struct ChainHead {
    head: Atomic<Chain>,
}

impl ChainHead {
    /// The chain's records, valid while `guard` is pinned.
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> &'g [Arc<Sock>] {
        let shared = self.head.load(Ordering::Acquire, guard);
        // SAFETY: a chain is freed only by `publish` (after unlinking it, through
        // `defer_destroy`, so not before every guard pinned now is dropped) or by `Drop` (which
        // has the head to itself: no reader can reach it). A null head reads as empty.
        match unsafe { shared.as_ref() } {
            Some(chain) => &chain.socks,
            None => &[],
        }
    }

    /// Replaces the chain by `socks` (writer only: one writer at a time); the old version is
    /// freed once no reader can hold it.
    pub(crate) fn publish(&self, socks: Vec<Arc<Sock>>, guard: &Guard) {
        let next = if socks.is_empty() {
            crossbeam_epoch::Shared::null()
        } else {
            Owned::new(Chain {
                socks: socks.into_boxed_slice(),
            })
            .into_shared(guard)
        };
        let old = self.head.swap(next, Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: `old` is unlinked by the swap above, and only the single writer unlinks,
            // so it is retired once; readers that loaded it are protected by their guards
            // until the deferred destruction runs.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// A copy of the current records (writer only).
    pub(crate) fn to_vec(&self, guard: &Guard) -> Vec<Arc<Sock>> {
        self.load(guard).to_vec()
    }
}

impl Drop for ChainHead {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: the head is being dropped, so no reader can reach it any more
        // (its owner is unreachable for readers, see `UdpTable`'s and `NetnsEntry`'s owners),
        // and no other thread can swap it.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let old = self
                .head
                .swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, guard);
            if !old.is_null() {
                drop(old.into_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sock::{Family, NetnsId, SockId};
    use std::sync::atomic::AtomicI32;

    fn record(id: u64) -> Arc<Sock> {
        Arc::new(Sock {
            id: SockId(id),
            netns: NetnsId(0),
            family: Family::V4,
            rcv_saddr: 0,
            rcv_saddr4: 0,
            daddr: 0,
            daddr4: 0,
            num: 1,
            dport: 0,
            connected: false,
            bound_dev_if: 0,
            reuse: false,
            reuseport: false,
            uid: 0,
            incoming_cpu: AtomicI32::new(-1),
            group: None,
        })
    }

    #[test]
    fn publish_replace_and_drop() {
        let head = ChainHead::default();
        let guard = crossbeam_epoch::pin();
        assert!(head.load(&guard).is_empty());
        head.publish(vec![record(1), record(2)], &guard);
        let seen = head.load(&guard);
        let kept = Arc::clone(&seen[1]);
        head.publish(vec![record(3)], &guard);
        // The old version stays readable under the guard that loaded it.
        assert_eq!(seen.iter().map(|s| s.id.0).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(head.load(&guard)[0].id.0, 3);
        head.publish(Vec::new(), &guard);
        assert!(head.load(&guard).is_empty());
        drop(guard);
        assert_eq!(kept.id.0, 2);
        let guard = crossbeam_epoch::pin();
        head.publish(vec![record(4)], &guard);
        drop(guard);
        drop(head);
    }
}
