//! The MAD common header (IBTA Vol 1 13.4.2, table 151) and the 256-byte MAD.
//!
//! ```text
//! byte 0   BaseVersion      1  MgmtClass    2  ClassVersion   3  R | Method
//!      4   Status (16)                      6  ClassSpecific (16)
//!      8   TransactionID (64)
//!     16   AttributeID (16)                18  Reserved (16)
//!     20   AttributeModifier (32)
//!     24   data (232 bytes)
//! ```

use core::fmt;

use super::{CommonAttrId, InvalidField, Method, MgmtClass};
use super::{MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{Bits, Field};
use crate::{Error, Result};

/// Field locations, bytes from the start of the MAD.
pub mod fields {
    use super::{Bits, Field};
    pub const BASE_VERSION: Bits = Bits::new(0, 0, 8);
    pub const MGMT_CLASS: Bits = Bits::new(1, 0, 8);
    pub const CLASS_VERSION: Bits = Bits::new(2, 0, 8);
    /// The whole method byte, response bit included.
    pub const METHOD: Bits = Bits::new(3, 0, 8);
    pub const STATUS: Bits = Bits::new(4, 0, 16);
    pub const CLASS_SPECIFIC: Bits = Bits::new(6, 0, 16);
    pub const TID: Bits = Bits::new(8, 0, 64);
    pub const ATTR_ID: Bits = Bits::new(16, 0, 16);
    pub const RESERVED: Bits = Bits::new(18, 0, 16);
    pub const ATTR_MOD: Bits = Bits::new(20, 0, 32);
    /// The class data after the header.
    pub const DATA: Field = super::MAD_HEADER_LEN..super::MAD_LEN;
}

fixed_view! {
    /// A view of a MAD: the common header, and the data after it when the buffer holds a
    /// whole MAD. `new_checked` only requires the 24-byte header; [`Packet::data`] is
    /// whatever follows, up to 232 bytes.
    struct Packet(MAD_HEADER_LEN, "mad.header");
}

bit_accessors! {
    base_version / set_base_version: u8 = fields::BASE_VERSION;
    mgmt_class / set_mgmt_class: u8 = fields::MGMT_CLASS;
    class_version / set_class_version: u8 = fields::CLASS_VERSION;
    /// The method byte including the response bit.
    method / set_method: u8 = fields::METHOD;
    status / set_status: u16 = fields::STATUS;
    class_specific / set_class_specific: u16 = fields::CLASS_SPECIFIC;
    tid / set_tid: u64 = fields::TID;
    attr_id / set_attr_id: u16 = fields::ATTR_ID;
    reserved / set_reserved: u16 = fields::RESERVED;
    attr_mod / set_attr_mod: u32 = fields::ATTR_MOD;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The class data after the header (at most 232 bytes; shorter if the buffer is).
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len().min(fields::DATA.end);
        b.get(fields::DATA.start..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The class data after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let end = b.len().min(MAD_LEN);
        b.get_mut(MAD_HEADER_LEN..end).unwrap_or(&mut [])
    }
}

/// The 16-bit MAD status (IBTA 13.4.7, table 154). Bits are numbered from the least
/// significant: 0 busy, 1 redirect required, 2–4 invalid-field code, 5–7 reserved,
/// 8–14 class specific, 15 direction (directed-route SMPs only).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadStatus(pub u16);

impl MadStatus {
    pub const SUCCESS: MadStatus = MadStatus(0);
    pub const BUSY: u16 = 0x0001;
    pub const REDIRECT_REQUIRED: u16 = 0x0002;
    pub const INVALID_FIELD_MASK: u16 = 0x001c;
    pub const CLASS_SPECIFIC_MASK: u16 = 0x7f00;
    pub const DIRECTION: u16 = 0x8000;

    /// The responder is busy; the request may be retried.
    pub fn busy(&self) -> bool {
        self.0 & Self::BUSY != 0
    }

    /// The requester must redirect (ClassPortInfo in the response says where).
    pub fn redirect_required(&self) -> bool {
        self.0 & Self::REDIRECT_REQUIRED != 0
    }

    /// The invalid-field code (bits 2–4).
    pub fn invalid_field(&self) -> InvalidField {
        InvalidField(((self.0 & Self::INVALID_FIELD_MASK) >> 2) as u8)
    }

    /// The class-specific bits 8–14, shifted down.
    pub fn class_specific(&self) -> u8 {
        ((self.0 & Self::CLASS_SPECIFIC_MASK) >> 8) as u8
    }

    /// The D bit of directed-route SMPs (reserved in every other class).
    pub fn direction(&self) -> bool {
        self.0 & Self::DIRECTION != 0
    }

    /// A status with the given invalid-field code and nothing else.
    pub fn with_invalid_field(code: InvalidField) -> MadStatus {
        MadStatus((u16::from(code.0) << 2) & Self::INVALID_FIELD_MASK)
    }
}

impl fmt::Debug for MadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MadStatus({:#06x})", self.0)
    }
}

impl fmt::Display for MadStatus {
    /// "Success", or the meaning of each bit that is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("Success");
        }
        let mut parts: Vec<String> = Vec::new();
        if self.busy() {
            parts.push("Busy".into());
        }
        if self.redirect_required() {
            parts.push("Redirect required".into());
        }
        if self.invalid_field() != InvalidField::NONE {
            parts.push(self.invalid_field().to_string());
        }
        if self.0 & 0x00e0 != 0 {
            parts.push(format!("reserved bits {:#04x}", (self.0 & 0x00e0) >> 5));
        }
        if self.class_specific() != 0 {
            parts.push(format!("class specific {:#04x}", self.class_specific()));
        }
        if self.direction() {
            parts.push("Direction (D) set".into());
        }
        f.write_str(&parts.join(", "))
    }
}

/// The decoded common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub base_version: u8,
    pub mgmt_class: MgmtClass,
    pub class_version: u8,
    /// The method byte, response bit included.
    pub method: Method,
    pub status: MadStatus,
    pub class_specific: u16,
    pub tid: u64,
    /// The attribute ID; its meaning depends on the class (see `cm::AttrId` for CM).
    pub attr_id: u16,
    /// Reserved; kept so that re-emitting reproduces what was received.
    pub reserved: u16,
    /// The attribute modifier. For CM messages it carries the ECE `attr_mod`.
    pub attr_mod: u32,
}

impl Repr {
    /// A CM `Send()` header (base version 1, class 0x07, class version 2) as the kernel sends
    /// every CM message.
    pub fn cm_send(attr_id: u16, tid: u64) -> Repr {
        Repr {
            base_version: super::BASE_VERSION,
            mgmt_class: MgmtClass::CM,
            class_version: crate::cm::CM_CLASS_VERSION,
            method: Method::SEND,
            status: MadStatus::SUCCESS,
            class_specific: 0,
            tid,
            attr_id,
            reserved: 0,
            attr_mod: 0,
        }
    }

    /// Reads the header from a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            base_version: p.base_version(),
            mgmt_class: MgmtClass(p.mgmt_class()),
            class_version: p.class_version(),
            method: Method(p.method()),
            status: MadStatus(p.status()),
            class_specific: p.class_specific(),
            tid: p.tid(),
            attr_id: p.attr_id(),
            reserved: p.reserved(),
            attr_mod: p.attr_mod(),
        }
    }

    /// Parses the first 24 bytes of `buf`. Any base version is accepted here (the MAD
    /// agent decides what to do with versions it does not speak).
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr::from_packet(&p))
    }

    /// Always 24.
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// Writes the header into `buf`, which must be exactly 24 bytes long.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), MAD_HEADER_LEN, "mad header: wrong buffer length");
        let mut p = Packet::new_unchecked(buf);
        self.emit_into(&mut p);
    }

    fn emit_into<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_base_version(self.base_version);
        p.set_mgmt_class(self.mgmt_class.0);
        p.set_class_version(self.class_version);
        p.set_method(self.method.0);
        p.set_status(self.status.0);
        p.set_class_specific(self.class_specific);
        p.set_tid(self.tid);
        p.set_attr_id(self.attr_id);
        p.set_reserved(self.reserved);
        p.set_attr_mod(self.attr_mod);
    }

    to_bytes!();

    /// The attribute's name for this header's class, if known.
    pub fn attr_name(&self) -> Option<&'static str> {
        if self.mgmt_class == MgmtClass::CM {
            if let Some(n) = crate::cm::AttrId(self.attr_id).description() {
                return Some(n);
            }
        }
        CommonAttrId(self.attr_id).description()
    }

    fn class_text(&self) -> String {
        match self.mgmt_class.description() {
            Some(d) => d.to_string(),
            None if self.mgmt_class.is_vendor() => "Vendor".to_string(),
            None => "Unknown".to_string(),
        }
    }

    fn dissect_fields(&self, t: &mut Tree) {
        t.hex("base_version", "Base Version", self.base_version, 2);
        t.code_hex(
            "mgmt_class",
            "Management Class",
            self.mgmt_class.0,
            2,
            self.class_text(),
        );
        t.hex("class_version", "Class Version", self.class_version, 2);
        t.code_hex("method", "Method", self.method.0, 2, self.method);
        t.hex("status", "Status", self.status.0, 4);
        if self.status.0 != 0 {
            t.text("status_text", "Status Meaning", self.status.to_string());
        }
        t.hex("class_specific", "Class Specific", self.class_specific, 4);
        t.hex("tid", "Transaction ID", self.tid, 16);
        match self.attr_name() {
            Some(n) => t.code_hex("attr_id", "Attribute ID", self.attr_id, 4, n),
            None => t.hex("attr_id", "Attribute ID", self.attr_id, 4),
        }
        t.bytes("reserved", "Reserved", &self.reserved.to_be_bytes());
        t.hex("attr_mod", "Attribute Modifier", self.attr_mod, 8);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("mad", "MAD Header - Common Management Datagram", |t| {
            self.dissect_fields(t)
        });
    }
}

/// A whole 256-byte MAD: the common header and the 232 bytes of class data, uninterpreted.
/// The class layer (e.g. [`crate::cm::CmMessage::parse`]) reads the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mad {
    pub header: Repr,
    pub data: [u8; MAD_DATA_LEN],
}

impl Mad {
    /// A MAD with the given header and data (shorter data is zero-padded, longer is cut).
    pub fn new(header: Repr, data: &[u8]) -> Mad {
        Mad {
            header,
            data: crate::cm::pad(data),
        }
    }

    /// Parses a MAD. `buf` must hold at least 256 bytes; bytes after the 256th are not part
    /// of the MAD and are ignored (a UD payload carries exactly one MAD).
    pub fn parse(buf: &[u8]) -> Result<Mad> {
        let p = Packet::new_checked(buf)?;
        Error::check_len("mad", MAD_LEN, buf.len())?;
        let header = Repr::from_packet(&p);
        let mut data = [0u8; MAD_DATA_LEN];
        data.copy_from_slice(p.data());
        Ok(Mad { header, data })
    }

    /// Always 256.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the MAD into `buf`, which must be exactly 256 bytes long.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), MAD_LEN, "mad: wrong buffer length");
        let mut p = Packet::new_unchecked(&mut *buf);
        self.header.emit_into(&mut p);
        p.data_mut().copy_from_slice(&self.data);
    }

    to_bytes!();
}

impl Dissect for Mad {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("mad", "MAD Header - Common Management Datagram", |t| {
            self.header.dissect_fields(t);
            t.bytes("data", "MAD Data Payload", &self.data);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Repr {
            base_version: 1,
            mgmt_class: MgmtClass::SUBN_ADM,
            class_version: 2,
            method: Method::GET.response(),
            status: MadStatus(0x001d),
            class_specific: 0xbeef,
            tid: 0x0102_0304_0506_0708,
            attr_id: 0x0001,
            reserved: 0x1234,
            attr_mod: 0xdead_beef,
        };
        let b = h.to_bytes();
        assert_eq!(
            b,
            [
                1, 3, 2, 0x81, 0x00, 0x1d, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0x12, 0x34,
                0xde, 0xad, 0xbe, 0xef
            ]
        );
        assert_eq!(Repr::parse(&b), Ok(h));
        assert!(h.method.is_response());
        assert_eq!(h.method, Method::GET_RESP);
        assert!(h.status.busy());
        assert!(!h.status.redirect_required());
        assert_eq!(h.status.invalid_field(), InvalidField::INVALID_ATTR_VALUE);
        assert_eq!(h.attr_name(), Some("ClassPortInfo"));
    }

    #[test]
    fn status_bits() {
        assert_eq!(MadStatus::SUCCESS.to_string(), "Success");
        let s = MadStatus::with_invalid_field(InvalidField::METHOD_ATTR_NOT_SUPPORTED);
        assert_eq!(s.0, 0x000c); // Linux IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB
        assert_eq!(
            MadStatus::with_invalid_field(InvalidField::BAD_VERSION).0,
            0x0004
        );
        assert_eq!(
            MadStatus::with_invalid_field(InvalidField::INVALID_ATTR_VALUE).0,
            0x001c
        );
        let s = MadStatus(0x8302);
        assert!(s.direction());
        assert!(s.redirect_required());
        assert_eq!(s.class_specific(), 3);
        assert_eq!(
            s.to_string(),
            "Redirect required, class specific 0x03, Direction (D) set"
        );
    }

    #[test]
    fn method_names_match_tshark() {
        let h = Repr::cm_send(0x0010, 0x0000_0002_f04d_670d);
        let t = h.to_tree();
        assert_eq!(
            t.find("mad.method").map(|n| n.display.as_str()),
            Some("Send() (0x03)")
        );
        assert_eq!(t.uint("mad.tid"), Some(0x0000_0002_f04d_670d));
        assert_eq!(Method(0x42).to_string(), "Unknown (0x42)");
        assert!(MgmtClass(0x0a).is_vendor());
        assert!(MgmtClass(0x31).is_vendor());
        assert!(!MgmtClass::CM.is_vendor());
    }

    #[test]
    fn mad_truncated_and_round_trip() {
        let mut b = vec![0u8; MAD_LEN];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        let m = Mad::parse(&b).expect("whole MAD");
        assert_eq!(m.to_bytes(), b);
        for n in 0..MAD_LEN {
            assert!(Mad::parse(&b[..n]).is_err(), "len {n}");
        }
        for n in 0..MAD_HEADER_LEN {
            assert!(Repr::parse(&b[..n]).is_err());
        }
        // Trailing bytes are not part of the MAD.
        let mut longer = b.clone();
        longer.extend_from_slice(&[0xaa; 4]);
        assert_eq!(Mad::parse(&longer), Ok(m));
        let p = Packet::new_checked(&b[..30]).expect("header");
        assert_eq!(p.data().len(), 6);
    }
}
