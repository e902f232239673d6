//! IB CM messages (IBTA Vol 1 ch. 12.6, tables 106–121), the class data of CM MADs
//! (management class 0x07, class version 2, method `Send()`).
//!
//! Every message is 232 bytes: the MAD data after the 24-byte common header. Field offsets
//! in this module are relative to that data, as in the IBTA tables; the kernel's
//! `include/rdma/ibta_vol1_c12.h` adds the 24 bytes of `struct ib_mad_hdr` to each (its
//! `CM_FIELD*_LOC` macros), and its `IBA_FIELD*_LOC(off, width)` means "`width` bits starting
//! at the most significant bit of byte `off`", which is exactly [`crate::field::Bits`].
//!
//! Every message keeps its whole fixed-size private data field (REQ 92, MRA 222, REJ 148,
//! REP 196, RTU 224, DREQ 220, DREP 224, SIDR_REQ 216, SIDR_REP 136, LAP 168, APR 148 bytes):
//! the CM does not carry a length, so trailing zeros are part of what was sent.
//!
//! Reserved bits are not kept by the `Repr`s: they are emitted as zero, which is what every
//! kernel capture carries (the tests check that re-emitting reproduces each captured message).

/// What every CM message shares around its own field table (invoked once in each message
/// file, after `fixed_view!` and `fields`): the view's `private_data` accessors over
/// `fields::PRIVATE_DATA`, and the `Repr`'s `with_private_data` and `Default`. "Every field
/// zero" is what an all-zero message parses to, so `with_private_data` reads one through the
/// message's own `from_packet` rather than listing the fields again.
macro_rules! cm_message {
    // With a byte field besides the private data (REJ's ARI, APR's and SIDR REP's Additional
    // Information): its accessors.
    ($(#[$doc:meta])* $get:ident / $get_mut:ident = $field:expr) => {
        cm_message!();

        impl<T: AsRef<[u8]>> Packet<T> {
            $(#[$doc])*
            pub fn $get(&self) -> &[u8] {
                &self.buffer.as_ref()[$field]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            pub fn $get_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[$field]
            }
        }
    };
    () => {
        impl<T: AsRef<[u8]>> Packet<T> {
            /// The whole private data field (`fields::PRIVATE_DATA`).
            pub fn private_data(&self) -> &[u8] {
                &self.buffer.as_ref()[fields::PRIVATE_DATA]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            pub fn private_data_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[fields::PRIVATE_DATA]
            }
        }

        impl Repr {
            /// A message with every field zero but the private data (filled from `pd`,
            /// zero-padded).
            pub fn with_private_data(pd: &[u8]) -> Repr {
                let zero = [0u8; $crate::cm::CM_DATA_LEN];
                Repr {
                    private_data: $crate::cm::pad(pd),
                    ..Repr::from_packet(&Packet::new_unchecked(&zero[..]))
                }
            }
        }

        impl Default for Repr {
            fn default() -> Repr {
                Repr::with_private_data(&[])
            }
        }
    };
}

pub mod apr;
pub mod drep;
pub mod dreq;
pub mod lap;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr_rep;
pub mod sidr_req;

pub use apr::{Packet as AprPacket, Repr as AprRepr};
pub use drep::{Packet as DrepPacket, Repr as DrepRepr};
pub use dreq::{Packet as DreqPacket, Repr as DreqRepr};
pub use lap::{Packet as LapPacket, Repr as LapRepr};
pub use mra::{Packet as MraPacket, Repr as MraRepr};
pub use rej::{Packet as RejPacket, Repr as RejRepr};
pub use rep::{Packet as RepPacket, Repr as RepRepr};
pub use req::{Packet as ReqPacket, Repr as ReqRepr};
pub use rtu::{Packet as RtuPacket, Repr as RtuRepr};
pub use sidr_rep::{Packet as SidrRepPacket, Repr as SidrRepRepr};
pub use sidr_req::{Packet as SidrReqPacket, Repr as SidrReqRepr};

use crate::dissect::{Dissect, Tree};
use crate::field::Bits;
use crate::mad::{ClassPortInfo, Mad, MadHeader, MgmtClass, MAD_DATA_LEN};
use crate::types::Gid;
use crate::{Error, Result};

/// Length of every CM message: the MAD data (256 − 24).
pub const CM_DATA_LEN: usize = MAD_DATA_LEN;
/// `IB_CM_CLASS_VERSION`.
pub const CM_CLASS_VERSION: u8 = 2;
/// The Q_Key of QP1 (`IB_QP1_QKEY`); rxe drops GSI packets with any other.
pub const QP1_QKEY: u32 = 0x8001_0000;

/// Private data sizes (`enum ib_cm_data_size`).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
pub const REJ_ARI_LEN: usize = 72;
pub const REP_PRIVATE_DATA_LEN: usize = 196;
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
pub const SIDR_REP_INFO_LEN: usize = 72;
pub const LAP_PRIVATE_DATA_LEN: usize = 168;
pub const APR_PRIVATE_DATA_LEN: usize = 148;
pub const APR_INFO_LEN: usize = 72;

/// Copies `src` into a fixed-size array, zero-padding (or cutting) it: the way a private
/// data or ARI field is filled from a shorter slice.
pub fn pad<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = src.len().min(N);
    out[..n].copy_from_slice(&src[..n]);
    out
}

/// The Local and Remote Communication IDs most CM messages start with, as tshark shows them.
pub(crate) fn dissect_comm_ids(t: &mut Tree, local: u32, remote: u32) {
    t.hex("local_comm_id", "Local Communication ID", local, 8);
    t.hex("remote_comm_id", "Remote Communication ID", remote, 8);
}

code_point! {
    /// CM attribute IDs (IBTA table 104); texts are tshark's names.
    pub struct AttrId(u16) {
        CLASS_PORT_INFO = 0x0001 => "ClassPortInfo",
        REQ = 0x0010 => "ConnectRequest",
        MRA = 0x0011 => "MsgRcptAck",
        REJ = 0x0012 => "ConnectReject",
        REP = 0x0013 => "ConnectReply",
        RTU = 0x0014 => "ReadyToUse",
        DREQ = 0x0015 => "DisconnectRequest",
        DREP = 0x0016 => "DisconnectReply",
        SIDR_REQ = 0x0017 => "ServiceIDResReq",
        SIDR_REP = 0x0018 => "ServiceIDResReqResp",
        LAP = 0x0019 => "LoadAlternatePath",
        APR = 0x001a => "AlternatePathResponse",
    }
}

code_point! {
    /// Why a REJ was sent (IBTA table 109, `enum ib_cm_rej_reason`). The texts are what
    /// `ibcm_reject_msg()` returns for each reason.
    pub struct RejectReason(u16) {
        NO_QP = 1 => "no QP",
        NO_EEC = 2 => "no EEC",
        NO_RESOURCES = 3 => "no resources",
        TIMEOUT = 4 => "timeout",
        UNSUPPORTED = 5 => "unsupported",
        INVALID_COMM_ID = 6 => "invalid comm ID",
        INVALID_COMM_INSTANCE = 7 => "invalid comm instance",
        INVALID_SERVICE_ID = 8 => "invalid service ID",
        INVALID_TRANSPORT_TYPE = 9 => "invalid transport type",
        STALE_CONN = 10 => "stale conn",
        RDC_NOT_EXIST = 11 => "RDC not exist",
        INVALID_GID = 12 => "invalid GID",
        INVALID_LID = 13 => "invalid LID",
        INVALID_SL = 14 => "invalid SL",
        INVALID_TRAFFIC_CLASS = 15 => "invalid traffic class",
        INVALID_HOP_LIMIT = 16 => "invalid hop limit",
        INVALID_PACKET_RATE = 17 => "invalid packet rate",
        INVALID_ALT_GID = 18 => "invalid alt GID",
        INVALID_ALT_LID = 19 => "invalid alt LID",
        INVALID_ALT_SL = 20 => "invalid alt SL",
        INVALID_ALT_TRAFFIC_CLASS = 21 => "invalid alt traffic class",
        INVALID_ALT_HOP_LIMIT = 22 => "invalid alt hop limit",
        INVALID_ALT_PACKET_RATE = 23 => "invalid alt packet rate",
        PORT_CM_REDIRECT = 24 => "port CM redirect",
        PORT_REDIRECT = 25 => "port redirect",
        INVALID_MTU = 26 => "invalid MTU",
        INSUFFICIENT_RESP_RESOURCES = 27 => "insufficient resp resources",
        CONSUMER_DEFINED = 28 => "consumer defined",
        INVALID_RNR_RETRY = 29 => "invalid RNR retry",
        DUPLICATE_LOCAL_COMM_ID = 30 => "duplicate local comm ID",
        INVALID_CLASS_VERSION = 31 => "invalid class version",
        INVALID_FLOW_LABEL = 32 => "invalid flow label",
        INVALID_ALT_FLOW_LABEL = 33 => "invalid alt flow label",
        VENDOR_OPTION_NOT_SUPPORTED = 35 => "vendor option is not supported",
    }
}

impl RejectReason {
    /// The kernel's `ibcm_reject_msg()`: the reason's text, or "unrecognized reason".
    pub fn message(&self) -> &'static str {
        self.description().unwrap_or("unrecognized reason")
    }
}

code_point! {
    /// Which message an MRA acknowledges (IBTA table 107, "Message MRAed").
    pub struct MraMessage(u8) {
        REQ = 0 => "REQ",
        REP = 1 => "REP",
        LAP = 2 => "LAP",
    }
}

code_point! {
    /// Which message a REJ rejects (IBTA table 108, "Message REJected"); a REJ sent for a
    /// timeout or by a destroyed id says "other".
    pub struct RejMessage(u8) {
        REQ = 0 => "REQ",
        REP = 1 => "REP",
        OTHER = 2 => "Other",
    }
}

code_point! {
    /// The REQ's transport service type (2 bits); 3 means "see the extended transport type"
    /// (1 = XRC, `cm_req_get_qp_type`).
    pub struct TransportType(u8) {
        RC = 0 => "RC",
        UC = 1 => "UC",
        RD = 2 => "RD",
        EXTENDED = 3 => "Extended",
    }
}

code_point! {
    /// The REQ's extended transport type (3 bits), valid when the service type is 3.
    pub struct ExtendedTransportType(u8) {
        NONE = 0 => "None",
        XRC = 1 => "XRC",
    }
}

code_point! {
    /// Path MTU (IBTA `enum ib_mtu`), 4 bits in the REQ.
    pub struct PathMtu(u8) {
        MTU_256 = 1 => "256",
        MTU_512 = 2 => "512",
        MTU_1024 = 3 => "1024",
        MTU_2048 = 4 => "2048",
        MTU_4096 = 5 => "4096",
    }
}

impl PathMtu {
    /// The MTU in bytes, for known values.
    pub fn bytes(&self) -> Option<u32> {
        match self.0 {
            1..=5 => Some(128u32 << self.0),
            _ => None,
        }
    }
}

code_point! {
    /// The REP's "failover accepted" (2 bits, IBTA table 110).
    pub struct FailoverAccepted(u8) {
        ACCEPTED = 0 => "Failover accepted",
        NOT_SUPPORTED = 1 => "Failover not supported",
        REJECTED = 2 => "Alternate path rejected",
    }
}

code_point! {
    /// SIDR_REP status (IBTA table 121, `enum ib_cm_sidr_status`).
    pub struct SidrStatus(u8) {
        SUCCESS = 0 => "valid",
        UNSUPPORTED = 1 => "service ID not supported",
        REJECT = 2 => "rejected by the service provider",
        NO_QP = 3 => "no QP available",
        REDIRECT = 4 => "redirect (see ClassPortInfo)",
        UNSUPPORTED_VERSION = 5 => "class version not supported",
    }
}

code_point! {
    /// APR status (IBTA table 117, `enum ib_cm_apr_status`).
    pub struct AprStatus(u8) {
        SUCCESS = 0 => "alternate path accepted",
        INVALID_COMM_ID = 1 => "invalid comm ID",
        UNSUPPORTED = 2 => "unsupported request",
        REJECT = 3 => "rejected",
        REDIRECT = 4 => "redirect (see ClassPortInfo)",
        IS_CURRENT = 5 => "path is the current path",
        INVALID_QPN_EECN = 6 => "invalid QPN/EECN",
        INVALID_LID = 7 => "invalid LID",
        INVALID_GID = 8 => "invalid GID",
        INVALID_FLOW_LABEL = 9 => "invalid flow label",
        INVALID_TCLASS = 10 => "invalid traffic class",
        INVALID_HOP_LIMIT = 11 => "invalid hop limit",
        INVALID_PACKET_RATE = 12 => "invalid packet rate",
        INVALID_SL = 13 => "invalid SL",
    }
}

/// One path as the REQ (primary, alternate) and the LAP (alternate) carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: Gid,
    pub remote_gid: Gid,
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits (IBTA static rate encoding; 0 = port current rate).
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

impl Path {
    /// Whether every field is zero (an unused alternate path).
    pub fn is_zero(&self) -> bool {
        *self == Path::default()
    }
}

/// Where a path's fields sit in a message.
pub(crate) struct PathLayout {
    pub local_lid: Bits,
    pub remote_lid: Bits,
    pub local_gid: usize,
    pub remote_gid: usize,
    pub flow_label: Bits,
    pub packet_rate: Bits,
    pub traffic_class: Bits,
    pub hop_limit: Bits,
    pub sl: Bits,
    pub subnet_local: Bits,
    pub local_ack_timeout: Bits,
}

impl PathLayout {
    /// Reads a path; `b` must be long enough (checked by the message's view).
    pub(crate) fn read(&self, b: &[u8]) -> Path {
        Path {
            local_lid: self.local_lid.get(b) as u16,
            remote_lid: self.remote_lid.get(b) as u16,
            local_gid: Gid(crate::field::read_array(b, self.local_gid)),
            remote_gid: Gid(crate::field::read_array(b, self.remote_gid)),
            flow_label: self.flow_label.get(b) as u32,
            packet_rate: self.packet_rate.get(b) as u8,
            traffic_class: self.traffic_class.get(b) as u8,
            hop_limit: self.hop_limit.get(b) as u8,
            sl: self.sl.get(b) as u8,
            subnet_local: self.subnet_local.get(b) != 0,
            local_ack_timeout: self.local_ack_timeout.get(b) as u8,
        }
    }

    pub(crate) fn write(&self, b: &mut [u8], p: &Path) {
        self.local_lid.set(b, p.local_lid.into());
        self.remote_lid.set(b, p.remote_lid.into());
        b[self.local_gid..self.local_gid + 16].copy_from_slice(&p.local_gid.0);
        b[self.remote_gid..self.remote_gid + 16].copy_from_slice(&p.remote_gid.0);
        self.flow_label.set(b, p.flow_label.into());
        self.packet_rate.set(b, p.packet_rate.into());
        self.traffic_class.set(b, p.traffic_class.into());
        self.hop_limit.set(b, p.hop_limit.into());
        self.sl.set(b, p.sl.into());
        self.subnet_local.set(b, p.subnet_local.into());
        self.local_ack_timeout.set(b, p.local_ack_timeout.into());
    }
}

/// Machine keys and label prefix for one path in a field tree.
pub(crate) struct PathKeys {
    pub prefix: &'static str,
    pub keys: [&'static str; 11],
}

pub(crate) const PRIMARY_KEYS: PathKeys = PathKeys {
    prefix: "Primary",
    keys: [
        "primary_local_lid",
        "primary_remote_lid",
        "primary_local_gid",
        "primary_remote_gid",
        "primary_flow_label",
        "primary_packet_rate",
        "primary_traffic_class",
        "primary_hop_limit",
        "primary_sl",
        "primary_subnet_local",
        "primary_local_ack_timeout",
    ],
};

pub(crate) const ALTERNATE_KEYS: PathKeys = PathKeys {
    prefix: "Alternate",
    keys: [
        "alternate_local_lid",
        "alternate_remote_lid",
        "alternate_local_gid",
        "alternate_remote_gid",
        "alternate_flow_label",
        "alternate_packet_rate",
        "alternate_traffic_class",
        "alternate_hop_limit",
        "alternate_sl",
        "alternate_subnet_local",
        "alternate_local_ack_timeout",
    ],
};

impl Path {
    /// Adds the path's fields with tshark's REQ labels ("Primary Local Port LID", ...), in
    /// the REQ's wire order. (The LAP's wire order differs slightly; its fields are the same.)
    pub(crate) fn dissect(&self, t: &mut Tree, k: &PathKeys) {
        let p = k.prefix;
        let [lid_l, lid_r, gid_l, gid_r, fl, rate, tc, hl, sl, snl, ack] = k.keys;
        t.dec(lid_l, &format!("{p} Local Port LID"), self.local_lid);
        t.dec(lid_r, &format!("{p} Remote Port LID"), self.remote_lid);
        t.gid(gid_l, &format!("{p} Local Port GID"), self.local_gid);
        t.gid(gid_r, &format!("{p} Remote Port GID"), self.remote_gid);
        t.hex(fl, &format!("{p} Flow Label"), self.flow_label, 5);
        t.hex(rate, &format!("{p} Packet Rate"), self.packet_rate, 2);
        t.hex(tc, &format!("{p} Traffic Class"), self.traffic_class, 2);
        t.hex(hl, &format!("{p} Hop Limit"), self.hop_limit, 2);
        t.hex(sl, &format!("{p} SL"), self.sl, 1);
        t.flag(snl, &format!("{p} Subnet Local"), self.subnet_local);
        t.hex(
            ack,
            &format!("{p} Local ACK Timeout"),
            self.local_ack_timeout,
            2,
        );
    }
}

/// Any CM message, chosen by the MAD's attribute ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    Req(ReqRepr),
    Mra(MraRepr),
    Rej(RejRepr),
    Rep(RepRepr),
    Rtu(RtuRepr),
    Dreq(DreqRepr),
    Drep(DrepRepr),
    SidrReq(SidrReqRepr),
    SidrRep(SidrRepRepr),
    Lap(LapRepr),
    Apr(AprRepr),
    /// A ClassPortInfo attribute (CM `Get()`/`GetResp()`); the rest of the data is reserved.
    ClassPortInfo(ClassPortInfo),
    /// An attribute ID the CM does not define: the data is kept as is.
    Unknown {
        attr_id: AttrId,
        data: Vec<u8>,
    },
}

impl CmMessage {
    /// Parses the MAD data (the 232 bytes after the common header) as the message the
    /// attribute ID names. Unknown attribute IDs are not an error: the data is kept.
    pub fn parse(attr_id: u16, data: &[u8]) -> Result<CmMessage> {
        Ok(match AttrId(attr_id) {
            AttrId::REQ => CmMessage::Req(ReqRepr::parse(data)?),
            AttrId::MRA => CmMessage::Mra(MraRepr::parse(data)?),
            AttrId::REJ => CmMessage::Rej(RejRepr::parse(data)?),
            AttrId::REP => CmMessage::Rep(RepRepr::parse(data)?),
            AttrId::RTU => CmMessage::Rtu(RtuRepr::parse(data)?),
            AttrId::DREQ => CmMessage::Dreq(DreqRepr::parse(data)?),
            AttrId::DREP => CmMessage::Drep(DrepRepr::parse(data)?),
            AttrId::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(data)?),
            AttrId::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(data)?),
            AttrId::LAP => CmMessage::Lap(LapRepr::parse(data)?),
            AttrId::APR => CmMessage::Apr(AprRepr::parse(data)?),
            AttrId::CLASS_PORT_INFO => CmMessage::ClassPortInfo(ClassPortInfo::parse(data)?),
            other => CmMessage::Unknown {
                attr_id: other,
                data: data[..data.len().min(CM_DATA_LEN)].to_vec(),
            },
        })
    }

    /// Parses the CM message of a MAD; the MAD must be of the CM class.
    pub fn from_mad(mad: &Mad) -> Result<CmMessage> {
        if mad.header.mgmt_class != MgmtClass::CM {
            return Err(Error::BadValue {
                field: "mad.mgmt_class",
                value: mad.header.mgmt_class.0.into(),
            });
        }
        CmMessage::parse(mad.header.attr_id, &mad.data)
    }

    /// The message in a CM `Send()` MAD with the given transaction ID and attribute
    /// modifier (which carries the ECE `attr_mod`).
    pub fn to_mad(&self, tid: u64, attr_mod: u32) -> Mad {
        let mut header = MadHeader::cm_send(self.attr_id().0, tid);
        header.attr_mod = attr_mod;
        let mut data = [0u8; CM_DATA_LEN];
        let n = self.buffer_len().min(CM_DATA_LEN);
        if n == self.buffer_len() {
            self.emit(&mut data[..n]);
        }
        Mad { header, data }
    }

    /// The attribute ID of this message.
    pub fn attr_id(&self) -> AttrId {
        match self {
            CmMessage::Req(_) => AttrId::REQ,
            CmMessage::Mra(_) => AttrId::MRA,
            CmMessage::Rej(_) => AttrId::REJ,
            CmMessage::Rep(_) => AttrId::REP,
            CmMessage::Rtu(_) => AttrId::RTU,
            CmMessage::Dreq(_) => AttrId::DREQ,
            CmMessage::Drep(_) => AttrId::DREP,
            CmMessage::SidrReq(_) => AttrId::SIDR_REQ,
            CmMessage::SidrRep(_) => AttrId::SIDR_REP,
            CmMessage::Lap(_) => AttrId::LAP,
            CmMessage::Apr(_) => AttrId::APR,
            CmMessage::ClassPortInfo(_) => AttrId::CLASS_PORT_INFO,
            CmMessage::Unknown { attr_id, .. } => *attr_id,
        }
    }

    /// 232 for every CM message; the kept length for unknown attributes.
    pub fn buffer_len(&self) -> usize {
        match self {
            CmMessage::Unknown { data, .. } => data.len(),
            _ => CM_DATA_LEN,
        }
    }

    /// Writes the message into `buf`, exactly `buffer_len()` long.
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            CmMessage::Req(r) => r.emit(buf),
            CmMessage::Mra(r) => r.emit(buf),
            CmMessage::Rej(r) => r.emit(buf),
            CmMessage::Rep(r) => r.emit(buf),
            CmMessage::Rtu(r) => r.emit(buf),
            CmMessage::Dreq(r) => r.emit(buf),
            CmMessage::Drep(r) => r.emit(buf),
            CmMessage::SidrReq(r) => r.emit(buf),
            CmMessage::SidrRep(r) => r.emit(buf),
            CmMessage::Lap(r) => r.emit(buf),
            CmMessage::Apr(r) => r.emit(buf),
            CmMessage::ClassPortInfo(r) => {
                assert_eq!(buf.len(), CM_DATA_LEN, "cm: wrong buffer length");
                buf.fill(0);
                r.emit(&mut buf[..r.buffer_len()]);
            }
            CmMessage::Unknown { data, .. } => buf.copy_from_slice(data),
        }
    }

    to_bytes!();

    /// The message's whole private data field, if it has one.
    pub fn private_data(&self) -> Option<&[u8]> {
        Some(match self {
            CmMessage::Req(r) => &r.private_data[..],
            CmMessage::Mra(r) => &r.private_data[..],
            CmMessage::Rej(r) => &r.private_data[..],
            CmMessage::Rep(r) => &r.private_data[..],
            CmMessage::Rtu(r) => &r.private_data[..],
            CmMessage::Dreq(r) => &r.private_data[..],
            CmMessage::Drep(r) => &r.private_data[..],
            CmMessage::SidrReq(r) => &r.private_data[..],
            CmMessage::SidrRep(r) => &r.private_data[..],
            CmMessage::Lap(r) => &r.private_data[..],
            CmMessage::Apr(r) => &r.private_data[..],
            CmMessage::ClassPortInfo(_) | CmMessage::Unknown { .. } => return None,
        })
    }
}

impl Dissect for CmMessage {
    fn dissect(&self, t: &mut Tree) {
        match self {
            CmMessage::Req(r) => r.dissect(t),
            CmMessage::Mra(r) => r.dissect(t),
            CmMessage::Rej(r) => r.dissect(t),
            CmMessage::Rep(r) => r.dissect(t),
            CmMessage::Rtu(r) => r.dissect(t),
            CmMessage::Dreq(r) => r.dissect(t),
            CmMessage::Drep(r) => r.dissect(t),
            CmMessage::SidrReq(r) => r.dissect(t),
            CmMessage::SidrRep(r) => r.dissect(t),
            CmMessage::Lap(r) => r.dissect(t),
            CmMessage::Apr(r) => r.dissect(t),
            CmMessage::ClassPortInfo(r) => r.dissect(t),
            CmMessage::Unknown { attr_id, data } => {
                t.subtree(
                    "cm_unknown",
                    format!("CM Attribute {:#06x}", attr_id.0),
                    |t| {
                        t.hex("attr_id", "Attribute ID", attr_id.0, 4);
                        t.bytes("data", "Data", data);
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
