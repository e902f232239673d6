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
use crate::verbs::{Mr, MrTable};

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
        let mr = if self.len == 0 {
            None
        } else {
            Some(mrs.by_rkey(self.rkey).ok()?)
        };
        self.with_repr_at(mr, self.next, |r, at| (*r, at))
    }

    /// Packet `i`, its payload in `mr` (`None` for a zero-length READ), handed to `f` by
    /// reference: the repr stays where it was built (moving its 192 bytes per packet was a
    /// visible share of a 1 MiB READ's cost).
    #[inline(always)]
    fn with_repr_at<'m, R>(
        &self,
        mr: Option<&'m Mr>,
        i: u32,
        f: impl FnOnce(&RoceRepr<'m>, Option<MrSlice>) -> R,
    ) -> Option<R> {
        let off = u64::from(i) * u64::from(self.mtu);
        let chunk = (u64::from(self.len).saturating_sub(off)).min(u64::from(self.mtu)) as usize;
        let (data, at): (&[u8], _) = match mr {
            None => (&[], None),
            Some(mr) => {
                let r = mr.range(self.va.wrapping_add(off), chunk).ok()?;
                let at = MrSlice {
                    lkey: mr.lkey(),
                    start: r.start,
                    len: r.len(),
                };
                (mr.as_slice().get(r)?, Some(at))
            }
        };
        let opcode = segment::read_response_opcode(i, self.n);
        let mut repr = RoceRepr::new(self.flow.bth(opcode, self.psn.add(i)));
        if opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            repr.aeth = Some(AethRepr {
                syndrome: softrdma_wire::roce::ACK_UNLIMITED,
                msn: self.msn,
            });
        }
        repr.set_payload(data);
        Some(f(&repr, at))
    }

    /// Writes packets from `next` on into `batch` until it is full or the response is
    /// out; returns how many. Stops early, leaving `next` at the packet, if the MR is gone.
    fn drain_into(&mut self, mrs: &MrTable, batch: &mut TransmitBatch) -> usize {
        let mr = if self.len == 0 {
            None
        } else {
            match mrs.by_rkey(self.rkey) {
                Ok(m) => Some(m),
                Err(_) => return 0,
            }
        };
        let f = self.flow;
        let mut sent = 0;
        while self.next < self.n && !batch.is_full() {
            let pushed = self.with_repr_at(mr, self.next, |repr, at| {
                batch.push_repr_from(repr, at, f.src_ip, f.src_port, f.dst_ip, f.tos)
            });
            if pushed.is_none() {
                return sent;
            }
            self.next += 1;
            sent += 1;
        }
        sent
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
            // A READ response's packets straight into the batch, the MR looked up once per
            // run: at 1 MiB these are 256 packets a READ, and handing each out by value
            // (a 192-byte repr, moved three times) cost the sender more than its headers.
            if let Some(Outgoing::Read(r)) = self.q.front_mut() {
                let sent = r.drain_into(mrs, batch);
                n += sent;
                // Done, or nothing went into a batch with room: its MR is gone (see
                // `ReadResponse::packet`).
                if r.next >= r.n || sent == 0 {
                    self.q.pop_front();
                }
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rand::Rng;
    use crate::verbs::{AccessFlags, PdId};
    use std::net::Ipv4Addr;

    fn flow() -> Flow {
        Flow {
            qpn: 0x11,
            pkey: 0xffff,
            dest_qp: 0x22,
            src_ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            src_port: 49152,
            dst_ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            tos: 0,
        }
    }

    /// A READ response drains over several batches, resuming where it stopped, with the
    /// packets `pop_transmit` would build (same opcodes, PSNs, payloads); once its MR is
    /// invalidated nothing more of it leaves, and the ACK queued after it still does.
    #[test]
    fn a_read_response_drains_across_batches_and_stops_when_its_mr_goes() {
        let mut mrs = MrTable::new(8, Rng::new(3));
        let bytes: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let keys = mrs
            .register_fast(PdId(1), bytes.clone(), 0x10_000, AccessFlags::REMOTE_READ)
            .expect("mr");
        let read = ReadResponse {
            flow: flow(),
            rkey: keys.rkey,
            va: 0x10_000,
            len: 40_000,
            mtu: 4096,
            psn: Psn::new(100),
            msn: 7,
            next: 0,
            n: 10,
        };
        // What the one-packet path builds, for comparison.
        let mut reference = Responses::default();
        reference.push_read(read.clone());
        let want: Vec<Transmit> = std::iter::from_fn(|| reference.pop_transmit(&mrs)).collect();
        assert_eq!(want.len(), 10);

        let mut q = Responses::default();
        q.push_read(read);
        // One segment a train: the limit then stops the batch at three packets.
        let mut batch = TransmitBatch::new(1, 65_507);
        batch.max_bytes = 3 * 4096;
        assert_eq!(q.drain_into(&mrs, &mut batch), 3);
        let mut got: Vec<Vec<u8>> = Vec::new();
        for (t, b) in batch.trains() {
            for seg in b.chunks(t.segment_size) {
                got.push(seg.to_vec());
            }
        }
        batch.clear();
        assert_eq!(q.drain_into(&mrs, &mut batch), 3);
        for (t, b) in batch.trains() {
            for seg in b.chunks(t.segment_size) {
                got.push(seg.to_vec());
            }
        }
        assert_eq!(got.len(), 6);
        for (k, g) in got.iter().enumerate() {
            // Same headers and payload; the ICRC differs only by the IPv4 ID each gets in
            // its train, so compare up to it.
            let w = &want[k].payload;
            assert_eq!(g.len(), w.len(), "packet {k}");
            assert_eq!(g[..g.len() - 4], w[..w.len() - 4], "packet {k}");
        }
        // The MR goes; an ACK is queued behind the rest of the response.
        mrs.invalidate(keys.rkey).expect("invalidate");
        q.push_ack(Ack {
            flow: flow(),
            psn: Psn::new(9),
            syndrome: softrdma_wire::roce::ACK_UNLIMITED,
            msn: 1,
        });
        batch.clear();
        assert_eq!(q.drain_into(&mrs, &mut batch), 1, "only the ACK");
        assert!(q.is_empty());
    }
}
