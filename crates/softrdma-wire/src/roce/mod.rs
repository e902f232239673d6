//! RoCEv2 transport: the InfiniBand transport headers carried in UDP (port 4791).
//!
//! A RoCEv2 UDP payload is (IBTA Annex A17.4, Vol 1 §9.2-9.3):
//!
//! ```text
//! BTH (12) | extension headers the opcode implies | payload | pad (BTH.PadCnt) | ICRC (4)
//! ```
//! One file per header (`bth`, `rdeth`, `deth`, `reth`, `atomic_eth`, `aeth`,
//! `atomic_ack_eth`, `immdt`, `ieth`), the opcode table in `opcode`, 24-bit PSN arithmetic in
//! `psn`; this module puts them together: [`RocePacket`] is a checked zero-copy view of a whole
//! UDP payload, [`RoceRepr`] its decoded form that re-emits the exact bytes. The ICRC's value
//! is computed and checked in [`crate::icrc`], which needs the IP and UDP headers.

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod ieth;
pub mod immdt;
pub mod opcode;
pub mod psn;
pub mod rdeth;
pub mod reth;

pub use aeth::{
    AckKind, NakCode, Packet as AethPacket, Repr as AethRepr, RnrTimer, Syndrome, ACK_UNLIMITED,
};
pub use atomic_ack_eth::{Packet as AtomicAckEthPacket, Repr as AtomicAckEthRepr};
pub use atomic_eth::{Packet as AtomicEthPacket, Repr as AtomicEthRepr};
pub use bth::{Packet as BthPacket, Repr as BthRepr};
pub use deth::{Packet as DethPacket, Repr as DethRepr};
pub use ieth::{Packet as IethPacket, Repr as IethRepr};
pub use immdt::{Packet as ImmDtPacket, Repr as ImmDtRepr};
pub use opcode::{Headers, Opcode, Position, Transport};
pub use psn::Psn;
pub use rdeth::{Packet as RdethPacket, Repr as RdethRepr};
pub use reth::{Packet as RethPacket, Repr as RethRepr};

use crate::dissect::{Dissect, Tree};
use crate::icrc::ICRC_LEN;
use crate::{Error, Result};

/// Where each header of a RoCE packet lies, worked out from the BTH alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    headers: Headers,
    /// Offset of the payload (end of the last extension header).
    payload_start: usize,
    /// End of the payload, start of the pad bytes.
    payload_end: usize,
    /// Start of the ICRC.
    icrc_start: usize,
}

/// The extension headers in wire order, with their lengths and error names.
const ORDER: [(Headers, usize, &str); 8] = [
    (Headers::RDETH, rdeth::HEADER_LEN, "rdeth"),
    (Headers::DETH, deth::HEADER_LEN, "deth"),
    (Headers::RETH, reth::HEADER_LEN, "reth"),
    (Headers::ATOMIC_ETH, atomic_eth::HEADER_LEN, "atomic_eth"),
    (Headers::AETH, aeth::HEADER_LEN, "aeth"),
    (
        Headers::ATOMIC_ACK_ETH,
        atomic_ack_eth::HEADER_LEN,
        "atomic_ack_eth",
    ),
    (Headers::IMMDT, immdt::HEADER_LEN, "immdt"),
    (Headers::IETH, ieth::HEADER_LEN, "ieth"),
];

/// Offset of extension header `which` (one flag) in a packet with `headers`.
fn header_offset(headers: Headers, which: Headers) -> Option<usize> {
    if !headers.contains(which) {
        return None;
    }
    let mut off = bth::HEADER_LEN;
    for (h, len, _) in ORDER {
        if h == which {
            return Some(off);
        }
        if headers.contains(h) {
            off += len;
        }
    }
    None
}

fn layout(buf: &[u8]) -> Result<Layout> {
    let b = BthPacket::new_checked(buf)?;
    let headers = b.opcode().headers();
    let mut off = bth::HEADER_LEN;
    for (h, len, what) in ORDER {
        if headers.contains(h) {
            Error::check_len(what, off + len, buf.len())?;
            off += len;
        }
    }
    let icrc_start = buf
        .len()
        .checked_sub(ICRC_LEN)
        .filter(|s| *s >= off)
        .ok_or(Error::Truncated {
            what: "roce.icrc",
            need: off + ICRC_LEN,
            got: buf.len(),
        })?;
    let pad = usize::from(b.pad_count());
    let payload_end = icrc_start
        .checked_sub(pad)
        .filter(|e| *e >= off)
        .ok_or(Error::BadValue {
            field: "bth.pad_count",
            value: pad as u64,
        })?;
    Ok(Layout {
        headers,
        payload_start: off,
        payload_end,
        icrc_start,
    })
}

/// A checked, zero-copy view of a whole RoCEv2 UDP payload.
///
/// `new_checked` validates that the BTH, every extension header its opcode implies, the pad
/// bytes and the ICRC fit; after that no accessor panics. Unknown opcodes have no extension
/// headers: everything between the BTH and the pad is payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
    layout: Layout,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    pub fn new_checked(buffer: T) -> Result<RocePacket<T>> {
        let layout = layout(buffer.as_ref())?;
        Ok(RocePacket { buffer, layout })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn slice(&self, start: usize, len: usize) -> &[u8] {
        self.buffer.as_ref().get(start..start + len).unwrap_or(&[])
    }

    fn ext(&self, which: Headers, len: usize) -> Option<&[u8]> {
        header_offset(self.layout.headers, which).map(|o| self.slice(o, len))
    }

    pub fn bth(&self) -> BthPacket<&[u8]> {
        BthPacket::new_unchecked(self.slice(0, bth::HEADER_LEN))
    }
    pub fn opcode(&self) -> Opcode {
        self.bth().opcode()
    }
    /// The extension headers present.
    pub fn headers(&self) -> Headers {
        self.layout.headers
    }
    pub fn rdeth(&self) -> Option<RdethPacket<&[u8]>> {
        self.ext(Headers::RDETH, rdeth::HEADER_LEN)
            .map(RdethPacket::new_unchecked)
    }
    pub fn deth(&self) -> Option<DethPacket<&[u8]>> {
        self.ext(Headers::DETH, deth::HEADER_LEN)
            .map(DethPacket::new_unchecked)
    }
    pub fn reth(&self) -> Option<RethPacket<&[u8]>> {
        self.ext(Headers::RETH, reth::HEADER_LEN)
            .map(RethPacket::new_unchecked)
    }
    pub fn atomic_eth(&self) -> Option<AtomicEthPacket<&[u8]>> {
        self.ext(Headers::ATOMIC_ETH, atomic_eth::HEADER_LEN)
            .map(AtomicEthPacket::new_unchecked)
    }
    pub fn aeth(&self) -> Option<AethPacket<&[u8]>> {
        self.ext(Headers::AETH, aeth::HEADER_LEN)
            .map(AethPacket::new_unchecked)
    }
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEthPacket<&[u8]>> {
        self.ext(Headers::ATOMIC_ACK_ETH, atomic_ack_eth::HEADER_LEN)
            .map(AtomicAckEthPacket::new_unchecked)
    }
    pub fn immdt(&self) -> Option<ImmDtPacket<&[u8]>> {
        self.ext(Headers::IMMDT, immdt::HEADER_LEN)
            .map(ImmDtPacket::new_unchecked)
    }
    pub fn ieth(&self) -> Option<IethPacket<&[u8]>> {
        self.ext(Headers::IETH, ieth::HEADER_LEN)
            .map(IethPacket::new_unchecked)
    }

    /// Length of the BTH and extension headers.
    pub fn header_len(&self) -> usize {
        self.layout.payload_start
    }
    /// The payload, without the pad bytes.
    pub fn payload(&self) -> &[u8] {
        let l = &self.layout;
        self.slice(l.payload_start, l.payload_end - l.payload_start)
    }
    /// The pad bytes (BTH.PadCnt of them; zero on a well-formed packet).
    pub fn pad(&self) -> &[u8] {
        let l = &self.layout;
        self.slice(l.payload_end, l.icrc_start - l.payload_end)
    }
    /// The ICRC as stored (the 4 trailing bytes read little-endian, see [`crate::icrc`]).
    pub fn icrc(&self) -> u32 {
        let b = self.slice(self.layout.icrc_start, ICRC_LEN);
        match b {
            &[a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => 0,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    fn slice_mut(&mut self, start: usize, len: usize) -> &mut [u8] {
        match self.buffer.as_mut().get_mut(start..start + len) {
            Some(s) => s,
            None => &mut [],
        }
    }
    /// The BTH, writable (changing the opcode or pad count invalidates this view's layout:
    /// re-check the buffer afterwards).
    pub fn bth_mut(&mut self) -> BthPacket<&mut [u8]> {
        BthPacket::new_unchecked(self.slice_mut(0, bth::HEADER_LEN))
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.layout;
        self.slice_mut(l.payload_start, l.payload_end - l.payload_start)
    }
    /// Writes the ICRC (little-endian).
    pub fn set_icrc(&mut self, icrc: u32) {
        let s = self.layout.icrc_start;
        self.slice_mut(s, ICRC_LEN)
            .copy_from_slice(&icrc.to_le_bytes());
    }
}

/// A decoded RoCEv2 UDP payload. Borrows the payload and pad bytes from the parsed buffer.
///
/// `emit` writes the headers that are `Some` in wire order, whatever the opcode says: a
/// `Repr` built by hand should match [`Opcode::headers`] (see [`Repr::headers_match_opcode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub bth: BthRepr,
    pub rdeth: Option<RdethRepr>,
    pub deth: Option<DethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub immdt: Option<ImmDtRepr>,
    pub ieth: Option<IethRepr>,
    /// The payload without the pad bytes.
    pub payload: &'a [u8],
    /// The pad bytes as on the wire; their number should equal `bth.pad_count`.
    pub pad: &'a [u8],
    /// The ICRC value (stored little-endian; compute it with [`crate::icrc`]).
    pub icrc: u32,
}

/// The pad count that makes a payload of `len` bytes a multiple of 4.
pub const fn pad_count_for(len: usize) -> u8 {
    ((4 - (len % 4)) % 4) as u8
}

/// Zero bytes to borrow as padding.
pub const ZERO_PAD: [u8; 3] = [0; 3];

impl<'a> Repr<'a> {
    /// A packet with just a BTH, an empty payload and a zero ICRC; set the extension headers
    /// and payload, then [`Repr::set_payload`].
    pub fn new(bth: BthRepr) -> Repr<'a> {
        Repr {
            bth,
            rdeth: None,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload: &[],
            pad: &[],
            icrc: 0,
        }
    }

    /// Sets the payload with zero padding to a multiple of 4 bytes and the BTH pad count.
    pub fn set_payload(&mut self, payload: &'a [u8]) {
        let pad = pad_count_for(payload.len());
        self.payload = payload;
        self.pad = &ZERO_PAD[..usize::from(pad)];
        self.bth.pad_count = pad;
    }

    /// Reads a checked view.
    pub fn parse_packet<T: AsRef<[u8]>>(p: &'a RocePacket<T>) -> Repr<'a> {
        Repr {
            bth: BthRepr::parse_packet(&p.bth()),
            rdeth: p.rdeth().map(|h| RdethRepr::parse_packet(&h)),
            deth: p.deth().map(|h| DethRepr::parse_packet(&h)),
            reth: p.reth().map(|h| RethRepr::parse_packet(&h)),
            atomic_eth: p.atomic_eth().map(|h| AtomicEthRepr::parse_packet(&h)),
            aeth: p.aeth().map(|h| AethRepr::parse_packet(&h)),
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|h| AtomicAckEthRepr::parse_packet(&h)),
            immdt: p.immdt().map(|h| ImmDtRepr::parse_packet(&h)),
            ieth: p.ieth().map(|h| IethRepr::parse_packet(&h)),
            payload: p.payload(),
            pad: p.pad(),
            icrc: p.icrc(),
        }
    }

    /// Parses a whole RoCEv2 UDP payload (BTH through ICRC).
    pub fn parse(buf: &'a [u8]) -> Result<Repr<'a>> {
        let l = layout(buf)?;
        let at = |which: Headers| header_offset(l.headers, which).and_then(|o| buf.get(o..));
        let sub = |s: usize, e: usize| buf.get(s..e).unwrap_or(&[]);
        Ok(Repr {
            bth: BthRepr::parse(buf)?,
            rdeth: at(Headers::RDETH).map(RdethRepr::parse).transpose()?,
            deth: at(Headers::DETH).map(DethRepr::parse).transpose()?,
            reth: at(Headers::RETH).map(RethRepr::parse).transpose()?,
            atomic_eth: at(Headers::ATOMIC_ETH)
                .map(AtomicEthRepr::parse)
                .transpose()?,
            aeth: at(Headers::AETH).map(AethRepr::parse).transpose()?,
            atomic_ack_eth: at(Headers::ATOMIC_ACK_ETH)
                .map(AtomicAckEthRepr::parse)
                .transpose()?,
            immdt: at(Headers::IMMDT).map(ImmDtRepr::parse).transpose()?,
            ieth: at(Headers::IETH).map(IethRepr::parse).transpose()?,
            payload: sub(l.payload_start, l.payload_end),
            pad: sub(l.payload_end, l.icrc_start),
            icrc: stored_icrc(sub(l.icrc_start, buf.len())),
        })
    }

    /// The extension headers this `Repr` holds.
    pub fn headers(&self) -> Headers {
        let mut h = Headers::NONE;
        let flags = [
            (self.rdeth.is_some(), Headers::RDETH),
            (self.deth.is_some(), Headers::DETH),
            (self.reth.is_some(), Headers::RETH),
            (self.atomic_eth.is_some(), Headers::ATOMIC_ETH),
            (self.aeth.is_some(), Headers::AETH),
            (self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), Headers::IMMDT),
            (self.ieth.is_some(), Headers::IETH),
        ];
        for (present, f) in flags {
            if present {
                h = h | f;
            }
        }
        h
    }

    /// Whether the headers present are exactly those the opcode implies (always true after
    /// `parse`), and the pad matches the pad count — i.e. whether `emit` output parses back
    /// to `self`.
    pub fn headers_match_opcode(&self) -> bool {
        self.headers() == self.bth.opcode.headers()
            && self.pad.len() == usize::from(self.bth.pad_count)
    }

    /// Length of BTH + extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.headers().len()
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + self.pad.len() + ICRC_LEN
    }

    /// Writes the packet into `buf`, exactly `buffer_len()` bytes long.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "roce: emit buffer length");
        let h = self.header_len();
        self.emit_header(&mut buf[..h]);
        let rest = &mut buf[h..];
        let (p, rest) = rest.split_at_mut(self.payload.len());
        p.copy_from_slice(self.payload);
        let (pad, icrc) = rest.split_at_mut(self.pad.len());
        pad.copy_from_slice(self.pad);
        icrc.copy_from_slice(&self.icrc.to_le_bytes());
    }

    /// Writes the BTH and extension headers only into `buf`, exactly `header_len()` bytes
    /// long: for a sender that hands the payload to the socket from where it lies instead
    /// of copying it after the headers.
    pub fn emit_header(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            self.header_len(),
            "roce: emit_header buffer length"
        );
        let mut off = 0;
        let mut put = |len: usize, f: &dyn Fn(&mut [u8])| {
            f(&mut buf[off..off + len]);
            off += len;
        };
        put(bth::HEADER_LEN, &|b| self.bth.emit(b));
        if let Some(h) = &self.rdeth {
            put(rdeth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.deth {
            put(deth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.reth {
            put(reth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.atomic_eth {
            put(atomic_eth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.aeth {
            put(aeth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.atomic_ack_eth {
            put(atomic_ack_eth::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.immdt {
            put(immdt::HEADER_LEN, &|b| h.emit(b));
        }
        if let Some(h) = &self.ieth {
            put(ieth::HEADER_LEN, &|b| h.emit(b));
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v);
        v
    }

    /// The headers and the ICRC as tshark's "InfiniBand" tree shows them, without the
    /// payload (which the decoder dissects as a MAD, an SRP IU, or plain data).
    pub fn dissect_headers(&self, t: &mut Tree) {
        self.bth.dissect(t);
        if let Some(h) = &self.rdeth {
            h.dissect(t);
        }
        if let Some(h) = &self.deth {
            h.dissect(t);
        }
        if let Some(h) = &self.reth {
            h.dissect(t);
        }
        if let Some(h) = &self.atomic_eth {
            h.dissect(t);
        }
        if let Some(h) = &self.aeth {
            h.dissect(t);
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.dissect(t);
        }
        if let Some(h) = &self.immdt {
            h.dissect(t);
        }
        if let Some(h) = &self.ieth {
            h.dissect(t);
        }
        // tshark reads the trailer big-endian: it shows the wire bytes in order.
        t.hex("icrc", "Invariant CRC", self.icrc.swap_bytes(), 8);
    }
}

fn stored_icrc(b: &[u8]) -> u32 {
    match b {
        &[a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

impl Dissect for Repr<'_> {
    /// Headers, ICRC, then the payload as "Data" (and any pad bytes as "Padding").
    fn dissect(&self, t: &mut Tree) {
        self.dissect_headers(t);
        if !self.payload.is_empty() {
            t.bytes("data", "Data", self.payload);
        }
        if !self.pad.is_empty() {
            t.bytes("pad", "Padding", self.pad);
        }
    }
}

/// The composite types under the names the crate uses elsewhere.
pub type RoceRepr<'a> = Repr<'a>;

#[cfg(test)]
pub(crate) mod tests;
