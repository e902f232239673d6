//! Persistent reservations and SPC-2 RESERVE/RELEASE through the target: two I_T nexuses
//! (initiator port identifiers that differ only in `initiator_ext`), RESERVATION CONFLICT,
//! the PERSISTENT RESERVE IN data, PREEMPT AND ABORT, APTPL across a restart.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use softrdma_scsi::pr::{pr_out_params, read_keys};
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, ScsiStatus, SenseKey};

const L0: LunId = LunId(0);
/// Two SRP initiator ports: the same GUID, `initiator_ext` 0 and 1.
const A: InitiatorId = InitiatorId(0x0000_0000_0000_0000_5054_00ff_fe77_0002);
const B: InitiatorId = InitiatorId(0x0000_0000_0000_0001_5054_00ff_fe77_0002);

/// Decode and execute; a RESERVATION CONFLICT at decode is returned as is.
fn cmd(
    t: &mut Target,
    n: NexusId,
    cdb: &[u8],
    dir: DataDir,
    out: &[u8],
    len: u32,
) -> (Response, Vec<u8>) {
    match t.decode(n, L0, cdb, dir, len).unwrap() {
        Decoded::Done(r) => (r, Vec::new()),
        Decoded::Ready(c) => match c.data_dir() {
            DataDir::In => {
                let mut b = vec![0u8; c.transfer_len() as usize];
                let r = t.execute(&c, Data::In(&mut b)).unwrap();
                b.truncate(r.data_len as usize);
                (r, b)
            }
            DataDir::Out => (
                t.execute(&c, Data::Out(&out[..c.transfer_len() as usize]))
                    .unwrap(),
                Vec::new(),
            ),
            DataDir::None => (t.execute(&c, Data::None).unwrap(), Vec::new()),
        },
    }
}

fn pr_out(t: &mut Target, n: NexusId, sa: u8, ty: u8, key: u64, sa_key: u64) -> Response {
    pr_out_aptpl(t, n, sa, ty, key, sa_key, false)
}

fn pr_out_aptpl(
    t: &mut Target,
    n: NexusId,
    sa: u8,
    ty: u8,
    key: u64,
    sa_key: u64,
    aptpl: bool,
) -> Response {
    let p = pr_out_params(key, sa_key, aptpl);
    cmd(
        t,
        n,
        &[0x5f, sa, ty, 0, 0, 0, 0, 0, 24, 0],
        DataDir::Out,
        &p,
        24,
    )
    .0
}

fn pr_in(t: &mut Target, n: NexusId, sa: u8) -> Vec<u8> {
    let (r, d) = cmd(
        t,
        n,
        &[0x5e, sa, 0, 0, 0, 0, 0, 1, 0, 0],
        DataDir::In,
        &[],
        256,
    );
    good(&r);
    d
}

fn write(t: &mut Target, n: NexusId) -> Response {
    cmd(t, n, &cdb10(0x2a, 0, 0, 1), DataDir::Out, &[7; 512], 512).0
}

fn read(t: &mut Target, n: NexusId) -> Response {
    cmd(t, n, &cdb10(0x28, 0, 0, 1), DataDir::In, &[], 512).0
}

fn none(t: &mut Target, n: NexusId, _lun: LunId, cdb: &[u8]) -> Response {
    cmd(t, n, cdb, DataDir::None, &[], 0).0
}

fn conflict(r: &Response) {
    assert_eq!(r.status, ScsiStatus::RESERVATION_CONFLICT, "{r:?}");
    assert_eq!(r.sense, None);
}

fn two() -> (Target, NexusId, NexusId) {
    let mut t = Target::new(TargetConfig::default());
    t.add_lun(L0, LogicalUnit::new(mem(64, BlockSize::B512), cfg()))
        .unwrap();
    let a = t.register_nexus(A);
    let b = t.register_nexus(B);
    clear_ua(&mut t, a);
    clear_ua(&mut t, b);
    (t, a, b)
}

#[test]
fn write_exclusive_between_two_initiator_ports() {
    let (mut t, a, b) = two();
    good(&pr_out(&mut t, a, 0, 0, 0, 0xaa));
    good(&pr_out(&mut t, b, 0, 0, 0, 0xbb));
    assert_eq!(read_keys(&pr_in(&mut t, a, 0)), vec![0xaa, 0xbb]);
    // PRGENERATION counts the two registrations.
    assert_eq!(&pr_in(&mut t, b, 0)[..4], &[0, 0, 0, 2]);
    // A reserves Write Exclusive with its key.
    good(&pr_out(&mut t, a, 1, 1, 0xaa, 0));
    let rr = pr_in(&mut t, b, 1);
    assert_eq!(&rr[4..8], &[0, 0, 0, 16]);
    assert_eq!(&rr[8..16], &0xaau64.to_be_bytes());
    assert_eq!(rr[21], 0x01);
    // B reads, but its WRITE is a RESERVATION CONFLICT (no sense); A writes.
    good(&read(&mut t, b));
    conflict(&write(&mut t, b));
    good(&write(&mut t, a));
    // INQUIRY, TEST UNIT READY and READ CAPACITY are always allowed.
    good(&run_in(&mut t, b, L0, &[0x12, 0, 0, 0, 36, 0], 36).0);
    good(&run_none(&mut t, b, L0, &[0; 6]));
    // Exclusive Access (after A releases and reserves EA): B's READ conflicts too.
    good(&pr_out(&mut t, a, 2, 1, 0xaa, 0));
    good(&write(&mut t, b));
    good(&pr_out(&mut t, a, 1, 3, 0xaa, 0));
    conflict(&read(&mut t, b));
    // READ FULL STATUS: both registrations, A the holder, the SRP TransportIDs.
    let fs = pr_in(&mut t, b, 3);
    assert_eq!(&fs[4..8], &[0, 0, 0, 96]);
    let (da, db) = (&fs[8..56], &fs[56..104]);
    assert_eq!(&da[..8], &0xaau64.to_be_bytes());
    assert_eq!((da[12], da[13]), (0x01, 0x03));
    assert_eq!(&da[18..24], &[0, 1, 0, 0, 0, 24]);
    assert_eq!(da[24], 0x04);
    assert_eq!(&da[32..48], &A.0.to_be_bytes());
    assert_eq!((db[12], db[13]), (0, 0));
    assert_eq!(&db[32..48], &B.0.to_be_bytes());
    // REPORT CAPABILITIES of a memory LUN: PTPL_C clear, every type.
    let rc = pr_in(&mut t, a, 2);
    assert_eq!(rc, [0, 8, 0x10, 0x90, 0xea, 0x01, 0, 0]);
    // An unknown service action.
    let (r, _) = cmd(
        &mut t,
        a,
        &[0x5e, 9, 0, 0, 0, 0, 0, 1, 0, 0],
        DataDir::In,
        &[],
        256,
    );
    illegal(&r, AscAscq::INVALID_FIELD_IN_CDB);
}

#[test]
fn register_errors() {
    let (mut t, a, _) = two();
    // A key while unregistered: conflict. The parameter list must be 24 bytes.
    conflict(&pr_out(&mut t, a, 0, 0, 1, 2));
    let (r, _) = cmd(
        &mut t,
        a,
        &[0x5f, 0, 0, 0, 0, 0, 0, 0, 20, 0],
        DataDir::Out,
        &[0; 20],
        20,
    );
    illegal(&r, AscAscq::PARAMETER_LIST_LENGTH_ERROR);
    // SPEC_I_PT and ALL_TG_PT are not supported (SIP_C, ATP_C clear).
    for bit in [0x08u8, 0x04] {
        let mut p = pr_out_params(0, 1, false);
        p[20] = bit;
        let (r, _) = cmd(
            &mut t,
            a,
            &[0x5f, 0, 0, 0, 0, 0, 0, 0, 24, 0],
            DataDir::Out,
            &p,
            24,
        );
        illegal(&r, AscAscq::INVALID_FIELD_IN_PARAMETER_LIST);
    }
    // APTPL on a memory LUN (PTPL_C clear).
    illegal(
        &pr_out_aptpl(&mut t, a, 0, 0, 0, 1, true),
        AscAscq::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    // RESERVE while unregistered: conflict. REGISTER AND MOVE: not supported.
    conflict(&pr_out(&mut t, a, 1, 1, 0, 0));
    illegal(
        &pr_out(&mut t, a, 7, 0, 0, 0),
        AscAscq::INVALID_FIELD_IN_CDB,
    );
    // RELEASE of another type: INVALID RELEASE OF PERSISTENT RESERVATION.
    good(&pr_out(&mut t, a, 0, 0, 0, 5));
    good(&pr_out(&mut t, a, 1, 1, 5, 0));
    check(
        &pr_out(&mut t, a, 2, 3, 5, 0),
        SenseKey::ILLEGAL_REQUEST,
        AscAscq(0x2604),
    );
}

#[test]
fn preempt_and_abort_stops_the_preempted_tasks() {
    let (mut t, a, b) = two();
    good(&pr_out(&mut t, a, 0, 0, 0, 0xaa));
    good(&pr_out(&mut t, b, 0, 0, 0, 0xbb));
    good(&pr_out(&mut t, b, 1, 3, 0xbb, 0));
    // B has a task in flight; A preempts B's key and aborts.
    t.task_started(b, L0, 77).unwrap();
    good(&pr_out(&mut t, a, 5, 1, 0xaa, 0xbb));
    let gone = t.take_preempted();
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].nexus, gone[0].tag), (b, 77));
    assert!(!t.task_in_flight(b, 77));
    assert!(t.take_preempted().is_empty());
    // B is unregistered and told: REGISTRATIONS PREEMPTED; A holds Write Exclusive.
    check(
        &run_none(&mut t, b, L0, &[0; 6]),
        SenseKey::UNIT_ATTENTION,
        AscAscq(0x2a05),
    );
    assert_eq!(read_keys(&pr_in(&mut t, b, 0)), vec![0xaa]);
    conflict(&write(&mut t, b));
    // CLEAR by A: everything goes.
    good(&pr_out(&mut t, b, 0, 0, 0, 0xb1));
    good(&pr_out(&mut t, a, 3, 0, 0xaa, 0));
    check(
        &run_none(&mut t, b, L0, &[0; 6]),
        SenseKey::UNIT_ATTENTION,
        AscAscq(0x2a03),
    );
    assert!(read_keys(&pr_in(&mut t, b, 0)).is_empty());
    good(&write(&mut t, b));
}

#[test]
fn a_registration_outlives_its_login_and_ports_differ() {
    let (mut t, a, b) = two();
    good(&pr_out(&mut t, a, 0, 0, 0, 0xaa));
    good(&pr_out(&mut t, a, 1, 1, 0xaa, 0));
    // A logs out and in again: the same I_T nexus, still the holder.
    t.unregister_nexus(a).unwrap();
    let a2 = t.register_nexus(A);
    clear_ua(&mut t, a2);
    good(&write(&mut t, a2));
    conflict(&write(&mut t, b));
    // The same initiator through another target port is another I_T nexus.
    let a_port2 = t.register_nexus_on(A, 2);
    clear_ua(&mut t, a_port2);
    conflict(&write(&mut t, a_port2));
}

#[test]
fn spc2_reserve_release() {
    let (mut t, a, b) = two();
    good(&none(&mut t, a, L0, &[0x16, 0, 0, 0, 0, 0]));
    conflict(&read(&mut t, b));
    conflict(&none(&mut t, b, L0, &[0x16, 0, 0, 0, 0, 0]));
    good(&run_in(&mut t, b, L0, &[0x12, 0, 0, 0, 36, 0], 36).0);
    // RELEASE by a non-holder changes nothing; PERSISTENT RESERVE OUT conflicts.
    good(&none(&mut t, b, L0, &[0x17, 0, 0, 0, 0, 0]));
    conflict(&read(&mut t, b));
    conflict(&pr_out(&mut t, b, 0, 0, 0, 1));
    // RESERVE(10) again by the holder; RELEASE(10).
    good(&none(&mut t, a, L0, &[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    good(&none(&mut t, a, L0, &[0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    good(&read(&mut t, b));
    // The holder's logout releases it; so does a LOGICAL UNIT RESET.
    good(&none(&mut t, a, L0, &[0x16, 0, 0, 0, 0, 0]));
    t.unregister_nexus(a).unwrap();
    good(&read(&mut t, b));
    good(&none(&mut t, b, L0, &[0x16, 0, 0, 0, 0, 0]));
    let a = t.register_nexus(A);
    clear_ua(&mut t, a);
    conflict(&read(&mut t, a));
    t.task_management(a, L0, TmfKind::LunReset).unwrap();
    clear_ua(&mut t, a);
    good(&read(&mut t, a));
    // Registrations exist: RESERVE(6) conflicts (SPC-4 §5.13.3).
    clear_ua(&mut t, b);
    good(&pr_out(&mut t, a, 0, 0, 0, 1));
    conflict(&none(&mut t, b, L0, &[0x16, 0, 0, 0, 0, 0]));
}

#[test]
fn aptpl_keeps_the_state_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("softrdma-scsi-aptpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lun.img");
    let open = |create: bool| {
        let store = if create {
            FileStore::create(&path, 1 << 20, BlockSize::B512).unwrap()
        } else {
            FileStore::open(&path, BlockSize::B512, false).unwrap()
        };
        let mut t = Target::new(TargetConfig::default());
        t.add_lun(L0, LogicalUnit::new(Box::new(store), cfg()))
            .unwrap();
        t
    };
    let mut t = open(true);
    let a = t.register_nexus(A);
    let b = t.register_nexus(B);
    clear_ua(&mut t, a);
    clear_ua(&mut t, b);
    // PTPL_C set for a file LUN; A registers with APTPL, B without; A reserves EA.
    assert_eq!(pr_in(&mut t, a, 2)[2], 0x11);
    good(&pr_out_aptpl(&mut t, a, 0, 0, 0, 0xaa, true));
    good(&pr_out_aptpl(&mut t, b, 6, 0, 0, 0xbb, true));
    good(&pr_out(&mut t, a, 1, 3, 0xaa, 0));
    assert_eq!(pr_in(&mut t, a, 2)[3] & 1, 1); // PTPL_A
    let state = dir.join("lun.img.pr");
    assert!(state.exists());
    drop(t);
    // Restarted: the registrations and the reservation are back.
    let mut t = open(false);
    assert!(t.lun(L0).unwrap().reservations_load_error().is_none());
    let b = t.register_nexus(B);
    let a = t.register_nexus(A);
    clear_ua(&mut t, a);
    clear_ua(&mut t, b);
    assert_eq!(read_keys(&pr_in(&mut t, b, 0)), vec![0xaa, 0xbb]);
    conflict(&read(&mut t, b));
    good(&write(&mut t, a));
    // A REGISTER without APTPL turns it off: the state file goes.
    good(&pr_out(&mut t, b, 0, 0, 0xbb, 0xbc));
    assert!(!state.exists());
    drop(t);
    let mut t = open(false);
    let a = t.register_nexus(A);
    clear_ua(&mut t, a);
    assert!(read_keys(&pr_in(&mut t, a, 0)).is_empty());
    // A damaged state file: no reservations, and the LU says why.
    std::fs::write(&state, "softrdma-pr 1\nregister zz\n").unwrap();
    drop(t);
    let t = open(false);
    assert!(t
        .lun(L0)
        .unwrap()
        .reservations_load_error()
        .unwrap()
        .contains("line 2"));
    drop(t);
    std::fs::remove_dir_all(&dir).unwrap();
}
