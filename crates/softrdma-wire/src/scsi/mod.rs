//! The SCSI an SRP target needs: CDBs (SPC-4 / SBC-3), sense data, status codes, and the
//! parameter data the target returns (standard INQUIRY data, VPD pages, READ CAPACITY data,
//! REPORT LUNS list, mode parameter headers).
//!
//! Layouts follow T10 SPC-4 and SBC-3 (the same ones LIO's `target_core_spc.c` /
//! `target_core_sbc.c` and Linux's `include/scsi/scsi_proto.h` use).

pub mod cdb;
pub mod data;
pub mod sense;

#[cfg(test)]
mod tests;

pub use cdb::{
    Cdb, InquiryRepr, ModeSelectRepr, ModeSenseRepr, ReadCapacity10Repr, ReadCapacity16Repr,
    ReadWriteRepr, ReportLunsRepr, RequestSenseRepr, RwKind, StartStopUnitRepr, SyncCacheRepr,
    VerifyKind, VerifyRepr,
};
pub use data::{
    BlockDescriptor, BlockDeviceCharacteristicsVpd, BlockLimitsVpd, Designator, ModeHeader10Repr,
    ModeHeader6Repr, ReadCapacity10Data, ReadCapacity16Data, ReportLunsData, StandardInquiry,
    VpdPage, VpdPageCode,
};
pub use sense::{AscAscq, DescriptorSense, FixedSense, SenseKey, SenseRepr};

code_point! {
    /// SCSI OPERATION CODE (SPC-4 annex D; `include/scsi/scsi_proto.h`).
    pub struct ScsiOpcode(u8) {
        TEST_UNIT_READY = 0x00 => "TEST UNIT READY",
        REZERO_UNIT = 0x01 => "REZERO UNIT",
        REQUEST_SENSE = 0x03 => "REQUEST SENSE",
        FORMAT_UNIT = 0x04 => "FORMAT UNIT",
        READ_6 = 0x08 => "READ(6)",
        WRITE_6 = 0x0a => "WRITE(6)",
        SEEK_6 = 0x0b => "SEEK(6)",
        INQUIRY = 0x12 => "INQUIRY",
        MODE_SELECT_6 = 0x15 => "MODE SELECT(6)",
        RESERVE_6 = 0x16 => "RESERVE(6)",
        RELEASE_6 = 0x17 => "RELEASE(6)",
        MODE_SENSE_6 = 0x1a => "MODE SENSE(6)",
        START_STOP_UNIT = 0x1b => "START STOP UNIT",
        SEND_DIAGNOSTIC = 0x1d => "SEND DIAGNOSTIC",
        PREVENT_ALLOW_MEDIUM_REMOVAL = 0x1e => "PREVENT ALLOW MEDIUM REMOVAL",
        READ_CAPACITY_10 = 0x25 => "READ CAPACITY(10)",
        READ_10 = 0x28 => "READ(10)",
        WRITE_10 = 0x2a => "WRITE(10)",
        SEEK_10 = 0x2b => "SEEK(10)",
        WRITE_AND_VERIFY_10 = 0x2e => "WRITE AND VERIFY(10)",
        VERIFY_10 = 0x2f => "VERIFY(10)",
        SYNCHRONIZE_CACHE_10 = 0x35 => "SYNCHRONIZE CACHE(10)",
        WRITE_BUFFER = 0x3b => "WRITE BUFFER",
        READ_BUFFER = 0x3c => "READ BUFFER",
        WRITE_SAME_10 = 0x41 => "WRITE SAME(10)",
        UNMAP = 0x42 => "UNMAP",
        LOG_SELECT = 0x4c => "LOG SELECT",
        LOG_SENSE = 0x4d => "LOG SENSE",
        MODE_SELECT_10 = 0x55 => "MODE SELECT(10)",
        MODE_SENSE_10 = 0x5a => "MODE SENSE(10)",
        PERSISTENT_RESERVE_IN = 0x5e => "PERSISTENT RESERVE IN",
        PERSISTENT_RESERVE_OUT = 0x5f => "PERSISTENT RESERVE OUT",
        EXTENDED_COPY = 0x83 => "EXTENDED COPY",
        RECEIVE_COPY_RESULTS = 0x84 => "RECEIVE COPY RESULTS",
        READ_16 = 0x88 => "READ(16)",
        COMPARE_AND_WRITE = 0x89 => "COMPARE AND WRITE",
        WRITE_16 = 0x8a => "WRITE(16)",
        WRITE_AND_VERIFY_16 = 0x8e => "WRITE AND VERIFY(16)",
        VERIFY_16 = 0x8f => "VERIFY(16)",
        SYNCHRONIZE_CACHE_16 = 0x91 => "SYNCHRONIZE CACHE(16)",
        WRITE_SAME_16 = 0x93 => "WRITE SAME(16)",
        SERVICE_ACTION_IN_16 = 0x9e => "SERVICE ACTION IN(16)",
        REPORT_LUNS = 0xa0 => "REPORT LUNS",
        MAINTENANCE_IN = 0xa3 => "MAINTENANCE IN",
        MAINTENANCE_OUT = 0xa4 => "MAINTENANCE OUT",
        READ_12 = 0xa8 => "READ(12)",
        WRITE_12 = 0xaa => "WRITE(12)",
    }
}

impl ScsiOpcode {
    /// The CDB length the operation code's group implies (SPC-4 §4.2.5.1): 6, 10, 16 or 12
    /// bytes; `None` for the reserved and vendor-specific groups (3, 6, 7).
    pub fn cdb_len(&self) -> Option<usize> {
        match self.0 >> 5 {
            0 => Some(6),
            1 | 2 => Some(10),
            4 => Some(16),
            5 => Some(12),
            _ => None,
        }
    }
}

code_point! {
    /// SERVICE ACTION of SERVICE ACTION IN(16) (SBC-3).
    pub struct ServiceActionIn16(u8) {
        READ_CAPACITY_16 = 0x10 => "READ CAPACITY(16)",
        GET_LBA_STATUS = 0x12 => "GET LBA STATUS",
    }
}

code_point! {
    /// SCSI STATUS (SAM-5 table 32).
    pub struct ScsiStatus(u8) {
        GOOD = 0x00 => "GOOD",
        CHECK_CONDITION = 0x02 => "CHECK CONDITION",
        CONDITION_MET = 0x04 => "CONDITION MET",
        BUSY = 0x08 => "BUSY",
        RESERVATION_CONFLICT = 0x18 => "RESERVATION CONFLICT",
        TASK_SET_FULL = 0x28 => "TASK SET FULL",
        ACA_ACTIVE = 0x30 => "ACA ACTIVE",
        TASK_ABORTED = 0x40 => "TASK ABORTED",
    }
}

code_point! {
    /// PERIPHERAL DEVICE TYPE (SPC-4 table 146), the low 5 bits of INQUIRY byte 0.
    pub struct DeviceType(u8) {
        DISK = 0x00 => "Direct access block device",
        TAPE = 0x01 => "Sequential-access device",
        CDROM = 0x05 => "CD/DVD device",
        ENCLOSURE = 0x0d => "Enclosure services device",
        NO_DEVICE = 0x1f => "Unknown or no device type",
    }
}
