//! Sending: the user's commands (`ib_send_cm_*`, `ib_cm_listen`, `ib_cm_notify`), the
//! message formats (`cm_format_*`) and the hand-over to the MAD layers.

use softrdma_wire::cm::{
    pad, AttrId, CmMessage, DrepRepr, DreqRepr, ExtendedTransportType, FailoverAccepted,
    MraMessage, MraRepr, Path, RejMessage, RejRepr, RejectReason, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr, DREP_PRIVATE_DATA_LEN, DREQ_PRIVATE_DATA_LEN, MRA_PRIVATE_DATA_LEN,
    REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN,
    RTU_PRIVATE_DATA_LEN, SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use softrdma_wire::mad::Mad;

use super::conn::{Conn, State};
use super::types::{CmIdError, RepParams, ReqParams, SidrRepParams, SidrReqParams};
use super::{cm_ack_timeout, cm_convert_to_ms, CmEndpoint, CmError, CmEvent, CmId, CmPort};
use super::{CmState, SendRec, ASSIGN_SERVICE_ID};
use crate::mad::{MadAddr, MadOp, SendId, SendParams};
use crate::time::Instant;

use CmState as S;

impl CmEndpoint {
    // ---- the MAD layers ---------------------------------------------------------------

    /// `ib_post_send_mad`: `owner` is the id the send belongs to (`None`: an answer with
    /// no id behind it); `response`: made by `cm_alloc_response_msg` (see `counters.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post(
        &mut self,
        now: Instant,
        port: CmPort,
        owner: Option<u32>,
        dest: MadAddr,
        mad: Mad,
        params: SendParams,
        response: bool,
    ) -> SendId {
        let id = SendId(self.next_send);
        self.next_send += 1;
        if let Some(owner) = owner.filter(|_| params.expects_response) {
            self.sends_by_owner.insert((owner, id));
        }
        self.sends.insert(
            id,
            SendRec {
                owner,
                attr: AttrId(mad.header.attr_id),
                retries: 0,
                response,
                port,
            },
        );
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
        id
    }

    /// A message of `id`'s that is sent once (RTU, REJ, MRA, DREP, SIDR_REP).
    pub(super) fn send_once(&mut self, now: Instant, id: u32, mad: Mad) {
        if let Some((port, peer)) = self.conns.get(&id).and_then(|c| Some((c.port, c.peer?))) {
            self.post(now, port, Some(id), peer, mad, SendParams::ONCE, false);
        }
    }

    /// An answer to a received message, sent once with no id behind it
    /// (`cm_alloc_response_msg`).
    pub(super) fn send_response(&mut self, now: Instant, port: CmPort, to: MadAddr, mad: Mad) {
        self.post(now, port, None, to, mad, SendParams::ONCE, true);
    }

    /// A message of `id`'s retransmitted until answered (REQ, REP, DREQ, SIDR_REQ).
    fn send_retried(&mut self, now: Instant, id: u32, mad: Mad) -> Option<SendId> {
        let c = self.conns.get(&id)?;
        let (port, peer) = (c.port, c.peer?);
        let params = SendParams {
            timeout: c.timeout,
            retries: u32::from(c.max_cm_retries),
            expects_response: true,
        };
        Some(self.post(now, port, Some(id), peer, mad, params, false))
    }

    /// `ib_cancel_mad(cm_id_priv->msg)`: every retransmitted send of `id` ends (there is
    /// one, or a REP the kernel left running, see the DREQ row of the state table).
    pub(super) fn cancel_sends(&mut self, id: u32) {
        let mine: Vec<SendId> = self
            .sends_by_owner
            .range((id, SendId(0))..=(id, SendId(u64::MAX)))
            .map(|&(_, s)| s)
            .collect();
        for s in mine {
            self.sends_by_owner.remove(&(id, s));
            // Still counted when its completion comes; no longer an id's message.
            if let Some(port) = self.sends.get(&s).map(|r| r.port) {
                self.out.push_back((port, MadOp::Cancel(s)));
            }
        }
    }

    // ---- message formats ----------------------------------------------------------------

    /// `cm_format_rej`: the comm ID and "message rejected" depend on the state (REQ_RCVD
    /// is the only state that hides our comm ID; REP_SENT says "other").
    pub(super) fn rej_mad(id: u32, c: &Conn, reason: RejectReason, ari: &[u8], pd: &[u8]) -> Mad {
        let (local, msg) = match c.state.kind() {
            S::ReqRcvd => (0, RejMessage::REQ),
            S::MraReqSent => (id, RejMessage::REQ),
            S::RepRcvd | S::MraRepSent => (id, RejMessage::REP),
            _ => (id, RejMessage::OTHER),
        };
        let rej = RejRepr {
            local_comm_id: local,
            remote_comm_id: c.remote_id,
            message_rejected: msg,
            reject_info_length: ari.len().min(REJ_ARI_LEN) as u8,
            reason,
            ari: pad(ari),
            private_data: pad(pd),
        };
        CmMessage::Rej(rej).to_mad(c.tid, 0)
    }

    /// `cm_format_mra` with the id's private data.
    pub(super) fn mra_mad(id: u32, c: &Conn, what: MraMessage, service_timeout: u8) -> Mad {
        let mra = MraRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message_mraed: what,
            service_timeout: service_timeout & 0x1f,
            private_data: pad(&c.private_data),
        };
        CmMessage::Mra(mra).to_mad(c.tid, 0)
    }

    /// `cm_format_rtu` with the id's private data.
    pub(super) fn rtu_mad(id: u32, c: &Conn) -> Mad {
        let rtu = RtuRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: pad(&c.private_data),
        };
        CmMessage::Rtu(rtu).to_mad(c.tid, 0)
    }

    /// `cm_format_drep` with the id's private data.
    pub(super) fn drep_mad(id: u32, c: &Conn) -> Mad {
        let drep = DrepRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: pad(&c.private_data),
        };
        CmMessage::Drep(drep).to_mad(c.tid, 0)
    }

    // ---- commands -----------------------------------------------------------------------

    /// `ib_cm_listen`; [`ASSIGN_SERVICE_ID`] takes the next ID from the counter. Returns the
    /// service ID listened on.
    pub fn listen(&mut self, id: &CmId, service_id: u64) -> Result<u64, CmError> {
        self.check(id, &[S::Idle], &[])?;
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
        let raw = id.local_comm_id();
        self.listeners.insert(sid, raw);
        if let Some(c) = self.conns.get_mut(&raw) {
            c.service_id = sid;
        }
        self.set_state(raw, State::Listen);
        Ok(sid)
    }

    /// `ib_send_cm_req`.
    pub fn send_req(&mut self, now: Instant, id: &CmId, p: &ReqParams) -> Result<(), CmError> {
        self.enter(now);
        self.check(
            id,
            &[S::Idle],
            &[(p.private_data.len(), REQ_PRIVATE_DATA_LEN)],
        )?;
        if self.agent(p.port).is_none() {
            return Err(CmError::NoSuchPort);
        }
        let raw = id.local_comm_id();
        let mut path = p.primary_path;
        path.local_ack_timeout = cm_ack_timeout(self.cfg.ca_ack_delay, p.packet_life_time);
        let req = ReqRepr {
            local_comm_id: raw,
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
            transport_service_type: p.transport,
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
            extended_transport_type: ExtendedTransportType::NONE,
            primary_path: path,
            alternate_path: Path::default(),
            sap_supported: false,
            private_data: pad(&p.private_data),
        };
        let tid = self.own_tid(p.port, raw);
        let c = self.conns.get_mut(&raw).ok_or(CmError::NoSuchId)?;
        c.port = p.port;
        c.peer = Some(p.peer);
        c.tid = tid;
        c.service_id = p.service_id;
        c.local_qpn = p.qp_num;
        c.timeout = cm_convert_to_ms(p.packet_life_time)
            + cm_convert_to_ms(p.packet_life_time)
            + cm_convert_to_ms(p.remote_cm_response_timeout);
        c.max_cm_retries = p.max_cm_retries;
        let n = &mut c.neg;
        n.av_timeout = p.packet_life_time.saturating_add(1);
        n.path = path;
        n.path_mtu = p.path_mtu;
        n.pkey = p.partition_key;
        n.qp_type = p.transport;
        // ib_send_cm_req: a message's starting PSN is what its sender's RQ expects (the
        // peer's SQ starts there): rq_psn from our REQ, sq_psn from the peer's REP. The RNR
        // retry count is the REP's (cm_rep_handler); the REQ's is the peer's to use.
        n.rq_psn = p.starting_psn;
        n.responder_resources = p.responder_resources;
        n.initiator_depth = p.initiator_depth;
        n.retry_count = p.retry_count;
        let mad = CmMessage::Req(req).to_mad(tid, p.ece_attr_mod);
        let msg = self.send_retried(now, raw, mad).ok_or(CmError::NoSuchId)?;
        self.set_state(raw, State::ReqSent { msg });
        Ok(())
    }

    /// `ib_send_cm_rep` (from REQ_RCVD or MRA_REQ_SENT).
    pub fn send_rep(&mut self, now: Instant, id: &CmId, p: &RepParams) -> Result<(), CmError> {
        self.enter(now);
        let c = self.check(
            id,
            &[S::ReqRcvd, S::MraReqSent],
            &[(p.private_data.len(), REP_PRIVATE_DATA_LEN)],
        )?;
        let raw = id.local_comm_id();
        let rep = RepRepr {
            local_comm_id: raw,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.qp_num,
            vendor_id: p.ece_vendor_id & 0x00ff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.ca_ack_delay,
            failover_accepted: FailoverAccepted(p.failover_accepted),
            end_to_end_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.port_guid(c.port),
            private_data: pad(&p.private_data),
        };
        let mad = CmMessage::Rep(rep).to_mad(c.tid, p.ece_attr_mod);
        let msg = self.send_retried(now, raw, mad).ok_or(CmError::NoSuchId)?;
        if let Some(c) = self.conns.get_mut(&raw) {
            c.local_qpn = p.qp_num & 0x00ff_ffff;
            // ib_send_cm_rep: rq_psn = the REP's starting PSN (cm_req_handler took sq_psn
            // and the RNR retry count from the REQ).
            c.neg.rq_psn = p.starting_psn;
            c.neg.responder_resources = p.responder_resources;
            c.neg.initiator_depth = p.initiator_depth;
        }
        self.set_state(raw, State::RepSent { msg });
        Ok(())
    }

    /// `ib_send_cm_rtu` (from REP_RCVD or MRA_REP_SENT).
    pub fn send_rtu(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        self.enter(now);
        self.check(
            id,
            &[S::RepRcvd, S::MraRepSent],
            &[(pd.len(), RTU_PRIVATE_DATA_LEN)],
        )?;
        let raw = id.local_comm_id();
        let Some(c) = self.conns.get_mut(&raw) else {
            return Err(CmError::NoSuchId);
        };
        c.private_data = pd.to_vec();
        let mad = Self::rtu_mad(raw, c);
        self.send_once(now, raw, mad);
        self.set_state(raw, State::Established);
        Ok(())
    }

    /// `ib_send_cm_rej`: from REP_SENT/MRA_REP_RCVD the id enters TIMEWAIT, from the other
    /// states it goes back to IDLE; it stays the user's. As in the kernel the outstanding
    /// REQ or REP is not cancelled (a destroy cancels it first).
    pub fn send_rej(
        &mut self,
        now: Instant,
        id: &CmId,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) -> Result<(), CmError> {
        self.enter(now);
        self.check(
            id,
            &[
                S::ReqSent,
                S::MraReqRcvd,
                S::ReqRcvd,
                S::MraReqSent,
                S::RepRcvd,
                S::MraRepSent,
                S::RepSent,
                S::MraRepRcvd,
            ],
            &[(ari.len(), REJ_ARI_LEN), (pd.len(), REJ_PRIVATE_DATA_LEN)],
        )?;
        self.rej_locked(now, id.local_comm_id(), reason, ari, pd);
        Ok(())
    }

    /// The body of `ib_send_cm_rej` (state already checked).
    pub(super) fn rej_locked(
        &mut self,
        now: Instant,
        id: u32,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) {
        let Some(c) = self.conns.get(&id) else { return };
        let mad = Self::rej_mad(id, c, reason, ari, pd);
        let st = c.state.kind();
        self.send_once(now, id, mad);
        if matches!(st, S::RepSent | S::MraRepRcvd) {
            self.enter_timewait(now, id);
        } else {
            self.reset_to_idle(id);
        }
    }

    /// `ib_send_cm_rej` then `ib_destroy_cm_id`. If the REJ is refused (a state that
    /// cannot reject, private data or ARI too long) nothing happens and the id comes back
    /// with the error.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: RejectReason,
        ari: &[u8],
        pd: &[u8],
    ) -> Result<(), CmIdError> {
        if let Err(error) = self.send_rej(now, &id, reason, ari, pd) {
            return Err(CmIdError { id, error });
        }
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
        self.enter(now);
        let c = self.check(
            id,
            &[S::ReqRcvd, S::RepRcvd],
            &[(pd.len(), MRA_PRIVATE_DATA_LEN)],
        )?;
        let raw = id.local_comm_id();
        let (to, what) = if c.state.kind() == S::ReqRcvd {
            (State::MraReqSent { service_timeout }, MraMessage::REQ)
        } else {
            (State::MraRepSent { service_timeout }, MraMessage::REP)
        };
        if !delayed {
            let mut with_pd = c.clone();
            with_pd.private_data = pd.to_vec();
            let mad = Self::mra_mad(raw, &with_pd, what, service_timeout);
            self.send_once(now, raw, mad);
        }
        if let Some(c) = self.conns.get_mut(&raw) {
            c.private_data = pd.to_vec();
        }
        self.set_state(raw, to);
        Ok(())
    }

    /// `ib_send_cm_dreq` (ESTABLISHED → DREQ_SENT).
    pub fn send_dreq(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        self.enter(now);
        self.check(id, &[S::Established], &[(pd.len(), DREQ_PRIVATE_DATA_LEN)])?;
        let raw = id.local_comm_id();
        if let Some(msg) = self.issue_dreq(now, raw, pd, true) {
            self.set_state(raw, State::DreqSent { msg });
        }
        Ok(())
    }

    /// `cm_format_dreq` + post: a fresh TID from our own comm ID (not kept as the id's),
    /// retransmitted (`retried`) or, for a destroy, sent once.
    pub(super) fn issue_dreq(
        &mut self,
        now: Instant,
        id: u32,
        pd: &[u8],
        retried: bool,
    ) -> Option<SendId> {
        let c = self.conns.get(&id)?;
        let tid = self.own_tid(c.port, id);
        let dreq = DreqRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data: pad(pd),
        };
        let mad = CmMessage::Dreq(dreq).to_mad(tid, 0);
        if retried {
            self.send_retried(now, id, mad)
        } else {
            self.send_once(now, id, mad);
            None
        }
    }

    /// `ib_send_cm_drep` (DREQ_RCVD → TIMEWAIT).
    pub fn send_drep(&mut self, now: Instant, id: &CmId, pd: &[u8]) -> Result<(), CmError> {
        self.enter(now);
        self.check(id, &[S::DreqRcvd], &[(pd.len(), DREP_PRIVATE_DATA_LEN)])?;
        self.drep_locked(now, id.local_comm_id(), pd);
        Ok(())
    }

    pub(super) fn drep_locked(&mut self, now: Instant, id: u32, pd: &[u8]) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.private_data = pd.to_vec();
        let mad = Self::drep_mad(id, c);
        self.enter_timewait(now, id);
        self.send_once(now, id, mad);
    }

    /// `ib_cm_notify(IB_EVENT_COMM_EST)`: a data packet arrived before the RTU. On an id
    /// that is ESTABLISHED already: [`CmError::IsConnected`] (`-EISCONN`).
    pub fn notify_comm_est(&mut self, id: &CmId) -> Result<(), CmError> {
        let raw = id.local_comm_id();
        match self.conn(id)?.state.kind() {
            S::RepSent | S::MraRepRcvd => {
                // cm_establish_handler cancels the REP.
                self.set_state(raw, State::Established);
                self.cancel_sends(raw);
                self.events
                    .push_back(CmEvent::UserEstablished { id: id.as_ref() });
                Ok(())
            }
            S::Established => Err(CmError::IsConnected),
            st => Err(CmError::InvalidState(st)),
        }
    }

    /// `ib_send_cm_sidr_req`.
    pub fn sidr_req(&mut self, now: Instant, id: &CmId, p: &SidrReqParams) -> Result<(), CmError> {
        self.enter(now);
        self.check(
            id,
            &[S::Idle],
            &[(p.private_data.len(), SIDR_REQ_PRIVATE_DATA_LEN)],
        )?;
        if self.agent(p.port).is_none() {
            return Err(CmError::NoSuchPort);
        }
        let raw = id.local_comm_id();
        let tid = self.own_tid(p.port, raw);
        let req = SidrReqRepr {
            request_id: raw,
            partition_key: p.partition_key,
            service_id: p.service_id,
            private_data: pad(&p.private_data),
        };
        let c = self.conns.get_mut(&raw).ok_or(CmError::NoSuchId)?;
        c.port = p.port;
        c.peer = Some(p.peer);
        c.service_id = p.service_id;
        c.timeout = p.timeout;
        c.max_cm_retries = p.max_cm_retries;
        let mad = CmMessage::SidrReq(req).to_mad(tid, 0);
        let msg = self.send_retried(now, raw, mad).ok_or(CmError::NoSuchId)?;
        self.set_state(raw, State::SidrReqSent { msg });
        Ok(())
    }

    /// `ib_send_cm_sidr_rep` (SIDR_REQ_RCVD → IDLE).
    pub fn sidr_rep(&mut self, now: Instant, id: &CmId, p: &SidrRepParams) -> Result<(), CmError> {
        self.enter(now);
        self.check(
            id,
            &[S::SidrReqRcvd],
            &[
                (p.info.len(), SIDR_REP_INFO_LEN),
                (p.private_data.len(), SIDR_REP_PRIVATE_DATA_LEN),
            ],
        )?;
        self.sidr_rep_locked(now, id.local_comm_id(), p);
        Ok(())
    }

    /// `cm_format_sidr_rep` + post: the info goes in, its length field stays 0 as the
    /// kernel leaves it.
    pub(super) fn sidr_rep_locked(&mut self, now: Instant, id: u32, p: &SidrRepParams) {
        let Some(c) = self.conns.get(&id) else { return };
        let rep = SidrRepRepr {
            request_id: c.remote_id,
            status: p.status,
            additional_info_length: 0,
            vendor_id_h: 0,
            qpn: p.qp_num,
            vendor_id_l: 0,
            service_id: c.service_id,
            qkey: p.qkey,
            additional_info: pad(&p.info),
            private_data: pad(&p.private_data),
        };
        let mad = CmMessage::SidrRep(rep).to_mad(c.tid, 0);
        let key = match c.state {
            State::SidrReqRcvd { key } => Some(key),
            _ => None,
        };
        self.send_once(now, id, mad);
        if let Some(key) = key {
            self.remote_sidr.remove(&key);
        }
        self.set_state(id, State::Idle);
    }
}
