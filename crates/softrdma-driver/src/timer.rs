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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::{Registry, Token, Waker};

use crate::clock::{Clock, Micros};
use crate::udp::{Readiness, RecvDatagram, UdpEndpoint};

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
    /// Spin this long, then sleep in epoll (the usual compromise).
    SpinThenBlock(Duration),
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
    let spin_until = match mode {
        PollMode::Blocking => None,
        PollMode::BusyPoll => Some(u64::MAX),
        PollMode::SpinThenBlock(d) => Some(
            clock
                .now()
                .saturating_add(crate::clock::duration_to_micros(d)),
        ),
    };
    loop {
        // Blocking, right after a receive that drained the socket, with time left: a receive
        // now finds only what the wait reports at once anyway (see `UdpEndpoint::rx_drained`),
        // so go straight to the wait. With the deadline passed there is no wait: receive.
        let skip =
            spin_until.is_none() && ep.rx_drained() && deadline.is_none_or(|d| clock.now() < d);
        if !skip {
            let got = ep.recv_batch(bufs)?;
            if !got.is_empty() {
                return Ok(Input::Datagrams(got));
            }
        }
        if notifier.take() {
            return Ok(Input::Woken);
        }
        let now = clock.now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(Input::Deadline);
        }
        if spin_until.is_some_and(|s| now < s) {
            // Spinning: one non-blocking recvmmsg per round.
            std::hint::spin_loop();
            continue;
        }
        let timeout = deadline.map(|d| clock.until(d));
        match ep.wait_readable(timeout)? {
            Readiness::Woken => return Ok(Input::Woken),
            Readiness::Ready | Readiness::TimedOut => {} // re-check socket and deadline
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
