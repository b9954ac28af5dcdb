//! Real routing tables: `prefix/len origin-asn`, one route per line.
//!
//! ```no_run
//! use xfwd_benches::data::routes;
//!
//! let v6 = routes::BGP_FULL_V6.load()?;
//! let default_route = v6.iter().find(|r| r.prefix.len == 0).unwrap();
//! println!("::/0 originates from AS{}", default_route.origin_asn);
//! # Ok::<(), xfwd_benches::data::Error>(())
//! ```

use std::marker::PhantomData;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Error, Prefix, PrefixAddr, numbered_lines, read_xz};

/// One route of a table: a prefix and the AS that originates it.
///
/// The origin ASN stands in for a next-hop id where a benchmark needs distinct next hops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route<A> {
    /// The destination prefix.
    pub prefix: Prefix<A>,
    /// The origin autonomous system number.
    pub origin_asn: u32,
}

/// A routing table shipped in `benches/data/`, of IPv4 or IPv6 routes.
#[derive(Debug)]
pub struct RouteTable<A> {
    file: &'static str,
    len: usize,
    addr: PhantomData<A>,
}

/// A full IPv4 router FIB: 1,072,529 prefixes, default route and private ranges included.
pub const BGP_FULL_V4: RouteTable<Ipv4Addr> = RouteTable::new("bgp-full-v4.txt.xz", 1_072_529);
/// A full IPv6 router FIB: 176,388 prefixes, `::/0` included.
pub const BGP_FULL_V6: RouteTable<Ipv6Addr> = RouteTable::new("bgp-full-v6.txt.xz", 176_388);
/// The IPv4 default-free zone: 886,117 unique prefixes in random order, no default route.
pub const DFZ_V4: RouteTable<Ipv4Addr> = RouteTable::new("dfz-v4.txt.xz", 886_117);

impl<A: PrefixAddr> RouteTable<A> {
    const fn new(file: &'static str, len: usize) -> Self {
        RouteTable {
            file,
            len,
            addr: PhantomData,
        }
    }

    /// The file name inside [`data_dir`](super::data_dir).
    pub fn file_name(&self) -> &'static str {
        self.file
    }

    /// The number of routes the file holds (as its README documents).
    pub fn route_count(&self) -> usize {
        self.len
    }

    /// Decompresses and parses the whole table, in file order.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read or decompressed, [`Error::Parse`] on a bad line
    /// or when the number of routes differs from [`route_count`](Self::route_count).
    pub fn load(&self) -> Result<Vec<Route<A>>, Error> {
        let routes = parse(&read_xz(self.file)?, self.file)?;
        if routes.len() != self.len {
            return Err(Error::parse(
                self.file,
                routes.len(),
                format!("expected {} routes, found {}", self.len, routes.len()),
            ));
        }
        Ok(routes)
    }
}

/// Parses routes in the `prefix/len origin-asn` format; `source` names the input in errors.
///
/// ```
/// use std::net::Ipv4Addr;
/// use xfwd_benches::data::routes;
///
/// let table = routes::parse::<Ipv4Addr>("10.0.0.0/8 64512\n0.0.0.0/0 1\n", "<input>")?;
/// assert_eq!(table[0].prefix.to_string(), "10.0.0.0/8");
/// assert_eq!(table[1].origin_asn, 1);
/// assert!(routes::parse::<Ipv4Addr>("10.0.0.1/8 1\n", "<input>").is_err());
/// # Ok::<(), xfwd_benches::data::Error>(())
/// ```
pub fn parse<A: PrefixAddr>(text: &str, source: &str) -> Result<Vec<Route<A>>, Error> {
    numbered_lines(text)
        .map(|(line_no, line)| {
            let mut fields = line.split_ascii_whitespace();
            let (Some(prefix), Some(asn), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(Error::parse(
                    source,
                    line_no,
                    "expected `prefix/len origin-asn`",
                ));
            };
            let prefix = prefix
                .parse()
                .map_err(|reason| Error::parse(source, line_no, reason))?;
            let origin_asn = asn.parse().map_err(|_| {
                Error::parse(source, line_no, format!("`{asn}` is not an AS number"))
            })?;
            Ok(Route { prefix, origin_asn })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_bad_line() {
        let err = parse::<Ipv6Addr>("::/0 1\n2001:db8::/32 x\n", "t").unwrap_err();
        assert!(matches!(err, Error::Parse { line: 2, .. }), "{err}");
        let err = parse::<Ipv6Addr>("::/0 1 2\n", "t").unwrap_err();
        assert!(matches!(err, Error::Parse { line: 1, .. }), "{err}");
        let err = parse::<Ipv4Addr>("::/0 1\n", "t").unwrap_err();
        assert!(err.to_string().contains("not an IPv4 address"), "{err}");
    }
}
