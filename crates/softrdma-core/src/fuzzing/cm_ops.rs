//! Fuzz body of the cargo-fuzz target `cm_ops` (`fuzz/fuzz_targets/cm_ops.rs`): the IB CM's
//! operation sequences. Two nodes ([`Node`]: a stack with QP1, the MAD layer, the IB CM
//! under the RDMA CM; A at 10.0.0.1 and B at 10.0.0.2) and a hostile third party
//! (10.0.0.9); the input is a program of user operations on either side's IB CM — create,
//! listen, connect (REQ), accept (REP), RTU, MRA, REJ, reject, DREQ, DREP, COMM_EST,
//! destroy, destroy silently, at any moment — interleaved with the wire: QP1 datagrams
//! delivered, lost, duplicated, recorded and replayed later, hostile bytes (mutations of
//! recorded MADs or raw, sealed for their flow so they reach the MAD layer), and time
//! passing. Every datagram goes in and out through the node's calls, in its call order.
//!
//! Checked after every operation: every id the CM has is one the user holds (ids travel by
//! value; a dropped one is destroyed), the half-open limit holds. At the end every id is
//! destroyed and time runs until nothing is left to do: then no id, table entry, timewait,
//! send, event, MAD operation, outstanding MAD or timer may remain. Nothing may panic.
//!
//! The rig is prepared once per thread and reset (rebuilt in place, same seeds) per input.
//!
//! # Input format
//!
//! A sequence of operations, each one opcode byte (`op % 16`, side = bit 4, small argument
//! = bits 5–7) and, for some, one or more argument bytes; see [`CmRig::step`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_wire::cm::RejectReason;
use softrdma_wire::icrc::{self, Flow, ICRC_LEN, ROCE_V2_PORT};
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::{Gid, Guid};

use crate::cm::{
    CmConfig, CmEndpoint, CmEvent, CmId, CmPort, RepParams, ReqParams, RXE_CA_ACK_DELAY,
};
use crate::device::DeviceConfig;
use crate::mad::port::DEFAULT_RECV_DEPTH;
use crate::time::{Duration, Instant};
use crate::{Node, Stack};

/// Most operations one input runs.
pub const MAX_OPS: usize = 256;
/// The service IDs the operations listen on and connect to (the second one nobody listens
/// on unless an input does).
pub const SERVICES: [u64; 2] = [0x0106_4e20, 0x0106_4e21];
/// The half-open limit of the rig's CMs (small, so inputs reach it).
pub const HALF_OPEN_LIMIT: usize = 8;
const MAX_IDS: usize = 64;
const MAX_RECORDED: usize = 64;
/// Where the MAD starts in a QP1 datagram: after the BTH and the DETH.
const MAD_AT: usize = 12 + 8;
/// BTH (UD SEND Only to QP1, P_Key 0xffff) and DETH (the GSI Q_Key, from QP1) of a raw MAD.
const QP1_HEADERS: [u8; MAD_AT] = [
    0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 0x80, 0x01, 0, 0, 0, 0, 0, 1,
];

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

fn gid(n: u8) -> Gid {
    Gid::from(ip(n))
}

fn pick(v: &[CmId], arg: u8) -> Option<&CmId> {
    (!v.is_empty()).then(|| &v[usize::from(arg) % v.len()])
}

/// A command on side `side`'s IB CM, through its node (which then takes the events and MAD
/// operations the command caused).
fn on<R>(
    nodes: &mut [(Node, CmPort); 2],
    now: Instant,
    side: usize,
    f: impl FnOnce(&mut CmEndpoint) -> R,
) -> R {
    let (node, port) = &mut nodes[side];
    match node.with_port(now, *port, |rdma, _| f(rdma.cm_mut())) {
        Ok(r) => r,
        Err(e) => panic!("cm_ops rig: {e}"),
    }
}

fn endpoint(side: usize) -> (Node, CmPort) {
    let mut cfg = CmConfig::new(Guid(0x0a + side as u64), RXE_CA_ACK_DELAY, 1 + side as u64);
    cfg.half_open_limit = HALF_OPEN_LIMIT;
    let stack = Stack::new(
        DeviceConfig::new(format!("cm{side}"), vec![ip(1 + side as u8)]),
        1 + side as u64,
    );
    let made = Node::new(cfg).and_then(|mut n| {
        let port = n.add_port(stack, DEFAULT_RECV_DEPTH)?;
        Ok((n, port))
    });
    match made {
        Ok(e) => e,
        Err(e) => panic!("cm_ops rig: {e}"),
    }
}

/// A QP1 datagram on the wire: its UDP source port and its bytes (BTH to ICRC).
type Datagram = (u16, Vec<u8>);

/// The two nodes, the ids the user holds on each, the datagrams in flight and recorded.
pub struct CmRig {
    nodes: [(Node, CmPort); 2],
    ids: [Vec<CmId>; 2],
    /// Datagrams sent and not yet delivered, per destination side.
    wire: [Vec<Datagram>; 2],
    recorded: Vec<Datagram>,
    now: Instant,
}

impl Default for CmRig {
    fn default() -> Self {
        Self::new()
    }
}

impl CmRig {
    /// A rig in its initial state.
    pub fn new() -> CmRig {
        CmRig {
            nodes: [endpoint(0), endpoint(1)],
            ids: [Vec::new(), Vec::new()],
            wire: [Vec::new(), Vec::new()],
            recorded: Vec::new(),
            now: Instant::from_millis(1),
        }
    }

    /// Back to the initial state (the same seeds, so an input replays exactly).
    pub fn reset(&mut self) {
        for side in 0..2 {
            for id in self.ids[side].drain(..) {
                // Reported to a CM about to be replaced: nothing to do.
                drop(id);
            }
            self.wire[side].clear();
            self.nodes[side] = endpoint(side);
        }
        self.recorded.clear();
        self.now = Instant::from_millis(1);
    }

    /// Side `side`'s IB CM (inside its RDMA CM), read-only.
    pub fn cm(&self, side: usize) -> &CmEndpoint {
        self.nodes[side].0.rdma().cm()
    }

    fn req(&self, side: usize, service: u64, qpn: u32, retries: u8) -> ReqParams {
        let (me, peer) = (gid(1 + side as u8), gid(2 - side as u8));
        ReqParams::new(self.nodes[side].1, me, peer, service, qpn)
            .with_packet_life_time(8)
            .with_starting_psn(qpn)
            .with_private_data(vec![side as u8; 4])
            .with_cm_response_timeouts(10, 10)
            .with_max_cm_retries(retries)
    }

    /// Takes what each node sent onto the wire and the new ids out of their events.
    fn settle(&mut self) {
        for side in 0..2 {
            let (node, port) = &mut self.nodes[side];
            while let Some(tx) = node.poll_transmit(self.now, *port) {
                let to = if tx.dst.ip() == ip(1) {
                    0
                } else if tx.dst.ip() == ip(2) {
                    1
                } else {
                    continue;
                };
                if self.wire[to].len() < 256 {
                    self.wire[to].push((tx.src_port, tx.payload.to_vec()));
                }
            }
            while let Some(ev) = node.poll_ib_event() {
                match ev {
                    CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } => {
                        if self.ids[side].len() < MAX_IDS {
                            self.ids[side].push(id);
                        } else {
                            node.rdma_mut().cm_mut().destroy(self.now, id);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The invariants that hold between operations.
    fn check(&mut self) {
        for side in 0..2 {
            // A call that reaps dropped ids; then every id is one the user holds.
            on(&mut self.nodes, self.now, side, |_| ());
            let s = self.cm(side).table_sizes();
            assert_eq!(s.ids, self.ids[side].len(), "side {side}: {s:?}");
            assert!(s.half_open <= HALF_OPEN_LIMIT, "side {side}: {s:?}");
            assert!(s.remote_ids <= s.ids && s.remote_qpns <= s.ids, "{s:?}");
            assert!(s.timewaits <= s.ids && s.listeners <= s.ids, "{s:?}");
        }
    }

    fn take(&mut self, side: usize, arg: u8) -> Option<CmId> {
        let v = &mut self.ids[side];
        (!v.is_empty()).then(|| v.swap_remove(usize::from(arg) % v.len()))
    }

    /// Hands `side`'s node a datagram from `from` (sealed for that flow first unless it
    /// came from the peer as it is).
    fn receive(&mut self, side: usize, from: u8, (src_port, mut bytes): Datagram, seal: bool) {
        let (src, dst) = (ip(from), ip(1 + side as u8));
        if seal {
            let flow = Flow {
                src,
                dst,
                src_port,
                dst_port: ROCE_V2_PORT,
            };
            // Fails (and leaves the bytes alone) on a datagram too short for an ICRC.
            let _ = icrc::seal_udp(&flow, &mut bytes);
        }
        let (node, port) = &mut self.nodes[side];
        node.handle_datagram(self.now, *port, SocketAddr::new(src, src_port), dst, &bytes);
    }

    /// Delivers (or drops, duplicates, records) the next datagram for `side`.
    fn deliver(&mut self, side: usize, how: u8) {
        if self.wire[side].is_empty() {
            return;
        }
        let m = self.wire[side].remove(usize::from(how >> 2) % self.wire[side].len());
        let peer = 2 - side as u8;
        if self.recorded.len() < MAX_RECORDED {
            self.recorded.push(m.clone());
        }
        match how & 3 {
            0 => {}
            1 => {
                self.receive(side, peer, m.clone(), false);
                self.receive(side, peer, m, false);
            }
            _ => self.receive(side, peer, m, false),
        }
    }

    /// Runs one operation; returns the rest of the input.
    pub fn step<'a>(&mut self, input: &'a [u8]) -> &'a [u8] {
        let Some((&op, mut rest)) = input.split_first() else {
            return input;
        };
        let mut arg = || {
            let (&b, r) = rest.split_first().unwrap_or((&0, &[]));
            rest = r;
            b
        };
        let side = usize::from(op >> 4 & 1);
        let small = op >> 5;
        let now = self.now;
        match op & 15 {
            0 => {
                if self.ids[side].len() < MAX_IDS {
                    let id = on(&mut self.nodes, now, side, |cm| cm.create_id());
                    self.ids[side].push(id);
                }
            }
            1 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let svc = SERVICES[usize::from(small & 1)];
                    let _ = on(&mut self.nodes, now, side, |cm| cm.listen(id, svc));
                }
            }
            2 => {
                let (a, q) = (arg(), arg());
                let p = self.req(side, SERVICES[usize::from(small & 1)], u32::from(q), small);
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| cm.send_req(now, id, &p));
                }
            }
            3 => {
                let (a, q) = (arg(), arg());
                let p = RepParams {
                    qp_num: 0x100 | u32::from(q),
                    starting_psn: 5,
                    private_data: vec![small; usize::from(small)],
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| cm.send_rep(now, id, &p));
                }
            }
            4 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| {
                        cm.send_rtu(now, id, &[small])
                    });
                }
            }
            5 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    let reason = RejectReason(u16::from(small) + 26);
                    if let Err(e) = on(&mut self.nodes, now, side, |cm| {
                        cm.reject(now, id, reason, &[], b"no")
                    }) {
                        self.ids[side].push(e.id);
                    }
                }
            }
            6 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let r = RejectReason(u16::from(small) + 1);
                    let _ = on(&mut self.nodes, now, side, |cm| {
                        cm.send_rej(now, id, r, &[small; 3], &[])
                    });
                }
            }
            7 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| {
                        cm.send_mra(now, id, small * 3, small & 1 == 0, &[])
                    });
                }
            }
            8 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| {
                        cm.send_dreq(now, id, &[small])
                    });
                }
            }
            9 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = on(&mut self.nodes, now, side, |cm| {
                        cm.send_drep(now, id, &[small])
                    });
                }
            }
            10 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    if small & 1 == 0 {
                        on(&mut self.nodes, now, side, |cm| cm.destroy(now, id));
                    } else {
                        // Dropping it is destroying it, at the CM's next call.
                        drop(id);
                    }
                }
            }
            11 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    on(&mut self.nodes, now, side, |cm| {
                        cm.destroy_silently(now, id)
                    });
                }
            }
            12 => {
                // Deliver up to 1 + small MADs to `side` (lost, duplicated or delivered).
                for _ in 0..=small {
                    let how = arg();
                    self.deliver(side, how);
                    self.settle();
                }
            }
            13 => {
                // Replay a recorded MAD, from the peer or from the hostile address.
                let a = arg();
                if !self.recorded.is_empty() {
                    let m = self.recorded[usize::from(a) % self.recorded.len()].clone();
                    let from = if small & 1 == 0 { 2 - side as u8 } else { 9 };
                    self.receive(side, from, m, true);
                }
            }
            14 => {
                // Hostile bytes: a recorded MAD with bytes overwritten, or raw.
                let (a, n) = (arg(), usize::from(arg() % 16));
                let (src_port, mut m) = if self.recorded.is_empty() || small == 7 {
                    let mut d = QP1_HEADERS.to_vec();
                    d.resize(MAD_AT + MAD_LEN + ICRC_LEN, 0);
                    (ROCE_V2_PORT, d)
                } else {
                    self.recorded[usize::from(a) % self.recorded.len()].clone()
                };
                // The MAD is what lies between the headers and the ICRC.
                let mad_len = m.len().saturating_sub(MAD_AT + ICRC_LEN);
                for _ in 0..n {
                    let (i, b) = (usize::from(arg()) % MAD_LEN.max(mad_len), arg());
                    if i < mad_len {
                        m[MAD_AT + i] = b;
                    }
                }
                if small == 6 && m.len() >= MAD_AT {
                    m.truncate(MAD_AT + (usize::from(a) % MAD_LEN).min(mad_len));
                    m.extend_from_slice(&[0; ICRC_LEN]);
                }
                self.receive(side, 9, (src_port, m), true);
            }
            _ => {
                // Time passes: 1 + small × arg ms, or a jump to the next timer; timers run.
                let a = arg();
                let next = self.nodes[side].0.poll_timeout();
                self.now = match (small, next) {
                    (0, Some(t)) => self.now.max(t),
                    _ => self.now + Duration::from_millis(1 + u64::from(small) * u64::from(a)),
                };
                for (node, _) in &mut self.nodes {
                    node.handle_timeout(self.now);
                }
            }
        }
        if op & 15 == 4 && small == 7 {
            // COMM_EST (a data packet before the RTU) on the picked id.
            if let Some(id) = pick(&self.ids[side], 0) {
                let _ = on(&mut self.nodes, now, side, |cm| cm.notify_comm_est(id));
            }
        }
        self.settle();
        self.check();
        rest
    }

    /// Destroys every id and runs the wire and the timers until nothing is left; then
    /// nothing may be.
    pub fn finish(&mut self) {
        for side in 0..2 {
            for id in std::mem::take(&mut self.ids[side]) {
                on(&mut self.nodes, self.now, side, |cm| {
                    cm.destroy(self.now, id)
                });
            }
        }
        for _ in 0..10_000 {
            self.settle();
            for side in 0..2 {
                // New ids now (a REQ in flight): destroyed at once.
                for id in std::mem::take(&mut self.ids[side]) {
                    on(&mut self.nodes, self.now, side, |cm| {
                        cm.destroy(self.now, id)
                    });
                }
                while let Some(m) = self.wire[side].pop() {
                    self.receive(side, 2 - side as u8, m, false);
                }
            }
            // (The MAD layers' events — the completions of cancelled sends — reach the CMs
            // as the nodes flush their MAD layers.)
            self.settle();
            let quiet =
                self.wire.iter().all(|w| w.is_empty()) && self.ids.iter().all(|v| v.is_empty());
            let next = self
                .nodes
                .iter()
                .filter_map(|(n, _)| n.poll_timeout())
                .min();
            match next {
                Some(t) => {
                    self.now = self.now.max(t);
                    for (node, _) in &mut self.nodes {
                        node.handle_timeout(self.now);
                    }
                }
                None if quiet => break,
                None => {}
            }
        }
        for side in 0..2 {
            let (node, port) = &self.nodes[side];
            let s = node.rdma().cm().table_sizes();
            assert_eq!(
                (
                    s.ids,
                    s.listeners,
                    s.remote_ids,
                    s.remote_qpns,
                    s.remote_sidr
                ),
                (0, 0, 0, 0, 0),
                "side {side}: {s:?}"
            );
            assert_eq!(
                (s.timewaits, s.half_open, s.sends, s.events, s.mad_ops),
                (0, 0, 0, 0, 0),
                "side {side}: {s:?}"
            );
            assert_eq!(node.rdma().queued_events(), 0, "side {side}");
            let mad = node.mad(*port).map(|m| m.agent().outstanding());
            assert_eq!(mad, Some(0), "side {side}");
            assert_eq!(node.poll_timeout(), None, "side {side}");
        }
    }
}

thread_local! {
    static RIG: std::cell::RefCell<Option<CmRig>> = const { std::cell::RefCell::new(None) };
}

/// The fuzz body (see the module docs).
pub fn cm_ops(data: &[u8]) {
    RIG.with(|r| {
        let mut r = r.borrow_mut();
        let rig = r.get_or_insert_with(CmRig::new);
        rig.reset();
        let mut rest = data;
        for _ in 0..MAX_OPS {
            if rest.is_empty() {
                break;
            }
            rest = rig.step(rest);
        }
        rig.finish();
    });
}

/// Seed programs (`tests/fuzz_corpus.rs` writes them into `fuzz/corpus/cm_ops` with
/// `FUZZ_SEED_CORPUS=1`): a connection set up and torn down, a reject, destroys in the
/// middle of handshakes, a replay storm, timewaits run out.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // Opcodes (side B = | 0x10; small argument = << 5).
    const CREATE: u8 = 0;
    const LISTEN: u8 = 1;
    const REQ: u8 = 2;
    const REP: u8 = 3;
    const RTU: u8 = 4;
    const REJECT: u8 = 5;
    const MRA: u8 = 7;
    const DREQ: u8 = 8;
    const DREP: u8 = 9;
    const DESTROY: u8 = 10;
    const DELIVER: u8 = 12;
    const REPLAY: u8 = 13;
    const HOSTILE: u8 = 14;
    const TIME: u8 = 15;
    const B: u8 = 0x10;
    let d = |n: u8| {
        // Deliver n + 1 MADs (each delivered once).
        let mut v = vec![DELIVER | (n << 5)];
        v.extend(std::iter::repeat_n(2, usize::from(n) + 1));
        v
    };
    let d_b = |n: u8| {
        let mut v = d(n);
        v[0] |= B;
        v
    };
    // B listens, A connects, B accepts, A's RTU: ids A0, B0 (listener), B1 (passive).
    let mut connect = vec![CREATE | B, LISTEN | B, 0, CREATE, REQ, 0, 0x11];
    connect.extend(d_b(0));
    connect.extend([REP | B, 1, 0x12]);
    connect.extend(d(0));
    connect.extend([RTU, 0]);
    connect.extend(d_b(0));
    let mut full = connect.clone();
    full.extend([DREQ, 0]);
    full.extend(d_b(0));
    full.extend([DREP | B, 1]);
    full.extend(d(0));
    full.extend([TIME | (1 << 5), 200]);
    let mut reject = vec![CREATE | B, LISTEN | B, 0, CREATE, REQ, 0, 0x11];
    reject.extend(d_b(0));
    reject.extend([REJECT | B, 1]);
    reject.extend(d(0));
    let mut abandon = vec![CREATE | B, LISTEN | B, 0, CREATE, REQ, 0, 0x11];
    abandon.extend(d_b(0));
    abandon.extend([MRA | B, 1, REP | B, 1, 0x12, DESTROY, 0]);
    abandon.extend(d_b(3));
    abandon.extend(d(3));
    let mut storm = connect.clone();
    for k in 0..8 {
        storm.extend([REPLAY | B, k, REPLAY, k, REPLAY | B | (1 << 5), k]);
    }
    storm.extend([HOSTILE | B, 0, 2, 24, 0xff, 25, 0x00]);
    storm.extend([DESTROY | B, 1, TIME, 0]);
    storm.extend(d(3));
    let mut timeouts = vec![CREATE, REQ | (3 << 5), 0, 0x11];
    for _ in 0..6 {
        timeouts.extend([TIME, 0]);
    }
    vec![
        ("connect-disconnect", full),
        ("reject", reject),
        ("destroy-mid-handshake", abandon),
        ("replay-storm", storm),
        ("req-timeouts", timeouts),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::cm::AttrId;

    fn run_ops(input: &[u8]) -> CmRig {
        let mut rig = CmRig::new();
        let mut rest = input;
        while !rest.is_empty() {
            rest = rig.step(rest);
        }
        rig
    }

    /// The seeds do what their names say (so the fuzzer starts deep in the CM).
    #[test]
    fn seeds_reach_their_states() {
        let seeds = seeds();
        let get = |n: &str| &seeds.iter().find(|(m, _)| *m == n).expect("seed").1;
        let mut r = run_ops(get("connect-disconnect"));
        let (a, b) = (r.cm(0).counters(), r.cm(1).counters());
        assert_eq!((b.rx(AttrId::REQ), a.rx(AttrId::REP)), (1, 1));
        assert_eq!(
            (b.rx(AttrId::RTU), b.rx(AttrId::DREQ), a.rx(AttrId::DREP)),
            (1, 1, 1)
        );
        r.finish();
        let r = run_ops(get("reject"));
        assert_eq!(r.cm(0).counters().rx(AttrId::REJ), 1);
        let r = run_ops(get("replay-storm"));
        assert!(r.cm(1).counters().dup(AttrId::REQ) + r.cm(0).counters().dup(AttrId::REP) > 0);
        let r = run_ops(get("req-timeouts"));
        assert!(r.cm(0).counters().retries(AttrId::REQ) >= 3);
    }
}
