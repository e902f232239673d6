//! Ethernet II framing, with an optional IEEE 802.1Q VLAN tag.
//!
//! Layout (IEEE 802.3 clause 3, Ethernet II / DIX): destination MAC (6), source MAC (6),
//! EtherType (2). With an 802.1Q tag the EtherType is 0x8100, followed by the tag control
//! information (PCP 3 bits, DEI 1 bit, VID 12 bits) and the inner EtherType. The frame check
//! sequence is not in captures (Linux strips it), so it is not modelled.

use super::{group, leaf, mac_to_string};
use crate::dissect::{Dissect, Tree, Value};
use crate::field::{read_array, read_u16, write_u16, Field};
use crate::{Error, Result};

code_point! {
    /// The EtherType of the payload.
    pub struct EtherType(u16) {
        IPV4 = 0x0800 => "IPv4",
        ARP = 0x0806 => "ARP",
        VLAN = 0x8100 => "802.1Q Virtual LAN",
        IPV6 = 0x86dd => "IPv6",
        ROCE_V1 = 0x8915 => "RDMA over Converged Ethernet",
    }
}

mod field {
    use super::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const VLAN_TCI: Field = 14..16;
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// Header length without a VLAN tag.
pub const HEADER_LEN: usize = 14;
/// Header length with one 802.1Q tag.
pub const VLAN_HEADER_LEN: usize = 18;

/// A zero-copy view of an Ethernet II header.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking it holds the whole header (including a VLAN tag if present).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the whole header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        Error::check_len("eth", HEADER_LEN, len)?;
        Error::check_len("eth.vlan", self.header_len(), len)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst(&self) -> [u8; 6] {
        read_array(self.buffer.as_ref(), field::DST.start)
    }

    pub fn src(&self) -> [u8; 6] {
        read_array(self.buffer.as_ref(), field::SRC.start)
    }

    /// The outer EtherType (0x8100 when tagged).
    pub fn outer_ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::ETHERTYPE.start))
    }

    /// Whether an 802.1Q tag follows the source address.
    pub fn has_vlan(&self) -> bool {
        self.outer_ethertype() == EtherType::VLAN
    }

    /// 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.has_vlan() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The VLAN tag control information, if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        self.has_vlan()
            .then(|| read_u16(self.buffer.as_ref(), field::VLAN_TCI.start))
    }

    /// The EtherType of the payload (the inner one when tagged).
    pub fn ethertype(&self) -> EtherType {
        if self.has_vlan() {
            EtherType(read_u16(self.buffer.as_ref(), field::INNER_ETHERTYPE.start))
        } else {
            self.outer_ethertype()
        }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_dst(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v);
    }

    pub fn set_src(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v);
    }

    /// Writes the outer EtherType (0x8100 makes the header tagged).
    pub fn set_outer_ethertype(&mut self, v: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE.start, v.0);
    }

    /// Writes the tag control information (only meaningful when tagged).
    pub fn set_vlan_tci(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::VLAN_TCI.start, v);
    }

    /// Writes the inner EtherType (only meaningful when tagged).
    pub fn set_inner_ethertype(&mut self, v: EtherType) {
        write_u16(self.buffer.as_mut(), field::INNER_ETHERTYPE.start, v.0);
    }
}

/// An 802.1Q tag's control information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub vlan: Option<VlanTag>,
    /// The payload's EtherType (inner one when tagged).
    pub ethertype: EtherType,
}

impl Repr {
    /// Parses the header at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr::parse_packet(&p))
    }

    /// Reads the header from a checked view.
    pub fn parse_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            dst: p.dst(),
            src: p.src(),
            vlan: p.vlan_tci().map(VlanTag::from_tci),
            ethertype: p.ethertype(),
        }
    }

    pub fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header; `buf` must be exactly `buffer_len()` long.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), self.buffer_len(), "eth: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_dst(self.dst);
        p.set_src(self.src);
        match self.vlan {
            Some(tag) => {
                p.set_outer_ethertype(EtherType::VLAN);
                p.set_vlan_tci(tag.tci());
                p.set_inner_ethertype(self.ethertype);
            }
            None => p.set_outer_ethertype(self.ethertype),
        }
    }

    to_bytes!();

    /// tshark's layer line: `Ethernet II, Src: …, Dst: …`.
    pub fn title(&self) -> String {
        format!(
            "Ethernet II, Src: {}, Dst: {}",
            mac_to_string(&self.src),
            mac_to_string(&self.dst)
        )
    }
}

fn mac_node(t: &mut Tree, key: &'static str, label: &str, m: &[u8; 6]) {
    let s = mac_to_string(m);
    group(t, key, label, Value::Mac(*m), s.clone(), |t| {
        leaf(t, "addr", "Address", Value::Mac(*m), s);
        let lg = m[0] & 0x02 != 0;
        let ig = m[0] & 0x01 != 0;
        leaf(
            t,
            "lg",
            "LG bit",
            Value::Bool(lg),
            if lg {
                "Locally administered address (this is NOT the factory default)"
            } else {
                "Globally unique address (factory default)"
            }
            .into(),
        );
        leaf(
            t,
            "ig",
            "IG bit",
            Value::Bool(ig),
            if ig {
                "Group address (multicast/broadcast)"
            } else {
                "Individual address (unicast)"
            }
            .into(),
        );
    });
}

fn ethertype_text(e: EtherType) -> String {
    format!("{} ({:#06x})", e.description().unwrap_or("Unknown"), e.0)
}

impl Dissect for Repr {
    /// A subtree `eth` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("eth", self.title(), |t| self.dissect_fields(t));
    }
}

impl Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        mac_node(t, "dst", "Destination", &self.dst);
        mac_node(t, "src", "Source", &self.src);
        if let Some(tag) = self.vlan {
            leaf(
                t,
                "type",
                "Type",
                Value::Uint(EtherType::VLAN.0.into()),
                ethertype_text(EtherType::VLAN),
            );
            t.subtree("vlan", "802.1Q Virtual LAN", |t| {
                t.dec("priority", "Priority", tag.pcp);
                t.dec("dei", "DEI", u8::from(tag.dei));
                t.dec("id", "ID", tag.vid);
                leaf(
                    t,
                    "etype",
                    "Type",
                    Value::Uint(self.ethertype.0.into()),
                    ethertype_text(self.ethertype),
                );
            });
        } else {
            leaf(
                t,
                "type",
                "Type",
                Value::Uint(self.ethertype.0.into()),
                ethertype_text(self.ethertype),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The first 14 bytes of h_req_single.pcap's frame 1.
    const HDR: [u8; 14] = [
        0x7a, 0x7a, 0xca, 0x71, 0x38, 0xa4, 0x52, 0x54, 0x00, 0x77, 0x00, 0x0a, 0x08, 0x00,
    ];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&HDR).unwrap();
        assert_eq!(r.src, [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a]);
        assert_eq!(r.ethertype, EtherType::IPV4);
        assert_eq!(r.vlan, None);
        assert_eq!(r.to_bytes(), HDR);
        assert_eq!(
            r.title(),
            "Ethernet II, Src: 52:54:00:77:00:0a, Dst: 7a:7a:ca:71:38:a4"
        );
        let t = r.to_tree();
        assert_eq!(t.find("eth.type").unwrap().display, "IPv4 (0x0800)");
        assert_eq!(
            t.find("eth.dst.lg").unwrap().display,
            "Locally administered address (this is NOT the factory default)"
        );
    }

    #[test]
    fn vlan_round_trip() {
        let r = Repr {
            dst: [1, 2, 3, 4, 5, 6],
            src: [7, 8, 9, 10, 11, 12],
            vlan: Some(VlanTag {
                pcp: 5,
                dei: true,
                vid: 0xabc,
            }),
            ethertype: EtherType::IPV6,
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 18);
        assert_eq!(&b[12..], &[0x81, 0x00, 0xba, 0xbc, 0x86, 0xdd]);
        assert_eq!(Repr::parse(&b).unwrap(), r);
        assert_eq!(r.to_tree().uint("eth.vlan.id"), Some(0xabc));
    }

    #[test]
    fn truncated() {
        for n in 0..14 {
            assert!(Repr::parse(&HDR[..n]).is_err());
        }
        let mut tagged = HDR.to_vec();
        tagged[12] = 0x81;
        tagged[13] = 0x00;
        for n in 14..18 {
            tagged.truncate(n);
            assert!(matches!(
                Repr::parse(&tagged),
                Err(Error::Truncated {
                    what: "eth.vlan",
                    ..
                })
            ));
            tagged.push(0);
        }
    }
}
