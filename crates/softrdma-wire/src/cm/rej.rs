//! REJ — Reject (IBTA Vol 1 table 108; kernel `CM_REJ_*`).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Message REJected (2) | reserved (6)
//!   9  Reject Info Length (7) | reserved (1)
//!  10  Reason (16)
//!  12  Additional Reject Information (72 bytes; the first "Reject Info Length" are valid)
//!  84  Private Data (148 bytes)
//! ```

use super::{dissect_comm_ids, RejMessage, RejectReason, CM_DATA_LEN, REJ_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const MESSAGE_REJECTED: Bits = Bits::new(8, 0, 2);
    pub const REJECT_INFO_LENGTH: Bits = Bits::new(9, 0, 7);
    pub const REASON: Bits = Bits::new(10, 0, 16);
    pub const ARI: Field = 12..84;
    pub const PRIVATE_DATA: Field = 84..232;
}

fixed_view! {
    /// A view of a REJ (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.rej");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    message_rejected / set_message_rejected: u8 = fields::MESSAGE_REJECTED;
    reject_info_length / set_reject_info_length: u8 = fields::REJECT_INFO_LENGTH;
    reason / set_reason: u16 = fields::REASON;
}

cm_message!(
    /// Additional Reject Information (ARI) (72 bytes).
    ari / ari_mut = fields::ARI
);

/// A decoded REJ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: RejMessage,
    /// 7 bits: how many ARI bytes are meaningful.
    pub reject_info_length: u8,
    pub reason: RejectReason,
    pub ari: [u8; 72],
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: RejMessage(p.message_rejected()),
            reject_info_length: p.reject_info_length(),
            reason: RejectReason(p.reason()),
            ari: field::read_array(p.buffer.as_ref(), fields::ARI.start),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the REJ into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.rej: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected.0);
        p.set_reject_info_length(self.reject_info_length);
        p.set_reason(self.reason.0);
        p.ari_mut().copy_from_slice(&self.ari);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }

    /// The meaningful part of the ARI (its first `reject_info_length` bytes, at most 72).
    pub fn ari_valid(&self) -> &[u8] {
        let n = usize::from(self.reject_info_length).min(self.ari.len());
        &self.ari[..n]
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_rej", "CM ConnectReject", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.code_hex(
                "message_rejected",
                "Message REJected",
                self.message_rejected.0,
                1,
                self.message_rejected,
            );
            t.hex(
                "reject_info_length",
                "Reject Info Length",
                self.reject_info_length,
                2,
            );
            t.code_hex("reason", "Reason", self.reason.0, 4, self.reason);
            t.bytes("ari", "Additional Reject Information (ARI)", &self.ari);
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
