//! The SRP target in the core's simulated network: a test initiator (RDMA CM or IB CM,
//! RC QPs, its own memory registered for remote access) logs in to an `SrpTarget` on a
//! memory LUN and drives SRP_CMDs and SRP_TSK_MGMTs through it; every byte crosses the
//! simulated wire as RoCEv2 packets (path MTU 1024).

mod harness;

use std::net::{IpAddr, SocketAddr};

use softrdma_core::cm::{CmEvent, CmId, CmPort, ReqParams};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType as T, RdmaCmId};
use softrdma_core::sim::{NetConfig, Sim};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendOp, SendWr, Sge,
    WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_core::{Node, Stack};
use softrdma_srp::{AclEntry, ChannelState, SrpConfig, SrpEvent};
use softrdma_wire::cm::PathMtu;
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::login::MultiChannelResult;
use softrdma_wire::srp::{
    CmdRepr, DataDescriptor, DirectBuf, IndirectBuf, LoginRejRepr, LoginReqRdmaRepr, LoginReqRepr,
    LoginRspRepr, RspCode, RspRepr, TaskMgmtFunction, TskMgmtRepr, BUF_FORMAT_DIRECT,
    BUF_FORMAT_INDIRECT, IMMED_REQUESTED,
};
use softrdma_wire::Gid;

use harness::{stack, timers, TargetApp, GUID, PORT};

const IU: u64 = 8192;
const DATA: u64 = 0x10_0000;
const DATA_LEN: usize = 2 << 20;

/// The test initiator's application on node 0: its own QPs, IU and data memory, and
/// what its node told it.
struct Ini {
    port: CmPort,
    cq: CqId,
    pd: softrdma_core::verbs::PdId,
    iu: MrKeys,
    data: MrKeys,
    events: Vec<RdmaCmEvent>,
    ib_events: Vec<CmEvent>,
    wcs: Vec<WorkCompletion>,
}

/// Node 0 runs the test initiator, node 1 the target.
struct World {
    sim: Sim<Node>,
    t: TargetApp,
    i: Ini,
}

fn ip(w: &World, n: usize) -> IpAddr {
    w.sim.addrs[n]
}

fn world_with(cfg: impl FnOnce(&mut SrpConfig)) -> World {
    world_full(false, cfg)
}

/// A world whose target LUN's medium is lent to its device (`lend`), as in `softrdma srpt`.
fn world_full(lend: bool, cfg: impl FnOnce(&mut SrpConfig)) -> World {
    let (ni, iport) = harness::node(0, 1);
    let (nt, tport) = harness::node(1, 2);
    let mut sim = Sim::with_hosts(vec![ni, nt], NetConfig::PERFECT, 7);
    let s0 = stack(&mut sim.stacks[0], iport);
    let pd = s0.verbs.alloc_pd().expect("pd");
    let cq = s0.verbs.create_cq(4096).expect("cq");
    let iu = s0
        .verbs
        .reg_mr(pd, (IU * 256) as usize, 0, AccessFlags::LOCAL_WRITE)
        .expect("iu mr");
    let rw = AccessFlags(
        AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0,
    );
    let data = s0.verbs.reg_mr(pd, DATA_LEN, DATA, rw).expect("data mr");
    let mut c = SrpConfig::new(GUID);
    cfg(&mut c);
    let t = TargetApp::new(&mut sim.stacks[1], tport, c, lend);
    World {
        sim,
        t,
        i: Ini {
            port: iport,
            cq,
            pd,
            iu,
            data,
            events: Vec::new(),
            ib_events: Vec::new(),
            wcs: Vec::new(),
        },
    }
}

fn world() -> World {
    world_with(|_| {})
}

impl World {
    /// The initiator's stack.
    fn ini(&mut self) -> &mut Stack {
        stack(&mut self.sim.stacks[0], self.i.port)
    }

    /// The initiator's RDMA CM (commands that need no stack).
    fn icm(&mut self) -> &mut RdmaCm {
        self.sim.stacks[0].rdma_mut()
    }

    /// A command on the initiator's RDMA CM with its stack.
    fn icm_with<R>(&mut self, f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant) -> R) -> R {
        let now = self.sim.now;
        self.sim.stacks[0]
            .with_port(now, self.i.port, |cm, s| f(cm, s, now))
            .expect("port")
    }

    /// Each node's timers, then each application: the test initiator takes its events and
    /// completions, the target its node's events.
    fn turn(&mut self) {
        let now = self.sim.now;
        let n0 = &mut self.sim.stacks[0];
        timers(now, n0);
        while let Some(e) = n0.poll_rdma_event() {
            self.i.events.push(e);
        }
        while let Some(e) = n0.poll_ib_event() {
            if !matches!(e, CmEvent::Retry { .. }) {
                self.i.ib_events.push(e);
            }
        }
        let cq = self.i.cq;
        while let Ok(Some(wc)) = self.ini().poll_cq(cq) {
            self.i.wcs.push(wc);
        }
        let n1 = &mut self.sim.stacks[1];
        timers(now, n1);
        self.t.turn(now, n1);
    }

    /// Runs until `done` (or 60 s of virtual time).
    fn run(&mut self, mut done: impl FnMut(&mut World) -> bool) -> bool {
        for _ in 0..200_000 {
            self.turn();
            if done(self) {
                return true;
            }
            if !self.sim.step() {
                // Nothing on the wire and no timer: nothing more will happen.
                self.turn();
                return done(self);
            }
        }
        false
    }

    fn take_event(&mut self, t: T) -> Option<RdmaCmEvent> {
        let i = self.i.events.iter().position(|e| e.kind() == t)?;
        Some(self.i.events.remove(i))
    }
}

fn target_port_id() -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&GUID.to_be_bytes());
    t[8..].copy_from_slice(&GUID.to_be_bytes());
    t
}

fn login_req(multi: bool) -> LoginReqRdmaRepr {
    LoginReqRdmaRepr {
        tag: 0,
        req_buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
        req_flags: IMMED_REQUESTED | u8::from(multi),
        req_it_iu_len: 8260,
        initiator_port_id: [0x11; 16],
        target_port_id: target_port_id(),
        imm_data_offset: 68,
    }
}

/// An initiator channel: its QP and RDMA CM id.
struct Chan {
    qpn: u32,
    id: RdmaCmId,
    /// Index of this channel's receive/send IU slots.
    base: u64,
}

fn rc_qp(w: &mut World) -> u32 {
    let (pd, cq) = (w.i.pd, w.i.cq);
    let s = stack(&mut w.sim.stacks[0], w.i.port);
    let (qpn, _) = s
        .verbs
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })
        .expect("qp");
    RdmaCm::init_qp(s, qpn).expect("init");
    qpn
}

/// rdma_resolve_addr/route + rdma_connect with `login`; returns the channel and the event
/// that answered (ESTABLISHED or REJECTED).
fn dial(w: &mut World, login: &LoginReqRdmaRepr, base: u64) -> (Chan, RdmaCmEvent) {
    let qpn = rc_qp(w);
    // Receive buffers for responses, before the connection can deliver any.
    for k in 0..16 {
        let addr = (base + k) * IU;
        stack(&mut w.sim.stacks[0], w.i.port)
            .post_recv(
                qpn,
                RecvWr::new(
                    addr,
                    vec![Sge {
                        addr,
                        length: IU as u32,
                        lkey: w.i.iu.lkey,
                    }],
                ),
            )
            .expect("recv");
    }
    let id = w.icm().create_id();
    let (src, dst) = (ip(w, 0), SocketAddr::new(ip(w, 1), PORT));
    w.icm().resolve_addr(&id, Some(src), dst).expect("addr");
    let e = w.sim.stacks[0].poll_event_of(id.name());
    assert_eq!(e.map(|e| e.kind()), Some(T::AddrResolved));
    w.icm().resolve_route(&id).expect("route");
    let e = w.sim.stacks[0].poll_event_of(id.name());
    assert_eq!(e.map(|e| e.kind()), Some(T::RouteResolved));
    let param = ConnParam {
        private_data: login.to_bytes(),
        responder_resources: 4,
        initiator_depth: 0,
        flow_control: true,
        retry_count: 7,
        rnr_retry_count: 7,
    };
    w.icm_with(|cm, s, now| cm.connect(now, s, &id, Some(qpn), &param))
        .expect("connect");
    assert!(w.run(|w| w
        .i
        .events
        .iter()
        .any(|e| matches!(e.kind(), T::Established | T::Rejected))));
    let ev = w
        .take_event(T::Established)
        .or_else(|| w.take_event(T::Rejected))
        .expect("answer");
    (Chan { qpn, id, base }, ev)
}

fn logged_in(w: &mut World, multi: bool, base: u64) -> (Chan, LoginRspRepr) {
    let (c, ev) = dial(w, &login_req(multi), base);
    assert_eq!(ev.kind(), T::Established, "{:?}", w.t.events);
    let rsp = LoginRspRepr::parse(ev.private_data()).expect("login rsp");
    // The target sees the RTU and goes live.
    assert!(w.run(|w| w
        .t
        .engine
        .channels()
        .iter()
        .any(|(_, s)| *s == ChannelState::Live)));
    (c, rsp)
}

/// Sends an IU from slot `slot` of the initiator's IU memory on channel `c`.
fn send_iu(w: &mut World, c: &Chan, slot: u64, bytes: &[u8]) {
    let addr = (c.base + 100 + slot) * IU;
    stack(&mut w.sim.stacks[0], w.i.port)
        .verbs
        .local_write(w.i.iu.lkey, addr, bytes)
        .expect("write iu");
    let wr = SendWr::new(addr, SendOp::Send).with_sge(Sge {
        addr,
        length: bytes.len() as u32,
        lkey: w.i.iu.lkey,
    });
    stack(&mut w.sim.stacks[0], w.i.port)
        .post_send(c.qpn, wr)
        .expect("send");
}

/// Waits for the next SRP_RSP on channel `c` and reposts its buffer.
fn next_rsp(w: &mut World, c: &Chan) -> RspRepr {
    let qpn = c.qpn;
    assert!(w.run(|w| w
        .i
        .wcs
        .iter()
        .any(|wc| wc.qp_num == qpn && wc.opcode == WcOpcode::Recv)));
    let i =
        w.i.wcs
            .iter()
            .position(|wc| wc.qp_num == qpn && wc.opcode == WcOpcode::Recv)
            .expect("recv");
    let wc = w.i.wcs.remove(i);
    assert_eq!(wc.status, WcStatus::Success);
    let mut b = vec![0u8; wc.byte_len as usize];
    stack(&mut w.sim.stacks[0], w.i.port)
        .verbs
        .local_read(w.i.iu.lkey, wc.wr_id, &mut b)
        .expect("read");
    stack(&mut w.sim.stacks[0], w.i.port)
        .post_recv(
            qpn,
            RecvWr::new(
                wc.wr_id,
                vec![Sge {
                    addr: wc.wr_id,
                    length: IU as u32,
                    lkey: w.i.iu.lkey,
                }],
            ),
        )
        .expect("repost");
    RspRepr::parse(&b).expect("srp_rsp")
}

fn rw10(op: u8, lba: u32, blocks: u16) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = op;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn cmd(tag: u64, cdb: [u8; 16]) -> CmdRepr {
    CmdRepr {
        tag,
        cdb,
        ..CmdRepr::default()
    }
}

fn direct(off: u64, len: u32, key: u32) -> DirectBuf {
    DirectBuf {
        va: DATA + off,
        key,
        len,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn put_data(w: &mut World, off: u64, b: &[u8]) {
    stack(&mut w.sim.stacks[0], w.i.port)
        .verbs
        .local_write(w.i.data.lkey, DATA + off, b)
        .expect("data");
}

fn get_data(w: &mut World, off: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    stack(&mut w.sim.stacks[0], w.i.port)
        .verbs
        .local_read(w.i.data.lkey, DATA + off, &mut b)
        .expect("data");
    b
}

/// A command that clears the power-on unit attention.
fn tur(w: &mut World, c: &Chan) {
    send_iu(w, c, 0, &cmd(1, [0; 16]).to_bytes());
    let r = next_rsp(w, c);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    send_iu(w, c, 0, &cmd(1, [0; 16]).to_bytes());
    assert!(next_rsp(w, c).status == ScsiStatus::GOOD);
}

#[test]
fn login_response_and_channel_lifecycle() {
    let mut w = world();
    let (c, rsp) = logged_in(&mut w, false, 0);
    assert_eq!(rsp.req_lim_delta, 128);
    assert_eq!(rsp.max_it_iu_len, 8276);
    assert_eq!(rsp.max_ti_iu_len, 8260);
    assert_eq!(rsp.buf_fmt, 6);
    assert!(rsp.immediate_supported());
    assert_eq!(rsp.multichannel_result(), MultiChannelResult::NO_CHAN);
    let states: Vec<_> =
        w.t.events
            .iter()
            .filter_map(|e| match e {
                SrpEvent::StateChanged { from, to, .. } => Some((*from, *to)),
                _ => None,
            })
            .collect();
    assert_eq!(states, vec![(ChannelState::Connecting, ChannelState::Live)]);
    tur(&mut w, &c);
    // The initiator disconnects: DREQ → DISCONNECTING (DREP sent), then timewait exit →
    // DRAINING → DISCONNECTED, and the channel is gone.
    w.icm_with(|cm, s, now| cm.disconnect(now, s, &c.id))
        .expect("dreq");
    assert!(w.run(|w| w.t.engine.channels().is_empty()));
    let states: Vec<_> =
        w.t.events
            .iter()
            .filter_map(|e| match e {
                SrpEvent::StateChanged { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
    assert_eq!(
        states,
        vec![
            ChannelState::Live,
            ChannelState::Disconnecting,
            ChannelState::Draining,
            ChannelState::Disconnected
        ]
    );
    // A target logout (shutdown): our DREQ, the initiator's DREP.
    let (c2, _) = logged_in(&mut w, false, 20);
    let now = w.sim.now;
    let t = &mut w.t;
    w.sim.stacks[1]
        .with_port(now, t.port, |cm, s| {
            t.engine.logout_all(now, cm, s, t.tport)
        })
        .expect("port");
    assert!(w.run(|w| w.i.events.iter().any(|e| e.kind() == T::Disconnected)));
    let _ = w.icm_with(|cm, s, now| cm.disconnect(now, s, &c2.id));
    assert!(w.run(|w| w.t.engine.channels().is_empty()));
    assert!(w.t.events.iter().any(|e| matches!(
        e,
        SrpEvent::Logout {
            by: softrdma_srp::LogoutBy::Target,
            ..
        }
    )));
}

fn rejected(w: &mut World, login: &LoginReqRdmaRepr) -> LoginRejRepr {
    let (_, ev) = dial(w, login, 40);
    assert_eq!(ev.kind(), T::Rejected);
    assert!(ev.is_consumer_reject());
    LoginRejRepr::parse(ev.consumer_reject_data().expect("data")).expect("login rej")
}

#[test]
fn login_refusals_in_order() {
    // Everything wrong at once; each fix exposes the next check.
    let mut w = world_with(|c| {
        c.login.acl = Some(vec![AclEntry::PortId([0x22; 16])]);
    });
    let mut l = login_req(false);
    l.req_it_iu_len = 9000;
    l.target_port_id[3] ^= 1;
    assert_eq!(rejected(&mut w, &l).reason.0, 0x0001_0002);
    l.req_it_iu_len = 8260;
    assert_eq!(rejected(&mut w, &l).reason.0, 0x0001_0003);
    l.target_port_id = target_port_id();
    let rej = rejected(&mut w, &l);
    assert_eq!(rej.reason.0, 0x0001_0006);
    assert_eq!(rej.buf_fmt, 6);
    // Disabled port: INSUFFICIENT RESOURCES (after the IU length, before the port id).
    w.t.engine.set_enabled(false);
    let mut l2 = login_req(false);
    l2.target_port_id[0] ^= 1;
    assert_eq!(rejected(&mut w, &l2).reason.0, 0x0001_0001);
    w.t.engine.set_enabled(true);
    // Allowed by source address (the initiator's, not the target's).
    let mut w =
        world_with(|c| c.login.acl = Some(vec![AclEntry::Addr("10.0.0.1".parse().unwrap())]));
    let (_c, rsp) = logged_in(&mut w, false, 0);
    assert_eq!(rsp.req_lim_delta, 128);
    // No CM id is left behind by the refusals.
    assert_eq!(w.t.engine.channels().len(), 1);
}

#[test]
fn multichannel_single_and_multi() {
    let mut w = world_with(|c| c.login.channels_per_initiator = Some(2));
    let (c1, _) = logged_in(&mut w, false, 0);
    let (c2, rsp) = logged_in(&mut w, true, 20);
    assert_eq!(rsp.multichannel_result(), MultiChannelResult::MAINTAINED);
    // A third MULTI channel is over the limit.
    assert_eq!(rejected(&mut w, &login_req(true)).reason.0, 0x0001_0006);
    // I/O on both channels of the nexus.
    tur(&mut w, &c1);
    let key = w.i.data.rkey;
    put_data(&mut w, 0, &pattern(4096, 1));
    send_iu(
        &mut w,
        &c2,
        1,
        &CmdRepr {
            data_out: DataDescriptor::Direct(direct(0, 4096, key)),
            ..cmd(7, rw10(0x2a, 8, 8))
        }
        .to_bytes(),
    );
    assert_eq!(next_rsp(&mut w, &c2).status, ScsiStatus::GOOD);
    send_iu(
        &mut w,
        &c1,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Direct(direct(8192, 4096, key)),
            ..cmd(8, rw10(0x28, 8, 8))
        }
        .to_bytes(),
    );
    assert_eq!(next_rsp(&mut w, &c1).status, ScsiStatus::GOOD);
    assert_eq!(get_data(&mut w, 8192, 4096), pattern(4096, 1));
    // SINGLE: the others are terminated.
    let (_c3, rsp) = logged_in(&mut w, false, 40);
    assert_eq!(rsp.multichannel_result(), MultiChannelResult::TERMINATED);
    assert!(w.run(|w| w
        .i
        .events
        .iter()
        .filter(|e| e.kind() == T::Disconnected)
        .count()
        == 2));
    let _ = (c1, c2);
}

#[test]
fn io_direct_indirect_immediate_and_splitting() {
    let mut w = world();
    let (c, _) = logged_in(&mut w, false, 0);
    tur(&mut w, &c);
    let key = w.i.data.rkey;
    // Immediate data: a 4 KiB WRITE carried in the IU.
    let mut r = cmd(10, rw10(0x2a, 0, 8));
    r.set_immediate_data(68, &pattern(4096, 3));
    send_iu(&mut w, &c, 1, &r.to_bytes());
    assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
    // Direct data-in: READ it back into one buffer (4 RDMA WRITE packets at MTU 1024).
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Direct(direct(0, 4096, key)),
            ..cmd(11, rw10(0x28, 0, 8))
        }
        .to_bytes(),
    );
    assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
    assert_eq!(get_data(&mut w, 0, 4096), pattern(4096, 3));
    // Indirect data-out: 256 KiB from three scattered pieces (one RDMA READ each, split into
    // MTU-sized response packets by the transport).
    let big = pattern(256 << 10, 9);
    let pieces = [
        (0x1_0000u64, 100 << 10),
        (0x8_0000, 60 << 10),
        (0x4_0000, 96 << 10),
    ];
    let mut off = 0;
    let mut descs = Vec::new();
    for (at, len) in pieces {
        put_data(&mut w, at, &big[off..off + len]);
        descs.push(direct(at, len as u32, key));
        off += len;
    }
    let ind = |descs: Vec<DirectBuf>| IndirectBuf {
        table: DirectBuf {
            va: 0,
            key: 0,
            len: 16 * descs.len() as u32,
        },
        total_len: descs.iter().map(|d| d.len).sum(),
        descs,
    };
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_out: DataDescriptor::Indirect(ind(descs)),
            ..cmd(12, rw10(0x2a, 100, 512))
        }
        .to_bytes(),
    );
    assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
    // Indirect data-in into two other pieces.
    let out = [(0x10_0000u64, 200 << 10), (0x14_0000, 56 << 10)];
    let descs: Vec<_> = out
        .iter()
        .map(|(a, l)| direct(*a, *l as u32, key))
        .collect();
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Indirect(ind(descs)),
            ..cmd(13, rw10(0x28, 100, 512))
        }
        .to_bytes(),
    );
    let r = next_rsp(&mut w, &c);
    assert_eq!(r.status, ScsiStatus::GOOD);
    let mut back = get_data(&mut w, 0x10_0000, 200 << 10);
    back.extend(get_data(&mut w, 0x14_0000, 56 << 10));
    assert_eq!(back, big);
    // A short allocation: INQUIRY into a 255-byte buffer → DIUNDER residual.
    let mut inq = [0u8; 16];
    inq[0] = 0x12;
    inq[4] = 0xff;
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Direct(direct(0, 255, key)),
            ..cmd(14, inq)
        }
        .to_bytes(),
    );
    let r = next_rsp(&mut w, &c);
    assert!(r.flags.diunder());
    assert_eq!(r.data_in_res_cnt, 255 - 96);
    assert_eq!(&get_data(&mut w, 8, 8), b"LIO-ORG ");
    // An LBA out of range: CHECK CONDITION with sense.
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Direct(direct(0, 512, key)),
            ..cmd(15, rw10(0x28, 1 << 20, 1))
        }
        .to_bytes(),
    );
    let r = next_rsp(&mut w, &c);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    assert!(r.flags.snsvalid());
    assert_eq!((r.sense_data[2], r.sense_data[12]), (5, 0x21));
    // Every response returned one credit.
    assert_eq!(r.req_lim_delta, 1);
}

/// UNMAP, WRITE SAME and COMPARE AND WRITE through SRP, on a LUN in the SCSI core and on a
/// medium lent to the device (where the core works on the MR's bytes): data-out as
/// immediate data and by RDMA READ, data-in read back.
#[test]
fn provisioning_offloads_through_srp() {
    for lend in [false, true] {
        let mut w = world_full(lend, |_| {});
        let (c, _) = logged_in(&mut w, false, 0);
        tur(&mut w, &c);
        let key = w.i.data.rkey;
        let mut r = cmd(10, rw10(0x2a, 0, 8));
        r.set_immediate_data(68, &[0xab; 4096]);
        send_iu(&mut w, &c, 1, &r.to_bytes());
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
        // UNMAP blocks 2..6, the parameter list as immediate data.
        let mut list = vec![0, 22, 0, 16, 0, 0, 0, 0];
        list.extend_from_slice(&2u64.to_be_bytes());
        list.extend_from_slice(&4u32.to_be_bytes());
        list.extend_from_slice(&[0; 4]);
        let mut u = cmd(11, rw10(0x42, 0, 24));
        u.set_immediate_data(68, &list);
        send_iu(&mut w, &c, 1, &u.to_bytes());
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD, "lend {lend}");
        // WRITE SAME(10) of block 7 from one block fetched by RDMA READ.
        put_data(&mut w, 0x2_0000, &[0x5c; 512]);
        send_iu(
            &mut w,
            &c,
            1,
            &CmdRepr {
                data_out: DataDescriptor::Direct(direct(0x2_0000, 512, key)),
                ..cmd(12, rw10(0x41, 7, 1))
            }
            .to_bytes(),
        );
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD, "lend {lend}");
        send_iu(
            &mut w,
            &c,
            1,
            &CmdRepr {
                data_in: DataDescriptor::Direct(direct(0, 4096, key)),
                ..cmd(13, rw10(0x28, 0, 8))
            }
            .to_bytes(),
        );
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
        let d = get_data(&mut w, 0, 4096);
        assert!(d[..1024].iter().all(|b| *b == 0xab), "lend {lend}");
        assert!(d[1024..3072].iter().all(|b| *b == 0), "lend {lend}");
        assert!(d[3072..3584].iter().all(|b| *b == 0xab), "lend {lend}");
        assert!(d[3584..].iter().all(|b| *b == 0x5c), "lend {lend}");
        // COMPARE AND WRITE of block 0 that differs at byte 10: MISCOMPARE, INFORMATION 10.
        let mut caw = [0u8; 16];
        caw[0] = 0x89;
        caw[13] = 1;
        let mut data = vec![0xab; 512];
        data[10] = 0;
        data.extend_from_slice(&[0x01; 512]);
        let mut x = cmd(14, caw);
        x.set_immediate_data(68, &data);
        send_iu(&mut w, &c, 1, &x.to_bytes());
        let r = next_rsp(&mut w, &c);
        assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
        assert_eq!(r.sense_data[0], 0xf0);
        assert_eq!(&r.sense_data[3..7], &[0, 0, 0, 10]);
        assert_eq!((r.sense_data[2], r.sense_data[12]), (0x0e, 0x1d));
        // ... and one that matches writes.
        data[10] = 0xab;
        let mut x = cmd(15, caw);
        x.set_immediate_data(68, &data);
        send_iu(&mut w, &c, 1, &x.to_bytes());
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD, "lend {lend}");
        send_iu(
            &mut w,
            &c,
            1,
            &CmdRepr {
                data_in: DataDescriptor::Direct(direct(0, 512, key)),
                ..cmd(16, rw10(0x28, 0, 1))
            }
            .to_bytes(),
        );
        assert_eq!(next_rsp(&mut w, &c).status, ScsiStatus::GOOD);
        assert!(get_data(&mut w, 0, 512).iter().all(|b| *b == 0x01));
    }
}

/// Persistent reservations between two I_T nexuses of one initiator: two logins whose
/// initiator port identifiers differ only in `initiator_ext` register, one reserves Write
/// Exclusive, the other's WRITE gets RESERVATION CONFLICT and its READ goes through; PREEMPT
/// AND ABORT takes the reservation over.
#[test]
fn persistent_reservations_between_two_initiator_exts() {
    let mut w = world();
    let (a, _) = logged_in(&mut w, true, 0);
    let mut second = login_req(true);
    second.initiator_port_id[7] = 0x12; // initiator_ext differs
    let (b, ev) = dial(&mut w, &second, 20);
    assert_eq!(ev.kind(), T::Established);
    assert!(w.run(|w| w
        .t
        .engine
        .channels()
        .iter()
        .filter(|(_, s)| *s == ChannelState::Live)
        .count()
        == 2));
    tur(&mut w, &a);
    tur(&mut w, &b);
    let key = w.i.data.rkey;
    let pr_out = |tag: u64, sa: u8, ty: u8, k: u64, sk: u64| {
        let mut c = [0u8; 16];
        c[0] = 0x5f;
        c[1] = sa;
        c[2] = ty;
        c[8] = 24;
        let mut p = vec![0u8; 24];
        p[..8].copy_from_slice(&k.to_be_bytes());
        p[8..16].copy_from_slice(&sk.to_be_bytes());
        let mut r = cmd(tag, c);
        r.set_immediate_data(68, &p);
        r.to_bytes()
    };
    send_iu(&mut w, &a, 1, &pr_out(20, 0, 0, 0, 0xa));
    assert_eq!(next_rsp(&mut w, &a).status, ScsiStatus::GOOD);
    send_iu(&mut w, &b, 1, &pr_out(21, 0, 0, 0, 0xb));
    assert_eq!(next_rsp(&mut w, &b).status, ScsiStatus::GOOD);
    send_iu(&mut w, &a, 1, &pr_out(22, 1, 1, 0xa, 0));
    assert_eq!(next_rsp(&mut w, &a).status, ScsiStatus::GOOD);
    // b's WRITE (immediate data): RESERVATION CONFLICT; its READ: GOOD.
    let mut wr = cmd(23, rw10(0x2a, 0, 1));
    wr.set_immediate_data(68, &[1; 512]);
    send_iu(&mut w, &b, 1, &wr.to_bytes());
    let r = next_rsp(&mut w, &b);
    assert_eq!(r.status, ScsiStatus::RESERVATION_CONFLICT);
    assert!(!r.flags.snsvalid());
    send_iu(
        &mut w,
        &b,
        1,
        &CmdRepr {
            data_in: DataDescriptor::Direct(direct(0, 512, key)),
            ..cmd(24, rw10(0x28, 0, 1))
        }
        .to_bytes(),
    );
    assert_eq!(next_rsp(&mut w, &b).status, ScsiStatus::GOOD);
    // b preempts a's key and aborts: b holds it now, a's WRITE conflicts.
    send_iu(&mut w, &b, 1, &pr_out(25, 5, 1, 0xb, 0xa));
    assert_eq!(next_rsp(&mut w, &b).status, ScsiStatus::GOOD);
    send_iu(&mut w, &b, 1, &wr.to_bytes());
    assert_eq!(next_rsp(&mut w, &b).status, ScsiStatus::GOOD);
    // a: first its unit attention (REGISTRATIONS PREEMPTED), then the conflict.
    send_iu(&mut w, &a, 1, &wr.to_bytes());
    let r = next_rsp(&mut w, &a);
    assert_eq!(r.status, ScsiStatus::RESERVATION_CONFLICT);
    send_iu(&mut w, &a, 1, &cmd(26, [0; 16]).to_bytes());
    let r = next_rsp(&mut w, &a);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    assert_eq!(
        (r.sense_data[2], r.sense_data[12], r.sense_data[13]),
        (6, 0x2a, 0x05)
    );
}

#[test]
fn task_management() {
    let mut w = world();
    let (c, _) = logged_in(&mut w, false, 0);
    tur(&mut w, &c);
    let tmf = |tag, f: TaskMgmtFunction, task_tag, lun: u64| {
        TskMgmtRepr {
            sol_not: 0,
            tag,
            lun,
            function: f,
            task_tag,
        }
        .to_bytes()
    };
    // ABORT TASK of a task that is not there: FAILED, as ib_srpt maps TASK DOES NOT EXIST.
    send_iu(
        &mut w,
        &c,
        2,
        &tmf(50, TaskMgmtFunction::ABORT_TASK, 999, 0),
    );
    assert_eq!(next_rsp(&mut w, &c).rsp_code(), Some(RspCode::FAILED));
    // ABORT TASK of a WRITE whose RDMA READ is in flight: the task ends without a
    // response, the TMF succeeds and the credit comes back with the next response.
    let key = w.i.data.rkey;
    w.sim.net.delay = softrdma_core::time::Duration::from_millis(5);
    send_iu(
        &mut w,
        &c,
        1,
        &CmdRepr {
            data_out: DataDescriptor::Direct(direct(0, 64 << 10, key)),
            ..cmd(60, rw10(0x2a, 0, 128))
        }
        .to_bytes(),
    );
    send_iu(&mut w, &c, 2, &tmf(61, TaskMgmtFunction::ABORT_TASK, 60, 0));
    let r = next_rsp(&mut w, &c);
    assert_eq!(r.tag, 61);
    assert_eq!(r.rsp_code(), Some(RspCode::COMPLETE));
    w.sim.net.delay = softrdma_core::time::Duration::from_micros(10);
    for (tag, f, want) in [
        (70, TaskMgmtFunction::ABORT_TASK_SET, RspCode::COMPLETE),
        (71, TaskMgmtFunction::CLEAR_TASK_SET, RspCode::COMPLETE),
        (72, TaskMgmtFunction::LUN_RESET, RspCode::COMPLETE),
        (73, TaskMgmtFunction::CLEAR_ACA, RspCode::NOT_SUPPORTED),
        (74, TaskMgmtFunction(0x20), RspCode::NOT_SUPPORTED),
    ] {
        send_iu(&mut w, &c, 2, &tmf(tag, f, 0, 0));
        let r = next_rsp(&mut w, &c);
        assert_eq!((r.tag, r.rsp_code()), (tag, Some(want)), "{f:?}");
    }
    // A missing LUN: FAILED.
    send_iu(
        &mut w,
        &c,
        2,
        &tmf(75, TaskMgmtFunction::LUN_RESET, 0, 0x0005_0000_0000_0000),
    );
    assert_eq!(next_rsp(&mut w, &c).rsp_code(), Some(RspCode::FAILED));
    // After the LUN RESET the next command sees BUS DEVICE RESET FUNCTION OCCURRED; the
    // aborted WRITE's credit came back in one of the responses (1 + 1).
    send_iu(&mut w, &c, 1, &cmd(80, [0; 16]).to_bytes());
    let r = next_rsp(&mut w, &c);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    assert_eq!((r.sense_data[12], r.sense_data[13]), (0x29, 0x03));
}

#[test]
fn ib_cm_login_and_io() {
    let mut w = world();
    let qpn = rc_qp(&mut w);
    for k in 0..16 {
        let addr = k * IU;
        stack(&mut w.sim.stacks[0], w.i.port)
            .post_recv(
                qpn,
                RecvWr::new(
                    addr,
                    vec![Sge {
                        addr,
                        length: IU as u32,
                        lkey: w.i.iu.lkey,
                    }],
                ),
            )
            .expect("recv");
    }
    let login = LoginReqRepr::from(login_req(false));
    let mut pd = login.to_bytes();
    pd.resize(92, 0);
    let (a, b) = (Gid::from(ip(&w, 0)), Gid::from(ip(&w, 1)));
    let mut p = ReqParams {
        path_mtu: PathMtu(3),
        ..ReqParams::new(w.i.port, a, b, GUID, qpn)
            .with_starting_psn(0x123)
            .with_private_data(pd[..64].to_vec())
            .with_rdma_depths(4, 0)
    };
    p.primary_path.flow_label = 0x1234;
    p.primary_path.local_ack_timeout = 19;
    let id: CmId = w.icm().cm_mut().create_id();
    w.icm_with(|cm, _, now| cm.cm_mut().send_req(now, &id, &p))
        .expect("req");
    assert!(w.run(|w| w
        .i
        .ib_events
        .iter()
        .any(|e| matches!(e, CmEvent::RepReceived { .. }))));
    let rep = match w.i.ib_events.remove(0) {
        CmEvent::RepReceived { rep, .. } => rep,
        e => panic!("{e:?}"),
    };
    let rsp = LoginRspRepr::parse(&rep.private_data).expect("login rsp");
    assert_eq!(rsp.req_lim_delta, 128);
    assert!(rep.srq);
    assert_eq!((rep.responder_resources, rep.initiator_depth), (4, 4));
    // The initiator's QP to RTR/RTS, then the RTU.
    for st in [QpState::Rtr, QpState::Rts] {
        let (a, m) = w.icm().cm().init_qp_attr(&id, st).expect("attr");
        stack(&mut w.sim.stacks[0], w.i.port)
            .modify_qp(qpn, &a, m)
            .expect("modify");
    }
    w.icm_with(|cm, _, now| cm.cm_mut().send_rtu(now, &id, &[]))
        .expect("rtu");
    assert!(w.run(|w| w
        .t
        .engine
        .channels()
        .iter()
        .any(|(_, s)| *s == ChannelState::Live)));
    let c = Chan {
        qpn,
        id: w.icm().create_id(),
        base: 0,
    };
    tur(&mut w, &c);
    assert!(w
        .t
        .events
        .iter()
        .any(|e| matches!(e, SrpEvent::LoginAccepted { cm: "IB CM", .. })));
    // A login with a wrong target port id over the IB CM: REJ 28 with the SRP_LOGIN_REJ.
    let mut bad = login;
    bad.target_port_id[9] ^= 1;
    let mut p2 = p.clone();
    p2.private_data = bad.to_bytes();
    p2.qp_num = rc_qp(&mut w);
    let id2 = w.icm().cm_mut().create_id();
    w.icm_with(|cm, _, now| cm.cm_mut().send_req(now, &id2, &p2))
        .expect("req");
    assert!(w.run(|w| w
        .i
        .ib_events
        .iter()
        .any(|e| matches!(e, CmEvent::RejReceived { .. }))));
    let rej =
        w.i.ib_events
            .iter()
            .find_map(|e| match e {
                CmEvent::RejReceived { rej, .. } => Some(rej.clone()),
                _ => None,
            })
            .expect("rej");
    assert_eq!(rej.reason.0, 28);
    assert_eq!(
        LoginRejRepr::parse(&rej.private_data)
            .expect("rej")
            .reason
            .0,
        0x0001_0003
    );
}
