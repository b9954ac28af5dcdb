//! Table and namespace configuration: the kernel's `uhash_entries`, `udp_child_hash_entries`
//! and `ip_local_port_range`.
#![forbid(unsafe_code)]

use crate::error::ConfigError;

/// The fewest entries of the global table (`UDP_HTABLE_SIZE_MIN`).
pub const MIN_HASH_ENTRIES: u32 = 256;
/// The fewest entries of a namespace's own table (`UDP_HTABLE_SIZE_MIN_PERNET`): the port
/// search keeps a bitmap of 65536 / 128 = 512 ports per slot.
pub const MIN_CHILD_HASH_ENTRIES: u32 = 128;
/// The most entries of any table (`UDP_HTABLE_SIZE_MAX`): a namespace's ports fall into at
/// most 65536 slots.
pub const MAX_HASH_ENTRIES: u32 = 65536;
/// The kernel's default local port range.
pub const DEFAULT_LOCAL_PORT_RANGE: (u16, u16) = (32768, 60999);

/// The global table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableConfig {
    /// Slots of the global table (`uhash_entries`): rounded up to a power of two, at least
    /// [`MIN_HASH_ENTRIES`], at most [`MAX_HASH_ENTRIES`].
    pub hash_entries: u32,
    /// Seed of the writer's random numbers (namespace hash mixes, port search starts); `None`
    /// draws one from the process's random state.
    pub seed: Option<u64>,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            hash_entries: MAX_HASH_ENTRIES,
            seed: None,
        }
    }
}

impl TableConfig {
    /// The number of slots this configuration gives.
    ///
    /// # Errors
    /// [`ConfigError::HashEntries`] for 0 or more than 65536.
    ///
    /// ```
    /// use udp_socktab::TableConfig;
    /// let c = TableConfig { hash_entries: 1000, seed: None };
    /// assert_eq!(c.entries(), Ok(1024));
    /// assert_eq!(TableConfig { hash_entries: 1, seed: None }.entries(), Ok(256));
    /// ```
    pub fn entries(&self) -> Result<u32, ConfigError> {
        match self.hash_entries {
            0 | 65537.. => Err(ConfigError::HashEntries(self.hash_entries)),
            n => Ok(n.next_power_of_two().max(MIN_HASH_ENTRIES)),
        }
    }
}

/// A network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetnsConfig {
    /// `udp_child_hash_entries` when the namespace is created: 0 shares the global table
    /// (mixing the namespace's value into its hashes); otherwise the namespace gets its own
    /// table of this many slots, rounded up to a power of two in 128..=65536.
    pub child_hash_entries: u32,
    /// `ip_local_port_range`: where port 0 binds pick a port.
    pub local_port_range: (u16, u16),
}

impl Default for NetnsConfig {
    fn default() -> Self {
        NetnsConfig {
            child_hash_entries: 0,
            local_port_range: DEFAULT_LOCAL_PORT_RANGE,
        }
    }
}

impl NetnsConfig {
    /// The size of the namespace's own table; `None` when it shares the global one.
    ///
    /// # Errors
    /// [`ConfigError::ChildHashEntries`] above 65536, [`ConfigError::PortRange`] for a bad
    /// port range.
    ///
    /// ```
    /// use udp_socktab::NetnsConfig;
    /// let c = |n| NetnsConfig { child_hash_entries: n, ..NetnsConfig::default() };
    /// assert_eq!(c(0).child_entries(), Ok(None));
    /// assert_eq!(c(100).child_entries(), Ok(Some(128)));
    /// assert_eq!(c(5000).child_entries(), Ok(Some(8192)));
    /// assert!(c(70000).child_entries().is_err());
    /// ```
    pub fn child_entries(&self) -> Result<Option<u32>, ConfigError> {
        check_port_range(self.local_port_range)?;
        match self.child_hash_entries {
            0 => Ok(None),
            65537.. => Err(ConfigError::ChildHashEntries(self.child_hash_entries)),
            n => Ok(Some(n.next_power_of_two().max(MIN_CHILD_HASH_ENTRIES))),
        }
    }
}

/// Checks `1 <= low <= high`.
pub(crate) fn check_port_range((low, high): (u16, u16)) -> Result<(), ConfigError> {
    if low == 0 || low > high {
        return Err(ConfigError::PortRange(low, high));
    }
    Ok(())
}
