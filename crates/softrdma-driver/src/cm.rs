//! The connection manager of a process: one [`Cm`] (IB CM + RDMA CM) spanning every device
//! added to it, run by the devices' own event loops.
//!
//! The CM is a [`MadClient`] of each device's QP1 ([`crate::mad`]): a CM MAD is handled in
//! the loop turn that received it, the CM's retransmissions are the MAD layer's timers and
//! its timewait timers are asked for by every loop, so with [`Progress::Thread`] devices
//! nobody needs to poll — events wait in the CM's queue for [`Cm::wait_event`] (blocking),
//! [`Cm::next_event`] (async) or [`Cm::poll_event`] (non-blocking). With
//! [`Progress::Inline`] devices the CM runs when the caller's thread turns their loops:
//! [`Cm::wait_event`] does that itself; [`Cm::poll_event`] does one non-blocking turn; an
//! async waiter on an inline device is never woken, as for any polled device.
//!
//! # Threads and locks
//!
//! Each device has its state lock (stack, QP1, MAD layer); the CM has one lock. The order is
//! always **device, then CM**: a loop holds its device's lock and takes the CM's to hand it a
//! MAD; a command ([`Cm::with`]) takes the id's device lock, then the CM's. Nothing takes a
//! device lock while holding the CM's, and no code holds two device locks. A CM step on one
//! device that has to send on another (e.g. a stale-connection DREQ for an id that lives on
//! another device) queues the MAD operation in that device's [`crate::mad::MadInbox`] and
//! wakes its loop. Events are signalled after the locks are released.
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

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmConfig, CmCounters, CmEvent, CmPort, CmTableSizes, RXE_CA_ACK_DELAY};
use softrdma_core::mad::{AgentId, MadAgent, MadEvent};
use softrdma_core::rdma_cm::{
    AnyEvent, RdmaCm, RdmaCmCounters, RdmaCmError, RdmaCmEvent, RdmaCmId, RdmaId,
};
use softrdma_core::time::Instant;
use softrdma_core::Stack;
use softrdma_wire::Guid;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

use crate::device::{Device, Progress};
use crate::mad::{MadClient, MadInbox, PortCtx};

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
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchPort => f.write_str("no such device in this CM"),
            Error::NoSuchId => f.write_str("no such RDMA CM id"),
            Error::Rdma(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<RdmaCmError> for Error {
    fn from(e: RdmaCmError) -> Self {
        Error::Rdma(e)
    }
}

struct Inner {
    rdma: RdmaCm,
    /// By CmPort index.
    devices: Vec<Device>,
    inboxes: Vec<Arc<MadInbox>>,
    /// UD listeners answered in the loop turn that queued their requests: a SIDR REP
    /// with this QPN (Q_Key: the RDMA CM's), the id destroyed at once ([`Cm::answer_sidr`]).
    sidr_answers: HashMap<RdmaId, u32>,
    /// Whether IB CM events are kept for the application ([`Cm::keep_ib_events`]).
    keep_ib_events: bool,
}

impl Inner {
    /// What the CM does on its own after input, in the same turn: answers SIDR REQs of
    /// the UD listeners it answers for, and drops IB CM events nobody will take.
    fn after_input(&mut self, now: Instant) {
        for (&l, &qpn) in &self.sidr_answers {
            while let Some(mut e) = self.rdma.poll_event_of(l) {
                if let Some(id) = e.new_id.take() {
                    // Refused only for a destroyed id or a bad state: nothing to answer.
                    let _ = self.rdma.accept_ud(now, &id, qpn, 0, &[]);
                    self.rdma.destroy(now, id);
                }
            }
        }
        if !self.keep_ib_events {
            while self.rdma.poll_ib_event().is_some() {}
        }
    }

    /// Hands the CM's queued MAD operations to the MAD layers: `here` (whose layer the
    /// caller holds) directly, the others through their inboxes.
    fn route(&mut self, here: Option<(CmPort, &mut MadAgent)>) {
        let mut here = here;
        while let Some((port, agent, op)) = self.rdma.poll_mad() {
            match here.as_mut() {
                Some((p, mad)) if *p == port => {
                    // A cancel of a send that already ended is the only failure.
                    let _ = mad.apply(agent, op);
                }
                _ => {
                    if let (Some(inbox), Some(dev)) = (
                        self.inboxes.get(port.index()),
                        self.devices.get(port.index()),
                    ) {
                        inbox.push(agent, op);
                        dev.wake();
                    }
                }
            }
        }
    }

    /// The next RDMA CM event of `owner` ([`RdmaCm::poll_event_of`]); like [`Inner::pop`],
    /// what taking it makes the CM send goes out.
    fn pop_of(&mut self, owner: RdmaId) -> Option<RdmaCmEvent> {
        let e = self.rdma.poll_event_of(owner);
        if self.rdma.cm().has_mad_ops() {
            self.route(None);
        }
        e
    }

    /// The next event, from the RDMA CM's queue. Taking one may destroy ids (an IB CM
    /// event of a destroyed listener drops its new id): their MADs go out through the
    /// devices' inboxes.
    fn pop(&mut self) -> Option<Event> {
        let e = self.rdma.poll_next().map(|e| match e {
            AnyEvent::Rdma(e) => Event::Rdma(e),
            AnyEvent::Ib(e) => Event::Ib(e),
        });
        if self.rdma.cm().has_mad_ops() {
            self.route(None);
        }
        e
    }
}

struct Shared {
    inner: Mutex<Inner>,
    cv: Condvar,
    /// Threads in [`Cm::wait_event`]'s condition wait (counted under `inner`'s lock before
    /// waiting): `notify_all` is a futex syscall even with nobody waiting, and the loops
    /// signal after every turn that queued an event.
    cv_waiters: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn signal(&self) {
        if self.cv_waiters.load(Ordering::Acquire) > 0 {
            self.cv.notify_all();
        }
        let wakers = std::mem::take(&mut *lock(&self.wakers));
        for w in wakers {
            w.wake();
        }
    }
}

/// The CM's client on one device's QP1.
struct PortClient {
    cm: Weak<Shared>,
    port: CmPort,
    agent: AgentId,
    /// An event was queued in this loop turn: waiters are woken once, at its end
    /// ([`MadClient::end_turn`]), not per MAD — a woken waiter would contend for the CM's
    /// lock with the loop handling the rest of the batch.
    queued: AtomicBool,
}

impl MadClient for PortClient {
    fn owns(&self, agent: AgentId) -> bool {
        agent == self.agent
    }

    fn handle_mad(&self, ctx: &mut PortCtx<'_>, ev: MadEvent) {
        let Some(cm) = self.cm.upgrade() else { return };
        let had = {
            let mut g = lock(&cm.inner);
            g.rdma.handle_mad(ctx.now, self.port, ctx.stack, ev);
            g.after_input(ctx.now);
            g.route(Some((self.port, &mut *ctx.mad)));
            g.rdma.has_event()
        };
        if had {
            self.queued.store(true, Ordering::Relaxed);
        }
    }

    fn end_turn(&self) {
        if self.queued.swap(false, Ordering::Relaxed) {
            if let Some(cm) = self.cm.upgrade() {
                cm.signal();
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let cm = self.cm.upgrade()?;
        let t = lock(&cm.inner).rdma.poll_timeout();
        t
    }

    fn handle_timeout(&self, ctx: &mut PortCtx<'_>) {
        let Some(cm) = self.cm.upgrade() else { return };
        {
            let mut g = lock(&cm.inner);
            g.rdma.handle_timeout(ctx.now);
            g.after_input(ctx.now);
            g.route(Some((self.port, &mut *ctx.mad)));
        }
        self.queued.store(true, Ordering::Relaxed);
    }
}

/// The process's connection manager (cheap to clone; see the module docs).
#[derive(Clone)]
pub struct Cm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.shared.inner);
        f.debug_struct("Cm")
            .field("devices", &g.devices.len())
            .field("queued_events", &g.rdma.queued_events())
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
        let rdma = match RdmaCm::new(cfg) {
            Ok(r) => r,
            // RdmaCm::new cannot fail without a MAD layer to register on.
            Err(e) => unreachable!("RdmaCm::new: {e}"),
        };
        Cm {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    rdma,
                    devices: Vec::new(),
                    inboxes: Vec::new(),
                    sidr_answers: HashMap::new(),
                    keep_ib_events: true,
                }),
                cv: Condvar::new(),
                cv_waiters: AtomicUsize::new(0),
                wakers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Runs the CM on `dev` too (`cm_add_one`): the CM registers on its QP1 and its loop
    /// drives the CM from now on. Returns the device's port name in this CM.
    pub fn add_device(&self, dev: &Device) -> Result<CmPort, Error> {
        let weak = Arc::downgrade(&self.shared);
        let inbox = dev.mad_inbox();
        let client = dev.attach_mad_client(|mad, stack| {
            let mut g = lock(&self.shared.inner);
            let port = g.rdma.add_port(mad, stack)?;
            let agent = g.rdma.cm().agent(port).ok_or(Error::NoSuchPort)?;
            g.devices.push(dev.clone());
            g.inboxes.push(inbox);
            Ok::<_, Error>(Arc::new(PortClient {
                cm: weak,
                port,
                agent,
                queued: AtomicBool::new(false),
            }))
        })?;
        Ok(client.port)
    }

    /// The device of `port`.
    pub fn device(&self, port: CmPort) -> Option<Device> {
        lock(&self.shared.inner).devices.get(port.index()).cloned()
    }

    /// The ports of the devices added, with their devices.
    pub fn devices(&self) -> Vec<(CmPort, Device)> {
        let g = lock(&self.shared.inner);
        g.rdma.cm().ports().zip(g.devices.iter().cloned()).collect()
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
        let r = dev.with_mad(|ctx| {
            let mut g = lock(&self.shared.inner);
            let r = f(&mut g.rdma, ctx.stack, ctx.now);
            g.route(Some((port, &mut *ctx.mad)));
            r
        });
        self.shared.signal();
        Ok(r)
    }

    /// [`Cm::with`] on the device `id` lives on.
    pub fn with_id<R>(
        &self,
        id: RdmaId,
        f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant) -> R,
    ) -> Result<R, Error> {
        let port = lock(&self.shared.inner)
            .rdma
            .port_of(id)
            .ok_or(Error::NoSuchId)?;
        self.with(port, f)
    }

    /// Runs `f` on the RDMA CM alone (listen, queries); MADs it queues go out through the
    /// devices' inboxes.
    pub fn with_cm<R>(&self, f: impl FnOnce(&mut RdmaCm) -> R) -> R {
        let r = {
            let mut g = lock(&self.shared.inner);
            let r = f(&mut g.rdma);
            g.route(None);
            r
        };
        self.shared.signal();
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
        self.poll_with(Inner::pop)
    }

    /// The next RDMA CM event of `owner` — its own, or for a listener a CONNECT_REQUEST
    /// it received — without waiting; everyone else's stay queued
    /// ([`RdmaCm::poll_event_of`]).
    pub fn poll_event_of(&self, owner: RdmaId) -> Option<RdmaCmEvent> {
        self.poll_with(|g| g.pop_of(owner))
    }

    fn poll_with<T>(&self, pop: impl FnOnce(&mut Inner) -> Option<T>) -> Option<T> {
        for d in self.inline_devices() {
            let _ = d.poll_once();
        }
        pop(&mut lock(&self.shared.inner))
    }

    fn inline_devices(&self) -> Vec<Device> {
        lock(&self.shared.inner)
            .devices
            .iter()
            .filter(|d| d.progress() == Progress::Inline)
            .cloned()
            .collect()
    }

    /// The next event, waiting up to `timeout` (`None` when it passed). Threaded devices
    /// deliver it the moment their loop handles the MAD; inline devices are turned here.
    pub fn wait_event(&self, timeout: Duration) -> Option<Event> {
        self.wait_with(timeout, Inner::pop)
    }

    /// [`Cm::poll_event_of`], waiting up to `timeout`: a thread waiting on one id never
    /// takes (or handles) another's event.
    pub fn wait_event_of(&self, owner: RdmaId, timeout: Duration) -> Option<RdmaCmEvent> {
        self.wait_with(timeout, |g| g.pop_of(owner))
    }

    fn wait_with<T>(
        &self,
        timeout: Duration,
        mut pop: impl FnMut(&mut Inner) -> Option<T>,
    ) -> Option<T> {
        let end = StdInstant::now() + timeout;
        let inline = self.inline_devices();
        loop {
            {
                let mut g = lock(&self.shared.inner);
                if let Some(e) = pop(&mut g) {
                    return Some(e);
                }
                let left = end.saturating_duration_since(StdInstant::now());
                if left.is_zero() {
                    return None;
                }
                if inline.is_empty() {
                    self.shared.cv_waiters.fetch_add(1, Ordering::AcqRel);
                    let (mut g, _) = self
                        .shared
                        .cv
                        .wait_timeout(g, left)
                        .unwrap_or_else(|p| p.into_inner());
                    self.shared.cv_waiters.fetch_sub(1, Ordering::AcqRel);
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
        NextEvent {
            cm: self,
            pop: Inner::pop,
        }
    }

    /// [`Cm::poll_event_of`] as a future (threaded devices).
    pub fn next_event_of(&self, owner: RdmaId) -> impl Future<Output = RdmaCmEvent> + '_ {
        NextEvent {
            cm: self,
            pop: move |g: &mut Inner| g.pop_of(owner),
        }
    }

    /// Answers every SIDR REQ that UD listener `listener` receives with a SIDR REP naming
    /// `qpn` (and the RDMA CM's Q_Key), in the loop turn that received it, as a `udaddy`
    /// server's accept would; the request's id is destroyed at once. Until
    /// [`Cm::stop_answering_sidr`] or the listener's destruction.
    pub fn answer_sidr(&self, listener: RdmaId, qpn: u32) {
        lock(&self.shared.inner).sidr_answers.insert(listener, qpn);
    }

    /// Stops [`Cm::answer_sidr`] for `listener`.
    pub fn stop_answering_sidr(&self, listener: RdmaId) {
        lock(&self.shared.inner).sidr_answers.remove(&listener);
    }

    /// Whether IB CM events (ids made on the IB CM directly; retransmission notices) are
    /// kept for [`Cm::poll_event`] (the default). A CM whose users take only their own
    /// ids' RDMA CM events ([`Cm::poll_event_of`]) says `false`, so that notices nobody
    /// takes do not fill the bounded queue.
    pub fn keep_ib_events(&self, keep: bool) {
        let mut g = lock(&self.shared.inner);
        g.keep_ib_events = keep;
        if !keep {
            while g.rdma.poll_ib_event().is_some() {}
        }
    }

    /// Whether an event is queued.
    pub fn has_event(&self) -> bool {
        lock(&self.shared.inner).rdma.has_event()
    }

    /// How many events are queued (see the module docs on the bound).
    pub fn queued_events(&self) -> usize {
        lock(&self.shared.inner).rdma.queued_events()
    }

    /// The IB CM's counters.
    pub fn counters(&self) -> CmCounters {
        lock(&self.shared.inner).rdma.cm().counters()
    }

    /// The RDMA CM's counters: backlog drops, refused REQs, and what the full event queue
    /// refused or dropped.
    pub fn rdma_counters(&self) -> RdmaCmCounters {
        lock(&self.shared.inner).rdma.counters()
    }

    /// The sizes of the IB CM's tables (ids, remote-ID and remote-QPN entries, timewaits,
    /// half-open ids, outstanding sends...).
    pub fn table_sizes(&self) -> CmTableSizes {
        lock(&self.shared.inner).rdma.cm().table_sizes()
    }

    /// How many RDMA CM ids exist (listeners included).
    pub fn id_count(&self) -> usize {
        lock(&self.shared.inner).rdma.id_count()
    }
}

/// [`Cm::next_event`] and [`Cm::next_event_of`]: the event `pop` takes.
struct NextEvent<'a, P> {
    cm: &'a Cm,
    pop: P,
}

impl<T, P: FnMut(&mut Inner) -> Option<T> + Unpin> Future for NextEvent<'_, P> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let shared = &self.cm.shared;
        // Register before looking, so a signal between the look and the registration is
        // not lost.
        lock(&shared.wakers).push(cx.waker().clone());
        let mut g = lock(&shared.inner);
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
