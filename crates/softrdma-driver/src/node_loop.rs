//! One loop over all the sockets of a node: the thread that runs the devices of one
//! [`crate::cm::Cm`] (the ports of its node) instead of a thread per device.
//!
//! A device opened with [`crate::Progress::Thread`] runs its own loop thread while it is
//! the one port of a node of its own. When a `Cm` takes it ([`crate::cm::Cm::add_device`]),
//! its thread ends and the node's loop takes it over: one epoll set holds every socket of
//! every threaded device of the node (each device's address sockets) and the loop's waker;
//! one thread sleeps in it until input on any of them, the node's next timer (whichever
//! port's transport, MAD layer, class or CM it is: it is one node), or a wake-up, and then
//! turns each device in turn — the same turn a device's own loop runs (receive what is
//! queued, `Node::handle_datagram` for each datagram, the node's timers, transmit), non-
//! blocking, repeated while a device's sockets had more than one batch queued.
//!
//! The loop takes a device's receive buffers with `try_lock`: a thread turning an inline
//! device itself is never waited for, and a device whose buffers are busy is turned next
//! time round. What a device's commands do to wake the loop (a post that moves the next
//! timer earlier, a CM command's sends) goes to this loop's waker once the device is on it.
//!
//! The loop sleeps in `epoll_wait` without a timeout, bounded by a lazily armed `timerfd`
//! (re-armed only for an earlier deadline, as a device loop's: an `epoll_wait` timeout arms
//! and cancels a kernel hrtimer every time), and never longer than a device loop's tick.
//! Before it sleeps it spins as the most eager of its devices' [`crate::PollMode`]s says
//! (a device's own loop thread spun that way; `softrdma perf cm`'s devices spin 50 µs
//! then sleep): non-blocking `epoll_wait`s over the same set, so the answer that comes
//! within microseconds is turned without a wake-up. A spin that loses its core stops and
//! backs off (per thread) as a device loop's does ([`crate::timer::spin_is_off`]).
//!
//! A device opened with [`crate::DeviceConfig::app_turns`] (the drop-in `libibverbs.so.1`'s)
//! is also turned by the application's own CQ polls: a poll that finds the CQ empty takes
//! the receive buffers with `try_lock` and runs a non-blocking turn in the polling thread.
//! While every device of the node has been polled within [`APP_GRACE`], the loop does not
//! sleep in `epoll_wait` (which would wake it for every datagram the poller is about to
//! turn itself) but naps [`NAP`] at a time and then turns what the polls left, leaving
//! what its turn queues (the ACK of a WRITE) up to [`LEAVE_TO_APP`] for the application's
//! next post to carry; once the polls stop it sleeps in epoll again. A device whose
//! application has not polled for [`APP_GRACE`] has the loop spin [`INPUT_SPIN`] after each
//! datagram before it sleeps (backed off as any spin of the loop's).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::device::Shared as DeviceShared;
use crate::host::{lock, Host};
use crate::timer::{spin_is_off, Notifier, PollMode, SpinWatch};
use crate::udp::LazyTimer;

const WAKE: Token = Token(0);
const SOCKET: Token = Token(1);

/// The longest the loop sleeps without looking at the node's timers (as a device loop's).
const TICK: Duration = Duration::from_millis(5);

/// How recently the application must have polled a CQ of a device
/// ([`crate::DeviceConfig::app_turns`]) for the loop to keep out of its way: it does not
/// sleep in epoll (which would wake it for every datagram the poller is about to turn
/// itself) but naps [`NAP`] at a time and then turns what the polls left. Session 11 tried
/// 50 µs (and 1 ms when the last poll found the CQ empty): on a quiet machine a poller
/// preempted for longer sent the loop to epoll, its wake-ups for datagrams took the pinned
/// poller's core, and `ib_send_lat` took 11-25 µs instead of 8-11. Session 10 tried 20 µs
/// with 50 µs naps (30 µs).
const APP_GRACE: Duration = Duration::from_millis(2);

/// How long the loop naps while applications' polls turn every device of the node: the
/// longest a WRITE that comes while the application spins on memory instead of polling
/// (perftest's `ib_write_lat`) waits for the loop's turn. Session 10 napped 1 ms, and such
/// a WRITE waited up to that (`ib_write_lat` bimodal, average 225-290 µs); each nap's end
/// is a wake-up on the poller's core (a pinned process's loop thread shares it), and
/// 100 µs cost `ib_send_lat` 1-2 µs on a quiet machine.
const NAP: Duration = Duration::from_micros(300);

/// The longest the output of a turn waits for the application's next post (or poll) to
/// carry it ([`crate::DeviceConfig::defer_flush`]) before the loop sends it alone, while
/// the application polled within [`APP_GRACE`]. The loop's turn at a nap's end used to
/// send it at once: the ACK of a WRITE that a poll had just turned then left alone, before
/// the application's answer; the peer's poll took the ACK, its application went to spin
/// on memory, and the answer, arriving a little later, found no poll to turn it but the
/// loop's next nap's end, at every hop from then on (`ib_write_lat`'s 1 ms mode). Carried
/// with the answer, both arrive while the peer polls for the ACK.
const LEAVE_TO_APP: Duration = Duration::from_micros(50);

/// How long the loop spins (non-blocking `epoll_wait`s) after a round that received
/// datagrams for devices whose application does not poll (the server of `ib_read_lat`
/// answers READs without a poll, each from a wake-up in epoll before): the next request of
/// a ping-pong comes within a round trip. A spin that loses its core backs off
/// ([`crate::timer::spin_is_off`]), as any spin of the loop's.
const INPUT_SPIN: Duration = Duration::from_micros(100);

/// The loop thread of one node (see the module docs).
pub(crate) struct NodeLoop {
    registry: Registry,
    notifier: Notifier,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl NodeLoop {
    /// Starts the loop of `host` (which it holds weakly: the loop ends with the host).
    pub fn start(host: Weak<Host>) -> io::Result<NodeLoop> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let notifier = Notifier::new(poll.registry(), WAKE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let n = notifier.clone();
        let thread = std::thread::Builder::new()
            .name("softrdma-node".into())
            .spawn(move || run(host, poll, s, n))?;
        Ok(NodeLoop {
            registry,
            notifier,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Watches `dev`'s sockets from now on (the device's own loop stops by itself once it
    /// sees it was taken over).
    pub fn watch(&self, dev: &DeviceShared) -> io::Result<()> {
        for fd in dev.socket_fds() {
            self.registry
                .register(&mut SourceFd(&fd), SOCKET, Interest::READABLE)?;
        }
        Ok(())
    }

    /// Watches one more socket of a device the loop runs (an address added).
    pub fn watch_fd(&self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.registry
            .register(&mut SourceFd(&fd), SOCKET, Interest::READABLE)
    }

    /// What wakes the loop.
    pub fn notifier(&self) -> Notifier {
        self.notifier.clone()
    }
}

impl Drop for NodeLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.notifier.notify();
        if let Some(t) = lock(&self.thread).take() {
            // The host may go on the loop thread itself (it held the last reference for a
            // turn): that thread ends by itself; joining itself would fail.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

fn run(host: Weak<Host>, mut poll: Poll, stop: Arc<AtomicBool>, notifier: Notifier) {
    let mut events = Events::with_capacity(64);
    let mut timer = match LazyTimer::new(poll.registry()) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("softrdma node loop: timerfd: {e}; sleeping with epoll timeouts");
            None
        }
    };
    while !stop.load(Ordering::Acquire) {
        let Some(h) = host.upgrade() else { return };
        let devices = h.loop_devices();
        drop(h);
        let mut more = false;
        let mut received = false;
        for d in &devices {
            // While the application polls, what the loop's turn queues (and what the
            // polls' turns left) waits a little for its next post (turn_for_node_loop).
            let leave = d.app_polling(APP_GRACE).then_some(LEAVE_TO_APP);
            match d.turn_for_node_loop(leave) {
                Ok(t) => {
                    more |= !t.drained;
                    received |= t.received;
                }
                // As a device loop: a socket error that is not about one datagram is
                // reported and the loop goes on (the device stays usable for queries).
                Err(e) => eprintln!("softrdma node loop: {e}"),
            }
        }
        let spin = spin_budget(&devices).max(input_spin(&devices, received));
        let mut timeout = match devices.first() {
            // A device with datagrams still queued: look again at once.
            Some(_) if more => Duration::ZERO,
            Some(d) => d.arm_node_loop_deadline(&devices, TICK),
            None => TICK,
        };
        for d in &devices {
            if let Some(due) = d.deferred_due(LEAVE_TO_APP) {
                timeout = timeout.min(due);
            }
        }
        // Every device turned by its application's busy polls: the answer to a SEND leaves
        // from the polling thread without a wake-up, so this thread does not wake for each
        // datagram too (a wake-up that costs the poller its core on a loaded machine, or on
        // the core a pinned poller shares with it). It naps instead, then looks at what the
        // polls left (a WRITE that came while the application spun on memory, timers of a
        // device nobody polls any more, output the polls left unsent too long).
        let polled = !devices.is_empty() && devices.iter().all(|d| d.app_polling(APP_GRACE));
        drop(devices);
        if polled && !timeout.is_zero() {
            // A command (an RDMA CM call, a destroy) wakes the nap at once: it never waits
            // out a NAP behind polls that do not turn it.
            notifier.nap(timeout.min(NAP));
            // The readiness that came meanwhile is stale: the next round turns the devices.
            match poll.poll(&mut events, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => eprintln!("softrdma node loop: epoll: {e}"),
            }
            after_wake(&host, &events, &mut timer, &notifier);
            continue;
        }
        if !timeout.is_zero() {
            if let Some(budget) = spin.filter(|_| !spin_is_off()) {
                if spin_for_input(&mut poll, &mut events, &notifier, budget.min(timeout)) {
                    after_wake(&host, &events, &mut timer, &notifier);
                    continue;
                }
            }
        }
        let wait = match timer.as_mut() {
            Some(t) if !timeout.is_zero() => {
                let now = std::time::Instant::now();
                match t.arm(now + timeout, now) {
                    Ok(()) => None,
                    Err(_) => Some(timeout),
                }
            }
            _ => Some(timeout),
        };
        match poll.poll(&mut events, wait) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("softrdma node loop: epoll: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        after_wake(&host, &events, &mut timer, &notifier);
    }
}

/// What the loop does once its wait ended (events, a wake-up or its deadline).
fn after_wake(
    host: &Weak<Host>,
    events: &Events,
    timer: &mut Option<LazyTimer>,
    notifier: &Notifier,
) {
    if events.iter().any(|e| e.token() == LazyTimer::TOKEN) {
        if let Some(t) = timer.as_mut() {
            t.fired();
        }
    }
    notifier.take();
    if let Some(h) = host.upgrade() {
        for d in h.loop_devices() {
            d.disarm_node_loop_deadline();
        }
    }
}

/// [`INPUT_SPIN`] after a round that `received` datagrams, when every device is one whose
/// application's polls would turn it ([`crate::DeviceConfig::app_turns`]) but none has
/// polled within [`APP_GRACE`] (the loop alone serves them, as the server of a READ).
fn input_spin(devices: &[Arc<DeviceShared>], received: bool) -> Option<Duration> {
    let serves_alone = !devices.is_empty()
        && devices
            .iter()
            .all(|d| d.turned_by_app() && !d.app_polling(APP_GRACE));
    (received && serves_alone).then_some(INPUT_SPIN)
}

/// How long the loop spins before it sleeps: the longest spin any of its devices asks for
/// (`BusyPoll`: until the deadline), or none.
fn spin_budget(devices: &[Arc<DeviceShared>]) -> Option<Duration> {
    devices
        .iter()
        .filter_map(|d| match d.loop_mode() {
            PollMode::Blocking => None,
            PollMode::BusyPoll => Some(Duration::MAX),
            PollMode::SpinThenBlock(s) => Some(s),
        })
        .max()
}

/// Spins on non-blocking `epoll_wait`s for at most `budget`; true when something became
/// ready (a socket, the timer, a wake-up), false when the budget ran out or the spin lost
/// its core (and spinning backs off).
fn spin_for_input(
    poll: &mut Poll,
    events: &mut Events,
    notifier: &Notifier,
    budget: Duration,
) -> bool {
    let end = std::time::Instant::now() + budget;
    let mut watch = SpinWatch::start();
    loop {
        match poll.poll(events, Some(Duration::ZERO)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
        if !events.is_empty() || notifier.pending() {
            watch.ended_with_input();
            return true;
        }
        if std::time::Instant::now() >= end || watch.preempted() {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// The raw descriptors of a device's sockets, for [`NodeLoop::watch`].
pub(crate) fn fds(eps: &[&crate::udp::UdpEndpoint]) -> Vec<std::os::fd::RawFd> {
    eps.iter().map(|e| e.socket().as_raw_fd()).collect()
}
