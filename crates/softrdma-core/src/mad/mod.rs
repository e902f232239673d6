//! The MAD layer (`docs/architecture.md`): the GSI agent on QP1 — agent registration and transaction
//! IDs, sends with timeout and retries, response matching and unsolicited delivery — modelled
//! on the kernel's `drivers/infiniband/core/mad.c` (`ib_register_mad_agent`, `ib_post_send_mad`,
//! `ib_modify_mad`, `ib_cancel_mad`, `ib_mad_recv_done`), sans-IO.
//!
//! [`MadAgent`] knows nothing of QPs: MADs to send come out of [`MadAgent::poll_transmit`],
//! received MAD bytes go into [`MadAgent::handle_receive`], time comes in as a parameter.
//! [`gsi::GsiPort`] binds it to a [`crate::Stack`]'s QP1 with ordinary verbs (post_send /
//! post_recv / poll_cq), so every (re)transmission is a new UD SEND and takes the next BTH PSN,
//! as on the kernel's wire.
//!
//! Semantics (kernel behaviour, with the few deliberate differences marked):
//! - **hi_tid**: every registered agent gets one, allocated cyclically in `0..2^24` like
//!   `xa_alloc_cyclic(&ib_mad_clients, .., XA_LIMIT(0, (1 << 24) - 1), &ib_mad_client_next)`
//!   (mad.c). The kernel's first free value is 0; on an rxe host `ib_agent` (agent.c, the QP1
//!   agent that answers on behalf of nobody) takes 0 and `ib_sa` takes 1 before `ib_cm`
//!   registers, which is why the CM's TIDs read `0x00000002_xxxxxxxx` in the captures.
//!   [`MadAgent::new`] starts at 0 like the kernel; [`MadAgent::with_first_hi_tid`] (e.g. 2)
//!   reproduces the kernel's CM numbering without placeholder agents. TIDs are formed by
//!   the client: [`form_tid`] (`cm_form_tid`: `hi_tid << 32 | low`).
//! - **send**: with `expects_response` (the kernel's `timeout_ms != 0`), a send is
//!   outstanding until a matching response arrives ([`SendStatus::Ok`]), its retries run out
//!   ([`SendStatus::TimedOut`], the kernel's `IB_WC_RESP_TIMEOUT_ERR`), or it is cancelled
//!   ([`SendStatus::Canceled`], `IB_WC_WR_FLUSH_ERR`). `retries` counts *re*transmissions:
//!   `1 + retries` copies go out at most, each `timeout` after the previous one, all with the
//!   same TID (mad.c `retry_send`). Without `expects_response` the send completes `Ok` as soon
//!   as it is handed out by `poll_transmit` (the kernel: on the send WC). Difference: the
//!   kernel starts the wait at the send completion; here at `send()` / the retransmission
//!   (for a UD QP the completion is immediate, so the times agree).
//! - **modify_timeout** = `ib_modify_mad`: the wait restarts *now* with the new timeout,
//!   which also becomes the timeout of the remaining retries (the kernel stores it in
//!   `send_buf.timeout_ms`); the retry count is not reset. A zero timeout cancels.
//! - **receive** (`ib_mad_recv_done` → `validate_mad` → `find_mad_agent`):
//!   a MAD shorter than 256 bytes, with base version ≠ 1, an SMP class (0x01/0x81: QP0 only),
//!   or a CM MAD whose method is not Send() (except ClassPortInfo) is dropped and counted.
//!   A response (`ib_response_mad`: the R bit, or TrapRepress) goes to the agent whose hi_tid
//!   is the TID's top 32 bits, and only if it matches an outstanding send by TID, class and
//!   peer GID (`ib_find_send_mad`); otherwise it is dropped (duplicates land here). A request
//!   goes to the agent registered for its (class, class version). When no agent takes a
//!   Get() or Set(), the MAD is answered as `generate_unmatched_resp` does: a copy with method
//!   GetResp() and status 0x000C ("unsupported method/attribute combination"); other
//!   methods are dropped silently.
//!   Requests are routed by (class, class version, method): [`MadAgent::register`] takes
//!   every request method, [`MadAgent::register_methods`] a set (ib_cm takes Send() only).
//! - Not done: RMPP, the BM class's response bit, vendor classes' OUI routing, flow control
//!   of outstanding solicited MADs, P_Key-based agent security.

pub mod gsi;
pub mod port;

pub use port::MadPort;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use softrdma_wire::mad::{Mad, MadStatus, Method, MgmtClass, BASE_VERSION, MAD_LEN};
use softrdma_wire::Gid;

use crate::time::{Duration, Instant};
use crate::verbs::{GSI_QKEY, GSI_QPN};

/// The largest hi_tid (`XA_LIMIT(0, (1 << 24) - 1)` in mad.c).
pub const MAX_HI_TID: u32 = (1 << 24) - 1;
/// The class versions the kernel's agent tables have room for (`MAX_MGMT_VERSION`).
pub const MAX_MGMT_VERSION: u8 = 8;
/// The status of `generate_unmatched_resp` (`IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB`).
pub const STATUS_UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000c;
/// ClassPortInfo's attribute ID (the one non-Send() CM MAD `validate_mad` lets through).
const CLASS_PORT_INFO: u16 = 0x0001;

/// A transaction ID as ib_cm forms it (`cm_form_tid`): the agent's hi_tid on top.
pub fn form_tid(agent: AgentId, low: u32) -> u64 {
    (u64::from(agent.0) << 32) | u64::from(low)
}

/// A registered agent; its number is its hi_tid.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct AgentId(pub u32);

impl AgentId {
    /// The agent's hi_tid (the top 32 bits of the TIDs it forms).
    pub fn hi_tid(&self) -> u32 {
        self.0
    }
}

/// One send, from [`MadAgent::send`] until its [`MadEvent::SendCompleted`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SendId(pub u64);

/// Where a MAD goes or came from: the peer's GID (on RoCEv2 its IP address) and QP, as an
/// address handle plus `wr.ud` (remote QPN and Q_Key) describe it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MadAddr {
    pub gid: Gid,
    /// The remote QP (1 for the GSI; a received MAD's source QP).
    pub qpn: u32,
    /// The Q_Key for the DETH (QP1's well-known 0x80010000).
    pub qkey: u32,
    /// Our P_Key index it arrived on / goes out on.
    pub pkey_index: u16,
    /// The traffic class (IP TOS) of the path: what the kernel's CM puts in its MADs' AH
    /// (`cm_init_av_by_path`); the RDMA CM's TOS option. 0 for a received MAD (the socket
    /// does not report the TOS it arrived with).
    pub traffic_class: u8,
}

impl MadAddr {
    /// A peer's GSI QP (QP1, Q_Key 0x80010000, P_Key index 0).
    pub fn gsi(gid: Gid) -> MadAddr {
        MadAddr {
            gid,
            qpn: GSI_QPN,
            qkey: GSI_QKEY,
            pkey_index: 0,
            traffic_class: 0,
        }
    }

    /// The same address with traffic class `tc`.
    pub fn with_traffic_class(mut self, tc: u8) -> MadAddr {
        self.traffic_class = tc;
        self
    }
}

/// How a MAD is sent (the kernel's `ib_mad_send_buf.timeout_ms` / `.retries`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SendParams {
    /// Time to wait for an answer after each transmission.
    pub timeout: Duration,
    /// Retransmissions after the first transmission.
    pub retries: u32,
    /// Stay outstanding (retransmitting) until answered, timed out or cancelled. The CM sets
    /// it for REQ/REP/DREQ/LAP/SIDR_REQ although their answers are Send()s it matches itself
    /// (and then cancels the send).
    pub expects_response: bool,
}

impl SendParams {
    /// A fire-and-forget send (RTU, DREP, REJ, MRA, GetResp...).
    pub const ONCE: SendParams = SendParams {
        timeout: Duration::ZERO,
        retries: 0,
        expects_response: false,
    };
}

/// How a send ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendStatus {
    /// Sent (no answer expected) or answered by a matching response.
    Ok,
    /// Every transmission went unanswered (`IB_WC_RESP_TIMEOUT_ERR`).
    TimedOut,
    /// [`MadAgent::cancel`], a zero [`MadAgent::modify_timeout`], or the agent was
    /// unregistered (`IB_WC_WR_FLUSH_ERR`).
    Canceled,
}

/// What the MAD layer tells its agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MadEvent {
    /// A MAD for `agent`: a response to our send `response_to`, or an unsolicited one.
    Received {
        agent: AgentId,
        mad: Box<Mad>,
        from: MadAddr,
        response_to: Option<SendId>,
    },
    /// A send is over (after the `Received` of the response that ended it, as in mad.c).
    SendCompleted {
        agent: AgentId,
        id: SendId,
        status: SendStatus,
    },
    /// A send's wait ended unanswered and a copy went back on the queue (mad.c
    /// `retry_send`; the kernel tells its clients only the total at completion, ib_cm counts
    /// `cm_tx_retries` from it). `attempt` is the retransmission's number (1 = first
    /// retransmission), `retries_left` how many may follow, `next_deadline` when this copy's
    /// wait ends.
    Retransmitted {
        agent: AgentId,
        id: SendId,
        attempt: u32,
        retries_left: u32,
        next_deadline: Instant,
    },
}

impl MadEvent {
    /// The agent the event is for.
    pub fn agent(&self) -> AgentId {
        match self {
            MadEvent::Received { agent, .. }
            | MadEvent::SendCompleted { agent, .. }
            | MadEvent::Retransmitted { agent, .. } => *agent,
        }
    }
}

/// What a client asks of the MAD layer it is registered with, as data: a client that serves
/// several ports (the CM) queues these per port and the runtime applies each to that port's
/// [`MadAgent`] with [`MadAgent::apply`], in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MadOp {
    /// `ib_post_send_mad`, under an id the client chose (unique among its outstanding
    /// sends). `at` is when the client decided to send: the first wait starts then.
    Send {
        id: SendId,
        at: Instant,
        dest: MadAddr,
        mad: Box<Mad>,
        params: SendParams,
    },
    /// `ib_cancel_mad`.
    Cancel(SendId),
    /// `ib_modify_mad` at time `at`.
    Modify {
        id: SendId,
        at: Instant,
        timeout: Duration,
    },
}

/// A MAD to put on QP1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutMad {
    pub dest: MadAddr,
    pub mad: Box<Mad>,
    /// The agent and send it belongs to (`None`: an answer the layer generated itself).
    pub send: Option<(AgentId, SendId)>,
    /// 0 for the first transmission, n for the n-th retransmission.
    pub attempt: u32,
}

/// Why a call failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MadError {
    /// Another agent already has this class and version.
    ClassTaken,
    /// Class version out of range (`MAX_MGMT_VERSION`).
    BadClassVersion,
    /// Every hi_tid is in use.
    NoHiTid,
    /// No such agent.
    NoSuchAgent,
    /// No such outstanding send (completed, cancelled, or never sent).
    NoSuchSend,
    /// The client's send id is already outstanding.
    SendIdInUse,
}

impl fmt::Display for MadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MadError::ClassTaken => "class/version already registered",
            MadError::BadClassVersion => "class version out of range",
            MadError::NoHiTid => "no free hi_tid",
            MadError::NoSuchAgent => "no such MAD agent",
            MadError::NoSuchSend => "no such outstanding send",
            MadError::SendIdInUse => "send id already outstanding for this agent",
        })
    }
}

impl std::error::Error for MadError {}

/// Drops and work of the layer (the kernel has no such counters; these make drops visible).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct MadCounters {
    /// MADs handed to `poll_transmit`, retransmissions included.
    pub tx: u64,
    /// Retransmissions after a timeout.
    pub retransmits: u64,
    /// Sends that ended `TimedOut`.
    pub timeouts: u64,
    /// MADs received and delivered to an agent.
    pub rx_delivered: u64,
    /// Shorter than a MAD.
    pub rx_malformed: u64,
    /// Base version not 1.
    pub rx_bad_base_version: u64,
    /// `validate_mad` refusals: SMP class on QP1, CM non-Send() method.
    pub rx_invalid: u64,
    /// No agent for the request's class/version or the response's hi_tid.
    pub rx_no_agent: u64,
    /// Responses matching no outstanding send (late or duplicate).
    pub rx_unmatched_response: u64,
    /// GetResp "unsupported method/attribute" answers generated.
    pub unsupported_replies: u64,
}

#[derive(Clone, Debug)]
struct Registration {
    class: MgmtClass,
    class_version: u8,
    /// Request methods taken (`None`: all).
    methods: Option<Vec<Method>>,
}

#[derive(Clone, Debug)]
struct Pending {
    agent: AgentId,
    dest: MadAddr,
    mad: Box<Mad>,
    timeout: Duration,
    retries_left: u32,
    /// Retransmissions so far.
    retransmissions: u32,
    attempts: u32,
    /// When the current wait ends (`None`: not waiting, i.e. no response expected).
    deadline: Option<Instant>,
    /// The sequence number of this send's copy in the transmit queue (`None`: none queued).
    queued: Option<u64>,
}

impl Pending {
    /// The response-matching key (`ib_find_send_mad`: agent, TID, class, peer GID).
    fn match_key(&self, key: SendKey) -> MatchKey {
        (
            self.agent,
            self.mad.header.tid,
            self.mad.header.mgmt_class.0,
            self.dest.gid.0,
            key,
        )
    }
}

/// An outstanding send: the client's agent and its id.
type SendKey = (AgentId, SendId);
/// (agent, TID, class, peer GID, send): the index responses are matched by.
type MatchKey = (AgentId, u64, u8, [u8; 16], SendKey);

/// The GSI MAD layer of one port.
///
/// Every per-event operation is O(log n) in the number of outstanding sends: besides the
/// sends themselves (by agent and id) the layer keeps them by id alone (for the layer-chosen
/// ids of [`MadAgent::cancel`] / [`MadAgent::modify_timeout`]), by deadline (the next
/// timeout and the due sends without a scan) and by (agent, TID, class, peer GID) for
/// response matching. A send that ends while its copy waits in the transmit queue leaves the
/// copy there, stale, and [`MadAgent::poll_transmit`] skips it.
#[derive(Clone, Debug)]
pub struct MadAgent {
    agents: BTreeMap<AgentId, Registration>,
    next_hi_tid: u32,
    next_send: u64,
    /// Keyed by agent and send id: each client numbers its own sends.
    pending: BTreeMap<(AgentId, SendId), Pending>,
    /// The same sends by (id, agent).
    by_id: BTreeSet<(SendId, AgentId)>,
    /// Sends waiting for a response, by the end of their wait.
    deadlines: BTreeSet<(Instant, SendKey)>,
    /// Sends waiting for a response, by what a response must match.
    matching: BTreeSet<MatchKey>,
    /// The transmit queue: (sequence number, MAD); a send's entry is live while its
    /// `Pending::queued` names that number.
    out: VecDeque<(u64, OutMad)>,
    next_seq: u64,
    events: VecDeque<MadEvent>,
    counters: MadCounters,
}

impl Default for MadAgent {
    fn default() -> Self {
        Self::new()
    }
}

impl MadAgent {
    /// An empty layer; the first agent gets hi_tid 0, as in the kernel.
    pub fn new() -> MadAgent {
        Self::with_first_hi_tid(0)
    }

    /// An empty layer whose first agent gets hi_tid `first` (2 reproduces the kernel's
    /// ib_cm on an rxe host, see the module docs).
    pub fn with_first_hi_tid(first: u32) -> MadAgent {
        MadAgent {
            agents: BTreeMap::new(),
            next_hi_tid: first.min(MAX_HI_TID),
            // Ids chosen by the layer itself sit in the top half, clients' ids below.
            next_send: 1 << 63,
            pending: BTreeMap::new(),
            by_id: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            matching: BTreeSet::new(),
            out: VecDeque::new(),
            next_seq: 0,
            events: VecDeque::new(),
            counters: MadCounters::default(),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &MadCounters {
        &self.counters
    }

    /// `ib_register_mad_agent` for every request method of (`class`, `class_version`).
    pub fn register(&mut self, class: MgmtClass, class_version: u8) -> Result<AgentId, MadError> {
        self.register_methods(class, class_version, None)
    }

    /// `ib_register_mad_agent` with a method mask: only requests with one of `methods` are
    /// delivered to the agent (`None`: all of them). ib_cm registers Send() only, so a CM
    /// ClassPortInfo Get() finds no agent and is answered "unsupported"; registering
    /// `Some(&[Method::SEND])` for the CM reproduces that. Agents of one class and version
    /// may share it with disjoint methods.
    pub fn register_methods(
        &mut self,
        class: MgmtClass,
        class_version: u8,
        methods: Option<&[Method]>,
    ) -> Result<AgentId, MadError> {
        if class_version >= MAX_MGMT_VERSION {
            return Err(MadError::BadClassVersion);
        }
        let methods: Option<Vec<Method>> = methods.map(|m| m.to_vec());
        let overlaps = |r: &Registration| match (&r.methods, &methods) {
            (Some(a), Some(b)) => a.iter().any(|m| b.contains(m)),
            _ => true,
        };
        if self
            .agents
            .values()
            .any(|r| r.class == class && r.class_version == class_version && overlaps(r))
        {
            return Err(MadError::ClassTaken);
        }
        // Cyclic allocation: from next_hi_tid upwards, wrapping to 0, skipping used ones.
        let start = self.next_hi_tid;
        let mut id = start;
        loop {
            if !self.agents.contains_key(&AgentId(id)) {
                break;
            }
            id = if id >= MAX_HI_TID { 0 } else { id + 1 };
            if id == start {
                return Err(MadError::NoHiTid);
            }
        }
        self.next_hi_tid = if id >= MAX_HI_TID { 0 } else { id + 1 };
        let agent = AgentId(id);
        self.agents.insert(
            agent,
            Registration {
                class,
                class_version,
                methods,
            },
        );
        Ok(agent)
    }

    /// `ib_unregister_mad_agent`: its outstanding sends end `Canceled`.
    pub fn unregister(&mut self, agent: AgentId) -> Result<(), MadError> {
        self.agents.remove(&agent).ok_or(MadError::NoSuchAgent)?;
        let keys: Vec<SendKey> = self
            .pending
            .range((agent, SendId(0))..=(agent, SendId(u64::MAX)))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.finish(k, SendStatus::Canceled);
        }
        Ok(())
    }

    /// Unregisters `agent` ([`MadAgent::unregister`]) and makes its hi_tid the next one
    /// handed out, so a class that moves its registration (a runtime that moves a port
    /// from one node to another re-registers the CM on it) keeps the hi_tid — and the
    /// TIDs — it had, as the kernel's ib_cm keeps its own for the life of the port.
    pub fn unregister_for_reuse(&mut self, agent: AgentId) -> Result<(), MadError> {
        self.unregister(agent)?;
        self.next_hi_tid = agent.0;
        Ok(())
    }

    /// `ib_post_send_mad`: queues `mad` for `dest` under an id the layer chooses; the caller
    /// set its TID (see [`form_tid`]).
    pub fn send(
        &mut self,
        now: Instant,
        agent: AgentId,
        dest: MadAddr,
        mad: Mad,
        params: SendParams,
    ) -> Result<SendId, MadError> {
        let id = SendId(self.next_send);
        self.next_send += 1;
        self.send_as(now, agent, id, dest, Box::new(mad), params)?;
        Ok(id)
    }

    /// [`MadAgent::send`] under the client's own id (see [`MadOp::Send`]).
    pub fn send_as(
        &mut self,
        now: Instant,
        agent: AgentId,
        id: SendId,
        dest: MadAddr,
        mad: Box<Mad>,
        params: SendParams,
    ) -> Result<(), MadError> {
        if !self.agents.contains_key(&agent) {
            return Err(MadError::NoSuchAgent);
        }
        let key = (agent, id);
        if self.pending.contains_key(&key) {
            return Err(MadError::SendIdInUse);
        }
        let seq = self.enqueue(OutMad {
            dest,
            mad: mad.clone(),
            send: Some(key),
            attempt: 0,
        });
        let p = Pending {
            agent,
            dest,
            mad,
            timeout: params.timeout,
            retries_left: params.retries,
            retransmissions: 0,
            attempts: 0,
            deadline: params.expects_response.then(|| now + params.timeout),
            queued: Some(seq),
        };
        if let Some(d) = p.deadline {
            self.deadlines.insert((d, key));
            self.matching.insert(p.match_key(key));
        }
        self.by_id.insert((id, agent));
        self.pending.insert(key, p);
        Ok(())
    }

    /// Puts a MAD on the transmit queue; returns its sequence number.
    fn enqueue(&mut self, o: OutMad) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.out.push_back((seq, o));
        seq
    }

    /// Carries out a client's [`MadOp`] for `agent`.
    pub fn apply(&mut self, agent: AgentId, op: MadOp) -> Result<(), MadError> {
        match op {
            MadOp::Send {
                id,
                at,
                dest,
                mad,
                params,
            } => self.send_as(at, agent, id, dest, mad, params),
            MadOp::Cancel(id) => self.cancel_key((agent, id)),
            MadOp::Modify { id, at, timeout } => self.modify_key(at, (agent, id), timeout),
        }
    }

    /// The key of a layer-chosen id (unique across agents).
    fn key_of(&self, id: SendId) -> Option<SendKey> {
        self.by_id
            .range((id, AgentId(0))..=(id, AgentId(u32::MAX)))
            .next()
            .map(|&(s, a)| (a, s))
    }

    /// `ib_modify_mad` (what an MRA does): the wait restarts now with `timeout`, which the
    /// remaining retries use too. A zero timeout cancels the send.
    pub fn modify_timeout(
        &mut self,
        now: Instant,
        id: SendId,
        timeout: Duration,
    ) -> Result<(), MadError> {
        let key = self.key_of(id).ok_or(MadError::NoSuchSend)?;
        self.modify_key(now, key, timeout)
    }

    fn modify_key(
        &mut self,
        now: Instant,
        key: SendKey,
        timeout: Duration,
    ) -> Result<(), MadError> {
        let p = self.pending.get_mut(&key).ok_or(MadError::NoSuchSend)?;
        if timeout == Duration::ZERO {
            self.finish(key, SendStatus::Canceled);
            return Ok(());
        }
        p.timeout = timeout;
        if let Some(old) = p.deadline {
            let new = now + timeout;
            p.deadline = Some(new);
            self.deadlines.remove(&(old, key));
            self.deadlines.insert((new, key));
        }
        Ok(())
    }

    /// `ib_cancel_mad`: the send ends `Canceled` (no more retransmissions).
    pub fn cancel(&mut self, id: SendId) -> Result<(), MadError> {
        let key = self.key_of(id).ok_or(MadError::NoSuchSend)?;
        self.cancel_key(key)
    }

    fn cancel_key(&mut self, key: SendKey) -> Result<(), MadError> {
        if !self.pending.contains_key(&key) {
            return Err(MadError::NoSuchSend);
        }
        self.finish(key, SendStatus::Canceled);
        Ok(())
    }

    /// Whether `id` (a layer-chosen id) is still outstanding.
    pub fn is_pending(&self, id: SendId) -> bool {
        self.key_of(id).is_some()
    }

    /// Whether `agent`'s send `id` is still outstanding.
    pub fn is_pending_for(&self, agent: AgentId, id: SendId) -> bool {
        self.pending.contains_key(&(agent, id))
    }

    /// How many sends are outstanding (all agents).
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    fn finish(&mut self, key: SendKey, status: SendStatus) {
        if let Some(p) = self.pending.remove(&key) {
            // A copy not yet handed out is withdrawn (the kernel cannot recall a posted WR,
            // but nothing here has been posted until poll_transmit): its queue entry is
            // stale from now on and poll_transmit skips it.
            self.by_id.remove(&(key.1, key.0));
            if let Some(d) = p.deadline {
                self.deadlines.remove(&(d, key));
                self.matching.remove(&p.match_key(key));
            }
            self.events.push_back(MadEvent::SendCompleted {
                agent: p.agent,
                id: key.1,
                status,
            });
        }
    }

    /// The next MAD to put on QP1.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        loop {
            let (seq, o) = self.out.pop_front()?;
            if let Some(key) = o.send {
                let Some(p) = self.pending.get_mut(&key).filter(|p| p.queued == Some(seq)) else {
                    // The send ended (or was replaced) while this copy waited.
                    continue;
                };
                p.queued = None;
                p.attempts += 1;
                if p.deadline.is_none() {
                    self.finish(key, SendStatus::Ok);
                }
            }
            self.counters.tx += 1;
            return Some(o);
        }
    }

    /// Whether a MAD waits in the transmit queue (stale entries of ended sends included).
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next event for the agents.
    pub fn poll_event(&mut self) -> Option<MadEvent> {
        self.events.pop_front()
    }

    /// Whether an event waits for [`MadAgent::poll_event`].
    pub fn has_event(&self) -> bool {
        !self.events.is_empty()
    }

    /// When [`MadAgent::handle_timeout`] wants to be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(d, _)| d)
    }

    /// Retransmits or times out every send whose wait ended by `now` (mad.c `timeout_sends`
    /// / `retry_send`).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<SendKey> = Vec::new();
        for &(d, key) in &self.deadlines {
            if d > now {
                break;
            }
            due.push(key);
        }
        // In the order of the sends' keys, as one pass over the sends would find them.
        due.sort_unstable();
        for key in due {
            let Some(p) = self.pending.get_mut(&key) else {
                continue;
            };
            if p.retries_left == 0 {
                self.counters.timeouts += 1;
                self.finish(key, SendStatus::TimedOut);
                continue;
            }
            p.retries_left -= 1;
            p.retransmissions += 1;
            let next_deadline = now + p.timeout;
            if let Some(old) = p.deadline.replace(next_deadline) {
                self.deadlines.remove(&(old, key));
            }
            self.deadlines.insert((next_deadline, key));
            self.counters.retransmits += 1;
            let copy = OutMad {
                dest: p.dest,
                mad: p.mad.clone(),
                send: Some(key),
                attempt: p.attempts,
            };
            let ev = MadEvent::Retransmitted {
                agent: p.agent,
                id: key.1,
                attempt: p.retransmissions,
                retries_left: p.retries_left,
                next_deadline,
            };
            // One copy in the queue at a time (a retransmission not yet handed out replaces
            // nothing: the previous copy is still the same bytes).
            let queued = p.queued.is_some();
            if !queued {
                let seq = self.enqueue(copy);
                if let Some(p) = self.pending.get_mut(&key) {
                    p.queued = Some(seq);
                }
            }
            self.events.push_back(ev);
        }
    }

    /// A MAD arrived on QP1 from `from` (`bytes`: the UD payload, GRH area stripped).
    pub fn handle_receive(&mut self, _now: Instant, from: MadAddr, bytes: &[u8]) {
        if bytes.len() < MAD_LEN {
            self.counters.rx_malformed += 1;
            return;
        }
        let Ok(mad) = Mad::parse(bytes) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let h = &mad.header;
        // validate_mad
        if h.base_version != BASE_VERSION {
            self.counters.rx_bad_base_version += 1;
            return;
        }
        if h.mgmt_class == MgmtClass::SUBN_LID_ROUTED
            || h.mgmt_class == MgmtClass::SUBN_DIRECTED_ROUTE
            || (h.mgmt_class == MgmtClass::CM
                && h.attr_id != CLASS_PORT_INFO
                && h.method != Method::SEND)
        {
            self.counters.rx_invalid += 1;
            return;
        }
        if h.method.is_response() || h.method == Method::TRAP_REPRESS {
            self.receive_response(from, mad);
        } else {
            self.receive_request(from, mad);
        }
    }

    fn receive_response(&mut self, from: MadAddr, mad: Mad) {
        let agent = AgentId((mad.header.tid >> 32) as u32);
        if !self.agents.contains_key(&agent) {
            self.counters.rx_no_agent += 1;
            return;
        }
        let (tid, class, gid) = (mad.header.tid, mad.header.mgmt_class.0, from.gid.0);
        let lo = (agent, tid, class, gid, (AgentId(0), SendId(0)));
        let hi = (
            agent,
            tid,
            class,
            gid,
            (AgentId(u32::MAX), SendId(u64::MAX)),
        );
        let Some(&(.., key)) = self.matching.range(lo..=hi).next() else {
            self.counters.rx_unmatched_response += 1;
            return;
        };
        self.counters.rx_delivered += 1;
        // The response is delivered first, then the send completes (ib_mad_complete_recv).
        self.events.push_back(MadEvent::Received {
            agent,
            mad: Box::new(mad),
            from,
            response_to: Some(key.1),
        });
        self.finish(key, SendStatus::Ok);
    }

    fn receive_request(&mut self, from: MadAddr, mad: Mad) {
        let h = &mad.header;
        let agent = self
            .agents
            .iter()
            .find(|(_, r)| {
                r.class == h.mgmt_class
                    && r.class_version == h.class_version
                    && match &r.methods {
                        None => true,
                        Some(m) => m.contains(&h.method),
                    }
            })
            .map(|(a, _)| *a);
        if let Some(agent) = agent {
            self.counters.rx_delivered += 1;
            self.events.push_back(MadEvent::Received {
                agent,
                mad: Box::new(mad),
                from,
                response_to: None,
            });
            return;
        }
        self.counters.rx_no_agent += 1;
        // generate_unmatched_resp: only Get() and Set() get an answer.
        if h.method == Method::GET || h.method == Method::SET {
            let mut resp = mad.clone();
            resp.header.method = Method::GET_RESP;
            resp.header.status = MadStatus(STATUS_UNSUPPORTED_METHOD_ATTRIB);
            self.counters.unsupported_replies += 1;
            self.enqueue(OutMad {
                dest: from,
                mad: Box::new(resp),
                send: None,
                attempt: 0,
            });
        }
    }
}
