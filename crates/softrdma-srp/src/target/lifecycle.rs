//! A channel after its login: established, disconnected (either side), drained and
//! released.

use softrdma_core::cm::{CmEvent, CmIdRef};
use softrdma_core::rdma_cm::{RdmaCm, RdmaCmEvent, RdmaCmEventType};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{QpAttr, QpAttrMask, QpState, SendOp, SendWr};
use softrdma_core::Stack;

use crate::channel::ChannelState;
use crate::login::SRPT_RDMA_DEPTH;

use super::{ChannelId, ConnId, LogoutBy, SrpEvent, SrpTarget, TargetPort};
use crate::wr_id::{WrId, WrKind};

impl SrpTarget {
    /// An RDMA CM event of one of our channels' ids (`srpt_rdma_cm_handler`), with the
    /// stack of the id's device. Events of other ids are ignored.
    pub fn rdma_event(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ev: &RdmaCmEvent,
    ) {
        let Some(ChannelId(ch)) = self.channel_of(ev.id()) else {
            return;
        };
        use RdmaCmEventType as T;
        match ev.kind() {
            T::Established => self.rtu(now, rdma, stack, ch),
            T::Disconnected => {
                let st = self.channels.get(&ch).map(|c| c.state);
                if st.is_some_and(|s| s < ChannelState::Disconnecting) {
                    self.dreq_received(now, rdma, stack, ch);
                } else {
                    self.close(stack, ch);
                }
            }
            T::TimewaitExit => self.close(stack, ch),
            T::Rejected | T::Unreachable | T::ConnectError => {
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("{} (status {})", ev.kind(), ev.status()),
                });
                self.close(stack, ch);
            }
            _ => {}
        }
        self.poll_port(now, rdma, stack, self.port_idx(ch));
    }

    /// The channel id an IB CM event is for if it is one [`SrpTarget::ib_event`] handles
    /// (what a channel sees after its login), else `None`.
    pub fn ib_event_id(ev: &CmEvent) -> Option<CmIdRef> {
        match ev {
            CmEvent::RtuReceived { .. }
            | CmEvent::UserEstablished { .. }
            | CmEvent::DreqReceived { .. }
            | CmEvent::DrepReceived { .. }
            | CmEvent::TimewaitExit { .. }
            | CmEvent::RejReceived { .. }
            | CmEvent::RepError { .. }
            | CmEvent::DreqError { .. } => Some(ev.id()),
            _ => None,
        }
    }

    /// An IB CM event (`srpt_cm_handler`). A REQ to our listener goes to
    /// [`SrpTarget::ib_req`] instead.
    pub fn ib_event(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ev: &CmEvent) {
        let Some(id) = SrpTarget::ib_event_id(ev) else {
            return;
        };
        let Some(ch) = self
            .channels
            .iter()
            .find(|(_, c)| matches!(&c.conn, ConnId::Ib(i) if *i == id))
            .map(|(k, _)| *k)
        else {
            return;
        };
        match ev {
            CmEvent::RtuReceived { .. } | CmEvent::UserEstablished { .. } => {
                self.rtu(now, rdma, stack, ch)
            }
            CmEvent::DreqReceived { .. } => self.dreq_received(now, rdma, stack, ch),
            CmEvent::DrepReceived { .. } | CmEvent::TimewaitExit { .. } => self.close(stack, ch),
            CmEvent::RejReceived { .. } | CmEvent::RepError { .. } => {
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("{ev:?}"),
                });
                self.close(stack, ch);
            }
            _ => {}
        }
        self.poll_port(now, rdma, stack, self.port_idx(ch));
    }

    /// The initiator's DREQ: its logout, our DREP (or the channel closes).
    fn dreq_received(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        self.events.push_back(SrpEvent::Logout {
            channel: ChannelId(ch),
            by: LogoutBy::Initiator,
            why: "DREQ received".into(),
        });
        if !self.disconnect_channel(now, rdma, Some((self.port_idx(ch), stack)), ch) {
            self.close(stack, ch);
        }
    }

    pub(super) fn port_idx(&self, ch: u32) -> usize {
        self.channels.get(&ch).map_or(usize::MAX, |c| c.port)
    }

    /// `srpt_cm_rtu_recv`: (IB CM: the QP to RTS,) LIVE, then the IUs that waited.
    pub(super) fn rtu(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        if let Some(c) = self.channels.get(&ch) {
            if let ConnId::Ib(id) = &c.conn {
                let r = rdma.cm().init_qp_attr(id, QpState::Rts).map(|(mut a, m)| {
                    a.max_rd_atomic = SRPT_RDMA_DEPTH;
                    stack.modify_qp(c.qpn, &a, m)
                });
                if !matches!(r, Ok(Ok(()))) {
                    self.events.push_back(SrpEvent::Warning {
                        channel: Some(ChannelId(ch)),
                        what: "QP transition to RTS failed".into(),
                    });
                    self.close(stack, ch);
                    return;
                }
            }
        }
        if self.state_to(ch, ChannelState::Live) {
            self.process_waiting(now, rdma, stack, ch);
        }
    }

    /// `srpt_disconnect_ch`: DISCONNECTING, then DREQ (or DREP after a DREQ). Whether the
    /// state changed. With `stack` of another port, the DREQ is left for that port's next
    /// [`SrpTarget::poll`].
    pub(super) fn disconnect_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: Option<(usize, &mut Stack)>,
        ch: u32,
    ) -> bool {
        let Some(port) = self.channels.get(&ch).map(|c| c.port) else {
            return false;
        };
        let stack = match stack {
            Some((p, s)) if p == port => s,
            _ => {
                if let Some(c) = self.channels.get_mut(&ch) {
                    if c.state < ChannelState::Disconnecting {
                        c.disconnect_due = true;
                        return true;
                    }
                }
                return false;
            }
        };
        if !self.state_to(ch, ChannelState::Disconnecting) {
            return false;
        }
        let Some(c) = self.channels.get_mut(&ch) else {
            return false;
        };
        c.disconnect_due = false;
        let ok = match &c.conn {
            ConnId::Rdma(id) => rdma.disconnect(now, stack, id).is_ok(),
            ConnId::Ib(id) => {
                let cm = rdma.cm_mut();
                let r = cm.send_dreq(now, id, &[]).is_ok() || cm.send_drep(now, id, &[]).is_ok();
                let attr = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                let _ = stack.modify_qp(c.qpn, &attr, QpAttrMask::STATE);
                r
            }
        };
        if !ok {
            self.close(stack, ch);
        }
        true
    }

    /// Target logout of every channel (shutdown): DREQ on each.
    pub fn logout_all(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: TargetPort,
    ) {
        let chans: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| c.port == port.0 && c.state < ChannelState::Disconnecting)
            .map(|(k, _)| *k)
            .collect();
        for ch in chans {
            if self.disconnect_channel(now, rdma, Some((port.0, &mut *stack)), ch) {
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Target,
                    why: "target shutting down".into(),
                });
            }
        }
        self.poll_port(now, rdma, stack, port.0);
    }

    /// `srpt_close_ch`: DRAINING, the QP to ERR and a zero-length write whose (flushed)
    /// completion says everything before it has completed.
    pub(super) fn close(&mut self, stack: &mut Stack, ch: u32) {
        if !self.state_to(ch, ChannelState::Draining) {
            return;
        }
        let Some(c) = self.channels.get(&ch) else {
            return;
        };
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = stack.modify_qp(c.qpn, &attr, QpAttrMask::STATE);
        let wr = SendWr::new(
            WrId::new(ch, WrKind::Drain, 0).to_u64(),
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
        );
        if stack.post_send(c.qpn, wr).is_err() {
            self.state_to(ch, ChannelState::Disconnected);
        }
    }

    /// `srpt_release_channel_work`: the tasks, the nexus (when it was the last channel),
    /// the QP, the buffers and the CM id go.
    pub(super) fn release(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        let Some(c) = self.channels.remove(&ch) else {
            return;
        };
        for io in &c.ios {
            if io.task {
                self.scsi.task_finished(c.nexus, io.tag);
            }
        }
        if let Some(n) = self.nexuses.get_mut(&c.key) {
            n.channels.retain(|&x| x != ch);
            if n.channels.is_empty() {
                let _ = self.scsi.unregister_nexus(n.scsi);
                self.nexuses.remove(&c.key);
            }
        }
        let _ = stack.destroy_qp(c.qpn);
        let _ = stack.verbs.dereg_mr(c.recv.lkey);
        let _ = stack.verbs.dereg_mr(c.send.lkey);
        for b in &c.bufs {
            let _ = stack.verbs.dereg_mr(b.keys.lkey);
        }
        c.conn.destroy(now, rdma);
    }
}
