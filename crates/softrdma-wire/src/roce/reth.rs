//! RDMA Extended Transport Header (RETH), 16 bytes: IBTA Vol 1 §9.3.4, Figure 98.
//!
//! ```text
//! bytes 0-7    Virtual Address
//! bytes 8-11   R_Key
//! bytes 12-15  DMA Length
//! ```
//! Carried by the first (or only) packet of an RDMA WRITE and by RDMA READ requests.

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const R_KEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

fixed_view! {
    /// A read/write view of a RETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "reth");
}

be_fields!(Packet {
    va, set_va: u64 @ fields::VA.start;
    r_key, set_r_key: u32 @ fields::R_KEY.start;
    dma_len, set_dma_len: u32 @ fields::DMA_LEN.start;
});

/// A decoded RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Remote virtual address.
    pub va: u64,
    pub r_key: u32,
    /// Length of the whole RDMA operation in bytes.
    pub dma_len: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            va: p.va(),
            r_key: p.r_key(),
            dma_len: p.dma_len(),
        }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "reth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_va(self.va);
        p.set_r_key(self.r_key);
        p.set_dma_len(self.dma_len);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("reth", "RETH - RDMA Extended Transport Header", |t| {
            t.hex("va", "Virtual Address", self.va, 16);
            t.hex("r_key", "Remote Key", self.r_key, 8);
            // tshark: BASE_DEC_HEX, "64 (0x00000040)".
            t.code_hex("dma_len", "DMA Length", self.dma_len, 8, self.dma_len);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    // b_rping.pcap RDMA READ Request: tshark "Virtual Address: 0x000055a035508d50",
    // "Remote Key: 0x0000050d", "DMA Length: 64 (0x00000040)".
    const RPING: [u8; 16] = [
        0x00, 0x00, 0x55, 0xa0, 0x35, 0x50, 0x8d, 0x50, 0x00, 0x00, 0x05, 0x0d, 0x00, 0x00, 0x00,
        0x40,
    ];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&RPING).unwrap();
        assert_eq!(r.va, 0x0000_55a0_3550_8d50);
        assert_eq!(r.r_key, 0x50d);
        assert_eq!(r.dma_len, 64);
        assert_eq!(r.to_bytes(), RPING);
        let text = r.to_tree().to_text(0);
        assert!(text.contains("    Virtual Address: 0x000055a035508d50\n"));
        assert!(text.contains("    Remote Key: 0x0000050d\n"));
        assert!(text.contains("    DMA Length: 64 (0x00000040)\n"));
    }

    #[test]
    fn round_trip_and_truncation() {
        let r = Repr {
            va: u64::MAX - 1,
            r_key: 0xdead_beef,
            dma_len: u32::MAX,
        };
        assert_eq!(Repr::parse(&r.to_bytes()).unwrap(), r);
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&RPING[..n]),
                Err(Error::Truncated { what: "reth", .. })
            ));
        }
    }
}
