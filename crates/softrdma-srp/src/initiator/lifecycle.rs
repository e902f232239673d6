//! A channel's CM events after the REQ (`srp_rdma_cm_handler`, `srp_ib_cm_handler`) and its
//! way down: disconnected, released, logged out.

use softrdma_core::cm::{CmError, CmEvent};
use softrdma_core::device::{GidType, PORT_NUM};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType, RdmaId};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{QpAttr, QpAttrMask, QpState};
use softrdma_core::Stack;
use softrdma_wire::srp::LoginReqRdmaRepr;
use softrdma_wire::Gid;

use super::{
    ChannelState, Completion, Conn, DownReason, InitiatorEvent, IoError, LoginError,
    QpTransitionError, Reject, SessionState, SrpInitiator, SRP_RESPONDER_RESOURCES,
};

impl SrpInitiator {
    pub(super) fn channel_of_rdma(&self, id: RdmaId) -> Option<usize> {
        self.channels
            .iter()
            .position(|c| matches!(&c.conn, Some(Conn::Rdma(i)) if *i == id))
    }

    /// An RDMA CM event of one of our ids (`srp_rdma_cm_handler`); others are ignored.
    pub fn rdma_event(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ev: &RdmaCmEvent,
    ) {
        let Some(k) = self.channel_of_rdma(ev.id()) else {
            return;
        };
        use RdmaCmEventType as T;
        let st = self.channels[k].state;
        // A login step that failed: the channel's login fails and the channel goes.
        let failed = match ev.kind() {
            T::AddrResolved => match &self.channels[k].conn {
                Some(Conn::Rdma(id)) => rdma.resolve_route(id).err().map(LoginError::ResolveRoute),
                _ => return,
            },
            T::AddrError => Some(LoginError::AddrError {
                status: ev.status(),
            }),
            T::RouteResolved => {
                let c = &self.channels[k];
                let param = ConnParam {
                    private_data: LoginReqRdmaRepr::from(c.login_req).to_bytes(),
                    responder_resources: SRP_RESPONDER_RESOURCES,
                    initiator_depth: 0,
                    flow_control: true,
                    retry_count: self.cfg.target.tl_retry_count.unwrap_or(7),
                    rnr_retry_count: 7,
                };
                let qpn = c.qpn;
                let r = match &c.conn {
                    Some(Conn::Rdma(id)) => rdma.connect(now, stack, id, Some(qpn), &param),
                    _ => return,
                };
                if r.is_ok() {
                    self.channels[k].state = ChannelState::Connecting;
                    let multi = self.channels[k].multi;
                    self.events
                        .push_back(InitiatorEvent::LoginSent { channel: k, multi });
                }
                r.err().map(LoginError::Connect)
            }
            T::RouteError => Some(LoginError::RouteError {
                status: ev.status(),
            }),
            T::Unreachable if st < ChannelState::Live => Some(LoginError::Unreachable),
            T::ConnectError if st < ChannelState::Live => Some(LoginError::ConnectError {
                status: ev.status(),
            }),
            T::Rejected if st < ChannelState::Live => Some(LoginError::Rejected(Reject::new(
                ev.reject_reason(),
                ev.private_data(),
            ))),
            _ => None,
        };
        if let Some(e) = failed {
            let _ = self.fail_login_and_release(now, rdma, stack, k, e);
            self.after_change(now, rdma, stack);
            return;
        }
        match ev.kind() {
            T::Established if st == ChannelState::Connecting => {
                self.logged_in(now, rdma, stack, k, ev.private_data());
            }
            T::Disconnected => {
                if st == ChannelState::Disconnecting {
                    self.events.push_back(InitiatorEvent::LoggedOut {
                        channel: k,
                        answered: ev.status() == 0,
                    });
                }
                if st == ChannelState::Live {
                    // "received DREQ": answer it (DREP), the channel is down.
                    if let Some(Conn::Rdma(id)) = &self.channels[k].conn {
                        let _ = rdma.disconnect(now, stack, id);
                    }
                    self.channel_down(k, DownReason::TargetDisconnected);
                }
                self.release_channel(now, rdma, stack, k);
            }
            T::TimewaitExit => {}
            T::Unreachable | T::ConnectError | T::Rejected => {
                self.channel_down(
                    k,
                    DownReason::CmEvent {
                        event: ev.kind(),
                        status: ev.status(),
                    },
                );
                self.release_channel(now, rdma, stack, k);
            }
            _ => {}
        }
        self.after_change(now, rdma, stack);
    }

    /// An IB CM event (`srp_ib_cm_handler`); events of other ids are ignored.
    pub fn ib_event(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ev: &CmEvent) {
        let id = match ev {
            CmEvent::RepReceived { id, .. }
            | CmEvent::ReqError { id, .. }
            | CmEvent::RejReceived { id, .. }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::DreqError { id, .. }
            | CmEvent::TimewaitExit { id } => *id,
            _ => return,
        };
        let Some(k) = self
            .channels
            .iter()
            .position(|c| matches!(&c.conn, Some(Conn::Ib(i)) if *i == id))
        else {
            return;
        };
        let st = self.channels[k].state;
        match ev {
            CmEvent::RepReceived { rep, .. } if st == ChannelState::Connecting => {
                // srp_cm_rep_handler: the QP to RTR and RTS, then the RTU.
                let pd = rep.private_data.to_vec();
                let qpn = self.channels[k].qpn;
                let src = self.src.map(Gid::from);
                let r: Result<(), QpTransitionError> = (|| {
                    let Some(Conn::Ib(cid)) = &self.channels[k].conn else {
                        return Err(QpTransitionError::Cm(CmError::NoSuchId));
                    };
                    let cm = rdma.cm_mut();
                    let (mut a, m) = cm
                        .init_qp_attr(cid, QpState::Rtr)
                        .map_err(QpTransitionError::Cm)?;
                    if let Some(g) = src {
                        if let Ok(i) = stack.device.find_gid(PORT_NUM, &g, GidType::RoceV2) {
                            a.ah_attr.sgid_index = i;
                        }
                    }
                    stack
                        .modify_qp(qpn, &a, m)
                        .map_err(QpTransitionError::Verbs)?;
                    let (a, m) = cm
                        .init_qp_attr(cid, QpState::Rts)
                        .map_err(QpTransitionError::Cm)?;
                    stack
                        .modify_qp(qpn, &a, m)
                        .map_err(QpTransitionError::Verbs)?;
                    Ok(())
                })();
                if let Err(e) = r {
                    let _ = self.fail_login_and_release(
                        now,
                        rdma,
                        stack,
                        k,
                        LoginError::QpTransition(e),
                    );
                } else if self.logged_in(now, rdma, stack, k, &pd) {
                    if let Some(Conn::Ib(cid)) = &self.channels[k].conn {
                        let _ = rdma.cm_mut().send_rtu(now, cid, &[]);
                    }
                }
            }
            CmEvent::ReqError { .. } if st < ChannelState::Live => {
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Unreachable);
            }
            CmEvent::RejReceived { rej, .. } if st < ChannelState::Live => {
                let r = Reject::new(Some(rej.reason), &rej.private_data);
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Rejected(r));
            }
            CmEvent::DreqReceived { .. } => {
                // "DREQ received - connection closed"
                if let Some(Conn::Ib(cid)) = &self.channels[k].conn {
                    let _ = rdma.cm_mut().send_drep(now, cid, &[]);
                }
                self.qp_to_err(stack, k);
                if st == ChannelState::Live {
                    self.channel_down(k, DownReason::TargetDisconnected);
                }
                self.release_channel(now, rdma, stack, k);
            }
            CmEvent::DrepReceived { .. }
            | CmEvent::DreqError { .. }
            | CmEvent::TimewaitExit { .. } => {
                if st == ChannelState::Disconnecting {
                    self.events.push_back(InitiatorEvent::LoggedOut {
                        channel: k,
                        answered: matches!(ev, CmEvent::DrepReceived { .. }),
                    });
                }
                if st == ChannelState::Live {
                    self.channel_down(k, DownReason::ConnectionClosed);
                }
                self.release_channel(now, rdma, stack, k);
            }
            CmEvent::RejReceived { .. } => {
                self.channel_down(k, DownReason::Rejected);
                self.release_channel(now, rdma, stack, k);
            }
            _ => {}
        }
        self.after_change(now, rdma, stack);
    }

    pub(super) fn fail_login_and_release(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
        e: LoginError,
    ) -> Result<(), LoginError> {
        let r = self.fail_login(k, e);
        self.release_channel(now, rdma, stack, k);
        r
    }

    pub(super) fn qp_to_err(&mut self, stack: &mut Stack, k: usize) {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = stack.modify_qp(self.channels[k].qpn, &attr, QpAttrMask::STATE);
    }

    /// The channel is down: its commands end with `why`.
    pub(super) fn channel_down(&mut self, k: usize, why: DownReason) {
        let c = &mut self.channels[k];
        if c.state <= ChannelState::Live {
            c.state = ChannelState::Disconnecting;
        }
        c.tmf = None;
        c.tmf_queue.clear();
        for (slot, r) in c.slots.iter_mut().enumerate() {
            if let Some(req) = r.take() {
                self.completions.push_back(Completion {
                    tag: (k as u64) << 16 | slot as u64,
                    user: req.user,
                    lun: req.lun,
                    channel: k,
                    result: Err(IoError::ChannelDown(why.clone())),
                });
                c.free_slots.push(slot as u32);
            }
        }
        self.events.push_back(InitiatorEvent::ChannelDown {
            channel: k,
            why: why.clone(),
        });
        self.last_down = Some(why);
    }

    /// DREQ (or the QP to ERR if the CM refuses) for channel `k`.
    pub(super) fn disconnect_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) {
        let c = &mut self.channels[k];
        if c.state >= ChannelState::Disconnecting {
            return;
        }
        c.state = ChannelState::Disconnecting;
        self.disconnect_channel_after_error(now, rdma, stack, k);
    }

    /// Every live channel down with `why`, each sending its DREQ.
    pub(super) fn live_channels_down(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        why: &DownReason,
    ) {
        for k in 0..self.channels.len() {
            if self.channels[k].state == ChannelState::Live {
                self.channel_down(k, why.clone());
                self.disconnect_channel_after_error(now, rdma, stack, k);
            }
        }
    }

    /// DREQ (or the release, if the CM refuses) for channel `k` whatever its state; the QP
    /// to ERR.
    pub(super) fn disconnect_channel_after_error(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) {
        // After an error channel_down has set DISCONNECTING; the DREQ goes anyway (the CM
        // retries it, then gives up into timewait), so a target that is still there hears
        // of it.
        let c = &mut self.channels[k];
        let ok = match &c.conn {
            Some(Conn::Rdma(id)) => rdma.disconnect(now, stack, id).is_ok(),
            Some(Conn::Ib(id)) => rdma.cm_mut().send_dreq(now, id, &[]).is_ok(),
            None => false,
        };
        self.qp_to_err(stack, k);
        if !ok {
            self.release_channel(now, rdma, stack, k);
        }
    }

    /// `srp_free_ch_ib`: the CM id, the QP, the rings.
    pub(super) fn release_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) {
        let c = &mut self.channels[k];
        c.state = ChannelState::Closed;
        match c.conn.take() {
            Some(Conn::Rdma(id)) => rdma.destroy(now, id),
            Some(Conn::Ib(id)) => rdma.cm_mut().destroy(now, id),
            None => {}
        }
        let _ = stack.destroy_qp(c.qpn);
        let rings = c.rings.take();
        for m in [
            rings.as_ref().map(|r| r.rx),
            rings.map(|r| r.tx),
            c.idb.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = stack.verbs.dereg_mr(m.lkey);
        }
    }

    pub(super) fn release_all(&mut self, stack: &mut Stack) {
        for k in std::mem::take(&mut self.buffers) {
            let _ = stack.verbs.dereg_mr(k.lkey);
        }
        if let Some(cq) = self.cq.take() {
            let _ = stack.verbs.destroy_cq(cq);
        }
    }

    /// Logs out (`srp_disconnect_target`): a DREQ on every channel; the session is
    /// [`SessionState::Closed`] once they are all answered (or time out). Commands still in
    /// flight end with [`IoError::ChannelDown`].
    pub fn logout(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        if self.is_done() {
            return;
        }
        self.state = SessionState::LoggingOut;
        for k in 0..self.channels.len() {
            let st = self.channels[k].state;
            if st == ChannelState::Live {
                self.channel_down(k, DownReason::LoggedOut);
                self.channels[k].state = ChannelState::Live;
                self.disconnect_channel(now, rdma, stack, k);
            } else if st < ChannelState::Live {
                self.release_channel(now, rdma, stack, k);
            }
        }
        // The ChannelDown events of a logout are ours, not news.
        self.events.retain(|e| {
            !matches!(
                e,
                InitiatorEvent::ChannelDown {
                    why: DownReason::LoggedOut,
                    ..
                }
            )
        });
        self.after_change(now, rdma, stack);
    }
}
