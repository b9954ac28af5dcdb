use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address type a [`Prefix`] can be made of: [`Ipv4Addr`] or [`Ipv6Addr`].
pub trait PrefixAddr: Copy + Eq + fmt::Debug + fmt::Display + FromStr + private::Sealed {
    /// The address width in bits: 32 or 128.
    const BITS: u8;
    /// The address as an unsigned integer in the low bits of a `u128`.
    fn to_u128(self) -> u128;
}

impl PrefixAddr for Ipv4Addr {
    const BITS: u8 = 32;
    fn to_u128(self) -> u128 {
        u32::from(self).into()
    }
}

impl PrefixAddr for Ipv6Addr {
    const BITS: u8 = 128;
    fn to_u128(self) -> u128 {
        self.into()
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
}

/// A canonical IP prefix: an address whose bits past `len` are all zero.
///
/// ```
/// use std::net::Ipv4Addr;
/// use xfwd_benches::data::Prefix;
///
/// let p: Prefix<Ipv4Addr> = "10.1.0.0/16".parse()?;
/// assert!(p.contains(Ipv4Addr::new(10, 1, 200, 3)));
/// assert!("10.1.0.1/16".parse::<Prefix<Ipv4Addr>>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix<A> {
    /// The network address.
    pub addr: A,
    /// The prefix length, at most `A::BITS`.
    pub len: u8,
}

impl<A: PrefixAddr> Prefix<A> {
    /// The mask of the network bits, in the low `A::BITS` bits of a `u128`.
    fn mask(len: u8) -> u128 {
        let width = u32::from(A::BITS);
        let all = u128::MAX >> (128 - width);
        all & !all.checked_shr(len.into()).unwrap_or(0)
    }

    /// Whether `addr` lies inside this prefix.
    ///
    /// ```
    /// use std::net::Ipv6Addr;
    /// use xfwd_benches::data::Prefix;
    ///
    /// let p: Prefix<Ipv6Addr> = "2001:db8::/32".parse()?;
    /// assert!(p.contains("2001:db8:1::1".parse().unwrap()));
    /// assert!(!p.contains("2001:db9::1".parse().unwrap()));
    /// # Ok::<(), String>(())
    /// ```
    pub fn contains(&self, addr: A) -> bool {
        let mask = Self::mask(self.len);
        addr.to_u128() & mask == self.addr.to_u128()
    }
}

impl<A: PrefixAddr> FromStr for Prefix<A> {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not of the form address/length"))?;
        let addr: A = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IPv{} address", ip_version::<A>()))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|len| *len <= A::BITS)
            .ok_or_else(|| format!("`{len}` is not a prefix length of 0..={}", A::BITS))?;
        if addr.to_u128() & !Self::mask(len) != 0 {
            return Err(format!("`{s}` has host bits set"));
        }
        Ok(Prefix { addr, len })
    }
}

impl<A: fmt::Display> fmt::Display for Prefix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn ip_version<A: PrefixAddr>() -> u8 {
    if A::BITS == 32 { 4 } else { 6 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_edges() {
        let any: Prefix<Ipv4Addr> = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains(Ipv4Addr::BROADCAST));
        let host: Prefix<Ipv4Addr> = "255.255.255.255/32".parse().unwrap();
        assert!(host.contains(Ipv4Addr::BROADCAST));
        assert!(!host.contains(Ipv4Addr::new(255, 255, 255, 254)));
        let any6: Prefix<Ipv6Addr> = "::/0".parse().unwrap();
        assert!(any6.contains(Ipv6Addr::LOCALHOST));
        let host6: Prefix<Ipv6Addr> = "::1/128".parse().unwrap();
        assert!(host6.contains(Ipv6Addr::LOCALHOST));
        assert!(!host6.contains(Ipv6Addr::UNSPECIFIED));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0/8",
            "10.0.0.1/31",
            "::/0",
        ] {
            assert!(bad.parse::<Prefix<Ipv4Addr>>().is_err(), "{bad}");
        }
        for bad in ["::/129", "2001:db8::1/64", "1.2.3.0/24"] {
            assert!(bad.parse::<Prefix<Ipv6Addr>>().is_err(), "{bad}");
        }
    }
}
