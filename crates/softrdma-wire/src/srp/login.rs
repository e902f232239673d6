//! SRP_LOGIN_REQ (both the IB CM 64-byte form and the RDMA CM 56-byte form), SRP_LOGIN_RSP and
//! SRP_LOGIN_REJ (SRP r16a §6.2–6.4; `struct srp_login_req`, `srp_login_req_rdma`,
//! `srp_login_rsp`, `srp_login_rej` in `include/scsi/srp.h`).
//!
//! The login travels in CM private data: the request in the REQ (after the 36-byte RDMA CM
//! header when the RDMA CM is used), the response in the REP, the reject in a REJ with reason
//! 28 (consumer defined).

use super::{dissect_tag, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::Result;

/// `req_buf_fmt` / `buf_fmt` bit: direct data buffer descriptors supported.
pub const BUF_FORMAT_DIRECT: u16 = 1 << 1;
/// `req_buf_fmt` / `buf_fmt` bit: indirect data buffer descriptors supported.
pub const BUF_FORMAT_INDIRECT: u16 = 1 << 2;
/// `req_flags` bit (SRP-2): the initiator asks to send immediate data.
pub const IMMED_REQUESTED: u8 = 0x80;
/// `req_flags` mask: the multi-channel action.
pub const MULTICHAN_ACTION_MASK: u8 = 0x03;
/// `rsp_flags` bit (SRP-2): the target accepts immediate data.
pub const LOGIN_RSP_IMMED_SUPP: u8 = 0x80;
/// `rsp_flags` mask: the multi-channel result.
pub const MULTICHAN_RESULT_MASK: u8 = 0x03;

code_point! {
    /// MULTI-CHANNEL ACTION of a login request (`req_flags & 3`).
    pub struct MultiChannelAction(u8) {
        SINGLE = 0 => "Terminate other channels of the I_T nexus (single channel)",
        MULTI = 1 => "Independent operation (multi-channel)",
    }
}

code_point! {
    /// MULTI-CHANNEL RESULT of a login response (`rsp_flags & 3`).
    pub struct MultiChannelResult(u8) {
        NO_CHAN = 0 => "No existing channels terminated",
        TERMINATED = 1 => "Existing channels terminated",
        MAINTAINED = 2 => "Existing channels maintained",
    }
}

code_point! {
    /// Why a login was rejected (SRP r16a table 12; `enum srp_login_rej_reason`).
    pub struct LoginRejReason(u32) {
        UNABLE_ESTABLISH_CHANNEL = 0x0001_0000 => "Unable to establish RDMA channel, no reason specified",
        INSUFFICIENT_RESOURCES = 0x0001_0001 => "Insufficient RDMA channel resources",
        REQ_IT_IU_LENGTH_TOO_LARGE = 0x0001_0002 => "Requested maximum initiator to target IU length value too large",
        UNABLE_ASSOCIATE_CHANNEL = 0x0001_0003 => "Unable to associate RDMA channel with specified I_T nexus",
        UNSUPPORTED_DESCRIPTOR_FMT = 0x0001_0004 => "One or more requested data buffer descriptor formats are not supported",
        MULTI_CHANNEL_UNSUPPORTED = 0x0001_0005 => "SRP target port does not support multiple RDMA channels per I_T nexus",
        CHANNEL_LIMIT_REACHED = 0x0001_0006 => "RDMA channel limit reached for this initiator",
    }
}

fn buf_fmt_text(f: u16) -> String {
    let mut parts = Vec::new();
    if f & BUF_FORMAT_DIRECT != 0 {
        parts.push("direct");
    }
    if f & BUF_FORMAT_INDIRECT != 0 {
        parts.push("indirect");
    }
    if parts.is_empty() {
        format!("{f:#06x}")
    } else {
        format!("{f:#06x} ({})", parts.join(", "))
    }
}

fn dissect_buf_fmt(t: &mut Tree, key: &'static str, label: &str, f: u16) {
    t.push(crate::dissect::Node {
        key,
        label: label.to_string(),
        value: crate::dissect::Value::Uint(u64::from(f)),
        display: buf_fmt_text(f),
        children: Vec::new(),
    });
}

// ---------------------------------------------------------------------------------------------
// SRP_LOGIN_REQ, IB CM form (64 bytes)
// ---------------------------------------------------------------------------------------------

/// Field offsets of `struct srp_login_req` (64 bytes).
pub mod login_req_field {
    pub const OPCODE: usize = 0;
    pub const TAG: usize = 8;
    pub const REQ_IT_IU_LEN: usize = 16;
    pub const REQ_BUF_FMT: usize = 24;
    pub const REQ_FLAGS: usize = 26;
    pub const IMM_DATA_OFFSET: usize = 28;
    pub const INITIATOR_PORT_ID: usize = 32;
    pub const TARGET_PORT_ID: usize = 48;
    pub const LEN: usize = 64;
}

min_view!(
    /// A view of the 64-byte SRP_LOGIN_REQ carried in an IB CM REQ.
    LoginReqPacket,
    login_req_field::LEN,
    "srp.login_req"
);

be_fields!(LoginReqPacket {
    opcode, set_opcode: u8 @ login_req_field::OPCODE;
    tag, set_tag: u64 @ login_req_field::TAG;
    req_it_iu_len, set_req_it_iu_len: u32 @ login_req_field::REQ_IT_IU_LEN;
    req_buf_fmt, set_req_buf_fmt: u16 @ login_req_field::REQ_BUF_FMT;
    req_flags, set_req_flags: u8 @ login_req_field::REQ_FLAGS;
    imm_data_offset, set_imm_data_offset: u16 @ login_req_field::IMM_DATA_OFFSET;
    initiator_port_id, set_initiator_port_id: [u8; 16] @ login_req_field::INITIATOR_PORT_ID;
    target_port_id, set_target_port_id: [u8; 16] @ login_req_field::TARGET_PORT_ID;
});

iu_view!(
    LoginReqPacket,
    Opcode::LOGIN_REQ,
    login_req_field::OPCODE,
    "srp.login_req"
);

/// A login request. The same fields travel in both forms; [`LoginReqRepr`] is the IB CM
/// layout, [`LoginReqRdmaRepr`] the RDMA CM one, and `From` converts between them (as
/// `srpt_rdma_cm_req_recv` does). Reserved bytes are emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoginReqRepr {
    pub tag: u64,
    /// REQUESTED MAXIMUM INITIATOR TO TARGET IU LENGTH.
    pub req_it_iu_len: u32,
    /// REQUIRED BUFFER FORMATS ([`BUF_FORMAT_DIRECT`] | [`BUF_FORMAT_INDIRECT`]).
    pub req_buf_fmt: u16,
    /// Multi-channel action in bits 0–1, [`IMMED_REQUESTED`] in bit 7.
    pub req_flags: u8,
    /// Where immediate data starts in an SRP_CMD (SRP-2; ib_srp uses 68).
    pub imm_data_offset: u16,
    pub initiator_port_id: [u8; 16],
    pub target_port_id: [u8; 16],
}

impl LoginReqRepr {
    pub fn parse(buf: &[u8]) -> Result<LoginReqRepr> {
        let p = LoginReqPacket::parse_iu(buf)?;
        Ok(LoginReqRepr {
            tag: p.tag(),
            req_it_iu_len: p.req_it_iu_len(),
            req_buf_fmt: p.req_buf_fmt(),
            req_flags: p.req_flags(),
            imm_data_offset: p.imm_data_offset(),
            initiator_port_id: p.initiator_port_id(),
            target_port_id: p.target_port_id(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        login_req_field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = LoginReqPacket::emit_iu(buf, self.buffer_len());
        p.set_tag(self.tag);
        p.set_req_it_iu_len(self.req_it_iu_len);
        p.set_req_buf_fmt(self.req_buf_fmt);
        p.set_req_flags(self.req_flags);
        p.set_imm_data_offset(self.imm_data_offset);
        p.set_initiator_port_id(self.initiator_port_id);
        p.set_target_port_id(self.target_port_id);
    }

    to_bytes!();

    /// The multi-channel action (`req_flags & 3`).
    pub fn multichannel_action(&self) -> MultiChannelAction {
        MultiChannelAction(self.req_flags & MULTICHAN_ACTION_MASK)
    }

    /// Whether the initiator asks for immediate data.
    pub fn immediate_requested(&self) -> bool {
        self.req_flags & IMMED_REQUESTED != 0
    }
}

fn dissect_login_req(t: &mut Tree, r: &LoginReqRepr, key: &'static str, label: &str) {
    t.subtree(key, label, |t| {
        t.code_hex(
            "opcode",
            "Opcode",
            Opcode::LOGIN_REQ.0,
            2,
            Opcode::LOGIN_REQ,
        );
        dissect_tag(t, r.tag);
        t.dec(
            "req_it_iu_len",
            "Requested Max Initiator to Target IU Length",
            r.req_it_iu_len,
        );
        dissect_buf_fmt(t, "req_buf_fmt", "Required Buffer Formats", r.req_buf_fmt);
        t.hex("req_flags", "Request Flags", r.req_flags, 2);
        let mca = r.multichannel_action();
        t.code("multichannel_action", "Multi-Channel Action", mca.0, mca);
        t.flag(
            "immed_requested",
            "Immediate Data Requested",
            r.immediate_requested(),
        );
        t.dec(
            "imm_data_offset",
            "Immediate Data Offset",
            r.imm_data_offset,
        );
        t.bytes(
            "initiator_port_id",
            "Initiator Port Identifier",
            &r.initiator_port_id,
        );
        t.bytes(
            "target_port_id",
            "Target Port Identifier",
            &r.target_port_id,
        );
    });
}

impl Dissect for LoginReqRepr {
    fn dissect(&self, t: &mut Tree) {
        dissect_login_req(t, self, "srp_login_req", "SRP_LOGIN_REQ");
    }
}

// ---------------------------------------------------------------------------------------------
// SRP_LOGIN_REQ, RDMA CM form (56 bytes)
// ---------------------------------------------------------------------------------------------

/// Field offsets of `struct srp_login_req_rdma` (56 bytes): the same fields with the reserved
/// bytes dropped, so that 36 bytes of RDMA CM header plus the login fit the REQ's 92 bytes.
pub mod login_req_rdma_field {
    pub const TAG: usize = 0;
    pub const REQ_BUF_FMT: usize = 8;
    pub const REQ_FLAGS: usize = 10;
    pub const OPCODE: usize = 11;
    pub const REQ_IT_IU_LEN: usize = 12;
    pub const INITIATOR_PORT_ID: usize = 16;
    pub const TARGET_PORT_ID: usize = 32;
    pub const IMM_DATA_OFFSET: usize = 48;
    pub const LEN: usize = 56;
}

min_view!(
    /// A view of the 56-byte SRP_LOGIN_REQ carried after the RDMA CM header.
    LoginReqRdmaPacket,
    login_req_rdma_field::LEN,
    "srp.login_req_rdma"
);

be_fields!(LoginReqRdmaPacket {
    tag, set_tag: u64 @ login_req_rdma_field::TAG;
    req_buf_fmt, set_req_buf_fmt: u16 @ login_req_rdma_field::REQ_BUF_FMT;
    req_flags, set_req_flags: u8 @ login_req_rdma_field::REQ_FLAGS;
    opcode, set_opcode: u8 @ login_req_rdma_field::OPCODE;
    req_it_iu_len, set_req_it_iu_len: u32 @ login_req_rdma_field::REQ_IT_IU_LEN;
    initiator_port_id, set_initiator_port_id: [u8; 16] @ login_req_rdma_field::INITIATOR_PORT_ID;
    target_port_id, set_target_port_id: [u8; 16] @ login_req_rdma_field::TARGET_PORT_ID;
    imm_data_offset, set_imm_data_offset: u16 @ login_req_rdma_field::IMM_DATA_OFFSET;
});

iu_view!(
    LoginReqRdmaPacket,
    Opcode::LOGIN_REQ,
    login_req_rdma_field::OPCODE,
    "srp.login_req_rdma"
);

/// The RDMA CM form of the login request; see [`LoginReqRepr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoginReqRdmaRepr {
    pub tag: u64,
    pub req_buf_fmt: u16,
    pub req_flags: u8,
    pub req_it_iu_len: u32,
    pub initiator_port_id: [u8; 16],
    pub target_port_id: [u8; 16],
    pub imm_data_offset: u16,
}

impl LoginReqRdmaRepr {
    /// Parses the login at the start of `buf` (the REQ private data after the RDMA CM header;
    /// the 92 − 36 = 56 bytes are all the login). Like `srpt_rdma_cm_req_recv`, anything
    /// shorter than 56 bytes is refused.
    pub fn parse(buf: &[u8]) -> Result<LoginReqRdmaRepr> {
        let p = LoginReqRdmaPacket::parse_iu(buf)?;
        Ok(LoginReqRdmaRepr {
            tag: p.tag(),
            req_buf_fmt: p.req_buf_fmt(),
            req_flags: p.req_flags(),
            req_it_iu_len: p.req_it_iu_len(),
            initiator_port_id: p.initiator_port_id(),
            target_port_id: p.target_port_id(),
            imm_data_offset: p.imm_data_offset(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        login_req_rdma_field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = LoginReqRdmaPacket::emit_iu(buf, self.buffer_len());
        p.set_tag(self.tag);
        p.set_req_buf_fmt(self.req_buf_fmt);
        p.set_req_flags(self.req_flags);
        p.set_req_it_iu_len(self.req_it_iu_len);
        p.set_initiator_port_id(self.initiator_port_id);
        p.set_target_port_id(self.target_port_id);
        p.set_imm_data_offset(self.imm_data_offset);
    }

    to_bytes!();
}

impl From<LoginReqRdmaRepr> for LoginReqRepr {
    fn from(r: LoginReqRdmaRepr) -> LoginReqRepr {
        LoginReqRepr {
            tag: r.tag,
            req_it_iu_len: r.req_it_iu_len,
            req_buf_fmt: r.req_buf_fmt,
            req_flags: r.req_flags,
            imm_data_offset: r.imm_data_offset,
            initiator_port_id: r.initiator_port_id,
            target_port_id: r.target_port_id,
        }
    }
}

impl From<LoginReqRepr> for LoginReqRdmaRepr {
    fn from(r: LoginReqRepr) -> LoginReqRdmaRepr {
        LoginReqRdmaRepr {
            tag: r.tag,
            req_buf_fmt: r.req_buf_fmt,
            req_flags: r.req_flags,
            req_it_iu_len: r.req_it_iu_len,
            initiator_port_id: r.initiator_port_id,
            target_port_id: r.target_port_id,
            imm_data_offset: r.imm_data_offset,
        }
    }
}

impl Dissect for LoginReqRdmaRepr {
    fn dissect(&self, t: &mut Tree) {
        dissect_login_req(
            t,
            &LoginReqRepr::from(*self),
            "srp_login_req",
            "SRP_LOGIN_REQ (RDMA CM layout)",
        );
    }
}

// ---------------------------------------------------------------------------------------------
// SRP_LOGIN_RSP (52 bytes)
// ---------------------------------------------------------------------------------------------

/// Field offsets of `struct srp_login_rsp` (52 bytes, packed).
pub mod login_rsp_field {
    pub const OPCODE: usize = 0;
    pub const REQ_LIM_DELTA: usize = 4;
    pub const TAG: usize = 8;
    pub const MAX_IT_IU_LEN: usize = 16;
    pub const MAX_TI_IU_LEN: usize = 20;
    pub const BUF_FMT: usize = 24;
    pub const RSP_FLAGS: usize = 26;
    pub const LEN: usize = 52;
}

min_view!(
    /// A view of the 52-byte SRP_LOGIN_RSP carried in a CM REP.
    LoginRspPacket,
    login_rsp_field::LEN,
    "srp.login_rsp"
);

be_fields!(LoginRspPacket {
    opcode, set_opcode: u8 @ login_rsp_field::OPCODE;
    req_lim_delta, set_req_lim_delta: u32 @ login_rsp_field::REQ_LIM_DELTA;
    tag, set_tag: u64 @ login_rsp_field::TAG;
    max_it_iu_len, set_max_it_iu_len: u32 @ login_rsp_field::MAX_IT_IU_LEN;
    max_ti_iu_len, set_max_ti_iu_len: u32 @ login_rsp_field::MAX_TI_IU_LEN;
    buf_fmt, set_buf_fmt: u16 @ login_rsp_field::BUF_FMT;
    rsp_flags, set_rsp_flags: u8 @ login_rsp_field::RSP_FLAGS;
});

iu_view!(
    LoginRspPacket,
    Opcode::LOGIN_RSP,
    login_rsp_field::OPCODE,
    "srp.login_rsp"
);

/// A login response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoginRspRepr {
    /// REQUEST LIMIT DELTA: the initial credit (ib_srpt: the receive queue size, 128).
    pub req_lim_delta: u32,
    pub tag: u64,
    pub max_it_iu_len: u32,
    pub max_ti_iu_len: u32,
    pub buf_fmt: u16,
    /// Multi-channel result in bits 0–1, [`LOGIN_RSP_IMMED_SUPP`] in bit 7.
    pub rsp_flags: u8,
}

impl LoginRspRepr {
    pub fn parse(buf: &[u8]) -> Result<LoginRspRepr> {
        let p = LoginRspPacket::parse_iu(buf)?;
        Ok(LoginRspRepr {
            req_lim_delta: p.req_lim_delta(),
            tag: p.tag(),
            max_it_iu_len: p.max_it_iu_len(),
            max_ti_iu_len: p.max_ti_iu_len(),
            buf_fmt: p.buf_fmt(),
            rsp_flags: p.rsp_flags(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        login_rsp_field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = LoginRspPacket::emit_iu(buf, self.buffer_len());
        p.set_req_lim_delta(self.req_lim_delta);
        p.set_tag(self.tag);
        p.set_max_it_iu_len(self.max_it_iu_len);
        p.set_max_ti_iu_len(self.max_ti_iu_len);
        p.set_buf_fmt(self.buf_fmt);
        p.set_rsp_flags(self.rsp_flags);
    }

    to_bytes!();

    pub fn multichannel_result(&self) -> MultiChannelResult {
        MultiChannelResult(self.rsp_flags & MULTICHAN_RESULT_MASK)
    }

    pub fn immediate_supported(&self) -> bool {
        self.rsp_flags & LOGIN_RSP_IMMED_SUPP != 0
    }
}

impl Dissect for LoginRspRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_login_rsp", "SRP_LOGIN_RSP", |t| {
            t.code_hex(
                "opcode",
                "Opcode",
                Opcode::LOGIN_RSP.0,
                2,
                Opcode::LOGIN_RSP,
            );
            t.dec("req_lim_delta", "Request Limit Delta", self.req_lim_delta);
            dissect_tag(t, self.tag);
            t.dec(
                "max_it_iu_len",
                "Max Initiator to Target IU Length",
                self.max_it_iu_len,
            );
            t.dec(
                "max_ti_iu_len",
                "Max Target to Initiator IU Length",
                self.max_ti_iu_len,
            );
            dissect_buf_fmt(t, "buf_fmt", "Supported Buffer Formats", self.buf_fmt);
            t.hex("rsp_flags", "Response Flags", self.rsp_flags, 2);
            let mcr = self.multichannel_result();
            t.code("multichannel_result", "Multi-Channel Result", mcr.0, mcr);
            t.flag(
                "immed_supported",
                "Immediate Data Supported",
                self.immediate_supported(),
            );
        });
    }
}

// ---------------------------------------------------------------------------------------------
// SRP_LOGIN_REJ (32 bytes)
// ---------------------------------------------------------------------------------------------

/// Field offsets of `struct srp_login_rej` (32 bytes).
pub mod login_rej_field {
    pub const OPCODE: usize = 0;
    pub const REASON: usize = 4;
    pub const TAG: usize = 8;
    pub const BUF_FMT: usize = 24;
    pub const LEN: usize = 32;
}

min_view!(
    /// A view of the 32-byte SRP_LOGIN_REJ carried in a CM REJ (reason 28).
    LoginRejPacket,
    login_rej_field::LEN,
    "srp.login_rej"
);

be_fields!(LoginRejPacket {
    opcode, set_opcode: u8 @ login_rej_field::OPCODE;
    reason_raw, set_reason_raw: u32 @ login_rej_field::REASON;
    tag, set_tag: u64 @ login_rej_field::TAG;
    buf_fmt, set_buf_fmt: u16 @ login_rej_field::BUF_FMT;
});

iu_view!(
    LoginRejPacket,
    Opcode::LOGIN_REJ,
    login_rej_field::OPCODE,
    "srp.login_rej"
);

impl<T: AsRef<[u8]>> LoginRejPacket<T> {
    pub fn reason(&self) -> LoginRejReason {
        LoginRejReason(self.reason_raw())
    }
}

/// A login reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoginRejRepr {
    pub reason: LoginRejReason,
    pub tag: u64,
    /// SUPPORTED BUFFER FORMATS (ib_srpt: direct | indirect).
    pub buf_fmt: u16,
}

impl LoginRejRepr {
    pub fn parse(buf: &[u8]) -> Result<LoginRejRepr> {
        let p = LoginRejPacket::parse_iu(buf)?;
        Ok(LoginRejRepr {
            reason: p.reason(),
            tag: p.tag(),
            buf_fmt: p.buf_fmt(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        login_rej_field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = LoginRejPacket::emit_iu(buf, self.buffer_len());
        p.set_reason_raw(self.reason.0);
        p.set_tag(self.tag);
        p.set_buf_fmt(self.buf_fmt);
    }

    to_bytes!();
}

impl Dissect for LoginRejRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_login_rej", "SRP_LOGIN_REJ", |t| {
            t.code_hex(
                "opcode",
                "Opcode",
                Opcode::LOGIN_REJ.0,
                2,
                Opcode::LOGIN_REJ,
            );
            t.code_hex("reason", "Reason", self.reason.0, 8, self.reason);
            dissect_tag(t, self.tag);
            dissect_buf_fmt(t, "buf_fmt", "Supported Buffer Formats", self.buf_fmt);
        });
    }
}
