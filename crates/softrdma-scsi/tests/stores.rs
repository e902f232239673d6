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

/// A lent medium: READ and WRITE name byte ranges and run in place, in two halves, with the
/// unit attention check before any data moves; everything else runs as before; the loan
/// ends with the same bytes back.
#[test]
fn a_lent_medium_runs_read_and_write_in_place() {
    let (mut t, n) = rig();
    let l0 = LunId(0);
    // LUN 0's store is memory; a file store would not lend.
    let mut medium = t.lend_medium(l0).unwrap();
    assert_eq!(medium.len(), 64 * 512);
    assert!(t.lun(l0).unwrap().medium_lent());
    assert!(matches!(t.lend_medium(l0), Err(CoreError::NotLendable(_))));
    assert!(matches!(t.remove_lun(l0), Err(CoreError::MediumLent(_))));

    // WRITE(10) of 2 blocks at LBA 3: bytes [1536, 2560).
    let w = [0x2a, 0, 0, 0, 0, 3, 0, 0, 2, 0];
    let Decoded::Ready(cmd) = t.decode(n, l0, &w, DataDir::Out, 1024).unwrap() else {
        panic!("WRITE(10) decodes")
    };
    // execute would need the store's bytes, which are lent.
    assert!(matches!(
        t.execute(&cmd, Data::Out(&[0; 1024])),
        Err(CoreError::MediumLent(_))
    ));
    let p = match t.start_in_place(&cmd).unwrap() {
        InPlace::Go(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!((p.lun, p.offset, p.len), (l0, 1536, 1024));
    // The transport lands the data-out in the medium, then finishes.
    medium[1536..2560].fill(0x5a);
    let r = t.finish_in_place(&cmd).unwrap();
    assert!(r.is_good() && r.data_len == 0);

    // READ(10) of 4 blocks at LBA 2 into a 1536-byte buffer: the CDB's 2048 bytes overflow
    // the initiator's 1536, which are what moves (as LIO, the residual is reported).
    let rd = [0x28, 0, 0, 0, 0, 2, 0, 0, 4, 0];
    let Decoded::Ready(cmd) = t.decode(n, l0, &rd, DataDir::In, 1536).unwrap() else {
        panic!("READ(10) decodes")
    };
    let InPlace::Go(p) = t.start_in_place(&cmd).unwrap() else {
        panic!("a READ on a lent medium runs in place")
    };
    assert_eq!((p.offset, p.len), (1024, 1536));
    let r = t.finish_in_place(&cmd).unwrap();
    assert!(r.is_good());
    assert_eq!(r.data_len, 1536);
    assert_eq!(r.residual, Residual::Overflow(512));

    // Not READ or WRITE: INQUIRY runs on a buffer as always.
    let inq = [0x12, 0, 0, 0, 96, 0];
    let Decoded::Ready(cmd) = t.decode(n, l0, &inq, DataDir::In, 96).unwrap() else {
        panic!("INQUIRY decodes")
    };
    assert_eq!(t.start_in_place(&cmd).unwrap(), InPlace::No);
    assert!(t.execute(&cmd, Data::In(&mut [0; 96])).unwrap().is_good());

    // A unit attention ends a WRITE before its data moves.
    t.raise_unit_attention(n, l0, AscAscq::POWER_ON_RESET)
        .unwrap();
    let Decoded::Ready(cmd) = t.decode(n, l0, &w, DataDir::Out, 1024).unwrap() else {
        panic!("WRITE(10) decodes")
    };
    match t.start_in_place(&cmd).unwrap() {
        InPlace::Done(r) => {
            let s = r.sense.unwrap();
            assert_eq!(s.key, SenseKey::UNIT_ATTENTION);
            assert_eq!(s.asc_ascq, AscAscq::POWER_ON_RESET);
        }
        other => panic!("{other:?}"),
    }

    // Bytes of another length are refused; the medium itself ends the loan.
    assert!(matches!(
        t.return_medium(l0, vec![0; 512]),
        Err(CoreError::NotLent(_))
    ));
    t.return_medium(l0, medium).unwrap();
    assert!(!t.lun(l0).unwrap().medium_lent());
    let (r, d) = run_in(&mut t, n, l0, &rd, 2048);
    assert!(r.is_good());
    assert_eq!(&d[512..1536], &[0x5a; 1024][..]);
    assert_eq!(&d[..512], &[0; 512][..]);
    assert!(matches!(
        t.return_medium(l0, vec![0; 32768]),
        Err(CoreError::NotLent(_))
    ));
}

#[test]
fn a_file_store_does_not_lend() {
    let path = TempPath::new("lend");
    let store = FileStore::create(&path.0, 64 * 512, BlockSize::B512).unwrap();
    let (mut t, _) = rig_with(Box::new(store), LunConfig::default());
    assert!(matches!(
        t.lend_medium(LunId(0)),
        Err(CoreError::NotLendable(_))
    ));
    assert!(matches!(
        t.lend_medium(LunId(7)),
        Err(CoreError::NoSuchLun(_))
    ));
}

/// A medium of 2 MiB or more is memory mapped for huge pages (what the transport places
/// packets into), a small one stays a heap vector; both keep their bytes across the loan.
#[test]
fn a_large_memory_medium_is_mapped_for_huge_pages() {
    for (size, mapped) in [(64u64 * 512, false), (4 << 20, true)] {
        let mut store = MemStore::new(size, BlockSize::B512).unwrap();
        store.write_at(size - 512, &[0x5a; 512]).unwrap();
        let (mut t, _) = rig_with(Box::new(store), LunConfig::default());
        let medium = t.lend_medium(LunId(0)).unwrap();
        assert_eq!(medium.is_mapped(), mapped, "{size} bytes");
        assert_eq!(medium.len() as u64, size);
        assert!(medium[medium.len() - 512..].iter().all(|&b| b == 0x5a));
        t.return_medium(LunId(0), medium).unwrap();
    }
}
