//! SCSI RDMA Protocol information units (T10 SRP rev 16a, with the SRP-2 immediate-data
//! additions), as Linux speaks them: `include/scsi/srp.h`, `drivers/infiniband/ulp/srp/ib_srp.c`
//! (initiator) and `drivers/infiniband/ulp/srpt/ib_srpt.c` (target).
//!
//! Every IU starts with its opcode in byte 0 — except the RDMA CM form of the login request
//! (`srp_login_req_rdma`), which reorders the fields so that it fits the 56 bytes the RDMA CM
//! leaves in a REQ's private data, and carries its opcode in byte 11.
//!
//! Tags are opaque 8-byte values the initiator picks and the target echoes. Linux writes them
//! in host byte order (`cmd->tag = tag` on a `u64`), so on x86 the IU with tag 0x28 carries the
//! bytes `28 00 00 00 00 00 00 00`; we read every 8-byte field big-endian, uniformly, so that
//! tag reads as `0x2800_0000_0000_0000`. Echoing it back re-emits the same bytes.

use crate::dissect::{Dissect, Tree};
use crate::{Error, Result};

/// The framing every SRP IU's `parse` and `emit` share, as two constructors on its view
/// (`$pkt`, made with `min_view!` and `be_fields!` with an `opcode` field at `$off`):
/// `parse_iu` checks the fixed part's length, then that byte `$off` is the IU type `$op`
/// (the error names `"$what.opcode"`); `emit_iu` checks the buffer is exactly `len` bytes,
/// zeroes it (reserved bytes are zero) and writes the IU type.
macro_rules! iu_view {
    ($pkt:ident, $op:expr, $off:expr, $what:literal) => {
        impl<'a> $pkt<&'a [u8]> {
            pub(crate) fn parse_iu(buf: &'a [u8]) -> $crate::Result<Self> {
                let p = $pkt::new_checked(buf)?;
                $crate::srp::expect_opcode(buf, $off, $op, concat!($what, ".opcode"))?;
                Ok(p)
            }
        }

        impl<'a> $pkt<&'a mut [u8]> {
            pub(crate) fn emit_iu(buf: &'a mut [u8], len: usize) -> Self {
                assert_eq!(buf.len(), len, concat!($what, ": emit buffer length"));
                buf.fill(0);
                let mut p = $pkt::new_unchecked(buf);
                p.set_opcode($op.0);
                p
            }
        }
    };
}

/// A `Repr` for a 16-byte IU that carries only an opcode and a tag (SRP_I_LOGOUT,
/// SRP_CRED_RSP, SRP_AER_RSP), read and written through `TagOnlyPacket`: `$what` names it
/// in emit's panic, `$op_what` in the opcode error; `$key`/`$label` are its dissect subtree.
macro_rules! tag_only_repr {
    ($(#[$m:meta])* $name:ident, $op:expr, $what:expr, $op_what:expr, $key:expr, $label:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            pub tag: u64,
        }

        impl $name {
            pub fn parse(buf: &[u8]) -> Result<$name> {
                let p = TagOnlyPacket::new_checked(buf)?;
                expect_opcode(buf, field::OPCODE, $op, $op_what)?;
                Ok($name { tag: p.tag() })
            }

            pub fn buffer_len(&self) -> usize {
                field::LEN
            }

            pub fn emit(&self, buf: &mut [u8]) {
                assert_eq!(buf.len(), self.buffer_len(), concat!($what, ": emit buffer length"));
                buf.fill(0);
                let mut p = TagOnlyPacket::new_unchecked(buf);
                p.set_opcode($op.0);
                p.set_tag(self.tag);
            }

            to_bytes!();
        }

        impl Dissect for $name {
            fn dissect(&self, t: &mut Tree) {
                t.subtree($key, $label, |t| {
                    t.code_hex("opcode", "Opcode", $op.0, 2, $op);
                    dissect_tag(t, self.tag);
                });
            }
        }
    };
}

pub mod cmd;
pub mod cred_aer;
pub mod login;
pub mod logout;
pub mod rsp;
pub mod tsk_mgmt;

#[cfg(test)]
pub(crate) mod tests;

pub use cmd::{
    DataDescriptor, DirectBuf, ImmBuf, IndirectBuf, Packet as CmdPacket, Repr as CmdRepr, TaskAttr,
    DATA_DESC_DIRECT, DATA_DESC_IMM, DATA_DESC_INDIRECT, NO_DATA_DESC,
};
pub use cred_aer::{
    AerReqPacket, AerReqRepr, AerRspRepr, CredReqPacket, CredReqRepr, CredRspRepr, TagOnlyPacket,
};
pub use login::{
    LoginRejPacket, LoginRejReason, LoginRejRepr, LoginReqPacket, LoginReqRdmaPacket,
    LoginReqRdmaRepr, LoginReqRepr, LoginRspPacket, LoginRspRepr, BUF_FORMAT_DIRECT,
    BUF_FORMAT_INDIRECT, IMMED_REQUESTED, LOGIN_RSP_IMMED_SUPP,
};
pub use logout::{ILogoutRepr, TLogoutPacket, TLogoutReason, TLogoutRepr};
pub use rsp::{Packet as RspPacket, Repr as RspRepr, RspCode, RspFlags};
pub use tsk_mgmt::{Packet as TskMgmtPacket, Repr as TskMgmtRepr, TaskMgmtFunction};

code_point! {
    /// The IU type in byte 0 of every IU (SRP r16a table 7; `include/scsi/srp.h`).
    pub struct Opcode(u8) {
        LOGIN_REQ = 0x00 => "SRP_LOGIN_REQ",
        TSK_MGMT = 0x01 => "SRP_TSK_MGMT",
        CMD = 0x02 => "SRP_CMD",
        I_LOGOUT = 0x03 => "SRP_I_LOGOUT",
        LOGIN_RSP = 0xc0 => "SRP_LOGIN_RSP",
        RSP = 0xc1 => "SRP_RSP",
        LOGIN_REJ = 0xc2 => "SRP_LOGIN_REJ",
        T_LOGOUT = 0x80 => "SRP_T_LOGOUT",
        CRED_REQ = 0x81 => "SRP_CRED_REQ",
        AER_REQ = 0x82 => "SRP_AER_REQ",
        CRED_RSP = 0x41 => "SRP_CRED_RSP",
        AER_RSP = 0x42 => "SRP_AER_RSP",
    }
}

/// Checks that byte `off` of `buf` holds `want` (the IU type), naming `what` otherwise.
pub(crate) fn expect_opcode(
    buf: &[u8],
    off: usize,
    want: Opcode,
    what: &'static str,
) -> Result<()> {
    match buf.get(off) {
        None => Err(Error::Truncated {
            what,
            need: off + 1,
            got: buf.len(),
        }),
        Some(&b) if b == want.0 => Ok(()),
        Some(&b) => Err(Error::BadValue {
            field: what,
            value: u64::from(b),
        }),
    }
}

/// Writes an 8-byte tag into a dissection tree.
pub(crate) fn dissect_tag(t: &mut Tree, tag: u64) {
    t.hex("tag", "Tag", tag, 16);
}

/// Any SRP information unit, dispatched on its opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SrpIu {
    LoginReq(LoginReqRepr),
    /// The RDMA CM form of the login request (opcode in byte 11); never produced by
    /// [`SrpIu::parse`], only by [`SrpIu::parse_login_req_rdma`].
    LoginReqRdma(LoginReqRdmaRepr),
    LoginRsp(LoginRspRepr),
    LoginRej(LoginRejRepr),
    ILogout(ILogoutRepr),
    TLogout(TLogoutRepr),
    TskMgmt(TskMgmtRepr),
    Cmd(CmdRepr),
    Rsp(RspRepr),
    CredReq(CredReqRepr),
    CredRsp(CredRspRepr),
    AerReq(AerReqRepr),
    AerRsp(AerRspRepr),
    /// An IU type SRP does not define: the opcode and the whole IU, kept as is.
    Unknown {
        opcode: Opcode,
        data: Vec<u8>,
    },
}

impl SrpIu {
    /// Parses an IU whose opcode is in byte 0 (everything sent over an RC SEND, the IB CM
    /// login request, and the login response/reject in REP/REJ private data).
    pub fn parse(buf: &[u8]) -> Result<SrpIu> {
        let op = match buf.first() {
            Some(&b) => Opcode(b),
            None => {
                return Err(Error::Truncated {
                    what: "srp.opcode",
                    need: 1,
                    got: 0,
                })
            }
        };
        Ok(match op {
            Opcode::LOGIN_REQ => SrpIu::LoginReq(LoginReqRepr::parse(buf)?),
            Opcode::TSK_MGMT => SrpIu::TskMgmt(TskMgmtRepr::parse(buf)?),
            Opcode::CMD => SrpIu::Cmd(CmdRepr::parse(buf)?),
            Opcode::I_LOGOUT => SrpIu::ILogout(ILogoutRepr::parse(buf)?),
            Opcode::LOGIN_RSP => SrpIu::LoginRsp(LoginRspRepr::parse(buf)?),
            Opcode::RSP => SrpIu::Rsp(RspRepr::parse(buf)?),
            Opcode::LOGIN_REJ => SrpIu::LoginRej(LoginRejRepr::parse(buf)?),
            Opcode::T_LOGOUT => SrpIu::TLogout(TLogoutRepr::parse(buf)?),
            Opcode::CRED_REQ => SrpIu::CredReq(CredReqRepr::parse(buf)?),
            Opcode::AER_REQ => SrpIu::AerReq(AerReqRepr::parse(buf)?),
            Opcode::CRED_RSP => SrpIu::CredRsp(CredRspRepr::parse(buf)?),
            Opcode::AER_RSP => SrpIu::AerRsp(AerRspRepr::parse(buf)?),
            _ => SrpIu::Unknown {
                opcode: op,
                data: buf.to_vec(),
            },
        })
    }

    /// Parses the RDMA CM login request (`srp_login_req_rdma`, opcode in byte 11), as found
    /// after the 36-byte RDMA CM header in a REQ's private data.
    pub fn parse_login_req_rdma(buf: &[u8]) -> Result<SrpIu> {
        Ok(SrpIu::LoginReqRdma(LoginReqRdmaRepr::parse(buf)?))
    }

    /// The IU type.
    pub fn opcode(&self) -> Opcode {
        match self {
            SrpIu::LoginReq(_) | SrpIu::LoginReqRdma(_) => Opcode::LOGIN_REQ,
            SrpIu::LoginRsp(_) => Opcode::LOGIN_RSP,
            SrpIu::LoginRej(_) => Opcode::LOGIN_REJ,
            SrpIu::ILogout(_) => Opcode::I_LOGOUT,
            SrpIu::TLogout(_) => Opcode::T_LOGOUT,
            SrpIu::TskMgmt(_) => Opcode::TSK_MGMT,
            SrpIu::Cmd(_) => Opcode::CMD,
            SrpIu::Rsp(_) => Opcode::RSP,
            SrpIu::CredReq(_) => Opcode::CRED_REQ,
            SrpIu::CredRsp(_) => Opcode::CRED_RSP,
            SrpIu::AerReq(_) => Opcode::AER_REQ,
            SrpIu::AerRsp(_) => Opcode::AER_RSP,
            SrpIu::Unknown { opcode, .. } => *opcode,
        }
    }

    /// The IU's tag (every SRP IU has one, at byte 8 — byte 0 of the RDMA CM login form).
    pub fn tag(&self) -> Option<u64> {
        Some(match self {
            SrpIu::LoginReq(r) => r.tag,
            SrpIu::LoginReqRdma(r) => r.tag,
            SrpIu::LoginRsp(r) => r.tag,
            SrpIu::LoginRej(r) => r.tag,
            SrpIu::ILogout(r) => r.tag,
            SrpIu::TLogout(r) => r.tag,
            SrpIu::TskMgmt(r) => r.tag,
            SrpIu::Cmd(r) => r.tag,
            SrpIu::Rsp(r) => r.tag,
            SrpIu::CredReq(r) => r.tag,
            SrpIu::CredRsp(r) => r.tag,
            SrpIu::AerReq(r) => r.tag,
            SrpIu::AerRsp(r) => r.tag,
            SrpIu::Unknown { data, .. } => {
                if data.len() >= 16 {
                    crate::field::read_u64(data, 8)
                } else {
                    return None;
                }
            }
        })
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            SrpIu::LoginReq(r) => r.buffer_len(),
            SrpIu::LoginReqRdma(r) => r.buffer_len(),
            SrpIu::LoginRsp(r) => r.buffer_len(),
            SrpIu::LoginRej(r) => r.buffer_len(),
            SrpIu::ILogout(r) => r.buffer_len(),
            SrpIu::TLogout(r) => r.buffer_len(),
            SrpIu::TskMgmt(r) => r.buffer_len(),
            SrpIu::Cmd(r) => r.buffer_len(),
            SrpIu::Rsp(r) => r.buffer_len(),
            SrpIu::CredReq(r) => r.buffer_len(),
            SrpIu::CredRsp(r) => r.buffer_len(),
            SrpIu::AerReq(r) => r.buffer_len(),
            SrpIu::AerRsp(r) => r.buffer_len(),
            SrpIu::Unknown { data, .. } => data.len(),
        }
    }

    /// Emits the IU into `buf`, exactly `buffer_len()` long.
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            SrpIu::LoginReq(r) => r.emit(buf),
            SrpIu::LoginReqRdma(r) => r.emit(buf),
            SrpIu::LoginRsp(r) => r.emit(buf),
            SrpIu::LoginRej(r) => r.emit(buf),
            SrpIu::ILogout(r) => r.emit(buf),
            SrpIu::TLogout(r) => r.emit(buf),
            SrpIu::TskMgmt(r) => r.emit(buf),
            SrpIu::Cmd(r) => r.emit(buf),
            SrpIu::Rsp(r) => r.emit(buf),
            SrpIu::CredReq(r) => r.emit(buf),
            SrpIu::CredRsp(r) => r.emit(buf),
            SrpIu::AerReq(r) => r.emit(buf),
            SrpIu::AerRsp(r) => r.emit(buf),
            SrpIu::Unknown { data, .. } => buf.copy_from_slice(data),
        }
    }

    to_bytes!();
}

impl Dissect for SrpIu {
    fn dissect(&self, t: &mut Tree) {
        match self {
            SrpIu::LoginReq(r) => r.dissect(t),
            SrpIu::LoginReqRdma(r) => r.dissect(t),
            SrpIu::LoginRsp(r) => r.dissect(t),
            SrpIu::LoginRej(r) => r.dissect(t),
            SrpIu::ILogout(r) => r.dissect(t),
            SrpIu::TLogout(r) => r.dissect(t),
            SrpIu::TskMgmt(r) => r.dissect(t),
            SrpIu::Cmd(r) => r.dissect(t),
            SrpIu::Rsp(r) => r.dissect(t),
            SrpIu::CredReq(r) => r.dissect(t),
            SrpIu::CredRsp(r) => r.dissect(t),
            SrpIu::AerReq(r) => r.dissect(t),
            SrpIu::AerRsp(r) => r.dissect(t),
            SrpIu::Unknown { opcode, data } => t.subtree("srp", "SCSI RDMA Protocol", |t| {
                t.code_hex("opcode", "Opcode", opcode.0, 2, opcode);
                t.bytes("data", "Data", data);
            }),
        }
    }
}
