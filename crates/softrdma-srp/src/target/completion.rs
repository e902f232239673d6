//! The completion queue and the IUs it delivers: receives dispatched by IU type, sends
//! and RDMA operations moving their I/O on.

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::verbs::{WcStatus, WorkCompletion};
use softrdma_core::Stack;
use softrdma_wire::srp::{Opcode, TLogoutReason};

use crate::channel::ChannelState;

use super::io::{IoState, Reply, RspKind};
use super::{post_recv_slot, ChannelId, LogoutBy, SrpEvent, SrpTarget, TargetPort};
use crate::wr_id::{WrId, WrKind};

/// An IU that arrived: its channel, its receive slot and its length.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrived {
    pub(super) ch: u32,
    pub(super) slot: u32,
    pub(super) len: u32,
}

impl SrpTarget {
    /// Polls the port's completion queue and runs what the completions allow; also sends the
    /// DREQs left for this port. Returns the number of completions handled.
    pub fn poll(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: TargetPort,
    ) -> usize {
        self.poll_port(now, rdma, stack, port.0)
    }

    pub(super) fn poll_port(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: usize,
    ) -> usize {
        let Some(cq) = self.ports.get(port).map(|p| p.cq) else {
            return 0;
        };
        let due: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| c.port == port && c.disconnect_due)
            .map(|(k, _)| *k)
            .collect();
        for ch in due {
            self.disconnect_channel(now, rdma, Some((port, &mut *stack)), ch);
        }
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = crate::channel::drain_cq(stack, cq, &mut wcs, |stack, wc| {
            self.completion(now, rdma, stack, wc)
        });
        self.wcs = wcs;
        n
    }

    /// One work completion of the port whose stack this is (for a runtime that took it off
    /// the CQ itself, e.g. while waiting for it).
    pub fn completion(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        wc: &WorkCompletion,
    ) {
        let Some(WrId {
            channel: ch,
            kind,
            index: idx,
        }) = WrId::from_u64(wc.wr_id)
        else {
            return;
        };
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        if kind != WrKind::Recv {
            c.sq_avail += 1;
        }
        if kind == WrKind::Drain {
            if self.state_to(ch, ChannelState::Disconnected) {
                self.release(now, rdma, stack, ch);
            }
            return;
        }
        let ok = wc.status == WcStatus::Success;
        if !ok || c.state >= ChannelState::Disconnecting {
            if !ok && c.state <= ChannelState::Live && wc.status != WcStatus::WrFlushErr {
                let what = format!(
                    "{:?} completion of {} failed: {:?}",
                    wc.opcode,
                    match kind {
                        WrKind::Recv => "a receive",
                        WrKind::Send => "a response",
                        WrKind::RdmaRead => "an RDMA READ",
                        WrKind::RdmaWrite | WrKind::Drain => "an RDMA WRITE",
                    },
                    wc.status
                );
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what,
                });
                self.close(stack, ch);
            }
            return;
        }
        match kind {
            WrKind::Recv => {
                if c.waiting.is_empty() && c.state == ChannelState::Live {
                    self.new_iu(
                        now,
                        rdma,
                        stack,
                        Arrived {
                            ch,
                            slot: idx,
                            len: wc.byte_len,
                        },
                    );
                } else {
                    c.waiting.push_back((idx, wc.byte_len));
                    if c.state == ChannelState::Live {
                        self.process_waiting(now, rdma, stack, ch);
                    }
                }
            }
            WrKind::RdmaRead => {
                let io = &mut c.ios[idx as usize];
                let IoState::Reading { reads_left, .. } = &mut io.state else {
                    return;
                };
                *reads_left = reads_left.saturating_sub(1);
                if *reads_left == 0 {
                    self.data_out_done(stack, ch, idx);
                    self.advance(now, rdma, stack, ch, idx);
                }
            }
            WrKind::Send => {
                let io = &mut c.ios[idx as usize];
                if let IoState::RspSent { logout_after, .. } = io.state {
                    let logout = logout_after;
                    self.free_io(ch, idx);
                    if logout {
                        self.disconnect_channel(
                            now,
                            rdma,
                            Some((self.port_idx(ch), &mut *stack)),
                            ch,
                        );
                    }
                }
                self.process_blocked(now, rdma, stack, ch);
                self.process_waiting(now, rdma, stack, ch);
            }
            WrKind::RdmaWrite | WrKind::Drain => {
                // RDMA WRITE: the response follows it on the send queue.
                self.process_blocked(now, rdma, stack, ch);
            }
        }
    }

    pub(super) fn process_waiting(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
    ) {
        loop {
            let Some(c) = self.channels.get_mut(&ch) else {
                return;
            };
            if c.state != ChannelState::Live {
                return;
            }
            let Some(&(slot, len)) = c.waiting.front() else {
                return;
            };
            if !self.new_iu(now, rdma, stack, Arrived { ch, slot, len }) {
                return;
            }
        }
    }

    pub(super) fn process_blocked(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
    ) {
        let n = self.channels.get(&ch).map_or(0, |c| c.blocked.len());
        for _ in 0..n {
            let Some(io) = self
                .channels
                .get_mut(&ch)
                .and_then(|c| c.blocked.pop_front())
            else {
                return;
            };
            self.advance(now, rdma, stack, ch, io);
            // Stop at the first one that is still stuck (it went back to the end).
            if self
                .channels
                .get(&ch)
                .is_some_and(|c| c.blocked.back() == Some(&io))
            {
                let c = self.channels.get_mut(&ch).expect("channel");
                c.blocked.pop_back();
                c.blocked.push_front(io);
                return;
            }
        }
    }

    /// `srpt_handle_new_iu` for the IU in receive slot `slot`. Returns false if it has to
    /// wait (no I/O context free); it is then (still) at the front of the wait list.
    pub(super) fn new_iu(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        iu: Arrived,
    ) -> bool {
        let Arrived { ch, slot, len } = iu;
        let Some(c) = self.channels.get_mut(&ch) else {
            return true;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let opcode = stack
            .verbs
            .mr(c.recv.lkey)
            .ok()
            .and_then(|m| m.slice(addr, 1).ok().map(|b| b[0]));
        let Some(opcode) = opcode else {
            return true;
        };
        let needs_io = matches!(Opcode(opcode), Opcode::CMD | Opcode::TSK_MGMT)
            || !matches!(
                Opcode(opcode),
                Opcode::I_LOGOUT | Opcode::CRED_RSP | Opcode::AER_RSP
            );
        let io = if needs_io {
            match c.free_io.pop() {
                Some(i) => Some(i),
                None => {
                    if c.waiting.front() != Some(&(slot, len)) {
                        c.waiting.push_back((slot, len));
                    }
                    return false;
                }
            }
        } else {
            None
        };
        if c.waiting.front() == Some(&(slot, len)) {
            c.waiting.pop_front();
        }
        let (qpn, recv, max_req) = (c.qpn, c.recv, c.max_req);
        match (Opcode(opcode), io) {
            (Opcode::CMD, Some(io)) => self.handle_cmd(now, rdma, stack, iu, io),
            (Opcode::TSK_MGMT, Some(io)) => self.handle_tsk_mgmt(now, rdma, stack, iu, io),
            (Opcode::I_LOGOUT, _) => {
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Initiator,
                    why: "SRP_I_LOGOUT received".into(),
                });
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
                self.disconnect_channel(now, rdma, Some((self.port_idx(ch), &mut *stack)), ch);
            }
            (Opcode::CRED_RSP | Opcode::AER_RSP, _) => {
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
            }
            (op, Some(io)) => {
                // Anything else (SRP_RSP, a target IU, an unknown type): SRP_T_LOGOUT with
                // INVALID IU TYPE, then the channel goes (SRP r16a 6.6).
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("received IU with unexpected opcode {:#04x}", op.0),
                });
                self.t_logout(now, rdma, stack, ch, io, TLogoutReason::INVALID_IU_TYPE);
            }
            _ => {}
        }
        true
    }

    pub(super) fn t_logout(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        io: u32,
        why: TLogoutReason,
    ) {
        self.events.push_back(SrpEvent::Logout {
            channel: ChannelId(ch),
            by: LogoutBy::Target,
            why: format!("SRP_T_LOGOUT: {why}"),
        });
        if let Some(c) = self.channels.get_mut(&ch) {
            let x = &mut c.ios[io as usize];
            x.state = IoState::NeedRsp(Reply {
                rsp: RspKind::TLogout(why),
                data: x.state.data(),
                write_len: 0,
                logout_after: true,
            });
        }
        self.advance(now, rdma, stack, ch, io);
    }
}
