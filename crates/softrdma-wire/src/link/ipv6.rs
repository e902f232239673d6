//! The fixed IPv6 header (RFC 8200 §3). Extension headers are not parsed: RoCEv2 over IPv6
//! puts UDP directly after the fixed header, and a decoder shows anything else as data.
//!
//! For RoCEv2 the flow label matters: the ICRC masks it (with the traffic class and hop
//! limit), and rxe derives the UDP source port from it.

use super::addr_leaf;
use super::ipv4::{dissect_dsfield, IpProtocol};
use crate::dissect::{Dissect, Tree};
use crate::field::{Bits, Field};
use crate::{Error, Result};
use std::net::Ipv6Addr;

mod field {
    use super::{Bits, Field};
    pub const VERSION: Bits = Bits::new(0, 0, 4);
    pub const TRAFFIC_CLASS: Bits = Bits::new(0, 4, 8);
    pub const FLOW_LABEL: Bits = Bits::new(1, 4, 20);
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// The fixed header's length.
pub const HEADER_LEN: usize = 40;

fixed_view! {
    /// A zero-copy view of an IPv6 header (and what follows it).
    struct Packet(HEADER_LEN, "ipv6");
}

bit_accessors! {
    version / set_version: u8 = field::VERSION;
    traffic_class / set_traffic_class: u8 = field::TRAFFIC_CLASS;
    flow_label / set_flow_label: u32 = field::FLOW_LABEL;
}

be_fields!(Packet {
    payload_len, set_payload_len: u16 @ field::PAYLOAD_LEN;
    hop_limit, set_hop_limit: u8 @ field::HOP_LIMIT;
});

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.b()[field::NEXT_HEADER])
    }
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::field::read_array::<16>(self.b(), field::SRC.start))
    }
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(crate::field::read_array::<16>(self.b(), field::DST.start))
    }
    /// The payload by the payload length field, clipped to the buffer.
    pub fn payload(&self) -> &[u8] {
        let b = self.b();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        b.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_next_header(&mut self, v: IpProtocol) {
        self.bm()[field::NEXT_HEADER] = v.0;
    }
    pub fn set_src(&mut self, v: Ipv6Addr) {
        self.bm()[field::SRC].copy_from_slice(&v.octets());
    }
    pub fn set_dst(&mut self, v: Ipv6Addr) {
        self.bm()[field::DST].copy_from_slice(&v.octets());
    }
}

/// The fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub payload_len: u16,
    pub next_header: IpProtocol,
    pub hop_limit: u8,
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
}

impl Repr {
    /// Parses the fixed header; the version must be 6.
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        if p.version() != 6 {
            return Err(Error::BadValue {
                field: "ipv6.version",
                value: p.version().into(),
            });
        }
        Ok(Repr {
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: p.payload_len(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            src: p.src(),
            dst: p.dst(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "ipv6: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_version(6);
        p.set_traffic_class(self.traffic_class);
        p.set_flow_label(self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
    }

    to_bytes!();

    pub fn title(&self) -> String {
        format!(
            "Internet Protocol Version 6, Src: {}, Dst: {}",
            self.src, self.dst
        )
    }
}

impl Dissect for Repr {
    /// A subtree `ipv6` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("ipv6", self.title(), |t| self.dissect_fields(t));
    }
}

impl Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        t.dec("version", "Version", 6u8);
        dissect_dsfield(
            t,
            "tclass",
            "Traffic Class",
            self.traffic_class >> 2,
            self.traffic_class & 3,
        );
        t.hex("flow", "Flow Label", self.flow_label, 5);
        t.dec("plen", "Payload Length", self.payload_len);
        t.code("nxt", "Next Header", self.next_header.0, self.next_header);
        t.dec("hlim", "Hop Limit", self.hop_limit);
        addr_leaf(t, "src", "Source Address", self.src.into());
        addr_leaf(t, "dst", "Destination Address", self.dst.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Repr {
        Repr {
            traffic_class: 0xb9,
            flow_label: 0x98adf,
            payload_len: 288,
            next_header: IpProtocol::UDP,
            hop_limit: 64,
            src: "fe80::5054:ff:fe77:a".parse().unwrap(),
            dst: "fe80::5054:ff:fe77:b".parse().unwrap(),
        }
    }

    #[test]
    fn round_trip() {
        let r = sample();
        let b = r.to_bytes();
        // version 6, traffic class 0xb9, flow label 0x98adf.
        assert_eq!(&b[..4], &[0x6b, 0x99, 0x8a, 0xdf]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
        let t = r.to_tree();
        assert_eq!(t.find("ipv6.flow").unwrap().display, "0x98adf");
        assert_eq!(
            t.find("ipv6.tclass").unwrap().display,
            "0xb9 (DSCP: EF PHB, ECN: ECT(1))"
        );
        assert_eq!(t.find("ipv6.nxt").unwrap().display, "UDP (17)");
        for n in 0..40 {
            assert!(Repr::parse(&b[..n]).is_err());
        }
        let mut v4 = b.clone();
        v4[0] = 0x4b;
        assert!(matches!(
            Repr::parse(&v4),
            Err(Error::BadValue {
                field: "ipv6.version",
                ..
            })
        ));
    }
}
