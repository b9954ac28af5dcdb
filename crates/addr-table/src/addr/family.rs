//! What differs between IPv4 and IPv6: the hash key, the order of an interface's list, and
//! what removing a primary address does.
#![forbid(unsafe_code)]

use std::fmt::Debug;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::AddrError;
use super::entry::IfAddr;
use super::flags::IfaFlags;
use super::table::{AddrTable, FamilyTable};
use crate::inline::Inline;

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// What a removal did to an interface's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal<A> {
    /// The removed addresses: the one asked for first, then IPv4 secondaries that went with
    /// their primary (when secondaries are not promoted).
    pub removed: Vec<IfAddr<A>>,
    /// The IPv4 secondary promoted to primary in the removed primary's place, as it is now.
    pub promoted: Option<IfAddr<A>>,
}

/// An address family: [`Ipv4Addr`] or [`Ipv6Addr`] (sealed).
pub trait Family: Copy + Eq + Ord + Debug + Send + Sync + 'static + sealed::Sealed {
    /// The integer the hash tables key on (`u32` / `u128`): one `write_u32`/`write_u128`.
    type Key: Inline + Hash + Eq + Copy + Debug + Send + Sync + 'static;
    /// Longest prefix (32 or 128).
    const MAX_PREFIX_LEN: u8;

    /// The hash key of an address.
    fn key(self) -> Self::Key;

    /// This family's half of a namespace's table.
    fn of(table: &AddrTable) -> &FamilyTable<Self>;

    /// Whether `self` lies in `net`/`prefix_len`.
    fn in_subnet(self, net: Self, prefix_len: u8) -> bool;

    /// Where `entry` goes in an interface's list `list` (kernel order), adjusting its flags
    /// (IPv4 computes `SECONDARY`), or why it cannot be added.
    fn place(list: &[IfAddr<Self>], entry: &mut IfAddr<Self>) -> Result<usize, AddrError>;

    /// Removes `list[index]` and whatever goes with it.
    fn remove_at(list: &mut Vec<IfAddr<Self>>, index: usize, promote: bool) -> Removal<Self>;

    /// Whether an address with `flags` answers `dev_find` / `is_local`.
    fn answers(flags: IfaFlags) -> bool;

    /// Whether every address of the family answers, whatever its flags (IPv4: no DAD), so a
    /// lookup need not test the stored answer.
    const ALWAYS_ANSWERS: bool;
}

fn mask32(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0)
}

fn mask128(prefix_len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix_len))
        .unwrap_or(0)
}

/// Index after the last primary of `list` whose scope is as narrow as `entry`'s or narrower:
/// the kernel keeps primaries ordered from narrow (host) to wide (universe) scope, each new
/// one after those of its own scope.
fn primary_slot(list: &[IfAddr<Ipv4Addr>], entry: &IfAddr<Ipv4Addr>) -> usize {
    list.iter()
        .rposition(|x| !x.is_secondary() && entry.scope <= x.scope)
        .map_or(0, |i| i + 1)
}

impl Family for Ipv4Addr {
    type Key = u32;
    const MAX_PREFIX_LEN: u8 = 32;

    #[inline(always)]
    fn key(self) -> u32 {
        self.to_bits()
    }

    fn of(table: &AddrTable) -> &FamilyTable<Self> {
        &table.v4
    }

    fn in_subnet(self, net: Self, prefix_len: u8) -> bool {
        let mask = mask32(prefix_len);
        self.to_bits() & mask == net.to_bits() & mask
    }

    fn place(list: &[IfAddr<Self>], entry: &mut IfAddr<Self>) -> Result<usize, AddrError> {
        // An address in the subnet of one already present (same prefix length) is secondary.
        entry.flags = entry.flags.without(IfaFlags::SECONDARY);
        for x in list {
            if x.prefix_len == entry.prefix_len && entry.addr.in_subnet(x.addr, x.prefix_len) {
                if x.addr == entry.addr {
                    return Err(AddrError::Exists);
                }
                if x.scope != entry.scope {
                    return Err(AddrError::ScopeMismatch);
                }
                entry.flags = entry.flags.with(IfaFlags::SECONDARY);
            }
        }
        Ok(if entry.is_secondary() {
            list.len()
        } else {
            primary_slot(list, entry)
        })
    }

    fn remove_at(list: &mut Vec<IfAddr<Self>>, index: usize, promote: bool) -> Removal<Self> {
        let victim = list.remove(index);
        let mut removal = Removal {
            removed: vec![victim],
            promoted: None,
        };
        if victim.is_secondary() {
            return removal;
        }
        let same_subnet = |x: &IfAddr<Self>| {
            x.is_secondary()
                && x.prefix_len == victim.prefix_len
                && x.addr.in_subnet(victim.addr, victim.prefix_len)
        };
        if promote {
            if let Some(pos) = list.iter().position(same_subnet) {
                let mut p = list.remove(pos);
                p.flags = p.flags.without(IfaFlags::SECONDARY);
                let slot = primary_slot(list, &p);
                list.insert(slot, p);
                removal.promoted = Some(p);
            }
        } else {
            let (gone, kept): (Vec<_>, Vec<_>) = list.iter().partition(|x| same_subnet(x));
            *list = kept;
            removal.removed.extend(gone);
        }
        removal
    }

    fn answers(_flags: IfaFlags) -> bool {
        true
    }

    const ALWAYS_ANSWERS: bool = true;
}

/// The scope of an IPv6 address as a source (RFC 4291, the kernel's
/// `ipv6_addr_src_scope`): 0x1 interface-local, 0x2 link-local (also the loopback address),
/// 0x5 site-local, 0xe global (unique local addresses included).
pub fn ipv6_scope(addr: Ipv6Addr) -> u8 {
    let bits = addr.to_bits();
    if addr.is_multicast() {
        return addr.octets()[1] & 0x0f;
    }
    if addr.is_loopback() || bits >> 118 == 0x3fa {
        // ::1 and fe80::/10
        0x2
    } else if bits >> 118 == 0x3fb {
        // fec0::/10 (deprecated site-local)
        0x5
    } else {
        0xe
    }
}

impl Family for Ipv6Addr {
    type Key = u128;
    const MAX_PREFIX_LEN: u8 = 128;

    #[inline(always)]
    fn key(self) -> u128 {
        self.to_bits()
    }

    fn of(table: &AddrTable) -> &FamilyTable<Self> {
        &table.v6
    }

    fn in_subnet(self, net: Self, prefix_len: u8) -> bool {
        let mask = mask128(prefix_len);
        self.to_bits() & mask == net.to_bits() & mask
    }

    fn place(list: &[IfAddr<Self>], entry: &mut IfAddr<Self>) -> Result<usize, AddrError> {
        // One address once per interface, whatever its prefix length.
        if list.iter().any(|x| x.addr == entry.addr) {
            return Err(AddrError::Exists);
        }
        // Wider scope first; a new address goes before the others of its scope.
        let scope = ipv6_scope(entry.addr);
        Ok(list
            .iter()
            .position(|x| scope >= ipv6_scope(x.addr))
            .unwrap_or(list.len()))
    }

    fn remove_at(list: &mut Vec<IfAddr<Self>>, index: usize, _promote: bool) -> Removal<Self> {
        Removal {
            removed: vec![list.remove(index)],
            promoted: None,
        }
    }

    fn answers(flags: IfaFlags) -> bool {
        // Tentative addresses are not ours yet, unless optimistic; failed DAD never is.
        !flags.contains(IfaFlags::DADFAILED)
            && (!flags.contains(IfaFlags::TENTATIVE) || flags.contains(IfaFlags::OPTIMISTIC))
    }

    const ALWAYS_ANSWERS: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_scopes() {
        assert_eq!(mask32(0), 0);
        assert_eq!(mask32(24), 0xffff_ff00);
        assert_eq!(mask32(32), u32::MAX);
        assert_eq!(mask128(0), 0);
        assert_eq!(mask128(128), u128::MAX);
        assert_eq!(ipv6_scope("fe80::1".parse().unwrap()), 0x2);
        assert_eq!(ipv6_scope("::1".parse().unwrap()), 0x2);
        assert_eq!(ipv6_scope("fec0::1".parse().unwrap()), 0x5);
        assert_eq!(ipv6_scope("fd00::1".parse().unwrap()), 0xe);
        assert_eq!(ipv6_scope("2001:db8::1".parse().unwrap()), 0xe);
        assert_eq!(ipv6_scope("ff02::1".parse().unwrap()), 0x2);
    }
}
