//! Device Management (DevMgt, management class 0x06) MADs: how an SRP initiator discovers
//! I/O controllers and their services (IBTA vol 1 §16.3; kernel
//! `drivers/infiniband/ulp/srpt/ib_dm_mad.h` and `srpt_mgmt_method_get` in `ib_srpt.c`).
//!
//! A DM MAD is the 24-byte common MAD header, 40 reserved bytes (where RMPP-using classes put
//! the 12-byte RMPP header and 28 class bytes; ib_srpt's `struct ib_dm_mad` names them
//! `rmpp_hdr` and `dm_hdr`, sends them back as it received them and never uses them), then
//! 192 bytes of attribute data. This module starts *after* the common MAD header: its views
//! cover the 232-byte MAD data, and the attribute ID / modifier come from the caller (who
//! read them from the header).
//!
//! The kernel sends no DM MADs on RoCE (ib_srpt only registers its DM agent where device
//! management is supported), so these layouts are tested against the kernel headers and the
//! IBTA tables rather than captures.

pub mod ioc_profile;
pub mod iou_info;
pub mod service_entries;

#[cfg(test)]
mod tests;

use crate::dissect::{Dissect, Tree};
use crate::field::{read_array, read_u16, read_u32};
use crate::{Error, Result};

pub use ioc_profile::{OpCapMask, Packet as IocProfilePacket, Repr as IocProfileRepr};
pub use iou_info::{ControllerSlot, Packet as IouInfoPacket, Repr as IouInfoRepr};
pub use service_entries::{
    Packet as ServiceEntriesPacket, Repr as ServiceEntriesRepr, ServiceEntriesModifier,
    ServiceEntry,
};

/// The management class of device management MADs.
pub const MGMT_CLASS_DEVICE_MGMT: u8 = 0x06;

code_point! {
    /// Device management attribute IDs (IBTA vol 1 table 279).
    pub struct DmAttributeId(u16) {
        CLASS_PORT_INFO = 0x0001 => "ClassPortInfo",
        NOTICE = 0x0002 => "Notice",
        IO_UNIT_INFO = 0x0010 => "IOUnitInfo",
        IO_CONTROLLER_PROFILE = 0x0011 => "IOControllerProfile",
        SERVICE_ENTRIES = 0x0012 => "ServiceEntries",
        DIAGNOSTIC_TIMEOUT = 0x0020 => "DiagnosticTimeout",
        PREPARE_TO_TEST = 0x0021 => "PrepareToTest",
        TEST_DEVICE_ONCE = 0x0022 => "TestDeviceOnce",
        TEST_DEVICE_LOOP = 0x0023 => "TestDeviceLoop",
        DIAG_CODE = 0x0024 => "DiagCode",
    }
}

code_point! {
    /// The MAD status values a DM agent answers with: the common ones (IBTA vol 1 table 115)
    /// and the class-specific ones (§16.3.1.1). ib_srpt uses UNSUP_METHOD,
    /// UNSUP_METHOD_ATTR, INVALID_FIELD and NO_IOC (its name for 0x0100).
    pub struct DmStatus(u16) {
        SUCCESS = 0x0000 => "Success",
        BUSY = 0x0001 => "Busy",
        REDIRECT = 0x0002 => "Redirection required",
        BAD_VERSION = 0x0004 => "Bad base or class version",
        UNSUP_METHOD = 0x0008 => "Method not supported",
        UNSUP_METHOD_ATTR = 0x000c => "Method/attribute combination not supported",
        INVALID_FIELD = 0x001c => "Invalid attribute or attribute modifier value",
        NO_IOC = 0x0100 => "IOC not responding / no IOC in that slot",
        NO_SERVICE_ENTRIES = 0x0200 => "No service entries in the requested range",
        GENERAL_FAILURE = 0x8000 => "IOC general failure",
    }
}

/// A NUL-terminated string field (IOControllerProfile's ID string, a ServiceEntry's name)
/// read the way C reads it: up to the first NUL, or the whole field if there is none.
pub(crate) fn nul_str(field: &[u8]) -> String {
    let n = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..n]).into_owned()
}

/// Fills a NUL-terminated string field from `s`, cut to leave at least one NUL (as the
/// target's `strcpy`/`snprintf` of a shorter string leaves it); the rest is zero.
pub(crate) fn set_nul_str(field: &mut [u8], s: &str) {
    field.fill(0);
    let n = s.len().min(field.len().saturating_sub(1));
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Byte offsets of the DM MAD data (after the 24-byte common MAD header).
pub mod field {
    /// The 40 reserved bytes (ib_srpt: `rmpp_hdr` (12) + `dm_hdr` (28)).
    pub const RESERVED: core::ops::Range<usize> = 0..40;
    /// The 192 bytes of attribute data (`IB_MGMT_DEVICE_DATA`).
    pub const DATA: core::ops::Range<usize> = 40..232;
    /// The MAD data length: 256 − 24.
    pub const LEN: usize = 232;
}

fixed_view! {
    /// A view of the DM MAD data (232 bytes).
    struct Packet(field::LEN, "dm");
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[field::RESERVED]
    }

    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn reserved_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::RESERVED]
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

/// A DM attribute's data, decoded according to the attribute ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    IoUnitInfo(IouInfoRepr),
    IocProfile(IocProfileRepr),
    ServiceEntries(ServiceEntriesRepr),
    /// DiagnosticTimeout: MaxDiagTime in milliseconds.
    DiagnosticTimeout(u32),
    /// DiagCode: the 16-bit diagnostic code (0 = operational) and vendor bytes after it.
    DiagCode(u16),
    /// Any other attribute — ClassPortInfo (decoded by `crate::mad`), PrepareToTest,
    /// TestDeviceOnce/Loop (no data), vendor attributes — as its 192 raw bytes.
    Raw {
        id: DmAttributeId,
        data: Box<[u8; 192]>,
    },
}

impl Attribute {
    /// Decodes the 192-byte attribute data of attribute `id`.
    pub fn parse(id: DmAttributeId, data: &[u8]) -> Result<Attribute> {
        Error::check_len("dm.data", 192, data.len())?;
        Ok(match id {
            DmAttributeId::IO_UNIT_INFO => Attribute::IoUnitInfo(IouInfoRepr::parse(data)?),
            DmAttributeId::IO_CONTROLLER_PROFILE => {
                Attribute::IocProfile(IocProfileRepr::parse(data)?)
            }
            DmAttributeId::SERVICE_ENTRIES => {
                Attribute::ServiceEntries(ServiceEntriesRepr::parse(data)?)
            }
            DmAttributeId::DIAGNOSTIC_TIMEOUT => Attribute::DiagnosticTimeout(read_u32(data, 0)),
            DmAttributeId::DIAG_CODE => Attribute::DiagCode(read_u16(data, 0)),
            _ => Attribute::Raw {
                id,
                data: Box::new(read_array(data, 0)),
            },
        })
    }

    pub fn id(&self) -> DmAttributeId {
        match self {
            Attribute::IoUnitInfo(_) => DmAttributeId::IO_UNIT_INFO,
            Attribute::IocProfile(_) => DmAttributeId::IO_CONTROLLER_PROFILE,
            Attribute::ServiceEntries(_) => DmAttributeId::SERVICE_ENTRIES,
            Attribute::DiagnosticTimeout(_) => DmAttributeId::DIAGNOSTIC_TIMEOUT,
            Attribute::DiagCode(_) => DmAttributeId::DIAG_CODE,
            Attribute::Raw { id, .. } => *id,
        }
    }

    /// Writes the attribute into the 192-byte data area; bytes it does not cover are zeroed.
    pub fn emit(&self, data: &mut [u8]) {
        assert_eq!(data.len(), 192, "dm.data: emit buffer length");
        data.fill(0);
        match self {
            Attribute::IoUnitInfo(r) => r.emit(&mut data[..iou_info::field::LEN]),
            Attribute::IocProfile(r) => r.emit(&mut data[..ioc_profile::field::LEN]),
            Attribute::ServiceEntries(r) => r.emit(data),
            Attribute::DiagnosticTimeout(t) => crate::field::write_u32(data, 0, *t),
            Attribute::DiagCode(c) => crate::field::write_u16(data, 0, *c),
            Attribute::Raw { data: d, .. } => data.copy_from_slice(&d[..]),
        }
    }
}

impl Dissect for Attribute {
    fn dissect(&self, t: &mut Tree) {
        match self {
            Attribute::IoUnitInfo(r) => r.dissect(t),
            Attribute::IocProfile(r) => r.dissect(t),
            Attribute::ServiceEntries(r) => r.dissect(t),
            Attribute::DiagnosticTimeout(v) => {
                t.subtree("dm_diag_timeout", "DiagnosticTimeout", |t| {
                    t.dec("max_diag_time", "MaxDiagTime (ms)", *v)
                })
            }
            Attribute::DiagCode(v) => t.subtree("dm_diag_code", "DiagCode", |t| {
                t.hex("diag_code", "DiagCode", *v, 4)
            }),
            Attribute::Raw { id, data } => t.subtree("dm_attribute", id.to_string(), |t| {
                t.bytes("data", "Attribute Data", &data[..])
            }),
        }
    }
}

/// The DM MAD data: reserved bytes plus a decoded attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// The 40 reserved bytes, kept so that a response can echo the request's (as ib_srpt's
    /// `memcpy` of the received MAD does).
    pub reserved: [u8; 40],
    pub attribute: Attribute,
}

impl Repr {
    /// Parses the 232-byte MAD data of a DM MAD with attribute ID `id` (from the header).
    pub fn parse(id: DmAttributeId, buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr {
            reserved: read_array(p.reserved(), 0),
            attribute: Attribute::parse(id, p.data())?,
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), field::LEN, "dm: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.reserved_mut().copy_from_slice(&self.reserved);
        self.attribute.emit(p.data_mut());
    }

    to_bytes!();
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("dm", "Device Management", |t| {
            t.bytes("reserved", "Reserved", &self.reserved);
            self.attribute.dissect(t);
        });
    }
}
