//! Flows: destinations drawn from a prefix list, crossed with source and destination ports.
//!
//! A flow is one (destination address, source port, destination port) triple; its index in the
//! [`FlowSet`] is the flow id carried in every probe, so the receiver can count per flow.
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::GenError;

/// An IP prefix `ADDRESS/LENGTH`, IPv4 or IPv6 (host bits may be set; they are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The network address (host bits cleared).
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

impl Prefix {
    /// The `n`-th host address of the prefix (`network + 1 + n`), wrapping inside the prefix;
    /// a /32 or /128 always gives its own address.
    ///
    /// ```
    /// let p: pktgen::Prefix = "10.1.0.0/16".parse()?;
    /// assert_eq!(p.host(0).to_string(), "10.1.0.1");
    /// assert_eq!(p.host(65_535).to_string(), "10.1.0.0"); // wrapped
    /// # Ok::<(), pktgen::GenError>(())
    /// ```
    pub fn host(&self, n: u64) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let size = 1u64 << (32 - u32::from(self.len));
                let offset = (n + 1) % size;
                IpAddr::V4(Ipv4Addr::from(u32::from(a) | offset as u32))
            }
            IpAddr::V6(a) => {
                let host_bits = 128 - u32::from(self.len);
                let offset = if host_bits >= 64 {
                    u128::from(n) + 1
                } else {
                    (u128::from(n) + 1) % (1u128 << host_bits)
                };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) | offset))
            }
        }
    }
}

impl FromStr for Prefix {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, GenError> {
        let bad = || GenError::BadPrefix(s.to_owned());
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (
                a.parse::<IpAddr>().map_err(|_| bad())?,
                l.parse::<u8>().map_err(|_| bad())?,
            ),
            None => {
                let a = s.trim().parse::<IpAddr>().map_err(|_| bad())?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let addr = match addr {
            IpAddr::V4(a) if len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) if len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
            _ => return Err(bad()),
        };
        Ok(Prefix { addr, len })
    }
}

/// Reads a prefix list: one prefix per line; blank lines and text after `#` are ignored, and
/// only the first whitespace-separated field of a line counts (so `PREFIX ASN` lines work).
///
/// # Errors
/// [`GenError::BadPrefix`] for the first line that does not parse.
///
/// ```
/// let list = pktgen::flow::parse_prefix_list("# routes\n10.0.0.0/8 65000\n\n2001:db8::/32\n")?;
/// assert_eq!(list.len(), 2);
/// # Ok::<(), pktgen::GenError>(())
/// ```
pub fn parse_prefix_list(text: &str) -> Result<Vec<Prefix>, GenError> {
    text.lines()
        .filter_map(|line| line.split('#').next()?.split_whitespace().next())
        .map(str::parse)
        .collect()
}

/// `count` destination addresses spread evenly over `prefixes`: the i-th takes prefix
/// `i * len / count` when there are more prefixes than destinations, and cycles through the
/// prefixes (taking further host addresses on each round) when there are fewer.
///
/// ```
/// let prefixes = pktgen::flow::parse_prefix_list("10.0.0.0/24\n10.0.1.0/24\n")?;
/// let d = pktgen::flow::destinations(&prefixes, 3);
/// assert_eq!(d.iter().map(|a| a.to_string()).collect::<Vec<_>>(), ["10.0.0.1", "10.0.1.1", "10.0.0.2"]);
/// # Ok::<(), pktgen::GenError>(())
/// ```
pub fn destinations(prefixes: &[Prefix], count: usize) -> Vec<IpAddr> {
    let n = prefixes.len();
    if n == 0 {
        return Vec::new();
    }
    (0..count)
        .map(|i| {
            if count <= n {
                prefixes[i * n / count].host(0)
            } else {
                prefixes[i % n].host((i / n) as u64)
            }
        })
        .collect()
}

/// An inclusive range of UDP ports, `PORT` or `FIRST-LAST`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (≥ `first`).
    pub last: u16,
}

impl PortRange {
    /// A range of one port.
    pub const fn single(port: u16) -> Self {
        PortRange {
            first: port,
            last: port,
        }
    }

    /// How many ports the range holds.
    pub fn len(&self) -> usize {
        usize::from(self.last - self.first) + 1
    }

    /// Always false: a range holds at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl FromStr for PortRange {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, GenError> {
        let bad = || GenError::BadPortRange(s.to_owned());
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (a.trim().parse(), b.trim().parse()),
            None => (s.trim().parse(), s.trim().parse()),
        };
        let (first, last) = (first.map_err(|_| bad())?, last.map_err(|_| bad())?);
        if first > last {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

/// One flow: what varies between the probes of different flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The destination address.
    pub dst: IpAddr,
    /// The UDP source port.
    pub src_port: u16,
    /// The UDP destination port.
    pub dst_port: u16,
}

/// Addresses that are the same for every flow: the two MACs and a source address per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Source MAC (the sending interface's).
    pub src_mac: [u8; 6],
    /// Destination MAC (the next hop's: the router's ingress interface).
    pub dst_mac: [u8; 6],
    /// IPv4 source address, needed when any destination is IPv4.
    pub src_v4: Option<Ipv4Addr>,
    /// IPv6 source address, needed when any destination is IPv6.
    pub src_v6: Option<Ipv6Addr>,
}

/// The flows of a run: every destination crossed with every source and destination port; flow
/// ids are indexes, destination-major (flow `d * ports + p`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSet {
    endpoints: Endpoints,
    flows: Vec<Flow>,
}

impl FlowSet {
    /// Crosses `destinations` with the port ranges.
    ///
    /// # Errors
    /// [`GenError::NoDestinations`] for an empty list, [`GenError::MissingSource`] when a
    /// destination's family has no source address, [`GenError::TooManyFlows`] beyond 2^32 flows.
    pub fn new(
        endpoints: Endpoints,
        destinations: &[IpAddr],
        src_ports: PortRange,
        dst_ports: PortRange,
    ) -> Result<Self, GenError> {
        if destinations.is_empty() {
            return Err(GenError::NoDestinations);
        }
        let total = destinations.len() as u128 * src_ports.len() as u128 * dst_ports.len() as u128;
        if total > u128::from(u32::MAX) + 1 {
            return Err(GenError::TooManyFlows(total));
        }
        let mut flows = Vec::with_capacity(total as usize);
        for &dst in destinations {
            match dst {
                IpAddr::V4(_) if endpoints.src_v4.is_none() => {
                    return Err(GenError::MissingSource(dst, "IPv4"));
                }
                IpAddr::V6(_) if endpoints.src_v6.is_none() => {
                    return Err(GenError::MissingSource(dst, "IPv6"));
                }
                _ => {}
            }
            for src_port in src_ports.first..=src_ports.last {
                for dst_port in dst_ports.first..=dst_ports.last {
                    flows.push(Flow {
                        dst,
                        src_port,
                        dst_port,
                    });
                }
            }
        }
        Ok(FlowSet { endpoints, flows })
    }

    /// The shared addresses.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The flows, indexed by flow id.
    pub fn flows(&self) -> &[Flow] {
        &self.flows
    }

    /// The number of flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Always false: a flow set has at least one flow.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Whether any flow is IPv6 (which raises the smallest frame size).
    pub fn has_ipv6(&self) -> bool {
        self.flows.iter().any(|f| f.dst.is_ipv6())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_mask() {
        let p: Prefix = "10.1.2.3/16".parse().unwrap();
        assert_eq!(p.addr, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 0)));
        let p: Prefix = "2001:db8::1/32".parse().unwrap();
        assert_eq!(p.addr.to_string(), "2001:db8::");
        assert_eq!("0.0.0.0/0".parse::<Prefix>().unwrap().len, 0);
        assert_eq!("192.0.2.7".parse::<Prefix>().unwrap().len, 32);
        for bad in ["10.0.0.0/33", "2001:db8::/129", "x/8", "10.0.0.0/", ""] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_stay_inside_the_prefix() {
        let p: Prefix = "192.0.2.0/30".parse().unwrap();
        let hosts: Vec<String> = (0..5).map(|n| p.host(n).to_string()).collect();
        assert_eq!(
            hosts,
            [
                "192.0.2.1",
                "192.0.2.2",
                "192.0.2.3",
                "192.0.2.0",
                "192.0.2.1"
            ]
        );
        let p: Prefix = "192.0.2.9/32".parse().unwrap();
        assert_eq!(p.host(7).to_string(), "192.0.2.9");
        let p: Prefix = "2001:db8::/64".parse().unwrap();
        assert_eq!(p.host(1).to_string(), "2001:db8::2");
        let p: Prefix = "2001:db8::5/128".parse().unwrap();
        assert_eq!(p.host(1).to_string(), "2001:db8::5");
    }

    #[test]
    fn destinations_spread_over_the_list() {
        let list: Vec<Prefix> = (0..100)
            .map(|i| format!("10.{i}.0.0/16").parse().unwrap())
            .collect();
        let d = destinations(&list, 4);
        let d: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(d, ["10.0.0.1", "10.25.0.1", "10.50.0.1", "10.75.0.1"]);
        let d = destinations(&list, 250);
        assert_eq!(d.len(), 250);
        let unique: std::collections::HashSet<_> = d.iter().collect();
        assert_eq!(unique.len(), 250, "cycling takes new hosts");
        assert!(destinations(&[], 5).is_empty());
    }

    #[test]
    fn port_ranges() {
        assert_eq!("9".parse::<PortRange>().unwrap(), PortRange::single(9));
        let r: PortRange = "1000-1007".parse().unwrap();
        assert_eq!(r.len(), 8);
        for bad in ["7-6", "x", "1-", "70000"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn flow_sets_cross_destinations_and_ports() {
        let endpoints = Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_v4: Some(Ipv4Addr::new(198, 18, 0, 2)),
            src_v6: None,
        };
        let dsts: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        let set = FlowSet::new(
            endpoints,
            &dsts,
            "1-2".parse().unwrap(),
            "9-11".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(set.len(), 12);
        assert_eq!(
            set.flows()[7],
            Flow {
                dst: dsts[1],
                src_port: 1,
                dst_port: 10
            }
        );
        assert!(!set.has_ipv6());
        let v6: Vec<IpAddr> = vec!["2001:db8::1".parse().unwrap()];
        assert!(matches!(
            FlowSet::new(endpoints, &v6, PortRange::single(1), PortRange::single(2)),
            Err(GenError::MissingSource(_, "IPv6"))
        ));
        assert!(matches!(
            FlowSet::new(endpoints, &[], PortRange::single(1), PortRange::single(2)),
            Err(GenError::NoDestinations)
        ));
    }
}
