//! Fuzz body of the cargo-fuzz target `cm_ops` (`fuzz/fuzz_targets/cm_ops.rs`): the IB CM's
//! operation sequences. Two CMs with their MAD layers ([`SinglePortCm`], A at 10.0.0.1 and
//! B at 10.0.0.2) and a hostile third party (10.0.0.9); the input is a program of user
//! operations on either side — create, listen, connect (REQ), accept (REP), RTU, MRA, REJ,
//! reject, DREQ, DREP, COMM_EST, destroy, destroy silently, at any moment — interleaved with
//! the wire: MADs delivered, lost, duplicated, recorded and replayed later, hostile bytes
//! (mutations of recorded MADs or raw), and time passing.
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

use softrdma_wire::cm::RejectReason;
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::{Gid, Guid};

use crate::cm::{
    CmConfig, CmEvent, CmId, CmPort, RepParams, ReqParams, SinglePortCm, RXE_CA_ACK_DELAY,
};
use crate::mad::MadAddr;
use crate::time::{Duration, Instant};

/// Most operations one input runs.
pub const MAX_OPS: usize = 256;
/// The service IDs the operations listen on and connect to (the second one nobody listens
/// on unless an input does).
pub const SERVICES: [u64; 2] = [0x0106_4e20, 0x0106_4e21];
/// The half-open limit of the rig's CMs (small, so inputs reach it).
pub const HALF_OPEN_LIMIT: usize = 8;
const MAX_IDS: usize = 64;
const MAX_RECORDED: usize = 64;

fn gid(n: u8) -> Gid {
    Gid::from(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n)))
}

fn pick(v: &[CmId], arg: u8) -> Option<&CmId> {
    (!v.is_empty()).then(|| &v[usize::from(arg) % v.len()])
}

fn endpoint(side: usize) -> SinglePortCm {
    let mut cfg = CmConfig::new(Guid(0x0a + side as u64), RXE_CA_ACK_DELAY, 1 + side as u64);
    cfg.half_open_limit = HALF_OPEN_LIMIT;
    match SinglePortCm::new(cfg, 2) {
        Ok(e) => e,
        Err(e) => panic!("cm_ops rig: {e}"),
    }
}

/// The two CMs, the ids the user holds on each, the MADs in flight and recorded.
pub struct CmRig {
    cms: [SinglePortCm; 2],
    ids: [Vec<CmId>; 2],
    /// MADs sent and not yet delivered, per destination side.
    wire: [Vec<Vec<u8>>; 2],
    recorded: Vec<Vec<u8>>,
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
            cms: [endpoint(0), endpoint(1)],
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
            self.cms[side] = endpoint(side);
        }
        self.recorded.clear();
        self.now = Instant::from_millis(1);
    }

    fn req(&self, side: usize, service: u64, qpn: u32, retries: u8) -> ReqParams {
        let (me, peer) = (gid(1 + side as u8), gid(2 - side as u8));
        ReqParams::new(CmPort::default(), me, peer, service, qpn)
            .with_packet_life_time(8)
            .with_starting_psn(qpn)
            .with_private_data(vec![side as u8; 4])
            .with_cm_response_timeouts(10, 10)
            .with_max_cm_retries(retries)
    }

    /// Takes what each CM sent onto the wire and the new ids out of their events.
    fn settle(&mut self) {
        for side in 0..2 {
            while let Some(o) = self.cms[side].poll_transmit() {
                let to = if o.dest.gid == gid(1) {
                    0
                } else if o.dest.gid == gid(2) {
                    1
                } else {
                    continue;
                };
                if self.wire[to].len() < 256 {
                    self.wire[to].push(o.mad.to_bytes().to_vec());
                }
            }
            while let Some(ev) = self.cms[side].poll_event() {
                match ev {
                    CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } => {
                        if self.ids[side].len() < MAX_IDS {
                            self.ids[side].push(id);
                        } else {
                            self.cms[side].destroy(self.now, id);
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
            let cm = &mut self.cms[side];
            // A call that reaps dropped ids; then every id is one the user holds.
            let _ = cm.poll_timeout();
            cm.process(self.now);
            let s = cm.table_sizes();
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

    /// Delivers (or drops, duplicates, records) the next MAD for `side`.
    fn deliver(&mut self, side: usize, how: u8) {
        if self.wire[side].is_empty() {
            return;
        }
        let m = self.wire[side].remove(usize::from(how >> 2) % self.wire[side].len());
        let from = MadAddr::gsi(gid(2 - side as u8));
        if self.recorded.len() < MAX_RECORDED {
            self.recorded.push(m.clone());
        }
        match how & 3 {
            0 => {}
            1 => {
                self.cms[side].handle_receive(self.now, from, &m);
                self.cms[side].handle_receive(self.now, from, &m);
            }
            _ => self.cms[side].handle_receive(self.now, from, &m),
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
                    let id = self.cms[side].create_id();
                    self.ids[side].push(id);
                }
            }
            1 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let svc = SERVICES[usize::from(small & 1)];
                    let _ = self.cms[side].listen(id, svc);
                }
            }
            2 => {
                let (a, q) = (arg(), arg());
                let p = self.req(side, SERVICES[usize::from(small & 1)], u32::from(q), small);
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = self.cms[side].send_req(now, id, &p);
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
                    let _ = self.cms[side].send_rep(now, id, &p);
                }
            }
            4 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = self.cms[side].send_rtu(now, id, &[small]);
                }
            }
            5 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    let reason = RejectReason(u16::from(small) + 26);
                    if let Err(e) = self.cms[side].reject(now, id, reason, &[], b"no") {
                        self.ids[side].push(e.id);
                    }
                }
            }
            6 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let r = RejectReason(u16::from(small) + 1);
                    let _ = self.cms[side].send_rej(now, id, r, &[small; 3], &[]);
                }
            }
            7 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = self.cms[side].send_mra(now, id, small * 3, small & 1 == 0, &[]);
                }
            }
            8 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = self.cms[side].send_dreq(now, id, &[small]);
                }
            }
            9 => {
                let a = arg();
                if let Some(id) = pick(&self.ids[side], a) {
                    let _ = self.cms[side].send_drep(now, id, &[small]);
                }
            }
            10 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    if small & 1 == 0 {
                        self.cms[side].destroy(now, id);
                    } else {
                        // Dropping it is destroying it, at the CM's next call.
                        drop(id);
                    }
                }
            }
            11 => {
                let a = arg();
                if let Some(id) = self.take(side, a) {
                    self.cms[side].destroy_silently(now, id);
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
                    self.cms[side].handle_receive(now, MadAddr::gsi(gid(from)), &m);
                }
            }
            14 => {
                // Hostile bytes: a recorded MAD with bytes overwritten, or raw.
                let (a, n) = (arg(), usize::from(arg() % 16));
                let mut m = if self.recorded.is_empty() || small == 7 {
                    vec![0u8; MAD_LEN]
                } else {
                    self.recorded[usize::from(a) % self.recorded.len()].clone()
                };
                for _ in 0..n {
                    let (i, b) = (usize::from(arg()) % MAD_LEN.max(m.len()), arg());
                    if let Some(x) = m.get_mut(i) {
                        *x = b;
                    }
                }
                if small == 6 {
                    m.truncate(usize::from(a) % MAD_LEN);
                }
                self.cms[side].handle_receive(now, MadAddr::gsi(gid(9)), &m);
            }
            _ => {
                // Time passes: 1 + small × arg ms, or a jump to the next timer; timers run.
                let a = arg();
                let next = self.cms[side].poll_timeout();
                self.now = match (small, next) {
                    (0, Some(t)) => self.now.max(t),
                    _ => self.now + Duration::from_millis(1 + u64::from(small) * u64::from(a)),
                };
                for cm in &mut self.cms {
                    cm.handle_timeout(self.now);
                }
            }
        }
        if op & 15 == 4 && small == 7 {
            // COMM_EST (a data packet before the RTU) on the picked id.
            if let Some(id) = pick(&self.ids[side], 0) {
                let _ = self.cms[side].notify_comm_est(id);
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
                self.cms[side].destroy(self.now, id);
            }
        }
        for _ in 0..10_000 {
            self.settle();
            for side in 0..2 {
                // New ids now (a REQ in flight): destroyed at once.
                for id in std::mem::take(&mut self.ids[side]) {
                    self.cms[side].destroy(self.now, id);
                }
                while let Some(m) = self.wire[side].pop() {
                    let from = MadAddr::gsi(gid(2 - side as u8));
                    self.cms[side].handle_receive(self.now, from, &m);
                }
            }
            self.settle();
            // The MAD layers' events (the completions of cancelled sends) into the CMs.
            for cm in &mut self.cms {
                cm.process(self.now);
            }
            self.settle();
            let quiet =
                self.wire.iter().all(|w| w.is_empty()) && self.ids.iter().all(|v| v.is_empty());
            let next = self.cms.iter_mut().filter_map(|c| c.poll_timeout()).min();
            match next {
                Some(t) => {
                    self.now = self.now.max(t);
                    for cm in &mut self.cms {
                        cm.handle_timeout(self.now);
                    }
                }
                None if quiet => break,
                None => {}
            }
        }
        for side in 0..2 {
            let cm = &mut self.cms[side];
            let s = cm.table_sizes();
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
            assert_eq!(cm.mad().outstanding(), 0, "side {side}");
            assert_eq!(cm.poll_timeout(), None, "side {side}");
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
        let (a, b) = (r.cms[0].counters(), r.cms[1].counters());
        assert_eq!((b.rx(AttrId::REQ), a.rx(AttrId::REP)), (1, 1));
        assert_eq!(
            (b.rx(AttrId::RTU), b.rx(AttrId::DREQ), a.rx(AttrId::DREP)),
            (1, 1, 1)
        );
        r.finish();
        let r = run_ops(get("reject"));
        assert_eq!(r.cms[0].counters().rx(AttrId::REJ), 1);
        let r = run_ops(get("replay-storm"));
        assert!(r.cms[1].counters().dup(AttrId::REQ) + r.cms[0].counters().dup(AttrId::REP) > 0);
        let r = run_ops(get("req-timeouts"));
        assert!(r.cms[0].counters().retries(AttrId::REQ) >= 3);
    }
}
