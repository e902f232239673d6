//! RDMA CM tests: nodes ([`crate::node::Node`]) in the simulated network, each an
//! `RdmaCm` over one or more ports (its devices), MADs through each port's QP1 in the
//! node's call order, QPs moved by the RDMA CM; then RC SENDs over the connection. The
//! application side of each node (its QPs, the events it took) is an [`App`].

use std::net::{IpAddr, SocketAddr};

use softrdma_wire::cm::{AttrId, CmMessage, RejectReason};
use softrdma_wire::mad::Mad;
use softrdma_wire::rdma_cm::IpCmHeader;
use softrdma_wire::roce::RoceRepr;
use softrdma_wire::Guid;

use super::*;
use crate::cm::{CmConfig, CmPort, RXE_CA_ACK_DELAY};
use crate::device::DeviceConfig;
use crate::mad::MadAddr;
use crate::node::Node;
use crate::sim::{NetConfig, Sim};
use crate::verbs::{CqId, MrKeys, QpInitAttr};

#[path = "tests_more.rs"]
mod more;

/// One device of a node: its port (the `stack`-th on the network: `sim.addrs[stack]`), an
/// RC QP.
struct Dev {
    stack: usize,
    port: CmPort,
    cq: CqId,
    qpn: u32,
    mr: MrKeys,
}

/// A node's application: its devices' QPs and the RDMA CM events it took.
struct App {
    devs: Vec<Dev>,
    events: Vec<RdmaCmEvent>,
}

fn rc_qp(s: &mut Stack) -> (CqId, u32, MrKeys) {
    let pd = s.verbs.alloc_pd().expect("pd");
    let cq = s.verbs.create_cq(64).expect("cq");
    let (qpn, _) = s
        .verbs
        .create_qp(QpInitAttr::rc(pd, cq, 16, 16).with_inline(64))
        .expect("qp");
    RdmaCm::init_qp(s, qpn).expect("init");
    let mr = s
        .verbs
        .reg_mr(pd, 64, 0x1000, crate::verbs::AccessFlags::LOCAL_WRITE)
        .expect("mr");
    (cq, qpn, mr)
}

/// A network of nodes, each `(CM seed, devices)`; the devices are numbered across the
/// network in order (device `k` has address `sim.addrs[k]`, 10.0.0.(k+1)).
fn world(seed: u64, nodes: &[(u64, usize)]) -> (Sim<Node>, Vec<App>) {
    let mut rng = crate::rand::Rng::new(seed);
    let mut k = 0;
    let mut hosts = Vec::new();
    let mut apps = Vec::new();
    for &(cm_seed, devices) in nodes {
        let mut node = Node::new(CmConfig {
            node_guid: Guid(0x5054_00ff_fe77_0000 + cm_seed),
            ca_ack_delay: RXE_CA_ACK_DELAY,
            seed: cm_seed,
            ..CmConfig::default()
        })
        .expect("cm");
        let mut devs = Vec::new();
        for _ in 0..devices {
            let stack = Stack::new(
                DeviceConfig::new(format!("sim{k}"), vec![Sim::<Node>::addr(k)]),
                rng.next_u64(),
            );
            let port = node.add_port(stack, 16).expect("port");
            let (cq, qpn, mr) = rc_qp(node.stack_mut(port).expect("port"));
            devs.push(Dev {
                stack: k,
                port,
                cq,
                qpn,
                mr,
            });
            k += 1;
        }
        hosts.push(node);
        apps.push(App {
            devs,
            events: Vec::new(),
        });
    }
    let mut sim = Sim::with_hosts(hosts, NetConfig::PERFECT, seed);
    sim.record = true;
    (sim, apps)
}

fn pair() -> (Sim<Node>, Vec<App>) {
    world(5, &[(11, 1), (12, 1)])
}

/// The stack of the `k`-th device on the network (the one with address `sim.addrs[k]`).
fn st(sim: &mut Sim<Node>, k: usize) -> &mut Stack {
    let mut k = k;
    for n in &mut sim.stacks {
        if k < n.port_count() {
            let p = n.ports().nth(k).expect("port");
            return n.stack_mut(p).expect("port");
        }
        k -= n.port_count();
    }
    panic!("no such device")
}

/// Runs `f` on the RDMA CM of the node that has the `k`-th device on the network, with
/// that device's stack (`Node::with_port`).
fn cmd<R>(
    sim: &mut Sim<Node>,
    k: usize,
    f: impl FnOnce(Instant, &mut RdmaCm, &mut Stack) -> R,
) -> R {
    let (now, ip) = (sim.now, sim.addrs[k]);
    let n = sim
        .stacks
        .iter_mut()
        .find(|n| n.port_for_ip(ip).is_some())
        .expect("a node");
    let port = n.port_for_ip(ip).expect("port");
    n.with_port(now, port, |cm, s| f(now, cm, s)).expect("port")
}

/// Each application takes its RDMA CM events (the ones in `deaf` do not look).
fn take_events(sim: &mut Sim<Node>, apps: &mut [App], deaf: &[usize]) {
    for (i, (n, app)) in sim.stacks.iter_mut().zip(apps.iter_mut()).enumerate() {
        if deaf.contains(&i) {
            continue;
        }
        while let Some(e) = n.poll_rdma_event() {
            app.events.push(e);
        }
    }
}

/// One step of the network while a datagram is in flight or a timer is due; false when
/// neither (the nodes' later timers wait for [`run_timers`]).
fn step(sim: &mut Sim<Node>) -> bool {
    sim.flush();
    let due = sim.next_event().is_some_and(|t| t <= sim.now);
    (sim.in_flight() > 0 || due) && sim.step()
}

/// Runs the network and the nodes until `done` or nothing is left to do but later timers.
fn pump(sim: &mut Sim<Node>, apps: &mut [App], mut done: impl FnMut(&[App]) -> bool) -> bool {
    for _ in 0..10_000 {
        take_events(sim, apps, &[]);
        if done(apps) {
            return true;
        }
        if !step(sim) {
            return done(apps);
        }
    }
    false
}

/// Advances the clock to the earliest timer of any node and runs everyone.
fn run_timers(sim: &mut Sim<Node>, apps: &mut [App]) -> bool {
    let Some(t) = sim.stacks.iter().filter_map(|n| n.poll_timeout()).min() else {
        return false;
    };
    sim.now = sim.now.max(t);
    pump(sim, apps, |_| false);
    true
}

/// Node `h` resolves `id`'s address (from its first device's, to `dst`) and route, with
/// `opts` set in between (as an application sets them before the route), and takes
/// ADDR_RESOLVED and ROUTE_RESOLVED.
fn resolve(sim: &mut Sim<Node>, h: usize, id: &RdmaCmId, dst: SocketAddr, opts: &[RdmaOption]) {
    let n = &mut sim.stacks[h];
    let port = n.ports().next().expect("a port");
    let src = n.stack(port).expect("port").device.addrs()[0];
    n.rdma_mut()
        .resolve_addr(id, Some(src), dst)
        .expect("resolve_addr");
    assert_eq!(
        n.poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::AddrResolved)
    );
    for o in opts {
        n.rdma_mut().set_option(id, *o).expect("option");
    }
    n.rdma_mut().resolve_route(id).expect("resolve_route");
    assert_eq!(
        n.poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::RouteResolved)
    );
}

/// Runs the network until node `h`'s application has a `t` event, and takes it.
fn wait(sim: &mut Sim<Node>, apps: &mut [App], h: usize, t: RdmaCmEventType) -> RdmaCmEvent {
    assert!(pump(sim, apps, |n| has(&n[h], t)), "no {t:?} for node {h}");
    take(&mut apps[h], t)
}

/// Node `h` listens on `addr` with `backlog`.
fn listen(sim: &mut Sim<Node>, h: usize, addr: SocketAddr, backlog: u32) -> RdmaCmId {
    sim.stacks[h]
        .rdma_mut()
        .listen_on(addr, backlog)
        .expect("listen")
}

fn has(n: &App, t: RdmaCmEventType) -> bool {
    n.events.iter().any(|e| e.kind() == t)
}

fn count(n: &App, t: RdmaCmEventType) -> usize {
    n.events.iter().filter(|e| e.kind() == t).count()
}

fn take(n: &mut App, t: RdmaCmEventType) -> RdmaCmEvent {
    let i = n
        .events
        .iter()
        .position(|e| e.kind() == t)
        .unwrap_or_else(|| panic!("no {t:?} in {:?}", n.events));
    n.events.remove(i)
}

fn param(pd: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pd.to_vec(),
        ..ConnParam::default()
    }
}

/// CM messages on the wire, in order: (from stack, message).
fn cm_log(sim: &Sim<Node>) -> Vec<(usize, CmMessage)> {
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

fn sa(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

/// rdma_resolve_addr + rdma_resolve_route + rdma_connect from node `h`'s first device.
fn dial(sim: &mut Sim<Node>, h: usize, app: &App, dst: SocketAddr, pd: &[u8]) -> RdmaCmId {
    let id = sim.stacks[h].rdma_mut().create_id();
    resolve(sim, h, &id, dst, &[]);
    let d = &app.devs[0];
    let (port, qpn, now) = (d.port, d.qpn, sim.now);
    sim.stacks[h]
        .with_port(now, port, |cm, s| {
            cm.connect(now, s, &id, Some(qpn), &param(pd))
        })
        .expect("port")
        .expect("connect");
    id
}

/// Node `h` accepts `id` on the device it is bound to, with that device's QP.
fn accept(sim: &mut Sim<Node>, h: usize, app: &App, id: &RdmaCmId) {
    let now = sim.now;
    let n = &mut sim.stacks[h];
    let port = n.rdma().port_of(id.name()).expect("bound");
    let qpn = app.devs[port.index()].qpn;
    n.with_port(now, port, |cm, s| cm.accept(now, s, id, qpn, &param(b"")))
        .expect("port")
        .expect("accept");
}

/// Node 1 listens on its address, port 7174; node 0 connects; returns (active, listener,
/// passive).
fn connected(sim: &mut Sim<Node>, n: &mut [App]) -> (RdmaCmId, RdmaCmId, RdmaCmId) {
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let l = listen(sim, 1, sa(b, 7174), 0);
    let ca = dial(sim, 0, &n[0], sa(b, 7174), b"hello");
    let req = wait(sim, n, 1, RdmaCmEventType::ConnectRequest);
    assert_eq!(req.listen_id(), Some(l.name()));
    assert_eq!(&req.private_data()[..5], b"hello");
    assert_eq!(req.private_data().len(), 92 - 36);
    let sb = req.into_new_id().expect("new id");
    assert_eq!(
        sim.stacks[1]
            .rdma_mut()
            .remote_addr(sb.name())
            .map(|r| r.ip()),
        Some(a)
    );
    assert_eq!(
        sim.stacks[1].rdma_mut().local_addr(sb.name()),
        Some(sa(b, 7174))
    );
    // The delayed MRA is prepared, not sent.
    assert_eq!(
        sim.stacks[1].rdma_mut().cm_state(sb.name()),
        Some(CmState::MraReqSent)
    );
    accept(sim, 1, &n[1], &sb);
    assert!(pump(sim, n, |n| has(&n[0], RdmaCmEventType::Established)
        && has(&n[1], RdmaCmEventType::Established)));
    let _ = take(&mut n[0], RdmaCmEventType::Established);
    let _ = take(&mut n[1], RdmaCmEventType::Established);
    (ca, l, sb)
}

#[test]
fn connect_accept_send_disconnect() {
    let (mut sim, mut n) = pair();
    let (ca, _l, sb) = connected(&mut sim, &mut n);
    for (i, id) in [(0, &ca), (1, &sb)] {
        let qpn = sim.stacks[i].rdma_mut().qpn(id.name()).expect("qpn");
        assert_eq!(
            st(&mut sim, i).verbs.qp(qpn).expect("qp").state(),
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
    assert!(EPHEMERAL_PORTS.contains(&h.src_port));
    assert_eq!(
        sim.stacks[0]
            .rdma_mut()
            .local_addr(ca.name())
            .map(|a| a.port()),
        Some(h.src_port)
    );
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
    cmd(&mut sim, 0, |now, cm, s| cm.disconnect(now, s, &ca)).expect("dreq");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[1],
        RdmaCmEventType::Disconnected
    )));
    cmd(&mut sim, 1, |now, cm, s| cm.disconnect(now, s, &sb)).expect("drep");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Disconnected
    )));
    let log = cm_log(&sim);
    assert_eq!(attrs(&log)[3..], [AttrId::DREQ, AttrId::DREP]);
    for (i, x) in n.iter().enumerate() {
        assert_eq!(
            st(&mut sim, i).verbs.qp(x.devs[0].qpn).expect("qp").state(),
            QpState::Err
        );
    }
    // TIMEWAIT_EXIT after the timewait.
    for _ in 0..10 {
        if !run_timers(&mut sim, &mut n) {
            break;
        }
    }
    assert!(has(&n[0], RdmaCmEventType::TimewaitExit));
    assert!(has(&n[1], RdmaCmEventType::TimewaitExit));
    sim.stacks[0].rdma_mut().destroy(sim.now, ca);
    sim.stacks[1].rdma_mut().destroy(sim.now, sb);
}

/// A SEND each way over the connection the RDMA CM set up: the QPs' PSNs agree the way
/// cm.c sets them (the REQ's starting PSN is where the active side's RQ starts, the REP's
/// where the passive side's does).
#[test]
fn data_flows_both_ways_with_crossed_psns() {
    use crate::verbs::{RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
    let (mut sim, mut n) = pair();
    let _ids = connected(&mut sim, &mut n);
    let log = cm_log(&sim);
    let (CmMessage::Req(req), CmMessage::Rep(rep)) = (&log[0].1, &log[1].1) else {
        panic!()
    };
    let (req_psn, rep_psn) = (req.starting_psn, rep.starting_psn);
    sim.tap.clear();
    for (from, to) in [(0usize, 1usize), (1, 0)] {
        let (qf, qt) = (n[from].devs[0].qpn, n[to].devs[0].qpn);
        let sge = |m: &App| Sge {
            addr: 0x1000,
            length: 16,
            lkey: m.devs[0].mr.lkey,
        };
        st(&mut sim, to)
            .post_recv(qt, RecvWr::new(7, vec![sge(&n[to])]))
            .expect("recv");
        st(&mut sim, from)
            .post_send(qf, SendWr::new(9, SendOp::Send).with_sge(sge(&n[from])))
            .expect("send");
        let cq = n[to].devs[0].cq;
        let mut got = None;
        for _ in 0..100 {
            if !sim.step() {
                break;
            }
            while let Some(wc) = st(&mut sim, to).poll_cq(cq).expect("cq") {
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
fn reject_carries_consumer_data_and_a_failed_reject_returns_the_id() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let _a = dial(&mut sim, 0, &n[0], sa(b, 7174), b"x");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("new id");
    // Too much private data: refused, and the id comes back still usable.
    let (id, e) = sim.stacks[1]
        .rdma_mut()
        .reject(sim.now, id, &[0u8; 200])
        .expect_err("too long");
    assert_eq!(e, RdmaCmError::TooLong);
    assert_eq!(
        sim.stacks[1].rdma_mut().cm_state(id.name()),
        Some(CmState::MraReqSent)
    );
    sim.stacks[1]
        .rdma_mut()
        .reject(sim.now, id, b"go away")
        .map_err(|(_, e)| e)
        .expect("rej");
    let e = wait(&mut sim, &mut n, 0, RdmaCmEventType::Rejected);
    assert_eq!(e.reject_reason(), Some(RejectReason::CONSUMER_DEFINED));
    assert_eq!(e.status(), 28);
    assert!(e.is_consumer_reject());
    assert_eq!(e.reject_msg(), "consumer defined");
    assert_eq!(&e.consumer_reject_data().expect("data")[..7], b"go away");
    // REJECTED moved the active side's QP to ERR (cma_modify_qp_err).
    assert_eq!(
        st(&mut sim, 0)
            .verbs
            .qp(n[0].devs[0].qpn)
            .expect("qp")
            .state(),
        QpState::Err
    );
}

/// The delayed MRA (`ib_prepare_cm_mra`): nothing is sent while the consumer thinks, but a
/// retransmitted REQ is answered with MRA service timeout 24 (CMA_CM_MRA_SETTING); the
/// accept that follows still connects.
#[test]
fn retransmitted_req_gets_the_delayed_mra_then_accept_connects() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let _a = dial(&mut sim, 0, &n[0], sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("id");
    assert_eq!(attrs(&cm_log(&sim)), vec![AttrId::REQ]);
    // The active side's REQ timer runs out: it retransmits.
    run_timers(&mut sim, &mut n);
    let log = cm_log(&sim);
    assert_eq!(attrs(&log), vec![AttrId::REQ, AttrId::REQ, AttrId::MRA]);
    let CmMessage::Mra(mra) = &log[2].1 else {
        panic!()
    };
    assert_eq!(mra.service_timeout, 24);
    accept(&mut sim, 1, &n[1], &id);
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    ) && has(
        &n[1],
        RdmaCmEventType::Established
    )));
}

#[test]
fn address_and_route_errors() {
    let (mut sim, n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let cm = sim.stacks[0].rdma_mut();
    // No device holds the source address: ADDR_ERROR -ENODEV.
    let id = cm.create_id();
    let nowhere: IpAddr = "10.9.9.9".parse().expect("ip");
    cm.resolve_addr(&id, Some(nowhere), sa(b, 7174))
        .expect("queued");
    let e = cm.poll_event().expect("event");
    assert_eq!((e.kind(), e.status()), (RdmaCmEventType::AddrError, ENODEV));
    // Families differ: refused at once.
    let v6: IpAddr = "fd00::1".parse().expect("ip");
    assert_eq!(
        cm.resolve_addr(&id, Some(a), sa(v6, 7174)),
        Err(RdmaCmError::FamilyMismatch)
    );
    // Binding to an address no device has; two binds of one port; port 0 is ephemeral.
    let x = cm.create_id();
    assert_eq!(cm.bind_addr(&x, sa(nowhere, 1)), Err(RdmaCmError::NoDevice));
    let y = cm.create_id();
    assert_eq!(cm.bind_addr(&x, sa(a, 5000)), Ok(sa(a, 5000)));
    assert_eq!(cm.bind_addr(&y, sa(a, 5000)), Err(RdmaCmError::AddrInUse));
    let any: IpAddr = "0.0.0.0".parse().expect("ip");
    assert_eq!(
        cm.bind_addr(&y, sa(any, 5000)),
        Err(RdmaCmError::AddrInUse),
        "the wildcard overlaps every address"
    );
    let p = cm.bind_addr(&y, sa(a, 0)).expect("ephemeral");
    assert!(EPHEMERAL_PORTS.contains(&p.port()) && p.port() != 5000);
    // Calls out of order.
    assert_eq!(cm.resolve_route(&y), Err(RdmaCmError::InvalidState));
    // The port goes down: ROUTE_ERROR.
    let z = cm.create_id();
    cm.resolve_addr(&z, Some(a), sa(b, 7174)).expect("addr");
    assert_eq!(
        cm.poll_event().map(|e| e.kind()),
        Some(RdmaCmEventType::AddrResolved)
    );
    let dev0 = n[0].devs[0].port;
    if let Ok(p) = st(&mut sim, 0).device.port_mut(PORT_NUM) {
        p.attr.state = PortState::Down;
    }
    cmd(&mut sim, 0, |_, cm, s| cm.update_port(dev0, s));
    sim.stacks[0].rdma_mut().resolve_route(&z).expect("queued");
    let e = sim.stacks[0].poll_rdma_event().expect("event");
    assert_eq!(
        (e.kind(), e.status()),
        (RdmaCmEventType::RouteError, ENETUNREACH)
    );
    for i in [id, x, y, z] {
        sim.stacks[0].rdma_mut().destroy(sim.now, i);
    }
    assert_eq!(sim.stacks[0].rdma_mut().id_count(), 0);
}

/// `cma_port_is_unique` (the kernel's port reuse): an ephemeral port is shared by active ids
/// whose destinations differ, so one source address holds 28,232 connections to each
/// destination address and port. The 28,233rd id to one destination finds no port; one to
/// another port or address of the peer still does, on a port already taken; a bind to port
/// 0 of the source address (destination unknown) shares none of them.
#[test]
fn ephemeral_ports_shared_by_ids_to_distinct_destinations() {
    let (mut sim, _) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let cm = sim.stacks[0].rdma_mut();
    let range = EPHEMERAL_PORTS.len();
    let mut ids = Vec::new();
    let mut ports = std::collections::BTreeSet::new();
    for _ in 0..range {
        let id = cm.create_id();
        cm.resolve_addr(&id, Some(a), sa(b, 7000)).expect("a port");
        while cm.poll_event().is_some() {}
        ports.insert(cm.local_addr(id.name()).expect("bound").port());
        ids.push(id);
    }
    assert_eq!(ports.len(), range, "one destination: every port once");
    let full = cm.create_id();
    assert_eq!(
        cm.resolve_addr(&full, Some(a), sa(b, 7000)),
        Err(RdmaCmError::NoFreePort)
    );
    let other_port = cm.create_id();
    cm.resolve_addr(&other_port, Some(a), sa(b, 7001))
        .expect("another destination port");
    let other_ip: IpAddr = "10.0.0.7".parse().expect("ip");
    let other_addr = cm.create_id();
    cm.resolve_addr(&other_addr, Some(a), sa(other_ip, 7000))
        .expect("another destination address");
    for id in [&other_port, &other_addr] {
        let p = cm.local_addr(id.name()).expect("bound").port();
        assert!(ports.contains(&p), "{p} is shared with an id to {b}:7000");
    }
    let bound = cm.create_id();
    assert_eq!(
        cm.bind_addr(&bound, sa(a, 0)),
        Err(RdmaCmError::NoFreePort),
        "no destination: no port to share"
    );
    for id in ids.into_iter().chain([full, other_port, other_addr, bound]) {
        cm.destroy(Instant::ZERO, id);
    }
    assert_eq!(cm.id_count(), 0);
}

/// ucma's backlog: with backlog 1 and one CONNECT_REQUEST not yet taken, a second REQ is
/// dropped without a REJ; its retransmission is served once the application took the first.
#[test]
fn backlog_overflow_drops_silently_and_the_retried_req_is_served() {
    let (mut sim, mut n) = world(9, &[(21, 1), (22, 1), (23, 1)]);
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 1);
    let _x = dial(&mut sim, 0, &n[0], sa(b, 7174), b"first");
    let _y = dial(&mut sim, 2, &n[2], sa(b, 7174), b"second");
    // Run the network without letting node 1's application poll its events.
    for _ in 0..100 {
        take_events(&mut sim, &mut n, &[1]);
        if !step(&mut sim) {
            break;
        }
    }
    assert_eq!(sim.stacks[1].rdma_mut().counters().backlog_drops, 1);
    assert_eq!(
        attrs(&cm_log(&sim)),
        vec![AttrId::REQ, AttrId::REQ],
        "no REJ for the dropped REQ"
    );
    // The application takes the first request; the second REQ's retransmission is served.
    let first = sim.stacks[1].poll_rdma_event().expect("first request");
    assert_eq!(first.kind(), RdmaCmEventType::ConnectRequest);
    assert_eq!(&first.private_data()[..5], b"first");
    let fid = first.into_new_id().expect("id");
    for _ in 0..5 {
        if has(&n[1], RdmaCmEventType::ConnectRequest) {
            break;
        }
        run_timers(&mut sim, &mut n);
    }
    let second = take(&mut n[1], RdmaCmEventType::ConnectRequest);
    assert_eq!(&second.private_data()[..6], b"second");
    sim.stacks[1].rdma_mut().destroy(sim.now, fid);
    if let Some(id) = second.into_new_id() {
        sim.stacks[1].rdma_mut().destroy(sim.now, id);
    }
}

/// Both sides disconnect at once: the DREQs cross; each side sees DISCONNECTED once; the
/// destroys answer with DREPs and everything ends in timewait, then nothing is left.
#[test]
fn both_sides_send_dreq_at_once() {
    let (mut sim, mut n) = pair();
    let (ca, l, sb) = connected(&mut sim, &mut n);
    cmd(&mut sim, 0, |now, cm, s| cm.disconnect(now, s, &ca)).expect("a");
    cmd(&mut sim, 1, |now, cm, s| cm.disconnect(now, s, &sb)).expect("b");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Disconnected
    ) && has(
        &n[1],
        RdmaCmEventType::Disconnected
    )));
    sim.stacks[0].rdma_mut().destroy(sim.now, ca);
    sim.stacks[1].rdma_mut().destroy(sim.now, sb);
    sim.stacks[1].rdma_mut().destroy(sim.now, l);
    pump(&mut sim, &mut n, |_| false);
    for _ in 0..10 {
        if !run_timers(&mut sim, &mut n) {
            break;
        }
    }
    let a = attrs(&cm_log(&sim));
    assert_eq!(a.iter().filter(|&&x| x == AttrId::DREQ).count(), 2);
    assert_eq!(a.iter().filter(|&&x| x == AttrId::DREP).count(), 2);
    assert_eq!(
        (
            count(&n[0], RdmaCmEventType::Disconnected),
            count(&n[1], RdmaCmEventType::Disconnected)
        ),
        (1, 1)
    );
    for x in &sim.stacks {
        assert_eq!(x.rdma().id_count(), 0);
        assert_eq!(x.rdma().cm().poll_timeout(), None, "timewaits over");
    }
}

/// One CM over two devices with a wildcard listener: each request's new id is bound to the
/// device it arrived on (cma_ib_acquire_dev), with that device's address as its source.
#[test]
fn passive_side_binds_each_request_to_the_device_it_arrived_on() {
    let (mut sim, mut n) = world(13, &[(31, 1), (32, 2)]);
    let (b1, b2) = (sim.addrs[1], sim.addrs[2]);
    let any: IpAddr = "0.0.0.0".parse().expect("ip");
    let _l = listen(&mut sim, 1, sa(any, 7174), 0);
    let mut got = Vec::new();
    let mut kept = Vec::new();
    for dst in [b2, b1] {
        // A fresh QP for each connection (one QP twice would be a stale connection).
        let (_, q, _) = rc_qp(st(&mut sim, 0));
        n[0].devs[0].qpn = q;
        let _c = dial(&mut sim, 0, &n[0], sa(dst, 7174), b"");
        let ok = pump(&mut sim, &mut n, |n| {
            has(&n[1], RdmaCmEventType::ConnectRequest)
        });
        assert!(
            ok,
            "{:?} {:?}",
            attrs(&cm_log(&sim)),
            sim.stacks[1].rdma_mut().counters()
        );
        let e = take(&mut n[1], RdmaCmEventType::ConnectRequest);
        let id = e.into_new_id().expect("id");
        let port = sim.stacks[1].rdma_mut().port_of(id.name()).expect("bound");
        got.push((dst, port, sim.stacks[1].rdma_mut().local_addr(id.name())));
        accept(&mut sim, 1, &n[1], &id);
        let _ = wait(&mut sim, &mut n, 1, RdmaCmEventType::Established);
        kept.push(id);
    }
    assert_eq!(
        got,
        vec![
            (b2, n[1].devs[1].port, Some(sa(b2, 7174))),
            (b1, n[1].devs[0].port, Some(sa(b1, 7174))),
        ]
    );
    for id in kept {
        sim.stacks[1].rdma_mut().destroy(sim.now, id);
    }
}

/// Each refusal of device acquisition is REJ 28 without private data and no
/// CONNECT_REQUEST: a listener bound to the other device; an address not in the arriving
/// device's GID table; a port that is down; a bad IP CM header.
#[test]
fn device_acquisition_refusals_are_rej_28_without_data() {
    use crate::cm::ReqParams;
    let (mut sim, mut n) = world(17, &[(41, 1), (42, 2)]);
    let (a, b1, b2) = (sim.addrs[0], sim.addrs[1], sim.addrs[2]);
    // Node 1 listens on b1:7000 (device 0 only) and on the wildcard at 7001.
    let _l1 = listen(&mut sim, 1, sa(b1, 7000), 0);
    let any: IpAddr = "0.0.0.0".parse().expect("ip");
    let _l2 = listen(&mut sim, 1, sa(any, 7001), 0);
    // A raw REQ from node 0 with a chosen IP CM header, sent to `to`.
    let raw = |sim: &mut Sim<Node>, n: &App, to: IpAddr, hdr: Vec<u8>, port: u16| {
        let p = ReqParams::new(
            n.devs[0].port,
            Gid::from(a),
            Gid::from(to),
            service_id(PortSpace::TCP, port),
            n.devs[0].qpn,
        )
        .with_starting_psn(1)
        .with_private_data(hdr)
        .with_flow_control(false);
        let now = sim.now;
        let cm = sim.stacks[0].rdma_mut().cm_mut();
        let id = cm.create_id();
        cm.send_req(now, &id, &p).expect("req");
        id
    };
    let hdr = |dst: IpAddr| IpCmHeader::new(a, 40000, dst).to_bytes();
    let mut cases = vec![
        // header says b1 (the listener's), but it arrived on device 1 (b2)
        ("listener bound to the other device", b2, hdr(b1), 7000),
        // wildcard listener, arrived on device 1, header says b1 (device 0's address)
        (
            "address not in the arriving device's GID table",
            b2,
            hdr(b1),
            7001,
        ),
    ];
    let mut bad = hdr(b2);
    bad[0] = 0x10; // cma_version 1
    cases.push(("IP CM header version", b2, bad, 7001));
    let mut ids = Vec::new();
    for (what, to, h, port) in cases {
        sim.tap.clear();
        ids.push(raw(&mut sim, &n[0], to, h, port));
        pump(&mut sim, &mut n, |_| false);
        let log = cm_log(&sim);
        assert_eq!(attrs(&log), vec![AttrId::REQ, AttrId::REJ], "{what}");
        let CmMessage::Rej(rej) = &log[1].1 else {
            panic!()
        };
        assert_eq!(rej.reason, RejectReason::CONSUMER_DEFINED, "{what}");
        assert_eq!(rej.private_data, [0u8; 148], "{what}");
        assert!(!has(&n[1], RdmaCmEventType::ConnectRequest), "{what}");
    }
    // Device 1 goes down: a proper request to it is refused too.
    let d1 = n[1].devs[1].port;
    if let Ok(p) = st(&mut sim, 2).device.port_mut(PORT_NUM) {
        p.attr.state = PortState::Down;
    }
    cmd(&mut sim, 2, |_, cm, s| cm.update_port(d1, s));
    sim.tap.clear();
    let _c = dial(&mut sim, 0, &n[0], sa(b2, 7001), b"");
    pump(&mut sim, &mut n, |_| false);
    assert_eq!(
        attrs(&cm_log(&sim)),
        vec![AttrId::REQ, AttrId::REJ],
        "port down"
    );
    assert!(!has(&n[1], RdmaCmEventType::ConnectRequest));
    assert_eq!(sim.stacks[1].rdma_mut().counters().req_refused, 4);
    for id in ids {
        sim.stacks[0].rdma_mut().cm_mut().destroy(sim.now, id);
    }
}

#[test]
fn event_names_are_rdma_event_str() {
    assert_eq!(RdmaCmEventType::ALL.len(), 16);
    assert_eq!(
        RdmaCmEventType::ALL[0].as_str(),
        "RDMA_CM_EVENT_ADDR_RESOLVED"
    );
    assert_eq!(
        RdmaCmEventType::TimewaitExit.to_string(),
        "RDMA_CM_EVENT_TIMEWAIT_EXIT"
    );
}

/// An id destroyed with events still queued gets none of them (the kernel's guarantee).
#[test]
fn no_event_for_a_destroyed_id() {
    let (mut sim, _) = pair();
    let b = sim.addrs[1];
    let id = sim.stacks[0].rdma_mut().create_id();
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr(&id, Some(sim.addrs[0]), sa(b, 1))
        .expect("addr");
    sim.stacks[0].rdma_mut().destroy(sim.now, id);
    assert!(sim.stacks[0].poll_rdma_event().is_none());
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
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let before = sim.stacks[1].rdma_mut().cm().id_count();
    let p = SidrReqParams {
        port: n[0].devs[0].port,
        peer: MadAddr::gsi(Gid::from(b)),
        service_id: service_id(PortSpace::TCP, 7174),
        partition_key: 0xffff,
        private_data: vec![],
        timeout: crate::time::Duration::from_millis(500),
        max_cm_retries: 2,
    };
    let now = sim.now;
    let ib = sim.stacks[0].rdma_mut().cm_mut().create_id();
    sim.stacks[0]
        .rdma_mut()
        .cm_mut()
        .sidr_req(now, &ib, &p)
        .expect("sidr req");
    let mut reps = Vec::new();
    pump(&mut sim, &mut n, |_| false);
    while let Some(ev) = sim.stacks[0].poll_ib_event() {
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
    assert_eq!(
        sim.stacks[1].rdma_mut().cm().id_count(),
        before,
        "no id left behind"
    );
    assert!(n[1].events.is_empty());
    sim.stacks[0].rdma_mut().cm_mut().destroy(now, ib);
}

/// Rule 4 (`cma_ib_check_req_qp_type`): a UC REQ to an RC listener is destroyed in
/// REQ_RCVD: REJ 28 without private data, no CONNECT_REQUEST. (Before: CONNECT_REQUEST.)
#[test]
fn uc_req_to_an_rc_listener_gets_rej_28_without_private_data() {
    use crate::cm::ReqParams;
    use softrdma_wire::cm::TransportType;
    use softrdma_wire::rdma_cm::{service_id, PortSpace};
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let before = sim.stacks[1].rdma_mut().cm().id_count();
    let mut pd = IpCmHeader::new(a, 40000, b).to_bytes();
    pd.extend_from_slice(b"uc");
    let p = ReqParams {
        transport: TransportType::UC,
        ..ReqParams::new(
            n[0].devs[0].port,
            Gid::from(a),
            Gid::from(b),
            service_id(PortSpace::TCP, 7174),
            n[0].devs[0].qpn,
        )
        .with_packet_life_time(ROCE_PACKET_LIFE_TIME)
        .with_starting_psn(1)
        .with_private_data(pd)
        .with_rdma_depths(0, 0)
        .with_flow_control(false)
        .with_max_cm_retries(2)
    };
    let now = sim.now;
    let ib = sim.stacks[0].rdma_mut().cm_mut().create_id();
    sim.stacks[0]
        .rdma_mut()
        .cm_mut()
        .send_req(now, &ib, &p)
        .expect("req");
    pump(&mut sim, &mut n, |_| false);
    assert!(!has(&n[1], RdmaCmEventType::ConnectRequest));
    let log = cm_log(&sim);
    assert!(
        matches!(&log[..], [(0, CmMessage::Req(_)), (1, CmMessage::Rej(r))]
        if r.reason == RejectReason::CONSUMER_DEFINED && r.private_data == [0; 148]),
        "{log:?}"
    );
    assert_eq!(sim.stacks[1].rdma_mut().cm().id_count(), before);
    let mut rejected = false;
    while let Some(ev) = sim.stacks[0].poll_ib_event() {
        rejected |= matches!(ev, CmEvent::RejReceived { .. });
    }
    assert!(rejected);
    sim.stacks[0].rdma_mut().cm_mut().destroy(now, ib);
}
