//! The IB connection manager (`docs/architecture.md`; kernel `drivers/infiniband/core/cm.c`,
//! `include/rdma/ib_cm.h`) as a sans-IO [`CmEndpoint`] on top of a [`MadAgent`].
//!
//! **The MAD layer is not the CM's.** QP1 and its MAD layer belong to the port
//! ([`crate::mad::MadPort`]); the CM is one client among the management classes, registered
//! on each port it runs on with [`CmEndpoint::add_port`] (class CM, version 2, method Send()
//! only, like ib_cm's `cm_add_one`). One endpoint spans any number of ports: each id lives on
//! the port its REQ was sent from or arrived on. The endpoint never touches a MAD layer
//! itself: the port's events come in through [`CmEndpoint::handle_mad`], and what the CM
//! wants done (send under its own send id, cancel, modify the timeout for an MRA) comes out
//! of [`CmEndpoint::poll_mad`] as [`MadOp`]s addressed to a port, which the runtime applies
//! to that port's layer in order. Retransmissions are the MAD layer's timers; the CM's own
//! are the timewaits ([`CmEndpoint::poll_timeout`]). [`SinglePortCm`] bundles an endpoint
//! with one MAD layer for tests and simulations. The call order is in [`crate::mad::port`].
//!
//! **Ownership of ids (the `ib_cm_handler` contract, by types)**: there are no callbacks.
//! [`CmEndpoint::create_id`] returns a [`CmId`], which is not `Clone`; every command takes
//! `&CmId`, and [`CmEndpoint::destroy`] / [`CmEndpoint::reject`] take it by value, so a
//! destroyed id cannot be used again. A passive REQ (or SIDR_REQ) creates a new id that is
//! handed over *inside* the event ([`CmEvent::ReqReceived`]`{ id: CmId, .. }`); every other
//! event names an id the user already holds by [`CmIdRef`] (a copyable number). "Destroy the
//! id from inside its own callback" cannot be written; the kernel's "return non-zero from the
//! handler and the CM destroys the id" is simply `destroy(id)` right after taking the event:
//! in REQ_RCVD that sends REJ CONSUMER_DEFINED (28), exactly like the kernel; the kernel's
//! `-ENOMEM` return (reset to idle, *no* REJ, the peer retries its REQ — ucma's backlog
//! overflow) is [`CmEndpoint::destroy_silently`].
//!
//! States: [`CmState`] (`enum ib_cm_state`); each received message has one handler
//! (`req_handler`, `rep_handler`, ...), and every transition goes through `set_state`, which
//! is visible in [`CmEndpoint::state`] and, with `trace` on, in [`CmEndpoint::transitions`].
//!
//! IDs and TIDs (lab README, cm.c `cm_alloc_id_priv` / `cm_form_tid`): local comm IDs are a
//! cyclic counter XORed with a random operand from the seeded [`Rng`]; on the wire the
//! kernel's value appears byte-swapped (`(__force __be32)(id ^ operand)` on a little-endian
//! host), so consecutive IDs differ in the top byte, and the TID is
//! `hi_tid << 32 | swap_bytes(comm_id)`. Responses (REP, RTU, DREP, REJ, MRA) reuse the TID of
//! the REQ; DREQ and SIDR_REQ form a new TID from the sender's own comm ID.
//!
//! Timers (cm.c): REQ `2·cvt(PLT) + cvt(remote_cm_response_timeout)` ms with
//! `max_cm_retries` retries (`ib_send_cm_req`); the passive side's REP and DREQ use
//! `cvt(REQ.local_cm_response_timeout)` ms and the REQ's max_cm_retries (`cm_req_handler`
//! sets `timeout_ms` from that field alone; `docs/cm-timers.md` — no "+ 2×PLT", cm.c does not
//! add it); a received MRA modifies the outstanding MAD to
//! `cvt(service_timeout) + cvt(av.timeout)`; TIMEWAIT lasts `cvt(av.timeout)`
//! (`av.timeout` = PLT+1; the passive side's PLT is the REQ's local ACK timeout − 1; after a
//! REP, `cm_ack_timeout(target_ack_delay, av.timeout-1)`). Retries running out raise
//! REQ_ERROR / REP_ERROR / DREQ_ERROR / SIDR_REQ_ERROR with no REJ on the wire
//! (`cm_process_send_error`).
//!
//! Wire rules taken from cm.c (and checked by the tests):
//! - REJ fields by state (`cm_format_rej`): REQ_RCVD → local comm ID 0, "REQ"; MRA_REQ_SENT
//!   → our ID, "REQ"; REP_RCVD/MRA_REP_SENT → "REP"; anything else (REQ_SENT, REP_SENT,
//!   TIMEWAIT...) → "other". After a REJ (`cm_send_rej_locked`) REP_SENT/MRA_REP_RCVD enter
//!   TIMEWAIT, the other states go back to IDLE.
//! - Context-less answers (`cm_issue_rej` / `cm_issue_drep`) swap the received comm IDs and
//!   reuse the received TID: REQ to no listener → REJ 8, local comm ID 0, "REQ"; REQ from a
//!   known remote QPN → REJ 10 + DREQ to the old connection; DREQ for no id → DREP (counted
//!   as a duplicate DREQ, as the kernel does).
//! - Duplicate REQ (`cm_dup_req_handler`): REQ_RCVD drop; MRA_REQ_SENT resend the MRA
//!   (this is how the delayed MRA gets out); TIMEWAIT → REJ STALE_CONN; an id destroyed in
//!   TIMEWAIT keeps its remote-ID entry until the timewait ends, and duplicates matching it
//!   are dropped (`cm_acquire_id` fails). Duplicate REP: ESTABLISHED → RTU again,
//!   MRA_REP_SENT → MRA again. Duplicate DREQ in TIMEWAIT → DREP again. A repeated MRA is
//!   counted and does not extend the wait again.
//! - `destroy` per state = `cm_destroy_id` (see [`CmEndpoint::destroy`]); a DREQ sent by a
//!   destroy in ESTABLISHED goes out once (the kernel cancels it right after posting it).
//!
//! Done: all of the above, SIDR (no listener → SIDR_REP status 1; destroy in SIDR_REQ_RCVD
//! → status 2; duplicate SIDR_REQs by (request ID, peer GID) dropped), `init_qp_attr`
//! INIT/RTR/RTS, COMM_EST, counters, golden REP against the kernel's REPs.
//! Not done: LAP/APR (received ones are counted as dropped), alternate paths, XRC/UC
//! specifics (e.g. XRC_TGT idle on destroy), ECE beyond passing vendor ID / attr_mod
//! through, the REJ INVALID_GID (12) for an AV that cannot be built, CM ClassPortInfo
//! (the MAD layer answers Get() "unsupported", like ib_cm), per-port devices (one endpoint
//! = one port), `ib_cm_insert_listen` sharing, the destroy-wait timeout.

mod single;
#[cfg(test)]
mod tests;

pub use single::SinglePortCm;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use softrdma_wire::cm::{
    pad, AttrId, CmMessage, DrepRepr, DreqRepr, ExtendedTransportType, FailoverAccepted,
    MraMessage, MraRepr, Path, PathMtu, RejMessage, RejRepr, RejectReason, RepRepr, ReqRepr,
    RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, TransportType, CM_CLASS_VERSION, REJ_ARI_LEN,
};
use softrdma_wire::mad::{Mad, Method, MgmtClass};
use softrdma_wire::Guid;

use crate::device::Mtu;
use crate::mad::{form_tid, AgentId, MadAddr, MadAgent, MadEvent, MadOp, SendId, SendParams};
use crate::mad::{MadError, SendStatus};
use crate::rand::Rng;
use crate::time::{Duration, Instant};
use crate::verbs::{AccessFlags, AddressVector, QpAttr, QpAttrMask, QpState};

/// `IB_CM_ASSIGN_SERVICE_ID`: listen on this to get a service ID from the counter.
pub const ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;
/// rxe's `local_ca_ack_delay` (`RXE_LOCAL_CA_ACK_DELAY` 15): the REP's target ACK delay.
pub const RXE_CA_ACK_DELAY: u8 = 15;
/// The MRA service timeout the RDMA CM uses (`CMA_CM_MRA_SETTING`, i_mra_atomic.pcap: 24).
pub const CMA_CM_MRA_SETTING: u8 = 24;

/// `cm_convert_to_ms`: IBA time 4.096 µs × 2^x, approximated as `1 << max(x-8, 0)` ms.
pub fn cm_convert_to_ms(iba_time: u8) -> Duration {
    Duration::from_millis(1u64 << iba_time.saturating_sub(8).min(31))
}

/// `cm_ack_timeout` (cm.c): 4.096·2^ack_delay + 2·4.096·2^plt, as the larger exponent,
/// rounded up by one when the other term is within 50%, capped at 31.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let d = i32::from(ca_ack_delay);
    let mut t = i32::from(packet_life_time) + 1;
    if t >= d {
        t += i32::from(d >= t - 1);
    } else {
        t = d + i32::from(t >= d - 1);
    }
    t.min(31) as u8
}

/// `enum ib_cm_state`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
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

/// A CM id owned by the user: not `Clone`; destroy it with [`CmEndpoint::destroy`].
#[derive(PartialEq, Eq, Debug, Hash)]
pub struct CmId(u32);

impl CmId {
    /// A copyable name of this id (what events carry).
    pub fn as_ref(&self) -> CmIdRef {
        CmIdRef(self.0)
    }
    /// The local communication ID as it appears on the wire.
    pub fn local_comm_id(&self) -> u32 {
        self.0
    }
}

/// The name of an id the user holds (events, lookups); it owns nothing.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct CmIdRef(pub u32);

impl PartialEq<CmIdRef> for CmId {
    fn eq(&self, other: &CmIdRef) -> bool {
        self.0 == other.0
    }
}

/// A port the CM runs on (one device's QP1), as [`CmEndpoint::add_port`] numbered it. Only
/// the CM makes these.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash, Default)]
pub struct CmPort(u16);

impl CmPort {
    /// The port's number in the order ports were added (0, 1, ...).
    pub fn index(&self) -> usize {
        usize::from(self.0)
    }
}

/// A listening id (the `listen_id` of REQ/SIDR_REQ events).
pub type ListenId = CmIdRef;

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

/// CM events (`enum ib_cm_event_type`).
#[derive(Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A new id, now owned by the user.
    ReqReceived {
        id: CmId,
        listen: ListenId,
        req: Box<ReqInfo>,
    },
    ReqError {
        id: CmIdRef,
    },
    RepReceived {
        id: CmIdRef,
        rep: Box<RepRepr>,
    },
    RepError {
        id: CmIdRef,
    },
    RtuReceived {
        id: CmIdRef,
    },
    /// [`CmEndpoint::notify_comm_est`] moved the id to ESTABLISHED.
    UserEstablished {
        id: CmIdRef,
    },
    DreqReceived {
        id: CmIdRef,
        private_data: Vec<u8>,
    },
    DreqError {
        id: CmIdRef,
    },
    DrepReceived {
        id: CmIdRef,
    },
    TimewaitExit {
        id: CmIdRef,
    },
    MraReceived {
        id: CmIdRef,
        service_timeout: u8,
    },
    RejReceived {
        id: CmIdRef,
        rej: Box<RejRepr>,
    },
    /// A new id in SIDR_REQ_RCVD, owned by the user (answer with [`CmEndpoint::sidr_rep`]).
    SidrReqReceived {
        id: CmId,
        listen: ListenId,
        req: Box<SidrReqRepr>,
        peer: MadAddr,
    },
    SidrReqError {
        id: CmIdRef,
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

/// Why a command failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmError {
    /// The id is not in a state that allows the command (`-EINVAL`).
    InvalidState(CmState),
    /// Another id listens on this service ID (`-EBUSY`).
    Busy,
    /// Private data, ARI or info too long.
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
            CmError::InvalidState(s) => write!(f, "invalid CM state {s:?}"),
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

/// Per-message counters (the kernel's `cm_counter_groups`: xmit, xmit retries, recv,
/// recv duplicates), indexed by attribute ID 0x10..=0x1a.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct CmCounters {
    pub tx: [u64; 11],
    pub rx: [u64; 11],
    pub rx_duplicates: [u64; 11],
    /// Retransmissions by the MAD layer (all messages).
    pub tx_retries: u64,
    /// Received messages matching no id in a state that takes them (dropped).
    pub rx_dropped: u64,
    /// Unparseable CM MADs.
    pub rx_malformed: u64,
}

impl CmCounters {
    fn idx(a: AttrId) -> Option<usize> {
        (0x10..=0x1a)
            .contains(&a.0)
            .then(|| usize::from(a.0 - 0x10))
    }
    /// Messages of this kind sent (retransmissions not included).
    pub fn tx(&self, a: AttrId) -> u64 {
        Self::idx(a)
            .and_then(|i| self.tx.get(i))
            .copied()
            .unwrap_or(0)
    }
    /// Messages of this kind received.
    pub fn rx(&self, a: AttrId) -> u64 {
        Self::idx(a)
            .and_then(|i| self.rx.get(i))
            .copied()
            .unwrap_or(0)
    }
    /// Duplicates of this kind received.
    pub fn dup(&self, a: AttrId) -> u64 {
        Self::idx(a)
            .and_then(|i| self.rx_duplicates.get(i))
            .copied()
            .unwrap_or(0)
    }
    fn bump(arr: &mut [u64; 11], a: AttrId) {
        if let Some(x) = Self::idx(a).and_then(|i| arr.get_mut(i)) {
            *x += 1;
        }
    }
}

/// Endpoint configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Our CA (node) GUID: the REQ/REP's local CA GUID and the REJ TIMEOUT's ARI.
    pub node_guid: Guid,
    /// The CA's ACK delay (rxe: 15).
    pub ca_ack_delay: u8,
    /// Seed of the comm-ID operand.
    pub seed: u64,
}

/// One connection's state (`struct cm_id_private`).
#[derive(Clone, Debug)]
struct Conn {
    state: CmState,
    /// The port it lives on (set by send_req/sidr_req or by the arriving REQ).
    port: CmPort,
    /// Dropped by the user while in TIMEWAIT: kept only for the remote-ID tables until
    /// the timewait ends (the kernel's orphaned `timewait_info`).
    zombie: bool,
    /// Silent-drop flavour of destroy in REQ_RCVD.
    peer: Option<MadAddr>,
    tid: u64,
    service_id: u64,
    remote_id: u32,
    remote_ca_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    /// The outstanding REQ/REP/DREQ/SIDR_REQ.
    msg: Option<SendId>,
    timeout: Duration,
    max_cm_retries: u8,
    /// `av.timeout` (IBA exponent).
    av_timeout: u8,
    timewait_until: Option<Instant>,
    /// MRA service timeout set by send_mra (for resending on duplicates).
    service_timeout: u8,
    mra_pd: Vec<u8>,
    /// Last RTU / DREP sent, for resending on duplicates.
    last_rtu: Option<Mad>,
    last_drep: Option<Mad>,
    // QP attributes (ib_cm_init_qp_attr).
    path: Path,
    path_mtu: PathMtu,
    pkey: u16,
    sq_psn: u32,
    rq_psn: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    /// SIDR: the request id we answer / the listener.
    sidr_request_id: u32,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            state: CmState::Idle,
            port: CmPort(0),
            zombie: false,
            peer: None,
            tid: 0,
            service_id: 0,
            remote_id: 0,
            remote_ca_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            msg: None,
            timeout: Duration::ZERO,
            max_cm_retries: 0,
            av_timeout: 0,
            timewait_until: None,
            service_timeout: 0,
            mra_pd: Vec::new(),
            last_rtu: None,
            last_drep: None,
            path: Path::default(),
            path_mtu: PathMtu::MTU_1024,
            pkey: 0xffff,
            sq_psn: 0,
            rq_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            sidr_request_id: 0,
        }
    }
}

/// The IB CM of one port.
#[derive(Debug)]
pub struct CmEndpoint {
    /// The CM's agent on each port's MAD layer and the port's node GUID, by [`CmPort`]
    /// index.
    ports: Vec<(AgentId, Guid)>,
    /// What the ports' MAD layers are to do, in order ([`CmEndpoint::poll_mad`]).
    out: VecDeque<(CmPort, MadOp)>,
    /// The CM numbers its own sends (unique across ports).
    next_send: u64,
    cfg: CmConfig,
    rng: Rng,
    operand: u32,
    next_counter: u32,
    next_service_id: u64,
    conns: BTreeMap<u32, Conn>,
    listeners: BTreeMap<u64, u32>,
    /// (remote comm ID, remote CA GUID) → local ID (`remote_id_table`).
    remote_ids: BTreeMap<(u32, u64), u32>,
    /// (remote QPN, remote CA GUID) → local ID (`remote_qp_table`).
    remote_qpns: BTreeMap<(u32, u64), u32>,
    /// (SIDR request ID, peer GID) → local ID (`remote_sidr_table`).
    remote_sidr: BTreeMap<(u32, [u8; 16]), u32>,
    sends: BTreeMap<SendId, u32>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
    /// Every transition, in order: (local id, from, to) — for tests and tracing.
    pub transitions: Vec<(u32, CmState, CmState)>,
    /// Record transitions (off by default).
    pub trace: bool,
}

impl CmEndpoint {
    /// A new CM on no port yet ([`CmEndpoint::add_port`]).
    pub fn new(cfg: CmConfig) -> Result<CmEndpoint, CmError> {
        let mut rng = Rng::new(cfg.seed);
        let operand = rng.next_u32();
        Ok(CmEndpoint {
            ports: Vec::new(),
            out: VecDeque::new(),
            next_send: 1,
            cfg,
            rng,
            operand,
            next_counter: 0,
            next_service_id: ASSIGN_SERVICE_ID,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            remote_ids: BTreeMap::new(),
            remote_qpns: BTreeMap::new(),
            remote_sidr: BTreeMap::new(),
            sends: BTreeMap::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
            transitions: Vec::new(),
            trace: false,
        })
    }

    /// `cm_add_one` for one port: registers the CM on that port's MAD layer (class CM,
    /// version 2, method Send() only, as ib_cm does) and returns the port's name.
    pub fn add_port(&mut self, mad: &mut MadAgent) -> Result<CmPort, CmError> {
        self.add_port_with_guid(mad, self.cfg.node_guid)
    }
    /// [`CmEndpoint::add_port`] for a device whose node GUID is `guid` (what its REQs, REPs
    /// and REJ TIMEOUTs carry; the kernel takes it from the cm_id's device).
    pub fn add_port_with_guid(
        &mut self,
        mad: &mut MadAgent,
        guid: Guid,
    ) -> Result<CmPort, CmError> {
        let n = u16::try_from(self.ports.len()).map_err(|_| CmError::NoSuchPort)?;
        let agent = mad.register_methods(MgmtClass::CM, CM_CLASS_VERSION, Some(&[Method::SEND]))?;
        self.ports.push((agent, guid));
        Ok(CmPort(n))
    }
    /// The CM's agent (hi_tid) on `port`'s MAD layer.
    pub fn agent(&self, port: CmPort) -> Option<AgentId> {
        self.ports.get(port.index()).map(|p| p.0)
    }
    /// The node GUID of `port`'s device.
    pub fn port_guid(&self, port: CmPort) -> Guid {
        self.ports
            .get(port.index())
            .map(|p| p.1)
            .unwrap_or(self.cfg.node_guid)
    }
    /// The ports added so far.
    pub fn ports(&self) -> impl Iterator<Item = CmPort> + '_ {
        (0..self.ports.len()).map(|i| CmPort(i as u16))
    }
    /// Counters.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }
    /// The state of an id (`None`: gone).
    pub fn state(&self, id: CmIdRef) -> Option<CmState> {
        self.conns.get(&id.0).filter(|c| !c.zombie).map(|c| c.state)
    }
    /// The port an id lives on.
    pub fn port_of(&self, id: CmIdRef) -> Option<CmPort> {
        self.conns.get(&id.0).filter(|c| !c.zombie).map(|c| c.port)
    }
    /// The id's current TID.
    pub fn tid(&self, id: CmIdRef) -> Option<u64> {
        self.conns.get(&id.0).map(|c| c.tid)
    }
    /// The next thing a port's MAD layer is to do: apply it with
    /// `MadAgent::apply(agent, op)` on that port's layer, in the order given.
    pub fn poll_mad(&mut self) -> Option<(CmPort, AgentId, MadOp)> {
        let (port, op) = self.out.pop_front()?;
        let agent = self.agent(port)?;
        Some((port, agent, op))
    }
    /// Whether MAD operations are queued.
    pub fn has_mad_ops(&self) -> bool {
        !self.out.is_empty()
    }
    /// Next event for the user.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }
    /// When [`CmEndpoint::handle_timeout`] wants to run (the CM's own timers: timewait;
    /// retransmissions are the MAD layers' timers).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(|c| c.timewait_until).min()
    }
    /// Runs the timewait exits due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.timewait_until.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.timewait_exit(id);
        }
    }

    /// An event of `port`'s MAD layer for the CM's agent there (received CM MADs, send
    /// completions, retransmissions). Events of other agents are ignored.
    pub fn handle_mad(&mut self, now: Instant, port: CmPort, ev: MadEvent) {
        if self.agent(port) != Some(ev.agent()) {
            return;
        }
        match ev {
            MadEvent::Received { mad, from, .. } => self.dispatch(now, port, from, &mad),
            MadEvent::SendCompleted { id, status, .. } => {
                let local = self.sends.remove(&id);
                if status == SendStatus::TimedOut {
                    if let Some(l) = local {
                        self.send_error(now, l, id);
                    }
                }
            }
            MadEvent::Retransmitted {
                id,
                attempt,
                retries_left,
                next_deadline,
                ..
            } => {
                self.counters.tx_retries += 1;
                let Some(&local) = self.sends.get(&id) else {
                    return;
                };
                let msg = self.conns.get(&local).map(|c| match c.state {
                    CmState::ReqSent => AttrId::REQ,
                    CmState::RepSent | CmState::MraRepRcvd => AttrId::REP,
                    CmState::DreqSent => AttrId::DREQ,
                    CmState::SidrReqSent => AttrId::SIDR_REQ,
                    _ => AttrId::REQ,
                });
                if let Some(msg) = msg {
                    self.events.push_back(CmEvent::Retry {
                        id: CmIdRef(local),
                        msg,
                        attempt,
                        max: attempt + retries_left,
                        next_deadline,
                    });
                }
            }
        }
    }

    // ---- ids ----------------------------------------------------------------------------

    fn alloc_local_id(&mut self) -> u32 {
        loop {
            let n = self.next_counter;
            self.next_counter = self.next_counter.wrapping_add(1);
            let wire = (n ^ self.operand).swap_bytes();
            if wire != 0 && !self.conns.contains_key(&wire) {
                return wire;
            }
        }
    }

    /// `ib_create_cm_id`.
    pub fn create_id(&mut self) -> CmId {
        let id = self.alloc_local_id();
        self.conns.insert(id, Conn::new());
        CmId(id)
    }

    fn own_tid(&self, port: CmPort, local: u32) -> u64 {
        let agent = self.agent(port).unwrap_or(AgentId(0));
        form_tid(agent, local.swap_bytes())
    }

    fn set_state(&mut self, id: u32, to: CmState) {
        if let Some(c) = self.conns.get_mut(&id) {
            if self.trace {
                self.transitions.push((id, c.state, to));
            }
            c.state = to;
        }
    }

    fn conn(&self, id: &CmId) -> Result<&Conn, CmError> {
        self.conns.get(&id.0).ok_or(CmError::NoSuchId)
    }

    fn state_of(&self, id: &CmId) -> Result<CmState, CmError> {
        Ok(self.conn(id)?.state)
    }

    /// `ib_cm_listen`; [`ASSIGN_SERVICE_ID`] takes the next ID from the counter. Returns the
    /// service ID listened on.
    pub fn listen(&mut self, id: &CmId, service_id: u64) -> Result<u64, CmError> {
        let st = self.state_of(id)?;
        if st != CmState::Idle {
            return Err(CmError::InvalidState(st));
        }
        let sid = if service_id == ASSIGN_SERVICE_ID {
            let s = self.next_service_id;
            self.next_service_id += 1;
            s
        } else {
            service_id
        };
        if self.listeners.contains_key(&sid) {
            return Err(CmError::Busy);
        }
        self.listeners.insert(sid, id.0);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.service_id = sid;
        }
        self.set_state(id.0, CmState::Listen);
        Ok(sid)
    }

    // ---- sending ------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn send_msg(
        &mut self,
        now: Instant,
        port: CmPort,
        local: Option<u32>,
        dest: MadAddr,
        mad: Mad,
        params: SendParams,
    ) -> Option<SendId> {
        CmCounters::bump(&mut self.counters.tx, AttrId(mad.header.attr_id));
        let id = SendId(self.next_send);
        self.next_send += 1;
        self.out.push_back((
            port,
            MadOp::Send {
                id,
                at: now,
                dest,
                mad: Box::new(mad),
                params,
            },
        ));
        if let Some(l) = local {
            if params.expects_response {
                self.sends.insert(id, l);
            }
        }
        Some(id)
    }

    fn send_once(&mut self, now: Instant, port: CmPort, dest: MadAddr, mad: Mad) {
        let _ = self.send_msg(now, port, None, dest, mad, SendParams::ONCE);
    }

    fn cancel_msg(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            if let Some(m) = c.msg.take() {
                let port = c.port;
                self.sends.remove(&m);
                self.out.push_back((port, MadOp::Cancel(m)));
            }
        }
    }

    fn retry_params(c: &Conn) -> SendParams {
        SendParams {
            timeout: c.timeout,
            retries: u32::from(c.max_cm_retries),
            expects_response: true,
        }
    }

    /// `ib_send_cm_req`.
    pub fn send_req(&mut self, now: Instant, id: &CmId, p: &ReqParams) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if st != CmState::Idle {
            return Err(CmError::InvalidState(st));
        }
        if p.private_data.len() > softrdma_wire::cm::REQ_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        let (transport, ext) = (p.transport, ExtendedTransportType::NONE);
        let mut path = p.primary_path;
        path.local_ack_timeout = cm_ack_timeout(self.cfg.ca_ack_delay, p.packet_life_time);
        let req = ReqRepr {
            local_comm_id: id.0,
            vendor_id: p.ece_vendor_id & 0x00ff_ffff,
            service_id: p.service_id,
            local_ca_guid: self.port_guid(p.port),
            local_qkey: 0,
            local_qpn: p.qp_num,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: transport,
            end_to_end_flow_control: p.flow_control,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            partition_key: p.partition_key,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: ext,
            primary_path: path,
            alternate_path: Path::default(),
            sap_supported: false,
            private_data: pad(&p.private_data),
        };
        if self.agent(p.port).is_none() {
            return Err(CmError::NoSuchPort);
        }
        let tid = self.own_tid(p.port, id.0);
        let timeout = cm_convert_to_ms(p.packet_life_time)
            + cm_convert_to_ms(p.packet_life_time)
            + cm_convert_to_ms(p.remote_cm_response_timeout);
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId)?;
        c.port = p.port;
        c.peer = Some(p.peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.local_qpn = p.qp_num;
        c.timeout = timeout;
        c.max_cm_retries = p.max_cm_retries;
        c.av_timeout = p.packet_life_time.saturating_add(1);
        c.path = path;
        c.path_mtu = p.path_mtu;
        c.pkey = p.partition_key;
        // cm.c (ib_send_cm_req): a message's starting PSN is what its sender's RQ expects
        // (the peer's SQ starts there): rq_psn from our REQ, sq_psn from the peer's REP.
        c.rq_psn = p.starting_psn;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count;
        c.rnr_retry_count = p.rnr_retry_count;
        let params = Self::retry_params(c);
        let mad = CmMessage::Req(req).to_mad(tid, p.ece_attr_mod);
        let m = self.send_msg(now, p.port, Some(id.0), p.peer, mad, params);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.msg = m;
        }
        self.set_state(id.0, CmState::ReqSent);
        Ok(())
    }

    /// `ib_send_cm_rep` (from REQ_RCVD or MRA_REQ_SENT).
    pub fn send_rep(&mut self, now: Instant, id: &CmId, p: &RepParams) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if !matches!(st, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState(st));
        }
        if p.private_data.len() > softrdma_wire::cm::REP_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        let guid = self.port_guid(self.conn(id)?.port);
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId)?;
        let v = p.ece_vendor_id & 0x00ff_ffff;
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.qp_num,
            vendor_id: v,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.ca_ack_delay,
            failover_accepted: FailoverAccepted(p.failover_accepted),
            end_to_end_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: guid,
            private_data: pad(&p.private_data),
        };
        c.local_qpn = p.qp_num;
        // ib_send_cm_rep: rq_psn = the REP's starting PSN (cm_req_handler took sq_psn from the REQ).
        c.rq_psn = p.starting_psn;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.rnr_retry_count = p.rnr_retry_count;
        let (tid, peer, params, port) = (c.tid, c.peer, Self::retry_params(c), c.port);
        let peer = peer.ok_or(CmError::NoSuchId)?;
        let mad = CmMessage::Rep(rep).to_mad(tid, p.ece_attr_mod);
        let m = self.send_msg(now, port, Some(id.0), peer, mad, params);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.msg = m;
        }
        self.set_state(id.0, CmState::RepSent);
        Ok(())
    }

    /// `ib_send_cm_rtu` (from REP_RCVD or MRA_REP_SENT).
    pub fn send_rtu(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if !matches!(st, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::InvalidState(st));
        }
        if pd.len() > softrdma_wire::cm::RTU_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        let c = self.conn(id)?;
        let rtu = RtuRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            private_data: pad(pd),
        };
        let mad = CmMessage::Rtu(rtu).to_mad(c.tid, 0);
        let peer = c.peer.ok_or(CmError::NoSuchId)?;
        let port = c.port;
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.last_rtu = Some(mad.clone());
        }
        self.send_once(now, port, peer, mad);
        self.set_state(id.0, CmState::Established);
        Ok(())
    }

    fn rej_mad(&self, local: u32, c: &Conn, reason: RejectReason, ari: &[u8], pd: &[u8]) -> Mad {
        // cm_format_rej: the comm ID and "message rejected" depend on the state (REQ_RCVD
        // is the only state that hides our comm ID; REP_SENT says "other").
        let (lid, msg) = match c.state {
            CmState::ReqRcvd => (0, RejMessage::REQ),
            CmState::MraReqSent => (local, RejMessage::REQ),
            CmState::RepRcvd | CmState::MraRepSent => (local, RejMessage::REP),
            _ => (local, RejMessage::OTHER),
        };
        let rej = RejRepr {
            local_comm_id: lid,
            remote_comm_id: c.remote_id,
            message_rejected: msg,
            reject_info_length: ari.len().min(REJ_ARI_LEN) as u8,
            reason,
            ari: pad(ari),
            private_data: pad(pd),
        };
        CmMessage::Rej(rej).to_mad(c.tid, 0)
    }

    /// `ib_send_cm_rej` (`cm_send_rej_locked`): from REP_SENT/MRA_REP_RCVD the id enters
    /// TIMEWAIT, from the other states it goes back to IDLE; it stays the user's.
    pub fn send_rej(
        &mut self,
        now: Instant,
        id: &CmId,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if !matches!(
            st,
            CmState::ReqSent
                | CmState::MraReqRcvd
                | CmState::ReqRcvd
                | CmState::MraReqSent
                | CmState::RepRcvd
                | CmState::MraRepSent
                | CmState::RepSent
                | CmState::MraRepRcvd
        ) {
            return Err(CmError::InvalidState(st));
        }
        if ari.len() > REJ_ARI_LEN || pd.len() > softrdma_wire::cm::REJ_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        self.send_rej_locked(now, id.0, reason, ari, pd);
        Ok(())
    }

    /// `cm_send_rej_locked`: the REJ formatted for the current state, then IDLE (or
    /// TIMEWAIT from REP_SENT/MRA_REP_RCVD).
    fn send_rej_locked(
        &mut self,
        now: Instant,
        id: u32,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) {
        self.cancel_msg(id);
        let Some(c) = self.conns.get(&id) else { return };
        let mad = self.rej_mad(id, c, reason, ari, pd);
        let (st, peer, port) = (c.state, c.peer, c.port);
        if let Some(peer) = peer {
            self.send_once(now, port, peer, mad);
        }
        if matches!(st, CmState::RepSent | CmState::MraRepRcvd) {
            self.enter_timewait(now, id);
        } else {
            self.reset_to_idle(id);
        }
    }

    /// `ib_send_cm_rej` and `ib_destroy_cm_id`.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) -> Result<(), CmError> {
        self.send_rej(now, &id, reason, ari, pd)?;
        self.destroy(now, id);
        Ok(())
    }

    /// `ib_send_cm_mra` / `ib_prepare_cm_mra`. With `delayed` (`IB_CM_MRA_FLAG_DELAY`, what
    /// the RDMA CM does) nothing is sent now: the MRA goes out only when a duplicate REQ
    /// arrives before the user answered.
    pub fn send_mra(
        &mut self,
        now: Instant,
        id: &CmId,
        service_timeout: u8,
        delayed: bool,
        pd: &[u8],
    ) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        let (to, what) = match st {
            CmState::ReqRcvd => (CmState::MraReqSent, MraMessage::REQ),
            CmState::RepRcvd => (CmState::MraRepSent, MraMessage::REP),
            _ => return Err(CmError::InvalidState(st)),
        };
        if pd.len() > softrdma_wire::cm::MRA_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.service_timeout = service_timeout & 0x1f;
            c.mra_pd = pd.to_vec();
        }
        if !delayed {
            self.resend_mra(now, id.0, what);
        }
        self.set_state(id.0, to);
        Ok(())
    }

    fn resend_mra(&mut self, now: Instant, id: u32, what: MraMessage) {
        let Some(c) = self.conns.get(&id) else { return };
        let mra = MraRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_mraed: what,
            service_timeout: c.service_timeout,
            private_data: pad(&c.mra_pd),
        };
        let mad = CmMessage::Mra(mra).to_mad(c.tid, 0);
        if let Some(peer) = c.peer {
            self.send_once(now, c.port, peer, mad);
        }
    }

    /// `ib_send_cm_dreq` (ESTABLISHED → DREQ_SENT).
    pub fn send_dreq(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if st != CmState::Established {
            return Err(CmError::InvalidState(st));
        }
        if pd.len() > softrdma_wire::cm::DREQ_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        self.issue_dreq(now, id.0, pd);
        Ok(())
    }

    fn issue_dreq(&mut self, now: Instant, id: u32, pd: &[u8]) {
        self.issue_dreq_with(now, id, pd, false);
    }

    fn issue_dreq_with(&mut self, now: Instant, id: u32, pd: &[u8], once: bool) {
        let Some(port) = self.conns.get(&id).map(|c| c.port) else {
            return;
        };
        let tid = self.own_tid(port, id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        // cm_format_dreq: a fresh TID from our own comm ID.
        c.tid = tid;
        let dreq = DreqRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data: pad(pd),
        };
        let params = if once {
            SendParams::ONCE
        } else {
            Self::retry_params(c)
        };
        let peer = c.peer;
        let mad = CmMessage::Dreq(dreq).to_mad(tid, 0);
        if let Some(peer) = peer {
            let m = self.send_msg(now, port, Some(id), peer, mad, params);
            if let Some(c) = self.conns.get_mut(&id).filter(|_| !once) {
                c.msg = m;
            }
        }
        self.set_state(id, CmState::DreqSent);
    }

    /// `ib_send_cm_drep` (DREQ_RCVD → TIMEWAIT).
    pub fn send_drep(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if st != CmState::DreqRcvd {
            return Err(CmError::InvalidState(st));
        }
        if pd.len() > softrdma_wire::cm::DREP_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        self.issue_drep(now, id.0, pd);
        Ok(())
    }

    fn issue_drep(&mut self, now: Instant, id: u32, pd: &[u8]) {
        let Some(c) = self.conns.get(&id) else { return };
        let drep = DrepRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: pad(pd),
        };
        let mad = CmMessage::Drep(drep).to_mad(c.tid, 0);
        let (peer, port) = (c.peer, c.port);
        if let Some(c) = self.conns.get_mut(&id) {
            c.last_drep = Some(mad.clone());
        }
        if let Some(peer) = peer {
            self.send_once(now, port, peer, mad);
        }
        self.enter_timewait(now, id);
    }

    /// `ib_cm_notify(IB_EVENT_COMM_EST)`: a data packet arrived before the RTU.
    pub fn notify_comm_est(&mut self, id: &CmId) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        match st {
            CmState::RepSent | CmState::MraRepRcvd => {
                self.cancel_msg(id.0);
                self.set_state(id.0, CmState::Established);
                self.events
                    .push_back(CmEvent::UserEstablished { id: id.as_ref() });
                Ok(())
            }
            CmState::Established => Ok(()),
            _ => Err(CmError::InvalidState(st)),
        }
    }

    /// `ib_send_cm_sidr_req`.
    pub fn sidr_req(&mut self, now: Instant, id: &CmId, p: &SidrReqParams) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if st != CmState::Idle {
            return Err(CmError::InvalidState(st));
        }
        if p.private_data.len() > softrdma_wire::cm::SIDR_REQ_PRIVATE_DATA_LEN {
            return Err(CmError::TooLong);
        }
        if self.agent(p.port).is_none() {
            return Err(CmError::NoSuchPort);
        }
        let tid = self.own_tid(p.port, id.0);
        let req = SidrReqRepr {
            request_id: id.0,
            partition_key: p.partition_key,
            service_id: p.service_id,
            private_data: pad(&p.private_data),
        };
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId)?;
        c.port = p.port;
        c.tid = tid;
        c.peer = Some(p.peer);
        c.service_id = p.service_id;
        c.timeout = p.timeout;
        c.max_cm_retries = p.max_cm_retries;
        let params = Self::retry_params(c);
        let mad = CmMessage::SidrReq(req).to_mad(tid, 0);
        let m = self.send_msg(now, p.port, Some(id.0), p.peer, mad, params);
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.msg = m;
        }
        self.set_state(id.0, CmState::SidrReqSent);
        Ok(())
    }

    /// `ib_send_cm_sidr_rep` (SIDR_REQ_RCVD → IDLE).
    pub fn sidr_rep(&mut self, now: Instant, id: &CmId, p: &SidrRepParams) -> Result<(), CmError> {
        let st = self.state_of(id)?;
        if st != CmState::SidrReqRcvd {
            return Err(CmError::InvalidState(st));
        }
        if p.info.len() > softrdma_wire::cm::SIDR_REP_INFO_LEN
            || p.private_data.len() > softrdma_wire::cm::SIDR_REP_PRIVATE_DATA_LEN
        {
            return Err(CmError::TooLong);
        }
        self.issue_sidr_rep(now, id.0, p);
        Ok(())
    }

    fn issue_sidr_rep(&mut self, now: Instant, id: u32, p: &SidrRepParams) {
        let Some(c) = self.conns.get(&id) else { return };
        let rep = SidrRepRepr {
            request_id: c.sidr_request_id,
            status: p.status,
            additional_info_length: p.info.len() as u8,
            vendor_id_h: 0,
            qpn: p.qp_num,
            vendor_id_l: 0,
            service_id: c.service_id,
            qkey: p.qkey,
            additional_info: pad(&p.info),
            private_data: pad(&p.private_data),
        };
        let mad = CmMessage::SidrRep(rep).to_mad(c.tid, 0);
        let (peer, port) = (c.peer, c.port);
        let key = (c.sidr_request_id, peer.map(|p| p.gid.0).unwrap_or_default());
        if let Some(peer) = peer {
            self.send_once(now, port, peer, mad);
        }
        self.remote_sidr.remove(&key);
        self.set_state(id, CmState::Idle);
    }

    /// `ib_destroy_cm_id` (`cm_destroy_id`): what goes on the wire depends on the state
    /// (`docs/cm-timers.md`, "Destroying an id").
    pub fn destroy(&mut self, now: Instant, id: CmId) {
        self.destroy_id(now, id.0, false);
    }

    /// The kernel's REQ handler returning `-ENOMEM`: in REQ_RCVD the id is dropped with no
    /// REJ (the peer's REQ retransmission will be treated as new). Elsewhere = destroy.
    pub fn destroy_silently(&mut self, now: Instant, id: CmId) {
        self.destroy_id(now, id.0, true);
    }

    fn destroy_id(&mut self, now: Instant, id: u32, silent: bool) {
        let Some((st, port)) = self.conns.get(&id).map(|c| (c.state, c.port)) else {
            return;
        };
        let guid = self.port_guid(port).0.to_be_bytes();
        match st {
            CmState::Listen => {
                self.listeners.retain(|_, v| *v != id);
            }
            CmState::SidrReqSent => self.cancel_msg(id),
            CmState::SidrReqRcvd => {
                let p = SidrRepParams {
                    status: SidrStatus::REJECT,
                    ..SidrRepParams::default()
                };
                self.issue_sidr_rep(now, id, &p);
            }
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.send_rej_locked(now, id, RejectReason::TIMEOUT, &guid, &[]);
            }
            CmState::ReqRcvd if silent => {}
            CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::RepRcvd
            | CmState::MraRepSent => {
                self.send_rej_locked(now, id, RejectReason::CONSUMER_DEFINED, &[], &[]);
            }
            CmState::Established => {
                // ib_send_cm_dreq, then the DREQ_SENT case: cancel + timewait.
                // The kernel's DREQ is already posted when it is cancelled, so it goes out
                // once; here the MAD layer would withdraw an unsent copy, so send it once.
                self.issue_dreq_with(now, id, &[], true);
                self.enter_timewait(now, id);
            }
            CmState::DreqSent => {
                self.cancel_msg(id);
                self.enter_timewait(now, id);
            }
            CmState::DreqRcvd => self.issue_drep(now, id, &[]),
            CmState::Timewait | CmState::Idle => {}
        }
        let keep = self
            .conns
            .get(&id)
            .is_some_and(|c| c.state == CmState::Timewait);
        if keep {
            if let Some(c) = self.conns.get_mut(&id) {
                c.zombie = true;
            }
        } else {
            self.cancel_msg(id);
            self.remove_tables(id);
            self.conns.remove(&id);
        }
    }

    fn remove_tables(&mut self, id: u32) {
        self.remote_ids.retain(|_, v| *v != id);
        self.remote_qpns.retain(|_, v| *v != id);
        self.remote_sidr.retain(|_, v| *v != id);
    }

    fn reset_to_idle(&mut self, id: u32) {
        self.cancel_msg(id);
        self.remove_tables(id);
        self.set_state(id, CmState::Idle);
    }

    fn enter_timewait(&mut self, now: Instant, id: u32) {
        self.cancel_msg(id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.timewait_until = Some(now + cm_convert_to_ms(c.av_timeout));
        self.set_state(id, CmState::Timewait);
    }

    fn timewait_exit(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.timewait_until = None;
        let zombie = c.zombie;
        self.remove_tables(id);
        if zombie {
            self.conns.remove(&id);
            return;
        }
        if c_state(&self.conns, id) == Some(CmState::Timewait) {
            self.set_state(id, CmState::Idle);
            self.events
                .push_back(CmEvent::TimewaitExit { id: CmIdRef(id) });
        }
    }

    /// `cm_process_send_error`: a REQ/REP/DREQ/SIDR_REQ ran out of retries.
    fn send_error(&mut self, now: Instant, id: u32, send: SendId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.msg != Some(send) {
            return;
        }
        c.msg = None;
        let r = CmIdRef(id);
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::ReqError { id: r });
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::RepError { id: r });
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::DreqError { id: r });
            }
            CmState::SidrReqSent => {
                self.set_state(id, CmState::Idle);
                self.events.push_back(CmEvent::SidrReqError { id: r });
            }
            _ => {}
        }
    }

    /// `ib_cm_init_qp_attr`: the attributes and mask for moving the QP to `target`
    /// (INIT, RTR or RTS) from what the CM negotiated.
    pub fn init_qp_attr(
        &self,
        id: &CmId,
        target: QpState,
    ) -> Result<(QpAttr, QpAttrMask), CmError> {
        let c = self.conn(id)?;
        use CmState as S;
        use QpAttrMask as M;
        let connected = matches!(
            c.state,
            S::ReqRcvd
                | S::MraReqSent
                | S::RepRcvd
                | S::MraRepSent
                | S::RepSent
                | S::MraRepRcvd
                | S::Established
        );
        let mut a = QpAttr {
            qp_state: target,
            ..QpAttr::default()
        };
        match target {
            QpState::Init if connected || matches!(c.state, S::ReqSent | S::MraReqRcvd) => {
                // cm_init_qp_init_attr: remote write always, read/atomic with responder
                // resources.
                let mut f = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);
                if c.responder_resources > 0 {
                    f = AccessFlags(
                        f.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_ATOMIC.0,
                    );
                }
                a.qp_access_flags = f;
                a.pkey_index = 0;
                a.port_num = 1;
                Ok((a, M::STATE | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT))
            }
            QpState::Rtr if connected => {
                a.ah_attr = AddressVector {
                    dgid: c.path.remote_gid,
                    hop_limit: c.path.hop_limit,
                    traffic_class: c.path.traffic_class,
                    flow_label: c.path.flow_label,
                    sl: c.path.sl,
                    port_num: 1,
                    ..AddressVector::default()
                };
                a.path_mtu = Mtu::from_enum(c.path_mtu.0).unwrap_or(Mtu::Mtu1024);
                a.dest_qp_num = c.remote_qpn;
                a.rq_psn = c.rq_psn;
                a.max_dest_rd_atomic = c.responder_resources;
                a.min_rnr_timer = 0;
                Ok((
                    a,
                    M::STATE
                        | M::AV
                        | M::PATH_MTU
                        | M::DEST_QPN
                        | M::RQ_PSN
                        | M::MAX_DEST_RD_ATOMIC
                        | M::MIN_RNR_TIMER,
                ))
            }
            QpState::Rts if connected => {
                a.sq_psn = c.sq_psn;
                a.timeout = c.av_timeout;
                a.retry_cnt = c.retry_count;
                a.rnr_retry = c.rnr_retry_count;
                a.max_rd_atomic = c.initiator_depth;
                Ok((
                    a,
                    M::STATE
                        | M::SQ_PSN
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::MAX_QP_RD_ATOMIC,
                ))
            }
            _ => Err(CmError::InvalidState(c.state)),
        }
    }

    // ---- receiving ----------------------------------------------------------------------

    fn dispatch(&mut self, now: Instant, port: CmPort, from: MadAddr, mad: &Mad) {
        let attr = AttrId(mad.header.attr_id);
        let msg = match CmMessage::from_mad(mad) {
            Ok(m) => m,
            Err(_) => {
                self.counters.rx_malformed += 1;
                return;
            }
        };
        CmCounters::bump(&mut self.counters.rx, attr);
        let tid = mad.header.tid;
        match msg {
            CmMessage::Req(r) => self.req_handler(now, (port, from), tid, mad.header.attr_mod, r),
            CmMessage::Mra(r) => self.mra_handler(now, r),
            CmMessage::Rej(r) => self.rej_handler(now, r),
            CmMessage::Rep(r) => self.rep_handler(now, (port, from), tid, r),
            CmMessage::Rtu(r) => self.rtu_handler(r),
            CmMessage::Dreq(r) => self.dreq_handler(now, (port, from), tid, r),
            CmMessage::Drep(r) => self.drep_handler(now, r),
            CmMessage::SidrReq(r) => self.sidr_req_handler(now, (port, from), tid, r),
            CmMessage::SidrRep(r) => self.sidr_rep_handler(r),
            _ => self.counters.rx_dropped += 1,
        }
    }

    fn dup(&mut self, a: AttrId) {
        CmCounters::bump(&mut self.counters.rx_duplicates, a);
    }

    /// `cm_issue_rej`: a REJ with no id behind it; the comm IDs are the received message's,
    /// swapped (so a REQ's zero "remote comm ID" becomes the REJ's local comm ID).
    fn issue_rej(
        &mut self,
        now: Instant,
        (port, to): (CmPort, MadAddr),
        tid: u64,
        (rcv_local, rcv_remote): (u32, u32),
        reason: RejectReason,
        msg: RejMessage,
    ) {
        let rej = RejRepr {
            local_comm_id: rcv_remote,
            remote_comm_id: rcv_local,
            message_rejected: msg,
            reject_info_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; softrdma_wire::cm::REJ_PRIVATE_DATA_LEN],
        };
        self.send_once(now, port, to, CmMessage::Rej(rej).to_mad(tid, 0));
    }

    /// `cm_req_handler`.
    fn req_handler(
        &mut self,
        now: Instant,
        (port, from): (CmPort, MadAddr),
        tid: u64,
        attr_mod: u32,
        req: ReqRepr,
    ) {
        let guid = req.local_ca_guid.0;
        // cm_match_req: a REQ we already know (by remote comm ID and CA GUID)?
        if let Some(&old) = self.remote_ids.get(&(req.local_comm_id, guid)) {
            self.dup(AttrId::REQ);
            let Some(c) = self.conns.get(&old).filter(|c| !c.zombie) else {
                return;
            };
            match c.state {
                CmState::MraReqSent => self.resend_mra(now, old, MraMessage::REQ),
                CmState::Timewait => {
                    let mad = self.rej_mad(old, c, RejectReason::STALE_CONN, &[], &[]);
                    let mut mad = mad;
                    mad.header.tid = tid;
                    self.send_once(now, port, from, mad);
                }
                _ => {}
            }
            return;
        }
        // A second connection from the same remote QP: stale.
        if let Some(&old) = self.remote_qpns.get(&(req.local_qpn, guid)) {
            self.issue_rej(
                now,
                (port, from),
                tid,
                (req.local_comm_id, 0),
                RejectReason::STALE_CONN,
                RejMessage::REQ,
            );
            if self.conns.get(&old).map(|c| c.state) == Some(CmState::Established) {
                self.issue_dreq(now, old, &[]);
            }
            return;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            self.issue_rej(
                now,
                (port, from),
                tid,
                (req.local_comm_id, 0),
                RejectReason::INVALID_SERVICE_ID,
                RejMessage::REQ,
            );
            return;
        };
        let id = self.alloc_local_id();
        let mut c = Conn::new();
        c.port = port;
        c.peer = Some(from);
        c.tid = tid;
        c.service_id = req.service_id;
        c.remote_id = req.local_comm_id;
        c.remote_ca_guid = guid;
        c.remote_qpn = req.local_qpn;
        // cm_format_paths_from_req: the packet lifetime is the local ACK timeout minus one;
        // the REP/DREQ wait is cvt(REQ.local_cm_response_timeout).
        let plt = req.primary_path.local_ack_timeout.saturating_sub(1);
        c.av_timeout = plt + 1;
        c.timeout = cm_convert_to_ms(req.local_cm_response_timeout);
        c.max_cm_retries = req.max_cm_retries;
        // Our view of the path: the REQ's, with local and remote swapped.
        let mut path = req.primary_path;
        std::mem::swap(&mut path.local_gid, &mut path.remote_gid);
        std::mem::swap(&mut path.local_lid, &mut path.remote_lid);
        c.path = path;
        c.path_mtu = req.path_mtu;
        c.pkey = req.partition_key;
        c.sq_psn = req.starting_psn;
        c.responder_resources = req.initiator_depth;
        c.initiator_depth = req.responder_resources;
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        self.conns.insert(id, c);
        self.remote_ids.insert((req.local_comm_id, guid), id);
        self.remote_qpns.insert((req.local_qpn, guid), id);
        self.set_state(id, CmState::ReqRcvd);
        self.events.push_back(CmEvent::ReqReceived {
            id: CmId(id),
            listen: CmIdRef(listen),
            req: Box::new(ReqInfo {
                req,
                port,
                peer: from,
                attr_mod,
            }),
        });
    }

    /// `cm_rep_handler`.
    fn rep_handler(
        &mut self,
        now: Instant,
        (port, from): (CmPort, MadAddr),
        tid: u64,
        rep: RepRepr,
    ) {
        let id = rep.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| !c.zombie) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let (st, rtu, peer) = (c.state, c.last_rtu.clone(), c.peer);
        match st {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            // cm_dup_rep_handler
            CmState::Established => {
                self.dup(AttrId::REP);
                if let (Some(m), Some(p)) = (rtu, peer) {
                    self.send_once(now, port, p, m);
                }
                return;
            }
            CmState::MraRepSent => {
                self.dup(AttrId::REP);
                self.resend_mra(now, id, MraMessage::REP);
                return;
            }
            _ => {
                self.dup(AttrId::REP);
                return;
            }
        }
        let guid = rep.local_ca_guid.0;
        if self.remote_ids.contains_key(&(rep.local_comm_id, guid)) {
            // A REP whose remote ID we already know (cm_insert_remote_id fails): dropped.
            self.dup(AttrId::REP);
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(rep.local_qpn, guid)) {
            // Stale connection: REJ STALE_CONN for the REP, DREQ to the old connection.
            self.issue_rej(
                now,
                (port, from),
                tid,
                (rep.local_comm_id, id),
                RejectReason::STALE_CONN,
                RejMessage::REP,
            );
            if c_state(&self.conns, old) == Some(CmState::Established) {
                self.issue_dreq(now, old, &[]);
            }
            return;
        }
        self.cancel_msg(id);
        let ack_delay = rep.target_ack_delay;
        if let Some(c) = self.conns.get_mut(&id) {
            c.remote_id = rep.local_comm_id;
            c.remote_ca_guid = guid;
            c.remote_qpn = rep.local_qpn;
            c.sq_psn = rep.starting_psn; // cm_rep_handler
            c.initiator_depth = rep.responder_resources;
            c.responder_resources = rep.initiator_depth;
            c.av_timeout = cm_ack_timeout(ack_delay, c.av_timeout.saturating_sub(1));
        }
        self.remote_ids.insert((rep.local_comm_id, guid), id);
        self.remote_qpns.insert((rep.local_qpn, guid), id);
        self.set_state(id, CmState::RepRcvd);
        self.events.push_back(CmEvent::RepReceived {
            id: CmIdRef(id),
            rep: Box::new(rep),
        });
    }

    /// `cm_rtu_handler`.
    fn rtu_handler(&mut self, rtu: RtuRepr) {
        let id = rtu.remote_comm_id;
        let st = self.conns.get(&id).filter(|c| !c.zombie).map(|c| c.state);
        match st {
            Some(CmState::RepSent | CmState::MraRepRcvd) => {
                self.cancel_msg(id);
                self.set_state(id, CmState::Established);
                self.events
                    .push_back(CmEvent::RtuReceived { id: CmIdRef(id) });
            }
            Some(_) => self.dup(AttrId::RTU),
            None => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_mra_handler`.
    fn mra_handler(&mut self, now: Instant, mra: MraRepr) {
        let id = mra.remote_comm_id;
        let Some(c) = self.conns.get(&id).filter(|c| !c.zombie) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let (st, msg, av_timeout) = (c.state, c.msg, c.av_timeout);
        let to = match (st, mra.message_mraed) {
            (CmState::ReqSent, MraMessage::REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, MraMessage::REP) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                // A repeated MRA: counted and dropped; the wait is not extended again.
                self.dup(AttrId::MRA);
                return;
            }
            _ => {
                self.counters.rx_dropped += 1;
                return;
            }
        };
        // ib_modify_mad(msg, cvt(service_timeout) + cvt(av.timeout)).
        let timeout = cm_convert_to_ms(mra.service_timeout) + cm_convert_to_ms(av_timeout);
        if let Some(m) = msg {
            let port = c.port;
            self.out.push_back((
                port,
                MadOp::Modify {
                    id: m,
                    at: now,
                    timeout,
                },
            ));
        }
        self.set_state(id, to);
        self.events.push_back(CmEvent::MraReceived {
            id: CmIdRef(id),
            service_timeout: mra.service_timeout,
        });
    }

    /// `cm_rej_handler`.
    fn rej_handler(&mut self, now: Instant, rej: RejRepr) {
        // cm_acquire_rejected_id: a REJ TIMEOUT is found by (its local comm ID, the GUID in
        // its ARI) in the remote-ID table; a REJ of a REQ by its remote comm ID alone; any
        // other by both comm IDs.
        let id = if rej.reason == RejectReason::TIMEOUT {
            let guid = u64::from_be_bytes(pad::<8>(&rej.ari));
            self.remote_ids.get(&(rej.local_comm_id, guid)).copied()
        } else if rej.message_rejected == RejMessage::REQ {
            Some(rej.remote_comm_id)
        } else {
            Some(rej.remote_comm_id).filter(|i| {
                self.conns
                    .get(i)
                    .is_some_and(|c| c.remote_id == rej.local_comm_id)
            })
        };
        let Some(id) = id else {
            self.counters.rx_dropped += 1;
            return;
        };
        let Some(st) = self.conns.get(&id).filter(|c| !c.zombie).map(|c| c.state) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let stale = rej.reason == RejectReason::STALE_CONN;
        match st {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                self.cancel_msg(id);
                if stale {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
            }
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                self.enter_timewait(now, id);
            }
            _ => {
                self.counters.rx_dropped += 1;
                return;
            }
        }
        self.events.push_back(CmEvent::RejReceived {
            id: CmIdRef(id),
            rej: Box::new(rej),
        });
    }

    /// `cm_dreq_handler`.
    fn dreq_handler(
        &mut self,
        now: Instant,
        (port, from): (CmPort, MadAddr),
        tid: u64,
        dreq: DreqRepr,
    ) {
        let id = dreq.remote_comm_id;
        let found = self
            .conns
            .get(&id)
            .filter(|c| !c.zombie && c.remote_id == dreq.local_comm_id)
            .map(|c| (c.state, c.local_qpn));
        let Some((st, local_qpn)) = found else {
            // cm_issue_drep: a DREP with no id behind it (counted as a duplicate DREQ).
            self.dup(AttrId::DREQ);
            let drep = DrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; softrdma_wire::cm::DREP_PRIVATE_DATA_LEN],
            };
            self.send_once(now, port, from, CmMessage::Drep(drep).to_mad(tid, 0));
            return;
        };
        if local_qpn != dreq.remote_qpn_eecn {
            self.counters.rx_dropped += 1;
            return;
        }
        match st {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established | CmState::DreqSent => {
                self.cancel_msg(id);
                if let Some(c) = self.conns.get_mut(&id) {
                    // The DREP answers with the DREQ's TID.
                    c.tid = tid;
                }
                self.set_state(id, CmState::DreqRcvd);
                self.events.push_back(CmEvent::DreqReceived {
                    id: CmIdRef(id),
                    private_data: dreq.private_data.to_vec(),
                });
            }
            CmState::Timewait => {
                // The DREP again (cm_format_drep: the stored TID).
                self.dup(AttrId::DREQ);
                // cm_format_drep from the id, even if it never sent one (e.g. it entered
                // TIMEWAIT through a REJ).
                let m = self.conns.get(&id).map(|c| {
                    c.last_drep.clone().unwrap_or_else(|| {
                        let drep = DrepRepr {
                            local_comm_id: id,
                            remote_comm_id: c.remote_id,
                            private_data: [0; softrdma_wire::cm::DREP_PRIVATE_DATA_LEN],
                        };
                        CmMessage::Drep(drep).to_mad(c.tid, 0)
                    })
                });
                if let Some(m) = m {
                    self.send_once(now, port, from, m);
                }
            }
            CmState::DreqRcvd => self.dup(AttrId::DREQ),
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_drep_handler`.
    fn drep_handler(&mut self, now: Instant, drep: DrepRepr) {
        let id = drep.remote_comm_id;
        match self.conns.get(&id).filter(|c| !c.zombie).map(|c| c.state) {
            Some(CmState::DreqSent | CmState::DreqRcvd) => {
                self.enter_timewait(now, id);
                self.events
                    .push_back(CmEvent::DrepReceived { id: CmIdRef(id) });
            }
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_sidr_req_handler`.
    fn sidr_req_handler(
        &mut self,
        now: Instant,
        (port, from): (CmPort, MadAddr),
        tid: u64,
        req: SidrReqRepr,
    ) {
        let key = (req.request_id, from.gid.0);
        if self.remote_sidr.contains_key(&key) {
            self.dup(AttrId::SIDR_REQ);
            return;
        }
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            let rep = SidrRepRepr {
                request_id: req.request_id,
                status: SidrStatus::UNSUPPORTED,
                additional_info_length: 0,
                vendor_id_h: 0,
                qpn: 0,
                vendor_id_l: 0,
                service_id: req.service_id,
                qkey: 0,
                additional_info: [0; softrdma_wire::cm::SIDR_REP_INFO_LEN],
                private_data: [0; softrdma_wire::cm::SIDR_REP_PRIVATE_DATA_LEN],
            };
            self.send_once(now, port, from, CmMessage::SidrRep(rep).to_mad(tid, 0));
            return;
        };
        let id = self.alloc_local_id();
        let mut c = Conn::new();
        c.port = port;
        c.peer = Some(from);
        c.tid = tid;
        c.service_id = req.service_id;
        c.sidr_request_id = req.request_id;
        c.pkey = req.partition_key;
        self.conns.insert(id, c);
        self.remote_sidr.insert(key, id);
        self.set_state(id, CmState::SidrReqRcvd);
        self.events.push_back(CmEvent::SidrReqReceived {
            id: CmId(id),
            listen: CmIdRef(listen),
            req: Box::new(req),
            peer: from,
        });
    }

    /// `cm_sidr_rep_handler`.
    fn sidr_rep_handler(&mut self, rep: SidrRepRepr) {
        let id = rep.request_id;
        match self.conns.get(&id).filter(|c| !c.zombie).map(|c| c.state) {
            Some(CmState::SidrReqSent) => {
                self.cancel_msg(id);
                self.set_state(id, CmState::Idle);
                self.events.push_back(CmEvent::SidrRepReceived {
                    id: CmIdRef(id),
                    rep: Box::new(rep),
                });
            }
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// A fresh random value from the endpoint's generator (e.g. a starting PSN).
    pub fn random_psn(&mut self) -> u32 {
        self.rng.next_psn()
    }
}

fn c_state(conns: &BTreeMap<u32, Conn>, id: u32) -> Option<CmState> {
    conns.get(&id).map(|c| c.state)
}
