//! The kernel's multipath hash policy and the one flow hash that picks a multipath route's
//! member, for the pipeline and for `route get` alike.
//!
//! The kernel hashes the fields its policy names (`net.ipv4.fib_multipath_hash_policy` and
//! `net.ipv6.fib_multipath_hash_policy`, 0 to 3, with `fib_multipath_hash_fields` for 3) with
//! a secret: a random key chosen at boot unless `net.ipv4.fib_multipath_hash_seed` is set
//! (then siphash over the kernel's internal `struct flow_keys`), or the NIC's receive hash
//! when it carries an L4 one. Which member a flow takes is therefore not reproducible outside
//! the kernel; what a flow *is* (the fields whose change may move it) is. xfwd follows that:
//! [`flow_hash`] hashes exactly the fields of the namespace's policy, so the flows the kernel
//! keeps together stay together and those it spreads are spread, with xfwd's own mixing.
//!
//! Where the policy names what xfwd does not hash (inner headers of encapsulated packets:
//! policy 2, or inner fields in policy 3), or a seed is set (an operator asking for the
//! kernel's deterministic choice, e.g. for consistency across routers), or IPv4's
//! `fib_multipath_use_neigh` is on ([`MultipathPolicy::with_use_neigh`]), the policy is
//! [`MultipathPolicy::Kernel`]: multipath routes are left to the kernel (fail closed).
//!
//! ```
//! use fib_trie::multipath::{HashFields, HashKeys, MultipathPolicy, flow_hash};
//!
//! // IPv4 policy 0: addresses only; the ports do not move a flow.
//! let MultipathPolicy::Fields(l3) = MultipathPolicy::from_sysctl(false, 0, 0, 0) else { panic!() };
//! let a = HashKeys { src: 1, dst: 2, proto: 6, sport: 1000, dport: 80, flowlabel: 0 };
//! assert_eq!(flow_hash(l3, &a), flow_hash(l3, &HashKeys { sport: 1001, ..a }));
//! // Policy 1: the 5-tuple.
//! let MultipathPolicy::Fields(l4) = MultipathPolicy::from_sysctl(false, 1, 0, 0) else { panic!() };
//! assert!(l4.contains(HashFields::SRC_PORT));
//! // A seed: the kernel's own choice is asked for.
//! assert!(matches!(MultipathPolicy::from_sysctl(false, 0, 0, 7), MultipathPolicy::Kernel(_)));
//! ```

/// The fields of a multipath hash (`FIB_MULTIPATH_HASH_FIELD_*`, the bits of
/// `fib_multipath_hash_fields`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashFields(pub u32);

impl HashFields {
    /// The source address.
    pub const SRC_IP: HashFields = HashFields(0x0001);
    /// The destination address.
    pub const DST_IP: HashFields = HashFields(0x0002);
    /// The upper-layer protocol.
    pub const IP_PROTO: HashFields = HashFields(0x0004);
    /// The IPv6 flow label.
    pub const FLOWLABEL: HashFields = HashFields(0x0008);
    /// The source port.
    pub const SRC_PORT: HashFields = HashFields(0x0010);
    /// The destination port.
    pub const DST_PORT: HashFields = HashFields(0x0020);
    /// Every inner (encapsulated) field: `INNER_SRC_IP` (0x40) to `INNER_DST_PORT` (0x800).
    pub const INNER: HashFields = HashFields(0x0fc0);
    /// The kernel's default `fib_multipath_hash_fields`: addresses and protocol.
    pub const DEFAULT: HashFields = HashFields(0x0007);
    /// Not a kernel field: the L3 policy's rule that an ICMP error is hashed by the header it
    /// quotes (so it follows the flow it is about: `ip_multipath_l3_keys`,
    /// `ip6_multipath_l3_keys`). Set by [`MultipathPolicy::from_sysctl`] for policy 0.
    pub const ICMP_ERROR_INNER: HashFields = HashFields(0x4000);

    /// Whether every field of `other` is in `self`.
    pub const fn contains(self, other: HashFields) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub const fn with(self, other: HashFields) -> HashFields {
        HashFields(self.0 | other.0)
    }
}

/// How a namespace's multipath routes choose their member, for one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultipathPolicy {
    /// By a hash of these (outer) fields: followed by xfwd.
    Fields(HashFields),
    /// Only the kernel can choose (the reason): multipath routes go to the kernel.
    Kernel(&'static str),
}

impl Default for MultipathPolicy {
    /// The kernel's default for IPv4 (policy 0: the addresses).
    fn default() -> Self {
        MultipathPolicy::from_sysctl(false, 0, HashFields::DEFAULT.0, 0)
    }
}

impl MultipathPolicy {
    /// The policy of the sysctls `fib_multipath_hash_policy` (`policy`) and
    /// `fib_multipath_hash_fields` (`fields`) of the family (`v6`), and
    /// `net.ipv4.fib_multipath_hash_seed` (`seed`, shared by both families; 0: random).
    pub fn from_sysctl(v6: bool, policy: u32, fields: u32, seed: u32) -> Self {
        if seed != 0 {
            return MultipathPolicy::Kernel("fib_multipath_hash_seed set");
        }
        let l3 = HashFields::SRC_IP.with(HashFields::DST_IP);
        match policy {
            // IPv6's L3 hash includes the flow label and the next header
            // (`rt6_multipath_hash`); IPv4's the addresses only (`fib_multipath_hash`).
            // Both hash an ICMP error by the header it quotes.
            0 if v6 => MultipathPolicy::Fields(
                l3.with(HashFields::FLOWLABEL)
                    .with(HashFields::IP_PROTO)
                    .with(HashFields::ICMP_ERROR_INNER),
            ),
            0 => MultipathPolicy::Fields(l3.with(HashFields::ICMP_ERROR_INNER)),
            1 => MultipathPolicy::Fields(
                l3.with(HashFields::IP_PROTO)
                    .with(HashFields::SRC_PORT)
                    .with(HashFields::DST_PORT),
            ),
            2 => MultipathPolicy::Kernel("fib_multipath_hash_policy 2 (inner headers)"),
            3 if fields & HashFields::INNER.0 != 0 => {
                MultipathPolicy::Kernel("fib_multipath_hash_fields with inner fields")
            }
            3 => MultipathPolicy::Fields(HashFields(fields & 0x3f)),
            _ => MultipathPolicy::Kernel("unknown fib_multipath_hash_policy"),
        }
    }

    /// The policy with IPv4's `net.ipv4.fib_multipath_use_neigh` (`on`): the kernel then
    /// passes over multipath members whose neighbour is not valid (`fib_good_nh`), which xfwd
    /// does not reproduce for legacy multipath routes, so they go to the kernel.
    ///
    /// ```
    /// use fib_trie::multipath::MultipathPolicy;
    /// let p = MultipathPolicy::from_sysctl(false, 0, 7, 0);
    /// assert_eq!(p.with_use_neigh(false), p);
    /// assert!(matches!(p.with_use_neigh(true), MultipathPolicy::Kernel(_)));
    /// ```
    pub fn with_use_neigh(self, on: bool) -> Self {
        match self {
            MultipathPolicy::Fields(_) if on => MultipathPolicy::Kernel(USE_NEIGH),
            other => other,
        }
    }

    /// A word for an atomic (bit 31: [`MultipathPolicy::Kernel`]).
    pub(crate) fn encode(self) -> u32 {
        match self {
            MultipathPolicy::Fields(f) => f.0 & (0x3f | HashFields::ICMP_ERROR_INNER.0),
            MultipathPolicy::Kernel(reason) => {
                let code = KERNEL_REASONS
                    .iter()
                    .position(|r| *r == reason)
                    .unwrap_or(0);
                KERNEL_BIT | code as u32
            }
        }
    }

    /// The inverse of [`MultipathPolicy::encode`].
    pub(crate) fn decode(word: u32) -> Self {
        if word & KERNEL_BIT == 0 {
            MultipathPolicy::Fields(HashFields(word))
        } else {
            MultipathPolicy::Kernel(
                KERNEL_REASONS
                    .get((word & !KERNEL_BIT) as usize)
                    .copied()
                    .unwrap_or("kernel"),
            )
        }
    }
}

const KERNEL_BIT: u32 = 1 << 31;
const KERNEL_REASONS: [&str; 5] = [
    "fib_multipath_hash_seed set",
    "fib_multipath_hash_policy 2 (inner headers)",
    "fib_multipath_hash_fields with inner fields",
    "unknown fib_multipath_hash_policy",
    USE_NEIGH,
];

/// The reason of [`MultipathPolicy::with_use_neigh`].
const USE_NEIGH: &str = "fib_multipath_use_neigh set";

/// What a multipath hash may read of a packet (an IPv4 address in the low 32 bits); the
/// ports are 0 for fragments and protocols without ports, as the kernel's flow dissector
/// leaves them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HashKeys {
    /// The source address.
    pub src: u128,
    /// The destination address.
    pub dst: u128,
    /// The upper-layer protocol.
    pub proto: u8,
    /// The source port.
    pub sport: u16,
    /// The destination port.
    pub dport: u16,
    /// The IPv6 flow label (20 bits).
    pub flowlabel: u32,
}

/// The flow hash of `keys` over `fields` (the others ignored): the one function that picks
/// a multipath member in the pipeline and in `route get`.
#[inline]
pub fn flow_hash(fields: HashFields, keys: &HashKeys) -> u32 {
    let pick = |f: HashFields, v: u128| if fields.contains(f) { v } else { 0 };
    let src = pick(HashFields::SRC_IP, keys.src);
    let dst = pick(HashFields::DST_IP, keys.dst);
    let l4 = pick(HashFields::IP_PROTO, u128::from(keys.proto))
        | pick(HashFields::SRC_PORT, u128::from(keys.sport)) << 8
        | pick(HashFields::DST_PORT, u128::from(keys.dport)) << 24
        | pick(HashFields::FLOWLABEL, u128::from(keys.flowlabel & 0xf_ffff)) << 40;
    let x = (src as u64)
        ^ ((src >> 64) as u64).rotate_left(17)
        ^ (dst as u64).rotate_left(29)
        ^ ((dst >> 64) as u64).rotate_left(43)
        ^ (l4 as u64).rotate_left(53);
    let x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctls_as_the_kernel_reads_them() {
        assert_eq!(
            MultipathPolicy::from_sysctl(false, 0, 7, 0),
            MultipathPolicy::Fields(HashFields(0x4003))
        );
        assert_eq!(
            MultipathPolicy::from_sysctl(true, 0, 7, 0),
            MultipathPolicy::Fields(HashFields(0x400f))
        );
        let p = MultipathPolicy::from_sysctl(true, 0, 7, 0);
        assert_eq!(MultipathPolicy::decode(p.encode()), p);
        assert_eq!(
            MultipathPolicy::from_sysctl(true, 1, 7, 0),
            MultipathPolicy::Fields(HashFields(0x37))
        );
        assert_eq!(
            MultipathPolicy::from_sysctl(false, 3, 0x12, 0),
            MultipathPolicy::Fields(HashFields(0x12))
        );
        for (policy, fields, seed) in [(2, 7, 0), (3, 0x47, 0), (4, 7, 0), (1, 7, 9)] {
            let p = MultipathPolicy::from_sysctl(false, policy, fields, seed);
            assert!(matches!(p, MultipathPolicy::Kernel(_)), "{p:?}");
            assert_eq!(MultipathPolicy::decode(p.encode()), p);
        }
        let p = MultipathPolicy::from_sysctl(true, 1, 0, 0);
        assert_eq!(MultipathPolicy::decode(p.encode()), p);
    }

    #[test]
    fn only_the_named_fields_move_a_flow() {
        let k = HashKeys {
            src: 0x0a00_0001,
            dst: 0x0a00_0002,
            proto: 17,
            sport: 4000,
            dport: 53,
            flowlabel: 0x12345,
        };
        let variants = [
            (
                HashFields::SRC_IP,
                HashKeys {
                    src: 0x0a00_0003,
                    ..k
                },
            ),
            (
                HashFields::DST_IP,
                HashKeys {
                    dst: 0x0a00_0004,
                    ..k
                },
            ),
            (HashFields::IP_PROTO, HashKeys { proto: 6, ..k }),
            (HashFields::SRC_PORT, HashKeys { sport: 4001, ..k }),
            (HashFields::DST_PORT, HashKeys { dport: 54, ..k }),
            (HashFields::FLOWLABEL, HashKeys { flowlabel: 7, ..k }),
        ];
        for (field, changed) in variants {
            let with = HashFields(0x3f);
            let without = HashFields(0x3f & !field.0);
            assert_ne!(flow_hash(with, &k), flow_hash(with, &changed), "{field:?}");
            assert_eq!(
                flow_hash(without, &k),
                flow_hash(without, &changed),
                "{field:?}"
            );
        }
    }

    #[test]
    fn ports_spread_over_two_members() {
        // Under L4 hashing, the flows between one pair of hosts use both halves of the range.
        let l4 = HashFields(0x37);
        let upper = (0..64u16)
            .filter(|p| {
                let k = HashKeys {
                    src: 1,
                    dst: 2,
                    proto: 6,
                    sport: 1024 + p,
                    dport: 80,
                    flowlabel: 0,
                };
                flow_hash(l4, &k) >= 1 << 31
            })
            .count();
        assert!((16..=48).contains(&upper), "{upper} of 64");
    }
}
