//! SCSI CDBs and parameter data against the LIO target's answers in `f_srp.pcap` (the RDMA
//! WRITEs that carry data-in), plus round trips and hostile input.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::dissect::Dissect;
use crate::srp::tests::capture::frame;

#[test]
fn inquiry_data_from_capture() {
    // Frame 10: the 36-byte standard INQUIRY data LIO returned (allocation length 36).
    let d = frame(10).payload;
    assert_eq!(d.len(), 36);
    let q = StandardInquiry::parse(&d).unwrap();
    assert_eq!(q.device_type, DeviceType::DISK);
    assert_eq!(q.qualifier, 0);
    assert_eq!(q.version, 6); // SPC-4
    assert_eq!(q.response_data_format(), 2);
    assert_eq!(q.additional_len, 0x5b); // of the full data, though only 36 bytes were asked
    assert!(q.cmdque());
    assert_eq!(q.tpgs(), 3);
    assert_eq!(&q.vendor, b"LIO-ORG ");
    assert_eq!(&q.product, b"FILEIO          ");
    assert_eq!(&q.revision, b"4.0 ");
    assert_eq!(q.to_bytes(), d);
    // Frame 16: the same with allocation length 96: the extra bytes are kept.
    let d = frame(16).payload;
    let q = StandardInquiry::parse(&d).unwrap();
    assert_eq!(q.extra.len(), 60);
    assert_eq!(q.to_bytes(), d);
    let t = q.to_tree();
    assert_eq!(
        t.find("scsi_inquiry_data.vendor").unwrap().display,
        "LIO-ORG "
    );
}

#[test]
fn vpd_and_capacity_from_capture() {
    // Frame 22: VPD page 0x00 header (allocation length 4).
    let d = frame(22).payload;
    let v = VpdPage::parse(&d).unwrap();
    assert_eq!(v.page_code, data::VpdPageCode::SUPPORTED_PAGES);
    assert_eq!(v.to_bytes(), d);
    // Frame 41: READ CAPACITY(16) data: 16 MiB of 512-byte blocks.
    let d = frame(41).payload;
    let c = ReadCapacity16Data::parse(&d).unwrap();
    assert_eq!(c.last_lba, 0x7fff);
    assert_eq!(c.block_length, 512);
    assert!(!c.lbpme());
    assert_eq!(c.to_bytes(), d);
    // Frame 33: REPORT LUNS (first of 4096 bytes LIO wrote; 16 of them valid): LUN 0.
    let d = frame(33).payload;
    let l = ReportLunsData::parse(&d[..16]).unwrap();
    assert_eq!(l, ReportLunsData::new(vec![0]));
    assert_eq!(l.to_bytes(), &d[..16]);
    let full = ReportLunsData::parse(&d).unwrap();
    assert_eq!(full.luns, vec![0]);
}

#[test]
fn mode_sense_data_from_capture() {
    // Frame 47: MODE SENSE(6) all pages, 4 bytes: the header only.
    let h = ModeHeader6Repr::parse(&frame(47).payload).unwrap();
    assert_eq!(h.mode_data_length, 0x43);
    assert_eq!(h.block_descriptor_length, 8);
    assert!(!h.wp());
    // Frame 59: header, the block descriptor, then the caching page.
    let d = frame(59).payload;
    let h = ModeHeader6Repr::parse(&d).unwrap();
    assert_eq!(h.mode_data_length, 0x1f);
    assert!(!h.dpofua()); // LIO fileio without FUA emulation
    let bd = BlockDescriptor::parse(&d[4..12]).unwrap();
    assert_eq!(
        bd,
        BlockDescriptor {
            blocks: 0x7fff,
            block_length: 512
        }
    );
    let mut b = [0u8; 8];
    bd.emit(&mut b);
    assert_eq!(&b, &d[4..12]);
    let mut hb = [0u8; 4];
    h.emit(&mut hb);
    assert_eq!(&hb, &d[..4]);
    assert_eq!(d[12], 0x08); // caching mode page
    let h10 = ModeHeader10Repr {
        mode_data_length: 0x1f,
        medium_type: 0,
        device_specific: 0x10,
        longlba: true,
        block_descriptor_length: 16,
    };
    let mut b10 = [0u8; 8];
    h10.emit(&mut b10);
    assert_eq!(b10, [0, 0x1f, 0, 0x10, 1, 0, 0, 16]);
    assert_eq!(ModeHeader10Repr::parse(&b10).unwrap(), h10);
}

#[test]
fn cdb_roundtrips() {
    let cdbs = vec![
        Cdb::TestUnitReady { control: 0 },
        Cdb::RequestSense(RequestSenseRepr {
            desc: true,
            alloc_len: 252,
            control: 0,
        }),
        Cdb::Inquiry(InquiryRepr {
            evpd: true,
            page_code: 0x83,
            alloc_len: 0x1000,
            control: 0,
        }),
        Cdb::ModeSense(ModeSenseRepr {
            ten: false,
            llbaa: false,
            dbd: true,
            pc: cdb::PageControl::CHANGEABLE,
            page_code: 0x08,
            subpage_code: 0,
            alloc_len: 0xff,
            control: 0,
        }),
        Cdb::ModeSense(ModeSenseRepr {
            ten: true,
            llbaa: true,
            dbd: false,
            pc: cdb::PageControl::CURRENT,
            page_code: 0x3f,
            subpage_code: 0xff,
            alloc_len: 0x1234,
            control: 0,
        }),
        Cdb::ReadCapacity10(ReadCapacity10Repr {
            lba: 0,
            pmi: false,
            control: 0,
        }),
        Cdb::ReadCapacity16(ReadCapacity16Repr {
            lba: 0,
            alloc_len: 32,
            pmi: false,
            control: 0,
        }),
        Cdb::SynchronizeCache(SyncCacheRepr {
            sixteen: false,
            immed: true,
            lba: 0x10,
            blocks: 0x20,
            group: 0,
            control: 0,
        }),
        Cdb::SynchronizeCache(SyncCacheRepr {
            sixteen: true,
            immed: false,
            lba: 0x1_0000_0000,
            blocks: 0x10_0000,
            group: 3,
            control: 0,
        }),
        Cdb::ReportLuns(ReportLunsRepr {
            select_report: 0,
            alloc_len: 4096,
            control: 0,
        }),
        Cdb::Other {
            opcode: ScsiOpcode::MAINTENANCE_IN,
            bytes: vec![0xa3, 0x0c, 1, 0x12, 0, 0, 0, 0, 0, 0x0a, 0, 0],
        },
        Cdb::Verify(VerifyRepr {
            kind: VerifyKind::Verify10,
            protect: 0,
            dpo: true,
            bytchk: 3,
            lba: 0xffff_fffe,
            blocks: 8,
            group: 1,
            control: 0,
        }),
        Cdb::Verify(VerifyRepr {
            kind: VerifyKind::Verify16,
            protect: 5,
            dpo: false,
            bytchk: 1,
            lba: 0x1_0000_0000,
            blocks: 0x10_0000,
            group: 0x1f,
            control: 0x80,
        }),
        Cdb::Verify(VerifyRepr {
            kind: VerifyKind::WriteAndVerify10,
            protect: 1,
            dpo: false,
            bytchk: 1,
            lba: 7,
            blocks: 1,
            group: 0,
            control: 0,
        }),
        Cdb::Verify(VerifyRepr {
            kind: VerifyKind::WriteAndVerify16,
            protect: 0,
            dpo: true,
            bytchk: 0,
            lba: 0xffff_ffff_ffff_fff0,
            blocks: 16,
            group: 2,
            control: 0,
        }),
        Cdb::ModeSelect(ModeSelectRepr {
            ten: false,
            pf: true,
            sp: false,
            param_len: 0x18,
            control: 0,
        }),
        Cdb::ModeSelect(ModeSelectRepr {
            ten: true,
            pf: true,
            sp: true,
            param_len: 0x1234,
            control: 0,
        }),
        Cdb::StartStopUnit(StartStopUnitRepr {
            immed: true,
            power_condition_modifier: 0,
            power_condition: 0,
            no_flush: false,
            loej: false,
            start: true,
            control: 0,
        }),
        Cdb::StartStopUnit(StartStopUnitRepr {
            immed: false,
            power_condition_modifier: 0xa,
            power_condition: 0x3,
            no_flush: true,
            loej: true,
            start: false,
            control: 4,
        }),
    ];
    for kind in [
        RwKind::Read6,
        RwKind::Read10,
        RwKind::Read12,
        RwKind::Read16,
        RwKind::Write6,
        RwKind::Write10,
        RwKind::Write12,
        RwKind::Write16,
    ] {
        let wide = kind.cdb_len() >= 12;
        let (lba, len) = match kind.cdb_len() {
            6 => (0x1f_fffe, 0),
            10 => (0xffff_fff0, 0xffff),
            12 => (0xffff_fff1, 0xfedc_ba98),
            _ => (0xffff_ffff_0000_0000, 0x0010_0000),
        };
        let rw = ReadWriteRepr {
            kind,
            lba,
            transfer_len: len,
            flags: if kind.cdb_len() > 6 {
                ReadWriteRepr::FUA | ReadWriteRepr::DPO
            } else {
                0
            },
            group: if wide { 5 } else { 0 },
            control: 0,
        };
        let b = rw.to_bytes();
        assert_eq!(b.len(), kind.cdb_len());
        let p = ReadWriteRepr::parse(&b).unwrap();
        assert_eq!(p, rw);
        assert_eq!(
            p.kind.is_write(),
            matches!(
                kind,
                RwKind::Write6 | RwKind::Write10 | RwKind::Write12 | RwKind::Write16
            )
        );
        assert_eq!(RwKind::from_opcode(kind.opcode()), Some(kind));
        if kind.cdb_len() == 6 {
            assert_eq!(p.blocks(), 256);
        } else {
            assert!(p.fua() && p.dpo());
        }
    }
    for c in cdbs {
        let b = c.to_bytes();
        assert_eq!(Some(b.len()), c.opcode().cdb_len());
        let p = Cdb::parse(&b).unwrap();
        assert_eq!(p, c, "{:?}", c.opcode());
        assert_eq!(p.to_bytes(), b);
        let _ = p.to_tree().to_text(0);
    }
    // Layout spot checks (SBC-3): READ(10) LBA at 2..6, length at 7..9; READ CAPACITY(16).
    let r10 = ReadWriteRepr {
        kind: RwKind::Read10,
        lba: 0x0102_0304,
        transfer_len: 0x0506,
        flags: 0x08,
        group: 0,
        control: 0,
    };
    assert_eq!(r10.to_bytes(), [0x28, 0x08, 1, 2, 3, 4, 0, 5, 6, 0]);
    assert_eq!(
        Cdb::ReadCapacity16(ReadCapacity16Repr {
            lba: 0,
            alloc_len: 32,
            pmi: false,
            control: 0
        })
        .to_cdb16()
        .unwrap(),
        [0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0]
    );
    assert_eq!(ScsiOpcode::READ_16.to_string(), "READ(16)");
    // READ(12)/WRITE(12): LBA at 2..6, TRANSFER LENGTH at 6..10, GROUP NUMBER at 10.
    let w12 = ReadWriteRepr {
        kind: RwKind::Write12,
        lba: 0x0102_0304,
        transfer_len: 0x0506_0708,
        flags: ReadWriteRepr::FUA,
        group: 0x09,
        control: 0x0a,
    };
    assert_eq!(
        w12.to_bytes(),
        [0xaa, 0x08, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x0a]
    );
    assert_eq!(ScsiOpcode::READ_12.cdb_len(), Some(12));
    // VERIFY(10) BYTCHK is two bits (2–1); WRITE AND VERIFY(10) BYTCHK one bit (1), bit 2
    // reserved and dropped on parse.
    let v10 = [0x2f, 0x16, 0, 0, 0, 9, 0, 0, 2, 0];
    let v = VerifyRepr::parse(&v10).unwrap();
    assert_eq!((v.dpo, v.bytchk, v.lba, v.blocks), (true, 3, 9, 2));
    assert_eq!(v.to_bytes(), v10);
    let wv = VerifyRepr::parse(&[0x2e, 0x06, 0, 0, 0, 1, 0, 0, 1, 0]).unwrap();
    assert_eq!((wv.kind, wv.bytchk), (VerifyKind::WriteAndVerify10, 1));
    assert_eq!(wv.to_bytes(), [0x2e, 0x02, 0, 0, 0, 1, 0, 0, 1, 0]);
    assert!(wv.kind.is_write() && !v.kind.is_write());
    assert_eq!(
        VerifyRepr::parse(&[0x28; 10]).unwrap_err().field(),
        "scsi.verify.opcode"
    );
    assert_eq!(
        ScsiOpcode::WRITE_AND_VERIFY_16.to_string(),
        "WRITE AND VERIFY(16)"
    );
    // MODE SELECT(6): PF bit 4, SP bit 0, length in byte 4; (10): length at 7..9.
    let ms = ModeSelectRepr::parse(&[0x15, 0x11, 0, 0, 0x1c, 0]).unwrap();
    assert!(ms.pf && ms.sp && !ms.ten);
    assert_eq!(ms.param_len, 0x1c);
    let ms10 = ModeSelectRepr::parse(&[0x55, 0x10, 0, 0, 0, 0, 0, 0x01, 0x02, 0]).unwrap();
    assert!(ms10.ten && ms10.pf && !ms10.sp);
    assert_eq!(ms10.param_len, 0x102);
    assert!(ModeSelectRepr::parse(&[0x55, 0, 0, 0, 0, 0]).is_err());
    // START STOP UNIT: IMMED byte 1 bit 0; POWER CONDITION MODIFIER byte 3; byte 4 bits.
    let ssu = StartStopUnitRepr::parse(&[0x1b, 0x01, 0, 0x02, 0x31, 0]).unwrap();
    assert!(ssu.immed && ssu.start && !ssu.loej && !ssu.no_flush);
    assert_eq!((ssu.power_condition, ssu.power_condition_modifier), (3, 2));
    assert_eq!(ssu.to_bytes(), [0x1b, 0x01, 0, 0x02, 0x31, 0]);
    assert_eq!(ScsiOpcode(0x7f).cdb_len(), None);
}

#[test]
fn sense_formats() {
    let f = SenseRepr::fixed(SenseKey::ILLEGAL_REQUEST, AscAscq::LBA_OUT_OF_RANGE);
    let b = f.to_bytes();
    assert_eq!(
        b,
        [0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0]
    );
    assert_eq!(SenseRepr::parse(&b).unwrap(), f);
    assert_eq!(
        AscAscq::LBA_OUT_OF_RANGE.to_string(),
        "LOGICAL BLOCK ADDRESS OUT OF RANGE"
    );
    assert_eq!(
        AscAscq::INVALID_FIELD_IN_CDB.to_string(),
        "INVALID FIELD IN CDB"
    );
    assert_eq!(AscAscq::LOGICAL_UNIT_NOT_SUPPORTED.0, 0x2500);
    assert_eq!(
        AscAscq::new(0x3f, 0x0e),
        AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED
    );
    assert_eq!(SenseKey::UNIT_ATTENTION.to_string(), "UNIT ATTENTION");
    // Fixed with the information field, deferred, flags and additional bytes.
    let x = SenseRepr::Fixed(FixedSense {
        deferred: true,
        valid: true,
        filemark: false,
        eom: true,
        ili: true,
        sense_key: SenseKey::MEDIUM_ERROR,
        information: 0x1234_5678,
        command_specific: 9,
        asc_ascq: AscAscq::UNRECOVERED_READ_ERROR,
        fru: 1,
        sense_key_specific: [0x80, 0, 2],
        additional: vec![1, 2],
    });
    let xb = x.to_bytes();
    assert_eq!(xb.len(), 20);
    assert_eq!((xb[0], xb[2], xb[7]), (0xf1, 0x63, 12));
    assert_eq!(SenseRepr::parse(&xb).unwrap(), x);
    // Descriptor format.
    let d = SenseRepr::Descriptor(DescriptorSense {
        deferred: false,
        sense_key: SenseKey::ILLEGAL_REQUEST,
        asc_ascq: AscAscq::INVALID_FIELD_IN_CDB,
        descriptors: vec![0x02, 0x06, 0, 0, 0x80, 0, 1, 0],
    });
    let db = d.to_bytes();
    assert_eq!(&db[..8], &[0x72, 5, 0x24, 0, 0, 0, 0, 8]);
    assert_eq!(SenseRepr::parse(&db).unwrap(), d);
    let t = d.to_tree();
    assert_eq!(t.uint("scsi_sense.asc_ascq"), Some(0x2400));
    // Padding after the sense data is ignored.
    let mut padded = b.clone();
    padded.resize(96, 0);
    assert_eq!(SenseRepr::parse(&padded).unwrap(), f);
    // Statuses.
    assert_eq!(ScsiStatus::TASK_SET_FULL.0, 0x28);
    assert_eq!(ScsiStatus::RESERVATION_CONFLICT.0, 0x18);
    assert_eq!(ScsiStatus::BUSY.to_string(), "BUSY");
}

#[test]
fn vpd_builders() {
    let p0 = VpdPage::supported_pages(0, &[0x00, 0x80, 0x83]);
    assert_eq!(p0.to_bytes(), [0, 0, 0, 3, 0x00, 0x80, 0x83]);
    assert_eq!(
        VpdPage::parse(&p0.to_bytes()).unwrap().page_list(),
        &[0, 0x80, 0x83]
    );
    let p80 = VpdPage::unit_serial_number(0, "6001405abc");
    let b80 = p80.to_bytes();
    assert_eq!(&b80[..4], &[0, 0x80, 0, 10]);
    assert_eq!(VpdPage::parse(&b80).unwrap().serial_number(), "6001405abc");
    let naa = Designator {
        protocol_id: 0,
        code_set: 1,
        piv: false,
        association: 0,
        designator_type: 3,
        designator: vec![
            0x60, 0x01, 0x40, 0x5a, 0xbc, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        ],
    };
    let t10 = Designator {
        protocol_id: 0,
        code_set: 2,
        piv: false,
        association: 0,
        designator_type: 1,
        designator: b"LIO-ORG FILEIO".to_vec(),
    };
    let p83 = VpdPage::device_identification(0, &[naa.clone(), t10.clone()]);
    let b83 = p83.to_bytes();
    assert_eq!(&b83[..8], &[0, 0x83, 0, 38, 0x01, 0x03, 0, 16]);
    let back = VpdPage::parse(&b83).unwrap();
    assert_eq!(back.designators().unwrap(), vec![naa, t10]);
    let _ = back.to_tree().to_text(0);
    // A designator that runs past the page.
    let mut bad = b83.clone();
    bad[7] = 200;
    assert!(VpdPage::parse(&bad).unwrap().designators().is_err());
    let r10 = ReadCapacity10Data {
        last_lba: 0x7fff,
        block_length: 512,
    };
    assert_eq!(r10.to_bytes(), [0, 0, 0x7f, 0xff, 0, 0, 2, 0]);
    assert_eq!(ReadCapacity10Data::parse(&r10.to_bytes()).unwrap(), r10);
}

#[test]
fn vpd_block_pages() {
    // The short Block Limits page LIO sends without thin provisioning: PAGE LENGTH 0x10,
    // WSNZ, OPTIMAL TRANSFER LENGTH GRANULARITY 1, MAXIMUM TRANSFER LENGTH 8192 blocks.
    let b0 = BlockLimitsVpd {
        peripheral: 0,
        long: false,
        wsnz: true,
        max_compare_and_write_len: 1,
        opt_transfer_len_granularity: 1,
        max_transfer_len: 8192,
        opt_transfer_len: 8192,
        ..BlockLimitsVpd::default()
    };
    let b = b0.to_bytes();
    assert_eq!(b.len(), 20);
    assert_eq!(
        b,
        [0, 0xb0, 0, 0x10, 1, 1, 0, 1, 0, 0, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0, 0]
    );
    assert_eq!(BlockLimitsVpd::parse(&b).unwrap(), b0);
    // The full page, with the unmap fields and UGAVALID.
    let long = BlockLimitsVpd {
        long: true,
        max_unmap_lba_count: 0x1_0000,
        max_unmap_block_descriptor_count: 1,
        opt_unmap_granularity: 8,
        ugavalid: true,
        unmap_granularity_alignment: 3,
        max_write_same_len: 0xffff,
        ..b0
    };
    let lb = long.to_bytes();
    assert_eq!(lb.len(), 64);
    assert_eq!(&lb[2..4], &[0, 0x3c]);
    assert_eq!(&lb[32..36], &[0x80, 0, 0, 3]);
    assert_eq!(BlockLimitsVpd::parse(&lb).unwrap(), long);
    assert_eq!(
        long.to_tree().uint("scsi_vpd_b0.max_transfer_len"),
        Some(8192)
    );
    // Wrong page code, odd page length, truncated page.
    let mut bad = b.clone();
    bad[1] = 0xb1;
    assert!(BlockLimitsVpd::parse(&bad).is_err());
    let mut odd = b.clone();
    odd[3] = 0x11;
    assert!(BlockLimitsVpd::parse(&odd).is_err());
    assert!(BlockLimitsVpd::parse(&lb[..40]).is_err());
    // Block Device Characteristics: non-rotating medium, as LIO reports is_nonrot.
    let b1 = BlockDeviceCharacteristicsVpd {
        peripheral: 0,
        rotation_rate: BlockDeviceCharacteristicsVpd::NON_ROTATING,
        product_type: 0,
        byte7: 0,
        byte8: 0,
    };
    let bb = b1.to_bytes();
    assert_eq!(bb.len(), 64);
    assert_eq!(&bb[..6], &[0, 0xb1, 0, 0x3c, 0, 1]);
    assert_eq!(BlockDeviceCharacteristicsVpd::parse(&bb).unwrap(), b1);
    assert!(BlockDeviceCharacteristicsVpd::parse(&bb[..63]).is_err());
    assert!(BlockDeviceCharacteristicsVpd::parse(&b).is_err());
    let _ = b1.to_tree().to_text(0);
}

#[test]
fn hostile_scsi_input() {
    let mut x: u32 = 0xdead_beef;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    };
    for op in 0..=255u8 {
        for len in 0..=16usize {
            let mut g: Vec<u8> = (0..len).map(|_| rnd()).collect();
            if let Some(b) = g.first_mut() {
                *b = op;
            }
            if let Ok(c) = Cdb::parse(&g) {
                assert!(c.buffer_len() <= g.len());
                let b = c.to_bytes();
                assert_eq!(Cdb::parse(&b).unwrap(), c);
                crate::test_support::render(&c.to_tree());
            } else {
                // Too short for the operation code's group.
                assert!(g.is_empty() || ScsiOpcode(op).cdb_len().is_some_and(|n| len < n));
            }
            let _ = SenseRepr::parse(&g);
            let _ = StandardInquiry::parse(&g);
            let _ = VpdPage::parse(&g).map(|v| v.designators());
            let _ = ReportLunsData::parse(&g);
            let _ = ReadCapacity16Data::parse(&g);
            let _ = ModeHeader10Repr::parse(&g);
            if let Ok(b) = BlockLimitsVpd::parse(&g) {
                assert_eq!(BlockLimitsVpd::parse(&b.to_bytes()).unwrap(), b);
            }
            if let Ok(b) = BlockDeviceCharacteristicsVpd::parse(&g) {
                assert_eq!(
                    BlockDeviceCharacteristicsVpd::parse(&b.to_bytes()).unwrap(),
                    b
                );
            }
        }
    }
    for n in 0..36 {
        assert!(StandardInquiry::parse(&frame(10).payload[..n]).is_err());
    }
    for n in 0..32 {
        assert!(ReadCapacity16Data::parse(&frame(41).payload[..n]).is_err());
    }
    // Sense data whose ADDITIONAL SENSE LENGTH runs past the buffer, or is too short for
    // fixed format, or an unknown response code.
    let s = SenseRepr::fixed(SenseKey::NOT_READY, AscAscq::MEDIUM_NOT_PRESENT).to_bytes();
    for n in 0..s.len() {
        assert!(SenseRepr::parse(&s[..n]).is_err());
    }
    let mut short = s.clone();
    short[7] = 2;
    assert_eq!(
        SenseRepr::parse(&short).unwrap_err().field(),
        "scsi.sense.fixed"
    );
    let mut weird = s;
    weird[0] = 0x7f;
    assert_eq!(
        SenseRepr::parse(&weird).unwrap_err().field(),
        "scsi.sense.response_code"
    );
}
