//! Timeouts and task management (`srp_abort`, `srp_reset_device`): ABORT TASK for a late
//! command, LOGICAL UNIT RESET when that goes unanswered, then giving up on the target.

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::Stack;
use softrdma_scsi::LunId;
use softrdma_wire::srp::{RspCode, TaskMgmtFunction};

use crate::iu::{self};

use super::completion::post_send;
use super::{
    wire_tag, ChannelState, Completion, DownReason, InitiatorEvent, IoError, SessionState, Slot,
    SrpInitiator, Warning, SRP_TAG_NO_REQ, SRP_TAG_TSK_MGMT,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TmfKind {
    /// ABORT TASK of the command in `slot`.
    Abort {
        slot: u32,
    },
    LunReset,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Tmf {
    pub(super) kind: TmfKind,
    pub(super) lun: u64,
    /// Host-order tag of the TMF IU (SRP_TAG_TSK_MGMT | n).
    pub(super) tag: u64,
    pub(super) deadline: Instant,
}

impl SrpInitiator {
    /// When [`SrpInitiator::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(x) = self.tl_timeout() {
            min(x);
        }
        for c in &self.channels {
            if c.state != ChannelState::Live {
                continue;
            }
            if let Some(m) = &c.tmf {
                min(m.deadline);
            }
            for s in &c.slots {
                if let Slot::InFlight(r) = s {
                    min(r.deadline);
                }
            }
        }
        t
    }

    /// Command deadlines (ABORT TASK) and task management timeouts (LUN RESET, then the
    /// target is given up on).
    pub fn handle_timeout(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        self.handle_tl_timeout(now, rdma, stack);
        for k in 0..self.channels.len() {
            if self.channels[k].state != ChannelState::Live {
                continue;
            }
            // srp_abort for every command past its deadline.
            let c = &mut self.channels[k];
            for (slot, s) in c.slots.iter_mut().enumerate() {
                if let Slot::InFlight(r) = *s {
                    if r.deadline <= now {
                        *s = Slot::Aborting(r);
                        c.tmf_queue
                            .push_back((TmfKind::Abort { slot: slot as u32 }, r.lun));
                    }
                }
            }
            if let Some(t) = c.tmf {
                if t.deadline <= now {
                    c.tmf = None;
                    self.events.push_back(InitiatorEvent::TaskMgmtDone {
                        channel: k,
                        function: tmf_function(t.kind),
                        rsp_code: None,
                    });
                    match t.kind {
                        // srp_abort FAILED: the midlayer escalates to a device reset.
                        TmfKind::Abort { .. } => {
                            let c = &mut self.channels[k];
                            if !c
                                .tmf_queue
                                .iter()
                                .any(|(q, l)| *q == TmfKind::LunReset && *l == t.lun)
                            {
                                c.tmf_queue.push_front((TmfKind::LunReset, t.lun));
                            }
                        }
                        // srp_reset_device FAILED: host reset = reconnect; we give up.
                        TmfKind::LunReset => {
                            self.give_up(now, rdma, stack);
                            return;
                        }
                    }
                }
            }
            self.pump_tmf(now, stack, k);
        }
    }

    /// The target did not answer a LUN RESET: every channel down, DREQs out, and the
    /// session failed (ib_srp would reset the host, that is reconnect).
    pub(super) fn give_up(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        let why = DownReason::TargetUnresponsive;
        self.live_channels_down(now, rdma, stack, &why);
        self.state = SessionState::Failed(why);
        self.after_change(now, rdma, stack);
    }

    /// Sends the next queued task management function of channel `k` if none is in
    /// flight (ib_srp sends one at a time, under the rport mutex).
    pub(super) fn pump_tmf(&mut self, now: Instant, stack: &mut Stack, k: usize) {
        loop {
            let c = &mut self.channels[k];
            if c.tmf.is_some() || c.state != ChannelState::Live {
                return;
            }
            let Some(&(kind, lun)) = c.tmf_queue.front() else {
                return;
            };
            // An ABORT for a command that meanwhile ended: nothing to do.
            if let TmfKind::Abort { slot } = kind {
                if !c
                    .slots
                    .get(slot as usize)
                    .is_some_and(|s| matches!(s, Slot::Aborting(_)))
                {
                    c.tmf_queue.pop_front();
                    continue;
                }
            }
            // __srp_get_tx_iu(SRP_IU_TSK_MGMT): a tx IU and a credit (no reserve).
            if c.req_lim <= 0 || c.sq_avail == 0 {
                return;
            }
            let Some((tx, ti)) = c.take_tx() else {
                return;
            };
            c.tmf_queue.pop_front();
            c.tsk_mgmt_tag = (c.tsk_mgmt_tag + 1) | SRP_TAG_TSK_MGMT;
            let tag = c.tsk_mgmt_tag;
            let (func, task_tag) = match kind {
                TmfKind::Abort { slot } => (
                    TaskMgmtFunction::ABORT_TASK,
                    (k as u64) << 16 | u64::from(slot),
                ),
                TmfKind::LunReset => (TaskMgmtFunction::LUN_RESET, SRP_TAG_NO_REQ),
            };
            let mut b = [0u8; 48];
            let _ = iu::write_tsk_mgmt(
                &mut b,
                wire_tag(tag),
                LunId(lun).to_wire(),
                func.0,
                wire_tag(task_tag),
            );
            let addr = u64::from(ti) * u64::from(c.max_it_iu_len);
            let _ = stack.verbs.local_write(tx.lkey, addr, &b);
            if post_send(stack, c.qpn, k, tx, addr, 48, ti).is_err() {
                c.free_tx(ti);
                return;
            }
            c.sq_avail -= 1;
            c.req_lim -= 1;
            c.tmf = Some(Tmf {
                kind,
                lun,
                tag,
                deadline: now + self.cfg.abort_timeout,
            });
            self.events.push_back(InitiatorEvent::TaskMgmt {
                channel: k,
                function: func,
                lun,
                task_tag,
            });
            return;
        }
    }

    /// The answer to a task management function.
    pub(super) fn tmf_done(&mut self, _now: Instant, k: usize, t: Tmf, code: Option<u8>) {
        self.events.push_back(InitiatorEvent::TaskMgmtDone {
            channel: k,
            function: tmf_function(t.kind),
            rsp_code: code,
        });
        match t.kind {
            TmfKind::Abort { slot } => {
                // srp_abort: any answer in time is SUCCESS; the command is freed without
                // its credit (the target returns it with a later response).
                let c = &mut self.channels[k];
                if let Some(req) = c.slots.get_mut(slot as usize).and_then(|s| s.take()) {
                    c.free_slots.push(slot);
                    self.completions.push_back(Completion {
                        tag: (k as u64) << 16 | u64::from(slot),
                        user: req.user,
                        lun: req.lun,
                        channel: k,
                        result: Err(IoError::TimedOut {
                            rsp_code: code.map(RspCode),
                        }),
                    });
                }
            }
            TmfKind::LunReset => {
                if code != Some(0) {
                    // srp_reset_device FAILED: escalation is a host reset; we give up on
                    // the LUN's commands.
                    self.events.push_back(InitiatorEvent::Warning {
                        channel: Some(k),
                        what: Warning::LunResetFailed {
                            rsp_code: code.map(RspCode),
                        },
                    });
                }
                // Every command of the LUN ends (timed-out ones as such).
                for ch in 0..self.channels.len() {
                    let c = &mut self.channels[ch];
                    for (slot, s) in c.slots.iter_mut().enumerate() {
                        if s.req().is_some_and(|r| r.lun == t.lun) {
                            let aborting = matches!(s, Slot::Aborting(_));
                            let Some(req) = s.take() else { continue };
                            c.free_slots.push(slot as u32);
                            self.completions.push_back(Completion {
                                tag: (ch as u64) << 16 | slot as u64,
                                user: req.user,
                                lun: req.lun,
                                channel: ch,
                                result: Err(if aborting {
                                    IoError::TimedOut { rsp_code: None }
                                } else {
                                    IoError::Reset
                                }),
                            });
                        }
                    }
                    c.tmf_queue
                        .retain(|(q, l)| !(matches!(q, TmfKind::Abort { .. }) && *l == t.lun));
                }
            }
        }
    }
}

pub(super) fn tmf_function(k: TmfKind) -> TaskMgmtFunction {
    match k {
        TmfKind::Abort { .. } => TaskMgmtFunction::ABORT_TASK,
        TmfKind::LunReset => TaskMgmtFunction::LUN_RESET,
    }
}
