//! IOControllerProfile (attribute 0x0011, modifier = 1-based slot; IBTA vol 1 §16.3.3.4,
//! table 283; `struct ib_dm_ioc_profile`, filled by `srpt_get_ioc`).
//!
//! IBTA defines VendorID and SubsystemVendorID as 24-bit IEEE OUIs in the upper three bytes of
//! a 32-bit word; ib_srpt writes `cpu_to_be32(attrs.vendor_id)` into the whole word. We keep the
//! 32-bit words as sent (`vendor_id`, `subsys_vendor_id`) and offer the OUI reading as a method.

use crate::dissect::{Dissect, Tree};
use crate::field::{read_array, read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::types::Guid;
use crate::Result;

/// Byte offsets of IOControllerProfile (128 bytes).
pub mod field {
    pub const GUID: usize = 0;
    pub const VENDOR_ID: usize = 8;
    pub const DEVICE_ID: usize = 12;
    pub const DEVICE_VERSION: usize = 16;
    pub const SUBSYS_VENDOR_ID: usize = 20;
    pub const SUBSYS_DEVICE_ID: usize = 24;
    pub const IO_CLASS: usize = 28;
    pub const IO_SUBCLASS: usize = 30;
    pub const PROTOCOL: usize = 32;
    pub const PROTOCOL_VERSION: usize = 34;
    /// ib_srpt's `service_conn` / `initiators_supported` (reserved in IBTA 1.2).
    pub const SERVICE_CONN: usize = 36;
    pub const INITIATORS_SUPPORTED: usize = 38;
    pub const SEND_QUEUE_DEPTH: usize = 40;
    pub const RDMA_READ_DEPTH: usize = 43;
    pub const SEND_SIZE: usize = 44;
    pub const RDMA_SIZE: usize = 48;
    pub const OP_CAP_MASK: usize = 52;
    /// ib_srpt's `svc_cap_mask` (reserved in IBTA 1.2).
    pub const SVC_CAP_MASK: usize = 53;
    pub const NUM_SVC_ENTRIES: usize = 54;
    pub const ID_STRING: usize = 64;
    pub const ID_STRING_LEN: usize = 64;
    pub const LEN: usize = 128;
}

/// ControllerOperationsCapabilityMask bits (IBTA table 283; ib_srpt's `SRP_*_IOC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct OpCapMask(pub u8);

impl OpCapMask {
    /// ST: send messages to the IOC.
    pub const SEND_TO_IOC: u8 = 0x01;
    /// SF: send messages from the IOC.
    pub const SEND_FROM_IOC: u8 = 0x02;
    /// RT: RDMA reads to the IOC.
    pub const RDMA_READ_TO_IOC: u8 = 0x04;
    /// RF: RDMA reads from the IOC.
    pub const RDMA_READ_FROM_IOC: u8 = 0x08;
    /// WT: RDMA writes to the IOC.
    pub const RDMA_WRITE_TO_IOC: u8 = 0x10;
    /// WF: RDMA writes from the IOC.
    pub const RDMA_WRITE_FROM_IOC: u8 = 0x20;
    /// AT: atomics to the IOC.
    pub const ATOMIC_TO_IOC: u8 = 0x40;
    /// AF: atomics from the IOC.
    pub const ATOMIC_FROM_IOC: u8 = 0x80;
    /// What ib_srpt advertises: ST | SF | RF | WF.
    pub const SRPT: OpCapMask = OpCapMask(0x01 | 0x02 | 0x08 | 0x20);

    fn text(self) -> String {
        const NAMES: [&str; 8] = ["ST", "SF", "RT", "RF", "WT", "WF", "AT", "AF"];
        let v: Vec<&str> = (0..8)
            .filter(|i| self.0 & (1 << i) != 0)
            .map(|i| NAMES[i])
            .collect();
        format!("{:#04x} ({})", self.0, v.join(" "))
    }
}

/// The SRP I/O class code point of revision 16a (`SRP_REV16A_IB_IO_CLASS`).
pub const SRP_IO_CLASS_REV16A: u16 = 0x0100;
/// The SRP I/O class of revision 10 (`SRP_REV10_IB_IO_CLASS`).
pub const SRP_IO_CLASS_REV10: u16 = 0xff00;
/// IOSubClass for SRP: the low 16 bits of the NCITS OUI (`SRP_IO_SUBCLASS`).
pub const SRP_IO_SUBCLASS: u16 = 0x609e;
/// Protocol for SRP (`SRP_PROTOCOL`).
pub const SRP_PROTOCOL: u16 = 0x0108;
/// ProtocolVersion for SRP (`SRP_PROTOCOL_VERSION`).
pub const SRP_PROTOCOL_VERSION: u16 = 0x0001;

fixed_view! {
    /// A view of IOControllerProfile.
    struct Packet(field::LEN, "dm.ioc_profile");
}

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn guid(&self) -> Guid {
        Guid(read_u64(self.b(), field::GUID))
    }
    pub fn vendor_id(&self) -> u32 {
        read_u32(self.b(), field::VENDOR_ID)
    }
    pub fn device_id(&self) -> u32 {
        read_u32(self.b(), field::DEVICE_ID)
    }
    pub fn device_version(&self) -> u16 {
        read_u16(self.b(), field::DEVICE_VERSION)
    }
    pub fn subsys_vendor_id(&self) -> u32 {
        read_u32(self.b(), field::SUBSYS_VENDOR_ID)
    }
    pub fn subsys_device_id(&self) -> u32 {
        read_u32(self.b(), field::SUBSYS_DEVICE_ID)
    }
    pub fn io_class(&self) -> u16 {
        read_u16(self.b(), field::IO_CLASS)
    }
    pub fn io_subclass(&self) -> u16 {
        read_u16(self.b(), field::IO_SUBCLASS)
    }
    pub fn protocol(&self) -> u16 {
        read_u16(self.b(), field::PROTOCOL)
    }
    pub fn protocol_version(&self) -> u16 {
        read_u16(self.b(), field::PROTOCOL_VERSION)
    }
    pub fn service_conn(&self) -> u16 {
        read_u16(self.b(), field::SERVICE_CONN)
    }
    pub fn initiators_supported(&self) -> u16 {
        read_u16(self.b(), field::INITIATORS_SUPPORTED)
    }
    pub fn send_queue_depth(&self) -> u16 {
        read_u16(self.b(), field::SEND_QUEUE_DEPTH)
    }
    pub fn rdma_read_depth(&self) -> u8 {
        self.b()[field::RDMA_READ_DEPTH]
    }
    pub fn send_size(&self) -> u32 {
        read_u32(self.b(), field::SEND_SIZE)
    }
    pub fn rdma_size(&self) -> u32 {
        read_u32(self.b(), field::RDMA_SIZE)
    }
    pub fn op_cap_mask(&self) -> OpCapMask {
        OpCapMask(self.b()[field::OP_CAP_MASK])
    }
    pub fn svc_cap_mask(&self) -> u8 {
        self.b()[field::SVC_CAP_MASK]
    }
    pub fn num_svc_entries(&self) -> u8 {
        self.b()[field::NUM_SVC_ENTRIES]
    }
    pub fn id_string(&self) -> [u8; 64] {
        read_array(self.b(), field::ID_STRING)
    }
}

/// IOControllerProfile. Reserved bytes are emitted as zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub guid: Guid,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_version: u16,
    pub subsys_vendor_id: u32,
    pub subsys_device_id: u32,
    pub io_class: u16,
    pub io_subclass: u16,
    pub protocol: u16,
    pub protocol_version: u16,
    pub service_conn: u16,
    pub initiators_supported: u16,
    /// SendMessageQueueDepth.
    pub send_queue_depth: u16,
    /// RDMAReadQueueDepth (8 bits since IBTA 1.1).
    pub rdma_read_depth: u8,
    /// SendMessageSize.
    pub send_size: u32,
    /// RDMATransferSize.
    pub rdma_size: u32,
    pub op_cap_mask: OpCapMask,
    pub svc_cap_mask: u8,
    pub num_svc_entries: u8,
    /// IDString, NUL padded.
    pub id_string: [u8; 64],
}

impl Default for Repr {
    fn default() -> Repr {
        Repr {
            guid: Guid(0),
            vendor_id: 0,
            device_id: 0,
            device_version: 0,
            subsys_vendor_id: 0,
            subsys_device_id: 0,
            io_class: 0,
            io_subclass: 0,
            protocol: 0,
            protocol_version: 0,
            service_conn: 0,
            initiators_supported: 0,
            send_queue_depth: 0,
            rdma_read_depth: 0,
            send_size: 0,
            rdma_size: 0,
            op_cap_mask: OpCapMask(0),
            svc_cap_mask: 0,
            num_svc_entries: 0,
            id_string: [0; 64],
        }
    }
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr {
            guid: p.guid(),
            vendor_id: p.vendor_id(),
            device_id: p.device_id(),
            device_version: p.device_version(),
            subsys_vendor_id: p.subsys_vendor_id(),
            subsys_device_id: p.subsys_device_id(),
            io_class: p.io_class(),
            io_subclass: p.io_subclass(),
            protocol: p.protocol(),
            protocol_version: p.protocol_version(),
            service_conn: p.service_conn(),
            initiators_supported: p.initiators_supported(),
            send_queue_depth: p.send_queue_depth(),
            rdma_read_depth: p.rdma_read_depth(),
            send_size: p.send_size(),
            rdma_size: p.rdma_size(),
            op_cap_mask: p.op_cap_mask(),
            svc_cap_mask: p.svc_cap_mask(),
            num_svc_entries: p.num_svc_entries(),
            id_string: p.id_string(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, b: &mut [u8]) {
        assert_eq!(b.len(), field::LEN, "dm.ioc_profile: emit buffer length");
        b.fill(0);
        write_u64(b, field::GUID, self.guid.0);
        write_u32(b, field::VENDOR_ID, self.vendor_id);
        write_u32(b, field::DEVICE_ID, self.device_id);
        write_u16(b, field::DEVICE_VERSION, self.device_version);
        write_u32(b, field::SUBSYS_VENDOR_ID, self.subsys_vendor_id);
        write_u32(b, field::SUBSYS_DEVICE_ID, self.subsys_device_id);
        write_u16(b, field::IO_CLASS, self.io_class);
        write_u16(b, field::IO_SUBCLASS, self.io_subclass);
        write_u16(b, field::PROTOCOL, self.protocol);
        write_u16(b, field::PROTOCOL_VERSION, self.protocol_version);
        write_u16(b, field::SERVICE_CONN, self.service_conn);
        write_u16(b, field::INITIATORS_SUPPORTED, self.initiators_supported);
        write_u16(b, field::SEND_QUEUE_DEPTH, self.send_queue_depth);
        b[field::RDMA_READ_DEPTH] = self.rdma_read_depth;
        write_u32(b, field::SEND_SIZE, self.send_size);
        write_u32(b, field::RDMA_SIZE, self.rdma_size);
        b[field::OP_CAP_MASK] = self.op_cap_mask.0;
        b[field::SVC_CAP_MASK] = self.svc_cap_mask;
        b[field::NUM_SVC_ENTRIES] = self.num_svc_entries;
        b[field::ID_STRING..].copy_from_slice(&self.id_string);
    }

    to_bytes!();

    /// The ID string up to its first NUL.
    pub fn id_str(&self) -> String {
        super::nul_str(&self.id_string)
    }

    /// Sets the ID string (truncated to 63 bytes so that it stays NUL-terminated, as
    /// `strcpy` of a shorter constant leaves it).
    pub fn set_id_str(&mut self, s: &str) {
        super::set_nul_str(&mut self.id_string, s);
    }

    /// VendorID read the IBTA way: the 24-bit OUI in the upper three bytes.
    pub fn vendor_oui(&self) -> u32 {
        self.vendor_id >> 8
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("dm_ioc_profile", "IOControllerProfile", |t| {
            t.guid("guid", "GUID", self.guid);
            t.hex("vendor_id", "VendorID", self.vendor_id, 8);
            t.hex("device_id", "DeviceID", self.device_id, 8);
            t.hex("device_version", "DeviceVersion", self.device_version, 4);
            t.hex(
                "subsys_vendor_id",
                "SubsystemVendorID",
                self.subsys_vendor_id,
                8,
            );
            t.hex("subsys_device_id", "SubsystemID", self.subsys_device_id, 8);
            t.hex("io_class", "IOClass", self.io_class, 4);
            t.hex("io_subclass", "IOSubclass", self.io_subclass, 4);
            t.hex("protocol", "Protocol", self.protocol, 4);
            t.hex(
                "protocol_version",
                "ProtocolVersion",
                self.protocol_version,
                4,
            );
            t.dec(
                "send_queue_depth",
                "SendMessageQueueDepth",
                self.send_queue_depth,
            );
            t.dec(
                "rdma_read_depth",
                "RDMAReadQueueDepth",
                self.rdma_read_depth,
            );
            t.dec("send_size", "SendMessageSize", self.send_size);
            t.dec("rdma_size", "RDMATransferSize", self.rdma_size);
            t.push(crate::dissect::Node {
                key: "op_cap_mask",
                label: "ControllerOperationsCapabilityMask".to_string(),
                value: crate::dissect::Value::Uint(u64::from(self.op_cap_mask.0)),
                display: self.op_cap_mask.text(),
                children: Vec::new(),
            });
            t.dec("num_svc_entries", "ServiceEntries", self.num_svc_entries);
            t.text("id_string", "IDString", self.id_str());
        });
    }
}
