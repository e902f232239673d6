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
//! are the timewaits ([`CmEndpoint::poll_timeout`]). [`SinglePortCm`] is the endpoint of a
//! one-port [`crate::node::Node`] spoken to in MADs, for the CM's own tests. The call order is
//! the node's ([`crate::node`]).
//!
//! **Ownership of ids (the `ib_cm_handler` contract, by types).** There are no callbacks.
//! [`CmEndpoint::create_id`] returns a [`CmId`], which is not `Clone`; commands take `&CmId`;
//! [`CmEndpoint::destroy`], [`CmEndpoint::destroy_silently`] and [`CmEndpoint::reject`] take
//! it by value. A REQ or SIDR_REQ arriving on a listener creates a new id handed over
//! *inside* the event ([`CmEvent::ReqReceived`]`{ id: CmId, .. }`, `SidrReqReceived`): the
//! user owns it from then on. Every other event names an id by [`CmIdRef`], a copyable
//! name only the CM makes. The rules:
//! - "Destroy the id inside its own callback" cannot be written. The kernel's "return
//!   non-zero from the handler and the CM destroys the id" is **dropping the [`CmId`]** (or
//!   the event carrying it): the id reports itself to the CM that made it, and the CM runs
//!   `ib_destroy_cm_id` for it at its next call — any command, `handle_mad`,
//!   `handle_timeout` or `poll_mad` (with the latest time a call brought; `poll_timeout`
//!   asks for a call at once while a dropped id waits). So no owned id is ever lost: in
//!   REQ_RCVD that is REJ 28, in SIDR_REQ_RCVD SIDR_REP status 2 (REJECT), in ESTABLISHED a
//!   DREQ, ... exactly the kernel's destroy. The kernel's `-ENOMEM` return (back to IDLE,
//!   *no* REJ, the peer retries its REQ — ucma's backlog overflow) is
//!   [`CmEndpoint::destroy_silently`].
//! - A command that consumes an id and fails hands it back, unchanged, with the error
//!   ([`CmIdError`]): a refused `reject` leaves the id where it was and the user's.
//! - No event is delivered for an id after it was destroyed: destroying an id withdraws its
//!   queued events (and those of a listener: a queued REQ of a destroyed listener is
//!   dropped, which destroys the new id).
//! - `#[must_use]` on [`CmId`] and [`CmEvent`] makes an unhandled one a warning.
//!
//! **States as data.** [`CmState`] is `enum ib_cm_state` (its `Display` is the IBTA name);
//! internally each state carries what it needs (`ReqSent { msg }`, `MraReqSent {
//! service_timeout }`, `Timewait { until }`, ...) next to what every id has and what the
//! connection negotiated (`conn.rs`). Each received message has one handler (`recv.rs`:
//! `req_handler`, `rep_handler`, ...) that finds the id the way cm.c does and then follows
//! the (state × message) → action table of [`table`], whose text is `state_table.txt`
//! (checked by a test). Every transition goes through `set_state`, visible in
//! [`CmEndpoint::state`] and, with `trace` on, in [`CmEndpoint::transitions`]. The files:
//! `types.rs` (ids, events, parameters), `send.rs` (commands and sending), `recv.rs` (the
//! handlers), `destroy.rs`, `timers.rs` (timewait, send completions and errors),
//! `qp_attr.rs` (`ib_cm_init_qp_attr`), `counters.rs`.
//!
//! IDs and TIDs (lab README, cm.c `cm_alloc_id_priv` / `cm_form_tid`): local comm IDs are a
//! cyclic counter XORed with a random operand from the seeded [`Rng`]; on the wire the
//! kernel's value appears byte-swapped (`(__force __be32)(id ^ operand)` on a little-endian
//! host), so consecutive IDs differ in the top byte, and the TID is
//! `hi_tid << 32 | swap_bytes(comm_id)`. Responses (REP, RTU, DREP, REJ, MRA) reuse the
//! id's TID, the REQ's (a received DREQ's after one arrives); DREQ and SIDR_REQ form a new
//! TID from the sender's own comm ID without making it the id's (`cm_format_dreq`).
//!
//! Timers (cm.c): REQ `2·cvt(PLT) + cvt(remote_cm_response_timeout)` ms with
//! `max_cm_retries` retries (`ib_send_cm_req`); the passive side's REP and DREQ use
//! `cvt(REQ.local_cm_response_timeout)` ms and the REQ's max_cm_retries (`cm_req_handler`
//! sets `timeout_ms` from that field alone; `docs/cm-timers.md` — no "+ 2×PLT", cm.c does not
//! add it); a received MRA modifies the outstanding MAD to
//! `cvt(service_timeout) + cvt(av.timeout)`; TIMEWAIT lasts `cvt(av.timeout)`
//! (`av.timeout` = PLT+1; the passive side's PLT is the REQ's local ACK timeout − 1; after a
//! REP, `cm_ack_timeout(target_ack_delay, av.timeout-1)`). Retries running out raise
//! REQ_ERROR / REP_ERROR / DREQ_ERROR / SIDR_REQ_ERROR with the send status and no REJ on
//! the wire (`cm_process_send_error`).
//!
//! Wire rules taken from cm.c (and checked by the tests):
//! - REJ fields by state (`cm_format_rej`): REQ_RCVD → local comm ID 0, "REQ"; MRA_REQ_SENT
//!   → our ID, "REQ"; REP_RCVD/MRA_REP_SENT → "REP"; anything else (REQ_SENT, REP_SENT,
//!   TIMEWAIT...) → "other". After a REJ (`ib_send_cm_rej`) REP_SENT/MRA_REP_RCVD enter
//!   TIMEWAIT, the other states go back to IDLE; neither cancels the outstanding message
//!   (only a destroy does).
//! - Context-less answers (`cm_issue_rej` / `cm_issue_drep`) reuse the received TID and
//!   swap the received message's first two words, whatever the message: REQ to no listener
//!   → REJ 8 and REQ from a known remote QPN → REJ 10 (+ DREQ to that connection if it is
//!   ESTABLISHED) both carry the REQ's word 1 (reserved byte + ECE vendor ID) as their local
//!   comm ID, and its comm ID as the remote one; DREQ for no id → DREP (counted as a
//!   duplicate DREQ).
//! - Entering TIMEWAIT gives up the remote-ID and remote-QPN entries (`cm_enter_timewait` →
//!   `cm_cleanup_timewait`): a REQ from the same remote comm ID or QPN during the timewait
//!   is a new connection; REJ 10 goes out only for a collision with a live connection.
//! - Duplicate REQ (`cm_dup_req_handler`): REQ_RCVD drop; MRA_REQ_SENT resend the MRA
//!   (this is how the delayed MRA gets out). Duplicate REP: ESTABLISHED → RTU again,
//!   MRA_REP_SENT → MRA again. Duplicate DREQ in TIMEWAIT → DREP again. A repeated MRA is
//!   counted and does not extend the wait again. What the resent MRA, RTU or DREP carries is
//!   the id's one private-data slot, the last MRA/RTU/DREP's (`cm_set_private_data`).
//! - `destroy` per state = `cm_destroy_id` (see [`CmEndpoint::destroy`]); a DREQ sent by a
//!   destroy in ESTABLISHED goes out once (the kernel cancels it right after posting it);
//!   the id is gone at once, its timewait included (`cm_free_id`).
//! - Counters: [`CmCounters`] (cm.c's counting rules are in `counters.rs`).
//!
//! **Load.** No event scans all ids, sends or table entries (indexes in `index.rs`,
//! `timers.rs`, `send.rs`; `tests/cm_scale.rs` measures it at 100,000 connections). Passive
//! ids the user has not answered (REQ_RCVD, MRA_REQ_SENT, SIDR_REQ_RCVD) are bounded by
//! [`CmConfig::half_open_limit`] ([`DEFAULT_HALF_OPEN_LIMIT`] = 4096, `somaxconn`); cm.c has
//! no such limit. A REQ or SIDR REQ that would exceed it is dropped without an answer (as
//! ucma drops a REQ beyond its backlog) and counted in [`CmCounters::half_open_drops`]: the
//! peer retransmits,
//! and is served once the user catches up. Floods of unknown-id messages get what cm.c gives
//! them (see `flood_tests.rs`) and leave nothing behind.
//!
//! Not done: LAP/APR (received ones are dropped, as cm.c does on RoCE), alternate paths,
//! XRC specifics (e.g. XRC_TGT idle on destroy), ECE beyond passing vendor ID / attr_mod
//! through, the REJ INVALID_GID (12) for an AV that cannot be built, CM ClassPortInfo (the
//! MAD layer answers Get() "unsupported", like ib_cm), `ib_cm_insert_listen` sharing, the
//! destroy-wait (the kernel's destroy waits for a still-running send; ours cancels it), the
//! SIDR duplicate key (the kernel keys by request ID and the SLID, which RoCE leaves 0; we
//! key by request ID and peer GID).

mod conn;
mod counters;
mod destroy;
#[cfg(test)]
mod flood_tests;
mod index;
mod qp_attr;
mod recv;
mod send;
mod single;
pub mod table;
#[cfg(test)]
mod tests;
mod timers;
mod types;

pub use counters::{CmCounterGroup, CmCounters, CM_COUNTER_ATTRS};
pub use index::CmTableSizes;
pub use single::SinglePortCm;
pub use types::{
    CmConfig, CmError, CmEvent, CmId, CmIdError, CmIdRef, CmPort, CmState, ListenId, RepParams,
    ReqInfo, ReqParams, SidrRepParams, SidrReqParams, DEFAULT_EVENT_QUEUE_LIMIT,
    DEFAULT_HALF_OPEN_LIMIT,
};

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use softrdma_wire::cm::{AttrId, CM_CLASS_VERSION};
use softrdma_wire::mad::{Method, MgmtClass};
use softrdma_wire::Guid;

use crate::mad::{form_tid, AgentId, MadAgent, MadEvent, MadOp, SendId};
use crate::rand::Rng;
use crate::time::{Duration, Instant};

use conn::{Conn, State};
use types::DropBox;

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

/// One send the CM handed to a MAD layer, until its completion (`struct ib_mad_send_buf`
/// with its `context`).
#[derive(Clone, Copy, Debug)]
struct SendRec {
    /// The id it belongs to (`context[0]`); `None`: an answer with no id behind it.
    owner: Option<u32>,
    attr: AttrId,
    /// Retransmissions so far (`send_buf->retries` at completion).
    retries: u32,
    /// Made with `cm_alloc_response_msg` (an answer to a received message).
    response: bool,
    port: crate::cm::CmPort,
}

/// The IB CM of any number of ports.
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
    /// The ids, boxed: a B-tree node then holds pointers, not 240-byte records, so its
    /// half-empty slots cost little (CM memory per connection, `tests/cm_memory.rs`).
    conns: BTreeMap<u32, Box<Conn>>,
    listeners: BTreeMap<u64, u32>,
    /// (remote comm ID, remote CA GUID) → local ID (`remote_id_table`).
    remote_ids: BTreeMap<(u32, u64), u32>,
    /// (remote QPN, remote CA GUID) → local ID (`remote_qp_table`).
    remote_qpns: BTreeMap<(u32, u64), u32>,
    /// (SIDR request ID, peer GID) → local ID (`remote_sidr_table`).
    remote_sidr: BTreeMap<(u32, [u8; 16]), u32>,
    sends: BTreeMap<SendId, SendRec>,
    /// The retransmitted sends of each id, (owner, send): what `cancel_sends` cancels.
    sends_by_owner: BTreeSet<(u32, SendId)>,
    /// The timewait timers: (end, id) of every id in TIMEWAIT.
    timewaits: BTreeSet<(Instant, u32)>,
    /// Ids in REQ_RCVD, MRA_REQ_SENT or SIDR_REQ_RCVD ([`CmConfig::half_open_limit`]).
    half_open: usize,
    events: index::EventQueue,
    counters: CmCounters,
    /// Ids their owners dropped, to be destroyed.
    dropped: DropBox,
    /// The latest time a call brought (for destroys of dropped ids found in `poll_mad`).
    now: Instant,
    /// Every transition, in order: (id, from, to) — for tests and tracing.
    pub transitions: Vec<(CmIdRef, CmState, CmState)>,
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
            sends_by_owner: BTreeSet::new(),
            timewaits: BTreeSet::new(),
            half_open: 0,
            events: index::EventQueue::default(),
            counters: CmCounters::default(),
            dropped: DropBox::default(),
            now: Instant::ZERO,
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
    /// The counters (cm.c's `cm_tx_msgs`, `cm_tx_retries`, `cm_rx_msgs`,
    /// `cm_rx_duplicates`, summed over the ports).
    pub fn counters(&self) -> CmCounters {
        self.counters
    }
    /// The state of an id (`None`: destroyed).
    pub fn state(&self, id: CmIdRef) -> Option<CmState> {
        self.conns.get(&id.0).map(|c| c.state.kind())
    }
    /// How many ids exist (listeners included; for tests and diagnostics).
    pub fn id_count(&self) -> usize {
        self.conns.len()
    }
    /// The port an id lives on.
    pub fn port_of(&self, id: CmIdRef) -> Option<CmPort> {
        self.conns.get(&id.0).map(|c| c.port)
    }
    /// The id's current TID.
    pub fn tid(&self, id: CmIdRef) -> Option<u64> {
        self.conns.get(&id.0).map(|c| c.tid)
    }
    /// The next thing a port's MAD layer is to do: apply it with
    /// `MadAgent::apply(agent, op)` on that port's layer, in the order given. Destroys the
    /// ids dropped since the last call first.
    pub fn poll_mad(&mut self) -> Option<(CmPort, AgentId, MadOp)> {
        self.reap(self.now);
        let (port, op) = self.out.pop_front()?;
        let agent = self.agent(port)?;
        Some((port, agent, op))
    }
    /// Whether MAD operations are queued (or dropped ids wait to be destroyed).
    pub fn has_mad_ops(&self) -> bool {
        !self.out.is_empty() || !self.dropped.is_empty()
    }
    /// Next event for the user.
    #[must_use = "a REQ/SIDR_REQ event owns a new id; dropping it destroys the id"]
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// An event of `port`'s MAD layer for the CM's agent there (received CM MADs, send
    /// completions, retransmissions). Events of other agents are ignored.
    pub fn handle_mad(&mut self, now: Instant, port: CmPort, ev: MadEvent) {
        self.enter(now);
        if self.agent(port) != Some(ev.agent()) {
            return;
        }
        match ev {
            MadEvent::Received { mad, from, .. } => self.dispatch(now, port, from, &mad),
            MadEvent::SendCompleted { id, status, .. } => self.send_completed(now, id, status),
            MadEvent::Retransmitted {
                id,
                attempt,
                retries_left,
                next_deadline,
                ..
            } => self.retransmitted(id, attempt, retries_left, next_deadline),
        }
    }

    /// Every call with a time starts here: the clock moves on and dropped ids go.
    fn enter(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.reap(now);
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

    /// A new id in `conn`'s state, owned by whoever gets the returned [`CmId`].
    fn new_id(&mut self, conn: Conn) -> CmId {
        let id = self.alloc_local_id();
        let st = conn.state;
        self.conns.insert(id, Box::new(conn));
        self.index_enter(id, st);
        CmId::new(id, self.dropped.clone())
    }

    /// `ib_create_cm_id`.
    pub fn create_id(&mut self) -> CmId {
        self.new_id(Conn::new(CmPort(0)))
    }

    fn own_tid(&self, port: CmPort, local: u32) -> u64 {
        let agent = self.agent(port).unwrap_or(AgentId(0));
        form_tid(agent, local.swap_bytes())
    }

    fn set_state(&mut self, id: u32, to: State) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if self.trace {
            self.transitions
                .push((CmIdRef(id), c.state.kind(), to.kind()));
        }
        let from = std::mem::replace(&mut c.state, to);
        self.index_leave(id, from);
        self.index_enter(id, to);
    }

    /// The id leaves the CM: its table entries and indexes go with it.
    fn remove_conn(&mut self, id: u32) {
        self.remove_tables(id);
        if let Some(c) = self.conns.remove(&id) {
            self.index_leave(id, c.state);
            if self.listeners.get(&c.service_id) == Some(&id) {
                self.listeners.remove(&c.service_id);
            }
        }
    }

    fn conn(&self, id: &CmId) -> Result<&Conn, CmError> {
        self.conns
            .get(&id.local_comm_id())
            .map(|c| &**c)
            .ok_or(CmError::NoSuchId)
    }

    /// The preamble of every command: the private data (and ARI) must fit, then the id
    /// must be in one of `allowed` (the kernel checks in this order, both `-EINVAL`).
    fn check(
        &self,
        id: &CmId,
        allowed: &[CmState],
        lengths: &[(usize, usize)],
    ) -> Result<&Conn, CmError> {
        if lengths.iter().any(|&(len, max)| len > max) {
            return Err(CmError::TooLong);
        }
        let c = self.conn(id)?;
        let st = c.state.kind();
        if !allowed.contains(&st) {
            return Err(CmError::InvalidState(st));
        }
        Ok(c)
    }

    /// A fresh random value from the endpoint's generator (e.g. a starting PSN).
    pub fn random_psn(&mut self) -> u32 {
        self.rng.next_psn()
    }
}
