//! CM memory per id, counted by the allocator: the heap the IB CM and the RDMA CM hold for
//! each established connection, each idle id (created, not bound), each bound id and each
//! listener. The goal (issue 13, "The CM at scale"): an established connection's CM state
//! at most 1 KiB per side.
//!
//! Two [`Node`]s (each a [`Stack`] with QP1 and a MAD layer and an [`RdmaCm`] on it, in the
//! node's call order), datagrams handed from one to the other, connecting [`CONNS`] RC connections through the RDMA CM in blocks of 1,000 —
//! resolve address, resolve route, a QP per connection, connect, accept, ESTABLISHED on both
//! sides. The figures come from the global allocator ([`stats_alloc`]): live bytes = bytes
//! allocated − bytes freed.
//!
//! - **established**: what the CM frees when it goes. After the run, each side's `RdmaCm`
//!   (its ids, the IB CM with its ids and tables, the event queues: all it owns) is dropped;
//!   the bytes freed, less what an empty CM with one listener frees, over the connections.
//!   The stacks, QPs and MAD layers are not part of it (they stay alive). The growth of live
//!   bytes during the connect phase is printed too (it includes the QPs' transport state).
//! - **idle id**: live-byte growth over 10,000 `create_id`s;
//! - **bound id**: over 10,000 `create_id` + `bind_addr(addr, port)`;
//! - **listener**: over 1,000 `listen_on` (distinct ports);
//!
//! each also checked by the bytes freed when the ids are destroyed. Everything runs in one
//! `#[test]` (the counters are global: no other test may allocate meanwhile).
//!
//! `cargo test -p softrdma-core --test cm_memory -- --nocapture` (debug or release: the same
//! figures).

use std::alloc::System;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_core::cm::{CmConfig, CmPort, RXE_CA_ACK_DELAY};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEventType as T, RdmaCmId, RdmaId};
use softrdma_core::time::{Duration, Instant};
use softrdma_core::verbs::{CqId, PdId, QpInitAttr};
use softrdma_core::{DeviceConfig, Node, Stack};
use softrdma_wire::Guid;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Established connections measured.
const CONNS: usize = 10_000;
/// Connections set up together.
const BLOCK: usize = 1_000;
/// The goal per established connection and side.
const GOAL: f64 = 1024.0;
const PORT: u16 = 7471;

fn live(r: &Region<'_, System>) -> isize {
    let c = r.change();
    c.bytes_allocated as isize - c.bytes_deallocated as isize + c.bytes_reallocated
}

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 99, 0, n))
}

/// A node and what its application keeps: the port, a PD and a CQ.
struct Host {
    node: Node,
    port: CmPort,
    pd: PdId,
    cq: CqId,
}

fn node(n: u8) -> Host {
    let stack = Stack::new(
        DeviceConfig::new(format!("mem{n}"), vec![ip(n)]).with_max_qp(4 * CONNS as u32),
        u64::from(n),
    );
    let mut node = Node::new(CmConfig {
        node_guid: Guid(0x5054_00ff_fe99_0000 + u64::from(n)),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed: u64::from(n),
        half_open_limit: 4 * BLOCK,
        event_queue_limit: 4 * BLOCK,
    })
    .expect("node");
    let port = node.add_port(stack, 4 * BLOCK as u32).expect("port");
    let s = node.stack_mut(port).expect("stack");
    let pd = s.verbs.alloc_pd().expect("pd");
    let cq = s.verbs.create_cq(64).expect("cq");
    Host { node, port, pd, cq }
}

impl Host {
    fn cm(&mut self) -> &mut RdmaCm {
        self.node.rdma_mut()
    }

    /// An RC QP in INIT (what `rdma_create_qp` leaves).
    fn qp(&mut self) -> u32 {
        let (pd, cq) = (self.pd, self.cq);
        let s = self.node.stack_mut(self.port).expect("stack");
        let (qpn, _) = s.verbs.create_qp(QpInitAttr::rc(pd, cq, 1, 1)).expect("qp");
        RdmaCm::init_qp(s, qpn).expect("init");
        qpn
    }

    /// The node's timers if due (the application takes no IB CM notices).
    fn turn(&mut self, now: Instant) {
        if self.node.poll_timeout().is_some_and(|t| t <= now) {
            self.node.handle_timeout(now);
        }
        while self.node.poll_ib_event().is_some() {}
    }
}

/// Hands everything `from` sends to `to`; whether anything moved.
fn deliver(now: Instant, from: &mut Host, to: &mut Host) -> bool {
    let mut moved = false;
    while let Some(tx) = from.node.poll_transmit(now, from.port) {
        let src = SocketAddr::new(tx.src_ip, tx.src_port);
        to.node
            .handle_datagram(now, to.port, src, tx.dst.ip(), &tx.payload);
        moved = true;
    }
    moved
}

/// Both nodes' turns until no datagram moves.
fn pump(now: Instant, a: &mut Host, b: &mut Host) {
    loop {
        a.turn(now);
        let ab = deliver(now, a, b);
        b.turn(now);
        let ba = deliver(now, b, a);
        if !ab && !ba {
            break;
        }
    }
}

/// `CONNS` established connections from `a` to `b`'s listener; returns the ids (active,
/// passive) and the live-byte growth of the connect phase.
fn connect_all(
    a: &mut Host,
    b: &mut Host,
    now: &mut Instant,
    region: &Region<'_, System>,
) -> (Vec<RdmaCmId>, Vec<RdmaCmId>, isize) {
    let dst = SocketAddr::new(ip(2), PORT);
    let mut act: Vec<RdmaCmId> = Vec::with_capacity(CONNS);
    let mut pas: Vec<RdmaCmId> = Vec::with_capacity(CONNS);
    // The QPs and the application's vectors first: not the CM's.
    let a_qps: Vec<u32> = (0..CONNS).map(|_| a.qp()).collect();
    let b_qps: Vec<u32> = (0..CONNS).map(|_| b.qp()).collect();
    let mut events: Vec<(RdmaId, T)> = Vec::with_capacity(4 * BLOCK);
    let before = live(region);
    let p = ConnParam::default();
    for k in 0..CONNS / BLOCK {
        let ids: Vec<RdmaCmId> = (0..BLOCK).map(|_| a.cm().create_id()).collect();
        for id in &ids {
            a.cm()
                .resolve_addr(id, Some(ip(1)), dst)
                .expect("resolve addr");
        }
        events.clear();
        while let Some(e) = a.node.poll_rdma_event() {
            events.push((e.id(), e.kind()));
        }
        assert!(events.iter().all(|e| e.1 == T::AddrResolved), "{events:?}");
        for id in &ids {
            a.cm().resolve_route(id).expect("resolve route");
        }
        events.clear();
        while let Some(e) = a.node.poll_rdma_event() {
            events.push((e.id(), e.kind()));
        }
        assert!(events.iter().all(|e| e.1 == T::RouteResolved), "{events:?}");
        for (j, id) in ids.iter().enumerate() {
            let qpn = a_qps[k * BLOCK + j];
            a.node
                .with_port(*now, a.port, |cm, s| cm.connect(*now, s, id, Some(qpn), &p))
                .expect("port")
                .expect("connect");
        }
        act.extend(ids);
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        // The server accepts every request.
        while let Some(e) = b.node.poll_rdma_event() {
            assert_eq!(e.kind(), T::ConnectRequest, "{e:?}");
            let id = e.into_new_id().expect("new id");
            let qpn = b_qps[pas.len()];
            b.node
                .with_port(*now, b.port, |cm, s| cm.accept(*now, s, &id, qpn, &p))
                .expect("port")
                .expect("accept");
            pas.push(id);
            if pas.len() % 256 == 0 {
                // Send as a runtime does between commands, not all at the end.
                deliver(*now, b, a);
            }
        }
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        let mut up = 0;
        while let Some(e) = a.node.poll_rdma_event() {
            assert_eq!(e.kind(), T::Established, "{e:?}");
            up += 1;
        }
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        while let Some(e) = b.node.poll_rdma_event() {
            assert_eq!(e.kind(), T::Established, "{e:?}");
            up += 1;
        }
        assert_eq!(up, 2 * BLOCK, "block {k}");
    }
    assert_eq!(act.len(), CONNS);
    assert_eq!(pas.len(), CONNS);
    assert!(a.cm().poll_timeout().is_none(), "no CM timer left running");
    (act, pas, live(region) - before)
}

/// Bytes freed by dropping `cm` (everything it owns).
fn freed_by_drop(cm: RdmaCm, region: &Region<'_, System>) -> isize {
    let before = live(region);
    drop(cm);
    before - live(region)
}

/// A CM on a port of its own with no connection (and a listener, with `listen`, as the
/// passive side has): what dropping it frees (the baseline).
fn baseline(listen: bool, region: &Region<'_, System>) -> isize {
    let mut n = node(2);
    if listen {
        // The handle owns no heap and has no drop: the listener stays in the CM.
        let _listener = n
            .cm()
            .listen_on(SocketAddr::new(ip(2), PORT), 1024)
            .expect("listen");
    }
    let (cm, _ports) = n.node.into_parts();
    freed_by_drop(cm, region)
}

/// Live-byte growth per item of `n` items made by `make`, and the bytes per item their
/// `destroy` frees.
fn per_item(
    region: &Region<'_, System>,
    cm: &mut RdmaCm,
    n: usize,
    mut make: impl FnMut(&mut RdmaCm, usize) -> RdmaCmId,
) -> (f64, f64) {
    let mut ids = Vec::with_capacity(n);
    let before = live(region);
    for k in 0..n {
        ids.push(make(cm, k));
    }
    let grown = live(region) - before;
    let before = live(region);
    let names: Vec<RdmaId> = ids.iter().map(|i| i.name()).collect();
    for id in ids {
        cm.destroy(Instant::ZERO, id);
    }
    let freed = before - live(region);
    assert!(names.iter().all(|n| cm.qpn(*n).is_none()));
    (grown as f64 / n as f64, freed as f64 / n as f64)
}

#[test]
fn cm_memory_per_id() {
    let region = Region::new(GLOBAL);
    let (mut a, mut b) = (node(1), node(2));
    let listener = b
        .cm()
        .listen_on(SocketAddr::new(ip(2), PORT), 1024)
        .expect("listen");
    let mut now = Instant::from_millis(1);

    // Established connections: the CMs' own heap, by what dropping them frees.
    let (act, pas, growth) = connect_all(&mut a, &mut b, &mut now, &region);
    let base_a = baseline(false, &region);
    let base_b = baseline(true, &region);
    // The handles carry no heap (RdmaCmId is a number); forgetting them keeps their
    // drops (none) out of the figures.
    std::mem::forget((act, pas, listener));
    let (cm_a, _ports_a) = a.node.into_parts();
    let (cm_b, _ports_b) = b.node.into_parts();
    let freed_a = freed_by_drop(cm_a, &region);
    let freed_b = freed_by_drop(cm_b, &region);
    let per_a = (freed_a - base_a) as f64 / CONNS as f64;
    let per_b = (freed_b - base_b) as f64 / CONNS as f64;
    println!(
        "CM state per established connection ({CONNS} connections): active side {per_a:.0} B, \
         passive side {per_b:.0} B (IB CM + RDMA CM, what dropping each CM frees less an \
         empty CM's {base_a}/{base_b} B); live-byte growth of the connect phase, both sides, \
         QPs' transport state included: {:.0} B per connection",
        growth as f64 / CONNS as f64
    );

    // Idle ids, bound ids, listeners on a fresh CM.
    let (mut cm, _ports) = node(1).node.into_parts();
    let (idle, idle_freed) = per_item(&region, &mut cm, 10_000, |cm, _| cm.create_id());
    let (bound, bound_freed) = per_item(&region, &mut cm, 10_000, |cm, k| {
        let id = cm.create_id();
        cm.bind_addr(&id, SocketAddr::new(ip(1), 1024 + k as u16))
            .expect("bind");
        id
    });
    let (listen, listen_freed) = per_item(&region, &mut cm, 1_000, |cm, k| {
        cm.listen_on(SocketAddr::new(ip(1), 20_000 + k as u16), 1024)
            .expect("listen")
    });
    println!(
        "CM state per idle id {idle:.0} B (destroy frees {idle_freed:.0}), per bound id \
         {bound:.0} B (frees {bound_freed:.0}), per listener {listen:.0} B (frees \
         {listen_freed:.0})"
    );

    assert!(per_a > 0.0 && per_b > 0.0, "the allocator counts");
    assert!(
        per_a <= GOAL && per_b <= GOAL,
        "CM state per established connection: active {per_a:.0} B, passive {per_b:.0} B \
         (goal ≤ {GOAL} B)"
    );
    assert!(idle > 0.0 && bound >= idle && listen >= bound);
    assert!(idle <= GOAL && bound <= GOAL && listen <= 4.0 * GOAL);
}
