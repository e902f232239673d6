//! Task management functions over the table of tasks in flight.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, SenseKey};

const L0: LunId = LunId(0);
const L1: LunId = LunId(1);

fn aborted(o: &TmfOutcome) -> Vec<(NexusId, u64, bool)> {
    o.aborted
        .iter()
        .map(|a| (a.nexus, a.tag, a.task_aborted_status))
        .collect()
}

/// Two nexuses, tasks: a:1 a:2 on LUN 0, a:3 on LUN 1, b:1 b:4 on LUN 0.
fn busy(tas: bool) -> (Target, NexusId, NexusId) {
    let mut t = Target::new(TargetConfig::default());
    for (l, blocks) in [(L0, 64), (L1, 64)] {
        let c = LunConfig { tas, ..cfg() };
        t.add_lun(l, LogicalUnit::new(mem(blocks, BlockSize::B512), c))
            .unwrap();
    }
    let a = t.register_nexus(InitiatorId(0xa));
    let b = t.register_nexus(InitiatorId(0xb));
    clear_ua(&mut t, a);
    clear_ua(&mut t, b);
    for (n, l, tag) in [(a, L0, 1), (a, L0, 2), (a, L1, 3), (b, L0, 1), (b, L0, 4)] {
        t.task_started(n, l, tag).unwrap();
    }
    (t, a, b)
}

#[test]
fn task_table() {
    let (mut t, a, b) = busy(true);
    assert_eq!(t.tasks_in_flight(), 5);
    assert_eq!(
        t.task_started(a, L0, 1),
        Err(CoreError::TagInUse { nexus: a, tag: 1 })
    );
    assert!(t.task_in_flight(b, 4));
    assert!(t.task_finished(b, 4));
    assert!(!t.task_finished(b, 4));
    assert!(!t.task_in_flight(b, 4));
    // A nexus going away takes its tasks with it.
    let gone = t.unregister_nexus(b).unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].tag, gone[0].task_aborted_status), (1, false));
    assert_eq!(t.tasks_in_flight(), 3);
    // So does a LUN.
    let (_, gone) = t.remove_lun(L1).unwrap();
    assert_eq!((gone.len(), gone[0].tag, gone[0].lun), (1, 3, L1));
}

#[test]
fn abort_task() {
    let (mut t, a, b) = busy(true);
    let o = t.task_management(a, L0, TmfKind::AbortTask(2)).unwrap();
    assert_eq!(o.response, TmfResponse::FunctionComplete);
    assert_eq!(aborted(&o), [(a, 2, false)]);
    assert!(!t.task_in_flight(a, 2));
    // Already gone, never there, another nexus's tag, another LUN's task.
    for (lun, tag) in [(L0, 2), (L0, 99), (L0, 4), (L0, 3)] {
        let o = t.task_management(a, lun, TmfKind::AbortTask(tag)).unwrap();
        assert_eq!(o.response, TmfResponse::TaskDoesNotExist, "{tag}");
        assert!(o.aborted.is_empty());
    }
    assert!(t.task_in_flight(b, 4) && t.task_in_flight(a, 3));
}

#[test]
fn abort_task_set_is_per_nexus() {
    let (mut t, a, b) = busy(true);
    let o = t.task_management(a, L0, TmfKind::AbortTaskSet).unwrap();
    assert_eq!(o.response, TmfResponse::FunctionComplete);
    assert_eq!(aborted(&o), [(a, 1, false), (a, 2, false)]);
    assert!(t.task_in_flight(a, 3) && t.task_in_flight(b, 1) && t.task_in_flight(b, 4));
    // Nothing left: still FUNCTION COMPLETE.
    let o = t.task_management(a, L0, TmfKind::AbortTaskSet).unwrap();
    assert_eq!(
        (o.response, o.aborted.len()),
        (TmfResponse::FunctionComplete, 0)
    );
    // No unit attention from it.
    good(&run_none(&mut t, b, L0, &[0; 6]));
}

#[test]
fn clear_task_set() {
    // TAS: the other nexus's tasks end with TASK ABORTED, no unit attention.
    let (mut t, a, b) = busy(true);
    let o = t.task_management(a, L0, TmfKind::ClearTaskSet).unwrap();
    assert_eq!(o.response, TmfResponse::FunctionComplete);
    assert_eq!(
        aborted(&o),
        [(a, 1, false), (a, 2, false), (b, 1, true), (b, 4, true)]
    );
    assert_eq!(t.tasks_in_flight(), 1);
    good(&run_none(&mut t, b, L0, &[0; 6]));
    // No TAS: silently, and COMMANDS CLEARED BY ANOTHER INITIATOR for the other nexus.
    let (mut t, a, b) = busy(false);
    let o = t.task_management(a, L0, TmfKind::ClearTaskSet).unwrap();
    assert!(o.aborted.iter().all(|x| !x.task_aborted_status));
    check(
        &run_none(&mut t, b, L0, &[0; 6]),
        SenseKey::UNIT_ATTENTION,
        AscAscq::COMMANDS_CLEARED_BY_ANOTHER_INITIATOR,
    );
    good(&run_none(&mut t, a, L0, &[0; 6]));
}

#[test]
fn lun_reset() {
    let (mut t, a, b) = busy(true);
    let o = t.task_management(b, L0, TmfKind::LunReset).unwrap();
    assert_eq!(o.response, TmfResponse::FunctionComplete);
    assert_eq!(
        aborted(&o),
        [(a, 1, true), (a, 2, true), (b, 1, false), (b, 4, false)]
    );
    assert!(t.task_in_flight(a, 3));
    for n in [a, b] {
        check(
            &run_none(&mut t, n, L0, &[0; 6]),
            SenseKey::UNIT_ATTENTION,
            AscAscq::new(0x29, 0x03),
        );
        good(&run_none(&mut t, n, L1, &[0; 6]));
    }
    // No TAS: every aborted task ends silently.
    let (mut t, a, _) = busy(false);
    let o = t.task_management(a, L0, TmfKind::LunReset).unwrap();
    assert!(o.aborted.iter().all(|x| !x.task_aborted_status));
}

#[test]
fn unsupported_and_rejected_functions() {
    let (mut t, a, _) = busy(true);
    for (k, want) in [
        (TmfKind::ClearAca, TmfResponse::FunctionNotSupported),
        (TmfKind::Unknown(0x80), TmfResponse::FunctionNotSupported),
        (TmfKind::TargetWarmReset, TmfResponse::FunctionRejected),
        (TmfKind::TargetColdReset, TmfResponse::FunctionRejected),
    ] {
        let o = t.task_management(a, L0, k).unwrap();
        assert_eq!((o.response, o.aborted.len()), (want, 0));
    }
    assert_eq!(t.tasks_in_flight(), 5);
    // A LUN that does not exist, the virtual LUN 0 included (transport_lookup_tmr_lun).
    for k in [TmfKind::LunReset, TmfKind::AbortTask(1), TmfKind::ClearAca] {
        let o = t.task_management(a, LunId(9), k).unwrap();
        assert_eq!(o.response, TmfResponse::LunDoesNotExist);
    }
    let mut v = Target::new(TargetConfig::default());
    let n = v.register_nexus(InitiatorId(1));
    let o = v.task_management(n, L0, TmfKind::LunReset).unwrap();
    assert_eq!(o.response, TmfResponse::LunDoesNotExist);
    // Codes as LIO's tcm_tmrsp_table.
    let codes: Vec<u8> = [
        TmfResponse::FunctionComplete,
        TmfResponse::TaskDoesNotExist,
        TmfResponse::LunDoesNotExist,
        TmfResponse::FunctionNotSupported,
        TmfResponse::FunctionRejected,
    ]
    .iter()
    .map(|r| r.lio_code())
    .collect();
    assert_eq!(codes, [1, 2, 3, 4, 5]);
    t.unregister_nexus(a).unwrap();
    assert_eq!(
        t.task_management(a, L0, TmfKind::LunReset),
        Err(CoreError::UnknownNexus(a))
    );
    assert_eq!(t.task_started(a, L0, 1), Err(CoreError::UnknownNexus(a)));
}
