//! Waiting, for an event loop: until the earlier of the core's next timeout and the socket
//! having input (or another thread asking for attention), either sleeping in epoll or
//! busy-polling the socket.
//!
//! Thread wake-ups are slow on the machines we measure on (a TCP ping-pong round trip is about
//! 120 µs, most of it wake-ups), so a low-latency loop spins on non-blocking `recvmmsg` the way
//! perftest and `ibv_rc_pingpong` without `-e` spin on their completion queue; [`PollMode`]
//! picks blocking, spinning, or spinning for a while and then blocking.
//!
//! The loop shape this serves:
//! ```text
//! loop {
//!     let deadline = core.poll_timeout();                     // Option<Micros>
//!     match wait_for_input(&ep, &mut bufs, &clock, deadline, mode)? {
//!         Input::Datagrams(recs) => for each record, for each segment: core.handle_datagram(clock.now(), ..)
//!         Input::Deadline        => core.handle_timeout(clock.now()),
//!         Input::Woken           => take user commands,
//!     }
//!     drain core.poll_transmit() into ep.send_batch(..)
//! }
//! ```

use std::io::{self, IoSliceMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::{Registry, Token, Waker};

use crate::clock::{Clock, Micros};
use crate::udp::{Readiness, RecvDatagram, SpinOutcome, UdpEndpoint};

/// Wakes an event loop waiting on an endpoint, from any thread; also noticed by busy-polling
/// loops, which never enter epoll.
#[derive(Clone, Debug)]
pub struct Notifier {
    flag: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl Notifier {
    pub(crate) fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        Ok(Self {
            flag: Arc::new(AtomicBool::new(false)),
            waker: Arc::new(Waker::new(registry, token)?),
        })
    }

    /// Asks the loop to return [`Input::Woken`] (or [`Readiness::Woken`]) soon. Notifications
    /// coalesce: several before the loop looks are one.
    pub fn notify(&self) -> io::Result<()> {
        // The flag first: a spinning loop sees it without the eventfd, and a sleeping loop that
        // wakes finds it set.
        self.flag.store(true, Ordering::Release);
        self.waker.wake()
    }

    /// Takes a pending notification (true once per batch of `notify` calls).
    pub fn take(&self) -> bool {
        self.flag.swap(false, Ordering::AcqRel)
    }

    /// Whether a notification is pending, without taking it.
    pub fn pending(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

/// How an event loop waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Sleep in epoll until input, a notification or the deadline (cheapest in CPU).
    Blocking,
    /// Spin on non-blocking receive until input, a notification or the deadline (lowest
    /// latency; burns a core).
    BusyPoll,
    /// Spin this long, then sleep in epoll (the usual compromise). A spin that loses its
    /// core to other threads (see [`spin_is_off`]) stops at once, and every such wait in
    /// the process sleeps at once for a while ([`SpinBackoff`]: by default the full
    /// [`SPIN_BACKOFF`]; see [`set_spin_backoff_first`]): without an idle core a
    /// spinning thread waits for the scheduler (a timeslice, 0.4 ms measured at load 9 on
    /// 2 vCPUs) where a sleeping one is woken within tens of microseconds.
    SpinThenBlock(Duration),
}

/// The longest [`PollMode::SpinThenBlock`] waits sleep at once after spins lost their core
/// (a machine that stays busy).
pub const SPIN_BACKOFF: Duration = Duration::from_millis(100);
/// A short first back-off, for a machine with idle cores: there one preemption (a kernel
/// worker, the other spinner of a ping-pong) should not turn a hundred milliseconds of a
/// latency benchmark's hops into wake-ups (`perf cm`'s one connection: 31 µs spinning,
/// 119 µs asleep, session 8). Not the default: at load 9 on the 2-vCPU VM it changed
/// nothing for one connection (49 µs either way) and its retries took CPU from the builds
/// and the other side (rate medians 0.80–1.05× TCP against 1.05–1.15×; measurements.md).
pub const SPIN_BACKOFF_FIRST: Duration = Duration::from_millis(1);

/// The process's first back-off in µs ([`set_spin_backoff_first`]).
static SPIN_BACKOFF_FIRST_US: AtomicU64 = AtomicU64::new(SPIN_BACKOFF.as_micros() as u64);

/// Sets the first back-off after a lost spin for the whole process (default
/// [`SPIN_BACKOFF`], session 8's fixed back-off; [`SPIN_BACKOFF_FIRST`] for a quiet
/// machine: `perf cm --spin-backoff-us 1000`).
pub fn set_spin_backoff_first(d: Duration) {
    SPIN_BACKOFF_FIRST_US.store(
        d.as_micros().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// The back-off of spinning as data: a level that each spin losing its core raises and
/// each spin keeping its core lowers. Spinning stays off for the first back-off
/// ([`set_spin_backoff_first`]) doubled per level above one, at most [`SPIN_BACKOFF`]:
/// with a short first back-off a busy machine, whose spins keep losing, backs off to the
/// full period within a few lost spins (and a lucky spin in between lowers it by one level
/// only), while a quiet one whose spin lost once comes back to spinning after a
/// millisecond.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinBackoff {
    level: u32,
}

impl SpinBackoff {
    /// One more spin lost its core: how long spinning stays off now, from the first
    /// back-off `first`.
    pub fn lost(&mut self, first: Duration) -> Duration {
        self.level = self.level.saturating_add(1).min(17);
        first
            .saturating_mul(1u32 << (self.level - 1))
            .min(SPIN_BACKOFF)
    }

    /// A spin found input without losing its core.
    pub fn kept(&mut self) {
        self.level = self.level.saturating_sub(1);
    }

    fn from_bits(level: u32) -> SpinBackoff {
        SpinBackoff { level }
    }
}
/// How much of a spin's wall time may go to other threads before it counts as preempted.
const PREEMPTED: Duration = Duration::from_micros(50);
/// Spin rounds between two looks at the thread's CPU time (a syscall, unlike the wall
/// clock; a round is a non-blocking recvmmsg, about a microsecond).
const WATCH_EVERY: u32 = 8;

/// Until when (monotonic ns) spinning is off, process-wide: a preemption says the machine
/// has no idle core, whichever thread saw it.
static SPIN_OFF_UNTIL: AtomicU64 = AtomicU64::new(0);
/// The process's [`SpinBackoff`] (its count; racing updates lose a count at worst).
static SPIN_LOST: AtomicU32 = AtomicU32::new(0);

fn ns(t: rustix::time::Timespec) -> u64 {
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

fn monotonic_ns() -> u64 {
    ns(rustix::time::clock_gettime(
        rustix::time::ClockId::Monotonic,
    ))
}

fn thread_cpu_ns() -> u64 {
    ns(rustix::time::clock_gettime(
        rustix::time::ClockId::ThreadCPUTime,
    ))
}

/// Whether [`PollMode::SpinThenBlock`] waits sleep at once now (a spin lost its core less
/// than [`SPIN_BACKOFF`] ago).
pub fn spin_is_off() -> bool {
    monotonic_ns() < SPIN_OFF_UNTIL.load(Ordering::Relaxed)
}

/// Watches one spin for preemption: wall time that did not go to this thread.
pub(crate) struct SpinWatch {
    wall0: u64,
    cpu0: u64,
    rounds: u32,
}

impl SpinWatch {
    pub(crate) fn start() -> SpinWatch {
        SpinWatch {
            wall0: monotonic_ns(),
            cpu0: thread_cpu_ns(),
            rounds: 0,
        }
    }

    /// Whether the spin has lost more than [`PREEMPTED`] to other threads; if so, spinning
    /// is off for [`SPIN_BACKOFF`].
    pub(crate) fn preempted(&mut self) -> bool {
        self.rounds += 1;
        if self.rounds % WATCH_EVERY != 0 {
            return false;
        }
        self.lost_core()
    }

    /// [`SpinWatch::preempted`] without the rounds: also asked when the spin ends with
    /// input, since a spinner that lost its core finds the datagram the moment it gets the
    /// core back (and the next waits should sleep instead).
    fn lost_core(&self) -> bool {
        let wall = monotonic_ns();
        let lost = wall
            .saturating_sub(self.wall0)
            .saturating_sub(thread_cpu_ns().saturating_sub(self.cpu0));
        if lost < PREEMPTED.as_nanos() as u64 {
            return false;
        }
        let mut b = SpinBackoff::from_bits(SPIN_LOST.load(Ordering::Relaxed));
        let off = b.lost(Duration::from_micros(
            SPIN_BACKOFF_FIRST_US.load(Ordering::Relaxed),
        ));
        SPIN_LOST.store(b.level, Ordering::Relaxed);
        SPIN_OFF_UNTIL.store(
            wall.saturating_add(off.as_nanos() as u64),
            Ordering::Relaxed,
        );
        true
    }

    /// The spin ended with input: lowers the back-off unless it lost its core on the way.
    /// Returns whether it kept its core.
    pub(crate) fn ended_with_input(&self) -> bool {
        if self.lost_core() {
            return false;
        }
        let mut b = SpinBackoff::from_bits(SPIN_LOST.load(Ordering::Relaxed));
        b.kept();
        SPIN_LOST.store(b.level, Ordering::Relaxed);
        true
    }
}

/// One wait's spin as the endpoint's [`crate::udp::SpinStats`] count it: once per wait,
/// and only for a wait that found its socket empty at least once (a wait that returns on
/// its first receive neither spun nor slept).
struct SpinTally {
    /// A spinning mode whose spin was backed off at the wait's start.
    backed_off: bool,
    /// A receive found nothing (the wait spun or slept since).
    waited: bool,
    counted: bool,
}

impl SpinTally {
    fn new(mode: PollMode, spin_until: Option<Micros>) -> SpinTally {
        SpinTally {
            backed_off: matches!(mode, PollMode::SpinThenBlock(_)) && spin_until.is_none(),
            waited: false,
            counted: false,
        }
    }

    fn count(&mut self, ep: &UdpEndpoint, outcome: SpinOutcome) {
        if self.waited && !self.counted {
            self.counted = true;
            ep.count_spin(outcome);
        }
    }

    /// Input came while spinning (`watch`: the spin's watch, if it is still spinning).
    fn input(&mut self, ep: &UdpEndpoint, watch: Option<&SpinWatch>) {
        if let Some(w) = watch {
            let kept = w.ended_with_input();
            self.count(
                ep,
                if kept {
                    SpinOutcome::Found
                } else {
                    SpinOutcome::Lost
                },
            );
        }
    }

    /// The wait goes to sleep in epoll (`spun`: it had a spin, which ended or lost its core).
    fn sleeps(&mut self, ep: &UdpEndpoint, spun: bool) {
        let outcome = if self.backed_off {
            SpinOutcome::BackedOff
        } else {
            SpinOutcome::Expired
        };
        if spun || self.backed_off {
            self.count(ep, outcome);
        }
    }
}

/// Why [`wait_for_input`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Buffers were filled (one record per buffer, see [`RecvDatagram::segments`]).
    Datagrams(Vec<RecvDatagram>),
    /// The deadline passed with nothing to read: time to call the core's `handle_timeout`.
    Deadline,
    /// A [`Notifier`] fired (user commands are waiting). Taken: the next wait sleeps again.
    Woken,
}

/// How a wait spins before it sleeps, as `mode` says: until when (`None`: it sleeps at
/// once; [`spin_is_off`] turns [`PollMode::SpinThenBlock`] into that), and the watch that
/// notices a spin losing its core (only a bounded spin has one: a busy poll never stops).
fn spin_plan(mode: PollMode, clock: &Clock) -> (Option<Micros>, Option<SpinWatch>) {
    let until = match mode {
        PollMode::Blocking => None,
        PollMode::BusyPoll => Some(u64::MAX),
        PollMode::SpinThenBlock(_) if spin_is_off() => None,
        PollMode::SpinThenBlock(d) => Some(
            clock
                .now()
                .saturating_add(crate::clock::duration_to_micros(d)),
        ),
    };
    let watch =
        (until.is_some() && matches!(mode, PollMode::SpinThenBlock(_))).then(SpinWatch::start);
    (until, watch)
}

/// Waits until the earlier of socket input and `deadline` (`None`: no timer pending), or a
/// notification, as `mode` says. Input that is already queued is returned at once, even if the
/// deadline has passed, so a loop whose timers keep firing still drains the socket.
pub fn wait_for_input(
    ep: &UdpEndpoint,
    bufs: &mut [IoSliceMut<'_>],
    clock: &Clock,
    deadline: Option<Micros>,
    mode: PollMode,
) -> io::Result<Input> {
    let notifier = ep.notifier();
    let (mut spin_until, mut watch) = spin_plan(mode, clock);
    let mut tally = SpinTally::new(mode, spin_until);
    loop {
        // Blocking, right after a receive that drained the socket, with time left: a receive
        // now finds only what the wait reports at once anyway (see `UdpEndpoint::rx_drained`),
        // so go straight to the wait. With the deadline passed there is no wait: receive.
        let skip =
            spin_until.is_none() && ep.rx_drained() && deadline.is_none_or(|d| clock.now() < d);
        if !skip {
            let got = ep.recv_batch(bufs)?;
            if !got.is_empty() {
                tally.input(ep, watch.as_ref().filter(|_| spin_until.is_some()));
                return Ok(Input::Datagrams(got));
            }
        }
        tally.waited = true;
        if notifier.take() {
            return Ok(Input::Woken);
        }
        let now = clock.now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(Input::Deadline);
        }
        if spin_until.is_some_and(|s| now < s) {
            if watch.as_mut().is_some_and(SpinWatch::preempted) {
                tally.count(ep, SpinOutcome::Lost);
                spin_until = None;
                continue;
            }
            // Spinning: one non-blocking recvmmsg per round.
            std::hint::spin_loop();
            continue;
        }
        tally.sleeps(ep, watch.is_some());
        let timeout = deadline.map(|d| clock.until(d));
        match ep.wait_readable(timeout)? {
            Readiness::Woken => return Ok(Input::Woken),
            Readiness::Ready | Readiness::TimedOut => {} // re-check socket and deadline
        }
    }
}

/// [`wait_for_input`] over several endpoints (a device serving several addresses, one socket
/// each): `eps[0]` is the one whose wait sleeps and whose [`Notifier`] wakes it; the others
/// must be watched by it ([`UdpEndpoint::watch_also`]). A receive fills the buffers from each
/// endpoint in turn, so record `i` is in `bufs[i]` as with one endpoint, and each record's
/// `dst_ip` says which address it came to. With one endpoint this is [`wait_for_input`].
pub fn wait_for_input_any(
    eps: &[&UdpEndpoint],
    bufs: &mut [IoSliceMut<'_>],
    clock: &Clock,
    deadline: Option<Micros>,
    mode: PollMode,
) -> io::Result<Input> {
    let [first, rest @ ..] = eps else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no endpoint"));
    };
    if rest.is_empty() {
        return wait_for_input(first, bufs, clock, deadline, mode);
    }
    let notifier = first.notifier();
    let (mut spin_until, mut watch) = spin_plan(mode, clock);
    let mut tally = SpinTally::new(mode, spin_until);
    let mut got = Vec::new();
    loop {
        // As in wait_for_input: skip the receive only when every socket was drained by the
        // last one and no wait returned since.
        let skip = spin_until.is_none()
            && eps.iter().all(|e| e.rx_drained())
            && deadline.is_none_or(|d| clock.now() < d);
        if !skip {
            let mut n = 0;
            for ep in eps {
                if n >= bufs.len() {
                    // No buffer left for this socket: its queue is not known to be empty.
                    ep.mark_undrained();
                    continue;
                }
                n += ep.recv_batch_into(&mut bufs[n..], &mut got)?;
            }
            if n > 0 {
                tally.input(first, watch.as_ref().filter(|_| spin_until.is_some()));
                return Ok(Input::Datagrams(got));
            }
        }
        tally.waited = true;
        if notifier.take() {
            return Ok(Input::Woken);
        }
        let now = clock.now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(Input::Deadline);
        }
        if spin_until.is_some_and(|s| now < s) {
            if watch.as_mut().is_some_and(SpinWatch::preempted) {
                tally.count(first, SpinOutcome::Lost);
                spin_until = None;
                continue;
            }
            std::hint::spin_loop();
            continue;
        }
        tally.sleeps(first, watch.is_some());
        let timeout = deadline.map(|d| clock.until(d));
        let r = first.wait_readable(timeout)?;
        // The wait may have ended for any of the sockets (edge-triggered): look at all.
        for ep in rest {
            ep.mark_undrained();
        }
        match r {
            Readiness::Woken => return Ok(Input::Woken),
            Readiness::Ready | Readiness::TimedOut => {}
        }
    }
}

/// Sleeps until `deadline` without watching a socket (for loops with nothing to read), spinning
/// for the last `spin` of it for precision.
pub fn sleep_until(clock: &Clock, deadline: Micros, spin: Duration) {
    let left = clock.until(deadline);
    if left > spin {
        std::thread::sleep(left - spin);
    }
    while !clock.reached(deadline) {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A spin whose wall time went elsewhere (here: the thread slept, as a preempted one
    /// waits for its core) counts as preempted and turns spinning off process-wide; a spin
    /// that kept its core does not.
    #[test]
    fn a_spin_that_loses_its_core_turns_spinning_off() {
        // On a loaded machine a few rounds may really be preempted: one clean try of 20.
        let kept = (0..20).any(|_| {
            let mut w = SpinWatch::start();
            (0..WATCH_EVERY).all(|_| !w.preempted())
        });
        assert!(kept, "a spin that kept its core counted as preempted");
        let mut w = SpinWatch::start();
        std::thread::sleep(Duration::from_millis(2));
        let lost = (0..WATCH_EVERY).any(|_| w.preempted());
        assert!(lost, "2 ms off the core is a preemption");
        assert!(spin_is_off());
    }

    /// One lost spin turns spinning off for a millisecond, not a hundred; lost spins in a
    /// row double it up to the full period; each spin that kept its core lowers it a step.
    #[test]
    fn the_back_off_grows_with_lost_spins_and_falls_with_kept_ones() {
        let first = SPIN_BACKOFF_FIRST;
        let mut b = SpinBackoff::default();
        let offs: Vec<u128> = (0..10).map(|_| b.lost(first).as_millis()).collect();
        assert_eq!(offs, [1, 2, 4, 8, 16, 32, 64, 100, 100, 100]);
        for _ in 0..1000 {
            b.lost(first);
        }
        assert_eq!(b.lost(first), SPIN_BACKOFF);
        // A busy machine: one lucky spin does not bring spinning back.
        b.kept();
        assert_eq!(b.lost(first), SPIN_BACKOFF);
        for _ in 0..100 {
            b.kept();
        }
        assert_eq!(b.lost(first), Duration::from_millis(1));
        // Session 8's policy: the full period at once.
        assert_eq!(SpinBackoff::default().lost(SPIN_BACKOFF), SPIN_BACKOFF);
    }

    #[test]
    fn sleep_until_is_never_early() {
        let clock = Clock::new();
        for spin in [Duration::ZERO, Duration::from_micros(50)] {
            let d = clock.now() + 300;
            sleep_until(&clock, d, spin);
            assert!(clock.reached(d));
        }
    }
}
