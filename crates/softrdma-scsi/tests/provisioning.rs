//! Thin provisioning and the offloads: UNMAP, WRITE SAME(10/16), COMPARE AND WRITE, on memory
//! and file LUNs and on a lent medium.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, ScsiStatus, SenseKey};

const L0: LunId = LunId(0);
const L1: LunId = LunId(1);

/// An UNMAP parameter list with these (lba, blocks) descriptors.
fn unmap_list(descs: &[(u64, u32)]) -> Vec<u8> {
    let bd = (descs.len() * 16) as u16;
    let mut v = Vec::new();
    v.extend_from_slice(&(bd + 6).to_be_bytes());
    v.extend_from_slice(&bd.to_be_bytes());
    v.extend_from_slice(&[0; 4]);
    for (lba, n) in descs {
        v.extend_from_slice(&lba.to_be_bytes());
        v.extend_from_slice(&n.to_be_bytes());
        v.extend_from_slice(&[0; 4]);
    }
    v
}

fn unmap_cdb(len: usize) -> [u8; 10] {
    cdb10(0x42, 0, 0, len as u16)
}

/// Blocks `lba..lba+n` of LUN 0 (512-byte blocks).
fn read(t: &mut Target, n: NexusId, lun: LunId, lba: u32, blocks: u16, bs: usize) -> Vec<u8> {
    let (r, d) = run_in(
        t,
        n,
        lun,
        &cdb10(0x28, 0, lba, blocks),
        u32::from(blocks) * bs as u32,
    );
    good(&r);
    d
}

fn fill(t: &mut Target, n: NexusId, lun: LunId, lba: u32, blocks: u16, bs: usize, byte: u8) {
    let data = vec![byte; usize::from(blocks) * bs];
    good(&run_out(t, n, lun, &cdb10(0x2a, 0, lba, blocks), &data));
}

#[test]
fn unmap_zeroes_the_blocks_it_names() {
    let (mut t, n) = rig();
    fill(&mut t, n, L0, 0, 16, 512, 0xab);
    let list = unmap_list(&[(4, 8)]);
    good(&run_out(&mut t, n, L0, &unmap_cdb(list.len()), &list));
    let d = read(&mut t, n, L0, 0, 16, 512);
    assert!(d[..4 * 512].iter().all(|b| *b == 0xab));
    assert!(d[4 * 512..12 * 512].iter().all(|b| *b == 0));
    assert!(d[12 * 512..].iter().all(|b| *b == 0xab));
    // A parameter list length of zero: nothing to do, GOOD, no data phase.
    good(&run_none(&mut t, n, L0, &unmap_cdb(0)));
    // A descriptor of zero blocks, and one ending at the last block.
    let list = unmap_list(&[(63, 1)]);
    good(&run_out(&mut t, n, L0, &unmap_cdb(list.len()), &list));
}

#[test]
fn unmap_errors_as_lio() {
    let (mut t, n) = rig();
    fill(&mut t, n, L0, 0, 4, 512, 0x11);
    let ok = unmap_list(&[(0, 4)]);
    // ANCHOR (or any bit of byte 1): INVALID FIELD IN CDB, nothing unmapped.
    let mut c = unmap_cdb(ok.len());
    c[1] = 0x01;
    illegal(
        &run_out(&mut t, n, L0, &c, &ok),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    assert!(read(&mut t, n, L0, 0, 4, 512).iter().all(|b| *b == 0x11));
    // Shorter than the header.
    illegal(
        &run_out(&mut t, n, L0, &unmap_cdb(6), &ok[..6]),
        AscAscq::PARAMETER_LIST_LENGTH_ERROR,
    );
    // Two descriptors: MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT is 1.
    let two = unmap_list(&[(0, 1), (2, 1)]);
    illegal(
        &run_out(&mut t, n, L0, &unmap_cdb(two.len()), &two),
        AscAscq::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    // Past the last block.
    let past = unmap_list(&[(60, 5)]);
    illegal(
        &run_out(&mut t, n, L0, &unmap_cdb(past.len()), &past),
        AscAscq::LBA_OUT_OF_RANGE,
    );
    // More than MAXIMUM UNMAP LBA COUNT blocks (a LUN big enough for them).
    let (mut t2, n2) = rig_with(mem(0x4000, BlockSize::B512), cfg());
    let big = unmap_list(&[(0, 0x2001)]);
    illegal(
        &run_out(&mut t2, n2, L0, &unmap_cdb(big.len()), &big),
        AscAscq::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    let max = unmap_list(&[(0, 0x2000)]);
    good(&run_out(&mut t2, n2, L0, &unmap_cdb(max.len()), &max));
    // A read-only LUN: WRITE PROTECTED (with or without a parameter list).
    check(
        &run_out(&mut t, n, L1, &unmap_cdb(ok.len()), &ok),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    check(
        &run_none(&mut t, n, L1, &unmap_cdb(0)),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    // Thin provisioning off: UNMAP is an unsupported opcode (LIO without emulate_tpu), and
    // READ CAPACITY(16) says no LBPME.
    let c = LunConfig {
        thin_provisioning: false,
        ..cfg()
    };
    let (mut t, n) = rig_with(mem(64, BlockSize::B512), c);
    illegal(
        &run_out(&mut t, n, L0, &unmap_cdb(ok.len()), &ok),
        AscAscq::INVALID_COMMAND_OPERATION_CODE,
    );
    let (_, d) = run_in(&mut t, n, L0, &cdb16(0x9e, 0x10, 0, 32), 32);
    assert_eq!(d[14], 0);
}

#[test]
fn write_same_writes_one_block_everywhere() {
    let (mut t, n) = rig();
    let block: Vec<u8> = (0..512).map(|i| i as u8).collect();
    // WRITE SAME(10) of 5 blocks at LBA 3.
    good(&run_out(&mut t, n, L0, &cdb10(0x41, 0, 3, 5), &block));
    // WRITE SAME(16) of 300 blocks would pass the end; 40 at 20 does not.
    illegal(
        &run_out(&mut t, n, L0, &cdb16(0x93, 0, 20, 300), &block),
        AscAscq::LBA_OUT_OF_RANGE,
    );
    good(&run_out(&mut t, n, L0, &cdb16(0x93, 0, 20, 40), &block));
    let d = read(&mut t, n, L0, 0, 64, 512);
    for (lba, b) in d.chunks(512).enumerate() {
        let written = (3..8).contains(&lba) || (20..60).contains(&lba);
        if written {
            assert_eq!(b, &block[..], "lba {lba}");
        } else {
            assert!(b.iter().all(|x| *x == 0), "lba {lba}");
        }
    }
    // With UNMAP and a zero block: deallocated (reads as zeroes).
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb16(0x93, 0x08, 20, 10),
        &[0; 512],
    ));
    let d = read(&mut t, n, L0, 20, 20, 512);
    assert!(d[..10 * 512].iter().all(|b| *b == 0));
    assert_eq!(&d[10 * 512..11 * 512], &block[..]);
    // With UNMAP and a block that is not zeroes: written (an unmapped block would read as
    // zeroes, LBPRZ).
    good(&run_out(&mut t, n, L0, &cdb10(0x41, 0x08, 0, 2), &block));
    let d = read(&mut t, n, L0, 0, 2, 512);
    assert_eq!(&d[..512], &block[..]);
    assert_eq!(&d[512..], &block[..]);
}

#[test]
fn write_same_errors_as_lio() {
    let (mut t, n) = rig();
    let block = [0x5au8; 512];
    // NUMBER OF LOGICAL BLOCKS 0 (WSNZ).
    illegal(
        &run_out(&mut t, n, L0, &cdb10(0x41, 0, 0, 0), &block),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // PBDATA, LBDATA: unsupported opcode, as LIO.
    for b1 in [0x02u8, 0x04] {
        illegal(
            &run_out(&mut t, n, L0, &cdb16(0x93, b1, 0, 1), &block),
            AscAscq::INVALID_COMMAND_OPERATION_CODE,
        );
    }
    // More than MAXIMUM WRITE SAME LENGTH (0xFFFF); Linux's WRITE SAME(16) discard of
    // 0xFFFF blocks (what it sends without VPD pages) is taken.
    let (mut t2, n2) = rig_with(mem(0x10001, BlockSize::B512), cfg());
    illegal(
        &run_out(&mut t2, n2, L0, &cdb16(0x93, 0, 0, 0x10000), &block),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    good(&run_out(
        &mut t2,
        n2,
        L0,
        &cdb16(0x93, 0, 0, 0xffff),
        &block,
    ));
    good(&run_out(
        &mut t2,
        n2,
        L0,
        &cdb16(0x93, 0x08, 1, 0xffff),
        &[0; 512],
    ));
    // ANCHOR; WRPROTECT without protection information.
    illegal(
        &run_out(&mut t, n, L0, &cdb10(0x41, 0x10, 0, 1), &block),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    illegal(
        &run_out(&mut t, n, L0, &cdb10(0x41, 0x20, 0, 1), &block),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // The initiator offers more data-out than the one block: the block is taken, the rest
    // is an underflow (target_cmd_size_check for a command that is not a READ/WRITE).
    let (r, _) = run(
        &mut t,
        n,
        L0,
        &cdb10(0x41, 0, 0, 1),
        DataDir::Out,
        1024,
        &block.repeat(2),
    );
    good(&r);
    assert_eq!(r.residual, Residual::Underflow(512));
    // No data-out at all: INVALID FIELD IN CDB at execution (fd_execute_write_same).
    illegal(
        &run_none(&mut t, n, L0, &cdb10(0x41, 0, 0, 1)),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // Read-only.
    check(
        &run_out(&mut t, n, L1, &cdb10(0x41, 0, 0, 1), &[0; 4096]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    // UNMAP without thin provisioning: unsupported opcode; without UNMAP it still writes.
    let c = LunConfig {
        thin_provisioning: false,
        ..cfg()
    };
    let (mut t, n) = rig_with(mem(64, BlockSize::B512), c);
    illegal(
        &run_out(&mut t, n, L0, &cdb10(0x41, 0x08, 0, 1), &[0; 512]),
        AscAscq::INVALID_COMMAND_OPERATION_CODE,
    );
    good(&run_out(&mut t, n, L0, &cdb10(0x41, 0, 0, 1), &block));
}

fn caw_cdb(b1: u8, lba: u64, blocks: u8) -> [u8; 16] {
    let mut c = cdb16(0x89, b1, lba, 0);
    c[13] = blocks;
    c
}

#[test]
fn compare_and_write() {
    let (mut t, n) = rig();
    fill(&mut t, n, L0, 7, 1, 512, 0x33);
    // Matches: the second half is written.
    let mut data = vec![0x33u8; 512];
    data.extend_from_slice(&[0x44; 512]);
    good(&run_out(&mut t, n, L0, &caw_cdb(0, 7, 1), &data));
    assert!(read(&mut t, n, L0, 7, 1, 512).iter().all(|b| *b == 0x44));
    // Differs at byte 300: MISCOMPARE, INFORMATION = 300 (VALID set), nothing written.
    let mut data = vec![0x44u8; 512];
    data[300] = 0;
    data[400] = 0;
    data.extend_from_slice(&[0x55; 512]);
    let r = run_out(&mut t, n, L0, &caw_cdb(0, 7, 1), &data);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    let s = r.sense.unwrap();
    assert_eq!(
        (s.key, s.asc_ascq, s.information),
        (
            SenseKey::MISCOMPARE,
            AscAscq::MISCOMPARE_DURING_VERIFY,
            Some(300)
        )
    );
    let b = s.to_fixed();
    assert_eq!(b[0], 0xf0); // VALID, current, fixed format
    assert_eq!(&b[3..7], &300u32.to_be_bytes());
    assert_eq!((b[2], b[7], b[12], b[13]), (0x0e, 10, 0x1d, 0x00));
    assert!(read(&mut t, n, L0, 7, 1, 512).iter().all(|b| *b == 0x44));
    // NUMBER OF LOGICAL BLOCKS 0: nothing, GOOD.
    good(&run_none(&mut t, n, L0, &caw_cdb(0, 7, 0)));
    // More than one block (MAXIMUM COMPARE AND WRITE LENGTH 1).
    illegal(
        &run_out(&mut t, n, L0, &caw_cdb(0, 0, 2), &[0; 2048]),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // FUA without a write cache (sbc_check_dpofua), past the end, read-only.
    illegal(
        &run_out(&mut t, n, L0, &caw_cdb(0x08, 0, 1), &[0; 1024]),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    illegal(
        &run_out(&mut t, n, L0, &caw_cdb(0, 64, 1), &[0; 1024]),
        AscAscq::LBA_OUT_OF_RANGE,
    );
    check(
        &run_out(&mut t, n, L1, &caw_cdb(0, 0, 1), &[0; 8192]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    // Half the data-out: a READ/WRITE-class command's length mismatch.
    illegal(
        &run_out(&mut t, n, L0, &caw_cdb(0, 0, 1), &[0; 512]),
        AscAscq::INVALID_FIELD_IN_COMMAND_IU,
    );
}

#[test]
fn file_lun_unmap_punches_holes() {
    let dir = std::env::temp_dir().join(format!("softrdma-scsi-punch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lun.img");
    const MIB: u64 = 1 << 20;
    let store = FileStore::create(&path, 8 * MIB, BlockSize::B4096).unwrap();
    let mut t = Target::new(TargetConfig::default());
    t.add_lun(L0, LogicalUnit::new(Box::new(store), cfg()))
        .unwrap();
    let n = t.register_nexus(InitiatorId(1));
    clear_ua(&mut t, n);
    // Write all 8 MiB (2048 blocks), 256 blocks at a time, and flush.
    for i in 0..8u32 {
        fill(&mut t, n, L0, i * 256, 256, 4096, 0x77);
    }
    good(&run_none(&mut t, n, L0, &cdb10(0x35, 0, 0, 0)));
    let used = |p: &std::path::Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let before = used(&path);
    assert!(before >= 8 * MIB, "{before}");
    // UNMAP the second half: 1024 blocks (MAXIMUM UNMAP LBA COUNT is 0x2000).
    let list = unmap_list(&[(1024, 1024)]);
    good(&run_out(&mut t, n, L0, &unmap_cdb(list.len()), &list));
    let after = used(&path);
    // The filesystem freed (about) the half; the file keeps its length.
    assert!(after <= before - 4 * MIB + 64 * 1024, "{before} -> {after}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 * MIB);
    let d = read(&mut t, n, L0, 1020, 8, 4096);
    assert!(d[..4 * 4096].iter().all(|b| *b == 0x77));
    assert!(d[4 * 4096..].iter().all(|b| *b == 0));
    // WRITE SAME(16) with UNMAP and a zero block frees too.
    let before = used(&path);
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb16(0x93, 0x08, 0, 512),
        &[0; 4096],
    ));
    assert!(used(&path) <= before - 2 * MIB + 64 * 1024);
    assert!(read(&mut t, n, L0, 0, 4, 4096).iter().all(|b| *b == 0));
    drop(t);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn offloads_on_a_lent_medium() {
    let (mut t, n) = rig();
    let mut medium = t.lend_medium(L0).unwrap();
    medium[512..1024].fill(0x66);
    let decode = |t: &mut Target, cdb: &[u8], dir: DataDir, len: u32| match t
        .decode(n, L0, cdb, dir, len)
        .unwrap()
    {
        Decoded::Ready(c) => c,
        Decoded::Done(r) => panic!("{r:?}"),
    };
    // UNMAP of block 1: the core needs the medium; plain execute refuses.
    let list = unmap_list(&[(1, 1)]);
    let cmd = decode(
        &mut t,
        &unmap_cdb(list.len()),
        DataDir::Out,
        list.len() as u32,
    );
    assert!(t.needs_medium(&cmd));
    assert!(matches!(
        t.execute(&cmd, Data::Out(&list)),
        Err(CoreError::MediumLent(_))
    ));
    good(
        &t.execute_on_medium(&cmd, Data::Out(&list), &mut medium)
            .unwrap(),
    );
    assert!(medium[512..1024].iter().all(|b| *b == 0));
    // WRITE SAME and COMPARE AND WRITE in the medium.
    let cmd = decode(&mut t, &cdb10(0x41, 0, 2, 3), DataDir::Out, 512);
    good(
        &t.execute_on_medium(&cmd, Data::Out(&[0x99; 512]), &mut medium)
            .unwrap(),
    );
    assert!(medium[1024..2560].iter().all(|b| *b == 0x99));
    let mut caw = vec![0x99u8; 512];
    caw.extend_from_slice(&[0x12; 512]);
    let cmd = decode(&mut t, &caw_cdb(0, 4, 1), DataDir::Out, 1024);
    good(
        &t.execute_on_medium(&cmd, Data::Out(&caw), &mut medium)
            .unwrap(),
    );
    assert!(medium[2048..2560].iter().all(|b| *b == 0x12));
    // A command that does not need it is refused the medium.
    let cmd = decode(&mut t, &[0, 0, 0, 0, 0, 0], DataDir::None, 0);
    assert!(!t.needs_medium(&cmd));
    assert!(t.execute_on_medium(&cmd, Data::None, &mut medium).is_err());
    t.return_medium(L0, medium).unwrap();
    // Back in the store: the offloads' effects are there.
    let d = read(&mut t, n, L0, 1, 4, 512);
    assert!(d[..512].iter().all(|b| *b == 0));
    assert!(d[512..1536].iter().all(|b| *b == 0x99));
    assert!(d[1536..].iter().all(|b| *b == 0x12));
}
