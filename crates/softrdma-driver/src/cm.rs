//! The connection managers on a [`Device`]: QP1 ([`GsiPort`], the stack's GSI QP), the IB
//! CM and the RDMA CM ([`RdmaCm`]), driven from the caller's thread.
//!
//! The device's own loop (background thread or inline) moves datagrams in and out of the
//! stack; [`CmDriver::turn`] takes the received MADs off QP1's CQ into the CM, runs the
//! CM's timers, and posts what the CM sends on QP1 — all under the stack lock, through
//! [`Device::with_stack`]. Call it often (every millisecond or so) while connections are
//! being set up or torn down; [`CmDriver::wait_event`] does that until an event comes.

use std::collections::VecDeque;
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmConfig, RXE_CA_ACK_DELAY};
use softrdma_core::mad::gsi::GsiPort;
use softrdma_core::rdma_cm::{RdmaCm, RdmaCmEvent};
use softrdma_core::time::Instant;
use softrdma_core::Stack;

use crate::clock::Clock;
use crate::device::{Device, Result};

/// QP1 receive buffers (the kernel posts 512; a handful of connections need few).
const RECV_DEPTH: u32 = 64;

/// QP1 + IB CM + RDMA CM on one device.
pub struct CmDriver {
    dev: Device,
    port: GsiPort,
    cm: RdmaCm,
    clock: Clock,
    events: VecDeque<RdmaCmEvent>,
}

impl CmDriver {
    /// Opens QP1 on `dev` and starts a CM (node GUID from the device, `seed` for comm IDs
    /// and PSNs).
    pub fn open(dev: &Device, seed: u64) -> Result<CmDriver> {
        let port = dev.with_stack(|s| GsiPort::open(s, RECV_DEPTH))?;
        let guid = dev.query_device().node_guid;
        let cm = RdmaCm::new(CmConfig {
            node_guid: guid,
            ca_ack_delay: RXE_CA_ACK_DELAY,
            // ib_cm is the second MAD agent on an rxe host (lab README: hi_tid 2).
            first_hi_tid: 2,
            seed,
        })
        .map_err(|e| crate::device::Error::Io(std::io::Error::other(e.to_string())))?;
        Ok(CmDriver {
            dev: dev.clone(),
            port,
            cm,
            clock: Clock::new(),
            events: VecDeque::new(),
        })
    }

    /// The CM's time now.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.clock.now())
    }

    /// One pass: QP1 receives → CM, timers, CM sends → QP1. Events are queued.
    pub fn turn(&mut self) {
        let now = self.now();
        let CmDriver {
            dev,
            port,
            cm,
            events,
            ..
        } = self;
        dev.with_stack(|s| {
            port.poll(now, s, cm.cm_mut().mad_mut());
            if cm.cm().poll_timeout().is_some_and(|t| t <= now) {
                cm.handle_timeout(now, s);
            } else {
                cm.process(now, s);
            }
            port.flush(s, cm.cm_mut().mad_mut());
        });
        events.extend(std::iter::from_fn(|| cm.poll_event()));
    }

    /// The next event, turning the loop (1 ms naps) until one comes or `timeout` passes.
    pub fn wait_event(&mut self, timeout: Duration) -> Option<RdmaCmEvent> {
        let end = StdInstant::now() + timeout;
        loop {
            self.turn();
            if let Some(e) = self.events.pop_front() {
                return Some(e);
            }
            if StdInstant::now() >= end {
                return None;
            }
            if self.dev.progress_for(Duration::from_millis(1)).is_err()
                || self.dev.progress() != crate::device::Progress::Inline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// An event already taken off the CM, if any (no waiting).
    pub fn poll_event(&mut self) -> Option<RdmaCmEvent> {
        self.turn();
        self.events.pop_front()
    }

    /// Runs `f` on the RDMA CM and the stack (connect, accept, disconnect...), then sends
    /// what it queued.
    pub fn with<R>(&mut self, f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant) -> R) -> R {
        let now = self.now();
        let CmDriver { dev, port, cm, .. } = self;
        dev.with_stack(|s| {
            let r = f(cm, s, now);
            port.flush(s, cm.cm_mut().mad_mut());
            r
        })
    }

    /// The IB CM's and QP1's counters (diagnostics).
    pub fn cm_counters(&self) -> (softrdma_core::cm::CmCounters, u64, u64) {
        (
            self.cm.cm().counters(),
            self.port.send_errors,
            self.port.recv_errors,
        )
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}
