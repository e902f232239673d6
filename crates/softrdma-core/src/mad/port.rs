//! QP1 of one port and the MAD layer on it: [`MadPort`] owns the GSI QP ([`GsiPort`]) and
//! the [`MadAgent`] with every management class registered on it as a client (the CM, device
//! management, ...), as the kernel's `ib_mad_port_private` owns QP1 for `ib_mad` and routes
//! by class, version and method.
//!
//! The clients never touch QP1: they take [`MadEvent`]s (received MADs, send completions,
//! retransmissions) that name their agent, and give back [`MadOp`](super::MadOp)s or call the agent's
//! `send`. The order these calls run in — QP1's receive completions into the layer, its
//! timers, each event to the client whose agent it names, the clients' operations back,
//! the layer's sends onto QP1 — is [`crate::node::Node`]'s, written down once in
//! [`crate::node`].

use super::gsi::GsiPort;
use super::{MadAgent, MadEvent};
use crate::time::Instant;
use crate::transport::Stack;
use crate::verbs::VerbsError;

/// The hi_tid the first client of an rxe host's MAD layer gets after `ib_agent` (0) and
/// `ib_sa` (1): the CM's, which the captures show as `0x00000002_…` TIDs.
pub const RXE_FIRST_CLIENT_HI_TID: u32 = 2;

/// QP1 receive buffers (the kernel posts 512; a handful of connections need far fewer, a
/// CM serving thousands of connects in flight needs them all).
pub const DEFAULT_RECV_DEPTH: u32 = 512;

/// QP1 and the MAD layer of one port.
#[derive(Debug)]
pub struct MadPort {
    agent: MadAgent,
    gsi: GsiPort,
}

impl MadPort {
    /// Creates QP1 on `stack` (to RTS, receives posted) and an empty MAD layer whose first
    /// client gets hi_tid `first_hi_tid`.
    pub fn open(stack: &mut Stack, first_hi_tid: u32, recv_depth: u32) -> Result<Self, VerbsError> {
        Ok(MadPort {
            agent: MadAgent::with_first_hi_tid(first_hi_tid),
            gsi: GsiPort::open(stack, recv_depth)?,
        })
    }

    /// The MAD layer (to register clients, send, apply ops).
    pub fn agent(&self) -> &MadAgent {
        &self.agent
    }

    /// The MAD layer, mutably.
    pub fn agent_mut(&mut self) -> &mut MadAgent {
        &mut self.agent
    }

    /// QP1's receive completions into the MAD layer; returns how many MADs came in.
    pub fn poll(&mut self, now: Instant, stack: &mut Stack) -> usize {
        self.gsi.poll(now, stack, &mut self.agent)
    }

    /// The MAD layer's sends onto QP1; returns how many were posted.
    pub fn flush(&mut self, stack: &mut Stack) -> usize {
        self.gsi.flush(stack, &mut self.agent)
    }

    /// When [`MadPort::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.agent.poll_timeout()
    }

    /// Retransmissions and timeouts due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.agent.poll_timeout().is_some_and(|t| t <= now) {
            self.agent.handle_timeout(now);
        }
    }

    /// The next event for a client.
    pub fn poll_event(&mut self) -> Option<MadEvent> {
        self.agent.poll_event()
    }

    /// Whether an event waits for [`MadPort::poll_event`].
    pub fn has_event(&self) -> bool {
        self.agent.has_event()
    }

    /// QP1's send and receive errors (posting failed, a completion with an error status).
    pub fn errors(&self) -> (u64, u64) {
        (self.gsi.send_errors, self.gsi.recv_errors)
    }
}
