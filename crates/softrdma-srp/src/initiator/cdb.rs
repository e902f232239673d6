//! CDBs the SCSI midlayer and `sd` send (what a program needs to use a disk), emitted by
//! the wire crate's CDB representations.

use softrdma_wire::scsi::{
    Cdb, InquiryRepr, ReadCapacity10Repr, ReadCapacity16Repr, ReadWriteRepr, ReportLunsRepr,
    RwKind, SyncCacheRepr,
};

/// TEST UNIT READY.
pub fn test_unit_ready() -> [u8; 6] {
    let mut c = [0; 6];
    Cdb::TestUnitReady { control: 0 }.emit(&mut c);
    c
}

/// INQUIRY (standard data, `alloc` bytes).
pub fn inquiry(alloc: u16) -> [u8; 6] {
    let mut c = [0; 6];
    InquiryRepr {
        alloc_len: alloc,
        ..InquiryRepr::default()
    }
    .emit(&mut c);
    c
}

/// REPORT LUNS.
pub fn report_luns(alloc: u32) -> [u8; 12] {
    let mut c = [0; 12];
    ReportLunsRepr {
        alloc_len: alloc,
        ..ReportLunsRepr::default()
    }
    .emit(&mut c);
    c
}

/// READ CAPACITY(10).
pub fn read_capacity10() -> [u8; 10] {
    let mut c = [0; 10];
    ReadCapacity10Repr::default().emit(&mut c);
    c
}

/// READ CAPACITY(16) (SERVICE ACTION IN(16)), 32 bytes.
pub fn read_capacity16() -> [u8; 16] {
    let mut c = [0; 16];
    ReadCapacity16Repr {
        alloc_len: 32,
        ..ReadCapacity16Repr::default()
    }
    .emit(&mut c);
    c
}

/// READ/WRITE as `sd` picks them: (10) when the LBA fits in 32 bits and the count in 16,
/// else (16). Returns the CDB and its length.
pub fn rw(write: bool, lba: u64, blocks: u32) -> ([u8; 16], usize) {
    let ten = lba <= u64::from(u32::MAX) && blocks <= 0xffff;
    let kind = match (ten, write) {
        (true, false) => RwKind::Read10,
        (true, true) => RwKind::Write10,
        (false, false) => RwKind::Read16,
        (false, true) => RwKind::Write16,
    };
    let r = ReadWriteRepr {
        kind,
        lba,
        transfer_len: blocks,
        flags: 0,
        group: 0,
        control: 0,
    };
    let mut c = [0; 16];
    let n = r.buffer_len();
    r.emit(&mut c[..n]);
    (c, n)
}

/// WRITE(10/16) with FUA (force unit access: on stable media before GOOD), what `sd`
/// sends for a REQ_FUA write.
pub fn write_fua(lba: u64, blocks: u32) -> ([u8; 16], usize) {
    let (mut c, n) = rw(true, lba, blocks);
    c[1] |= ReadWriteRepr::FUA;
    (c, n)
}

/// UNMAP (SBC-3 §5.28) of one range: the CDB, and its 24-byte parameter list (an 8-byte
/// header and one block descriptor), the data-out `sd_setup_unmap_cmnd` sends.
pub fn unmap(lba: u64, blocks: u32) -> ([u8; 10], [u8; 24]) {
    let mut c = [0u8; 10];
    c[0] = 0x42;
    c[7..9].copy_from_slice(&24u16.to_be_bytes());
    let mut p = [0u8; 24];
    // UNMAP DATA LENGTH (the bytes after it) and BLOCK DESCRIPTOR DATA LENGTH.
    p[0..2].copy_from_slice(&22u16.to_be_bytes());
    p[2..4].copy_from_slice(&16u16.to_be_bytes());
    p[8..16].copy_from_slice(&lba.to_be_bytes());
    p[16..20].copy_from_slice(&blocks.to_be_bytes());
    (c, p)
}

/// WRITE SAME(16) (SBC-3 §5.42): one block of data-out written to `blocks` blocks from
/// `lba`; with `unmap` the target may deallocate them instead (`sd`'s REQ_OP_WRITE_ZEROES
/// without REQ_NOUNMAP sets it).
pub fn write_same16(lba: u64, blocks: u32, unmap: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x93;
    if unmap {
        c[1] = 0x08;
    }
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// SYNCHRONIZE CACHE(10).
pub fn sync_cache() -> [u8; 10] {
    let mut c = [0; 10];
    SyncCacheRepr::default().emit(&mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `sd` sends (what this module built by hand before), and each parses back
    /// to what was emitted.
    #[test]
    fn bytes_as_sd_sends_them_and_parse_back() {
        assert_eq!(test_unit_ready(), [0; 6]);
        assert_eq!(inquiry(96), [0x12, 0, 0, 0, 96, 0]);
        assert_eq!(
            report_luns(4096),
            [0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0]
        );
        assert_eq!(read_capacity10(), [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut rc16 = [0u8; 16];
        rc16[0] = 0x9e;
        rc16[1] = 0x10;
        rc16[13] = 32;
        assert_eq!(read_capacity16(), rc16);
        assert_eq!(sync_cache(), [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let (c, n) = rw(false, 0x0102_0304, 0x0506);
        assert_eq!(&c[..n], &[0x28, 0, 1, 2, 3, 4, 0, 5, 6, 0]);
        let (c, n) = rw(true, 1 << 32, 8);
        assert_eq!(
            &c[..n],
            &[0x8a, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0]
        );
        let (c, n) = rw(false, 8, 0x1_0000);
        assert_eq!((c[0], n), (0x88, 16));

        assert_eq!(
            Cdb::parse(&inquiry(96)).ok(),
            Some(Cdb::Inquiry(InquiryRepr {
                alloc_len: 96,
                ..InquiryRepr::default()
            }))
        );
        assert_eq!(
            Cdb::parse(&read_capacity16()).ok(),
            Some(Cdb::ReadCapacity16(ReadCapacity16Repr {
                alloc_len: 32,
                ..ReadCapacity16Repr::default()
            }))
        );
        for (write, lba, blocks) in [(false, 7, 9), (true, 1 << 40, 3), (true, 0, 0x2_0000)] {
            let (c, n) = rw(write, lba, blocks);
            let Ok(Cdb::ReadWrite(r)) = Cdb::parse(&c[..n]) else {
                panic!("READ/WRITE does not parse back");
            };
            assert_eq!((r.kind.is_write(), r.lba, r.blocks()), (write, lba, blocks));
        }
        assert_eq!(
            Cdb::parse(&test_unit_ready()).ok(),
            Some(Cdb::TestUnitReady { control: 0 })
        );
        assert!(matches!(
            Cdb::parse(&sync_cache()),
            Ok(Cdb::SynchronizeCache(SyncCacheRepr { sixteen: false, .. }))
        ));
        assert!(matches!(
            Cdb::parse(&report_luns(4096)),
            Ok(Cdb::ReportLuns(ReportLunsRepr {
                alloc_len: 4096,
                ..
            }))
        ));
    }
}
