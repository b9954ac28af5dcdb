//! Policy lists sorted by precedence: the kernel's hlists of a hash chain or a tree node.
//!
//! A list is immutable once published; a writer builds the changed copy. Every list is sorted by
//! [`Policy::rank`] (priority, then insertion position), so a scan may stop at the first match or
//! as soon as the rank passes the best candidate found so far.

use std::sync::Arc;

use crate::policy::Policy;
use crate::selector::Flow;

/// An immutable list of policies sorted by rank, shared between versions of a tree.
pub(crate) type List = Arc<[Policy]>;

/// An empty list.
pub(crate) fn empty() -> List {
    Arc::from(Vec::new())
}

/// A copy of `list` with `policy` added after every policy of lower or equal rank.
pub(crate) fn with(list: &[Policy], policy: Policy) -> Vec<Policy> {
    let at = list.partition_point(|p| p.rank() <= policy.rank());
    let mut out = Vec::with_capacity(list.len() + 1);
    out.extend_from_slice(&list[..at]);
    out.push(policy);
    out.extend_from_slice(&list[at..]);
    out
}

/// A copy of `list` without the policy of this index, or `None` when it is not there.
pub(crate) fn without(list: &[Policy], index: u32) -> Option<Vec<Policy>> {
    let at = list.iter().position(|p| p.index == index)?;
    let mut out = Vec::with_capacity(list.len() - 1);
    out.extend_from_slice(&list[..at]);
    out.extend_from_slice(&list[at + 1..]);
    Some(out)
}

/// The sorted union of two sorted lists (the re-sort after a node merge).
pub(crate) fn merged(a: &[Policy], b: &[Policy]) -> List {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].rank() <= b[j].rank() {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    Arc::from(out)
}

/// Scans a sorted list for a match that outranks `best`, updating `best`: the kernel's
/// `__xfrm_policy_eval_candidates`. The scan stops at the first match, or at the first policy
/// that cannot outrank `best`.
#[inline]
pub(crate) fn scan<'a>(list: &'a [Policy], flow: &Flow, best: &mut Option<&'a Policy>) {
    for policy in list {
        if let Some(b) = best {
            if policy.rank() >= b.rank() {
                return;
            }
        }
        if policy.matches(flow) {
            *best = Some(policy);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Direction, PolicyType, Selector};

    fn policy(priority: u32, pos: u64, dst: &str) -> Policy {
        Policy {
            selector: Selector::new("0.0.0.0/0".parse().unwrap(), dst.parse().unwrap()).unwrap(),
            dir: Direction::Out,
            ptype: PolicyType::Main,
            if_id: 0,
            mark: crate::Mark::ANY,
            priority,
            action: Action::Allow,
            index: pos as u32 * 8 + 1,
            order: pos,
            created: pos,
            exact_pos: crate::ExactPos::Zero,
        }
    }

    #[test]
    fn insertion_keeps_rank_order_and_older_first() {
        let mut list = Vec::new();
        for (prio, pos) in [(5, 0), (1, 1), (5, 2), (0, 3), (1, 4)] {
            list = with(&list, policy(prio, pos, "10.0.0.0/8"));
        }
        let ranks: Vec<_> = list.iter().map(Policy::rank).collect();
        assert_eq!(ranks, [(0, 3), (1, 1), (1, 4), (5, 0), (5, 2)]);
        let cut = without(&list, 8 + 1).unwrap();
        assert_eq!(cut.len(), 4);
        assert!(cut.iter().all(|p| p.order != 1));
        assert!(without(&cut, 8 + 1).is_none());
    }

    #[test]
    fn merge_and_scan() {
        let a = [policy(1, 0, "10.0.0.0/8"), policy(3, 2, "10.0.0.0/8")];
        let b = [policy(1, 1, "11.0.0.0/8"), policy(2, 3, "10.0.0.0/8")];
        let m = merged(&a, &b);
        let pos: Vec<_> = m.iter().map(|p| p.order).collect();
        assert_eq!(pos, [0, 1, 3, 2]);

        let flow = Flow::v4([1, 1, 1, 1].into(), [10, 1, 1, 1].into());
        let mut best = None;
        scan(&m, &flow, &mut best);
        assert_eq!(best.map(|p| p.order), Some(0));
        // A better candidate stops the scan before any match.
        let better = policy(0, 9, "10.0.0.0/8");
        let mut best = Some(&better);
        scan(&m, &flow, &mut best);
        assert_eq!(best.map(|p| p.order), Some(9));
        // A worse candidate is replaced by the first match that outranks it.
        let worse = policy(2, 0, "10.0.0.0/8");
        let mut best = Some(&worse);
        scan(&b, &flow, &mut best);
        assert_eq!(best.map(|p| p.order), Some(0));
        let flow11 = Flow::v4([1, 1, 1, 1].into(), [11, 1, 1, 1].into());
        let mut best = Some(&worse);
        scan(&b, &flow11, &mut best);
        assert_eq!(best.map(|p| p.order), Some(1));
    }
}
