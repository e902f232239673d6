//! Logical units: LUN numbering, a LUN's configuration, and the parameter data it answers
//! with (standard INQUIRY data, VPD pages, mode pages, READ CAPACITY data).

use softrdma_wire::field::{write_u16, write_u32, write_u64};
use softrdma_wire::scsi::{
    BlockDescriptor, BlockDeviceCharacteristicsVpd, BlockLimitsVpd, Designator, DeviceType,
    ReadCapacity10Data, ReadCapacity16Data, StandardInquiry, VpdPage, VpdPageCode,
};

use crate::pr::PrState;
use crate::store::BackingStore;

/// A LUN as the 8-byte SAM LUN field carries it, converted the way LIO converts it: Linux's
/// `scsilun_to_int` on the way in (fabric drivers such as `ib_srpt` call it on the SRP_CMD's
/// LUN) and `int_to_scsilun` on the way out (`spc_emulate_report_luns`). Each 2-byte level
/// is swapped into place, so a single-level LUN `n < 65536` is bytes 0–1 = `n` big-endian,
/// the rest zero; no address-method bits are added (LUN 300 is `01 2c 00 ..`, which a strict
/// SAM decoder reads as peripheral device addressing with bus 1; Linux reads it back as 300).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LunId(pub u64);

impl LunId {
    /// The LUN in an 8-byte LUN field (`scsilun_to_int`).
    pub fn from_wire(b: [u8; 8]) -> LunId {
        let mut v = 0u64;
        for level in 0..4 {
            let hi = u64::from(b[2 * level]);
            let lo = u64::from(b[2 * level + 1]);
            v |= ((hi << 8) | lo) << (16 * level);
        }
        LunId(v)
    }

    /// The 8-byte LUN field for the LUN (`int_to_scsilun`).
    pub fn to_wire(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        for level in 0..4 {
            let part = (self.0 >> (16 * level)) as u16;
            b[2 * level..2 * level + 2].copy_from_slice(&part.to_be_bytes());
        }
        b
    }

    /// Whether the LUN fits the first level (what a LUN id configured here must be).
    pub fn is_single_level(self) -> bool {
        self.0 <= 0xffff
    }
}

impl std::fmt::Display for LunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How a LUN presents itself. The defaults are LIO's (`LIO-ORG`, revision `4.0`, IEEE
/// company ID 0x001405 for the NAA designator, the backend's product name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunConfig {
    /// T10 VENDOR IDENTIFICATION (8 ASCII characters, space padded).
    pub vendor: String,
    /// PRODUCT IDENTIFICATION (16 characters); `None`: the store's (`FILEIO`,
    /// `RAMDISK-MCP`), as LIO names devices after their backend.
    pub product: Option<String>,
    /// PRODUCT REVISION LEVEL (4 characters).
    pub revision: String,
    /// The unit serial number (VPD page 0x80, and the source of the NAA designator's
    /// vendor-specific digits). Without one, LIO lists no VPD pages in page 0x00 and leaves
    /// the NAA designator out of page 0x83 (`DF_EMULATED_VPD_UNIT_SERIAL` unset); so do we.
    pub unit_serial: Option<String>,
    /// IEEE COMPANY_ID of the NAA IEEE Registered Extended designator.
    pub company_id: u32,
    /// Refuse writes even if the store takes them (LIO's per-mapping `lun_access_ro`).
    pub read_only: bool,
    /// RELATIVE TARGET PORT IDENTIFIER of the port the LUN is reached through.
    pub relative_port_id: u16,
    /// The largest READ/WRITE we take, in bytes: MAXIMUM TRANSFER LENGTH and OPTIMAL
    /// TRANSFER LENGTH in VPD page 0xB0 (LIO FILEIO's `FD_MAX_BYTES`, 8 MiB).
    pub max_transfer_bytes: u32,
    /// TAS in the control mode page: tasks another I_T nexus aborts (CLEAR TASK SET, LUN
    /// RESET) end with TASK ABORTED status (LIO's `emulate_tas`, on by default).
    pub tas: bool,
    /// Logical block provisioning (LIO's `emulate_tpu` and `emulate_tpws`): UNMAP and WRITE
    /// SAME with UNMAP deallocate, READ CAPACITY(16) says LBPME and LBPRZ (unmapped blocks
    /// read as zeroes: a file's holes, a memory store's zeroes), VPD page 0xB0 is the long
    /// one with the UNMAP limits and page 0xB2 lists UNMAP and WRITE SAME. On by default,
    /// so that Linux sends discards (LIO defaults it off; targetcli users turn it on).
    pub thin_provisioning: bool,
    /// MAXIMUM UNMAP LBA COUNT: the most blocks one UNMAP block descriptor may name (LIO
    /// FILEIO: 0x2000).
    pub max_unmap_lba_count: u32,
    /// MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT (LIO FILEIO: 1, "hardcoded to 1 in Linux").
    pub max_unmap_block_descriptors: u32,
    /// MAXIMUM WRITE SAME LENGTH in blocks: 0xFFFF, LIO IBLOCK's (FILEIO says 0x1000).
    /// Linux sends discards as WRITE SAME(16) with UNMAP of 0xFFFF blocks when the LUN lists
    /// no VPD pages (no unit serial), so a smaller limit would fail them.
    pub max_write_same_len: u32,
}

impl Default for LunConfig {
    fn default() -> LunConfig {
        LunConfig {
            vendor: "LIO-ORG".into(),
            product: None,
            revision: "4.0".into(),
            unit_serial: None,
            company_id: 0x001405,
            read_only: false,
            relative_port_id: 1,
            max_transfer_bytes: 8 << 20,
            tas: true,
            thin_provisioning: true,
            max_unmap_lba_count: 0x2000,
            max_unmap_block_descriptors: 1,
            max_write_same_len: 0xffff,
        }
    }
}

/// A logical unit: a store and how it presents itself.
pub struct LogicalUnit {
    pub(crate) store: Box<dyn BackingStore + Send>,
    pub(crate) config: LunConfig,
    /// The store's medium is lent to the transport ([`crate::Target::lend_medium`]).
    pub(crate) lent: bool,
    /// Reservations: persistent (registrations, the reservation) and SPC-2.
    pub(crate) pr: PrState,
    /// Why the kept persistent reservation state could not be read, if it could not.
    pub(crate) pr_load_error: Option<String>,
}

impl std::fmt::Debug for LogicalUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogicalUnit")
            .field("blocks", &self.blocks())
            .field("block_size", &self.block_size())
            .field("read_only", &self.read_only())
            .field("config", &self.config)
            .finish()
    }
}

impl LogicalUnit {
    /// A LU over `store`. A store that keeps reservations across a restart (APTPL; a file
    /// store's state file beside it) has them read back here.
    pub fn new(store: Box<dyn BackingStore + Send>, config: LunConfig) -> LogicalUnit {
        let (pr, pr_load_error) = match store.load_reservations() {
            Ok(Some(text)) => match PrState::from_aptpl_text(&text) {
                Ok(pr) => (pr, None),
                Err(e) => (PrState::default(), Some(e.to_string())),
            },
            Ok(None) => (PrState::default(), None),
            Err(e) => (PrState::default(), Some(e.to_string())),
        };
        LogicalUnit {
            store,
            config,
            lent: false,
            pr,
            pr_load_error,
        }
    }

    /// The LU's reservations.
    pub fn reservations(&self) -> &PrState {
        &self.pr
    }

    /// Why the reservations kept across a restart could not be read back (they start
    /// empty then), if so.
    pub fn reservations_load_error(&self) -> Option<&str> {
        self.pr_load_error.as_deref()
    }

    pub fn config(&self) -> &LunConfig {
        &self.config
    }

    /// The store, for inspection.
    pub fn store(&self) -> &dyn BackingStore {
        self.store.as_ref()
    }

    /// The medium is lent to the transport: READ and WRITE move data in place.
    pub fn medium_lent(&self) -> bool {
        self.lent
    }

    pub fn block_size(&self) -> u32 {
        self.store.block_size().bytes()
    }

    /// Number of logical blocks.
    pub fn blocks(&self) -> u64 {
        self.store.size() / u64::from(self.block_size())
    }

    /// Writes are refused: the store is read-only or the LUN is configured so.
    pub fn read_only(&self) -> bool {
        self.config.read_only || self.store.read_only()
    }

    /// WCE: the store has a volatile write cache.
    pub fn write_cache(&self) -> bool {
        self.store.write_cache() && !self.read_only()
    }

    /// DPO and FUA are honoured (DPOFUA in the mode parameter header). LIO's
    /// `target_check_fua` ties FUA to the write cache (`emulate_write_cache` and
    /// `emulate_fua_write`), and `sbc_check_dpofua` rejects DPO/FUA bits otherwise.
    pub fn dpofua(&self) -> bool {
        self.write_cache()
    }

    /// UNMAP and WRITE SAME with UNMAP deallocate (LBPME); off on a read-only LUN.
    pub fn thin_provisioning(&self) -> bool {
        self.config.thin_provisioning && !self.read_only()
    }

    /// MAXIMUM TRANSFER LENGTH in blocks.
    pub fn max_transfer_blocks(&self) -> u32 {
        (self.config.max_transfer_bytes / self.block_size()).max(1)
    }

    pub(crate) fn identity(&self, target: &crate::TargetConfig) -> Identity<'_> {
        Identity {
            peripheral: DeviceType::DISK.0,
            vendor: &self.config.vendor,
            product: self
                .config
                .product
                .as_deref()
                .unwrap_or_else(|| self.store.product()),
            revision: &self.config.revision,
            serial: self.config.unit_serial.as_deref(),
            company_id: self.config.company_id,
            rtpi: self.config.relative_port_id,
            protocol_id: target.protocol_id,
            disk: true,
            tpgs: !target.port_groups.is_empty(),
        }
    }

    /// READ CAPACITY(10) data (`sbc_emulate_readcapacity`): the last LBA, 0xFFFFFFFF when
    /// it does not fit.
    pub(crate) fn read_capacity10(&self) -> [u8; 8] {
        let last = self.blocks().saturating_sub(1);
        let d = ReadCapacity10Data {
            last_lba: u32::try_from(last).unwrap_or(u32::MAX),
            block_length: self.block_size(),
        };
        let mut b = [0u8; 8];
        d.emit(&mut b);
        b
    }

    /// READ CAPACITY(16) data (`sbc_emulate_readcapacity_16`): no protection, one logical
    /// block per physical block; with thin provisioning LBPME and LBPRZ (every store reads
    /// unmapped blocks as zeroes, LIO's `unmap_zeroes_data`).
    pub(crate) fn read_capacity16(&self) -> [u8; 32] {
        let d = ReadCapacity16Data {
            last_lba: self.blocks().saturating_sub(1),
            block_length: self.block_size(),
            prot: 0,
            exponents: 0,
            lbp_alignment: if self.thin_provisioning() {
                0x8000 | 0x4000 // LBPME | LBPRZ
            } else {
                0
            },
        };
        let mut b = [0u8; 32];
        d.emit(&mut b);
        b
    }

    /// The mode page `page` (subpage 0) as `spc_modesense_*` builds it, into `out`; its
    /// length, or `None` if we have no such page. `changeable` (PC = 01b) gives the page
    /// header only, every field zero: nothing is changeable, as in LIO.
    pub(crate) fn mode_page(&self, page: u8, changeable: bool, out: &mut [u8]) -> Option<usize> {
        let len = match page {
            // Read-Write Error Recovery (spc_modesense_rwrecovery): all defaults.
            0x01 => 12,
            // Caching (spc_modesense_caching): WCE as the store, DRA (read-ahead disabled).
            0x08 => 20,
            // Control (spc_modesense_control).
            0x0a => 12,
            // Informational Exceptions Control (spc_modesense_informational_exceptions).
            0x1c => 12,
            _ => return None,
        };
        let p = &mut out[..len];
        p.fill(0);
        p[0] = page;
        p[1] = (len - 2) as u8;
        if changeable {
            return Some(len);
        }
        match page {
            0x08 => {
                if self.write_cache() {
                    p[2] = 0x04; // WCE
                }
                p[12] = 0x20; // DRA
            }
            0x0a => {
                p[2] = 0x02; // GLTSD; D_SENSE clear: fixed-format sense
                p[3] = 0x10; // QUEUE ALGORITHM MODIFIER 1: unrestricted reordering
                p[4] = 0x00; // UA_INTLCK_CTRL 00b: a reported UA is cleared
                if self.config.tas {
                    p[5] = 0x40; // TAS
                }
                p[8] = 0xff; // BUSY TIMEOUT PERIOD: unlimited
                p[9] = 0xff;
                p[11] = 30; // EXTENDED SELF-TEST COMPLETION TIME
            }
            _ => {}
        }
        Some(len)
    }

    /// The short LBA mode parameter block descriptor: NUMBER OF LOGICAL BLOCKS (saturated at
    /// 0xFFFFFFFF) and LOGICAL BLOCK LENGTH.
    pub(crate) fn short_block_descriptor(&self) -> [u8; 8] {
        let d = BlockDescriptor {
            blocks: u32::try_from(self.blocks()).unwrap_or(u32::MAX),
            block_length: self.block_size(),
        };
        let mut b = [0u8; 8];
        d.emit(&mut b);
        b
    }

    /// The long LBA mode parameter block descriptor (SBC-4 table 216, 16 bytes).
    pub(crate) fn long_block_descriptor(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        write_u64(&mut b, 0, self.blocks());
        write_u32(&mut b, 12, self.block_size());
        b
    }

    /// VPD page 0xB0 (`spc_emulate_evpd_b0`): WSNZ, COMPARE AND WRITE of one block, the
    /// transfer lengths; with thin provisioning the 0x3C-long page with the UNMAP limits
    /// (granularity 1, no alignment) and MAXIMUM WRITE SAME LENGTH, else the 0x10-long one.
    pub(crate) fn block_limits(&self) -> BlockLimitsVpd {
        let max = self.max_transfer_blocks();
        let tp = self.thin_provisioning();
        BlockLimitsVpd {
            peripheral: DeviceType::DISK.0,
            long: tp,
            wsnz: true,
            max_compare_and_write_len: 1,
            opt_transfer_len_granularity: 1,
            max_transfer_len: max,
            opt_transfer_len: max,
            max_unmap_lba_count: if tp {
                self.config.max_unmap_lba_count
            } else {
                0
            },
            max_unmap_block_descriptor_count: if tp {
                self.config.max_unmap_block_descriptors
            } else {
                0
            },
            opt_unmap_granularity: u32::from(tp),
            max_write_same_len: if tp {
                u64::from(self.config.max_write_same_len)
            } else {
                0
            },
            ..BlockLimitsVpd::default()
        }
    }

    /// VPD page 0xB2, Logical Block Provisioning (`spc_emulate_evpd_b2`, SBC-4 §6.6.6):
    /// PAGE LENGTH 4, THRESHOLD EXPONENT 0; with thin provisioning LBPU (UNMAP), LBPWS and
    /// LBPWS10 (WRITE SAME(16)/(10) with UNMAP), LBPRZ 001b (unmapped blocks read as zeroes)
    /// and PROVISIONING TYPE 010b (thin); without, all zero (fully provisioned).
    pub(crate) fn logical_block_provisioning(&self) -> VpdPage {
        let mut p = vec![0u8; 4];
        if self.thin_provisioning() {
            p[1] = 0x80 | 0x40 | 0x20 | (1 << 2);
            p[2] = 0x02;
        }
        VpdPage::new(
            DeviceType::DISK.0,
            VpdPageCode::LOGICAL_BLOCK_PROVISIONING,
            p,
        )
    }

    /// VPD page 0xB1 (`spc_emulate_evpd_b1`): MEDIUM ROTATION RATE 1 for a non-rotating
    /// store, 0 (not reported) otherwise.
    pub(crate) fn block_characteristics(&self) -> BlockDeviceCharacteristicsVpd {
        BlockDeviceCharacteristicsVpd {
            peripheral: DeviceType::DISK.0,
            rotation_rate: if self.store.non_rotational() {
                BlockDeviceCharacteristicsVpd::NON_ROTATING
            } else {
                0
            },
            ..BlockDeviceCharacteristicsVpd::default()
        }
    }
}

/// What INQUIRY says about a LUN (a real one, or the virtual LUN 0).
pub(crate) struct Identity<'a> {
    /// Byte 0 of INQUIRY data: peripheral qualifier and device type.
    pub peripheral: u8,
    pub vendor: &'a str,
    pub product: &'a str,
    pub revision: &'a str,
    pub serial: Option<&'a str>,
    pub company_id: u32,
    pub rtpi: u16,
    pub protocol_id: u8,
    /// A direct-access block device (SBC-3 version descriptor, block VPD pages).
    pub disk: bool,
    /// TPGS 01b in the standard INQUIRY data: implicit ALUA (target port groups configured).
    pub tpgs: bool,
}

/// `s` as an ASCII field of `N` bytes, left aligned, space padded (SPC-4 §4.4.1).
fn ascii_field<const N: usize>(s: &str) -> [u8; N] {
    let mut f = [b' '; N];
    for (d, c) in f.iter_mut().zip(s.bytes()) {
        *d = if (0x20..0x7f).contains(&c) { c } else { b' ' };
    }
    f
}

/// VERSION DESCRIPTOR of the SCSI transport for a PROTOCOL IDENTIFIER
/// (`spc_find_scsi_transport_vd`).
fn transport_version_descriptor(protocol_id: u8) -> u16 {
    match protocol_id {
        0 => 0x0a40, // FCP-4
        3 => 0x04ea, // SBP-3
        4 => 0x0940, // SRP
        5 => 0x0960, // iSCSI
        6 => 0x0c60, // SAS-3
        _ => 0,
    }
}

/// The VPD pages we answer, in page 0x00's order.
pub(crate) const VPD_PAGES: [u8; 6] = [0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2];

impl Identity<'_> {
    /// Standard INQUIRY data, 96 bytes (ADDITIONAL LENGTH 91) as `spc_emulate_inquiry_std`
    /// lays them out: SPC-4, RESPONSE DATA FORMAT 2, CMDQUE, and the version descriptors
    /// SAM-5, the transport, SPC-4, SBC-3.
    pub fn standard_inquiry(&self) -> StandardInquiry {
        let mut extra = vec![0u8; 60];
        // Version descriptors at bytes 58, 60, 62, 64 (extra starts at byte 36).
        write_u16(&mut extra, 22, 0x00a0); // SAM-5
        write_u16(
            &mut extra,
            24,
            transport_version_descriptor(self.protocol_id),
        );
        write_u16(&mut extra, 26, 0x0460); // SPC-4
        if self.disk {
            write_u16(&mut extra, 28, 0x04c0); // SBC-3
        }
        StandardInquiry {
            qualifier: self.peripheral >> 5,
            device_type: DeviceType(self.peripheral & 0x1f),
            rmb: false,
            version: 6,
            byte3: 2,
            additional_len: 91,
            // TPGS 01b (implicit ALUA) with target port groups; no SCCS, 3PC or PROTECT: we
            // have no SET TARGET PORT GROUPS, EXTENDED COPY or protection information (LIO
            // sets SCCS, TPGS 3 and 3PC).
            byte5: if self.tpgs { 0x10 } else { 0 },
            byte6: 0,
            byte7: 0x02, // CMDQUE
            vendor: ascii_field(self.vendor),
            product: ascii_field(self.product),
            revision: ascii_field(self.revision),
            extra,
        }
    }

    /// VPD page 0x00 (`spc_emulate_evpd_00`): our pages, or none without a unit serial.
    pub fn supported_pages(&self) -> VpdPage {
        let pages: &[u8] = if self.serial.is_some() {
            &VPD_PAGES
        } else {
            &[]
        };
        VpdPage::supported_pages(self.peripheral, pages)
    }

    /// VPD page 0x80 (`spc_emulate_evpd_80`): the serial and its NUL terminator, or an empty
    /// page.
    pub fn unit_serial(&self) -> VpdPage {
        let mut p = Vec::new();
        if let Some(s) = self.serial {
            p.extend_from_slice(s.as_bytes());
            p.push(0);
            p.truncate(255);
        }
        VpdPage::new(
            self.peripheral,
            softrdma_wire::scsi::VpdPageCode::UNIT_SERIAL_NUMBER,
            p,
        )
    }

    /// The NAA IEEE Registered Extended designator (`spc_gen_naa_6h_vendor_specific`): NAA
    /// 6h, the 24-bit company ID, then the serial's hex digits packed as nibbles (non-hex
    /// characters skipped) until the 16 bytes are full.
    pub fn naa(&self, serial: &str) -> [u8; 16] {
        let cid = self.company_id;
        let mut b = [0u8; 16];
        b[0] = 0x60 | ((cid >> 20) & 0x0f) as u8;
        b[1] = (cid >> 12) as u8;
        b[2] = (cid >> 4) as u8;
        b[3] = ((cid & 0x0f) << 4) as u8;
        // Nibble index from the low nibble of byte 3 to the end of the designator.
        let digits = serial.chars().filter_map(|c| c.to_digit(16));
        for (nibble, d) in (7..32).zip(digits) {
            let byte = nibble / 2;
            if nibble % 2 == 0 {
                b[byte] |= (d as u8) << 4;
            } else {
                b[byte] |= d as u8;
            }
        }
        b
    }

    /// VPD page 0x83 (`spc_emulate_evpd_83`), in LIO's order: the NAA designator (with a
    /// serial), the T10 vendor ID designator (vendor, then `product:serial`, NUL
    /// terminated), the relative target port, the target port group and logical unit
    /// group (when configured), and the SCSI name strings of the target port
    /// (`<name>,t,0x<tpgt>`) and of the target device (`<name>`).
    pub fn device_identification(&self, target: &crate::TargetConfig) -> VpdPage {
        let proto = target.protocol_id & 0x0f;
        let mut ds = Vec::new();
        if let Some(serial) = self.serial {
            ds.push(Designator {
                protocol_id: 0,
                code_set: 1,
                piv: false,
                association: 0,
                designator_type: 3,
                designator: self.naa(serial).to_vec(),
            });
        }
        let mut t10 = ascii_field::<8>(self.vendor).to_vec();
        if let Some(serial) = self.serial {
            t10.extend_from_slice(self.product.as_bytes());
            t10.push(b':');
            t10.extend_from_slice(serial.as_bytes());
        }
        t10.push(0);
        t10.truncate(255);
        ds.push(Designator {
            protocol_id: 0,
            code_set: 2,
            piv: false,
            association: 0,
            designator_type: 1,
            designator: t10,
        });
        let port_designator = |designator_type: u8, id: u16| Designator {
            protocol_id: proto,
            code_set: 1,
            piv: true,
            association: 1,
            designator_type,
            designator: vec![0, 0, (id >> 8) as u8, id as u8],
        };
        ds.push(port_designator(4, self.rtpi));
        if let Some(g) = target.target_port_group {
            ds.push(port_designator(5, g));
        }
        if let Some(g) = target.lu_group {
            ds.push(Designator {
                protocol_id: 0,
                code_set: 1,
                piv: false,
                association: 0,
                designator_type: 6,
                designator: vec![0, 0, (g >> 8) as u8, g as u8],
            });
        }
        let name_string = |s: String, association: u8| {
            // NUL terminated, NUL padded to a multiple of 4, at most 252 bytes (the length
            // field is one byte; LIO's 256 cap would wrap it).
            let mut v = s.into_bytes();
            v.truncate(251);
            v.push(0);
            while v.len() % 4 != 0 {
                v.push(0);
            }
            Designator {
                protocol_id: proto,
                code_set: 3,
                piv: true,
                association,
                designator_type: 8,
                designator: v,
            }
        };
        ds.push(name_string(
            format!("{},t,0x{:04x}", target.port_name, target.tpgt),
            1,
        ));
        ds.push(name_string(target.port_name.clone(), 2));
        VpdPage::device_identification(self.peripheral, &ds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lun_wire_encoding_as_linux() {
        // int_to_scsilun / scsilun_to_int: 2-byte levels, no address-method bits.
        for (id, wire) in [
            (0u64, [0u8; 8]),
            (1, [0, 1, 0, 0, 0, 0, 0, 0]),
            (255, [0, 0xff, 0, 0, 0, 0, 0, 0]),
            (300, [0x01, 0x2c, 0, 0, 0, 0, 0, 0]),
            (0xffff, [0xff, 0xff, 0, 0, 0, 0, 0, 0]),
            (0x0001_0002, [0, 2, 0, 1, 0, 0, 0, 0]),
            (
                0x1122_3344_5566_7788,
                [0x77, 0x88, 0x55, 0x66, 0x33, 0x44, 0x11, 0x22],
            ),
        ] {
            assert_eq!(LunId(id).to_wire(), wire, "{id:#x}");
            assert_eq!(LunId::from_wire(wire), LunId(id));
        }
        // Flat-space addressing of LUN 1 (0x4001) is LUN 16385 here, as in LIO.
        assert_eq!(LunId::from_wire([0x40, 1, 0, 0, 0, 0, 0, 0]), LunId(0x4001));
        assert!(LunId(0xffff).is_single_level() && !LunId(0x1_0000).is_single_level());
        assert_eq!(LunId(7).to_string(), "7");
    }

    #[test]
    fn naa_designator_as_lio() {
        let cfg = crate::TargetConfig::default();
        let id = Identity {
            peripheral: 0,
            vendor: "LIO-ORG",
            product: "FILEIO",
            revision: "4.0",
            serial: None,
            company_id: 0x001405,
            rtpi: 1,
            protocol_id: cfg.protocol_id,
            disk: true,
            tpgs: false,
        };
        // Non-hex characters (a UUID's dashes) are skipped; short serials leave zeroes;
        // long ones stop at 25 digits.
        assert_eq!(
            id.naa("d3f5-b1c2"),
            [0x60, 0x01, 0x40, 0x5d, 0x3f, 0x5b, 0x1c, 0x20, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let long = "0123456789abcdef0123456789abcdef";
        let n = id.naa(long);
        assert_eq!(n[3], 0x50);
        assert_eq!(
            &n[4..16],
            &[0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78]
        );
        let other = Identity {
            company_id: 0xabcdef,
            ..id
        };
        assert_eq!(&other.naa("")[..4], &[0x6a, 0xbc, 0xde, 0xf0]);
    }
}
