//! [`LinearDb`]: the reference implementation and benchmark baseline.
#![forbid(unsafe_code)]

use crate::Error;
use crate::policy::{Direction, HThresh, Policy, PolicySpec, PolicyType};
use crate::registry::{Admitted, Registry};
use crate::selector::{Flow, Selector};

/// The policy database as one list per direction, sorted by rank and scanned linearly: the
/// kernel's behaviour before the inexact trees (one inexact list per direction, first match
/// wins), and the semantics [`PolicyDb`](crate::PolicyDb) must reproduce.
///
/// The answer of [`lookup`](Self::lookup) is, by construction, the oracle of the kernel notes:
/// among the matching sub policies (or, when there are none, the matching main policies) the
/// one with the lowest priority value, ties going to the earliest inserted. The hash
/// thresholds are recorded but change no answer.
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
    hthresh: HThresh,
    /// Per direction, every policy sorted by rank.
    lists: [Vec<Policy>; 3],
    /// The number of sub policies (a scan may stop at the first main match when there are none).
    subs: usize,
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
        self.subs += usize::from(policy.ptype == PolicyType::Sub);
        Ok(policy)
    }

    fn unlink(&mut self, policy: &Policy) {
        let list = &mut self.lists[policy.dir.slot()];
        list.retain(|p| p.index != policy.index);
        self.subs -= usize::from(policy.ptype == PolicyType::Sub);
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
    ) -> Result<Policy, Error> {
        let policy = self.registry.remove(selector, dir, ptype, if_id)?;
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
        if ptype == PolicyType::Sub {
            self.subs = 0;
        }
        removed
    }

    /// Records new thresholds (they change no answer of a linear scan).
    ///
    /// # Errors
    /// [`Error::HThresh`] when a threshold exceeds its family's width.
    pub fn set_hthresh(&mut self, hthresh: HThresh) -> Result<(), Error> {
        hthresh.validate()?;
        self.hthresh = hthresh;
        Ok(())
    }

    /// The recorded thresholds.
    pub fn hthresh(&self) -> HThresh {
        self.hthresh
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
    ) -> Option<&Policy> {
        self.lists[dir.slot()]
            .iter()
            .find(|p| p.selector == *selector && p.ptype == ptype && p.if_id == if_id)
    }

    /// As [`PolicyDb::lookup`](crate::PolicyDb::lookup).
    pub fn lookup(&self, flow: &Flow, dir: Direction) -> Option<&Policy> {
        let mut main = None;
        for policy in &self.lists[dir.slot()] {
            if policy.if_id != flow.if_id || !policy.selector.matches(flow) {
                continue;
            }
            match policy.ptype {
                PolicyType::Sub => return Some(policy),
                PolicyType::Main if main.is_none() => {
                    main = Some(policy);
                    if self.subs == 0 {
                        break;
                    }
                }
                PolicyType::Main => {}
            }
        }
        main
    }

    /// As [`PolicyDb::lookup_bytype`](crate::PolicyDb::lookup_bytype).
    pub fn lookup_bytype(&self, flow: &Flow, dir: Direction, ptype: PolicyType) -> Option<&Policy> {
        self.lists[dir.slot()]
            .iter()
            .find(|p| p.ptype == ptype && p.if_id == flow.if_id && p.selector.matches(flow))
    }

    /// Every policy of a direction, sorted by rank.
    pub fn policies(&self, dir: Direction) -> &[Policy] {
        &self.lists[dir.slot()]
    }
}
