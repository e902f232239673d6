//! The verbs error type: one variant per way a verb call can be refused, naming what was
//! wrong (where the kernel returns a bare `-EINVAL`).

use core::fmt;

use super::mr::MrError;
use super::qp::QpType;
use super::qp_state::{ModifyQpError, QpState};
use super::{CqId, PdId, SrqId};

/// Why a verb failed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum VerbsError {
    /// No such PD.
    InvalidPd(PdId),
    /// No such CQ.
    InvalidCq(CqId),
    /// No such SRQ.
    InvalidSrq(SrqId),
    /// No such QP.
    InvalidQp(u32),
    /// The object is still used by others (`-EBUSY`): a PD with MRs/QPs/SRQs, a CQ or SRQ
    /// attached to QPs.
    Busy {
        /// What could not be destroyed.
        what: &'static str,
        /// How many objects still use it.
        users: u32,
    },
    /// A size or count is above the device limit (or zero where that is not allowed).
    Limit {
        /// What was asked for (`max_send_wr`, `cqe`, `max_qp`, ...).
        what: &'static str,
        /// The value asked for.
        requested: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A memory region error.
    Mr(MrError),
    /// A `modify_qp` refusal.
    ModifyQp(ModifyQpError),
    /// The QP's state does not allow the operation (posting sends before RTS, receives in
    /// RESET).
    QpState {
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
        /// The operation.
        op: &'static str,
    },
    /// The work queue is full (`-ENOMEM` from `ibv_post_*`).
    QueueFull {
        /// Which queue.
        what: &'static str,
        /// Its depth.
        depth: u32,
    },
    /// The operation is not valid for this QP type (an RDMA READ on UD, a missing or
    /// superfluous UD destination, a receive on a QP that has an SRQ, ...).
    WrongQpType {
        /// The QP type.
        qp_type: QpType,
        /// What was attempted.
        op: &'static str,
    },
    /// A work request field is invalid (atomic length not 8, misaligned atomic address,
    /// message longer than the port's max, ...).
    InvalidWr {
        /// Which rule was broken.
        reason: &'static str,
    },
    /// A GSI QP already exists on the port.
    GsiExists,
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::InvalidPd(p) => write!(f, "no PD {}", p.0),
            VerbsError::InvalidCq(c) => write!(f, "no CQ {}", c.0),
            VerbsError::InvalidSrq(s) => write!(f, "no SRQ {}", s.0),
            VerbsError::InvalidQp(q) => write!(f, "no QP {q:#x}"),
            VerbsError::Busy { what, users } => write!(f, "{what} still used by {users} objects"),
            VerbsError::Limit {
                what,
                requested,
                max,
            } => write!(f, "{what} = {requested} outside 1..={max}"),
            VerbsError::Mr(e) => write!(f, "{e}"),
            VerbsError::ModifyQp(e) => write!(f, "{e}"),
            VerbsError::QpState { qpn, state, op } => {
                write!(f, "QP {qpn:#x} in {state} cannot {op}")
            }
            VerbsError::QueueFull { what, depth } => write!(f, "{what} full ({depth} entries)"),
            VerbsError::WrongQpType { qp_type, op } => {
                write!(f, "{op} is not valid on a {qp_type} QP")
            }
            VerbsError::InvalidWr { reason } => write!(f, "invalid work request: {reason}"),
            VerbsError::GsiExists => f.write_str("the port already has a GSI QP"),
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<MrError> for VerbsError {
    fn from(e: MrError) -> VerbsError {
        VerbsError::Mr(e)
    }
}

impl From<ModifyQpError> for VerbsError {
    fn from(e: ModifyQpError) -> VerbsError {
        VerbsError::ModifyQp(e)
    }
}
