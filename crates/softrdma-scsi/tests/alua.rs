//! ALUA: TPGS in the standard INQUIRY data, REPORT TARGET PORT GROUPS, and VPD page 0x83
//! naming the nexus's target port and its group, with one LU reached through two ports.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, VpdPage};

const L0: LunId = LunId(0);

fn rtpg(ext: bool, alloc: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = 0xa3;
    c[1] = 0x0a | if ext { 0x20 } else { 0 };
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    c
}

fn two_ports() -> (Target, NexusId, NexusId) {
    let mut t = Target::new(TargetConfig {
        port_groups: vec![PortGroup {
            id: 0,
            state: AluaState::ActiveOptimized,
            preferred: false,
            ports: vec![1, 2],
        }],
        ..TargetConfig::default()
    });
    t.add_lun(L0, LogicalUnit::new(mem(64, BlockSize::B512), cfg()))
        .unwrap();
    let a = t.register_nexus_on(InitiatorId(7), 1);
    let b = t.register_nexus_on(InitiatorId(7), 2);
    clear_ua(&mut t, a);
    clear_ua(&mut t, b);
    (t, a, b)
}

#[test]
fn active_optimized_through_two_ports() {
    let (mut t, a, b) = two_ports();
    // TPGS 01b: implicit ALUA.
    let (r, d) = run_in(&mut t, a, L0, &[0x12, 0, 0, 0, 36, 0], 36);
    good(&r);
    assert_eq!(d[5], 0x10);
    // One group (id 0), active/optimized, AO_SUP and AN_SUP, ports 1 and 2.
    let (r, d) = run_in(&mut t, b, L0, &rtpg(false, 64), 64);
    good(&r);
    assert_eq!(
        d,
        [0, 0, 0, 16, 0x00, 0x03, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]
    );
    assert_eq!(r.residual, Residual::Underflow(64 - 20));
    // The extended header: FORMAT TYPE 1, the same descriptors.
    let (_, d) = run_in(&mut t, b, L0, &rtpg(true, 64), 64);
    assert_eq!(&d[..8], &[0, 0, 0, 20, 0x10, 0, 0, 0]);
    assert_eq!(
        &d[8..],
        &[0x00, 0x03, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]
    );
    // VPD page 0x83 names each nexus's own port, and group 0.
    for (n, port) in [(a, 1u8), (b, 2)] {
        let (_, d) = run_in(&mut t, n, L0, &[0x12, 1, 0x83, 1, 0, 0], 256);
        let page = VpdPage::parse(&d).unwrap();
        let ds = page.designators().unwrap();
        let rtpi = ds.iter().find(|d| d.designator_type == 4).unwrap();
        assert_eq!(rtpi.designator, [0, 0, 0, port]);
        let tpg = ds.iter().find(|d| d.designator_type == 5).unwrap();
        assert_eq!(tpg.designator, [0, 0, 0, 0]);
    }
}

#[test]
fn no_port_groups_no_alua() {
    let (mut t, n) = rig();
    let (_, d) = run_in(&mut t, n, L0, &[0x12, 0, 0, 0, 36, 0], 36);
    assert_eq!(d[5], 0);
    let (r, _) = run_in(&mut t, n, L0, &rtpg(false, 64), 64);
    illegal(&r, AscAscq::INVALID_COMMAND_OPERATION_CODE);
}
