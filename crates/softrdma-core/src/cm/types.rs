//! The CM's vocabulary: ids and their names, states, events, command parameters, errors.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use softrdma_wire::cm::{AttrId, Path, PathMtu, RejRepr, RepRepr, ReqRepr, SidrRepRepr};
use softrdma_wire::cm::{SidrReqRepr, SidrStatus, TransportType};
use softrdma_wire::{Gid, Guid};

use crate::mad::{MadAddr, MadError, SendStatus};
use crate::time::{Duration, Instant};

/// `enum ib_cm_state`. [`fmt::Display`] prints the state's IBTA name as the kernel spells
/// it (`REQ_SENT`, `MRA_REP_RCVD`, `TIMEWAIT`, ...); [`CmState::kernel_name`] adds the
/// `IB_CM_` prefix.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum CmState {
    Idle,
    Listen,
    ReqSent,
    ReqRcvd,
    MraReqSent,
    MraReqRcvd,
    RepSent,
    RepRcvd,
    MraRepSent,
    MraRepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

impl CmState {
    /// Every state, in `enum ib_cm_state` order.
    pub const ALL: [CmState; 16] = [
        CmState::Idle,
        CmState::Listen,
        CmState::ReqSent,
        CmState::ReqRcvd,
        CmState::MraReqSent,
        CmState::MraReqRcvd,
        CmState::RepSent,
        CmState::RepRcvd,
        CmState::MraRepSent,
        CmState::MraRepRcvd,
        CmState::Established,
        CmState::DreqSent,
        CmState::DreqRcvd,
        CmState::Timewait,
        CmState::SidrReqSent,
        CmState::SidrReqRcvd,
    ];

    /// The IBTA name (IBTA Vol 1 §12.9, as `enum ib_cm_state` spells it).
    pub const fn name(self) -> &'static str {
        match self {
            CmState::Idle => "IDLE",
            CmState::Listen => "LISTEN",
            CmState::ReqSent => "REQ_SENT",
            CmState::ReqRcvd => "REQ_RCVD",
            CmState::MraReqSent => "MRA_REQ_SENT",
            CmState::MraReqRcvd => "MRA_REQ_RCVD",
            CmState::RepSent => "REP_SENT",
            CmState::RepRcvd => "REP_RCVD",
            CmState::MraRepSent => "MRA_REP_SENT",
            CmState::MraRepRcvd => "MRA_REP_RCVD",
            CmState::Established => "ESTABLISHED",
            CmState::DreqSent => "DREQ_SENT",
            CmState::DreqRcvd => "DREQ_RCVD",
            CmState::Timewait => "TIMEWAIT",
            CmState::SidrReqSent => "SIDR_REQ_SENT",
            CmState::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }

    /// The kernel's enumerator (`IB_CM_REQ_SENT`, ...).
    pub fn kernel_name(self) -> String {
        format!("IB_CM_{}", self.name())
    }
}

impl fmt::Display for CmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Where dropped [`CmId`]s are reported to the CM that made them.
#[derive(Clone, Debug, Default)]
pub(crate) struct DropBox(Arc<Mutex<Vec<u32>>>);

impl DropBox {
    fn push(&self, id: u32) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(id);
    }
    /// The ids dropped since the last call.
    pub(crate) fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }
}

/// A CM id owned by the user (the kernel's `struct ib_cm_id *` after `ib_create_cm_id` or
/// a REQ/SIDR_REQ event). Not `Clone`: commands borrow it, [`super::CmEndpoint::destroy`]
/// and [`super::CmEndpoint::reject`] consume it. **Dropping it destroys it**, as the
/// kernel's non-zero return from the event handler does: the CM that made it runs
/// `ib_destroy_cm_id` for it at its next call (see the module docs).
#[must_use = "dropping a CmId destroys it (REJ, DREQ or DREP on the wire, by state)"]
pub struct CmId {
    id: u32,
    /// `None` once consumed by a command.
    home: Option<DropBox>,
}

impl CmId {
    pub(crate) fn new(id: u32, home: DropBox) -> CmId {
        CmId {
            id,
            home: Some(home),
        }
    }
    /// Takes the number out; dropping what is left reports nothing.
    pub(crate) fn into_raw(mut self) -> u32 {
        self.home = None;
        self.id
    }
    /// A copyable name of this id (what events carry).
    pub fn as_ref(&self) -> CmIdRef {
        CmIdRef(self.id)
    }
    /// The local communication ID as it appears on the wire.
    pub fn local_comm_id(&self) -> u32 {
        self.id
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.push(self.id);
        }
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmId({:#010x})", self.id)
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &CmId) -> bool {
        self.id == other.id
    }
}

impl Eq for CmId {}

impl Hash for CmId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

impl PartialEq<CmIdRef> for CmId {
    fn eq(&self, other: &CmIdRef) -> bool {
        self.id == other.0
    }
}

/// The name of an id (events, lookups): it owns nothing, and only the CM makes them
/// ([`CmId::as_ref`], events):
///
/// ```compile_fail
/// let forged = softrdma_core::cm::CmIdRef(7);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmIdRef(pub(super) u32);

impl CmIdRef {
    /// The local communication ID as it appears on the wire.
    pub fn local_comm_id(&self) -> u32 {
        self.0
    }
}

impl fmt::Debug for CmIdRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmIdRef({:#010x})", self.0)
    }
}

/// A listening id (the `listen_id` of REQ/SIDR_REQ events).
pub type ListenId = CmIdRef;

/// A port the CM runs on (one device's QP1), as [`super::CmEndpoint::add_port`] numbered
/// it. Only the CM makes these.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash, Default)]
pub struct CmPort(pub(super) u16);

impl CmPort {
    /// The port's number in the order ports were added (0, 1, ...).
    pub fn index(&self) -> usize {
        usize::from(self.0)
    }
}

/// What a passive side learns from a REQ (`ib_cm_req_event_param`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqInfo {
    pub req: ReqRepr,
    /// The port it arrived on (the new id lives there).
    pub port: CmPort,
    /// Where it came from (the peer's QP1).
    pub peer: MadAddr,
    /// The MAD's AttributeModifier (ECE attr_mod).
    pub attr_mod: u32,
}

/// CM events (`enum ib_cm_event_type`, with `struct ib_cm_event`'s private data and
/// parameters). `ReqReceived` and `SidrReqReceived` hand over a new [`CmId`]: dropping the
/// event destroys that id.
#[must_use = "a REQ/SIDR_REQ event owns a new id; dropping it destroys the id"]
#[derive(Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A new id, now owned by the user.
    ReqReceived {
        id: CmId,
        listen: ListenId,
        req: Box<ReqInfo>,
    },
    /// The REQ went unanswered (`param.send_status`).
    ReqError {
        id: CmIdRef,
        status: SendStatus,
    },
    RepReceived {
        id: CmIdRef,
        rep: Box<RepRepr>,
        /// The MAD's AttributeModifier (the ECE options the passive side agreed to).
        attr_mod: u32,
    },
    /// The REP went unanswered (`param.send_status`).
    RepError {
        id: CmIdRef,
        status: SendStatus,
    },
    RtuReceived {
        id: CmIdRef,
        /// The RTU's private data field (224 bytes).
        private_data: Vec<u8>,
    },
    /// [`super::CmEndpoint::notify_comm_est`] moved the id to ESTABLISHED.
    UserEstablished {
        id: CmIdRef,
    },
    DreqReceived {
        id: CmIdRef,
        /// The DREQ's private data field (220 bytes).
        private_data: Vec<u8>,
    },
    /// The DREQ went unanswered (`param.send_status`); the id is in TIMEWAIT.
    DreqError {
        id: CmIdRef,
        status: SendStatus,
    },
    DrepReceived {
        id: CmIdRef,
        /// The DREP's private data field (224 bytes).
        private_data: Vec<u8>,
    },
    TimewaitExit {
        id: CmIdRef,
    },
    MraReceived {
        id: CmIdRef,
        service_timeout: u8,
        /// The MRA's private data field (222 bytes).
        private_data: Vec<u8>,
    },
    RejReceived {
        id: CmIdRef,
        rej: Box<RejRepr>,
    },
    /// A new id in SIDR_REQ_RCVD, owned by the user (answer with
    /// [`super::CmEndpoint::sidr_rep`]; dropping it answers status 2, REJECT).
    SidrReqReceived {
        id: CmId,
        listen: ListenId,
        req: Box<SidrReqRepr>,
        peer: MadAddr,
    },
    /// The SIDR_REQ went unanswered (`param.send_status`).
    SidrReqError {
        id: CmIdRef,
        status: SendStatus,
    },
    SidrRepReceived {
        id: CmIdRef,
        rep: Box<SidrRepRepr>,
    },
    /// The id's outstanding REQ/REP/DREQ/SIDR_REQ went unanswered and was sent again
    /// (the kernel only counts these, in `cm_tx_retries`; tools print them).
    Retry {
        id: CmIdRef,
        /// The message resent.
        msg: AttrId,
        /// This retransmission's number (1 = first) and how many the message may have.
        attempt: u32,
        max: u32,
        /// When this copy's wait ends.
        next_deadline: Instant,
    },
}

impl CmEvent {
    /// The id the event is for (for REQ/SIDR_REQ: the new id).
    pub fn id(&self) -> CmIdRef {
        match self {
            CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } => id.as_ref(),
            CmEvent::ReqError { id, .. }
            | CmEvent::RepReceived { id, .. }
            | CmEvent::RepError { id, .. }
            | CmEvent::RtuReceived { id, .. }
            | CmEvent::UserEstablished { id }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::DreqError { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::MraReceived { id, .. }
            | CmEvent::RejReceived { id, .. }
            | CmEvent::SidrReqError { id, .. }
            | CmEvent::SidrRepReceived { id, .. }
            | CmEvent::Retry { id, .. } => *id,
        }
    }

    /// The listener a REQ/SIDR_REQ event came through.
    pub fn listen_id(&self) -> Option<ListenId> {
        match self {
            CmEvent::ReqReceived { listen, .. } | CmEvent::SidrReqReceived { listen, .. } => {
                Some(*listen)
            }
            _ => None,
        }
    }
}

/// `ib_cm_req_param` (RoCE: one path, no alternate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqParams {
    /// The port (device) to send from.
    pub port: CmPort,
    /// The peer's QP1.
    pub peer: MadAddr,
    pub primary_path: Path,
    /// The path's packet lifetime exponent (not carried in the REQ as such).
    pub packet_life_time: u8,
    pub path_mtu: PathMtu,
    pub partition_key: u16,
    pub service_id: u64,
    pub qp_num: u32,
    pub transport: TransportType,
    pub starting_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub remote_cm_response_timeout: u8,
    pub local_cm_response_timeout: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    /// ECE vendor ID (24 bits) and attr_mod.
    pub ece_vendor_id: u32,
    pub ece_attr_mod: u32,
}

impl ReqParams {
    /// An RC connection request over RoCE from `local` to the QP1 of `remote`, for
    /// `service_id`, from our QP `qp_num`. The rest is what the RDMA CM sends unless told
    /// otherwise: packet lifetime 18 (`ROCE_PACKET_LIFE_TIME`), a 1024-byte path MTU, the
    /// default P_Key, CM response timeouts 20 (`CMA_CM_RESPONSE_TIMEOUT`) and 15 CM retries
    /// (`CMA_MAX_CM_RETRIES`), one RDMA READ each way, flow control, retry and RNR retry 7,
    /// starting PSN 0, no private data, no SRQ, no ECE. The `with_` methods change those;
    /// fields nothing sets here are public.
    pub fn new(port: CmPort, local: Gid, remote: Gid, service_id: u64, qp_num: u32) -> ReqParams {
        ReqParams {
            port,
            peer: MadAddr::gsi(remote),
            primary_path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: local,
                remote_gid: remote,
                hop_limit: 64,
                ..Path::default()
            },
            packet_life_time: 18,
            path_mtu: PathMtu::MTU_1024,
            partition_key: 0xffff,
            service_id,
            qp_num,
            transport: TransportType::RC,
            starting_psn: 0,
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: false,
            ece_vendor_id: 0,
            ece_attr_mod: 0,
        }
    }

    pub fn with_private_data(mut self, private_data: Vec<u8>) -> ReqParams {
        self.private_data = private_data;
        self
    }

    pub fn with_starting_psn(mut self, psn: u32) -> ReqParams {
        self.starting_psn = psn;
        self
    }

    /// Responder resources and initiator depth (RDMA READs in flight each way).
    pub fn with_rdma_depths(mut self, responder_resources: u8, initiator_depth: u8) -> ReqParams {
        self.responder_resources = responder_resources;
        self.initiator_depth = initiator_depth;
        self
    }

    /// The CM response timeouts (exponents, 4.096 µs × 2^t) the peer and we may take.
    pub fn with_cm_response_timeouts(mut self, remote: u8, local: u8) -> ReqParams {
        self.remote_cm_response_timeout = remote;
        self.local_cm_response_timeout = local;
        self
    }

    pub fn with_max_cm_retries(mut self, retries: u8) -> ReqParams {
        self.max_cm_retries = retries;
        self
    }

    pub fn with_packet_life_time(mut self, exponent: u8) -> ReqParams {
        self.packet_life_time = exponent;
        self
    }

    pub fn with_flow_control(mut self, on: bool) -> ReqParams {
        self.flow_control = on;
        self
    }

    /// The transport retry count and the RNR retry count (each at most 7).
    pub fn with_retries(mut self, retry_count: u8, rnr_retry_count: u8) -> ReqParams {
        self.retry_count = retry_count;
        self.rnr_retry_count = rnr_retry_count;
        self
    }
}

/// `ib_cm_rep_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RepParams {
    pub qp_num: u32,
    pub starting_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub failover_accepted: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub ece_vendor_id: u32,
    pub ece_attr_mod: u32,
}

/// `ib_cm_sidr_req_param`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReqParams {
    /// The port (device) to send from.
    pub port: CmPort,
    pub peer: MadAddr,
    pub service_id: u64,
    pub partition_key: u16,
    pub private_data: Vec<u8>,
    pub timeout: Duration,
    pub max_cm_retries: u8,
}

/// `ib_cm_sidr_rep_param`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SidrRepParams {
    pub status: SidrStatus,
    pub qp_num: u32,
    pub qkey: u32,
    pub info: Vec<u8>,
    pub private_data: Vec<u8>,
}

/// The default of [`CmConfig::half_open_limit`]: Linux's `net.core.somaxconn` (4096), the
/// most connections a TCP listener may have waiting; four full ucma backlogs (1024 each).
pub const DEFAULT_HALF_OPEN_LIMIT: usize = 4096;

/// The default of [`CmConfig::event_queue_limit`]: as many events as
/// [`DEFAULT_HALF_OPEN_LIMIT`] REQs, four full ucma backlogs.
pub const DEFAULT_EVENT_QUEUE_LIMIT: usize = 4096;

/// Endpoint configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Our CA (node) GUID: the REQ/REP's local CA GUID and the REJ TIMEOUT's ARI.
    pub node_guid: Guid,
    /// The CA's ACK delay (rxe: 15).
    pub ca_ack_delay: u8,
    /// Seed of the comm-ID operand.
    pub seed: u64,
    /// The most passive ids in REQ_RCVD, MRA_REQ_SENT or SIDR_REQ_RCVD (REQs and SIDR REQs
    /// the user has not answered yet) the CM keeps, over all listeners and ports; a REQ or
    /// SIDR REQ that would make one more is dropped without an answer and counted
    /// (`CmCounters::half_open_drops`). Not the kernel's: cm.c has no limit. Default
    /// [`DEFAULT_HALF_OPEN_LIMIT`].
    pub half_open_limit: usize,
    /// The most events the RDMA CM keeps queued for the user (`RdmaCm::poll_event` and
    /// `RdmaCm::poll_ib_event` together; the runtime's `Cm` delivers from the same queues).
    /// Not the kernel's: ucma's event list has no bound but the listeners' backlogs. When
    /// the queue is full, an event that would hand the user a new id (a REQ or SIDR REQ,
    /// as CONNECT_REQUEST or REQ_RECEIVED) is refused as ucma refuses one beyond the
    /// backlog — the new IB CM id is destroyed with `-ENOMEM` (no REJ; a SIDR REQ is
    /// answered SIDR_REP REJECT, as `cm_destroy_id` does) and counted
    /// (`RdmaCmCounters::queue_full_drops`); a retransmission notice (`CmEvent::Retry`) is
    /// dropped and counted (`RdmaCmCounters::retry_notice_drops`). Every other event is
    /// about an id the user already holds, a few per id and per command, and is always
    /// queued: the queue holds at most this many events plus those. Default
    /// [`DEFAULT_EVENT_QUEUE_LIMIT`].
    pub event_queue_limit: usize,
}

impl CmConfig {
    /// A configuration with the default limits.
    pub fn new(node_guid: Guid, ca_ack_delay: u8, seed: u64) -> CmConfig {
        CmConfig {
            node_guid,
            ca_ack_delay,
            seed,
            half_open_limit: DEFAULT_HALF_OPEN_LIMIT,
            event_queue_limit: DEFAULT_EVENT_QUEUE_LIMIT,
        }
    }
}

impl Default for CmConfig {
    /// GUID 0, rxe's ACK delay (15), seed 0, the default limits.
    fn default() -> CmConfig {
        CmConfig::new(Guid(0), super::RXE_CA_ACK_DELAY, 0)
    }
}

/// Why a command failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmError {
    /// The id is not in a state that allows the command (`-EINVAL`).
    InvalidState(CmState),
    /// `notify_comm_est` on an id that is already ESTABLISHED (`-EISCONN`).
    IsConnected,
    /// Another id listens on this service ID (`-EBUSY`).
    Busy,
    /// Private data, ARI or info too long (`-EINVAL`).
    TooLong,
    /// Unknown id.
    NoSuchId,
    /// The port was never added to this CM.
    NoSuchPort,
    Mad(MadError),
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmError::InvalidState(s) => write!(f, "invalid CM state {s}"),
            CmError::IsConnected => f.write_str("already connected"),
            CmError::Busy => f.write_str("service ID in use"),
            CmError::TooLong => f.write_str("private data too long"),
            CmError::NoSuchId => f.write_str("no such CM id"),
            CmError::NoSuchPort => f.write_str("no such CM port"),
            CmError::Mad(e) => write!(f, "MAD layer: {e}"),
        }
    }
}

impl std::error::Error for CmError {}

impl From<MadError> for CmError {
    fn from(e: MadError) -> Self {
        CmError::Mad(e)
    }
}

/// A command that consumes an id failed: the id comes back, unchanged, with the error.
#[derive(Debug, PartialEq, Eq)]
pub struct CmIdError {
    pub id: CmId,
    pub error: CmError,
}

impl fmt::Display for CmIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?} handed back)", self.error, self.id)
    }
}

impl std::error::Error for CmIdError {}
