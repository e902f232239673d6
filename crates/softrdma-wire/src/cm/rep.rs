//! REP — Reply to Request for Communication (IBTA Vol 1 table 110; kernel `CM_REP_*`, ECE
//! vendor ID bytes from the 2020 "Add ECE bits" patch).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Local Q_Key (32)
//!  12  Local QPN (24) | Vendor ID H (8)
//!  16  Local EE Context Number (24) | Vendor ID M (8)
//!  20  Starting PSN (24) | Vendor ID L (8)
//!  24  Responder Resources (8)   25 Initiator Depth (8)
//!  26  Target ACK Delay (5) Failover Accepted (2) End-to-End Flow Control (1)
//!  27  RNR Retry Count (3) SRQ (1) reserved (4)
//!  28  Local CA GUID (64)
//!  36  Private Data (196 bytes)
//! ```
//!
//! tshark shows the three vendor ID bytes as "Reserved"; we show the ECE vendor ID.

use super::{dissect_comm_ids, FailoverAccepted, CM_DATA_LEN, REP_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};
use crate::types::Guid;

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const LOCAL_QKEY: Bits = Bits::new(8, 0, 32);
    pub const LOCAL_QPN: Bits = Bits::new(12, 0, 24);
    pub const VENDOR_ID_H: Bits = Bits::new(15, 0, 8);
    pub const VENDOR_ID_M: Bits = Bits::new(19, 0, 8);
    pub const VENDOR_ID_L: Bits = Bits::new(23, 0, 8);
    pub const LOCAL_EECN: Bits = Bits::new(16, 0, 24);
    pub const STARTING_PSN: Bits = Bits::new(20, 0, 24);
    pub const RESPONDER_RESOURCES: Bits = Bits::new(24, 0, 8);
    pub const INITIATOR_DEPTH: Bits = Bits::new(25, 0, 8);
    pub const TARGET_ACK_DELAY: Bits = Bits::new(26, 0, 5);
    pub const FAILOVER_ACCEPTED: Bits = Bits::new(26, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(26, 7, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(27, 0, 3);
    pub const SRQ: Bits = Bits::new(27, 3, 1);
    pub const LOCAL_CA_GUID: Bits = Bits::new(28, 0, 64);
    pub const PRIVATE_DATA: Field = 36..232;
}

fixed_view! {
    /// A view of a REP (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.rep");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
    local_qkey / set_local_qkey: u32 = fields::LOCAL_QKEY;
    local_qpn / set_local_qpn: u32 = fields::LOCAL_QPN;
    /// ECE vendor ID bits 16–23.
    vendor_id_h / set_vendor_id_h: u8 = fields::VENDOR_ID_H;
    /// ECE vendor ID bits 8–15.
    vendor_id_m / set_vendor_id_m: u8 = fields::VENDOR_ID_M;
    /// ECE vendor ID bits 0–7.
    vendor_id_l / set_vendor_id_l: u8 = fields::VENDOR_ID_L;
    local_eecn / set_local_eecn: u32 = fields::LOCAL_EECN;
    starting_psn / set_starting_psn: u32 = fields::STARTING_PSN;
    responder_resources / set_responder_resources: u8 = fields::RESPONDER_RESOURCES;
    initiator_depth / set_initiator_depth: u8 = fields::INITIATOR_DEPTH;
    target_ack_delay / set_target_ack_delay: u8 = fields::TARGET_ACK_DELAY;
    failover_accepted / set_failover_accepted: u8 = fields::FAILOVER_ACCEPTED;
    end_to_end_flow_control / set_end_to_end_flow_control: bool = fields::END_TO_END_FLOW_CONTROL;
    rnr_retry_count / set_rnr_retry_count: u8 = fields::RNR_RETRY_COUNT;
    srq / set_srq: bool = fields::SRQ;
    local_ca_guid / set_local_ca_guid: u64 = fields::LOCAL_CA_GUID;
}

cm_message!();

/// A decoded REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// ECE vendor ID (24 bits), sent as three bytes: H at 15, M at 19, L at 23.
    pub vendor_id: u32,
    /// 24 bits.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    pub failover_accepted: FailoverAccepted,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: Guid,
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            vendor_id: (u32::from(p.vendor_id_h()) << 16)
                | (u32::from(p.vendor_id_m()) << 8)
                | u32::from(p.vendor_id_l()),
            local_eecn: p.local_eecn(),
            starting_psn: p.starting_psn(),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: FailoverAccepted(p.failover_accepted()),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq(),
            local_ca_guid: Guid(p.local_ca_guid()),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the REP into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.rep: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_vendor_id_h((self.vendor_id >> 16) as u8);
        p.set_vendor_id_m((self.vendor_id >> 8) as u8);
        p.set_vendor_id_l(self.vendor_id as u8);
        p.set_local_eecn(self.local_eecn);
        p.set_starting_psn(self.starting_psn);
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted.0);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq);
        p.set_local_ca_guid(self.local_ca_guid.0);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_rep", "CM ConnectReply", |t| {
            dissect_comm_ids(t, self.local_comm_id, self.remote_comm_id);
            t.hex("local_qkey", "Local Q_Key", self.local_qkey, 8);
            t.hex("local_qpn", "Local QPN", self.local_qpn, 6);
            t.hex("vendor_id", "Vendor ID", self.vendor_id, 6);
            t.hex("local_eecn", "Local EE Context Number", self.local_eecn, 6);
            t.hex("starting_psn", "Starting PSN", self.starting_psn, 6);
            t.hex(
                "responder_resources",
                "Responder Resources",
                self.responder_resources,
                2,
            );
            t.hex(
                "initiator_depth",
                "Initiator Depth",
                self.initiator_depth,
                2,
            );
            t.hex(
                "target_ack_delay",
                "Target ACK Delay",
                self.target_ack_delay,
                2,
            );
            t.code_hex(
                "failover_accepted",
                "Failover Accepted",
                self.failover_accepted.0,
                1,
                self.failover_accepted,
            );
            t.flag(
                "end_to_end_flow_control",
                "End-To-End Flow Control",
                self.end_to_end_flow_control,
            );
            t.hex(
                "rnr_retry_count",
                "RNR Retry Count",
                self.rnr_retry_count,
                1,
            );
            t.flag("srq", "SRQ", self.srq);
            t.hex("local_ca_guid", "Local CA GUID", self.local_ca_guid.0, 16);
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
