//! SRP_I_LOGOUT and SRP_T_LOGOUT (SRP r16a §6.5–6.6; `struct srp_i_logout`, `srp_t_logout`).

use super::{cred_aer::TagOnlyPacket, dissect_tag, expect_opcode, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::Result;

code_point! {
    /// Why the target logged the initiator out (SRP r16a table 17).
    pub struct TLogoutReason(u32) {
        NO_REASON = 0 => "No reason specified",
        INACTIVE_CHANNEL = 1 => "Inactive RDMA channel (reserved for SRP initiator port use)",
        INVALID_IU_TYPE = 2 => "Invalid information unit type code received by SRP target port",
        UNEXPECTED_RESPONSE = 3 => "SRP initiator port sent response with no corresponding request",
        MULTICHANNEL_ACTION = 4 => "RDMA channel disconnected due to multi-channel action code in new login",
        UNSUPPORTED_DATA_OUT_FORMAT = 6 => "Unsupported format code value specified in the DATA-OUT BUFFER DESCRIPTOR FORMAT field",
        UNSUPPORTED_DATA_IN_FORMAT = 7 => "Unsupported format code value specified in the DATA-IN BUFFER DESCRIPTOR FORMAT field",
        INVALID_DATA_OUT_COUNT = 8 => "Invalid length for IU type: DATA-OUT BUFFER DESCRIPTOR COUNT",
        INVALID_DATA_IN_COUNT = 9 => "Invalid length for IU type: DATA-IN BUFFER DESCRIPTOR COUNT",
    }
}

/// Field offsets shared by the 16-byte IUs (opcode, tag).
pub mod field {
    pub const OPCODE: usize = 0;
    pub const SOL_NOT: usize = 1;
    pub const REASON: usize = 4;
    pub const TAG: usize = 8;
    pub const LEN: usize = 16;
}

tag_only_repr!(
    /// SRP_I_LOGOUT: the initiator ends the channel (16 bytes: opcode, 7 reserved, tag).
    ILogoutRepr,
    Opcode::I_LOGOUT,
    "srp.i_logout",
    "srp.i_logout.opcode",
    "srp_i_logout",
    "SRP_I_LOGOUT"
);

min_view!(
    /// A view of the 16-byte SRP_T_LOGOUT.
    TLogoutPacket,
    field::LEN,
    "srp.t_logout"
);

be_fields!(TLogoutPacket {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    reason_raw, set_reason_raw: u32 @ field::REASON;
    tag, set_tag: u64 @ field::TAG;
});

iu_view!(
    TLogoutPacket,
    Opcode::T_LOGOUT,
    field::OPCODE,
    "srp.t_logout"
);

/// SRP_T_LOGOUT: the target ends the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TLogoutRepr {
    /// SOLICITED NOTIFICATION (bit 0).
    pub sol_not: u8,
    pub reason: TLogoutReason,
    pub tag: u64,
}

impl TLogoutRepr {
    pub fn parse(buf: &[u8]) -> Result<TLogoutRepr> {
        let p = TLogoutPacket::parse_iu(buf)?;
        Ok(TLogoutRepr {
            sol_not: p.sol_not(),
            reason: TLogoutReason(p.reason_raw()),
            tag: p.tag(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = TLogoutPacket::emit_iu(buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_reason_raw(self.reason.0);
        p.set_tag(self.tag);
    }

    to_bytes!();
}

impl Dissect for TLogoutRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_t_logout", "SRP_T_LOGOUT", |t| {
            t.code_hex("opcode", "Opcode", Opcode::T_LOGOUT.0, 2, Opcode::T_LOGOUT);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            t.code("reason", "Reason", self.reason.0, self.reason);
            dissect_tag(t, self.tag);
        });
    }
}
