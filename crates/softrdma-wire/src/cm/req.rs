//! REQ — Request for Communication (IBTA Vol 1 table 106; kernel `CM_REQ_*` in
//! `include/rdma/ibta_vol1_c12.h`, ECE vendor ID from the 2020 "Add ECE bits" patch).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  reserved (8) | Vendor ID (24, ECE)
//!   8  Service ID (64)
//!  16  Local CA GUID (64)
//!  24  reserved (32)
//!  28  Local Q_Key (32)
//!  32  Local QPN (24) | Responder Resources (8)
//!  36  Local EECN (24) | Initiator Depth (8)
//!  40  Remote EECN (24) | Remote CM Response Timeout (5) Transport Service Type (2) E2E FC (1)
//!  44  Starting PSN (24) | Local CM Response Timeout (5) Retry Count (3)
//!  48  Partition Key (16) | Path MTU (4) RDC Exists (1) RNR Retry Count (3)
//!                         | Max CM Retries (4) SRQ (1) Extended Transport Type (3)
//!  52  primary path: local LID, remote LID, local GID (56), remote GID (72),
//!      88 Flow Label (20) | reserved (6) | Packet Rate (6, low bits of byte 91),
//!      92 Traffic Class, 93 Hop Limit, 94 SL (4) Subnet Local (1), 95 Local ACK Timeout (5)
//!  96  alternate path, same layout (+44); byte 139 bit 5: SAP Supported
//! 140  Private Data (92 bytes)
//! ```
//!
//! tshark (3.x/4.x) splits bytes 88..92 as a 20-bit flow label starting one byte early,
//! 6 reserved bits and a 6-bit packet rate, and so prints the wrong flow label and rate for
//! every REQ (e.g. h_req_single: bytes `c5 88 b0 00` are flow label 0xc588b, rate 0; tshark
//! says 0x00c58 / 0x05). We follow IBTA and the kernel (`CM_REQ_PRIMARY_FLOW_LABEL` =
//! `CM_FIELD32_LOC(88, 20)`, `CM_REQ_PRIMARY_PACKET_RATE` = `CM_FIELD_BLOC(91, 2, 6)`).

use super::{
    ExtendedTransportType, Path, PathLayout, PathMtu, TransportType, ALTERNATE_KEYS, CM_DATA_LEN,
    PRIMARY_KEYS, REQ_PRIVATE_DATA_LEN,
};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};
use crate::rdma_cm;
use crate::types::Guid;

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field, PathLayout};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const VENDOR_ID: Bits = Bits::new(5, 0, 24);
    pub const SERVICE_ID: Bits = Bits::new(8, 0, 64);
    pub const LOCAL_CA_GUID: Bits = Bits::new(16, 0, 64);
    pub const LOCAL_QKEY: Bits = Bits::new(28, 0, 32);
    pub const LOCAL_QPN: Bits = Bits::new(32, 0, 24);
    pub const RESPONDER_RESOURCES: Bits = Bits::new(35, 0, 8);
    pub const LOCAL_EECN: Bits = Bits::new(36, 0, 24);
    pub const INITIATOR_DEPTH: Bits = Bits::new(39, 0, 8);
    pub const REMOTE_EECN: Bits = Bits::new(40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Bits = Bits::new(43, 0, 5);
    pub const TRANSPORT_SERVICE_TYPE: Bits = Bits::new(43, 5, 2);
    pub const END_TO_END_FLOW_CONTROL: Bits = Bits::new(43, 7, 1);
    pub const STARTING_PSN: Bits = Bits::new(44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Bits = Bits::new(47, 0, 5);
    pub const RETRY_COUNT: Bits = Bits::new(47, 5, 3);
    pub const PARTITION_KEY: Bits = Bits::new(48, 0, 16);
    pub const PATH_MTU: Bits = Bits::new(50, 0, 4);
    pub const RDC_EXISTS: Bits = Bits::new(50, 4, 1);
    pub const RNR_RETRY_COUNT: Bits = Bits::new(50, 5, 3);
    pub const MAX_CM_RETRIES: Bits = Bits::new(51, 0, 4);
    pub const SRQ: Bits = Bits::new(51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: Bits = Bits::new(51, 5, 3);
    pub const SAP_SUPPORTED: Bits = Bits::new(139, 5, 1);
    pub const PRIVATE_DATA: Field = 140..232;

    const fn path(base: usize) -> PathLayout {
        PathLayout {
            local_lid: Bits::new(base, 0, 16),
            remote_lid: Bits::new(base + 2, 0, 16),
            local_gid: base + 4,
            remote_gid: base + 20,
            flow_label: Bits::new(base + 36, 0, 20),
            packet_rate: Bits::new(base + 39, 2, 6),
            traffic_class: Bits::new(base + 40, 0, 8),
            hop_limit: Bits::new(base + 41, 0, 8),
            sl: Bits::new(base + 42, 0, 4),
            subnet_local: Bits::new(base + 42, 4, 1),
            local_ack_timeout: Bits::new(base + 43, 0, 5),
        }
    }
    pub(crate) const PRIMARY_PATH: PathLayout = path(52);
    pub(crate) const ALTERNATE_PATH: PathLayout = path(96);
}

fixed_view! {
    /// A view of a REQ (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.req");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    /// ECE vendor ID (24 bits).
    vendor_id / set_vendor_id: u32 = fields::VENDOR_ID;
    service_id / set_service_id: u64 = fields::SERVICE_ID;
    local_ca_guid / set_local_ca_guid: u64 = fields::LOCAL_CA_GUID;
    local_qkey / set_local_qkey: u32 = fields::LOCAL_QKEY;
    local_qpn / set_local_qpn: u32 = fields::LOCAL_QPN;
    responder_resources / set_responder_resources: u8 = fields::RESPONDER_RESOURCES;
    local_eecn / set_local_eecn: u32 = fields::LOCAL_EECN;
    initiator_depth / set_initiator_depth: u8 = fields::INITIATOR_DEPTH;
    remote_eecn / set_remote_eecn: u32 = fields::REMOTE_EECN;
    remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = fields::REMOTE_CM_RESPONSE_TIMEOUT;
    transport_service_type / set_transport_service_type: u8 = fields::TRANSPORT_SERVICE_TYPE;
    end_to_end_flow_control / set_end_to_end_flow_control: bool = fields::END_TO_END_FLOW_CONTROL;
    starting_psn / set_starting_psn: u32 = fields::STARTING_PSN;
    local_cm_response_timeout / set_local_cm_response_timeout: u8 = fields::LOCAL_CM_RESPONSE_TIMEOUT;
    retry_count / set_retry_count: u8 = fields::RETRY_COUNT;
    partition_key / set_partition_key: u16 = fields::PARTITION_KEY;
    path_mtu / set_path_mtu: u8 = fields::PATH_MTU;
    rdc_exists / set_rdc_exists: bool = fields::RDC_EXISTS;
    rnr_retry_count / set_rnr_retry_count: u8 = fields::RNR_RETRY_COUNT;
    max_cm_retries / set_max_cm_retries: u8 = fields::MAX_CM_RETRIES;
    srq / set_srq: bool = fields::SRQ;
    extended_transport_type / set_extended_transport_type: u8 = fields::EXTENDED_TRANSPORT_TYPE;
    sap_supported / set_sap_supported: bool = fields::SAP_SUPPORTED;
}

cm_message!();

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn primary_path(&self) -> Path {
        fields::PRIMARY_PATH.read(self.buffer.as_ref())
    }

    pub fn alternate_path(&self) -> Path {
        fields::ALTERNATE_PATH.read(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_primary_path(&mut self, p: &Path) {
        fields::PRIMARY_PATH.write(self.buffer.as_mut(), p)
    }

    pub fn set_alternate_path(&mut self, p: &Path) {
        fields::ALTERNATE_PATH.write(self.buffer.as_mut(), p)
    }
}

/// A decoded REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits at byte 5).
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: Guid,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits: 4.096 µs × 2^value.
    pub remote_cm_response_timeout: u8,
    pub transport_service_type: TransportType,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub partition_key: u16,
    pub path_mtu: PathMtu,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: ExtendedTransportType,
    pub primary_path: Path,
    pub alternate_path: Path,
    pub sap_supported: bool,
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            vendor_id: p.vendor_id(),
            service_id: p.service_id(),
            local_ca_guid: Guid(p.local_ca_guid()),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport_service_type: TransportType(p.transport_service_type()),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            starting_psn: p.starting_psn(),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            partition_key: p.partition_key(),
            path_mtu: PathMtu(p.path_mtu()),
            rdc_exists: p.rdc_exists(),
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq(),
            extended_transport_type: ExtendedTransportType(p.extended_transport_type()),
            primary_path: p.primary_path(),
            alternate_path: p.alternate_path(),
            sap_supported: p.sap_supported(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the REQ into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.req: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_vendor_id(self.vendor_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid.0);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport_service_type(self.transport_service_type.0);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_starting_psn(self.starting_psn);
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_partition_key(self.partition_key);
        p.set_path_mtu(self.path_mtu.0);
        p.set_rdc_exists(self.rdc_exists);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq);
        p.set_extended_transport_type(self.extended_transport_type.0);
        p.set_primary_path(&self.primary_path);
        p.set_alternate_path(&self.alternate_path);
        p.set_sap_supported(self.sap_supported);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }

    /// The RDMA CM IP header at the start of the private data, if the service ID is in an
    /// RDMA CM IP port space (see [`rdma_cm::ip_private_data`]).
    pub fn ip_cm_header(&self) -> Option<rdma_cm::IpCmHeader> {
        rdma_cm::ip_private_data(self.service_id, &self.private_data).map(|(h, _)| h)
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_req", "CM ConnectRequest", |t| {
            t.hex(
                "local_comm_id",
                "Local Communication ID",
                self.local_comm_id,
                8,
            );
            t.hex("vendor_id", "Vendor ID", self.vendor_id, 6);
            t.hex("service_id", "ServiceID", self.service_id, 16);
            rdma_cm::dissect_service_id(t, self.service_id);
            t.hex("local_ca_guid", "Local CA GUID", self.local_ca_guid.0, 16);
            t.hex("local_qkey", "Local Q_Key", self.local_qkey, 8);
            t.hex("local_qpn", "Local QPN", self.local_qpn, 6);
            t.hex(
                "responder_resources",
                "Responder Resources",
                self.responder_resources,
                2,
            );
            t.hex("local_eecn", "Local EECN", self.local_eecn, 6);
            t.hex(
                "initiator_depth",
                "Initiator Depth",
                self.initiator_depth,
                2,
            );
            t.hex("remote_eecn", "Remote EECN", self.remote_eecn, 6);
            t.hex(
                "remote_cm_response_timeout",
                "Remote CM Response Timeout",
                self.remote_cm_response_timeout,
                2,
            );
            t.code_hex(
                "transport_service_type",
                "Transport Service Type",
                self.transport_service_type.0,
                1,
                self.transport_service_type,
            );
            t.flag(
                "end_to_end_flow_control",
                "End-to-End Flow Control",
                self.end_to_end_flow_control,
            );
            t.hex("starting_psn", "Starting PSN", self.starting_psn, 6);
            t.hex(
                "local_cm_response_timeout",
                "Local CM Response Timeout",
                self.local_cm_response_timeout,
                2,
            );
            t.hex("retry_count", "Retry Count", self.retry_count, 1);
            t.hex("partition_key", "Partition Key", self.partition_key, 4);
            t.code_hex(
                "path_mtu",
                "Path Packet Payload MTU",
                self.path_mtu.0,
                1,
                self.path_mtu,
            );
            t.flag("rdc_exists", "RDC Exists", self.rdc_exists);
            t.hex(
                "rnr_retry_count",
                "RNR Retry Count",
                self.rnr_retry_count,
                1,
            );
            t.hex("max_cm_retries", "Max CM Retries", self.max_cm_retries, 1);
            t.flag("srq", "SRQ", self.srq);
            t.code_hex(
                "extended_transport_type",
                "Extended Transport",
                self.extended_transport_type.0,
                1,
                self.extended_transport_type,
            );
            self.primary_path.dissect(t, &PRIMARY_KEYS);
            self.alternate_path.dissect(t, &ALTERNATE_KEYS);
            t.flag("sap_supported", "SAP Supported", self.sap_supported);
            t.bytes("private_data", "PrivateData", &self.private_data);
            rdma_cm::dissect_private_data(t, self.service_id, &self.private_data);
        });
    }
}
