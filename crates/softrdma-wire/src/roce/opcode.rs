//! The BTH opcode: which transport, which operation, which extension headers follow.
//!
//! IBTA Vol 1 §9.2.1 Table 38 (OpCode field) and §9.3 Table 41 (which headers each opcode
//! carries); the kernel's `include/rdma/ib_pack.h` and rxe's `rxe_opcode.c` have the same table.
//! Bits 7-5 of the opcode select the transport (RC 000, UC 001, RD 010, UD 011, CNP 100,
//! XRC 101), bits 4-0 the operation. RoCEv2's congestion notification packet (IBTA Annex A17.9.2)
//! uses 0x81. The texts are the ones `tshark` prints (Wireshark's `packet-infiniband.c`).

code_point! {
    /// A BTH opcode. Unknown values are kept (and carry no extension headers).
    pub struct Opcode(u8) {
        RC_SEND_FIRST = 0x00 => "Reliable Connection (RC) - SEND First",
        RC_SEND_MIDDLE = 0x01 => "Reliable Connection (RC) - SEND Middle",
        RC_SEND_LAST = 0x02 => "Reliable Connection (RC) - SEND Last",
        RC_SEND_LAST_WITH_IMMEDIATE = 0x03 => "Reliable Connection (RC) - SEND Last with Immediate",
        RC_SEND_ONLY = 0x04 => "Reliable Connection (RC) - SEND Only",
        RC_SEND_ONLY_WITH_IMMEDIATE = 0x05 => "Reliable Connection (RC) - SEND Only with Immediate",
        RC_RDMA_WRITE_FIRST = 0x06 => "Reliable Connection (RC) - RDMA WRITE First",
        RC_RDMA_WRITE_MIDDLE = 0x07 => "Reliable Connection (RC) - RDMA WRITE Middle",
        RC_RDMA_WRITE_LAST = 0x08 => "Reliable Connection (RC) - RDMA WRITE Last",
        RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09 => "Reliable Connection (RC) - RDMA WRITE Last with Immediate",
        RC_RDMA_WRITE_ONLY = 0x0a => "Reliable Connection (RC) - RDMA WRITE Only",
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b => "Reliable Connection (RC) - RDMA WRITE Only with Immediate",
        RC_RDMA_READ_REQUEST = 0x0c => "Reliable Connection (RC) - RDMA READ Request",
        RC_RDMA_READ_RESPONSE_FIRST = 0x0d => "Reliable Connection (RC) - RDMA READ response First",
        RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e => "Reliable Connection (RC) - RDMA READ response Middle",
        RC_RDMA_READ_RESPONSE_LAST = 0x0f => "Reliable Connection (RC) - RDMA READ response Last",
        RC_RDMA_READ_RESPONSE_ONLY = 0x10 => "Reliable Connection (RC) - RDMA READ response Only",
        RC_ACKNOWLEDGE = 0x11 => "Reliable Connection (RC) - Acknowledge",
        RC_ATOMIC_ACKNOWLEDGE = 0x12 => "Reliable Connection (RC) - ATOMIC Acknowledge",
        RC_COMPARE_SWAP = 0x13 => "Reliable Connection (RC) - CmpSwap",
        RC_FETCH_ADD = 0x14 => "Reliable Connection (RC) - FetchAdd",
        RC_SEND_LAST_WITH_INVALIDATE = 0x16 => "Reliable Connection (RC) - SEND Last with Invalidate",
        RC_SEND_ONLY_WITH_INVALIDATE = 0x17 => "Reliable Connection (RC) - SEND Only with Invalidate",

        UC_SEND_FIRST = 0x20 => "Unreliable Connection (UC) - SEND First",
        UC_SEND_MIDDLE = 0x21 => "Unreliable Connection (UC) - SEND Middle",
        UC_SEND_LAST = 0x22 => "Unreliable Connection (UC) - SEND Last",
        UC_SEND_LAST_WITH_IMMEDIATE = 0x23 => "Unreliable Connection (UC) - SEND Last with Immediate",
        UC_SEND_ONLY = 0x24 => "Unreliable Connection (UC) - SEND Only",
        UC_SEND_ONLY_WITH_IMMEDIATE = 0x25 => "Unreliable Connection (UC) - SEND Only with Immediate",
        UC_RDMA_WRITE_FIRST = 0x26 => "Unreliable Connection (UC) - RDMA WRITE First",
        UC_RDMA_WRITE_MIDDLE = 0x27 => "Unreliable Connection (UC) - RDMA WRITE Middle",
        UC_RDMA_WRITE_LAST = 0x28 => "Unreliable Connection (UC) - RDMA WRITE Last",
        UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29 => "Unreliable Connection (UC) - RDMA WRITE Last with Immediate",
        UC_RDMA_WRITE_ONLY = 0x2a => "Unreliable Connection (UC) - RDMA WRITE Only",
        UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b => "Unreliable Connection (UC) - RDMA WRITE Only with Immediate",

        RD_SEND_FIRST = 0x40 => "Reliable Datagram (RD) - SEND First",
        RD_SEND_MIDDLE = 0x41 => "Reliable Datagram (RD) - SEND Middle",
        RD_SEND_LAST = 0x42 => "Reliable Datagram (RD) - SEND Last",
        RD_SEND_LAST_WITH_IMMEDIATE = 0x43 => "Reliable Datagram (RD) - SEND Last with Immediate",
        RD_SEND_ONLY = 0x44 => "Reliable Datagram (RD) - SEND Only",
        RD_SEND_ONLY_WITH_IMMEDIATE = 0x45 => "Reliable Datagram (RD) - SEND Only with Immediate",
        RD_RDMA_WRITE_FIRST = 0x46 => "Reliable Datagram (RD) - RDMA WRITE First",
        RD_RDMA_WRITE_MIDDLE = 0x47 => "Reliable Datagram (RD) - RDMA WRITE Middle",
        RD_RDMA_WRITE_LAST = 0x48 => "Reliable Datagram (RD) - RDMA WRITE Last",
        RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49 => "Reliable Datagram (RD) - RDMA WRITE Last with Immediate",
        RD_RDMA_WRITE_ONLY = 0x4a => "Reliable Datagram (RD) - RDMA WRITE Only",
        RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4b => "Reliable Datagram (RD) - RDMA WRITE Only with Immediate",
        RD_RDMA_READ_REQUEST = 0x4c => "Reliable Datagram (RD) - RDMA READ Request",
        RD_RDMA_READ_RESPONSE_FIRST = 0x4d => "Reliable Datagram (RD) - RDMA READ response First",
        RD_RDMA_READ_RESPONSE_MIDDLE = 0x4e => "Reliable Datagram (RD) - RDMA READ response Middle",
        RD_RDMA_READ_RESPONSE_LAST = 0x4f => "Reliable Datagram (RD) - RDMA READ response Last",
        RD_RDMA_READ_RESPONSE_ONLY = 0x50 => "Reliable Datagram (RD) - RDMA READ response Only",
        RD_ACKNOWLEDGE = 0x51 => "Reliable Datagram (RD) - Acknowledge",
        RD_ATOMIC_ACKNOWLEDGE = 0x52 => "Reliable Datagram (RD) - ATOMIC Acknowledge",
        RD_COMPARE_SWAP = 0x53 => "Reliable Datagram (RD) - CmpSwap",
        RD_FETCH_ADD = 0x54 => "Reliable Datagram (RD) - FetchAdd",
        RD_RESYNC = 0x55 => "Reliable Datagram (RD) - RESYNC",

        UD_SEND_ONLY = 0x64 => "Unreliable Datagram (UD) - SEND only",
        UD_SEND_ONLY_WITH_IMMEDIATE = 0x65 => "Unreliable Datagram (UD) - SEND only with Immediate",

        /// RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.2). tshark 4.0 names 0x80
        /// "CNP" and shows 0x81 as unknown; the annex and the NICs use 0x81.
        CNP = 0x81 => "CNP",
    }
}

/// The transport service an opcode belongs to (opcode bits 7-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection (000).
    Rc,
    /// Unreliable Connection (001).
    Uc,
    /// Reliable Datagram (010).
    Rd,
    /// Unreliable Datagram (011).
    Ud,
    /// Congestion notification (100).
    Cnp,
    /// Extended Reliable Connection (101); its XRCETH is not decoded here.
    Xrc,
    /// Manufacturer-specific (110, 111).
    Vendor,
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// The extension headers that follow the BTH, as flags. They always appear in the order of
/// the constants below (IBTA §9.2: RDETH, DETH, RETH or AtomicETH, AETH, AtomicAckETH,
/// ImmDt or IETH), which is the order [`super::Repr`] parses and emits them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(pub u8);

impl Headers {
    pub const NONE: Headers = Headers(0);
    /// Reliable Datagram ETH (4 bytes).
    pub const RDETH: Headers = Headers(1 << 0);
    /// Datagram ETH (8 bytes).
    pub const DETH: Headers = Headers(1 << 1);
    /// RDMA ETH (16 bytes).
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic ETH (28 bytes).
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK ETH (4 bytes).
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic ACK ETH (8 bytes).
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data (4 bytes).
    pub const IMMDT: Headers = Headers(1 << 6);
    /// Invalidate ETH (4 bytes).
    pub const IETH: Headers = Headers(1 << 7);

    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets together.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// The total length of these headers in bytes (not counting the 12-byte BTH).
    pub const fn len(self) -> usize {
        let mut n = 0;
        if self.contains(Headers::RDETH) {
            n += 4;
        }
        if self.contains(Headers::DETH) {
            n += 8;
        }
        if self.contains(Headers::RETH) {
            n += 16;
        }
        if self.contains(Headers::ATOMIC_ETH) {
            n += 28;
        }
        if self.contains(Headers::AETH) {
            n += 4;
        }
        if self.contains(Headers::ATOMIC_ACK_ETH) {
            n += 8;
        }
        if self.contains(Headers::IMMDT) {
            n += 4;
        }
        if self.contains(Headers::IETH) {
            n += 4;
        }
        n
    }

    /// Whether no extension header follows.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for Headers {
    type Output = Headers;
    fn bitor(self, rhs: Headers) -> Headers {
        self.with(rhs)
    }
}

/// What an opcode means, from IBTA Table 41.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Info {
    headers: Headers,
    position: Option<Position>,
    payload: bool,
    response: bool,
}

const fn info(headers: Headers, position: Option<Position>, payload: bool, response: bool) -> Info {
    Info {
        headers,
        position,
        payload,
        response,
    }
}

/// The meaning of operation `op` (opcode bits 4-0) of the RC/UC/RD family, without the
/// datagram headers RD adds. Shared because RC, UC and RD number their operations alike.
const fn connected_op(op: u8) -> Option<Info> {
    use Position::*;
    const N: Headers = Headers::NONE;
    const IMM: Headers = Headers::IMMDT;
    const RETH: Headers = Headers::RETH;
    const AETH: Headers = Headers::AETH;
    Some(match op {
        0x00 => info(N, Some(First), true, false),
        0x01 => info(N, Some(Middle), true, false),
        0x02 => info(N, Some(Last), true, false),
        0x03 => info(IMM, Some(Last), true, false),
        0x04 => info(N, Some(Only), true, false),
        0x05 => info(IMM, Some(Only), true, false),
        0x06 => info(RETH, Some(First), true, false),
        0x07 => info(N, Some(Middle), true, false),
        0x08 => info(N, Some(Last), true, false),
        0x09 => info(IMM, Some(Last), true, false),
        0x0a => info(RETH, Some(Only), true, false),
        0x0b => info(RETH.with(IMM), Some(Only), true, false),
        0x0c => info(RETH, Some(Only), false, false),
        0x0d => info(AETH, Some(First), true, true),
        0x0e => info(N, Some(Middle), true, true),
        0x0f => info(AETH, Some(Last), true, true),
        0x10 => info(AETH, Some(Only), true, true),
        0x11 => info(AETH, Some(Only), false, true),
        0x12 => info(AETH.with(Headers::ATOMIC_ACK_ETH), Some(Only), false, true),
        0x13 | 0x14 => info(Headers::ATOMIC_ETH, Some(Only), false, false),
        0x16 => info(Headers::IETH, Some(Last), true, false),
        0x17 => info(Headers::IETH, Some(Only), true, false),
        _ => return None,
    })
}

impl Opcode {
    const fn info(self) -> Option<Info> {
        let op = self.0 & 0x1f;
        match self.0 >> 5 {
            // RC: every operation.
            0 => connected_op(op),
            // UC: SENDs and RDMA WRITEs only (Table 38).
            1 if op <= 0x0b => connected_op(op),
            // RD: every request carries RDETH + DETH, every response RDETH only.
            2 => {
                if op == 0x15 {
                    // RESYNC: RDETH + DETH, no payload.
                    return Some(info(
                        Headers::RDETH.with(Headers::DETH),
                        Some(Position::Only),
                        false,
                        false,
                    ));
                }
                if op > 0x14 {
                    return None;
                }
                match connected_op(op) {
                    Some(mut i) => {
                        let dg = if i.response {
                            Headers::RDETH
                        } else {
                            Headers::RDETH.with(Headers::DETH)
                        };
                        i.headers = dg.with(i.headers);
                        Some(i)
                    }
                    None => None,
                }
            }
            // UD: SEND only, with or without immediate data.
            3 => match op {
                0x04 => Some(info(Headers::DETH, Some(Position::Only), true, false)),
                0x05 => Some(info(
                    Headers::DETH.with(Headers::IMMDT),
                    Some(Position::Only),
                    true,
                    false,
                )),
                _ => None,
            },
            // CNP: BTH + 16 reserved bytes (Annex A17.9.2), which we treat as payload.
            4 if op == 0x01 => Some(info(Headers::NONE, None, true, false)),
            _ => None,
        }
    }

    /// The transport service (opcode bits 7-5).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Vendor,
        }
    }

    /// Whether this module knows the opcode's header layout (every named opcode does).
    pub const fn is_defined(self) -> bool {
        self.info().is_some()
    }

    /// The extension headers that follow the BTH, in wire order; none for unknown opcodes.
    pub const fn headers(self) -> Headers {
        match self.info() {
            Some(i) => i.headers,
            None => Headers::NONE,
        }
    }

    /// Whether the packet is first, middle, last or only of its message (`None` for CNP and
    /// unknown opcodes).
    pub const fn position(self) -> Option<Position> {
        match self.info() {
            Some(i) => i.position,
            None => None,
        }
    }

    /// Whether the packet carries a payload after its headers (SEND, WRITE, READ response
    /// data). Unknown opcodes are treated as carrying one: everything after the BTH.
    pub const fn has_payload(self) -> bool {
        match self.info() {
            Some(i) => i.payload,
            None => true,
        }
    }

    /// Whether the packet goes from requester to responder (SEND, WRITE, READ request,
    /// atomics, RESYNC, UD SEND).
    pub const fn is_request(self) -> bool {
        match self.info() {
            Some(i) => !i.response && !matches!(self.transport(), Transport::Cnp),
            None => false,
        }
    }

    /// Whether the packet goes from responder to requester (READ responses, ACKs).
    pub const fn is_response(self) -> bool {
        match self.info() {
            Some(i) => i.response,
            None => false,
        }
    }

    /// Whether it is the first packet of a message (first or only).
    pub const fn is_first(self) -> bool {
        matches!(self.position(), Some(Position::First | Position::Only))
    }

    /// Whether it is the last packet of a message (last or only).
    pub const fn is_last(self) -> bool {
        matches!(self.position(), Some(Position::Last | Position::Only))
    }

    /// Whether the packet carries immediate data.
    pub const fn has_immediate(self) -> bool {
        self.headers().contains(Headers::IMMDT)
    }

    /// Whether the operation is a SEND (of any transport).
    pub const fn is_send(self) -> bool {
        match self.transport() {
            Transport::Ud => self.is_defined(),
            Transport::Rc | Transport::Uc | Transport::Rd => {
                self.is_defined() && matches!(self.0 & 0x1f, 0x00..=0x05 | 0x16 | 0x17)
            }
            _ => false,
        }
    }

    /// Whether the operation is an RDMA WRITE.
    pub const fn is_rdma_write(self) -> bool {
        matches!(
            self.transport(),
            Transport::Rc | Transport::Uc | Transport::Rd
        ) && matches!(self.0 & 0x1f, 0x06..=0x0b)
    }

    /// Whether the operation is an RDMA READ response.
    pub const fn is_read_response(self) -> bool {
        matches!(self.transport(), Transport::Rc | Transport::Rd)
            && matches!(self.0 & 0x1f, 0x0d..=0x10)
    }

    /// Whether the operation is an atomic request (CmpSwap or FetchAdd).
    pub const fn is_atomic(self) -> bool {
        matches!(self.transport(), Transport::Rc | Transport::Rd)
            && matches!(self.0 & 0x1f, 0x13 | 0x14)
    }

    /// The opcode text as tshark's InfiniBand dissector prints it before ` (value)`,
    /// including the values it names that we do not model, so a side-by-side diff stays
    /// clean. (The one difference: we name 0x81 "CNP", tshark 4.0 says "Unknown".)
    pub fn tshark_text(self) -> &'static str {
        match (self.description(), self.0) {
            (Some(d), _) => d,
            (None, 0x15) => "Reliable Connection (RC) - Reserved",
            (None, 0x80) => "CNP",
            (None, _) => "Unknown",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;

    #[test]
    fn every_named_opcode_has_a_layout() {
        for op in Opcode::ALL {
            assert!(op.is_defined(), "{op:?}");
        }
        // And only those: 256 values, the named ones are exactly the defined ones.
        for v in 0..=255u8 {
            let op = Opcode(v);
            assert_eq!(op.is_known(), op.is_defined(), "{v:#x}");
        }
        assert_eq!(Opcode::ALL.len(), 23 + 12 + 22 + 2 + 1);
    }

    #[test]
    fn rxe_header_table() {
        use Headers as H;
        // rxe_opcode.c's masks, a few per family.
        assert_eq!(Opcode::RC_SEND_ONLY.headers(), H::NONE);
        assert_eq!(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE.headers(), H::IMMDT);
        assert_eq!(Opcode::RC_SEND_ONLY_WITH_INVALIDATE.headers(), H::IETH);
        assert_eq!(Opcode::RC_RDMA_WRITE_FIRST.headers(), H::RETH);
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.headers(),
            H::RETH | H::IMMDT
        );
        assert_eq!(Opcode::RC_RDMA_READ_REQUEST.headers(), H::RETH);
        assert_eq!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.headers(), H::NONE);
        assert_eq!(Opcode::RC_RDMA_READ_RESPONSE_LAST.headers(), H::AETH);
        assert_eq!(
            Opcode::RC_ATOMIC_ACKNOWLEDGE.headers(),
            H::AETH | H::ATOMIC_ACK_ETH
        );
        assert_eq!(Opcode::RC_FETCH_ADD.headers(), H::ATOMIC_ETH);
        assert_eq!(Opcode::UC_RDMA_WRITE_ONLY.headers(), H::RETH);
        assert_eq!(Opcode::UD_SEND_ONLY.headers(), H::DETH);
        assert_eq!(
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.headers(),
            H::DETH | H::IMMDT
        );
        assert_eq!(
            Opcode::RD_RDMA_WRITE_ONLY.headers(),
            H::RDETH | H::DETH | H::RETH
        );
        assert_eq!(Opcode::RD_ACKNOWLEDGE.headers(), H::RDETH | H::AETH);
        assert_eq!(Opcode::RD_RESYNC.headers(), H::RDETH | H::DETH);
        assert_eq!(Opcode::CNP.headers(), H::NONE);
        assert_eq!(Opcode(0x15).headers(), H::NONE);
        assert_eq!((H::RETH | H::IMMDT).len(), 20);
        assert_eq!((H::RDETH | H::DETH | H::ATOMIC_ETH).len(), 40);
    }

    #[test]
    fn classification() {
        assert_eq!(Opcode::UD_SEND_ONLY.transport(), Transport::Ud);
        assert_eq!(Opcode::UC_SEND_FIRST.transport(), Transport::Uc);
        assert_eq!(Opcode::RD_RESYNC.transport(), Transport::Rd);
        assert_eq!(Opcode::CNP.transport(), Transport::Cnp);
        assert_eq!(Opcode(0xa4).transport(), Transport::Xrc);
        assert_eq!(Opcode(0xe0).transport(), Transport::Vendor);

        assert!(Opcode::RC_RDMA_READ_REQUEST.is_request());
        assert!(!Opcode::RC_RDMA_READ_REQUEST.has_payload());
        assert!(Opcode::RC_RDMA_READ_RESPONSE_FIRST.is_response());
        assert!(Opcode::RC_ACKNOWLEDGE.is_response());
        assert!(!Opcode::RC_ACKNOWLEDGE.has_payload());
        assert!(!Opcode::CNP.is_request() && !Opcode::CNP.is_response());
        assert!(!Opcode(0x15).is_request() && !Opcode(0x15).is_response());

        assert_eq!(Opcode::RC_SEND_MIDDLE.position(), Some(Position::Middle));
        assert!(Opcode::RC_SEND_LAST_WITH_INVALIDATE.is_last());
        assert!(!Opcode::RC_SEND_LAST_WITH_INVALIDATE.is_first());
        assert!(Opcode::UD_SEND_ONLY.is_first() && Opcode::UD_SEND_ONLY.is_last());
        assert!(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.has_immediate());
        assert!(Opcode::RC_SEND_ONLY_WITH_INVALIDATE.is_send());
        assert!(!Opcode::RC_RDMA_WRITE_ONLY.is_send());
        assert!(Opcode::UC_RDMA_WRITE_LAST.is_rdma_write());
        assert!(!Opcode(0x2c).is_rdma_write());
        assert!(Opcode::RC_RDMA_READ_RESPONSE_ONLY.is_read_response());
        assert!(Opcode::RD_FETCH_ADD.is_atomic());
        assert!(!Opcode(0x33).is_atomic());
    }

    #[test]
    fn texts_as_tshark() {
        assert_eq!(
            Opcode::UD_SEND_ONLY.to_string(),
            "Unreliable Datagram (UD) - SEND only"
        );
        assert_eq!(
            Opcode::RC_RDMA_READ_RESPONSE_ONLY.to_string(),
            "Reliable Connection (RC) - RDMA READ response Only"
        );
        assert_eq!(
            Opcode(0x15).tshark_text(),
            "Reliable Connection (RC) - Reserved"
        );
        assert_eq!(Opcode(0xff).tshark_text(), "Unknown");
        assert_eq!(format!("{:?}", Opcode(0xff)), "Opcode(0xff)");
    }
}
