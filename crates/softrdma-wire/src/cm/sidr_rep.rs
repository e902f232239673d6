//! SIDR_REP — Service ID Resolution Response (IBTA Vol 1 table 120; kernel `CM_SIDR_REP_*`,
//! ECE vendor ID from the 2020 "Add ECE bits" patch).
//!
//! ```text
//! off  field
//!   0  Request ID (32)
//!   4  Status (8)   5 Additional Information Length (8)   6 Vendor ID H (16)
//!   8  QPN (24) | Vendor ID L (8)
//!  12  Service ID (64)
//!  20  Q_Key (32)
//!  24  Additional Information (72 bytes: a ClassPortInfo when the status is "redirect")
//!  96  Private Data (136 bytes)
//! ```
//!
//! The kernel writes the ECE vendor ID as H = bits 8–15 (masked to 8 bits although the field
//! has 16) and L = bits 0–7 (`cm_format_sidr_rep`), and reads it back as `H << 8 | L`. We
//! keep both raw fields so that any value re-emits exactly; [`Repr::vendor_id`] combines them.

use super::{SidrStatus, CM_DATA_LEN, SIDR_REP_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};
use crate::mad::ClassPortInfo;
use crate::rdma_cm;

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const REQUEST_ID: Bits = Bits::new(0, 0, 32);
    pub const STATUS: Bits = Bits::new(4, 0, 8);
    pub const ADDITIONAL_INFO_LENGTH: Bits = Bits::new(5, 0, 8);
    pub const VENDOR_ID_H: Bits = Bits::new(6, 0, 16);
    pub const QPN: Bits = Bits::new(8, 0, 24);
    pub const VENDOR_ID_L: Bits = Bits::new(11, 0, 8);
    pub const SERVICE_ID: Bits = Bits::new(12, 0, 64);
    pub const QKEY: Bits = Bits::new(20, 0, 32);
    pub const ADDITIONAL_INFO: Field = 24..96;
    pub const PRIVATE_DATA: Field = 96..232;
}

fixed_view! {
    /// A view of a SIDR_REP (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.sidr_rep");
}

bit_accessors! {
    request_id / set_request_id: u32 = fields::REQUEST_ID;
    status / set_status: u8 = fields::STATUS;
    additional_info_length / set_additional_info_length: u8 = fields::ADDITIONAL_INFO_LENGTH;
    vendor_id_h / set_vendor_id_h: u16 = fields::VENDOR_ID_H;
    qpn / set_qpn: u32 = fields::QPN;
    vendor_id_l / set_vendor_id_l: u8 = fields::VENDOR_ID_L;
    service_id / set_service_id: u64 = fields::SERVICE_ID;
    qkey / set_qkey: u32 = fields::QKEY;
}

cm_message!(
    /// Additional Information (72 bytes).
    additional_info / additional_info_mut = fields::ADDITIONAL_INFO
);

/// A decoded SIDR_REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub request_id: u32,
    pub status: SidrStatus,
    pub additional_info_length: u8,
    /// ECE vendor ID, high part (16 bits at byte 6).
    pub vendor_id_h: u16,
    /// 24 bits.
    pub qpn: u32,
    /// ECE vendor ID, low byte (byte 11).
    pub vendor_id_l: u8,
    pub service_id: u64,
    pub qkey: u32,
    pub additional_info: [u8; 72],
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            request_id: p.request_id(),
            status: SidrStatus(p.status()),
            additional_info_length: p.additional_info_length(),
            vendor_id_h: p.vendor_id_h(),
            qpn: p.qpn(),
            vendor_id_l: p.vendor_id_l(),
            service_id: p.service_id(),
            qkey: p.qkey(),
            additional_info: field::read_array(p.buffer.as_ref(), fields::ADDITIONAL_INFO.start),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    fixed_repr!(Packet, CM_DATA_LEN);

    /// Writes the SIDR_REP into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.sidr_rep: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_request_id(self.request_id);
        p.set_status(self.status.0);
        p.set_additional_info_length(self.additional_info_length);
        p.set_vendor_id_h(self.vendor_id_h);
        p.set_qpn(self.qpn);
        p.set_vendor_id_l(self.vendor_id_l);
        p.set_service_id(self.service_id);
        p.set_qkey(self.qkey);
        p.additional_info_mut()
            .copy_from_slice(&self.additional_info);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }

    /// The ECE vendor ID as the kernel reads it: `H << 8 | L`, cut to 24 bits.
    pub fn vendor_id(&self) -> u32 {
        ((u32::from(self.vendor_id_h) << 8) | u32::from(self.vendor_id_l)) & 0xff_ffff
    }

    /// Sets the ECE vendor ID the way the kernel does (H = bits 8–15, L = bits 0–7).
    pub fn set_vendor_id(&mut self, vendor_id: u32) {
        self.vendor_id_h = ((vendor_id >> 8) & 0xff) as u16;
        self.vendor_id_l = vendor_id as u8;
    }

    /// The additional information read as a ClassPortInfo (meaningful when the status is
    /// [`SidrStatus::REDIRECT`]).
    pub fn class_port_info(&self) -> ClassPortInfo {
        // 72 bytes: the parse cannot fail.
        ClassPortInfo::parse(&self.additional_info).unwrap_or_default()
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_sidr_rep", "CM ServiceIDResReqResp", |t| {
            t.hex("request_id", "Request ID", self.request_id, 8);
            t.code_hex("status", "Status", self.status.0, 2, self.status);
            t.dec(
                "additional_info_length",
                "Additional Information Length",
                self.additional_info_length,
            );
            t.hex("vendor_id_h", "Vendor ID (high)", self.vendor_id_h, 4);
            t.hex("qpn", "QPN", self.qpn, 6);
            t.hex("vendor_id_l", "Vendor ID (low)", self.vendor_id_l, 2);
            t.hex("service_id", "ServiceID", self.service_id, 16);
            rdma_cm::dissect_service_id(t, self.service_id);
            t.hex("qkey", "Q_Key", self.qkey, 8);
            t.bytes(
                "additional_info",
                "Additional Information",
                &self.additional_info,
            );
            if self.status == SidrStatus::REDIRECT {
                if let Ok(cpi) = ClassPortInfo::parse(&self.additional_info) {
                    cpi.dissect(t);
                }
            }
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
