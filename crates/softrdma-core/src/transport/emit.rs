//! Building outgoing RoCEv2 datagrams: the UDP source port rule, packet emission and the
//! ICRC seal (IPv4 ID 0 + DF, `docs/wire-facts.md`).
//!
//! Two ways out of the core:
//!
//! - [`Transmit`]: one datagram in its own `Vec`, sealed for IPv4 ID 0 (a datagram sent on
//!   its own from an unconnected DF socket carries ID 0).
//! - [`TransmitBatch`]: many datagrams written straight into one reusable buffer and grouped
//!   into GSO trains ([`Train`]): consecutive datagrams of one flow (destination, source IP
//!   and port) and one size, the last of a train possibly shorter, at most
//!   [`TransmitBatch::max_segments`] of them and at most [`TransmitBatch::max_train_bytes`]
//!   bytes (one UDP datagram's worth: what one GSO `sendmsg` may carry). Linux numbers the IPv4
//!   IDs of the segments of one GSO send 0, 1, 2, … (measured: `docs/measurements.md`),
//!   so segment *k* of a train is sealed for ID *k*. The driver must send each train as one
//!   GSO send — never split it (a split would restart the IDs at 0) — or not at all.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use softrdma_wire::icrc::{self, Flow, Ipv4Ident, ROCE_V2_PORT};
use softrdma_wire::roce::RoceRepr;

use crate::verbs::MrTable;

/// One datagram for the driver to send from its UDP socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it (the peer's IP, port 4791).
    pub dst: SocketAddr,
    /// The UDP source port the ICRC was computed with: the driver must send from it (or
    /// re-seal the ICRC).
    pub src_port: u16,
    /// Our IP address the ICRC was computed with.
    pub src_ip: IpAddr,
    /// The UDP payload (BTH ... ICRC).
    pub payload: Vec<u8>,
    /// GSO hint: the segment size when `payload` holds several equal datagrams back to back
    /// (always `None` for now: one datagram per `Transmit`).
    pub segment_size: Option<usize>,
    /// The IPv4 TOS / IPv6 traffic class byte to send it with: the address vector's traffic
    /// class, as rxe puts it in the IP header (`prepare4`/`prepare6`). The ICRC masks it.
    pub tos: u8,
}

/// `hash_32(v, 14)` of the kernel (`GOLDEN_RATIO_32` multiply, top bits).
const fn hash_32_14(v: u32) -> u32 {
    v.wrapping_mul(0x61C8_8647) >> (32 - 14)
}

/// The UDP source port of a datagram QP (UD, GSI): rxe's `rxe_qp_init_misc` uses
/// `0xC000 + hash_32(qpn, 14)`; for QP1 that is 55410, for QP 0xe0 58333 and QP 0x11 57236
/// (matches `g_pingpong.pcap` and `c_udaddy.pcap`).
pub const fn datagram_src_port(qpn: u32) -> u16 {
    (0xC000 | (hash_32_14(qpn) & 0x3fff)) as u16
}

/// `rdma_calc_flow_label`: the flow label ib_core gives an RC QP whose AV has none.
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = (lqpn as u64) * (rqpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0x000f_ffff) as u32
}

/// `rdma_flow_label_to_udp_sport`: `0xC000 | ((fl & 0x3FFF) ^ (fl >> 14))`.
pub const fn flow_label_src_port(fl: u32) -> u16 {
    let fl = fl & 0x000f_ffff;
    (0xC000 | ((fl & 0x3fff) ^ (fl >> 14))) as u16
}

/// The UDP source port of an RC QP (`rdma_get_udp_sport`): from the AV's flow label, or
/// from `rdma_calc_flow_label(lqpn, rqpn)` when it is 0. Both ends of an ibv_rc_pingpong
/// pair with QPN 0xdf use 49730, as `g_pingpong.pcap` shows.
pub const fn rc_src_port(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label == 0 {
        calc_flow_label(lqpn, rqpn)
    } else {
        flow_label
    };
    flow_label_src_port(fl)
}

/// Emits `repr` into a fresh buffer and seals its ICRC for `src_ip:src_port -> dst:4791`.
pub fn build(repr: &RoceRepr<'_>, src_ip: IpAddr, src_port: u16, dst_ip: IpAddr) -> Transmit {
    build_tos(repr, src_ip, src_port, dst_ip, 0)
}

/// [`build`] for a datagram to be sent with IP TOS (traffic class) `tos`.
pub fn build_tos(
    repr: &RoceRepr<'_>,
    src_ip: IpAddr,
    src_port: u16,
    dst_ip: IpAddr,
    tos: u8,
) -> Transmit {
    let mut payload = vec![0u8; repr.buffer_len()];
    repr.emit(&mut payload);
    let flow = Flow {
        src: src_ip,
        dst: dst_ip,
        src_port,
        dst_port: ROCE_V2_PORT,
    };
    // Fails only for mixed IPv4/IPv6 flows or a >64 KiB datagram; then the ICRC stays 0 and
    // the peer drops the packet (counted there), which is the right outcome.
    let _ = icrc::seal_udp(&flow, &mut payload);
    Transmit {
        dst: SocketAddr::new(dst_ip, ROCE_V2_PORT),
        src_port,
        src_ip,
        payload,
        segment_size: None,
        tos,
    }
}

// ----- ICRC of a segment in a GSO train ------------------------------------------------------

/// What IPv4 ID `id` changes in the ICRC of a `roce_len`-byte RoCE UDP payload, against ID 0
/// (the GF(2) arithmetic is [`icrc::ipv4_id_delta`]'s, in the wire crate).
pub fn id_delta(roce_len: usize, id: u16) -> u32 {
    icrc::ipv4_id_delta(roce_len, id)
}

// ----- GSO trains --------------------------------------------------------------------------

/// One GSO send: `segments` datagrams of `segment_size` bytes (the last may be shorter) from
/// `src_ip:src_port` to `dst`, segment *k* sealed for IPv4 ID *k*.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Train {
    /// Where to send it (the peer's IP, port 4791).
    pub dst: SocketAddr,
    /// Our IP address the ICRCs were computed with.
    pub src_ip: IpAddr,
    /// The UDP source port the ICRCs were computed with.
    pub src_port: u16,
    /// Size of every segment but the last (which is at most this).
    pub segment_size: usize,
    /// How many datagrams.
    pub segments: usize,
    /// The IP TOS / traffic class of every segment (a train is one `sendmsg`).
    pub tos: u8,
    /// Its pieces: indices into the batch's parts.
    parts: Range<usize>,
    /// Bytes of all its segments.
    bytes: usize,
    /// The last segment was shorter: nothing more may join.
    closed: bool,
    /// x^(8·(segment_size + 18)): the ID shift of full-size segments.
    shift: u32,
}

impl Train {
    /// Bytes of the whole train.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the train is empty (never, for a train in a batch).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The GSO segment size to hand to the socket: `None` for a single datagram.
    pub fn gso_segment_size(&self) -> Option<usize> {
        (self.segments > 1).then_some(self.segment_size)
    }
}

/// Where a datagram's payload lies in a registered MR (`lkey`, `start..start + len` of its
/// bytes), for a batch that leaves payloads in place ([`TransmitBatch::in_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrSlice {
    pub lkey: u32,
    pub start: usize,
    pub len: usize,
}

/// A piece of a train: bytes in the batch's buffer, or a payload left in its MR.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Buf(Range<usize>),
    Mr(MrSlice),
}

/// Payloads shorter than this are copied even into an in-place batch: an iovec of its own
/// costs the kernel more than copying a few hundred bytes.
pub const IN_PLACE_MIN: usize = 512;

/// A batch of outgoing datagrams in GSO trains, written into one buffer that is reused from
/// poll to poll (no allocation per packet once it has grown).
#[derive(Debug)]
pub struct TransmitBatch {
    buf: Vec<u8>,
    used: usize,
    /// Bytes of every datagram held, payloads left in MRs included.
    total: usize,
    parts: Vec<Part>,
    /// How many parts are MR payloads (0: every train is contiguous in `buf`).
    mr_parts: usize,
    trains: Vec<Train>,
    datagrams: usize,
    /// The last length whose ID shift `place` computed, and the shift.
    shift_memo: (usize, u32),
    /// The masked headers' CRC register of the last packet sealed (a train's segments
    /// share it).
    crc_memo: icrc::HeaderMemo,
    /// Leave payloads of at least [`IN_PLACE_MIN`] bytes that lie in one MR where they are:
    /// only the headers, pad and ICRC are written into the buffer, and the sender gathers
    /// each train from its parts ([`TransmitBatch::train_slices`]) — one copy of the payload
    /// (the kernel's) instead of two. Off by default: [`TransmitBatch::trains`] then gives
    /// every train as one slice.
    pub in_place: bool,
    /// Most segments per train (the driver's `max_gso_segments`, 64 on Linux; 1 = no GSO).
    pub max_segments: usize,
    /// Most bytes per train (one UDP datagram: 65507 for IPv4, 65527 for IPv6).
    pub max_train_bytes: usize,
    /// A poll stops adding datagrams once the batch holds this many bytes (and its open
    /// train is complete: [`TransmitBatch::is_full`]).
    pub max_bytes: usize,
}

impl Default for TransmitBatch {
    fn default() -> Self {
        TransmitBatch::new(64, 65_507)
    }
}

impl TransmitBatch {
    /// An empty batch with trains of at most `max_segments` datagrams and `max_train_bytes`
    /// bytes (and 256 KiB per poll).
    pub fn new(max_segments: usize, max_train_bytes: usize) -> TransmitBatch {
        TransmitBatch {
            buf: Vec::new(),
            used: 0,
            total: 0,
            parts: Vec::new(),
            mr_parts: 0,
            trains: Vec::new(),
            datagrams: 0,
            shift_memo: (0, icrc::ipv4_id_shift(0)),
            crc_memo: icrc::HeaderMemo::default(),
            in_place: false,
            max_segments: max_segments.max(1),
            max_train_bytes,
            max_bytes: 256 << 10,
        }
    }

    /// Forgets the contents (keeps the memory).
    pub fn clear(&mut self) {
        self.used = 0;
        self.total = 0;
        self.parts.clear();
        self.mr_parts = 0;
        self.trains.clear();
        self.datagrams = 0;
    }

    /// Whether the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.trains.is_empty()
    }

    /// Bytes held (payloads left in MRs included).
    pub fn bytes(&self) -> usize {
        self.total
    }

    /// Whether a poll should stop adding: at `max_bytes`, unless the open train could take
    /// another segment of its size (then only at `max_bytes + max_train_bytes`). A limit
    /// that cut a train short cost one more GSO send for its rest: at 1 MiB a READ
    /// response went out in 22 sends instead of 19, and the kernel's cost is per send.
    pub fn is_full(&self) -> bool {
        if self.total < self.max_bytes {
            return false;
        }
        let open = self.trains.last().is_some_and(|t| {
            !t.closed
                && t.segments < self.max_segments
                && t.bytes + t.segment_size <= self.max_train_bytes
        });
        !open || self.total >= self.max_bytes + self.max_train_bytes
    }

    /// Datagrams held.
    pub fn datagrams(&self) -> usize {
        self.datagrams
    }

    /// The trains with their bytes, in order. Only for a batch whose payloads were all
    /// copied in (not [`TransmitBatch::in_place`], or nothing left in an MR): a train with
    /// a payload in an MR comes with no bytes; gather those with
    /// [`TransmitBatch::train_slices`].
    pub fn trains(&self) -> impl ExactSizeIterator<Item = (&Train, &[u8])> + '_ {
        debug_assert_eq!(self.mr_parts, 0, "trains() of a batch with MR payloads");
        self.trains.iter().map(|t| (t, self.contiguous(t)))
    }

    /// Train `i` with its bytes (as [`TransmitBatch::trains`]).
    pub fn train(&self, i: usize) -> Option<(&Train, &[u8])> {
        let t = self.trains.get(i)?;
        Some((t, self.contiguous(t)))
    }

    /// The trains, in order, without their bytes.
    pub fn train_list(&self) -> &[Train] {
        &self.trains
    }

    fn contiguous(&self, t: &Train) -> &[u8] {
        match self.parts.get(t.parts.clone()) {
            Some([Part::Buf(r)]) => self.buf.get(r.clone()).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Appends the pieces of `t` (one of this batch's trains), in order, to `out`: slices of
    /// the buffer and of the MRs in `mrs` the payloads lie in. False (and `out` as it was)
    /// if an MR is gone or no longer that long — never while the batch is sent under the
    /// same borrow of the stack that filled it.
    pub fn train_slices<'a>(
        &'a self,
        t: &Train,
        mrs: &'a MrTable,
        out: &mut Vec<&'a [u8]>,
    ) -> bool {
        let mark = out.len();
        for p in self.parts.get(t.parts.clone()).unwrap_or(&[]) {
            let s = match p {
                Part::Buf(r) => self.buf.get(r.clone()),
                Part::Mr(m) => mrs
                    .owned(m.lkey)
                    .ok()
                    .and_then(|mr| mr.as_slice().get(m.start..m.start.saturating_add(m.len))),
            };
            match s {
                Some(s) => out.push(s),
                None => {
                    out.truncate(mark);
                    return false;
                }
            }
        }
        true
    }

    /// Drops the first `n` trains (sent); the rest stay, in order.
    pub fn consume(&mut self, n: usize) {
        if n >= self.trains.len() {
            self.clear();
            return;
        }
        let gone: usize = self.trains.iter().take(n).map(|t| t.segments).sum();
        let bytes: usize = self.trains.iter().take(n).map(|t| t.bytes).sum();
        self.total -= bytes;
        self.trains.drain(..n);
        self.datagrams -= gone;
    }

    /// Makes room for a `len`-byte datagram of flow (`dst`, `src_ip`, `src_port`): joins the
    /// open train when it may, else starts one. With `mr = Some((head, m))` the datagram is
    /// its first `head` bytes, the payload `m` left in its MR, then the rest; only the bytes
    /// around the payload are reserved in the buffer. Returns where in the buffer to write
    /// (`len`, or `len - m.len`) and the IPv4 ID the datagram will carry (its index in the
    /// train), with the ID shift of its length.
    fn place(
        &mut self,
        dst: SocketAddr,
        src_ip: IpAddr,
        src_port: u16,
        tos: u8,
        len: usize,
        mr: Option<(usize, MrSlice)>,
    ) -> (Range<usize>, u16, u32) {
        let nparts = self.parts.len();
        let joins = self.trains.last().is_some_and(|t| {
            !t.closed
                && t.dst == dst
                && t.src_ip == src_ip
                && t.src_port == src_port
                && t.tos == tos
                && len <= t.segment_size
                && t.segments < self.max_segments
                && t.len() + len <= self.max_train_bytes
                && t.parts.end == nparts
        });
        let own = len - mr.map_or(0, |(_, m)| m.len);
        let start = self.used;
        let end = start + own;
        if self.buf.len() < end {
            self.buf
                .resize(end.max(self.buf.len() * 2).max(64 << 10), 0);
        }
        self.used = end;
        self.total += len;
        self.datagrams += 1;
        // The parts: buffer bytes extend the previous buffer part of the same train when
        // they follow it directly.
        let add = |parts: &mut Vec<Part>, r: Range<usize>, may_merge: bool| {
            if r.is_empty() {
                return;
            }
            if may_merge {
                if let Some(Part::Buf(last)) = parts.last_mut() {
                    if last.end == r.start {
                        last.end = r.end;
                        return;
                    }
                }
            }
            parts.push(Part::Buf(r));
        };
        match mr {
            None => add(&mut self.parts, start..end, joins),
            Some((head, m)) => {
                add(&mut self.parts, start..start + head, joins);
                self.parts.push(Part::Mr(m));
                self.mr_parts += 1;
                add(&mut self.parts, start + head..end, false);
            }
        }
        let parts_end = self.parts.len();
        // The ID shift of a datagram of `len` bytes: one entry remembered, since a train's
        // segments and its short last one repeat their lengths from train to train.
        let full = joins && self.trains.last().is_some_and(|t| len == t.segment_size);
        let len_shift = if full {
            0
        } else {
            if self.shift_memo.0 != len {
                self.shift_memo = (len, icrc::ipv4_id_shift(len));
            }
            self.shift_memo.1
        };
        let (id, shift) = match self.trains.last_mut() {
            Some(t) if joins => {
                let id = t.segments as u16;
                t.segments += 1;
                t.parts.end = parts_end;
                t.bytes += len;
                if len < t.segment_size {
                    t.closed = true;
                }
                let shift = if full { t.shift } else { len_shift };
                (id, shift)
            }
            _ => {
                let shift = len_shift;
                self.trains.push(Train {
                    dst,
                    src_ip,
                    src_port,
                    segment_size: len,
                    segments: 1,
                    tos,
                    parts: nparts..parts_end,
                    bytes: len,
                    closed: false,
                    shift,
                });
                (0, shift)
            }
        };
        (start..end, id, shift)
    }

    /// Emits `repr` into the batch and seals its ICRC for its place in its train.
    pub fn push_repr(
        &mut self,
        repr: &RoceRepr<'_>,
        src_ip: IpAddr,
        src_port: u16,
        dst_ip: IpAddr,
    ) {
        self.push_repr_tos(repr, src_ip, src_port, dst_ip, 0)
    }

    /// [`TransmitBatch::push_repr`] for a datagram sent with IP TOS `tos` (trains never mix
    /// TOS values).
    pub fn push_repr_tos(
        &mut self,
        repr: &RoceRepr<'_>,
        src_ip: IpAddr,
        src_port: u16,
        dst_ip: IpAddr,
        tos: u8,
    ) {
        self.push_repr_from(repr, None, src_ip, src_port, dst_ip, tos)
    }

    /// [`TransmitBatch::push_repr_tos`] for a datagram whose payload (`repr.payload`) lies
    /// at `src` in an MR: an [`TransmitBatch::in_place`] batch leaves it there (for
    /// payloads of at least [`IN_PLACE_MIN`] bytes) and writes only the rest.
    pub fn push_repr_from(
        &mut self,
        repr: &RoceRepr<'_>,
        src: Option<MrSlice>,
        src_ip: IpAddr,
        src_port: u16,
        dst_ip: IpAddr,
        tos: u8,
    ) {
        let dst = SocketAddr::new(dst_ip, ROCE_V2_PORT);
        let flow = Flow {
            src: src_ip,
            dst: dst_ip,
            src_port,
            dst_port: ROCE_V2_PORT,
        };
        let len = repr.buffer_len();
        let src =
            src.filter(|m| self.in_place && m.len == repr.payload.len() && m.len >= IN_PLACE_MIN);
        let Some(m) = src else {
            let (at, id, _) = self.place(dst, src_ip, src_port, tos, len, None);
            let out = self.buf.get_mut(at).unwrap_or_default();
            repr.emit(out);
            let ident = Ipv4Ident {
                id,
                dont_fragment: true,
            };
            // As in `build`: fails only for mixed address families (the peer then drops it).
            if let Ok(icrc) = self.crc_memo.compute_udp(&flow, ident, out) {
                set_icrc(out, icrc);
            }
            return;
        };
        let head = repr.header_len();
        let (at, id, _) = self.place(dst, src_ip, src_port, tos, len, Some((head, m)));
        let out = self.buf.get_mut(at).unwrap_or_default();
        let (h, tail) = out.split_at_mut(head.min(out.len()));
        repr.emit_header(h);
        let pad = repr.pad.len().min(tail.len());
        let (p, icrc_out) = tail.split_at_mut(pad);
        p.copy_from_slice(repr.pad.get(..pad).unwrap_or(&[]));
        let ident = Ipv4Ident {
            id,
            dont_fragment: true,
        };
        if let Ok(icrc) = self
            .crc_memo
            .compute_udp_parts(&flow, ident, &[h, repr.payload, p])
        {
            if icrc_out.len() == icrc::ICRC_LEN {
                icrc_out.copy_from_slice(&icrc.to_le_bytes());
            }
        }
    }

    /// Copies a datagram sealed for ID 0 ([`build`]) into the batch, moving its ICRC to the
    /// ID it gets in its train (no second CRC pass: the ID's share is added algebraically).
    pub fn push_sealed(&mut self, tx: &Transmit) {
        let v4 = tx.src_ip.is_ipv4();
        let (at, id, shift) = self.place(
            tx.dst,
            tx.src_ip,
            tx.src_port,
            tx.tos,
            tx.payload.len(),
            None,
        );
        let out = self.buf.get_mut(at).unwrap_or_default();
        out.copy_from_slice(&tx.payload);
        if v4 && id != 0 {
            if let Ok(icrc) = icrc::stored(out) {
                set_icrc(out, icrc ^ icrc::ipv4_id_delta_with(shift, id));
            }
        }
    }
}

fn set_icrc(roce: &mut [u8], icrc: u32) {
    let n = roce.len();
    if let Some(t) = roce.get_mut(n.saturating_sub(icrc::ICRC_LEN)..) {
        if t.len() == icrc::ICRC_LEN {
            t.copy_from_slice(&icrc.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::roce::{BthRepr, Opcode, Psn};
    use std::net::Ipv4Addr;

    fn flow() -> Flow {
        Flow {
            src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            src_port: 4791,
            dst_port: ROCE_V2_PORT,
        }
    }

    #[test]
    fn id_delta_matches_a_full_crc() {
        let f = flow();
        for (len, id) in [
            (16usize, 1u16),
            (40, 2),
            (1040, 63),
            (4112, 14),
            (20, 0xffff),
        ] {
            let mut roce = vec![0u8; len];
            for (i, b) in roce.iter_mut().enumerate() {
                *b = (i * 13 + len) as u8;
            }
            let c0 = icrc::compute_udp(&f, Ipv4Ident::LINUX_UNCONNECTED_DF, &roce).unwrap();
            let ck = icrc::compute_udp(
                &f,
                Ipv4Ident {
                    id,
                    dont_fragment: true,
                },
                &roce,
            )
            .unwrap();
            assert_eq!(c0 ^ id_delta(len, id), ck, "len {len} id {id}");
        }
    }

    fn data_packet(psn: u32, payload: &[u8]) -> RoceRepr<'_> {
        let mut r = RoceRepr::new(BthRepr {
            opcode: Opcode::RC_SEND_MIDDLE,
            pkey: 0xffff,
            dest_qp: 0x11,
            psn: Psn::new(psn),
            ..BthRepr::default()
        });
        r.set_payload(payload);
        r
    }

    /// The batch limit does not cut a train short: past `max_bytes` a poll may go on while
    /// the open train has room for another segment of its size, up to `max_bytes +
    /// max_train_bytes`; a closed or complete train ends it at once.
    #[test]
    fn the_byte_limit_lets_the_open_train_complete() {
        let f = flow();
        let full = [7u8; 1024];
        let mut b = TransmitBatch::new(8, 65_507);
        b.max_bytes = 3 * 1040;
        let mut pushed = 0;
        while !b.is_full() {
            b.push_repr(&data_packet(pushed, &full), f.src, 4791, f.dst);
            pushed += 1;
        }
        assert_eq!(pushed, 8, "the train of 8 segments completes");
        assert_eq!(b.trains().len(), 1);
        // A short segment closes the train: full at once past the limit.
        let mut b = TransmitBatch::new(8, 65_507);
        b.max_bytes = 3 * 1040;
        for psn in 0..3 {
            b.push_repr(&data_packet(psn, &full), f.src, 4791, f.dst);
        }
        assert!(!b.is_full());
        b.push_repr(&data_packet(3, &[1u8; 100]), f.src, 4791, f.dst);
        assert!(b.is_full());
        // Below the limit nothing is full; a train that starts past it may fill only up to
        // the hard cap.
        let mut b = TransmitBatch::new(64, 4 * 1040);
        b.max_bytes = 2 * 1040;
        let mut pushed = 0;
        while !b.is_full() {
            b.push_repr(
                &data_packet(pushed, &full),
                f.src,
                4791 + pushed as u16 % 2,
                f.dst,
            );
            pushed += 1;
            assert!(pushed < 100, "the hard cap ends the poll");
        }
        assert!(b.bytes() >= b.max_bytes + b.max_train_bytes);
        assert!(b.bytes() < b.max_bytes + b.max_train_bytes + 1040);
    }

    /// Trains: same flow and size join; a shorter one closes the train; a longer one, another
    /// flow, the segment limit or the byte limit start a new one. Every segment's ICRC is
    /// right for its index as the IPv4 ID, whether emitted in place or copied in.
    #[test]
    fn trains_and_their_icrcs() {
        let f = flow();
        let mut b = TransmitBatch::new(4, 65_507);
        let full = [7u8; 1024];
        let short = [9u8; 100];
        for psn in 0..6 {
            b.push_repr(&data_packet(psn, &full), f.src, 4791, f.dst);
        }
        b.push_repr(&data_packet(6, &short), f.src, 4791, f.dst);
        b.push_repr(&data_packet(7, &full), f.src, 4791, f.dst);
        // Copied in, sealed for ID 0 first.
        let tx = build(&data_packet(8, &full), f.src, 4791, f.dst);
        b.push_sealed(&tx);
        b.push_sealed(&tx);
        // Another source port: a new train.
        b.push_repr(&data_packet(9, &full), f.src, 4792, f.dst);
        let shape: Vec<(usize, usize)> = b.trains().map(|(t, _)| (t.segments, t.len())).collect();
        assert_eq!(
            shape,
            [(4, 4 * 1040), (3, 2 * 1040 + 116), (3, 3 * 1040), (1, 1040)]
        );
        assert_eq!(b.datagrams(), 11);
        for (t, bytes) in b.trains() {
            let fl = Flow {
                src_port: t.src_port,
                ..f
            };
            for (k, seg) in bytes.chunks(t.segment_size).enumerate() {
                let want = icrc::compute_udp(
                    &fl,
                    Ipv4Ident {
                        id: k as u16,
                        dont_fragment: true,
                    },
                    seg,
                )
                .unwrap();
                assert_eq!(icrc::stored(seg).unwrap(), want);
                assert_eq!(t.gso_segment_size().is_some(), t.segments > 1);
            }
        }
        b.consume(1);
        assert_eq!(b.trains().len(), 3);
        assert_eq!(b.datagrams(), 7);
        b.clear();
        assert!(b.is_empty());
        // The byte limit: 1040-byte datagrams, 62 fit in 65507 bytes.
        let mut b = TransmitBatch::new(64, 65_507);
        for psn in 0..64 {
            b.push_repr(&data_packet(psn, &full), f.src, 4791, f.dst);
        }
        let segs: Vec<usize> = b.trains().map(|(t, _)| t.segments).collect();
        assert_eq!(segs, [62, 2]);
    }

    /// An in-place batch leaves payloads in their MR (only headers, pad and ICRC in its
    /// buffer) and its trains, gathered from their pieces, are byte for byte what a copying
    /// batch holds: same trains, same ICRCs. Short payloads and payloads not in one MR are
    /// copied.
    #[test]
    fn in_place_trains_equal_copied_ones() {
        use crate::rand::Rng;
        use crate::verbs::{AccessFlags, PdId};
        let f = flow();
        let mut mrs = MrTable::new(16, Rng::new(1));
        let bytes: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 31 + 7) as u8).collect();
        let keys = mrs
            .register(PdId(1), bytes.clone(), 0x1000, AccessFlags::NONE)
            .unwrap();
        let mut copy = TransmitBatch::new(8, 65_507);
        let mut inp = TransmitBatch::new(8, 65_507);
        inp.in_place = true;
        // 4096-byte payloads, an odd-sized (padded) one, a short one, one with no source.
        let mut cuts = vec![];
        for k in 0..11 {
            cuts.push((k * 4096, 4096, true));
        }
        cuts.push((11 * 4096, 1001, true));
        cuts.push((50_000, 100, true));
        cuts.push((52_000, 2048, false));
        for (psn, &(start, len, known)) in cuts.iter().enumerate() {
            let payload = &bytes[start..start + len];
            let r = data_packet(psn as u32, payload);
            let at = known.then_some(MrSlice {
                lkey: keys.lkey,
                start,
                len,
            });
            copy.push_repr_from(&r, at, f.src, 4791, f.dst, 0);
            inp.push_repr_from(&r, at, f.src, 4791, f.dst, 0);
        }
        assert_eq!(copy.mr_parts, 0);
        assert_eq!(
            inp.mr_parts, 12,
            "the short and the unknown payload are copied"
        );
        assert_eq!(copy.bytes(), inp.bytes());
        assert!(inp.used < copy.used / 10);
        let want: Vec<(usize, usize, Vec<u8>)> = copy
            .trains()
            .map(|(t, b)| (t.segments, t.segment_size, b.to_vec()))
            .collect();
        let mut got = vec![];
        for t in inp.train_list() {
            let mut pieces = vec![];
            assert!(inp.train_slices(t, &mrs, &mut pieces));
            got.push((t.segments, t.segment_size, pieces.concat()));
        }
        assert_eq!(got, want);
        // Every segment verifies for its index as the IPv4 ID.
        for (_, seg, train) in &got {
            for (k, d) in train.chunks(*seg).enumerate() {
                let ident = Ipv4Ident {
                    id: k as u16,
                    dont_fragment: true,
                };
                assert_eq!(
                    icrc::compute_udp(&f, ident, d).unwrap(),
                    icrc::stored(d).unwrap()
                );
            }
        }
        // Consuming keeps the byte count right; a gone MR fails the gather.
        let first = inp.train_list()[0].len();
        inp.consume(1);
        assert_eq!(inp.bytes(), copy.bytes() - first);
        mrs.deregister(keys.lkey).unwrap();
        let t = inp.train_list()[0].clone();
        let mut pieces = vec![];
        assert!(!inp.train_slices(&t, &mrs, &mut pieces));
        assert!(pieces.is_empty());
    }

    #[test]
    fn source_ports_match_the_captures() {
        assert_eq!(datagram_src_port(1), 55410);
        assert_eq!(datagram_src_port(0xe0), 58333);
        assert_eq!(datagram_src_port(0x11), 57236);
        assert_eq!(rc_src_port(0, 0xdf, 0xdf), 49730);
        assert_eq!(flow_label_src_port(0x98adf), 51961);
    }
}
