//! Every command the core emulates, with its errors; sense bytes checked.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, SenseKey, VpdPage};

const L0: LunId = LunId(0);
const L1: LunId = LunId(1);

// ---------------------------------------------------------------------------------------------
// INQUIRY
// ---------------------------------------------------------------------------------------------

#[test]
fn inquiry_standard() {
    let (mut t, n) = rig();
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36);
    good(&r);
    assert_eq!(r.residual, Residual::None);
    assert_eq!(d.len(), 36);
    // As LIO's (fixtures/captures/f_srp.pcap frame 10) but byte 5: no SCCS/TPGS/3PC.
    assert_eq!(&d[..8], &[0x00, 0x00, 0x06, 0x02, 91, 0x00, 0x00, 0x02]);
    assert_eq!(&d[8..36], b"LIO-ORG RAMDISK-MCP     4.0 ");
    // The whole 96 bytes: version descriptors SAM-5, SRP, SPC-4, SBC-3.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 96, 0], 96);
    good(&r);
    assert_eq!(d.len(), 96);
    assert_eq!(
        &d[58..66],
        &[0x00, 0xa0, 0x09, 0x40, 0x04, 0x60, 0x04, 0xc0]
    );
    assert!(d[36..58].iter().all(|b| *b == 0));
    // More allocated than there is: underflow of the rest (target_complete_cmd_with_length).
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 255, 0], 255);
    good(&r);
    assert_eq!(d.len(), 96);
    assert_eq!(r.residual, Residual::Underflow(255 - 96));
    // Allocation length 0.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 0, 0], 0);
    good(&r);
    assert!(d.is_empty());
    // A LUN with its own product and a file-like store name.
    let c = LunConfig {
        vendor: "SOFTRDMA".into(),
        product: Some("A VERY LONG PRODUCT NAME".into()),
        revision: "12345".into(),
        ..LunConfig::default()
    };
    let (mut t, n) = rig_with(mem(8, BlockSize::B512), c);
    let (_, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36);
    assert_eq!(&d[8..36], b"SOFTRDMAA VERY LONG PROD1234");
}

#[test]
fn inquiry_errors() {
    let (mut t, n) = rig();
    // EVPD clear with a page code (spc_emulate_inquiry).
    let (r, _) = run_in(&mut t, n, L0, &[0x12, 0, 0x80, 0, 36, 0], 36);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    // A VPD page we do not have (LIO has 0x86; we do not).
    for page in [0x86u8, 0xb3, 0x01, 0xff] {
        let (r, _) = run_in(&mut t, n, L0, &[0x12, 1, page, 0, 255, 0], 255);
        illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    }
    // Too short a CDB buffer.
    let (r, _) = run_in(&mut t, n, L0, &[0x12, 0, 0], 36);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

#[test]
fn inquiry_vpd_pages() {
    let (mut t, n) = rig();
    let vpd = |t: &mut Target, lun, page: u8| {
        let (r, d) = run_in(t, n, lun, &[0x12, 1, page, 0x01, 0, 0], 256);
        good(&r);
        assert_eq!(r.residual, Residual::Underflow(256 - d.len() as u32));
        assert_eq!((d[0], d[1]), (0, page));
        d
    };
    assert_eq!(
        vpd(&mut t, L0, 0x00),
        [0, 0, 0, 6, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2]
    );
    let p80 = vpd(&mut t, L0, 0x80);
    assert_eq!(p80[3] as usize, SERIAL.len() + 1);
    assert_eq!(&p80[4..4 + SERIAL.len()], SERIAL.as_bytes());
    assert_eq!(p80[4 + SERIAL.len()], 0);
    let p83 = VpdPage::parse(&vpd(&mut t, L0, 0x83)).unwrap();
    let ds = p83.designators().unwrap();
    assert_eq!(ds.len(), 5);
    // NAA IEEE Registered Extended: 6h, company 0x001405, then the serial's hex digits.
    assert_eq!(
        (ds[0].code_set, ds[0].designator_type, ds[0].association),
        (1, 3, 0)
    );
    assert_eq!(
        ds[0].designator,
        [
            0x60, 0x01, 0x40, 0x56, 0x00, 0x14, 0x05, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07,
            0x18, 0x29
        ]
    );
    // T10 vendor ID: vendor, then product:serial, NUL terminated.
    assert_eq!((ds[1].code_set, ds[1].designator_type), (2, 1));
    let mut t10 = b"LIO-ORG RAMDISK-MCP:".to_vec();
    t10.extend_from_slice(SERIAL.as_bytes());
    t10.push(0);
    assert_eq!(ds[1].designator, t10);
    // Relative target port 1, SRP protocol identifier, PIV, target port association.
    assert_eq!(
        (
            ds[2].protocol_id,
            ds[2].piv,
            ds[2].association,
            ds[2].designator_type
        ),
        (4, true, 1, 4)
    );
    assert_eq!(ds[2].designator, [0, 0, 0, 1]);
    // SCSI name strings: the port (name,t,0x<tpgt>) and the target device, NUL padded to
    // a multiple of four.
    assert_eq!(
        (ds[3].code_set, ds[3].designator_type, ds[3].association),
        (3, 8, 1)
    );
    assert_eq!(ds[3].designator, b"softrdma,t,0x0001\0\0\0");
    assert_eq!((ds[4].code_set, ds[4].association), (3, 2));
    assert_eq!(ds[4].designator, b"softrdma\0\0\0\0");
    // Block limits with thin provisioning: the 0x3C-long page; WSNZ, COMPARE AND WRITE of
    // one block, 8 MiB in 512-byte blocks; the UNMAP limits and MAXIMUM WRITE SAME LENGTH
    // of LIO's FILEIO (0x2000 blocks, one descriptor, granularity 1) and IBLOCK's 0xFFFF.
    let b0 = vpd(&mut t, L0, 0xb0);
    assert_eq!(b0.len(), 64);
    assert_eq!(&b0[2..12], &[0, 0x3c, 1, 1, 0, 1, 0, 0, 0x40, 0]);
    assert_eq!(&b0[12..16], &[0, 0, 0x40, 0]);
    assert_eq!(
        &b0[20..36],
        &[0, 0, 0x20, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    );
    assert_eq!(&b0[36..44], &[0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    // ... and in 4096-byte blocks, read-only: no thin provisioning, the 0x10-long page.
    let b0 = vpd(&mut t, L1, 0xb0);
    assert_eq!(b0.len(), 20);
    assert_eq!(&b0[8..12], &[0, 0, 0x08, 0]);
    // Logical block provisioning: LBPU, LBPWS, LBPWS10, LBPRZ 001b, thin; none read-only.
    let b2 = vpd(&mut t, L0, 0xb2);
    assert_eq!(b2, [0, 0xb2, 0, 4, 0, 0xe4, 0x02, 0]);
    let b2 = vpd(&mut t, L1, 0xb2);
    assert_eq!(b2, [0, 0xb2, 0, 4, 0, 0, 0, 0]);
    // Block device characteristics: a memory store is non-rotating.
    let b1 = vpd(&mut t, L0, 0xb1);
    assert_eq!(b1.len(), 64);
    assert_eq!(&b1[..6], &[0, 0xb1, 0, 0x3c, 0, 1]);
    // Allocation shorter than the page: cut, no residual.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x83, 0, 4, 0], 4);
    good(&r);
    assert_eq!(r.residual, Residual::None);
    assert_eq!(&d[..2], &[0, 0x83]);
}

#[test]
fn inquiry_vpd_without_serial_or_groups() {
    // No unit serial: LIO lists no page in 0x00 (f_srp.pcap frames 22/79), page 0x80 is
    // empty, page 0x83 starts with the T10 designator (vendor and NUL only).
    let (mut t, n) = rig_with(mem(8, BlockSize::B512), LunConfig::default());
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x00, 0, 36, 0], 36);
    good(&r);
    assert_eq!(d, [0, 0, 0, 0]);
    assert_eq!(r.residual, Residual::Underflow(32));
    let (_, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x80, 0, 36, 0], 36);
    assert_eq!(d, [0, 0x80, 0, 0]);
    let (_, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x83, 1, 0, 0], 256);
    let ds = VpdPage::parse(&d).unwrap().designators().unwrap();
    assert_eq!(ds[0].designator, b"LIO-ORG \0");
    assert_eq!(ds.len(), 4);
    // Target port group and LU group designators when configured (LIO's default groups).
    let mut t = Target::new(TargetConfig {
        target_port_group: Some(0),
        lu_group: Some(7),
        port_name: "0xfe80000000000000505400fffe77000a".into(),
        tpgt: 2,
        ..TargetConfig::default()
    });
    t.add_lun(L0, LogicalUnit::new(mem(8, BlockSize::B512), cfg()))
        .unwrap();
    let n = t.register_nexus(InitiatorId(9));
    let (_, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x83, 1, 0, 0], 256);
    let ds = VpdPage::parse(&d).unwrap().designators().unwrap();
    let types: Vec<u8> = ds.iter().map(|d| d.designator_type).collect();
    assert_eq!(types, [3, 1, 4, 5, 6, 8, 8]);
    assert_eq!(ds[3].designator, [0, 0, 0, 0]);
    assert_eq!(ds[4].designator, [0, 0, 0, 7]);
    assert!(ds[5]
        .designator
        .starts_with(b"0xfe80000000000000505400fffe77000a,t,0x0002\0"));
    assert_eq!(ds[5].designator.len() % 4, 0);
}

// ---------------------------------------------------------------------------------------------
// READ CAPACITY
// ---------------------------------------------------------------------------------------------

#[test]
fn read_capacity() {
    let (mut t, n) = rig();
    let (r, d) = run_in(&mut t, n, L0, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8);
    good(&r);
    assert_eq!(d, [0, 0, 0, 63, 0, 0, 2, 0]);
    let (_, d) = run_in(&mut t, n, L1, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8);
    assert_eq!(d, [0, 0, 0, 15, 0, 0, 0x10, 0]);
    // PMI clear with an LBA: INVALID FIELD IN CDB (SBC-2, as sbc_emulate_readcapacity).
    let (r, _) = run_in(&mut t, n, L0, &[0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0], 8);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    let (r, _) = run_in(&mut t, n, L0, &[0x25, 0, 0, 0, 0, 1, 0, 0, 1, 0], 8);
    good(&r);
    // READ CAPACITY(16).
    let mut c16 = [0u8; 16];
    c16[0] = 0x9e;
    c16[1] = 0x10;
    c16[13] = 32;
    let (r, d) = run_in(&mut t, n, L0, &c16, 32);
    good(&r);
    let mut want = [0u8; 32];
    want[7] = 63;
    want[10] = 2;
    want[14] = 0xc0; // LBPME, LBPRZ: thin provisioned, unmapped blocks read as zeroes
    assert_eq!(d, want);
    // A read-only LUN is not thin provisioned.
    let (_, d) = run_in(&mut t, n, L1, &c16, 32);
    assert_eq!(d[14], 0);
    // Allocation 64, expected 64: 32 bytes, underflow 32.
    c16[13] = 64;
    let (r, d) = run_in(&mut t, n, L0, &c16, 64);
    assert_eq!((d.len(), r.residual), (32, Residual::Underflow(32)));
    // Other service actions (GET LBA STATUS, REPORT REFERRALS): INVALID FIELD IN CDB.
    for sa in [0x12u8, 0x13, 0x00] {
        c16[1] = sa;
        let (r, _) = run_in(&mut t, n, L0, &c16, 64);
        illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    }
    // A LUN of more than 2^32 blocks: READ CAPACITY(10) says 0xFFFFFFFF.
    let big = NullStore {
        size: (1u64 << 33) * 512,
        ..NullStore::default()
    };
    let (mut t, n) = rig_with(Box::new(big), LunConfig::default());
    let (_, d) = run_in(&mut t, n, L0, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8);
    assert_eq!(d, [0xff, 0xff, 0xff, 0xff, 0, 0, 2, 0]);
    c16[1] = 0x10;
    c16[13] = 32;
    let (_, d) = run_in(&mut t, n, L0, &c16, 32);
    assert_eq!(&d[..8], &((1u64 << 33) - 1).to_be_bytes());
}

// ---------------------------------------------------------------------------------------------
// READ / WRITE
// ---------------------------------------------------------------------------------------------

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn read_write_all_forms() {
    let (mut t, n) = rig();
    // (WRITE, READ) CDBs for 2 blocks at LBA 3.
    let forms: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (vec![0x0a, 0, 0, 3, 2, 0], vec![0x08, 0, 0, 3, 2, 0]),
        (cdb10(0x2a, 0, 3, 2).to_vec(), cdb10(0x28, 0, 3, 2).to_vec()),
        (cdb12(0xaa, 0, 3, 2).to_vec(), cdb12(0xa8, 0, 3, 2).to_vec()),
        (cdb16(0x8a, 0, 3, 2).to_vec(), cdb16(0x88, 0, 3, 2).to_vec()),
    ];
    for (i, (w, rd)) in forms.iter().enumerate() {
        let data = pattern(1024, i as u8);
        good(&run_out(&mut t, n, L0, w, &data));
        let (r, d) = run_in(&mut t, n, L0, rd, 1024);
        good(&r);
        assert_eq!(r.residual, Residual::None);
        assert_eq!(d, data, "form {i}");
    }
    // The medium holds it at 3 × 512.
    let (_, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 8), 4096);
    assert_eq!(&d[1536..2560], &pattern(1024, 3)[..]);
    assert!(d[..1536].iter().all(|b| *b == 0));
    // The last blocks, exactly to the end.
    good(&run_out(&mut t, n, L0, &cdb10(0x2a, 0, 62, 2), &[7; 1024]));
    // 4096-byte blocks: the read-only LUN reads.
    let (r, d) = run_in(&mut t, n, L1, &cdb10(0x28, 0, 15, 1), 4096);
    good(&r);
    assert_eq!(d.len(), 4096);
    // Transfer length 0: nothing moves, GOOD.
    let (r, d) = run(&mut t, n, L0, &cdb10(0x28, 0, 64, 0), DataDir::None, 0, &[]);
    good(&r);
    assert!(d.is_empty());
}

#[test]
fn read_write_lba_out_of_range() {
    let (mut t, n) = rig();
    let oor = AscAscq::LBA_OUT_OF_RANGE;
    // READ(6) with TRANSFER LENGTH 0 means 256 blocks: past a 64-block LUN.
    let (r, _) = run_in(&mut t, n, L0, &[0x08, 0, 0, 0, 0, 0], 256 * 512);
    illegal(&r, oor);
    let (r, _) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 63, 2), 1024);
    illegal(&r, oor);
    let (r, _) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 65, 0), 0);
    illegal(&r, oor);
    let (r, _) = run_in(&mut t, n, L0, &cdb12(0xa8, 0, 64, 1), 512);
    illegal(&r, oor);
    // LBA + length wraps.
    let (r, _) = run_in(&mut t, n, L0, &cdb16(0x88, 0, u64::MAX, 2), 1024);
    illegal(&r, oor);
    let r = run_out(&mut t, n, L0, &cdb16(0x8a, 0, 64, 1), &[0; 512]);
    illegal(&r, oor);
    let r = run_out(&mut t, n, L0, &[0x0a, 0x1f, 0xff, 0xff, 1, 0], &[0; 512]);
    illegal(&r, oor);
    // READ(6) of 256 blocks fits a bigger LUN.
    let (mut t, n) = rig_with(mem(256, BlockSize::B512), LunConfig::default());
    let (r, d) = run_in(&mut t, n, L0, &[0x08, 0, 0, 0, 0, 0], 256 * 512);
    good(&r);
    assert_eq!(d.len(), 256 * 512);
}

#[test]
fn read_write_field_checks() {
    let (mut t, n) = rig();
    // A memory store has no write cache: no DPOFUA, so DPO or FUA is INVALID FIELD IN CDB
    // (sbc_check_dpofua), on READ and WRITE alike.
    for b1 in [0x08u8, 0x10] {
        let (r, _) = run_in(&mut t, n, L0, &cdb10(0x28, b1, 0, 1), 512);
        illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
        let r = run_out(&mut t, n, L0, &cdb16(0x8a, b1, 0, 1), &[0; 512]);
        illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    }
    // RDPROTECT/WRPROTECT without protection information (sbc_check_prot).
    let (r, _) = run_in(&mut t, n, L0, &cdb12(0xa8, 0x20, 0, 1), 512);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    let r = run_out(&mut t, n, L0, &cdb10(0x2a, 0xe0, 0, 1), &[0; 512]);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    // With a write cache, FUA writes flush and DPO is accepted.
    let store = NullStore {
        size: 1 << 20,
        wce: true,
        ..NullStore::default()
    };
    let flushes = store.flushes.clone();
    let (mut t, n) = rig_with(Box::new(store), LunConfig::default());
    good(&run_out(&mut t, n, L0, &cdb10(0x2a, 0x08, 0, 1), &[1; 512]));
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 1);
    good(&run_out(&mut t, n, L0, &cdb10(0x2a, 0x10, 0, 1), &[1; 512]));
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 1);
    good(&run_in(&mut t, n, L0, &cdb10(0x28, 0x18, 0, 1), 512).0);
}

#[test]
fn read_write_max_transfer_length() {
    let c = LunConfig {
        max_transfer_bytes: 4096,
        ..LunConfig::default()
    };
    let (mut t, n) = rig_with(mem(64, BlockSize::B512), c);
    good(&run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 8), 4096).0);
    let (r, _) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 9), 4608);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    let r = run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 9), &[0; 4608]);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

#[test]
fn write_protected() {
    let (mut t, n) = rig();
    let wp = |r: &Response| check(r, SenseKey::DATA_PROTECT, AscAscq::WRITE_PROTECTED);
    // Data-out to a read-only LUN (transport_lookup_cmd_lun), any write form.
    for w in [
        vec![0x0a, 0, 0, 0, 1, 0],
        cdb10(0x2a, 0, 0, 1).to_vec(),
        cdb12(0xaa, 0, 0, 1).to_vec(),
        cdb16(0x8a, 0, 0, 1).to_vec(),
        cdb10(0x2e, 0, 0, 1).to_vec(),
        cdb16(0x8e, 0, 0, 1).to_vec(),
    ] {
        wp(&run_out(&mut t, n, L1, &w, &[0; 4096]));
    }
    // A write CDB without data-out is refused too.
    wp(&run_none(&mut t, n, L1, &cdb10(0x2a, 0, 0, 0)));
    // Even a MODE SELECT or a VERIFY with data-out, as LIO's lookup refuses any data-out.
    wp(&run_out(&mut t, n, L1, &[0x15, 0x10, 0, 0, 4, 0], &[0; 4]));
    wp(&run_out(
        &mut t,
        n,
        L1,
        &cdb10(0x2f, 0x02, 0, 1),
        &[0; 4096],
    ));
    // A read-only store (not only a read-only mapping).
    let ro = MemStore::new(4096, BlockSize::B512)
        .unwrap()
        .into_read_only();
    let (mut t, n) = rig_with(Box::new(ro), LunConfig::default());
    wp(&run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 1), &[0; 512]));
    good(&run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 1), 512).0);
}

#[test]
fn transfer_length_mismatch() {
    let (mut t, n) = rig();
    let iu = AscAscq::INVALID_FIELD_IN_COMMAND_IU;
    // WRITE whose data-out differs from the CDB: INVALID FIELD IN COMMAND IU, with the
    // residual (target_cmd_size_check sets it before refusing).
    let r = run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 8), &[0; 2048]);
    illegal(&r, iu);
    assert_eq!(r.residual, Residual::Overflow(2048));
    let r = run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 8), &[0; 8192]);
    illegal(&r, iu);
    assert_eq!(r.residual, Residual::Underflow(4096));
    // READ with less room than the CDB asks: what fits, overflow.
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb10(0x2a, 0, 0, 8),
        &pattern(4096, 9),
    ));
    let (r, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 8), 2048);
    good(&r);
    assert_eq!(r.residual, Residual::Overflow(2048));
    assert_eq!(d, &pattern(4096, 9)[..2048]);
    // ... and with more: the CDB's worth, underflow.
    let (r, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 8), 8192);
    good(&r);
    assert_eq!(r.residual, Residual::Underflow(4096));
    assert_eq!(d.len(), 4096);
    // No buffers at all for a READ: nothing moves, overflow of the whole.
    let (r, d) = run(&mut t, n, L0, &cdb10(0x28, 0, 0, 8), DataDir::None, 0, &[]);
    good(&r);
    assert!(d.is_empty());
    assert_eq!(r.residual, Residual::Overflow(4096));
    // A data-in buffer for a command without data: underflow of it all.
    let (r, _) = run_in(&mut t, n, L0, &[0, 0, 0, 0, 0, 0], 512);
    good(&r);
    assert_eq!(r.residual, Residual::Underflow(512));
    // Control data-out shorter than the parameter list: INVALID FIELD IN CDB.
    let r = run_out(&mut t, n, L0, &[0x15, 0x10, 0, 0, 28, 0], &[0; 12]);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    assert_eq!(r.residual, Residual::Overflow(16));
    // INQUIRY allocating more than expected: overflow by LIO's arithmetic (allocation
    // minus expected), even though the data is shorter than the allocation.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 255, 0], 36);
    good(&r);
    assert_eq!((d.len(), r.residual), (36, Residual::Overflow(219)));
    // Allocating less than expected and producing less still: one underflow.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x00, 0, 8, 0], 36);
    good(&r);
    assert_eq!((d.len(), r.residual), (8, Residual::Underflow(28)));
    // Opposite directions: a READ with data-out buffers.
    let r = run_out(&mut t, n, L0, &cdb10(0x28, 0, 0, 1), &[0; 512]);
    illegal(&r, iu);
    let (r, _) = run_in(&mut t, n, L0, &cdb10(0x2a, 0, 0, 1), 512);
    illegal(&r, iu);
}

#[test]
fn store_failure_is_lun_communication_failure() {
    let store = NullStore {
        size: 1 << 20,
        fail: true,
        ..NullStore::default()
    };
    let (mut t, n) = rig_with(Box::new(store), LunConfig::default());
    let lcf = |r: &Response| {
        check(r, SenseKey::NOT_READY, AscAscq::LUN_COMMUNICATION_FAILURE);
    };
    lcf(&run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 1), 512).0);
    lcf(&run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 1), &[0; 512]));
    lcf(&run_none(&mut t, n, L0, &cdb10(0x35, 0, 0, 0)));
}

// ---------------------------------------------------------------------------------------------
// VERIFY, WRITE AND VERIFY
// ---------------------------------------------------------------------------------------------

#[test]
fn verify() {
    let (mut t, n) = rig();
    // BYTCHK 0: no data, GOOD (sbc_emulate_noop after the LBA check).
    good(&run_none(&mut t, n, L0, &cdb10(0x2f, 0, 0, 64)));
    good(&run_none(&mut t, n, L0, &cdb16(0x8f, 0, 60, 4)));
    let (r, _) = run(&mut t, n, L0, &cdb10(0x2f, 0, 60, 5), DataDir::None, 0, &[]);
    illegal(&r, AscAscq::LBA_OUT_OF_RANGE);
    let (r, _) = run(
        &mut t,
        n,
        L0,
        &cdb16(0x8f, 0, 1 << 40, 1),
        DataDir::None,
        0,
        &[],
    );
    illegal(&r, AscAscq::LBA_OUT_OF_RANGE);
    // BYTCHK 1: the blocks come as data-out; taken, not compared (as LIO); nothing written.
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb10(0x2f, 0x02, 0, 2),
        &[0xaa; 1024],
    ));
    let (_, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 2), 1024);
    assert!(d.iter().all(|b| *b == 0));
    // BYTCHK 11b: one block.
    good(&run_out(&mut t, n, L0, &cdb16(0x8f, 0x06, 0, 8), &[0; 512]));
    // BYTCHK 10b is reserved.
    let (r, _) = run(
        &mut t,
        n,
        L0,
        &cdb10(0x2f, 0x04, 0, 1),
        DataDir::None,
        0,
        &[],
    );
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    // BYTCHK 1 with the wrong amount of data-out: underflow is fine (a control CDB).
    let r = run_out(&mut t, n, L0, &cdb10(0x2f, 0x02, 0, 1), &[0; 1024]);
    good(&r);
    assert_eq!(r.residual, Residual::Underflow(512));
}

#[test]
fn write_and_verify() {
    let (mut t, n) = rig();
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb10(0x2e, 0x02, 4, 1),
        &[0x5a; 512],
    ));
    good(&run_out(&mut t, n, L0, &cdb16(0x8e, 0, 5, 1), &[0xa5; 512]));
    let (_, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 4, 2), 1024);
    assert!(d[..512].iter().all(|b| *b == 0x5a));
    assert!(d[512..].iter().all(|b| *b == 0xa5));
    let r = run_out(&mut t, n, L0, &cdb10(0x2e, 0, 64, 1), &[0; 512]);
    illegal(&r, AscAscq::LBA_OUT_OF_RANGE);
    let r = run_out(&mut t, n, L0, &cdb10(0x2e, 0, 0, 2), &[0; 512]);
    illegal(&r, AscAscq::INVALID_FIELD_IN_COMMAND_IU);
    let r = run_out(&mut t, n, L0, &cdb10(0x2e, 0x20, 0, 1), &[0; 512]);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    // With a write cache the written blocks are flushed before GOOD.
    let store = NullStore {
        size: 1 << 20,
        wce: true,
        ..NullStore::default()
    };
    let flushes = store.flushes.clone();
    let (mut t, n) = rig_with(Box::new(store), LunConfig::default());
    good(&run_out(&mut t, n, L0, &cdb10(0x2e, 0, 0, 1), &[0; 512]));
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 1);
}

// ---------------------------------------------------------------------------------------------
// TEST UNIT READY, SEEK, REZERO, START STOP UNIT, SYNCHRONIZE CACHE
// ---------------------------------------------------------------------------------------------

#[test]
fn test_unit_ready_and_noops() {
    let (mut t, n) = rig();
    good(&run_none(&mut t, n, L0, &[0x00, 0, 0, 0, 0, 0]));
    good(&run_none(&mut t, n, L1, &[0x00, 0, 0, 0, 0, 0]));
    good(&run_none(&mut t, n, L0, &[0x01, 0, 0, 0, 0, 0]));
    good(&run_none(&mut t, n, L0, &[0x0b, 0, 0, 0, 0, 0]));
    good(&run_none(&mut t, n, L0, &cdb10(0x2b, 0, 0, 0)));
}

#[test]
fn start_stop_unit() {
    let (mut t, n) = rig();
    // IMMED and START: ready.
    good(&run_none(&mut t, n, L0, &[0x1b, 0x01, 0, 0, 0x01, 0]));
    for bad in [
        [0x1b, 0x00, 0, 0, 0x01, 0], // IMMED clear
        [0x1b, 0x01, 1, 0, 0x01, 0], // reserved byte
        [0x1b, 0x01, 0, 1, 0x01, 0], // POWER CONDITION MODIFIER
        [0x1b, 0x01, 0, 0, 0x00, 0], // stop
        [0x1b, 0x01, 0, 0, 0x03, 0], // LOEJ
        [0x1b, 0x01, 0, 0, 0x05, 0], // NO_FLUSH
        [0x1b, 0x01, 0, 0, 0x11, 0], // POWER CONDITION ACTIVE
    ] {
        illegal(
            &run_none(&mut t, n, L0, &bad),
            AscAscq::INVALID_FIELD_IN_CDB,
        );
    }
}

#[test]
fn synchronize_cache() {
    let store = NullStore {
        size: 64 * 512,
        wce: true,
        ..NullStore::default()
    };
    let flushes = store.flushes.clone();
    let (mut t, n) = rig_with(Box::new(store), LunConfig::default());
    good(&run_none(&mut t, n, L0, &cdb10(0x35, 0, 0, 0)));
    good(&run_none(&mut t, n, L0, &cdb10(0x35, 0x02, 8, 56)));
    good(&run_none(&mut t, n, L0, &cdb16(0x91, 0, 64, 0)));
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 3);
    illegal(
        &run_none(&mut t, n, L0, &cdb10(0x35, 0, 8, 57)),
        AscAscq::LBA_OUT_OF_RANGE,
    );
    illegal(
        &run_none(&mut t, n, L0, &cdb16(0x91, 0, 65, 0)),
        AscAscq::LBA_OUT_OF_RANGE,
    );
    assert_eq!(flushes.load(std::sync::atomic::Ordering::Relaxed), 3);
}

// ---------------------------------------------------------------------------------------------
// REPORT LUNS
// ---------------------------------------------------------------------------------------------

fn report_luns_cdb(alloc: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xa0;
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}

#[test]
fn report_luns() {
    let (mut t, n) = rig();
    let (r, d) = run_in(&mut t, n, L0, &report_luns_cdb(4096), 4096);
    good(&r);
    // As LIO's (f_srp.pcap frames 33/37: 4096 allocated, DIUNDER of the rest).
    assert_eq!(r.residual, Residual::Underflow(4096 - 24));
    let mut want = vec![0, 0, 0, 16, 0, 0, 0, 0];
    want.extend_from_slice(&[0; 8]);
    want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(d, want);
    // Cut by the allocation length: the LUN LIST LENGTH still counts every LUN.
    let (r, d) = run_in(&mut t, n, L1, &report_luns_cdb(20), 20);
    good(&r);
    assert_eq!(r.residual, Residual::None);
    assert_eq!(&d[..4], &[0, 0, 0, 16]);
    assert_eq!(d.len(), 20);
    // LUN ids beyond 255: int_to_scsilun, no address-method bits.
    t.add_lun(LunId(300), LogicalUnit::new(mem(8, BlockSize::B512), cfg()))
        .unwrap();
    let (_, d) = run_in(&mut t, n, L0, &report_luns_cdb(64), 64);
    assert_eq!(&d[..4], &[0, 0, 0, 24]);
    assert_eq!(&d[24..32], &[0x01, 0x2c, 0, 0, 0, 0, 0, 0]);
    // SELECT REPORT is ignored, as by LIO.
    let mut c = report_luns_cdb(64);
    c[2] = 0x02;
    good(&run_in(&mut t, n, L0, &c, 64).0);
    // REPORT LUNS is answered even with a unit attention pending.
    t.add_lun(LunId(2), LogicalUnit::new(mem(8, BlockSize::B512), cfg()))
        .unwrap();
    good(&run_in(&mut t, n, L0, &report_luns_cdb(64), 64).0);
}

// ---------------------------------------------------------------------------------------------
// MODE SENSE
// ---------------------------------------------------------------------------------------------

#[test]
fn mode_sense_all_pages() {
    let (mut t, n) = rig();
    let (r, d) = run_in(&mut t, n, L0, &[0x1a, 0, 0x3f, 0, 255, 0], 255);
    good(&r);
    // Same length as LIO's (f_srp.pcap frame 47: MODE DATA LENGTH 0x43).
    assert_eq!(d.len(), 68);
    assert_eq!(r.residual, Residual::Underflow(255 - 68));
    assert_eq!(&d[..4], &[0x43, 0, 0, 8]);
    assert_eq!(&d[4..12], &[0, 0, 0, 64, 0, 0, 2, 0]);
    assert_eq!(&d[12..14], &[0x01, 0x0a]);
    assert_eq!(&d[24..26], &[0x08, 0x12]);
    assert_eq!(d[26], 0); // WCE clear: a memory store has no write cache
    assert_eq!(d[36], 0x20); // DRA
    assert_eq!(
        &d[44..56],
        &[0x0a, 0x0a, 0x02, 0x10, 0x00, 0x40, 0, 0, 0xff, 0xff, 0, 30]
    );
    assert_eq!(&d[56..58], &[0x1c, 0x0a]);
    // Subpage FFh: all subpages, the same pages.
    let (r, d2) = run_in(&mut t, n, L0, &[0x1a, 0, 0x3f, 0xff, 255, 0], 255);
    good(&r);
    assert_eq!(d2, d);
    // Header only (frame 47's 4-byte allocation).
    let (r, d) = run_in(&mut t, n, L0, &[0x1a, 0, 0x3f, 0, 4, 0], 4);
    good(&r);
    assert_eq!((d, r.residual), (vec![0x43, 0, 0, 8], Residual::None));
}

#[test]
fn mode_sense_caching_page_like_lio() {
    // fixtures/captures/f_srp.pcap frame 59: MODE SENSE(6) page 08h, 32 bytes, from a 16 MiB
    // FILEIO LUN without write cache. We send the same bytes but for the block count, where
    // LIO puts the last LBA (0x7FFF) and SBC wants the number of blocks (0x8000).
    let lio: [u8; 32] = [
        0x1f, 0, 0, 8, 0, 0, 0x7f, 0xff, 0, 0, 2, 0, 0x08, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x20, 0, 0, 0, 0, 0, 0, 0,
    ];
    let (mut t, n) = rig_with(mem(0x8000, BlockSize::B512), LunConfig::default());
    let (r, d) = run_in(&mut t, n, L0, &[0x1a, 0, 0x08, 0, 0x20, 0], 0x20);
    good(&r);
    let mut ours = lio;
    ours[6..8].copy_from_slice(&[0x80, 0x00]);
    assert_eq!(d, ours);
    // DBD: no block descriptor.
    let (_, d) = run_in(&mut t, n, L0, &[0x1a, 0x08, 0x08, 0, 0xff, 0], 0xff);
    assert_eq!(d.len(), 24);
    assert_eq!(&d[..6], &[23, 0, 0, 0, 0x08, 0x12]);
    // Changeable values: the page header and zeroes.
    let (_, d) = run_in(&mut t, n, L0, &[0x1a, 0x08, 0x48, 0, 0xff, 0], 0xff);
    assert_eq!(&d[4..6], &[0x08, 0x12]);
    assert!(d[6..].iter().all(|b| *b == 0));
    // Default and saved values: the current ones (as LIO).
    let (_, cur) = run_in(&mut t, n, L0, &[0x1a, 0x08, 0x0a, 0, 0xff, 0], 0xff);
    for pc in [0x80u8, 0xc0] {
        let (_, d) = run_in(&mut t, n, L0, &[0x1a, 0x08, pc | 0x0a, 0, 0xff, 0], 0xff);
        assert_eq!(d, cur);
    }
}

#[test]
fn mode_sense_header_bits_and_ten() {
    let (mut t, n) = rig();
    // Read-only LUN: WP.
    let (_, d) = run_in(&mut t, n, L1, &[0x1a, 0, 0x0a, 0, 0xff, 0], 0xff);
    assert_eq!(d[2], 0x80);
    assert_eq!(&d[4..12], &[0, 0, 0, 16, 0, 0, 0x10, 0]);
    // A write cache: DPOFUA and WCE.
    let store = NullStore {
        size: 1 << 20,
        wce: true,
        ..NullStore::default()
    };
    let (mut t2, n2) = rig_with(Box::new(store), LunConfig::default());
    let (_, d) = run_in(&mut t2, n2, L0, &[0x1a, 0x08, 0x08, 0, 0xff, 0], 0xff);
    assert_eq!((d[2], d[6]), (0x10, 0x04));
    // MODE SENSE(10): 8-byte header, short descriptor.
    let (r, d) = run_in(&mut t, n, L0, &cdb10(0x5a, 0, 0x08 << 24, 0x100), 0x100);
    good(&r);
    assert_eq!(d.len(), 36);
    assert_eq!(&d[..8], &[0, 34, 0, 0, 0, 0, 0, 8]);
    // LLBAA with a block count that fits 32 bits: still the short descriptor.
    let (_, d) = run_in(&mut t, n, L0, &cdb10(0x5a, 0x10, 0x08 << 24, 0x100), 0x100);
    assert_eq!(&d[..8], &[0, 34, 0, 0, 0, 0, 0, 8]);
    // LLBAA on a LUN of 2^33 blocks: LONGLBA and the 16-byte descriptor.
    let big = NullStore {
        size: (1u64 << 33) * 512,
        ..NullStore::default()
    };
    let (mut t3, n3) = rig_with(Box::new(big), LunConfig::default());
    let (_, d) = run_in(
        &mut t3,
        n3,
        L0,
        &cdb10(0x5a, 0x10, 0x08 << 24, 0x100),
        0x100,
    );
    assert_eq!(&d[..8], &[0, 42, 0, 0, 1, 0, 0, 16]);
    assert_eq!(&d[8..16], &(1u64 << 33).to_be_bytes());
    assert_eq!(&d[20..24], &[0, 0, 2, 0]);
    assert_eq!(&d[24..26], &[0x08, 0x12]);
    // ... and the 6-byte form's short descriptor saturates.
    let (_, d) = run_in(&mut t3, n3, L0, &[0x1a, 0, 0x08, 0, 0xff, 0], 0xff);
    assert_eq!(&d[4..8], &[0xff; 4]);
}

#[test]
fn mode_sense_errors() {
    let (mut t, n) = rig();
    // Pages we lack (format parameters 03h, power condition 1Ah, ...): LIO's
    // TCM_UNKNOWN_MODE_PAGE, INVALID FIELD IN CDB.
    for page in [0x02u8, 0x03, 0x1a, 0x00] {
        let (r, _) = run_in(&mut t, n, L0, &[0x1a, 0, page, 0, 0xff, 0], 0xff);
        illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    }
    // A subpage of a page we have, or of 3Fh other than 00h/FFh.
    let (r, _) = run_in(&mut t, n, L0, &[0x1a, 0, 0x08, 1, 0xff, 0], 0xff);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    let (r, _) = run_in(&mut t, n, L0, &[0x1a, 0, 0x3f, 1, 0xff, 0], 0xff);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

// ---------------------------------------------------------------------------------------------
// MODE SELECT
// ---------------------------------------------------------------------------------------------

/// The caching page as MODE SENSE(6) with DBD returns it (after the 4-byte header).
fn caching_page(t: &mut Target, n: NexusId) -> Vec<u8> {
    let (_, d) = run_in(t, n, L0, &[0x1a, 0x08, 0x08, 0, 0xff, 0], 0xff);
    d[4..].to_vec()
}

#[test]
fn mode_select_accepts_current_values() {
    let (mut t, n) = rig();
    // An empty parameter list.
    good(&run_none(&mut t, n, L0, &[0x15, 0x10, 0, 0, 0, 0]));
    // The caching page unchanged, 6- and 10-byte forms.
    let page = caching_page(&mut t, n);
    let mut p6 = vec![0, 0, 0, 0];
    p6.extend_from_slice(&page);
    good(&run_out(
        &mut t,
        n,
        L0,
        &[0x15, 0x10, 0, 0, p6.len() as u8, 0],
        &p6,
    ));
    let mut p10 = vec![0; 8];
    p10.extend_from_slice(&page);
    good(&run_out(
        &mut t,
        n,
        L0,
        &cdb10(0x55, 0x11, 0, p10.len() as u16),
        &p10,
    ));
    // After a block descriptor the header announces.
    let mut pbd = vec![0, 0, 0, 8, 0, 0, 0, 64, 0, 0, 2, 0];
    pbd.extend_from_slice(&page);
    good(&run_out(
        &mut t,
        n,
        L0,
        &[0x15, 0x10, 0, 0, pbd.len() as u8, 0],
        &pbd,
    ));
    // The control page too.
    let (_, d) = run_in(&mut t, n, L0, &[0x1a, 0x08, 0x0a, 0, 0xff, 0], 0xff);
    good(&run_out(
        &mut t,
        n,
        L0,
        &[0x15, 0x10, 0, 0, d.len() as u8, 0],
        &d,
    ));
}

#[test]
fn mode_select_errors() {
    let (mut t, n) = rig();
    let page = caching_page(&mut t, n);
    let mut p6 = vec![0, 0, 0, 0];
    p6.extend_from_slice(&page);
    let ms6 = |len: usize| [0x15, 0x10, 0, 0, len as u8, 0];
    // A changed value (WCE on): INVALID FIELD IN PARAMETER LIST.
    let mut wce = p6.clone();
    wce[6] |= 0x04;
    illegal(
        &run_out(&mut t, n, L0, &ms6(wce.len()), &wce),
        AscAscq::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    // PF clear: INVALID FIELD IN CDB.
    illegal(
        &run_out(&mut t, n, L0, &[0x15, 0, 0, 0, p6.len() as u8, 0], &p6),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // Shorter than header + 2, or than the page: PARAMETER LIST LENGTH ERROR.
    illegal(
        &run_out(&mut t, n, L0, &ms6(5), &p6[..5]),
        AscAscq::PARAMETER_LIST_LENGTH_ERROR,
    );
    illegal(
        &run_out(&mut t, n, L0, &ms6(12), &p6[..12]),
        AscAscq::PARAMETER_LIST_LENGTH_ERROR,
    );
    let mut bd_only = vec![0, 0, 0, 8];
    bd_only.extend_from_slice(&[0; 8]);
    illegal(
        &run_out(&mut t, n, L0, &ms6(bd_only.len()), &bd_only),
        AscAscq::PARAMETER_LIST_LENGTH_ERROR,
    );
    // A page we lack, or a subpage: TCM_UNKNOWN_MODE_PAGE (INVALID FIELD IN CDB).
    let unknown = [0, 0, 0, 0, 0x03, 0x16, 0, 0];
    illegal(
        &run_out(&mut t, n, L0, &ms6(8), &unknown),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    let sub = [0, 0, 0, 0, 0x48, 0x01, 0, 0x12];
    illegal(
        &run_out(&mut t, n, L0, &ms6(8), &sub),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // MODE SELECT(10) too short for its 8-byte header.
    illegal(
        &run_out(&mut t, n, L0, &cdb10(0x55, 0x10, 0, 9), &[0; 9]),
        AscAscq::PARAMETER_LIST_LENGTH_ERROR,
    );
}

// ---------------------------------------------------------------------------------------------
// REQUEST SENSE
// ---------------------------------------------------------------------------------------------

#[test]
fn request_sense() {
    let (mut t, n) = rig();
    // Nothing pending: NO SENSE, fixed format; the whole allocation sent, no residual.
    let (r, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 18, 0], 18);
    good(&r);
    assert_eq!(
        d,
        [0x70, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let (r, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 252, 0], 252);
    good(&r);
    assert_eq!((d.len(), r.residual), (252, Residual::None));
    assert!(d[18..].iter().all(|b| *b == 0));
    // Cut to 8 bytes.
    let (_, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 8, 0], 8);
    assert_eq!(d, [0x70, 0, 0, 0, 0, 0, 0, 10]);
    // Descriptor format: refused, as LIO.
    let (r, _) = run_in(&mut t, n, L0, &[0x03, 1, 0, 0, 18, 0], 18);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

// ---------------------------------------------------------------------------------------------
// Unsupported commands, missing LUNs, the virtual LUN 0
// ---------------------------------------------------------------------------------------------

#[test]
fn unsupported_opcodes() {
    let (mut t, n) = rig();
    // LOG SENSE, MAINTENANCE IN (REPORT SUPPORTED OPERATION CODES: LIO 6.1 answers 20h/00h
    // too, f_srp.pcap frame 65), PREVENT ALLOW MEDIUM REMOVAL, a vendor-specific opcode.
    for cdb in [
        cdb10(0x4d, 0, 0, 0x100).to_vec(),
        vec![0xa3, 0x0c, 1, 0x12, 0, 0, 0, 0, 0, 0x0a, 0, 0],
        vec![0x1e, 0, 0, 0, 1, 0],
        vec![0xc0, 0, 0, 0, 0, 0],
        vec![0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let (r, _) = run_in(&mut t, n, L0, &cdb, 0x100);
        illegal(&r, AscAscq::INVALID_COMMAND_OPERATION_CODE);
    }
    // An empty or truncated CDB.
    let (r, _) = run_in(&mut t, n, L0, &[], 0);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    let (r, _) = run_in(&mut t, n, L0, &[0x28, 0, 0, 0], 512);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

#[test]
fn missing_lun() {
    let (mut t, n) = rig();
    let nolun = AscAscq::LOGICAL_UNIT_NOT_SUPPORTED;
    // Every command, INQUIRY and REPORT LUNS included (transport_lookup_cmd_lun fails
    // before the CDB is looked at).
    for lun in [LunId(2), LunId(0x4000), LunId(1 << 16)] {
        illegal(
            &run_in(&mut t, n, lun, &[0x12, 0, 0, 0, 36, 0], 36).0,
            nolun,
        );
        illegal(&run_in(&mut t, n, lun, &report_luns_cdb(64), 64).0, nolun);
        illegal(&run_none(&mut t, n, lun, &[0, 0, 0, 0, 0, 0]), nolun);
        illegal(
            &run_out(&mut t, n, lun, &cdb10(0x2a, 0, 0, 1), &[0; 512]),
            nolun,
        );
    }
}

#[test]
fn virtual_lun0() {
    // Only LUN 1 configured: LUN 0 is LIO's virtual LUN 0.
    let mut t = Target::new(TargetConfig::default());
    t.add_lun(L1, LogicalUnit::new(mem(8, BlockSize::B512), cfg()))
        .unwrap();
    let n = t.register_nexus(InitiatorId(1));
    // INQUIRY: peripheral qualifier 001b, device type 1Fh (0x3F), no unit attention.
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36);
    good(&r);
    assert_eq!(d[0], 0x3f);
    assert_eq!(&d[8..32], b"LIO-ORG RAMDISK-MCP     ");
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 96, 0], 96);
    good(&r);
    assert_eq!(&d[64..66], &[0, 0]); // no SBC-3 version descriptor
    let (r, d) = run_in(&mut t, n, L0, &[0x12, 1, 0, 0, 36, 0], 36);
    good(&r);
    assert_eq!(d, [0x3f, 0, 0, 0]);
    let (r, _) = run_in(&mut t, n, L0, &[0x12, 1, 0xb0, 0, 64, 0], 64);
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
    // REPORT LUNS lists the real LUNs.
    let (_, d) = run_in(&mut t, n, L0, &report_luns_cdb(64), 64);
    assert_eq!(&d[..16], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    good(&run_none(&mut t, n, L0, &[0, 0, 0, 0, 0, 0]));
    let (r, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 18, 0], 18);
    good(&r);
    assert_eq!(d[2], 0);
    // Data-out: WRITE PROTECTED; anything needing a medium: LOGICAL UNIT NOT SUPPORTED.
    check(
        &run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 1), &[0; 512]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    illegal(
        &run_in(&mut t, n, L0, &cdb10(0x25, 0, 0, 0), 8).0,
        AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
    );
    illegal(
        &run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 1), 512).0,
        AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
    );
    // Peripheral qualifier 011b if so configured; no virtual LUN 0 at all if disabled.
    for (v, want) in [(Some(0x7f), Some(0x7f)), (None, None)] {
        let mut t = Target::new(TargetConfig {
            virtual_lun0: v,
            ..TargetConfig::default()
        });
        let n = t.register_nexus(InitiatorId(1));
        let (r, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36);
        match want {
            Some(b) => assert_eq!(d[0], b),
            None => illegal(&r, AscAscq::LOGICAL_UNIT_NOT_SUPPORTED),
        }
    }
    // No LUNs at all: REPORT LUNS says LUN 0.
    let mut t = Target::new(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(1));
    let (_, d) = run_in(&mut t, n, L0, &report_luns_cdb(64), 64);
    assert_eq!(d, [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn execute_api_misuse() {
    let (mut t, n) = rig();
    let Decoded::Ready(cmd) = t
        .decode(n, L0, &cdb10(0x28, 0, 0, 2), DataDir::In, 1024)
        .unwrap()
    else {
        panic!()
    };
    let mut short = [0u8; 512];
    assert!(matches!(
        t.execute(&cmd, Data::In(&mut short)),
        Err(CoreError::DataMismatch { got_len: 512, .. })
    ));
    assert!(matches!(
        t.execute(&cmd, Data::Out(&[0; 1024])),
        Err(CoreError::DataMismatch { .. })
    ));
    assert!(matches!(
        t.execute(&cmd, Data::None),
        Err(CoreError::DataMismatch { .. })
    ));
    // A bigger buffer is fine: the prefix is used.
    let mut big = [0u8; 4096];
    let r = t.execute(&cmd, Data::In(&mut big)).unwrap();
    assert_eq!(r.data_len, 1024);
    assert_eq!(cmd.opcode().0, 0x28);
    assert_eq!((cmd.nexus(), cmd.lun()), (n, L0));
    t.unregister_nexus(n).unwrap();
    assert_eq!(
        t.execute(&cmd, Data::In(&mut big)),
        Err(CoreError::UnknownNexus(n))
    );
    assert_eq!(
        t.decode(n, L0, &[0; 6], DataDir::None, 0),
        Err(CoreError::UnknownNexus(n))
    );
    assert!(CoreError::UnknownNexus(n).to_string().contains("nexus#"));
}
