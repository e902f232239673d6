//! RDMA CM tests: two stacks in the simulated network, MADs through each stack's GSI QP
//! (GsiPort), QPs moved by the RDMA CM; then an RC SEND over the connection.

use std::net::IpAddr;

use softrdma_wire::cm::{AttrId, CmMessage, RejectReason};
use softrdma_wire::mad::Mad;
use softrdma_wire::rdma_cm::IpCmHeader;
use softrdma_wire::roce::RoceRepr;
use softrdma_wire::Guid;

use super::*;
use crate::cm::CmPort;
use crate::cm::{CmConfig, RXE_CA_ACK_DELAY};
use crate::mad::MadPort;
use crate::sim::{NetConfig, Sim};
use crate::verbs::{CqId, QpCap, QpInitAttr, QpType};

struct Node {
    mad: MadPort,
    port: CmPort,
    cm: RdmaCm,
    cq: CqId,
    qpn: u32,
    mr: crate::verbs::MrKeys,
    events: Vec<RdmaCmEvent>,
}

fn node(sim: &mut Sim, i: usize) -> Node {
    let s = &mut sim.stacks[i];
    let mut mad = MadPort::open(s, 2, 16).expect("qp1");
    let pd = s.verbs.alloc_pd().expect("pd");
    let cq = s.verbs.create_cq(64).expect("cq");
    let (qpn, _) = s
        .verbs
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })
        .expect("qp");
    RdmaCm::init_qp(s, qpn).expect("init");
    let mr = s
        .verbs
        .reg_mr(pd, 64, 0x1000, crate::verbs::AccessFlags::LOCAL_WRITE)
        .expect("mr");
    let mut cm = RdmaCm::new(CmConfig {
        node_guid: Guid(0x5054_00ff_fe77_0000 + i as u64),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed: 11 + i as u64,
    })
    .expect("cm");
    let port = cm.add_port(mad.agent_mut()).expect("port");
    Node {
        mad,
        port,
        cm,
        cq,
        qpn,
        mr,
        events: Vec::new(),
    }
}

fn pair() -> (Sim, Vec<Node>) {
    let mut sim = Sim::new(2, NetConfig::PERFECT, 5);
    sim.record = true;
    let nodes = vec![node(&mut sim, 0), node(&mut sim, 1)];
    (sim, nodes)
}

/// Runs the network, QP1 and both RDMA CMs until `done` or nothing is left to do.
fn pump(sim: &mut Sim, nodes: &mut [Node], mut done: impl FnMut(&[Node]) -> bool) -> bool {
    for _ in 0..10_000 {
        let now = sim.now;
        for (i, n) in nodes.iter_mut().enumerate() {
            turn(now, n, &mut sim.stacks[i]);
        }
        if done(nodes) {
            return true;
        }
        if !sim.step() {
            return done(nodes);
        }
    }
    false
}

/// The call order of `crate::mad::port` on one node (no other MAD clients).
fn turn(now: Instant, n: &mut Node, s: &mut Stack) {
    n.mad.poll(now, s);
    n.mad.handle_timeout(now);
    while let Some(ev) = n.mad.poll_event() {
        n.cm.handle_mad(now, n.port, s, ev);
    }
    if n.cm.poll_timeout().is_some_and(|t| t <= now) {
        n.cm.handle_timeout(now);
    }
    apply_ops(n);
    n.mad.flush(s);
    n.events.extend(std::iter::from_fn(|| n.cm.poll_event()));
}

fn apply_ops(n: &mut Node) {
    while let Some((port, agent, op)) = n.cm.poll_mad() {
        assert_eq!(port, n.port);
        let _ = n.mad.agent_mut().apply(agent, op);
    }
}

fn has(n: &Node, t: RdmaCmEventType) -> bool {
    n.events.iter().any(|e| e.event == t)
}

fn take(n: &mut Node, t: RdmaCmEventType) -> RdmaCmEvent {
    let i = n
        .events
        .iter()
        .position(|e| e.event == t)
        .unwrap_or_else(|| panic!("no {t:?} in {:?}", n.events));
    n.events.remove(i)
}

fn param(pd: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pd.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

/// CM messages on the wire, in order: (from node, message).
fn cm_log(sim: &Sim) -> Vec<(usize, CmMessage)> {
    sim.tap
        .iter()
        .filter_map(|(from, _, p)| {
            let r = RoceRepr::parse(p).ok()?;
            if r.bth.dest_qp != 1 {
                return None;
            }
            let m = Mad::parse(r.payload).ok()?;
            Some((*from, CmMessage::from_mad(&m).ok()?))
        })
        .collect()
}

fn attrs(log: &[(usize, CmMessage)]) -> Vec<AttrId> {
    log.iter().map(|(_, m)| m.attr_id()).collect()
}

/// Node 1 listens on 10.0.0.2:7174, node 0 connects; returns the passive id.
fn connected(sim: &mut Sim, n: &mut [Node]) -> (RdmaId, RdmaId) {
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let l = n[1].cm.listen(b, 7174).expect("listen");
    let qa = n[0].qpn;
    let ca = n[0]
        .cm
        .connect(
            sim.now,
            n[0].port,
            &mut sim.stacks[0],
            a,
            b,
            7174,
            qa,
            &param(b"hello"),
        )
        .expect("connect");
    assert!(pump(sim, n, |n| has(
        &n[1],
        RdmaCmEventType::ConnectRequest
    )));
    let req = take(&mut n[1], RdmaCmEventType::ConnectRequest);
    assert_eq!(req.listen_id, Some(l));
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 92 - 36);
    assert_eq!(n[1].cm.remote_addr(req.id).map(|r| r.0), Some(a));
    // The delayed MRA is prepared, not sent.
    assert_eq!(n[1].cm.cm_state(req.id), Some(CmState::MraReqSent));
    let qb = n[1].qpn;
    n[1].cm
        .accept(sim.now, &mut sim.stacks[1], req.id, qb, &param(b""))
        .expect("accept");
    assert!(pump(sim, n, |n| has(&n[0], RdmaCmEventType::Established)
        && has(&n[1], RdmaCmEventType::Established)));
    take(&mut n[0], RdmaCmEventType::Established);
    take(&mut n[1], RdmaCmEventType::Established);
    (ca, req.id)
}

#[test]
fn connect_accept_send_disconnect() {
    let (mut sim, mut n) = pair();
    let (ca, sb) = connected(&mut sim, &mut n);
    for (i, id) in [(0, ca), (1, sb)] {
        let qpn = n[i].cm.qpn(id).expect("qpn");
        assert_eq!(
            sim.stacks[i].verbs.qp(qpn).expect("qp").state(),
            QpState::Rts
        );
    }
    // The REQ on the wire is the kernel's: header, timeouts, retries, hop limit, PLT.
    let log = cm_log(&sim);
    assert_eq!(attrs(&log), vec![AttrId::REQ, AttrId::REP, AttrId::RTU]);
    let CmMessage::Req(req) = &log[0].1 else {
        panic!()
    };
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    let h = IpCmHeader::parse(&req.private_data).expect("hdr");
    assert_eq!(
        (h.cma_version, h.ip_version, h.src_ip(), h.dst_ip()),
        (0, 4, Some(sim.addrs[0]), Some(sim.addrs[1]))
    );
    assert!(h.src_port >= 32768);
    assert_eq!(
        (
            req.remote_cm_response_timeout,
            req.local_cm_response_timeout,
            req.max_cm_retries,
            req.retry_count,
            req.rnr_retry_count,
            req.primary_path.hop_limit,
            req.primary_path.local_ack_timeout,
            req.path_mtu.0,
        ),
        (20, 20, 15, 7, 7, 64, 19, 3)
    );
    assert_eq!(
        req.primary_path.flow_label,
        roce_udp_flow_label(h.src_port, 7174)
    );
    // The kernel's (b_rping.pcap): source port 0x90f2 → 0x1a954.
    assert_eq!(roce_udp_flow_label(0x90f2, 7174), 0x1a954);
    let CmMessage::Rep(rep) = &log[1].1 else {
        panic!()
    };
    assert_eq!(rep.target_ack_delay, 15);
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
    assert_eq!(rep.private_data, [0u8; 196]);

    // Disconnect from the active side: DREQ/DREP, both DISCONNECTED.
    n[0].cm
        .disconnect(sim.now, &mut sim.stacks[0], ca)
        .expect("dreq");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[1],
        RdmaCmEventType::Disconnected
    )));
    n[1].cm
        .disconnect(sim.now, &mut sim.stacks[1], sb)
        .expect("drep");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Disconnected
    )));
    let log = cm_log(&sim);
    assert_eq!(attrs(&log)[3..], [AttrId::DREQ, AttrId::DREP]);
    for (i, x) in n.iter().enumerate() {
        let qpn = x.qpn;
        assert_eq!(
            sim.stacks[i].verbs.qp(qpn).expect("qp").state(),
            QpState::Err
        );
    }
    // TIMEWAIT_EXIT after the timewait.
    for _ in 0..10 {
        let t = [0, 1].iter().filter_map(|&i| n[i].cm.poll_timeout()).min();
        let Some(t) = t else { break };
        sim.now = sim.now.max(t);
        for (i, x) in n.iter_mut().enumerate() {
            turn(sim.now, x, &mut sim.stacks[i]);
        }
    }
    assert!(has(&n[0], RdmaCmEventType::TimewaitExit));
    assert!(has(&n[1], RdmaCmEventType::TimewaitExit));
}

/// A SEND each way over the connection the RDMA CM set up: the QPs' PSNs agree the way
/// cm.c sets them (the REQ's starting PSN is where the active side's RQ starts, the REP's
/// where the passive side's does; rxe's SEND from the kernel's active side carried the REP's
/// PSN in rping_host_server).
#[test]
fn data_flows_both_ways_with_crossed_psns() {
    use crate::verbs::{RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
    let (mut sim, mut n) = pair();
    connected(&mut sim, &mut n);
    let log = cm_log(&sim);
    let (CmMessage::Req(req), CmMessage::Rep(rep)) = (&log[0].1, &log[1].1) else {
        panic!()
    };
    let (req_psn, rep_psn) = (req.starting_psn, rep.starting_psn);
    sim.tap.clear();
    for (from, to) in [(0usize, 1usize), (1, 0)] {
        let (qf, qt) = (n[from].qpn, n[to].qpn);
        let sge = |m: &Node| Sge {
            addr: 0x1000,
            length: 16,
            lkey: m.mr.lkey,
        };
        sim.stacks[to]
            .post_recv(qt, RecvWr::new(7, vec![sge(&n[to])]))
            .expect("recv");
        sim.stacks[from]
            .post_send(qf, SendWr::new(9, SendOp::Send).with_sge(sge(&n[from])))
            .expect("send");
        let cq = n[to].cq;
        let mut got = None;
        for _ in 0..100 {
            if !sim.step() {
                break;
            }
            // (the first round's SEND completion may sit in the same CQ)
            while let Some(wc) = sim.stacks[to].poll_cq(cq).expect("cq") {
                if wc.opcode == WcOpcode::Recv {
                    got = Some(wc);
                }
            }
            if got.is_some() {
                break;
            }
        }
        let wc = got.expect("receive completion");
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
    }
    // The first data packet from each side carries the PSN its peer's message announced.
    let psns: Vec<(usize, u32)> = sim
        .tap
        .iter()
        .filter_map(|(from, _, p)| {
            let r = RoceRepr::parse(p).ok()?;
            (r.bth.opcode.0 == 4).then(|| (*from, r.bth.psn.value()))
        })
        .collect();
    assert_eq!(psns, vec![(0, rep_psn), (1, req_psn)]);
}

#[test]
fn reject_carries_consumer_data() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    n[1].cm.listen(b, 7174).expect("listen");
    let qa = n[0].qpn;
    n[0].cm
        .connect(
            sim.now,
            CmPort::default(),
            &mut sim.stacks[0],
            a,
            b,
            7174,
            qa,
            &param(b"x"),
        )
        .expect("connect");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[1],
        RdmaCmEventType::ConnectRequest
    )));
    let req = take(&mut n[1], RdmaCmEventType::ConnectRequest);
    n[1].cm.reject(sim.now, req.id, b"go away").expect("rej");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Rejected
    )));
    let e = take(&mut n[0], RdmaCmEventType::Rejected);
    assert_eq!(e.reject_reason, Some(RejectReason::CONSUMER_DEFINED));
    assert_eq!(&e.consumer_reject_data().expect("data")[..7], b"go away");
}

/// cma_ib_acquire_dev: a listener bound to an address the device has no RoCEv2 GID for
/// (so the REQ's destination does not match either) never sees CONNECT_REQUEST; the id is
/// destroyed in REQ_RCVD, which is REJ 28 with no private data.
#[test]
fn req_that_fails_the_checks_is_rejected_28_without_data() {
    let (mut sim, mut m) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let other: IpAddr = "10.0.0.9".parse().expect("ip");
    m[1].cm.listen(other, 7175).expect("listen");
    let q = m[0].qpn;
    m[0].cm
        .connect(
            sim.now,
            CmPort::default(),
            &mut sim.stacks[0],
            a,
            b,
            7175,
            q,
            &param(b""),
        )
        .expect("connect");
    assert!(pump(&mut sim, &mut m, |m| has(
        &m[0],
        RdmaCmEventType::Rejected
    )));
    assert!(!has(&m[1], RdmaCmEventType::ConnectRequest));
    let e = take(&mut m[0], RdmaCmEventType::Rejected);
    assert_eq!(e.reject_reason, Some(RejectReason::CONSUMER_DEFINED));
    assert_eq!(e.private_data, vec![0u8; 148]);
    assert_eq!(attrs(&cm_log(&sim)), vec![AttrId::REQ, AttrId::REJ]);
}

/// The delayed MRA (`ib_prepare_cm_mra`): nothing is sent while the consumer thinks, but a
/// retransmitted REQ is answered with MRA service timeout 24 (CMA_CM_MRA_SETTING); the
/// accept that follows still connects.
#[test]
fn retransmitted_req_gets_the_delayed_mra_then_accept_connects() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    n[1].cm.listen(b, 7174).expect("listen");
    let qa = n[0].qpn;
    n[0].cm
        .connect(
            sim.now,
            CmPort::default(),
            &mut sim.stacks[0],
            a,
            b,
            7174,
            qa,
            &param(b""),
        )
        .expect("connect");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[1],
        RdmaCmEventType::ConnectRequest
    )));
    let req = take(&mut n[1], RdmaCmEventType::ConnectRequest);
    assert_eq!(attrs(&cm_log(&sim)), vec![AttrId::REQ]);
    // The active side's REQ timer runs out: it retransmits.
    let t = n[0].mad.poll_timeout().expect("req timer");
    sim.now = sim.now.max(t);
    let now = sim.now;
    turn(now, &mut n[0], &mut sim.stacks[0]);
    pump(&mut sim, &mut n, |_| false);
    let log = cm_log(&sim);
    assert_eq!(attrs(&log), vec![AttrId::REQ, AttrId::REQ, AttrId::MRA]);
    let CmMessage::Mra(mra) = &log[2].1 else {
        panic!()
    };
    assert_eq!(mra.service_timeout, 24);
    let qb = n[1].qpn;
    n[1].cm
        .accept(sim.now, &mut sim.stacks[1], req.id, qb, &param(b""))
        .expect("accept");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    ) && has(
        &n[1],
        RdmaCmEventType::Established
    )));
}

/// Rule 4 (`cma_ib_check_req_qp_type`): a SIDR_REQ for the RDMA CM's RC listener fails
/// `cma_ib_req_handler`, the IB CM destroys the new id: SIDR_REP status 2 (REJECT) on the
/// wire and no state left. (Before: the id was dropped in a catch-all arm, nothing
/// answered, the id stayed in SIDR_REQ_RCVD.)
#[test]
fn sidr_req_to_an_rc_listener_gets_sidr_rep_reject_and_leaves_no_state() {
    use crate::cm::SidrReqParams;
    use softrdma_wire::cm::SidrStatus;
    use softrdma_wire::rdma_cm::{service_id, PortSpace};
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    n[1].cm.listen(b, 7174).expect("listen");
    let before = n[1].cm.cm().id_count();
    let p = SidrReqParams {
        port: n[0].port,
        peer: MadAddr::gsi(Gid::from(b)),
        service_id: service_id(PortSpace::TCP, 7174),
        partition_key: 0xffff,
        private_data: vec![],
        timeout: crate::time::Duration::from_millis(500),
        max_cm_retries: 2,
    };
    let now = sim.now;
    let ib = n[0].cm.cm_mut().create_id();
    n[0].cm.cm_mut().sidr_req(now, &ib, &p).expect("sidr req");
    let mut reps = Vec::new();
    pump(&mut sim, &mut n, |_| false);
    while let Some(ev) = n[0].cm.poll_ib_event() {
        if let CmEvent::SidrRepReceived { rep, .. } = ev {
            reps.push(rep.status);
        }
    }
    assert_eq!(reps, vec![SidrStatus::REJECT]);
    let log = cm_log(&sim);
    assert!(
        matches!(&log[..], [(0, CmMessage::SidrReq(_)), (1, CmMessage::SidrRep(r))]
        if r.status == SidrStatus::REJECT && r.qpn == 0),
        "{log:?}"
    );
    assert_eq!(n[1].cm.cm().id_count(), before, "no id left behind");
    assert!(n[1].events.is_empty());
    n[0].cm.cm_mut().destroy(now, ib);
}

/// Rule 4 (`cma_ib_check_req_qp_type`): a UC REQ to an RC listener is destroyed in
/// REQ_RCVD: REJ 28 without private data, no CONNECT_REQUEST. (Before: CONNECT_REQUEST.)
#[test]
fn uc_req_to_an_rc_listener_gets_rej_28_without_private_data() {
    use crate::cm::ReqParams;
    use softrdma_wire::cm::{Path, PathMtu, TransportType};
    use softrdma_wire::rdma_cm::{service_id, PortSpace};
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    n[1].cm.listen(b, 7174).expect("listen");
    let before = n[1].cm.cm().id_count();
    let mut pd = IpCmHeader::new(a, 40000, b).to_bytes();
    pd.extend_from_slice(b"uc");
    let p = ReqParams {
        port: n[0].port,
        peer: MadAddr::gsi(Gid::from(b)),
        primary_path: Path {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: Gid::from(a),
            remote_gid: Gid::from(b),
            hop_limit: 64,
            ..Path::default()
        },
        packet_life_time: ROCE_PACKET_LIFE_TIME,
        path_mtu: PathMtu::MTU_1024,
        partition_key: 0xffff,
        service_id: service_id(PortSpace::TCP, 7174),
        qp_num: n[0].qpn,
        transport: TransportType::UC,
        starting_psn: 1,
        private_data: pd,
        responder_resources: 0,
        initiator_depth: 0,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 2,
        srq: false,
        ece_vendor_id: 0,
        ece_attr_mod: 0,
    };
    let now = sim.now;
    let ib = n[0].cm.cm_mut().create_id();
    n[0].cm.cm_mut().send_req(now, &ib, &p).expect("req");
    pump(&mut sim, &mut n, |_| false);
    assert!(!has(&n[1], RdmaCmEventType::ConnectRequest));
    let log = cm_log(&sim);
    assert!(
        matches!(&log[..], [(0, CmMessage::Req(_)), (1, CmMessage::Rej(r))]
        if r.reason == RejectReason::CONSUMER_DEFINED && r.private_data == [0; 148]),
        "{log:?}"
    );
    assert_eq!(n[1].cm.cm().id_count(), before);
    let mut rejected = false;
    while let Some(ev) = n[0].cm.poll_ib_event() {
        rejected |= matches!(ev, CmEvent::RejReceived { .. });
    }
    assert!(rejected);
    n[0].cm.cm_mut().destroy(now, ib);
}
