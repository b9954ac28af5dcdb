//! The exact hash of one direction (`net->xfrm.policy_bydst[dir]`): policies whose prefixes
//! reach the hash thresholds, in chains keyed by both addresses masked to the thresholds.
//!
//! Each bucket holds an immutable chain sorted by rank; a change publishes a new chain for one
//! bucket. Growing publishes a new bucket array with new chains.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_epoch::{Atomic, Guard};
use foldhash::fast::FixedState;

use crate::addr::{Family, mask};
use crate::epoch::{load, publish, take};
use crate::list;
use crate::policy::{Direction, HThresh, Policy, PolicyType};
use crate::selector::Flow;

/// Buckets of a new table.
const MIN_BUCKETS: usize = 16;

/// A hash chain: the policies of one bucket, sorted by rank.
struct Chain {
    policies: Box<[Policy]>,
}

/// A bucket array.
struct Buckets {
    slots: Box<[Atomic<Chain>]>,
}

impl Drop for Buckets {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut() {
            drop(take(slot));
        }
    }
}

impl Buckets {
    fn new(len: usize) -> Buckets {
        Buckets {
            slots: (0..len).map(|_| Atomic::null()).collect(),
        }
    }
}

/// The exact hash of one direction.
pub(crate) struct ExactTable {
    dir: Direction,
    /// `(dbits, sbits)` per family.
    bits: [(u8, u8); 2],
    hasher: FixedState,
    buckets: Atomic<Buckets>,
    /// The number of policies (written by the writer only): a lookup skips an empty table.
    count: AtomicUsize,
}

impl Drop for ExactTable {
    fn drop(&mut self) {
        drop(take(&mut self.buckets));
    }
}

impl ExactTable {
    /// An empty table under `hthresh`, hashing with `seed`.
    pub(crate) fn new(dir: Direction, hthresh: &HThresh, seed: u64) -> ExactTable {
        ExactTable {
            dir,
            bits: [hthresh.bits(dir, Family::V4), hthresh.bits(dir, Family::V6)],
            hasher: FixedState::with_seed(seed),
            buckets: Atomic::new(Buckets::new(MIN_BUCKETS)),
            count: AtomicUsize::new(0),
        }
    }

    /// The bucket of a flow or a selector: both addresses masked to the thresholds.
    #[inline]
    fn bucket(&self, family: Family, daddr: u128, saddr: u128, len: usize) -> usize {
        let (dbits, sbits) = self.bits[family.slot()];
        let key = (daddr & mask(dbits), saddr & mask(sbits), family);
        // `len` is a power of two.
        self.hasher.hash_one(key) as usize & (len - 1)
    }

    /// The best sub and main policies of the chain that match `flow` (first match of each
    /// type, the chain being sorted by rank).
    #[inline]
    pub(crate) fn lookup<'g>(
        &self,
        flow: &Flow,
        ptype: Option<PolicyType>,
        guard: &'g Guard,
    ) -> [Option<&'g Policy>; 2] {
        let mut found = [None, None];
        // Relaxed: a stale count only means a lookup that is not ordered after a concurrent
        // change, which either answer satisfies.
        if self.count.load(Ordering::Relaxed) == 0 {
            return found;
        }
        let Some(buckets) = load(&self.buckets, guard) else {
            return found;
        };
        let slot = self.bucket(flow.family, flow.daddr, flow.saddr, buckets.slots.len());
        let Some(chain) = load(&buckets.slots[slot], guard) else {
            return found;
        };
        for policy in chain.policies.iter() {
            if ptype.is_some_and(|t| t != policy.ptype) {
                continue;
            }
            let at = policy.ptype as usize;
            if found[at].is_none() && policy.matches(flow) {
                found[at] = Some(policy);
                if found[0].is_some() && found[1].is_some() {
                    break;
                }
            }
        }
        found
    }

    /// The policy with exactly this identity.
    pub(crate) fn find<'g>(
        &self,
        selector: &crate::Selector,
        ptype: PolicyType,
        if_id: u32,
        mark: crate::Mark,
        guard: &'g Guard,
    ) -> Option<&'g Policy> {
        let buckets = load(&self.buckets, guard)?;
        let slot = self.bucket(
            selector.family(),
            selector.dst.addr,
            selector.src.addr,
            buckets.slots.len(),
        );
        let chain = load(&buckets.slots[slot], guard)?;
        chain.policies.iter().find(|p| {
            p.selector == *selector && p.ptype == ptype && p.if_id == if_id && p.mark == mark
        })
    }

    /// Writers only. Publishes the chain of `remove` and `add` (same identity, so same bucket)
    /// with `remove` taken out and `add` put in, as one change. Returns whether `remove` was
    /// found (always true without one).
    pub(crate) fn change(
        &self,
        remove: Option<&Policy>,
        add: Option<&Policy>,
        guard: &Guard,
    ) -> bool {
        let Some(any) = remove.or(add) else {
            return true;
        };
        debug_assert_eq!(any.dir, self.dir);
        let Some(buckets) = load(&self.buckets, guard) else {
            return false;
        };
        let sel = &any.selector;
        let slot = &buckets.slots[self.bucket(
            sel.family(),
            sel.dst.addr,
            sel.src.addr,
            buckets.slots.len(),
        )];
        let old: &[Policy] = load(slot, guard).map_or(&[], |c| &c.policies);
        let mut policies = old.to_vec();
        if let Some(r) = remove {
            match list::without(&policies, r.index) {
                Some(rest) => policies = rest,
                None => return false,
            }
        }
        if let Some(a) = add {
            policies = list::with(&policies, *a);
        }
        let delta = usize::from(add.is_some()).wrapping_sub(usize::from(remove.is_some()));
        let count = self.count.load(Ordering::Relaxed).wrapping_add(delta);
        // Counted up before an add is published and down after a removal is, so a reader that
        // sees a policy's chain also sees a non-zero count.
        if add.is_some() {
            self.count.store(count, Ordering::Release);
        }
        let chain = (!policies.is_empty()).then(|| Chain {
            policies: policies.into(),
        });
        publish(slot, chain, guard);
        self.count.store(count, Ordering::Release);
        true
    }

    /// Writers only. Doubles the bucket array when it holds more than one policy per bucket.
    pub(crate) fn maybe_grow(&self, count: usize, guard: &Guard) {
        let Some(buckets) = load(&self.buckets, guard) else {
            return;
        };
        let len = buckets.slots.len();
        if count <= len {
            return;
        }
        let mut new_len = len;
        while new_len < count {
            new_len *= 2;
        }
        let mut chains: Vec<Vec<Policy>> = vec![Vec::new(); new_len];
        for slot in buckets.slots.iter() {
            for policy in load(slot, guard).map_or(&[][..], |c| &c.policies) {
                let sel = &policy.selector;
                let at = self.bucket(sel.family(), sel.dst.addr, sel.src.addr, new_len);
                // Old chains are sorted and so is the merged order within a new chain.
                chains[at] = list::with(&chains[at], *policy);
            }
        }
        let new = Buckets {
            slots: chains
                .into_iter()
                .map(|c| {
                    if c.is_empty() {
                        Atomic::null()
                    } else {
                        Atomic::new(Chain { policies: c.into() })
                    }
                })
                .collect(),
        };
        publish(&self.buckets, Some(new), guard);
    }

    /// The number of buckets.
    pub(crate) fn bucket_count(&self, guard: &Guard) -> usize {
        load(&self.buckets, guard).map_or(0, |b| b.slots.len())
    }

    /// The longest chain, for diagnostics.
    pub(crate) fn longest_chain(&self, guard: &Guard) -> usize {
        load(&self.buckets, guard).map_or(0, |b| {
            b.slots
                .iter()
                .map(|s| load(s, guard).map_or(0, |c| c.policies.len()))
                .max()
                .unwrap_or(0)
        })
    }
}
