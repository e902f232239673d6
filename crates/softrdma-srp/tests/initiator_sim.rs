//! Our SRP initiator against our SRP target in the core's simulated network: logins over
//! the RDMA CM and the IB CM (and their refusals as typed errors), several channels,
//! credits, direct / indirect / immediate data, task management on timeout, logout, a
//! verified random workload under loss, duplication and reordering, and a target that dies.

mod harness;

use softrdma_core::cm::CmPort;
use softrdma_core::sim::{NetConfig, Sim};
use softrdma_core::time::Duration;
use softrdma_core::verbs::MrKeys;
use softrdma_core::Node;
use softrdma_srp::initiator::{cdb, ChannelState as IChan, DownReason};
use softrdma_srp::verify;
use softrdma_srp::{
    AddTarget, Command, Completion, InitiatorConfig, InitiatorEvent, IoError, LoginError, Segment,
    SessionState, SrpConfig, SrpEvent, SrpInitiator, SubmitError,
};
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::login::MultiChannelResult;
use softrdma_wire::srp::{RspCode, TaskMgmtFunction};
use softrdma_wire::Gid;

use harness::{stack, timers, TargetApp, GUID, LUN_BYTES, PORT};

const BUF: usize = 4 << 20;
const IOVA: u64 = 0x4000_0000;

/// The initiator's application on its node.
struct Ini {
    port: CmPort,
    engine: SrpInitiator,
    events: Vec<InitiatorEvent>,
    done: Vec<Completion>,
    buf: MrKeys,
}

/// Node 0 runs the initiator, node 1 the target.
struct World {
    sim: Sim<Node>,
    t: TargetApp,
    i: Ini,
}

fn target_line(sim: &Sim<Node>, extra: &str) -> String {
    format!(
        "id_ext={GUID:016x},ioc_guid={GUID:016x},dest={}:{PORT}{extra}",
        sim.addrs[1]
    )
}

fn world_with(
    net: NetConfig,
    lend: bool,
    line: impl FnOnce(&Sim<Node>) -> String,
    tcfg: impl FnOnce(&mut SrpConfig),
    icfg: impl FnOnce(&mut InitiatorConfig),
) -> World {
    let (ni, iport) = harness::node(0, 1);
    let (nt, tport) = harness::node(1, 2);
    let mut sim = Sim::with_hosts(vec![ni, nt], net, 11);
    let mut c = SrpConfig::new(GUID);
    tcfg(&mut c);
    let t = TargetApp::new(&mut sim.stacks[1], tport, c, lend);
    let target: AddTarget = line(&sim).parse().expect("add_target line");
    let mut ic = InitiatorConfig::new(target);
    ic.src = Some(sim.addrs[0]);
    icfg(&mut ic);
    let mut engine = SrpInitiator::new(ic);
    let buf = engine
        .alloc_buffer(stack(&mut sim.stacks[0], iport), BUF, IOVA)
        .expect("buffer");
    World {
        sim,
        t,
        i: Ini {
            port: iport,
            engine,
            events: Vec::new(),
            done: Vec::new(),
            buf,
        },
    }
}

fn world(extra: &str) -> World {
    let e = extra.to_string();
    world_with(
        NetConfig::PERFECT,
        false,
        move |s| target_line(s, &e),
        |_| {},
        |_| {},
    )
}

impl World {
    /// Each node's timers, then each application: the initiator's engine with its node's
    /// events, the target's.
    fn turn(&mut self) {
        let now = self.sim.now;
        let n0 = &mut self.sim.stacks[0];
        timers(now, n0);
        let (engine, port) = (&mut self.i.engine, self.i.port);
        while let Some(e) = n0.poll_rdma_event() {
            n0.with_port(now, port, |cm, s| engine.rdma_event(now, cm, s, &e))
                .expect("port");
        }
        while let Some(e) = n0.poll_ib_event() {
            n0.with_port(now, port, |cm, s| engine.ib_event(now, cm, s, &e))
                .expect("port");
        }
        n0.with_port(now, port, |cm, s| {
            engine.poll(now, cm, s);
            if engine.poll_timeout().is_some_and(|t| t <= now) {
                engine.handle_timeout(now, cm, s);
            }
        })
        .expect("port");
        while let Some(e) = self.i.engine.poll_event() {
            self.i.events.push(e);
        }
        while let Some(c) = self.i.engine.poll_completion() {
            self.i.done.push(c);
        }
        let n1 = &mut self.sim.stacks[1];
        timers(now, n1);
        self.t.turn(now, n1);
    }

    /// Runs until `done` or `limit` of virtual time.
    fn run_for(&mut self, limit: Duration, mut done: impl FnMut(&mut World) -> bool) -> bool {
        let end = self.sim.now + limit;
        loop {
            self.turn();
            if done(self) {
                return true;
            }
            if self.sim.now > end {
                return false;
            }
            // The initiator's own timer first when it comes before anything on the wire or
            // in a stack (the reconnect timers run while the network is quiet).
            self.sim.flush();
            if let Some(t) = self.i.engine.poll_timeout() {
                if t > self.sim.now && self.sim.next_event().is_none_or(|n| n > t) {
                    self.sim.now = t;
                    continue;
                }
            }
            if !self.sim.step() {
                // Nothing on the wire and no node timer: the initiator's own.
                match self.i.engine.poll_timeout() {
                    Some(t) if t > self.sim.now => self.sim.now = t,
                    Some(_) => {}
                    None => {
                        self.turn();
                        return done(self);
                    }
                }
            }
        }
    }

    fn run(&mut self, done: impl FnMut(&mut World) -> bool) -> bool {
        self.run_for(Duration::from_secs(120), done)
    }

    fn start(&mut self) -> Result<(), LoginError> {
        let now = self.sim.now;
        let (engine, port) = (&mut self.i.engine, self.i.port);
        self.sim.stacks[0]
            .with_port(now, port, |cm, s| engine.start(now, cm, s, port))
            .expect("port")
    }

    fn login(&mut self) {
        self.start().expect("start");
        assert!(self.run(|w| w.i.engine.state() != &SessionState::LoggingIn));
        assert_eq!(
            self.i.engine.state(),
            &SessionState::Live,
            "{:?}",
            self.i.events
        );
    }

    fn seg(&self, off: u64, len: u32) -> Segment {
        Segment {
            mr: self.i.buf,
            addr: IOVA + off,
            len,
        }
    }

    fn put(&mut self, off: u64, b: &[u8]) {
        stack(&mut self.sim.stacks[0], self.i.port)
            .verbs
            .local_write(self.i.buf.lkey, IOVA + off, b)
            .expect("put");
    }

    fn get(&mut self, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        stack(&mut self.sim.stacks[0], self.i.port)
            .verbs
            .local_read(self.i.buf.lkey, IOVA + off, &mut b)
            .expect("get");
        b
    }

    fn submit(&mut self, c: &Command<'_>) -> Result<u64, SubmitError> {
        let now = self.sim.now;
        let s = stack(&mut self.sim.stacks[0], self.i.port);
        self.i.engine.submit(now, s, c)
    }

    /// Submits and waits for the completion.
    fn exec(&mut self, c: &Command<'_>) -> Completion {
        let tag = self.submit(c).expect("submit");
        assert!(self.run(|w| w.i.done.iter().any(|d| d.tag == tag)));
        let k = self.i.done.iter().position(|d| d.tag == tag).expect("done");
        self.i.done.remove(k)
    }

    /// TEST UNIT READY until GOOD (the first one sees the power-on unit attention).
    fn ready(&mut self) {
        let tur = cdb::test_unit_ready();
        let r = self.exec(&Command::new(0, &tur));
        let r = r.result.expect("tur");
        assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
        assert_eq!(r.sense_key().map(|s| s.0), Some(6), "unit attention");
        let r = self.exec(&Command::new(0, &tur)).result.expect("tur");
        assert_eq!(r.status, ScsiStatus::GOOD);
    }

    fn logout(&mut self) {
        let now = self.sim.now;
        let (engine, port) = (&mut self.i.engine, self.i.port);
        self.sim.stacks[0]
            .with_port(now, port, |cm, s| engine.logout(now, cm, s))
            .expect("port");
        assert!(self.run(|w| w.i.engine.state() == &SessionState::Closed));
        assert!(self.run(|w| w.t.engine.channels().is_empty()));
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn good(c: &Completion) {
    let r = c.result.as_ref().expect("scsi result");
    assert_eq!(r.status, ScsiStatus::GOOD, "{r:?}");
}

#[test]
fn login_channels_io_and_logout_over_the_rdma_cm() {
    let mut w = world(",ch_count=2");
    w.login();
    // What ib_srp sends and what the target answered.
    let ch = w.i.engine.channels();
    assert_eq!(ch.len(), 2);
    for (k, c) in ch.iter().enumerate() {
        assert_eq!(c.state, IChan::Live);
        assert_eq!(c.login_req.req_it_iu_len, 8260);
        assert_eq!(c.login_req.req_buf_fmt, 6);
        assert_eq!(c.login_req.req_flags, 0x80 | u8::from(k > 0));
        assert_eq!(c.login_req.imm_data_offset, 68);
        let rsp = c.login_rsp.expect("rsp");
        assert_eq!(rsp.req_lim_delta, 128);
        assert_eq!(rsp.max_ti_iu_len, 8260);
        assert!(c.use_imm_data);
        assert_eq!(c.can_queue, 62);
        assert!(!c.via_ib_cm);
    }
    assert_eq!(
        ch[1].login_rsp.map(|r| r.multichannel_result()),
        Some(MultiChannelResult::MAINTAINED)
    );
    let pid = w.i.engine.initiator_port_id();
    let want = format!(
        "0x{}",
        pid.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    assert!(w.t.events.iter().any(|e| matches!(e,
        SrpEvent::LoginAccepted { initiator, immediate: true, .. } if *initiator == want)));
    w.ready();

    // INQUIRY and READ CAPACITY(16).
    let inq = cdb::inquiry(96);
    let s = w.seg(0, 96);
    let r = w.exec(&Command::new(0, &inq).read_into(&[s]));
    good(&r);
    assert_eq!(&w.get(8, 8), b"LIO-ORG ");
    let rc = cdb::read_capacity16();
    let s = w.seg(0, 32);
    good(&w.exec(&Command::new(0, &rc).read_into(&[s])));
    let b = w.get(0, 12);
    assert_eq!(
        u64::from_be_bytes(b[..8].try_into().unwrap()),
        LUN_BYTES / 512 - 1
    );
    assert_eq!(u32::from_be_bytes(b[8..12].try_into().unwrap()), 512);

    // Immediate data: a 4 KiB WRITE in the IU (68 + 4096 ≤ 8260), on channel 1.
    let data = pattern(4096, 1);
    w.put(0, &data);
    let (c, n) = cdb::rw(true, 8, 8);
    let s = [w.seg(0, 4096)];
    let mut cmd = Command::new(0, &c[..n]).write_from(&s);
    cmd.channel = Some(1);
    good(&w.exec(&cmd));
    // Direct: 64 KiB WRITE (RDMA READ by the target) and READ back.
    let big = pattern(64 << 10, 2);
    w.put(0x10_0000, &big);
    let (c, n) = cdb::rw(true, 1000, 128);
    let s = w.seg(0x10_0000, 64 << 10);
    good(&w.exec(&Command::new(0, &c[..n]).write_from(&[s])));
    let (c, n) = cdb::rw(false, 1000, 128);
    let s = w.seg(0x20_0000, 64 << 10);
    good(&w.exec(&Command::new(0, &c[..n]).read_into(&[s])));
    assert_eq!(w.get(0x20_0000, 64 << 10), big);
    // Indirect: 3 scattered buffers out, 2 others in.
    let parts = [
        (0x30_0000u64, 20 << 10),
        (0x31_0000, 12 << 10),
        (0x32_8000, 32 << 10),
    ];
    let mut off = 0;
    let mut segs = Vec::new();
    for (at, len) in parts {
        w.put(at, &big[off..off + len]);
        segs.push(w.seg(at, len as u32));
        off += len;
    }
    let (c, n) = cdb::rw(true, 2000, 128);
    good(&w.exec(&Command::new(0, &c[..n]).write_from(&segs)));
    let ins = [w.seg(0x38_0000, 40 << 10), w.seg(0x3a_0000, 24 << 10)];
    let (c, n) = cdb::rw(false, 2000, 128);
    good(&w.exec(&Command::new(0, &c[..n]).read_into(&ins)));
    let mut back = w.get(0x38_0000, 40 << 10);
    back.extend(w.get(0x3a_0000, 24 << 10));
    assert_eq!(back, big);
    // The immediate write reads back through channel 0.
    let (c, n) = cdb::rw(false, 8, 8);
    let s = w.seg(0x5000, 4096);
    good(&w.exec(&Command::new(0, &c[..n]).read_into(&[s])));
    assert_eq!(w.get(0x5000, 4096), data);
    // More buffers than an SRP_CMD carries: refused as ib_srp does.
    let many: Vec<Segment> = (0..13).map(|k| w.seg(k * 4096, 4096)).collect();
    let (c, n) = cdb::rw(false, 0, 104);
    assert_eq!(
        w.submit(&Command::new(0, &c[..n]).read_into(&many)),
        Err(SubmitError::TooManySegments { got: 13, max: 12 })
    );
    // An LBA out of range: CHECK CONDITION with sense.
    let (c, n) = cdb::rw(false, 1 << 20, 1);
    let s = w.seg(0, 512);
    let r = w.exec(&Command::new(0, &c[..n]).read_into(&[s]));
    let r = r.result.expect("result");
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    assert_eq!(r.sense_key(), Some((5, 0x21, 0)));

    // Credits: every response gave its one back.
    for c in w.i.engine.channels() {
        assert_eq!(c.req_lim, 128, "channel {}", c.index);
    }
    w.logout();
    assert!(w
        .t
        .events
        .iter()
        .any(|e| matches!(e, SrpEvent::Logout { .. })));
}

#[test]
fn login_over_the_ib_cm_with_gid_and_service_id() {
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| {
            let g: Gid = Gid::from(s.addrs[1]);
            let hex: String = g.0.iter().map(|b| format!("{b:02x}")).collect();
            format!("id_ext={GUID:016x},ioc_guid={GUID:016x},dgid={hex},pkey=ffff,service_id={GUID:016x}")
        },
        |_| {},
        |_| {},
    );
    w.login();
    let ch = w.i.engine.channels();
    assert!(ch[0].via_ib_cm);
    assert!(w
        .t
        .events
        .iter()
        .any(|e| matches!(e, SrpEvent::LoginAccepted { cm: "IB CM", .. })));
    w.ready();
    let d = pattern(8192, 5);
    w.put(0, &d);
    let (c, n) = cdb::rw(true, 0, 16);
    let s = w.seg(0, 8192);
    good(&w.exec(&Command::new(0, &c[..n]).write_from(&[s])));
    let (c, n) = cdb::rw(false, 0, 16);
    let s = w.seg(0x1_0000, 8192);
    good(&w.exec(&Command::new(0, &c[..n]).read_into(&[s])));
    assert_eq!(w.get(0x1_0000, 8192), d);
    w.logout();
}

fn login_error(w: &mut World) -> LoginError {
    let _ = w.start();
    assert!(w.run(|w| w.i.engine.state() != &SessionState::LoggingIn));
    match w.i.engine.state() {
        SessionState::LoginFailed(e) => e.clone(),
        s => panic!("{s:?}"),
    }
}

#[test]
fn login_refusals_are_typed_errors() {
    // A wrong id_ext: SRP_LOGIN_REJ UNABLE_ASSOCIATE_CHANNEL.
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, "").replacen("505400fffe770001", "505400fffe770002", 1),
        |_| {},
        |_| {},
    );
    let LoginError::Rejected(r) = login_error(&mut w) else {
        panic!()
    };
    assert_eq!(r.srp_reason().map(|r| r.0), Some(0x0001_0003));
    assert!(r
        .to_string()
        .starts_with("SRP LOGIN REJECTED, reason 0x00010003"));
    // An IU the target will not take: "requested max_it_iu_len too large".
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, ""),
        |t| t.login.max_req_size = 2048,
        |_| {},
    );
    let LoginError::Rejected(r) = login_error(&mut w) else {
        panic!()
    };
    assert_eq!(
        r.to_string(),
        "SRP_LOGIN_REJ: requested max_it_iu_len too large"
    );
    // ... and the same target takes a login capped with max_it_iu_size (no immediate data
    // beyond what fits).
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, ",max_it_iu_size=2048"),
        |t| t.login.max_req_size = 2048,
        |_| {},
    );
    w.login();
    assert_eq!(w.i.engine.channels()[0].max_it_iu_len, 2048);
    // Nobody listens on that port: the CM's REJ reason 8 (invalid service ID).
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, "").replace(":5555", ":5556"),
        |_| {},
        |_| {},
    );
    let LoginError::Rejected(r) = login_error(&mut w) else {
        panic!()
    };
    assert_eq!(r.cm_reason.0, 8);
    assert_eq!(r.to_string(), "REJ reason 0x8 (invalid service ID)");
    // The second channel over the target's channel limit: the session keeps one.
    let mut w = world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, ",ch_count=3"),
        |t| t.login.channels_per_initiator = Some(1),
        |_| {},
    );
    w.login();
    assert_eq!(
        w.i.engine
            .channels()
            .iter()
            .filter(|c| c.state == IChan::Live)
            .count(),
        1
    );
    assert!(w.i.events.iter().any(|e| matches!(e,
        InitiatorEvent::LoginFailed { channel: 1, error: LoginError::Rejected(r) }
            if r.srp_reason().map(|x| x.0) == Some(0x0001_0006))));
    w.ready();
}

#[test]
fn credits_bound_the_commands_in_flight() {
    // A target with an 8-entry ring: 8 credits, 7 commands at a time (one kept for task
    // management).
    let mut w = world_with(
        NetConfig {
            delay: Duration::from_millis(1),
            ..NetConfig::PERFECT
        },
        false,
        |s| target_line(s, ""),
        |t| t.login.rq_size = 8,
        |_| {},
    );
    w.login();
    assert_eq!(w.i.engine.channels()[0].can_queue, 7);
    w.ready();
    let mut tags = Vec::new();
    let c = cdb::rw(false, 0, 8);
    for k in 0..7 {
        let s = w.seg(k * 4096, 4096);
        tags.push(
            w.submit(&Command::new(0, &c.0[..c.1]).read_into(&[s]))
                .expect("room"),
        );
    }
    let s = w.seg(0, 4096);
    assert_eq!(
        w.submit(&Command::new(0, &c.0[..c.1]).read_into(&[s])),
        Err(SubmitError::Busy)
    );
    assert_eq!(w.i.engine.channels()[0].req_lim, 1);
    assert!(w.run(|w| w.i.done.len() == 7));
    assert_eq!(w.i.engine.channels()[0].req_lim, 8);
}

#[test]
fn abort_task_on_timeout_then_lun_reset_then_giving_up() {
    // ABORT TASK of a WRITE whose RDMA READ is in flight: the target aborts it, the
    // command ends as timed out, the credit comes back later.
    let mut w = world_with(
        NetConfig {
            delay: Duration::from_millis(5),
            ..NetConfig::PERFECT
        },
        // In place: an aborted WRITE's data may have reached the medium already.
        true,
        |s| target_line(s, ""),
        |_| {},
        |c| c.cmd_timeout = Duration::from_secs(1),
    );
    w.login();
    w.ready();
    let (c, n) = cdb::rw(true, 0, 128);
    let s = [w.seg(0, 64 << 10)];
    let mut cmd = Command::new(0, &c[..n]).write_from(&s);
    cmd.timeout = Some(Duration::from_millis(7));
    let r = w.exec(&cmd);
    assert_eq!(
        r.result,
        Err(IoError::TimedOut {
            rsp_code: Some(RspCode::COMPLETE)
        })
    );
    assert!(w.i.events.iter().any(|e| matches!(e,
        InitiatorEvent::TaskMgmt { function: TaskMgmtFunction::ABORT_TASK, task_tag, .. } if *task_tag == r.tag)));
    // The next command works, and returns the aborted one's credit (1 + 1).
    let tur = cdb::test_unit_ready();
    good(&w.exec(&Command::new(0, &tur)));
    assert_eq!(w.i.engine.channels()[0].req_lim, 128);

    // A hung target (its NIC still ACKs): ABORT TASK times out, LOGICAL UNIT RESET times
    // out, the initiator gives up: every command ends, the session has failed.
    w.sim.net.delay = Duration::from_micros(10);
    w.t.frozen = true;
    let (c, n) = cdb::rw(false, 0, 8);
    let mut tags = Vec::new();
    for k in 0..4 {
        let s = w.seg(k * 4096, 4096);
        tags.push(
            w.submit(&Command::new(0, &c[..n]).read_into(&[s]))
                .expect("submit"),
        );
    }
    let t0 = w.sim.now;
    assert!(w.run(|w| tags.iter().all(|t| w.i.done.iter().any(|d| d.tag == *t))));
    let took = w.sim.now - t0;
    assert!(took < Duration::from_secs(15), "{took}");
    for d in &w.i.done {
        assert!(
            matches!(
                &d.result,
                Err(IoError::ChannelDown(DownReason::TargetUnresponsive))
            ),
            "{d:?}"
        );
    }
    assert!(matches!(w.i.engine.state(), SessionState::Failed(_)));
    let fns: Vec<_> =
        w.i.events
            .iter()
            .filter_map(|e| match e {
                InitiatorEvent::TaskMgmtDone {
                    function,
                    rsp_code: None,
                    ..
                } => Some(*function),
                _ => None,
            })
            .collect();
    assert_eq!(
        fns,
        vec![TaskMgmtFunction::ABORT_TASK, TaskMgmtFunction::LUN_RESET]
    );
}

/// A verified random workload: `ios` commands at queue depth `depth`, 512 B to 64 KiB, reads
/// and writes over the LUN, every write a new generation of the pattern, every read checked
/// against what was last written there. Returns (writes, reads, sectors verified).
fn verified_workload(
    w: &mut World,
    ios: usize,
    depth: usize,
    max_blocks: u32,
    seed: u64,
) -> (u64, u64, u64) {
    let sectors = (LUN_BYTES / 512) as usize;
    let mut gen_of: Vec<Option<u64>> = vec![None; sectors];
    // Sectors with a command in flight are not read or written by another one meanwhile.
    let mut busy = vec![false; sectors];
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    struct Io {
        write: bool,
        lba: u64,
        blocks: u32,
        slot: u64,
        generation: u64,
    }
    let slot_len: u64 = 64 << 10;
    let mut free_slots: Vec<u64> = (0..depth as u64).collect();
    let mut inflight: std::collections::BTreeMap<u64, Io> = Default::default();
    let (mut submitted, mut writes, mut reads, mut verified) = (0usize, 0u64, 0u64, 0u64);
    let mut generation = 0u64;
    while submitted < ios || !inflight.is_empty() {
        while submitted < ios && !free_slots.is_empty() {
            let blocks = match next() % 4 {
                0 => 1,
                1 => 8,
                2 => 16,
                _ => 128,
            }
            .min(max_blocks);
            let lba = next() % (sectors as u64 - u64::from(blocks));
            let range = lba as usize..lba as usize + blocks as usize;
            if busy[range.clone()].iter().any(|b| *b) {
                continue;
            }
            let write = next() % 2 == 0 || gen_of[range.clone()].iter().all(|g| g.is_none());
            let slot = free_slots.pop().expect("slot");
            let buf_off = slot * slot_len;
            let len = blocks * 512;
            generation += 1;
            if write {
                let mut b = vec![0u8; len as usize];
                verify::fill(&mut b, lba * 512, generation);
                w.put(buf_off, &b);
            }
            let (c, n) = cdb::rw(write, lba, blocks);
            // Some commands in two pieces (indirect descriptors).
            let segs: Vec<Segment> = if blocks >= 16 && next() % 2 == 0 {
                let h = len / 2;
                vec![w.seg(buf_off, h), w.seg(buf_off + u64::from(h), len - h)]
            } else {
                vec![w.seg(buf_off, len)]
            };
            let cmd = if write {
                Command::new(0, &c[..n]).write_from(&segs)
            } else {
                Command::new(0, &c[..n]).read_into(&segs)
            };
            let tag = match w.submit(&cmd) {
                Ok(t) => t,
                Err(SubmitError::Busy) => {
                    free_slots.push(slot);
                    break;
                }
                Err(e) => panic!("{e}"),
            };
            for b in &mut busy[range] {
                *b = true;
            }
            inflight.insert(
                tag,
                Io {
                    write,
                    lba,
                    blocks,
                    slot,
                    generation,
                },
            );
            submitted += 1;
        }
        assert!(
            w.run(|w| !w.i.done.is_empty()),
            "no completion: {:?}",
            w.i.engine.state()
        );
        for d in std::mem::take(&mut w.i.done) {
            let io = inflight
                .remove(&d.tag)
                .expect("a completion for a command we sent");
            let r = d.result.unwrap_or_else(|e| panic!("lost command: {e}"));
            assert_eq!(r.status, ScsiStatus::GOOD, "{r:?}");
            let range = io.lba as usize..io.lba as usize + io.blocks as usize;
            if io.write {
                writes += 1;
                for s in range.clone() {
                    gen_of[s] = Some(io.generation);
                }
            } else {
                reads += 1;
                let b = w.get(io.slot * slot_len, io.blocks as usize * 512);
                verify::check(&b, io.lba * 512, |off| gen_of[(off / 512) as usize])
                    .unwrap_or_else(|m| panic!("corrupted block: {m}"));
                verified += range.clone().filter(|s| gen_of[*s].is_some()).count() as u64;
            }
            for s in range {
                busy[s] = false;
            }
            free_slots.push(io.slot);
        }
    }
    // Finally read the whole LUN back and check every sector ever written.
    let chunk_len = u64::from(max_blocks) * 512;
    for chunk in 0..(LUN_BYTES / chunk_len) {
        let lba = chunk * u64::from(max_blocks);
        let (c, n) = cdb::rw(false, lba, max_blocks);
        let s = w.seg(0, chunk_len as u32);
        let d = w.exec(&Command::new(0, &c[..n]).read_into(&[s]));
        good(&d);
        let b = w.get(0, chunk_len as usize);
        verify::check(&b, lba * 512, |off| gen_of[(off / 512) as usize])
            .unwrap_or_else(|m| panic!("corrupted block in the final pass: {m}"));
    }
    (writes, reads, verified)
}

/// Runs the verified workload on a network with `net`, two channels; with `lend`, on a LUN
/// whose medium the target moved into its device (READ and WRITE in place).
fn verified_on(net: NetConfig, lend: bool, ios: usize, max_blocks: u32) {
    let mut w = world_with(net, lend, |s| target_line(s, ",ch_count=2"), |_| {}, |_| {});
    w.login();
    w.ready();
    let (writes, reads, verified) = verified_workload(&mut w, ios, 16, max_blocks, 0x1234_5678);
    assert!(writes > 20 && reads > 20, "{writes} {reads}");
    assert!(verified > 100, "{verified}");
    // The network did its worst: the responders saw duplicates and packets out of order.
    let (dup, ooo) = (0..2).fold((0, 0), |(d, o), k| {
        let port = if k == 0 { w.i.port } else { w.t.port };
        let c = stack(&mut w.sim.stacks[k], port).device.counters();
        (d + c.duplicate_request, o + c.out_of_seq_request)
    });
    assert!(dup > 0 && ooo > 0, "{dup} {ooo}");
    w.logout();
}

#[test]
fn verified_random_workload_under_loss_and_duplication() {
    // 2% of datagrams lost, 2% duplicated; I/Os of 512 B to 64 KiB.
    verified_on(
        NetConfig {
            loss_permille: 20,
            dup_permille: 20,
            delay: Duration::from_micros(50),
            jitter: Duration::ZERO,
        },
        false,
        300,
        128,
    );
}

#[test]
fn verified_random_workload_under_reordering_loss_and_duplication() {
    // Up to 30 µs of random extra delay on a 50 µs path: the packets of a message arrive in
    // any order (each overtaken packet draws a NAK and a go-back-N: the responder keeps what
    // overtook it, but the requester re-sends until the ACK after the hole comes, so the I/Os
    // are kept to 8 KiB).
    verified_on(
        NetConfig {
            loss_permille: 10,
            dup_permille: 10,
            delay: Duration::from_micros(50),
            jitter: Duration::from_micros(30),
        },
        false,
        600,
        16,
    );
}

#[test]
fn verified_random_workload_in_place_under_loss_duplication_and_reordering() {
    // The same on a lent medium: data-out lands in the LUN itself, data-in leaves from it,
    // and every retransmission (go-back-N) reads or rewrites the medium again.
    verified_on(
        NetConfig {
            loss_permille: 15,
            dup_permille: 15,
            delay: Duration::from_micros(50),
            jitter: Duration::from_micros(10),
        },
        true,
        400,
        128,
    );
}

#[test]
fn a_target_that_dies_mid_run_gives_a_clear_error() {
    let mut w = world(",ch_count=2");
    w.login();
    w.ready();
    let (c, n) = cdb::rw(true, 0, 16);
    let mut tags = Vec::new();
    for k in 0..8u64 {
        let s = w.seg(k * 8192, 8192);
        tags.push(
            w.submit(&Command::new(0, &c[..n]).write_from(&[s]))
                .expect("submit"),
        );
    }
    // The target's host is gone: nothing it would send arrives, nothing reaches it.
    w.sim.down[1] = true;
    w.t.frozen = true;
    let t0 = w.sim.now;
    assert!(w.run(|w| tags.iter().all(|t| w.i.done.iter().any(|d| d.tag == *t))));
    let took = w.sim.now - t0;
    for d in &w.i.done {
        assert!(matches!(&d.result, Err(IoError::ChannelDown(_))), "{d:?}");
    }
    let SessionState::Failed(why) = w.i.engine.state().clone() else {
        panic!("{:?}", w.i.engine.state())
    };
    assert!(took < Duration::from_secs(60), "{took} {why}");
    // New commands are refused at once.
    let tur = cdb::test_unit_ready();
    assert_eq!(w.submit(&Command::new(0, &tur)), Err(SubmitError::NotLive));
}

/// ib_srp's transport timers on: reconnect every second, fail fast after 5 s, give the
/// device up after 12 s.
fn world_reconnecting() -> World {
    world_with(
        NetConfig::PERFECT,
        false,
        |s| target_line(s, ",ch_count=2"),
        |_| {},
        |c| {
            c.reconnect_delay = Some(Duration::from_secs(1));
            c.fast_io_fail_tmo = Some(Duration::from_secs(5));
            c.dev_loss_tmo = Some(Duration::from_secs(12));
        },
    )
}

/// The target's host goes away under eight writes; the time their channel went down.
fn lose_target(w: &mut World) -> (Vec<u64>, softrdma_core::time::Instant) {
    let (c, n) = cdb::rw(true, 0, 16);
    let mut tags = Vec::new();
    for k in 0..8u64 {
        let s = w.seg(k * 8192, 8192);
        tags.push(
            w.submit(&Command::new(0, &c[..n]).write_from(&[s]))
                .expect("submit"),
        );
    }
    w.sim.down[1] = true;
    w.t.frozen = true;
    assert!(w.run(|w| tags.iter().all(|t| w.i.done.iter().any(|d| d.tag == *t))));
    (tags, w.sim.now)
}

#[test]
fn a_lost_target_is_reconnected_as_ib_srp_does() {
    let mut w = world_reconnecting();
    w.login();
    w.ready();
    let (_, lost) = lose_target(&mut w);
    // The commands ended for the caller to retry; new ones are held (Busy), not refused.
    for d in w.i.done.drain(..) {
        assert!(matches!(&d.result, Err(IoError::ChannelDown(_))), "{d:?}");
    }
    assert!(w.i.engine.will_retry());
    assert!(
        matches!(w.i.engine.state(), SessionState::Blocked(_)),
        "{:?}",
        w.i.engine.state()
    );
    let tur = cdb::test_unit_ready();
    assert_eq!(w.submit(&Command::new(0, &tur)), Err(SubmitError::Busy));
    assert!(w
        .i
        .events
        .iter()
        .any(|e| matches!(e, InitiatorEvent::TransportFailed { .. })));
    // Attempts every reconnect_delay while the target is away.
    let t_attempt2 = lost + Duration::from_millis(2500);
    assert!(w.run_for(Duration::from_secs(4), |w| w.sim.now >= t_attempt2));
    let attempts =
        w.i.events
            .iter()
            .filter(|e| matches!(e, InitiatorEvent::ReconnectAttempt { .. }))
            .count();
    assert!(attempts >= 2, "{:?}", w.i.events);
    // The target's host is back (before fast_io_fail_tmo): the next attempt logs in both
    // channels again, and I/O works.
    w.sim.down[1] = false;
    w.t.frozen = false;
    let back = w.sim.now;
    assert!(w.run_for(Duration::from_secs(10), |w| w.i.engine.is_live()));
    assert!(
        w.sim.now - back <= Duration::from_millis(1100),
        "reconnected {} after the target was back",
        w.sim.now - back
    );
    assert!(w
        .i
        .events
        .iter()
        .any(|e| matches!(e, InitiatorEvent::Reconnected { .. })));
    assert_eq!(w.i.engine.channels().len(), 2);
    assert!(!w.i.engine.will_retry());
    let payload = pattern(8192, 9);
    w.put(0, &payload);
    let (c, n) = cdb::rw(true, 64, 16);
    let s = w.seg(0, 8192);
    let mut r = w.exec(&Command::new(0, &c[..n]).write_from(&[s]));
    // A unit attention first, perhaps (the nexus is new to the target), as after a login.
    if matches!(&r.result, Ok(x) if x.status == ScsiStatus::CHECK_CONDITION) {
        r = w.exec(&Command::new(0, &c[..n]).write_from(&[s]));
    }
    assert_eq!(r.result.expect("write").status, ScsiStatus::GOOD);
    let (c, n) = cdb::rw(false, 64, 16);
    let s = w.seg(65536, 8192);
    let r = w.exec(&Command::new(0, &c[..n]).read_into(&[s]));
    assert_eq!(r.result.expect("read").status, ScsiStatus::GOOD);
    assert_eq!(w.get(65536, 8192), payload);
    w.logout();
}

#[test]
fn a_target_that_stays_away_fails_fast_then_is_given_up() {
    let mut w = world_reconnecting();
    w.login();
    w.ready();
    let (_, lost) = lose_target(&mut w);
    // fast_io_fail_tmo (5 s): commands fail at once from then on, reconnects go on.
    assert!(w.run_for(Duration::from_secs(8), |w| matches!(
        w.i.engine.state(),
        SessionState::FailFast(_)
    )));
    let ff = w.sim.now - lost;
    assert!(
        ff >= Duration::from_secs(5) && ff <= Duration::from_millis(5100),
        "failed fast {ff} after the loss"
    );
    assert!(!w.i.engine.will_retry());
    let tur = cdb::test_unit_ready();
    assert_eq!(w.submit(&Command::new(0, &tur)), Err(SubmitError::NotLive));
    // dev_loss_tmo (12 s): the device is given up, resources released, no more attempts.
    assert!(w.run_for(Duration::from_secs(10), |w| w.i.engine.is_done()));
    let gone = w.sim.now - lost;
    assert!(
        gone >= Duration::from_secs(12) && gone <= Duration::from_millis(12100),
        "given up {gone} after the loss"
    );
    let SessionState::Failed(DownReason::DevLossTmo { after_secs, .. }) =
        w.i.engine.state().clone()
    else {
        panic!("{:?}", w.i.engine.state())
    };
    assert_eq!(after_secs, 12);
    let attempts =
        w.i.events
            .iter()
            .filter(|e| matches!(e, InitiatorEvent::ReconnectAttempt { .. }))
            .count();
    assert!((10..=12).contains(&attempts), "{attempts} attempts");
    assert!(
        w.i.engine.cq().is_none(),
        "resources kept after the device was lost"
    );
    assert_eq!(w.i.engine.poll_timeout(), None);
}
