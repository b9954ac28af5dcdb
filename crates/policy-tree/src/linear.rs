//! [`LinearDb`]: the reference implementation and benchmark baseline.
#![forbid(unsafe_code)]

use crate::Error;
use crate::decide::{Check, check, resolve};
use crate::policy::{Direction, HThresh, Mark, Policy, PolicySpec, PolicyType};
use crate::registry::{Admitted, Registry};
use crate::selector::{Flow, Selector};

/// The policy database as one list per direction, sorted by rank and scanned linearly: the
/// semantics [`PolicyDb`](crate::PolicyDb) must reproduce, written as plainly as possible.
///
/// [`lookup`](Self::lookup) follows the kernel's rule directly: of the matching policies of a
/// type, the first exact one (under the hash thresholds) and the first inexact one in list
/// order (priority, then [`Policy::order`]), the lower priority winning and a tie broken by
/// the kernel's `pos` (see the crate README); sub policies before main ones.
///
/// ```
/// use policy_tree::{Direction, Flow, LinearDb, PolicySpec, Selector};
///
/// let mut db = LinearDb::new();
/// let sel = Selector::new("10.0.0.0/8".parse()?, "0.0.0.0/0".parse()?)?;
/// db.add(PolicySpec::new(sel, Direction::In).priority(5))?;
/// let flow = Flow::new("10.1.2.3".parse().unwrap(), "192.0.2.1".parse().unwrap())?;
/// assert_eq!(db.lookup(&flow, Direction::In).map(|p| p.priority), Some(5));
/// # Ok::<(), policy_tree::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct LinearDb {
    registry: Registry,
    /// Per direction, whether the default policy is block.
    default_block: [bool; 3],
    /// Per direction, every policy sorted by rank.
    lists: [Vec<Policy>; 3],
}

impl LinearDb {
    /// An empty database.
    pub fn new() -> LinearDb {
        LinearDb::default()
    }

    /// As [`PolicyDb::add`](crate::PolicyDb::add).
    ///
    /// # Errors
    /// As [`PolicyDb::add`](crate::PolicyDb::add).
    pub fn add(&mut self, spec: PolicySpec) -> Result<Policy, Error> {
        self.insert(&spec, true)
    }

    /// As [`PolicyDb::update`](crate::PolicyDb::update).
    ///
    /// # Errors
    /// As [`PolicyDb::update`](crate::PolicyDb::update).
    pub fn update(&mut self, spec: PolicySpec) -> Result<Policy, Error> {
        self.insert(&spec, false)
    }

    fn insert(&mut self, spec: &PolicySpec, excl: bool) -> Result<Policy, Error> {
        let Admitted { policy, replaced } = self.registry.admit(spec, excl)?;
        if let Some(old) = replaced {
            self.unlink(&old);
        }
        let list = &mut self.lists[policy.dir.slot()];
        let at = list.partition_point(|p| p.rank() <= policy.rank());
        list.insert(at, policy);
        Ok(policy)
    }

    fn unlink(&mut self, policy: &Policy) {
        let list = &mut self.lists[policy.dir.slot()];
        list.retain(|p| p.index != policy.index);
    }

    /// Rebuilds the lists from the registry (after a change of every policy's order).
    fn relist(&mut self) {
        for list in &mut self.lists {
            list.clear();
        }
        for policy in self.registry.oldest_first() {
            self.lists[policy.dir.slot()].push(policy);
        }
        for list in &mut self.lists {
            list.sort_by_key(Policy::rank);
        }
    }

    /// As [`PolicyDb::delete`](crate::PolicyDb::delete).
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub fn delete(
        &mut self,
        selector: &Selector,
        dir: Direction,
        ptype: PolicyType,
        if_id: u32,
        mark: Mark,
    ) -> Result<Policy, Error> {
        let policy = self.registry.remove(selector, dir, ptype, if_id, mark)?;
        self.unlink(&policy);
        Ok(policy)
    }

    /// As [`PolicyDb::delete_by_index`](crate::PolicyDb::delete_by_index).
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub fn delete_by_index(&mut self, index: u32) -> Result<Policy, Error> {
        let policy = self.registry.remove_index(index)?;
        self.unlink(&policy);
        Ok(policy)
    }

    /// As [`PolicyDb::flush`](crate::PolicyDb::flush).
    pub fn flush(&mut self, ptype: PolicyType) -> usize {
        let removed = self.registry.flush(ptype);
        for list in &mut self.lists {
            list.retain(|p| p.ptype != ptype);
        }
        removed
    }

    /// As [`PolicyDb::set_hthresh`](crate::PolicyDb::set_hthresh): which policies are exact,
    /// and the order of every list.
    ///
    /// # Errors
    /// [`Error::HThresh`] when a threshold exceeds its family's width.
    pub fn set_hthresh(&mut self, hthresh: HThresh) -> Result<(), Error> {
        hthresh.validate()?;
        self.registry.set_hthresh(hthresh);
        self.relist();
        Ok(())
    }

    /// As [`PolicyDb::set_default_block`](crate::PolicyDb::set_default_block).
    pub fn set_default_block(&mut self, dir: Direction, block: bool) {
        self.default_block[dir.slot()] = block;
    }

    /// As [`PolicyDb::forget_history`](crate::PolicyDb::forget_history).
    pub fn forget_history(&mut self) {
        self.registry.forget_history();
        self.relist();
    }

    /// The current thresholds.
    pub fn hthresh(&self) -> HThresh {
        self.registry.hthresh()
    }

    /// The number of policies.
    pub fn len(&self) -> usize {
        self.registry.len()
    }

    /// Whether there are no policies.
    pub fn is_empty(&self) -> bool {
        self.registry.len() == 0
    }

    /// As [`PolicyDb::dump`](crate::PolicyDb::dump).
    pub fn dump(&self) -> Vec<Policy> {
        self.registry.dump()
    }

    /// As [`PolicyDb::get_by_index`](crate::PolicyDb::get_by_index).
    pub fn get_by_index(&self, index: u32) -> Option<Policy> {
        self.registry.get_index(index)
    }

    /// The policy with this identity.
    pub fn get(
        &self,
        selector: &Selector,
        dir: Direction,
        ptype: PolicyType,
        if_id: u32,
        mark: Mark,
    ) -> Option<&Policy> {
        self.lists[dir.slot()].iter().find(|p| {
            p.selector == *selector && p.ptype == ptype && p.if_id == if_id && p.mark == mark
        })
    }

    /// As [`PolicyDb::lookup`](crate::PolicyDb::lookup).
    pub fn lookup(&self, flow: &Flow, dir: Direction) -> Option<&Policy> {
        self.lookup_bytype(flow, dir, PolicyType::Sub)
            .or_else(|| self.lookup_bytype(flow, dir, PolicyType::Main))
    }

    /// As [`PolicyDb::lookup_bytype`](crate::PolicyDb::lookup_bytype).
    pub fn lookup_bytype(&self, flow: &Flow, dir: Direction, ptype: PolicyType) -> Option<&Policy> {
        let mut matching = self.lists[dir.slot()]
            .iter()
            .filter(|p| p.ptype == ptype && p.family() == flow.family && p.matches(flow));
        let exact = matching.clone().find(|p| self.registry.is_exact(p));
        let inexact = matching.find(|p| !self.registry.is_exact(p));
        resolve(exact, inexact, self.registry.head(dir))
    }

    /// As [`PolicyDb::check`](crate::PolicyDb::check).
    pub fn check(&self, flow: &Flow, dir: Direction) -> Check<'_> {
        check(
            dir,
            self.default_block[dir.slot()],
            self.lookup(flow, dir),
            |d| self.lookup_bytype(flow, d, PolicyType::Main),
        )
    }

    /// Every policy of a direction, sorted by rank.
    pub fn policies(&self, dir: Direction) -> &[Policy] {
        &self.lists[dir.slot()]
    }
}
