//! [`SinglePortCm`]: the IB CM of a one-port [`Node`], spoken to in MADs — MAD bytes in,
//! MADs out, QP1's transport skipped. For the IB CM's own tests, which work at the MAD level:
//! golden MADs of the kernel, hand-made MADs with chosen TIDs and hostile bytes from a
//! scripted peer, every MAD a CM sends looked at as it leaves, and the endpoint's own tables
//! and counters weighed. It adds no call order of its own: input goes through
//! [`Node::handle_mad`], output through [`Node::poll_mad_transmit`], timers through
//! [`Node::handle_timeout`] — the node's order from the MAD layer up (see [`crate::node`]).

use std::ops::{Deref, DerefMut};

use super::{CmConfig, CmEndpoint, CmEvent, CmPort};
use crate::device::DeviceConfig;
use crate::mad::{MadAddr, MadAgent, OutMad};
use crate::node::{Node, NodeError};
use crate::time::Instant;
use crate::Stack;

/// QP1 receive buffers of the node's port (unused: MADs skip QP1's transport).
const QP1_RECV_DEPTH: u32 = 1;

/// The IB CM of a one-port [`Node`], driven in MADs. Commands are the [`CmEndpoint`]'s
/// (through `Deref`); the MAD traffic goes through [`SinglePortCm::poll_transmit`] and
/// [`SinglePortCm::handle_receive`]; the CM's events through [`SinglePortCm::poll_event`]
/// (the node's IB CM events, [`Node::poll_ib_event`]).
#[derive(Debug)]
pub struct SinglePortCm {
    node: Node,
    port: CmPort,
}

impl SinglePortCm {
    /// A CM on a fresh one-port node (its MAD layer's first client, the CM, gets hi TID 2,
    /// as on rxe).
    pub fn new(cfg: CmConfig) -> Result<SinglePortCm, NodeError> {
        let (seed, guid) = (cfg.seed, cfg.node_guid);
        let mut node = Node::new(cfg)?;
        // The device's node GUID is the CM's (what its REQs, REPs and REJ TIMEOUTs carry).
        let device = DeviceConfig::new("cm", Vec::new()).with_node_guid(guid);
        let stack = Stack::new(device, seed);
        let port = node.add_port(stack, QP1_RECV_DEPTH)?;
        Ok(SinglePortCm { node, port })
    }

    /// The port.
    pub fn port(&self) -> CmPort {
        self.port
    }

    /// The node the CM runs in.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The MAD layer, with every queued operation of the CM applied.
    pub fn mad(&mut self) -> &MadAgent {
        let now = self.node.rdma().cm().now;
        self.process(now);
        match self.node.mad(self.port) {
            Some(m) => m.agent(),
            None => unreachable!("the node's one port"),
        }
    }

    /// Takes the events and MAD operations of commands given through `DerefMut`.
    pub fn process(&mut self, now: Instant) {
        // The node's one port: no error.
        let _ = self.node.with_port(now, self.port, |_, _| ());
    }

    /// The next IB CM event.
    #[must_use = "a REQ/SIDR_REQ event owns a new id; dropping it destroys the id"]
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        let now = self.node.rdma().cm().now;
        self.process(now);
        self.node.poll_ib_event()
    }

    /// The next MAD for the wire.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        let now = self.node.rdma().cm().now;
        self.process(now);
        self.node.poll_mad_transmit(now, self.port)
    }

    /// A MAD from the wire.
    pub fn handle_receive(&mut self, now: Instant, from: MadAddr, bytes: &[u8]) {
        self.process(now);
        self.node.handle_mad(now, self.port, from, bytes);
    }

    /// The earliest of the node's timers (the MAD layer's, the CM's).
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let now = self.node.rdma().cm().now;
        self.process(now);
        self.node.poll_timeout()
    }

    /// Retransmissions, send errors and timewait exits due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.process(now);
        self.node.handle_timeout(now);
    }
}

impl Deref for SinglePortCm {
    type Target = CmEndpoint;
    fn deref(&self) -> &CmEndpoint {
        self.node.rdma().cm()
    }
}

impl DerefMut for SinglePortCm {
    fn deref_mut(&mut self) -> &mut CmEndpoint {
        self.node.rdma_mut().cm_mut()
    }
}
