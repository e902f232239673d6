//! The RC requester (IBTA 9.7.4-9.7.6; behaviour after rxe's rxe_req.c and rxe_comp.c):
//! segments posted WRs into packets by path MTU, numbers them with 24-bit PSNs, asks for an
//! ACK on the last packet of each message (and every 64 packets), takes ACKs, NAKs, READ
//! responses and atomic ACKs, retransmits go-back-N from the first unacknowledged PSN on a
//! local ACK timeout, a PSN sequence NAK or an implied NAK, waits out RNR NAKs, and
//! completes WRs in order with the verbs status codes.

use std::collections::VecDeque;

use softrdma_wire::roce::{
    AckKind, AtomicEthRepr, BthRepr, IethRepr, ImmDtRepr, NakCode, Opcode, Psn, RethRepr, RoceRepr,
};

use super::emit::{self, Transmit};
use super::memory;
use super::segment;
use super::{Ctx, QpInfo};
use crate::time::{Duration, Instant};
use crate::verbs::{MrTable, SendOp, SendWr, WcStatus, WorkCompletion};

/// At most this many PSNs may be outstanding (rxe `RXE_MAX_UNACKED_PSNS`).
pub const MAX_UNACKED_PSNS: u32 = 128;
/// AckReq at least every this many packets (rxe `RXE_MAX_PKT_PER_ACK`).
pub const MAX_PKT_PER_ACK: u32 = 64;

/// A send WR the requester is working on.
#[derive(Clone, Debug)]
pub struct Wqe {
    pub wr: SendWr,
    /// The inline bytes of a SEND/WRITE posted with inline data; `None`: the payload is
    /// read from the SGEs' MRs as each packet is written out.
    pub inline: Option<Vec<u8>>,
    /// Message length.
    pub len: u32,
    /// PSNs it takes (READ: response packets).
    pub npkts: u32,
    /// PSN of its first packet (valid once `started`).
    pub first_psn: Psn,
    pub started: bool,
    pub done: bool,
    /// READ: response packets (and bytes) received so far.
    pub read_pkts: u32,
}

impl Wqe {
    pub fn new(wr: SendWr, inline: Option<Vec<u8>>, mtu: u32) -> Wqe {
        let len = wr.length().min(u64::from(u32::MAX)) as u32;
        let npkts = if wr.op.is_atomic() {
            1
        } else {
            segment::packets(len, mtu)
        };
        Wqe {
            wr,
            inline,
            len,
            npkts,
            first_psn: Psn::new(0),
            started: false,
            done: false,
            read_pkts: 0,
        }
    }

    fn is_rd_atomic(&self) -> bool {
        matches!(self.wr.op, SendOp::RdmaRead { .. }) || self.wr.op.is_atomic()
    }

    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
}

/// Requester state of one RC QP.
#[derive(Clone, Debug, Default)]
pub struct Requester {
    pub wqes: VecDeque<Wqe>,
    send_idx: usize,
    send_pkt: u32,
    /// PSN of the next new packet.
    pub next_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub una: Psn,
    retry_left: u8,
    rnr_left: u8,
    /// Local ACK timer deadline.
    pub timer: Option<Instant>,
    /// RNR wait deadline.
    pub rnr_wait: Option<Instant>,
    retrying: bool,
    noack_pkts: u32,
    /// Where a packet whose payload spans SGEs is assembled.
    scratch: Vec<u8>,
    /// A packet's payload could not be read (its MR went away): the QP must fail with a
    /// local protection error ([`Requester::take_fault`]).
    fault: bool,
}

impl Requester {
    /// Starts the requester at RTS.
    pub fn start(&mut self, sq_psn: u32, retry_cnt: u8, rnr_retry: u8) {
        *self = Requester {
            next_psn: Psn::new(sq_psn),
            una: Psn::new(sq_psn),
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            ..Requester::default()
        };
    }

    /// Whether packets are outstanding.
    fn outstanding(&self) -> bool {
        self.una != self.next_psn
    }

    /// The next packet to send, if any is allowed now.
    pub fn poll_transmit(
        &mut self,
        info: &QpInfo,
        mrs: &MrTable,
        now: Instant,
    ) -> Option<Transmit> {
        self.poll_emit(info, mrs, now, |repr, _| {
            emit::build_tos(repr, info.local_ip, info.src_port, info.peer_ip, info.tos)
        })
    }

    /// The next packet to send, if any is allowed now, handed to `sink` as a [`RoceRepr`]
    /// (which borrows the message's bytes, so the sink can write it wherever it wants:
    /// [`emit::build`] into a fresh buffer, or a [`emit::TransmitBatch`]) with where its
    /// payload lies when that is one MR.
    pub fn poll_emit<R>(
        &mut self,
        info: &QpInfo,
        mrs: &MrTable,
        now: Instant,
        sink: impl FnOnce(&RoceRepr<'_>, Option<emit::MrSlice>) -> R,
    ) -> Option<R> {
        if self.rnr_wait.is_some() || self.fault {
            return None;
        }
        let mtu = info.mtu;
        // Only a WR about to start needs the count of READs/atomics ahead of it (walking the
        // queue for every packet of a long message would cost O(queue) per packet).
        let starting = !self.wqes.get(self.send_idx)?.started;
        let rd_before = if starting {
            self.wqes
                .iter()
                .take(self.send_idx)
                .filter(|w| w.is_rd_atomic() && !w.done)
                .count()
        } else {
            0
        };
        let w = self.wqes.get_mut(self.send_idx)?;
        if !w.started {
            if w.is_rd_atomic() && rd_before >= usize::from(info.max_rd_atomic) {
                return None;
            }
            if w.wr.fence && rd_before > 0 {
                return None;
            }
            if self.next_psn.offset_from(self.una) >= MAX_UNACKED_PSNS {
                return None;
            }
            w.first_psn = self.next_psn;
            w.started = true;
            self.next_psn = self.next_psn.add(w.npkts);
            self.send_pkt = 0;
        }
        let psn = w.first_psn.add(self.send_pkt);
        let mut bth = BthRepr {
            opcode: segment::request_opcode(&w.wr.op, self.send_pkt, w.npkts),
            pkey: info.pkey,
            dest_qp: info.dest_qpn,
            psn,
            ..BthRepr::default()
        };
        let mut repr = RoceRepr::new(bth);
        let advance_wqe;
        let mut src = None;
        let scratch = &mut self.scratch;
        match w.wr.op {
            SendOp::RdmaRead { remote_addr, rkey } => {
                // A (re)issued READ asks for what has not arrived yet.
                let done_bytes = (w.read_pkts as u64 * u64::from(mtu)).min(u64::from(w.len));
                bth.psn = w.first_psn.add(w.read_pkts);
                repr.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(done_bytes),
                    r_key: rkey,
                    dma_len: w.len - done_bytes as u32,
                });
                bth.ack_req = true;
                advance_wqe = true;
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    r_key: rkey,
                    swap_add: swap,
                    compare,
                });
                bth.ack_req = true;
                advance_wqe = true;
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    r_key: rkey,
                    swap_add: add,
                    compare: 0,
                });
                bth.ack_req = true;
                advance_wqe = true;
            }
            op => {
                let first = self.send_pkt == 0;
                let last = self.send_pkt + 1 >= w.npkts;
                let start = (self.send_pkt as usize).saturating_mul(mtu as usize);
                let end = start.saturating_add(mtu as usize).min(w.len as usize);
                let payload = match &w.inline {
                    Some(d) => Ok((d.get(start..end).unwrap_or(&[]), None)),
                    None => memory::gather_range_src(
                        mrs,
                        info.pd,
                        &w.wr.sg_list,
                        start as u64,
                        end.saturating_sub(start),
                        scratch,
                    ),
                };
                let Ok((payload, at)) = payload else {
                    self.fault = true;
                    return None;
                };
                src = at;
                repr.set_payload(payload);
                match op {
                    SendOp::RdmaWrite { remote_addr, rkey }
                    | SendOp::RdmaWriteWithImm {
                        remote_addr, rkey, ..
                    } if first => {
                        repr.reth = Some(RethRepr {
                            va: remote_addr,
                            r_key: rkey,
                            dma_len: w.len,
                        });
                    }
                    _ => {}
                }
                if last {
                    match op {
                        SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } => {
                            repr.immdt = Some(ImmDtRepr { imm_data: imm });
                        }
                        SendOp::SendWithInv { invalidate_rkey } => {
                            repr.ieth = Some(IethRepr {
                                r_key: invalidate_rkey,
                            });
                        }
                        _ => {}
                    }
                    bth.solicited_event = w.wr.solicited
                        && matches!(
                            op,
                            SendOp::Send
                                | SendOp::SendWithImm { .. }
                                | SendOp::SendWithInv { .. }
                                | SendOp::RdmaWriteWithImm { .. }
                        );
                }
                self.noack_pkts += 1;
                bth.ack_req = last || self.noack_pkts > MAX_PKT_PER_ACK;
                self.send_pkt += 1;
                advance_wqe = self.send_pkt >= w.npkts;
            }
        }
        if bth.ack_req {
            self.noack_pkts = 0;
        }
        bth.pad_count = repr.bth.pad_count;
        repr.bth = bth;
        let tx = sink(&repr, src);
        if advance_wqe {
            self.send_idx += 1;
            self.send_pkt = 0;
        }
        if self.timer.is_none() {
            self.timer = info.ack_timeout.map(|d| now + d);
        }
        Some(tx)
    }

    /// Whether a packet's payload could not be read since the last call (then the QP must
    /// fail: [`Requester::fail`] with `LocProtErr`).
    pub fn take_fault(&mut self) -> bool {
        std::mem::take(&mut self.fault)
    }

    /// Resumes sending from `psn` (go-back-N).
    fn go_back(&mut self, psn: Psn) {
        for (i, w) in self.wqes.iter().enumerate() {
            if !w.started {
                self.send_idx = i;
                self.send_pkt = 0;
                return;
            }
            if w.done {
                continue;
            }
            if psn.in_window(w.first_psn, w.npkts) || psn.is_before(w.first_psn) {
                self.send_idx = i;
                self.send_pkt = if w.is_rd_atomic() || psn.is_before(w.first_psn) {
                    0
                } else {
                    psn.offset_from(w.first_psn)
                };
                return;
            }
        }
        self.send_idx = self.wqes.len();
        self.send_pkt = 0;
    }

    /// Starts a retry (go back to `una`), consuming a retry; false when none are left.
    fn retry(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) -> bool {
        if self.retry_left == 0 {
            ctx.counters.retry_exceeded_err += 1;
            self.fail(ctx, info, WcStatus::RetryExcErr);
            return false;
        }
        self.retry_left -= 1;
        let una = self.una;
        self.go_back(una);
        self.retrying = true;
        self.timer = info.ack_timeout.map(|d| ctx.now + d);
        true
    }

    fn on_progress(&mut self, info: &QpInfo, now: Instant) {
        self.retry_left = info.retry_cnt;
        self.rnr_left = info.rnr_retry;
        self.retrying = false;
        self.timer = if self.outstanding() {
            info.ack_timeout.map(|d| now + d)
        } else {
            None
        };
    }

    /// Everything up to and including `a` is acknowledged.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, a: Psn) {
        let mut una = a.next();
        let mut implied_nak = false;
        for w in self.wqes.iter_mut() {
            if !w.started {
                break;
            }
            if w.done {
                continue;
            }
            if w.is_rd_atomic() {
                let resume = w.first_psn.add(w.read_pkts);
                if !a.is_before(w.first_psn) {
                    // An ACK beyond an unanswered READ/atomic: its response was lost.
                    implied_nak = true;
                }
                if una.is_after(resume) {
                    una = resume;
                }
                break;
            }
            if !a.is_before(w.last_psn()) {
                w.done = true;
            } else {
                break;
            }
        }
        if una.is_after(self.una) && !una.is_after(self.next_psn) {
            self.una = una;
            self.on_progress(info, ctx.now);
        }
        self.complete_front(ctx, info);
        if implied_nak && !self.retrying {
            self.retry(ctx, info);
        }
    }

    fn complete_front(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) {
        while self.wqes.front().is_some_and(|w| w.done) {
            let Some(w) = self.wqes.pop_front() else {
                break;
            };
            if self.send_idx > 0 {
                self.send_idx -= 1;
            } else {
                self.send_pkt = 0;
            }
            if w.wr.signaled || info.sq_sig_all {
                let mut wc = WorkCompletion::new(
                    w.wr.wr_id,
                    info.qpn,
                    w.wr.op.wc_opcode(),
                    WcStatus::Success,
                );
                wc.byte_len = w.len;
                ctx.verbs.complete(info.send_cq, wc);
            }
        }
    }

    /// Completes the oldest WR with `status`, flushes the rest and moves the QP to ERR.
    pub fn fail(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, status: WcStatus) {
        self.complete_front(ctx, info);
        let mut first = true;
        for w in self.wqes.drain(..) {
            let st = if first { status } else { WcStatus::WrFlushErr };
            first = false;
            let wc = WorkCompletion::new(w.wr.wr_id, info.qpn, w.wr.op.wc_opcode(), st);
            ctx.verbs.complete(info.send_cq, wc);
        }
        self.send_idx = 0;
        self.send_pkt = 0;
        self.timer = None;
        self.rnr_wait = None;
        ctx.verbs.set_qp_error(info.qpn);
    }

    /// Flushes every WR (the QP went to ERR by the user's hand).
    pub fn flush(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) {
        for w in self.wqes.drain(..) {
            let wc = WorkCompletion::new(
                w.wr.wr_id,
                info.qpn,
                w.wr.op.wc_opcode(),
                WcStatus::WrFlushErr,
            );
            ctx.verbs.complete(info.send_cq, wc);
        }
        self.send_idx = 0;
        self.timer = None;
        self.rnr_wait = None;
    }

    /// A response packet (ACK, NAK, READ response, atomic ACK) for this QP.
    #[allow(clippy::too_many_arguments)]
    pub fn on_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        info: &QpInfo,
        opcode: Opcode,
        psn: Psn,
        syndrome: Option<softrdma_wire::roce::Syndrome>,
        atomic_orig: Option<u64>,
        payload: &[u8],
    ) {
        // Valid responses lie in [una - 1, next_psn - 1].
        let last_sent = self.next_psn.sub(1);
        if psn.is_after(last_sent) {
            ctx.counters.drop_psn_out_of_window += 1;
            return;
        }
        if psn.is_before(self.una.sub(1)) {
            // A stale duplicate: already handled.
            return;
        }
        let kind = syndrome.map(|s| s.kind());
        match opcode {
            Opcode::RC_ACKNOWLEDGE => match kind {
                Some(AckKind::Ack { .. }) => self.ack_through(ctx, info, psn),
                Some(AckKind::RnrNak { timer }) => {
                    ctx.counters.rcvd_rnr_err += 1;
                    self.ack_through(ctx, info, psn.sub(1));
                    if self.wqes.is_empty() {
                        return;
                    }
                    if self.rnr_left == 0 {
                        ctx.counters.retry_rnr_exceeded_err += 1;
                        self.fail(ctx, info, WcStatus::RnrRetryExcErr);
                        return;
                    }
                    if self.rnr_left != 7 {
                        self.rnr_left -= 1;
                    }
                    self.go_back(psn);
                    self.timer = None;
                    self.rnr_wait =
                        Some(ctx.now + Duration::from_micros(u64::from(timer.micros())));
                }
                Some(AckKind::Nak { code }) => {
                    self.ack_through(ctx, info, psn.sub(1));
                    if self.wqes.is_empty() {
                        return;
                    }
                    if code == NakCode::PSN_SEQUENCE_ERROR {
                        ctx.counters.rcvd_seq_err += 1;
                        if !self.retrying {
                            self.retry(ctx, info);
                        }
                    } else {
                        let st = match code {
                            NakCode::INVALID_REQUEST => WcStatus::RemInvReqErr,
                            NakCode::REMOTE_ACCESS_ERROR => WcStatus::RemAccessErr,
                            _ => WcStatus::RemOpErr,
                        };
                        self.fail(ctx, info, st);
                    }
                }
                _ => {}
            },
            Opcode::RC_ATOMIC_ACKNOWLEDGE => {
                self.ack_through_before(ctx, info, psn);
                let Some(w) = self.head_mut() else { return };
                if !w.wr.op.is_atomic() || w.first_psn != psn {
                    return;
                }
                let orig = atomic_orig.unwrap_or(0);
                let sges = w.wr.sg_list.clone();
                if memory::scatter_at(ctx.verbs, info.pd, &sges, 0, &orig.to_le_bytes()).is_err() {
                    self.fail(ctx, info, WcStatus::LocProtErr);
                    return;
                }
                if let Some(w) = self.head_mut() {
                    w.done = true;
                    w.read_pkts = 1;
                }
                self.una = psn.next();
                self.on_progress(info, ctx.now);
                self.complete_front(ctx, info);
            }
            op if op.is_read_response() => {
                self.ack_through_before(ctx, info, psn);
                let mtu = info.mtu;
                let Some(w) = self.head_mut() else { return };
                if !matches!(w.wr.op, SendOp::RdmaRead { .. })
                    || !psn.in_window(w.first_psn, w.npkts)
                {
                    return;
                }
                let expected = w.first_psn.add(w.read_pkts);
                if psn.is_before(expected) {
                    return;
                }
                if psn.is_after(expected) {
                    // A gap: a response packet was lost.
                    if !self.retrying {
                        self.retry(ctx, info);
                    }
                    return;
                }
                let offset = u64::from(w.read_pkts) * u64::from(mtu);
                let is_last = matches!(
                    op,
                    Opcode::RC_RDMA_READ_RESPONSE_LAST | Opcode::RC_RDMA_READ_RESPONSE_ONLY
                );
                let end = offset + payload.len() as u64;
                let size_ok = if is_last {
                    end == u64::from(w.len)
                } else {
                    payload.len() as u64 == u64::from(mtu) && end < u64::from(w.len)
                };
                if !size_ok {
                    self.fail(ctx, info, WcStatus::BadRespErr);
                    return;
                }
                // Borrow the SGEs in place (no clone per response packet).
                let scattered =
                    memory::scatter_at(ctx.verbs, info.pd, &w.wr.sg_list, offset, payload);
                if scattered.is_err() {
                    self.fail(ctx, info, WcStatus::LocProtErr);
                    return;
                }
                if let Some(w) = self.head_mut() {
                    w.read_pkts += 1;
                    if is_last {
                        w.done = true;
                    }
                }
                self.una = psn.next();
                self.on_progress(info, ctx.now);
                self.complete_front(ctx, info);
            }
            _ => {}
        }
    }

    /// A READ response or atomic ACK at `psn` implicitly acknowledges every SEND/WRITE
    /// before it.
    fn ack_through_before(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, psn: Psn) {
        let mut progressed = false;
        for w in self.wqes.iter_mut() {
            if !w.started || w.done {
                if w.done {
                    continue;
                }
                break;
            }
            if w.is_rd_atomic() {
                break;
            }
            if w.last_psn().is_before(psn) {
                w.done = true;
                progressed = true;
            } else {
                break;
            }
        }
        if progressed {
            self.complete_front(ctx, info);
        }
    }

    fn head_mut(&mut self) -> Option<&mut Wqe> {
        self.wqes.iter_mut().find(|w| !w.done)
    }

    /// Timer work: RNR wait over, or the local ACK timeout fired.
    pub fn handle_timeout(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) {
        if let Some(t) = self.rnr_wait {
            if ctx.now >= t {
                self.rnr_wait = None;
            }
        }
        if let Some(t) = self.timer {
            if ctx.now >= t {
                self.timer = None;
                if self.outstanding() && !self.wqes.is_empty() {
                    self.retry(ctx, info);
                }
            }
        }
    }

    /// The earliest deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.timer, self.rnr_wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether there is a packet to send now (cheap pre-check).
    pub fn wants_to_send(&self) -> bool {
        self.rnr_wait.is_none() && self.send_idx < self.wqes.len()
    }
}
