//! The CMs at scale in the simulated network: two nodes, each an [`RdmaCm`] (with its IB
//! CM) over a [`Stack`] with QP1 and a MAD layer ([`MadPort`]), their applications creating
//! an RC QP and an MR per connection; the network ([`Sim`]) loses 20% of the datagrams,
//! duplicates 5%, delays them by 100–300 µs (so reorders them), and the clock jumps forward
//! now and then. The client runs many connections at once, each of a kind drawn from the
//! seed:
//!
//! - **normal**: connect, a few SENDs, disconnect (from either side): ends ESTABLISHED then
//!   DISCONNECTED and TIMEWAIT_EXIT on both sides (UNREACHABLE if every REQ or REP was lost);
//! - **rejected** by the server's application: REJECTED with reason 28;
//! - **client abandons** it mid-handshake by destroying its id (REJ, or DREQ, by state);
//! - **server abandons** it (destroys the new id, before or after accepting): REJECTED 28;
//!   or, if the REP got through and the REJ did not, an ESTABLISHED connection whose peer has
//!   vanished — its SENDs fail, and the client's DREQ is answered by the context-free DREP;
//!   or UNREACHABLE: a REJ from REP_SENT says "other" and names the REP's comm ID, which a
//!   client that never saw the REP drops (cm.c's `cm_acquire_rejected_id`), and here the
//!   REP itself is withdrawn from the queue by the destroy that follows it in the same turn
//!   (the MAD layer's one deliberate difference), so the REQ's retries run out.
//!
//! Both applications give up on a silent peer after a minute of virtual time (they
//! disconnect), as real ones time out an idle connection.
//!
//! - **peer vanishes**: to a third node, which goes down for good once a third of the
//!   connections have started: ESTABLISHED, then the SENDs fail (or never complete), the
//!   DREQ goes unanswered, DISCONNECTED with `-ETIMEDOUT`, TIMEWAIT_EXIT; or UNREACHABLE.
//!
//! Every connection must end in one of its kind's outcomes; afterwards no id, timer, table
//! entry, outstanding MAD, QP or MR is left on the two nodes that stay up. The same seed gives the same run
//! (a digest of it is compared), and a failing run prints its seed.
//! `cargo test` runs 20,000 connections; the million:
//! `cargo test --release -p softrdma-core -- --ignored million --nocapture`.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use softrdma_wire::cm::RejectReason;
use softrdma_wire::Guid;

use crate::cm::{CmConfig, CmPort, RXE_CA_ACK_DELAY};
use crate::mad::MadPort;
use crate::node::Node;
use crate::rand::Rng;
use crate::rdma_cm::{ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType as T, RdmaCmId, RdmaId};
use crate::sim::{Host, NetConfig, Sim};
use crate::time::{Duration, Instant};
use crate::verbs::{
    AccessFlags, CqId, MrKeys, PdId, QpInitAttr, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use crate::Stack;

const PORT: u16 = 7174;
const MR_VA: u64 = 0x10_0000;
const MR_LEN: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Normal {
        msgs: u8,
        client_disconnects: bool,
    },
    Rejected,
    ClientAbandons {
        after: Duration,
    },
    ServerAbandons {
        accept_first: bool,
    },
    /// To node 2, the server that vanishes (goes down for good) part way through the run.
    Vanishing {
        msgs: u8,
    },
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Normal { .. } => "normal",
            Kind::Rejected => "rejected",
            Kind::ClientAbandons { .. } => "client abandons",
            Kind::ServerAbandons { .. } => "server abandons",
            Kind::Vanishing { .. } => "peer vanishes",
        }
    }
}

/// How a connection ended, as its client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// ESTABLISHED, then DISCONNECTED and TIMEWAIT_EXIT.
    Closed,
    Rejected,
    /// ESTABLISHED, then REJECTED (the server's REJ after its REP).
    EstablishedRejected,
    Unreachable,
    Abandoned,
}

/// One node's application state: the node's port and the PD and CQ its connections use
/// (the node itself lives in the simulation).
struct App {
    port: CmPort,
    pd: PdId,
    cq: CqId,
}

/// The resources of one id (either side).
#[derive(Default)]
struct Res {
    id: Option<RdmaCmId>,
    qpn: Option<u32>,
    mr: Option<MrKeys>,
}

struct Client {
    kind: Kind,
    res: Res,
    log: Vec<(T, i32)>,
    sent: u8,
    completed: u8,
    send_error: bool,
    disconnect_sent: bool,
    /// When the application acts by itself: abandons, or gives up waiting for the server.
    timer: Option<Instant>,
    outcome: Option<Outcome>,
}

struct Server {
    tag: u32,
    /// The node it is on (1, or 2: the one that vanishes).
    node: usize,
    res: Res,
    msgs: u8,
    recvd: u8,
    disconnects: bool,
    disconnect_sent: bool,
    /// An application's patience: if the connection is still there then, it disconnects
    /// (a client that vanished sends nothing more).
    timer: Instant,
}

/// How long an application waits for its peer before it disconnects by itself.
const PATIENCE: Duration = Duration::from_secs(60);

/// What a run did (compared between two runs of one seed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    outcomes: BTreeMap<(&'static str, Outcome), u64>,
    connections: u64,
    jumps: u64,
    end: Instant,
    datagrams: u64,
    digest: u64,
}

struct World {
    sim: Sim<Node>,
    apps: Vec<App>,
    rng: Rng,
    clients: BTreeMap<u32, Client>,
    client_ids: BTreeMap<RdmaId, u32>,
    /// The servers' connections by (node, passive id).
    servers: BTreeMap<(usize, RdmaId), Server>,
    /// QPN → owner (client: the tag; server: (node, QPN) → the passive id).
    client_qps: BTreeMap<u32, u32>,
    server_qps: BTreeMap<(usize, u32), RdmaId>,
    listeners: Vec<RdmaCmId>,
    /// Node 2 is down for good.
    vanished: bool,
    stats: Stats,
    /// The last finished connections' kinds and events (for failure messages).
    finished: BTreeMap<u32, (Kind, Vec<(T, i32)>)>,
}

/// Node `i` (10.0.0.i+1, one port, QP1 with `qp1_depth` receives) and its application.
fn node(i: usize, seed: u64, qp1_depth: u32) -> (Node, App) {
    let mut n = Node::new(CmConfig::new(
        Guid(0x5054_00ff_fe00_0000 + i as u64),
        RXE_CA_ACK_DELAY,
        seed,
    ))
    .expect("node");
    let ip = Sim::<Node>::addr(i);
    let stack = Stack::new(
        crate::device::DeviceConfig::new(format!("sim{i}"), vec![ip]),
        seed ^ 0x57ac,
    );
    let port = n.add_port(stack, qp1_depth).expect("port");
    let s = n.stack_mut(port).expect("stack");
    let pd = s.verbs.alloc_pd().expect("pd");
    let cq = s.verbs.create_cq(8192).expect("cq");
    (n, App { port, pd, cq })
}

/// Nodes 0..n (seeds as given) in a simulated network.
fn world_nodes(seeds: &[u64], net: NetConfig, seed: u64) -> (Sim<Node>, Vec<App>) {
    let (nodes, apps): (Vec<_>, Vec<_>) = seeds
        .iter()
        .enumerate()
        .map(|(i, &s)| node(i, s, 512))
        .unzip();
    (Sim::with_hosts(nodes, net, seed), apps)
}

fn mix(h: u64, x: u64) -> u64 {
    (h ^ x).wrapping_mul(0x100_0000_01b3).rotate_left(29)
}

impl World {
    fn new(seed: u64) -> World {
        let net = NetConfig {
            loss_permille: 200,
            dup_permille: 50,
            delay: Duration::from_micros(100),
            jitter: Duration::from_micros(200),
        };
        let (sim, apps) = world_nodes(&[seed ^ 0xc1, seed ^ 0x5e, seed ^ 0x7a], net, seed);
        let mut w = World {
            sim,
            apps,
            rng: Rng::new(seed ^ 0xa99),
            clients: BTreeMap::new(),
            client_ids: BTreeMap::new(),
            servers: BTreeMap::new(),
            client_qps: BTreeMap::new(),
            server_qps: BTreeMap::new(),
            listeners: Vec::new(),
            vanished: false,
            stats: Stats::default(),
            finished: BTreeMap::new(),
        };
        for k in 1..3 {
            let addr = SocketAddr::new(w.sim.addrs[k], PORT);
            let l = w.sim.stacks[k]
                .rdma_mut()
                .listen_on(addr, 0)
                .expect("listen");
            w.listeners.push(l);
        }
        w
    }

    fn now(&self) -> Instant {
        self.sim.now
    }

    /// Node `k`'s stack.
    fn stack(&mut self, k: usize) -> &mut Stack {
        let port = self.apps[k].port;
        self.sim.stacks[k].stack_mut(port).expect("port")
    }

    fn pick(&mut self, n: u32) -> u32 {
        self.rng.next_u32() % n
    }

    /// An RC QP in INIT and an MR on node `k`.
    fn resources(&mut self, k: usize) -> (u32, MrKeys) {
        let (pd, cq) = (self.apps[k].pd, self.apps[k].cq);
        let s = self.stack(k);
        let (qpn, _) = s.verbs.create_qp(QpInitAttr::rc(pd, cq, 8, 8)).expect("qp");
        RdmaCm::init_qp(s, qpn).expect("init");
        let mr = s
            .verbs
            .reg_mr(pd, MR_LEN, MR_VA, AccessFlags::LOCAL_WRITE)
            .expect("mr");
        (qpn, mr)
    }

    fn release(&mut self, k: usize, res: Res) {
        let now = self.now();
        if let Some(id) = res.id {
            self.sim.stacks[k].rdma_mut().destroy(now, id);
        }
        let s = self.stack(k);
        if let Some(q) = res.qpn {
            s.destroy_qp(q).expect("destroy qp");
        }
        if let Some(mr) = res.mr {
            s.verbs.dereg_mr(mr.lkey).expect("dereg");
        }
    }

    // ---- the client ---------------------------------------------------------------------

    fn start(&mut self, tag: u32) {
        let kind = match self.pick(20) {
            0..=11 => Kind::Normal {
                msgs: 1 + self.pick(3) as u8,
                client_disconnects: self.pick(2) == 0,
            },
            12..=14 => Kind::Rejected,
            15..=16 => Kind::ClientAbandons {
                after: Duration::from_micros(u64::from(self.pick(2_000))),
            },
            17 => Kind::Vanishing {
                msgs: 1 + self.pick(3) as u8,
            },
            _ => Kind::ServerAbandons {
                accept_first: self.pick(2) == 0,
            },
        };
        let now = self.now();
        let to = if matches!(kind, Kind::Vanishing { .. }) {
            2
        } else {
            1
        };
        let (src, dst) = (self.sim.addrs[0], SocketAddr::new(self.sim.addrs[to], PORT));
        let cm = self.sim.stacks[0].rdma_mut();
        let id = cm.create_id();
        cm.resolve_addr(&id, Some(src), dst).expect("resolve_addr");
        self.client_ids.insert(id.name(), tag);
        let timer = match kind {
            Kind::ClientAbandons { after } => Some(now + after),
            _ => None,
        };
        self.clients.insert(
            tag,
            Client {
                kind,
                res: Res {
                    id: Some(id),
                    ..Res::default()
                },
                log: Vec::new(),
                sent: 0,
                completed: 0,
                send_error: false,
                disconnect_sent: false,
                timer,
                outcome: None,
            },
        );
        self.stats.connections += 1;
    }

    fn client_finish(&mut self, tag: u32, outcome: Outcome) {
        let Some(c) = self.clients.get_mut(&tag) else {
            return;
        };
        let res = std::mem::take(&mut c.res);
        c.outcome = Some(outcome);
        c.timer = None;
        if let Some(id) = &res.id {
            self.client_ids.remove(&id.name());
        }
        if let Some(q) = res.qpn {
            self.client_qps.remove(&q);
        }
        self.release(0, res);
        let c = self.clients.remove(&tag).expect("client");
        let ok = match (c.kind, outcome) {
            (_, Outcome::Unreachable) => !matches!(c.kind, Kind::ClientAbandons { .. }),
            (Kind::Normal { .. }, o) => o == Outcome::Closed,
            (Kind::Rejected, o) => o == Outcome::Rejected,
            (Kind::ClientAbandons { .. }, o) => o == Outcome::Abandoned,
            (Kind::ServerAbandons { .. }, o) => matches!(
                o,
                Outcome::Rejected | Outcome::EstablishedRejected | Outcome::Closed
            ),
            (Kind::Vanishing { .. }, o) => o == Outcome::Closed,
        };
        assert!(
            ok,
            "connection {tag} ({:?}) ended {outcome:?}; its events: {:?}",
            c.kind, c.log
        );
        *self
            .stats
            .outcomes
            .entry((c.kind.name(), outcome))
            .or_default() += 1;
        self.finished.insert(tag, (c.kind, c.log));
        if self.finished.len() > 256 {
            self.finished.pop_first();
        }
        self.stats.digest = mix(self.stats.digest, u64::from(tag) << 8 | outcome as u64);
        self.stats.digest = mix(self.stats.digest, self.now().total_micros());
    }

    fn client_disconnect(&mut self, tag: u32) {
        let now = self.now();
        let Some(c) = self.clients.get_mut(&tag) else {
            return;
        };
        if c.disconnect_sent {
            return;
        }
        if let Some(id) = &c.res.id {
            // Refused only in a state that cannot disconnect (then the peer's DREQ or the
            // CM's errors end the connection).
            c.disconnect_sent = self.sim.stacks[0]
                .with_port(now, self.apps[0].port, |cm, s| cm.disconnect(now, s, id))
                .expect("port")
                .is_ok();
        }
    }

    fn client_event(&mut self, e: RdmaCmEvent) {
        let now = self.now();
        let Some(&tag) = self.client_ids.get(&e.id()) else {
            panic!("client: an event for an id it does not hold: {e:?}");
        };
        let c = self.clients.get_mut(&tag).expect("client");
        c.log.push((e.kind(), e.status()));
        match e.kind() {
            T::AddrResolved => {
                let id = c.res.id.as_ref().expect("id");
                self.sim.stacks[0]
                    .rdma_mut()
                    .resolve_route(id)
                    .expect("route");
            }
            T::RouteResolved => {
                let (qpn, mr) = self.resources(0);
                let c = self.clients.get_mut(&tag).expect("client");
                c.res.qpn = Some(qpn);
                c.res.mr = Some(mr);
                self.client_qps.insert(qpn, tag);
                let id = c.res.id.as_ref().expect("id");
                let param = ConnParam {
                    private_data: tag.to_be_bytes().to_vec(),
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    ..ConnParam::default()
                };
                self.sim.stacks[0]
                    .with_port(now, self.apps[0].port, |cm, s| {
                        cm.connect(now, s, id, Some(qpn), &param)
                    })
                    .expect("port")
                    .expect("connect");
            }
            T::Established => {
                let msgs = match c.kind {
                    Kind::Normal { msgs, .. } | Kind::Vanishing { msgs } => msgs,
                    _ => 1,
                };
                let (qpn, mr) = (c.res.qpn.expect("qp"), c.res.mr.expect("mr"));
                for k in 0..msgs {
                    let wr = SendWr::new(u64::from(k), SendOp::Send).with_sge(Sge {
                        addr: MR_VA,
                        length: 16,
                        lkey: mr.lkey,
                    });
                    let port = self.apps[0].port;
                    let s = self.sim.stacks[0].stack_mut(port).expect("port");
                    s.post_send(qpn, wr).expect("post send");
                }
                c.sent = msgs;
            }
            T::Rejected => {
                assert_eq!(
                    e.status(),
                    i32::from(RejectReason::CONSUMER_DEFINED.0),
                    "{e:?}"
                );
                let est = c.log.iter().any(|(t, _)| *t == T::Established);
                let o = if est {
                    Outcome::EstablishedRejected
                } else {
                    Outcome::Rejected
                };
                self.client_finish(tag, o);
            }
            T::Unreachable => self.client_finish(tag, Outcome::Unreachable),
            T::Disconnected => {
                c.disconnect_sent = false;
                self.client_disconnect(tag)
            }
            T::TimewaitExit => {
                let ok = [T::Established, T::Disconnected]
                    .iter()
                    .all(|t| c.log.iter().any(|(x, _)| x == t));
                assert!(ok, "connection {tag}: TIMEWAIT_EXIT after {:?}", c.log);
                self.client_finish(tag, Outcome::Closed);
            }
            _ => panic!("connection {tag} ({:?}): {e:?} after {:?}", c.kind, c.log),
        }
    }

    fn client_wc(&mut self, qpn: u32, status: WcStatus) {
        let Some(&tag) = self.client_qps.get(&qpn) else {
            return;
        };
        let now = self.now();
        let c = self.clients.get_mut(&tag).expect("client");
        c.completed += 1;
        c.send_error |= status != WcStatus::Success;
        if c.completed < c.sent {
            return;
        }
        match c.kind {
            Kind::Normal {
                client_disconnects: false,
                ..
            } if !c.send_error => {
                // The server disconnects; should its DREQ never come, give up.
                c.timer = Some(now + PATIENCE);
            }
            _ => self.client_disconnect(tag),
        }
    }

    fn client_timer(&mut self, tag: u32) {
        let Some(c) = self.clients.get_mut(&tag) else {
            return;
        };
        c.timer = None;
        match c.kind {
            Kind::ClientAbandons { .. } => self.client_finish(tag, Outcome::Abandoned),
            _ => self.client_disconnect(tag),
        }
    }

    // ---- the server ---------------------------------------------------------------------

    fn server_event(&mut self, k: usize, e: RdmaCmEvent) {
        let now = self.now();
        if let RdmaCmEvent::ConnectRequest {
            new_id: id,
            private_data,
            ..
        } = e
        {
            let tag = u32::from_be_bytes(private_data[..4].try_into().expect("tag"));
            // The kinds are the client's to draw; the server's application knows its part.
            let kind = self.clients.get(&tag).map(|c| c.kind);
            match kind {
                // A REQ of a connection its client gave up on already (a retransmission
                // still in flight): refuse it.
                None | Some(Kind::Rejected) => {
                    if let Err((_, err)) = self.sim.stacks[k].rdma_mut().reject(now, id, b"no") {
                        panic!("connection {tag}: reject: {err:?}");
                    }
                }
                Some(Kind::ServerAbandons { accept_first }) => {
                    if accept_first {
                        let (qpn, mr) = self.resources(k);
                        self.sim.stacks[k]
                            .with_port(now, self.apps[k].port, |cm, s| {
                                cm.accept(now, s, &id, qpn, &ConnParam::default())
                            })
                            .expect("port")
                            .expect("accept");
                        self.release(
                            k,
                            Res {
                                id: Some(id),
                                qpn: Some(qpn),
                                mr: Some(mr),
                            },
                        );
                    } else {
                        self.sim.stacks[k].rdma_mut().destroy(now, id);
                    }
                }
                Some(kind) => {
                    let (msgs, disconnects) = match kind {
                        Kind::Normal {
                            msgs,
                            client_disconnects,
                        } => (msgs, !client_disconnects),
                        Kind::Vanishing { msgs } => (msgs, false),
                        _ => (1, true),
                    };
                    let (qpn, mr) = self.resources(k);
                    let s = self.stack(k);
                    for m in 0..msgs {
                        let sge = Sge {
                            addr: MR_VA + 32 * u64::from(m),
                            length: 32,
                            lkey: mr.lkey,
                        };
                        s.post_recv(qpn, RecvWr::new(u64::from(m), vec![sge]))
                            .expect("post recv");
                    }
                    let param = ConnParam {
                        responder_resources: 1,
                        initiator_depth: 1,
                        rnr_retry_count: 7,
                        ..ConnParam::default()
                    };
                    self.sim.stacks[k]
                        .with_port(now, self.apps[k].port, |cm, s| {
                            cm.accept(now, s, &id, qpn, &param)
                        })
                        .expect("port")
                        .expect("accept");
                    self.server_qps.insert((k, qpn), id.name());
                    self.servers.insert(
                        (k, id.name()),
                        Server {
                            tag,
                            node: k,
                            res: Res {
                                id: Some(id),
                                qpn: Some(qpn),
                                mr: Some(mr),
                            },
                            msgs,
                            recvd: 0,
                            disconnects,
                            disconnect_sent: false,
                            timer: now + PATIENCE,
                        },
                    );
                }
            }
            return;
        }
        let key = (k, e.id());
        let Some(sv) = self.servers.get_mut(&key) else {
            panic!("server {k}: an event for an id it does not hold: {e:?}");
        };
        match e.kind() {
            T::Established => {
                if sv.disconnects && sv.recvd == sv.msgs {
                    self.server_disconnect(key);
                }
            }
            T::Disconnected => {
                // The peer's DREQ, answered with the DREP even if our DREQ crossed it.
                sv.disconnect_sent = false;
                self.server_disconnect(key)
            }
            T::TimewaitExit | T::Rejected | T::Unreachable | T::ConnectError => {
                self.server_finish(key)
            }
            _ => panic!("server, connection {}: {e:?}", sv.tag),
        }
    }

    /// `rdma_disconnect` once; refused before ESTABLISHED (the SENDs may arrive before
    /// the RTU: the REP's retransmission brings the RTU again), tried again then.
    fn server_disconnect(&mut self, key: (usize, RdmaId)) {
        let now = self.now();
        let Some(sv) = self.servers.get_mut(&key) else {
            return;
        };
        let k = sv.node;
        if sv.disconnect_sent {
            return;
        }
        if let Some(id) = &sv.res.id {
            sv.disconnect_sent = self.sim.stacks[k]
                .with_port(now, self.apps[k].port, |cm, s| cm.disconnect(now, s, id))
                .expect("port")
                .is_ok();
        }
    }

    fn server_finish(&mut self, key: (usize, RdmaId)) {
        let Some(mut sv) = self.servers.remove(&key) else {
            return;
        };
        if let Some(q) = sv.res.qpn {
            self.server_qps.remove(&(key.0, q));
        }
        self.release(key.0, std::mem::take(&mut sv.res));
    }

    fn server_wc(&mut self, k: usize, qpn: u32, opcode: WcOpcode, status: WcStatus) {
        let Some(&id) = self.server_qps.get(&(k, qpn)) else {
            return;
        };
        let sv = self.servers.get_mut(&(k, id)).expect("server");
        if opcode == WcOpcode::Recv && status == WcStatus::Success {
            sv.recvd += 1;
            if sv.recvd == sv.msgs && sv.disconnects {
                self.server_disconnect((k, id));
            }
        }
    }

    /// Node 2 goes down for good: its host, its CM and its applications are gone.
    fn vanish(&mut self) {
        self.vanished = true;
        self.sim.down[2] = true;
        let gone: Vec<_> = self.servers.keys().filter(|k| k.0 == 2).copied().collect();
        for k in gone {
            self.servers.remove(&k);
        }
        self.server_qps.retain(|k, _| k.0 != 2);
    }

    // ---- the runtime --------------------------------------------------------------------

    /// Node `k`'s timers if due, then its application: events and completions until both
    /// are quiet. (The node handled its datagrams as the network delivered them.)
    fn turn(&mut self, k: usize) {
        let now = self.now();
        let n = &mut self.sim.stacks[k];
        if n.poll_timeout().is_some_and(|t| t <= now) {
            n.handle_timeout(now);
        }
        // Retry notices of the IB CM (nobody here wants them; drained like events).
        while n.poll_ib_event().is_some() {}
        loop {
            let mut any = false;
            while let Some(e) = self.sim.stacks[k].poll_rdma_event() {
                any = true;
                if k == 0 {
                    self.client_event(e);
                } else {
                    self.server_event(k, e);
                }
            }
            let cq = self.apps[k].cq;
            while let Ok(Some(wc)) = self.stack(k).poll_cq(cq) {
                any = true;
                if k == 0 {
                    self.client_wc(wc.qp_num, wc.status);
                } else {
                    self.server_wc(k, wc.qp_num, wc.opcode, wc.status);
                }
            }
            if !any {
                break;
            }
        }
    }

    /// The earliest timer of the nodes' MAD layers and CMs and of the applications.
    fn next_timer(&self) -> Option<Instant> {
        let app = self
            .clients
            .values()
            .filter_map(|c| c.timer)
            .chain(self.servers.values().map(|s| s.timer))
            .min();
        let live = if self.vanished { 2 } else { 3 };
        self.sim.stacks[..live]
            .iter()
            .map(|n| n.poll_timeout())
            .chain([app])
            .flatten()
            .min()
    }

    fn run_app_timers(&mut self) {
        let now = self.now();
        let due: Vec<u32> = self
            .clients
            .iter()
            .filter(|(_, c)| c.timer.is_some_and(|t| t <= now))
            .map(|(t, _)| *t)
            .collect();
        for tag in due {
            self.client_timer(tag);
        }
        let due: Vec<(usize, RdmaId)> = self
            .servers
            .iter()
            .filter(|(_, s)| s.timer <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(sv) = self.servers.get_mut(&id) {
                sv.timer = now + PATIENCE;
                sv.disconnect_sent = false;
            }
            self.server_disconnect(id);
        }
    }

    fn run(&mut self, total: u32, window: usize) {
        let mut next_tag = 0u32;
        let mut steps = 0u64;
        loop {
            while next_tag < total && self.clients.len() < window {
                self.start(next_tag);
                next_tag += 1;
            }
            self.run_app_timers();
            // Node 2 vanishes once a third of the connections have started.
            if !self.vanished && next_tag >= total / 3 && total >= 30 {
                self.vanish();
            }
            self.turn(0);
            self.turn(1);
            if !self.vanished {
                self.turn(2);
            }
            if next_tag == total && self.clients.is_empty() && self.servers.is_empty() {
                break;
            }
            steps += 1;
            assert!(steps < 2_000 * u64::from(total) + 100_000, "no progress");
            // Now and then the clock jumps ahead (a stalled host, a suspended VM).
            if self.pick(4_000) == 0 {
                let jump = Duration::from_millis(u64::from(1 + self.pick(3_000)));
                self.sim.now += jump;
                self.stats.jumps += 1;
                continue;
            }
            self.sim.flush();
            let net = self.sim.next_event();
            let timers = self.next_timer();
            match (net, timers) {
                (Some(n), None) => {
                    let _ = n;
                    self.sim.step();
                    self.stats.datagrams += 1;
                }
                (Some(n), Some(t)) if n <= t => {
                    self.sim.step();
                    self.stats.datagrams += 1;
                }
                (_, Some(t)) => self.sim.now = self.sim.now.max(t),
                (None, None) => panic!(
                    "nothing to wait for with {} connections open: {:?}; servers {:?}",
                    self.clients.len(),
                    self.clients.values().map(|c| (c.kind, &c.log)).next(),
                    self.servers
                        .iter()
                        .map(|(id, sv)| (
                            sv.tag,
                            self.sim.stacks[id.0].rdma().cm_state(id.1),
                            self.finished.get(&sv.tag)
                        ))
                        .collect::<Vec<_>>()
                ),
            }
        }
        self.stats.end = self.now();
        self.check_clean();
    }

    /// Nothing left: ids, timers, table entries, sends, QPs, MRs.
    fn check_clean(&mut self) {
        // The last turns: sends completing, cancels applied.
        let live = if self.vanished { 2 } else { 3 };
        for k in 0..live {
            self.turn(k);
        }
        for (k, (n, app)) in self.sim.stacks[..live].iter().zip(&self.apps).enumerate() {
            let listeners = usize::from(k > 0);
            assert_eq!(n.rdma().id_count(), listeners, "node {k}: RDMA CM ids");
            let s = n.rdma().cm().table_sizes();
            assert_eq!(s.ids, listeners, "node {k}: {s:?}");
            assert_eq!(
                (
                    s.remote_ids,
                    s.remote_qpns,
                    s.remote_sidr,
                    s.timewaits,
                    s.half_open
                ),
                (0, 0, 0, 0, 0),
                "node {k}: {s:?}"
            );
            assert_eq!((s.sends, s.events, s.mad_ops), (0, 0, 0), "node {k}: {s:?}");
            assert_eq!(n.rdma().poll_timeout(), None, "node {k}: CM timer");
            let mad = n.mad(app.port).expect("port");
            assert_eq!(mad.agent().outstanding(), 0, "node {k}: MADs");
            assert_eq!(mad.poll_timeout(), None, "node {k}: MAD timer");
            let st: &Stack = n.stack(app.port).expect("port");
            assert_eq!(
                st.verbs.qp_numbers().count(),
                1,
                "node {k}: QPs besides QP1"
            );
            assert_eq!(
                st.verbs.mr_table().count(),
                1,
                "node {k}: MRs besides QP1's"
            );
            assert_eq!(st.poll_timeout(), None, "node {k}: transport timer");
        }
    }
}

/// Runs `total` connections, `window` at a time, from `seed`; prints the seed if it fails.
pub(crate) fn run(seed: u64, total: u32, window: usize) -> Stats {
    struct Seed(u64);
    impl Drop for Seed {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("cm_sim: the failing seed is {:#x}", self.0);
            }
        }
    }
    let _guard = Seed(seed);
    let mut w = World::new(seed);
    w.run(total, window);
    w.stats
}

#[test]
fn same_seed_same_run() {
    let a = run(0x5ca1e, 400, 16);
    let b = run(0x5ca1e, 400, 16);
    assert_eq!(a, b);
    assert_ne!(a.digest, run(0x5ca1f, 400, 16).digest);
    let closed = a.outcomes.get(&("normal", Outcome::Closed)).copied();
    assert!(closed.unwrap_or(0) > 100, "{a:?}");
}

/// The debug-build run `cargo test` does: 20,000 connections.
#[test]
fn twenty_thousand_connections_under_loss() {
    let t0 = std::time::Instant::now();
    let mut total = Stats::default();
    for seed in [0x1u64, 0x2, 0x3, 0x4] {
        let s = run(0xc0ffee + seed, 5_000, 48);
        total.connections += s.connections;
        total.jumps += s.jumps;
        total.datagrams += s.datagrams;
        for (o, n) in s.outcomes {
            *total.outcomes.entry(o).or_default() += n;
        }
    }
    assert_eq!(total.connections, 20_000);
    eprintln!(
        "cm_sim: {} connections in {:.1} s: {:?}, {} clock jumps, {} datagrams",
        total.connections,
        t0.elapsed().as_secs_f64(),
        total.outcomes,
        total.jumps,
        total.datagrams
    );
}

/// A million connections (release: see the module docs).
#[test]
#[ignore = "a million connections: run in release"]
fn million_connections_under_loss() {
    let t0 = std::time::Instant::now();
    let s = run(0x00c0_ffee_0001, 1_000_000, 64);
    assert_eq!(s.connections, 1_000_000);
    eprintln!(
        "cm_sim: {} connections in {:.1} s: {:?}, {} clock jumps, {} datagrams, virtual {:?}",
        s.connections,
        t0.elapsed().as_secs_f64(),
        s.outcomes,
        s.jumps,
        s.datagrams,
        s.end
    );
}

/// 100,000 REQs with distinct comm IDs from a peer that never answers (node 2, writing its
/// own MADs: an RDMA CM REQ with the IP CM header, asking for a REP wait of 1 ms with no
/// retry), in ten bursts of 10,000 at line rate 100 ms apart, against node 1 listening with
/// a backlog of 128 whose application handles at most 50 events a millisecond and accepts
/// every CONNECT_REQUEST it takes (an RC QP each; UNREACHABLE destroys it). ucma's backlog
/// bounds what is queued (the rest is dropped without a REJ, counted in `backlog_drops`);
/// a legitimate RDMA CM client (node 0) connecting between two bursts, while the flood
/// runs, is ESTABLISHED within a second. Afterwards only the two connected ids and the
/// listener are left.
#[test]
fn rdma_cm_connect_flood_backlog_bounds_memory() {
    use softrdma_wire::cm::TransportType;
    use softrdma_wire::cm::{CmMessage, ExtendedTransportType, Path, PathMtu, ReqRepr};
    use softrdma_wire::mad::{Method, MgmtClass};
    use softrdma_wire::rdma_cm::{service_id, IpCmHeader, PortSpace};

    const BACKLOG: u32 = 128;
    const EVENTS_PER_MS: usize = 50;
    let (n0, a0) = node(0, 1, 512);
    let (n1, a1) = node(1, 2, 512);
    // The attacker: a bare stack with QP1 and a MAD layer with a CM agent, nothing else.
    let mut evil_stack = Stack::new(
        crate::device::DeviceConfig::new("evil", vec![Sim::<FloodHost>::addr(2)]),
        3,
    );
    let mut evil = MadPort::open(&mut evil_stack, 2, 64).expect("qp1");
    let agent = evil
        .agent_mut()
        .register_methods(MgmtClass::CM, 2, Some(&[Method::SEND]))
        .expect("agent");
    let mut sim = Sim::with_hosts(
        vec![
            FloodHost::Node(n0),
            FloodHost::Node(n1),
            FloodHost::Evil(evil_stack, evil),
        ],
        NetConfig::PERFECT,
        77,
    );
    let apps = [a0, a1];
    let server = SocketAddr::new(sim.addrs[1], PORT);
    let listen = sim.stacks[1]
        .node()
        .rdma_mut()
        .listen_on(server, BACKLOG)
        .expect("listen");
    let (evil_ip, server_gid) = (sim.addrs[2], softrdma_wire::Gid::from(sim.addrs[1]));
    let flood_req = |n: u32| {
        let mut pd = IpCmHeader::new(evil_ip, 40_000 + (n % 20_000) as u16, server.ip()).to_bytes();
        pd.resize(92, 0);
        let req = ReqRepr {
            local_comm_id: (n + 1).wrapping_mul(0x9e37_79b1),
            service_id: service_id(PortSpace::TCP, PORT),
            local_ca_guid: Guid(0x0bad),
            local_qpn: 0x100 + n % 0xff_0000,
            remote_cm_response_timeout: 20,
            transport_service_type: TransportType::RC,
            starting_psn: n & 0xff_ffff,
            local_cm_response_timeout: 8,
            retry_count: 7,
            partition_key: 0xffff,
            path_mtu: PathMtu::MTU_1024,
            rnr_retry_count: 7,
            max_cm_retries: 0,
            extended_transport_type: ExtendedTransportType::NONE,
            primary_path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: softrdma_wire::Gid::from(evil_ip),
                remote_gid: server_gid,
                hop_limit: 64,
                local_ack_timeout: 19,
                ..Path::default()
            },
            private_data: pd.try_into().expect("92 bytes"),
            ..ReqRepr::default()
        };
        CmMessage::Req(req).to_mad(0x0000_0002_0000_0000 | u64::from(n), 0)
    };
    let mut accepted: BTreeMap<RdmaId, Res> = BTreeMap::new();
    let mut client: Option<RdmaCmId> = None;
    let mut client_qp = None;
    let mut client_up = None;
    let mut server_side: Option<RdmaId> = None;
    let (mut sent, mut max_ids, mut max_accepted) = (0u32, 0, 0);
    let client_start = Instant::from_millis(351);
    let t0 = sim.now;
    let mut next_tick = t0;
    let mut budget = EVENTS_PER_MS;
    while sim.now < t0 + Duration::from_millis(1_300) {
        let now = sim.now;
        // The bursts: 10,000 REQs each, at 0, 100, ..., 900 ms.
        let ms = (now - t0).total_micros() / 1_000;
        if ms % 100 == 0 && ms < 1_000 && sent < 10_000 * (ms as u32 / 100 + 1) {
            for _ in 0..10_000 {
                let mad = flood_req(sent);
                let FloodHost::Evil(_, evil) = &mut sim.stacks[2] else {
                    unreachable!("host 2 is the attacker")
                };
                evil.agent_mut()
                    .send(
                        now,
                        agent,
                        crate::mad::MadAddr::gsi(server_gid),
                        mad,
                        crate::mad::SendParams::ONCE,
                    )
                    .expect("send");
                sim.flush();
                sent += 1;
            }
        }
        if client.is_none() && now >= client_start {
            let cm = sim.stacks[0].node().rdma_mut();
            let id = cm.create_id();
            cm.resolve_addr(&id, Some(sim.addrs[0]), server)
                .expect("resolve");
            client = Some(id);
        }
        for k in 0..2 {
            let n = sim.stacks[k].node();
            if n.poll_timeout().is_some_and(|t| t <= now) {
                n.handle_timeout(now);
            }
            while n.poll_ib_event().is_some() {}
        }
        // The client: everything at once.
        while let Some(e) = sim.stacks[0].node().poll_rdma_event() {
            let id = client.as_ref().expect("client");
            let n = sim.stacks[0].node();
            match e.kind() {
                T::AddrResolved => n.rdma_mut().resolve_route(id).expect("route"),
                T::RouteResolved => {
                    let (pd, cq) = (apps[0].pd, apps[0].cq);
                    let s = n.stack_mut(apps[0].port).expect("port");
                    let (qpn, _) = s.verbs.create_qp(QpInitAttr::rc(pd, cq, 4, 4)).expect("qp");
                    RdmaCm::init_qp(s, qpn).expect("init");
                    client_qp = Some(qpn);
                    n.with_port(now, apps[0].port, |cm, s| {
                        cm.connect(now, s, id, Some(qpn), &ConnParam::default())
                    })
                    .expect("port")
                    .expect("connect");
                }
                T::Established => client_up = Some(now),
                _ => panic!("client: {e:?}"),
            }
        }
        // The server's application: at most 50 events a millisecond.
        if now >= next_tick {
            next_tick = now + Duration::from_millis(1);
            budget = EVENTS_PER_MS;
        }
        while budget > 0 {
            let client_ip = sim.addrs[0];
            let n = sim.stacks[1].node();
            let Some(e) = n.poll_rdma_event() else {
                break;
            };
            budget -= 1;
            match e.kind() {
                T::ConnectRequest => {
                    let id = e.into_new_id().expect("new id");
                    let (pd, cq) = (apps[1].pd, apps[1].cq);
                    let s = n.stack_mut(apps[1].port).expect("port");
                    let (qpn, _) = s.verbs.create_qp(QpInitAttr::rc(pd, cq, 4, 4)).expect("qp");
                    RdmaCm::init_qp(s, qpn).expect("init");
                    let legit = n.rdma().remote_addr(id.name()).map(|a| a.ip()) == Some(client_ip);
                    if legit {
                        server_side = Some(id.name());
                    }
                    n.with_port(now, apps[1].port, |cm, s| {
                        cm.accept(now, s, &id, qpn, &ConnParam::default())
                    })
                    .expect("port")
                    .expect("accept");
                    accepted.insert(
                        id.name(),
                        Res {
                            id: Some(id),
                            qpn: Some(qpn),
                            mr: None,
                        },
                    );
                }
                T::Established => assert_eq!(Some(e.id()), server_side),
                T::Unreachable => {
                    let res = accepted.remove(&e.id()).expect("accepted");
                    n.rdma_mut().destroy(now, res.id.expect("id"));
                    let s = n.stack_mut(apps[1].port).expect("port");
                    s.destroy_qp(res.qpn.expect("qp")).expect("destroy qp");
                }
                _ => panic!("server: {e:?}"),
            }
        }
        max_accepted = max_accepted.max(accepted.len());
        let n = sim.stacks[1].node();
        let ids = n.rdma().id_count();
        max_ids = max_ids.max(ids);
        // The bounds: the backlog's queue; the accepted ones (a REP lives 1 ms, but its
        // UNREACHABLE waits behind the queued CONNECT_REQUESTs).
        assert!(ids <= 1 + BACKLOG as usize + accepted.len(), "{ids}");
        assert!(
            accepted.len() <= BACKLOG as usize + 4 * EVENTS_PER_MS,
            "{}",
            accepted.len()
        );
        assert!(n.rdma().cm().half_open() <= BACKLOG as usize + EVENTS_PER_MS);
        let mad = n.mad(apps[1].port).expect("port");
        assert!(mad.agent().outstanding() <= accepted.len());
        // Time: the next datagram or timer, or the next millisecond.
        sim.flush();
        let timers = sim.stacks[..2]
            .iter()
            .filter_map(|h| h.poll_timeout())
            .chain([next_tick, client_start.max(now)])
            .filter(|&t| t > now)
            .min();
        match (sim.next_event(), timers) {
            (Some(n), Some(t)) if n <= t => {
                sim.step();
            }
            (Some(_), None) => {
                sim.step();
            }
            (_, Some(t)) => sim.now = sim.now.max(t),
            (None, None) => break,
        }
    }
    let up = client_up.expect("the client connected");
    assert!(
        up - client_start <= Duration::from_secs(1),
        "{:?}",
        up - client_start
    );
    assert_eq!(sent, 100_000);
    let n = sim.stacks[1].node();
    let c = n.rdma().counters();
    assert!(c.backlog_drops > 90_000, "{c:?}");
    // What is left: the listener and the client's connection on the server.
    assert_eq!(accepted.len(), 1);
    assert_eq!(n.rdma().id_count(), 2);
    let s = n.rdma().cm().table_sizes();
    assert_eq!(
        (s.ids, s.half_open, s.remote_ids, s.timewaits),
        (2, 0, 1, 0),
        "{s:?}"
    );
    assert_eq!(n.mad(apps[1].port).expect("port").agent().outstanding(), 0);
    eprintln!(
        "RDMA CM flood: {sent} REQs, {} dropped at the backlog, at most {max_ids} ids and \
         {max_accepted} accepted at once; the client connected {:?} after it started",
        c.backlog_drops,
        up - client_start
    );
    let _ = (listen, client_qp);
}

/// The flood's hosts: nodes, and the attacker — a bare stack with QP1 and a MAD layer of
/// its own, whose CM agent writes REQs and never answers (its events are dropped).
// Three hosts in one test: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum FloodHost {
    Node(Node),
    Evil(Stack, crate::mad::MadPort),
}

impl FloodHost {
    fn node(&mut self) -> &mut Node {
        match self {
            FloodHost::Node(n) => n,
            FloodHost::Evil(..) => unreachable!("the attacker is no node"),
        }
    }
}

impl crate::sim::Host for FloodHost {
    fn port_addrs(&self) -> Vec<Vec<std::net::IpAddr>> {
        match self {
            FloodHost::Node(n) => n.port_addrs(),
            FloodHost::Evil(s, _) => s.port_addrs(),
        }
    }
    fn handle_datagram(
        &mut self,
        now: Instant,
        port: usize,
        src: SocketAddr,
        dst: std::net::IpAddr,
        bytes: &[u8],
    ) {
        match self {
            FloodHost::Node(n) => crate::sim::Host::handle_datagram(n, now, port, src, dst, bytes),
            FloodHost::Evil(s, mad) => {
                s.handle_datagram(now, src, dst, bytes);
                mad.poll(now, s);
                while mad.poll_event().is_some() {}
            }
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            FloodHost::Node(n) => n.handle_timeout(now),
            FloodHost::Evil(s, mad) => {
                if s.poll_timeout().is_some_and(|t| t <= now) {
                    s.handle_timeout(now);
                }
                mad.handle_timeout(now);
                while mad.poll_event().is_some() {}
            }
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            FloodHost::Node(n) => n.poll_timeout(),
            FloodHost::Evil(s, mad) => match (s.poll_timeout(), mad.poll_timeout()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
    fn poll_transmit(&mut self, now: Instant, port: usize) -> Option<crate::Transmit> {
        match self {
            FloodHost::Node(n) => crate::sim::Host::poll_transmit(n, now, port),
            FloodHost::Evil(s, mad) => {
                mad.flush(s);
                s.poll_transmit(now)
            }
        }
    }
    fn poll_transmit_batch(
        &mut self,
        now: Instant,
        port: usize,
        batch: &mut crate::transport::TransmitBatch,
    ) -> usize {
        match self {
            FloodHost::Node(n) => crate::sim::Host::poll_transmit_batch(n, now, port, batch),
            FloodHost::Evil(s, mad) => {
                mad.flush(s);
                s.poll_transmit_batch(now, batch)
            }
        }
    }
}
