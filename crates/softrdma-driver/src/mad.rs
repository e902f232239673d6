//! Management classes on a device's QP1. Every [`crate::Device`] has QP1 from the start
//! (a [`MadPort`] in its node, as an rxe port has QP1 from the moment it exists) and its
//! event loop runs the layer — receive completions in, retransmission timers, sends out —
//! in the node's call order ([`softrdma_core::node`]).
//!
//! Management classes are [`MadClient`]s: a client registers its agents on the device's
//! [`softrdma_core::mad::MadAgent`] (by class, version and methods, see
//! `MadAgent::register_methods`) and is
//! attached with [`crate::Device::attach_mad_client`]. The loop hands each [`MadEvent`] to the
//! client that owns the event's agent, and asks every client for its own timers. A MAD of a
//! class nobody registered is answered by the layer itself as `mad.c` does (Get/Set →
//! GetResp status 0x000C; other methods dropped and counted).
//!
//! Clients run on the loop's thread (or the caller's, with [`crate::Progress::Inline`]) with
//! the device's and its host's locks held: they must not call into a device or a `Cm`. The node
//! that runs them ([`softrdma_core::Node`], behind [`crate::Device`]) sees each as a
//! [`MadClass`].

use std::sync::Arc;

use softrdma_core::mad::{AgentId, MadEvent};
use softrdma_core::node::MadClass;
use softrdma_core::time::Instant;

pub use softrdma_core::mad::MadPort;
/// What a client gets while it handles an event or a timer: its port's stack and MAD
/// layer.
pub use softrdma_core::node::PortCtx;

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

/// A [`MadClient`] as the node runs it.
pub(crate) struct ClientClass(pub Arc<dyn MadClient>);

impl MadClass for ClientClass {
    fn owns(&self, agent: AgentId) -> bool {
        self.0.owns(agent)
    }

    fn handle_mad(&mut self, ctx: &mut PortCtx<'_>, ev: MadEvent) {
        self.0.handle_mad(ctx, ev)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.0.poll_timeout()
    }

    fn handle_timeout(&mut self, ctx: &mut PortCtx<'_>) {
        self.0.handle_timeout(ctx)
    }
}
