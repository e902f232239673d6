//! The runtime's one sans-IO [`Node`] behind one lock, shared by the devices that are its
//! ports.
//!
//! A [`crate::Device`] is a port of a host: at open it is the only port of a host of its
//! own; [`crate::cm::Cm::add_device`] moves it (its stack with every QP and region, QP1,
//! its management classes) into the host of that CM, so every device of one CM — of one
//! process, for a process with one CM — is a port of one `Node`, with one IB CM and one
//! RDMA CM over them. The call order is the node's ([`softrdma_core::node`]); this module
//! adds only what a runtime needs around it: the lock, the waiters (blocking and async) of
//! the CM's events, and the per-id work the runtime does in the loop turn that received a
//! request ([`HostState::after_input`]).
//!
//! # Locks
//!
//! A device's own lock (its socket's batch, tap and counters, and which host it is a port
//! of) is taken before the host's: a loop turn holds its device's lock and takes the
//! host's for each call into the node; a CM command on a device ([`crate::cm::Cm::with`])
//! does the same. A command on the CM alone takes only the host's lock, and sends what it
//! queued afterwards, device by device. Nothing takes a device lock while holding the
//! host's, and no code holds two device locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::time::Duration;

use softrdma_core::cm::CmPort;
use softrdma_core::rdma_cm::RdmaId;
use softrdma_core::time::Instant;
use softrdma_core::Node;

use crate::device::Shared as DeviceShared;
use crate::node_loop::NodeLoop;
use crate::wait::Waiters;

/// What the host's lock guards: the node and the runtime's per-id answers.
pub(crate) struct HostState {
    pub node: Node,
    /// UD listeners answered in the loop turn that queued their requests: a SIDR REP
    /// with this QPN (Q_Key: the RDMA CM's), the id destroyed at once
    /// ([`crate::cm::Cm::answer_sidr`]).
    pub sidr_answers: HashMap<RdmaId, u32>,
    /// Whether IB CM events are kept for the application
    /// ([`crate::cm::Cm::keep_ib_events`]).
    pub keep_ib_events: bool,
}

impl HostState {
    /// What the runtime does on its own after input, in the same turn: answers SIDR REQs
    /// of the UD listeners it answers for, and drops IB CM events nobody will take.
    pub fn after_input(&mut self, now: Instant) {
        let rdma = self.node.rdma_mut();
        for (&l, &qpn) in &self.sidr_answers {
            while let Some(e) = rdma.poll_event_of(l) {
                if let Some(id) = e.into_new_id() {
                    // Refused only for a destroyed id or a bad state: nothing to answer.
                    let _ = rdma.accept_ud(now, &id, qpn, 0, &[]);
                    rdma.destroy(now, id);
                }
            }
        }
        if !self.keep_ib_events {
            while self.node.poll_ib_event().is_some() {}
        }
    }
}

/// One node and its waiters.
pub(crate) struct Host {
    state: Mutex<HostState>,
    /// The threads and tasks waiting for the CM's events.
    waiters: Waiters,
    /// The devices that are ports of this host (weak: a device holds its host, not the
    /// other way round), to send what a command on the CM alone queued on their ports.
    devices: Mutex<Vec<(Weak<DeviceShared>, CmPort)>>,
    /// A device's own host (its one port), which a CM may take the device out of; a
    /// CM's host keeps its devices.
    private: bool,
    /// The one loop over the sockets of this host's threaded devices (a CM's host; started
    /// with its first such device, see [`crate::node_loop`]).
    node_loop: Mutex<Option<NodeLoop>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Host {
    pub fn new(node: Node, private: bool) -> Host {
        Host {
            state: Mutex::new(HostState {
                node,
                sidr_answers: HashMap::new(),
                keep_ib_events: true,
            }),
            waiters: Waiters::default(),
            devices: Mutex::new(Vec::new()),
            private,
            node_loop: Mutex::new(None),
        }
    }

    /// Runs `dev` (a threaded device just made a port of this CM's host) on the host's one
    /// loop, started now if it is the first: its sockets join the loop's epoll set, its
    /// wake-ups go to the loop, and its own loop thread ends.
    pub fn run_on_loop(self: &Arc<Self>, dev: &Arc<DeviceShared>) -> std::io::Result<()> {
        let mut l = lock(&self.node_loop);
        if l.is_none() {
            *l = Some(NodeLoop::start(Arc::downgrade(self))?);
        }
        let Some(nl) = l.as_ref() else {
            return Ok(());
        };
        nl.watch(dev)?;
        dev.hand_to_node_loop(nl.notifier());
        Ok(())
    }

    /// A socket a device of the host's loop gained (an address added): the loop watches it
    /// from now on. Nothing to do without a loop.
    pub fn watch_socket(&self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        match lock(&self.node_loop).as_ref() {
            Some(nl) => nl.watch_fd(fd),
            None => Ok(()),
        }
    }

    /// The devices the host's loop runs (alive, and handed to it).
    pub fn loop_devices(&self) -> Vec<Arc<DeviceShared>> {
        lock(&self.devices)
            .iter()
            .filter_map(|(w, _)| w.upgrade())
            .filter(|d| d.on_node_loop())
            .collect()
    }

    /// Whether this is a device's own host (see [`crate::cm::Cm::add_device`]).
    pub fn is_private(&self) -> bool {
        self.private
    }

    pub fn lock(&self) -> MutexGuard<'_, HostState> {
        lock(&self.state)
    }

    /// Wakes the threads and tasks waiting for the CM's events.
    pub fn signal(&self) {
        self.waiters.signal();
    }

    /// Waits up to `d` for [`Host::signal`] with the lock `g` (see [`Waiters::wait`]).
    pub fn wait<'a>(&self, g: MutexGuard<'a, HostState>, d: Duration) -> MutexGuard<'a, HostState> {
        self.waiters.wait(g, d).0
    }

    /// Registers an async waiter for the next [`Host::signal`].
    pub fn register(&self, w: &Waker) {
        self.waiters.register(w);
    }

    pub fn add_device(&self, d: Weak<DeviceShared>, port: CmPort) {
        let mut v = lock(&self.devices);
        v.retain(|(w, _)| w.strong_count() > 0);
        v.push((d, port));
    }

    /// Forgets the device of `port` (removed from its CM).
    pub fn remove_device(&self, port: CmPort) {
        lock(&self.devices).retain(|(w, p)| *p != port && w.strong_count() > 0);
    }

    /// The other devices of this host whose MAD layer has sends waiting (queued by a CM
    /// step in `port`'s loop turn, e.g. a DREQ for a stale connection on another device):
    /// their loops are woken to send them. Called with the host's lock `h`.
    pub fn others_with_sends(&self, h: &HostState, port: CmPort) -> Vec<Arc<DeviceShared>> {
        if self.private {
            return Vec::new();
        }
        lock(&self.devices)
            .iter()
            .filter(|(_, p)| *p != port && h.node.mad(*p).is_some_and(|m| m.agent().has_transmit()))
            .filter_map(|(w, _)| w.upgrade())
            .collect()
    }
}
