//! Per-nexus LUN maps (LIO's mapped LUNs of a node ACL): own LUN numbers, read-only
//! mappings, REPORT LUNS per nexus, task management through the map.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, SenseKey};

#[test]
fn own_numbers_and_read_only_mappings() {
    // rig: LU 0 (64 × 512, writable), LU 1 (16 × 4096, read-only).
    let (mut t, b) = rig();
    let a = t.register_nexus(InitiatorId(2));
    let map = BTreeMap::from([
        (
            LunId(0),
            LunMapping {
                lun: LunId(0),
                read_only: true,
            },
        ),
        (
            LunId(5),
            LunMapping {
                lun: LunId(0),
                read_only: false,
            },
        ),
    ]);
    t.set_lun_map(a, Some(map)).unwrap();
    clear_ua(&mut t, a);
    for l in [0u64, 5] {
        let _ = run_none(&mut t, a, LunId(l), &[0; 6]);
    }
    // REPORT LUNS: the nexus's numbers.
    let (r, d) = run_in(&mut t, a, LunId(0), &report_luns_cdb(64), 64);
    good(&r);
    assert_eq!(&d[..8], &[0, 0, 0, 16, 0, 0, 0, 0]);
    assert_eq!(&d[8..24], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0]);
    // LUN 1 is not mapped for it.
    illegal(
        &run_in(&mut t, a, LunId(1), &[0x12, 0, 0, 0, 36, 0], 36).0,
        AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
    );
    // LUN 0 is LU 0 read-only: WRITE PROTECTED, WP in MODE SENSE; LUN 5 writes.
    check(
        &run_out(&mut t, a, LunId(0), &cdb10(0x2a, 0, 0, 1), &[9; 512]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    check(
        &run_out(&mut t, a, LunId(0), &cdb10(0x42, 0, 0, 24), &[0; 24]),
        SenseKey::DATA_PROTECT,
        AscAscq::WRITE_PROTECTED,
    );
    let (_, d) = run_in(&mut t, a, LunId(0), &[0x1a, 0x08, 0x3f, 0, 255, 0], 255);
    assert_eq!(d[2] & 0x80, 0x80);
    let (_, d) = run_in(&mut t, a, LunId(5), &[0x1a, 0x08, 0x3f, 0, 255, 0], 255);
    assert_eq!(d[2] & 0x80, 0);
    good(&run_out(
        &mut t,
        a,
        LunId(5),
        &cdb10(0x2a, 0, 3, 1),
        &[0x5a; 512],
    ));
    // The other nexus (no map) sees it at LU 0's own number.
    let (r, d) = run_in(&mut t, b, LunId(0), &cdb10(0x28, 0, 3, 1), 512);
    good(&r);
    assert!(d.iter().all(|x| *x == 0x5a));
    let (_, d) = run_in(&mut t, b, LunId(0), &report_luns_cdb(64), 64);
    assert_eq!(&d[..4], &[0, 0, 0, 16]);
    // Task management names the initiator's LUN: LUN 5 is LU 0.
    t.task_started(a, LunId(5), 9).unwrap();
    let o = t
        .task_management(a, LunId(5), TmfKind::AbortTask(9))
        .unwrap();
    assert_eq!(o.response, TmfResponse::FunctionComplete);
    assert_eq!(o.aborted[0].lun, LunId(0));
    let o = t.task_management(a, LunId(1), TmfKind::LunReset).unwrap();
    assert_eq!(o.response, TmfResponse::LunDoesNotExist);
    // A map naming a missing LU is refused; removing the map shows every LU again.
    let bad = BTreeMap::from([(
        LunId(0),
        LunMapping {
            lun: LunId(7),
            read_only: false,
        },
    )]);
    assert!(matches!(
        t.set_lun_map(a, Some(bad)),
        Err(CoreError::NoSuchLun(LunId(7)))
    ));
    t.set_lun_map(a, None).unwrap();
    let (_, d) = run_in(&mut t, a, LunId(0), &report_luns_cdb(64), 64);
    assert_eq!(&d[..4], &[0, 0, 0, 16]);
    assert_eq!(&d[8..10], &[0, 0]);
    assert_eq!(&d[16..18], &[0, 1]);
}

fn report_luns_cdb(alloc: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xa0;
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}
