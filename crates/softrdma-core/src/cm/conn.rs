//! One id's data (`struct cm_id_private`): what every state has, what the connection
//! negotiated, and what each state carries of its own.

use softrdma_wire::cm::{Path, PathMtu, TransportType};

use super::{CmPort, CmState};
use crate::mad::{MadAddr, SendId};
use crate::time::{Duration, Instant};

/// What each state carries (and only that state): its outstanding message, the MRA's
/// service timeout, the end of the timewait, the SIDR table key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Idle,
    Listen,
    /// The REQ, retransmitted until a REP, REJ or MRA.
    ReqSent {
        msg: SendId,
    },
    /// The REQ, its wait extended by the peer's MRA.
    MraReqRcvd {
        msg: SendId,
    },
    ReqRcvd,
    /// `service_timeout` for the MRA resent on a duplicate REQ (the MRA itself may not
    /// have gone out yet: `IB_CM_MRA_FLAG_DELAY`).
    MraReqSent {
        service_timeout: u8,
    },
    RepSent {
        msg: SendId,
    },
    MraRepRcvd {
        msg: SendId,
    },
    RepRcvd,
    MraRepSent {
        service_timeout: u8,
    },
    Established,
    DreqSent {
        msg: SendId,
    },
    DreqRcvd,
    /// Until the timewait ends (`cm_enter_timewait`: `cvt(av.timeout)` ms).
    Timewait {
        until: Instant,
    },
    SidrReqSent {
        msg: SendId,
    },
    /// `key`: the entry in the remote SIDR table (request ID, peer GID).
    SidrReqRcvd {
        key: (u32, [u8; 16]),
    },
}

impl State {
    pub(super) fn kind(&self) -> CmState {
        match self {
            State::Idle => CmState::Idle,
            State::Listen => CmState::Listen,
            State::ReqSent { .. } => CmState::ReqSent,
            State::MraReqRcvd { .. } => CmState::MraReqRcvd,
            State::ReqRcvd => CmState::ReqRcvd,
            State::MraReqSent { .. } => CmState::MraReqSent,
            State::RepSent { .. } => CmState::RepSent,
            State::MraRepRcvd { .. } => CmState::MraRepRcvd,
            State::RepRcvd => CmState::RepRcvd,
            State::MraRepSent { .. } => CmState::MraRepSent,
            State::Established => CmState::Established,
            State::DreqSent { .. } => CmState::DreqSent,
            State::DreqRcvd => CmState::DreqRcvd,
            State::Timewait { .. } => CmState::Timewait,
            State::SidrReqSent { .. } => CmState::SidrReqSent,
            State::SidrReqRcvd { .. } => CmState::SidrReqRcvd,
        }
    }

    /// The state's outstanding message (`cm_id_priv->msg` while it is the state's own).
    pub(super) fn msg(&self) -> Option<SendId> {
        match *self {
            State::ReqSent { msg }
            | State::MraReqRcvd { msg }
            | State::RepSent { msg }
            | State::MraRepRcvd { msg }
            | State::DreqSent { msg }
            | State::SidrReqSent { msg } => Some(msg),
            _ => None,
        }
    }
}

/// What the two sides agreed on, as `ib_cm_init_qp_attr` hands it to the QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Negotiated {
    /// Our view of the primary path (local = us).
    pub path: Path,
    pub path_mtu: PathMtu,
    pub pkey: u16,
    pub qp_type: TransportType,
    /// Where our SQ starts: the peer's message's starting PSN.
    pub sq_psn: u32,
    /// Where our RQ starts: our message's starting PSN.
    pub rq_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    /// The active side's comes from the REP, the passive side's from the REQ.
    pub rnr_retry_count: u8,
    /// `av.timeout` (IBA exponent): the QP's local ACK timeout and the timewait.
    pub av_timeout: u8,
}

impl Default for Negotiated {
    fn default() -> Negotiated {
        Negotiated {
            path: Path::default(),
            path_mtu: PathMtu::MTU_1024,
            pkey: 0xffff,
            qp_type: TransportType::RC,
            sq_psn: 0,
            rq_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            av_timeout: 0,
        }
    }
}

/// One id.
#[derive(Clone, Debug)]
pub(super) struct Conn {
    pub state: State,
    /// The port it lives on (set by send_req/sidr_req or by the arriving REQ).
    pub port: CmPort,
    /// The peer's QP1 (`av`).
    pub peer: Option<MadAddr>,
    /// `cm_id_priv->tid`: the REQ's (or SIDR_REQ's, or the last DREQ received's).
    pub tid: u64,
    pub service_id: u64,
    /// `id.remote_id` (0 until known; kept after the connection, as the kernel keeps it).
    pub remote_id: u32,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    pub local_qpn: u32,
    /// The REP/DREQ wait (`timeout_ms`) and `max_cm_retries`.
    pub timeout: Duration,
    pub max_cm_retries: u8,
    pub neg: Negotiated,
    /// `cm_id_priv->private_data`: what the last MRA, RTU or DREP carried; a resent MRA,
    /// RTU or DREP carries it again.
    pub private_data: Vec<u8>,
    /// The keys this id holds in the remote-ID and remote-QPN tables.
    pub tables: Option<((u32, u64), (u32, u64))>,
}

impl Conn {
    pub(super) fn new(port: CmPort) -> Conn {
        Conn {
            state: State::Idle,
            port,
            peer: None,
            tid: 0,
            service_id: 0,
            remote_id: 0,
            remote_ca_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            timeout: Duration::ZERO,
            max_cm_retries: 0,
            neg: Negotiated::default(),
            private_data: Vec::new(),
            tables: None,
        }
    }
}
