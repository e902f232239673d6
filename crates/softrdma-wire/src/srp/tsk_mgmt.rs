//! SRP_TSK_MGMT (SRP r16a §6.7; `struct srp_tsk_mgmt`, 48 bytes, packed because the LUN sits
//! at byte 20).

use super::{dissect_tag, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::Result;

code_point! {
    /// TASK MANAGEMENT FUNCTIONS (SRP r16a table 20; `SRP_TSK_*`).
    pub struct TaskMgmtFunction(u8) {
        ABORT_TASK = 0x01 => "ABORT TASK",
        ABORT_TASK_SET = 0x02 => "ABORT TASK SET",
        CLEAR_TASK_SET = 0x04 => "CLEAR TASK SET",
        LUN_RESET = 0x08 => "LOGICAL UNIT RESET",
        CLEAR_ACA = 0x40 => "CLEAR ACA",
    }
}

/// Field offsets of `struct srp_tsk_mgmt`.
pub mod field {
    pub const OPCODE: usize = 0;
    pub const SOL_NOT: usize = 1;
    pub const TAG: usize = 8;
    pub const LUN: usize = 20;
    pub const TSK_MGMT_FUNC: usize = 30;
    pub const TASK_TAG: usize = 32;
    pub const LEN: usize = 48;
}

min_view!(
    /// A view of an SRP_TSK_MGMT.
    Packet,
    field::LEN,
    "srp.tsk_mgmt"
);

be_fields!(Packet {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    tag, set_tag: u64 @ field::TAG;
    lun, set_lun: u64 @ field::LUN;
    tsk_mgmt_func_raw, set_tsk_mgmt_func_raw: u8 @ field::TSK_MGMT_FUNC;
    task_tag, set_task_tag: u64 @ field::TASK_TAG;
});

iu_view!(Packet, Opcode::TSK_MGMT, field::OPCODE, "srp.tsk_mgmt");

/// A task management request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    pub sol_not: u8,
    pub tag: u64,
    /// The 8-byte SAM LUN, read big-endian (`struct scsi_lun`).
    pub lun: u64,
    pub function: TaskMgmtFunction,
    /// TAG OF TASK TO BE MANAGED (ABORT TASK).
    pub task_tag: u64,
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::parse_iu(buf)?;
        Ok(Repr {
            sol_not: p.sol_not(),
            tag: p.tag(),
            lun: p.lun(),
            function: TaskMgmtFunction(p.tsk_mgmt_func_raw()),
            task_tag: p.task_tag(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = Packet::emit_iu(buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_tag(self.tag);
        p.set_lun(self.lun);
        p.set_tsk_mgmt_func_raw(self.function.0);
        p.set_task_tag(self.task_tag);
    }

    to_bytes!();
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_tsk_mgmt", "SRP_TSK_MGMT", |t| {
            t.code_hex("opcode", "Opcode", Opcode::TSK_MGMT.0, 2, Opcode::TSK_MGMT);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            dissect_tag(t, self.tag);
            t.hex("lun", "Logical Unit Number", self.lun, 16);
            t.code_hex(
                "function",
                "Task Management Function",
                self.function.0,
                2,
                self.function,
            );
            t.hex("task_tag", "Tag of Task to be Managed", self.task_tag, 16);
        });
    }
}
