//! Reliable Datagram Extended Transport Header (RDETH), 4 bytes: IBTA Vol 1 §9.3.2.
//!
//! ```text
//! byte 0      reserved
//! bytes 1-3   EE-Context
//! ```
//! Only RD packets carry it; RD is not used on RoCE, this is for completeness of the decoder.

use crate::dissect::{Dissect, Tree};
use crate::field::{self, Field};
use crate::{Error, Result};

pub mod fields {
    use super::Field;
    pub const RESERVED: usize = 0;
    pub const EE_CONTEXT: Field = 1..4;
}

/// Length of the RDETH.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an RDETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        Error::check_len("rdeth", HEADER_LEN, buffer.as_ref().len())?;
        Ok(Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[fields::RESERVED]
    }
    pub fn ee_context(&self) -> u32 {
        field::read_u24(self.buffer.as_ref(), fields::EE_CONTEXT.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[fields::RESERVED] = v;
    }
    pub fn set_ee_context(&mut self, v: u32) {
        field::write_u24(self.buffer.as_mut(), fields::EE_CONTEXT.start, v);
    }
}

/// A decoded RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub reserved: u8,
    /// End-to-end context (24 bits).
    pub ee_context: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            reserved: p.reserved(),
            ee_context: p.ee_context(),
        }
    }
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        Ok(Repr::parse_packet(&Packet::new_checked(buf)?))
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "rdeth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_reserved(self.reserved);
        p.set_ee_context(self.ee_context);
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; HEADER_LEN];
        self.emit(&mut v);
        v
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        // Labels as tshark's (whose RDETH offsets are off, so its values differ).
        t.subtree(
            "rdeth",
            "RDETH - Reliable Datagram Extended Transport Header",
            |t| {
                t.bytes("reserved", "Reserved", &[self.reserved]);
                t.dec("ee_context", "E2E Context", self.ee_context);
            },
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncated() {
        let b = [0x5a, 0x00, 0x01, 0x02];
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.ee_context, 0x102);
        assert_eq!(r.reserved, 0x5a);
        assert_eq!(r.to_bytes(), b);
        assert!(r.to_tree().to_text(0).contains("    E2E Context: 258\n"));
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&b[..n]),
                Err(Error::Truncated { what: "rdeth", .. })
            ));
        }
    }
}
