//! The completion queue (`srp_recv_done`, `srp_send_done`): the IUs the target sends,
//! credits, and the ends of commands.

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::verbs::{
    MrKeys, RecvWr, SendOp, SendWr, Sge, VerbsError, WcStatus, WorkCompletion,
};
use softrdma_core::Stack;
use softrdma_wire::srp::{CredReqRepr, Opcode, RspRepr, TLogoutRepr};

use crate::iu::{self};
use crate::wr_id::{WrId, WrKind};

use super::{
    wire_tag, ChannelState, Completion, DownReason, InitiatorEvent, ScsiResult, SrpInitiator,
    Warning, SRP_TAG_TSK_MGMT,
};

impl SrpInitiator {
    /// Polls the CQ and handles what it holds. Returns the number of completions.
    pub fn poll(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) -> usize {
        let Some(cq) = self.cq else { return 0 };
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = crate::channel::drain_cq(stack, cq, &mut wcs, |stack, wc| {
            self.completion(now, rdma, stack, wc)
        });
        self.wcs = wcs;
        n
    }

    /// One work completion (for a program that took it off the CQ itself).
    pub fn completion(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        wc: &WorkCompletion,
    ) {
        let Some(WrId {
            channel,
            kind,
            index: idx,
        }) = WrId::from_u64(wc.wr_id)
        else {
            return;
        };
        let k = channel as usize;
        let Some(c) = self.channels.get_mut(k) else {
            return;
        };
        if wc.qp_num != c.qpn {
            // Flushed from a QP of before a reconnect: its channel index is reused.
            return;
        }
        if kind == WrKind::Send {
            c.sq_avail += 1;
            c.free_tx(idx);
        }
        if wc.status != WcStatus::Success {
            if c.state == ChannelState::Live && wc.status != WcStatus::WrFlushErr {
                // srp_handle_qp_err: "failed SEND/RECV status ..."
                let why = DownReason::WorkCompletion {
                    send: kind == WrKind::Send,
                    status: wc.status,
                };
                self.channel_down(k, why);
                self.disconnect_channel_after_error(now, rdma, stack, k);
                self.after_change(now, rdma, stack);
            }
            return;
        }
        if kind != WrKind::Recv || c.state != ChannelState::Live {
            if kind == WrKind::Send {
                self.pump_tmf(now, stack, k);
            }
            return;
        }
        let Some(rx) = c.rings.as_ref().map(|r| r.rx) else {
            return;
        };
        let addr = u64::from(idx) * u64::from(c.max_ti_iu_len);
        let len = wc.byte_len as usize;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(len, 0);
        let ok = stack.verbs.local_read(rx.lkey, addr, &mut buf).is_ok();
        let (qpn, max_ti) = (c.qpn, c.max_ti_iu_len);
        if ok && !buf.is_empty() {
            self.handle_iu(now, stack, k, &buf);
        }
        self.scratch = buf;
        let _ = post_recv(stack, qpn, k, rx, max_ti, idx);
        self.pump_tmf(now, stack, k);
    }

    /// `srp_recv_done`: one IU from the target.
    pub(super) fn handle_iu(&mut self, now: Instant, stack: &mut Stack, k: usize, b: &[u8]) {
        match Opcode(b[0]) {
            Opcode::RSP => match RspRepr::parse(b) {
                Ok(r) => self.process_rsp(now, k, r),
                Err(e) => self.events.push_back(InitiatorEvent::Warning {
                    channel: Some(k),
                    what: Warning::MalformedRsp(e),
                }),
            },
            Opcode::CRED_REQ => {
                if let Ok(r) = CredReqRepr::parse(b) {
                    self.channels[k].req_lim += i64::from(r.req_lim_delta);
                    self.events.push_back(InitiatorEvent::CreditRequest {
                        channel: k,
                        delta: r.req_lim_delta,
                    });
                    self.send_short(stack, k, Opcode::CRED_RSP, r.tag);
                }
            }
            Opcode::AER_REQ => {
                if let Ok(r) = softrdma_wire::srp::AerReqRepr::parse(b) {
                    self.channels[k].req_lim += i64::from(r.req_lim_delta);
                    self.events.push_back(InitiatorEvent::AsyncEvent {
                        channel: k,
                        lun: r.lun,
                    });
                    self.send_short(stack, k, Opcode::AER_RSP, r.tag);
                }
            }
            Opcode::T_LOGOUT => {
                let reason = TLogoutRepr::parse(b).map(|r| r.reason.0).unwrap_or(0);
                self.events
                    .push_back(InitiatorEvent::TargetLogout { channel: k, reason });
            }
            op => self.events.push_back(InitiatorEvent::Warning {
                channel: Some(k),
                what: Warning::UnhandledOpcode(op),
            }),
        }
    }

    /// SRP_CRED_RSP / SRP_AER_RSP (`srp_response_common`: no credit).
    pub(super) fn send_short(&mut self, stack: &mut Stack, k: usize, op: Opcode, tag: u64) {
        let c = &mut self.channels[k];
        let Some((tx, i)) = c.take_tx() else {
            self.events.push_back(InitiatorEvent::Warning {
                channel: Some(k),
                what: Warning::NoIuForResponse,
            });
            return;
        };
        let addr = u64::from(i) * u64::from(c.max_it_iu_len);
        let mut b = [0u8; 16];
        let _ = iu::write_short_iu(&mut b, op, 0, tag);
        let _ = stack.verbs.local_write(tx.lkey, addr, &b);
        let qpn = c.qpn;
        if post_send(stack, qpn, k, tx, addr, 16, i).is_ok() {
            c.sq_avail = c.sq_avail.saturating_sub(1);
        } else {
            c.free_tx(i);
        }
    }

    /// `srp_process_rsp`.
    pub(super) fn process_rsp(&mut self, now: Instant, k: usize, r: RspRepr) {
        let host = wire_tag(r.tag);
        let c = &mut self.channels[k];
        c.req_lim += i64::from(r.req_lim_delta);
        if host & SRP_TAG_TSK_MGMT != 0 {
            match c.tmf {
                Some(t) if t.tag == host => {
                    let code = (r.response_data.len() >= 4).then(|| r.response_data[3]);
                    c.tmf = None;
                    self.tmf_done(now, k, t, code);
                }
                _ => self.events.push_back(InitiatorEvent::Warning {
                    channel: Some(k),
                    what: Warning::LateTmfResponse { tag: host },
                }),
            }
            return;
        }
        let slot = (host & 0xffff) as usize;
        let ch_of_tag = (host >> 16) as usize & 0xffff;
        let req = if ch_of_tag == k {
            c.slots.get_mut(slot).and_then(|s| s.take())
        } else {
            None
        };
        let Some(req) = req else {
            self.events.push_back(InitiatorEvent::LateResponse {
                channel: k,
                tag: host,
            });
            return;
        };
        c.free_slots.push(slot as u32);
        let resid = if r.flags.diunder() {
            i64::from(r.data_in_res_cnt)
        } else if r.flags.dounder() {
            i64::from(r.data_out_res_cnt)
        } else if r.flags.diover() {
            -i64::from(r.data_in_res_cnt)
        } else if r.flags.doover() {
            -i64::from(r.data_out_res_cnt)
        } else {
            0
        };
        let sense = if r.flags.snsvalid() {
            r.sense_data
        } else {
            Vec::new()
        };
        self.completions.push_back(Completion {
            tag: host,
            user: req.user,
            lun: req.lun,
            channel: k,
            result: Ok(ScsiResult {
                status: r.status,
                sense,
                resid,
            }),
        });
    }
}

pub(super) fn post_recv(
    stack: &mut Stack,
    qpn: u32,
    ch: usize,
    rx: MrKeys,
    size: u32,
    i: u32,
) -> Result<(), VerbsError> {
    stack.post_recv(
        qpn,
        RecvWr::new(
            WrId::new(ch as u32, WrKind::Recv, i).to_u64(),
            vec![Sge {
                addr: u64::from(i) * u64::from(size),
                length: size,
                lkey: rx.lkey,
            }],
        ),
    )
}

pub(super) fn post_send(
    stack: &mut Stack,
    qpn: u32,
    ch: usize,
    tx: MrKeys,
    addr: u64,
    len: u32,
    i: u32,
) -> Result<(), VerbsError> {
    let wr =
        SendWr::new(WrId::new(ch as u32, WrKind::Send, i).to_u64(), SendOp::Send).with_sge(Sge {
            addr,
            length: len,
            lkey: tx.lkey,
        });
    stack.post_send(qpn, wr)
}
