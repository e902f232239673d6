//! Reliable Datagram Extended Transport Header (RDETH), 4 bytes: IBTA Vol 1 §9.3.2.
//!
//! ```text
//! byte 0      reserved
//! bytes 1-3   EE-Context
//! ```
//! Only RD packets carry it; RD is not used on RoCE, this is for completeness of the decoder.

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const RESERVED: usize = 0;
    pub const EE_CONTEXT: Field = 1..4;
}

/// Length of the RDETH.
pub const HEADER_LEN: usize = 4;

fixed_view! {
    /// A read/write view of an RDETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "rdeth");
}

be_fields!(Packet {
    reserved, set_reserved: u8 @ fields::RESERVED;
    ee_context, set_ee_context: u24 @ fields::EE_CONTEXT.start;
});

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
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "rdeth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_reserved(self.reserved);
        p.set_ee_context(self.ee_context);
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
    use crate::Error;

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
