//! The writer: the one handle through which a [`PolicyDb`] changes.
//!
//! Readers share the database as an `Arc<PolicyDb>` and only read it: every method that
//! changes it is on its [`PolicyWriter`], which makes the database, is not `Clone` and takes
//! `&mut self` for every change. So a run loop holding the namespace's policies cannot change
//! them, and the control plane's changes are serialized by the borrow checker. Each change is
//! published as before (new versions of the touched chain or bin swapped in, the old ones
//! retired into crossbeam-epoch's default collector). The writer derefs to the database for
//! its own reads, and [`reader`](PolicyWriter::reader) gives the `Arc` to share.
//!
//! A reader cannot write:
//!
//! ```compile_fail,E0624
//! use policy_tree::{Direction, PolicySpec, PolicyWriter, Selector};
//!
//! let writer = PolicyWriter::new();
//! let db = std::sync::Arc::clone(writer.reader());
//! let any = Selector::new("0.0.0.0/0".parse().unwrap(), "0.0.0.0/0".parse().unwrap()).unwrap();
//! db.add(PolicySpec::new(any, Direction::Fwd));
//! ```
//!
//! ```compile_fail,E0624
//! let writer = policy_tree::PolicyWriter::new();
//! writer.reader().set_default_block(policy_tree::Direction::Fwd, true);
//! ```
//!
//! And there is one writer:
//!
//! ```compile_fail,E0599
//! let writer = policy_tree::PolicyWriter::new();
//! let second = writer.clone();
//! ```

use std::ops::Deref;
use std::sync::Arc;

use crate::Error;
use crate::db::PolicyDb;
use crate::policy::{Direction, HThresh, Mark, Policy, PolicySpec, PolicyType};
use crate::selector::Selector;

/// The one writer of a [`PolicyDb`] (the control plane's, from xfrm policy messages); it
/// derefs to the database for reads.
///
/// ```
/// use std::net::Ipv4Addr;
/// use policy_tree::{Direction, Flow, PolicySpec, PolicyWriter, Selector};
///
/// let mut writer = PolicyWriter::new();
/// let db = writer.reader().clone(); // a run loop's `Arc<PolicyDb>`: read only
/// let lan = Selector::new("10.0.1.0/24".parse()?, "10.0.2.0/24".parse()?)?;
/// writer.add(PolicySpec::new(lan, Direction::Fwd).priority(100))?;
/// let guard = crossbeam_epoch::pin();
/// let flow = Flow::v4(Ipv4Addr::new(10, 0, 1, 2), Ipv4Addr::new(10, 0, 2, 2));
/// // The writer and its readers see one database.
/// assert_eq!(db.lookup(&flow, Direction::Fwd, &guard).map(|p| p.index), writer.lookup(&flow, Direction::Fwd, &guard).map(|p| p.index));
/// assert!(db.lookup(&flow, Direction::Fwd, &guard).is_some());
/// # Ok::<(), policy_tree::Error>(())
/// ```
#[derive(Debug)]
pub struct PolicyWriter {
    db: Arc<PolicyDb>,
}

impl Default for PolicyWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for PolicyWriter {
    type Target = PolicyDb;

    fn deref(&self) -> &PolicyDb {
        &self.db
    }
}

impl PolicyWriter {
    /// An empty database with the default thresholds, and its writer.
    pub fn new() -> Self {
        PolicyWriter {
            db: Arc::new(PolicyDb::new()),
        }
    }

    /// An empty database with thresholds `hthresh`, and its writer.
    ///
    /// # Errors
    /// [`Error::HThresh`] when a threshold exceeds its family's width.
    pub fn with_hthresh(hthresh: HThresh) -> Result<Self, Error> {
        Ok(PolicyWriter {
            db: Arc::new(PolicyDb::with_hthresh(hthresh)?),
        })
    }

    /// The database this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<PolicyDb> {
        &self.db
    }

    /// Adds a policy; fails if one with the same direction, type, if_id and selector exists
    /// (`ip xfrm policy add`, the kernel's exclusive insert). Returns the stored policy.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::FamilyMismatch`], [`Error::IndexInUse`],
    /// [`Error::IndexDirection`].
    pub fn add(&mut self, spec: PolicySpec) -> Result<Policy, Error> {
        self.db.add(spec)
    }

    /// Adds a policy or replaces the one with the same direction, type, if_id and selector
    /// (`ip xfrm policy update`); a replacement keeps the old index and gets a new position.
    /// Readers see the old policy or the new one, never neither.
    ///
    /// # Errors
    /// As [`add`](Self::add), except [`Error::Exists`].
    pub fn update(&mut self, spec: PolicySpec) -> Result<Policy, Error> {
        self.db.update(spec)
    }

    /// Deletes the policy with this direction, type, if_id, mark and selector
    /// (`ip xfrm policy delete`; the kernel's `xfrm_policy_bysel_ctx`).
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
        self.db.delete(selector, dir, ptype, if_id, mark)
    }

    /// Deletes the policy with this index (`ip xfrm policy delete index N`).
    ///
    /// # Errors
    /// [`Error::NotFound`].
    pub fn delete_by_index(&mut self, index: u32) -> Result<Policy, Error> {
        self.db.delete_by_index(index)
    }

    /// Deletes every policy of `ptype` (`ip xfrm policy flush [ptype sub]`), returning how many.
    pub fn flush(&mut self, ptype: PolicyType) -> usize {
        self.db.flush(ptype)
    }

    /// Changes the hash thresholds (`ip xfrm policy set hthresh4 ... hthresh6 ...`) as the
    /// kernel's `xfrm_hash_rebuild` does: every policy moves to the exact hash or to a bin as
    /// the new thresholds say, and every list is re-sorted by priority then creation (so a
    /// policy updated in place with its priority loses the older place it kept). The kernel
    /// rebuilds on every `set`, also to the same values. Readers switch from the old structure
    /// to the rebuilt one in one step.
    ///
    /// # Errors
    /// [`Error::HThresh`] when a threshold exceeds its family's width.
    pub fn set_hthresh(&mut self, hthresh: HThresh) -> Result<(), Error> {
        self.db.set_hthresh(hthresh)
    }

    /// Declares the policies in the database to come from a kernel dump, whose history is not
    /// known: which inexact policy holds the kernel's `pos` 0 (the first one, or none if it was
    /// deleted since the last insert), and the `pos` of exact policies that are not host to
    /// host (they may have been inexact under earlier thresholds). Priority ties that depend
    /// on these are answered with [`UNDECIDED`](crate::UNDECIDED) until later changes settle
    /// them (the next inexact insert of a direction numbers its list afresh; a threshold
    /// change settles everything).
    ///
    /// ```
    /// use policy_tree::{Direction, Flow, PolicySpec, PolicyWriter, Selector, UNDECIDED};
    ///
    /// let mut db = PolicyWriter::new();
    /// let host = Selector::new("10.0.0.1/32".parse()?, "10.0.1.1/32".parse()?)?;
    /// let net = Selector::new("10.0.0.0/24".parse()?, "10.0.1.0/24".parse()?)?;
    /// db.add(PolicySpec::new(net, Direction::Fwd).priority(5))?;
    /// db.add(PolicySpec::new(host, Direction::Fwd).priority(5))?;
    /// let flow = Flow::new("10.0.0.1".parse().unwrap(), "10.0.1.1".parse().unwrap())?;
    /// let guard = crossbeam_epoch::pin();
    /// // The inexact policy holds pos 0 and beats the exact one's pos 0, as in the kernel.
    /// assert_eq!(db.lookup(&flow, Direction::Fwd, &guard).unwrap().selector, net);
    /// db.forget_history();
    /// assert!(std::ptr::eq(db.lookup(&flow, Direction::Fwd, &guard).unwrap(), &UNDECIDED));
    /// # Ok::<(), policy_tree::Error>(())
    /// ```
    pub fn forget_history(&mut self) {
        self.db.forget_history();
    }

    /// Sets the default policy of `dir` (`ip xfrm policy setdefault DIR block|accept`): what
    /// [`check`](PolicyDb::check) decides when no policy matches.
    pub fn set_default_block(&mut self, dir: Direction, block: bool) {
        self.db.set_default_block(dir, block);
    }
}
