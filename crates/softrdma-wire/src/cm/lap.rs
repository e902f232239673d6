//! LAP — Load Alternate Path (IBTA Vol 1 table 115; kernel `CM_LAP_*`). The kernel parses
//! received LAPs but exposes no API to send one; no capture has one.
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  reserved (32)
//!  12  Remote QPN/EECN (24) | Remote CM Response Timeout (5) reserved (3)
//!  16  reserved (32)
//!  20  Alternate Local Port LID (16)   22 Alternate Remote Port LID (16)
//!  24  Alternate Local Port GID (128)
//!  40  Alternate Remote Port GID (128)
//!  56  Alternate Flow Label (20) | reserved (4) | 59 Alternate Traffic Class (8)
//!  60  Alternate Hop Limit (8)  61 reserved (2) Alternate Packet Rate (6)
//!  62  Alternate SL (4) Alternate Subnet Local (1) reserved (3)
//!  63  Alternate Local ACK Timeout (5) reserved (3)
//!  64  Private Data (168 bytes)
//! ```

use super::{dissect_comm_ids, CM_DATA_LEN, LAP_PRIVATE_DATA_LEN};
use super::{Path, PathLayout, ALTERNATE_KEYS};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field, PathLayout};
    pub(crate) const ALTERNATE_PATH: PathLayout = PathLayout {
        local_lid: Bits::new(20, 0, 16),
        remote_lid: Bits::new(22, 0, 16),
        local_gid: 24,
        remote_gid: 40,
        flow_label: Bits::new(56, 0, 20),
        traffic_class: Bits::new(59, 0, 8),
        hop_limit: Bits::new(60, 0, 8),
        packet_rate: Bits::new(61, 2, 6),
        sl: Bits::new(62, 0, 4),
        subnet_local: Bits::new(62, 4, 1),
        local_ack_timeout: Bits::new(63, 0, 5),
    };
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const REMOTE_QPN_EECN: Bits = Bits::new(12, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(15, 0, 5);
    pub const PRIVATE_DATA: Field = 64..232;
}

fixed_view! {
    /// A view of a LAP (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.lap");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    remote_qpn_eecn / set_remote_qpn_eecn: u32 = fields::REMOTE_QPN_EECN;
    remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = fields::REMOTE_CM_RESPONSE_TIMEOUT;
}

cm_message!();

/// A decoded LAP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits.
    pub remote_qpn_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    pub alternate_path: Path,
    pub private_data: [u8; LAP_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn_eecn: p.remote_qpn_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            alternate_path: fields::ALTERNATE_PATH.read(p.buffer.as_ref()),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the LAP into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.lap: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn_eecn(self.remote_qpn_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        fields::ALTERNATE_PATH.write(p.buffer.as_mut(), &self.alternate_path);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_lap", "CM LoadAlternatePath", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.hex(
                "remote_qpn_eecn",
                "Remote QPN/EECN",
                self.remote_qpn_eecn,
                6,
            );
            t.hex(
                "remote_cm_response_timeout",
                "Remote CM Response Timeout",
                self.remote_cm_response_timeout,
                2,
            );
            self.alternate_path.dissect(t, &ALTERNATE_KEYS);
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
