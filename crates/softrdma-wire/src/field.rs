//! Field locations and big-endian accessors shared by every format.
//!
//! IBTA tables describe fields as "starts at bit B of byte N, W bits wide", counted from the
//! most significant bit, and fields may straddle bytes (the REQ's 20-bit flow label, the 24-bit
//! QPNs). [`Bits`] is that description as a value, like the kernel's `IBA_FIELD_BLOC`; plain
//! byte-aligned fields use a [`Field`] range and the `read_*`/`write_*` helpers.
//!
//! All accessors index the slice directly: callers check the length once (`new_checked`), after
//! which these cannot go out of bounds.

/// A byte range of a header.
pub type Field = core::ops::Range<usize>;

/// A bit field: `width` bits starting at bit `bit` (0 = most significant) of byte `byte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits {
    pub byte: usize,
    pub bit: u8,
    pub width: u8,
}

impl Bits {
    /// A field of `width` bits at bit `bit` of byte `byte`; `bit + width` must not exceed 64.
    pub const fn new(byte: usize, bit: u8, width: u8) -> Bits {
        assert!(bit < 8 && width >= 1 && bit as usize + width as usize <= 64);
        Bits { byte, bit, width }
    }

    /// The first byte after the field: the buffer length a checked view must guarantee.
    pub const fn end(&self) -> usize {
        self.byte + (self.bit as usize + self.width as usize).div_ceil(8)
    }

    /// The largest value the field can hold.
    pub const fn max(&self) -> u64 {
        if self.width == 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    fn span(&self) -> (usize, u32) {
        let nbytes = self.end() - self.byte;
        let shift = (nbytes * 8) as u32 - self.bit as u32 - self.width as u32;
        (nbytes, shift)
    }

    /// Reads the field.
    pub fn get(&self, data: &[u8]) -> u64 {
        let (nbytes, shift) = self.span();
        let mut acc: u64 = 0;
        for &b in &data[self.byte..self.byte + nbytes] {
            acc = (acc << 8) | u64::from(b);
        }
        (acc >> shift) & self.max()
    }

    /// Writes the field, leaving the surrounding bits as they were. Bits of `value` above the
    /// field's width are dropped.
    pub fn set(&self, data: &mut [u8], value: u64) {
        let (nbytes, shift) = self.span();
        let mask = self.max() << shift;
        let value = (value & self.max()) << shift;
        for i in 0..nbytes {
            let byte_shift = ((nbytes - 1 - i) * 8) as u32;
            let m = (mask >> byte_shift) as u8;
            let v = (value >> byte_shift) as u8;
            let b = &mut data[self.byte + i];
            *b = (*b & !m) | (v & m);
        }
    }
}

/// Reads a big-endian `u16` at `off`.
pub fn read_u16(data: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([data[off], data[off + 1]])
}

/// Reads a big-endian 24-bit value at `off`.
pub fn read_u24(data: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([0, data[off], data[off + 1], data[off + 2]])
}

/// Reads a big-endian `u32` at `off`.
pub fn read_u32(data: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]])
}

/// Reads a big-endian `u64` at `off`.
pub fn read_u64(data: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[off..off + 8]);
    u64::from_be_bytes(b)
}

/// Reads `N` bytes at `off`.
pub fn read_array<const N: usize>(data: &[u8], off: usize) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(&data[off..off + N]);
    b
}

/// Writes a big-endian `u16` at `off`.
pub fn write_u16(data: &mut [u8], off: usize, v: u16) {
    data[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v` big-endian at `off`.
pub fn write_u24(data: &mut [u8], off: usize, v: u32) {
    data[off..off + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// Writes a big-endian `u32` at `off`.
pub fn write_u32(data: &mut [u8], off: usize, v: u32) {
    data[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u64` at `off`.
pub fn write_u64(data: &mut [u8], off: usize, v: u64) {
    data[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_straddling_bytes() {
        // The REQ flow label: 20 bits at byte 0 bit 0, then 6 reserved, then a 6-bit rate.
        let label = Bits::new(0, 0, 20);
        let rate = Bits::new(3, 2, 6);
        let mut b = [0u8; 4];
        label.set(&mut b, 0x000c_588b);
        rate.set(&mut b, 0x3f);
        assert_eq!(b, [0xc5, 0x88, 0xb0, 0x3f]);
        assert_eq!(label.get(&b), 0xc588b);
        assert_eq!(rate.get(&b), 0x3f);
        assert_eq!(label.end(), 3);
        assert_eq!(rate.end(), 4);
    }

    #[test]
    fn set_keeps_neighbours() {
        let f = Bits::new(1, 3, 2);
        let mut b = [0xffu8; 3];
        f.set(&mut b, 0);
        assert_eq!(b, [0xff, 0b1110_0111, 0xff]);
        f.set(&mut b, 0xff); // truncated to the width
        assert_eq!(b, [0xff; 3]);
    }

    #[test]
    fn wide_fields() {
        let f = Bits::new(0, 0, 64);
        let mut b = [0u8; 8];
        f.set(&mut b, 0x0102_0304_0506_0708);
        assert_eq!(read_u64(&b, 0), 0x0102_0304_0506_0708);
        assert_eq!(f.get(&b), 0x0102_0304_0506_0708);
        let g = Bits::new(0, 4, 24);
        assert_eq!(g.get(&b), 0x10_2030);
    }
}

/// Reads and writes one integer-valued field described by a [`crate::field::Bits`].
pub(crate) trait BitValue: Copy {
    fn from_bits(v: u64) -> Self;
    fn to_bits(self) -> u64;
}

macro_rules! bit_value_int {
    ($($t:ty),*) => {$(
        impl BitValue for $t {
            #[inline]
            fn from_bits(v: u64) -> Self {
                // `Bits::get` masks to the field width, which never exceeds the type's width
                // in the bit tables, so the cast keeps every bit.
                v as $t
            }
            #[inline]
            fn to_bits(self) -> u64 {
                u64::from(self)
            }
        }
    )*};
}
bit_value_int!(u8, u16, u32, u64);

impl BitValue for bool {
    #[inline]
    fn from_bits(v: u64) -> Self {
        v != 0
    }
    #[inline]
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}
