//! The RC responder (IBTA 9.7.5; behaviour after rxe's rxe_resp.c): checks the PSN
//! (in sequence, duplicate, or ahead → one PSN sequence NAK), the opcode sequence, the
//! receive WR (RNR NAK with `min_rnr_timer` when none is posted), rkeys and bounds (remote
//! access NAK, memory untouched), executes SENDs, WRITEs, READs and atomics, acknowledges
//! packets that ask for it (ACK coalescing: one ACK per AckReq), and answers duplicates:
//! SEND/WRITE duplicates are re-ACKed, READs replayed from the resource, atomics answered
//! with the saved result without re-executing.
//!
//! Unlike rxe it does not drop what arrives past a hole (issue 21): it still sends the one
//! sequence NAK, but keeps copies of the later packets ([`super::kept`], bounded per QP)
//! and, when the missing packet arrives, executes it and then every kept packet now in
//! sequence, as if they had arrived in order, and acknowledges the highest PSN executed at
//! once. A requester that re-sends them anyway (rxe's always does) meets duplicates,
//! answered as any duplicate is. A SEND with Invalidate frees the fast MR its
//! IETH names (`MrTable::invalidate`, rxe `rxe_invalidate_mr`); when it cannot, the QP
//! fails as rxe's class J does (see `Fault::Invalidate`).

use softrdma_wire::roce::{
    AethRepr, AtomicAckEthRepr, BthRepr, NakCode, Opcode, Psn, RethRepr, RnrTimer, RocePacket,
    RoceRepr, Syndrome,
};

use super::emit;
use super::kept::{Keep, KeptRequests};
use super::memory;
use super::resources::{Resource, Resources};
use super::response::{Ack, Flow, ReadResponse};
use super::segment;
use super::{Ctx, QpInfo};
use crate::verbs::{AccessFlags, RecvWr, WcOpcode, WcStatus, WorkCompletion};

use softrdma_wire::roce::ACK_UNLIMITED;

/// How far ahead of the expected PSN a request may be and still get a sequence NAK;
/// beyond this it is dropped and counted as out of window.
pub const MAX_AHEAD: u32 = 1 << 16;

#[derive(Clone, Debug)]
enum InProgress {
    Send {
        wr: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        left: u32,
        total: u32,
    },
}

/// Responder state of one RC QP.
#[derive(Clone, Debug, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number (24 bits).
    pub msn: u32,
    nak_sent: bool,
    cur: Option<InProgress>,
    /// READ and atomic resources (`max_dest_rd_atomic` of them), for duplicates.
    resources: Resources,
    /// What arrived past the expected PSN, waiting for the hole to fill.
    kept: KeptRequests,
}

enum Fault {
    Rnr,
    Nak(NakCode, WcStatus),
    /// The IETH of a SEND with Invalidate named no MR this QP may invalidate.
    Invalidate,
}

impl Responder {
    /// Starts the responder at RTR.
    pub fn start(&mut self, rq_psn: u32, max_dest_rd_atomic: u8) {
        *self = Responder {
            epsn: Psn::new(rq_psn),
            resources: Resources::new(max_dest_rd_atomic),
            ..Responder::default()
        };
    }

    fn send_ack(&self, ctx: &mut Ctx<'_>, info: &QpInfo, syndrome: Syndrome, psn: Psn) {
        ctx.out.push_ack(Ack {
            flow: Flow::of(info),
            psn,
            syndrome,
            msn: self.msn,
        });
    }

    fn send_atomic_ack(&self, ctx: &mut Ctx<'_>, info: &QpInfo, psn: Psn, orig: u64) {
        let mut repr = RoceRepr::new(BthRepr {
            opcode: Opcode::RC_ATOMIC_ACKNOWLEDGE,
            pkey: info.pkey,
            dest_qp: info.dest_qpn,
            psn,
            ..BthRepr::default()
        });
        repr.aeth = Some(AethRepr {
            syndrome: ACK_UNLIMITED,
            msn: self.msn,
        });
        repr.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig_remote_data: orig,
        });
        ctx.out.push_sealed(emit::build_tos(
            &repr,
            info.local_ip,
            info.src_port,
            info.peer_ip,
            info.tos,
        ));
    }

    /// Queues the READ response packets for `[va, va+len)` starting at `psn` (written out
    /// from the MR as the driver drains the queue).
    #[allow(clippy::too_many_arguments)]
    fn send_read_responses(
        &self,
        ctx: &mut Ctx<'_>,
        info: &QpInfo,
        psn: Psn,
        rkey: u32,
        va: u64,
        len: u32,
    ) {
        // A zero-length READ names no memory (its rkey need not be valid).
        if len > 0 && ctx.verbs.mr_table().by_rkey(rkey).is_err() {
            return;
        }
        ctx.out.push_read(ReadResponse {
            flow: Flow::of(info),
            rkey,
            va,
            len,
            mtu: info.mtu,
            psn,
            msn: self.msn,
            next: 0,
            n: segment::packets(len, info.mtu),
        });
    }

    /// A request packet (already through the header checks) for this QP.
    pub fn on_request(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, pkt: &RocePacket<&[u8]>) {
        let psn = pkt.bth().psn();
        let d = psn.distance(self.epsn);
        if d > 0 {
            if d as u32 > MAX_AHEAD {
                ctx.counters.drop_psn_out_of_window += 1;
                return;
            }
            match self.kept.keep(self.epsn, psn, pkt.into_inner()) {
                Keep::Kept { evicted } => {
                    ctx.counters.out_of_seq_request += 1;
                    ctx.counters.kept_requests += 1;
                    ctx.counters.kept_overflow += u64::from(evicted);
                }
                // A second copy of a kept packet is a duplicate, not a new arrival.
                Keep::Duplicate => ctx.counters.duplicate_request += 1,
                Keep::Overflow => {
                    ctx.counters.out_of_seq_request += 1;
                    ctx.counters.kept_overflow += 1;
                }
            }
            // The one sequence NAK the IBTA asks for, kept packets or not: it is
            // what makes a requester that knows nothing of keeping (rxe) go back at once.
            if !self.nak_sent {
                self.nak_sent = true;
                let e = self.epsn;
                self.send_ack(ctx, info, Syndrome::nak(NakCode::PSN_SEQUENCE_ERROR), e);
            }
            return;
        }
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            self.on_duplicate(ctx, info, pkt);
            return;
        }
        if !self.run(ctx, info, pkt) {
            return;
        }
        // If this filled a hole, what was kept past it runs now, in PSN order, through the
        // same checks; it stops at the next hole (or a packet that fails: an RNR NAK keeps
        // the rest for the retry, a fatal one cleared them).
        let mut last = None;
        while let Some(bytes) = self.kept.take(self.epsn) {
            // Checked when it arrived; the copy parses the same.
            let Ok(kept) = RocePacket::new_checked(&bytes[..]) else {
                continue;
            };
            if !self.run(ctx, info, &kept) {
                return;
            }
            let (bth, op) = (kept.bth(), kept.opcode());
            last = Some((bth.psn(), bth.ack_req(), op));
        }
        // Acknowledge the highest PSN executed at once (ACKs are cumulative): the requester
        // learns what it need not re-send. A READ or atomic last answered already, and an
        // ACK queued behind its responses would only repeat them. Kept packets that asked
        // for an ACK queued one each, which the queue coalesces with this one.
        if let Some((psn, acked, op)) = last {
            if !acked && op != Opcode::RC_RDMA_READ_REQUEST && !op.is_atomic() {
                self.send_ack(ctx, info, ACK_UNLIMITED, psn);
            }
        }
    }

    /// Executes the in-sequence request `pkt`, answering a fault as the IBTA has it; whether
    /// it executed.
    fn run(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, pkt: &RocePacket<&[u8]>) -> bool {
        let bth = pkt.bth();
        let psn = bth.psn();
        match self.execute(ctx, info, pkt) {
            Ok(()) => return true,
            Err(Fault::Rnr) => {
                ctx.counters.send_rnr_err += 1;
                self.send_ack(
                    ctx,
                    info,
                    Syndrome::rnr_nak(RnrTimer(info.min_rnr_timer)),
                    psn,
                );
            }
            Err(Fault::Nak(code, status)) => {
                // Class C errors (IBTA 9.9.3.1.3): NAK, complete the receive in error if one
                // was in use, and the QP goes to ERR.
                if let Some(InProgress::Send { wr, .. }) = self.cur.take() {
                    let wc = WorkCompletion::new(wr.wr_id, info.qpn, WcOpcode::Recv, status);
                    ctx.verbs.complete(info.recv_cq, wc);
                }
                self.send_ack(ctx, info, Syndrome::nak(code), psn);
                self.resources.clear();
                self.kept.clear();
                ctx.fatal.push(info.qpn);
            }
            Err(Fault::Invalidate) => {
                // rxe's class J (rxe_resp.c RESPST_ERR_INVALIDATE_RKEY): the receive
                // completes with REM_INV_REQ_ERR and the QP goes to ERR, but rxe sets no NAK
                // syndrome for it, so its acknowledge step still sends a plain ACK (MSN not
                // advanced) if the packet asked for one: the requester's SEND completes
                // successfully, and only its next request, unanswered, ends in
                // RETRY_EXC_ERR. Done the same way so a kernel peer sees what rxe does.
                if let Some(InProgress::Send { wr, .. }) = self.cur.take() {
                    let wc = WorkCompletion::new(
                        wr.wr_id,
                        info.qpn,
                        WcOpcode::Recv,
                        WcStatus::RemInvReqErr,
                    );
                    ctx.verbs.complete(info.recv_cq, wc);
                }
                if bth.ack_req() {
                    self.send_ack(ctx, info, ACK_UNLIMITED, psn);
                }
                self.resources.clear();
                self.kept.clear();
                ctx.fatal.push(info.qpn);
            }
        }
        false
    }

    fn on_duplicate(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, pkt: &RocePacket<&[u8]>) {
        let op = pkt.opcode();
        let psn = pkt.bth().psn();
        if op == Opcode::RC_RDMA_READ_REQUEST {
            let (
                Some(Resource::Read {
                    first_psn,
                    va,
                    rkey,
                    len,
                    ..
                }),
                Some(reth),
            ) = (self.resources.find(psn), pkt.reth())
            else {
                return;
            };
            // The retried READ must ask for a part of the original one: from the offset its
            // PSN names, and not past the original's end (rxe's duplicate_request() checks
            // the same: iova and iova + resid within the original). A requester that asks
            // again in parts (a paced one, after a loss) asks for less than the rest.
            let off = u64::from(psn.offset_from(first_psn)) * u64::from(info.mtu);
            let (rva, rlen) = (reth.va(), reth.dma_len());
            let ok = reth.r_key() == rkey
                && rva == va.wrapping_add(off)
                && u64::from(rlen) + off <= u64::from(len);
            if ok {
                if ctx.verbs.mr_table().by_rkey(rkey).is_err() {
                    // rxe read_reply() → rxe_recheck_mr(): the MR was invalidated or
                    // deregistered since the READ first ran, a class C error: remote access
                    // NAK with the retried PSN, the QP goes to ERR.
                    self.send_ack(ctx, info, Syndrome::nak(NakCode::REMOTE_ACCESS_ERROR), psn);
                    self.resources.clear();
                    ctx.fatal.push(info.qpn);
                    return;
                }
                self.send_read_responses(ctx, info, psn, rkey, rva, rlen);
            }
            return;
        }
        if op.is_atomic() {
            if let Some(Resource::Atomic { orig, .. }) = self.resources.find(psn) {
                self.send_atomic_ack(ctx, info, psn, orig);
            }
            return;
        }
        // SEND/WRITE: acknowledge again with the last PSN received (C9-105).
        let prev = self.epsn.sub(1);
        self.send_ack(ctx, info, ACK_UNLIMITED, prev);
    }

    fn take_recv(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) -> Result<RecvWr, Fault> {
        ctx.verbs.take_recv_wr(info.qpn).ok_or(Fault::Rnr)
    }

    fn execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        info: &QpInfo,
        pkt: &RocePacket<&[u8]>,
    ) -> Result<(), Fault> {
        let op = pkt.opcode();
        let bth = pkt.bth();
        let psn = bth.psn();
        let payload = pkt.payload();
        let mtu = info.mtu as usize;
        let inv_req = Fault::Nak(NakCode::INVALID_REQUEST, WcStatus::RemInvReqErr);
        let acc_err = Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr);
        // Opcode sequence: a message in progress takes only MIDDLE/LAST of its kind.
        let in_send = matches!(self.cur, Some(InProgress::Send { .. }));
        let in_write = matches!(self.cur, Some(InProgress::Write { .. }));
        let cont_send = matches!(
            op,
            Opcode::RC_SEND_MIDDLE
                | Opcode::RC_SEND_LAST
                | Opcode::RC_SEND_LAST_WITH_IMMEDIATE
                | Opcode::RC_SEND_LAST_WITH_INVALIDATE
        );
        let cont_write = matches!(
            op,
            Opcode::RC_RDMA_WRITE_MIDDLE
                | Opcode::RC_RDMA_WRITE_LAST
                | Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
        );
        if (in_send && !cont_send) || (in_write && !cont_write) {
            self.cur = None;
            return Err(inv_req);
        }
        if (!in_send && cont_send) || (!in_write && cont_write) {
            return Err(inv_req);
        }
        // Non-final packets carry exactly one MTU (C9-24...).
        let is_middle_or_first = matches!(
            op,
            Opcode::RC_SEND_FIRST
                | Opcode::RC_SEND_MIDDLE
                | Opcode::RC_RDMA_WRITE_FIRST
                | Opcode::RC_RDMA_WRITE_MIDDLE
        );
        if is_middle_or_first && payload.len() != mtu {
            return Err(inv_req);
        }
        if op.is_send() {
            let mut cur = match self.cur.take() {
                Some(InProgress::Send { wr, offset }) => (wr, offset),
                _ => (self.take_recv(ctx, info)?, 0),
            };
            if let Err(e) = memory::scatter_at(ctx.verbs, info.pd, &cur.0.sg_list, cur.1, payload) {
                let status = match e {
                    crate::verbs::ScatterError::TooLong { .. } => WcStatus::LocLenErr,
                    crate::verbs::ScatterError::Mr(_) => WcStatus::LocProtErr,
                };
                self.cur = Some(InProgress::Send {
                    wr: cur.0,
                    offset: cur.1,
                });
                return Err(Fault::Nak(
                    if status == WcStatus::LocLenErr {
                        NakCode::INVALID_REQUEST
                    } else {
                        NakCode::REMOTE_OPERATIONAL_ERROR
                    },
                    status,
                ));
            }
            cur.1 += payload.len() as u64;
            // SEND with Invalidate: after placing the data, before completing (rxe
            // execute()); a failure is rxe's class J, not a NAK.
            if let Some(ieth) = pkt.ieth() {
                if ctx.verbs.mr_table_mut().invalidate(ieth.r_key()).is_err() {
                    self.cur = Some(InProgress::Send {
                        wr: cur.0,
                        offset: cur.1,
                    });
                    return Err(Fault::Invalidate);
                }
            }
            if op.is_last() {
                let mut wc =
                    WorkCompletion::new(cur.0.wr_id, info.qpn, WcOpcode::Recv, WcStatus::Success);
                wc.byte_len = cur.1 as u32;
                wc.src_qp = info.dest_qpn;
                wc.imm_data = pkt.immdt().map(|i| i.imm_data());
                wc.invalidated_rkey = pkt.ieth().map(|i| i.r_key());
                ctx.verbs.complete(info.recv_cq, wc);
                self.msn = (self.msn + 1) & 0x00ff_ffff;
            } else {
                self.cur = Some(InProgress::Send {
                    wr: cur.0,
                    offset: cur.1,
                });
            }
        } else if op.is_rdma_write() {
            let (va, rkey, left, total) = match self.cur.take() {
                Some(InProgress::Write {
                    va,
                    rkey,
                    left,
                    total,
                }) => (va, rkey, left, total),
                _ => {
                    if !info.access.contains(AccessFlags::REMOTE_WRITE) {
                        return Err(inv_req);
                    }
                    let reth = pkt
                        .reth()
                        .ok_or(Fault::Nak(NakCode::INVALID_REQUEST, WcStatus::RemInvReqErr))?;
                    let r = RethRepr::parse_packet(&reth);
                    // "A zero-byte op is not required to set an addr or rkey" (rxe
                    // check_rkey; IBTA C9-88): ib_srpt's zero-length write at RTU
                    // (srpt_zerolength_write) carries rkey 0.
                    if r.dma_len != 0 {
                        let mr = ctx.verbs.mr_table().by_rkey(r.r_key).map_err(|_| {
                            Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                        })?;
                        mr.check_remote(
                            info.pd,
                            r.va,
                            r.dma_len as usize,
                            AccessFlags::REMOTE_WRITE,
                        )
                        .map_err(|_| {
                            Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                        })?;
                    }
                    (r.va, r.r_key, r.dma_len, r.dma_len)
                }
            };
            let n = payload.len() as u32;
            if n > left || (op.is_last() && n != left) {
                return Err(inv_req);
            }
            // WRITE with immediate consumes a receive WR: RNR before touching memory.
            let recv = if op.has_immediate() {
                match self.take_recv(ctx, info) {
                    Ok(wr) => Some(wr),
                    Err(f) => {
                        self.cur = Some(InProgress::Write {
                            va,
                            rkey,
                            left,
                            total,
                        });
                        return Err(f);
                    }
                }
            } else {
                None
            };
            if !payload.is_empty() {
                let mr = ctx.verbs.mr_table_mut().by_rkey_mut(rkey).map_err(|_| {
                    Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                })?;
                mr.write(va, payload).map_err(|_| acc_err)?;
            }
            if op.is_last() {
                self.msn = (self.msn + 1) & 0x00ff_ffff;
                if let Some(wr) = recv {
                    let mut wc = WorkCompletion::new(
                        wr.wr_id,
                        info.qpn,
                        WcOpcode::RecvRdmaWithImm,
                        WcStatus::Success,
                    );
                    wc.byte_len = total;
                    wc.src_qp = info.dest_qpn;
                    wc.imm_data = pkt.immdt().map(|i| i.imm_data());
                    ctx.verbs.complete(info.recv_cq, wc);
                }
            } else {
                self.cur = Some(InProgress::Write {
                    va: va.wrapping_add(u64::from(n)),
                    rkey,
                    left: left - n,
                    total,
                });
            }
        } else if op == Opcode::RC_RDMA_READ_REQUEST {
            if !info.access.contains(AccessFlags::REMOTE_READ) {
                return Err(inv_req);
            }
            let r = pkt
                .reth()
                .map(|h| RethRepr::parse_packet(&h))
                .ok_or(Fault::Nak(NakCode::INVALID_REQUEST, WcStatus::RemInvReqErr))?;
            if r.dma_len != 0 {
                let mr = ctx.verbs.mr_table().by_rkey(r.r_key).map_err(|_| {
                    Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                })?;
                mr.check_remote(info.pd, r.va, r.dma_len as usize, AccessFlags::REMOTE_READ)
                    .map_err(|_| {
                        Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                    })?;
            }
            let npkts = segment::packets(r.dma_len, info.mtu);
            self.msn = (self.msn + 1) & 0x00ff_ffff;
            self.resources.push(Resource::Read {
                first_psn: psn,
                npkts,
                va: r.va,
                rkey: r.r_key,
                len: r.dma_len,
            });
            self.send_read_responses(ctx, info, psn, r.r_key, r.va, r.dma_len);
            self.epsn = psn.add(npkts);
            self.nak_sent = false;
            return Ok(());
        } else if op.is_atomic() {
            if !info.access.contains(AccessFlags::REMOTE_ATOMIC) {
                return Err(inv_req);
            }
            let a = pkt
                .atomic_eth()
                .ok_or(Fault::Nak(NakCode::INVALID_REQUEST, WcStatus::RemInvReqErr))?;
            let (va, rkey, swap_add, compare) = (a.va(), a.r_key(), a.swap_add(), a.compare());
            if va & 7 != 0 {
                return Err(inv_req);
            }
            let pd = info.pd;
            let mr =
                ctx.verbs.mr_table_mut().by_rkey_mut(rkey).map_err(|_| {
                    Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr)
                })?;
            mr.check_remote(pd, va, 8, AccessFlags::REMOTE_ATOMIC)
                .map_err(|_| Fault::Nak(NakCode::REMOTE_ACCESS_ERROR, WcStatus::RemAccessErr))?;
            let cell = mr.slice_mut(va, 8).map_err(|_| acc_err)?;
            let mut b = [0u8; 8];
            b.copy_from_slice(cell);
            let orig = u64::from_le_bytes(b);
            let new = if op == Opcode::RC_COMPARE_SWAP {
                if orig == compare {
                    swap_add
                } else {
                    orig
                }
            } else {
                orig.wrapping_add(swap_add)
            };
            cell.copy_from_slice(&new.to_le_bytes());
            self.msn = (self.msn + 1) & 0x00ff_ffff;
            self.resources.push(Resource::Atomic { psn, orig });
            self.send_atomic_ack(ctx, info, psn, orig);
            self.epsn = psn.next();
            self.nak_sent = false;
            return Ok(());
        } else {
            return Err(inv_req);
        }
        self.epsn = psn.next();
        self.nak_sent = false;
        if bth.ack_req() {
            self.send_ack(ctx, info, ACK_UNLIMITED, psn);
        }
        Ok(())
    }

    /// The QP left service: forget the message in progress (its receive WR is flushed by
    /// the verbs layer only if still queued, so complete it here).
    pub fn flush(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) {
        if let Some(InProgress::Send { wr, .. }) = self.cur.take() {
            let wc = WorkCompletion::new(wr.wr_id, info.qpn, WcOpcode::Recv, WcStatus::WrFlushErr);
            ctx.verbs.complete(info.recv_cq, wc);
        }
        self.resources.clear();
        self.kept.clear();
    }
}
