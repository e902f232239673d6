//! The MAD layer inside the device runtime: every [`crate::Device`] opens QP1 at start (a
//! [`MadPort`], as an rxe port has QP1 from the moment it exists) and its event loop runs the
//! layer — receive completions in, retransmission timers, sends out — as part of each turn,
//! in the call order written down in [`softrdma_core::mad::port`].
//!
//! Management classes are [`MadClient`]s: a client registers its agents on the device's
//! [`MadAgent`] (by class, version and methods, see [`MadAgent::register_methods`]) and is
//! attached with [`crate::Device::attach_mad_client`]. The loop hands each [`MadEvent`] to the
//! client that owns the event's agent, and asks every client for its own timers. A MAD of a
//! class nobody registered is answered by the layer itself as `mad.c` does (Get/Set →
//! GetResp status 0x000C; other methods dropped and counted).
//!
//! Clients run on the loop's thread (or the caller's, with [`crate::Progress::Inline`]) with
//! the device's state lock held: they must not lock another device. A client that serves
//! several devices (the CM) hands work for another device to [`MadInbox`], which that
//! device's loop applies on its next turn.

use std::sync::{Arc, Mutex};

use softrdma_core::mad::{AgentId, MadAgent, MadEvent, MadOp};
use softrdma_core::time::Instant;
use softrdma_core::Stack;

pub use softrdma_core::mad::MadPort;

/// What a client gets while it handles an event or a timer: the device's stack and its MAD
/// layer, under the device's lock.
pub struct PortCtx<'a> {
    pub now: Instant,
    pub stack: &'a mut Stack,
    pub mad: &'a mut MadAgent,
}

/// A management class served on a device's QP1.
pub trait MadClient: Send + Sync {
    /// Whether `agent` (on this device's MAD layer) is one of the client's.
    fn owns(&self, agent: AgentId) -> bool;
    /// An event for one of the client's agents.
    fn handle_mad(&self, ctx: &mut PortCtx<'_>, ev: MadEvent);
    /// When the client's own timers want [`MadClient::handle_timeout`] (none by default).
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// The client's timers due by `ctx.now`.
    fn handle_timeout(&self, _ctx: &mut PortCtx<'_>) {}
    /// The loop turn that may have called [`MadClient::handle_mad`] ended, after the
    /// device's lock was released: the place to wake the client's own waiters once per turn.
    fn end_turn(&self) {}
}

/// MAD operations for a device queued from outside its loop (another device's client), with
/// the agent they are for.
#[derive(Default)]
pub struct MadInbox {
    ops: Mutex<Vec<(AgentId, MadOp)>>,
}

impl MadInbox {
    /// Queues `op` for `agent`.
    pub fn push(&self, agent: AgentId, op: MadOp) {
        self.ops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((agent, op));
    }

    pub(crate) fn take(&self) -> Vec<(AgentId, MadOp)> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The MAD side of a device's state: QP1, the attached clients and the inbox.
pub(crate) struct MadState {
    pub port: MadPort,
    /// Shared so a turn can call [`MadClient::end_turn`] after releasing the device lock.
    pub clients: Arc<Vec<Arc<dyn MadClient>>>,
    pub inbox: Arc<MadInbox>,
    /// MADs for agents no client owns (registered but unattached): dropped.
    pub orphaned: u64,
}

impl MadState {
    /// The earliest of the layer's and the clients' timers.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.port.poll_timeout();
        for c in self.clients.iter() {
            t = match (t, c.poll_timeout()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        t
    }

    /// One MAD turn (see the module docs); returns whether anything happened.
    /// Takes QP1's receive completions (reposting their buffers) without handing anything
    /// to the classes yet: the loop calls it between received batches so that a burst of
    /// MADs larger than QP1's receive queue within one turn is not dropped for want of a
    /// posted buffer (the classes see the MADs in this turn's [`MadState::turn`]).
    pub fn reap_receives(&mut self, now: Instant, stack: &mut Stack) -> usize {
        self.port.poll(now, stack)
    }

    pub fn turn(&mut self, now: Instant, stack: &mut Stack) -> bool {
        let mut worked = false;
        for (agent, op) in self.inbox.take() {
            // A cancel of a send that already ended is the only failure; nothing to do.
            let _ = self.port.agent_mut().apply(agent, op);
            worked = true;
        }
        worked |= self.port.poll(now, stack) > 0;
        if self.port.poll_timeout().is_some_and(|t| t <= now) {
            self.port.handle_timeout(now);
            worked = true;
        }
        while let Some(ev) = self.port.poll_event() {
            worked = true;
            let agent = ev.agent();
            let Some(c) = self.clients.iter().find(|c| c.owns(agent)).cloned() else {
                self.orphaned += 1;
                continue;
            };
            let mut ctx = PortCtx {
                now,
                stack,
                mad: self.port.agent_mut(),
            };
            c.handle_mad(&mut ctx, ev);
        }
        let clients = self.clients.clone();
        for c in clients.iter() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                let mut ctx = PortCtx {
                    now,
                    stack,
                    mad: self.port.agent_mut(),
                };
                c.handle_timeout(&mut ctx);
                worked = true;
            }
        }
        // Clients may have sent while handling (and the layer answered "unsupported"):
        // onto QP1, and from there the loop's flush puts them on the wire.
        if self.port.flush(stack) > 0 {
            worked = true;
        }
        worked
    }
}
