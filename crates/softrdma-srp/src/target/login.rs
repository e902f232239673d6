//! Logins (`srpt_cm_req_recv`): the request in both CM layouts, the checks, the new
//! channel's QP and rings, the accept or the reject.

use std::collections::VecDeque;
use std::net::IpAddr;

use softrdma_core::cm::{CmId, RepParams, ReqInfo};
use softrdma_core::device::{GidType, PORT_NUM};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmId};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{AccessFlags, MrKeys, QpAttr, QpAttrMask, QpInitAttr, QpState};
use softrdma_core::Stack;
use softrdma_scsi::InitiatorId;
use softrdma_wire::srp::login::{MultiChannelAction, MultiChannelResult};
use softrdma_wire::srp::{LoginReqRdmaRepr, LoginReqRepr};

use crate::channel::ChannelState;
use crate::login::{self, LoginPolicy, LoginRequest, Refusal, SRPT_RDMA_DEPTH};

use super::io::Io;
use super::{
    post_recv_slot, verbs, Channel, ChannelId, ConnId, LoginFailure, LogoutBy, NexusEntry,
    SrpEvent, SrpTarget,
};

impl SrpTarget {
    /// An RDMA CM CONNECT_REQUEST (`srpt_rdma_cm_req_recv`): the 56-byte login after the IP
    /// CM header. `id` is the request's new id; `private_data` the event's.
    pub fn rdma_connect_request(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<ChannelId, LoginFailure> {
        let source = rdma.remote_addr(id.name());
        let port = rdma
            .port_of(id.name())
            .and_then(|p| self.port_for(p))
            .map(|p| p.0);
        let (Some(port), Ok(r)) = (port, LoginReqRdmaRepr::parse(private_data)) else {
            self.events.push_back(SrpEvent::LoginRefused {
                initiator: String::new(),
                source: source.map(|s| s.to_string()).unwrap_or_default(),
                refusal: None,
            });
            return Err(LoginFailure {
                conn: ConnId::Rdma(id),
                refusal: None,
                rej: None,
            });
        };
        let src = source.map(|s| s.ip().to_string()).unwrap_or_default();
        self.login(
            now,
            rdma,
            stack,
            port,
            ConnId::Rdma(id),
            r.into(),
            source.map(|s| s.ip()),
            src,
            softrdma_wire::Gid::ZERO,
        )
    }

    /// An IB CM REQ to our listener (`srpt_ib_cm_req_recv`): the 64-byte login.
    pub fn ib_req(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        id: CmId,
        req: &ReqInfo,
    ) -> Result<ChannelId, LoginFailure> {
        let gid = req.req.primary_path.local_gid;
        let src = crate::guid::colon_guid(u64::from_be_bytes(
            gid.0[8..16].try_into().unwrap_or([0; 8]),
        ));
        let port = self.port_for(req.port).map(|p| p.0);
        let (Some(port), Ok(r)) = (port, LoginReqRepr::parse(&req.req.private_data[..64])) else {
            self.events.push_back(SrpEvent::LoginRefused {
                initiator: String::new(),
                source: src,
                refusal: None,
            });
            return Err(LoginFailure {
                conn: ConnId::Ib(id),
                refusal: None,
                rej: None,
            });
        };
        self.login(
            now,
            rdma,
            stack,
            port,
            ConnId::Ib(id),
            r.into(),
            Some(gid.to_ip()),
            src,
            req.req.primary_path.remote_gid,
        )
    }

    /// `srpt_cm_req_recv`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn login(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: usize,
        conn: ConnId,
        req: LoginRequest,
        source: Option<IpAddr>,
        source_name: String,
        our_gid: softrdma_wire::Gid,
    ) -> Result<ChannelId, LoginFailure> {
        let initiator = req.initiator_hex();
        self.events.push_back(SrpEvent::LoginRequest {
            initiator: initiator.clone(),
            target: login::hex_port_id(&req.target_port_id),
            it_iu_len: req.it_iu_len,
            source: source_name.clone(),
        });
        let fail = |me: &mut SrpTarget, conn: ConnId, r: Refusal| {
            me.events.push_back(SrpEvent::LoginRefused {
                initiator: initiator.clone(),
                source: source_name.clone(),
                refusal: Some(r.clone()),
            });
            Err(LoginFailure {
                conn,
                rej: Some(r.login_rej(&req)),
                refusal: Some(r),
            })
        };
        if let Err(r) = login::precheck(&self.cfg.login, &req) {
            return fail(self, conn, r);
        }
        let ib = matches!(conn, ConnId::Ib(_));
        let res = match self.alloc_channel(stack, port, ib, &req) {
            Ok(r) => r,
            Err(r) => return fail(self, conn, r),
        };
        let key = (req.initiator_port_id, req.target_port_id);
        let single = req.multichannel_action() == MultiChannelAction::SINGLE;
        let others: Vec<u32> = self
            .nexuses
            .get(&key)
            .map(|n| {
                n.channels
                    .iter()
                    .copied()
                    .filter(|c| {
                        self.channels
                            .get(c)
                            .is_some_and(|c| c.state < ChannelState::Disconnecting)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let keep = if single { 0 } else { others.len() };
        if let Err(r) = login::session_check(&self.cfg.login, &req, source, keep) {
            res.free(stack);
            return fail(self, conn, r);
        }
        // Multi-channel action (ib_srpt: after the session is set up, before the REP).
        let mc = if single {
            let mut terminated = false;
            for o in others {
                if self.disconnect_channel(now, rdma, Some((port, &mut *stack)), o) {
                    self.events.push_back(SrpEvent::Logout {
                        channel: ChannelId(o),
                        by: LogoutBy::Target,
                        why: "relogin (SINGLE multi-channel action) closed it".into(),
                    });
                    terminated = true;
                }
            }
            if terminated {
                MultiChannelResult::TERMINATED
            } else {
                MultiChannelResult::NO_CHAN
            }
        } else {
            MultiChannelResult::MAINTAINED
        };
        let rsp = login::login_rsp(&self.cfg.login, &req, mc);
        let accepted = match &conn {
            ConnId::Rdma(id) => {
                let param = ConnParam {
                    private_data: rsp.to_bytes(),
                    responder_resources: SRPT_RDMA_DEPTH,
                    initiator_depth: SRPT_RDMA_DEPTH,
                    flow_control: true,
                    retry_count: 7,
                    rnr_retry_count: 7,
                };
                rdma.accept(now, stack, id, res.qpn, &param)
                    .map_err(|e| e.to_string())
            }
            ConnId::Ib(id) => ib_accept(now, rdma, stack, id, res.qpn, our_gid, &rsp.to_bytes()),
        };
        if let Err(e) = accepted {
            res.free(stack);
            return fail(self, conn, Refusal::Resources(e));
        }
        let nexus = match self.nexuses.get_mut(&key) {
            Some(n) => n.scsi,
            None => {
                // The I_T nexus of persistent reservations: the 16-byte initiator port
                // identifier (initiator_ext included) and the target port, whose relative
                // port identifier is its index + 1.
                let scsi = self.scsi.register_nexus_on(
                    InitiatorId(u128::from_be_bytes(req.initiator_port_id)),
                    u16::try_from(port + 1).unwrap_or(u16::MAX),
                );
                // A node ACL with mapped LUNs gives the nexus its own LUN numbers.
                let map = self.cfg.lun_maps.iter().find(|(e, _)| {
                    crate::login::admits(
                        Some(std::slice::from_ref(e)),
                        &req.initiator_port_id,
                        source,
                    )
                });
                if let Some((_, m)) = map {
                    if let Err(e) = self.scsi.set_lun_map(scsi, Some(m.clone())) {
                        self.events.push_back(SrpEvent::Warning {
                            channel: None,
                            what: format!("the node ACL's LUN map does not apply: {e}"),
                        });
                    }
                }
                self.nexuses.insert(
                    key,
                    NexusEntry {
                        scsi,
                        channels: Vec::new(),
                    },
                );
                scsi
            }
        };
        let id = self.next_channel;
        self.next_channel = self.next_channel.wrapping_add(1).max(1);
        if let Some(n) = self.nexuses.get_mut(&key) {
            n.channels.push(id);
        }
        let lp = &self.cfg.login;
        let ch = Channel {
            port,
            conn,
            state: ChannelState::Connecting,
            qpn: res.qpn,
            key,
            nexus,
            initiator: initiator.clone(),
            source,
            max_ti_iu_len: req.it_iu_len,
            imm_data_offset: req.accepted_imm_data_offset(),
            max_req: lp.max_req_size,
            max_rsp: lp.max_rsp_size,
            recv: res.recv,
            send: res.send,
            req_lim_delta: 0,
            free_io: (0..lp.rq_size).rev().collect(),
            ios: (0..lp.rq_size).map(|_| Io::default()).collect(),
            waiting: VecDeque::new(),
            blocked: VecDeque::new(),
            bufs: Vec::new(),
            sq_avail: self.cfg.sq_size,
            disconnect_due: false,
        };
        // Rebind the receive wr_ids to the channel's number.
        let ch_recv = ch.recv;
        self.channels.insert(id, ch);
        for i in 0..lp_rq(&self.cfg.login) {
            let _ = post_recv_slot(stack, res.qpn, id, ch_recv, self.cfg.login.max_req_size, i);
        }
        self.events.push_back(SrpEvent::LoginAccepted {
            channel: ChannelId(id),
            initiator,
            source: source_name,
            it_iu_len: req.it_iu_len,
            immediate: req.accepted_imm_data_offset() != 0,
            multichannel: mc,
            cm: if ib { "IB CM" } else { "RDMA CM" },
        });
        Ok(ChannelId(id))
    }

    /// The QP and buffers of a new channel (`srpt_create_ch_ib` and the rings).
    pub(super) fn alloc_channel(
        &mut self,
        stack: &mut Stack,
        port: usize,
        ib: bool,
        _req: &LoginRequest,
    ) -> Result<ChannelRes, Refusal> {
        let p = self.ports.get(port).ok_or_else(|| verbs("no such port"))?;
        let lp = &self.cfg.login;
        let (pd, cq) = (p.pd, p.cq);
        let max_wr = stack.device.query_device().max_qp_wr;
        let (qpn, _) = stack
            .verbs
            .create_qp(
                QpInitAttr::rc(pd, cq, self.cfg.sq_size.min(max_wr), lp.rq_size.min(max_wr))
                    .signal_all(),
            )
            .map_err(verbs)?;
        let mut res = ChannelRes {
            qpn,
            recv: MrKeys { lkey: 0, rkey: 0 },
            send: MrKeys { lkey: 0, rkey: 0 },
        };
        let init = if ib {
            // srpt_init_ch_qp: local write only.
            let attr = QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: PORT_NUM,
                qp_access_flags: AccessFlags::LOCAL_WRITE,
                ..QpAttr::default()
            };
            stack
                .modify_qp(
                    qpn,
                    &attr,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::ACCESS_FLAGS,
                )
                .map_err(verbs)
        } else {
            RdmaCm::init_qp(stack, qpn).map_err(verbs)
        };
        if let Err(e) = init {
            res.free(stack);
            return Err(e);
        }
        let rq = lp.rq_size as usize;
        let recv = stack.verbs.reg_mr_with(
            pd,
            vec![0; rq * lp.max_req_size as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        match recv {
            Ok(k) => res.recv = k,
            Err(e) => {
                res.free(stack);
                return Err(verbs(e));
            }
        }
        match stack.verbs.reg_mr_with(
            pd,
            vec![0; rq * lp.max_rsp_size as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        ) {
            Ok(k) => res.send = k,
            Err(e) => {
                res.free(stack);
                return Err(verbs(e));
            }
        }
        Ok(res)
    }
}

/// The per-channel resources a login allocates.
pub(super) struct ChannelRes {
    qpn: u32,
    recv: MrKeys,
    send: MrKeys,
}

impl ChannelRes {
    pub(super) fn free(&self, stack: &mut Stack) {
        let _ = stack.destroy_qp(self.qpn);
        if self.recv.lkey != 0 {
            let _ = stack.verbs.dereg_mr(self.recv.lkey);
        }
        if self.send.lkey != 0 {
            let _ = stack.verbs.dereg_mr(self.send.lkey);
        }
    }
}

pub(super) fn lp_rq(p: &LoginPolicy) -> u32 {
    p.rq_size
}

/// The IB CM accept: the QP to RTR (`srpt_ch_qp_rtr`), then the REP with ib_srpt's
/// parameters (`srq = 1`, RNR retry 7, flow control, 4 RDMA READs each way).
pub(super) fn ib_accept(
    now: Instant,
    rdma: &mut RdmaCm,
    stack: &mut Stack,
    id: &CmId,
    qpn: u32,
    our_gid: softrdma_wire::Gid,
    rsp: &[u8],
) -> Result<(), String> {
    let (mut a, m) = rdma
        .cm()
        .init_qp_attr(id, QpState::Rtr)
        .map_err(|e| format!("{e:?}"))?;
    a.max_dest_rd_atomic = SRPT_RDMA_DEPTH;
    // The source GID: our RoCEv2 entry for the address the REQ was sent to.
    if let Ok(idx) = stack.device.find_gid(PORT_NUM, &our_gid, GidType::RoceV2) {
        a.ah_attr.sgid_index = idx;
    }
    stack.modify_qp(qpn, &a, m).map_err(|e| e.to_string())?;
    let p = RepParams {
        qp_num: qpn,
        starting_psn: 0,
        private_data: rsp.to_vec(),
        responder_resources: SRPT_RDMA_DEPTH,
        initiator_depth: SRPT_RDMA_DEPTH,
        failover_accepted: 0,
        flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        ece_vendor_id: 0,
        ece_attr_mod: 0,
    };
    rdma.cm_mut()
        .send_rep(now, id, &p)
        .map_err(|e| format!("{e:?}"))
}
