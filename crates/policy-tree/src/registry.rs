//! The writer's bookkeeping, shared by [`PolicyDb`](crate::PolicyDb) and
//! [`LinearDb`](crate::LinearDb): identities, indexes and insertion positions.
//!
//! It decides what an add, update or delete means (the kernel's `xfrm_policy_insert`,
//! `xfrm_gen_index`, `xfrm_policy_bysel_ctx`, `xfrm_policy_byid`); the lookup structures only
//! store what it admitted.

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::Error;
use crate::policy::{Direction, Policy, PolicySpec, PolicyType, SelectorKey};
use crate::selector::Selector;

/// What an admitted add or update changes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admitted {
    /// The policy to store.
    pub(crate) policy: Policy,
    /// The policy it replaces (an update of an existing selector), to remove.
    pub(crate) replaced: Option<Policy>,
}

/// Policies by index and by identity, plus the counters that number them.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_index: HashMap<u32, Policy, RandomState>,
    by_key: HashMap<SelectorKey, u32, RandomState>,
    /// The next insertion position.
    next_pos: u64,
    /// The kernel's `idx_generator`: advances by 8, the direction goes in the low bits.
    idx_generator: u32,
}

impl Registry {
    /// Decides an add (`excl`) or update of `spec` and records the result.
    pub(crate) fn admit(&mut self, spec: &PolicySpec, excl: bool) -> Result<Admitted, Error> {
        if !spec.selector.is_consistent() {
            return Err(Error::FamilyMismatch);
        }
        let key = SelectorKey {
            selector: spec.selector,
            dir: spec.dir,
            ptype: spec.ptype,
            if_id: spec.if_id,
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
        let policy = Policy {
            selector: spec.selector,
            dir: spec.dir,
            ptype: spec.ptype,
            if_id: spec.if_id,
            priority: spec.priority,
            action: spec.action,
            index,
            pos: self.next_pos,
        };
        self.next_pos += 1;
        self.by_index.insert(index, policy);
        self.by_key.insert(key, index);
        Ok(Admitted { policy, replaced })
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
    ) -> Result<Policy, Error> {
        let key = SelectorKey {
            selector: *selector,
            dir,
            ptype,
            if_id,
        };
        let index = self.by_key.remove(&key).ok_or(Error::NotFound)?;
        self.by_index.remove(&index).ok_or(Error::NotFound)
    }

    /// Removes the policy with this index.
    pub(crate) fn remove_index(&mut self, index: u32) -> Result<Policy, Error> {
        let policy = self.by_index.remove(&index).ok_or(Error::NotFound)?;
        self.by_key.remove(&policy.key());
        Ok(policy)
    }

    /// The policy with this index.
    pub(crate) fn get_index(&self, index: u32) -> Option<Policy> {
        self.by_index.get(&index).copied()
    }

    /// Removes every policy of `ptype`, returning how many there were.
    pub(crate) fn flush(&mut self, ptype: PolicyType) -> usize {
        let before = self.by_index.len();
        self.by_index.retain(|_, p| p.ptype != ptype);
        self.by_key.retain(|key, _| key.ptype != ptype);
        before - self.by_index.len()
    }

    /// The number of policies.
    pub(crate) fn len(&self) -> usize {
        self.by_index.len()
    }

    /// Every policy in the kernel's dump order: the most recently added or updated first.
    pub(crate) fn dump(&self) -> Vec<Policy> {
        let mut all: Vec<Policy> = self.by_index.values().copied().collect();
        all.sort_unstable_by_key(|p| std::cmp::Reverse(p.pos));
        all
    }

    /// Every policy, oldest first (the order a rebuild re-inserts them in).
    pub(crate) fn oldest_first(&self) -> Vec<Policy> {
        let mut all: Vec<Policy> = self.by_index.values().copied().collect();
        all.sort_unstable_by_key(|p| p.pos);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;

    fn spec(dst: &str, dir: Direction) -> PolicySpec {
        PolicySpec::new(
            Selector::new("0.0.0.0/0".parse().unwrap(), dst.parse().unwrap()).unwrap(),
            dir,
        )
    }

    #[test]
    fn indexes_encode_the_direction_and_updates_keep_them() {
        let mut r = Registry::default();
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
        assert!(up.policy.pos > b.policy.pos);
        assert_eq!(r.len(), 2);
        assert_eq!(r.dump()[0], up.policy);
    }

    #[test]
    fn requested_indexes_are_checked() {
        let mut r = Registry::default();
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
    fn removal_by_key_and_index() {
        let mut r = Registry::default();
        let a = r.admit(&spec("10.0.0.0/8", Direction::Out), true).unwrap();
        let b = r.admit(&spec("10.0.0.0/9", Direction::Out), true).unwrap();
        let sel = a.policy.selector;
        assert_eq!(
            r.remove(&sel, Direction::In, PolicyType::Main, 0),
            Err(Error::NotFound)
        );
        assert_eq!(
            r.remove(&sel, Direction::Out, PolicyType::Main, 0),
            Ok(a.policy)
        );
        assert_eq!(r.remove_index(b.policy.index), Ok(b.policy));
        assert_eq!(r.remove_index(b.policy.index), Err(Error::NotFound));
        assert_eq!(r.len(), 0);
    }
}
