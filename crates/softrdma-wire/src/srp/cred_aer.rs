//! SRP_CRED_REQ / SRP_CRED_RSP and SRP_AER_REQ / SRP_AER_RSP (SRP r16a §6.10–6.13;
//! `struct srp_cred_req`, `srp_cred_rsp`, `srp_aer_req`, `srp_aer_rsp`).

use super::{dissect_tag, expect_opcode, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::{Error, Result};

/// Field offsets of the 16-byte IUs and of SRP_AER_REQ.
pub mod field {
    pub const OPCODE: usize = 0;
    pub const SOL_NOT: usize = 1;
    pub const REQ_LIM_DELTA: usize = 4;
    pub const TAG: usize = 8;
    pub const LEN: usize = 16;
    /// SRP_AER_REQ: LOGICAL UNIT NUMBER.
    pub const AER_LUN: usize = 20;
    /// SRP_AER_REQ: SENSE DATA LIST LENGTH.
    pub const AER_SENSE_DATA_LEN: usize = 28;
    /// SRP_AER_REQ: fixed part (36 bytes), sense data follows.
    pub const AER_HDR_LEN: usize = 36;
}

min_view!(
    /// A view of a 16-byte IU that carries only an opcode and a tag (SRP_I_LOGOUT,
    /// SRP_CRED_RSP, SRP_AER_RSP).
    TagOnlyPacket,
    field::LEN,
    "srp.iu"
);

be_fields!(TagOnlyPacket {
    opcode, set_opcode: u8 @ field::OPCODE;
    tag, set_tag: u64 @ field::TAG;
});

min_view!(
    /// A view of the 16-byte SRP_CRED_REQ.
    CredReqPacket,
    field::LEN,
    "srp.cred_req"
);

be_fields!(CredReqPacket {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    req_lim_delta, set_req_lim_delta: u32 @ field::REQ_LIM_DELTA;
    tag, set_tag: u64 @ field::TAG;
});

iu_view!(
    CredReqPacket,
    Opcode::CRED_REQ,
    field::OPCODE,
    "srp.cred_req"
);

/// SRP_CRED_REQ: the target grants more credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CredReqRepr {
    pub sol_not: u8,
    pub req_lim_delta: u32,
    pub tag: u64,
}

impl CredReqRepr {
    pub fn parse(buf: &[u8]) -> Result<CredReqRepr> {
        let p = CredReqPacket::parse_iu(buf)?;
        Ok(CredReqRepr {
            sol_not: p.sol_not(),
            req_lim_delta: p.req_lim_delta(),
            tag: p.tag(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = CredReqPacket::emit_iu(buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_req_lim_delta(self.req_lim_delta);
        p.set_tag(self.tag);
    }

    to_bytes!();
}

impl Dissect for CredReqRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_cred_req", "SRP_CRED_REQ", |t| {
            t.code_hex("opcode", "Opcode", Opcode::CRED_REQ.0, 2, Opcode::CRED_REQ);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            t.dec("req_lim_delta", "Request Limit Delta", self.req_lim_delta);
            dissect_tag(t, self.tag);
        });
    }
}

tag_only_repr!(
    /// SRP_CRED_RSP: the initiator acknowledges an SRP_CRED_REQ.
    CredRspRepr,
    Opcode::CRED_RSP,
    "srp.cred_rsp",
    "srp.cred_rsp",
    "srp_cred_rsp",
    "SRP_CRED_RSP"
);

tag_only_repr!(
    /// SRP_AER_RSP: the initiator acknowledges an SRP_AER_REQ.
    AerRspRepr,
    Opcode::AER_RSP,
    "srp.aer_rsp",
    "srp.aer_rsp",
    "srp_aer_rsp",
    "SRP_AER_RSP"
);

min_view!(
    /// A view of an SRP_AER_REQ (36 bytes + sense data).
    AerReqPacket,
    field::AER_HDR_LEN,
    "srp.aer_req"
);

be_fields!(AerReqPacket {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    req_lim_delta, set_req_lim_delta: u32 @ field::REQ_LIM_DELTA;
    tag, set_tag: u64 @ field::TAG;
    lun, set_lun: u64 @ field::AER_LUN;
    sense_data_len, set_sense_data_len: u32 @ field::AER_SENSE_DATA_LEN;
});

iu_view!(AerReqPacket, Opcode::AER_REQ, field::OPCODE, "srp.aer_req");

impl<T: AsRef<[u8]>> AerReqPacket<T> {
    /// The sense data, if the IU holds all of it.
    pub fn sense_data(&self) -> Result<&[u8]> {
        let b = self.buffer.as_ref();
        let len = self.sense_data_len() as usize;
        b.get(field::AER_HDR_LEN..field::AER_HDR_LEN.saturating_add(len))
            .ok_or(Error::Truncated {
                what: "srp.aer_req.sense_data",
                need: field::AER_HDR_LEN.saturating_add(len),
                got: b.len(),
            })
    }
}

/// SRP_AER_REQ: the target reports an asynchronous event with sense data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AerReqRepr {
    pub sol_not: u8,
    pub req_lim_delta: u32,
    pub tag: u64,
    pub lun: u64,
    pub sense_data: Vec<u8>,
}

impl AerReqRepr {
    pub fn parse(buf: &[u8]) -> Result<AerReqRepr> {
        let p = AerReqPacket::parse_iu(buf)?;
        Ok(AerReqRepr {
            sol_not: p.sol_not(),
            req_lim_delta: p.req_lim_delta(),
            tag: p.tag(),
            lun: p.lun(),
            sense_data: p.sense_data()?.to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::AER_HDR_LEN + self.sense_data.len()
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = AerReqPacket::emit_iu(&mut *buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_req_lim_delta(self.req_lim_delta);
        p.set_tag(self.tag);
        p.set_lun(self.lun);
        p.set_sense_data_len(self.sense_data.len() as u32);
        buf[field::AER_HDR_LEN..].copy_from_slice(&self.sense_data);
    }

    to_bytes!();
}

impl Dissect for AerReqRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_aer_req", "SRP_AER_REQ", |t| {
            t.code_hex("opcode", "Opcode", Opcode::AER_REQ.0, 2, Opcode::AER_REQ);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            t.dec("req_lim_delta", "Request Limit Delta", self.req_lim_delta);
            dissect_tag(t, self.tag);
            t.hex("lun", "Logical Unit Number", self.lun, 16);
            t.dec(
                "sense_data_len",
                "Sense Data List Length",
                self.sense_data.len() as u32,
            );
            t.bytes("sense_data", "Sense Data", &self.sense_data);
        });
    }
}
