//! Receiving: one handler per CM message (cm.c's `cm_*_handler`). Each finds the id the
//! way cm.c does (`cm_acquire_id` and the remote tables), then does what the state table
//! ([`super::table`]) says for that id's state.

use softrdma_wire::cm::{
    pad, AttrId, CmMessage, DrepRepr, DreqRepr, MraMessage, MraRepr, RejMessage, RejRepr,
    RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, REJ_ARI_LEN,
    REJ_PRIVATE_DATA_LEN,
};
use softrdma_wire::mad::Mad;

use super::conn::{Conn, State};
use super::counters::CmCounterGroup;
use super::table::{rx_action, OnMsg, RxAction, RxMsg};
use super::types::ReqInfo;
use super::{cm_ack_timeout, cm_convert_to_ms, CmEndpoint, CmEvent, CmIdRef, CmPort, CmState};
use crate::mad::{MadAddr, SendParams};
use crate::time::Instant;
use crate::verbs::{GSI_QKEY, GSI_QPN};

/// Where a message came from and how (the parts of `ib_mad_recv_wc` the handlers use).
#[derive(Clone, Copy)]
pub(super) struct Rx<'a> {
    pub now: Instant,
    pub port: CmPort,
    /// The sender's QP1 (answers go to QP 1 with the GSI Q_Key, as `ib_create_send_mad(..,
    /// 1, ..)` addresses them).
    pub from: MadAddr,
    pub mad: &'a Mad,
}

impl Rx<'_> {
    fn tid(&self) -> u64 {
        self.mad.header.tid
    }
    /// The received message's first two words, whatever its type (`cm_issue_rej` reads
    /// them as a REJ's local and remote comm IDs).
    fn words(&self) -> (u32, u32) {
        let d = &self.mad.data;
        (
            u32::from_be_bytes(pad::<4>(&d[0..4])),
            u32::from_be_bytes(pad::<4>(&d[4..8])),
        )
    }
}

impl CmEndpoint {
    pub(super) fn dispatch(&mut self, now: Instant, port: CmPort, from: MadAddr, mad: &Mad) {
        let attr = AttrId(mad.header.attr_id);
        // cm_recv_handler counts every CM message before anything looks at it.
        self.counters.add(CmCounterGroup::RxMsgs, attr, 1);
        let Ok(msg) = CmMessage::from_mad(mad) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let from = MadAddr {
            qpn: GSI_QPN,
            qkey: GSI_QKEY,
            ..from
        };
        let rx = Rx {
            now,
            port,
            from,
            mad,
        };
        match msg {
            CmMessage::Req(r) => self.req_handler(rx, r),
            CmMessage::Mra(r) => self.mra_handler(rx, r),
            CmMessage::Rej(r) => self.rej_handler(rx, r),
            CmMessage::Rep(r) => self.rep_handler(rx, r),
            CmMessage::Rtu(r) => self.rtu_handler(r),
            CmMessage::Dreq(r) => self.dreq_handler(rx, r),
            CmMessage::Drep(r) => self.drep_handler(rx, r),
            CmMessage::SidrReq(r) => self.sidr_req_handler(rx, r),
            CmMessage::SidrRep(r) => self.sidr_rep_handler(r),
            // cm_lap_handler / cm_apr_handler: not on RoCE. ClassPortInfo and unknown
            // attributes never reach ib_cm's handlers.
            _ => self.counters.rx_dropped += 1,
        }
    }

    fn dup(&mut self, a: AttrId) {
        self.counters.add(CmCounterGroup::RxDuplicates, a, 1);
    }

    /// `cm_acquire_id(local_id, remote_id)`: the id with that local comm ID whose remote
    /// comm ID is `remote`.
    fn acquire(&self, local: u32, remote: u32) -> Option<(u32, CmState)> {
        self.conns
            .get(&local)
            .filter(|c| c.remote_id == remote)
            .map(|c| (local, c.state.kind()))
    }

    /// `cm_issue_rej`: a REJ with no id behind it. The received message's first two words
    /// become the REJ's remote and local comm IDs (so a REQ's reserved byte and ECE vendor
    /// ID become the local comm ID); the TID is the received one.
    fn issue_rej(&mut self, rx: Rx<'_>, reason: RejectReason, msg: RejMessage) {
        let (w0, w1) = rx.words();
        let rej = RejRepr {
            local_comm_id: w1,
            remote_comm_id: w0,
            message_rejected: msg,
            reject_info_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        };
        let mad = CmMessage::Rej(rej).to_mad(rx.tid(), 0);
        self.send_response(rx.now, rx.port, rx.from, mad);
    }

    /// `cm_issue_drep`: a DREP with no id behind it, the DREQ's comm IDs swapped.
    fn issue_drep(&mut self, rx: Rx<'_>) {
        let (w0, w1) = rx.words();
        let drep = DrepRepr {
            local_comm_id: w1,
            remote_comm_id: w0,
            private_data: [0; softrdma_wire::cm::DREP_PRIVATE_DATA_LEN],
        };
        let mad = CmMessage::Drep(drep).to_mad(rx.tid(), 0);
        self.send_response(rx.now, rx.port, rx.from, mad);
    }

    /// The stale-connection answer of `cm_match_req` / `cm_rep_handler`: REJ 10 for the
    /// message, and a DREQ to the connection that holds the remote QPN if it is
    /// ESTABLISHED (`ib_send_cm_dreq` refuses any other state).
    fn stale(&mut self, rx: Rx<'_>, old: u32, msg: RejMessage) {
        self.issue_rej(rx, RejectReason::STALE_CONN, msg);
        if self.conns.get(&old).map(|c| c.state.kind()) == Some(CmState::Established) {
            if let Some(msg) = self.issue_dreq(rx.now, old, &[], true) {
                self.set_state(old, State::DreqSent { msg });
            }
        }
    }

    /// `cm_req_handler` (with `cm_match_req`): a duplicate by the remote-ID table, a stale
    /// connection by the remote-QPN table, else a new id for the listener.
    /// The connection a REQ or SIDR REQ from `rx` opens on our side, or `None` when the
    /// half-open limit is reached. That limit is ours (the kernel has none): too many
    /// requests the user has not answered, each holding an id. The request is then dropped
    /// without an answer, like ucma's backlog does: the peer's retransmission finds room
    /// once the user catches up.
    fn passive_conn(&mut self, rx: &Rx<'_>, service_id: u64, remote_id: u32) -> Option<Conn> {
        if self.half_open >= self.cfg.half_open_limit {
            self.counters.half_open_drops += 1;
            return None;
        }
        let mut c = Conn::new(rx.port);
        c.peer = Some(rx.from);
        c.tid = rx.tid();
        c.service_id = service_id;
        c.remote_id = remote_id;
        Some(c)
    }

    fn req_handler(&mut self, rx: Rx<'_>, req: ReqRepr) {
        let guid = req.local_ca_guid.0;
        if let Some(&old) = self.remote_ids.get(&(req.local_comm_id, guid)) {
            if let Some(c) = self.conns.get(&old) {
                match rx_action(Some(c.state.kind()), RxMsg::Req) {
                    RxAction::Duplicate(resend) => {
                        let mad = match (resend, c.state) {
                            (Some(AttrId::MRA), State::MraReqSent { service_timeout }) => {
                                Some(Self::mra_mad(old, c, MraMessage::REQ, service_timeout))
                            }
                            _ => None,
                        };
                        self.dup(AttrId::REQ);
                        if let Some(mad) = mad {
                            self.send_response(rx.now, rx.port, rx.from, mad);
                        }
                        return;
                    }
                    RxAction::NotMatched => {}
                    _ => {
                        self.counters.rx_dropped += 1;
                        return;
                    }
                }
            }
        }
        if let Some(&old) = self.remote_qpns.get(&(req.local_qpn, guid)) {
            self.stale(rx, old, RejMessage::REQ);
            return;
        }
        let RxAction::Listen(_) = rx_action(None, RxMsg::Req) else {
            return;
        };
        let Some(&listen) = self.listeners.get(&req.service_id) else {
            self.issue_rej(rx, RejectReason::INVALID_SERVICE_ID, RejMessage::REQ);
            return;
        };
        let Some(mut c) = self.passive_conn(&rx, req.service_id, req.local_comm_id) else {
            return;
        };
        c.remote_ca_guid = guid;
        c.remote_qpn = req.local_qpn;
        // The REP/DREQ wait is cvt(REQ.local_cm_response_timeout), nothing more.
        c.timeout = cm_convert_to_ms(req.local_cm_response_timeout);
        c.max_cm_retries = req.max_cm_retries;
        let n = &mut c.neg;
        // cm_format_paths_from_req: the packet lifetime is the local ACK timeout minus
        // one (if any); cm_init_av_by_path: av.timeout = that + 1.
        let lat = req.primary_path.local_ack_timeout;
        n.av_timeout = lat - u8::from(lat > 0) + 1;
        // Our view of the path: the REQ's, with local and remote swapped.
        let mut path = req.primary_path;
        std::mem::swap(&mut path.local_gid, &mut path.remote_gid);
        std::mem::swap(&mut path.local_lid, &mut path.remote_lid);
        n.path = path;
        n.path_mtu = req.path_mtu;
        n.pkey = req.partition_key;
        n.qp_type = req.transport_service_type;
        n.sq_psn = req.starting_psn;
        n.responder_resources = req.initiator_depth;
        n.initiator_depth = req.responder_resources;
        n.retry_count = req.retry_count;
        n.rnr_retry_count = req.rnr_retry_count;
        let new = self.new_id(c);
        let id = new.local_comm_id();
        self.insert_remote(id, (req.local_comm_id, guid), (req.local_qpn, guid));
        self.set_state(id, State::ReqRcvd);
        self.events.push_back(CmEvent::ReqReceived {
            id: new,
            listen: CmIdRef(listen),
            req: Box::new(ReqInfo {
                req,
                port: rx.port,
                peer: rx.from,
                attr_mod: rx.mad.header.attr_mod,
            }),
        });
    }

    /// `cm_rep_handler`, and `cm_dup_rep_handler` when the REP names an id that knows its
    /// remote comm ID already.
    fn rep_handler(&mut self, rx: Rx<'_>, rep: RepRepr) {
        let Some((id, st)) = self.acquire(rep.remote_comm_id, 0) else {
            self.dup_rep_handler(rx, rep);
            return;
        };
        let RxAction::Take(to, on) = rx_action(Some(st), RxMsg::Rep) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let guid = rep.local_ca_guid.0;
        if self.remote_ids.contains_key(&(rep.local_comm_id, guid)) {
            // cm_insert_remote_id fails: a REP we know already, dropped.
            self.counters.rx_dropped += 1;
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(rep.local_qpn, guid)) {
            // The id stays in REQ_SENT, its REQ running.
            self.stale(rx, old, RejMessage::REP);
            return;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            c.remote_id = rep.local_comm_id;
            c.remote_ca_guid = guid;
            c.remote_qpn = rep.local_qpn;
            let n = &mut c.neg;
            n.sq_psn = rep.starting_psn;
            n.initiator_depth = rep.responder_resources;
            n.responder_resources = rep.initiator_depth;
            n.rnr_retry_count = rep.rnr_retry_count;
            n.av_timeout = cm_ack_timeout(rep.target_ack_delay, n.av_timeout.saturating_sub(1));
        }
        self.insert_remote(id, (rep.local_comm_id, guid), (rep.local_qpn, guid));
        if on == OnMsg::Cancel {
            self.cancel_sends(id);
        }
        debug_assert_eq!(to, CmState::RepRcvd);
        self.set_state(id, State::RepRcvd);
        self.events.push_back(CmEvent::RepReceived {
            id: CmIdRef(id),
            rep: Box::new(rep),
            attr_mod: rx.mad.header.attr_mod,
        });
    }

    /// `cm_dup_rep_handler`: counted as a duplicate; the RTU again from ESTABLISHED, the
    /// MRA again from MRA_REP_SENT.
    fn dup_rep_handler(&mut self, rx: Rx<'_>, rep: RepRepr) {
        let Some((id, st)) = self.acquire(rep.remote_comm_id, rep.local_comm_id) else {
            self.counters.rx_dropped += 1;
            return;
        };
        self.dup(AttrId::REP);
        let Some(c) = self.conns.get(&id) else { return };
        let mad = match (rx_action(Some(st), RxMsg::RepKnown), c.state) {
            (RxAction::Duplicate(Some(AttrId::RTU)), _) => Some(Self::rtu_mad(id, c)),
            (RxAction::Duplicate(Some(AttrId::MRA)), State::MraRepSent { service_timeout }) => {
                Some(Self::mra_mad(id, c, MraMessage::REP, service_timeout))
            }
            _ => None,
        };
        if let Some(mad) = mad {
            self.send_response(rx.now, rx.port, rx.from, mad);
        }
    }

    /// `cm_rtu_handler`.
    fn rtu_handler(&mut self, rtu: RtuRepr) {
        let Some((id, st)) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            self.counters.rx_dropped += 1;
            return;
        };
        match rx_action(Some(st), RxMsg::Rtu) {
            RxAction::Take(_, on) => {
                self.set_state(id, State::Established);
                if on == OnMsg::Cancel {
                    self.cancel_sends(id);
                }
                self.events.push_back(CmEvent::RtuReceived {
                    id: CmIdRef(id),
                    private_data: rtu.private_data.to_vec(),
                });
            }
            RxAction::Duplicate(_) => self.dup(AttrId::RTU),
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_mra_handler` (`cm_acquire_mraed_id`: an MRA of a REQ names an id that has no
    /// remote comm ID yet).
    fn mra_handler(&mut self, rx: Rx<'_>, mra: MraRepr) {
        let (found, kind) = match mra.message_mraed {
            MraMessage::REQ => (self.acquire(mra.remote_comm_id, 0), RxMsg::MraReq),
            MraMessage::REP => (
                self.acquire(mra.remote_comm_id, mra.local_comm_id),
                RxMsg::MraRep,
            ),
            MraMessage::LAP => (
                self.acquire(mra.remote_comm_id, mra.local_comm_id),
                RxMsg::MraOther,
            ),
            _ => (None, RxMsg::MraOther),
        };
        let Some((id, st)) = found else {
            self.counters.rx_dropped += 1;
            return;
        };
        let Some(c) = self.conns.get(&id) else { return };
        match (rx_action(Some(st), kind), c.state.msg()) {
            (RxAction::Take(to, OnMsg::Extend), Some(msg)) => {
                // ib_modify_mad(msg, cvt(service_timeout) + cvt(av.timeout)).
                let timeout =
                    cm_convert_to_ms(mra.service_timeout) + cm_convert_to_ms(c.neg.av_timeout);
                let port = c.port;
                self.out.push_back((
                    port,
                    crate::mad::MadOp::Modify {
                        id: msg,
                        at: rx.now,
                        timeout,
                    },
                ));
                let next = if to == CmState::MraReqRcvd {
                    State::MraReqRcvd { msg }
                } else {
                    State::MraRepRcvd { msg }
                };
                self.set_state(id, next);
                self.events.push_back(CmEvent::MraReceived {
                    id: CmIdRef(id),
                    service_timeout: mra.service_timeout,
                    private_data: mra.private_data.to_vec(),
                });
            }
            // A repeated MRA: counted, and the wait is not extended again.
            (RxAction::Duplicate(_), _) => self.dup(AttrId::MRA),
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_rej_handler` (`cm_acquire_rejected_id`: a REJ TIMEOUT is found by its local comm
    /// ID and the GUID in its ARI in the remote-ID table; a REJ of a REQ by its remote comm
    /// ID alone; any other by both comm IDs).
    fn rej_handler(&mut self, rx: Rx<'_>, rej: RejRepr) {
        let found = if rej.reason == RejectReason::TIMEOUT {
            let guid = u64::from_be_bytes(pad::<8>(&rej.ari));
            self.remote_ids
                .get(&(rej.local_comm_id, guid))
                .and_then(|&id| self.acquire(id, rej.local_comm_id))
        } else if rej.message_rejected == RejMessage::REQ {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some((id, st)) = found else {
            self.counters.rx_dropped += 1;
            return;
        };
        let kind = if rej.reason == RejectReason::STALE_CONN {
            RxMsg::RejStale
        } else {
            RxMsg::Rej
        };
        let RxAction::Take(to, on) = rx_action(Some(st), kind) else {
            self.counters.rx_dropped += 1;
            return;
        };
        if on == OnMsg::Cancel {
            self.cancel_sends(id);
        }
        if to == CmState::Timewait {
            self.enter_timewait(rx.now, id);
        } else {
            self.reset_to_idle(id);
        }
        self.events.push_back(CmEvent::RejReceived {
            id: CmIdRef(id),
            rej: Box::new(rej),
        });
    }

    /// `cm_dreq_handler`.
    fn dreq_handler(&mut self, rx: Rx<'_>, dreq: DreqRepr) {
        let Some((id, st)) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // cm_issue_drep: a DREP with no id behind it (counted as a duplicate DREQ).
            if let RxAction::Answer(_) = rx_action(None, RxMsg::Dreq) {
                self.dup(AttrId::DREQ);
                self.issue_drep(rx);
            }
            return;
        };
        if self.conns.get(&id).map(|c| c.local_qpn) != Some(dreq.remote_qpn_eecn) {
            self.counters.rx_dropped += 1;
            return;
        }
        match rx_action(Some(st), RxMsg::Dreq) {
            RxAction::Take(_, on) => {
                if on == OnMsg::Cancel {
                    self.cancel_sends(id);
                }
                if let Some(c) = self.conns.get_mut(&id) {
                    // The DREP answers with the DREQ's TID.
                    c.tid = rx.tid();
                }
                self.set_state(id, State::DreqRcvd);
                self.events.push_back(CmEvent::DreqReceived {
                    id: CmIdRef(id),
                    private_data: dreq.private_data.to_vec(),
                });
            }
            RxAction::Duplicate(resend) => {
                self.dup(AttrId::DREQ);
                if resend == Some(AttrId::DREP) {
                    // cm_format_drep from the id (its TID and private data), even if it
                    // never sent one (e.g. it entered TIMEWAIT through a REJ).
                    if let Some(mad) = self.conns.get(&id).map(|c| Self::drep_mad(id, c)) {
                        self.send_response(rx.now, rx.port, rx.from, mad);
                    }
                }
            }
            _ => self.counters.rx_dropped += 1,
        }
    }

    /// `cm_drep_handler`.
    fn drep_handler(&mut self, rx: Rx<'_>, drep: DrepRepr) {
        let Some((id, st)) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let RxAction::Take(_, on) = rx_action(Some(st), RxMsg::Drep) else {
            self.counters.rx_dropped += 1;
            return;
        };
        self.enter_timewait(rx.now, id);
        if on == OnMsg::Cancel {
            self.cancel_sends(id);
        }
        self.events.push_back(CmEvent::DrepReceived {
            id: CmIdRef(id),
            private_data: drep.private_data.to_vec(),
        });
    }

    /// `cm_sidr_req_handler`: duplicates by (request ID, peer GID); no listener → SIDR_REP
    /// status 1 (UNSUPPORTED) from a passing id.
    fn sidr_req_handler(&mut self, rx: Rx<'_>, req: SidrReqRepr) {
        let key = (req.request_id, rx.from.gid.0);
        if let Some(st) = self
            .remote_sidr
            .get(&key)
            .and_then(|id| self.conns.get(id))
            .map(|c| c.state.kind())
        {
            if let RxAction::Duplicate(_) = rx_action(Some(st), RxMsg::SidrReq) {
                self.dup(AttrId::SIDR_REQ);
                return;
            }
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
            let mad = CmMessage::SidrRep(rep).to_mad(rx.tid(), 0);
            // Sent by the short-lived id the kernel made for the request.
            self.post(rx.now, rx.port, None, rx.from, mad, SendParams::ONCE, false);
            return;
        };
        let Some(mut c) = self.passive_conn(&rx, req.service_id, req.request_id) else {
            return;
        };
        c.neg.pkey = req.partition_key;
        let new = self.new_id(c);
        let id = new.local_comm_id();
        self.remote_sidr.insert(key, id);
        self.set_state(id, State::SidrReqRcvd { key });
        self.events.push_back(CmEvent::SidrReqReceived {
            id: new,
            listen: CmIdRef(listen),
            req: Box::new(req),
            peer: rx.from,
        });
    }

    /// `cm_sidr_rep_handler`.
    fn sidr_rep_handler(&mut self, rep: SidrRepRepr) {
        let Some((id, st)) = self.acquire(rep.request_id, 0) else {
            self.counters.rx_dropped += 1;
            return;
        };
        let RxAction::Take(_, on) = rx_action(Some(st), RxMsg::SidrRep) else {
            self.counters.rx_dropped += 1;
            return;
        };
        self.set_state(id, State::Idle);
        if on == OnMsg::Cancel {
            self.cancel_sends(id);
        }
        self.events.push_back(CmEvent::SidrRepReceived {
            id: CmIdRef(id),
            rep: Box::new(rep),
        });
    }
}
