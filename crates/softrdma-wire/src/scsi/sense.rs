//! Sense data (SPC-4 §4.5): fixed format (response codes 0x70 current / 0x71 deferred) and
//! descriptor format (0x72 / 0x73), the sense key and the ASC/ASCQ pair.
//!
//! A sense buffer is often longer than the sense data in it (LIO sends its 96-byte buffer,
//! of which the fixed-format data uses 8 + ADDITIONAL SENSE LENGTH = 18 bytes); `parse`
//! reads the sense data and ignores the padding after it.

use crate::dissect::{Dissect, Tree};
use crate::field::{read_u32, write_u32};
use crate::{Error, Result};

code_point! {
    /// SENSE KEY (SPC-4 table 54).
    pub struct SenseKey(u8) {
        NO_SENSE = 0x0 => "NO SENSE",
        RECOVERED_ERROR = 0x1 => "RECOVERED ERROR",
        NOT_READY = 0x2 => "NOT READY",
        MEDIUM_ERROR = 0x3 => "MEDIUM ERROR",
        HARDWARE_ERROR = 0x4 => "HARDWARE ERROR",
        ILLEGAL_REQUEST = 0x5 => "ILLEGAL REQUEST",
        UNIT_ATTENTION = 0x6 => "UNIT ATTENTION",
        DATA_PROTECT = 0x7 => "DATA PROTECT",
        BLANK_CHECK = 0x8 => "BLANK CHECK",
        VENDOR_SPECIFIC = 0x9 => "VENDOR SPECIFIC",
        COPY_ABORTED = 0xa => "COPY ABORTED",
        ABORTED_COMMAND = 0xb => "ABORTED COMMAND",
        VOLUME_OVERFLOW = 0xd => "VOLUME OVERFLOW",
        MISCOMPARE = 0xe => "MISCOMPARE",
        COMPLETED = 0xf => "COMPLETED",
    }
}

code_point! {
    /// ADDITIONAL SENSE CODE and QUALIFIER as one value, `asc << 8 | ascq` (SPC-4 table D.2;
    /// the ones LIO's `sense_info_table` uses).
    pub struct AscAscq(u16) {
        NO_ADDITIONAL_SENSE = 0x0000 => "NO ADDITIONAL SENSE INFORMATION",
        LUN_BECOMING_READY = 0x0401 => "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
        LUN_NOT_READY_INIT_REQUIRED = 0x0402 => "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
        LUN_NOT_READY_MANUAL_INTERVENTION = 0x0403 => "LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED",
        LUN_COMMUNICATION_FAILURE = 0x0800 => "LOGICAL UNIT COMMUNICATION FAILURE",
        WRITE_ERROR = 0x0c00 => "WRITE ERROR",
        INVALID_FIELD_IN_COMMAND_IU = 0x0e03 => "INVALID FIELD IN COMMAND INFORMATION UNIT",
        UNRECOVERED_READ_ERROR = 0x1100 => "UNRECOVERED READ ERROR",
        PARAMETER_LIST_LENGTH_ERROR = 0x1a00 => "PARAMETER LIST LENGTH ERROR",
        MISCOMPARE_DURING_VERIFY = 0x1d00 => "MISCOMPARE DURING VERIFY OPERATION",
        INVALID_COMMAND_OPERATION_CODE = 0x2000 => "INVALID COMMAND OPERATION CODE",
        LBA_OUT_OF_RANGE = 0x2100 => "LOGICAL BLOCK ADDRESS OUT OF RANGE",
        INVALID_FIELD_IN_CDB = 0x2400 => "INVALID FIELD IN CDB",
        LOGICAL_UNIT_NOT_SUPPORTED = 0x2500 => "LOGICAL UNIT NOT SUPPORTED",
        INVALID_FIELD_IN_PARAMETER_LIST = 0x2600 => "INVALID FIELD IN PARAMETER LIST",
        WRITE_PROTECTED = 0x2700 => "WRITE PROTECTED",
        MEDIUM_MAY_HAVE_CHANGED = 0x2800 => "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED",
        POWER_ON_RESET = 0x2900 => "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED",
        MODE_PARAMETERS_CHANGED = 0x2a01 => "MODE PARAMETERS CHANGED",
        CAPACITY_DATA_HAS_CHANGED = 0x2a09 => "CAPACITY DATA HAS CHANGED",
        COMMAND_SEQUENCE_ERROR = 0x2c00 => "COMMAND SEQUENCE ERROR",
        COMMANDS_CLEARED_BY_ANOTHER_INITIATOR = 0x2f00 => "COMMANDS CLEARED BY ANOTHER INITIATOR",
        MEDIUM_NOT_PRESENT = 0x3a00 => "MEDIUM NOT PRESENT",
        REPORTED_LUNS_DATA_HAS_CHANGED = 0x3f0e => "REPORTED LUNS DATA HAS CHANGED",
        INTERNAL_TARGET_FAILURE = 0x4400 => "INTERNAL TARGET FAILURE",
        SCSI_PARITY_ERROR = 0x4700 => "SCSI PARITY ERROR",
        DATA_PHASE_ERROR = 0x4b00 => "DATA PHASE ERROR",
        OVERLAPPED_COMMANDS_ATTEMPTED = 0x4e00 => "OVERLAPPED COMMANDS ATTEMPTED",
        SYSTEM_RESOURCE_FAILURE = 0x5500 => "SYSTEM RESOURCE FAILURE",
    }
}

impl AscAscq {
    pub fn new(asc: u8, ascq: u8) -> AscAscq {
        AscAscq(u16::from(asc) << 8 | u16::from(ascq))
    }
    pub fn asc(&self) -> u8 {
        (self.0 >> 8) as u8
    }
    pub fn ascq(&self) -> u8 {
        self.0 as u8
    }
}

/// Response code: current error, fixed format.
pub const RESPONSE_FIXED_CURRENT: u8 = 0x70;
/// Response code: deferred error, fixed format.
pub const RESPONSE_FIXED_DEFERRED: u8 = 0x71;
/// Response code: current error, descriptor format.
pub const RESPONSE_DESC_CURRENT: u8 = 0x72;
/// Response code: deferred error, descriptor format.
pub const RESPONSE_DESC_DEFERRED: u8 = 0x73;

/// Byte offsets of fixed-format sense data (SPC-4 table 50).
pub mod fixed_field {
    pub const RESPONSE_CODE: usize = 0;
    pub const SENSE_KEY: usize = 2;
    pub const INFORMATION: usize = 3;
    pub const ADDITIONAL_LEN: usize = 7;
    pub const COMMAND_SPECIFIC: usize = 8;
    pub const ASC: usize = 12;
    pub const ASCQ: usize = 13;
    pub const FRU: usize = 14;
    pub const SENSE_KEY_SPECIFIC: usize = 15;
    /// The 18 bytes every fixed-format sense data has (ADDITIONAL SENSE LENGTH 10).
    pub const LEN: usize = 18;
}

/// Fixed-format sense data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FixedSense {
    /// Response code 0x71 instead of 0x70.
    pub deferred: bool,
    /// VALID: the INFORMATION field is valid.
    pub valid: bool,
    pub filemark: bool,
    pub eom: bool,
    /// ILI: incorrect length indicator.
    pub ili: bool,
    pub sense_key: SenseKey,
    pub information: u32,
    pub command_specific: u32,
    pub asc_ascq: AscAscq,
    pub fru: u8,
    /// SKSV (bit 7 of byte 0) and the sense-key specific bytes.
    pub sense_key_specific: [u8; 3],
    /// Additional sense bytes after byte 17.
    pub additional: Vec<u8>,
}

/// Descriptor-format sense data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescriptorSense {
    pub deferred: bool,
    pub sense_key: SenseKey,
    pub asc_ascq: AscAscq,
    /// The sense data descriptors, raw (each: type, additional length, data).
    pub descriptors: Vec<u8>,
}

/// Sense data in either format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenseRepr {
    Fixed(FixedSense),
    Descriptor(DescriptorSense),
}

impl SenseRepr {
    /// The sense data ib_srpt/LIO send for a failed command: current, fixed format,
    /// 18 bytes.
    pub fn fixed(sense_key: SenseKey, asc_ascq: AscAscq) -> SenseRepr {
        SenseRepr::Fixed(FixedSense {
            sense_key,
            asc_ascq,
            ..FixedSense::default()
        })
    }

    pub fn parse(buf: &[u8]) -> Result<SenseRepr> {
        Error::check_len("scsi.sense", 8, buf.len())?;
        let add = usize::from(buf[7]);
        let total = 8 + add;
        let data = buf.get(..total).ok_or(Error::Truncated {
            what: "scsi.sense.additional",
            need: total,
            got: buf.len(),
        })?;
        match buf[0] & 0x7f {
            RESPONSE_FIXED_CURRENT | RESPONSE_FIXED_DEFERRED => {
                // Fixed format needs the ASC/ASCQ at least; shorter data (ADDITIONAL SENSE
                // LENGTH < 6) is malformed.
                Error::check_len("scsi.sense.fixed", 14, total)?;
                let mut sks = [0u8; 3];
                let mut fru = 0;
                if let Some(b) = data.get(fixed_field::FRU) {
                    fru = *b;
                }
                for (i, s) in sks.iter_mut().enumerate() {
                    if let Some(b) = data.get(fixed_field::SENSE_KEY_SPECIFIC + i) {
                        *s = *b;
                    }
                }
                Ok(SenseRepr::Fixed(FixedSense {
                    deferred: buf[0] & 0x7f == RESPONSE_FIXED_DEFERRED,
                    valid: buf[0] & 0x80 != 0,
                    filemark: buf[2] & 0x80 != 0,
                    eom: buf[2] & 0x40 != 0,
                    ili: buf[2] & 0x20 != 0,
                    sense_key: SenseKey(buf[2] & 0x0f),
                    information: read_u32(buf, fixed_field::INFORMATION),
                    command_specific: read_u32(buf, fixed_field::COMMAND_SPECIFIC),
                    asc_ascq: AscAscq::new(buf[fixed_field::ASC], buf[fixed_field::ASCQ]),
                    fru,
                    sense_key_specific: sks,
                    additional: data.get(fixed_field::LEN..).unwrap_or(&[]).to_vec(),
                }))
            }
            RESPONSE_DESC_CURRENT | RESPONSE_DESC_DEFERRED => {
                Ok(SenseRepr::Descriptor(DescriptorSense {
                    deferred: buf[0] & 0x7f == RESPONSE_DESC_DEFERRED,
                    sense_key: SenseKey(buf[1] & 0x0f),
                    asc_ascq: AscAscq::new(buf[2], buf[3]),
                    descriptors: data[8..].to_vec(),
                }))
            }
            other => Err(Error::BadValue {
                field: "scsi.sense.response_code",
                value: u64::from(other),
            }),
        }
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            SenseRepr::Fixed(f) => fixed_field::LEN + f.additional.len().min(255 - 10),
            SenseRepr::Descriptor(d) => 8 + d.descriptors.len().min(255),
        }
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.sense: emit buffer length"
        );
        buf.fill(0);
        let n = buf.len();
        match self {
            SenseRepr::Fixed(f) => {
                buf[0] = if f.deferred {
                    RESPONSE_FIXED_DEFERRED
                } else {
                    RESPONSE_FIXED_CURRENT
                } | if f.valid { 0x80 } else { 0 };
                buf[2] = (f.sense_key.0 & 0x0f)
                    | if f.filemark { 0x80 } else { 0 }
                    | if f.eom { 0x40 } else { 0 }
                    | if f.ili { 0x20 } else { 0 };
                write_u32(buf, fixed_field::INFORMATION, f.information);
                buf[7] = (n - 8) as u8;
                write_u32(buf, fixed_field::COMMAND_SPECIFIC, f.command_specific);
                buf[fixed_field::ASC] = f.asc_ascq.asc();
                buf[fixed_field::ASCQ] = f.asc_ascq.ascq();
                buf[fixed_field::FRU] = f.fru;
                buf[15..18].copy_from_slice(&f.sense_key_specific);
                buf[18..].copy_from_slice(&f.additional[..n - 18]);
            }
            SenseRepr::Descriptor(d) => {
                buf[0] = if d.deferred {
                    RESPONSE_DESC_DEFERRED
                } else {
                    RESPONSE_DESC_CURRENT
                };
                buf[1] = d.sense_key.0 & 0x0f;
                buf[2] = d.asc_ascq.asc();
                buf[3] = d.asc_ascq.ascq();
                buf[7] = (n - 8) as u8;
                buf[8..].copy_from_slice(&d.descriptors[..n - 8]);
            }
        }
    }

    to_bytes!();

    pub fn sense_key(&self) -> SenseKey {
        match self {
            SenseRepr::Fixed(f) => f.sense_key,
            SenseRepr::Descriptor(d) => d.sense_key,
        }
    }

    pub fn asc_ascq(&self) -> AscAscq {
        match self {
            SenseRepr::Fixed(f) => f.asc_ascq,
            SenseRepr::Descriptor(d) => d.asc_ascq,
        }
    }

    pub fn response_code(&self) -> u8 {
        match self {
            SenseRepr::Fixed(f) if f.deferred => RESPONSE_FIXED_DEFERRED,
            SenseRepr::Fixed(_) => RESPONSE_FIXED_CURRENT,
            SenseRepr::Descriptor(d) if d.deferred => RESPONSE_DESC_DEFERRED,
            SenseRepr::Descriptor(_) => RESPONSE_DESC_CURRENT,
        }
    }
}

impl Dissect for SenseRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("scsi_sense", "SCSI Sense Data", |t| {
            let rc = self.response_code();
            let fmt = match rc {
                RESPONSE_FIXED_CURRENT => "Current error, fixed format",
                RESPONSE_FIXED_DEFERRED => "Deferred error, fixed format",
                RESPONSE_DESC_CURRENT => "Current error, descriptor format",
                _ => "Deferred error, descriptor format",
            };
            t.code_hex("response_code", "Response Code", rc, 2, fmt);
            if let SenseRepr::Fixed(f) = self {
                t.flag("valid", "Valid", f.valid);
                t.flag("filemark", "Filemark", f.filemark);
                t.flag("eom", "EOM", f.eom);
                t.flag("ili", "ILI", f.ili);
            }
            let k = self.sense_key();
            t.code_hex("sense_key", "Sense Key", k.0, 1, k);
            if let SenseRepr::Fixed(f) = self {
                t.hex("information", "Information", f.information, 8);
                t.hex(
                    "command_specific",
                    "Command-Specific Information",
                    f.command_specific,
                    8,
                );
            }
            let a = self.asc_ascq();
            t.code_hex("asc_ascq", "Additional Sense Code+Qualifier", a.0, 4, a);
            match self {
                SenseRepr::Fixed(f) => {
                    t.hex("fru", "Field Replaceable Unit Code", f.fru, 2);
                    t.bytes(
                        "sense_key_specific",
                        "Sense-Key Specific",
                        &f.sense_key_specific,
                    );
                    if !f.additional.is_empty() {
                        t.bytes("additional", "Additional Sense Bytes", &f.additional);
                    }
                }
                SenseRepr::Descriptor(d) => {
                    t.bytes("descriptors", "Sense Descriptors", &d.descriptors)
                }
            }
        });
    }
}
