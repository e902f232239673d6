//! Unit attentions: when they are established, which commands report them, what clears them.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, SenseKey};

const L0: LunId = LunId(0);
const L1: LunId = LunId(1);
const TUR: [u8; 6] = [0, 0, 0, 0, 0, 0];
const BDR: AscAscq = AscAscq(0x2903);

fn ua(r: &Response, asc: AscAscq) {
    check(r, SenseKey::UNIT_ATTENTION, asc);
}

/// Two LUNs, no nexus yet.
fn target(config: TargetConfig) -> Target {
    let mut t = Target::new(config);
    t.add_lun(L0, LogicalUnit::new(mem(64, BlockSize::B512), cfg()))
        .unwrap();
    t.add_lun(L1, LogicalUnit::new(mem(64, BlockSize::B512), cfg()))
        .unwrap();
    t
}

#[test]
fn power_on_after_nexus_registration() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(7));
    assert_eq!(t.initiator(n), Some(InitiatorId(7)));
    assert_eq!(t.pending_unit_attentions(n, L0), [AscAscq::POWER_ON_RESET]);
    // The next command reports it (06h/29h/00h) and clears it; the retry succeeds.
    ua(&run_none(&mut t, n, L0, &TUR), AscAscq::POWER_ON_RESET);
    good(&run_none(&mut t, n, L0, &TUR));
    // Per LUN: LUN 1 still has its own.
    ua(
        &run_in(&mut t, n, L1, &cdb10(0x28, 0, 0, 1), 512).0,
        AscAscq::POWER_ON_RESET,
    );
    good(&run_in(&mut t, n, L1, &cdb10(0x28, 0, 0, 1), 512).0);
    // A second nexus gets its own.
    let m = t.register_nexus(InitiatorId(8));
    ua(&run_none(&mut t, m, L0, &TUR), AscAscq::POWER_ON_RESET);
    good(&run_none(&mut t, n, L0, &TUR));
    // Without power_on_ua (LIO 6.1 raises none at login): nothing.
    let mut t = target(TargetConfig {
        power_on_ua: false,
        ..TargetConfig::default()
    });
    let n = t.register_nexus(InitiatorId(7));
    good(&run_none(&mut t, n, L0, &TUR));
}

#[test]
fn inquiry_report_luns_request_sense_exempt() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(7));
    // INQUIRY and REPORT LUNS neither report nor clear (target_scsi3_ua_check).
    good(&run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36).0);
    good(&run_in(&mut t, n, L0, &[0x12, 1, 0x83, 0, 255, 0], 255).0);
    let mut rl = [0u8; 12];
    rl[0] = 0xa0;
    rl[9] = 64;
    good(&run_in(&mut t, n, L0, &rl, 64).0);
    assert_eq!(t.pending_unit_attentions(n, L0), [AscAscq::POWER_ON_RESET]);
    // REQUEST SENSE returns it as sense data with GOOD status, and clears it
    // (core_scsi3_ua_clear_for_request_sense).
    let (r, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 18, 0], 18);
    good(&r);
    assert_eq!(
        d,
        [0x70, 0, 6, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0]
    );
    assert!(t.pending_unit_attentions(n, L0).is_empty());
    good(&run_none(&mut t, n, L0, &TUR));
    let (_, d) = run_in(&mut t, n, L0, &[0x03, 0, 0, 0, 18, 0], 18);
    assert_eq!(d[2], 0);
}

#[test]
fn ua_checked_after_decode_and_data_phase() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(7));
    // A CDB that fails to decode fails for that, and the UA stays (LIO checks UAs in
    // __target_execute_cmd, after sbc_parse_cdb).
    illegal(
        &run_none(&mut t, n, L0, &[0x4d, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        AscAscq::INVALID_COMMAND_OPERATION_CODE,
    );
    illegal(
        &run_in(&mut t, n, L0, &cdb10(0x28, 0, 64, 1), 512).0,
        AscAscq::LBA_OUT_OF_RANGE,
    );
    assert_eq!(t.pending_unit_attentions(n, L0), [AscAscq::POWER_ON_RESET]);
    // A WRITE whose data arrived: the UA is reported, nothing is written.
    ua(
        &run_out(&mut t, n, L0, &cdb10(0x2a, 0, 0, 1), &[0xff; 512]),
        AscAscq::POWER_ON_RESET,
    );
    let (_, d) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 1), 512);
    assert!(d.iter().all(|b| *b == 0));
    // MODE SENSE of a page we lack, with a UA pending: the UA first (the page check is
    // in spc_emulate_modesense, after the UA check).
    t.raise_unit_attention(n, L0, AscAscq::MODE_PARAMETERS_CHANGED)
        .unwrap();
    ua(
        &run_in(&mut t, n, L0, &[0x1a, 0, 0x03, 0, 0xff, 0], 0xff).0,
        AscAscq::MODE_PARAMETERS_CHANGED,
    );
    // The residual survives a UA CHECK CONDITION.
    t.raise_unit_attention(n, L0, AscAscq::MODE_PARAMETERS_CHANGED)
        .unwrap();
    let (r, _) = run_in(&mut t, n, L0, &cdb10(0x28, 0, 0, 2), 512);
    ua(&r, AscAscq::MODE_PARAMETERS_CHANGED);
    assert_eq!(r.residual, Residual::Overflow(512));
}

#[test]
fn highest_precedence_reported_all_cleared() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(7));
    t.raise_unit_attention(n, L0, AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED)
        .unwrap();
    t.raise_unit_attention(n, L0, BDR).unwrap();
    t.raise_unit_attention(n, L0, AscAscq::POWER_ON_RESET)
        .unwrap();
    assert_eq!(
        t.pending_unit_attentions(n, L0),
        [
            AscAscq::POWER_ON_RESET,
            BDR,
            AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED
        ]
    );
    // LIO with UA_INTLCK_CTRL 00b: the head reported, every pending UA released.
    ua(&run_none(&mut t, n, L0, &TUR), AscAscq::POWER_ON_RESET);
    assert!(t.pending_unit_attentions(n, L0).is_empty());
    good(&run_none(&mut t, n, L0, &TUR));
    assert!(matches!(
        t.raise_unit_attention(n, LunId(9), BDR),
        Err(CoreError::NoSuchLun(_))
    ));
}

#[test]
fn lun_reset_policies() {
    for (policy, issuer, other) in [
        (LunResetUa::AllNexuses, true, true),
        (LunResetUa::OtherNexuses, false, true),
        (LunResetUa::IssuingNexus, true, false),
    ] {
        let mut t = target(TargetConfig {
            lun_reset_ua: policy,
            ..TargetConfig::default()
        });
        let a = t.register_nexus(InitiatorId(1));
        let b = t.register_nexus(InitiatorId(2));
        clear_ua(&mut t, a);
        clear_ua(&mut t, b);
        let out = t.task_management(a, L0, TmfKind::LunReset).unwrap();
        assert_eq!(out.response, TmfResponse::FunctionComplete);
        for (n, want) in [(a, issuer), (b, other)] {
            if want {
                ua(&run_none(&mut t, n, L0, &TUR), BDR);
            }
            good(&run_none(&mut t, n, L0, &TUR));
            // The other LUN is not reset.
            good(&run_none(&mut t, n, L1, &TUR));
        }
    }
}

#[test]
fn lun_changes() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(1));
    clear_ua(&mut t, n);
    // A new LUN: REPORTED LUNS DATA HAS CHANGED on the others
    // (target_luns_data_has_changed), POWER ON on the new one.
    t.add_lun(LunId(5), LogicalUnit::new(mem(8, BlockSize::B512), cfg()))
        .unwrap();
    ua(
        &run_none(&mut t, n, L0, &TUR),
        AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED,
    );
    ua(
        &run_none(&mut t, n, L1, &TUR),
        AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED,
    );
    ua(
        &run_none(&mut t, n, LunId(5), &TUR),
        AscAscq::POWER_ON_RESET,
    );
    // Removing one: the rest are told; the removed LUN is gone.
    let (lu, aborted) = t.remove_lun(LunId(5)).unwrap();
    assert_eq!(lu.blocks(), 8);
    assert!(aborted.is_empty());
    ua(
        &run_none(&mut t, n, L0, &TUR),
        AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED,
    );
    illegal(
        &run_none(&mut t, n, LunId(5), &TUR),
        AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
    );
    assert_eq!(t.lun_ids().collect::<Vec<_>>(), [L0, L1]);
    // Bad LUN ids.
    let lu = || LogicalUnit::new(mem(8, BlockSize::B512), cfg());
    assert_eq!(t.add_lun(L0, lu()), Err(CoreError::LunExists(L0)));
    assert_eq!(
        t.add_lun(LunId(1 << 16), lu()),
        Err(CoreError::BadLunId(LunId(1 << 16)))
    );
    let odd = NullStore {
        size: 1000,
        ..NullStore::default()
    };
    assert_eq!(
        t.add_lun(LunId(8), LogicalUnit::new(Box::new(odd), cfg())),
        Err(CoreError::BadStoreSize {
            size: 1000,
            block_size: 512
        })
    );
    assert!(matches!(
        t.remove_lun(LunId(77)),
        Err(CoreError::NoSuchLun(_))
    ));
    // A command decoded before its LUN went away fails at execute.
    let Decoded::Ready(cmd) = t.decode(n, L1, &TUR, DataDir::None, 0).unwrap() else {
        panic!()
    };
    t.remove_lun(L1).unwrap();
    illegal(
        &t.execute(&cmd, Data::None).unwrap(),
        AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
    );
}

#[test]
fn unregistered_nexus_forgets_its_uas() {
    let mut t = target(TargetConfig::default());
    let n = t.register_nexus(InitiatorId(1));
    assert!(!t.pending_unit_attentions(n, L0).is_empty());
    t.unregister_nexus(n).unwrap();
    assert!(t.pending_unit_attentions(n, L0).is_empty());
    assert_eq!(t.unregister_nexus(n), Err(CoreError::UnknownNexus(n)));
    // A re-login is a new nexus, with a new power-on.
    let m = t.register_nexus(InitiatorId(1));
    assert_ne!(m, n);
    ua(&run_none(&mut t, m, L0, &TUR), AscAscq::POWER_ON_RESET);
}
