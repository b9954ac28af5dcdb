//! Address flags (`IFA_F_*`) and route scopes (`RT_SCOPE_*`), with their rtnetlink values.
#![forbid(unsafe_code)]

use std::fmt;

/// The flags of an interface address, as in rtnetlink's `IFA_FLAGS` (values from the uapi
/// header `if_addr.h`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IfaFlags(pub u32);

impl IfaFlags {
    /// No flag.
    pub const EMPTY: IfaFlags = IfaFlags(0);
    /// IPv4: another address of the same subnet on the interface is primary. Computed by the
    /// table on insertion, as the kernel does; a value passed in is ignored.
    pub const SECONDARY: IfaFlags = IfaFlags(0x01);
    /// IPv6: a temporary (privacy) address. Same bit as `SECONDARY`.
    pub const TEMPORARY: IfaFlags = IfaFlags(0x01);
    /// IPv6: no duplicate address detection.
    pub const NODAD: IfaFlags = IfaFlags(0x02);
    /// IPv6: optimistic DAD (usable while tentative).
    pub const OPTIMISTIC: IfaFlags = IfaFlags(0x04);
    /// IPv6: duplicate address detection failed.
    pub const DADFAILED: IfaFlags = IfaFlags(0x08);
    /// IPv6: a Mobile IPv6 home address.
    pub const HOMEADDRESS: IfaFlags = IfaFlags(0x10);
    /// The preferred lifetime has run out.
    pub const DEPRECATED: IfaFlags = IfaFlags(0x20);
    /// IPv6: duplicate address detection has not completed.
    pub const TENTATIVE: IfaFlags = IfaFlags(0x40);
    /// No lifetime: the address never expires.
    pub const PERMANENT: IfaFlags = IfaFlags(0x80);
    /// IPv6: the kernel manages temporary addresses from this one.
    pub const MANAGETEMPADDR: IfaFlags = IfaFlags(0x100);
    /// No prefix route for the address's subnet.
    pub const NOPREFIXROUTE: IfaFlags = IfaFlags(0x200);
    /// Multicast group auto-join.
    pub const MCAUTOJOIN: IfaFlags = IfaFlags(0x400);
    /// IPv6: a stable-privacy (RFC 7217) address.
    pub const STABLE_PRIVACY: IfaFlags = IfaFlags(0x800);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: IfaFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags with `other`'s set too.
    #[must_use]
    pub const fn with(self, other: IfaFlags) -> IfaFlags {
        IfaFlags(self.0 | other.0)
    }

    /// These flags with `other`'s cleared.
    #[must_use]
    pub const fn without(self, other: IfaFlags) -> IfaFlags {
        IfaFlags(self.0 & !other.0)
    }
}

impl fmt::Debug for IfaFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u32, &str); 12] = [
            (0x01, "secondary/temporary"),
            (0x02, "nodad"),
            (0x04, "optimistic"),
            (0x08, "dadfailed"),
            (0x10, "homeaddress"),
            (0x20, "deprecated"),
            (0x40, "tentative"),
            (0x80, "permanent"),
            (0x100, "managetempaddr"),
            (0x200, "noprefixroute"),
            (0x400, "mcautojoin"),
            (0x800, "stable-privacy"),
        ];
        let mut list = f.debug_set();
        for (bit, name) in NAMES {
            if self.0 & bit != 0 {
                list.entry(&format_args!("{name}"));
            }
        }
        let unknown = self.0 & !0xfff;
        if unknown != 0 {
            list.entry(&format_args!("{unknown:#x}"));
        }
        list.finish()
    }
}

/// A route scope (rtnetlink `RT_SCOPE_*`): how far an address is meaningful. Smaller is wider.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Scope(pub u8);

impl Scope {
    /// Anywhere (`RT_SCOPE_UNIVERSE`).
    pub const UNIVERSE: Scope = Scope(0);
    /// Inside the site (`RT_SCOPE_SITE`).
    pub const SITE: Scope = Scope(200);
    /// On the attached link (`RT_SCOPE_LINK`).
    pub const LINK: Scope = Scope(253);
    /// On this host (`RT_SCOPE_HOST`).
    pub const HOST: Scope = Scope(254);
    /// Nowhere (`RT_SCOPE_NOWHERE`).
    pub const NOWHERE: Scope = Scope(255);
}
