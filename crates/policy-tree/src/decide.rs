//! The kernel's decisions on top of the lookup structures: the tie between the exact chain and
//! the inexact candidates (`__xfrm_policy_eval_candidates`), and what a policy check makes of
//! the policies found for a plain packet (`__xfrm_policy_check`, `xfrm_expand_policies`).
//! Shared by [`PolicyDb`](crate::PolicyDb) and [`LinearDb`](crate::LinearDb), which differ only
//! in how they find the candidates.

use crate::addr::Family;
use crate::policy::{Action, Direction, ExactPos, Mark, Policy, PolicyType};
use crate::registry::Head;
use crate::selector::Selector;

/// What a lookup returns when the kernel's answer depends on a `pos` the database cannot know
/// (see [`ExactPos::Unknown`]): index 0 (no kernel policy has it), action [`Action::Punt`].
/// A caller that meets it hands the packet to the kernel.
///
/// ```
/// use policy_tree::{Action, UNDECIDED};
///
/// assert_eq!((UNDECIDED.index, UNDECIDED.action), (0, Action::Punt));
/// ```
pub static UNDECIDED: Policy = Policy {
    selector: Selector::any(Family::V4),
    dir: Direction::Fwd,
    ptype: PolicyType::Main,
    if_id: 0,
    mark: Mark::ANY,
    priority: 0,
    action: Action::Punt,
    index: 0,
    order: 0,
    created: 0,
    exact_pos: ExactPos::Unknown,
};

/// The kernel's choice between the exact chain's first match and the best inexact candidate
/// (lowest priority, then list order): the lower priority wins; on a tie the inexact policy
/// wins when its `pos` is not larger than the exact one's (`!(prefer->pos < pol->pos)`). An
/// exact `pos` of 0 is beaten only by the inexact holder of `pos` 0 (`head`).
#[inline]
pub(crate) fn resolve<'a>(
    exact: Option<&'a Policy>,
    inexact: Option<&'a Policy>,
    head: Head,
) -> Option<&'a Policy> {
    let (e, m) = match (exact, inexact) {
        (Some(e), Some(m)) => (e, m),
        (e, None) => return e,
        (None, m) => return m,
    };
    if m.priority != e.priority {
        return Some(if m.priority < e.priority { m } else { e });
    }
    match (e.exact_pos, head) {
        (ExactPos::Unknown, _) => Some(&UNDECIDED),
        (ExactPos::Zero, Head::Known(i)) if i == m.index => Some(m),
        (ExactPos::Zero, Head::Unknown(i)) if i == m.index => Some(&UNDECIDED),
        (ExactPos::Zero, _) => Some(e),
    }
}

/// What a policy check decides for a packet that carries no IPsec (no `sec_path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check<'g> {
    /// No policy stops the packet (none matched, or the ones that matched allow it in plain).
    Pass,
    /// A matching policy blocks the packet.
    Drop(&'g Policy),
    /// No policy matched and the direction's default policy is block
    /// (`ip xfrm policy setdefault DIR block`).
    DefaultBlock,
    /// The decision needs what only the kernel has (IPsec templates and states, a policy the
    /// database cannot evaluate, an undecidable tie): hand the packet to the kernel.
    Kernel(&'g Policy),
}

/// The kernel's policy check given the policy `lookup` found (sub before main) and a lookup
/// of main policies by direction (`main`), as `__xfrm_policy_check` (in, fwd) and
/// `xfrm_lookup` with `xfrm_expand_policies` (out) do it for a packet without IPsec:
///
/// - no policy: the direction's default policy (`policy_default[dir]`: accept unless set to
///   block);
/// - a sub policy also brings the main policy that matches, looked up in direction **in** for
///   the in and fwd checks (the kernel's `__xfrm_policy_check` passes `XFRM_POLICY_IN` there)
///   and out for out (only when the sub policy allows);
/// - any block among them drops;
/// - in and fwd: a packet without IPsec fails a required template (the kernel's
///   `xfrm_policy_ok` finds no state for it: `XfrmInTmplMismatch`) and passes optional ones
///   (`level use`); out: templates need states, left to the kernel.
pub(crate) fn check<'g>(
    dir: Direction,
    default_block: bool,
    found: Option<&'g Policy>,
    main: impl FnOnce(Direction) -> Option<&'g Policy>,
) -> Check<'g> {
    let Some(pol) = found else {
        return if default_block {
            Check::DefaultBlock
        } else {
            Check::Pass
        };
    };
    let second = match (pol.ptype, dir) {
        (PolicyType::Main, _) => None,
        (PolicyType::Sub, Direction::Out) if pol.action == Action::Block => None,
        (PolicyType::Sub, Direction::Out) => main(Direction::Out),
        (PolicyType::Sub, Direction::In | Direction::Fwd) => main(Direction::In),
    };
    if pol.action == Action::Punt {
        return Check::Kernel(pol);
    }
    if pol.action == Action::Block {
        return Check::Drop(pol);
    }
    if let Some(second) = second {
        match second.action {
            Action::Block => return Check::Drop(second),
            Action::Punt => return Check::Kernel(second),
            _ => {}
        }
    }
    for p in [Some(pol), second].into_iter().flatten() {
        match (p.action, dir) {
            (Action::Ipsec(_) | Action::IpsecOptional(_), Direction::Out) => {
                return Check::Kernel(p);
            }
            (Action::Ipsec(_), Direction::In | Direction::Fwd) => return Check::Drop(p),
            _ => {}
        }
    }
    Check::Pass
}
