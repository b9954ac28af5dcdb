//! Ethernet II frames and one 802.1Q / 802.1ad tag.

use super::{Field, WireError, get16};

/// EtherTypes the pipeline tells apart.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// An 802.1Q VLAN tag follows.
    pub const VLAN: u16 = 0x8100;
    /// An 802.1ad (QinQ) service tag follows.
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
}

mod field {
    use super::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    /// Tag control information of a VLAN tag (after the TPID at `ETHERTYPE`).
    pub const TCI: Field = 14..16;
    /// The EtherType after one VLAN tag.
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// The length of an untagged Ethernet header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// The length of an Ethernet header with one VLAN tag.
pub const TAGGED_HEADER_LEN: usize = field::INNER_ETHERTYPE.end;
/// The VLAN identifier's bits in the tag control information (below them the priority and
/// the drop-eligible bit).
pub const VID_MASK: u16 = 0x0fff;
/// The length of a MAC address.
pub const ADDR_LEN: usize = 6;

/// A typed view of an Ethernet frame over any buffer (smoltcp's `wire` style): accessors read
/// the buffer in place; setters exist only for mutable buffers.
///
/// ```
/// use dataplane::wire::ethernet::{EthernetFrame, ethertype};
/// let bytes = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45];
/// let frame = EthernetFrame::new_checked(&bytes[..])?;
/// assert_eq!(frame.ethertype(), ethertype::IPV4);
/// assert_eq!(frame.src_addr(), [2, 0, 0, 0, 0, 2]);
/// assert_eq!(frame.payload(), &[0x45]);
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct EthernetFrame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view without any check; accessors may panic on a short buffer until
    /// [`check_len`](Self::check_len) succeeds. For emitting into a buffer already sized.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// A view of untrusted bytes: [`check_len`](Self::check_len) has succeeded, so no accessor
    /// can panic.
    ///
    /// # Errors
    /// [`WireError::Truncated`] when the buffer is shorter than the header (with its tag).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks the buffer holds the header, and the VLAN tag if the EtherType announces one.
    ///
    /// # Errors
    /// [`WireError::Truncated`].
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || (self.is_tagged() && len < TAGGED_HEADER_LEN) {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// The destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        mac
    }

    /// The source MAC address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        mac
    }

    /// The outer EtherType (the TPID for a tagged frame).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Whether the frame carries an 802.1Q or 802.1ad tag.
    #[inline]
    pub fn is_tagged(&self) -> bool {
        let buf = self.buffer.as_ref();
        buf.len() >= HEADER_LEN
            && matches!(
                get16(buf, field::ETHERTYPE),
                ethertype::VLAN | ethertype::QINQ
            )
    }

    /// The VLAN id (low 12 bits of the TCI) of a tagged frame.
    #[inline]
    pub fn vlan_id(&self) -> Option<u16> {
        self.is_tagged()
            .then(|| get16(self.buffer.as_ref(), field::TCI) & VID_MASK)
    }

    /// The whole tag control information (priority, DEI, VLAN id) of a tagged frame.
    #[inline]
    pub fn tci(&self) -> Option<u16> {
        self.is_tagged()
            .then(|| get16(self.buffer.as_ref(), field::TCI))
    }

    /// The EtherType of the payload: after the tag of a tagged frame.
    #[inline]
    pub fn inner_ethertype(&self) -> u16 {
        if self.is_tagged() {
            get16(self.buffer.as_ref(), field::INNER_ETHERTYPE)
        } else {
            self.ethertype()
        }
    }

    /// The header length: 14, or 18 with a tag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The payload after the header (and tag).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Writes the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }

    /// Writes the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }

    /// Writes the outer EtherType. Writing a TPID makes [`check_len`](Self::check_len) ask for
    /// the tag's four bytes too.
    #[inline]
    pub fn set_ethertype(&mut self, value: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&value.to_be_bytes());
    }

    /// Writes an 802.1Q tag with `tci` and the payload's EtherType `inner` after it (the
    /// buffer must hold [`TAGGED_HEADER_LEN`] bytes).
    ///
    /// ```
    /// use dataplane::wire::ethernet::{EthernetFrame, TAGGED_HEADER_LEN, ethertype};
    /// let mut header = [0u8; TAGGED_HEADER_LEN];
    /// EthernetFrame::new_unchecked(&mut header[..]).set_vlan_tag(0x2005, ethertype::IPV4);
    /// let frame = EthernetFrame::new_unchecked(&header[..]);
    /// assert_eq!((frame.tci(), frame.vlan_id()), (Some(0x2005), Some(5)));
    /// assert_eq!(frame.inner_ethertype(), ethertype::IPV4);
    /// ```
    #[inline]
    pub fn set_vlan_tag(&mut self, tci: u16, inner: u16) {
        self.set_ethertype(ethertype::VLAN);
        let buf = self.buffer.as_mut();
        buf[field::TCI].copy_from_slice(&tci.to_be_bytes());
        buf[field::INNER_ETHERTYPE].copy_from_slice(&inner.to_be_bytes());
    }
}

/// An Ethernet II header as a value, in the manner of smoltcp's `EthernetRepr`: the addresses,
/// the EtherType of the payload and, for a tagged frame, the 802.1Q tag control information.
/// [`parse`](Self::parse) reads a checked view; [`emit`](Self::emit) writes the header (tagged
/// with an 802.1Q TPID when `tci` is set) into a view over at least
/// [`header_len`](Self::header_len) bytes.
///
/// ```
/// use dataplane::wire::ethernet::{EthernetFrame, EthernetRepr, TAGGED_HEADER_LEN, ethertype};
/// let repr = EthernetRepr {
///     dst: [2, 0, 0, 0, 0, 1],
///     src: [2, 0, 0, 0, 0, 2],
///     ethertype: ethertype::IPV6,
///     tci: Some(100),
/// };
/// let mut bytes = [0u8; TAGGED_HEADER_LEN];
/// repr.emit(&mut EthernetFrame::new_unchecked(&mut bytes[..]));
/// let frame = EthernetFrame::new_checked(&bytes[..])?;
/// assert_eq!((frame.vlan_id(), frame.header_len()), (Some(100), repr.header_len()));
/// assert_eq!(EthernetRepr::parse(&frame)?, repr);
/// # Ok::<(), dataplane::wire::WireError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// The destination MAC address.
    pub dst: [u8; ADDR_LEN],
    /// The source MAC address.
    pub src: [u8; ADDR_LEN],
    /// The payload's EtherType (behind the tag, if tagged).
    pub ethertype: u16,
    /// The tag control information (priority, drop-eligible bit, VLAN id) of a tagged frame.
    pub tci: Option<u16>,
}

impl EthernetRepr {
    /// The fields of a view.
    ///
    /// # Errors
    /// As [`EthernetFrame::check_len`].
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr, WireError> {
        frame.check_len()?;
        Ok(EthernetRepr {
            dst: frame.dst_addr(),
            src: frame.src_addr(),
            ethertype: frame.inner_ethertype(),
            tci: frame.tci(),
        })
    }

    /// The length of the header it emits.
    #[inline]
    pub const fn header_len(&self) -> usize {
        if self.tci.is_some() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into the first [`header_len`](Self::header_len) bytes of `frame`.
    ///
    /// # Panics
    /// If the buffer is shorter than the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        match self.tci {
            Some(tci) => frame.set_vlan_tag(tci, self.ethertype),
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAGGED: [u8; 19] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x81, 0x00, 0x20, 0x64, 0x86, 0xdd,
        0x60,
    ];

    #[test]
    fn test_parse_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert!(f.is_tagged());
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(f.inner_ethertype(), ethertype::IPV6);
        assert_eq!(f.payload(), &[0x60]);
        assert_eq!(f.dst_addr(), [0xff; 6]);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..13]).unwrap_err(),
            WireError::Truncated
        );
        // The TPID is there but not the tag.
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..16]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn test_emit() {
        let mut buf = [0u8; 14];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst_addr([1, 2, 3, 4, 5, 6]);
        f.set_src_addr([7, 8, 9, 10, 11, 12]);
        f.set_ethertype(ethertype::ARP);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 8, 6]);
    }
}
