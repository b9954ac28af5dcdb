//! Per-queue configuration.

/// What to do with 802.1Q / 802.1ad tagged frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum VlanMode {
    /// Drop them (counted as [`DropReason::Vlan`](crate::DropReason::Vlan)).
    #[default]
    Drop,
    /// Hand them to the kernel (which owns the VLAN interfaces).
    Punt,
    /// Route the packet inside as if it had arrived untagged on the ingress interface; the tag
    /// is removed on the way out (egress interfaces are untagged). ICMP errors go back with the
    /// tag they came with.
    Route,
}

/// How a [`Queue`](crate::Queue) behaves. `Config::default()` follows the kernel's defaults
/// where there is one.
///
/// ```
/// use dataplane::{Config, VlanMode};
/// let config = Config { vlan: VlanMode::Route, hold_frames: 128, ..Config::default() };
/// assert!(config.validate().is_ok());
/// assert!(Config { hold_slot_size: 20, ..Config::default() }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The queue (or CPU) number, compared with UDP sockets' incoming CPU.
    pub queue_id: u32,
    /// Tagged frames.
    pub vlan: VlanMode,
    /// The route cache in front of the FIB; `None` turns it off (every packet does the full
    /// lookup: address table, FIB, link and neighbour tables).
    pub dst_cache: Option<dst_cache::Config>,
    /// ICMP errors per second (`icmp_msgs_per_sec`, default 1000); 0 sends none. "Fragmentation
    /// needed" and "packet too big" are exempt, as in the kernel.
    pub icmp_rate: u32,
    /// ICMP burst (`icmp_msgs_burst`, default 50).
    pub icmp_burst: u32,
    /// Frames the hold buffer keeps, for all neighbours of the queue together (default 256:
    /// 512 KiB of slots at the default slot size). A frame that finds no free slot is dropped
    /// (`hold_full`).
    pub hold_frames: usize,
    /// Bytes held per unresolved neighbour: the kernel's `unres_qlen_bytes` (default 212,992,
    /// the kernel's default, which is 101 full-size frames: `unres_qlen`). Each frame is
    /// charged as the kernel charges an skb's `truesize`, its length plus
    /// [`HOLD_FRAME_OVERHEAD`](crate::HOLD_FRAME_OVERHEAD); as in the kernel, a frame that
    /// does not fit pushes the neighbour's oldest frames out (dropped, `hold_full`), and a
    /// neighbour always keeps its newest frame.
    pub hold_bytes_per_neighbour: usize,
    /// The size of one hold slot: frames longer than this are not held (default 2048).
    pub hold_slot_size: usize,
    /// How long a frame may wait for its neighbour, in nanoseconds (default 3 s: the kernel's
    /// `mcast_solicit` 3 × `retrans_time` 1 s).
    pub hold_timeout_ns: u64,
    /// How often a resolution request is repeated while frames wait, in nanoseconds (default
    /// 1 s, `retrans_time`).
    pub resolve_retry_ns: u64,
    /// Resolution requests kept until [`poll_resolution`](crate::Queue::poll_resolution)
    /// takes them (default 64).
    pub resolution_queue: usize,
    /// The most IPv6 extension headers walked looking for the upper layer (default 8); beyond,
    /// the packet is punted.
    pub max_extension_headers: usize,
    /// The packet mark xfrm policy lookups see (`skb->mark`): 0, as for every packet from the
    /// wire, unless the kernel's configuration would set one (a firewall `MARK` rule, a tc
    /// action) before the policy check.
    pub policy_mark: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            queue_id: 0,
            vlan: VlanMode::Drop,
            dst_cache: Some(dst_cache::Config::default()),
            icmp_rate: 1000,
            icmp_burst: 50,
            hold_frames: 256,
            hold_bytes_per_neighbour: 212_992,
            hold_slot_size: 2048,
            hold_timeout_ns: 3_000_000_000,
            resolve_retry_ns: 1_000_000_000,
            resolution_queue: 64,
            max_extension_headers: 8,
            policy_mark: 0,
        }
    }
}

/// Why a [`Config`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The route cache configuration is out of range.
    #[error("dst-cache: {0}")]
    DstCache(#[from] dst_cache::ConfigError),
    /// `hold_slot_size` cannot hold a minimal Ethernet + IPv4 frame (34 bytes).
    #[error("hold_slot_size must be at least 34 bytes")]
    HoldSlotSize,
    /// `resolution_queue` is zero.
    #[error("resolution_queue must be at least 1")]
    ResolutionQueue,
}

impl Config {
    /// Checks the configuration.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(cache) = &self.dst_cache {
            cache.validate()?;
        }
        if self.hold_slot_size < 34 {
            return Err(ConfigError::HoldSlotSize);
        }
        if self.resolution_queue == 0 {
            return Err(ConfigError::ResolutionQueue);
        }
        Ok(())
    }
}
