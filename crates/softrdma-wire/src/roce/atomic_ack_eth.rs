//! Atomic Acknowledge Extended Transport Header (AtomicAckETH), 8 bytes: IBTA Vol 1 §9.3.6.
//!
//! The original value at the remote address before the atomic operation, returned in an
//! ATOMIC Acknowledge after the AETH.

use crate::dissect::{Dissect, Tree};
use crate::field::{self, Field};
use crate::{Error, Result};

pub mod fields {
    use super::Field;
    pub const ORIG_REMOTE_DATA: Field = 0..8;
}

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = 8;

/// A read/write view of an AtomicAckETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        Error::check_len("atomic_ack_eth", HEADER_LEN, buffer.as_ref().len())?;
        Ok(Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn orig_remote_data(&self) -> u64 {
        field::read_u64(self.buffer.as_ref(), fields::ORIG_REMOTE_DATA.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_orig_remote_data(&mut self, v: u64) {
        field::write_u64(self.buffer.as_mut(), fields::ORIG_REMOTE_DATA.start, v);
    }
}

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
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        Ok(Repr::parse_packet(&Packet::new_checked(buf)?))
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "atomic_ack_eth: emit buffer length");
        Packet::new_unchecked(buf).set_orig_remote_data(self.orig_remote_data);
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        self.orig_remote_data.to_be_bytes().to_vec()
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
