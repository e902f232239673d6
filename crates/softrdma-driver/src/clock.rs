//! The driver's real clock.
//!
//! The sans-IO core never reads a clock: every entry point takes `now` as a parameter, and the
//! core's time type (`softrdma_core::time::Instant`, being written) is **microseconds since an
//! arbitrary epoch**, a plain `u64`. Until that type lands this module speaks [`Micros`], the
//! same `u64`, so the driver and the core agree on the representation today and the newtype can be
//! slotted in later without changing any arithmetic.
//!
//! A [`Clock`] fixes its epoch at creation (one per device event loop, or one shared by every
//! device of a process so their times compare). Microseconds suit the transport: the shortest
//! IBTA timer is the local ACK timeout's 4.096 µs × 2^timeout, and a u64 of microseconds lasts
//! 584,000 years.
//!
//! Rounding is chosen so that timers never fire early: [`Clock::now`] rounds the elapsed time
//! *down* to a whole microsecond, and [`Clock::to_std`] maps a deadline to the exact
//! `std::time::Instant` at which `now()` first reaches it, so sleeping until that instant always
//! ends with `now() >= deadline`.

use std::time::{Duration, Instant as StdInstant};

/// Microseconds since a [`Clock`]'s epoch; the representation of `softrdma_core::time::Instant`.
pub type Micros = u64;

/// Converts a duration to whole microseconds, saturating at `u64::MAX`.
pub fn duration_to_micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The monotonic clock of a driver: `std::time::Instant` mapped to a microsecond counter.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: StdInstant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose epoch (time 0) is now.
    pub fn new() -> Self {
        Self {
            epoch: StdInstant::now(),
        }
    }

    /// A clock with the given epoch (for sharing one time base between several clocks).
    /// The process's clock: one epoch for every device, so that a CM spanning devices
    /// (`crate::cm::Cm`) compares their times on one scale.
    pub fn process() -> Self {
        static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
        Self {
            epoch: *EPOCH.get_or_init(StdInstant::now),
        }
    }

    pub fn with_epoch(epoch: StdInstant) -> Self {
        Self { epoch }
    }

    /// The `std` instant that is time 0 of this clock.
    pub fn epoch(&self) -> StdInstant {
        self.epoch
    }

    /// Microseconds elapsed since the epoch, rounded down.
    pub fn now(&self) -> Micros {
        self.from_std(StdInstant::now())
    }

    /// Maps a `std` instant to this clock's microseconds, rounded down; instants before the
    /// epoch map to 0.
    pub fn from_std(&self, t: StdInstant) -> Micros {
        duration_to_micros(t.saturating_duration_since(self.epoch))
    }

    /// The `std` instant at which [`Clock::now`] first returns `t`. Saturates far in the future
    /// if `t` is beyond what `std::time::Instant` can represent.
    pub fn to_std(&self, t: Micros) -> StdInstant {
        let far = Duration::from_secs(100 * 365 * 24 * 3600);
        self.epoch
            .checked_add(Duration::from_micros(t))
            .or_else(|| self.epoch.checked_add(far))
            .unwrap_or(self.epoch)
    }

    /// How long until `deadline` (zero if it has passed). Sleeping this long, measured from now,
    /// ends with `now() >= deadline`.
    pub fn until(&self, deadline: Micros) -> Duration {
        self.to_std(deadline)
            .saturating_duration_since(StdInstant::now())
    }

    /// True if `deadline` has been reached.
    pub fn reached(&self, deadline: Micros) -> bool {
        self.now() >= deadline
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_rounding() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        // to_std is the exact inverse for whole microseconds.
        for us in [0u64, 1, 999, 1_000_000, 123_456_789] {
            assert_eq!(c.from_std(c.to_std(us)), us);
        }
        // Before the epoch maps to 0.
        if let Some(before) = c.epoch().checked_sub(Duration::from_millis(5)) {
            assert_eq!(c.from_std(before), 0);
        }
    }

    #[test]
    fn sleeping_until_never_wakes_early() {
        let c = Clock::new();
        for _ in 0..20 {
            let deadline = c.now() + 137;
            std::thread::sleep(c.until(deadline));
            assert!(c.reached(deadline), "woke before the deadline");
        }
        assert_eq!(c.until(0), Duration::ZERO);
    }

    #[test]
    fn huge_deadline_saturates() {
        let c = Clock::new();
        let far = c.until(u64::MAX);
        assert!(far > Duration::from_secs(3600));
        assert_eq!(duration_to_micros(Duration::MAX), u64::MAX);
    }
}
