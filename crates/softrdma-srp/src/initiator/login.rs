//! Logins (`srp_connect_ch`, `srp_send_req`, `srp_cm_rep_handler`): a channel's QP, its
//! login request over the RDMA CM or the IB CM, the login response, then the next channel.

use std::collections::VecDeque;

use softrdma_core::cm::{CmPort, ReqParams};
use softrdma_core::device::PORT_NUM;
use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::verbs::{AccessFlags, QpAttr, QpAttrMask, QpInitAttr, QpState};
use softrdma_core::Stack;
use softrdma_wire::cm::PathMtu;
use softrdma_wire::srp::{
    LoginReqRepr, LoginRspRepr, BUF_FORMAT_DIRECT, BUF_FORMAT_INDIRECT, IMMED_REQUESTED,
};
use softrdma_wire::Gid;

use crate::add_target::Dest;
use crate::iu::SRP_IMM_DATA_OFFSET;

use super::completion::post_recv;
use super::{
    max_it_iu_len, res, Channel, ChannelState, Conn, DownReason, InitiatorEvent, LoginError, Rings,
    SessionState, Slot, SrpInitiator, SRP_RESPONDER_RESOURCES, SRP_TSK_MGMT_SQ_SIZE,
};

impl SrpInitiator {
    /// Starts the login on `port` (the device whose stack this is): the PD and CQ, then
    /// the first channel (`add_target_store` → `srp_connect_ch`).
    pub fn start(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: CmPort,
    ) -> Result<(), LoginError> {
        self.cm_port = Some(port);
        self.sgid = stack
            .device
            .query_gid(PORT_NUM, 0)
            .map(|g| g.gid)
            .map_err(LoginError::NoGid)?;
        if self.pd.is_none() {
            self.pd = Some(stack.verbs.alloc_pd().map_err(res)?);
        }
        let per_ch = 3 * self.queue_size + 2;
        let cqe = (per_ch * self.ch_count as u32).min(stack.device.query_device().max_cqe);
        self.cq = Some(stack.verbs.create_cq(cqe).map_err(res)?);
        if self.src.is_none() {
            return self.fail_login(0, LoginError::NoSourceAddress);
        }
        self.connect_channel(now, rdma, stack, 0)
    }

    pub(super) fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The login request of channel `k` (`srp_send_req`).
    pub(super) fn login_req(&self, multi: bool) -> LoginReqRepr {
        let mut flags = if multi { 1 } else { 0 };
        let mut imm = 0;
        if self.cfg.use_imm_data {
            flags |= IMMED_REQUESTED;
            imm = SRP_IMM_DATA_OFFSET as u16;
        }
        LoginReqRepr {
            tag: 0,
            req_it_iu_len: max_it_iu_len(
                self.cmd_sg_cnt,
                self.cfg.use_imm_data,
                self.cfg.target.max_it_iu_size.unwrap_or(0),
            ),
            req_buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
            req_flags: flags,
            imm_data_offset: imm,
            initiator_port_id: self.initiator_port_id(),
            target_port_id: self.cfg.target.target_port_id(),
        }
    }

    /// `srp_create_ch_ib` + `srp_connect_ch` for channel `k`.
    pub(super) fn connect_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) -> Result<(), LoginError> {
        let (Some(pd), Some(cq), Some(src)) = (self.pd, self.cq, self.src) else {
            return self.fail_login(k, LoginError::NotStarted);
        };
        let multi = k > 0;
        let ib = !self.cfg.target.using_rdma_cm();
        let qs = self.queue_size;
        let init = QpInitAttr::rc(pd, cq, 2 * qs, qs + 1).signal_all();
        let qpn = match stack.verbs.create_qp(init) {
            Ok((q, _)) => q,
            Err(e) => return self.fail_login(k, res(e)),
        };
        let login_req = self.login_req(multi);
        let idb = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * self.cmd_sg_cnt * 16) as usize],
            0,
            AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0),
        );
        let idb = match idb {
            Ok(k) => k,
            Err(e) => {
                let _ = stack.destroy_qp(qpn);
                return self.fail_login(k, res(e));
            }
        };
        let ch = Channel {
            index: k,
            state: ChannelState::Resolving,
            conn: None,
            qpn,
            multi,
            login_req,
            login_rsp: None,
            req_lim: 0,
            use_imm: false,
            max_it_iu_len: login_req.req_it_iu_len,
            max_ti_iu_len: 0,
            rings: None,
            idb: Some(idb),
            slots: Vec::new(),
            free_slots: Vec::new(),
            tsk_mgmt_tag: 0,
            tmf: None,
            tmf_queue: VecDeque::new(),
            sq_avail: 2 * qs,
            ib,
        };
        if k < self.channels.len() {
            self.channels[k] = ch;
        } else {
            self.channels.push(ch);
        }
        let t = self.cfg.target.clone();
        match t.dest {
            Dest::Rdma { dest, .. } => {
                if let Err(e) = RdmaCm::init_qp(stack, qpn) {
                    return self.fail_login(k, LoginError::InitQp(e));
                }
                let id = rdma.create_id();
                let r = rdma.resolve_addr(&id, Some(src), dest);
                self.channels[k].conn = Some(Conn::Rdma(id));
                if let Err(e) = r {
                    return self.fail_login(k, LoginError::ResolveAddr(e));
                }
                Ok(())
            }
            Dest::Ib {
                dgid,
                pkey,
                service_id,
                ..
            } => {
                // srp_init_qp: INIT with the P_Key's index, remote read and write.
                let pkey_index = (0..16u16)
                    .find(|&i| {
                        stack
                            .device
                            .query_pkey(PORT_NUM, i)
                            .is_ok_and(|p| p.0 | 0x8000 == pkey | 0x8000)
                    })
                    .unwrap_or(0);
                let attr = QpAttr {
                    qp_state: QpState::Init,
                    pkey_index,
                    port_num: PORT_NUM,
                    qp_access_flags: AccessFlags(
                        AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0,
                    ),
                    ..QpAttr::default()
                };
                if let Err(e) = stack.modify_qp(
                    qpn,
                    &attr,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::ACCESS_FLAGS
                        | QpAttrMask::PORT,
                ) {
                    return self.fail_login(k, res(e));
                }
                let Some(port) = self.cm_port else {
                    return self.fail_login(k, LoginError::NotStarted);
                };
                // subnet_timeout 18 (rxe): CM response timeouts 20.
                let subnet_timeout = 18u8;
                let psn = (self.next_rand() & 0xff_ffff) as u32;
                let mut p = ReqParams::new(port, Gid::from(src), dgid, service_id, qpn)
                    .with_starting_psn(psn)
                    .with_private_data(login_req.to_bytes())
                    .with_rdma_depths(SRP_RESPONDER_RESOURCES, 0)
                    .with_cm_response_timeouts(subnet_timeout + 2, subnet_timeout + 2)
                    .with_retries(t.tl_retry_count.unwrap_or(7), 7);
                p.primary_path.local_ack_timeout = 19;
                p.path_mtu = PathMtu(
                    stack
                        .device
                        .query_port(PORT_NUM)
                        .map_or(3, |p| p.active_mtu.to_enum()),
                );
                p.partition_key = pkey;
                let cm = rdma.cm_mut();
                let id = cm.create_id();
                if let Err(e) = cm.send_req(now, &id, &p) {
                    cm.destroy(now, id);
                    return self.fail_login(k, LoginError::SendReq(e));
                }
                let c = &mut self.channels[k];
                c.conn = Some(Conn::Ib(id));
                c.state = ChannelState::Connecting;
                self.events
                    .push_back(InitiatorEvent::LoginSent { channel: k, multi });
                Ok(())
            }
        }
    }

    /// A channel's login failed: the first one fails the session, a later one leaves the
    /// session with the channels before it (`target->ch_count = ch - target->ch`).
    pub(super) fn fail_login(&mut self, k: usize, e: LoginError) -> Result<(), LoginError> {
        self.events.push_back(InitiatorEvent::LoginFailed {
            channel: k,
            error: e.clone(),
        });
        if let Some(c) = self.channels.get_mut(k) {
            c.state = ChannelState::Closed;
        }
        if let Some(tl) = &mut self.tl {
            // A reconnect attempt's login: the attempt failed (after_change releases its
            // channels); the session stays blocked for the next.
            if tl.attempting {
                tl.attempting = false;
                let attempt = tl.attempts;
                self.events.push_back(InitiatorEvent::ReconnectFailed {
                    attempt,
                    error: e.clone(),
                });
            }
            return Err(e);
        }
        if k == 0 {
            self.state = SessionState::LoginFailed(e.clone());
            Err(e)
        } else {
            self.ch_count = k;
            if self.state == SessionState::LoggingIn {
                self.state = SessionState::Live;
            }
            Ok(())
        }
    }

    /// `srp_cm_rep_handler`: the login response. Returns whether the channel is live.
    pub(super) fn logged_in(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
        private_data: &[u8],
    ) -> bool {
        let rsp = match LoginRspRepr::parse(private_data) {
            Ok(r) => r,
            Err(_) => {
                let op = private_data.first().copied().unwrap_or(0);
                let _ = self.fail_login(k, LoginError::BadResponse { opcode: op });
                self.disconnect_channel(now, rdma, stack, k);
                return false;
            }
        };
        let use_imm = self.cfg.use_imm_data && rsp.immediate_supported();
        let max_it = max_it_iu_len(
            self.cmd_sg_cnt,
            use_imm,
            self.cfg.target.max_it_iu_size.unwrap_or(0),
        );
        // Reserve a credit for task management (`can_queue = min(req_lim - 1, can_queue)`).
        let lim = i64::from(rsp.req_lim_delta) - i64::from(SRP_TSK_MGMT_SQ_SIZE);
        if lim < 1 {
            let _ = self.fail_login(
                k,
                LoginError::TooFewCredits {
                    granted: rsp.req_lim_delta,
                },
            );
            self.disconnect_channel(now, rdma, stack, k);
            return false;
        }
        self.can_queue = self.can_queue.min(lim as u32);
        let (Some(pd), qs) = (self.pd, self.queue_size) else {
            return false;
        };
        let max_ti = rsp.max_ti_iu_len.max(64);
        let rx = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * max_ti) as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        let tx = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * max_it) as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        let (rx, tx) = match (rx, tx) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                let mut why = None;
                for r in [a, b] {
                    match r {
                        Ok(m) => {
                            let _ = stack.verbs.dereg_mr(m.lkey);
                        }
                        Err(e) => why = why.or(Some(e)),
                    }
                }
                let Some(e) = why else { return false };
                let _ = self.fail_login(k, LoginError::Resources(e));
                self.disconnect_channel(now, rdma, stack, k);
                return false;
            }
        };
        let can_queue = self.can_queue;
        let c = &mut self.channels[k];
        c.login_rsp = Some(rsp);
        c.req_lim = i64::from(rsp.req_lim_delta);
        c.use_imm = use_imm;
        c.max_it_iu_len = max_it;
        c.max_ti_iu_len = max_ti;
        c.rings = Some(Rings {
            rx,
            tx,
            free_tx: (0..qs).rev().collect(),
        });
        c.slots = vec![Slot::Free; can_queue as usize];
        c.free_slots = (0..can_queue).rev().collect();
        let qpn = c.qpn;
        for i in 0..qs {
            let _ = post_recv(stack, qpn, k, rx, max_ti, i);
        }
        c.state = ChannelState::Live;
        self.events.push_back(InitiatorEvent::LoggedIn {
            channel: k,
            rsp,
            immediate: use_imm,
        });
        true
    }

    /// After a channel changed: log in the next one, or settle the session's state.
    pub(super) fn after_change(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        if let Some(tl) = &self.tl {
            if tl.attempting {
                // A reconnect: the next channel after a live one (MULTI), then success.
                let next = self.channels.len();
                let last_live = self
                    .channels
                    .last()
                    .is_some_and(|c| c.state == ChannelState::Live);
                let any_down = self
                    .channels
                    .iter()
                    .any(|c| c.state >= ChannelState::Disconnecting);
                if any_down {
                    self.reconnect_failed(now, rdma, stack, LoginError::Unreachable);
                } else if last_live && next < self.ch_count {
                    let _ = self.connect_channel(now, rdma, stack, next);
                }
                self.reconnect_progress(now);
            } else {
                // Between attempts: what is left of a failed one goes.
                for k in 0..self.channels.len() {
                    if self.channels[k].state == ChannelState::Closed
                        && self.channels[k].conn.is_some()
                    {
                        self.release_channel(now, rdma, stack, k);
                    }
                }
            }
            if self.state == SessionState::LoggingOut {
                self.tl = None;
            } else {
                return;
            }
        }
        if self.state == SessionState::LoggingIn {
            let done = self
                .channels
                .iter()
                .take(self.ch_count)
                .filter(|c| c.state >= ChannelState::Live)
                .count();
            let last_live = self
                .channels
                .last()
                .is_some_and(|c| c.state == ChannelState::Live);
            if done == self.channels.len() && last_live {
                if self.channels.len() < self.ch_count {
                    let k = self.channels.len();
                    let _ = self.connect_channel(now, rdma, stack, k);
                } else {
                    self.state = SessionState::Live;
                }
            }
        }
        if matches!(self.state, SessionState::Live) && self.cfg.transport_timers() {
            // Any channel lost takes the target port down and starts the reconnects.
            let lost = self
                .channels
                .iter()
                .take(self.ch_count)
                .any(|c| c.state >= ChannelState::Disconnecting);
            if lost {
                let why = self.last_down.clone().unwrap_or(DownReason::EveryChannel);
                self.start_tl_fail_timers(now, rdma, stack, why);
                return;
            }
        }
        if matches!(self.state, SessionState::Live) {
            // Channels that died after login: when none is left, the session failed.
            if !self.channels.is_empty()
                && self
                    .channels
                    .iter()
                    .all(|c| c.state >= ChannelState::Disconnecting)
            {
                let why = self.last_down.clone().unwrap_or(DownReason::EveryChannel);
                self.state = SessionState::Failed(why);
            }
        }
        if self.state == SessionState::LoggingOut
            && self
                .channels
                .iter()
                .all(|c| c.state == ChannelState::Closed)
        {
            self.release_all(stack);
            self.state = SessionState::Closed;
        }
    }
}
