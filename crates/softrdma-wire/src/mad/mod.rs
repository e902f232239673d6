//! Management datagrams (IBTA Vol 1 ch. 13.4): the 24-byte common header every MAD starts with,
//! the 256-byte MAD as a whole, and `ClassPortInfo`, the one attribute every class shares.
//!
//! On RoCEv2 a MAD is the payload of a UD SEND to QP1 (after BTH and DETH): exactly 256 bytes,
//! a common header followed by 232 bytes of class data (for the CM class: one CM message).

pub mod class_port_info;
pub mod header;

pub use class_port_info::{Packet as ClassPortInfoPacket, Repr as ClassPortInfo};
pub use header::{Mad, MadStatus, Packet as MadPacket, Repr as MadHeader};

/// Size of the common MAD header (IBTA 13.4.2).
pub const MAD_HEADER_LEN: usize = 24;
/// Size of a whole (non-RMPP, non-OPA) MAD.
pub const MAD_LEN: usize = 256;
/// Size of the data that follows the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The only base version IBTA defines (OPA's 0x80 is not spoken here).
pub const BASE_VERSION: u8 = 1;

code_point! {
    /// Management class (IBTA 13.4.4, table 152; Linux `IB_MGMT_CLASS_*`).
    pub struct MgmtClass(u8) {
        SUBN_LID_ROUTED = 0x01 => "SubnMgt (LID routed)",
        SUBN_ADM = 0x03 => "SubnAdm",
        PERF_MGMT = 0x04 => "Perf",
        BM = 0x05 => "BM",
        DEVICE_MGMT = 0x06 => "DevMgt",
        CM = 0x07 => "CM",
        SNMP = 0x08 => "SNMP",
        DEVICE_ADM = 0x10 => "DevAdm",
        BOOT_MGMT = 0x11 => "BootMgt",
        BIS = 0x12 => "BIS",
        CONG_MGMT = 0x21 => "CongestionMgt",
        SUBN_DIRECTED_ROUTE = 0x81 => "SubnMgt (directed route)",
    }
}

impl MgmtClass {
    /// Whether the class is in one of the vendor-specific ranges (0x09–0x0F, 0x30–0x4F).
    pub fn is_vendor(&self) -> bool {
        matches!(self.0, 0x09..=0x0f | 0x30..=0x4f)
    }
}

code_point! {
    /// MAD method (IBTA 13.4.5, table 153). Bit 7 is the response bit: `GET_RESP` is
    /// `GET | 0x80`. The texts are the ones tshark prints ("Send()").
    pub struct Method(u8) {
        GET = 0x01 => "Get()",
        SET = 0x02 => "Set()",
        SEND = 0x03 => "Send()",
        TRAP = 0x05 => "Trap()",
        REPORT = 0x06 => "Report()",
        TRAP_REPRESS = 0x07 => "TrapRepress()",
        GET_TABLE = 0x12 => "GetTable()",
        GET_TRACE_TABLE = 0x13 => "GetTraceTable()",
        GET_MULTI = 0x14 => "GetMulti()",
        DELETE = 0x15 => "Delete()",
        GET_RESP = 0x81 => "GetResp()",
        REPORT_RESP = 0x86 => "ReportResp()",
        GET_TABLE_RESP = 0x92 => "GetTableResp()",
        GET_TRACE_TABLE_RESP = 0x93 => "GetTraceTableResp()",
        GET_MULTI_RESP = 0x94 => "GetMultiResp()",
        DELETE_RESP = 0x95 => "DeleteResp()",
    }
}

impl Method {
    /// The response bit (IBTA 13.4.5: "R" bit, the most significant bit of the method).
    pub const RESPONSE_BIT: u8 = 0x80;

    /// Whether this is a response method (`GetResp`, `ReportResp`, ...).
    pub fn is_response(&self) -> bool {
        self.0 & Self::RESPONSE_BIT != 0
    }

    /// The response method for this request method (`Get` -> `GetResp`).
    pub fn response(&self) -> Method {
        Method(self.0 | Self::RESPONSE_BIT)
    }
}

code_point! {
    /// The "invalid field" code in bits 2–4 of the MAD status (IBTA 13.4.7, table 154).
    pub struct InvalidField(u8) {
        NONE = 0 => "No invalid fields",
        BAD_VERSION = 1 => "Bad version, or class version not supported",
        METHOD_NOT_SUPPORTED = 2 => "Method not supported",
        METHOD_ATTR_NOT_SUPPORTED = 3 => "Method/attribute combination not supported",
        INVALID_ATTR_VALUE = 7 => "Invalid value in attribute or attribute modifier",
    }
}

code_point! {
    /// Attribute IDs every class shares (IBTA 13.4.8, table 155).
    pub struct CommonAttrId(u16) {
        CLASS_PORT_INFO = 0x0001 => "ClassPortInfo",
        NOTICE = 0x0002 => "Notice",
        INFORM_INFO = 0x0003 => "InformInfo",
    }
}
