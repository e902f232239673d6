//! The RC requester (IBTA 9.7.4-9.7.6; behaviour after rxe's rxe_req.c and rxe_comp.c):
//! segments posted WRs into packets by path MTU, numbers them with 24-bit PSNs, asks for an
//! ACK on the last packet of each message (and every 64 packets), takes ACKs, NAKs, READ
//! responses and atomic ACKs, retransmits go-back-N from the first unacknowledged PSN on a
//! local ACK timeout, a PSN sequence NAK or an implied NAK, waits out RNR NAKs, and
//! completes WRs in order with the verbs status codes.
//!
//! On a real network (issue 21, `docs/congestion-control.md`) it also:
//!
//! - **paces**: every packet passes the QP's [`Cc`] pacer, so a message leaves at the rate
//!   congestion control allows instead of as one burst; GSO trains are as long as the pacer's
//!   burst. A READ is asked for in parts of [`READ_CHUNK`] bytes (consecutive READ requests
//!   whose PSNs tile the WQE's, each a valid READ on the wire), paced by the bytes they ask
//!   for: the responses, which no one acknowledges, are clocked by the requests.
//! - **measures RTTs**: packets that ask for an ACK (and READ requests) are remembered with
//!   their send time; the ACK (or first response) that covers one is an RTT sample.
//! - **recovers fast**: a requester that has heard nothing for a probe timeout (about two
//!   RTTs, far below the ACK timeout) re-sends its oldest unacknowledged packet asking for an
//!   ACK (a tail-loss probe; a retransmission a requester may make at any time, IBTA
//!   9.7.5.1.3 has the responder answer a duplicate with an ACK of what it has). Whatever
//!   the answer acknowledges, what was sent before the probe and is not covered was lost
//!   (packets are not reordered on one path): go-back-N from there at once, without
//!   spending a retry.

use std::collections::VecDeque;

use softrdma_wire::roce::{
    AckKind, AtomicEthRepr, BthRepr, IethRepr, ImmDtRepr, NakCode, Opcode, Psn, RethRepr, RoceRepr,
};

use super::cc::Cc;
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
/// The most a single READ request asks for (a READ WQE is asked for in parts this long).
pub const READ_CHUNK: u32 = 32 * 1024;
/// Tail-loss probes before the ACK timeout is left to act.
pub const MAX_PROBES: u8 = 3;
/// The shortest probe timeout.
pub const MIN_PTO: Duration = Duration::from_micros(2_000);
/// With congestion control on, each ACK timeout in a row without progress doubles the next
/// one, up to this many doublings (8× the QP's timeout; see `Requester::timeout_retry`).
pub const MAX_TIMEOUT_BACKOFF: u8 = 3;
/// Bytes of headers a data packet adds to its payload on the wire (Ethernet, IPv4, UDP, BTH,
/// ICRC), for the pacer.
const WIRE_OVERHEAD: usize = 14 + 20 + 8 + 12 + 4;

/// What a requester counted since the stack last asked ([`Requester::take_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequesterStats {
    /// Request packets sent again.
    pub retransmitted: u64,
    /// Times the pacer held the next packet back.
    pub paced: u64,
    /// Packets a go-back-N did not send again: an ACK that came during it covered them.
    pub skipped: u64,
}

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
    /// READ: response packets asked for so far (the READ requests sent cover
    /// `0..read_issued`).
    pub read_issued: u32,
    /// READ: response packets per part (0: not asked for yet). Chosen when the READ is
    /// first asked for and kept, so a part asked for again is always within one asked for
    /// before: the whole READ when the requester is unpaced (one request, as before issue
    /// 21: parts would only cost requests on a path that takes everything), [`READ_CHUNK`]
    /// when paced.
    pub read_chunk: u32,
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
            read_issued: 0,
            read_chunk: 0,
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
    /// ACK timeouts in a row without progress (with congestion control on, also the
    /// exponent of the timeout's back-off, at most [`MAX_TIMEOUT_BACKOFF`]).
    timeouts: u8,
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
    /// Congestion control and the pacer.
    pub cc: Cc,
    /// The pacer held the next packet back until then (the QP then waits in the deadline
    /// index, not in the sending one).
    paced_until: Option<Instant>,
    /// Packets that asked for an ACK (and READ requests), first sent at: RTT samples.
    marks: VecDeque<(Psn, Instant, bool)>,
    /// The highest PSN sent so far plus one (packets below it are retransmissions).
    sent_high: Psn,
    /// READ requests / atomics on the wire, by their last PSN (at most `max_rd_atomic`).
    reads_out: VecDeque<Psn>,
    /// The tail-loss probe timer, probes sent since the last progress, the probe packets
    /// waiting to be sent (their PSNs, in order), and whether one is out (sent, no progress
    /// since).
    probe_at: Option<Instant>,
    probes: u8,
    probe_psns: [Option<Psn>; 2],
    probe_out: bool,
    /// When the last packet left.
    last_sent: Option<Instant>,
    /// Packets re-sent, pacer waits, and packets a go-back skipped, not yet counted by the
    /// stack.
    retransmitted: u64,
    paced: u64,
    skipped: u64,
}

impl Requester {
    /// Starts the requester at RTS.
    pub fn start(&mut self, sq_psn: u32, retry_cnt: u8, rnr_retry: u8) {
        *self = Requester {
            next_psn: Psn::new(sq_psn),
            una: Psn::new(sq_psn),
            sent_high: Psn::new(sq_psn),
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            ..Requester::default()
        };
    }

    /// Whether packets are outstanding: sent (a READ: asked for) and not acknowledged. A
    /// WQE that has its PSNs but whose packets the pacer still holds back has none on the
    /// wire: nothing to time out or probe for.
    fn outstanding(&self) -> bool {
        self.sent_high.is_after(self.una)
    }

    /// The probe timeout: two smoothed RTTs plus four mean deviations (RTT samples of a
    /// userspace stack on a busy machine jump by milliseconds, and a spurious probe costs a
    /// go-back-N), at least [`MIN_PTO`], at most half the ACK timeout.
    fn pto(&self, info: &QpInfo) -> Duration {
        let srtt = self.cc.srtt.unwrap_or(MIN_PTO.total_micros());
        let pto = (2 * srtt + 4 * self.cc.rttvar).max(MIN_PTO.total_micros());
        let cap = info.ack_timeout.map_or(u64::MAX, |t| t.total_micros() / 2);
        Duration::from_micros(pto.min(cap))
    }

    /// PSNs that may be outstanding when a new WQE starts: [`MAX_UNACKED_PSNS`], or two
    /// rounds at the paced rate if that is more (a window that only lets the next message
    /// start once the previous one is almost acknowledged idles the link for an RTT per
    /// message once the RTT exceeds 128 packets' time).
    /// Unpaced, the window is [`MAX_UNACKED_PSNS`] as it always was: a path that has shown
    /// no congestion is not given more in flight than before.
    fn window(&self, mtu: u32) -> u32 {
        let Some(srtt) = self.cc.srtt.filter(|_| self.cc.paced()) else {
            return MAX_UNACKED_PSNS;
        };
        let bdp = self.cc.rate.min(super::cc::MAX_RATE) * srtt as f64 * 1e-6;
        let pkts = (2.0 * bdp / f64::from(mtu.max(256))) as u32;
        pkts.clamp(MAX_UNACKED_PSNS, 1 << 16)
    }

    /// Response packets a READ may have asked for and not received: what the paced rate
    /// carries in the base RTT plus twice the target queueing delay, at least 64 KiB;
    /// unpaced, no limit but `max_rd_atomic` (as before issue 21).
    fn read_window(&self, mtu: u32) -> u32 {
        if !self.cc.paced() {
            return u32::MAX;
        }
        let base = self.cc.min_rtt.unwrap_or(100) + 2 * super::cc::TARGET_QDELAY.total_micros();
        let bytes = (self.cc.rate.min(super::cc::MAX_RATE) * base as f64 * 1e-6).max(65_536.0);
        (bytes / f64::from(mtu.max(256))) as u32
    }

    /// Where PSN `psn` is: (WQE index, packet in it) of a started, unfinished WQE.
    fn position_of(&self, psn: Psn) -> Option<(usize, u32)> {
        self.wqes.iter().enumerate().find_map(|(i, w)| {
            (w.started && !w.done && psn.in_window(w.first_psn, w.npkts))
                .then(|| (i, psn.offset_from(w.first_psn)))
        })
    }

    /// An RTT sample from the marks that `psn` covers (an ACK through `psn`, or the first
    /// response of the READ request at `psn`).
    fn sample_rtt(&mut self, psn: Psn, now: Instant) {
        let mut at = None;
        while let Some(&(p, t, fresh)) = self.marks.front() {
            if p.is_after(psn) {
                break;
            }
            at = Some((t, fresh));
            self.marks.pop_front();
        }
        if let Some((t, fresh)) = at {
            self.cc.on_rtt(now, now.saturating_duration_since(t), fresh);
        }
    }

    /// A loss was found (NAK, probe answer, timeout): tell congestion control, forget the
    /// RTT marks of what will be re-sent (their samples would be ambiguous).
    fn on_loss(&mut self, now: Instant, from: Psn) {
        self.cc.on_loss(now);
        self.forget_marks(from);
    }

    /// A lost tail of READ responses (see [`Requester::handle_timeout`]).
    fn on_tail_loss(&mut self, now: Instant, from: Psn) {
        self.cc.on_tail_loss(now);
        self.forget_marks(from);
    }

    /// Drops the RTT marks of what will be re-sent from `from` on.
    fn forget_marks(&mut self, from: Psn) {
        // Packets from `from` on will be re-sent: their marks would give ambiguous samples
        // (Karn's rule); marks of packets before it stay good.
        while self
            .marks
            .back()
            .is_some_and(|(p, _, _)| !p.is_before(from))
        {
            self.marks.pop_back();
        }
        // `reads_out` stays: the READs asked for again are duplicates of those on the
        // responder's list, and a new one must not push one of them off it (the responder
        // keeps `max_dest_rd_atomic` of them; a retried READ it no longer has is ignored).
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
        while let Some(at) = self.probe_psns[0] {
            self.probe_psns = [self.probe_psns[1], None];
            // Only what is still unacknowledged and was sent is worth a probe.
            if at.is_before(self.una) || !at.is_before(self.sent_high) {
                continue;
            }
            let saved = (self.send_idx, self.send_pkt, self.noack_pkts);
            let issued: Vec<u32> = self.wqes.iter().map(|w| w.read_issued).collect();
            self.go_back(at);
            let r = self.emit_next(info, mrs, now, true, sink);
            // Sending carries on where it was; parts of READs asked for again stay asked.
            (self.send_idx, self.send_pkt, self.noack_pkts) = saved;
            for (w, i) in self.wqes.iter_mut().zip(issued) {
                w.read_issued = w.read_issued.max(i);
            }
            self.probe_out |= r.is_some();
            return r;
        }
        if let Some(t) = self.paced_until {
            if now < t {
                return None;
            }
            self.paced_until = None;
        }
        if self.send_idx < self.wqes.len() {
            if let Err(t) = self.cc.may_send(now) {
                self.paced_until = Some(t);
                self.paced += 1;
                return None;
            }
        }
        self.emit_next(info, mrs, now, false, sink)
    }

    /// The packet at the send position (`probe`: asking for an ACK whatever it is).
    fn emit_next<R>(
        &mut self,
        info: &QpInfo,
        mrs: &MrTable,
        now: Instant,
        probe: bool,
        sink: impl FnOnce(&RoceRepr<'_>, Option<emit::MrSlice>) -> R,
    ) -> Option<R> {
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
        // READ requests on the wire: at most `max_rd_atomic`, and at most the READ window of
        // responses asked for and not yet arrived (the responses leave the responder as a
        // burst per request; this bounds what a rate overshoot can put in the bottleneck).
        let reads_full = self.reads_out.len() >= usize::from(info.max_rd_atomic.max(1))
            || (!self.reads_out.is_empty()
                && self.sent_high.offset_from(self.una) >= self.read_window(mtu));
        let window = self.window(mtu);
        let paced = self.cc.paced();
        let sent_high = self.sent_high;
        let w = self.wqes.get_mut(self.send_idx)?;
        // A READ asked for again after a loss is a duplicate of one on the responder's list:
        // it takes no new place there, and must not wait for one.
        let again = w.started
            && w.first_psn
                .add(w.read_issued.max(w.read_pkts))
                .is_before(sent_high);
        if w.is_rd_atomic() && reads_full && !probe && !again {
            return None;
        }
        if !w.started {
            if w.is_rd_atomic() && rd_before >= usize::from(info.max_rd_atomic) {
                return None;
            }
            if w.wr.fence && rd_before > 0 {
                return None;
            }
            if self.next_psn.offset_from(self.una) >= window {
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
        let mut wire_bytes = WIRE_OVERHEAD;
        let mut read_last = None;
        let scratch = &mut self.scratch;
        match w.wr.op {
            SendOp::RdmaRead { remote_addr, rkey } => {
                // A READ is asked for in parts of READ_CHUNK: packets `from..to`, where a
                // part ends on a multiple of the chunk (so a part asked for again after a
                // loss is the rest of the part first asked for, as a responder's duplicate
                // READ check wants it). A (re)issued READ asks for what has not arrived.
                let part = (READ_CHUNK / mtu.max(1)).max(1);
                if w.read_chunk == 0 {
                    w.read_chunk = if paced { part } else { w.npkts.max(1) };
                } else if paced && w.read_issued <= w.read_pkts {
                    // Asked for again after a loss (a go-back resets what was asked to
                    // what arrived), now paced: in parts from here on. Every part lies
                    // within the range first asked for, so the responder replays each as
                    // a duplicate; the whole rest asked for again would come back as one
                    // burst and overflow the queue that lost it the first time.
                    w.read_chunk = w.read_chunk.min(part);
                }
                let chunk = w.read_chunk;
                let from = w
                    .read_issued
                    .max(w.read_pkts)
                    .min(w.npkts.saturating_sub(1));
                let to = ((from / chunk + 1) * chunk).min(w.npkts).max(from + 1);
                let mtu64 = u64::from(mtu);
                let from_bytes = (u64::from(from) * mtu64).min(u64::from(w.len));
                let to_bytes = (u64::from(to) * mtu64).min(u64::from(w.len));
                bth.psn = w.first_psn.add(from);
                repr.reth = Some(RethRepr {
                    va: remote_addr.wrapping_add(from_bytes),
                    r_key: rkey,
                    dma_len: (to_bytes - from_bytes) as u32,
                });
                bth.ack_req = true;
                w.read_issued = to;
                advance_wqe = to >= w.npkts;
                // The pacer pays for the responses this asks for.
                wire_bytes +=
                    (to_bytes - from_bytes) as usize + (to - from) as usize * WIRE_OVERHEAD;
                read_last = Some(w.first_psn.add(to - 1));
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
                read_last = Some(w.first_psn);
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
                read_last = Some(w.first_psn);
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
                wire_bytes += payload.len();
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
                bth.ack_req = last || self.noack_pkts > MAX_PKT_PER_ACK || probe;
                self.send_pkt += 1;
                advance_wqe = self.send_pkt >= w.npkts;
            }
        }
        if !probe {
            self.cc.on_sent(now, wire_bytes);
            // The last packet before a pacer wait asks for an ACK: a paced message's
            // packets leave over milliseconds, and an ACK only every MAX_PKT_PER_ACK
            // packets would leave the controller without samples, the window without
            // room, and at low rates the ACK timer to expire between ACKs.
            if self.cc.paced() && self.cc.may_send(now).is_err() {
                bth.ack_req = true;
            }
        }
        if bth.ack_req {
            self.noack_pkts = 0;
        }
        bth.pad_count = repr.bth.pad_count;
        repr.bth = bth;
        let psn = bth.psn;
        let tx = sink(&repr, src);
        if advance_wqe {
            self.send_idx += 1;
            self.send_pkt = 0;
        }
        let fresh = !psn.is_before(self.sent_high);
        if fresh {
            self.sent_high = read_last.unwrap_or(psn).next();
        } else {
            self.retransmitted += 1;
        }
        // Re-sent packets are marked too (their marks were dropped at the go-back): in
        // go-back-N the responder discarded the first copies of what is re-sent, so the
        // answer is to this copy (a probe's duplicate is the exception, and its answer
        // comes at once).
        if bth.ack_req && !probe && self.marks.back().is_none_or(|(p, _, _)| psn.is_after(*p)) {
            self.marks.push_back((psn, now, fresh));
        }
        if let Some(last) = read_last {
            if self.reads_out.back().is_none_or(|b| last.is_after(*b)) {
                self.reads_out.push_back(last);
            }
        }
        self.last_sent = Some(now);
        self.probe_at = Some(now + self.pto(info));
        if self.timer.is_none() {
            self.timer = info.ack_timeout.map(|d| now + d);
        }
        Some(tx)
    }

    /// What a tail-loss probe (RACK-TLP's, RFC 8985, in RC terms) re-sends, each asking for
    /// an ACK: the oldest unacknowledged packet and the last packet sent. The responder's
    /// answers alone say what was lost, without guessing from timing (a receiver that is
    /// merely slow has both queued behind what it has not yet processed, FIFO):
    ///
    /// - nothing lost: both are duplicates, answered with ACKs of all it holds
    ///   (IBTA 9.7.5.1.3);
    /// - a lost tail, or a hole whose NAK was lost (the responder NAKs a sequence error once
    ///   until the expected packet comes): the first is the expected packet and is taken,
    ///   which re-arms the responder's NAK, and the second, now out of sequence, draws a
    ///   sequence NAK: go-back-N from the hole follows as after any NAK;
    /// - only the last packet lost: the second is the expected packet and is taken.
    ///
    /// A READ at the head is asked for again from the response that has not arrived (its
    /// responses are what a tail loss takes; a replay of one that did arrive is dropped as a
    /// duplicate).
    fn probe_targets(&self) -> [Option<Psn>; 2] {
        let una = self.una;
        let last = self.sent_high.sub(1);
        if self.head_is_read() || last == una {
            [Some(una), None]
        } else {
            [Some(una), Some(last)]
        }
    }

    /// Whether the oldest unacknowledged PSN belongs to a READ or an atomic.
    fn head_is_read(&self) -> bool {
        self.position_of(self.una)
            .and_then(|(i, _)| self.wqes.get(i))
            .is_some_and(|w| w.is_rd_atomic())
    }

    /// Packets re-sent, pacer waits, and packets a go-back did not re-send because an ACK
    /// covered them, since the last call (for the device's counters).
    pub fn take_stats(&mut self) -> RequesterStats {
        RequesterStats {
            retransmitted: std::mem::take(&mut self.retransmitted),
            paced: std::mem::take(&mut self.paced),
            skipped: std::mem::take(&mut self.skipped),
        }
    }

    /// Whether a packet's payload could not be read since the last call (then the QP must
    /// fail: [`Requester::fail`] with `LocProtErr`).
    pub fn take_fault(&mut self) -> bool {
        std::mem::take(&mut self.fault)
    }

    /// Resumes sending from `psn` (go-back-N).
    fn go_back(&mut self, psn: Psn) {
        self.paced_until = None;
        for w in self.wqes.iter_mut() {
            w.read_issued = w.read_pkts;
        }
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

    /// The local ACK timer fired with packets outstanding: go back to `una`, using a retry.
    ///
    /// The retry count is what tells a dead or unreachable responder from a slow one, so it
    /// counts these timeouts, the responder's silence; a go-back-N that a response started
    /// (a sequence NAK, an implied NAK, a gap in READ responses: the responder got our
    /// packets and is alive) uses none ([`Requester::retry`]). rxe spends one per retry
    /// sequence whatever started it, and never at `retry_cnt` 7 (it treats 7 as infinite);
    /// ours spends fewer, never more, and a kernel peer sees the same packets.
    ///
    /// With congestion control on, the timeout also backs off: each one in a row without
    /// progress doubles the next, up to 2^[`MAX_TIMEOUT_BACKOFF`], as TCP's RTO does (RFC
    /// 6298 5.5). On a loaded host a userspace responder's thread can be off its socket for
    /// half a second; at 67 ms (timeout 14, what perf asks for) eight timeouts took less than
    /// that, and loopback `perf write bw` ended in RETRY_EXC_ERR with every packet waiting
    /// in the responder's socket. A dead peer is still found: with retry_cnt 7 after
    /// 1 + 2 + 4 + 8 × 5 = 47 timeouts' time (about 3 s at 67 ms) instead of 8.
    fn timeout_retry(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo) -> bool {
        if !self.retry(ctx, info, true) {
            return false;
        }
        self.timeouts = self.timeouts.saturating_add(1);
        if self.cc.enabled {
            let k = self.timeouts.min(MAX_TIMEOUT_BACKOFF);
            let t = info
                .ack_timeout
                .map(|d| ctx.now + Duration::from_micros(d.total_micros() << k));
            self.timer = t;
        }
        true
    }

    /// Starts a retry (go back to `una`); `counts`: it uses one of the retry count (false
    /// and the QP in ERR when none is left). Retries a response started (a sequence NAK, an
    /// implied NAK, a gap in READ responses) never count: see [`Requester::timeout_retry`].
    fn retry(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, counts: bool) -> bool {
        if counts {
            if self.retry_left == 0 {
                ctx.counters.retry_exceeded_err += 1;
                self.fail(ctx, info, WcStatus::RetryExcErr);
                return false;
            }
            self.retry_left -= 1;
        }
        let una = self.una;
        self.on_loss(ctx.now, una);
        self.go_back(una);
        // What is re-sent leaves now: the pacer's clock may be far ahead after a cut, and a
        // retransmission it held back past the ACK timeout would time out again.
        self.cc.restart_pacer(ctx.now);
        self.retrying = true;
        self.timer = info.ack_timeout.map(|d| ctx.now + d);
        true
    }

    fn on_progress(&mut self, info: &QpInfo, now: Instant) {
        self.retry_left = info.retry_cnt;
        self.timeouts = 0;
        self.rnr_left = info.rnr_retry;
        self.retrying = false;
        self.probes = 0;
        self.probe_out = false;
        self.timer = if self.outstanding() {
            info.ack_timeout.map(|d| now + d)
        } else {
            None
        };
        self.probe_at = self.outstanding().then(|| now + self.pto(info));
        let una = self.una;
        while self.reads_out.front().is_some_and(|p| p.is_before(una)) {
            self.reads_out.pop_front();
        }
    }

    /// Everything up to and including `a` is acknowledged.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, info: &QpInfo, a: Psn) {
        self.sample_rtt(a, ctx.now);
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
            let pkts = una.offset_from(self.una);
            self.cc
                .on_delivered(ctx.now, u64::from(pkts) * u64::from(info.mtu));
            self.una = una;
            self.on_progress(info, ctx.now);
        }
        self.complete_front(ctx, info);
        self.skip_acknowledged();
        if implied_nak && !self.retrying {
            self.retry(ctx, info, false);
        }
    }

    /// During a go-back-N the send position can lie before `una`: an ACK that came since
    /// acknowledged packets the responder had kept past the hole (ours keeps them; rxe's,
    /// which drops them, never ACKs past the hole, so this never happens with it). An ACK
    /// acknowledges every earlier PSN (IBTA 9.7.5.1.2), so they are not sent again: sending
    /// resumes at `una`. WQEs wholly acknowledged were already popped by
    /// [`Requester::complete_front`], which moves the position to the next one; this moves
    /// it within the WQE. A READ or atomic is never skipped into: its requests are asked
    /// for again from what arrived, and an ACK past one that is unanswered is an implied
    /// NAK, not an acknowledgement.
    fn skip_acknowledged(&mut self) {
        let Some(w) = self.wqes.get(self.send_idx) else {
            return;
        };
        if !w.started || w.is_rd_atomic() || !self.una.in_window(w.first_psn, w.npkts) {
            return;
        }
        let to = self.una.offset_from(w.first_psn);
        if to > self.send_pkt {
            self.skipped += u64::from(to - self.send_pkt);
            self.send_pkt = to;
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
                        if self.probe_out {
                            // A probe found the hole: the go-back starts now, not at the
                            // ACK timeout.
                            self.probe_out = false;
                            ctx.counters.fast_retransmits += 1;
                        }
                        if !self.retrying {
                            self.retry(ctx, info, false);
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
                        self.retry(ctx, info, false);
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
                    // The last response of the whole READ, or of one of its parts (which
                    // end on full packets).
                    end == u64::from(w.len)
                        || (payload.len() as u64 == u64::from(mtu)
                            && end < u64::from(w.len)
                            && (w.read_pkts + 1) % w.read_chunk.max(1) == 0)
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
                    if is_last && end == u64::from(w.len) {
                        w.done = true;
                    }
                }
                self.sample_rtt(psn, ctx.now);
                self.cc.on_delivered(ctx.now, payload.len() as u64);
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
        let now = ctx.now;
        if let Some(t) = self.rnr_wait {
            if now >= t {
                self.rnr_wait = None;
            }
        }
        if self.paced_until.is_some_and(|t| now >= t) {
            self.paced_until = None;
        }
        if let Some(t) = self.timer {
            if now >= t {
                self.timer = None;
                if self.outstanding() && !self.wqes.is_empty() {
                    ctx.counters.ack_timeouts += 1;
                    self.probe_out = false;
                    self.timeout_retry(ctx, info);
                }
            }
        }
        if let Some(t) = self.probe_at {
            if now >= t {
                self.probe_at = None;
                let quiet = self.rnr_wait.is_none() && !self.fault;
                // Probes only with congestion control on (the switch is the whole of the
                // issue 21 behaviour; off, the requester is what it was before, and a lost
                // tail waits for the ACK timeout). A READ's probe asks for the rest of the
                // READ again, and on a loaded host, where probes fire after mere
                // scheduling stalls, those replays cost loopback `perf read bw` a third
                // (0.27x -> 0.18x TCP, same minute).
                let probe_ok = self.cc.enabled;
                if self.outstanding() && !self.wqes.is_empty() && quiet && probe_ok {
                    if self.probes < MAX_PROBES {
                        self.probes += 1;
                        self.probe_psns = self.probe_targets();
                        ctx.counters.tail_probes += 1;
                        if self.head_is_read() {
                            // READ responses stopped short of the end for a probe timeout:
                            // the tail of a response burst was lost (no response after it
                            // could show a gap, and the responder sends no NAK for it).
                            // The READ is asked for again from what arrived, which is a
                            // go-back: it is a loss to congestion control, the one a READ
                            // requester sees when a queue overflows.
                            let una = self.una;
                            self.on_tail_loss(now, una);
                        }
                    }
                    // Backed off: 2, 4, 8 probe timeouts.
                    let k = 1u64 << self.probes.min(6);
                    self.probe_at =
                        Some(now + Duration::from_micros(self.pto(info).total_micros() * k));
                }
            }
        }
    }

    /// The earliest deadline: the ACK timer, the RNR wait, the pacer's next send, the
    /// tail-loss probe.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let probe = self.probe_at.filter(|_| self.outstanding());
        [self.timer, self.rnr_wait, self.paced_until, probe]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether there is a packet to send now (cheap pre-check; a requester the pacer holds
    /// back waits for its deadline instead).
    pub fn wants_to_send(&self) -> bool {
        self.rnr_wait.is_none()
            && (self.probe_psns[0].is_some()
                || (self.paced_until.is_none() && self.send_idx < self.wqes.len()))
    }
}
