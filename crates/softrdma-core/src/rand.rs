//! Seeded randomness. The core has no global RNG: an object that needs random numbers
//! (MR key bytes, initial PSNs, ...) owns an [`Rng`] seeded by its creator, so that a
//! simulation run replays exactly from its seed.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, statistically good enough for keys
/// and PSNs, and every seed (including 0) gives a full-period sequence. Not cryptographic:
/// rxe's key bytes and PSNs are not secrets either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub const fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// The next random byte.
    pub fn next_u8(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }

    /// A random 24-bit value (a PSN), as `get_random_u32() & 0xffffff` gives in the kernel.
    pub fn next_psn(&mut self) -> u32 {
        self.next_u32() & 0x00ff_ffff
    }

    /// A child generator with an independent stream (for handing randomness to a new object).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn known_splitmix_values() {
        // Reference values of SplitMix64 seeded with 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn psn_is_24_bits() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            assert!(r.next_psn() <= 0xff_ffff);
        }
    }
}
