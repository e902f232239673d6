//! Base Transport Header (BTH), 12 bytes: IBTA Vol 1 §9.2, Figure 94 / Table 37.
//!
//! ```text
//! byte 0      OpCode
//! byte 1      SE(7) MigReq(6) PadCnt(5-4) TVer(3-0)
//! bytes 2-3   P_Key
//! byte 4      resv8a (RoCEv2: FECN/BECN in bits 7/6; masked to all-ones in the ICRC)
//! bytes 5-7   DestQP
//! byte 8      AckReq(7) resv7(6-0)
//! bytes 9-11  PSN
//! ```
//! Reserved bits are kept in the `Repr` so that re-emitting reproduces the wire exactly.

use super::opcode::Opcode;
use super::psn::Psn;
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Where each BTH field lives.
pub mod fields {
    use super::{Bits, Field};
    pub const OPCODE: usize = 0;
    pub const SE: Bits = Bits::new(1, 0, 1);
    pub const MIG_REQ: Bits = Bits::new(1, 1, 1);
    pub const PAD_COUNT: Bits = Bits::new(1, 2, 2);
    pub const TVER: Bits = Bits::new(1, 4, 4);
    pub const PKEY: Field = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Field = 5..8;
    pub const ACK_REQ: Bits = Bits::new(8, 0, 1);
    pub const RESV7: Bits = Bits::new(8, 1, 7);
    pub const PSN: Field = 9..12;
}

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;

fixed_view! {
    /// A read/write view of a BTH at the start of a buffer.
    #[derive(Copy)]
    struct Packet(HEADER_LEN, "bth");
}

bit_accessors! {
    solicited_event / set_solicited_event: bool = fields::SE;
    mig_req / set_mig_req: bool = fields::MIG_REQ;
    pad_count / set_pad_count: u8 = fields::PAD_COUNT;
    tver / set_tver: u8 = fields::TVER;
    ack_req / set_ack_req: bool = fields::ACK_REQ;
    resv7 / set_resv7: u8 = fields::RESV7;
}

be_fields!(Packet {
    pkey, set_pkey: u16 @ fields::PKEY.start;
    resv8a, set_resv8a: u8 @ fields::RESV8A;
    dest_qp, set_dest_qp: u24 @ fields::DEST_QP.start;
});

// The two fields with their own types.
impl<T: AsRef<[u8]>> Packet<T> {
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[fields::OPCODE])
    }
    pub fn psn(&self) -> Psn {
        Psn::new(field::read_u24(self.buffer.as_ref(), fields::PSN.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[fields::OPCODE] = v.0;
    }
    pub fn set_psn(&mut self, v: Psn) {
        field::write_u24(self.buffer.as_mut(), fields::PSN.start, v.value());
    }
}

/// A decoded BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub opcode: Opcode,
    pub solicited_event: bool,
    pub mig_req: bool,
    /// Pad bytes (0-3) after the payload that make it a multiple of 4 bytes.
    pub pad_count: u8,
    /// Transport header version (0).
    pub tver: u8,
    pub pkey: u16,
    /// Byte 4, reserved (kept for bit-exact emission; RoCE NICs put FECN/BECN here).
    pub resv8a: u8,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    pub ack_req: bool,
    /// Reserved 7 bits after AckReq.
    pub resv7: u8,
    pub psn: Psn,
}

impl Default for Repr {
    /// An RC SEND-only header to QP 0 with the default P_Key.
    fn default() -> Repr {
        Repr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited_event: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            resv8a: 0,
            dest_qp: 0,
            ack_req: false,
            resv7: 0,
            psn: Psn::new(0),
        }
    }
}

impl Repr {
    /// Reads a checked view.
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            opcode: p.opcode(),
            solicited_event: p.solicited_event(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            resv8a: p.resv8a(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            resv7: p.resv7(),
            psn: p.psn(),
        }
    }

    // `parse` reads the first 12 bytes of the buffer.
    fixed_repr!(Packet, HEADER_LEN, parse_packet);

    /// Writes the header into `buf` (exactly [`HEADER_LEN`] bytes). Values wider than their
    /// field are truncated to it.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "bth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_opcode(self.opcode);
        p.set_solicited_event(self.solicited_event);
        p.set_mig_req(self.mig_req);
        p.set_pad_count(self.pad_count);
        p.set_tver(self.tver);
        p.set_pkey(self.pkey);
        p.set_resv8a(self.resv8a);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_resv7(self.resv7);
        p.set_psn(self.psn);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("bth", "Base Transport Header", |t| {
            t.code("opcode", "Opcode", self.opcode.0, self.opcode.tshark_text());
            t.flag("se", "Solicited Event", self.solicited_event);
            t.flag("mig_req", "MigReq", self.mig_req);
            t.dec("pad_count", "Pad Count", self.pad_count);
            t.dec("tver", "Header Version", self.tver);
            t.dec("pkey", "Partition Key", self.pkey);
            // tshark shows this byte as raw bytes: "Reserved: 00".
            t.bytes("resv8a", "Reserved", &[self.resv8a]);
            t.hex("dest_qp", "Destination Queue Pair", self.dest_qp, 6);
            t.flag("ack_req", "Acknowledge Request", self.ack_req);
            t.dec("resv7", "Reserved (7 bits)", self.resv7);
            t.dec("psn", "Packet Sequence Number", self.psn.value());
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::Error;

    // b_rping.pcap: RC RDMA READ Request, tshark: Partition Key 65535, DestQP 0x000011,
    // AckReq True, PSN 7959271.
    const READ_REQ_BTH: [u8; 12] = [
        0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x79, 0x72, 0xe7,
    ];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&READ_REQ_BTH).unwrap();
        assert_eq!(r.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert_eq!(r.pkey, 65535);
        assert_eq!(r.dest_qp, 0x11);
        assert!(r.ack_req);
        assert_eq!(r.psn.value(), 7959271);
        assert_eq!(r.to_bytes(), READ_REQ_BTH);
    }

    #[test]
    fn every_bit_round_trips() {
        let r = Repr {
            opcode: Opcode(0xfe),
            solicited_event: true,
            mig_req: true,
            pad_count: 3,
            tver: 0xf,
            pkey: 0x8001,
            resv8a: 0xc0,
            dest_qp: 0xab_cdef,
            ack_req: true,
            resv7: 0x7f,
            psn: Psn::new(0xff_ffff),
        };
        let b = r.to_bytes();
        assert_eq!(
            b,
            [0xfe, 0xff, 0x80, 0x01, 0xc0, 0xab, 0xcd, 0xef, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(Repr::parse(&b).unwrap(), r);
        let r0 = Repr::default();
        assert_eq!(Repr::parse(&r0.to_bytes()).unwrap(), r0);
        // Every single bit maps to exactly one field and back.
        for byte in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut b = [0u8; HEADER_LEN];
                b[byte] = 1 << bit;
                assert_eq!(Repr::parse(&b).unwrap().to_bytes(), b);
            }
        }
    }

    #[test]
    fn truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Repr::parse(&READ_REQ_BTH[..n]),
                Err(Error::Truncated {
                    what: "bth",
                    need: HEADER_LEN,
                    got: n
                })
            );
        }
    }

    #[test]
    fn dissect_as_tshark() {
        let t = Repr::parse(&READ_REQ_BTH).unwrap().to_tree();
        let text = t.to_text(1);
        assert!(text.contains("Opcode: Reliable Connection (RC) - RDMA READ Request (12)"));
        assert!(text.contains("Partition Key: 65535"));
        assert!(text.contains("        Reserved: 00\n"));
        assert!(text.contains("Destination Queue Pair: 0x000011"));
        assert!(text.contains("Acknowledge Request: True"));
        assert!(text.contains("Packet Sequence Number: 7959271"));
        assert_eq!(t.uint("bth.psn"), Some(7959271));
    }
}
