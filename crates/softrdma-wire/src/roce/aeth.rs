//! ACK Extended Transport Header (AETH), 4 bytes: IBTA Vol 1 §9.3.5, Table 42-45.
//!
//! ```text
//! byte 0      Syndrome: reserved(7) type(6-5) value(4-0)
//! bytes 1-3   MSN (message sequence number)
//! ```
//! The syndrome type says what the 5-bit value means: ACK (00) with an end-to-end credit
//! count, RNR NAK (01) with the RNR timer code, reserved (10), NAK (11) with an error code.

use crate::dissect::{Dissect, Node, Tree, Value};
use crate::field::{self, Field};
use crate::{Error, Result};

pub mod fields {
    use super::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;

code_point! {
    /// NAK error codes (syndrome type 11), IBTA Table 44. Texts as tshark prints them.
    pub struct NakCode(u8) {
        PSN_SEQUENCE_ERROR = 0 => "PSN Sequence Error",
        INVALID_REQUEST = 1 => "Invalid Request",
        REMOTE_ACCESS_ERROR = 2 => "Remote Access Error",
        REMOTE_OPERATIONAL_ERROR = 3 => "Remote Operational Error",
        INVALID_RD_REQUEST = 4 => "Invalid RD Request",
    }
}

code_point! {
    /// RNR NAK timer codes (syndrome type 01): the minimum time the requester waits before
    /// retrying, IBTA Table 45 (also the `min_rnr_timer` QP attribute).
    pub struct RnrTimer(u8) {
        T655_36MS = 0 => "655.36 ms",
        T0_01MS = 1 => "0.01 ms",
        T0_02MS = 2 => "0.02 ms",
        T0_03MS = 3 => "0.03 ms",
        T0_04MS = 4 => "0.04 ms",
        T0_06MS = 5 => "0.06 ms",
        T0_08MS = 6 => "0.08 ms",
        T0_12MS = 7 => "0.12 ms",
        T0_16MS = 8 => "0.16 ms",
        T0_24MS = 9 => "0.24 ms",
        T0_32MS = 10 => "0.32 ms",
        T0_48MS = 11 => "0.48 ms",
        T0_64MS = 12 => "0.64 ms",
        T0_96MS = 13 => "0.96 ms",
        T1_28MS = 14 => "1.28 ms",
        T1_92MS = 15 => "1.92 ms",
        T2_56MS = 16 => "2.56 ms",
        T3_84MS = 17 => "3.84 ms",
        T5_12MS = 18 => "5.12 ms",
        T7_68MS = 19 => "7.68 ms",
        T10_24MS = 20 => "10.24 ms",
        T15_36MS = 21 => "15.36 ms",
        T20_48MS = 22 => "20.48 ms",
        T30_72MS = 23 => "30.72 ms",
        T40_96MS = 24 => "40.96 ms",
        T61_44MS = 25 => "61.44 ms",
        T81_92MS = 26 => "81.92 ms",
        T122_88MS = 27 => "122.88 ms",
        T163_84MS = 28 => "163.84 ms",
        T245_76MS = 29 => "245.76 ms",
        T327_68MS = 30 => "327.68 ms",
        T491_52MS = 31 => "491.52 ms",
    }
}

/// The RNR timer durations in microseconds, indexed by code (IBTA Table 45).
const RNR_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The wait in microseconds (codes above 31 use their low 5 bits, as the field holds).
    pub fn micros(self) -> u32 {
        RNR_MICROS[usize::from(self.0 & 0x1f)]
    }
}

/// Credit counts by code (IBTA Table 43); code 31 means "invalid" (no credits advertised).
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The AETH syndrome byte. Every byte value is representable (the reserved bit and the
/// reserved type are kept), so re-emitting is bit-exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Syndrome(pub u8);

/// An ACK with credit count code 31, "no credit information" (IBTA 9.7.5.1.1): what a
/// responder without end-to-end credits sends in every ACK (rxe's `AETH_ACK_UNLIMITED`).
pub const ACK_UNLIMITED: Syndrome = Syndrome::ack(0x1f);

/// What a syndrome says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// Positive acknowledgement with a credit count code (31: no credit information).
    Ack { credit_count: u8 },
    /// Receiver not ready: retry after the timer.
    RnrNak { timer: RnrTimer },
    /// Negative acknowledgement.
    Nak { code: NakCode },
    /// Syndrome type 10, reserved.
    Reserved { value: u8 },
}

impl Syndrome {
    /// An ACK with credit count code `credit_count` (0-31; 31 = invalid/none).
    pub const fn ack(credit_count: u8) -> Syndrome {
        Syndrome(credit_count & 0x1f)
    }
    /// An RNR NAK with timer code `timer`.
    pub const fn rnr_nak(timer: RnrTimer) -> Syndrome {
        Syndrome(0x20 | (timer.0 & 0x1f))
    }
    /// A NAK with error code `code`.
    pub const fn nak(code: NakCode) -> Syndrome {
        Syndrome(0x60 | (code.0 & 0x1f))
    }

    /// The reserved bit 7.
    pub const fn reserved_bit(self) -> bool {
        self.0 & 0x80 != 0
    }
    /// The 2-bit type (0 ACK, 1 RNR NAK, 2 reserved, 3 NAK).
    pub const fn kind_bits(self) -> u8 {
        (self.0 >> 5) & 0x3
    }
    /// The 5-bit value (credit count, timer or error code).
    pub const fn value(self) -> u8 {
        self.0 & 0x1f
    }

    /// The decoded meaning.
    pub const fn kind(self) -> AckKind {
        match self.kind_bits() {
            0 => AckKind::Ack {
                credit_count: self.value(),
            },
            1 => AckKind::RnrNak {
                timer: RnrTimer(self.value()),
            },
            3 => AckKind::Nak {
                code: NakCode(self.value()),
            },
            _ => AckKind::Reserved {
                value: self.value(),
            },
        }
    }

    /// Whether this is a positive ACK.
    pub const fn is_ack(self) -> bool {
        self.kind_bits() == 0
    }

    /// For an ACK, the number of credits advertised (`None` for code 31 or a NAK).
    pub fn credits(self) -> Option<u32> {
        match self.kind() {
            AckKind::Ack { credit_count } => CREDITS.get(usize::from(credit_count)).copied(),
            _ => None,
        }
    }

    /// The type name tshark shows ("Ack", "RNR Nak", "Reserved", "Nak").
    pub const fn kind_text(self) -> &'static str {
        match self.kind_bits() {
            0 => "Ack",
            1 => "RNR Nak",
            2 => "Reserved",
            _ => "Nak",
        }
    }
}

/// A read/write view of an AETH at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        Error::check_len("aeth", HEADER_LEN, buffer.as_ref().len())?;
        Ok(Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn syndrome(&self) -> Syndrome {
        Syndrome(self.buffer.as_ref()[fields::SYNDROME])
    }
    pub fn msn(&self) -> u32 {
        field::read_u24(self.buffer.as_ref(), fields::MSN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_syndrome(&mut self, v: Syndrome) {
        self.buffer.as_mut()[fields::SYNDROME] = v.0;
    }
    pub fn set_msn(&mut self, v: u32) {
        field::write_u24(self.buffer.as_mut(), fields::MSN.start, v);
    }
}

/// A decoded AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits): messages the responder has completed.
    pub msn: u32,
}

impl Repr {
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            syndrome: p.syndrome(),
            msn: p.msn(),
        }
    }
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        Ok(Repr::parse_packet(&Packet::new_checked(buf)?))
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "aeth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; HEADER_LEN];
        self.emit(&mut v);
        v
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        let s = self.syndrome;
        t.subtree("aeth", "AETH - ACK Extended Transport Header", |t| {
            // tshark: "Syndrome: 31, Ack" with the three sub-fields beneath it.
            let mut sub = Tree::new();
            sub.dec("reserved", "Reserved", u8::from(s.reserved_bit()));
            sub.code("opcode", "OpCode", s.kind_bits(), s.kind_text());
            match s.kind() {
                AckKind::Ack { credit_count } => {
                    sub.dec("credit_count", "Credit Count", credit_count)
                }
                AckKind::RnrNak { timer } => sub.code("timer", "Timer", timer.0, timer),
                AckKind::Nak { code } => {
                    let text = code.description().unwrap_or("Unknown");
                    sub.code("error_code", "Error Code", code.0, text)
                }
                AckKind::Reserved { value } => sub.dec("reserved_value", "Reserved", value),
            }
            t.push(Node {
                key: "syndrome",
                label: "Syndrome".to_string(),
                value: Value::Uint(u64::from(s.0)),
                display: format!("{}, {}", s.0, s.kind_text()),
                children: sub.nodes,
            });
            t.dec("msn", "Message Sequence Number", self.msn);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;

    #[test]
    fn captured_ack() {
        // b_rping.pcap RDMA READ response Only: tshark "Syndrome: 31, Ack", "Credit Count:
        // 31", "Message Sequence Number: 1".
        let b = [0x1f, 0x00, 0x00, 0x01];
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.syndrome.kind(), AckKind::Ack { credit_count: 31 });
        assert!(r.syndrome.is_ack());
        assert_eq!(r.syndrome.credits(), None);
        assert_eq!(r.msn, 1);
        assert_eq!(r.to_bytes(), b);
        let text = r.to_tree().to_text(0);
        assert_eq!(
            text,
            "AETH - ACK Extended Transport Header\n    Syndrome: 31, Ack\n        Reserved: 0\n        OpCode: Ack (0)\n        Credit Count: 31\n    Message Sequence Number: 1\n"
        );
    }

    #[test]
    fn naks_and_rnr_as_tshark() {
        // Syndromes we built and had tshark 4.0 decode.
        let rnr = Repr {
            syndrome: Syndrome::rnr_nak(RnrTimer(5)),
            msn: 7,
        };
        assert_eq!(rnr.to_bytes(), [0x25, 0, 0, 7]);
        let t = rnr.to_tree().to_text(0);
        assert!(t.contains("Syndrome: 37, RNR Nak\n"));
        assert!(t.contains("OpCode: RNR Nak (1)\n"));
        assert!(t.contains("Timer: 0.06 ms (5)\n"));
        assert_eq!(RnrTimer(5).micros(), 60);
        assert_eq!(RnrTimer::T655_36MS.micros(), 655_360);

        let nak = Repr {
            syndrome: Syndrome::nak(NakCode::PSN_SEQUENCE_ERROR),
            msn: 8,
        };
        assert_eq!(nak.to_bytes(), [0x60, 0, 0, 8]);
        let t = nak.to_tree().to_text(0);
        assert!(t.contains("Syndrome: 96, Nak\n"));
        assert!(t.contains("Error Code: PSN Sequence Error (0)\n"));

        let s = Syndrome::nak(NakCode::REMOTE_OPERATIONAL_ERROR);
        assert_eq!(s.0, 99);
        assert!(Repr {
            syndrome: s,
            msn: 0
        }
        .to_tree()
        .to_text(0)
        .contains("Error Code: Remote Operational Error (3)\n"));

        let res = Syndrome(0x43);
        assert_eq!(res.kind(), AckKind::Reserved { value: 3 });
        let t = Repr {
            syndrome: res,
            msn: 0,
        }
        .to_tree()
        .to_text(0);
        assert!(t.contains("Syndrome: 67, Reserved\n"));
        assert!(t.contains("OpCode: Reserved (2)\n"));
    }

    #[test]
    fn every_syndrome_round_trips() {
        for v in 0..=255u8 {
            let r = Repr {
                syndrome: Syndrome(v),
                msn: 0xff_ffff,
            };
            let b = r.to_bytes();
            assert_eq!(Repr::parse(&b).unwrap(), r);
            let back = match r.syndrome.kind() {
                AckKind::Ack { credit_count } => Syndrome::ack(credit_count),
                AckKind::RnrNak { timer } => Syndrome::rnr_nak(timer),
                AckKind::Nak { code } => Syndrome::nak(code),
                AckKind::Reserved { value } => Syndrome(0x40 | value),
            };
            assert_eq!(back.0, v & 0x7f);
            let _ = r.to_tree().to_text(0);
        }
        assert_eq!(Syndrome::ack(0).credits(), Some(0));
        assert_eq!(Syndrome::ack(30).credits(), Some(32768));
        assert_eq!(Syndrome::nak(NakCode(9)).credits(), None);
    }

    #[test]
    fn truncated() {
        let b = [0x1f, 0, 0, 1];
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&b[..n]),
                Err(Error::Truncated { what: "aeth", .. })
            ));
        }
    }
}
