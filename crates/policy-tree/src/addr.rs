//! Address families and prefixes, both families in one left-aligned `u128` representation.
//!
//! An IPv4 address is kept in the top 32 bits of a `u128` (`u32 << 96`), an IPv6 address as it
//! is. Bit `i` of an address counts from the most significant bit, so "the first `len` bits"
//! means the same thing for both families and one trie serves both.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::Error;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4 (AF_INET).
    V4,
    /// IPv6 (AF_INET6).
    V6,
}

impl Family {
    /// The address width in bits: 32 or 128.
    pub const fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The family of an address.
    pub const fn of(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// 0 for IPv4, 1 for IPv6: an index into per-family arrays.
    pub(crate) const fn slot(self) -> usize {
        match self {
            Family::V4 => 0,
            Family::V6 => 1,
        }
    }
}

/// The mask of the first `len` bits of a left-aligned address (`len` at most 128).
#[inline]
pub(crate) const fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

/// Bit `pos` (0 = most significant) of a left-aligned address, as 0 or 1.
#[inline]
pub(crate) const fn bit(addr: u128, pos: u8) -> usize {
    ((addr >> (127 - pos as u32)) & 1) as usize
}

/// An address in the left-aligned representation.
#[inline]
pub(crate) fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of a family in the left-aligned representation.
pub(crate) fn from_bits(family: Family, bits: u128) -> IpAddr {
    match family {
        // The low 96 bits of an IPv4 address are zero, so the shift loses nothing.
        Family::V4 => IpAddr::V4(Ipv4Addr::from((bits >> 96) as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// An IP prefix: a family, a length and an address, host bits included.
///
/// Matching ignores the bits past the length, as the kernel's does, but they are part of the
/// prefix's identity: the kernel keeps `struct xfrm_selector` as given and compares selectors
/// byte for byte (`selector_cmp`), so `10.0.1.3/25` and `10.0.1.96/25` are two selectors that
/// match the same addresses, and two policies. [`network`](Self::network) is the masked address.
/// A length beyond the family's width is an error.
///
/// ```
/// use policy_tree::Prefix;
///
/// let p: Prefix = "10.0.1.7/23".parse()?;
/// assert_eq!(p.to_string(), "10.0.1.7/23");
/// assert_eq!(p.network().to_string(), "10.0.0.0");
/// assert_ne!(p, "10.0.0.0/23".parse()?);
/// assert!(p.contains("10.0.1.200".parse().unwrap()));
/// assert!(!p.contains("dead::1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<Prefix>().is_err());
/// # Ok::<(), policy_tree::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address masked to `len` bits (what matching and the trees use).
    pub(crate) addr: u128,
    pub(crate) len: u8,
    pub(crate) family: Family,
    /// The address as given, host bits included (identity only).
    pub(crate) raw: u128,
}

impl Prefix {
    /// The prefix `addr/len`; host bits are kept for identity and ignored by matching.
    ///
    /// # Errors
    /// [`Error::PrefixLen`] when `len` exceeds the family's width.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, Error> {
        let family = Family::of(&addr);
        if len > family.bits() {
            return Err(Error::PrefixLen {
                len,
                max: family.bits(),
                family,
            });
        }
        let raw = to_bits(addr);
        Ok(Prefix {
            addr: raw & mask(len),
            len,
            family,
            raw,
        })
    }

    /// The wildcard prefix of a family (`0.0.0.0/0` or `::/0`).
    pub const fn any(family: Family) -> Prefix {
        Prefix {
            addr: 0,
            len: 0,
            family,
            raw: 0,
        }
    }

    /// The host prefix of an address (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Prefix {
        let family = Family::of(&addr);
        Prefix {
            addr: to_bits(addr),
            len: family.bits(),
            family,
            raw: to_bits(addr),
        }
    }

    /// The address as given, host bits included (`10.0.1.7` of `10.0.1.7/23`), as
    /// `ip xfrm policy` shows it.
    pub fn addr(&self) -> IpAddr {
        from_bits(self.family, self.raw)
    }

    /// The network address: the address masked to the prefix length (`10.0.0.0` of
    /// `10.0.1.7/23`).
    pub fn network(&self) -> IpAddr {
        from_bits(self.family, self.addr)
    }

    /// The same prefix with its host bits cleared (`10.0.0.0/23` of `10.0.1.7/23`).
    #[must_use]
    pub const fn masked(&self) -> Prefix {
        Prefix {
            addr: self.addr,
            len: self.len,
            family: self.family,
            raw: self.addr,
        }
    }

    /// The prefix length.
    pub const fn prefixlen(&self) -> u8 {
        self.len
    }

    /// The address family.
    pub const fn family(&self) -> Family {
        self.family
    }

    /// Whether `addr` lies inside the prefix (an address of the other family never does).
    pub fn contains(&self, addr: IpAddr) -> bool {
        Family::of(&addr) == self.family && self.contains_bits(to_bits(addr))
    }

    /// Whether a left-aligned address of this prefix's family lies inside it.
    #[inline]
    pub(crate) const fn contains_bits(&self, addr: u128) -> bool {
        addr & mask(self.len) == self.addr
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

impl fmt::Debug for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Prefix {
    type Err = Error;

    /// Parses `ADDR/LEN` or a bare `ADDR` (a host prefix).
    fn from_str(s: &str) -> Result<Prefix, Error> {
        let bad = || Error::BadPrefix(s.to_owned());
        match s.split_once('/') {
            Some((addr, len)) => {
                let addr: IpAddr = addr.parse().map_err(|_| bad())?;
                let len: u8 = len.parse().map_err(|_| bad())?;
                Prefix::new(addr, len)
            }
            None => Ok(Prefix::host(s.parse().map_err(|_| bad())?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_bits() {
        assert_eq!(mask(0), 0);
        assert_eq!(mask(128), u128::MAX);
        assert_eq!(mask(1), 1 << 127);
        let a = to_bits("128.0.0.1".parse().unwrap());
        assert_eq!(bit(a, 0), 1);
        assert_eq!(bit(a, 1), 0);
        assert_eq!(bit(a, 31), 1);
    }

    #[test]
    fn parses_and_prints_both_families() {
        for (text, shown) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3/16", "10.1.2.3/16"),
            ("10.1.2.3", "10.1.2.3/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("dead:1::/64", "dead:1::/64"),
            ("dead:1::ff/120", "dead:1::ff/120"),
            ("::/0", "::/0"),
        ] {
            assert_eq!(text.parse::<Prefix>().unwrap().to_string(), shown);
        }
        for bad in [
            "10.0.0.0/33",
            "dead::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/-1",
            "",
        ] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn host_bits_are_identity_not_matching() {
        let a: Prefix = "10.100.1.3/25".parse().unwrap();
        let b: Prefix = "10.100.1.96/25".parse().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.masked(), b.masked());
        assert_eq!(a.network(), b.network());
        for host in ["10.100.1.0", "10.100.1.127"] {
            let h = host.parse().unwrap();
            assert!(a.contains(h) && b.contains(h));
        }
        assert!(!a.contains("10.100.1.128".parse().unwrap()));
    }

    #[test]
    fn containment_respects_family() {
        let any4 = Prefix::any(Family::V4);
        assert!(any4.contains("1.2.3.4".parse().unwrap()));
        assert!(!any4.contains("::1".parse().unwrap()));
        let p: Prefix = "dead:1::/32".parse().unwrap();
        assert!(p.contains("dead:1:ffff::1".parse().unwrap()));
        assert!(!p.contains("dead:2::1".parse().unwrap()));
    }
}
