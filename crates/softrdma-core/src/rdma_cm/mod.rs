//! A minimal RDMA CM (kernel `drivers/infiniband/core/cma.c`, RoCE, RC over the TCP port
//! space) on top of the IB CM [`CmEndpoint`].
//!
//! What it does, following cma.c:
//! - [`RdmaCm::listen`] binds an IP and port and listens on the IB CM service ID
//!   `0x0106 << 16 | port` (`cma_get_service_id`).
//! - A REQ to that service ID is checked like `cma_ib_req_handler` /
//!   `cma_save_net_info` / `cma_ib_acquire_dev`: the 36-byte IP CM header must have
//!   version 0 and IP version 4 or 6, its destination must be the bound address (unless the
//!   listener is bound to the wildcard address), and our GID table must hold a RoCEv2 entry
//!   for that destination (the new id's source address). Otherwise the id is destroyed in
//!   REQ_RCVD, which puts REJ 28 (consumer defined) with no private data on the wire.
//!   Then the delayed MRA is prepared (`ib_prepare_cm_mra`, service timeout
//!   [`CMA_CM_MRA_SETTING`]) and [`RdmaCmEventType::ConnectRequest`] carries the
//!   consumer's private data (after the header).
//! - [`RdmaCm::accept`] (`cma_accept_ib`): QP to RTR then RTS from `init_qp_attr` with the
//!   connection parameters' responder resources / initiator depth, then REP (no rdma_cm
//!   header in a REP). RTU → ESTABLISHED.
//! - [`RdmaCm::connect`] (`cma_connect_ib`): REQ with the header (random source port, flow
//!   label `(sport·31 + dport) & 0xfffff` as cma computes it), random starting PSN, CM
//!   response timeouts 20, 15 CM retries, packet lifetime 18 (local ACK timeout 19), hop
//!   limit 64, the port's active MTU. On REP: QP to RTR/RTS, RTU, ESTABLISHED
//!   (`cma_rep_recv`).
//! - PSNs as cm.c/cma.c set them: a REQ's or REP's starting PSN is where its *sender's* RQ
//!   starts (`rdma_init_qp_attr`: RTR `rq_psn = seq_num`); each side's SQ starts at the
//!   PSN the peer announced (rxe's first SEND as active side carried our REP's PSN).
//! - [`RdmaCm::reject`]: REJ 28 with the consumer's private data; the active side sees
//!   REJECTED with [`RdmaCmEvent::consumer_reject_data`].
//! - [`RdmaCm::disconnect`]: QP to ERR, then DREQ (ESTABLISHED) or DREP (after a DREQ).
//!   DREQ received / DREP received / DREQ timeout → DISCONNECTED; the end of the timewait →
//!   TIMEWAIT_EXIT.
//!
//! Not done: address/route resolution (the caller gives both IPs), UD/SIDR, IPv6 flow-label
//! rules, listen backlogs, ECE, `rdma_set_option`.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

use softrdma_wire::cm::{Path, PathMtu, RejectReason, TransportType};
use softrdma_wire::rdma_cm::{
    ip_private_data, service_id, IpCmHeader, PortSpace, CMA_VERSION, IP_CM_HEADER_LEN,
};
use softrdma_wire::Gid;

use crate::cm::{
    CmConfig, CmEndpoint, CmError, CmEvent, CmId, CmIdError, CmPort, CmState, RepParams, ReqParams,
    CMA_CM_MRA_SETTING,
};
use crate::device::{GidType, PORT_NUM};
use crate::mad::{AgentId, MadAddr, MadAgent, MadEvent, MadOp};
use crate::rand::Rng;
use crate::time::Instant;
use crate::transport::Stack;
use crate::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, VerbsError};

/// The packet lifetime the kernel's RoCE path records carry (local ACK timeout 19 = 18 + 1).
pub const ROCE_PACKET_LIFE_TIME: u8 = 18;
/// `CMA_CM_RESPONSE_TIMEOUT`.
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES`.
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// The hop limit of a RoCEv2 path to an IPv4 peer off-link rules aside (the lab's REQs).
pub const ROCE_HOP_LIMIT: u8 = 64;

/// `cma_get_roce_udp_flow_label` (no IPv6 flowinfo given): `(sport·31 + dport)` masked to
/// 20 bits. b_rping.pcap: IP CM source port 0x90f2 to 7174 → flow label 0x1a954.
pub fn roce_udp_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// `struct rdma_conn_param` (the fields RC uses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// An RDMA CM id (a copyable name; the id lives in the [`RdmaCm`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct RdmaId(pub u32);

/// `enum rdma_cm_event_type` (the ones this module raises).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RdmaCmEventType {
    ConnectRequest,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    TimewaitExit,
}

impl RdmaCmEventType {
    /// `rdma_event_str`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RdmaCmEventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            RdmaCmEventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            RdmaCmEventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            RdmaCmEventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            RdmaCmEventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            RdmaCmEventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            RdmaCmEventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

/// `struct rdma_cm_event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaCmEvent {
    pub event: RdmaCmEventType,
    pub id: RdmaId,
    /// CONNECT_REQUEST: the listener.
    pub listen_id: Option<RdmaId>,
    /// The event's private data (REQ: after the IP CM header; REP; REJ).
    pub private_data: Vec<u8>,
    /// REJECTED: the reason (the kernel's event status).
    pub reject_reason: Option<RejectReason>,
    /// CONNECT_REQUEST: the peer's responder resources / initiator depth etc.
    pub param: ConnParam,
}

impl RdmaCmEvent {
    fn new(event: RdmaCmEventType, id: RdmaId) -> RdmaCmEvent {
        RdmaCmEvent {
            event,
            id,
            listen_id: None,
            private_data: Vec::new(),
            reject_reason: None,
            param: ConnParam::default(),
        }
    }

    /// `rdma_consumer_reject_data`: the private data of a REJECTED event whose reason is
    /// consumer defined (28); `None` otherwise.
    pub fn consumer_reject_data(&self) -> Option<&[u8]> {
        (self.event == RdmaCmEventType::Rejected
            && self.reject_reason == Some(RejectReason::CONSUMER_DEFINED))
        .then_some(&self.private_data[..])
    }
}

/// Why an RDMA CM call failed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RdmaCmError {
    NoSuchId,
    /// Not a state for this call (`-EINVAL`).
    InvalidState,
    /// No RoCEv2 GID for the local address (`-ENODEV`).
    NoDevice,
    Cm(CmError),
    Verbs(VerbsError),
}

impl From<CmError> for RdmaCmError {
    fn from(e: CmError) -> Self {
        RdmaCmError::Cm(e)
    }
}

impl From<VerbsError> for RdmaCmError {
    fn from(e: VerbsError) -> Self {
        RdmaCmError::Verbs(e)
    }
}

impl std::fmt::Display for RdmaCmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for RdmaCmError {}

#[derive(Debug)]
struct Id {
    cm: CmId,
    local: Option<(IpAddr, u16)>,
    remote: Option<(IpAddr, u16)>,
    qpn: Option<u32>,
    /// `id_priv->seq_num`: our starting PSN (REQ or REP), where our RQ starts.
    seq_num: u32,
    param: ConnParam,
    /// A DISCONNECTED event was raised (raise it once).
    disconnected: bool,
}

/// The RDMA CM, on every port its IB CM was given ([`RdmaCm::add_port`]).
#[derive(Debug)]
pub struct RdmaCm {
    cm: CmEndpoint,
    ids: BTreeMap<u32, Id>,
    events: VecDeque<RdmaCmEvent>,
    /// IB CM events that are not the RDMA CM's: ids and listeners created on the IB CM
    /// directly ([`RdmaCm::cm_mut`]), and every id's retransmission notices.
    ib_events: VecDeque<CmEvent>,
    rng: Rng,
}

impl RdmaCm {
    pub fn new(cfg: CmConfig) -> Result<RdmaCm, RdmaCmError> {
        let rng = Rng::new(cfg.seed ^ 0x5244_4d41_5f43_4d00);
        Ok(RdmaCm {
            cm: CmEndpoint::new(cfg)?,
            ids: BTreeMap::new(),
            events: VecDeque::new(),
            ib_events: VecDeque::new(),
            rng,
        })
    }

    /// The IB CM underneath.
    pub fn cm(&self) -> &CmEndpoint {
        &self.cm
    }

    /// The IB CM underneath, for ids of its own (their events come out of
    /// [`RdmaCm::poll_ib_event`]). Commands issued here queue MAD operations and events
    /// like any other; the runtime drains both after the call.
    pub fn cm_mut(&mut self) -> &mut CmEndpoint {
        &mut self.cm
    }

    /// Registers the CM on one more port's MAD layer (see [`CmEndpoint::add_port`]).
    pub fn add_port(&mut self, mad: &mut MadAgent) -> Result<CmPort, RdmaCmError> {
        Ok(self.cm.add_port(mad)?)
    }

    /// [`RdmaCm::add_port`] for a device with its own node GUID.
    pub fn add_port_with_guid(
        &mut self,
        mad: &mut MadAgent,
        guid: softrdma_wire::Guid,
    ) -> Result<CmPort, RdmaCmError> {
        Ok(self.cm.add_port_with_guid(mad, guid)?)
    }

    /// The next RDMA CM event.
    pub fn poll_event(&mut self) -> Option<RdmaCmEvent> {
        self.events.pop_front()
    }

    /// The next IB CM event that is not the RDMA CM's (see [`RdmaCm::cm_mut`]), or a
    /// [`CmEvent::Retry`] notice of any id. Events of ids destroyed since they were queued
    /// are not delivered (a REQ of a destroyed listener is dropped, destroying its id).
    pub fn poll_ib_event(&mut self) -> Option<CmEvent> {
        while let Some(ev) = self.ib_events.pop_front() {
            let live = |r| self.cm.state(r).is_some();
            if live(ev.id()) && ev.listen_id().map_or(true, live) {
                return Some(ev);
            }
        }
        None
    }

    /// The next MAD operation for a port's MAD layer ([`CmEndpoint::poll_mad`]).
    pub fn poll_mad(&mut self) -> Option<(CmPort, AgentId, MadOp)> {
        self.cm.poll_mad()
    }

    /// When [`RdmaCm::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    /// The port an id lives on (the device whose stack its commands need).
    pub fn port_of(&self, id: RdmaId) -> Option<CmPort> {
        let i = self.ids.get(&id.0)?;
        self.cm.port_of(i.cm.as_ref())
    }

    /// The IB CM state of an id (for tests and diagnostics).
    pub fn cm_state(&self, id: RdmaId) -> Option<CmState> {
        let i = self.ids.get(&id.0)?;
        self.cm.state(i.cm.as_ref())
    }

    /// The QP attached by `connect`/`accept`.
    pub fn qpn(&self, id: RdmaId) -> Option<u32> {
        self.ids.get(&id.0).and_then(|i| i.qpn)
    }

    /// The peer's address (CONNECT_REQUEST: from the header; active: the destination).
    pub fn remote_addr(&self, id: RdmaId) -> Option<(IpAddr, u16)> {
        self.ids.get(&id.0).and_then(|i| i.remote)
    }

    fn new_id(&mut self) -> RdmaId {
        let cm = self.cm.create_id();
        let r = RdmaId(cm.local_comm_id());
        self.ids.insert(
            r.0,
            Id {
                cm,
                local: None,
                remote: None,
                qpn: None,
                seq_num: 0,
                param: ConnParam::default(),
                disconnected: false,
            },
        );
        r
    }

    /// `rdma_bind_addr` + `rdma_listen` (RDMA_PS_TCP).
    pub fn listen(&mut self, ip: IpAddr, port: u16) -> Result<RdmaId, RdmaCmError> {
        let id = self.new_id();
        let sid = service_id(PortSpace::TCP, port);
        let r = self
            .ids
            .get(&id.0)
            .ok_or(RdmaCmError::NoSuchId)
            .and_then(|i| self.cm.listen(&i.cm, sid).map_err(RdmaCmError::from));
        if let Err(e) = r {
            self.destroy(Instant::ZERO, id);
            return Err(e);
        }
        if let Some(i) = self.ids.get_mut(&id.0) {
            i.local = Some((ip, port));
        }
        Ok(id)
    }

    /// `rdma_create_qp`'s transition: the new QP to INIT (P_Key index 0, port 1, local and
    /// remote write and read).
    pub fn init_qp(stack: &mut Stack, qpn: u32) -> Result<(), RdmaCmError> {
        let attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: PORT_NUM,
            qp_access_flags: AccessFlags(
                AccessFlags::LOCAL_WRITE.0
                    | AccessFlags::REMOTE_WRITE.0
                    | AccessFlags::REMOTE_READ.0,
            ),
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        stack.modify_qp(qpn, &attr, mask)?;
        Ok(())
    }

    /// `rdma_connect` (after `rdma_resolve_addr/route`, which the caller does by naming
    /// both addresses): REQ on `qpn` (in INIT or RESET).
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        now: Instant,
        port: CmPort,
        stack: &mut Stack,
        src: IpAddr,
        dst: IpAddr,
        dst_port: u16,
        qpn: u32,
        param: &ConnParam,
    ) -> Result<RdmaId, RdmaCmError> {
        stack
            .device
            .find_gid(PORT_NUM, &Gid::from(src), GidType::RoceV2)
            .map_err(|_| RdmaCmError::NoDevice)?;
        let port_num = port;
        let port = dst_port;
        let mtu = stack
            .device
            .port(PORT_NUM)
            .map(|p| p.attr.active_mtu.to_enum())
            .unwrap_or(3);
        // The kernel binds an ephemeral port (inet_get_local_port_range 32768..60999).
        let src_port = 32768 + (self.rng.next_u32() % 28232) as u16;
        let flow_label = roce_udp_flow_label(src_port, port);
        let psn = self.rng.next_psn();
        let mut pd = IpCmHeader::new(src, src_port, dst).to_bytes();
        pd.extend_from_slice(&param.private_data);
        let p = ReqParams {
            port: port_num,
            peer: MadAddr::gsi(Gid::from(dst)),
            primary_path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: Gid::from(src),
                remote_gid: Gid::from(dst),
                flow_label,
                hop_limit: ROCE_HOP_LIMIT,
                local_ack_timeout: ROCE_PACKET_LIFE_TIME + 1,
                ..Path::default()
            },
            packet_life_time: ROCE_PACKET_LIFE_TIME,
            path_mtu: PathMtu(mtu),
            partition_key: 0xffff,
            service_id: service_id(PortSpace::TCP, port),
            qp_num: qpn,
            transport: TransportType::RC,
            starting_psn: psn,
            private_data: pd,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            remote_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            flow_control: param.flow_control,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: CMA_MAX_CM_RETRIES,
            srq: false,
            ece_vendor_id: 0,
            ece_attr_mod: 0,
        };
        let id = self.new_id();
        let r = match self.ids.get(&id.0) {
            Some(i) => self.cm.send_req(now, &i.cm, &p).map_err(RdmaCmError::from),
            None => Err(RdmaCmError::NoSuchId),
        };
        if let Err(e) = r {
            self.destroy(now, id);
            return Err(e);
        }
        if let Some(i) = self.ids.get_mut(&id.0) {
            i.local = Some((src, src_port));
            i.remote = Some((dst, port));
            i.qpn = Some(qpn);
            i.seq_num = psn;
            i.param = param.clone();
        }
        Ok(id)
    }

    /// The QP of `id` to RTR then RTS from the CM's attributes (`cma_modify_qp_rtr/rts`),
    /// with the connection parameters' resources.
    fn qp_to_rts(&mut self, stack: &mut Stack, id: RdmaId) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let qpn = i.qpn.ok_or(RdmaCmError::InvalidState)?;
        let cur = stack.verbs.qp(qpn)?.state();
        if cur == QpState::Reset {
            let (a, m) = self.cm.init_qp_attr(&i.cm, QpState::Init)?;
            stack.modify_qp(qpn, &a, m)?;
        }
        let (mut a, m) = self.cm.init_qp_attr(&i.cm, QpState::Rtr)?;
        a.max_dest_rd_atomic = i.param.responder_resources;
        // rdma_init_qp_attr: RTR's rq_psn is the id's seq_num (the passive side moves the QP
        // before its REP is formatted).
        a.rq_psn = i.seq_num;
        // The id's source GID (cma's sgid_attr): the RoCEv2 entry of its local address.
        if let Some((ip, _)) = i.local {
            a.ah_attr.sgid_index = stack
                .device
                .find_gid(PORT_NUM, &Gid::from(ip), GidType::RoceV2)
                .map_err(|_| RdmaCmError::NoDevice)?;
        }
        stack.modify_qp(qpn, &a, m)?;
        let (mut a, m) = self.cm.init_qp_attr(&i.cm, QpState::Rts)?;
        a.max_rd_atomic = i.param.initiator_depth;
        stack.modify_qp(qpn, &a, m)?;
        Ok(())
    }

    /// `rdma_accept`: QP `qpn` (INIT or RESET) to RTR/RTS, then REP.
    pub fn accept(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: RdmaId,
        qpn: u32,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        let r = self.accept_inner(now, stack, id, qpn, param);
        self.drain(now, Some(stack));
        r
    }

    fn accept_inner(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: RdmaId,
        qpn: u32,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        let psn = self.rng.next_psn();
        {
            let i = self.ids.get_mut(&id.0).ok_or(RdmaCmError::NoSuchId)?;
            i.qpn = Some(qpn);
            i.seq_num = psn;
            i.param = param.clone();
        }
        self.qp_to_rts(stack, id)?;
        let rep = RepParams {
            qp_num: qpn,
            starting_psn: psn,
            private_data: param.private_data.clone(),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            failover_accepted: 0,
            flow_control: param.flow_control,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq: false,
            ece_vendor_id: 0,
            ece_attr_mod: 0,
        };
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        self.cm.send_rep(now, &i.cm, &rep)?;
        Ok(())
    }

    /// `rdma_reject`: REJ 28 (consumer defined) with `private_data`; the id is gone.
    pub fn reject(
        &mut self,
        now: Instant,
        id: RdmaId,
        private_data: &[u8],
    ) -> Result<(), RdmaCmError> {
        let mut i = self.ids.remove(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let r = self
            .cm
            .reject(now, i.cm, RejectReason::CONSUMER_DEFINED, &[], private_data);
        if let Err(CmIdError { id: cm, error }) = r {
            // Refused (e.g. private data too long): the id stays as it was.
            i.cm = cm;
            self.ids.insert(id.0, i);
            return Err(error.into());
        }
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR, then DREQ (ESTABLISHED) or DREP (DREQ received).
    pub fn disconnect(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: RdmaId,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if let Some(qpn) = i.qpn {
            let attr = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            // A QP already in ERR or destroyed is fine here, like cma_modify_qp_err.
            let _ = stack.modify_qp(qpn, &attr, QpAttrMask::STATE);
        }
        let st = self.cm.state(i.cm.as_ref()).ok_or(RdmaCmError::NoSuchId)?;
        match st {
            CmState::Established => self.cm.send_dreq(now, &i.cm, &[])?,
            CmState::DreqRcvd => self.cm.send_drep(now, &i.cm, &[])?,
            _ => return Err(RdmaCmError::InvalidState),
        }
        Ok(())
    }

    /// `rdma_destroy_id` (the IB CM destroy rules apply: REJ in REQ_RCVD, DREQ in
    /// ESTABLISHED...).
    pub fn destroy(&mut self, now: Instant, id: RdmaId) {
        if let Some(i) = self.ids.remove(&id.0) {
            self.cm.destroy(now, i.cm);
        }
    }

    /// An event of `port`'s MAD layer (`stack` is that port's device): into the IB CM,
    /// whose events become RDMA CM events (and answers: REJ for bad REQs, RTU after a REP).
    pub fn handle_mad(&mut self, now: Instant, port: CmPort, stack: &mut Stack, ev: MadEvent) {
        self.cm.handle_mad(now, port, ev);
        self.drain(now, Some(stack));
    }

    /// The IB CM's timers (timewait exits).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.cm.handle_timeout(now);
        self.drain(now, None);
    }

    /// Takes the IB CM's queued events: call after commands issued through
    /// [`RdmaCm::cm_mut`], with the stack of the port they concern.
    pub fn process(&mut self, now: Instant, stack: &mut Stack) {
        self.drain(now, Some(stack));
    }

    fn drain(&mut self, now: Instant, mut stack: Option<&mut Stack>) {
        while let Some(ev) = self.cm.poll_event() {
            self.on_cm_event(now, stack.as_deref_mut(), ev);
        }
    }

    fn push(&mut self, event: RdmaCmEventType, id: u32) {
        self.events.push_back(RdmaCmEvent::new(event, RdmaId(id)));
    }

    fn on_cm_event(&mut self, now: Instant, stack: Option<&mut Stack>, ev: CmEvent) {
        use RdmaCmEventType as T;
        // Ids the RDMA CM does not own (the IB CM's own users), and retry notices.
        let owner = match &ev {
            CmEvent::Retry { .. } => None,
            e => Some(e.listen_id().unwrap_or(e.id()).local_comm_id()),
        };
        if !owner.is_some_and(|o| self.ids.contains_key(&o)) {
            self.ib_events.push_back(ev);
            return;
        }
        match ev {
            CmEvent::ReqReceived { id, listen, req } => match stack {
                Some(stack) => self.on_req(now, stack, id, listen.local_comm_id(), &req),
                None => self.cm.destroy(now, id),
            },
            // cma_ib_check_req_qp_type: a SIDR_REQ is for a UD listener and ours are RC
            // (RDMA_PS_TCP): cma_ib_req_handler fails, the IB CM destroys the new id,
            // which answers SIDR_REP status 2 (REJECT).
            CmEvent::SidrReqReceived { id, .. } => self.cm.destroy(now, id),
            CmEvent::RepReceived { id, rep } => {
                let r = RdmaId(id.local_comm_id());
                let ok = stack.is_some_and(|s| self.qp_to_rts(s, r).is_ok())
                    && self
                        .ids
                        .get(&r.0)
                        .map(|i| self.cm.send_rtu(now, &i.cm, &[]).is_ok())
                        .unwrap_or(false);
                if ok {
                    let mut e = RdmaCmEvent::new(T::Established, r);
                    e.private_data = rep.private_data.to_vec();
                    e.param.responder_resources = rep.responder_resources;
                    e.param.initiator_depth = rep.initiator_depth;
                    e.param.rnr_retry_count = rep.rnr_retry_count;
                    self.events.push_back(e);
                } else {
                    // cma_rep_recv failing: REJ CONSUMER_DEFINED and CONNECT_ERROR.
                    if let Some(i) = self.ids.get(&r.0) {
                        let _ =
                            self.cm
                                .send_rej(now, &i.cm, RejectReason::CONSUMER_DEFINED, &[], &[]);
                    }
                    self.push(T::ConnectError, r.0);
                }
            }
            CmEvent::RtuReceived { id, .. } | CmEvent::UserEstablished { id } => {
                self.push(T::Established, id.local_comm_id())
            }
            CmEvent::ReqError { id, .. } | CmEvent::RepError { id, .. } => {
                self.push(T::Unreachable, id.local_comm_id())
            }
            CmEvent::RejReceived { id, rej } => {
                let mut e = RdmaCmEvent::new(T::Rejected, RdmaId(id.local_comm_id()));
                e.reject_reason = Some(rej.reason);
                e.private_data = rej.private_data.to_vec();
                self.events.push_back(e);
            }
            CmEvent::DreqReceived { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::DreqError { id, .. } => {
                let id = id.local_comm_id();
                if let Some(i) = self.ids.get_mut(&id) {
                    if !i.disconnected {
                        i.disconnected = true;
                        self.push(T::Disconnected, id);
                    }
                }
            }
            CmEvent::TimewaitExit { id } if self.ids.contains_key(&id.local_comm_id()) => {
                self.push(T::TimewaitExit, id.local_comm_id())
            }
            _ => {}
        }
    }

    fn on_req(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cm: CmId,
        listen: u32,
        req: &crate::cm::ReqInfo,
    ) {
        // cma_ib_check_req_qp_type: our listeners are RC; a UC (or XRC) REQ fails the
        // handler, and the IB CM's destroy in REQ_RCVD is REJ 28 without private data.
        if req.req.transport_service_type != TransportType::RC {
            self.cm.destroy(now, cm);
            return;
        }
        let bound = self.ids.get(&listen).and_then(|l| l.local);
        let sid = req.req.service_id;
        let hdr = ip_private_data(sid, &req.req.private_data);
        let checked = match (bound, hdr) {
            (Some((ip, port)), Some((h, data))) => {
                let dst = h.dst_ip();
                let src = h.src_ip();
                let ok = h.cma_version == CMA_VERSION
                    && matches!(h.ip_version, 4 | 6)
                    && req.req.private_data.len() >= IP_CM_HEADER_LEN
                    && dst.is_some()
                    && (ip.is_unspecified() || dst == Some(ip))
                    && dst.is_some_and(|d| {
                        stack
                            .device
                            .find_gid(PORT_NUM, &Gid::from(d), GidType::RoceV2)
                            .is_ok()
                    });
                match (ok, src, dst) {
                    (true, Some(s), Some(d)) => Some(((d, port), (s, h.src_port), data.to_vec())),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((local, remote, data)) = checked else {
            // cma_ib_req_handler failing: the id is destroyed in REQ_RCVD → REJ 28, no data.
            self.cm.destroy(now, cm);
            return;
        };
        // ib_prepare_cm_mra: the MRA goes out only if the REQ is retransmitted before the
        // consumer answers.
        let _ = self.cm.send_mra(now, &cm, CMA_CM_MRA_SETTING, true, &[]);
        let r = RdmaId(cm.local_comm_id());
        self.ids.insert(
            r.0,
            Id {
                cm,
                local: Some(local),
                remote: Some(remote),
                qpn: None,
                seq_num: 0,
                param: ConnParam::default(),
                disconnected: false,
            },
        );
        let mut e = RdmaCmEvent::new(RdmaCmEventType::ConnectRequest, r);
        e.listen_id = Some(RdmaId(listen));
        e.private_data = data;
        e.param = ConnParam {
            private_data: Vec::new(),
            // cm_format_req_event: seen from our side, the peer's initiator depth is what
            // we must answer with responder resources, and vice versa.
            responder_resources: req.req.initiator_depth,
            initiator_depth: req.req.responder_resources,
            flow_control: req.req.end_to_end_flow_control,
            retry_count: req.req.retry_count,
            rnr_retry_count: req.req.rnr_retry_count,
        };
        self.events.push_back(e);
    }
}
