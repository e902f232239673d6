//! The IPv4 header (RFC 791), options included.
//!
//! RoCEv2 cares about more of this header than most protocols do: the ICRC covers it with only
//! TOS, TTL and the checksum masked (IBTA Annex A17, RoCEv2 §A17.4.5.1), so identification and
//! flags must be reproduced exactly. The `Repr` therefore keeps every field as captured,
//! the checksum included; [`checksum`] computes a fresh one for senders.

use super::{addr_leaf, group, leaf, set_text};
use crate::dissect::{Dissect, Tree, Value};
use crate::field::{Bits, Field};
use crate::{Error, Result};
use std::net::Ipv4Addr;

code_point! {
    /// The IP protocol number (also IPv6's Next Header).
    pub struct IpProtocol(u8) {
        HOPOPT = 0 => "IPv6 Hop-by-Hop Option",
        ICMP = 1 => "ICMP",
        IGMP = 2 => "IGMP",
        TCP = 6 => "TCP",
        UDP = 17 => "UDP",
        IPV6_ROUTE = 43 => "Routing Header for IPv6",
        IPV6_FRAG = 44 => "Fragment Header for IPv6",
        ICMPV6 = 58 => "ICMPv6",
        IPV6_NONXT = 59 => "No Next Header for IPv6",
        IPV6_OPTS = 60 => "Destination Options for IPv6",
    }
}

mod field {
    use super::{Bits, Field};
    pub const VERSION: Bits = Bits::new(0, 0, 4);
    pub const IHL: Bits = Bits::new(0, 4, 4);
    pub const DSCP: Bits = Bits::new(1, 0, 6);
    pub const ECN: Bits = Bits::new(1, 6, 2);
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS: Bits = Bits::new(6, 0, 3);
    pub const FRAG_OFFSET: Bits = Bits::new(6, 3, 13);
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// Flag bits within the 3-bit flags field.
pub const FLAG_RESERVED: u8 = 0b100;
pub const FLAG_DF: u8 = 0b010;
pub const FLAG_MF: u8 = 0b001;

/// The flag bits as tshark shows them: (key, label, name in the Flags summary, bit).
const FLAG_BITS: [(&str, &str, &str, u8); 3] = [
    ("rb", "Reserved bit", "Reserved", FLAG_RESERVED),
    ("df", "Don't fragment", "Don't fragment", FLAG_DF),
    ("mf", "More fragments", "More fragments", FLAG_MF),
];

/// A zero-copy view of an IPv4 header (and what follows it).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

bit_accessors! {
    version / set_version: u8 = field::VERSION;
    /// The header length in 32-bit words.
    ihl / set_ihl: u8 = field::IHL;
    dscp / set_dscp: u8 = field::DSCP;
    ecn / set_ecn: u8 = field::ECN;
    flags / set_flags: u8 = field::FLAGS;
    frag_offset / set_frag_offset: u16 = field::FRAG_OFFSET;
}

be_fields!(Packet {
    total_len, set_total_len: u16 @ field::TOTAL_LEN;
    ident, set_ident: u16 @ field::IDENT;
    ttl, set_ttl: u8 @ field::TTL;
    checksum, set_checksum: u16 @ field::CHECKSUM;
});

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Checks that the buffer holds the fixed header and the options the IHL announces, and
    /// that the IHL is at least 5. The total length is not checked against the buffer here
    /// (captures may be snapped); [`Packet::payload`] clips to what is there.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet { buffer };
        let len = p.buffer.as_ref().len();
        Error::check_len("ip", MIN_HEADER_LEN, len)?;
        if p.ihl() < 5 {
            return Err(Error::BadValue {
                field: "ip.hdr_len",
                value: p.ihl().into(),
            });
        }
        Error::check_len("ip.options", p.header_len(), len)?;
        Ok(p)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.b()[field::PROTOCOL])
    }
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b()[12], self.b()[13], self.b()[14], self.b()[15])
    }
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b()[16], self.b()[17], self.b()[18], self.b()[19])
    }
    /// The option bytes (empty for a 20-byte header).
    pub fn options(&self) -> &[u8] {
        self.b()
            .get(MIN_HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }
    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum(self.b().get(..self.header_len()).unwrap_or(&[])) == 0
    }
    /// The payload: from the end of the header to the total length, clipped to the buffer.
    pub fn payload(&self) -> &[u8] {
        let b = self.b();
        let end = usize::from(self.total_len()).clamp(self.header_len(), b.len());
        b.get(self.header_len()..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_protocol(&mut self, v: IpProtocol) {
        self.bm()[field::PROTOCOL] = v.0;
    }
    pub fn set_src(&mut self, v: Ipv4Addr) {
        self.bm()[field::SRC].copy_from_slice(&v.octets());
    }
    pub fn set_dst(&mut self, v: Ipv4Addr) {
        self.bm()[field::DST].copy_from_slice(&v.octets());
    }
    /// Computes and writes the header checksum (the header must be `header_len()` long).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum(self.buffer.as_ref().get(..hl).unwrap_or(&[]));
        self.set_checksum(c);
    }
}

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of the ones' complement
/// sum. Over a header whose checksum field is right, it is 0.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub dscp: u8,
    pub ecn: u8,
    /// Header + payload length in bytes.
    pub total_len: u16,
    pub ident: u16,
    /// The 3 flag bits (reserved, DF, MF), `FLAG_*`.
    pub flags: u8,
    pub frag_offset: u16,
    pub ttl: u8,
    pub protocol: IpProtocol,
    /// The checksum as captured (see [`Repr::fill_checksum`]).
    pub checksum: u16,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// Option bytes, a multiple of 4 long (at most 40).
    pub options: Vec<u8>,
}

impl Repr {
    /// Parses the header at the start of `buf`; the version must be 4.
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        if p.version() != 4 {
            return Err(Error::BadValue {
                field: "ip.version",
                value: p.version().into(),
            });
        }
        if usize::from(p.total_len()) < p.header_len() {
            return Err(Error::BadLength {
                what: "ip.len",
                len: p.total_len().into(),
            });
        }
        Ok(Repr {
            dscp: p.dscp(),
            ecn: p.ecn(),
            total_len: p.total_len(),
            ident: p.ident(),
            flags: p.flags(),
            frag_offset: p.frag_offset(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            checksum: p.checksum(),
            src: p.src(),
            dst: p.dst(),
            options: p.options().to_vec(),
        })
    }

    /// Header length in bytes (20 + options).
    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Payload length by the total length field.
    pub fn payload_len(&self) -> usize {
        usize::from(self.total_len).saturating_sub(self.buffer_len())
    }

    /// Writes the header; `buf` must be exactly `buffer_len()` long and options a multiple
    /// of 4 bytes, at most 40.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "ip: emit buffer length");
        assert!(
            self.options.len() % 4 == 0 && self.options.len() <= 40,
            "ip: options length"
        );
        let mut p = Packet::new_unchecked(&mut *buf);
        p.set_version(4);
        p.set_ihl((self.buffer_len() / 4) as u8);
        p.set_dscp(self.dscp);
        p.set_ecn(self.ecn);
        p.set_total_len(self.total_len);
        p.set_ident(self.ident);
        p.set_flags(self.flags);
        p.set_frag_offset(self.frag_offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_checksum(self.checksum);
        p.set_src(self.src);
        p.set_dst(self.dst);
        buf[MIN_HEADER_LEN..].copy_from_slice(&self.options);
    }

    to_bytes!();

    /// Sets `checksum` to the right value for the other fields.
    pub fn fill_checksum(&mut self) {
        self.checksum = 0;
        self.checksum = checksum(&self.to_bytes());
    }

    pub fn title(&self) -> String {
        format!(
            "Internet Protocol Version 4, Src: {}, Dst: {}",
            self.src, self.dst
        )
    }
}

/// tshark's name of a DSCP value.
pub(crate) fn dscp_name(d: u8) -> String {
    match d {
        0 => "CS0".into(),
        8 | 16 | 24 | 32 | 40 | 48 | 56 => format!("CS{}", d / 8),
        10 | 12 | 14 | 18 | 20 | 22 | 26 | 28 | 30 | 34 | 36 | 38 => {
            format!("AF{}{}", d / 8, (d % 8) / 2)
        }
        46 => "EF PHB".into(),
        _ => format!("Unknown ({d})"),
    }
}

fn dscp_long(d: u8) -> String {
    match d {
        0 => "Default (0)".into(),
        _ => format!("{} ({d})", dscp_name(d)),
    }
}

pub(crate) fn ecn_short(e: u8) -> &'static str {
    match e {
        0 => "Not-ECT",
        1 => "ECT(1)",
        2 => "ECT(0)",
        _ => "CE",
    }
}

pub(crate) fn ecn_long(e: u8) -> String {
    let s = match e {
        0 => "Not ECN-Capable Transport",
        1 => "ECN-Capable Transport codepoint '01'",
        2 => "ECN-Capable Transport codepoint '10'",
        _ => "Congestion Experienced",
    };
    format!("{s} ({e})")
}

/// Adds the DS field the way tshark shows it, for IPv4's DS byte and IPv6's traffic class.
pub(crate) fn dissect_dsfield(t: &mut Tree, key: &'static str, label: &str, dscp: u8, ecn: u8) {
    let byte = (dscp << 2) | (ecn & 3);
    group(
        t,
        key,
        label,
        Value::Uint(byte.into()),
        format!(
            "{byte:#04x} (DSCP: {}, ECN: {})",
            dscp_name(dscp),
            ecn_short(ecn)
        ),
        |t| {
            leaf(
                t,
                "dscp",
                "Differentiated Services Codepoint",
                Value::Uint(dscp.into()),
                dscp_long(dscp),
            );
            leaf(
                t,
                "ecn",
                "Explicit Congestion Notification",
                Value::Uint(ecn.into()),
                ecn_long(ecn),
            );
        },
    );
}

impl Dissect for Repr {
    /// A subtree `ip` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("ip", self.title(), |t| self.dissect_fields(t));
    }
}

impl Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        t.dec("version", "Version", 4u8);
        let hl = self.buffer_len();
        leaf(
            t,
            "hdr_len",
            "Header Length",
            Value::Uint(hl as u64),
            format!("{hl} bytes ({})", hl / 4),
        );
        dissect_dsfield(
            t,
            "dsfield",
            "Differentiated Services Field",
            self.dscp,
            self.ecn,
        );
        t.dec("len", "Total Length", self.total_len);
        leaf(
            t,
            "id",
            "Identification",
            Value::Uint(self.ident.into()),
            format!("{:#06x} ({})", self.ident, self.ident),
        );
        let names: Vec<&str> = FLAG_BITS
            .iter()
            .filter(|(_, _, _, bit)| self.flags & bit != 0)
            .map(|&(_, _, name, _)| name)
            .collect();
        let mut fd = format!("{:#x}", self.flags);
        if !names.is_empty() {
            fd.push_str(", ");
            fd.push_str(&names.join(", "));
        }
        group(
            t,
            "flags",
            "Flags",
            Value::Uint(self.flags.into()),
            fd,
            |t| {
                for (key, label, _, bit) in FLAG_BITS {
                    let set = self.flags & bit != 0;
                    leaf(t, key, label, Value::Bool(set), set_text(set));
                }
            },
        );
        t.dec("frag_offset", "Fragment Offset", self.frag_offset);
        t.dec("ttl", "Time to Live", self.ttl);
        t.code("proto", "Protocol", self.protocol.0, self.protocol);
        t.hex("checksum", "Header Checksum", self.checksum, 4);
        if !self.options.is_empty() {
            t.bytes("options", "Options", &self.options);
        }
        addr_leaf(t, "src", "Source Address", self.src.into());
        addr_leaf(t, "dst", "Destination Address", self.dst.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // h_req_single.pcap frame 1, bytes 14..34.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x01, 0x34, 0xfc, 0xb6, 0x40, 0x00, 0x40, 0x11, 0x28, 0x5e, 0x0a, 0x4d, 0x00,
        0x0a, 0x0a, 0x4d, 0x00, 0x01,
    ];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&HDR).unwrap();
        assert_eq!(r.total_len, 308);
        assert_eq!(r.ident, 0xfcb6);
        assert_eq!(r.flags, FLAG_DF);
        assert_eq!(r.ttl, 64);
        assert_eq!(r.protocol, IpProtocol::UDP);
        assert_eq!(r.checksum, 0x285e);
        assert_eq!(r.src, Ipv4Addr::new(10, 77, 0, 10));
        assert_eq!(r.to_bytes(), HDR);
        assert!(Packet::new_checked(&HDR[..]).unwrap().verify_checksum());
        let mut r2 = r.clone();
        r2.fill_checksum();
        assert_eq!(r2.checksum, 0x285e);

        // tshark's lines (h_req_single.txt).
        let t = r.to_tree();
        let d = |p: &str| t.find(&format!("ip.{p}")).unwrap().display.clone();
        assert_eq!(d("hdr_len"), "20 bytes (5)");
        assert_eq!(d("dsfield"), "0x00 (DSCP: CS0, ECN: Not-ECT)");
        assert_eq!(d("dsfield.dscp"), "Default (0)");
        assert_eq!(d("dsfield.ecn"), "Not ECN-Capable Transport (0)");
        assert_eq!(d("id"), "0xfcb6 (64694)");
        assert_eq!(d("flags"), "0x2, Don't fragment");
        assert_eq!(d("flags.rb"), "Not set");
        assert_eq!(d("flags.df"), "Set");
        assert_eq!(d("proto"), "UDP (17)");
        assert_eq!(d("checksum"), "0x285e");
        assert_eq!(
            r.title(),
            "Internet Protocol Version 4, Src: 10.77.0.10, Dst: 10.77.0.1"
        );
    }

    #[test]
    fn options_and_errors() {
        let mut r = Repr::parse(&HDR).unwrap();
        r.options = vec![1, 1, 1, 0];
        r.total_len += 4;
        r.fill_checksum();
        let b = r.to_bytes();
        assert_eq!(b[0], 0x46);
        assert_eq!(Repr::parse(&b).unwrap(), r);
        assert!(Packet::new_checked(&b[..]).unwrap().verify_checksum());
        for n in 0..b.len() {
            assert!(Repr::parse(&b[..n]).is_err(), "{n}");
        }
        let mut bad = HDR;
        bad[0] = 0x44;
        assert!(matches!(
            Repr::parse(&bad),
            Err(Error::BadValue {
                field: "ip.hdr_len",
                ..
            })
        ));
        bad[0] = 0x65;
        assert!(matches!(
            Repr::parse(&bad),
            Err(Error::BadValue {
                field: "ip.version",
                ..
            })
        ));
        let mut short = HDR;
        short[2] = 0;
        short[3] = 10;
        assert!(matches!(
            Repr::parse(&short),
            Err(Error::BadLength { what: "ip.len", .. })
        ));
    }

    #[test]
    fn payload_is_clipped() {
        let mut b = HDR.to_vec();
        b.extend_from_slice(&[9; 10]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 10); // total length says 288, only 10 captured
    }
}
