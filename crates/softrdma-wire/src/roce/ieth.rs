//! Invalidate Extended Transport Header (IETH), 4 bytes: IBTA Vol 1 §9.3.8.
//!
//! The R_Key the responder invalidates on a SEND with Invalidate (last/only packet).

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const R_KEY: Field = 0..4;
}

/// Length of the IETH.
pub const HEADER_LEN: usize = 4;

fixed_view! {
    /// A read/write view of an IETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "ieth");
}

be_fields!(Packet {
    r_key, set_r_key: u32 @ fields::R_KEY.start;
});

/// A decoded IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The R_Key to invalidate.
    pub r_key: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { r_key: p.r_key() }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "ieth: emit buffer length");
        Packet::new_unchecked(buf).set_r_key(self.r_key);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        // tshark 4.0 shows the key as raw bytes: "RKey: 12345678".
        t.subtree("ieth", "IETH - Invalidate Extended Transport Header", |t| {
            t.bytes("r_key", "RKey", &self.r_key.to_be_bytes())
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn round_trip_dissect_truncated() {
        let b = [0x12, 0x34, 0x56, 0x78];
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.r_key, 0x1234_5678);
        assert_eq!(r.to_bytes(), b);
        let mut e = [0u8; 4];
        r.emit(&mut e);
        assert_eq!(e, b);
        // As tshark 4.0 printed a SEND Only with Invalidate we built.
        assert!(r.to_tree().to_text(0).contains("    RKey: 12345678\n"));
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&b[..n]),
                Err(Error::Truncated { what: "ieth", .. })
            ));
        }
    }
}
