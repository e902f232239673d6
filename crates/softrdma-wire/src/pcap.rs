//! Capture files: a reader for classic pcap and pcapng, and a classic pcap writer.
//!
//! Formats (tcpdump.org "pcap-savefile" and the IETF pcapng draft):
//! - **classic pcap**: a 24-byte file header (magic 0xa1b2c3d4 for microsecond or 0xa1b23c4d
//!   for nanosecond timestamps, in the writer's byte order; version; zone; sigfigs; snaplen;
//!   link type), then records of a 16-byte header (seconds, sub-seconds, captured length,
//!   original length) and the captured bytes.
//! - **pcapng**: blocks of `type, total length, body, total length`. A Section Header Block
//!   (0x0a0d0d0a) sets the byte order through its 0x1a2b3c4d magic; Interface Description
//!   Blocks (1) give each interface its link type and timestamp resolution (`if_tsresol`);
//!   packets come in Enhanced Packet Blocks (6), Simple Packet Blocks (3) or obsolete Packet
//!   Blocks (2). Other blocks are skipped.
//!
//! The reader works on a byte slice and never panics: a truncated or corrupt file yields the
//! packets before the damage and then one [`PcapError`] saying what is wrong and where.
//! Unknown link types are kept as values.

use crate::link::LinkType;
use core::fmt;
use std::io::{self, Write};
use std::time::Duration;

/// Why a capture file could not be read (further).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PcapError {
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture { magic: Option<u32> },
    /// The file ends inside `what`, which starts at byte `offset`.
    Truncated { what: &'static str, offset: usize },
    /// A length field at byte `offset` is impossible.
    BadLength {
        what: &'static str,
        offset: usize,
        len: u64,
    },
    /// A packet names an interface no Interface Description Block declared.
    UnknownInterface { offset: usize, interface: u32 },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapError::NotACapture { magic: Some(m) } => write!(
                f,
                "not a pcap or pcapng capture file (first 4 bytes {m:#010x}); \
                 write captures with `tcpdump -w`, `dumpcap -w` or `--pcap FILE`"
            ),
            PcapError::NotACapture { magic: None } => {
                write!(
                    f,
                    "not a pcap or pcapng capture file (shorter than 4 bytes)"
                )
            }
            PcapError::Truncated { what, offset } => write!(
                f,
                "the capture file appears to have been cut short in the middle of {what} \
                 (at byte {offset})"
            ),
            PcapError::BadLength { what, offset, len } => {
                write!(
                    f,
                    "corrupt capture file: {what} at byte {offset} has impossible length {len}"
                )
            }
            PcapError::UnknownInterface { offset, interface } => write!(
                f,
                "corrupt capture file: the packet at byte {offset} names interface {interface}, \
                 which was never described"
            ),
        }
    }
}

impl std::error::Error for PcapError {}

/// Which kind of file it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap; `nanos` when timestamps are in nanoseconds, `big_endian` for the byte order.
    Pcap { nanos: bool, big_endian: bool },
    /// pcapng (the byte order of the first section).
    PcapNg { big_endian: bool },
}

/// One captured packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time since the Unix epoch.
    pub timestamp: Duration,
    /// How the data begins.
    pub linktype: LinkType,
    /// Length on the wire (may exceed `data.len()` when the capture was snapped).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The pcapng interface (0 for classic pcap).
    pub interface: u32,
}

const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
const NG_SHB: u32 = 0x0a0d_0d0a;
const NG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const NG_IDB: u32 = 1;
const NG_PB: u32 = 2;
const NG_SPB: u32 = 3;
const NG_EPB: u32 = 6;
/// Caps on lengths we believe, so a corrupt length cannot make us allocate or loop absurdly.
const MAX_BLOCK: usize = 256 << 20;

/// A pcapng interface as its IDB described it.
#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: LinkType,
    snaplen: u32,
    /// Timestamp units per second.
    units_per_sec: u64,
}

/// Reads the packets of a pcap or pcapng file held in memory.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    format: Format,
    big_endian: bool,
    // classic
    linktype: LinkType,
    nanos: bool,
    // pcapng
    interfaces: Vec<Interface>,
    done: bool,
}

fn rd_u16(b: &[u8], off: usize, be: bool) -> Option<u16> {
    let x: [u8; 2] = b.get(off..off.checked_add(2)?)?.try_into().ok()?;
    Some(if be {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    })
}

fn rd_u32(b: &[u8], off: usize, be: bool) -> Option<u32> {
    let x: [u8; 4] = b.get(off..off.checked_add(4)?)?.try_into().ok()?;
    Some(if be {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    })
}

impl<'a> Reader<'a> {
    /// This reader — its place in the file and what it has learnt (format, pcapng
    /// interfaces) — over `data`, which must begin with the bytes this reader was given (and
    /// may hold more). For input that arrives bit by bit (a pipe): keep
    /// `reader.continue_on(&[])` before each `next()`, and when that ends in
    /// [`PcapError::Truncated`] or `None` while more may come, read more and go on with
    /// `saved.continue_on(&longer)`.
    pub fn continue_on<'b>(&self, data: &'b [u8]) -> Reader<'b> {
        Reader {
            data,
            pos: self.pos,
            format: self.format,
            big_endian: self.big_endian,
            linktype: self.linktype,
            nanos: self.nanos,
            interfaces: self.interfaces.clone(),
            done: false,
        }
    }

    /// Recognises the file and reads its header.
    pub fn new(data: &'a [u8]) -> Result<Reader<'a>, PcapError> {
        let Some(magic_le) = rd_u32(data, 0, false) else {
            return Err(PcapError::NotACapture { magic: None });
        };
        let magic_be = magic_le.swap_bytes();
        let mut r = Reader {
            data,
            pos: 0,
            format: Format::Pcap {
                nanos: false,
                big_endian: false,
            },
            big_endian: false,
            linktype: LinkType(0),
            nanos: false,
            interfaces: Vec::new(),
            done: false,
        };
        match (magic_le, magic_be) {
            (PCAP_MAGIC_US, _) | (PCAP_MAGIC_NS, _) | (_, PCAP_MAGIC_US) | (_, PCAP_MAGIC_NS) => {
                let be = magic_be == PCAP_MAGIC_US || magic_be == PCAP_MAGIC_NS;
                let nanos = magic_le == PCAP_MAGIC_NS || magic_be == PCAP_MAGIC_NS;
                let lt = rd_u32(data, 20, be).ok_or(PcapError::Truncated {
                    what: "the pcap file header",
                    offset: 0,
                })?;
                r.big_endian = be;
                r.nanos = nanos;
                // The upper bits may carry FCS information (LINKTYPE_FCS_*); the type is the
                // low 16 bits.
                r.linktype = LinkType(lt & 0xffff);
                r.format = Format::Pcap {
                    nanos,
                    big_endian: be,
                };
                r.pos = 24;
            }
            (NG_SHB, _) => {
                let be = match rd_u32(data, 8, false) {
                    Some(NG_BYTE_ORDER_MAGIC) => false,
                    Some(m) if m.swap_bytes() == NG_BYTE_ORDER_MAGIC => true,
                    Some(_) => {
                        return Err(PcapError::NotACapture {
                            magic: Some(magic_be),
                        })
                    }
                    None => {
                        return Err(PcapError::Truncated {
                            what: "the section header block",
                            offset: 0,
                        })
                    }
                };
                r.big_endian = be;
                r.format = Format::PcapNg { big_endian: be };
            }
            _ => {
                return Err(PcapError::NotACapture {
                    magic: Some(magic_be),
                })
            }
        }
        Ok(r)
    }

    /// The kind of file.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The link type of a classic pcap file, or of the first pcapng interface seen so far.
    pub fn linktype(&self) -> Option<LinkType> {
        match self.format {
            Format::Pcap { .. } => Some(self.linktype),
            Format::PcapNg { .. } => self.interfaces.first().map(|i| i.linktype),
        }
    }

    fn next_classic(&mut self) -> Option<Result<Record<'a>, PcapError>> {
        let off = self.pos;
        if off >= self.data.len() {
            return None;
        }
        let be = self.big_endian;
        let trunc = PcapError::Truncated {
            what: "a packet record header",
            offset: off,
        };
        let (Some(sec), Some(sub), Some(caplen), Some(origlen)) = (
            rd_u32(self.data, off, be),
            rd_u32(self.data, off + 4, be),
            rd_u32(self.data, off + 8, be),
            rd_u32(self.data, off + 12, be),
        ) else {
            return Some(Err(trunc));
        };
        if caplen as usize > MAX_BLOCK {
            return Some(Err(PcapError::BadLength {
                what: "a packet record",
                offset: off,
                len: caplen.into(),
            }));
        }
        let start = off + 16;
        let Some(data) = self.data.get(start..start + caplen as usize) else {
            return Some(Err(PcapError::Truncated {
                what: "a packet",
                offset: off,
            }));
        };
        self.pos = start + caplen as usize;
        let nanos = if self.nanos {
            sub.min(999_999_999)
        } else {
            sub.min(999_999).saturating_mul(1000)
        };
        Some(Ok(Record {
            timestamp: Duration::new(sec.into(), nanos),
            linktype: self.linktype,
            orig_len: origlen,
            data,
            interface: 0,
        }))
    }

    fn timestamp(&self, iface: &Interface, hi: u32, lo: u32) -> Duration {
        let t = (u64::from(hi) << 32) | u64::from(lo);
        let ups = iface.units_per_sec.max(1);
        let secs = t / ups;
        let frac = t % ups;
        let nanos = (u128::from(frac) * 1_000_000_000 / u128::from(ups)) as u32;
        Duration::new(secs, nanos.min(999_999_999))
    }

    fn iface(&self, off: usize, id: u32) -> Result<Interface, PcapError> {
        self.interfaces
            .get(id as usize)
            .copied()
            .ok_or(PcapError::UnknownInterface {
                offset: off,
                interface: id,
            })
    }

    /// Reads an IDB's options for `if_tsresol` (code 9).
    fn parse_idb(&self, body: &[u8]) -> Option<Interface> {
        let be = self.big_endian;
        let linktype = LinkType(rd_u16(body, 0, be)?.into());
        let snaplen = rd_u32(body, 4, be)?;
        let mut units_per_sec = 1_000_000u64;
        let mut p = 8;
        while let (Some(code), Some(len)) = (rd_u16(body, p, be), rd_u16(body, p + 2, be)) {
            if code == 0 {
                break;
            }
            let v = body.get(p + 4..p + 4 + usize::from(len));
            if code == 9 && len >= 1 {
                if let Some(&r) = v.and_then(|v| v.first()) {
                    let exp = u32::from(r & 0x7f);
                    let base: u64 = if r & 0x80 != 0 { 2 } else { 10 };
                    units_per_sec = base.checked_pow(exp).unwrap_or(1_000_000);
                }
            }
            p += 4 + usize::from(len).div_ceil(4) * 4;
        }
        Some(Interface {
            linktype,
            snaplen,
            units_per_sec,
        })
    }

    fn next_ng(&mut self) -> Option<Result<Record<'a>, PcapError>> {
        loop {
            let off = self.pos;
            if off >= self.data.len() {
                return None;
            }
            let be = self.big_endian;
            let (Some(btype_raw), Some(_)) = (
                rd_u32(self.data, off, false),
                rd_u32(self.data, off + 4, be),
            ) else {
                return Some(Err(PcapError::Truncated {
                    what: "a block header",
                    offset: off,
                }));
            };
            // A new section may switch byte order: its SHB type is a palindrome.
            if btype_raw == NG_SHB {
                match rd_u32(self.data, off + 8, false) {
                    Some(NG_BYTE_ORDER_MAGIC) => self.big_endian = false,
                    Some(m) if m.swap_bytes() == NG_BYTE_ORDER_MAGIC => self.big_endian = true,
                    Some(m) => {
                        return Some(Err(PcapError::BadLength {
                            what: "a section header's byte-order magic",
                            offset: off,
                            len: m.into(),
                        }))
                    }
                    None => {
                        return Some(Err(PcapError::Truncated {
                            what: "a section header block",
                            offset: off,
                        }))
                    }
                }
                self.interfaces.clear();
            }
            let be = self.big_endian;
            let btype = rd_u32(self.data, off, be).unwrap_or(0);
            let blen = rd_u32(self.data, off + 4, be).unwrap_or(0) as usize;
            if blen < 12 || blen % 4 != 0 || blen > MAX_BLOCK {
                return Some(Err(PcapError::BadLength {
                    what: "a block",
                    offset: off,
                    len: blen as u64,
                }));
            }
            let Some(block) = self.data.get(off..off + blen) else {
                return Some(Err(PcapError::Truncated {
                    what: "a block",
                    offset: off,
                }));
            };
            self.pos = off + blen;
            let body = block.get(8..blen - 4).unwrap_or(&[]);
            match btype {
                NG_IDB => match self.parse_idb(body) {
                    Some(i) => self.interfaces.push(i),
                    None => {
                        return Some(Err(PcapError::Truncated {
                            what: "an interface description block",
                            offset: off,
                        }))
                    }
                },
                NG_EPB | NG_PB => {
                    let head = 20usize;
                    let (id, hi, lo, caplen, origlen) = if btype == NG_EPB {
                        (
                            rd_u32(body, 0, be),
                            rd_u32(body, 4, be),
                            rd_u32(body, 8, be),
                            rd_u32(body, 12, be),
                            rd_u32(body, 16, be),
                        )
                    } else {
                        (
                            rd_u16(body, 0, be).map(u32::from),
                            rd_u32(body, 4, be),
                            rd_u32(body, 8, be),
                            rd_u32(body, 12, be),
                            rd_u32(body, 16, be),
                        )
                    };
                    let (Some(id), Some(hi), Some(lo), Some(caplen), Some(origlen)) =
                        (id, hi, lo, caplen, origlen)
                    else {
                        return Some(Err(PcapError::Truncated {
                            what: "a packet block",
                            offset: off,
                        }));
                    };
                    let Some(data) = body.get(head..head.saturating_add(caplen as usize)) else {
                        return Some(Err(PcapError::BadLength {
                            what: "a packet block's captured length",
                            offset: off,
                            len: caplen.into(),
                        }));
                    };
                    let iface = match self.iface(off, id) {
                        Ok(i) => i,
                        Err(e) => return Some(Err(e)),
                    };
                    return Some(Ok(Record {
                        timestamp: self.timestamp(&iface, hi, lo),
                        linktype: iface.linktype,
                        orig_len: origlen,
                        data,
                        interface: id,
                    }));
                }
                NG_SPB => {
                    let Some(origlen) = rd_u32(body, 0, be) else {
                        return Some(Err(PcapError::Truncated {
                            what: "a simple packet block",
                            offset: off,
                        }));
                    };
                    let iface = match self.iface(off, 0) {
                        Ok(i) => i,
                        Err(e) => return Some(Err(e)),
                    };
                    let mut caplen = (origlen as usize).min(body.len().saturating_sub(4));
                    if iface.snaplen != 0 {
                        caplen = caplen.min(iface.snaplen as usize);
                    }
                    let data = body.get(4..4 + caplen).unwrap_or(&[]);
                    return Some(Ok(Record {
                        timestamp: Duration::ZERO,
                        linktype: iface.linktype,
                        orig_len: origlen,
                        data,
                        interface: 0,
                    }));
                }
                _ => {} // SHB (handled above), statistics, name resolution, custom...: skip.
            }
        }
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, PcapError>;

    /// The next packet; after an error, `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = match self.format {
            Format::Pcap { .. } => self.next_classic(),
            Format::PcapNg { .. } => self.next_ng(),
        };
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }
}

/// Writes a classic pcap file (little-endian, microsecond timestamps, snaplen 262144), the
/// format every tool reads.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    nanos: bool,
}

impl<W: Write> Writer<W> {
    /// Starts a file with microsecond timestamps.
    pub fn new(out: W, linktype: LinkType) -> io::Result<Writer<W>> {
        Writer::with_resolution(out, linktype, false)
    }

    /// Starts a file; `nanos` selects nanosecond timestamps.
    pub fn with_resolution(mut out: W, linktype: LinkType, nanos: bool) -> io::Result<Writer<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&(if nanos { PCAP_MAGIC_NS } else { PCAP_MAGIC_US }).to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&262_144u32.to_le_bytes());
        h.extend_from_slice(&linktype.0.to_le_bytes());
        out.write_all(&h)?;
        Ok(Writer { out, nanos })
    }

    /// Appends one packet captured at `timestamp` (since the Unix epoch), whole.
    pub fn write_packet(&mut self, timestamp: Duration, data: &[u8]) -> io::Result<()> {
        let len = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet too long"))?;
        let sub = if self.nanos {
            timestamp.subsec_nanos()
        } else {
            timestamp.subsec_micros()
        };
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(timestamp.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&sub.to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Reads every packet of a file held in memory: the packets read, and the error that stopped
/// reading early, if any.
pub fn read_all(data: &[u8]) -> Result<(Vec<Record<'_>>, Option<PcapError>), PcapError> {
    let reader = Reader::new(data)?;
    let mut out = Vec::new();
    for r in reader {
        match r {
            Ok(rec) => out.push(rec),
            Err(e) => return Ok((out, Some(e))),
        }
    }
    Ok((out, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), LinkType::ETHERNET).unwrap();
        w.write_packet(Duration::new(1_796_045_178, 574_630_000), &[1, 2, 3])
            .unwrap();
        w.write_packet(Duration::new(1_796_045_179, 1_000), &[4; 60])
            .unwrap();
        w.into_inner()
    }

    /// Fed a byte at a time, as from a pipe, a reader that goes on where it stopped yields
    /// every packet of a file once, pcap and pcapng alike.
    #[test]
    fn continue_on_longer_input() {
        let ng = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/captures/d_reject.pcapng"),
        )
        .unwrap();
        for file in [sample(), ng] {
            let whole: Vec<Vec<u8>> = Reader::new(&file)
                .unwrap()
                .map(|r| r.unwrap().data.to_vec())
                .collect();
            let mut got = Vec::new();
            let mut saved: Option<Reader<'static>> = None;
            let mut n = 0;
            while n <= file.len() {
                let buf = &file[..n];
                let mut r = match &saved {
                    Some(s) => s.continue_on(buf),
                    None => match Reader::new(buf) {
                        Ok(r) => r,
                        Err(_) => {
                            n += 1;
                            continue;
                        }
                    },
                };
                let before = r.continue_on(&[]);
                match r.next() {
                    Some(Ok(rec)) => {
                        got.push(rec.data.to_vec());
                        saved = Some(r.continue_on(&[]));
                    }
                    Some(Err(PcapError::Truncated { .. })) | None => {
                        saved = Some(before);
                        n += 1;
                    }
                    Some(Err(e)) => panic!("{e}"),
                }
            }
            assert_eq!(got, whole);
        }
    }

    #[test]
    fn write_then_read() {
        let f = sample();
        let (recs, err) = read_all(&f).unwrap();
        assert!(err.is_none());
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].data, &[1, 2, 3]);
        assert_eq!(recs[0].linktype, LinkType::ETHERNET);
        assert_eq!(recs[0].timestamp, Duration::new(1_796_045_178, 574_630_000));
        assert_eq!(recs[1].timestamp, Duration::new(1_796_045_179, 1_000));
        assert_eq!(recs[1].orig_len, 60);
    }

    #[test]
    fn big_endian_nanos() {
        let mut f = Vec::new();
        f.extend_from_slice(&PCAP_MAGIC_NS.to_be_bytes());
        f.extend_from_slice(&2u16.to_be_bytes());
        f.extend_from_slice(&4u16.to_be_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_be_bytes());
        f.extend_from_slice(&113u32.to_be_bytes());
        f.extend_from_slice(&5u32.to_be_bytes());
        f.extend_from_slice(&7u32.to_be_bytes());
        f.extend_from_slice(&2u32.to_be_bytes());
        f.extend_from_slice(&9u32.to_be_bytes());
        f.extend_from_slice(&[0xaa, 0xbb]);
        let r = Reader::new(&f).unwrap();
        assert_eq!(
            r.format(),
            Format::Pcap {
                nanos: true,
                big_endian: true
            }
        );
        let recs: Vec<_> = r.collect::<Result<_, _>>().unwrap();
        assert_eq!(recs[0].linktype, LinkType::LINUX_SLL);
        assert_eq!(recs[0].timestamp, Duration::new(5, 7));
        assert_eq!(recs[0].data, &[0xaa, 0xbb]);
        assert_eq!(recs[0].orig_len, 9);
    }

    fn ng_block(be: bool, ty: u32, body: &[u8]) -> Vec<u8> {
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut b = Vec::new();
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let len = 12 + body.len() as u32;
        b.extend_from_slice(&w(ty));
        b.extend_from_slice(&w(len));
        b.extend_from_slice(&body);
        b.extend_from_slice(&w(len));
        b
    }

    fn ng_file(be: bool) -> Vec<u8> {
        let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut f = Vec::new();
        let mut shb = Vec::new();
        shb.extend_from_slice(&w32(NG_BYTE_ORDER_MAGIC));
        shb.extend_from_slice(&w16(1));
        shb.extend_from_slice(&w16(0));
        shb.extend_from_slice(&[0xff; 8]);
        f.extend(ng_block(be, NG_SHB, &shb));
        // Interface 0: Ethernet, nanosecond resolution (if_tsresol = 9).
        let mut idb = Vec::new();
        idb.extend_from_slice(&w16(1));
        idb.extend_from_slice(&w16(0));
        idb.extend_from_slice(&w32(0));
        idb.extend_from_slice(&w16(9));
        idb.extend_from_slice(&w16(1));
        idb.extend_from_slice(&[9, 0, 0, 0]);
        idb.extend_from_slice(&[0, 0, 0, 0]);
        f.extend(ng_block(be, NG_IDB, &idb));
        // Interface 1: SLL2, default microseconds.
        let mut idb = Vec::new();
        idb.extend_from_slice(&w16(276));
        idb.extend_from_slice(&w16(0));
        idb.extend_from_slice(&w32(0));
        f.extend(ng_block(be, NG_IDB, &idb));
        // A name-resolution block to skip.
        f.extend(ng_block(be, 4, &[0, 0, 0, 0]));
        let epb = |iface: u32, ts: u64, data: &[u8]| {
            let mut e = Vec::new();
            e.extend_from_slice(&w32(iface));
            e.extend_from_slice(&w32((ts >> 32) as u32));
            e.extend_from_slice(&w32(ts as u32));
            e.extend_from_slice(&w32(data.len() as u32));
            e.extend_from_slice(&w32(data.len() as u32 + 10));
            e.extend_from_slice(data);
            ng_block(be, NG_EPB, &e)
        };
        f.extend(epb(0, 1_500_000_000_123_456_789, &[1, 2, 3, 4, 5]));
        f.extend(epb(1, 1_500_000_000_000_002, &[6]));
        let mut spb = Vec::new();
        spb.extend_from_slice(&w32(3));
        spb.extend_from_slice(&[7, 8, 9]);
        f.extend(ng_block(be, NG_SPB, &spb));
        f
    }

    #[test]
    fn pcapng_both_orders() {
        for be in [false, true] {
            let f = ng_file(be);
            let (recs, err) = read_all(&f).unwrap();
            assert!(err.is_none(), "{err:?}");
            assert_eq!(recs.len(), 3);
            assert_eq!(recs[0].linktype, LinkType::ETHERNET);
            assert_eq!(recs[0].data, &[1, 2, 3, 4, 5]);
            assert_eq!(recs[0].orig_len, 15);
            assert_eq!(recs[0].timestamp, Duration::new(1_500_000_000, 123_456_789));
            assert_eq!(recs[1].linktype, LinkType::LINUX_SLL2);
            assert_eq!(recs[1].interface, 1);
            assert_eq!(recs[1].timestamp, Duration::new(1_500_000_000, 2_000));
            assert_eq!(recs[2].data, &[7, 8, 9]);
        }
    }

    #[test]
    fn truncation_never_panics() {
        for f in [sample(), ng_file(false), ng_file(true)] {
            for n in 0..f.len() {
                let cut = &f[..n];
                match read_all(cut) {
                    Ok((_, Some(e))) => assert!(!e.to_string().is_empty()),
                    Ok((_, None)) => {}
                    Err(e) => assert!(!e.to_string().is_empty()),
                }
            }
            // Garbage in every byte position.
            for i in 0..f.len() {
                let mut g = f.clone();
                g[i] ^= 0xa5;
                let _ = read_all(&g);
            }
        }
        assert!(matches!(
            Reader::new(b"hello world"),
            Err(PcapError::NotACapture { .. })
        ));
    }
}
