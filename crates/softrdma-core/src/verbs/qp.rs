//! Queue pairs: types, capabilities, attributes and the send/receive queues.

use core::fmt;
use std::collections::VecDeque;

use super::mr::AccessFlags;
use super::qp_state::QpState;
use super::wr::{AddressVector, RecvWr, SendWr};
use super::{CqId, PdId, SrqId};
use crate::device::Mtu;

/// The QP types softrdma has (`enum ibv_qp_type` / `enum ib_qp_type`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connected (`IBV_QPT_UC`; state machine only, no transport yet).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
    /// The general services QP, QP1 (`IB_QPT_GSI`): UD carrying MADs, Q_Key 0x80010000.
    Gsi,
}

impl QpType {
    /// All types.
    pub const ALL: [QpType; 4] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Gsi];

    /// True for the datagram types (UD and GSI).
    pub const fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi)
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::Gsi => "GSI",
        })
    }
}

/// The Q_Key of QP1 (`IB_QP1_QKEY`): rxe drops GSI packets carrying any other.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The QP number of the GSI QP.
pub const GSI_QPN: u32 = 1;

/// `struct ibv_qp_cap`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QpInitAttr {
    /// The QP type.
    pub qp_type: QpType,
    /// The PD.
    pub pd: PdId,
    /// Send completions go here.
    pub send_cq: CqId,
    /// Receive completions go here.
    pub recv_cq: CqId,
    /// Receives come from this SRQ instead of the QP's own RQ.
    pub srq: Option<SrqId>,
    /// Requested capabilities (the QP reports the rounded-up ones).
    pub cap: QpCap,
    /// `sq_sig_all`: every send WR completes, signaled or not.
    pub sq_sig_all: bool,
}

impl QpInitAttr {
    /// An RC QP on `pd` whose sends and receives complete on `cq`, with `send` and `recv`
    /// work requests of one SGE each, no inline data and no SRQ (what the RDMA CM tools and
    /// most tests ask for).
    pub fn rc(pd: PdId, cq: CqId, send: u32, recv: u32) -> QpInitAttr {
        QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        }
    }

    /// With inline data up to `bytes`.
    pub fn with_inline(mut self, bytes: u32) -> QpInitAttr {
        self.cap.max_inline_data = bytes;
        self
    }

    /// With `sq_sig_all`.
    pub fn signal_all(mut self) -> QpInitAttr {
        self.sq_sig_all = true;
        self
    }
}

/// `struct ibv_qp_attr`: the attributes `modify_qp` sets (selected by a
/// [`super::QpAttrMask`]) and `query_qp` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QpAttr {
    /// Next state (`STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (`PATH_MTU`).
    pub path_mtu: Mtu,
    /// Q_Key (`QKEY`).
    pub qkey: u32,
    /// Expected PSN of the next request received (`RQ_PSN`, 24 bits).
    pub rq_psn: u32,
    /// PSN of the next request sent (`SQ_PSN`, 24 bits).
    pub sq_psn: u32,
    /// Remote QP number (`DEST_QPN`, 24 bits).
    pub dest_qp_num: u32,
    /// Remote access allowed to this QP's responder (`ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// Capabilities (`CAP`, never modifiable; reported by `query_qp`).
    pub cap: QpCap,
    /// Primary path (`AV`).
    pub ah_attr: AddressVector,
    /// P_Key index (`PKEY_INDEX`).
    pub pkey_index: u16,
    /// Ask for the SQ-drained event (`EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// The SQ is draining (query only).
    pub sq_draining: bool,
    /// Initiator depth: outstanding READs/atomics we may have (`MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Responder resources: READs/atomics we accept at once (`MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code we send (`MIN_RNR_TIMER`, 5 bits).
    pub min_rnr_timer: u8,
    /// Port (`PORT`).
    pub port_num: u8,
    /// Local ACK timeout exponent (`TIMEOUT`, 5 bits; 0 = infinite).
    pub timeout: u8,
    /// Transport retries (`RETRY_CNT`, 3 bits).
    pub retry_cnt: u8,
    /// RNR retries (`RNR_RETRY`, 3 bits; 7 = infinite).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::NONE,
            cap: QpCap::default(),
            ah_attr: AddressVector::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// A queue pair.
#[derive(Clone, Debug)]
pub struct Qp {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdId,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) srq: Option<SrqId>,
    pub(crate) sq_sig_all: bool,
    pub(crate) attr: QpAttr,
    pub(crate) sq: VecDeque<SendWr>,
    pub(crate) rq: VecDeque<RecvWr>,
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// The PD.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> CqId {
        self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> CqId {
        self.recv_cq
    }

    /// The SRQ, if receives come from one.
    pub fn srq(&self) -> Option<SrqId> {
        self.srq
    }

    /// `sq_sig_all`.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// The current attributes (`ibv_query_qp`).
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }

    /// Send WRs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }

    /// Receive WRs posted on the QP's own RQ.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }
}
