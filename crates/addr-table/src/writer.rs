//! The writers: the one handle through which an [`AddrTable`] or a standalone [`RhlTable`]
//! changes.
//!
//! Readers share the table as an `Arc` and only read it: every method that changes it is on
//! its writer, which makes the table, is not `Clone` and takes `&mut self` for every change.
//! So a run loop holding the namespace's `Arc<AddrTable>` cannot change addresses, and the
//! control plane's changes are serialized by the borrow checker. Each change is published as
//! before (a bucket line's header store, lists swapped in, old memory retired into
//! crossbeam-epoch's default collector). A writer derefs to its table for its own reads, and
//! `reader()` gives the `Arc` to share.
//!
//! A reader cannot write:
//!
//! ```compile_fail,E0624
//! use std::net::Ipv4Addr;
//! use addr_table::{AddrWriter, IfAddr, NetnsId};
//!
//! let writer = AddrWriter::new(NetnsId(1));
//! let table = std::sync::Arc::clone(writer.reader());
//! table.add(IfAddr::new(Ipv4Addr::new(192, 0, 2, 1), 24, 2));
//! ```
//!
//! ```compile_fail,E0624
//! let writer = addr_table::RhlWriter::<u32, u32>::new();
//! writer.reader().insert(1, 2);
//! ```
//!
//! Nor through the hash a reader reaches:
//!
//! ```compile_fail,E0624
//! use std::net::Ipv4Addr;
//! let writer = addr_table::AddrWriter::new(addr_table::NetnsId(1));
//! writer.reader().family::<Ipv4Addr>().hash().remove_all(&1);
//! ```
//!
//! And there is one writer per table:
//!
//! ```compile_fail,E0599
//! let writer = addr_table::AddrWriter::new(addr_table::NetnsId(1));
//! let second = writer.clone();
//! ```

use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

use crate::addr::AddrError;
use crate::addr::entry::{IfAddr, NetnsId};
use crate::addr::family::{Family, Removal};
use crate::addr::table::{AddrConfig, AddrTable, Sweep};
use crate::error::{InsertError, ParamsError};
use crate::inline::Inline;
use crate::rhltable::{Params, RhlTable};

/// The one writer of a namespace's [`AddrTable`] (the control plane's, from `RTM_NEWADDR` and
/// `RTM_DELADDR`); it derefs to the table for reads.
///
/// ```
/// use std::net::Ipv4Addr;
/// use addr_table::{AddrWriter, IfAddr, NetnsId};
///
/// let mut writer = AddrWriter::new(NetnsId(1));
/// let table = writer.reader().clone();
/// let a = Ipv4Addr::new(192, 0, 2, 1);
/// writer.add(IfAddr::new(a, 24, 2))?;
/// let guard = crossbeam_epoch::pin();
/// // The writer and its readers see one table.
/// assert_eq!(writer.dev_find(a, None, &guard), Some(2));
/// assert_eq!(table.dev_find(a, None, &guard), Some(2));
/// writer.remove(a, 24, 2)?;
/// assert_eq!(table.dev_find(a, None, &guard), None);
/// # Ok::<(), addr_table::AddrError>(())
/// ```
#[derive(Debug)]
pub struct AddrWriter {
    table: Arc<AddrTable>,
}

impl Deref for AddrWriter {
    type Target = AddrTable;

    fn deref(&self) -> &AddrTable {
        &self.table
    }
}

impl AddrWriter {
    /// An empty table for `netns` with the default [`AddrConfig`], and its writer.
    pub fn new(netns: NetnsId) -> Self {
        AddrWriter {
            table: Arc::new(AddrTable::new(netns)),
        }
    }

    /// An empty table for `netns` with `config`, and its writer.
    ///
    /// # Errors
    /// [`AddrError::Params`] when `config.params` is invalid.
    pub fn with_config(netns: NetnsId, config: AddrConfig) -> Result<Self, AddrError> {
        Ok(AddrWriter {
            table: Arc::new(AddrTable::with_config(netns, config)?),
        })
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<AddrTable> {
        &self.table
    }

    /// Adds an address (`RTM_NEWADDR`); returns it as stored (IPv4: `SECONDARY` computed).
    ///
    /// # Errors
    /// [`AddrError::PrefixLen`], [`AddrError::ZeroIfindex`], [`AddrError::IfindexRange`],
    /// [`AddrError::Exists`] (IPv4: same
    /// address and prefix on the interface; IPv6: same address on the interface),
    /// [`AddrError::ScopeMismatch`] (IPv4: a secondary whose scope differs from its
    /// primary's), [`AddrError::TableFull`].
    pub fn add<A: Family>(&mut self, entry: IfAddr<A>) -> Result<IfAddr<A>, AddrError> {
        self.table.add(entry)
    }

    /// Removes an address (`RTM_DELADDR`). Removing an IPv4 primary promotes the first
    /// secondary of its subnet or removes them all, per
    /// [`promote_secondaries`](AddrConfig::promote_secondaries).
    ///
    /// # Errors
    /// [`AddrError::NotFound`].
    pub fn remove<A: Family>(
        &mut self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
    ) -> Result<Removal<A>, AddrError> {
        self.table.remove(addr, prefix_len, ifindex)
    }

    /// Changes an address in place (`RTM_NEWADDR` with `NLM_F_REPLACE`, DAD completion):
    /// `change` may edit scope, flags, lifetimes and label; the address, prefix, interface and
    /// the IPv4 `SECONDARY` bit stay. Returns the address as stored.
    ///
    /// # Errors
    /// [`AddrError::NotFound`].
    pub fn update<A: Family>(
        &mut self,
        addr: A,
        prefix_len: u8,
        ifindex: u32,
        change: impl FnOnce(&mut IfAddr<A>),
    ) -> Result<IfAddr<A>, AddrError> {
        self.table.update(addr, prefix_len, ifindex, change)
    }

    /// Removes every address of an interface (the interface went away); returns them.
    pub fn remove_interface(
        &mut self,
        ifindex: u32,
    ) -> (Vec<IfAddr<Ipv4Addr>>, Vec<IfAddr<Ipv6Addr>>) {
        self.table.remove_interface(ifindex)
    }

    /// Applies lifetimes as of `now` (the kernel's `check_lifetime`, sans IO): removes the
    /// addresses whose valid lifetime ran out and flags `DEPRECATED` those whose preferred
    /// lifetime did; returns what changed. Call it at
    /// [`next_deadline`](AddrTable::next_deadline).
    pub fn sweep(&mut self, now: Instant) -> Sweep {
        self.table.sweep(now)
    }

    /// Completes any rehash in progress in both address hashes (a control thread calls this
    /// when a burst of updates ends, e.g. after a dump, so readers search one table).
    pub fn finish_rehash(&mut self) {
        self.table.finish_rehash();
    }
}

/// The one writer of a standalone [`RhlTable`]; it derefs to the table for reads.
///
/// ```
/// use addr_table::RhlWriter;
///
/// let mut writer: RhlWriter<u32, u32> = RhlWriter::new();
/// let table = writer.reader().clone();
/// writer.insert(7, 2)?;
/// let guard = crossbeam_epoch::pin();
/// assert_eq!(table.get(&7, &guard), Some(2));
/// # Ok::<(), addr_table::InsertError>(())
/// ```
pub struct RhlWriter<K: Inline, V: Inline> {
    table: Arc<RhlTable<K, V>>,
}

impl<K: Inline, V: Inline> std::fmt::Debug for RhlWriter<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhlWriter")
            .field("table", &self.table)
            .finish()
    }
}

impl<K: Inline, V: Inline> Deref for RhlWriter<K, V> {
    type Target = RhlTable<K, V>;

    fn deref(&self) -> &RhlTable<K, V> {
        &self.table
    }
}

impl<K, V> Default for RhlWriter<K, V>
where
    K: Inline + Hash + Eq,
    V: Inline,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V> RhlWriter<K, V>
where
    K: Inline + Hash + Eq,
    V: Inline,
{
    /// An empty table with the default [`Params`] (size 32, random seeds), and its writer.
    pub fn new() -> Self {
        RhlWriter {
            table: Arc::new(RhlTable::new()),
        }
    }

    /// An empty table with `params`, and its writer.
    ///
    /// # Errors
    /// [`ParamsError`] when a size is not a power of two or out of range.
    pub fn with_params(params: Params) -> Result<Self, ParamsError> {
        Ok(RhlWriter {
            table: Arc::new(RhlTable::with_params(params)?),
        })
    }

    /// The table this writer changes, to share with readers.
    pub fn reader(&self) -> &Arc<RhlTable<K, V>> {
        &self.table
    }
}

impl<K, V> RhlWriter<K, V>
where
    K: Inline + Hash + Eq + Send + 'static,
    V: Inline + Send + 'static,
{
    /// Adds an object; an existing key gets it as its newest duplicate.
    ///
    /// # Errors
    /// [`InsertError::TableFull`] when `key` is new and the table already holds twice
    /// `max_size` keys (nothing is inserted).
    pub fn insert(&mut self, key: K, value: V) -> Result<(), InsertError> {
        self.table.insert(key, value)
    }

    /// Removes the newest object with `key` whose value `matches`; returns whether one was
    /// removed. Readers that copied it keep their copy.
    pub fn remove(&mut self, key: &K, matches: impl FnMut(&V) -> bool) -> bool {
        self.table.remove(key, matches)
    }

    /// Removes every object with `key`; returns how many.
    pub fn remove_all(&mut self, key: &K) -> usize {
        self.table.remove_all(key)
    }

    /// Changes the newest object with `key` whose value `matches` (readers see the old value
    /// or the new one, never a mix); returns whether one was changed.
    ///
    /// ```
    /// use addr_table::RhlWriter;
    /// let mut t: RhlWriter<u32, u64> = RhlWriter::new();
    /// t.insert(1, 10)?;
    /// t.insert(1, 20)?;
    /// assert!(t.update(&1, |v| *v == 10, |v| *v = 11));
    /// let guard = crossbeam_epoch::pin();
    /// assert_eq!(t.get_all(&1, &guard).collect::<Vec<_>>(), [20, 11]);
    /// # Ok::<(), addr_table::InsertError>(())
    /// ```
    pub fn update(
        &mut self,
        key: &K,
        matches: impl FnMut(&V) -> bool,
        change: impl FnOnce(&mut V),
    ) -> bool {
        self.table.update(key, matches, change)
    }

    /// Completes a rehash in progress now instead of over the next writes.
    pub fn finish_rehash(&mut self) {
        self.table.finish_rehash();
    }
}
