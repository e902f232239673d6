//! [`Node`]: everything one host runs, as one sans-IO object — each port's [`Stack`]
//! (device, verbs, transport), QP1 and the MAD layer of each port ([`MadPort`]), the
//! management classes on them (the IB CM always; device management or anything else as a
//! [`MadClass`]), the IB CM and the RDMA CM ([`RdmaCm`]). It is quinn-proto's `Endpoint`
//! for RDMA: no socket, no clock, no thread; input through `handle_*`, output through
//! `poll_*`, commands by `&mut`.
//!
//! # The call order, once
//!
//! This is the only place it is written down; every runtime, simulation and fuzz target
//! that drives a node drives it through these calls and gets this order:
//!
//! ```text
//! handle_datagram(now, port, src, dst, bytes)
//!     Stack::handle_datagram              ICRC, BTH checks, the QP; a MAD lands on QP1
//!     MadPort::poll                       QP1 receive completions → MadAgent::handle_receive
//!     dispatch                            each MadEvent to the class that owns its agent:
//!                                           the CM (RdmaCm::handle_mad → CmEndpoint::handle_mad)
//!                                           or a MadClass
//!     route                               the CM's MadOps → each port's MadAgent::apply
//! handle_timeout(now)
//!     Stack::handle_timeout               transport timers (ACK, retransmission, RNR)
//!     MadPort::handle_timeout             MAD retransmissions and timeouts → dispatch
//!     MadClass::handle_timeout            each class's own timers
//!     RdmaCm::handle_timeout              timewait exits
//!     route
//! commands                                with_port / rdma_mut / stack_mut, then route
//! poll_transmit_batch(now, port, batch)
//!     route
//!     MadPort::flush                      the MAD layer's sends → UD SENDs on QP1
//!     Stack::poll_transmit_batch          GSO trains for the wire
//! poll_timeout()                          min(stacks, MAD layers, classes, CM)
//! poll_event*()                           events, drained per owner (id, listener) or all
//! ```
//!
//! A tool that speaks MADs rather than datagrams (the IB CM's own tests, through
//! [`crate::cm::SinglePortCm`]) skips QP1's transport with the MAD-level forms of the
//! same calls: [`Node::handle_mad`] (a MAD into the port's MAD layer, then dispatch and
//! route) and [`Node::poll_mad_transmit`] (route and dispatch until quiet, then the
//! layer's next send as a MAD).
//!
//! A MAD is handled in the `handle_datagram` call that carried it: a REQ becomes a
//! CONNECT_REQUEST (or is refused) before the call returns, and the answer the CM decided
//! on is on QP1's send queue at the next `poll_transmit_batch`.
//!
//! # Events, per owner
//!
//! The RDMA CM's events wait in its one bounded queue
//! ([`crate::cm::CmConfig::event_queue_limit`]) in the order they happened. A runtime that
//! serves one application takes them all with [`Node::poll_event`]; one that serves many
//! (threads each waiting on their own id) takes each owner's with
//! [`Node::poll_event_of`]: an id's own events, and for a listener its CONNECT_REQUESTs —
//! so no waiter ever handles another's event, and a CONNECT_REQUEST holds its listener's
//! backlog slot until the listener's owner takes it.

use std::net::{IpAddr, SocketAddr};

use crate::cm::{CmConfig, CmEvent, CmPort};
use crate::mad::port::RXE_FIRST_CLIENT_HI_TID;
use crate::mad::{AgentId, MadAddr, MadAgent, MadEvent, MadPort, OutMad};
use crate::rdma_cm::{AnyEvent, RdmaCm, RdmaCmError, RdmaCmEvent, RdmaId};
use crate::time::Instant;
use crate::transport::{Stack, Transmit, TransmitBatch};
use crate::verbs::VerbsError;

/// What a management class gets while it handles a MAD event or a timer: its port's stack
/// and MAD layer.
pub struct PortCtx<'a> {
    pub now: Instant,
    pub port: CmPort,
    pub stack: &'a mut Stack,
    pub mad: &'a mut MadAgent,
}

/// A management class served on one port's QP1 (besides the CM, which the node runs
/// itself): device management, a test's agent. It registers its agents on the port's
/// [`MadAgent`] when it is attached ([`Node::attach_class`]); the node hands it every
/// [`MadEvent`] of those agents.
pub trait MadClass: Send {
    /// Whether `agent` (on the class's port) is one of the class's.
    fn owns(&self, agent: AgentId) -> bool;
    /// An event for one of the class's agents.
    fn handle_mad(&mut self, ctx: &mut PortCtx<'_>, ev: MadEvent);
    /// When the class's own timers want [`MadClass::handle_timeout`] (none by default).
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// The class's timers due by `ctx.now`.
    fn handle_timeout(&mut self, _ctx: &mut PortCtx<'_>) {}
}

/// Why a node refused.
#[derive(Debug)]
pub enum NodeError {
    /// QP1 could not be created on the port's stack.
    Qp1(VerbsError),
    /// The RDMA CM refused the port (or a class's registration failed).
    Cm(RdmaCmError),
    /// No such port on this node.
    NoSuchPort,
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Qp1(e) => write!(f, "QP1 could not be opened: {e}"),
            NodeError::Cm(e) => write!(f, "the CM refused the port: {e}"),
            NodeError::NoSuchPort => f.write_str("no such port on this node"),
        }
    }
}

impl std::error::Error for NodeError {}

impl From<RdmaCmError> for NodeError {
    fn from(e: RdmaCmError) -> Self {
        NodeError::Cm(e)
    }
}

/// What the node itself counts (the layers count the rest: [`Stack::counters`],
/// [`MadAgent::counters`], [`RdmaCm::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// MAD events for an agent no class owns (registered, then its class detached): dropped.
    pub orphaned_mads: u64,
    /// Datagrams for a port the node does not have: dropped.
    pub no_such_port: u64,
}

/// A port taken out of a node ([`Node::into_ports`]) to be added to another
/// ([`Node::adopt_port`]).
pub struct NodePort {
    pub stack: Stack,
    pub mad: MadPort,
    pub classes: Vec<Box<dyn MadClass>>,
}

struct Port {
    stack: Stack,
    mad: MadPort,
    /// The CM's agent on this port's MAD layer.
    cm_agent: AgentId,
    classes: Vec<Box<dyn MadClass>>,
}

/// One host's RDMA stack, sans-IO (see the module docs for the call order).
pub struct Node {
    rdma: RdmaCm,
    ports: Vec<Port>,
    counters: NodeCounters,
    /// The latest time the node was given (commands without a time of their own use it).
    now: Instant,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("ports", &self.ports.len())
            .field("queued_events", &self.rdma.queued_events())
            .field("counters", &self.counters)
            .finish()
    }
}

impl Node {
    /// A node with no port yet; `cfg` configures its CM (seed, limits, timers).
    pub fn new(cfg: CmConfig) -> Result<Node, NodeError> {
        Ok(Node {
            rdma: RdmaCm::new(cfg)?,
            ports: Vec::new(),
            counters: NodeCounters::default(),
            now: Instant::ZERO,
        })
    }

    /// Adds a port (a device, `cm_add_one`): opens QP1 on `stack` with `qp1_recv_depth`
    /// receive buffers (the kernel posts [`crate::mad::port::DEFAULT_RECV_DEPTH`]) and runs
    /// the CM on it, as rxe's first MAD client after ib_agent and ib_sa.
    pub fn add_port(&mut self, mut stack: Stack, qp1_recv_depth: u32) -> Result<CmPort, NodeError> {
        let mad = MadPort::open(&mut stack, RXE_FIRST_CLIENT_HI_TID, qp1_recv_depth)
            .map_err(NodeError::Qp1)?;
        self.adopt_port(NodePort {
            stack,
            mad,
            classes: Vec::new(),
        })
    }

    /// Adds a port that another node ran ([`Node::into_ports`]): its stack, QP1 with what
    /// is posted and pending on it, and its classes move here, and this node's CM
    /// registers on its MAD layer. A runtime moves a device into the node of the CM it is
    /// added to this way (the device's QPs and memory go with it).
    pub fn adopt_port(&mut self, port: NodePort) -> Result<CmPort, NodeError> {
        let NodePort {
            stack,
            mut mad,
            classes,
        } = port;
        let port = self.rdma.add_port(mad.agent_mut(), &stack)?;
        let cm_agent = self.rdma.cm().agent(port).ok_or(NodeError::NoSuchPort)?;
        debug_assert_eq!(port.index(), self.ports.len());
        self.ports.push(Port {
            stack,
            mad,
            cm_agent,
            classes,
        });
        Ok(port)
    }

    /// Takes the node apart into its ports, each with its stack, QP1 and classes, the CM's
    /// agent unregistered from its MAD layer (for [`Node::adopt_port`]); the CMs and
    /// their ids are dropped.
    pub fn into_ports(self) -> Vec<NodePort> {
        self.ports
            .into_iter()
            .map(|mut p| {
                // Registered by this node on this layer: it cannot be unknown. The CM
                // that adopts the port registers with the same hi_tid.
                let _ = p.mad.agent_mut().unregister_for_reuse(p.cm_agent);
                NodePort {
                    stack: p.stack,
                    mad: p.mad,
                    classes: p.classes,
                }
            })
            .collect()
    }

    /// Retires a port whose device is gone (a runtime's device closed while its node lives
    /// on): its stack — every QP, CQ and region — leaves the node and is returned (to be
    /// dropped by the caller), an empty stack with no address takes its place, and the CM
    /// is told (no address of it resolves to the port any more). The port keeps its index,
    /// as a kernel port's number is not reused while the device is registered; its MAD layer
    /// and classes stay, with nothing to receive. A device opened again is a new port.
    pub fn retire_port(&mut self, port: CmPort) -> Result<Stack, NodeError> {
        let p = self
            .ports
            .get_mut(port.index())
            .ok_or(NodeError::NoSuchPort)?;
        let name = p.stack.device.name().to_string();
        let empty = Stack::new(crate::DeviceConfig::new(name, Vec::new()), 0);
        let old = std::mem::replace(&mut p.stack, empty);
        self.rdma.update_port(port, &p.stack);
        Ok(old)
    }

    /// An address of `port`'s interface appeared (`present`) or went away, as an rxe port
    /// learns it from a netdev event: its GIDs join or leave the port's table (a removed
    /// one leaves its index empty) and the RDMA CM resolves the address to the port, or no
    /// longer. Returns whether the table changed.
    pub fn port_address(
        &mut self,
        port: CmPort,
        ip: std::net::IpAddr,
        present: bool,
    ) -> Result<bool, NodeError> {
        let p = port_mut(&mut self.ports, port)?;
        let changed = if present {
            p.stack.device.add_addr(ip)
        } else {
            p.stack.device.remove_addr(ip)
        };
        if changed {
            self.rdma.update_port(port, &p.stack);
        }
        Ok(changed)
    }

    /// Runs `f` with `port`'s stack and MAD layer as a class gets them (a send of a class's
    /// agent from outside its handlers); what it sends goes out at the next
    /// [`Node::poll_transmit_batch`].
    pub fn with_mad<R>(
        &mut self,
        now: Instant,
        port: CmPort,
        f: impl FnOnce(&mut PortCtx<'_>) -> R,
    ) -> Result<R, NodeError> {
        self.advance(now);
        let p = port_mut(&mut self.ports, port)?;
        let mut ctx = PortCtx {
            now,
            port,
            stack: &mut p.stack,
            mad: p.mad.agent_mut(),
        };
        Ok(f(&mut ctx))
    }

    /// Attaches a management class to `port`: `make` registers its agents on the port's
    /// MAD layer and returns the class.
    pub fn attach_class<E>(
        &mut self,
        port: CmPort,
        make: impl FnOnce(&mut MadAgent, &mut Stack) -> Result<Box<dyn MadClass>, E>,
    ) -> Result<Result<(), E>, NodeError> {
        let p = port_mut(&mut self.ports, port)?;
        Ok(make(p.mad.agent_mut(), &mut p.stack).map(|c| p.classes.push(c)))
    }

    /// The ports, in the order they were added.
    pub fn ports(&self) -> impl Iterator<Item = CmPort> + '_ {
        self.rdma.cm().ports()
    }

    /// How many ports the node has.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// The port whose stack holds `ip` as an address, if any.
    pub fn port_for_ip(&self, ip: IpAddr) -> Option<CmPort> {
        let i = self
            .ports
            .iter()
            .position(|p| p.stack.device.addrs().contains(&ip))?;
        self.ports().nth(i)
    }

    /// A port's stack (queries, counters).
    pub fn stack(&self, port: CmPort) -> Option<&Stack> {
        self.ports.get(port.index()).map(|p| &p.stack)
    }

    /// A port's stack, for verbs commands; what they queue goes out at the next
    /// [`Node::poll_transmit_batch`].
    pub fn stack_mut(&mut self, port: CmPort) -> Option<&mut Stack> {
        self.ports.get_mut(port.index()).map(|p| &mut p.stack)
    }

    /// A port's MAD layer (counters, registrations).
    pub fn mad(&self, port: CmPort) -> Option<&MadPort> {
        self.ports.get(port.index()).map(|p| &p.mad)
    }

    /// The RDMA CM (with the IB CM inside: [`RdmaCm::cm`]).
    pub fn rdma(&self) -> &RdmaCm {
        &self.rdma
    }

    /// The RDMA CM, for commands that need no stack (listen, resolve, destroy...). What
    /// they send reaches the MAD layers at the next handle or poll.
    pub fn rdma_mut(&mut self) -> &mut RdmaCm {
        &mut self.rdma
    }

    /// Runs `f` on the RDMA CM with `port`'s stack (connect, accept, an SRP login, the IB
    /// CM through [`RdmaCm::cm_mut`]...), then takes the IB CM's events the command
    /// caused, with that stack, as the CM's own handlers do.
    pub fn with_port<R>(
        &mut self,
        now: Instant,
        port: CmPort,
        f: impl FnOnce(&mut RdmaCm, &mut Stack) -> R,
    ) -> Result<R, NodeError> {
        self.advance(now);
        let p = port_mut(&mut self.ports, port)?;
        let r = f(&mut self.rdma, &mut p.stack);
        self.rdma.process(now, &mut p.stack);
        self.route();
        Ok(r)
    }

    /// Takes the node apart: the CMs, and each port's stack with its QP1 (for a runtime
    /// that tears down in its own order, or a test that weighs the CM alone).
    pub fn into_parts(self) -> (RdmaCm, Vec<(Stack, MadPort)>) {
        let ports = self.ports.into_iter().map(|p| (p.stack, p.mad)).collect();
        (self.rdma, ports)
    }

    /// The node's counters.
    pub fn counters(&self) -> NodeCounters {
        self.counters
    }

    /// The latest time the node was given.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn advance(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    // ----- input -----

    /// A datagram that arrived on `port` from `src` to `dst` (the UDP payload).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        port: CmPort,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
    ) {
        self.handle_datagram_ecn(now, port, src, dst, bytes, 0);
    }

    /// [`Node::handle_datagram`] with the ECN field of the datagram's IP header
    /// (`Stack::handle_datagram_ecn`).
    pub fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        port: CmPort,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
        ecn: u8,
    ) {
        self.advance(now);
        let Some(p) = self.ports.get_mut(port.index()) else {
            self.counters.no_such_port += 1;
            return;
        };
        p.stack.handle_datagram_ecn(now, src, dst, bytes, ecn);
        // Only a datagram for QP1 gives the MAD layer work; the check keeps the data path
        // free of MAD-layer calls.
        if p.mad.poll(now, &mut p.stack) > 0 {
            self.dispatch(now, port.index());
            self.route();
        }
    }

    /// Timers due by `now`: the transport's, the MAD layers', the classes', the CM's.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        for i in 0..self.ports.len() {
            let p = &mut self.ports[i];
            if p.stack.poll_timeout().is_some_and(|t| t <= now) {
                p.stack.handle_timeout(now);
            }
            // A transport timer can complete QP1 receives too (nothing today, but the
            // order does not depend on it).
            p.mad.poll(now, &mut p.stack);
            p.mad.handle_timeout(now);
            self.dispatch(now, i);
            let p = &mut self.ports[i];
            let cm_port = port_at(&self.rdma, i);
            for c in p.classes.iter_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    let mut ctx = PortCtx {
                        now,
                        port: cm_port,
                        stack: &mut p.stack,
                        mad: p.mad.agent_mut(),
                    };
                    c.handle_timeout(&mut ctx);
                }
            }
        }
        if self.rdma.poll_timeout().is_some_and(|t| t <= now) {
            self.rdma.handle_timeout(now);
        }
        self.route();
    }

    /// The MAD layer's events of port `i`, each to the class that owns its agent.
    fn dispatch(&mut self, now: Instant, i: usize) {
        let cm_port = port_at(&self.rdma, i);
        let p = &mut self.ports[i];
        while let Some(ev) = p.mad.poll_event() {
            let agent = ev.agent();
            if agent == p.cm_agent {
                self.rdma.handle_mad(now, cm_port, &mut p.stack, ev);
                continue;
            }
            match p.classes.iter_mut().find(|c| c.owns(agent)) {
                Some(c) => {
                    let mut ctx = PortCtx {
                        now,
                        port: cm_port,
                        stack: &mut p.stack,
                        mad: p.mad.agent_mut(),
                    };
                    c.handle_mad(&mut ctx, ev);
                }
                None => self.counters.orphaned_mads += 1,
            }
        }
    }

    // ----- MAD-level input and output (QP1's transport skipped) -----

    /// A MAD from `from` handed to `port`'s MAD layer as QP1 would hand it over, then the
    /// call order goes on as for a datagram that carried it (dispatch, route). For tests
    /// and tools that speak MADs ([`crate::cm::SinglePortCm`]); a runtime feeds datagrams.
    pub fn handle_mad(&mut self, now: Instant, port: CmPort, from: MadAddr, bytes: &[u8]) {
        self.advance(now);
        let Some(p) = self.ports.get_mut(port.index()) else {
            self.counters.no_such_port += 1;
            return;
        };
        p.mad.agent_mut().handle_receive(now, from, bytes);
        self.dispatch(now, port.index());
        self.route();
    }

    /// The next MAD `port`'s MAD layer sends, taken as a MAD instead of being posted on QP1
    /// (the MAD-level form of [`Node::poll_transmit`]): the CM's operations are routed
    /// first, and a send that expects no answer completes as it is taken, as in
    /// [`Node::poll_transmit_batch`].
    pub fn poll_mad_transmit(&mut self, now: Instant, port: CmPort) -> Option<OutMad> {
        self.advance(now);
        let i = port.index();
        self.settle_mads(now, i);
        let o = self.ports.get_mut(i)?.mad.agent_mut().poll_transmit()?;
        self.settle_mads(now, i);
        Some(o)
    }

    /// The CM's operations to the MAD layers and port `i`'s MAD events to their classes,
    /// until neither has more (as `flush_mads` does around each flush onto QP1).
    fn settle_mads(&mut self, now: Instant, i: usize) {
        loop {
            self.route();
            if !self.ports.get(i).is_some_and(|p| p.mad.has_event()) {
                return;
            }
            self.dispatch(now, i);
        }
    }

    /// The CM's queued MAD operations to their ports' MAD layers.
    fn route(&mut self) {
        while let Some((port, agent, op)) = self.rdma.poll_mad() {
            if let Some(p) = self.ports.get_mut(port.index()) {
                // A cancel of a send that already ended is the only failure: nothing to do.
                let _ = p.mad.agent_mut().apply(agent, op);
            }
        }
    }

    // ----- output -----

    /// What `port` has for the wire, as GSO trains into `batch` (which the caller clears):
    /// first the MAD layer's sends are posted on QP1, then the stack's trains are taken.
    /// Returns how many datagrams were added.
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        port: CmPort,
        batch: &mut TransmitBatch,
    ) -> usize {
        self.advance(now);
        let Some(p) = self.flush_mads(now, port.index()) else {
            return 0;
        };
        p.stack.poll_transmit_batch(now, batch)
    }

    /// The CM's operations to the MAD layers, then port `i`'s MAD sends onto QP1. A send
    /// that expects no answer completes as it is posted; the completion goes to its class
    /// at once (the CM forgets the send then), and whatever that makes the class send is
    /// posted too.
    fn flush_mads(&mut self, now: Instant, i: usize) -> Option<&mut Port> {
        loop {
            self.route();
            let p = self.ports.get_mut(i)?;
            p.mad.flush(&mut p.stack);
            if !p.mad.has_event() {
                break;
            }
            self.dispatch(now, i);
        }
        self.ports.get_mut(i)
    }

    /// What `port` has for the wire, one datagram at a time (the batch-less form of
    /// [`Node::poll_transmit_batch`]).
    pub fn poll_transmit(&mut self, now: Instant, port: CmPort) -> Option<Transmit> {
        self.advance(now);
        let p = self.flush_mads(now, port.index())?;
        p.stack.poll_transmit(now)
    }

    /// When [`Node::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.rdma.poll_timeout();
        let mut min = |x: Option<Instant>| {
            t = match (t, x) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        for p in &self.ports {
            min(p.stack.poll_timeout());
            min(p.mad.poll_timeout());
            for c in &p.classes {
                min(c.poll_timeout());
            }
        }
        t
    }

    // ----- events -----

    /// The next event of either CM, in the order they happened (see [`RdmaCm::poll_next`]).
    pub fn poll_event(&mut self) -> Option<AnyEvent> {
        let e = self.rdma.poll_next();
        // Taking an event may destroy ids (an IB CM event of a destroyed listener drops
        // its new id): their MADs go to the layers now.
        self.route();
        e
    }

    /// The next RDMA CM event.
    pub fn poll_rdma_event(&mut self) -> Option<RdmaCmEvent> {
        let e = self.rdma.poll_event();
        self.route();
        e
    }

    /// The next IB CM event of an id made on the IB CM directly, or a retry notice.
    pub fn poll_ib_event(&mut self) -> Option<CmEvent> {
        let e = self.rdma.poll_ib_event();
        self.route();
        e
    }

    /// The next RDMA CM event for `owner`: one of its own, or, for a listener, a
    /// CONNECT_REQUEST it received (which frees its backlog slot).
    pub fn poll_event_of(&mut self, owner: RdmaId) -> Option<RdmaCmEvent> {
        let e = self.rdma.poll_event_of(owner);
        self.route();
        e
    }
}

/// `port` of a node's ports (a free function: the caller keeps the CM borrowable).
fn port_mut(ports: &mut [Port], port: CmPort) -> Result<&mut Port, NodeError> {
    ports.get_mut(port.index()).ok_or(NodeError::NoSuchPort)
}

/// The CM's name of the port at index `i` (ports are added to the node and the CM together,
/// in the same order).
fn port_at(rdma: &RdmaCm, i: usize) -> CmPort {
    rdma.cm()
        .ports()
        .nth(i)
        .unwrap_or_else(|| unreachable!("the node's ports are the CM's"))
}

/// The simulation's view of a node: its ports by index.
#[cfg(any(test, feature = "sim"))]
impl crate::sim::Host for Node {
    fn port_addrs(&self) -> Vec<Vec<IpAddr>> {
        self.ports
            .iter()
            .map(|p| p.stack.device.addrs().to_vec())
            .collect()
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
    ) {
        let p = port_at(&self.rdma, port);
        Node::handle_datagram(self, now, p, src, dst, bytes);
    }

    fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
        ecn: u8,
    ) {
        let p = port_at(&self.rdma, port);
        Node::handle_datagram_ecn(self, now, p, src, dst, bytes, ecn);
    }

    fn handle_timeout(&mut self, now: Instant) {
        Node::handle_timeout(self, now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Node::poll_timeout(self)
    }

    fn poll_transmit(&mut self, now: Instant, port: usize) -> Option<Transmit> {
        let p = port_at(&self.rdma, port);
        Node::poll_transmit(self, now, p)
    }

    fn poll_transmit_batch(
        &mut self,
        now: Instant,
        port: usize,
        batch: &mut TransmitBatch,
    ) -> usize {
        let p = port_at(&self.rdma, port);
        Node::poll_transmit_batch(self, now, p, batch)
    }
}

/// A node's default CM configuration for `seed`: rxe's CA ACK delay, the node GUID given.
pub fn cm_config(node_guid: softrdma_wire::Guid, seed: u64) -> CmConfig {
    CmConfig::new(node_guid, crate::cm::RXE_CA_ACK_DELAY, seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;
    use crate::rdma_cm::{ConnParam, RdmaCmEventType as T, RdmaCmId};
    use crate::sim::{NetConfig, Sim};
    use crate::time::Duration;
    use crate::verbs::QpInitAttr;
    use softrdma_wire::Guid;

    /// `n` nodes of one port each on 10.0.0.1..
    fn world(n: usize) -> Sim<Node> {
        let nodes = (0..n)
            .map(|i| {
                let mut node = Node::new(cm_config(
                    Guid(0x5054_00ff_fe10_0000 + i as u64),
                    40 + i as u64,
                ))
                .expect("node");
                let ip = Sim::<Node>::addr(i);
                let stack = Stack::new(DeviceConfig::new(format!("n{i}"), vec![ip]), i as u64);
                node.add_port(stack, 64).expect("port");
                node
            })
            .collect();
        Sim::with_hosts(nodes, NetConfig::PERFECT, 3)
    }

    fn port0(n: &Node) -> CmPort {
        n.ports().next().expect("a port")
    }

    /// An RC QP ready for the RDMA CM on node `n`'s port.
    fn qp(n: &mut Node) -> u32 {
        let port = port0(n);
        let s = n.stack_mut(port).expect("port");
        let pd = s.verbs.alloc_pd().expect("pd");
        let cq = s.verbs.create_cq(16).expect("cq");
        let (qpn, _) = s.verbs.create_qp(QpInitAttr::rc(pd, cq, 4, 4)).expect("qp");
        RdmaCm::init_qp(s, qpn).expect("init");
        qpn
    }

    /// Node `from` resolves and connects to `to:port` (address and route resolve at once
    /// on the simulation's addresses); returns the id.
    fn dial(sim: &mut Sim<Node>, from: usize, to: usize, port: u16) -> RdmaCmId {
        let (src, dst) = (sim.addrs[from], SocketAddr::new(sim.addrs[to], port));
        let now = sim.now;
        let n = &mut sim.stacks[from];
        let id = n.rdma_mut().create_id();
        n.rdma_mut()
            .resolve_addr(&id, Some(src), dst)
            .expect("resolve addr");
        let e = n.poll_event_of(id.name()).expect("ADDR_RESOLVED");
        assert_eq!(e.kind(), T::AddrResolved);
        n.rdma_mut().resolve_route(&id).expect("resolve route");
        let e = n.poll_event_of(id.name()).expect("ROUTE_RESOLVED");
        assert_eq!(e.kind(), T::RouteResolved);
        let q = qp(n);
        let p = port0(n);
        n.with_port(now, p, |cm, s| {
            cm.connect(now, s, &id, Some(q), &ConnParam::default())
        })
        .expect("port")
        .expect("connect");
        id
    }

    /// Runs the network (timers included) for `d` of virtual time.
    fn run_for(sim: &mut Sim<Node>, d: Duration) {
        let end = sim.now + d;
        sim.run_until(d, |s| s.now >= end);
    }

    /// A port that ran in a node of its own (a device before its runtime adds it to a
    /// CM) keeps, in the node that adopts it, its QPs and the CM's hi_tid, and the adopted
    /// ports connect as ports added directly do.
    #[test]
    fn an_adopted_port_keeps_its_qps_and_hi_tid_and_connects() {
        let mut sim = world(2);
        for i in 0..2 {
            let own = std::mem::replace(
                &mut sim.stacks[i],
                Node::new(cm_config(Guid(0x77 + i as u64), 90 + i as u64)).expect("node"),
            );
            let agent = own.rdma().cm().agent(port0(&own)).expect("agent");
            let mut own = own;
            let early_qp = qp(&mut own);
            let mut ports = own.into_ports();
            assert_eq!(ports.len(), 1);
            let n = &mut sim.stacks[i];
            let p = n.adopt_port(ports.remove(0)).expect("adopt");
            assert_eq!(
                n.rdma().cm().agent(p),
                Some(agent),
                "the CM keeps its hi_tid"
            );
            assert!(n.stack(p).expect("port").verbs.qp(early_qp).is_ok());
        }
        let l = sim.stacks[1]
            .rdma_mut()
            .listen_on(SocketAddr::new(sim.addrs[1], 7010), 8)
            .expect("listen");
        let c = dial(&mut sim, 0, 1, 7010);
        run_for(&mut sim, Duration::from_millis(5));
        let e = sim.stacks[1]
            .poll_event_of(l.name())
            .expect("CONNECT_REQUEST");
        let id = e.into_new_id().expect("new id");
        let now = sim.now;
        let n1 = &mut sim.stacks[1];
        let q = qp(n1);
        let p = port0(n1);
        n1.with_port(now, p, |cm, s| {
            cm.accept(now, s, &id, q, &ConnParam::default())
        })
        .expect("port")
        .expect("accept");
        run_for(&mut sim, Duration::from_millis(5));
        let e = sim.stacks[0].poll_event_of(c.name()).expect("ESTABLISHED");
        assert_eq!(e.kind(), T::Established);
        let now = sim.now;
        sim.stacks[0].rdma_mut().destroy(now, c);
        sim.stacks[1].rdma_mut().destroy(now, id);
        sim.stacks[1].rdma_mut().destroy(now, l);
    }

    #[test]
    fn a_req_becomes_a_connect_request_in_the_call_that_delivers_it() {
        let mut sim = world(2);
        let l = sim.stacks[1]
            .rdma_mut()
            .listen_on(SocketAddr::new(sim.addrs[1], 7000), 8)
            .expect("listen");
        let _c = dial(&mut sim, 0, 1, 7000);
        // The REQ is the only datagram on the network: one delivery, and the event is there.
        sim.flush();
        assert_eq!(sim.in_flight(), 1);
        assert!(sim.step());
        let e = sim.stacks[1]
            .poll_event_of(l.name())
            .expect("CONNECT_REQUEST after one delivery");
        assert_eq!(e.kind(), T::ConnectRequest);
        assert_eq!(e.listen_id(), Some(l.name()));
        let id = e.into_new_id().expect("the new id, handed over");
        let now = sim.now;
        sim.stacks[1].rdma_mut().destroy(now, id);
    }

    #[test]
    fn events_are_drained_per_owner() {
        let mut sim = world(2);
        let (a, b) = (sim.addrs[1], sim.addrs[1]);
        let la = sim.stacks[1]
            .rdma_mut()
            .listen_on(SocketAddr::new(a, 7001), 8)
            .expect("listen a");
        let lb = sim.stacks[1]
            .rdma_mut()
            .listen_on(SocketAddr::new(b, 7002), 8)
            .expect("listen b");
        let ca = dial(&mut sim, 0, 1, 7001);
        let cb = dial(&mut sim, 0, 1, 7002);
        run_for(&mut sim, Duration::from_millis(5));
        // Listener b's owner takes only b's request, though a's came first.
        let n1 = &mut sim.stacks[1];
        let eb = n1.poll_event_of(lb.name()).expect("b's request");
        assert_eq!(eb.listen_id(), Some(lb.name()));
        assert!(n1.poll_event_of(lb.name()).is_none(), "b has one request");
        let ea = n1.poll_event_of(la.name()).expect("a's request");
        assert_eq!(ea.listen_id(), Some(la.name()));
        // Accept b only: only cb hears ESTABLISHED; ca's owner finds nothing of cb's.
        let now = sim.now;
        let q = qp(n1);
        let p = port0(n1);
        let idb = eb.into_new_id().expect("id");
        n1.with_port(now, p, |cm, s| {
            cm.accept(now, s, &idb, q, &ConnParam::default())
        })
        .expect("port")
        .expect("accept");
        run_for(&mut sim, Duration::from_millis(5));
        let n0 = &mut sim.stacks[0];
        assert!(n0.poll_event_of(ca.name()).is_none(), "nothing for a yet");
        let e = n0.poll_event_of(cb.name()).expect("b's ESTABLISHED");
        assert_eq!((e.kind(), e.id()), (T::Established, cb.name()));
        let now = sim.now;
        for id in [ca, cb] {
            sim.stacks[0].rdma_mut().destroy(now, id);
        }
        for id in [idb, ea.into_new_id().expect("id"), la, lb] {
            sim.stacks[1].rdma_mut().destroy(now, id);
        }
    }

    #[test]
    fn a_backlog_slot_is_held_until_the_listeners_owner_takes_the_request() {
        const BACKLOG: u32 = 4;
        let mut sim = world(6);
        let l = sim.stacks[0]
            .rdma_mut()
            .listen_on(SocketAddr::new(sim.addrs[0], 7003), BACKLOG)
            .expect("listen");
        let clients: Vec<RdmaCmId> = (1..=5).map(|k| dial(&mut sim, k, 0, 7003)).collect();
        // The owner does not look for a while: four requests wait, the fifth is dropped
        // (no REJ: the client's CM retries), and counted.
        run_for(&mut sim, Duration::from_millis(20));
        let n0 = &mut sim.stacks[0];
        assert_eq!(n0.rdma().counters().backlog_drops, 1);
        assert_eq!(n0.rdma().queued_events(), BACKLOG as usize);
        for k in 1..=5 {
            let n = &mut sim.stacks[k];
            while let Some(e) = n.poll_rdma_event() {
                assert_ne!(e.kind(), T::Rejected, "client {k} was rejected");
            }
        }
        // The owner takes one: its slot frees, and the fifth client's retried REQ is
        // served (the REQ's retry timeout is a few seconds of virtual time).
        let mut taken = vec![sim.stacks[0].poll_event_of(l.name()).expect("a request")];
        run_for(&mut sim, Duration::from_secs(30));
        while let Some(e) = sim.stacks[0].poll_event_of(l.name()) {
            taken.push(e);
        }
        assert_eq!(
            taken.len(),
            5,
            "every client's request, the dropped one retried"
        );
        assert!(taken.iter().all(|e| e.kind() == T::ConnectRequest));
        let now = sim.now;
        for e in taken {
            sim.stacks[0]
                .rdma_mut()
                .destroy(now, e.into_new_id().expect("new id"));
        }
        for (k, id) in (1..).zip(clients) {
            sim.stacks[k].rdma_mut().destroy(now, id);
        }
        sim.stacks[0].rdma_mut().destroy(now, l);
    }
}
