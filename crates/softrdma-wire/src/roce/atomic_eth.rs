//! Atomic Extended Transport Header (AtomicETH), 28 bytes: IBTA Vol 1 §9.3.5, Figure 99.
//!
//! ```text
//! bytes 0-7    Virtual Address
//! bytes 8-11   R_Key
//! bytes 12-19  Swap (or Add) Data
//! bytes 20-27  Compare Data
//! ```
//! Carried by CmpSwap and FetchAdd requests (FetchAdd ignores Compare Data).

use crate::dissect::{Dissect, Tree};
use crate::field::Field;

pub mod fields {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const R_KEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = 28;

fixed_view! {
    /// A read/write view of an AtomicETH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "atomic_eth");
}

be_fields!(Packet {
    va, set_va: u64 @ fields::VA.start;
    r_key, set_r_key: u32 @ fields::R_KEY.start;
    swap_add, set_swap_add: u64 @ fields::SWAP_ADD.start;
    compare, set_compare: u64 @ fields::COMPARE.start;
});

/// A decoded AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    pub r_key: u32,
    /// The swap value (CmpSwap) or the addend (FetchAdd).
    pub swap_add: u64,
    /// The compare value (CmpSwap only).
    pub compare: u64,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            va: p.va(),
            r_key: p.r_key(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        }
    }
    fixed_repr!(Packet, HEADER_LEN, parse_packet);
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "atomic_eth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_va(self.va);
        p.set_r_key(self.r_key);
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree(
            "atomic_eth",
            "AtomicETH - Atomic Extended Transport Header",
            |t| {
                t.hex("va", "Virtual Address", self.va, 16);
                t.hex("r_key", "Remote Key", self.r_key, 8);
                t.dec("swap_add", "Swap (Or Add) Data", self.swap_add);
                t.dec("compare", "Compare Data", self.compare);
            },
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    // i_mra_atomic.sll.pcap frame 330, RC CmpSwap: tshark "Virtual Address:
    // 0x00005641ba09f000", "Remote Key: 0x00000606", swap 0, compare 0.
    const CMP_SWAP: [u8; 28] = [
        0x00, 0x00, 0x56, 0x41, 0xba, 0x09, 0xf0, 0x00, 0x00, 0x00, 0x06, 0x06, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&CMP_SWAP).unwrap();
        assert_eq!(r.va, 0x0000_5641_ba09_f000);
        assert_eq!(r.r_key, 0x606);
        assert_eq!((r.swap_add, r.compare), (0, 0));
        assert_eq!(r.to_bytes(), CMP_SWAP);
        let text = r.to_tree().to_text(0);
        assert!(text.contains("    Virtual Address: 0x00005641ba09f000\n"));
        assert!(text.contains("    Remote Key: 0x00000606\n"));
        assert!(text.contains("    Swap (Or Add) Data: 0\n"));
        assert!(text.contains("    Compare Data: 0\n"));
    }

    #[test]
    fn round_trip_and_truncation() {
        let r = Repr {
            va: 0x1122_3344_5566_7788,
            r_key: 0x99aa_bbcc,
            swap_add: u64::MAX,
            compare: 1,
        };
        assert_eq!(Repr::parse(&r.to_bytes()).unwrap(), r);
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&CMP_SWAP[..n]),
                Err(Error::Truncated {
                    what: "atomic_eth",
                    ..
                })
            ));
        }
    }
}
