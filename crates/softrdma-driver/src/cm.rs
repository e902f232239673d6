//! The connection manager of a process: one [`Cm`] (IB CM + RDMA CM) spanning every device
//! added to it, run by the devices' own event loops.
//!
//! A `Cm` is a handle on one sans-IO [`softrdma_core::Node`]: [`Cm::add_device`] makes the
//! device a port of that node (the `host` module), so a CM MAD is handled inside the
//! `Node::handle_datagram` call of the loop turn that received it, in the node's one call
//! order; the CM's retransmissions are the MAD layer's timers and its timewait timers are
//! in the node's `poll_timeout`, so with [`Progress::Thread`] devices nobody needs to poll
//! — events wait in the CM's queue for [`Cm::wait_event`] (blocking), [`Cm::next_event`]
//! (async) or [`Cm::poll_event`] (non-blocking). With [`Progress::Inline`] devices the CM
//! runs when the caller's thread turns their loops: [`Cm::wait_event`] does that itself;
//! [`Cm::poll_event`] does one non-blocking turn; an async waiter on an inline device is
//! never woken, as for any polled device.
//!
//! # Threads and locks
//!
//! Each device has its own lock (socket batch, tap, counters); the node has one lock, the
//! host's. The order is always **device, then host**: a loop turn holds its device's lock
//! and takes the host's for its calls into the node; a command ([`Cm::with`]) takes the
//! id's device lock, then the host's. A command on the CM alone ([`Cm::with_cm`]) takes
//! only the host's, then sends what it queued device by device. Nothing takes a device
//! lock while holding the host's, and no code holds two device locks. A CM step in one
//! device's turn that sends on another (a stale-connection DREQ for an id on another
//! device) leaves the MAD on that port's layer and wakes that device's loop. Events are
//! signalled after the locks are released.
//!
//! # The event queue
//!
//! The events wait in the RDMA CM's own queue ([`RdmaCm::poll_next`]), not in a copy of
//! it: a CONNECT_REQUEST holds its listener's backlog slot until the application takes it
//! (as ucma's does until `rdma_get_cm_event`), and destroying an id withdraws its queued
//! events (a destroyed listener's CONNECT_REQUESTs with their new ids, which are destroyed:
//! REJ 28). The queue is bounded by [`CmConfig::event_queue_limit`] (default
//! [`softrdma_core::cm::DEFAULT_EVENT_QUEUE_LIMIT`] = 4096; set it with
//! [`Cm::with_config`]): when it is full, a REQ or SIDR REQ that would hand the application
//! a new id is refused as ucma refuses one beyond the backlog (the IB CM id is destroyed
//! with `-ENOMEM`, no REJ: the peer retries) and a retransmission notice
//! ([`CmEvent::Retry`]) is dropped; both are counted ([`Cm::rdma_counters`]:
//! `queue_full_drops`, `retry_notice_drops`). No owned id is lost that way: it never left
//! the CM. Events about ids the application already holds are always queued (a few per id
//! and per command), so the queue holds at most the limit plus those.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmConfig, CmCounters, CmEvent, CmPort, CmTableSizes, RXE_CA_ACK_DELAY};
use softrdma_core::node::NodeError;
use softrdma_core::rdma_cm::{
    AnyEvent, RdmaCm, RdmaCmCounters, RdmaCmError, RdmaCmEvent, RdmaCmId, RdmaId,
};
use softrdma_core::time::Instant;
use softrdma_core::{Node, Stack};
use softrdma_wire::Guid;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::device::{Device, Progress};
use crate::host::{Host, HostState};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the CM tells the application.
#[derive(Debug)]
pub enum Event {
    /// An RDMA CM event.
    Rdma(RdmaCmEvent),
    /// An IB CM event of an id created on the IB CM directly ([`Cm::with`] →
    /// `RdmaCm::cm_mut`), or a retransmission notice ([`CmEvent::Retry`]) of any id.
    Ib(CmEvent),
}

/// Why a CM call failed.
#[derive(Debug)]
pub enum Error {
    /// The port was not added to this CM.
    NoSuchPort,
    /// The RDMA CM id is unknown (destroyed, or never bound to a device).
    NoSuchId,
    /// The RDMA CM refused.
    Rdma(RdmaCmError),
    /// The device was added to another CM already (a device is a port of one CM's node).
    OtherCm,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchPort => f.write_str("no such device in this CM"),
            Error::NoSuchId => f.write_str("no such RDMA CM id"),
            Error::Rdma(e) => write!(f, "{e}"),
            Error::OtherCm => f.write_str("the device belongs to another CM"),
        }
    }
}

impl std::error::Error for Error {}

impl From<RdmaCmError> for Error {
    fn from(e: RdmaCmError) -> Self {
        Error::Rdma(e)
    }
}

impl From<NodeError> for Error {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::Cm(r) => Error::Rdma(r),
            NodeError::Qp1(v) => Error::Rdma(RdmaCmError::from(v)),
            NodeError::NoSuchPort => Error::NoSuchPort,
        }
    }
}

/// The next event of the node's queue, as the application sees it.
fn pop(h: &mut HostState) -> Option<Event> {
    h.node.poll_event().map(|e| match e {
        AnyEvent::Rdma(e) => Event::Rdma(e),
        AnyEvent::Ib(e) => Event::Ib(e),
    })
}

/// The next RDMA CM event of `owner` ([`Node::poll_event_of`]).
fn pop_of(h: &mut HostState, owner: RdmaId) -> Option<RdmaCmEvent> {
    h.node.poll_event_of(owner)
}

struct Shared {
    /// The node every device of this CM is a port of.
    host: Arc<Host>,
    /// The devices, by port index (strong: the CM keeps its devices open until
    /// [`Cm::remove_device`], which leaves `None` in a removed device's place).
    devices: Mutex<Vec<Option<Device>>>,
}

/// The process's connection manager (cheap to clone; see the module docs).
#[derive(Clone)]
pub struct Cm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let devices = lock(&self.shared.devices).iter().flatten().count();
        let queued = self.shared.host.lock().node.rdma().queued_events();
        f.debug_struct("Cm")
            .field("devices", &devices)
            .field("queued_events", &queued)
            .finish()
    }
}

impl Cm {
    /// A CM on no device yet; `seed` seeds comm IDs, PSNs and ports.
    pub fn new(seed: u64) -> Cm {
        Cm::with_config(CmConfig {
            node_guid: Guid(0),
            ca_ack_delay: RXE_CA_ACK_DELAY,
            seed,
            ..CmConfig::default()
        })
    }

    /// A CM with an explicit configuration (the node GUID is each device's own): the
    /// limits ([`CmConfig::half_open_limit`], [`CmConfig::event_queue_limit`]) are set here.
    pub fn with_config(cfg: CmConfig) -> Cm {
        let node = match Node::new(cfg) {
            Ok(n) => n,
            // Node::new cannot fail without a MAD layer to register on.
            Err(e) => unreachable!("Node::new: {e}"),
        };
        Cm {
            shared: Arc::new(Shared {
                host: Arc::new(Host::new(node, false)),
                devices: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Runs the CM on `dev` too (`cm_add_one`): the device becomes a port of this CM's
    /// node (its stack, QPs, regions, QP1 and management classes move with it; see
    /// the `host` module) and its loop drives the CM from now on. Returns the device's port
    /// name in this CM. A device belongs to one CM: adding it to a second is refused
    /// ([`Error::OtherCm`]); adding it again returns its port.
    pub fn add_device(&self, dev: &Device) -> Result<CmPort, Error> {
        let mut devices = lock(&self.shared.devices);
        let (host, port) = dev.shared().host();
        if Arc::ptr_eq(&host, &self.shared.host) {
            return Ok(port);
        }
        if !host.is_private() {
            return Err(Error::OtherCm);
        }
        let port = dev.shared().move_to(&self.shared.host)?;
        debug_assert_eq!(port.index(), devices.len());
        devices.push(Some(dev.clone()));
        Ok(port)
    }

    /// The device of `port`.
    pub fn device(&self, port: CmPort) -> Option<Device> {
        lock(&self.shared.devices)
            .get(port.index())
            .cloned()
            .flatten()
    }

    /// The ports of the devices added, with their devices.
    pub fn devices(&self) -> Vec<(CmPort, Device)> {
        let devices = lock(&self.shared.devices).clone();
        let h = self.shared.host.lock();
        h.node
            .ports()
            .zip(devices)
            .filter_map(|(p, d)| Some((p, d?)))
            .collect()
    }

    /// Takes `dev` out of this CM (its device closed: `ibv_close_device`): its port is
    /// retired ([`Node::retire_port`]: the stack with every QP and region leaves the node,
    /// no address resolves to the port any more) and the CM no longer keeps the device
    /// open, so its sockets close with its last handle. Ids still bound to the port stay
    /// (the application destroys them). `Error::NoSuchPort` if `dev` is not one of this
    /// CM's devices.
    pub fn remove_device(&self, dev: &Device) -> Result<(), Error> {
        let mut devices = lock(&self.shared.devices);
        let (host, port) = dev.shared().host();
        if !Arc::ptr_eq(&host, &self.shared.host) {
            return Err(Error::NoSuchPort);
        }
        let slot = devices.get_mut(port.index()).ok_or(Error::NoSuchPort)?;
        let removed = slot.take().ok_or(Error::NoSuchPort)?;
        let stack = self.shared.host.lock().node.retire_port(port)?;
        self.shared.host.remove_device(port);
        drop(devices);
        // The regions and QPs go outside the locks; then the device itself.
        drop(stack);
        drop(removed);
        Ok(())
    }

    /// The port (device) that holds `ip` as a RoCEv2 GID, if any.
    pub fn port_for_ip(&self, ip: std::net::IpAddr) -> Option<CmPort> {
        self.devices()
            .into_iter()
            .find(|(_, d)| d.local_addr().ip() == ip)
            .map(|(p, _)| p)
    }

    /// Runs `f` on the RDMA CM with `port`'s stack (connect, accept, disconnect, the IB CM
    /// through `cm_mut`…), then puts what it sent on the wire and queues its events.
    pub fn with<R>(
        &self,
        port: CmPort,
        f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant) -> R,
    ) -> Result<R, Error> {
        let dev = self.device(port).ok_or(Error::NoSuchPort)?;
        let r = dev.shared().node_command(|h, port, now| {
            h.node
                .with_port(now, port, |rdma, stack| f(rdma, stack, now))
        })?;
        self.shared.host.signal();
        Ok(r)
    }

    /// [`Cm::with`] on the device `id` lives on.
    pub fn with_id<R>(
        &self,
        id: RdmaId,
        f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant) -> R,
    ) -> Result<R, Error> {
        let port = self
            .shared
            .host
            .lock()
            .node
            .rdma()
            .port_of(id)
            .ok_or(Error::NoSuchId)?;
        self.with(port, f)
    }

    /// Runs `f` on the RDMA CM alone (listen, queries); MADs it queues go out from this
    /// thread, device by device, after the CM's lock is released.
    pub fn with_cm<R>(&self, f: impl FnOnce(&mut RdmaCm) -> R) -> R {
        let r = f(self.shared.host.lock().node.rdma_mut());
        for d in lock(&self.shared.devices).iter().flatten() {
            d.shared().flush_commands();
        }
        self.shared.host.signal();
        r
    }

    /// `rdma_resolve_addr`: without `src` (and an id not bound to an address), the source is
    /// the address the OS routing table picks towards `dst`, as the kernel's
    /// `rdma_resolve_ip` does. ADDR_RESOLVED / ADDR_ERROR follow as events.
    pub fn resolve_addr(
        &self,
        id: &RdmaCmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
    ) -> Result<(), Error> {
        let src = src.or_else(|| route_source(dst.ip()));
        Ok(self.with_cm(|r| r.resolve_addr(id, src, dst))?)
    }

    /// The next event, without waiting (with inline devices: after one non-blocking turn
    /// of each).
    pub fn poll_event(&self) -> Option<Event> {
        self.poll_with(pop)
    }

    /// The next RDMA CM event of `owner` — its own, or for a listener a CONNECT_REQUEST
    /// it received — without waiting; everyone else's stay queued
    /// ([`RdmaCm::poll_event_of`]).
    pub fn poll_event_of(&self, owner: RdmaId) -> Option<RdmaCmEvent> {
        self.poll_with(|h| pop_of(h, owner))
    }

    fn poll_with<T>(&self, pop: impl FnOnce(&mut HostState) -> Option<T>) -> Option<T> {
        for d in self.inline_devices() {
            let _ = d.poll_once();
        }
        pop(&mut self.shared.host.lock())
    }

    fn inline_devices(&self) -> Vec<Device> {
        lock(&self.shared.devices)
            .iter()
            .flatten()
            .filter(|d| d.progress() == Progress::Inline)
            .cloned()
            .collect()
    }

    /// The next event, waiting up to `timeout` (`None` when it passed). Threaded devices
    /// deliver it the moment their loop handles the MAD; inline devices are turned here.
    pub fn wait_event(&self, timeout: Duration) -> Option<Event> {
        self.wait_with(timeout, pop)
    }

    /// [`Cm::poll_event_of`], waiting up to `timeout`: a thread waiting on one id never
    /// takes (or handles) another's event.
    pub fn wait_event_of(&self, owner: RdmaId, timeout: Duration) -> Option<RdmaCmEvent> {
        self.wait_with(timeout, |h| pop_of(h, owner))
    }

    fn wait_with<T>(
        &self,
        timeout: Duration,
        mut pop: impl FnMut(&mut HostState) -> Option<T>,
    ) -> Option<T> {
        let end = StdInstant::now() + timeout;
        let inline = self.inline_devices();
        let host = &self.shared.host;
        loop {
            {
                let mut g = host.lock();
                if let Some(e) = pop(&mut g) {
                    return Some(e);
                }
                let left = end.saturating_duration_since(StdInstant::now());
                if left.is_zero() {
                    return None;
                }
                if inline.is_empty() {
                    let mut g = host.wait(g, left);
                    if let Some(e) = pop(&mut g) {
                        return Some(e);
                    }
                    continue;
                }
            }
            // One device: wait in its loop until input or the deadline; several: share
            // the time in slices so none starves.
            let slice = if inline.len() == 1 {
                end
            } else {
                end.min(StdInstant::now() + Duration::from_millis(1))
            };
            for d in &inline {
                let _ = d.progress_until(slice);
            }
        }
    }

    /// The next event, as a future (threaded devices; see the module docs).
    pub fn next_event(&self) -> impl Future<Output = Event> + '_ {
        NextEvent { cm: self, pop }
    }

    /// [`Cm::poll_event_of`] as a future (threaded devices).
    pub fn next_event_of(&self, owner: RdmaId) -> impl Future<Output = RdmaCmEvent> + '_ {
        NextEvent {
            cm: self,
            pop: move |h: &mut HostState| pop_of(h, owner),
        }
    }

    /// Answers every SIDR REQ that UD listener `listener` receives with a SIDR REP naming
    /// `qpn` (and the RDMA CM's Q_Key), in the loop turn that received it, as a `udaddy`
    /// server's accept would; the request's id is destroyed at once. Until
    /// [`Cm::stop_answering_sidr`] or the listener's destruction.
    pub fn answer_sidr(&self, listener: RdmaId, qpn: u32) {
        self.shared.host.lock().sidr_answers.insert(listener, qpn);
    }

    /// Stops [`Cm::answer_sidr`] for `listener`.
    pub fn stop_answering_sidr(&self, listener: RdmaId) {
        self.shared.host.lock().sidr_answers.remove(&listener);
    }

    /// Whether IB CM events (ids made on the IB CM directly; retransmission notices) are
    /// kept for [`Cm::poll_event`] (the default). A CM whose users take only their own
    /// ids' RDMA CM events ([`Cm::poll_event_of`]) says `false`, so that notices nobody
    /// takes do not fill the bounded queue.
    pub fn keep_ib_events(&self, keep: bool) {
        let mut g = self.shared.host.lock();
        g.keep_ib_events = keep;
        if !keep {
            while g.node.poll_ib_event().is_some() {}
        }
    }

    /// Whether an event is queued.
    pub fn has_event(&self) -> bool {
        self.shared.host.lock().node.rdma().has_event()
    }

    /// How many events are queued (see the module docs on the bound).
    pub fn queued_events(&self) -> usize {
        self.shared.host.lock().node.rdma().queued_events()
    }

    /// The IB CM's counters.
    pub fn counters(&self) -> CmCounters {
        self.shared.host.lock().node.rdma().cm().counters()
    }

    /// The RDMA CM's counters: backlog drops, refused REQs, and what the full event queue
    /// refused or dropped.
    pub fn rdma_counters(&self) -> RdmaCmCounters {
        self.shared.host.lock().node.rdma().counters()
    }

    /// The sizes of the IB CM's tables (ids, remote-ID and remote-QPN entries, timewaits,
    /// half-open ids, outstanding sends...).
    pub fn table_sizes(&self) -> CmTableSizes {
        self.shared.host.lock().node.rdma().cm().table_sizes()
    }

    /// How many RDMA CM ids exist (listeners included).
    pub fn id_count(&self) -> usize {
        self.shared.host.lock().node.rdma().id_count()
    }
}

/// [`Cm::next_event`] and [`Cm::next_event_of`]: the event `pop` takes.
struct NextEvent<'a, P> {
    cm: &'a Cm,
    pop: P,
}

impl<T, P: FnMut(&mut HostState) -> Option<T> + Unpin> Future for NextEvent<'_, P> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let host = self.cm.shared.host.clone();
        // Register before looking, so a signal between the look and the registration is
        // not lost.
        host.register(cx.waker());
        let mut g = host.lock();
        match (self.pop)(&mut g) {
            Some(e) => Poll::Ready(e),
            None => Poll::Pending,
        }
    }
}

/// The source address the OS routing table picks towards `dst` (a connected UDP socket's
/// local address; nothing is sent).
pub fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() {
        IpAddr::from([0u8, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    };
    let s = UdpSocket::bind((any, 0)).ok()?;
    s.connect((dst, 4791)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Resolves `host` (a name or an address) as `getaddrinfo` does, preferring `family` when
/// given (`true` = IPv4).
pub fn resolve_host(host: &str, port: u16, v4: Option<bool>) -> std::io::Result<SocketAddr> {
    let mut addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    if let Some(v4) = v4 {
        addrs.retain(|a| a.is_ipv4() == v4);
    }
    addrs.into_iter().next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host}: no address of the requested family"),
        )
    })
}
