//! The writer's bookkeeping, shared by [`PolicyDb`](crate::PolicyDb) and
//! [`LinearDb`](crate::LinearDb): identities, indexes and insertion positions.
//!
//! It decides what an add, update or delete means (the kernel's `xfrm_policy_insert`,
//! `xfrm_gen_index`, `xfrm_policy_bysel_ctx`, `xfrm_policy_byid`); the lookup structures only
//! store what it admitted.

use std::collections::BTreeSet;

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::Error;
use crate::policy::{
    Direction, ExactPos, HThresh, Mark, Policy, PolicySpec, PolicyType, SelectorKey,
};
use crate::selector::Selector;

/// What an admitted add or update changes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admitted {
    /// The policy to store.
    pub(crate) policy: Policy,
    /// The policy it replaces (an update of an existing selector), to remove.
    pub(crate) replaced: Option<Policy>,
}

/// Which inexact policy of a direction holds the kernel's `pos` 0: the first of
/// `policy_inexact[dir]` at the last renumbering (every inexact insert renumbers the whole
/// list; deletes do not, so deleting the holder leaves no policy with `pos` 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Head {
    /// No inexact policy has `pos` 0.
    #[default]
    None,
    /// This index has `pos` 0.
    Known(u32),
    /// This index (the first of the list) has `pos` 0 or nobody has: the history before the
    /// database saw the kernel's state is not known.
    Unknown(u32),
}

impl Head {
    /// The head as one `u64` for an atomic (0: none; state in the high half).
    pub(crate) const fn encode(self) -> u64 {
        match self {
            Head::None => 0,
            Head::Known(i) => 1 << 32 | i as u64,
            Head::Unknown(i) => 2 << 32 | i as u64,
        }
    }

    /// The inverse of [`Head::encode`].
    pub(crate) const fn decode(v: u64) -> Head {
        match v >> 32 {
            1 => Head::Known(v as u32),
            2 => Head::Unknown(v as u32),
            _ => Head::None,
        }
    }

    fn holder(self) -> Option<u32> {
        match self {
            Head::None => None,
            Head::Known(i) | Head::Unknown(i) => Some(i),
        }
    }
}

/// Policies by index and by identity, the counters that number them, and the kernel's
/// bookkeeping of list order (`order`, `created`) and of `pos`.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_index: HashMap<u32, Policy, RandomState>,
    by_key: HashMap<SelectorKey, u32, RandomState>,
    /// The next `created` (and `order`) value.
    next_seq: u64,
    /// The kernel's `idx_generator`: advances by 8, the direction goes in the low bits.
    idx_generator: u32,
    /// The thresholds that decide which policies are inexact.
    hthresh: HThresh,
    /// Per direction, the inexact policies in `policy_inexact[dir]` order.
    inexact: [BTreeSet<(u32, u64, u32)>; 3],
    /// Per direction, who holds `pos` 0.
    head: [Head; 3],
}

fn list_entry(p: &Policy) -> (u32, u64, u32) {
    (p.priority, p.order, p.index)
}

/// Whether a selector is exact under every threshold (both prefixes full length): such a
/// policy was never inexact, so its kernel `pos` is 0.
fn always_exact(selector: &Selector) -> bool {
    let bits = selector.family().bits();
    selector.dst.prefixlen() == bits && selector.src.prefixlen() == bits
}

impl Registry {
    /// An empty registry under `hthresh`.
    pub(crate) fn new(hthresh: HThresh) -> Registry {
        Registry {
            hthresh,
            ..Registry::default()
        }
    }

    /// Decides an add (`excl`) or update of `spec` and records the result: the kernel's
    /// `xfrm_policy_insert` (identity by `selector_cmp`, type, if_id and mark; the replaced
    /// policy's index kept; its list place kept when the priority is unchanged).
    pub(crate) fn admit(&mut self, spec: &PolicySpec, excl: bool) -> Result<Admitted, Error> {
        if !spec.selector.is_consistent() {
            return Err(Error::FamilyMismatch);
        }
        let key = SelectorKey {
            selector: spec.selector,
            dir: spec.dir,
            ptype: spec.ptype,
            if_id: spec.if_id,
            mark: spec.mark,
        };
        let replaced = match self.by_key.get(&key) {
            Some(&index) if excl => return Err(Error::Exists { index }),
            Some(index) => self.by_index.get(index).copied(),
            None => None,
        };
        let index = match (replaced, spec.index) {
            // An update keeps the index of the policy it replaces.
            (Some(old), _) => old.index,
            (None, Some(index)) => {
                if Direction::of_index(index) != Some(spec.dir) {
                    return Err(Error::IndexDirection {
                        index,
                        dir: spec.dir,
                    });
                }
                if self.by_index.contains_key(&index) {
                    return Err(Error::IndexInUse(index));
                }
                index
            }
            (None, None) => self.generate_index(spec.dir),
        };
        let created = self.next_seq;
        self.next_seq += 1;
        // `xfrm_policy_insert_list`: the new policy goes after the last policy whose priority
        // is not larger, scanning up to the replaced one when its priority is not smaller:
        // with an equal priority that is the replaced policy's place.
        let order = match replaced {
            Some(old) if old.priority == spec.priority => old.order,
            _ => created,
        };
        let policy = Policy {
            selector: spec.selector,
            dir: spec.dir,
            ptype: spec.ptype,
            if_id: spec.if_id,
            mark: spec.mark,
            priority: spec.priority,
            action: spec.action,
            index,
            order,
            created,
            // A new `struct xfrm_policy` starts zeroed.
            exact_pos: ExactPos::Zero,
        };
        let d = spec.dir.slot();
        if self.hthresh.is_exact(spec.dir, &spec.selector) {
            if let Some(old) = replaced {
                self.unlink(&old);
            }
        } else {
            // `xfrm_policy_insert_inexact_list`: linked (the replaced policy still in the
            // list), every policy renumbered, then the replaced one unlinked. An update that
            // keeps the priority takes the replaced policy's place (and entry).
            let entry = list_entry(&policy);
            let old = replaced.map(|o| list_entry(&o)).filter(|o| *o != entry);
            self.inexact[d].insert(entry);
            let first = self.inexact[d].first().copied();
            self.head[d] = match first {
                Some(f) if Some(f) == old => Head::None,
                Some(f) => Head::Known(f.2),
                None => Head::None,
            };
            if let Some(o) = old {
                self.inexact[d].remove(&o);
            }
        }
        self.by_index.insert(index, policy);
        self.by_key.insert(key, index);
        Ok(Admitted { policy, replaced })
    }

    /// Takes a policy out of the inexact list of its direction (`__xfrm_policy_unlink`: no
    /// renumbering).
    fn unlink(&mut self, policy: &Policy) {
        let d = policy.dir.slot();
        self.inexact[d].remove(&list_entry(policy));
        if self.head[d].holder() == Some(policy.index) {
            self.head[d] = Head::None;
        }
    }

    /// A free index for a policy of `dir`.
    fn generate_index(&mut self, dir: Direction) -> u32 {
        loop {
            let index = self.idx_generator | dir as u32;
            self.idx_generator = self.idx_generator.wrapping_add(8);
            if index != 0 && !self.by_index.contains_key(&index) {
                return index;
            }
        }
    }

    /// Removes the policy with this identity.
    pub(crate) fn remove(
        &mut self,
        selector: &Selector,
        dir: Direction,
        ptype: PolicyType,
        if_id: u32,
        mark: Mark,
    ) -> Result<Policy, Error> {
        let key = SelectorKey {
            selector: *selector,
            dir,
            ptype,
            if_id,
            mark,
        };
        let index = *self.by_key.get(&key).ok_or(Error::NotFound)?;
        self.remove_index(index)
    }

    /// Removes the policy with this index.
    pub(crate) fn remove_index(&mut self, index: u32) -> Result<Policy, Error> {
        let policy = self.by_index.remove(&index).ok_or(Error::NotFound)?;
        self.by_key.remove(&policy.key());
        self.unlink(&policy);
        Ok(policy)
    }

    /// The policy with this index.
    pub(crate) fn get_index(&self, index: u32) -> Option<Policy> {
        self.by_index.get(&index).copied()
    }

    /// Removes every policy of `ptype`, returning how many there were.
    pub(crate) fn flush(&mut self, ptype: PolicyType) -> usize {
        let gone: Vec<u32> = self
            .by_index
            .values()
            .filter(|p| p.ptype == ptype)
            .map(|p| p.index)
            .collect();
        for index in &gone {
            // Cannot fail: the index was just listed.
            let _ = self.remove_index(*index);
        }
        gone.len()
    }

    /// The current thresholds.
    pub(crate) fn hthresh(&self) -> HThresh {
        self.hthresh
    }

    /// Whether a policy is in the exact hash under the current thresholds.
    pub(crate) fn is_exact(&self, policy: &Policy) -> bool {
        self.hthresh.is_exact(policy.dir, &policy.selector)
    }

    /// Who holds `pos` 0 in direction `dir`.
    pub(crate) fn head(&self, dir: Direction) -> Head {
        self.head[dir.slot()]
    }

    /// New thresholds, as the kernel's `xfrm_hash_rebuild` applies them: every policy is
    /// re-inserted in creation order (`policy_all` from its tail), so every list is sorted by
    /// priority then `created`; inexact inserts renumber `pos`; a policy that moves from the
    /// inexact lists to the exact hash keeps the `pos` it had.
    pub(crate) fn set_hthresh(&mut self, hthresh: HThresh) {
        let old = self.hthresh;
        let old_head = self.head;
        self.hthresh = hthresh;
        for set in &mut self.inexact {
            set.clear();
        }
        for policy in self.by_index.values_mut() {
            policy.order = policy.created;
            let was_exact = old.is_exact(policy.dir, &policy.selector);
            let is_exact = hthresh.is_exact(policy.dir, &policy.selector);
            if is_exact && !was_exact {
                policy.exact_pos = match old_head[policy.dir.slot()] {
                    Head::Known(i) if i == policy.index => ExactPos::Zero,
                    _ => ExactPos::Unknown,
                };
            }
            if !is_exact {
                self.inexact[policy.dir.slot()].insert(list_entry(policy));
            }
        }
        for (head, set) in self.head.iter_mut().zip(&self.inexact) {
            *head = set.first().map_or(Head::None, |e| Head::Known(e.2));
        }
    }

    /// Forgets what only the kernel's history tells (for a database loaded from a kernel
    /// dump): the holder of `pos` 0 may be the first inexact policy or nobody, and a policy in
    /// the exact hash may carry a `pos` from an inexact past unless both its prefixes are full
    /// length.
    pub(crate) fn forget_history(&mut self) {
        for (head, set) in self.head.iter_mut().zip(&self.inexact) {
            *head = set.first().map_or(Head::None, |e| Head::Unknown(e.2));
        }
        let hthresh = self.hthresh;
        for policy in self.by_index.values_mut() {
            if hthresh.is_exact(policy.dir, &policy.selector) && !always_exact(&policy.selector) {
                policy.exact_pos = ExactPos::Unknown;
            }
        }
    }

    /// The number of policies.
    pub(crate) fn len(&self) -> usize {
        self.by_index.len()
    }

    /// Every policy in the kernel's dump order: the most recently added or updated first.
    pub(crate) fn dump(&self) -> Vec<Policy> {
        let mut all: Vec<Policy> = self.by_index.values().copied().collect();
        all.sort_unstable_by_key(|p| std::cmp::Reverse(p.created));
        all
    }

    /// Every policy, oldest first (the order a rebuild re-inserts them in).
    pub(crate) fn oldest_first(&self) -> Vec<Policy> {
        let mut all: Vec<Policy> = self.by_index.values().copied().collect();
        all.sort_unstable_by_key(|p| p.created);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;
    use crate::policy::Mark;

    fn spec(dst: &str, dir: Direction) -> PolicySpec {
        PolicySpec::new(
            Selector::new("0.0.0.0/0".parse().unwrap(), dst.parse().unwrap()).unwrap(),
            dir,
        )
    }

    #[test]
    fn indexes_encode_the_direction_and_updates_keep_them() {
        let mut r = Registry::new(HThresh::default());
        let a = r.admit(&spec("10.0.0.0/8", Direction::Out), true).unwrap();
        let b = r.admit(&spec("10.0.0.0/8", Direction::Fwd), true).unwrap();
        assert_eq!(Direction::of_index(a.policy.index), Some(Direction::Out));
        assert_eq!(Direction::of_index(b.policy.index), Some(Direction::Fwd));
        assert_ne!(a.policy.index, b.policy.index);

        let err = r
            .admit(&spec("10.0.0.0/8", Direction::Out), true)
            .unwrap_err();
        assert_eq!(
            err,
            Error::Exists {
                index: a.policy.index
            }
        );

        let up = r
            .admit(
                &spec("10.0.0.0/8", Direction::Out)
                    .priority(7)
                    .action(Action::Block),
                false,
            )
            .unwrap();
        assert_eq!(up.policy.index, a.policy.index);
        assert_eq!(up.replaced, Some(a.policy));
        assert!(up.policy.created > b.policy.created);
        // A new priority: the updated policy goes last among its new equals.
        assert!(up.policy.order > b.policy.order);
        assert_eq!(r.len(), 2);
        assert_eq!(r.dump()[0], up.policy);
    }

    #[test]
    fn requested_indexes_are_checked() {
        let mut r = Registry::new(HThresh::default());
        let got = r
            .admit(&spec("10.0.0.0/8", Direction::Fwd).index(8 * 40 + 2), true)
            .unwrap();
        assert_eq!(got.policy.index, 322);
        assert_eq!(
            r.admit(&spec("10.1.0.0/16", Direction::Fwd).index(322), true)
                .unwrap_err(),
            Error::IndexInUse(322)
        );
        assert_eq!(
            r.admit(&spec("10.1.0.0/16", Direction::In).index(322 + 8), true)
                .unwrap_err(),
            Error::IndexDirection {
                index: 330,
                dir: Direction::In
            }
        );
    }

    #[test]
    fn same_priority_update_keeps_its_place_and_head_follows_renumbering() {
        let mut r = Registry::new(HThresh::default());
        let a = r
            .admit(&spec("10.0.0.0/8", Direction::Fwd).priority(5), true)
            .unwrap();
        let b = r
            .admit(&spec("10.0.0.0/9", Direction::Fwd).priority(5), true)
            .unwrap();
        assert_eq!(r.head(Direction::Fwd), Head::Known(a.policy.index));
        let a2 = r
            .admit(
                &spec("10.0.0.0/8", Direction::Fwd)
                    .priority(5)
                    .action(Action::Block),
                false,
            )
            .unwrap();
        assert_eq!(a2.policy.order, a.policy.order);
        assert!(a2.policy.order < b.policy.order && a2.policy.created > b.policy.created);
        assert_eq!(r.head(Direction::Fwd), Head::Known(a.policy.index));
        // Deleting the holder of pos 0 leaves nobody with pos 0 until the next insert.
        r.remove_index(a.policy.index).unwrap();
        assert_eq!(r.head(Direction::Fwd), Head::None);
        r.admit(&spec("10.0.0.0/10", Direction::Fwd).priority(9), true)
            .unwrap();
        assert_eq!(r.head(Direction::Fwd), Head::Known(b.policy.index));
        // A threshold change re-sorts by creation: the update now ranks after b.
        let c = r
            .admit(
                &spec("10.0.0.0/9", Direction::Fwd)
                    .priority(5)
                    .action(Action::Block),
                false,
            )
            .unwrap();
        assert_eq!(c.policy.order, b.policy.order);
        r.set_hthresh(HThresh::default());
        let c = r.get_index(c.policy.index).unwrap();
        assert_eq!(c.order, c.created);
        // Dumped policies: the holder of pos 0 is uncertain.
        r.forget_history();
        assert!(matches!(r.head(Direction::Fwd), Head::Unknown(_)));
    }

    #[test]
    fn masked_twins_and_marks_are_distinct_policies() {
        let mut r = Registry::new(HThresh::default());
        let a = r
            .admit(&spec("10.100.1.3/25", Direction::Fwd), true)
            .unwrap();
        let b = r
            .admit(&spec("10.100.1.96/25", Direction::Fwd), true)
            .unwrap();
        assert_ne!(a.policy.index, b.policy.index);
        let m = spec("10.100.1.3/25", Direction::Fwd).mark(Mark {
            value: 5,
            mask: 0xf,
        });
        let c = r.admit(&m, true).unwrap();
        let d = r
            .admit(
                &m.mark(Mark {
                    value: 5,
                    mask: 0xff,
                }),
                true,
            )
            .unwrap();
        assert_eq!(r.len(), 4);
        assert!(c.replaced.is_none() && d.replaced.is_none());
    }

    #[test]
    fn removal_by_key_and_index() {
        let mut r = Registry::new(HThresh::default());
        let a = r.admit(&spec("10.0.0.0/8", Direction::Out), true).unwrap();
        let b = r.admit(&spec("10.0.0.0/9", Direction::Out), true).unwrap();
        let sel = a.policy.selector;
        assert_eq!(
            r.remove(&sel, Direction::In, PolicyType::Main, 0, Mark::ANY),
            Err(Error::NotFound)
        );
        assert_eq!(
            r.remove(
                &sel,
                Direction::Out,
                PolicyType::Main,
                0,
                Mark { value: 1, mask: 1 }
            ),
            Err(Error::NotFound)
        );
        assert_eq!(
            r.remove(&sel, Direction::Out, PolicyType::Main, 0, Mark::ANY),
            Ok(a.policy)
        );
        assert_eq!(r.remove_index(b.policy.index), Ok(b.policy));
        assert_eq!(r.remove_index(b.policy.index), Err(Error::NotFound));
        assert_eq!(r.len(), 0);
    }
}
