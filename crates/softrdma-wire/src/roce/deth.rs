//! Datagram Extended Transport Header (DETH), 8 bytes: IBTA Vol 1 §9.3.3, Figure 97.
//!
//! ```text
//! bytes 0-3   Q_Key
//! byte 4      reserved
//! bytes 5-7   SrcQP
//! ```
//! Carried by UD SENDs (and RD requests). CM MADs use Q_Key 0x80010000 from QP 1.

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const Q_KEY: Field = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Field = 5..8;
}

/// Length of the DETH.
pub const HEADER_LEN: usize = 8;

/// The well-known Q_Key of QP 1 (IBTA §13.4.6.1.1; rxe drops QP1 packets with another).
pub const GSI_QKEY: u32 = 0x8001_0000;

fixed_view! {
    /// A read/write view of a DETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "deth");
}

be_fields!(Packet {
    q_key, set_q_key: u32 @ fields::Q_KEY.start;
    reserved, set_reserved: u8 @ fields::RESERVED;
    src_qp, set_src_qp: u24 @ fields::SRC_QP.start;
});

/// A decoded DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub q_key: u32,
    /// Reserved byte, kept for bit-exact emission.
    pub reserved: u8,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            q_key: p.q_key(),
            reserved: p.reserved(),
            src_qp: p.src_qp(),
        }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "deth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_q_key(self.q_key);
        p.set_reserved(self.reserved);
        p.set_src_qp(self.src_qp);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("deth", "DETH - Datagram Extended Transport Header", |t| {
            // tshark shows the Q_Key as a 64-bit hex and the source QP as a 32-bit hex.
            t.hex("q_key", "Queue Key", self.q_key, 16);
            t.bytes("reserved", "Reserved", &[self.reserved]);
            t.hex("src_qp", "Source Queue Pair", self.src_qp, 8);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    // c_udaddy.pcap, UD SEND only with Immediate: tshark "Queue Key: 0x0000000001234567",
    // "Reserved: 00", "Source Queue Pair: 0x00000011".
    const UDADDY: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x00, 0x00, 0x00, 0x11];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&UDADDY).unwrap();
        assert_eq!(r.q_key, 0x0123_4567);
        assert_eq!(r.src_qp, 0x11);
        assert_eq!(r.to_bytes(), UDADDY);
        let text = r.to_tree().to_text(0);
        assert!(text.contains("    Queue Key: 0x0000000001234567\n"));
        assert!(text.contains("    Reserved: 00\n"));
        assert!(text.contains("    Source Queue Pair: 0x00000011\n"));
    }

    #[test]
    fn round_trip_and_truncation() {
        let r = Repr {
            q_key: GSI_QKEY,
            reserved: 0xa5,
            src_qp: 0xff_fffe,
        };
        assert_eq!(Repr::parse(&r.to_bytes()).unwrap(), r);
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&UDADDY[..n]),
                Err(Error::Truncated { what: "deth", .. })
            ));
        }
    }
}
