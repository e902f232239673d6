//! SRP_RSP (SRP r16a §6.9; `struct srp_rsp`, 36 bytes packed, then response data, then sense
//! data). Built by ib_srpt in `srpt_build_cmd_rsp` / `srpt_build_tskmgmt_rsp`.

use super::{dissect_tag, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::scsi::ScsiStatus;
use crate::{Error, Result};

/// The flags byte of an SRP_RSP (`SRP_RSP_FLAG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RspFlags(pub u8);

impl RspFlags {
    /// RSPVALID: the response data (RESPONSE DATA LIST LENGTH bytes) is valid.
    pub const RSPVALID: u8 = 1 << 0;
    /// SNSVALID: sense data is present.
    pub const SNSVALID: u8 = 1 << 1;
    /// DOOVER: data-out overflow, DATA-OUT RESIDUAL COUNT valid.
    pub const DOOVER: u8 = 1 << 2;
    /// DOUNDER: data-out underflow.
    pub const DOUNDER: u8 = 1 << 3;
    /// DIOVER: data-in overflow.
    pub const DIOVER: u8 = 1 << 4;
    /// DIUNDER: data-in underflow (LIO reads shorter than the allocation length).
    pub const DIUNDER: u8 = 1 << 5;

    pub fn rspvalid(self) -> bool {
        self.0 & Self::RSPVALID != 0
    }
    pub fn snsvalid(self) -> bool {
        self.0 & Self::SNSVALID != 0
    }
    pub fn doover(self) -> bool {
        self.0 & Self::DOOVER != 0
    }
    pub fn dounder(self) -> bool {
        self.0 & Self::DOUNDER != 0
    }
    pub fn diover(self) -> bool {
        self.0 & Self::DIOVER != 0
    }
    pub fn diunder(self) -> bool {
        self.0 & Self::DIUNDER != 0
    }
}

code_point! {
    /// RSP_CODE in byte 3 of the 4-byte response data (SRP r16a table 24).
    pub struct RspCode(u8) {
        COMPLETE = 0x00 => "No failure or task management function complete",
        INVALID_FIELDS = 0x02 => "Request fields invalid",
        NOT_SUPPORTED = 0x04 => "Task management function not supported",
        FAILED = 0x05 => "Task management function failed",
    }
}

/// Field offsets of `struct srp_rsp`.
pub mod field {
    pub const OPCODE: usize = 0;
    pub const SOL_NOT: usize = 1;
    pub const REQ_LIM_DELTA: usize = 4;
    pub const TAG: usize = 8;
    pub const FLAGS: usize = 18;
    pub const STATUS: usize = 19;
    pub const DATA_OUT_RES_CNT: usize = 20;
    pub const DATA_IN_RES_CNT: usize = 24;
    pub const SENSE_DATA_LEN: usize = 28;
    pub const RESP_DATA_LEN: usize = 32;
    /// Response data, then sense data, start here.
    pub const DATA: usize = 36;
}

min_view!(
    /// A view of an SRP_RSP.
    Packet,
    field::DATA,
    "srp.rsp"
);

be_fields!(Packet {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    req_lim_delta, set_req_lim_delta: u32 @ field::REQ_LIM_DELTA;
    tag, set_tag: u64 @ field::TAG;
    flags_raw, set_flags_raw: u8 @ field::FLAGS;
    status_raw, set_status_raw: u8 @ field::STATUS;
    data_out_res_cnt, set_data_out_res_cnt: u32 @ field::DATA_OUT_RES_CNT;
    data_in_res_cnt, set_data_in_res_cnt: u32 @ field::DATA_IN_RES_CNT;
    sense_data_len, set_sense_data_len: u32 @ field::SENSE_DATA_LEN;
    resp_data_len, set_resp_data_len: u32 @ field::RESP_DATA_LEN;
});

iu_view!(Packet, Opcode::RSP, field::OPCODE, "srp.rsp");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn flags(&self) -> RspFlags {
        RspFlags(self.flags_raw())
    }

    pub fn status(&self) -> ScsiStatus {
        ScsiStatus(self.status_raw())
    }

    fn data_span(&self, start: usize, len: u32, what: &'static str) -> Result<&[u8]> {
        let b = self.buffer.as_ref();
        let end = start.checked_add(len as usize).ok_or(Error::BadLength {
            what,
            len: len as usize,
        })?;
        b.get(start..end).ok_or(Error::Truncated {
            what,
            need: end,
            got: b.len(),
        })
    }

    /// The response data (first after the fixed part).
    pub fn response_data(&self) -> Result<&[u8]> {
        self.data_span(field::DATA, self.resp_data_len(), "srp.rsp.response_data")
    }

    /// The sense data (after the response data).
    pub fn sense_data(&self) -> Result<&[u8]> {
        let start = field::DATA.saturating_add(self.resp_data_len() as usize);
        self.data_span(start, self.sense_data_len(), "srp.rsp.sense_data")
    }
}

/// A response. The two length fields are those of the `response_data` and `sense_data`
/// vectors; bytes after the sense data (there are none from Linux) are not kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Repr {
    pub sol_not: u8,
    pub req_lim_delta: u32,
    pub tag: u64,
    pub flags: RspFlags,
    pub status: ScsiStatus,
    pub data_out_res_cnt: u32,
    pub data_in_res_cnt: u32,
    pub response_data: Vec<u8>,
    pub sense_data: Vec<u8>,
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::parse_iu(buf)?;
        Ok(Repr {
            sol_not: p.sol_not(),
            req_lim_delta: p.req_lim_delta(),
            tag: p.tag(),
            flags: p.flags(),
            status: p.status(),
            data_out_res_cnt: p.data_out_res_cnt(),
            data_in_res_cnt: p.data_in_res_cnt(),
            response_data: p.response_data()?.to_vec(),
            sense_data: p.sense_data()?.to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::DATA + self.response_data.len() + self.sense_data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = Packet::emit_iu(&mut *buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_req_lim_delta(self.req_lim_delta);
        p.set_tag(self.tag);
        p.set_flags_raw(self.flags.0);
        p.set_status_raw(self.status.0);
        p.set_data_out_res_cnt(self.data_out_res_cnt);
        p.set_data_in_res_cnt(self.data_in_res_cnt);
        p.set_sense_data_len(self.sense_data.len() as u32);
        p.set_resp_data_len(self.response_data.len() as u32);
        let r = field::DATA + self.response_data.len();
        buf[field::DATA..r].copy_from_slice(&self.response_data);
        buf[r..].copy_from_slice(&self.sense_data);
    }

    to_bytes!();

    /// The task-management RSP_CODE, if 4 bytes of valid response data are present.
    pub fn rsp_code(&self) -> Option<RspCode> {
        if self.flags.rspvalid() && self.response_data.len() >= 4 {
            self.response_data.get(3).map(|&c| RspCode(c))
        } else {
            None
        }
    }

    /// The response ib_srpt sends for a task management request (`srpt_build_tskmgmt_rsp`).
    pub fn task_mgmt(tag: u64, req_lim_delta: u32, code: RspCode) -> Repr {
        Repr {
            req_lim_delta,
            tag,
            flags: RspFlags(RspFlags::RSPVALID),
            response_data: vec![0, 0, 0, code.0],
            ..Repr::default()
        }
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_rsp", "SRP_RSP", |t| {
            t.code_hex("opcode", "Opcode", Opcode::RSP.0, 2, Opcode::RSP);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            t.dec("req_lim_delta", "Request Limit Delta", self.req_lim_delta);
            dissect_tag(t, self.tag);
            t.subtree("flags", format!("Flags: {:#04x}", self.flags.0), |t| {
                t.flag("rspvalid", "RSPVALID", self.flags.rspvalid());
                t.flag("snsvalid", "SNSVALID", self.flags.snsvalid());
                t.flag("doover", "DOOVER", self.flags.doover());
                t.flag("dounder", "DOUNDER", self.flags.dounder());
                t.flag("diover", "DIOVER", self.flags.diover());
                t.flag("diunder", "DIUNDER", self.flags.diunder());
            });
            t.code_hex("status", "Status", self.status.0, 2, self.status);
            t.dec(
                "data_out_res_cnt",
                "Data-Out Residual Count",
                self.data_out_res_cnt,
            );
            t.dec(
                "data_in_res_cnt",
                "Data-In Residual Count",
                self.data_in_res_cnt,
            );
            t.dec(
                "sense_data_len",
                "Sense Data List Length",
                self.sense_data.len() as u32,
            );
            t.dec(
                "resp_data_len",
                "Response Data List Length",
                self.response_data.len() as u32,
            );
            if !self.response_data.is_empty() {
                t.bytes("response_data", "Response Data", &self.response_data);
                if let Some(c) = self.rsp_code() {
                    t.code_hex("rsp_code", "Response Code", c.0, 2, c);
                }
            }
            if !self.sense_data.is_empty() {
                t.bytes("sense_data", "Sense Data", &self.sense_data);
                if let Ok(s) = crate::scsi::SenseRepr::parse(&self.sense_data) {
                    s.dissect(t);
                }
            }
        });
    }
}
