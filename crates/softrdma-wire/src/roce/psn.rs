//! Packet sequence numbers: 24-bit counters that wrap (IBTA §9.7.1).
//!
//! Like smoltcp's TCP `SeqNumber`, but modulo 2^24: two PSNs are ordered by the signed
//! distance between them, which is meaningful while they are within half the space
//! (2^23 = 8,388,608) of each other. IBTA bounds the outstanding window far below that
//! (§9.7.1.1: a requester may have at most 2^23 unacknowledged PSNs).

use core::{cmp::Ordering, fmt, ops};

/// A 24-bit packet sequence number. The upper 8 bits of the inner value are always zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;
    /// Mask of the 24 valid bits.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// Half the space: the largest distance [`Psn::distance`] can report unambiguously.
    pub const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v` (upper bits are dropped, as the wire would).
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n`, wrapping modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The signed distance from `other` to `self` (`self - other`), in `-2^23 .. 2^23`.
    pub const fn distance(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & Self::MASK;
        // Sign-extend the 24-bit difference.
        ((d << 8) as i32) >> 8
    }

    /// How far `self` is ahead of `base` modulo 2^24 (`0 .. 2^24`), for window checks.
    pub const fn offset_from(self, base: Psn) -> u32 {
        self.0.wrapping_sub(base.0) & Self::MASK
    }

    /// Whether `self` lies in the window of `len` PSNs starting at `start`
    /// (`start <= self < start + len`, modulo 2^24).
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.offset_from(start) < len
    }

    /// Whether `self` comes after `other` (within half the space).
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// Whether `self` comes before `other` (within half the space).
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }
}

impl PartialOrd for Psn {
    /// Serial-number order: meaningful only within half the space, like TCP's; two PSNs
    /// exactly 2^23 apart compare as `Less` both ways round, so this is deliberately not `Ord`.
    fn partial_cmp(&self, other: &Psn) -> Option<Ordering> {
        Some(self.distance(*other).cmp(&0))
    }
}

impl ops::Add<u32> for Psn {
    type Output = Psn;
    fn add(self, n: u32) -> Psn {
        Psn::add(self, n)
    }
}

impl ops::AddAssign<u32> for Psn {
    fn add_assign(&mut self, n: u32) {
        *self = Psn::add(*self, n);
    }
}

impl ops::Sub<u32> for Psn {
    type Output = Psn;
    fn sub(self, n: u32) -> Psn {
        Psn::sub(self, n)
    }
}

impl ops::Sub<Psn> for Psn {
    type Output = i32;
    /// The signed distance, as [`Psn::distance`].
    fn sub(self, other: Psn) -> i32 {
        self.distance(other)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;

    const TOP: Psn = Psn::new(0xff_ffff);

    #[test]
    fn masks_to_24_bits() {
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert_eq!(u32::from(Psn::new(u32::MAX)), 0xff_ffff);
    }

    #[test]
    fn add_and_sub_wrap() {
        assert_eq!(TOP.next(), Psn::new(0));
        assert_eq!(TOP + 2, Psn::new(1));
        assert_eq!(Psn::new(0) - 1, TOP);
        assert_eq!(Psn::new(5).add(Psn::MODULUS), Psn::new(5));
        let mut p = Psn::new(0xff_fffe);
        p += 3;
        assert_eq!(p, Psn::new(1));
    }

    #[test]
    fn distance_across_the_wrap() {
        assert_eq!(Psn::new(0).distance(TOP), 1);
        assert_eq!(TOP.distance(Psn::new(0)), -1);
        assert_eq!(Psn::new(3) - Psn::new(0xff_fffd), 6);
        assert_eq!(Psn::new(0).distance(Psn::new(0)), 0);
        // The extremes of the signed range.
        assert_eq!(
            Psn::new(Psn::HALF - 1).distance(Psn::new(0)),
            (Psn::HALF - 1) as i32
        );
        assert_eq!(
            Psn::new(Psn::HALF).distance(Psn::new(0)),
            -(Psn::HALF as i32)
        );
    }

    #[test]
    fn comparisons_across_the_wrap() {
        assert!(Psn::new(0) > TOP);
        assert!(TOP < Psn::new(0));
        assert!(Psn::new(1).is_after(TOP));
        assert!(TOP.is_before(Psn::new(1)));
        assert!(Psn::new(10) > Psn::new(9));
        assert!(Psn::new(10) >= Psn::new(10));
        assert!(!Psn::new(10).is_after(Psn::new(10)));
    }

    #[test]
    fn windows_across_the_wrap() {
        let start = Psn::new(0xff_fff0);
        assert!(start.in_window(start, 1));
        assert!(!start.in_window(start, 0));
        assert!(Psn::new(0xff_ffff).in_window(start, 32));
        assert!(Psn::new(0x0f).in_window(start, 32));
        assert!(!Psn::new(0x10).in_window(start, 32));
        assert!(!Psn::new(0xff_ffef).in_window(start, 32));
        assert_eq!(Psn::new(0x0f).offset_from(start), 31);
    }
}
