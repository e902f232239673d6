//! CM memory per id, counted by the allocator: the heap the IB CM and the RDMA CM hold for
//! each established connection, each idle id (created, not bound), each bound id and each
//! listener. The goal (issue 13, "The CM at scale"): an established connection's CM state
//! at most 1 KiB per side.
//!
//! Two nodes in a sans-IO loop (each a [`Stack`] with QP1 and a MAD layer ([`MadPort`]) and
//! an [`RdmaCm`] on it, the runtime's call order, datagrams handed from one stack to the
//! other), connecting [`CONNS`] RC connections through the RDMA CM in blocks of 1,000 —
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
use softrdma_core::mad::MadPort;
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEventType as T, RdmaCmId, RdmaId};
use softrdma_core::time::{Duration, Instant};
use softrdma_core::verbs::{CqId, PdId, QpInitAttr};
use softrdma_core::{DeviceConfig, Stack};
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

struct Node {
    stack: Stack,
    mad: MadPort,
    cm: RdmaCm,
    port: CmPort,
    pd: PdId,
    cq: CqId,
}

fn node(n: u8) -> Node {
    let mut stack = Stack::new(
        DeviceConfig::new(format!("mem{n}"), vec![ip(n)]).with_max_qp(4 * CONNS as u32),
        u64::from(n),
    );
    let mut mad = MadPort::open(&mut stack, 2, 4 * BLOCK as u32).expect("qp1");
    let mut cm = RdmaCm::new(CmConfig {
        node_guid: Guid(0x5054_00ff_fe99_0000 + u64::from(n)),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed: u64::from(n),
        half_open_limit: 4 * BLOCK,
        event_queue_limit: 4 * BLOCK,
    })
    .expect("cm");
    let port = cm.add_port(mad.agent_mut(), &stack).expect("port");
    let pd = stack.verbs.alloc_pd().expect("pd");
    let cq = stack.verbs.create_cq(64).expect("cq");
    Node {
        stack,
        mad,
        cm,
        port,
        pd,
        cq,
    }
}

impl Node {
    /// An RC QP in INIT (what `rdma_create_qp` leaves).
    fn qp(&mut self) -> u32 {
        let (qpn, _) = self
            .stack
            .verbs
            .create_qp(QpInitAttr::rc(self.pd, self.cq, 1, 1))
            .expect("qp");
        RdmaCm::init_qp(&mut self.stack, qpn).expect("init");
        qpn
    }

    /// One runtime turn (`crate::mad::port`'s order) without the application.
    fn turn(&mut self, now: Instant) {
        self.mad.poll(now, &mut self.stack);
        self.mad.handle_timeout(now);
        while let Some(ev) = self.mad.poll_event() {
            self.cm.handle_mad(now, self.port, &mut self.stack, ev);
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm.handle_timeout(now);
        }
        while self.cm.poll_ib_event().is_some() {}
        self.flush();
    }

    fn flush(&mut self) {
        while let Some((_, agent, op)) = self.cm.poll_mad() {
            let _ = self.mad.agent_mut().apply(agent, op);
        }
        self.mad.flush(&mut self.stack);
    }
}

/// Hands everything `from` sends to `to`; whether anything moved.
fn deliver(now: Instant, from: &mut Stack, to: &mut Stack) -> bool {
    let mut moved = false;
    while let Some(tx) = from.poll_transmit(now) {
        let src = SocketAddr::new(tx.src_ip, tx.src_port);
        to.handle_datagram(now, src, tx.dst.ip(), &tx.payload);
        moved = true;
    }
    moved
}

/// Both nodes' turns until no datagram moves.
fn pump(now: Instant, a: &mut Node, b: &mut Node) {
    loop {
        a.turn(now);
        let ab = deliver(now, &mut a.stack, &mut b.stack);
        b.turn(now);
        let ba = deliver(now, &mut b.stack, &mut a.stack);
        if !ab && !ba {
            break;
        }
    }
}

/// `CONNS` established connections from `a` to `b`'s listener; returns the ids (active,
/// passive) and the live-byte growth of the connect phase.
fn connect_all(
    a: &mut Node,
    b: &mut Node,
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
        let ids: Vec<RdmaCmId> = (0..BLOCK).map(|_| a.cm.create_id()).collect();
        for id in &ids {
            a.cm.resolve_addr(id, Some(ip(1)), dst)
                .expect("resolve addr");
        }
        events.clear();
        while let Some(e) = a.cm.poll_event() {
            events.push((e.id, e.event));
        }
        assert!(events.iter().all(|e| e.1 == T::AddrResolved), "{events:?}");
        for id in &ids {
            a.cm.resolve_route(id).expect("resolve route");
        }
        events.clear();
        while let Some(e) = a.cm.poll_event() {
            events.push((e.id, e.event));
        }
        assert!(events.iter().all(|e| e.1 == T::RouteResolved), "{events:?}");
        for (j, id) in ids.iter().enumerate() {
            let qpn = a_qps[k * BLOCK + j];
            a.cm.connect(*now, &mut a.stack, id, Some(qpn), &p)
                .expect("connect");
        }
        a.flush();
        act.extend(ids);
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        // The server accepts every request.
        while let Some(mut e) = b.cm.poll_event() {
            assert_eq!(e.event, T::ConnectRequest, "{e:?}");
            let id = e.new_id.take().expect("new id");
            let qpn = b_qps[pas.len()];
            b.cm.accept(*now, &mut b.stack, &id, qpn, &p)
                .expect("accept");
            pas.push(id);
            if pas.len() % 256 == 0 {
                b.flush();
            }
        }
        b.flush();
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        let mut up = 0;
        while let Some(e) = a.cm.poll_event() {
            assert_eq!(e.event, T::Established, "{e:?}");
            up += 1;
        }
        *now += Duration::from_micros(10);
        pump(*now, a, b);
        while let Some(e) = b.cm.poll_event() {
            assert_eq!(e.event, T::Established, "{e:?}");
            up += 1;
        }
        assert_eq!(up, 2 * BLOCK, "block {k}");
    }
    assert_eq!(act.len(), CONNS);
    assert_eq!(pas.len(), CONNS);
    assert!(a.cm.poll_timeout().is_none(), "no CM timer left running");
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
        let _listener =
            n.cm.listen_on(SocketAddr::new(ip(2), PORT), 1024)
                .expect("listen");
    }
    let cm = n.cm;
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
    let listener =
        b.cm.listen_on(SocketAddr::new(ip(2), PORT), 1024)
            .expect("listen");
    let mut now = Instant::from_millis(1);

    // Established connections: the CMs' own heap, by what dropping them frees.
    let (act, pas, growth) = connect_all(&mut a, &mut b, &mut now, &region);
    let base_a = baseline(false, &region);
    let base_b = baseline(true, &region);
    // The handles carry no heap (RdmaCmId is a number); forgetting them keeps their
    // drops (none) out of the figures.
    std::mem::forget((act, pas, listener));
    let freed_a = freed_by_drop(a.cm, &region);
    let freed_b = freed_by_drop(b.cm, &region);
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
    let mut cm = node(1).cm;
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
