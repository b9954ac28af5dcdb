//! Changing a running queue's configuration: what can change between two batches, and what
//! only a new queue can take.

use crate::config::{Config, ConfigError};
use crate::queue::Queue;
use crate::ratelimit::TokenBucket;

impl Config {
    /// The settings of `self` that differ from `running` and that a running [`Queue`] cannot
    /// take, because the queue allocated for them when it was made: the route cache and the
    /// hold buffer (`dst_cache`, `hold_frames`, `hold_bytes_per_neighbour`, `hold_slot_size`,
    /// `hold_timeout_ns`, `resolve_retry_ns`, `resolution_queue`), and `queue_id`. Empty: every
    /// difference can be applied with [`Queue::reconfigure`].
    ///
    /// ```
    /// use dataplane::Config;
    /// let running = Config::default();
    /// let live = Config { icmp_rate: 10, ..Config::default() };
    /// assert!(live.needs_restart(&running).is_empty());
    /// let bigger = Config { hold_frames: 128, dst_cache: None, ..Config::default() };
    /// assert_eq!(bigger.needs_restart(&running), ["dst_cache", "hold_frames"]);
    /// ```
    pub fn needs_restart(&self, running: &Config) -> Vec<&'static str> {
        let mut fixed = Vec::new();
        let mut differs = |name: &'static str, changed: bool| {
            if changed {
                fixed.push(name);
            }
        };
        differs("queue_id", self.queue_id != running.queue_id);
        differs("dst_cache", self.dst_cache != running.dst_cache);
        differs("hold_frames", self.hold_frames != running.hold_frames);
        differs(
            "hold_bytes_per_neighbour",
            self.hold_bytes_per_neighbour != running.hold_bytes_per_neighbour,
        );
        differs(
            "hold_slot_size",
            self.hold_slot_size != running.hold_slot_size,
        );
        differs(
            "hold_timeout_ns",
            self.hold_timeout_ns != running.hold_timeout_ns,
        );
        differs(
            "resolve_retry_ns",
            self.resolve_retry_ns != running.resolve_retry_ns,
        );
        differs(
            "resolution_queue",
            self.resolution_queue != running.resolution_queue,
        );
        fixed
    }
}

impl Queue {
    /// Applies the settings that can change between two batches: the ICMP rate and burst (a
    /// fresh, full token bucket when they change), the VLAN mode, the IPv6 extension-header
    /// bound and the policy mark. The rest keeps its running value (see
    /// [`Config::needs_restart`]). Returns the names of the settings that changed.
    ///
    /// # Errors
    /// [`ConfigError`] when `config` is out of range; nothing is changed then.
    ///
    /// ```
    /// use dataplane::{Config, Queue, VlanMode};
    /// let mut queue = Queue::new(Config::default())?;
    /// let changed = queue.reconfigure(&Config { icmp_rate: 10, vlan: VlanMode::Punt, ..Config::default() })?;
    /// assert_eq!(changed, ["icmp_rate", "vlan"]);
    /// assert_eq!(queue.config().vlan, VlanMode::Punt);
    /// # Ok::<(), dataplane::ConfigError>(())
    /// ```
    pub fn reconfigure(&mut self, config: &Config) -> Result<Vec<&'static str>, ConfigError> {
        config.validate()?;
        let running = &mut self.config;
        let mut changed = Vec::new();
        if (config.icmp_rate, config.icmp_burst) != (running.icmp_rate, running.icmp_burst) {
            if config.icmp_rate != running.icmp_rate {
                changed.push("icmp_rate");
            }
            if config.icmp_burst != running.icmp_burst {
                changed.push("icmp_burst");
            }
            running.icmp_rate = config.icmp_rate;
            running.icmp_burst = config.icmp_burst;
            self.icmp = TokenBucket::new(config.icmp_rate, config.icmp_burst);
        }
        if config.vlan != running.vlan {
            changed.push("vlan");
            running.vlan = config.vlan;
        }
        if config.max_extension_headers != running.max_extension_headers {
            changed.push("max_extension_headers");
            running.max_extension_headers = config.max_extension_headers;
        }
        if config.policy_mark != running.policy_mark {
            changed.push("policy_mark");
            running.policy_mark = config.policy_mark;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DropReason;
    use crate::{Frame, HeapPool, PuntReason, Tables, Verdict, VlanMode};
    use neigh_table::{Link, LinkFlags, OperState};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    fn tables() -> Tables {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let sock_netns = writer.add_netns(NetnsConfig::default()).unwrap();
        let (tables, mut writers) = Tables::new(addr_table::NetnsId(1), sockets, sock_netns);
        let mut link = Link {
            mac: Some([2, 0, 0, 0, 0, 1]),
            ..Link::new(1, "eth1".to_owned())
        };
        (link.flags, link.oper) = (LinkFlags::UP, OperState::UP);
        writers.links.upsert(link);
        tables.generation.bump();
        tables
    }

    /// A UDP packet in an 802.1Q tag, to this host's link-layer address.
    fn tagged() -> Vec<u8> {
        let mut bytes = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1])
            .single_vlan(etherparse::VlanId::try_new(10).unwrap())
            .ipv4([198, 51, 100, 7], [203, 0, 113, 9], 64)
            .udp(5000, 53)
            .write(&mut bytes, b"x")
            .unwrap();
        bytes
    }

    fn verdict(queue: &mut Queue, tables: &Tables) -> Verdict {
        let packet = tagged();
        let mut chunk = packet.clone();
        let mut frames = [Frame::new(&mut chunk, 0, packet.len(), 1)];
        let guard = crossbeam_epoch::pin();
        queue.process_batch(tables, &guard, 0, &mut frames, &mut HeapPool::new(2048, 2));
        frames[0].verdict
    }

    #[test]
    fn live_settings_take_effect_at_the_next_batch() {
        let tables = tables();
        let mut queue = Queue::new(Config::default()).unwrap();
        assert_eq!(
            verdict(&mut queue, &tables),
            Verdict::Drop(DropReason::Vlan)
        );
        let punt = Config {
            vlan: VlanMode::Punt,
            ..Config::default()
        };
        assert_eq!(queue.reconfigure(&punt).unwrap(), ["vlan"]);
        assert_eq!(
            verdict(&mut queue, &tables),
            Verdict::Punt(PuntReason::Vlan)
        );
        assert!(
            queue.reconfigure(&punt).unwrap().is_empty(),
            "nothing changed"
        );
    }

    #[test]
    fn a_bad_configuration_changes_nothing() {
        let mut queue = Queue::new(Config::default()).unwrap();
        let bad = Config {
            vlan: VlanMode::Punt,
            hold_slot_size: 20,
            ..Config::default()
        };
        assert_eq!(queue.reconfigure(&bad), Err(ConfigError::HoldSlotSize));
        assert_eq!(queue.config().vlan, VlanMode::Drop);
    }

    #[test]
    fn sizes_fixed_at_creation_are_named() {
        let running = Config::default();
        assert!(Config::default().needs_restart(&running).is_empty());
        let changed = Config {
            queue_id: 3,
            hold_slot_size: 4096,
            resolution_queue: 8,
            icmp_burst: 1,
            ..Config::default()
        };
        assert_eq!(
            changed.needs_restart(&running),
            ["queue_id", "hold_slot_size", "resolution_queue"]
        );
    }
}
