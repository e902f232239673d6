//! Immediate Data Extended Transport Header (ImmDt), 4 bytes: IBTA Vol 1 §9.3.7.
//!
//! Opaque 32 bits handed to the receiver's completion (`ibv_wc.imm_data`, kept in network
//! order by verbs). Carried by SEND/RDMA WRITE "with Immediate" last/only packets.

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const IMM_DATA: Field = 0..4;
}

/// Length of the ImmDt.
pub const HEADER_LEN: usize = 4;

fixed_view! {
    /// A read/write view of an ImmDt at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "immdt");
}

be_fields!(Packet {
    imm_data, set_imm_data: u32 @ fields::IMM_DATA.start;
});

/// A decoded ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The immediate data, read big-endian.
    pub imm_data: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            imm_data: p.imm_data(),
        }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "immdt: emit buffer length");
        Packet::new_unchecked(buf).set_imm_data(self.imm_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "immdt",
            "IMMDT - Immediate Data Extended Transport Header",
            |t| t.bytes("imm_data", "Immediate Data", &self.imm_data.to_be_bytes()),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn captured_and_truncated() {
        // c_udaddy.pcap: tshark "Immediate Data: 00000011".
        let b = [0, 0, 0, 0x11];
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.imm_data, 0x11);
        assert_eq!(r.to_bytes(), b);
        let mut e = [0u8; 4];
        r.emit(&mut e);
        assert_eq!(e, b);
        assert!(r
            .to_tree()
            .to_text(0)
            .contains("    Immediate Data: 00000011\n"));
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&b[..n]),
                Err(Error::Truncated { what: "immdt", .. })
            ));
        }
    }
}
