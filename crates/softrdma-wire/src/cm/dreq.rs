//! DREQ — Request for Communication Release (IBTA Vol 1 table 112; kernel `CM_DREQ_*`).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Remote QPN/EECN (24) | reserved (8)
//!  12  Private Data (220 bytes)
//! ```

use super::{dissect_comm_ids, CM_DATA_LEN, DREQ_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const REMOTE_QPN_EECN: Bits = Bits::new(8, 0, 24);
    pub const PRIVATE_DATA: Field = 12..232;
}

fixed_view! {
    /// A view of a DREQ (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.dreq");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    remote_qpn_eecn / set_remote_qpn_eecn: u32 = fields::REMOTE_QPN_EECN;
}

cm_message!();

/// A decoded DREQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits.
    pub remote_qpn_eecn: u32,
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn_eecn: p.remote_qpn_eecn(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the DREQ into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.dreq: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn_eecn(self.remote_qpn_eecn);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_dreq", "CM DisconnectRequest", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.hex(
                "remote_qpn_eecn",
                "Remote QPN/EECN",
                self.remote_qpn_eecn,
                6,
            );
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
