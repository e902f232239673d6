//! Tasks in flight and task management functions.
//!
//! The core runs each command to completion inside [`Target::execute`], so "in flight"
//! means what the transport is doing around it: fetching data-out, waiting to execute,
//! sending data-in and status. The transport tells the core when a task starts
//! ([`Target::task_started`], on receiving the command) and finishes
//! ([`Target::task_finished`], once its status is sent); a task management function then
//! knows which tasks exist, removes the ones it aborts and returns them, and the transport
//! stops them (no status, or TASK ABORTED where [`AbortedTask::task_aborted_status`] says
//! so).

use std::collections::BTreeMap;

use softrdma_wire::scsi::AscAscq;

use crate::lun::LunId;
use crate::target::{CoreError, LunResetUa, NexusId, Target};

/// The tasks in flight: (nexus, tag) → LUN.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskTable {
    tasks: BTreeMap<(NexusId, u64), LunId>,
}

impl TaskTable {
    /// Removes the tasks `pick` selects; `status` says whether each ends with TASK ABORTED.
    pub fn abort_where(
        &mut self,
        pick: impl Fn(NexusId, LunId) -> bool,
        status: impl Fn(NexusId) -> bool,
    ) -> Vec<AbortedTask> {
        let mut out = Vec::new();
        self.tasks.retain(|(n, tag), lun| {
            if pick(*n, *lun) {
                out.push(AbortedTask {
                    nexus: *n,
                    tag: *tag,
                    lun: *lun,
                    task_aborted_status: status(*n),
                });
                false
            } else {
                true
            }
        });
        out
    }
}

/// A task management function (SAM-5 §7), as the transport decoded it (for SRP, the
/// SRP_TSK_MGMT's TASK MANAGEMENT FUNCTION and TAG OF TASK TO BE MANAGED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TmfKind {
    /// ABORT TASK of the task with this tag on the issuing nexus.
    AbortTask(u64),
    AbortTaskSet,
    ClearAca,
    ClearTaskSet,
    LunReset,
    TargetWarmReset,
    TargetColdReset,
    /// A function code the transport does not know.
    Unknown(u8),
}

/// The outcome of a task management function, as LIO's `tcm_tmrsp_table` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TmfResponse {
    FunctionComplete,
    TaskDoesNotExist,
    LunDoesNotExist,
    FunctionNotSupported,
    FunctionRejected,
}

impl TmfResponse {
    /// The `TMR_*` value LIO uses (`include/target/target_core_base.h`): FUNCTION COMPLETE
    /// 1, TASK DOES NOT EXIST 2, LUN DOES NOT EXIST 3, TASK MGMT FUNCTION NOT SUPPORTED 4,
    /// FUNCTION REJECTED 5.
    pub fn lio_code(self) -> u8 {
        match self {
            TmfResponse::FunctionComplete => 1,
            TmfResponse::TaskDoesNotExist => 2,
            TmfResponse::LunDoesNotExist => 3,
            TmfResponse::FunctionNotSupported => 4,
            TmfResponse::FunctionRejected => 5,
        }
    }
}

/// A task a task management function (or a LUN or nexus going away) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTask {
    pub nexus: NexusId,
    pub tag: u64,
    pub lun: LunId,
    /// End it with TASK ABORTED status (TAS set and the task belonged to another nexus
    /// than the one that issued the function; `core_tmr_handle_tas_abort`); otherwise it
    /// ends without a response.
    pub task_aborted_status: bool,
}

/// What a task management function did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmfOutcome {
    pub response: TmfResponse,
    /// The tasks it aborted, for the transport to stop.
    pub aborted: Vec<AbortedTask>,
}

impl TmfOutcome {
    fn only(response: TmfResponse) -> TmfOutcome {
        TmfOutcome {
            response,
            aborted: Vec::new(),
        }
    }
}

impl Target {
    /// A command with `tag` arrived on `nexus` for `lun` (call before or after
    /// [`Target::decode`]; tasks the core rejects at decode may be recorded or not).
    pub fn task_started(&mut self, nexus: NexusId, lun: LunId, tag: u64) -> Result<(), CoreError> {
        if !self.nexuses.contains_key(&nexus) {
            return Err(CoreError::UnknownNexus(nexus));
        }
        if self.tasks.tasks.contains_key(&(nexus, tag)) {
            return Err(CoreError::TagInUse { nexus, tag });
        }
        // Tasks are kept by logical unit (after the nexus's LUN map).
        let lun = self.resolve_lun(nexus, lun).map_or(lun, |(l, _)| l);
        self.tasks.tasks.insert((nexus, tag), lun);
        Ok(())
    }

    /// The task's status went out (or it was dropped). Whether it was in flight.
    pub fn task_finished(&mut self, nexus: NexusId, tag: u64) -> bool {
        self.tasks.tasks.remove(&(nexus, tag)).is_some()
    }

    /// Whether the task is in flight (false once a task management function aborted it).
    pub fn task_in_flight(&self, nexus: NexusId, tag: u64) -> bool {
        self.tasks.tasks.contains_key(&(nexus, tag))
    }

    /// Number of tasks in flight.
    pub fn tasks_in_flight(&self) -> usize {
        self.tasks.tasks.len()
    }

    /// Performs a task management function `nexus` sent for `lun`.
    ///
    /// - LUN not configured (the virtual LUN 0 does not count, as in LIO's
    ///   `transport_lookup_tmr_lun`): LUN DOES NOT EXIST.
    /// - ABORT TASK (`core_tmr_abort_task`): the nexus's task with that tag on the LUN, or
    ///   TASK DOES NOT EXIST.
    /// - ABORT TASK SET: every task of the nexus on the LUN; FUNCTION COMPLETE.
    /// - CLEAR TASK SET: every task on the LUN, all nexuses (one task set per LUN, TST
    ///   000b); other nexuses' tasks end with TASK ABORTED if TAS, else those nexuses get
    ///   COMMANDS CLEARED BY ANOTHER INITIATOR. LIO 6.1 answers FUNCTION NOT SUPPORTED for
    ///   ABORT TASK SET and CLEAR TASK SET; we implement both, per SAM-5.
    /// - LOGICAL UNIT RESET (`core_tmr_lun_reset`): every task on the LUN (TASK ABORTED for
    ///   other nexuses' if TAS), then BUS DEVICE RESET FUNCTION OCCURRED as
    ///   [`TargetConfig::lun_reset_ua`](crate::TargetConfig::lun_reset_ua) says.
    /// - CLEAR ACA: FUNCTION NOT SUPPORTED (no ACA); TARGET WARM/COLD RESET: FUNCTION
    ///   REJECTED (as `target_tmr_work`); an unknown function: FUNCTION NOT SUPPORTED.
    pub fn task_management(
        &mut self,
        nexus: NexusId,
        lun: LunId,
        kind: TmfKind,
    ) -> Result<TmfOutcome, CoreError> {
        if !self.nexuses.contains_key(&nexus) {
            return Err(CoreError::UnknownNexus(nexus));
        }
        // The LUN the initiator named, through its LUN map.
        let Some((lun, _)) = self.resolve_lun(nexus, lun) else {
            return Ok(TmfOutcome::only(TmfResponse::LunDoesNotExist));
        };
        let Some(lu) = self.luns.get(&lun.0) else {
            return Ok(TmfOutcome::only(TmfResponse::LunDoesNotExist));
        };
        let tas = lu.config().tas;
        Ok(match kind {
            TmfKind::AbortTask(tag) => {
                if self.tasks.tasks.get(&(nexus, tag)) == Some(&lun) {
                    self.tasks.tasks.remove(&(nexus, tag));
                    TmfOutcome {
                        response: TmfResponse::FunctionComplete,
                        aborted: vec![AbortedTask {
                            nexus,
                            tag,
                            lun,
                            task_aborted_status: false,
                        }],
                    }
                } else {
                    TmfOutcome::only(TmfResponse::TaskDoesNotExist)
                }
            }
            TmfKind::AbortTaskSet => TmfOutcome {
                response: TmfResponse::FunctionComplete,
                aborted: self
                    .tasks
                    .abort_where(|n, l| n == nexus && l == lun, |_| false),
            },
            TmfKind::ClearTaskSet => {
                let aborted = self
                    .tasks
                    .abort_where(|_, l| l == lun, |n| tas && n != nexus);
                if !tas {
                    for t in aborted.iter().filter(|t| t.nexus != nexus) {
                        self.ua
                            .entry((t.nexus, lun.0))
                            .or_default()
                            .push(AscAscq::COMMANDS_CLEARED_BY_ANOTHER_INITIATOR);
                    }
                }
                TmfOutcome {
                    response: TmfResponse::FunctionComplete,
                    aborted,
                }
            }
            TmfKind::LunReset => {
                let aborted = self
                    .tasks
                    .abort_where(|_, l| l == lun, |n| tas && n != nexus);
                // LIO's core_tmr_lun_reset releases an SPC-2 reservation; persistent ones
                // stay (SPC-4 §5.13.1).
                if let Some(lu) = self.luns.get_mut(&lun.0) {
                    lu.pr.spc2 = None;
                }
                let policy = self.config.lun_reset_ua;
                let bdr = AscAscq::new(0x29, 0x03);
                for n in self.nexuses.keys() {
                    let gets = match policy {
                        LunResetUa::AllNexuses => true,
                        LunResetUa::OtherNexuses => *n != nexus,
                        LunResetUa::IssuingNexus => *n == nexus,
                    };
                    if gets {
                        self.ua.entry((*n, lun.0)).or_default().push(bdr);
                    }
                }
                TmfOutcome {
                    response: TmfResponse::FunctionComplete,
                    aborted,
                }
            }
            TmfKind::ClearAca | TmfKind::Unknown(_) => {
                TmfOutcome::only(TmfResponse::FunctionNotSupported)
            }
            TmfKind::TargetWarmReset | TmfKind::TargetColdReset => {
                TmfOutcome::only(TmfResponse::FunctionRejected)
            }
        })
    }
}
