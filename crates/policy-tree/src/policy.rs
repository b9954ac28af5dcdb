//! Policies: what the writer supplies ([`PolicySpec`]), what the database stores ([`Policy`]),
//! and the hash thresholds ([`HThresh`]).

use crate::Error;
use crate::addr::Family;
use crate::selector::Selector;

/// The direction a policy applies to (`XFRM_POLICY_IN`, `_OUT`, `_FWD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Packets delivered locally.
    In = 0,
    /// Packets sent by this host.
    Out = 1,
    /// Packets forwarded by this host.
    Fwd = 2,
}

impl Direction {
    /// Every direction, in kernel numbering order.
    pub const ALL: [Direction; 3] = [Direction::In, Direction::Out, Direction::Fwd];

    /// The direction encoded in the low three bits of a policy index, if any.
    pub const fn of_index(index: u32) -> Option<Direction> {
        match index & 7 {
            0 => Some(Direction::In),
            1 => Some(Direction::Out),
            2 => Some(Direction::Fwd),
            _ => None,
        }
    }

    pub(crate) const fn slot(self) -> usize {
        self as usize
    }
}

/// The policy type (`XFRM_POLICY_TYPE_MAIN`, `_SUB`). A lookup consults sub policies first and
/// falls back to main policies only when no sub policy matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyType {
    /// The ordinary policies.
    Main,
    /// Sub policies (CONFIG_XFRM_SUB_POLICY), consulted before the main ones.
    Sub,
}

/// The id of an IPsec template (state bundle) a matching flow must be transformed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TemplateId(pub u32);

/// What a matching policy decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Pass in plain (`action allow` without templates).
    Allow,
    /// Drop (`action block`).
    Block,
    /// Pass only through IPsec with this template (`action allow` with a `tmpl`, at least one
    /// of them required: a packet without IPsec fails the in and fwd checks).
    Ipsec(TemplateId),
    /// `action allow` with templates that are all optional (`level use`): a packet without
    /// IPsec passes the in and fwd checks; out, the kernel applies what states exist.
    IpsecOptional(TemplateId),
    /// The policy exists in the kernel but its decision cannot be evaluated here (a security
    /// context, a feature the embedder does not model): whatever it decides must be left to the
    /// kernel. Embedders hand such packets to the kernel (fail closed), never past the policy.
    Punt,
}

/// A policy's mark (`struct xfrm_mark`): a flow with mark `m` matches when
/// `m & mask == value`. The default (0/0) matches every flow; a value with bits outside the mask
/// matches none, as in the kernel.
///
/// ```
/// use policy_tree::Mark;
///
/// let m = Mark { value: 5, mask: 0xf };
/// assert!(m.matches(0x15) && !m.matches(0x16));
/// assert!(Mark::ANY.matches(7));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mark {
    /// The value the masked flow mark must equal.
    pub value: u32,
    /// The bits of the flow mark compared.
    pub mask: u32,
}

impl Mark {
    /// No mark: matches every flow.
    pub const ANY: Mark = Mark { value: 0, mask: 0 };

    /// Whether a flow's mark matches (`(fl->flowi_mark & pol->mark.m) == pol->mark.v`).
    #[inline]
    pub const fn matches(&self, mark: u32) -> bool {
        mark & self.mask == self.value
    }
}

/// What is known of the kernel's `pos` of a policy in the exact hash.
///
/// The kernel numbers the inexact policies of a direction (`pos`, their place in
/// `policy_inexact[dir]`, renumbered on every inexact insert, not on deletes) and breaks a
/// priority tie between the exact chain's match and an inexact one by comparing `pos`: the
/// inexact policy wins when its `pos` is not larger. An exact policy's `pos` is 0 unless it
/// was inexact under earlier hash thresholds and kept the number it had then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExactPos {
    /// `pos` is 0: the policy never was inexact (only the inexact policy numbered 0 beats it in
    /// a tie).
    Zero,
    /// A number left from an inexact past that the database cannot know (the policy moved to
    /// the exact hash on a threshold change, or was found in the kernel with thresholds
    /// below the address widths): ties against inexact policies are left to the kernel.
    Unknown,
}

/// A policy as a writer asks for it: everything but the database-assigned insertion position.
///
/// ```
/// use policy_tree::{Action, Direction, PolicySpec, Selector};
///
/// let spec = PolicySpec::new(
///     Selector::new("10.0.1.0/24".parse()?, "10.0.2.0/24".parse()?)?,
///     Direction::Out,
/// )
/// .priority(100)
/// .action(Action::Block);
/// assert_eq!(spec.priority, 100);
/// # Ok::<(), policy_tree::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PolicySpec {
    /// What the policy matches.
    pub selector: Selector,
    /// The direction it applies to.
    pub dir: Direction,
    /// Main or sub.
    pub ptype: PolicyType,
    /// The xfrm interface id it is bound to (0: none); lookups must carry the same id.
    pub if_id: u32,
    /// The mark a flow must carry (default: any).
    pub mark: Mark,
    /// Priority: lower values win.
    pub priority: u32,
    /// The decision.
    pub action: Action,
    /// The index to give the policy (as the kernel reports it, when mirroring), or `None` to
    /// have one generated. An update keeps the replaced policy's index.
    pub index: Option<u32>,
}

impl PolicySpec {
    /// A main policy with priority 0, if_id 0, no mark, action allow and a generated index.
    pub const fn new(selector: Selector, dir: Direction) -> PolicySpec {
        PolicySpec {
            selector,
            dir,
            ptype: PolicyType::Main,
            if_id: 0,
            mark: Mark::ANY,
            priority: 0,
            action: Action::Allow,
            index: None,
        }
    }

    /// With a policy type.
    #[must_use]
    pub const fn ptype(mut self, ptype: PolicyType) -> PolicySpec {
        self.ptype = ptype;
        self
    }

    /// With an xfrm interface id.
    #[must_use]
    pub const fn if_id(mut self, if_id: u32) -> PolicySpec {
        self.if_id = if_id;
        self
    }

    /// With a mark.
    #[must_use]
    pub const fn mark(mut self, mark: Mark) -> PolicySpec {
        self.mark = mark;
        self
    }

    /// With a priority (lower wins).
    #[must_use]
    pub const fn priority(mut self, priority: u32) -> PolicySpec {
        self.priority = priority;
        self
    }

    /// With an action.
    #[must_use]
    pub const fn action(mut self, action: Action) -> PolicySpec {
        self.action = action;
        self
    }

    /// With a requested index.
    #[must_use]
    pub const fn index(mut self, index: u32) -> PolicySpec {
        self.index = Some(index);
        self
    }
}

/// A policy in the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    /// What the policy matches.
    pub selector: Selector,
    /// The direction it applies to.
    pub dir: Direction,
    /// Main or sub.
    pub ptype: PolicyType,
    /// The xfrm interface id it is bound to.
    pub if_id: u32,
    /// The mark a flow must carry.
    pub mark: Mark,
    /// Priority: lower values win.
    pub priority: u32,
    /// The decision.
    pub action: Action,
    /// The unique index (low three bits: the direction).
    pub index: u32,
    /// The place among policies of equal priority in every kernel list that holds the policy:
    /// the smaller `order` comes first and wins a tie. A new policy comes after every existing
    /// one; an update (`ip xfrm policy update`) that keeps the priority keeps the replaced
    /// policy's place, one that changes it goes last; a threshold change re-sorts every policy
    /// by `created` (see the crate README for the kernel code behind each rule).
    pub order: u64,
    /// When the policy was added or last updated (the kernel's `policy_all` list, which
    /// `ip xfrm policy` dumps newest first).
    pub created: u64,
    /// The kernel's `pos` while the policy is in the exact hash (see [`ExactPos`]).
    pub exact_pos: ExactPos,
}

impl Policy {
    /// The order within one kernel list: lower priority value first, then `order`.
    #[inline]
    pub const fn rank(&self) -> (u32, u64) {
        (self.priority, self.order)
    }

    /// The address family of the selector.
    pub const fn family(&self) -> crate::Family {
        self.selector.family()
    }

    /// Whether a flow of the policy's direction and type matches: the kernel's
    /// `xfrm_policy_match` (family, if_id, mark, then the selector).
    #[inline]
    pub fn matches(&self, flow: &crate::Flow) -> bool {
        self.if_id == flow.if_id && self.mark.matches(flow.mark) && self.selector.matches(flow)
    }

    /// The identity the kernel compares on add, update and delete: direction, type, if_id,
    /// mark and selector, host bits included (priority and action are not part of it).
    pub(crate) fn key(&self) -> SelectorKey {
        SelectorKey {
            selector: self.selector,
            dir: self.dir,
            ptype: self.ptype,
            if_id: self.if_id,
            mark: self.mark,
        }
    }
}

/// The identity of a policy: two policies with equal keys cannot coexist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SelectorKey {
    pub(crate) selector: Selector,
    pub(crate) dir: Direction,
    pub(crate) ptype: PolicyType,
    pub(crate) if_id: u32,
    pub(crate) mark: Mark,
}

/// The hash thresholds (`ip xfrm policy set hthresh4 LBITS RBITS hthresh6 LBITS RBITS`).
///
/// A policy goes into the exact hash of its direction when its destination prefix is at least
/// `dbits` long and its source prefix at least `sbits` long, keyed by both addresses masked to
/// those lengths; every other policy is inexact. `lbits` is the local side, `rbits` the remote
/// one: for [`Direction::Out`] the destination is remote (`dbits = rbits`, `sbits = lbits`), for
/// [`Direction::In`] and [`Direction::Fwd`] the destination is local (`dbits = lbits`,
/// `sbits = rbits`). The default is 32/32 and 128/128: only host-to-host policies are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HThresh {
    /// Local prefix length threshold for IPv4.
    pub lbits4: u8,
    /// Remote prefix length threshold for IPv4.
    pub rbits4: u8,
    /// Local prefix length threshold for IPv6.
    pub lbits6: u8,
    /// Remote prefix length threshold for IPv6.
    pub rbits6: u8,
}

impl Default for HThresh {
    fn default() -> HThresh {
        HThresh {
            lbits4: 32,
            rbits4: 32,
            lbits6: 128,
            rbits6: 128,
        }
    }
}

impl HThresh {
    /// Checks every threshold against its family's width.
    ///
    /// # Errors
    /// [`Error::HThresh`] naming the first threshold that is too long.
    pub fn validate(&self) -> Result<(), Error> {
        for (bits, max) in [
            (self.lbits4, 32),
            (self.rbits4, 32),
            (self.lbits6, 128),
            (self.rbits6, 128),
        ] {
            if bits > max {
                return Err(Error::HThresh { bits, max });
            }
        }
        Ok(())
    }

    /// `(dbits, sbits)`: the prefix lengths a policy of `dir` and `family` needs to be exact.
    pub const fn bits(&self, dir: Direction, family: Family) -> (u8, u8) {
        let (local, remote) = match family {
            Family::V4 => (self.lbits4, self.rbits4),
            Family::V6 => (self.lbits6, self.rbits6),
        };
        match dir {
            Direction::Out => (remote, local),
            Direction::In | Direction::Fwd => (local, remote),
        }
    }

    /// Whether a selector of direction `dir` belongs in the exact hash.
    pub fn is_exact(&self, dir: Direction, selector: &Selector) -> bool {
        let (dbits, sbits) = self.bits(dir, selector.family());
        selector.dst.prefixlen() >= dbits && selector.src.prefixlen() >= sbits
    }
}
