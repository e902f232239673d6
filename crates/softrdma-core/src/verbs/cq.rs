//! Completion queues and work completions.

use core::fmt;
use std::collections::VecDeque;

/// `enum ibv_wc_status`, with its values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS` (0).
    Success,
    /// `IBV_WC_LOC_LEN_ERR` (1): a receive buffer too small, or a send too long.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR` (2): an internal QP consistency error (bad WR for the QP).
    LocQpOpErr,
    /// `IBV_WC_LOC_EEC_OP_ERR` (3).
    LocEecOpErr,
    /// `IBV_WC_LOC_PROT_ERR` (4): an SGE's lkey/PD/access/bounds check failed.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR` (5): the QP went to ERR before this WR completed.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR` (6).
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR` (7): unexpected response opcode.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR` (8): local access error on a READ response / atomic.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR` (9): the responder NAKed "invalid request".
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR` (10): the responder NAKed "remote access error".
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR` (11): the responder NAKed "remote operational error".
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR` (12): transport retries exhausted (local ACK timeout).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR` (13): RNR retries exhausted.
    RnrRetryExcErr,
    /// `IBV_WC_LOC_RDD_VIOL_ERR` (14).
    LocRddViolErr,
    /// `IBV_WC_REM_INV_RD_REQ_ERR` (15).
    RemInvRdReqErr,
    /// `IBV_WC_REM_ABORT_ERR` (16).
    RemAbortErr,
    /// `IBV_WC_INV_EECN_ERR` (17).
    InvEecnErr,
    /// `IBV_WC_INV_EEC_STATE_ERR` (18).
    InvEecStateErr,
    /// `IBV_WC_FATAL_ERR` (19).
    FatalErr,
    /// `IBV_WC_RESP_TIMEOUT_ERR` (20).
    RespTimeoutErr,
    /// `IBV_WC_GENERAL_ERR` (21).
    GeneralErr,
}

impl WcStatus {
    /// The verbs enum value.
    pub const fn to_verbs(self) -> u32 {
        self as u32
    }

    /// What `ibv_wc_status_str` prints.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "operation aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `enum ibv_wc_opcode`, with its values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` (0).
    Send,
    /// `IBV_WC_RDMA_WRITE` (1).
    RdmaWrite,
    /// `IBV_WC_RDMA_READ` (2).
    RdmaRead,
    /// `IBV_WC_COMP_SWAP` (3).
    CompSwap,
    /// `IBV_WC_FETCH_ADD` (4).
    FetchAdd,
    /// `IBV_WC_BIND_MW` (5).
    BindMw,
    /// `IBV_WC_LOCAL_INV` (6).
    LocalInv,
    /// `IBV_WC_RECV` (128).
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` (129).
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// The verbs enum value.
    pub const fn to_verbs(self) -> u32 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::BindMw => 5,
            WcOpcode::LocalInv => 6,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
        }
    }
}

/// One work completion (`struct ibv_wc`, the fields meaningful on RoCE).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WorkCompletion {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (for a flushed WR: the WR's own kind).
    pub opcode: WcOpcode,
    /// Vendor error (0).
    pub vendor_err: u32,
    /// Bytes transferred (receives; including the 40-byte GRH area on UD).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`), in host order.
    pub imm_data: Option<u32>,
    /// The rkey a SEND_WITH_INV invalidated (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The remote QP number (UD receives).
    pub src_qp: u32,
    /// P_Key index (GSI receives).
    pub pkey_index: u16,
    /// A GRH is present in the first 40 bytes of the receive buffer (`IBV_WC_GRH`; always
    /// on RoCE UD receives).
    pub grh: bool,
}

impl WorkCompletion {
    /// A completion with the given identity and status, the rest zero.
    pub fn new(wr_id: u64, qp_num: u32, opcode: WcOpcode, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: 0,
            pkey_index: 0,
            grh: false,
        }
    }
}

/// A completion queue: a ring of at most `cqe` completions.
#[derive(Clone, Debug)]
pub struct Cq {
    cqe: u32,
    ring: VecDeque<WorkCompletion>,
    overflowed: bool,
    /// Completions ever added (what a completion channel compares with the count it saw
    /// when the CQ was armed: "the next completion" of `ibv_req_notify_cq`).
    added: u64,
    pub(crate) users: u32,
}

/// rxe's queue sizing (`rxe_queue_init`): the ring has `roundup_pow_of_two(n + 1)` slots,
/// one kept empty, so the usable depth reported back is that minus one.
pub fn rxe_queue_depth(requested: u32) -> u32 {
    requested
        .saturating_add(1)
        .checked_next_power_of_two()
        .map_or(u32::MAX, |n| n - 1)
}

impl Cq {
    pub(crate) fn new(cqe: u32) -> Cq {
        Cq {
            cqe,
            ring: VecDeque::new(),
            overflowed: false,
            added: 0,
            users: 0,
        }
    }

    /// Sets the depth (`Verbs::resize_cq`, which checks it against what is waiting).
    pub(crate) fn set_depth(&mut self, cqe: u32) {
        self.cqe = cqe;
    }

    /// The depth (`cq->cqe` as `ibv_create_cq` returns it).
    pub fn cqe(&self) -> u32 {
        self.cqe
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// How many completions were ever added to this CQ (polled or not).
    pub fn completions_added(&self) -> u64 {
        self.added
    }

    /// True once a completion was lost because the ring was full (the CQ is in error).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Appends a completion; `false` (and the CQ marked overflowed) if the ring is full.
    pub(crate) fn push(&mut self, wc: WorkCompletion) -> bool {
        if self.ring.len() >= self.cqe as usize {
            self.overflowed = true;
            return false;
        }
        self.ring.push_back(wc);
        self.added += 1;
        true
    }

    /// Takes the oldest completion (`ibv_poll_cq` with one entry).
    pub fn poll(&mut self) -> Option<WorkCompletion> {
        self.ring.pop_front()
    }

    /// Takes up to `max` completions into `out`; returns how many.
    pub fn poll_into(&mut self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let n = max.min(self.ring.len());
        out.extend(self.ring.drain(..n));
        n
    }

    /// Looks at the oldest completion without taking it.
    pub fn peek(&self) -> Option<&WorkCompletion> {
        self.ring.front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depth_rounding() {
        assert_eq!(rxe_queue_depth(1), 1);
        assert_eq!(rxe_queue_depth(2), 3);
        assert_eq!(rxe_queue_depth(3), 3);
        assert_eq!(rxe_queue_depth(4), 7);
        assert_eq!(rxe_queue_depth(100), 127);
        assert_eq!(rxe_queue_depth(32767), 32767);
        assert_eq!(rxe_queue_depth(u32::MAX), u32::MAX);
    }

    #[test]
    fn ring_is_bounded() {
        let mut cq = Cq::new(2);
        let wc = |id| WorkCompletion::new(id, 17, WcOpcode::Send, WcStatus::Success);
        assert!(cq.push(wc(1)));
        assert!(cq.push(wc(2)));
        assert!(!cq.push(wc(3)));
        assert!(cq.overflowed());
        assert_eq!(cq.completions_added(), 2, "the lost one was never added");
        assert_eq!(cq.poll().map(|w| w.wr_id), Some(1));
        let mut v = Vec::new();
        assert_eq!(cq.poll_into(&mut v, 10), 1);
        assert_eq!(v[0].wr_id, 2);
        assert!(cq.poll().is_none());
    }

    #[test]
    fn status_values_and_strings() {
        assert_eq!(WcStatus::Success.to_verbs(), 0);
        assert_eq!(WcStatus::WrFlushErr.to_verbs(), 5);
        assert_eq!(WcStatus::RemAccessErr.to_verbs(), 10);
        assert_eq!(WcStatus::RetryExcErr.to_verbs(), 12);
        assert_eq!(WcStatus::RnrRetryExcErr.to_verbs(), 13);
        assert_eq!(WcStatus::GeneralErr.to_verbs(), 21);
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
        assert_eq!(WcOpcode::Recv.to_verbs(), 128);
        assert_eq!(WcOpcode::RecvRdmaWithImm.to_verbs(), 129);
    }
}
