//! The own-source check (`fib_validate_source`: one of this host's IPv4 addresses as a source is
//! a martian) memoised per queue, so that the address table is consulted once per source and
//! route generation rather than once per packet.

use std::net::Ipv4Addr;

use crossbeam_epoch::Guard;

use crate::Tables;

/// Slots of the memo (a power of two).
const SLOTS: usize = 256;

/// One remembered answer.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The source address.
    addr: u32,
    /// The route generation the answer was taken under, plus one (0: empty).
    generation: u64,
    /// Whether `addr` is one of ours.
    own: bool,
}

/// A direct-mapped memo of "is this IPv4 source one of our addresses", valid for one route
/// generation: the control plane bumps the generation after every address change it publishes
/// (the [`Tables`] contract), so an answer taken under the batch's generation is the answer the
/// address table gives. A flood of random sources only misses: each miss costs what the check
/// without the memo costs, plus one slot write.
#[derive(Clone, Debug)]
pub(crate) struct SourceMemo {
    slots: Box<[Slot]>,
}

impl SourceMemo {
    pub(crate) fn new() -> Self {
        SourceMemo {
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
        }
    }

    /// Whether `src` is one of this namespace's IPv4 addresses, under route generation
    /// `generation`.
    #[inline]
    pub(crate) fn is_own(
        &mut self,
        tables: &Tables,
        guard: &Guard,
        generation: u64,
        src: u32,
    ) -> bool {
        let index = (src.wrapping_mul(0x9e37_79b1) >> 24) as usize & (SLOTS - 1);
        let tag = generation.wrapping_add(1);
        let slot = &mut self.slots[index];
        if slot.generation == tag && slot.addr == src {
            return slot.own;
        }
        let own = tables
            .addrs
            .dev_find(Ipv4Addr::from(src), None, guard)
            .is_some();
        *slot = Slot {
            addr: src,
            generation: tag,
            own,
        };
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use addr_table::{IfAddr, NetnsId};
    use udp_socktab::{NetnsConfig, SockTable, TableConfig};

    #[test]
    fn answers_follow_the_generation() {
        let (sockets, mut writer) = SockTable::new(TableConfig::default()).unwrap();
        let ns = writer.add_netns(NetnsConfig::default()).unwrap();
        let tables = Tables::new(NetnsId(1), sockets, ns);
        let guard = crossbeam_epoch::pin();
        let mut memo = SourceMemo::new();
        let a = u32::from(Ipv4Addr::new(10, 0, 0, 1));
        assert!(!memo.is_own(&tables, &guard, 0, a));
        tables
            .addrs
            .add(IfAddr::new(Ipv4Addr::from(a), 24, 1))
            .unwrap();
        // Same generation: the memo's answer (the writer has not bumped yet).
        assert!(!memo.is_own(&tables, &guard, 0, a));
        // The bump: the address table is asked again.
        assert!(memo.is_own(&tables, &guard, 1, a));
        assert!(!memo.is_own(&tables, &guard, 1, a + 1));
    }
}
