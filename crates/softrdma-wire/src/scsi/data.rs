//! Parameter data a target returns: standard INQUIRY data (SPC-4 §6.6.2), VPD pages 0x00,
//! 0x80, 0x83 (SPC-4 §7.8), 0xB0 and 0xB1 (SBC-4 §6.6), READ CAPACITY(10)/(16) data (SBC-3 §5.15–5.16), the REPORT LUNS
//! list (SPC-4 §6.33), mode parameter headers and the short block descriptor (SPC-4 §7.5).
//!
//! Data-in is cut to the ALLOCATION LENGTH the initiator gave, so length fields here are kept
//! as sent (they describe the untruncated data) rather than derived from what follows them.

use super::DeviceType;
use crate::dissect::{Dissect, Tree};
use crate::field::{read_array, read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};
use crate::{Error, Result};

/// `emit`'s precondition: the buffer is exactly `buffer_len()` bytes (a caller bug otherwise).
#[track_caller]
fn check_emit_len(what: &str, buf: &[u8], len: usize) {
    assert_eq!(buf.len(), len, "{what}: emit buffer length");
}

fn ascii(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if (0x20..0x7f).contains(&c) {
                c as char
            } else {
                '.'
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Standard INQUIRY data
// ---------------------------------------------------------------------------------------------

/// Standard INQUIRY data: the first 36 bytes decoded, the rest kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StandardInquiry {
    /// PERIPHERAL QUALIFIER (byte 0 bits 7–5).
    pub qualifier: u8,
    pub device_type: DeviceType,
    /// RMB: removable medium.
    pub rmb: bool,
    /// VERSION (6 = SPC-4, 5 = SPC-3).
    pub version: u8,
    /// Byte 3: NORMACA (bit 5), HISUP (bit 4), RESPONSE DATA FORMAT (bits 3–0, = 2).
    pub byte3: u8,
    /// ADDITIONAL LENGTH (n − 4) of the untruncated data.
    pub additional_len: u8,
    /// Byte 5: SCCS, ACC, TPGS (bits 5–4), 3PC, PROTECT.
    pub byte5: u8,
    /// Byte 6: ENCSERV, MULTIP, ...
    pub byte6: u8,
    /// Byte 7: CMDQUE (bit 1), ...
    pub byte7: u8,
    pub vendor: [u8; 8],
    pub product: [u8; 16],
    pub revision: [u8; 4],
    /// Bytes 36.. (vendor specific, version descriptors), as far as they were sent.
    pub extra: Vec<u8>,
}

impl StandardInquiry {
    pub const LEN: usize = 36;

    pub fn parse(buf: &[u8]) -> Result<StandardInquiry> {
        Error::check_len("scsi.inquiry_data", Self::LEN, buf.len())?;
        Ok(StandardInquiry {
            qualifier: buf[0] >> 5,
            device_type: DeviceType(buf[0] & 0x1f),
            rmb: buf[1] & 0x80 != 0,
            version: buf[2],
            byte3: buf[3],
            additional_len: buf[4],
            byte5: buf[5],
            byte6: buf[6],
            byte7: buf[7],
            vendor: read_array(buf, 8),
            product: read_array(buf, 16),
            revision: read_array(buf, 32),
            extra: buf[Self::LEN..].to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN + self.extra.len()
    }

    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.inquiry_data", buf, self.buffer_len());
        buf[0] = (self.qualifier << 5) | (self.device_type.0 & 0x1f);
        buf[1] = if self.rmb { 0x80 } else { 0 };
        buf[2] = self.version;
        buf[3] = self.byte3;
        buf[4] = self.additional_len;
        buf[5] = self.byte5;
        buf[6] = self.byte6;
        buf[7] = self.byte7;
        buf[8..16].copy_from_slice(&self.vendor);
        buf[16..32].copy_from_slice(&self.product);
        buf[32..36].copy_from_slice(&self.revision);
        buf[36..].copy_from_slice(&self.extra);
    }

    to_bytes!();

    /// CMDQUE: command queuing supported.
    pub fn cmdque(&self) -> bool {
        self.byte7 & 0x02 != 0
    }

    /// TPGS: target port group support.
    pub fn tpgs(&self) -> u8 {
        (self.byte5 >> 4) & 3
    }

    /// RESPONSE DATA FORMAT.
    pub fn response_data_format(&self) -> u8 {
        self.byte3 & 0x0f
    }
}

impl Dissect for StandardInquiry {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("scsi_inquiry_data", "SCSI Standard Inquiry Data", |t| {
            t.dec("qualifier", "Peripheral Qualifier", self.qualifier);
            t.code_hex(
                "device_type",
                "Peripheral Device Type",
                self.device_type.0,
                2,
                self.device_type,
            );
            t.flag("rmb", "RMB", self.rmb);
            t.hex("version", "Version", self.version, 2);
            t.dec(
                "response_data_format",
                "Response Data Format",
                self.response_data_format(),
            );
            t.dec("additional_len", "Additional Length", self.additional_len);
            t.dec("tpgs", "TPGS", self.tpgs());
            t.flag("cmdque", "CmdQue", self.cmdque());
            t.text("vendor", "Vendor Id", ascii(&self.vendor));
            t.text("product", "Product Id", ascii(&self.product));
            t.text("revision", "Product Revision Level", ascii(&self.revision));
            if !self.extra.is_empty() {
                t.bytes("extra", "Additional Data", &self.extra);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// VPD pages
// ---------------------------------------------------------------------------------------------

code_point! {
    /// VPD page codes a block target answers.
    pub struct VpdPageCode(u8) {
        SUPPORTED_PAGES = 0x00 => "Supported VPD Pages",
        UNIT_SERIAL_NUMBER = 0x80 => "Unit Serial Number",
        DEVICE_IDENTIFICATION = 0x83 => "Device Identification",
        EXTENDED_INQUIRY = 0x86 => "Extended INQUIRY Data",
        BLOCK_LIMITS = 0xb0 => "Block Limits",
        BLOCK_DEVICE_CHARACTERISTICS = 0xb1 => "Block Device Characteristics",
        LOGICAL_BLOCK_PROVISIONING = 0xb2 => "Logical Block Provisioning",
    }
}

/// A VPD page: the 4-byte header and the page's payload as far as it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VpdPage {
    /// Byte 0: peripheral qualifier and device type.
    pub peripheral: u8,
    pub page_code: VpdPageCode,
    /// PAGE LENGTH of the untruncated page.
    pub page_length: u16,
    pub payload: Vec<u8>,
}

/// A designation descriptor of the Device Identification page (SPC-4 table 459).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Designator {
    pub protocol_id: u8,
    /// CODE SET (1 binary, 2 ASCII, 3 UTF-8).
    pub code_set: u8,
    pub piv: bool,
    /// ASSOCIATION (0 logical unit, 1 target port, 2 target device).
    pub association: u8,
    /// DESIGNATOR TYPE (1 T10 vendor ID, 2 EUI-64, 3 NAA, 4 relative target port,
    /// 5 target port group, 8 SCSI name string).
    pub designator_type: u8,
    pub designator: Vec<u8>,
}

impl VpdPage {
    /// A page with its PAGE LENGTH set from the payload.
    pub fn new(peripheral: u8, page_code: VpdPageCode, payload: Vec<u8>) -> VpdPage {
        VpdPage {
            peripheral,
            page_code,
            page_length: payload.len().min(usize::from(u16::MAX)) as u16,
            payload,
        }
    }

    /// Supported VPD pages (0x00).
    pub fn supported_pages(peripheral: u8, pages: &[u8]) -> VpdPage {
        VpdPage::new(peripheral, VpdPageCode::SUPPORTED_PAGES, pages.to_vec())
    }

    /// Unit Serial Number (0x80).
    pub fn unit_serial_number(peripheral: u8, serial: &str) -> VpdPage {
        VpdPage::new(
            peripheral,
            VpdPageCode::UNIT_SERIAL_NUMBER,
            serial.as_bytes().to_vec(),
        )
    }

    /// Device Identification (0x83) from designation descriptors.
    pub fn device_identification(peripheral: u8, designators: &[Designator]) -> VpdPage {
        let mut p = Vec::new();
        for d in designators {
            let len = d.designator.len().min(255);
            p.push((d.protocol_id << 4) | (d.code_set & 0x0f));
            p.push(
                if d.piv { 0x80 } else { 0 }
                    | ((d.association & 3) << 4)
                    | (d.designator_type & 0x0f),
            );
            p.push(0);
            p.push(len as u8);
            p.extend_from_slice(&d.designator[..len]);
        }
        VpdPage::new(peripheral, VpdPageCode::DEVICE_IDENTIFICATION, p)
    }

    pub fn parse(buf: &[u8]) -> Result<VpdPage> {
        Error::check_len("scsi.vpd", 4, buf.len())?;
        Ok(VpdPage {
            peripheral: buf[0],
            page_code: VpdPageCode(buf[1]),
            page_length: read_u16(buf, 2),
            payload: buf[4..].to_vec(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self.payload.len()
    }

    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.vpd", buf, self.buffer_len());
        emit_vpd_header(buf, self.peripheral, self.page_code, self.page_length);
        buf[4..].copy_from_slice(&self.payload);
    }

    to_bytes!();

    /// The payload bytes the page length covers (fewer if the data was truncated).
    fn body(&self) -> &[u8] {
        let n = usize::from(self.page_length).min(self.payload.len());
        &self.payload[..n]
    }

    /// Page 0x00: the supported page codes.
    pub fn page_list(&self) -> &[u8] {
        self.body()
    }

    /// Page 0x80: the serial number, trailing spaces and NULs trimmed.
    pub fn serial_number(&self) -> String {
        ascii(self.body()).trim_end_matches([' ', '.']).to_string()
    }

    /// Page 0x83: the designation descriptors. A descriptor running past the page is an
    /// error.
    pub fn designators(&self) -> Result<Vec<Designator>> {
        let b = self.body();
        let mut out = Vec::new();
        let mut off = 0;
        while off < b.len() {
            let hdr = b.get(off..off + 4).ok_or(Error::Truncated {
                what: "scsi.vpd.designator",
                need: off + 4,
                got: b.len(),
            })?;
            let len = usize::from(hdr[3]);
            let d = b.get(off + 4..off + 4 + len).ok_or(Error::Truncated {
                what: "scsi.vpd.designator",
                need: off + 4 + len,
                got: b.len(),
            })?;
            out.push(Designator {
                protocol_id: hdr[0] >> 4,
                code_set: hdr[0] & 0x0f,
                piv: hdr[1] & 0x80 != 0,
                association: (hdr[1] >> 4) & 3,
                designator_type: hdr[1] & 0x0f,
                designator: d.to_vec(),
            });
            off += 4 + len;
        }
        Ok(out)
    }
}

impl Dissect for VpdPage {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "scsi_vpd",
            format!("SCSI VPD Page: {}", self.page_code),
            |t| {
                t.hex("peripheral", "Peripheral", self.peripheral, 2);
                t.code_hex(
                    "page_code",
                    "Page Code",
                    self.page_code.0,
                    2,
                    self.page_code,
                );
                t.dec("page_length", "Page Length", self.page_length);
                match self.page_code {
                    VpdPageCode::SUPPORTED_PAGES => {
                        t.bytes("pages", "Supported Pages", self.page_list())
                    }
                    VpdPageCode::UNIT_SERIAL_NUMBER => {
                        t.text("serial", "Product Serial Number", self.serial_number())
                    }
                    VpdPageCode::DEVICE_IDENTIFICATION => match self.designators() {
                        Ok(ds) => t.list("designators", "Designation Descriptors", |t| {
                            for d in ds {
                                t.subtree("designator", "Designation Descriptor", |t| {
                                    t.dec("protocol_id", "Protocol Identifier", d.protocol_id);
                                    t.dec("code_set", "Code Set", d.code_set);
                                    t.flag("piv", "PIV", d.piv);
                                    t.dec("association", "Association", d.association);
                                    t.dec("designator_type", "Designator Type", d.designator_type);
                                    t.bytes("designator", "Designator", &d.designator);
                                });
                            }
                        }),
                        Err(_) => t.bytes("payload", "Page Data", &self.payload),
                    },
                    _ => t.bytes("payload", "Page Data", &self.payload),
                }
            },
        );
    }
}

/// The Block Limits VPD page (0xB0, SBC-4 §6.6.4): the whole page, header included.
///
/// Its PAGE LENGTH is 0x3C (the full SBC-3 page, 64 bytes) or, as LIO sends it for a device
/// without thin provisioning, 0x10 (20 bytes: up to OPTIMAL TRANSFER LENGTH); the fields the
/// short page lacks are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockLimitsVpd {
    /// Byte 0: peripheral qualifier and device type.
    pub peripheral: u8,
    /// The 64-byte page (PAGE LENGTH 0x3C) rather than the 20-byte one (0x10).
    pub long: bool,
    /// WSNZ: WRITE SAME with NUMBER OF LOGICAL BLOCKS 0 is rejected.
    pub wsnz: bool,
    pub max_compare_and_write_len: u8,
    pub opt_transfer_len_granularity: u16,
    pub max_transfer_len: u32,
    pub opt_transfer_len: u32,
    pub max_prefetch_len: u32,
    pub max_unmap_lba_count: u32,
    pub max_unmap_block_descriptor_count: u32,
    pub opt_unmap_granularity: u32,
    /// UGAVALID: UNMAP GRANULARITY ALIGNMENT is valid.
    pub ugavalid: bool,
    /// UNMAP GRANULARITY ALIGNMENT (31 bits).
    pub unmap_granularity_alignment: u32,
    pub max_write_same_len: u64,
}

/// The names a VPD page's errors give its header fields.
struct VpdNames {
    page: &'static str,
    page_code: &'static str,
    page_length: &'static str,
}

/// The [`VpdNames`] of the page whose errors are named `$page`.
macro_rules! vpd_names {
    ($page:literal) => {
        VpdNames {
            page: $page,
            page_code: concat!($page, ".page_code"),
            page_length: concat!($page, ".page_length"),
        }
    };
}

impl VpdNames {
    /// The PAGE LENGTH of a page whose header (the first 4 bytes) must say `page_code`.
    fn page_length(&self, buf: &[u8], page_code: VpdPageCode) -> Result<u16> {
        Error::check_len(self.page, 4, buf.len())?;
        if buf[1] != page_code.0 {
            return Err(Error::BadValue {
                field: self.page_code,
                value: u64::from(buf[1]),
            });
        }
        Ok(read_u16(buf, 2))
    }

    fn bad_page_length(&self, len: u16) -> Error {
        Error::BadValue {
            field: self.page_length,
            value: u64::from(len),
        }
    }
}

/// The 4-byte header every VPD page starts with: peripheral byte, PAGE CODE, PAGE LENGTH.
fn emit_vpd_header(buf: &mut [u8], peripheral: u8, page_code: VpdPageCode, page_length: u16) {
    buf[0] = peripheral;
    buf[1] = page_code.0;
    write_u16(buf, 2, page_length);
}

impl BlockLimitsVpd {
    /// PAGE LENGTH of the short page.
    pub const SHORT_PAGE_LEN: u16 = 0x10;
    /// PAGE LENGTH of the full page.
    pub const LONG_PAGE_LEN: u16 = 0x3c;

    const NAMES: VpdNames = vpd_names!("scsi.vpd_b0");

    pub fn parse(buf: &[u8]) -> Result<BlockLimitsVpd> {
        let long = match Self::NAMES.page_length(buf, VpdPageCode::BLOCK_LIMITS)? {
            Self::SHORT_PAGE_LEN => false,
            Self::LONG_PAGE_LEN => true,
            other => return Err(Self::NAMES.bad_page_length(other)),
        };
        let mut b = BlockLimitsVpd {
            peripheral: buf[0],
            long,
            ..BlockLimitsVpd::default()
        };
        Error::check_len(Self::NAMES.page, b.buffer_len(), buf.len())?;
        b.wsnz = buf[4] & 1 != 0;
        b.max_compare_and_write_len = buf[5];
        b.opt_transfer_len_granularity = read_u16(buf, 6);
        b.max_transfer_len = read_u32(buf, 8);
        b.opt_transfer_len = read_u32(buf, 12);
        b.max_prefetch_len = read_u32(buf, 16);
        if long {
            b.max_unmap_lba_count = read_u32(buf, 20);
            b.max_unmap_block_descriptor_count = read_u32(buf, 24);
            b.opt_unmap_granularity = read_u32(buf, 28);
            let uga = read_u32(buf, 32);
            b.ugavalid = uga & 0x8000_0000 != 0;
            b.unmap_granularity_alignment = uga & 0x7fff_ffff;
            b.max_write_same_len = read_u64(buf, 36);
        }
        Ok(b)
    }

    pub fn buffer_len(&self) -> usize {
        4 + usize::from(if self.long {
            Self::LONG_PAGE_LEN
        } else {
            Self::SHORT_PAGE_LEN
        })
    }

    /// Emits the page; the short page drops the fields after MAXIMUM PREFETCH LENGTH.
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len(Self::NAMES.page, buf, self.buffer_len());
        buf.fill(0);
        let page_length = (self.buffer_len() - 4) as u16;
        emit_vpd_header(buf, self.peripheral, VpdPageCode::BLOCK_LIMITS, page_length);
        buf[4] = u8::from(self.wsnz);
        buf[5] = self.max_compare_and_write_len;
        write_u16(buf, 6, self.opt_transfer_len_granularity);
        write_u32(buf, 8, self.max_transfer_len);
        write_u32(buf, 12, self.opt_transfer_len);
        write_u32(buf, 16, self.max_prefetch_len);
        if self.long {
            write_u32(buf, 20, self.max_unmap_lba_count);
            write_u32(buf, 24, self.max_unmap_block_descriptor_count);
            write_u32(buf, 28, self.opt_unmap_granularity);
            let uga = (self.unmap_granularity_alignment & 0x7fff_ffff)
                | if self.ugavalid { 0x8000_0000 } else { 0 };
            write_u32(buf, 32, uga);
            write_u64(buf, 36, self.max_write_same_len);
        }
    }

    to_bytes!();
}

impl Dissect for BlockLimitsVpd {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("scsi_vpd_b0", "SCSI VPD Page: Block Limits", |t| {
            t.hex("peripheral", "Peripheral", self.peripheral, 2);
            t.dec("page_length", "Page Length", (self.buffer_len() - 4) as u64);
            t.flag("wsnz", "WSNZ", self.wsnz);
            t.dec(
                "max_compare_and_write_len",
                "Maximum Compare And Write Length",
                self.max_compare_and_write_len,
            );
            t.dec(
                "opt_transfer_len_granularity",
                "Optimal Transfer Length Granularity",
                self.opt_transfer_len_granularity,
            );
            t.dec(
                "max_transfer_len",
                "Maximum Transfer Length",
                self.max_transfer_len,
            );
            t.dec(
                "opt_transfer_len",
                "Optimal Transfer Length",
                self.opt_transfer_len,
            );
            t.dec(
                "max_prefetch_len",
                "Maximum Prefetch Length",
                self.max_prefetch_len,
            );
            if self.long {
                t.dec(
                    "max_unmap_lba_count",
                    "Maximum Unmap LBA Count",
                    self.max_unmap_lba_count,
                );
                t.dec(
                    "max_unmap_block_descriptor_count",
                    "Maximum Unmap Block Descriptor Count",
                    self.max_unmap_block_descriptor_count,
                );
                t.dec(
                    "opt_unmap_granularity",
                    "Optimal Unmap Granularity",
                    self.opt_unmap_granularity,
                );
                t.flag("ugavalid", "UGAVALID", self.ugavalid);
                t.dec(
                    "unmap_granularity_alignment",
                    "Unmap Granularity Alignment",
                    self.unmap_granularity_alignment,
                );
                t.dec(
                    "max_write_same_len",
                    "Maximum Write Same Length",
                    self.max_write_same_len,
                );
            }
        });
    }
}

/// The Block Device Characteristics VPD page (0xB1, SBC-4 §6.6.2): 64 bytes, PAGE LENGTH
/// 0x3C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockDeviceCharacteristicsVpd {
    pub peripheral: u8,
    /// MEDIUM ROTATION RATE: 0 not reported, 1 non-rotating medium (solid state), else rpm.
    pub rotation_rate: u16,
    pub product_type: u8,
    /// Byte 7: WABEREQ (7–6), WACEREQ (5–4), NOMINAL FORM FACTOR (3–0).
    pub byte7: u8,
    /// Byte 8: ZONED (5–4), FUAB (1), VBULS (0).
    pub byte8: u8,
}

impl BlockDeviceCharacteristicsVpd {
    pub const LEN: usize = 64;
    /// MEDIUM ROTATION RATE of a non-rotating medium.
    pub const NON_ROTATING: u16 = 1;

    const NAMES: VpdNames = vpd_names!("scsi.vpd_b1");

    pub fn parse(buf: &[u8]) -> Result<BlockDeviceCharacteristicsVpd> {
        let len = Self::NAMES.page_length(buf, VpdPageCode::BLOCK_DEVICE_CHARACTERISTICS)?;
        if usize::from(len) != Self::LEN - 4 {
            return Err(Self::NAMES.bad_page_length(len));
        }
        Error::check_len(Self::NAMES.page, Self::LEN, buf.len())?;
        Ok(BlockDeviceCharacteristicsVpd {
            peripheral: buf[0],
            rotation_rate: read_u16(buf, 4),
            product_type: buf[6],
            byte7: buf[7],
            byte8: buf[8],
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len(Self::NAMES.page, buf, Self::LEN);
        buf.fill(0);
        let page = VpdPageCode::BLOCK_DEVICE_CHARACTERISTICS;
        emit_vpd_header(buf, self.peripheral, page, (Self::LEN - 4) as u16);
        write_u16(buf, 4, self.rotation_rate);
        buf[6] = self.product_type;
        buf[7] = self.byte7;
        buf[8] = self.byte8;
    }

    to_bytes!();
}

impl Dissect for BlockDeviceCharacteristicsVpd {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "scsi_vpd_b1",
            "SCSI VPD Page: Block Device Characteristics",
            |t| {
                t.hex("peripheral", "Peripheral", self.peripheral, 2);
                t.dec("rotation_rate", "Medium Rotation Rate", self.rotation_rate);
                t.dec("product_type", "Product Type", self.product_type);
                t.dec("form_factor", "Nominal Form Factor", self.byte7 & 0x0f);
                t.flag("fuab", "FUAB", self.byte8 & 0x02 != 0);
                t.flag("vbuls", "VBULS", self.byte8 & 0x01 != 0);
            },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// READ CAPACITY data
// ---------------------------------------------------------------------------------------------

/// READ CAPACITY(10) parameter data (8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadCapacity10Data {
    /// RETURNED LOGICAL BLOCK ADDRESS: the last LBA (0xffffffff: use READ CAPACITY(16)).
    pub last_lba: u32,
    pub block_length: u32,
}

impl ReadCapacity10Data {
    pub const LEN: usize = 8;

    pub fn parse(buf: &[u8]) -> Result<ReadCapacity10Data> {
        Error::check_len("scsi.read_capacity_10_data", Self::LEN, buf.len())?;
        Ok(ReadCapacity10Data {
            last_lba: read_u32(buf, 0),
            block_length: read_u32(buf, 4),
        })
    }
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.read_capacity_10_data", buf, Self::LEN);
        write_u32(buf, 0, self.last_lba);
        write_u32(buf, 4, self.block_length);
    }
    to_bytes!();
}

impl Dissect for ReadCapacity10Data {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "scsi_read_capacity_10_data",
            "READ CAPACITY(10) Data",
            |t| {
                t.dec("last_lba", "Returned Logical Block Address", self.last_lba);
                t.dec(
                    "block_length",
                    "Logical Block Length In Bytes",
                    self.block_length,
                );
            },
        );
    }
}

/// READ CAPACITY(16) parameter data (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadCapacity16Data {
    pub last_lba: u64,
    pub block_length: u32,
    /// Byte 12: P_TYPE (bits 3–1), PROT_EN (bit 0).
    pub prot: u8,
    /// Byte 13: P_I_EXPONENT (bits 7–4), LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (3–0).
    pub exponents: u8,
    /// Bytes 14–15: LBPME (bit 15), LBPRZ (bit 14), LOWEST ALIGNED LBA (bits 13–0).
    pub lbp_alignment: u16,
}

impl ReadCapacity16Data {
    pub const LEN: usize = 32;

    pub fn parse(buf: &[u8]) -> Result<ReadCapacity16Data> {
        Error::check_len("scsi.read_capacity_16_data", Self::LEN, buf.len())?;
        Ok(ReadCapacity16Data {
            last_lba: read_u64(buf, 0),
            block_length: read_u32(buf, 8),
            prot: buf[12],
            exponents: buf[13],
            lbp_alignment: read_u16(buf, 14),
        })
    }
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.read_capacity_16_data", buf, Self::LEN);
        buf.fill(0);
        write_u64(buf, 0, self.last_lba);
        write_u32(buf, 8, self.block_length);
        buf[12] = self.prot;
        buf[13] = self.exponents;
        write_u16(buf, 14, self.lbp_alignment);
    }
    to_bytes!();
    /// LBPME: logical block provisioning (thin provisioning) enabled.
    pub fn lbpme(&self) -> bool {
        self.lbp_alignment & 0x8000 != 0
    }
}

impl Dissect for ReadCapacity16Data {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "scsi_read_capacity_16_data",
            "READ CAPACITY(16) Data",
            |t| {
                t.dec("last_lba", "Returned Logical Block Address", self.last_lba);
                t.dec(
                    "block_length",
                    "Logical Block Length In Bytes",
                    self.block_length,
                );
                t.flag("prot_en", "PROT_EN", self.prot & 1 != 0);
                t.dec(
                    "lbppbe",
                    "Logical Blocks Per Physical Block Exponent",
                    self.exponents & 0x0f,
                );
                t.flag("lbpme", "LBPME", self.lbpme());
                t.dec(
                    "lowest_aligned_lba",
                    "Lowest Aligned LBA",
                    self.lbp_alignment & 0x3fff,
                );
            },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// REPORT LUNS data
// ---------------------------------------------------------------------------------------------

/// The REPORT LUNS parameter data: LUN LIST LENGTH, 4 reserved bytes, 8-byte LUNs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportLunsData {
    /// LUN LIST LENGTH in bytes (8 × number of LUNs) of the untruncated list.
    pub list_length: u32,
    /// The LUNs present in the (possibly truncated) data, as 8-byte big-endian values.
    pub luns: Vec<u64>,
}

impl ReportLunsData {
    /// A list with its length set from `luns`.
    pub fn new(luns: Vec<u64>) -> ReportLunsData {
        ReportLunsData {
            list_length: (luns.len() as u32).saturating_mul(8),
            luns,
        }
    }

    /// Parses the header and the LUNs the list length announces, as far as they are present
    /// (whole entries only).
    pub fn parse(buf: &[u8]) -> Result<ReportLunsData> {
        Error::check_len("scsi.report_luns_data", 8, buf.len())?;
        let list_length = read_u32(buf, 0);
        let n = (list_length as usize / 8).min((buf.len() - 8) / 8);
        let luns = (0..n).map(|i| read_u64(buf, 8 + 8 * i)).collect();
        Ok(ReportLunsData { list_length, luns })
    }
    pub fn buffer_len(&self) -> usize {
        8 + 8 * self.luns.len()
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.report_luns_data", buf, self.buffer_len());
        buf.fill(0);
        write_u32(buf, 0, self.list_length);
        for (i, l) in self.luns.iter().enumerate() {
            write_u64(buf, 8 + 8 * i, *l);
        }
    }
    to_bytes!();
}

impl Dissect for ReportLunsData {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("scsi_report_luns_data", "REPORT LUNS Data", |t| {
            t.dec("list_length", "LUN List Length", self.list_length);
            t.list("luns", "LUN List", |t| {
                for l in &self.luns {
                    t.hex("lun", "LUN", *l, 16);
                }
            });
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Mode parameter headers and the short LBA block descriptor
// ---------------------------------------------------------------------------------------------

/// The 4-byte mode parameter header of MODE SENSE(6) (SPC-4 table 451).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeHeader6Repr {
    /// MODE DATA LENGTH (bytes after this field, untruncated).
    pub mode_data_length: u8,
    pub medium_type: u8,
    /// DEVICE-SPECIFIC PARAMETER (block devices: WP bit 7, DPOFUA bit 4).
    pub device_specific: u8,
    pub block_descriptor_length: u8,
}

impl ModeHeader6Repr {
    pub const LEN: usize = 4;
    pub fn parse(buf: &[u8]) -> Result<ModeHeader6Repr> {
        Error::check_len("scsi.mode_header_6", Self::LEN, buf.len())?;
        Ok(ModeHeader6Repr {
            mode_data_length: buf[0],
            medium_type: buf[1],
            device_specific: buf[2],
            block_descriptor_length: buf[3],
        })
    }
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.mode_header_6", buf, Self::LEN);
        buf[0] = self.mode_data_length;
        buf[1] = self.medium_type;
        buf[2] = self.device_specific;
        buf[3] = self.block_descriptor_length;
    }
    pub fn wp(&self) -> bool {
        self.device_specific & 0x80 != 0
    }
    pub fn dpofua(&self) -> bool {
        self.device_specific & 0x10 != 0
    }
}

/// The 8-byte mode parameter header of MODE SENSE(10) (SPC-4 table 452).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeHeader10Repr {
    pub mode_data_length: u16,
    pub medium_type: u8,
    pub device_specific: u8,
    /// LONGLBA: block descriptors are 16 bytes.
    pub longlba: bool,
    pub block_descriptor_length: u16,
}

impl ModeHeader10Repr {
    pub const LEN: usize = 8;
    pub fn parse(buf: &[u8]) -> Result<ModeHeader10Repr> {
        Error::check_len("scsi.mode_header_10", Self::LEN, buf.len())?;
        Ok(ModeHeader10Repr {
            mode_data_length: read_u16(buf, 0),
            medium_type: buf[2],
            device_specific: buf[3],
            longlba: buf[4] & 1 != 0,
            block_descriptor_length: read_u16(buf, 6),
        })
    }
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.mode_header_10", buf, Self::LEN);
        buf.fill(0);
        write_u16(buf, 0, self.mode_data_length);
        buf[2] = self.medium_type;
        buf[3] = self.device_specific;
        buf[4] = u8::from(self.longlba);
        write_u16(buf, 6, self.block_descriptor_length);
    }
}

/// The short LBA mode parameter block descriptor (SBC-3 table 124, 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockDescriptor {
    pub blocks: u32,
    /// LOGICAL BLOCK LENGTH (24 bits).
    pub block_length: u32,
}

impl BlockDescriptor {
    pub const LEN: usize = 8;
    pub fn parse(buf: &[u8]) -> Result<BlockDescriptor> {
        Error::check_len("scsi.block_descriptor", Self::LEN, buf.len())?;
        Ok(BlockDescriptor {
            blocks: read_u32(buf, 0),
            block_length: crate::field::read_u24(buf, 5),
        })
    }
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        check_emit_len("scsi.block_descriptor", buf, Self::LEN);
        write_u32(buf, 0, self.blocks);
        buf[4] = 0;
        crate::field::write_u24(buf, 5, self.block_length);
    }
}

/// The fields both mode parameter headers share, around `device` (what each says about the
/// device-specific parameter).
fn dissect_mode_header(
    t: &mut Tree,
    mode_data_length: u16,
    medium_type: u8,
    block_descriptor_length: u16,
    device: impl FnOnce(&mut Tree),
) {
    t.subtree("scsi_mode_header", "Mode Parameter Header", |t| {
        t.dec("mode_data_length", "Mode Data Length", mode_data_length);
        t.hex("medium_type", "Medium Type", medium_type, 2);
        device(t);
        t.dec(
            "block_descriptor_length",
            "Block Descriptor Length",
            block_descriptor_length,
        );
    });
}

impl Dissect for ModeHeader6Repr {
    fn dissect(&self, t: &mut Tree) {
        let (mdl, bdl) = (self.mode_data_length, self.block_descriptor_length);
        dissect_mode_header(t, mdl.into(), self.medium_type, bdl.into(), |t| {
            t.flag("wp", "WP", self.wp());
            t.flag("dpofua", "DPOFUA", self.dpofua());
        });
    }
}

impl Dissect for ModeHeader10Repr {
    fn dissect(&self, t: &mut Tree) {
        let (mdl, bdl) = (self.mode_data_length, self.block_descriptor_length);
        dissect_mode_header(t, mdl, self.medium_type, bdl, |t| {
            t.hex(
                "device_specific",
                "Device-Specific Parameter",
                self.device_specific,
                2,
            );
            t.flag("longlba", "LONGLBA", self.longlba);
        });
    }
}
