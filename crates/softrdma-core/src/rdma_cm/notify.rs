//! `rdma_notify` (`cma.c` → `ib_cm_notify`): what the kernel does when the user reports a
//! QP's asynchronous event to the CM of an id on an IB CA (rxe is one).
//!
//! - `IB_EVENT_COMM_EST` (4): data arrived on the passive side's QP before the RTU: the IB
//!   CM's `cm_establish` moves the connection to ESTABLISHED (the REP's retransmissions stop)
//!   and ESTABLISHED follows; on an established connection `-EISCONN`, in another state
//!   `-EINVAL`.
//! - `IB_EVENT_PATH_MIG` (6): `cm_migrate` switches to the alternate path of an established
//!   connection; RoCE connections have none, so there is nothing to switch: 0 when
//!   ESTABLISHED, `-EINVAL` otherwise.
//! - Any other event: `-EINVAL`, as an id without an IB CM id (not connecting).

use super::{RdmaCm, RdmaCmError, RdmaCmId};
use crate::cm::{CmError, CmState};

/// `IB_EVENT_COMM_EST` / `IBV_EVENT_COMM_EST`.
pub const EVENT_COMM_EST: i32 = 4;
/// `IB_EVENT_PATH_MIG` / `IBV_EVENT_PATH_MIG`.
pub const EVENT_PATH_MIG: i32 = 6;

impl RdmaCm {
    /// `rdma_notify(id, event)` (see the module docs).
    pub fn notify(&mut self, id: &RdmaCmId, event: i32) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::Invalid)?;
        match event {
            EVENT_COMM_EST => Ok(self.cm.notify_comm_est(cm)?),
            EVENT_PATH_MIG => match self.cm.state(cm.as_ref()) {
                Some(CmState::Established) => Ok(()),
                _ => Err(RdmaCmError::Cm(CmError::InvalidState(
                    self.cm.state(cm.as_ref()).unwrap_or(CmState::Idle),
                ))),
            },
            _ => Err(RdmaCmError::Invalid),
        }
    }
}
