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
//! While every device of the node has been polled within [`APP_POLLING`], or its last poll
//! found the CQ empty within [`APP_WAITING`] (an application busy-polling its CQ), the
//! loop neither turns them nor sleeps in `epoll_wait` (which would wake it for every
//! datagram the poller is about to turn itself): it naps [`NAP`] at a time and looks
//! again. Once the polls pause (the application took its completion and spins on the
//! memory its peer writes), it turns the devices and sleeps in epoll, woken by the next
//! datagram at once. While the application polled within [`APP_GRACE`], what the loop's
//! turn queues (the ACK of the WRITE it took) waits up to [`LEAVE_TO_APP`] for the
//! application's next post to carry it; when it has not, the loop serves the devices
//! alone and spins [`INPUT_SPIN`] after each datagram before it sleeps (backed off as any
//! spin of the loop's).

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
/// ([`crate::DeviceConfig::app_turns`]) for the loop to leave the device's input to its
/// polls: the loop does not turn the device nor wake for its datagrams, but naps [`NAP`]
/// at a time. An application that busy-polls its CQ polls every few microseconds; one
/// whose poll returned completions and that went on without polling (perftest's
/// `ib_write_lat` spins on the memory its peer writes once its send CQ gave the
/// completion) leaves a WRITE that comes then to the loop, which finds it within this plus
/// [`NAP`] and then sleeps in epoll, woken by the next datagram at once. Session 10 napped
/// 1 ms while polls came within 2 ms: such a WRITE waited up to the millisecond
/// (`ib_write_lat` bimodal, median 532 µs in one run).
const APP_POLLING: Duration = Duration::from_micros(50);

/// [`APP_POLLING`] for an application whose last poll found its CQ empty: it is waiting
/// on the CQ and polls again, unless the scheduler preempted it (a loaded machine takes
/// a poller's core for milliseconds). Were the loop to turn the devices and sleep in epoll
/// then, its wake-ups for datagrams would take the poller's core once it runs again:
/// `ib_send_lat` went from 10-12 to 20-27 µs with 50 µs here (this session), and session 10
/// tried 20 µs with 50 µs naps (30 µs). An application asleep on a completion channel after
/// an empty poll has its completions within this plus [`NAP`] (session 10: 3 ms).
const APP_WAITING: Duration = Duration::from_millis(1);

/// How long the loop naps while every device of the node is left to its application's
/// polls ([`APP_POLLING`]), between two looks at whether they still come: the longest a
/// WRITE that comes just after the application's last poll waits for the loop. Each nap's
/// end is a wake-up on the poller's core (the pinned processes of a latency test run their
/// loop thread on the poller's core): 10 000 a second at this length.
const NAP: Duration = Duration::from_micros(100);

/// While the application has polled within this (though not within [`APP_POLLING`]), what
/// the loop's turns queue (the ACK of the WRITE it took) waits up to [`LEAVE_TO_APP`] for the
/// application's next post to carry it. Without polls for longer, the application is not
/// expected to post soon: what the loop queues leaves at once, and the loop spins a while
/// after a datagram before it sleeps ([`INPUT_SPIN`]).
const APP_GRACE: Duration = Duration::from_millis(2);

/// The longest the output of a turn waits for the application's next post (or poll) to
/// carry it ([`crate::DeviceConfig::defer_flush`]) before the loop sends it alone.
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
    // A command woke the loop: it turns the devices even if their applications poll.
    let mut woken = false;
    while !stop.load(Ordering::Acquire) {
        let Some(h) = host.upgrade() else { return };
        let devices = h.loop_devices();
        drop(h);
        // Every device busy-polled by its application: its polls turn it (the answer to a
        // SEND leaves from the polling thread without a wake-up), so this thread neither
        // turns it nor wakes for each datagram (a wake-up that costs the poller its core
        // on a loaded machine, or on the core the poller is pinned to). It naps, then
        // looks again whether the polls still come; what the polls queue and leave
        // unsent too long, it sends.
        let left_to_app = !woken
            && !devices.is_empty()
            && devices
                .iter()
                .all(|d| d.app_polling(APP_POLLING) || d.app_waiting(APP_WAITING));
        if left_to_app {
            let mut nap = devices[0].arm_node_loop_deadline(&devices, NAP);
            for d in &devices {
                d.flush_if_due(LEAVE_TO_APP);
                if let Some(due) = d.deferred_due(LEAVE_TO_APP) {
                    nap = nap.min(due);
                }
            }
            drop(devices);
            // A timer due now is the polls' to run: a nap of zero would spin.
            let nap = if nap.is_zero() { NAP } else { nap };
            // A command (an RDMA CM call, a destroy) ends the nap at once.
            notifier.nap(nap);
            events.clear();
            woken = after_wake(&host, &events, &mut timer, &notifier);
            continue;
        }
        let mut more = false;
        let mut received = false;
        for d in &devices {
            // While the application polls now and then, what the loop's turn queues waits
            // a little for its next post (turn_for_node_loop).
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
        drop(devices);
        if !timeout.is_zero() {
            if let Some(budget) = spin.filter(|_| !spin_is_off()) {
                if spin_for_input(&mut poll, &mut events, &notifier, budget.min(timeout)) {
                    woken = after_wake(&host, &events, &mut timer, &notifier);
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
        woken = after_wake(&host, &events, &mut timer, &notifier);
    }
}

/// What the loop does once its wait ended (events, a wake-up or its deadline). Returns
/// whether a command woke it.
fn after_wake(
    host: &Weak<Host>,
    events: &Events,
    timer: &mut Option<LazyTimer>,
    notifier: &Notifier,
) -> bool {
    if events.iter().any(|e| e.token() == LazyTimer::TOKEN) {
        if let Some(t) = timer.as_mut() {
            t.fired();
        }
    }
    let woken = notifier.take();
    if let Some(h) = host.upgrade() {
        for d in h.loop_devices() {
            d.disarm_node_loop_deadline();
        }
    }
    woken
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
