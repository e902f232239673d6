//! MRA — Message Receipt Acknowledgement (IBTA Vol 1 table 107; kernel `CM_MRA_*`).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Message MRAed (2) | reserved (6)
//!   9  Service Timeout (5) | reserved (3)
//!  10  Private Data (222 bytes)
//! ```
//!
//! tshark does not decode the MRA ("Dissector Not Implemented"); labels follow IBTA.

use super::{dissect_comm_ids, MraMessage, CM_DATA_LEN, MRA_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const MESSAGE_MRAED: Bits = Bits::new(8, 0, 2);
    pub const SERVICE_TIMEOUT: Bits = Bits::new(9, 0, 5);
    pub const PRIVATE_DATA: Field = 10..232;
}

fixed_view! {
    /// A view of a MRA (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.mra");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    message_mraed / set_message_mraed: u8 = fields::MESSAGE_MRAED;
    service_timeout / set_service_timeout: u8 = fields::SERVICE_TIMEOUT;
}

cm_message!();

/// A decoded MRA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MraMessage,
    /// 5 bits: 4.096 µs × 2^value (the kernel's rdma_cm sends 24, ~68.7 s).
    pub service_timeout: u8,
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: MraMessage(p.message_mraed()),
            service_timeout: p.service_timeout(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the MRA into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.mra: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed.0);
        p.set_service_timeout(self.service_timeout);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_mra", "CM MsgRcptAck", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.code_hex(
                "message_mraed",
                "Message MRAed",
                self.message_mraed.0,
                1,
                self.message_mraed,
            );
            t.hex(
                "service_timeout",
                "Service Timeout",
                self.service_timeout,
                2,
            );
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
