//! SIDR_REQ — Service ID Resolution Request (IBTA Vol 1 table 119; kernel `CM_SIDR_REQ_*`).
//!
//! ```text
//! off  field
//!   0  Request ID (32)
//!   4  Partition Key (16) | reserved (16)
//!   8  Service ID (64)
//!  16  Private Data (216 bytes; RDMA CM puts its 36-byte IP header first)
//! ```
//!
//! tshark does not decode SIDR ("Dissector Not Implemented"); labels follow IBTA, and the
//! service ID and IP header use the REQ's tshark labels.

use super::{CM_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};
use crate::rdma_cm;

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const REQUEST_ID: Bits = Bits::new(0, 0, 32);
    pub const PARTITION_KEY: Bits = Bits::new(4, 0, 16);
    pub const SERVICE_ID: Bits = Bits::new(8, 0, 64);
    pub const PRIVATE_DATA: Field = 16..232;
}

fixed_view! {
    /// A view of a SIDR_REQ (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.sidr_req");
}

bit_accessors! {
    request_id / set_request_id: u32 = fields::REQUEST_ID;
    partition_key / set_partition_key: u16 = fields::PARTITION_KEY;
    service_id / set_service_id: u64 = fields::SERVICE_ID;
}

cm_message!();

/// A decoded SIDR_REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub request_id: u32,
    pub partition_key: u16,
    pub service_id: u64,
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            request_id: p.request_id(),
            partition_key: p.partition_key(),
            service_id: p.service_id(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the SIDR_REQ into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.sidr_req: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_request_id(self.request_id);
        p.set_partition_key(self.partition_key);
        p.set_service_id(self.service_id);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }

    /// The RDMA CM IP header at the start of the private data, if the service ID is in an
    /// RDMA CM IP port space.
    pub fn ip_cm_header(&self) -> Option<rdma_cm::IpCmHeader> {
        rdma_cm::ip_private_data(self.service_id, &self.private_data).map(|(h, _)| h)
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_sidr_req", "CM ServiceIDResReq", |t| {
            t.hex("request_id", "Request ID", self.request_id, 8);
            t.hex("partition_key", "Partition Key", self.partition_key, 4);
            t.hex("service_id", "ServiceID", self.service_id, 16);
            rdma_cm::dissect_service_id(t, self.service_id);
            t.bytes("private_data", "PrivateData", &self.private_data);
            rdma_cm::dissect_private_data(t, self.service_id, &self.private_data);
        });
    }
}
