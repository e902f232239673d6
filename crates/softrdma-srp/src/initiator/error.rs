//! Why a login, a command or a submission failed: typed, with ib_srp's messages.

use std::fmt;

use softrdma_wire::cm::RejectReason;
use softrdma_wire::srp::{LoginRejReason, LoginRejRepr};

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
    /// No source address, or no device holds it (`RDMA_CM_EVENT_ADDR_ERROR`).
    Address(String),
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    Route(String),
    /// The REQ went unanswered (`RDMA_CM_EVENT_UNREACHABLE`, `IB_CM_REQ_ERROR`).
    Unreachable,
    /// REJ received.
    Rejected(Reject),
    /// `RDMA_CM_EVENT_CONNECT_ERROR` or a failed QP transition.
    Connect(String),
    /// The REP's private data is no SRP_LOGIN_RSP ("Unhandled RSP opcode").
    BadResponse(String),
    /// A QP, CQ or buffer could not be made.
    Resources(String),
}

impl fmt::Display for LoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoginError::Address(w) => write!(f, "address resolution failed: {w}"),
            LoginError::Route(w) => write!(f, "Path resolution failed: {w}"),
            LoginError::Unreachable => {
                f.write_str("the target did not answer the login (CM REQ timed out)")
            }
            LoginError::Rejected(r) => r.fmt(f),
            LoginError::Connect(w) => write!(f, "Sending CM REQ failed: {w}"),
            LoginError::BadResponse(w) => write!(f, "bad login response: {w}"),
            LoginError::Resources(w) => write!(f, "channel resources: {w}"),
        }
    }
}

impl std::error::Error for LoginError {}

/// Why a command ended without a SCSI status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoError {
    /// The command passed its deadline and was aborted (ABORT TASK answered with `rsp_code`,
    /// or ended by a LOGICAL UNIT RESET: `rsp_code` None).
    TimedOut { rsp_code: Option<u8> },
    /// Another command's LOGICAL UNIT RESET ended it.
    Reset,
    /// Its channel went down (the reason).
    ChannelDown(String),
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::TimedOut { rsp_code: Some(c) } => {
                write!(f, "timed out; aborted (ABORT TASK answered, RSP_CODE {c})")
            }
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
    /// A CDB longer than 32 bytes, or a data direction without buffers.
    BadCommand(&'static str),
    /// A buffer could not be read (immediate data).
    Buffer(String),
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
            SubmitError::BadCommand(w) => f.write_str(w),
            SubmitError::Buffer(w) => write!(f, "buffer: {w}"),
        }
    }
}

impl std::error::Error for SubmitError {}

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
