//! APR — Alternate Path Response (IBTA Vol 1 table 116; kernel `CM_APR_*`). The kernel
//! parses received APRs but sends none; no capture has one.
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Additional Information Length (8)   9 AP Status (8)   10 reserved (16)
//!  12  Additional Information (72 bytes)
//!  84  Private Data (148 bytes)
//! ```

use super::{dissect_comm_ids, AprStatus, APR_PRIVATE_DATA_LEN, CM_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const ADDITIONAL_INFO_LENGTH: Bits = Bits::new(8, 0, 8);
    pub const AP_STATUS: Bits = Bits::new(9, 0, 8);
    pub const ADDITIONAL_INFO: Field = 12..84;
    pub const PRIVATE_DATA: Field = 84..232;
}

fixed_view! {
    /// A view of a APR (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.apr");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    additional_info_length / set_additional_info_length: u8 = fields::ADDITIONAL_INFO_LENGTH;
    ap_status / set_ap_status: u8 = fields::AP_STATUS;
}

cm_message!(
    /// Additional Information (72 bytes).
    additional_info / additional_info_mut = fields::ADDITIONAL_INFO
);

/// A decoded APR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub additional_info_length: u8,
    pub ap_status: AprStatus,
    pub additional_info: [u8; 72],
    pub private_data: [u8; APR_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            additional_info_length: p.additional_info_length(),
            ap_status: AprStatus(p.ap_status()),
            additional_info: field::read_array(p.buffer.as_ref(), fields::ADDITIONAL_INFO.start),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the APR into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.apr: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_additional_info_length(self.additional_info_length);
        p.set_ap_status(self.ap_status.0);
        p.additional_info_mut()
            .copy_from_slice(&self.additional_info);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_apr", "CM AlternatePathResponse", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.dec(
                "additional_info_length",
                "Additional Information Length",
                self.additional_info_length,
            );
            t.code_hex(
                "ap_status",
                "AP Status",
                self.ap_status.0,
                2,
                self.ap_status,
            );
            t.bytes(
                "additional_info",
                "Additional Information",
                &self.additional_info,
            );
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
