//! Where a table's routes live: a trie plus the writer's interning of route infos, behind a
//! pointer the table can swap. While the rules are the defaults, the local and main tables
//! share one store (the kernel's merged trie, aliases tagged with their table id); the first
//! custom rule gives each its own (`fib_unmerge`).

#![allow(
    clippy::mutable_key_type,
    reason = "a RouteInfo's only interior mutability is its nexthop object's current group, \
              which neither its Hash (the object's id) nor its Eq (the object's address) reads"
)]

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::key::TrieKey;
use crate::route::{FibAlias, RouteInfo};
use crate::trie::LcTrie;

/// One trie of routes (of one table, or of local and main while merged) and its infos.
pub(crate) struct Store<K: TrieKey> {
    pub(crate) trie: LcTrie<K, FibAlias<K>>,
    infos: Mutex<Infos<K>>,
}

impl<K: TrieKey> Store<K> {
    pub(crate) fn new() -> Self {
        Self::with_trie(LcTrie::new())
    }

    /// A store over `trie`, interning the infos its routes already hold.
    pub(crate) fn with_trie(trie: LcTrie<K, FibAlias<K>>) -> Self {
        let mut set = HashSet::new();
        trie.for_each(&epoch::pin(), |_, aliases| {
            set.extend(aliases.iter().map(|a| Arc::clone(&a.value.info)));
        });
        Store {
            trie,
            infos: Mutex::new(Infos {
                set,
                dying: Vec::new(),
            }),
        }
    }

    /// The writer's lock on this store (its route infos).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Infos<K>> {
        self.infos.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writer's interning of [`RouteInfo`]s (the kernel's `fib_info_hash`).
pub(crate) struct Infos<K> {
    /// Every info in use, once.
    set: HashSet<Arc<RouteInfo<K>>>,
    /// Infos of deleted routes: dropped from `set` once nothing but `set` and this list holds
    /// them (retired leaves keep a reference until the epoch frees them).
    dying: Vec<Arc<RouteInfo<K>>>,
}

impl<K: TrieKey> Infos<K> {
    pub(crate) fn intern(&mut self, info: &RouteInfo<K>) -> Arc<RouteInfo<K>> {
        if let Some(shared) = self.set.get(info) {
            return Arc::clone(shared);
        }
        let shared = Arc::new(info.clone());
        self.set.insert(Arc::clone(&shared));
        shared
    }

    /// Forgets `info` if only the set and `holders` other references hold it.
    pub(crate) fn release(&mut self, info: &Arc<RouteInfo<K>>, holders: usize) {
        if Arc::strong_count(info) <= 1 + holders {
            self.set.remove(info);
        }
    }

    /// Remembers the info of a deleted route, to forget once unused. An info shared by many
    /// routes (one next hop for a whole BGP feed) is remembered once: pushing it per delete
    /// made `dying`, and the sweep every change walks, grow with every delete.
    pub(crate) fn retire(&mut self, info: Arc<RouteInfo<K>>) {
        if !self.dying.iter().any(|d| Arc::ptr_eq(d, &info)) {
            self.dying.push(info);
        }
    }

    /// How many infos wait to be forgotten.
    #[cfg(test)]
    pub(crate) fn dying_len(&self) -> usize {
        self.dying.len()
    }

    pub(crate) fn sweep(&mut self) {
        let Infos { set, dying } = self;
        dying.retain(|i| {
            let dead = Arc::strong_count(i) <= 2;
            if dead {
                set.remove(i);
            }
            !dead
        });
    }
}

/// A table's pointer to its store: read by lookups under the epoch, swapped by the unmerge.
pub(crate) struct StoreCell<K: TrieKey> {
    ptr: Atomic<Arc<Store<K>>>,
}

impl<K: TrieKey> StoreCell<K> {
    pub(crate) fn new(store: Arc<Store<K>>) -> Self {
        StoreCell {
            ptr: Atomic::new(store),
        }
    }

    /// The store, kept alive by `guard`.
    #[inline(always)]
    pub(crate) fn load<'g>(&self, guard: &'g Guard) -> &'g Arc<Store<K>> {
        let ptr = self.ptr.load(Ordering::Acquire, guard);
        // SAFETY: the cell is never null (set in `new`, only replaced by `swap` with another
        // store), and a replaced pointer is retired with `defer_destroy`, so it lives as long as
        // `guard` is pinned.
        unsafe { ptr.deref() }
    }

    /// Points the cell at `store` and retires the old pointer (its store is freed when the last
    /// `Arc` goes, after every reader that loaded it has unpinned). Writer only.
    pub(crate) fn swap(&self, store: Arc<Store<K>>, guard: &Guard) {
        let old = self.ptr.swap(Owned::new(store), Ordering::AcqRel, guard);
        // SAFETY: `old` was just unlinked by the swap and is retired once; readers that loaded
        // it are pinned, so it is freed after they unpin.
        unsafe { guard.defer_destroy(old) };
    }
}

impl<K: TrieKey> Drop for StoreCell<K> {
    fn drop(&mut self) {
        // SAFETY: the table owning the cell is being dropped, so (as for the trie a table owns)
        // no lookup through it is running; the pointer is freed once, and the store itself
        // only when its last `Arc` goes.
        unsafe {
            let guard = epoch::unprotected();
            drop(self.ptr.load(Ordering::Relaxed, guard).into_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::NextHop;

    #[test]
    fn a_shared_info_is_retired_once() {
        let mut infos = Infos::<u32> {
            set: HashSet::new(),
            dying: Vec::new(),
        };
        let info = RouteInfo {
            nexthops: vec![NextHop::new(Some(0x0a00_0001), 2)],
            ..RouteInfo::default()
        };
        let shared = infos.intern(&info);
        let holders: Vec<_> = (0..100).map(|_| infos.intern(&info)).collect();
        assert!(holders.iter().all(|h| Arc::ptr_eq(h, &shared)));
        for h in holders {
            infos.sweep();
            infos.retire(h);
        }
        assert_eq!(infos.dying_len(), 1);
        infos.sweep();
        assert_eq!(infos.dying_len(), 1, "still used by `shared`");
        drop(shared);
        infos.sweep();
        assert_eq!((infos.dying_len(), infos.set.len()), (0, 0));
    }
}
