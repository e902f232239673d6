//! Task management (`srpt_handle_tsk_mgmt`): the function run by the SCSI core, the
//! aborted tasks ended, the SRP_RSP's RSP_CODE.

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::Stack;
use softrdma_scsi::{LunId, NexusId, Residual, Response, TmfKind, TmfResponse};
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::{RspCode, TaskMgmtFunction, TskMgmtRepr};

use crate::iu::Direction;

use super::completion::Arrived;
use super::io::{Aborted, IoState, RspKind};
use super::{post_recv_slot, SrpTarget};

impl SrpTarget {
    pub(super) fn handle_tsk_mgmt(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        iu: Arrived,
        io: u32,
    ) {
        let Arrived { ch, slot, len } = iu;
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let tsk = stack
            .verbs
            .mr(c.recv.lkey)
            .ok()
            .and_then(|m| m.slice(addr, len as usize).ok())
            .and_then(|b| TskMgmtRepr::parse(b).ok());
        let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
        let nexus = c.nexus;
        let Some(t) = tsk else {
            let x = &mut c.ios[io as usize];
            x.tag = 0;
            x.reply(RspKind::Tmf(RspCode::INVALID_FIELDS), 0);
            self.advance(now, rdma, stack, ch, io);
            return;
        };
        let kind = match t.function {
            TaskMgmtFunction::ABORT_TASK => TmfKind::AbortTask(t.task_tag),
            TaskMgmtFunction::ABORT_TASK_SET => TmfKind::AbortTaskSet,
            TaskMgmtFunction::CLEAR_TASK_SET => TmfKind::ClearTaskSet,
            TaskMgmtFunction::LUN_RESET => TmfKind::LunReset,
            TaskMgmtFunction::CLEAR_ACA => TmfKind::ClearAca,
            f => TmfKind::Unknown(f.0),
        };
        let lun = LunId::from_wire(t.lun.to_be_bytes());
        let code = match self.scsi.task_management(nexus, lun, kind) {
            Ok(out) => {
                for a in &out.aborted {
                    self.abort_task(now, rdma, stack, a.nexus, a.tag, a.task_aborted_status);
                }
                tmf_code(out.response)
            }
            Err(_) => RspCode::FAILED,
        };
        if let Some(c) = self.channels.get_mut(&ch) {
            let x = &mut c.ios[io as usize];
            x.tag = t.tag;
            x.task = false;
            x.dir = Direction::None;
            x.reply(RspKind::Tmf(code), 0);
        }
        self.advance(now, rdma, stack, ch, io);
    }

    /// A task a task management function ended: it gets TASK ABORTED or nothing, and its
    /// credit comes back with the next response (`srpt_aborted_task`).
    pub(super) fn abort_task(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        nexus: NexusId,
        tag: u64,
        status: bool,
    ) {
        let found = self.channels.iter().find_map(|(k, c)| {
            (c.nexus == nexus)
                .then(|| {
                    c.ios
                        .iter()
                        .position(|io| io.task && io.tag == tag && !io.is_free())
                        .map(|i| (*k, i as u32))
                })
                .flatten()
        });
        let Some((ch, i)) = found else { return };
        let c = self.channels.get_mut(&ch).expect("channel");
        let x = &mut c.ios[i as usize];
        x.task = false;
        x.aborted = Some(if status {
            Aborted::WithStatus
        } else {
            Aborted::Silently
        });
        if matches!(x.state, IoState::Reading { .. }) {
            // The READs finish first; data_out_done sees the abort.
            return;
        }
        if matches!(x.state, IoState::RspSent { .. }) {
            return;
        }
        c.blocked.retain(|&b| b != i);
        self.finish_abort(now, rdma, stack, ch, i);
    }

    pub(super) fn finish_abort(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        i: u32,
    ) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if x.aborted == Some(Aborted::WithStatus) {
            x.respond(Response {
                status: ScsiStatus::TASK_ABORTED,
                sense: None,
                data_len: 0,
                residual: Residual::None,
            });
            self.advance(now, rdma, stack, ch, i);
        } else {
            c.req_lim_delta += 1;
            self.free_io(ch, i);
        }
    }
}

/// The SRP RSP_CODE of a task management outcome. ib_srpt 6.1 (`tcm_to_srp_tsk_mgmt_status`)
/// maps FUNCTION COMPLETE to 0, FUNCTION REJECTED to 4 and everything else to 5 (FAILED) —
/// so LIO's "not supported" becomes FAILED; we answer 4 (SRP r16a table 24) for it.
pub(super) fn tmf_code(r: TmfResponse) -> RspCode {
    match r {
        TmfResponse::FunctionComplete => RspCode::COMPLETE,
        TmfResponse::FunctionNotSupported | TmfResponse::FunctionRejected => RspCode::NOT_SUPPORTED,
        TmfResponse::TaskDoesNotExist | TmfResponse::LunDoesNotExist => RspCode::FAILED,
    }
}
