//! [`SinglePortCm`]: the IB CM together with the MAD layer of one port, without QP1 — MAD
//! bytes in, MADs out. For tests, simulations and fuzzing; the device runtime does the same
//! for real ports (the call order is in [`crate::mad::port`]).

use std::ops::{Deref, DerefMut};

use super::{CmConfig, CmEndpoint, CmError, CmPort};
use crate::mad::{MadAddr, MadAgent, OutMad};
use crate::time::Instant;

/// A [`CmEndpoint`] on one port whose [`MadAgent`] it drives itself. Commands are the
/// endpoint's (through `Deref`); the MAD traffic goes through [`SinglePortCm::poll_transmit`]
/// and [`SinglePortCm::handle_receive`].
#[derive(Debug)]
pub struct SinglePortCm {
    cm: CmEndpoint,
    mad: MadAgent,
    port: CmPort,
}

impl SinglePortCm {
    /// A CM on a fresh MAD layer whose first client gets `first_hi_tid` (2 as on rxe).
    pub fn new(cfg: CmConfig, first_hi_tid: u32) -> Result<SinglePortCm, CmError> {
        let mut mad = MadAgent::with_first_hi_tid(first_hi_tid);
        let mut cm = CmEndpoint::new(cfg)?;
        let port = cm.add_port(&mut mad)?;
        Ok(SinglePortCm { cm, mad, port })
    }

    /// The port.
    pub fn port(&self) -> CmPort {
        self.port
    }

    /// The MAD layer, with every queued operation applied.
    pub fn mad(&mut self) -> &MadAgent {
        self.apply_ops();
        &self.mad
    }

    /// The MAD layer, mutably (other clients may register on it).
    pub fn mad_mut(&mut self) -> &mut MadAgent {
        self.apply_ops();
        &mut self.mad
    }

    fn apply_ops(&mut self) {
        while let Some((_, agent, op)) = self.cm.poll_mad() {
            // Only a cancel of a send that already ended can fail; nothing to do then.
            let _ = self.mad.apply(agent, op);
        }
    }

    /// Moves the MAD layer's events into the CM until both are quiet.
    pub fn process(&mut self, now: Instant) {
        loop {
            self.apply_ops();
            let mut any = false;
            while let Some(ev) = self.mad.poll_event() {
                self.cm.handle_mad(now, self.port, ev);
                any = true;
            }
            if !any && !self.cm.has_mad_ops() {
                return;
            }
        }
    }

    /// The next MAD for the wire.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.apply_ops();
        let o = self.mad.poll_transmit()?;
        // A send without an answer completes as it leaves: the CM takes that completion
        // (its transmit counters count then) at once, at the latest time it saw.
        let now = self.cm.now;
        self.process(now);
        Some(o)
    }

    /// A MAD from the wire.
    pub fn handle_receive(&mut self, now: Instant, from: MadAddr, bytes: &[u8]) {
        self.apply_ops();
        self.mad.handle_receive(now, from, bytes);
        self.process(now);
    }

    /// The earliest of the MAD layer's and the CM's timers.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.apply_ops();
        match (self.mad.poll_timeout(), self.cm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Retransmissions, send errors and timewait exits due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.apply_ops();
        self.mad.handle_timeout(now);
        self.process(now);
        self.cm.handle_timeout(now);
        self.process(now);
    }
}

impl Deref for SinglePortCm {
    type Target = CmEndpoint;
    fn deref(&self) -> &CmEndpoint {
        &self.cm
    }
}

impl DerefMut for SinglePortCm {
    fn deref_mut(&mut self) -> &mut CmEndpoint {
        &mut self.cm
    }
}
