//! CDBs the SCSI midlayer and `sd` send (what a program needs to use a disk).
/// TEST UNIT READY.
pub fn test_unit_ready() -> [u8; 6] {
    [0; 6]
}

/// INQUIRY (standard data, `alloc` bytes).
pub fn inquiry(alloc: u16) -> [u8; 6] {
    let a = alloc.to_be_bytes();
    [0x12, 0, 0, a[0], a[1], 0]
}

/// REPORT LUNS.
pub fn report_luns(alloc: u32) -> [u8; 12] {
    let a = alloc.to_be_bytes();
    [0xa0, 0, 0, 0, 0, 0, a[0], a[1], a[2], a[3], 0, 0]
}

/// READ CAPACITY(10).
pub fn read_capacity10() -> [u8; 10] {
    [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// READ CAPACITY(16) (SERVICE ACTION IN(16)), 32 bytes.
pub fn read_capacity16() -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x9e;
    c[1] = 0x10;
    c[13] = 32;
    c
}

/// READ/WRITE as `sd` picks them: (10) when the LBA fits in 32 bits and the count in
/// 16, else (16). Returns the CDB and its length.
pub fn rw(write: bool, lba: u64, blocks: u32) -> ([u8; 16], usize) {
    let mut c = [0u8; 16];
    if lba <= u64::from(u32::MAX) && blocks <= 0xffff {
        c[0] = if write { 0x2a } else { 0x28 };
        c[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
        c[7..9].copy_from_slice(&(blocks as u16).to_be_bytes());
        (c, 10)
    } else {
        c[0] = if write { 0x8a } else { 0x88 };
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..14].copy_from_slice(&blocks.to_be_bytes());
        (c, 16)
    }
}

/// SYNCHRONIZE CACHE(10).
pub fn sync_cache() -> [u8; 10] {
    [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}
