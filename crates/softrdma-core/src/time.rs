//! Time as a parameter (after smoltcp's `time`): the core never reads a clock; every entry
//! point that needs "now" takes an [`Instant`]. Microsecond resolution is enough: the
//! shortest IBTA timer is the local ACK timeout unit of 4.096 µs.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in microseconds since an epoch the driver chooses (usually its start).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    micros: u64,
}

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant { micros: 0 };

    /// An instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Instant {
        Instant { micros }
    }

    /// An instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Instant {
        Instant {
            micros: millis.saturating_mul(1000),
        }
    }

    /// Microseconds since the epoch.
    pub const fn total_micros(&self) -> u64 {
        self.micros
    }

    /// Milliseconds since the epoch (rounded down).
    pub const fn total_millis(&self) -> u64 {
        self.micros / 1000
    }

    /// The time elapsed since `earlier`, zero if `earlier` is later (clocks may jump).
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(earlier.micros))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.micros / 1_000_000,
            self.micros % 1_000_000
        )
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A span of time in microseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration {
    micros: u64,
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration { micros: 0 };

    /// A duration of `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Duration {
        Duration { micros }
    }

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Duration {
        Duration {
            micros: millis.saturating_mul(1000),
        }
    }

    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Duration {
        Duration {
            micros: secs.saturating_mul(1_000_000),
        }
    }

    /// The IBTA "4.096 µs × 2^exp" timer encoding (local ACK timeout, CM response timeout,
    /// packet lifetime; IBTA 9.7.6.1.3, 12.7.34). `exp` 0 means "infinite" for the ACK
    /// timeout: callers check that case; here 0 gives 4.096 µs rounded to 4 µs.
    /// Exponents above 31 saturate at 2^31 × 4.096 µs.
    pub const fn from_ib_timeout_exp(exp: u8) -> Duration {
        let e = if exp > 31 { 31 } else { exp };
        // 4.096 µs × 2^e = 4096 ns << e, in µs.
        Duration {
            micros: (4096u64 << e) / 1000,
        }
    }

    /// Microseconds in this duration.
    pub const fn total_micros(&self) -> u64 {
        self.micros
    }

    /// Milliseconds in this duration (rounded down).
    pub const fn total_millis(&self) -> u64 {
        self.micros / 1000
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.micros)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant::from_micros(self.micros.saturating_add(rhs.micros))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant::from_micros(self.micros.saturating_sub(rhs.micros))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        Duration::from_micros(self.micros.saturating_add(rhs.micros))
    }
}

impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(rhs.micros))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!((t + Duration::from_micros(7)).total_micros(), 5007);
        assert_eq!(t - Instant::from_millis(9), Duration::ZERO);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            Instant::from_micros(u64::MAX) + Duration::from_secs(1),
            Instant::from_micros(u64::MAX)
        );
    }

    #[test]
    fn ib_timeout_encoding() {
        // Local ACK timeout 19 (what 6.1 rdma_cm uses on RoCE): 4.096 µs × 2^19 ≈ 2.147 s.
        assert_eq!(Duration::from_ib_timeout_exp(19).total_micros(), 2_147_483);
        // CM response timeout 20 ≈ 4.295 s.
        assert_eq!(Duration::from_ib_timeout_exp(20).total_millis(), 4294);
        assert_eq!(Duration::from_ib_timeout_exp(14).total_micros(), 67_108);
        assert_eq!(
            Duration::from_ib_timeout_exp(40),
            Duration::from_ib_timeout_exp(31)
        );
    }

    #[test]
    fn debug_format() {
        assert_eq!(
            format!("{:?}", Instant::from_micros(1_500_000)),
            "1.500000s"
        );
    }
}
