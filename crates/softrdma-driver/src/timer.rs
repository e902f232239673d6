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

use std::cell::Cell;
use std::io::{self, IoSliceMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// A loop thread that naps outside epoll (the node loop while applications' polls turn
    /// its devices): unparked by `notify`, so that a command never waits out the nap.
    napper: Arc<std::sync::OnceLock<std::thread::Thread>>,
}

impl Notifier {
    pub(crate) fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        Ok(Self {
            flag: Arc::new(AtomicBool::new(false)),
            waker: Arc::new(Waker::new(registry, token)?),
            napper: Arc::new(std::sync::OnceLock::new()),
        })
    }

    /// Naps the calling thread for at most `limit`, ending early when a notification is
    /// pending or comes meanwhile. The first caller becomes the thread `notify` unparks;
    /// call it from one loop thread only.
    pub(crate) fn nap(&self, limit: Duration) {
        let me = self.napper.get_or_init(std::thread::current);
        debug_assert_eq!(me.id(), std::thread::current().id());
        if !self.pending() {
            std::thread::park_timeout(limit);
        }
    }

    /// Asks the loop to return [`Input::Woken`] (or [`Readiness::Woken`]) soon. Notifications
    /// coalesce: several before the loop looks are one.
    pub fn notify(&self) -> io::Result<()> {
        // The flag first: a spinning loop sees it without the eventfd, and a sleeping loop that
        // wakes finds it set.
        self.flag.store(true, Ordering::Release);
        if let Some(t) = self.napper.get() {
            t.unpark();
        }
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
    /// core to other threads (see [`spin_is_off`]) stops at once, and the thread's waits
    /// then sleep at once for a while ([`SpinBackoff`]: the first back-off, 1 ms by default
    /// ([`set_spin_backoff_first`]), doubling while spins keep losing, up to
    /// [`SPIN_BACKOFF`]): without an idle core a spinning thread waits for the scheduler
    /// (a timeslice, 0.4 ms measured at load 9 on 2 vCPUs) where a sleeping one is woken
    /// within tens of microseconds.
    SpinThenBlock(Duration),
}

/// The longest [`PollMode::SpinThenBlock`] waits sleep at once after spins lost their core
/// (a machine that stays busy).
pub const SPIN_BACKOFF: Duration = Duration::from_millis(100);
/// The first back-off after a lost spin (the default): on a machine with idle cores one
/// preemption (a kernel worker, another process's burst) should not turn the next hundred
/// milliseconds of a latency benchmark's hops into wake-ups (`perf cm`'s one connection:
/// 31 µs spinning, 119 µs asleep, session 8), and on a busy one the back-off doubles to
/// [`SPIN_BACKOFF`] at the eighth lost spin in a row.
pub const SPIN_BACKOFF_FIRST: Duration = Duration::from_millis(1);

/// The process's first back-off in µs ([`set_spin_backoff_first`]).
static SPIN_BACKOFF_FIRST_US: AtomicU64 = AtomicU64::new(SPIN_BACKOFF_FIRST.as_micros() as u64);

/// Sets the first back-off after a lost spin, for every thread of the process (default
/// [`SPIN_BACKOFF_FIRST`]; [`SPIN_BACKOFF`] is session 8's fixed back-off, `perf cm
/// --spin-backoff-us 100000`, for comparisons).
pub fn set_spin_backoff_first(d: Duration) {
    SPIN_BACKOFF_FIRST_US.store(
        d.as_micros().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// The back-off of spinning as data, one per thread: a level that each spin losing its
/// core raises and each spin keeping its core lowers. Spinning stays off for the first
/// back-off ([`set_spin_backoff_first`]) doubled per level above one, at most
/// [`SPIN_BACKOFF`]: on a busy machine, whose spins lose again as soon as they are tried,
/// the back-off reaches the full period within a few lost spins, while a quiet one whose
/// spin lost once comes back to spinning after the first back-off. A lost spin long after
/// the last back-off ended (more than that back-off again) starts over at the first level:
/// it is a new busy spell, not the old one going on, and without this a thread that spins
/// seldom (a server idle between bursts) kept a long back-off from losses long past.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinBackoff {
    level: u32,
    /// Until when (monotonic ns) spinning is off.
    off_until: u64,
    /// How long the last back-off was (ns).
    off_ns: u64,
}

impl SpinBackoff {
    /// A spin lost its core at `now` (monotonic ns): spinning is off from now for the
    /// returned time, from the first back-off `first`.
    pub fn lost(&mut self, now: u64, first: Duration) -> Duration {
        if now > self.off_until.saturating_add(self.off_ns) {
            self.level = 0;
        }
        let at = |level: u32| {
            first
                .saturating_mul(1u32 << (level.clamp(1, 17) - 1))
                .min(SPIN_BACKOFF)
        };
        // No level above the first at the full period: a machine that turns quiet comes
        // back after as many kept spins as it took lost ones to get there.
        if self.level == 0 || (self.level < 17 && at(self.level) < SPIN_BACKOFF) {
            self.level += 1;
        }
        let off = at(self.level);
        self.off_ns = off.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.off_until = now.saturating_add(self.off_ns);
        off
    }

    /// A spin found input without losing its core.
    pub fn kept(&mut self) {
        self.level = self.level.saturating_sub(1);
    }

    /// Whether spinning is off at `now` (monotonic ns).
    pub fn is_off(&self, now: u64) -> bool {
        now < self.off_until
    }
}

/// The longest a [`PollMode::SpinThenBlock`] spin grows to, process-wide, in µs (0: no
/// growth; [`set_spin_grow_max`]).
static SPIN_GROW_MAX_US: AtomicU64 = AtomicU64::new(0);

/// Lets a thread's [`PollMode::SpinThenBlock`] spins grow, up to `max`, while its input
/// keeps arriving shortly after a spin ran out ([`SpinWindow`]); `Duration::ZERO` (the
/// default) keeps every spin at the mode's length. For every thread of the process.
pub fn set_spin_grow_max(max: Duration) {
    SPIN_GROW_MAX_US.store(
        max.as_micros().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// How long a thread's spins last, as data: at least the mode's spin (`base`), at most the
/// process's growth limit (`max`), doubled each time a wait spun out and its input then came
/// within `max` of the spin's start, halved each time it came later (or never). What Linux's
/// guest halt-polling does for an idle vCPU, for one thread's waits: a spin that ends a
/// little before the datagram arrives buys a sleep and a wake-up, and on a VM whose idle
/// vCPU halts that wake-up is the host's (`perf cm`'s single connections on a quiet 2-vCPU
/// machine: a server idle for longer than its 200 µs spin between two connections slept
/// through the next REQ, and the client's 200 µs spin for the REP then ran out too while
/// the server's vCPU was being woken, 758 µs a connection against TCP's 38).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinWindow {
    /// The current spin, µs (0: the mode's own length).
    us: u64,
}

impl SpinWindow {
    /// How long the next spin lasts (µs), for a mode spinning `base` µs and a growth limit
    /// of `max` µs (none when `max <= base`).
    pub fn length(&self, base: u64, max: u64) -> u64 {
        self.us.clamp(base, max.max(base))
    }

    /// A spin of [`SpinWindow::length`] ran out, and the wait then slept `slept` µs until
    /// its input came (`input`), or until its deadline without input.
    pub fn spun_out(&mut self, base: u64, max: u64, slept: u64, input: bool) {
        let cur = self.length(base, max);
        if max <= base {
            return;
        }
        let within = cur.saturating_add(slept) <= max;
        self.us = match (input, within) {
            // The longest spin allowed would have found it: spin longer next time.
            (true, true) => cur.saturating_mul(2).min(max),
            // An idle spell: spinning longer would only have burnt the core.
            (_, false) => (cur / 2).max(base),
            // A timer, early: nothing known yet.
            (false, true) => cur,
        };
    }
}

/// How much of a spin's wall time may go to other threads before it counts as preempted.
const PREEMPTED: Duration = Duration::from_micros(50);
/// Spin rounds between two looks at the thread's CPU time (a syscall, unlike the wall
/// clock; a round is a non-blocking recvmmsg, about a microsecond).
const WATCH_EVERY: u32 = 8;
/// Spin rounds between two looks at the machine's running count ([`cores_wanted`]: a
/// `pread` of `/proc/loadavg`, a few microseconds); a multiple of [`WATCH_EVERY`].
const CROWD_EVERY: u32 = 16;

thread_local! {
    /// This thread's [`SpinBackoff`]. Per thread, not per process: a spin that lost its
    /// core says this thread found none free, not that every thread of the process will
    /// (perf cm's server thread lost its spins while the TCP half of a run had both cores
    /// busy, and the process-wide back-off then made the client's next hundred
    /// milliseconds of waits sleep as well: every single connection's two hops were
    /// wake-ups on an otherwise quiet machine).
    static BACKOFF: Cell<SpinBackoff> = const {
        Cell::new(SpinBackoff {
            level: 0,
            off_until: 0,
            off_ns: 0,
        })
    };
    /// This thread's [`SpinWindow`].
    static WINDOW: Cell<SpinWindow> = const { Cell::new(SpinWindow { us: 0 }) };
}

/// Whether the machine has more runnable threads than CPUs right now (`/proc/loadavg`'s
/// running count, the kernel's instantaneous `nr_running`, which includes the asking
/// thread): some thread is waiting for a core, and a spinner holding one is in its way —
/// perhaps the very peer whose datagram it waits for. A spinner's own lost time
/// ([`SpinWatch`]) cannot see this: at load 12 on 2 vCPUs perf cm's spins kept their core
/// and ran out (200 µs) while the other side's thread waited for one to send. False when
/// the file cannot be read (no /proc).
fn cores_wanted() -> bool {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static LOADAVG: Option<(std::fs::File, usize)> = std::fs::File::open("/proc/loadavg")
            .ok()
            .map(|f| (f, std::thread::available_parallelism().map_or(1, |n| n.get())));
    }
    LOADAVG.with(|l| {
        let Some((f, cpus)) = l else { return false };
        let mut buf = [0u8; 128];
        let Ok(n) = f.read_at(&mut buf, 0) else {
            return false;
        };
        running(&buf[..n]).is_some_and(|r| r > *cpus)
    })
}

/// The running count of a `/proc/loadavg` line (`0.52 0.61 0.70 3/412 12345` → 3).
fn running(loadavg: &[u8]) -> Option<usize> {
    let field = loadavg.split(|&b| b == b' ').nth(3)?;
    let n = field.split(|&b| b == b'/').next()?;
    std::str::from_utf8(n).ok()?.parse().ok()
}

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

/// Whether this thread's [`PollMode::SpinThenBlock`] waits sleep at once now (one of its
/// spins lost its core less than its back-off ago; [`SpinBackoff`]).
pub fn spin_is_off() -> bool {
    BACKOFF.with(|b| b.get().is_off(monotonic_ns()))
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

    /// Whether the spin has lost more than [`PREEMPTED`] to other threads, or holds a core
    /// another runnable thread is waiting for ([`cores_wanted`]); if so, this thread's
    /// spinning backs off ([`SpinBackoff`]).
    pub(crate) fn preempted(&mut self) -> bool {
        self.rounds += 1;
        if self.rounds % WATCH_EVERY != 0 {
            return false;
        }
        if self.lost_core() {
            return true;
        }
        if self.rounds % CROWD_EVERY == 0 && cores_wanted() {
            self.back_off(monotonic_ns());
            return true;
        }
        false
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
        self.back_off(wall);
        true
    }

    /// This thread's spin lost (at `now`, monotonic ns): its back-off goes up.
    fn back_off(&self, now: u64) {
        let first = Duration::from_micros(SPIN_BACKOFF_FIRST_US.load(Ordering::Relaxed));
        BACKOFF.with(|b| {
            let mut v = b.get();
            v.lost(now, first);
            b.set(v);
        });
    }

    /// The spin ended with input: lowers the back-off unless it lost its core on the way.
    /// Returns whether it kept its core.
    pub(crate) fn ended_with_input(&self) -> bool {
        if self.lost_core() {
            return false;
        }
        BACKOFF.with(|b| {
            let mut v = b.get();
            v.kept();
            b.set(v);
        });
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
        PollMode::SpinThenBlock(d) => {
            let base = crate::clock::duration_to_micros(d);
            let len = WINDOW.with(|w| w.get().length(base, grow_max_us()));
            Some(clock.now().saturating_add(len))
        }
    };
    let watch =
        (until.is_some() && matches!(mode, PollMode::SpinThenBlock(_))).then(SpinWatch::start);
    (until, watch)
}

fn grow_max_us() -> u64 {
    SPIN_GROW_MAX_US.load(Ordering::Relaxed)
}

/// What the spin of one wait did, for its thread's [`SpinWindow`]: when it ran out
/// (monotonic µs of the wait's clock) and for a mode of how many µs.
#[derive(Clone, Copy)]
struct SpunOut {
    at: Micros,
    base: u64,
}

impl SpunOut {
    /// The spin of a `mode` wait ran out at `at`.
    fn new(mode: PollMode, at: Micros) -> Option<SpunOut> {
        match mode {
            PollMode::SpinThenBlock(d) => Some(SpunOut {
                at,
                base: crate::clock::duration_to_micros(d),
            }),
            PollMode::Blocking | PollMode::BusyPoll => None,
        }
    }

    /// The wait ends at `now`, with input or at its deadline.
    fn ended(self, now: Micros, input: bool) {
        WINDOW.with(|w| {
            let mut v = w.get();
            v.spun_out(self.base, grow_max_us(), now.saturating_sub(self.at), input);
            w.set(v);
        });
    }
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
    let mut spun_out: Option<SpunOut> = None;
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
                if let Some(s) = spun_out {
                    s.ended(clock.now(), true);
                }
                return Ok(Input::Datagrams(got));
            }
        }
        tally.waited = true;
        if notifier.take() {
            return Ok(Input::Woken);
        }
        let now = clock.now();
        if deadline.is_some_and(|d| now >= d) {
            if let Some(s) = spun_out {
                s.ended(now, false);
            }
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
        // The spin is over: what the sleep finds was not found spinning, and the sleep's
        // wall time is not a lost core (with the watch kept, every wait that spun out,
        // slept and was woken by input backed spinning off: perf cm's server, idle for
        // longer than a spin between two single connections, slept through all of them).
        // A spin still planned here ran out (a lost one was unplanned): how long the sleep
        // then lasts tells the thread's spin window whether a longer spin would have found
        // the input.
        if spin_until.is_some() {
            spun_out = SpunOut::new(mode, now);
        }
        spin_until = None;
        watch = None;
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
    let mut spun_out: Option<SpunOut> = None;
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
                if let Some(s) = spun_out {
                    s.ended(clock.now(), true);
                }
                return Ok(Input::Datagrams(got));
            }
        }
        tally.waited = true;
        if notifier.take() {
            return Ok(Input::Woken);
        }
        let now = clock.now();
        if deadline.is_some_and(|d| now >= d) {
            if let Some(s) = spun_out {
                s.ended(now, false);
            }
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
        // As in wait_for_input.
        if spin_until.is_some() {
            spun_out = SpunOut::new(mode, now);
        }
        spin_until = None;
        watch = None;
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
    /// waits for its core) counts as preempted and turns this thread's spinning off, not
    /// another thread's; a spin that kept its core does not.
    #[test]
    fn a_spin_that_loses_its_core_turns_spinning_off_for_its_thread() {
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
        let b = BACKOFF.with(Cell::get);
        assert!(b.level >= 1 && b.off_until > 0, "{b:?}");
        // Another thread has its own back-off, untouched.
        let other = std::thread::spawn(|| (spin_is_off(), BACKOFF.with(Cell::get)))
            .join()
            .unwrap();
        assert_eq!(other, (false, SpinBackoff::default()));
    }

    /// One lost spin turns spinning off for a millisecond, not a hundred; spins that lose
    /// again as soon as the back-off ends double it up to the full period; each spin that
    /// kept its core lowers it a step; a loss long after the last back-off ended starts
    /// over at a millisecond.
    #[test]
    fn the_back_off_grows_with_lost_spins_and_falls_with_kept_ones() {
        let first = SPIN_BACKOFF_FIRST;
        let ms = 1_000_000u64;
        let mut b = SpinBackoff::default();
        // A busy machine: each spin tried when the back-off ends loses.
        let mut now = 1_000 * ms;
        let mut offs = Vec::new();
        for _ in 0..10 {
            let off = b.lost(now, first);
            offs.push(off.as_millis());
            assert!(b.is_off(now) && b.is_off(now + off.as_nanos() as u64 - 1));
            assert!(!b.is_off(now + off.as_nanos() as u64));
            now += off.as_nanos() as u64 + 10_000;
        }
        assert_eq!(offs, [1, 2, 4, 8, 16, 32, 64, 100, 100, 100]);
        // One lucky spin does not bring spinning back.
        b.kept();
        assert_eq!(b.lost(now, first), SPIN_BACKOFF);
        now += 100 * ms + 10_000;
        for _ in 0..3 {
            b.kept();
        }
        assert_eq!(b.lost(now, first), Duration::from_millis(32));
        // Quiet for longer than the last back-off: the next loss is a new spell.
        now += 32 * ms + 32 * ms + 1;
        assert_eq!(b.lost(now, first), Duration::from_millis(1));
        // Session 8's policy: the full period at once.
        assert_eq!(SpinBackoff::default().lost(now, SPIN_BACKOFF), SPIN_BACKOFF);
    }

    /// Two endpoints on `ip` whose second sends the first one late datagram per
    /// [`LatePair::wait`].
    struct LatePair {
        a: UdpEndpoint,
        b: Arc<UdpEndpoint>,
        clock: Clock,
        buf: Vec<u8>,
    }

    impl LatePair {
        fn new(ip: [u8; 4]) -> LatePair {
            use crate::udp::EndpointConfig;
            let at = std::net::SocketAddr::from((ip, 0));
            LatePair {
                a: UdpEndpoint::bind_with(at, &EndpointConfig::default()).unwrap(),
                b: Arc::new(UdpEndpoint::bind_with(at, &EndpointConfig::default()).unwrap()),
                clock: Clock::new(),
                buf: vec![0u8; 2048],
            }
        }

        /// One `SpinThenBlock(spin_us)` wait of the first endpoint, for a datagram the
        /// second sends `send_after` into it: what the wait's spin did, and how long the
        /// wait took (µs).
        fn wait(&mut self, spin_us: u64, send_after: Duration) -> (crate::udp::SpinStats, u64) {
            use crate::udp::{SpinStats, Transmit};
            let (b, dst) = (self.b.clone(), self.a.local_addr());
            let sender = std::thread::spawn(move || {
                std::thread::sleep(send_after);
                b.send(&Transmit::single(dst, b"late")).unwrap();
            });
            let clock = &self.clock;
            let mut bufs = [IoSliceMut::new(&mut self.buf)];
            let deadline = clock.now() + 2_000_000;
            let mode = PollMode::SpinThenBlock(Duration::from_micros(spin_us));
            let before = self.a.io_stats().spins;
            let t0 = clock.now();
            let got = wait_for_input(&self.a, &mut bufs, clock, Some(deadline), mode).unwrap();
            let took = clock.now() - t0;
            sender.join().unwrap();
            assert!(matches!(got, Input::Datagrams(_)));
            let after = self.a.io_stats().spins;
            let s = SpinStats {
                found: after.found - before.found,
                lost: after.lost - before.lost,
                expired: after.expired - before.expired,
                backed_off: after.backed_off - before.backed_off,
            };
            (s, took)
        }
    }

    /// A wait whose spin ran out with nothing to read sleeps, and the datagram that wakes
    /// it is not a lost core: the thread keeps spinning on its next wait (the watch used
    /// to survive the sleep and count its wall time as preemption, so every wait that
    /// spun out turned spinning off). The endpoint counts one spun-out wait, then one that
    /// spun and found its datagram.
    #[test]
    fn a_spin_that_ran_out_and_slept_does_not_back_off() {
        let mut pair = LatePair::new([127, 0, 0, 1]);
        let mut wait =
            |spin_us, send_after_ms| pair.wait(spin_us, Duration::from_millis(send_after_ms)).0;
        // A loaded machine may really take the spin's core, or want it (cores_wanted):
        // that is a lost spin, not this test's case. One clean try of 20 is the test; on a
        // machine that never leaves a core free there is none.
        for _ in 0..20 {
            BACKOFF.with(|b| b.set(SpinBackoff::default()));
            // The datagram comes 20 ms into a 100 µs spin: the wait spins out, then sleeps.
            let s = wait(100, 20);
            if s.lost > 0 {
                continue;
            }
            assert_eq!(s.expired, 1, "{s:?}");
            assert!(!spin_is_off(), "{:?}", BACKOFF.with(Cell::get));
            // The next wait spins (and finds the datagram that arrives while it does).
            let s = wait(2_000_000, 2);
            assert_eq!(s.backed_off, 0, "{s:?}");
            if s.lost > 0 {
                continue;
            }
            assert_eq!(s.found, 1, "{s:?}");
            return;
        }
        eprintln!("no spin kept its core in 20 tries: the machine is busy");
    }

    /// A thread's spins grow (doubling, up to the limit) while its input arrives soon after
    /// a spin ran out, shrink back towards the mode's length when it comes later than the
    /// longest spin would have lasted or never comes, and do not grow at all without a
    /// limit above the mode's spin.
    #[test]
    fn the_spin_window_grows_while_input_comes_just_after_it() {
        let (base, max) = (200, 2_000);
        let mut w = SpinWindow::default();
        assert_eq!(w.length(base, max), 200);
        // The peer answers 1.5 ms after each wait starts (a halted vCPU's wake-up): the
        // spins that run out before it grow until one lasts long enough.
        let answer = 1_500;
        let mut lens = Vec::new();
        while w.length(base, max) < answer {
            let len = w.length(base, max);
            w.spun_out(base, max, answer - len, true);
            lens.push(w.length(base, max));
        }
        assert_eq!(lens, [400, 800, 1600]);
        // Never beyond the limit.
        w.spun_out(base, max, 10, true);
        assert_eq!(w.length(base, max), 2000);
        // A timer that ends a sleep early says nothing; an idle spell halves the spin, and
        // so does input later than the longest spin would have waited.
        w.spun_out(base, max, 0, false);
        assert_eq!(w.length(base, max), 2000);
        w.spun_out(base, max, 50_000, false);
        assert_eq!(w.length(base, max), 1000);
        w.spun_out(base, max, 1_500, true);
        assert_eq!(w.length(base, max), 500);
        for _ in 0..4 {
            w.spun_out(base, max, 1_000_000, true);
        }
        assert_eq!(w.length(base, max), 200);
        // No limit above the mode's spin (the driver's default): the mode's spin, always.
        let mut w = SpinWindow::default();
        w.spun_out(base, 0, 10, true);
        assert_eq!(w.length(base, 0), 200);
        // The window follows a mode with a longer spin than it grew to.
        let mut w = SpinWindow::default();
        w.spun_out(base, max, 10, true);
        assert_eq!(w.length(base, max), 400);
        assert_eq!(w.length(1_000, max), 1_000);
    }

    /// A wait that spun out and was woken by a datagram soon after makes the thread's next
    /// spin longer, and that longer spin finds the next datagram sent as late (with the
    /// process's growth limit up); without the limit the spin keeps its length and runs out
    /// again.
    #[test]
    fn a_spin_that_ran_out_just_before_its_input_grows() {
        let mut pair = LatePair::new([127, 35, 0, 9]);
        // Each wait: a 100 µs spin, the datagram 1 ms after the wait starts.
        let mut wait = || {
            let (s, took) = pair.wait(100, Duration::from_millis(1));
            // A wait the scheduler stretched past the growth limit is a lost one here.
            (s.found, s.lost + u64::from(took > 10_000))
        };
        let window = || WINDOW.with(Cell::get).length(100, grow_max_us());
        set_spin_grow_max(Duration::from_millis(20));
        // A loaded machine may take the spin's core: one clean try of 20.
        let mut grew = false;
        for _ in 0..20 {
            BACKOFF.with(|b| b.set(SpinBackoff::default()));
            WINDOW.with(|w| w.set(SpinWindow::default()));
            let first = wait();
            if first.1 > 0 {
                continue;
            }
            assert_eq!(first.0, 0, "a 100 µs spin found a datagram sent after 1 ms");
            assert!(window() >= 200, "the spin did not grow: {}", window());
            // Grown to 1.6 ms or more after at most four such waits, the spin finds it.
            let mut found = false;
            for _ in 0..4 {
                let (f, l) = wait();
                if l > 0 {
                    break;
                }
                if f == 1 {
                    found = true;
                    break;
                }
            }
            if found {
                grew = true;
                break;
            }
        }
        set_spin_grow_max(Duration::ZERO);
        if !grew {
            eprintln!("no spin kept its core in 20 tries: the machine is busy");
            return;
        }
        // Without a limit the window is the mode's spin again.
        assert_eq!(window(), 100);
    }

    #[test]
    fn the_running_count_is_read_from_loadavg() {
        assert_eq!(running(b"0.52 0.61 0.70 3/412 12345\n"), Some(3));
        assert_eq!(running(b"10.93 13.52 14.55 11/186 7409\n"), Some(11));
        assert_eq!(running(b"garbage"), None);
        assert_eq!(running(b""), None);
        // On Linux the file is there and counts at least this thread.
        if let Ok(l) = std::fs::read("/proc/loadavg") {
            assert!(running(&l).is_some_and(|r| r >= 1));
        }
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
