//! Atomic Acknowledge Extended Transport Header (AtomicAckETH), 8 bytes: IBTA Vol 1 §9.3.6.
//!
//! The original value at the remote address before the atomic operation, returned in an
//! ATOMIC Acknowledge after the AETH.

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const ORIG_REMOTE_DATA: Field = 0..8;
}

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = 8;

fixed_view! {
    /// A read/write view of an AtomicAckETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "atomic_ack_eth");
}

be_fields!(Packet {
    orig_remote_data, set_orig_remote_data: u64 @ fields::ORIG_REMOTE_DATA.start;
});

/// A decoded AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub orig_remote_data: u64,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            orig_remote_data: p.orig_remote_data(),
        }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "atomic_ack_eth: emit buffer length");
        Packet::new_unchecked(buf).set_orig_remote_data(self.orig_remote_data);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "atomic_ack_eth",
            "ATOMICACKETH - Atomic ACK Extended Transport Header",
            |t| {
                t.dec(
                    "orig_remote_data",
                    "Original Remote Data",
                    self.orig_remote_data,
                )
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
    fn captured_and_truncated() {
        // i_mra_atomic.sll.pcap frame 332: tshark "Original Remote Data: 5133776142892546297".
        let b = 5133776142892546297u64.to_be_bytes();
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.orig_remote_data, 5133776142892546297);
        assert_eq!(r.to_bytes(), b);
        let mut e = [0u8; 8];
        r.emit(&mut e);
        assert_eq!(e, b);
        assert!(r
            .to_tree()
            .to_text(0)
            .contains("    Original Remote Data: 5133776142892546297\n"));
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&b[..n]),
                Err(Error::Truncated {
                    what: "atomic_ack_eth",
                    ..
                })
            ));
        }
    }
}
