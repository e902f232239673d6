//! Why a login, a command or a submission failed: typed, with ib_srp's messages.

use std::fmt;

use softrdma_core::cm::CmError;
use softrdma_core::device::QueryError;
use softrdma_core::rdma_cm::{RdmaCmError, RdmaCmEventType};
use softrdma_core::verbs::{VerbsError, WcStatus};

use softrdma_wire::cm::RejectReason;
use softrdma_wire::srp::{LoginRejReason, LoginRejRepr, Opcode, RspCode};

/// A rejected login: the CM's reject reason and, for a consumer-defined reject, the
/// SRP_LOGIN_REJ in its private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub cm_reason: RejectReason,
    /// The first private data byte (the IU type ib_srp looks at).
    pub opcode: Option<u8>,
    pub login_rej: Option<LoginRejRepr>,
}

impl Reject {
    pub(super) fn new(reason: Option<RejectReason>, private_data: &[u8]) -> Reject {
        let cm_reason = reason.unwrap_or(RejectReason(0));
        let login_rej = if cm_reason == RejectReason::CONSUMER_DEFINED {
            LoginRejRepr::parse(private_data).ok()
        } else {
            None
        };
        Reject {
            cm_reason,
            opcode: private_data.first().copied(),
            login_rej,
        }
    }

    /// The SRP_LOGIN_REJ reason, if there was one.
    pub fn srp_reason(&self) -> Option<LoginRejReason> {
        self.login_rej.map(|r| r.reason)
    }
}

impl fmt::Display for Reject {
    /// ib_srp's messages (`srp_rdma_cm_rej_handler`, `srp_ib_cm_rej_handler`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.cm_reason, self.login_rej) {
            (RejectReason::CONSUMER_DEFINED, Some(r))
                if r.reason == LoginRejReason::REQ_IT_IU_LENGTH_TOO_LARGE =>
            {
                f.write_str("SRP_LOGIN_REJ: requested max_it_iu_len too large")
            }
            (RejectReason::CONSUMER_DEFINED, Some(r)) => {
                write!(
                    f,
                    "SRP LOGIN REJECTED, reason {:#010x} ({})",
                    r.reason.0, r.reason
                )
            }
            (RejectReason::CONSUMER_DEFINED, None) => write!(
                f,
                "REJ reason: IB_CM_REJ_CONSUMER_DEFINED, opcode {:#04x}",
                self.opcode.unwrap_or(0)
            ),
            (RejectReason::STALE_CONN, _) => f.write_str("REJ reason: stale connection"),
            (RejectReason::DUPLICATE_LOCAL_COMM_ID, _) => {
                f.write_str("REJ reason: IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID")
            }
            (r, _) => write!(f, "REJ reason {:#x} ({})", r.0, r.message()),
        }
    }
}

/// Why a login (of the first channel) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// Neither the target string (`src=`) nor the configuration gives our address.
    NoSourceAddress,
    /// The device has no GID 0 to take our port identifier from.
    NoGid(QueryError),
    /// `rdma_resolve_addr` refused.
    ResolveAddr(RdmaCmError),
    /// `RDMA_CM_EVENT_ADDR_ERROR`, with the event's status.
    AddrError { status: i32 },
    /// `rdma_resolve_route` refused.
    ResolveRoute(RdmaCmError),
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError { status: i32 },
    /// The REQ went unanswered (`RDMA_CM_EVENT_UNREACHABLE`, `IB_CM_REQ_ERROR`).
    Unreachable,
    /// REJ received.
    Rejected(Reject),
    /// `rdma_connect` refused.
    Connect(RdmaCmError),
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError { status: i32 },
    /// The IB CM would not send the REQ.
    SendReq(CmError),
    /// The QP could not take the REP's attributes (RTR, RTS).
    QpTransition(QpTransitionError),
    /// The REP's private data is no SRP_LOGIN_RSP ("Unhandled RSP opcode").
    BadResponse { opcode: u8 },
    /// The login response grants no credit beyond the one kept for task management.
    TooFewCredits { granted: u32 },
    /// A QP, CQ or buffer could not be made.
    Resources(VerbsError),
    /// The RDMA CM could not bring the new QP to INIT.
    InitQp(RdmaCmError),
    /// A channel's login before [`crate::SrpInitiator::start`] set up the PD, CQ and port.
    NotStarted,
    /// A reconnect attempt's login still unanswered when the next attempt was due (after
    /// `reconnect_delay`): dropped for a fresh one.
    UnansweredWithin { millis: u64 },
}

/// Why the QP could not follow the IB CM's REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpTransitionError {
    /// The CM has no attributes for it (the id is in the wrong state).
    Cm(CmError),
    /// The QP refused them.
    Verbs(VerbsError),
}

impl fmt::Display for QpTransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QpTransitionError::Cm(e) => write!(f, "the CM gave no QP attributes: {e}"),
            QpTransitionError::Verbs(e) => write!(f, "modifying the QP: {e}"),
        }
    }
}

impl fmt::Display for LoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ADDR: &str = "address resolution failed";
        const ROUTE: &str = "Path resolution failed";
        const REQ: &str = "Sending CM REQ failed";
        const RSP: &str = "bad login response";
        const RES: &str = "channel resources";
        match self {
            LoginError::NoSourceAddress => {
                write!(
                    f,
                    "{ADDR}: no source address (give src= or the local address)"
                )
            }
            LoginError::NoGid(e) => write!(f, "{ADDR}: no GID 0 on the device: {e}"),
            LoginError::ResolveAddr(e) => write!(f, "{ADDR}: {e}"),
            LoginError::AddrError { status } => {
                write!(f, "{ADDR}: RDMA_CM_EVENT_ADDR_ERROR (status {status})")
            }
            LoginError::ResolveRoute(e) => write!(f, "{ROUTE}: {e}"),
            LoginError::RouteError { status } => {
                write!(f, "{ROUTE}: RDMA_CM_EVENT_ROUTE_ERROR (status {status})")
            }
            LoginError::Unreachable => {
                f.write_str("the target did not answer the login (CM REQ timed out)")
            }
            LoginError::Rejected(r) => r.fmt(f),
            LoginError::Connect(e) => write!(f, "{REQ}: {e}"),
            LoginError::ConnectError { status } => {
                write!(f, "{REQ}: RDMA_CM_EVENT_CONNECT_ERROR (status {status})")
            }
            LoginError::SendReq(e) => write!(f, "{REQ}: {e}"),
            LoginError::QpTransition(e) => write!(f, "accepting the REP: {e}"),
            LoginError::BadResponse { opcode } => {
                write!(f, "{RSP}: Unhandled RSP opcode {opcode:#x}")
            }
            LoginError::TooFewCredits { granted } => {
                write!(f, "{RSP}: the target granted {granted} credits")
            }
            LoginError::Resources(e) => write!(f, "{RES}: {e}"),
            LoginError::InitQp(e) => write!(f, "{RES}: {e}"),
            LoginError::NotStarted => write!(f, "{RES}: not started"),
            LoginError::UnansweredWithin { millis } => write!(
                f,
                "no answer to the login within reconnect_delay ({} s)",
                *millis as f64 / 1e3
            ),
        }
    }
}

impl std::error::Error for LoginError {}

/// Why a channel went down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownReason {
    /// The target sent a DREQ.
    TargetDisconnected,
    /// The connection ended without our DREQ (DREP, DREQ timeout or timewait while live).
    ConnectionClosed,
    /// A REJ on a live connection.
    Rejected,
    /// An RDMA CM error event on a live channel.
    CmEvent { event: RdmaCmEventType, status: i32 },
    /// A SEND or RECV completed in error (`srp_handle_qp_err`).
    WorkCompletion { send: bool, status: WcStatus },
    /// ABORT TASK and then LOGICAL UNIT RESET went unanswered: the target is given up on.
    TargetUnresponsive,
    /// We logged out.
    LoggedOut,
    /// Every channel is down and none said why.
    EveryChannel,
    /// `dev_loss_tmo` passed after `first` without a successful reconnect: the device is
    /// given up (`SRP_RPORT_LOST`).
    DevLossTmo {
        after_secs: u64,
        first: Box<DownReason>,
    },
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownReason::TargetDisconnected => {
                f.write_str("the target disconnected (DREQ received)")
            }
            DownReason::ConnectionClosed => f.write_str("connection closed"),
            DownReason::Rejected => f.write_str("REJ received"),
            DownReason::CmEvent { event, status } => write!(f, "{event} (status {status})"),
            DownReason::WorkCompletion { send, status } => write!(
                f,
                "failed {} status {status:?}",
                if *send { "SEND" } else { "RECV" }
            ),
            DownReason::TargetUnresponsive => f.write_str(
                "the target does not answer (ABORT TASK and LOGICAL UNIT RESET timed out)",
            ),
            DownReason::LoggedOut => f.write_str("logged out"),
            DownReason::EveryChannel => f.write_str("every channel is down"),
            DownReason::DevLossTmo { after_secs, first } => write!(
                f,
                "no reconnect within dev_loss_tmo ({after_secs} s) after: {first}; the device is given up"
            ),
        }
    }
}

/// Why a command ended without a SCSI status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoError {
    /// The command passed its deadline and was aborted (ABORT TASK answered with `rsp_code`,
    /// or ended by a LOGICAL UNIT RESET: `rsp_code` None).
    TimedOut { rsp_code: Option<RspCode> },
    /// Another command's LOGICAL UNIT RESET ended it.
    Reset,
    /// Its channel went down.
    ChannelDown(DownReason),
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::TimedOut { rsp_code: Some(c) } => write!(
                f,
                "timed out; aborted (ABORT TASK answered, RSP_CODE {}: {c})",
                c.0
            ),
            IoError::TimedOut { rsp_code: None } => {
                f.write_str("timed out; ended by a LOGICAL UNIT RESET")
            }
            IoError::Reset => f.write_str("ended by a LOGICAL UNIT RESET"),
            IoError::ChannelDown(w) => write!(f, "channel down: {w}"),
        }
    }
}

impl std::error::Error for IoError {}

/// Why a command was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitError {
    /// No channel is live.
    NotLive,
    /// Every live channel is out of credits or free tags (`SCSI_MLQUEUE_HOST_BUSY`): wait
    /// for a completion.
    Busy,
    /// More buffers than an SRP_CMD carries ("Could not fit S/G list into SRP_CMD").
    TooManySegments { got: usize, max: usize },
    /// A CDB is 1 to 32 bytes.
    CdbLength { len: usize },
    /// A data direction without buffers.
    NoBuffers,
    /// The SRP_CMD does not fit in the negotiated IU length.
    IuTooLong { max_it_iu_len: u32 },
    /// Immediate data could not be read from the caller's buffer.
    ImmediateData(VerbsError),
    /// The SEND could not be posted.
    Send(VerbsError),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::NotLive => f.write_str("no live channel"),
            SubmitError::Busy => f.write_str("no credit or tag free"),
            SubmitError::TooManySegments { got, max } => write!(
                f,
                "Could not fit S/G list into SRP_CMD ({got} buffers, at most {max})"
            ),
            SubmitError::CdbLength { len } => {
                write!(f, "a CDB is 1 to 32 bytes (this one has {len})")
            }
            SubmitError::NoBuffers => f.write_str("a data phase needs buffers"),
            SubmitError::IuTooLong { max_it_iu_len } => write!(
                f,
                "the SRP_CMD does not fit in the IU ({max_it_iu_len} bytes)"
            ),
            SubmitError::ImmediateData(e) => write!(f, "reading immediate data: {e}"),
            SubmitError::Send(e) => write!(f, "Send failed: {e}"),
        }
    }
}

impl std::error::Error for SubmitError {}

/// Something unexpected on a channel that does not end it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// An SRP_RSP that does not parse.
    MalformedRsp(softrdma_wire::Error),
    /// An IU type an initiator does not take ("Unhandled SRP opcode").
    UnhandledOpcode(Opcode),
    /// No send IU free for the answer to a target's request.
    NoIuForResponse,
    /// A task management response for none in flight (after its timeout).
    LateTmfResponse { tag: u64 },
    /// A LOGICAL UNIT RESET answered with something else than "complete" (`None`: no
    /// response data).
    LunResetFailed { rsp_code: Option<RspCode> },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::MalformedRsp(e) => write!(f, "malformed SRP_RSP: {e}"),
            Warning::UnhandledOpcode(op) => write!(f, "Unhandled SRP opcode {:#04x}", op.0),
            Warning::NoIuForResponse => f.write_str("no IU available to send response"),
            Warning::LateTmfResponse { tag } => {
                write!(f, "Received tsk mgmt response too late for tag {tag:#x}")
            }
            Warning::LunResetFailed { rsp_code: Some(c) } => {
                write!(f, "LOGICAL UNIT RESET answered RSP_CODE {}: {c}", c.0)
            }
            Warning::LunResetFailed { rsp_code: None } => {
                f.write_str("LOGICAL UNIT RESET answered without an RSP_CODE")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reject_messages() {
        let rej = |reason: u32| LoginRejRepr {
            reason: LoginRejReason(reason),
            tag: 0,
            buf_fmt: 6,
        };
        let r = Reject::new(
            Some(RejectReason::CONSUMER_DEFINED),
            &rej(0x0001_0002).to_bytes(),
        );
        assert_eq!(
            r.to_string(),
            "SRP_LOGIN_REJ: requested max_it_iu_len too large"
        );
        let r = Reject::new(
            Some(RejectReason::CONSUMER_DEFINED),
            &rej(0x0001_0006).to_bytes(),
        );
        assert!(r
            .to_string()
            .starts_with("SRP LOGIN REJECTED, reason 0x00010006"));
        assert_eq!(r.srp_reason(), Some(LoginRejReason(0x0001_0006)));
        let r = Reject::new(Some(RejectReason::INVALID_SERVICE_ID), &[]);
        assert_eq!(r.to_string(), "REJ reason 0x8 (invalid service ID)");
    }
}
