//! DREP — Reply to Request for Communication Release (IBTA Vol 1 table 113; kernel
//! `CM_DREP_*`).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Private Data (224 bytes)
//! ```

use super::{dissect_comm_ids, CM_DATA_LEN, DREP_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const PRIVATE_DATA: Field = 8..232;
}

fixed_view! {
    /// A view of a DREP (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.drep");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
}

cm_message!();

/// A decoded DREP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the DREP into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.drep: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_drep", "CM DisconnectReply", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
