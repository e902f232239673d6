//! The backing stores, and a LUN over a real file.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, SenseKey};

/// A fresh path in the temporary directory, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> TempPath {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!(
            "softrdma-scsi-{}-{tag}-{n}.img",
            std::process::id()
        )))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn mem_store() {
    assert!(matches!(
        MemStore::new(0, BlockSize::B512),
        Err(StoreError::BadSize { .. })
    ));
    assert!(matches!(
        MemStore::new(4097, BlockSize::B4096),
        Err(StoreError::BadSize { .. })
    ));
    let mut s = MemStore::new(8192, BlockSize::B4096).unwrap();
    assert_eq!((s.size(), s.block_size().bytes()), (8192, 4096));
    assert!(!s.read_only() && !s.write_cache() && s.non_rotational());
    s.write_at(4095, &[1, 2]).unwrap();
    let mut b = [0u8; 3];
    s.read_at(4094, &mut b).unwrap();
    assert_eq!(b, [0, 1, 2]);
    assert!(matches!(
        s.read_at(8190, &mut b),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.write_at(u64::MAX, &b),
        Err(StoreError::OutOfRange { .. })
    ));
    s.flush().unwrap();
    assert_eq!(&s.bytes()[4095..4097], &[1, 2]);
    let mut ro = MemStore::from_vec(vec![9; 512], BlockSize::B512)
        .unwrap()
        .into_read_only();
    assert!(ro.read_only());
    assert!(matches!(ro.write_at(0, &[0]), Err(StoreError::ReadOnly)));
    assert!(StoreError::ReadOnly.to_string().contains("read-only"));
    assert_eq!(BlockSize::from_bytes(4096), Some(BlockSize::B4096));
    assert_eq!(BlockSize::from_bytes(1024), None);
}

#[test]
fn file_store_through_a_lun() {
    let path = TempPath::new("rw");
    let store = FileStore::create(&path.0, 64 * 512, BlockSize::B512).unwrap();
    assert!(store.write_cache() && !store.non_rotational());
    assert_eq!(store.product(), "FILEIO");
    let (mut t, n) = rig_with(Box::new(store), LunConfig::default());
    let l0 = LunId(0);
    // FILEIO in buffered mode: WCE and DPOFUA.
    let (_, d) = run_in(&mut t, n, l0, &[0x1a, 0x08, 0x08, 0, 0xff, 0], 0xff);
    assert_eq!((d[2], d[6]), (0x10, 0x04));
    let (_, d) = run_in(&mut t, n, l0, &[0x12, 0, 0, 0, 36, 0], 36);
    assert_eq!(&d[16..32], b"FILEIO          ");
    // A FUA write, a plain write, SYNCHRONIZE CACHE.
    let data: Vec<u8> = (0..2048u32).map(|i| (i % 251) as u8).collect();
    good(&run_out(&mut t, n, l0, &cdb10(0x2a, 0x08, 10, 4), &data));
    good(&run_out(
        &mut t,
        n,
        l0,
        &cdb16(0x8a, 0, 63, 1),
        &[0x77; 512],
    ));
    good(&run_none(&mut t, n, l0, &cdb10(0x35, 0, 0, 0)));
    let (r, d) = run_in(&mut t, n, l0, &cdb10(0x28, 0, 10, 4), 2048);
    good(&r);
    assert_eq!(d, data);
    drop(t);
    // On disk, where the LBA says.
    let disk = std::fs::read(&path.0).unwrap();
    assert_eq!(disk.len(), 64 * 512);
    assert_eq!(&disk[10 * 512..14 * 512], &data[..]);
    assert!(disk[63 * 512..].iter().all(|b| *b == 0x77));
    // Reopened read-only: WRITE PROTECTED, WP in MODE SENSE, reads work.
    let ro = FileStore::open(&path.0, BlockSize::B512, true).unwrap();
    assert!(ro.read_only() && !ro.write_cache());
    let (mut t, n) = rig_with(Box::new(ro), LunConfig::default());
    check(
        &run_out(&mut t, n, l0, &cdb10(0x2a, 0, 0, 1), &[0; 512]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    let (_, d) = run_in(&mut t, n, l0, &[0x1a, 0, 0x3f, 0, 0xff, 0], 0xff);
    assert_eq!(d[2], 0x80);
    let (_, d) = run_in(&mut t, n, l0, &cdb10(0x28, 0, 10, 4), 2048);
    assert_eq!(d, data);
    good(&run_none(&mut t, n, l0, &cdb10(0x35, 0, 0, 0)));
}

#[test]
fn file_store_sizes() {
    // A length that is not whole blocks is rounded down.
    let path = TempPath::new("odd");
    std::fs::write(&path.0, vec![0u8; 4096 * 3 + 100]).unwrap();
    let s = FileStore::open(&path.0, BlockSize::B4096, false).unwrap();
    assert_eq!(s.size(), 4096 * 3);
    let (mut t, n) = rig_with(Box::new(s), LunConfig::default());
    let (_, d) = run_in(&mut t, n, LunId(0), &cdb10(0x25, 0, 0, 0), 8);
    assert_eq!(d, [0, 0, 0, 2, 0, 0, 0x10, 0]);
    // Shorter than a block, missing, a bad create size.
    let small = TempPath::new("small");
    std::fs::write(&small.0, [0u8; 100]).unwrap();
    assert!(matches!(
        FileStore::open(&small.0, BlockSize::B512, false),
        Err(StoreError::BadSize { .. })
    ));
    let missing = TempPath::new("missing");
    let e = FileStore::open(&missing.0, BlockSize::B512, true).unwrap_err();
    assert!(matches!(e, StoreError::Io(_)));
    assert!(std::error::Error::source(&e).is_some());
    assert!(matches!(
        FileStore::create(&missing.0, 1000, BlockSize::B512),
        Err(StoreError::BadSize { .. })
    ));
    // Out-of-range access is refused by the store itself.
    let mut s = FileStore::create(&missing.0, 512, BlockSize::B512).unwrap();
    let mut b = [0u8; 2];
    assert!(matches!(
        s.read_at(511, &mut b),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.write_at(511, &b),
        Err(StoreError::OutOfRange { .. })
    ));
}
