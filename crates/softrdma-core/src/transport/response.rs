//! The queue of what the transport sends besides the requesters' packets: ACKs and NAKs,
//! READ responses, atomic ACKs and UD sends, in the order they were decided.
//!
//! ACKs and READ responses are kept as descriptions, not bytes, and written straight into
//! the driver's [`TransmitBatch`] when it drains the queue:
//!
//! - a READ response of many packets costs no buffer per packet: each packet's payload is
//!   read from the MR as it is written out (rxe's `read_reply` also reads the MR packet by
//!   packet), so a 1 MiB READ no longer allocates 1 MiB of packets at once;
//! - ACKs coalesce: an ACK of a QP whose previous ACK is still the last thing queued
//!   replaces it (ACKs are cumulative, IBTA 9.7.5.1.2; a responder may coalesce them),
//!   so the SENDs and WRITEs a loop turn received cost one ACK per QP, not one each.
//!
//! Order is kept: entries leave in the order they were queued, and a READ response that
//! does not fit the batch resumes where it stopped, ahead of everything queued after it.

use std::collections::VecDeque;
use std::net::IpAddr;

use softrdma_wire::roce::{AethRepr, BthRepr, Opcode, Psn, RoceRepr, Syndrome};

use super::emit::{self, MrSlice, Transmit, TransmitBatch};
use super::segment;
use super::QpInfo;
use crate::verbs::MrTable;

/// The addressing every response of one QP carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The responding (local) QP.
    pub qpn: u32,
    pub pkey: u16,
    pub dest_qp: u32,
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub dst_ip: IpAddr,
    pub tos: u8,
}

impl Flow {
    pub fn of(info: &QpInfo) -> Flow {
        Flow {
            qpn: info.qpn,
            pkey: info.pkey,
            dest_qp: info.dest_qpn,
            src_ip: info.local_ip,
            src_port: info.src_port,
            dst_ip: info.peer_ip,
            tos: info.tos,
        }
    }

    fn bth(&self, opcode: Opcode, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            pkey: self.pkey,
            dest_qp: self.dest_qp,
            psn,
            ..BthRepr::default()
        }
    }
}

/// A READ response still to send: packets `next..n` of the response to
/// `[va, va + len)` under `rkey`, whose first packet has PSN `psn`.
#[derive(Clone, Debug)]
pub struct ReadResponse {
    pub flow: Flow,
    pub rkey: u32,
    pub va: u64,
    pub len: u32,
    pub mtu: u32,
    pub psn: Psn,
    pub msn: u32,
    pub next: u32,
    pub n: u32,
}

impl ReadResponse {
    /// Packet `next` as a repr borrowing its payload from `mrs`; `None` when the MR is
    /// gone (deregistered or invalidated since the READ ran: nothing more is sent, the
    /// requester's retried READ then meets the missing MR and gets its NAK).
    /// With where the payload lies in its MR.
    fn packet<'m>(&self, mrs: &'m MrTable) -> Option<(RoceRepr<'m>, Option<MrSlice>)> {
        let i = self.next;
        let off = u64::from(i) * u64::from(self.mtu);
        let chunk = (u64::from(self.len).saturating_sub(off)).min(u64::from(self.mtu)) as usize;
        let (data, at): (&[u8], _) = if self.len == 0 {
            (&[], None)
        } else {
            let mr = mrs.by_rkey(self.rkey).ok()?;
            let r = mr.range(self.va.wrapping_add(off), chunk).ok()?;
            let at = MrSlice {
                lkey: mr.lkey(),
                start: r.start,
                len: r.len(),
            };
            (mr.as_slice().get(r)?, Some(at))
        };
        let opcode = segment::read_response_opcode(i, self.n);
        let mut repr = RoceRepr::new(self.flow.bth(opcode, self.psn.add(i)));
        if opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            repr.aeth = Some(AethRepr {
                syndrome: super::rc_responder::ACK_UNLIMITED,
                msn: self.msn,
            });
        }
        repr.set_payload(data);
        Some((repr, at))
    }
}

/// An ACK or NAK.
#[derive(Clone, Copy, Debug)]
pub struct Ack {
    pub flow: Flow,
    pub psn: Psn,
    pub syndrome: Syndrome,
    pub msn: u32,
}

impl Ack {
    fn repr(&self) -> RoceRepr<'static> {
        let mut repr = RoceRepr::new(self.flow.bth(Opcode::RC_ACKNOWLEDGE, self.psn));
        repr.aeth = Some(AethRepr {
            syndrome: self.syndrome,
            msn: self.msn,
        });
        repr
    }
}

/// One queued entry.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// A datagram already built (UD sends, atomic ACKs).
    Sealed(Transmit),
    Ack(Ack),
    Read(ReadResponse),
}

/// What [`Responses::next`] hands out.
enum Next<'m> {
    Sealed(Transmit),
    Packet(RoceRepr<'m>, Flow, Option<MrSlice>),
}

/// The queue.
#[derive(Clone, Debug, Default)]
pub struct Responses {
    q: VecDeque<Outgoing>,
    /// ACKs folded into a later one (never sent on their own).
    pub coalesced_acks: u64,
}

impl Responses {
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn push_sealed(&mut self, tx: Transmit) {
        self.q.push_back(Outgoing::Sealed(tx));
    }

    /// Queues an ACK or NAK. A plain ACK replaces the one queued last if that is a plain
    /// ACK of the same QP for an earlier (or the same) PSN.
    pub fn push_ack(&mut self, ack: Ack) {
        if ack.syndrome.is_ack() {
            if let Some(Outgoing::Ack(last)) = self.q.back_mut() {
                if last.flow == ack.flow && last.syndrome.is_ack() && !ack.psn.is_before(last.psn) {
                    *last = ack;
                    self.coalesced_acks += 1;
                    return;
                }
            }
        }
        self.q.push_back(Outgoing::Ack(ack));
    }

    pub fn push_read(&mut self, r: ReadResponse) {
        if r.next < r.n {
            self.q.push_back(Outgoing::Read(r));
        }
    }

    /// The front entry's next datagram, taking the entry off the queue once it has sent
    /// everything: a built one, or a packet for the caller to write out.
    fn next<'m>(&mut self, mrs: &'m MrTable) -> Option<Next<'m>> {
        loop {
            match self.q.front_mut()? {
                Outgoing::Sealed(_) => {
                    let Some(Outgoing::Sealed(tx)) = self.q.pop_front() else {
                        return None;
                    };
                    return Some(Next::Sealed(tx));
                }
                Outgoing::Ack(a) => {
                    let a = *a;
                    self.q.pop_front();
                    return Some(Next::Packet(a.repr(), a.flow, None));
                }
                Outgoing::Read(r) => {
                    let Some((repr, at)) = r.packet(mrs) else {
                        self.q.pop_front();
                        continue;
                    };
                    let flow = r.flow;
                    r.next += 1;
                    if r.next >= r.n {
                        self.q.pop_front();
                    }
                    return Some(Next::Packet(repr, flow, at));
                }
            }
        }
    }

    /// The next datagram in its own buffer ([`emit::build_tos`]).
    pub fn pop_transmit(&mut self, mrs: &MrTable) -> Option<Transmit> {
        Some(match self.next(mrs)? {
            Next::Sealed(tx) => tx,
            Next::Packet(repr, f, _) => {
                emit::build_tos(&repr, f.src_ip, f.src_port, f.dst_ip, f.tos)
            }
        })
    }

    /// Writes queued entries into `batch` until it is full or the queue is empty; returns
    /// the datagrams written.
    pub fn drain_into(&mut self, mrs: &MrTable, batch: &mut TransmitBatch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            match self.next(mrs) {
                None => break,
                Some(Next::Sealed(tx)) => batch.push_sealed(&tx),
                Some(Next::Packet(repr, f, at)) => {
                    batch.push_repr_from(&repr, at, f.src_ip, f.src_port, f.dst_ip, f.tos)
                }
            }
            n += 1;
        }
        n
    }
}
