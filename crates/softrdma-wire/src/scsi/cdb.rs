//! Command descriptor blocks (SPC-4 §6, SBC-3 §5). Each CDB has a view over its bytes and a
//! `Repr`; [`Cdb`] picks the right one from the operation code. Reserved bits are emitted as
//! zero; the CONTROL byte is kept.

use super::{ScsiOpcode, ServiceActionIn16};
use crate::dissect::{Dissect, Tree};
use crate::{Error, Result};

fn check(buf: &[u8], need: usize, what: &'static str) -> Result<()> {
    Error::check_len(what, need, buf.len())
}

fn dissect_op(t: &mut Tree, op: ScsiOpcode) {
    t.code_hex("opcode", "Operation Code", op.0, 2, op);
}

// ---------------------------------------------------------------------------------------------
// 6-byte CDBs without parameters of note: TEST UNIT READY, REQUEST SENSE
// ---------------------------------------------------------------------------------------------

min_view!(
    /// A view of any 6-byte CDB (TEST UNIT READY, REQUEST SENSE, INQUIRY, MODE SENSE(6),
    /// READ(6), WRITE(6)).
    Cdb6Packet,
    6,
    "scsi.cdb6"
);

be_fields!(Cdb6Packet {
    opcode, set_opcode: u8 @ 0;
    byte1, set_byte1: u8 @ 1;
    byte2, set_byte2: u8 @ 2;
    byte3, set_byte3: u8 @ 3;
    byte4, set_byte4: u8 @ 4;
    control, set_control: u8 @ 5;
});

impl<T: AsRef<[u8]>> Cdb6Packet<T> {
    /// INQUIRY: ALLOCATION LENGTH (bytes 3–4).
    pub fn alloc_len16(&self) -> u16 {
        crate::field::read_u16(self.buffer.as_ref(), 3)
    }
    /// READ(6)/WRITE(6): the 21-bit LBA (byte 1 bits 4–0, bytes 2–3).
    pub fn lba21(&self) -> u32 {
        crate::field::read_u24(self.buffer.as_ref(), 1) & 0x1f_ffff
    }
}

/// REQUEST SENSE (0x03).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestSenseRepr {
    /// DESC: descriptor-format sense data wanted.
    pub desc: bool,
    pub alloc_len: u8,
    pub control: u8,
}

impl RequestSenseRepr {
    pub fn parse(buf: &[u8]) -> Result<RequestSenseRepr> {
        let p = Cdb6Packet::new_checked(buf)?;
        Ok(RequestSenseRepr {
            desc: p.byte1() & 1 != 0,
            alloc_len: p.byte4(),
            control: p.control(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        6
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 6, "scsi.request_sense: emit buffer length");
        buf.fill(0);
        let mut p = Cdb6Packet::new_unchecked(buf);
        p.set_opcode(ScsiOpcode::REQUEST_SENSE.0);
        p.set_byte1(u8::from(self.desc));
        p.set_byte4(self.alloc_len);
        p.set_control(self.control);
    }
}

// ---------------------------------------------------------------------------------------------
// INQUIRY (0x12)
// ---------------------------------------------------------------------------------------------

/// INQUIRY (SPC-4 §6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InquiryRepr {
    /// EVPD: return the vital product data page `page_code`.
    pub evpd: bool,
    pub page_code: u8,
    pub alloc_len: u16,
    pub control: u8,
}

impl InquiryRepr {
    pub fn parse(buf: &[u8]) -> Result<InquiryRepr> {
        let p = Cdb6Packet::new_checked(buf)?;
        Ok(InquiryRepr {
            evpd: p.byte1() & 1 != 0,
            page_code: p.byte2(),
            alloc_len: p.alloc_len16(),
            control: p.control(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        6
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 6, "scsi.inquiry: emit buffer length");
        buf.fill(0);
        buf[0] = ScsiOpcode::INQUIRY.0;
        buf[1] = u8::from(self.evpd);
        buf[2] = self.page_code;
        crate::field::write_u16(buf, 3, self.alloc_len);
        buf[5] = self.control;
    }
}

// ---------------------------------------------------------------------------------------------
// MODE SENSE(6) (0x1a) / MODE SENSE(10) (0x5a)
// ---------------------------------------------------------------------------------------------

min_view!(
    /// A view of any 10-byte CDB.
    Cdb10Packet,
    10,
    "scsi.cdb10"
);

be_fields!(Cdb10Packet {
    opcode, set_opcode: u8 @ 0;
    byte1, set_byte1: u8 @ 1;
    lba, set_lba: u32 @ 2;
    byte2, set_byte2: u8 @ 2;
    byte3, set_byte3: u8 @ 3;
    group, set_group: u8 @ 6;
    length, set_length: u16 @ 7;
    byte8, set_byte8: u8 @ 8;
    control, set_control: u8 @ 9;
});

code_point! {
    /// PC (page control) of MODE SENSE.
    pub struct PageControl(u8) {
        CURRENT = 0 => "Current values",
        CHANGEABLE = 1 => "Changeable values",
        DEFAULT = 2 => "Default values",
        SAVED = 3 => "Saved values",
    }
}

/// MODE SENSE(6) and MODE SENSE(10) (SPC-4 §6.11–6.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeSenseRepr {
    /// `true` for MODE SENSE(10).
    pub ten: bool,
    /// LLBAA (MODE SENSE(10) only).
    pub llbaa: bool,
    /// DBD: disable block descriptors.
    pub dbd: bool,
    pub pc: PageControl,
    pub page_code: u8,
    pub subpage_code: u8,
    /// ALLOCATION LENGTH (one byte in MODE SENSE(6)).
    pub alloc_len: u16,
    pub control: u8,
}

impl ModeSenseRepr {
    pub fn parse(buf: &[u8]) -> Result<ModeSenseRepr> {
        let op = ScsiOpcode(*buf.first().ok_or(Error::Truncated {
            what: "scsi.mode_sense",
            need: 1,
            got: 0,
        })?);
        let ten = op == ScsiOpcode::MODE_SENSE_10;
        if ten {
            let p = Cdb10Packet::new_checked(buf)?;
            Ok(ModeSenseRepr {
                ten,
                llbaa: p.byte1() & 0x10 != 0,
                dbd: p.byte1() & 0x08 != 0,
                pc: PageControl(p.byte2() >> 6),
                page_code: p.byte2() & 0x3f,
                subpage_code: p.byte3(),
                alloc_len: p.length(),
                control: p.control(),
            })
        } else {
            let p = Cdb6Packet::new_checked(buf)?;
            Ok(ModeSenseRepr {
                ten,
                llbaa: false,
                dbd: p.byte1() & 0x08 != 0,
                pc: PageControl(p.byte2() >> 6),
                page_code: p.byte2() & 0x3f,
                subpage_code: p.byte3(),
                alloc_len: u16::from(p.byte4()),
                control: p.control(),
            })
        }
    }
    pub fn buffer_len(&self) -> usize {
        if self.ten {
            10
        } else {
            6
        }
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.mode_sense: emit buffer length"
        );
        buf.fill(0);
        buf[1] = if self.dbd { 0x08 } else { 0 } | if self.ten && self.llbaa { 0x10 } else { 0 };
        buf[2] = (self.pc.0 << 6) | (self.page_code & 0x3f);
        buf[3] = self.subpage_code;
        if self.ten {
            buf[0] = ScsiOpcode::MODE_SENSE_10.0;
            crate::field::write_u16(buf, 7, self.alloc_len);
            buf[9] = self.control;
        } else {
            buf[0] = ScsiOpcode::MODE_SENSE_6.0;
            buf[4] = self.alloc_len as u8;
            buf[5] = self.control;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// READ CAPACITY(10) (0x25) / READ CAPACITY(16) (SERVICE ACTION IN(16) 0x9e/0x10)
// ---------------------------------------------------------------------------------------------

/// READ CAPACITY(10) (SBC-3 §5.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadCapacity10Repr {
    /// LOGICAL BLOCK ADDRESS (obsolete, with PMI).
    pub lba: u32,
    pub pmi: bool,
    pub control: u8,
}

impl ReadCapacity10Repr {
    pub fn parse(buf: &[u8]) -> Result<ReadCapacity10Repr> {
        let p = Cdb10Packet::new_checked(buf)?;
        Ok(ReadCapacity10Repr {
            lba: p.lba(),
            pmi: p.byte8() & 1 != 0,
            control: p.control(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        10
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 10, "scsi.read_capacity_10: emit buffer length");
        buf.fill(0);
        let mut p = Cdb10Packet::new_unchecked(buf);
        p.set_opcode(ScsiOpcode::READ_CAPACITY_10.0);
        p.set_lba(self.lba);
        p.set_byte8(u8::from(self.pmi));
        p.set_control(self.control);
    }
}

min_view!(
    /// A view of any 16-byte CDB.
    Cdb16Packet,
    16,
    "scsi.cdb16"
);

be_fields!(Cdb16Packet {
    opcode, set_opcode: u8 @ 0;
    byte1, set_byte1: u8 @ 1;
    lba, set_lba: u64 @ 2;
    length, set_length: u32 @ 10;
    byte14, set_byte14: u8 @ 14;
    control, set_control: u8 @ 15;
});

/// READ CAPACITY(16): SERVICE ACTION IN(16) with service action 0x10 (SBC-3 §5.16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadCapacity16Repr {
    pub lba: u64,
    pub alloc_len: u32,
    pub pmi: bool,
    pub control: u8,
}

impl ReadCapacity16Repr {
    pub fn parse(buf: &[u8]) -> Result<ReadCapacity16Repr> {
        let p = Cdb16Packet::new_checked(buf)?;
        Ok(ReadCapacity16Repr {
            lba: p.lba(),
            alloc_len: p.length(),
            pmi: p.byte14() & 1 != 0,
            control: p.control(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        16
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 16, "scsi.read_capacity_16: emit buffer length");
        buf.fill(0);
        let mut p = Cdb16Packet::new_unchecked(buf);
        p.set_opcode(ScsiOpcode::SERVICE_ACTION_IN_16.0);
        p.set_byte1(ServiceActionIn16::READ_CAPACITY_16.0);
        p.set_lba(self.lba);
        p.set_length(self.alloc_len);
        p.set_byte14(u8::from(self.pmi));
        p.set_control(self.control);
    }
}

// ---------------------------------------------------------------------------------------------
// READ / WRITE (6, 10, 12, 16)
// ---------------------------------------------------------------------------------------------

min_view!(
    /// A view of any 12-byte CDB (READ(12), WRITE(12), REPORT LUNS).
    Cdb12Packet,
    12,
    "scsi.cdb12"
);

be_fields!(Cdb12Packet {
    opcode, set_opcode: u8 @ 0;
    byte1, set_byte1: u8 @ 1;
    lba, set_lba: u32 @ 2;
    length, set_length: u32 @ 6;
    group, set_group: u8 @ 10;
    control, set_control: u8 @ 11;
});

/// Which READ or WRITE a [`ReadWriteRepr`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwKind {
    Read6,
    Read10,
    Read12,
    Read16,
    Write6,
    Write10,
    Write12,
    Write16,
}

impl RwKind {
    pub fn opcode(self) -> ScsiOpcode {
        match self {
            RwKind::Read6 => ScsiOpcode::READ_6,
            RwKind::Read10 => ScsiOpcode::READ_10,
            RwKind::Read12 => ScsiOpcode::READ_12,
            RwKind::Read16 => ScsiOpcode::READ_16,
            RwKind::Write6 => ScsiOpcode::WRITE_6,
            RwKind::Write10 => ScsiOpcode::WRITE_10,
            RwKind::Write12 => ScsiOpcode::WRITE_12,
            RwKind::Write16 => ScsiOpcode::WRITE_16,
        }
    }

    pub fn from_opcode(op: ScsiOpcode) -> Option<RwKind> {
        Some(match op {
            ScsiOpcode::READ_6 => RwKind::Read6,
            ScsiOpcode::READ_10 => RwKind::Read10,
            ScsiOpcode::READ_12 => RwKind::Read12,
            ScsiOpcode::READ_16 => RwKind::Read16,
            ScsiOpcode::WRITE_6 => RwKind::Write6,
            ScsiOpcode::WRITE_10 => RwKind::Write10,
            ScsiOpcode::WRITE_12 => RwKind::Write12,
            ScsiOpcode::WRITE_16 => RwKind::Write16,
            _ => return None,
        })
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            RwKind::Write6 | RwKind::Write10 | RwKind::Write12 | RwKind::Write16
        )
    }

    pub fn cdb_len(self) -> usize {
        match self {
            RwKind::Read6 | RwKind::Write6 => 6,
            RwKind::Read10 | RwKind::Write10 => 10,
            RwKind::Read12 | RwKind::Write12 => 12,
            RwKind::Read16 | RwKind::Write16 => 16,
        }
    }
}

/// READ(6/10/12/16) and WRITE(6/10/12/16) (SBC-3 §5.8–5.11, §5.32–5.35).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWriteRepr {
    pub kind: RwKind,
    pub lba: u64,
    /// TRANSFER LENGTH in blocks as on the wire (for the 6-byte forms 0 means 256; see
    /// [`ReadWriteRepr::blocks`]).
    pub transfer_len: u32,
    /// Byte 1 of the 10/12/16-byte forms: RDPROTECT/WRPROTECT (bits 7–5), DPO (bit 4), FUA
    /// (bit 3), FUA_NV (bit 1). Zero for the 6-byte forms.
    pub flags: u8,
    /// GROUP NUMBER (10/12/16-byte forms).
    pub group: u8,
    pub control: u8,
}

impl ReadWriteRepr {
    pub const DPO: u8 = 0x10;
    pub const FUA: u8 = 0x08;

    pub fn dpo(&self) -> bool {
        self.flags & Self::DPO != 0
    }
    pub fn fua(&self) -> bool {
        self.flags & Self::FUA != 0
    }
    /// RDPROTECT / WRPROTECT.
    pub fn protect(&self) -> u8 {
        self.flags >> 5
    }

    /// The number of blocks to transfer (READ(6)/WRITE(6): 0 means 256).
    pub fn blocks(&self) -> u32 {
        match self.kind {
            RwKind::Read6 | RwKind::Write6 if self.transfer_len == 0 => 256,
            _ => self.transfer_len,
        }
    }

    pub fn parse(buf: &[u8]) -> Result<ReadWriteRepr> {
        check(buf, 1, "scsi.read_write")?;
        let kind = RwKind::from_opcode(ScsiOpcode(buf[0])).ok_or(Error::BadValue {
            field: "scsi.read_write.opcode",
            value: u64::from(buf[0]),
        })?;
        Ok(match kind.cdb_len() {
            6 => {
                let p = Cdb6Packet::new_checked(buf)?;
                ReadWriteRepr {
                    kind,
                    lba: u64::from(p.lba21()),
                    transfer_len: u32::from(p.byte4()),
                    flags: 0,
                    group: 0,
                    control: p.control(),
                }
            }
            10 => {
                let p = Cdb10Packet::new_checked(buf)?;
                ReadWriteRepr {
                    kind,
                    lba: u64::from(p.lba()),
                    transfer_len: u32::from(p.length()),
                    flags: p.byte1(),
                    group: p.group() & 0x1f,
                    control: p.control(),
                }
            }
            12 => {
                let p = Cdb12Packet::new_checked(buf)?;
                ReadWriteRepr {
                    kind,
                    lba: u64::from(p.lba()),
                    transfer_len: p.length(),
                    flags: p.byte1(),
                    group: p.group() & 0x1f,
                    control: p.control(),
                }
            }
            _ => {
                let p = Cdb16Packet::new_checked(buf)?;
                ReadWriteRepr {
                    kind,
                    lba: p.lba(),
                    transfer_len: p.length(),
                    flags: p.byte1(),
                    group: p.byte14() & 0x1f,
                    control: p.control(),
                }
            }
        })
    }

    pub fn buffer_len(&self) -> usize {
        self.kind.cdb_len()
    }

    to_bytes!();

    /// Emits the CDB. Fields wider than the form allows are truncated (a 6-byte CDB carries
    /// a 21-bit LBA and an 8-bit length, a 10-byte one 32 and 16 bits, a 12-byte one 32 and
    /// 32 bits).
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.read_write: emit buffer length"
        );
        buf.fill(0);
        buf[0] = self.kind.opcode().0;
        match self.kind.cdb_len() {
            6 => {
                crate::field::write_u24(buf, 1, (self.lba as u32) & 0x1f_ffff);
                buf[4] = self.transfer_len as u8;
                buf[5] = self.control;
            }
            10 => {
                let mut p = Cdb10Packet::new_unchecked(buf);
                p.set_byte1(self.flags);
                p.set_lba(self.lba as u32);
                p.set_group(self.group & 0x1f);
                p.set_length(self.transfer_len as u16);
                p.set_control(self.control);
            }
            12 => {
                let mut p = Cdb12Packet::new_unchecked(buf);
                p.set_byte1(self.flags);
                p.set_lba(self.lba as u32);
                p.set_length(self.transfer_len);
                p.set_group(self.group & 0x1f);
                p.set_control(self.control);
            }
            _ => {
                let mut p = Cdb16Packet::new_unchecked(buf);
                p.set_byte1(self.flags);
                p.set_lba(self.lba);
                p.set_length(self.transfer_len);
                p.set_byte14(self.group & 0x1f);
                p.set_control(self.control);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SYNCHRONIZE CACHE (10, 16)
// ---------------------------------------------------------------------------------------------

/// SYNCHRONIZE CACHE(10) and (16) (SBC-3 §5.22–5.23).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncCacheRepr {
    /// `true` for SYNCHRONIZE CACHE(16).
    pub sixteen: bool,
    /// IMMED: return status before the cache is flushed.
    pub immed: bool,
    pub lba: u64,
    /// NUMBER OF LOGICAL BLOCKS (0: to the end of the medium).
    pub blocks: u32,
    pub group: u8,
    pub control: u8,
}

impl SyncCacheRepr {
    pub fn parse(buf: &[u8]) -> Result<SyncCacheRepr> {
        check(buf, 1, "scsi.synchronize_cache")?;
        if buf[0] == ScsiOpcode::SYNCHRONIZE_CACHE_16.0 {
            let p = Cdb16Packet::new_checked(buf)?;
            Ok(SyncCacheRepr {
                sixteen: true,
                immed: p.byte1() & 0x02 != 0,
                lba: p.lba(),
                blocks: p.length(),
                group: p.byte14() & 0x1f,
                control: p.control(),
            })
        } else {
            let p = Cdb10Packet::new_checked(buf)?;
            Ok(SyncCacheRepr {
                sixteen: false,
                immed: p.byte1() & 0x02 != 0,
                lba: u64::from(p.lba()),
                blocks: u32::from(p.length()),
                group: p.group() & 0x1f,
                control: p.control(),
            })
        }
    }
    pub fn buffer_len(&self) -> usize {
        if self.sixteen {
            16
        } else {
            10
        }
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.synchronize_cache: emit buffer length"
        );
        buf.fill(0);
        let b1 = if self.immed { 0x02 } else { 0 };
        if self.sixteen {
            let mut p = Cdb16Packet::new_unchecked(buf);
            p.set_opcode(ScsiOpcode::SYNCHRONIZE_CACHE_16.0);
            p.set_byte1(b1);
            p.set_lba(self.lba);
            p.set_length(self.blocks);
            p.set_byte14(self.group & 0x1f);
            p.set_control(self.control);
        } else {
            let mut p = Cdb10Packet::new_unchecked(buf);
            p.set_opcode(ScsiOpcode::SYNCHRONIZE_CACHE_10.0);
            p.set_byte1(b1);
            p.set_lba(self.lba as u32);
            p.set_group(self.group & 0x1f);
            p.set_length(self.blocks as u16);
            p.set_control(self.control);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// REPORT LUNS (0xa0, 12 bytes)
// ---------------------------------------------------------------------------------------------

/// REPORT LUNS (SPC-4 §6.33).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportLunsRepr {
    pub select_report: u8,
    pub alloc_len: u32,
    pub control: u8,
}

impl ReportLunsRepr {
    pub fn parse(buf: &[u8]) -> Result<ReportLunsRepr> {
        check(buf, 12, "scsi.report_luns")?;
        Ok(ReportLunsRepr {
            select_report: buf[2],
            alloc_len: crate::field::read_u32(buf, 6),
            control: buf[11],
        })
    }
    pub fn buffer_len(&self) -> usize {
        12
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 12, "scsi.report_luns: emit buffer length");
        buf.fill(0);
        buf[0] = ScsiOpcode::REPORT_LUNS.0;
        buf[2] = self.select_report;
        crate::field::write_u32(buf, 6, self.alloc_len);
        buf[11] = self.control;
    }
}

// ---------------------------------------------------------------------------------------------
// VERIFY (10, 16) and WRITE AND VERIFY (10, 16)
// ---------------------------------------------------------------------------------------------

/// Which VERIFY or WRITE AND VERIFY a [`VerifyRepr`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VerifyKind {
    #[default]
    Verify10,
    Verify16,
    WriteAndVerify10,
    WriteAndVerify16,
}

impl VerifyKind {
    pub fn opcode(self) -> ScsiOpcode {
        match self {
            VerifyKind::Verify10 => ScsiOpcode::VERIFY_10,
            VerifyKind::Verify16 => ScsiOpcode::VERIFY_16,
            VerifyKind::WriteAndVerify10 => ScsiOpcode::WRITE_AND_VERIFY_10,
            VerifyKind::WriteAndVerify16 => ScsiOpcode::WRITE_AND_VERIFY_16,
        }
    }

    pub fn from_opcode(op: ScsiOpcode) -> Option<VerifyKind> {
        Some(match op {
            ScsiOpcode::VERIFY_10 => VerifyKind::Verify10,
            ScsiOpcode::VERIFY_16 => VerifyKind::Verify16,
            ScsiOpcode::WRITE_AND_VERIFY_10 => VerifyKind::WriteAndVerify10,
            ScsiOpcode::WRITE_AND_VERIFY_16 => VerifyKind::WriteAndVerify16,
            _ => return None,
        })
    }

    /// WRITE AND VERIFY (data-out carries the blocks to write), as opposed to VERIFY.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            VerifyKind::WriteAndVerify10 | VerifyKind::WriteAndVerify16
        )
    }

    pub fn cdb_len(self) -> usize {
        match self {
            VerifyKind::Verify10 | VerifyKind::WriteAndVerify10 => 10,
            VerifyKind::Verify16 | VerifyKind::WriteAndVerify16 => 16,
        }
    }
}

/// VERIFY(10)/(16) and WRITE AND VERIFY(10)/(16) (SBC-4 §5.35–5.36, §5.42–5.43).
///
/// Byte 1 is VRPROTECT/WRPROTECT (bits 7–5), DPO (bit 4) and BYTCHK: two bits (2–1) in
/// VERIFY (00b no data-out, 01b compare every block, 11b one block compared against each),
/// one bit (1) in WRITE AND VERIFY, where bit 2 is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifyRepr {
    pub kind: VerifyKind,
    /// VRPROTECT (VERIFY) or WRPROTECT (WRITE AND VERIFY).
    pub protect: u8,
    pub dpo: bool,
    /// BYTCHK (0–3 for VERIFY, 0–1 for WRITE AND VERIFY).
    pub bytchk: u8,
    pub lba: u64,
    /// VERIFICATION LENGTH / TRANSFER LENGTH in blocks.
    pub blocks: u32,
    pub group: u8,
    pub control: u8,
}

impl VerifyRepr {
    fn bytchk_mask(kind: VerifyKind) -> u8 {
        if kind.is_write() {
            0x1
        } else {
            0x3
        }
    }

    pub fn parse(buf: &[u8]) -> Result<VerifyRepr> {
        check(buf, 1, "scsi.verify")?;
        let kind = VerifyKind::from_opcode(ScsiOpcode(buf[0])).ok_or(Error::BadValue {
            field: "scsi.verify.opcode",
            value: u64::from(buf[0]),
        })?;
        let (b1, lba, blocks, group, control) = if kind.cdb_len() == 10 {
            let p = Cdb10Packet::new_checked(buf)?;
            (
                p.byte1(),
                u64::from(p.lba()),
                u32::from(p.length()),
                p.group(),
                p.control(),
            )
        } else {
            let p = Cdb16Packet::new_checked(buf)?;
            (p.byte1(), p.lba(), p.length(), p.byte14(), p.control())
        };
        Ok(VerifyRepr {
            kind,
            protect: b1 >> 5,
            dpo: b1 & 0x10 != 0,
            bytchk: (b1 >> 1) & Self::bytchk_mask(kind),
            lba,
            blocks,
            group: group & 0x1f,
            control,
        })
    }

    pub fn buffer_len(&self) -> usize {
        self.kind.cdb_len()
    }

    /// Emits the CDB; a 10-byte form carries a 32-bit LBA and a 16-bit length.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.verify: emit buffer length"
        );
        buf.fill(0);
        let b1 = ((self.protect & 7) << 5)
            | if self.dpo { 0x10 } else { 0 }
            | ((self.bytchk & Self::bytchk_mask(self.kind)) << 1);
        if self.kind.cdb_len() == 10 {
            let mut p = Cdb10Packet::new_unchecked(buf);
            p.set_opcode(self.kind.opcode().0);
            p.set_byte1(b1);
            p.set_lba(self.lba as u32);
            p.set_group(self.group & 0x1f);
            p.set_length(self.blocks as u16);
            p.set_control(self.control);
        } else {
            let mut p = Cdb16Packet::new_unchecked(buf);
            p.set_opcode(self.kind.opcode().0);
            p.set_byte1(b1);
            p.set_lba(self.lba);
            p.set_length(self.blocks);
            p.set_byte14(self.group & 0x1f);
            p.set_control(self.control);
        }
    }

    to_bytes!();
}

// ---------------------------------------------------------------------------------------------
// MODE SELECT(6) (0x15) / MODE SELECT(10) (0x55)
// ---------------------------------------------------------------------------------------------

/// MODE SELECT(6) and MODE SELECT(10) (SPC-4 §6.9–6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeSelectRepr {
    /// `true` for MODE SELECT(10).
    pub ten: bool,
    /// PF: the pages follow the SPC page format.
    pub pf: bool,
    /// SP: save pages.
    pub sp: bool,
    /// PARAMETER LIST LENGTH (one byte in MODE SELECT(6)).
    pub param_len: u16,
    pub control: u8,
}

impl ModeSelectRepr {
    pub fn parse(buf: &[u8]) -> Result<ModeSelectRepr> {
        check(buf, 1, "scsi.mode_select")?;
        let ten = buf[0] == ScsiOpcode::MODE_SELECT_10.0;
        let (b1, param_len, control) = if ten {
            let p = Cdb10Packet::new_checked(buf)?;
            (p.byte1(), p.length(), p.control())
        } else {
            let p = Cdb6Packet::new_checked(buf)?;
            (p.byte1(), u16::from(p.byte4()), p.control())
        };
        Ok(ModeSelectRepr {
            ten,
            pf: b1 & 0x10 != 0,
            sp: b1 & 0x01 != 0,
            param_len,
            control,
        })
    }

    pub fn buffer_len(&self) -> usize {
        if self.ten {
            10
        } else {
            6
        }
    }

    /// Emits the CDB; MODE SELECT(6) carries a one-byte length.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.buffer_len(),
            "scsi.mode_select: emit buffer length"
        );
        buf.fill(0);
        buf[1] = if self.pf { 0x10 } else { 0 } | u8::from(self.sp);
        if self.ten {
            buf[0] = ScsiOpcode::MODE_SELECT_10.0;
            crate::field::write_u16(buf, 7, self.param_len);
            buf[9] = self.control;
        } else {
            buf[0] = ScsiOpcode::MODE_SELECT_6.0;
            buf[4] = self.param_len as u8;
            buf[5] = self.control;
        }
    }

    to_bytes!();
}

// ---------------------------------------------------------------------------------------------
// START STOP UNIT (0x1b)
// ---------------------------------------------------------------------------------------------

/// START STOP UNIT (SBC-4 §5.27).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartStopUnitRepr {
    /// IMMED: return status as soon as the CDB is validated.
    pub immed: bool,
    /// POWER CONDITION MODIFIER (byte 3 bits 3–0).
    pub power_condition_modifier: u8,
    /// POWER CONDITION (byte 4 bits 7–4; 0 = START_VALID: process START and LOEJ).
    pub power_condition: u8,
    pub no_flush: bool,
    /// LOEJ: load or eject the medium.
    pub loej: bool,
    pub start: bool,
    pub control: u8,
}

impl StartStopUnitRepr {
    pub fn parse(buf: &[u8]) -> Result<StartStopUnitRepr> {
        let p = Cdb6Packet::new_checked(buf)?;
        let b4 = p.byte4();
        Ok(StartStopUnitRepr {
            immed: p.byte1() & 1 != 0,
            power_condition_modifier: p.byte3() & 0x0f,
            power_condition: b4 >> 4,
            no_flush: b4 & 0x04 != 0,
            loej: b4 & 0x02 != 0,
            start: b4 & 0x01 != 0,
            control: p.control(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        6
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), 6, "scsi.start_stop_unit: emit buffer length");
        buf.fill(0);
        let mut p = Cdb6Packet::new_unchecked(buf);
        p.set_opcode(ScsiOpcode::START_STOP_UNIT.0);
        p.set_byte1(u8::from(self.immed));
        p.set_byte3(self.power_condition_modifier & 0x0f);
        p.set_byte4(
            (self.power_condition << 4)
                | if self.no_flush { 0x04 } else { 0 }
                | if self.loej { 0x02 } else { 0 }
                | u8::from(self.start),
        );
        p.set_control(self.control);
    }

    to_bytes!();
}

// ---------------------------------------------------------------------------------------------
// The dispatching enum
// ---------------------------------------------------------------------------------------------

/// A CDB, parsed according to its operation code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cdb {
    TestUnitReady {
        control: u8,
    },
    RequestSense(RequestSenseRepr),
    Inquiry(InquiryRepr),
    ModeSense(ModeSenseRepr),
    ReadCapacity10(ReadCapacity10Repr),
    ReadCapacity16(ReadCapacity16Repr),
    ReadWrite(ReadWriteRepr),
    SynchronizeCache(SyncCacheRepr),
    ReportLuns(ReportLunsRepr),
    Verify(VerifyRepr),
    ModeSelect(ModeSelectRepr),
    StartStopUnit(StartStopUnitRepr),
    /// Any other command: its bytes (as many as the operation code's group implies, or the
    /// whole buffer for the reserved/vendor groups), kept as is.
    Other {
        opcode: ScsiOpcode,
        bytes: Vec<u8>,
    },
}

impl Cdb {
    /// Parses the CDB at the start of `buf` (e.g. the 16-byte CDB field of an SRP_CMD).
    pub fn parse(buf: &[u8]) -> Result<Cdb> {
        check(buf, 1, "scsi.cdb")?;
        let op = ScsiOpcode(buf[0]);
        if let Some(n) = op.cdb_len() {
            check(buf, n, "scsi.cdb")?;
        }
        Ok(match op {
            ScsiOpcode::TEST_UNIT_READY => Cdb::TestUnitReady { control: buf[5] },
            ScsiOpcode::REQUEST_SENSE => Cdb::RequestSense(RequestSenseRepr::parse(buf)?),
            ScsiOpcode::INQUIRY => Cdb::Inquiry(InquiryRepr::parse(buf)?),
            ScsiOpcode::MODE_SENSE_6 | ScsiOpcode::MODE_SENSE_10 => {
                Cdb::ModeSense(ModeSenseRepr::parse(buf)?)
            }
            ScsiOpcode::READ_CAPACITY_10 => Cdb::ReadCapacity10(ReadCapacity10Repr::parse(buf)?),
            ScsiOpcode::SERVICE_ACTION_IN_16
                if buf[1] & 0x1f == ServiceActionIn16::READ_CAPACITY_16.0 =>
            {
                Cdb::ReadCapacity16(ReadCapacity16Repr::parse(buf)?)
            }
            op if RwKind::from_opcode(op).is_some() => Cdb::ReadWrite(ReadWriteRepr::parse(buf)?),
            ScsiOpcode::VERIFY_10
            | ScsiOpcode::VERIFY_16
            | ScsiOpcode::WRITE_AND_VERIFY_10
            | ScsiOpcode::WRITE_AND_VERIFY_16 => Cdb::Verify(VerifyRepr::parse(buf)?),
            ScsiOpcode::MODE_SELECT_6 | ScsiOpcode::MODE_SELECT_10 => {
                Cdb::ModeSelect(ModeSelectRepr::parse(buf)?)
            }
            ScsiOpcode::START_STOP_UNIT => Cdb::StartStopUnit(StartStopUnitRepr::parse(buf)?),
            ScsiOpcode::SYNCHRONIZE_CACHE_10 | ScsiOpcode::SYNCHRONIZE_CACHE_16 => {
                Cdb::SynchronizeCache(SyncCacheRepr::parse(buf)?)
            }
            ScsiOpcode::REPORT_LUNS => Cdb::ReportLuns(ReportLunsRepr::parse(buf)?),
            _ => {
                let n = op.cdb_len().unwrap_or(buf.len());
                Cdb::Other {
                    opcode: op,
                    bytes: buf[..n].to_vec(),
                }
            }
        })
    }

    pub fn opcode(&self) -> ScsiOpcode {
        match self {
            Cdb::TestUnitReady { .. } => ScsiOpcode::TEST_UNIT_READY,
            Cdb::RequestSense(_) => ScsiOpcode::REQUEST_SENSE,
            Cdb::Inquiry(_) => ScsiOpcode::INQUIRY,
            Cdb::ModeSense(m) if m.ten => ScsiOpcode::MODE_SENSE_10,
            Cdb::ModeSense(_) => ScsiOpcode::MODE_SENSE_6,
            Cdb::ReadCapacity10(_) => ScsiOpcode::READ_CAPACITY_10,
            Cdb::ReadCapacity16(_) => ScsiOpcode::SERVICE_ACTION_IN_16,
            Cdb::ReadWrite(r) => r.kind.opcode(),
            Cdb::SynchronizeCache(s) if s.sixteen => ScsiOpcode::SYNCHRONIZE_CACHE_16,
            Cdb::SynchronizeCache(_) => ScsiOpcode::SYNCHRONIZE_CACHE_10,
            Cdb::ReportLuns(_) => ScsiOpcode::REPORT_LUNS,
            Cdb::Verify(v) => v.kind.opcode(),
            Cdb::ModeSelect(m) if m.ten => ScsiOpcode::MODE_SELECT_10,
            Cdb::ModeSelect(_) => ScsiOpcode::MODE_SELECT_6,
            Cdb::StartStopUnit(_) => ScsiOpcode::START_STOP_UNIT,
            Cdb::Other { opcode, .. } => *opcode,
        }
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            Cdb::TestUnitReady { .. } => 6,
            Cdb::RequestSense(r) => r.buffer_len(),
            Cdb::Inquiry(r) => r.buffer_len(),
            Cdb::ModeSense(r) => r.buffer_len(),
            Cdb::ReadCapacity10(r) => r.buffer_len(),
            Cdb::ReadCapacity16(r) => r.buffer_len(),
            Cdb::ReadWrite(r) => r.buffer_len(),
            Cdb::SynchronizeCache(r) => r.buffer_len(),
            Cdb::ReportLuns(r) => r.buffer_len(),
            Cdb::Verify(r) => r.buffer_len(),
            Cdb::ModeSelect(r) => r.buffer_len(),
            Cdb::StartStopUnit(r) => r.buffer_len(),
            Cdb::Other { bytes, .. } => bytes.len(),
        }
    }

    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            Cdb::TestUnitReady { control } => {
                assert_eq!(buf.len(), 6, "scsi.test_unit_ready: emit buffer length");
                buf.fill(0);
                buf[5] = *control;
            }
            Cdb::RequestSense(r) => r.emit(buf),
            Cdb::Inquiry(r) => r.emit(buf),
            Cdb::ModeSense(r) => r.emit(buf),
            Cdb::ReadCapacity10(r) => r.emit(buf),
            Cdb::ReadCapacity16(r) => r.emit(buf),
            Cdb::ReadWrite(r) => r.emit(buf),
            Cdb::SynchronizeCache(r) => r.emit(buf),
            Cdb::ReportLuns(r) => r.emit(buf),
            Cdb::Verify(r) => r.emit(buf),
            Cdb::ModeSelect(r) => r.emit(buf),
            Cdb::StartStopUnit(r) => r.emit(buf),
            Cdb::Other { bytes, .. } => buf.copy_from_slice(bytes),
        }
    }

    to_bytes!();

    /// The CDB zero-padded into the 16-byte field of an SRP_CMD (`None` if it is longer).
    pub fn to_cdb16(&self) -> Option<[u8; 16]> {
        let b = self.to_bytes();
        let mut out = [0u8; 16];
        out.get_mut(..b.len())?.copy_from_slice(&b);
        Some(out)
    }
}

impl Dissect for Cdb {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "scsi_cdb",
            format!("SCSI Command: {}", self.opcode()),
            |t| {
                dissect_op(t, self.opcode());
                match self {
                    Cdb::TestUnitReady { control } => t.hex("control", "Control", *control, 2),
                    Cdb::RequestSense(r) => {
                        t.flag("desc", "DESC", r.desc);
                        t.dec("alloc_len", "Allocation Length", r.alloc_len);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::Inquiry(r) => {
                        t.flag("evpd", "EVPD", r.evpd);
                        t.hex("page_code", "Page Code", r.page_code, 2);
                        t.dec("alloc_len", "Allocation Length", r.alloc_len);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ModeSense(r) => {
                        if r.ten {
                            t.flag("llbaa", "LLBAA", r.llbaa);
                        }
                        t.flag("dbd", "DBD", r.dbd);
                        t.code("pc", "Page Control", r.pc.0, r.pc);
                        t.hex("page_code", "Page Code", r.page_code, 2);
                        t.hex("subpage_code", "Subpage Code", r.subpage_code, 2);
                        t.dec("alloc_len", "Allocation Length", r.alloc_len);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ReadCapacity10(r) => {
                        t.dec("lba", "Logical Block Address", r.lba);
                        t.flag("pmi", "PMI", r.pmi);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ReadCapacity16(r) => {
                        t.code_hex(
                            "service_action",
                            "Service Action",
                            ServiceActionIn16::READ_CAPACITY_16.0,
                            2,
                            ServiceActionIn16::READ_CAPACITY_16,
                        );
                        t.dec("lba", "Logical Block Address", r.lba);
                        t.dec("alloc_len", "Allocation Length", r.alloc_len);
                        t.flag("pmi", "PMI", r.pmi);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ReadWrite(r) => {
                        if r.kind.cdb_len() > 6 {
                            t.dec("protect", "RDPROTECT/WRPROTECT", r.protect());
                            t.flag("dpo", "DPO", r.dpo());
                            t.flag("fua", "FUA", r.fua());
                        }
                        t.dec("lba", "Logical Block Address", r.lba);
                        t.dec("transfer_len", "Transfer Length", r.transfer_len);
                        if r.kind.cdb_len() > 6 {
                            t.dec("group", "Group Number", r.group);
                        }
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::SynchronizeCache(r) => {
                        t.flag("immed", "IMMED", r.immed);
                        t.dec("lba", "Logical Block Address", r.lba);
                        t.dec("blocks", "Number of Logical Blocks", r.blocks);
                        t.dec("group", "Group Number", r.group);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ReportLuns(r) => {
                        t.hex("select_report", "Select Report", r.select_report, 2);
                        t.dec("alloc_len", "Allocation Length", r.alloc_len);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::Verify(r) => {
                        t.dec("protect", "VRPROTECT/WRPROTECT", r.protect);
                        t.flag("dpo", "DPO", r.dpo);
                        t.dec("bytchk", "BYTCHK", r.bytchk);
                        t.dec("lba", "Logical Block Address", r.lba);
                        t.dec("blocks", "Verification Length", r.blocks);
                        t.dec("group", "Group Number", r.group);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::ModeSelect(r) => {
                        t.flag("pf", "PF", r.pf);
                        t.flag("sp", "SP", r.sp);
                        t.dec("param_len", "Parameter List Length", r.param_len);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::StartStopUnit(r) => {
                        t.flag("immed", "IMMED", r.immed);
                        t.dec(
                            "power_condition_modifier",
                            "Power Condition Modifier",
                            r.power_condition_modifier,
                        );
                        t.dec("power_condition", "Power Condition", r.power_condition);
                        t.flag("no_flush", "NO_FLUSH", r.no_flush);
                        t.flag("loej", "LOEJ", r.loej);
                        t.flag("start", "START", r.start);
                        t.hex("control", "Control", r.control, 2);
                    }
                    Cdb::Other { bytes, .. } => t.bytes("bytes", "CDB", bytes),
                }
            },
        );
    }
}
