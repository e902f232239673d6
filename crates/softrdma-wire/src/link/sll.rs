//! Linux "cooked" capture headers: SLL v1 (`LINKTYPE_LINUX_SLL`, 113, 16 bytes) and SLL2
//! (`LINKTYPE_LINUX_SLL2`, 276, 20 bytes), which `tcpdump -i any` / `dumpcap -i any` write in
//! place of a link header.
//!
//! SLL v1 (tcpdump.org "LINKTYPE_LINUX_SLL"): packet type (2), ARPHRD type (2), link-layer
//! address length (2), address (8, zero-padded), protocol (2).
//! SLL2 ("LINKTYPE_LINUX_SLL2"): protocol (2), reserved (2), interface index (4), ARPHRD type
//! (2), packet type (1), address length (1), address (8).

use super::leaf;
use super::EtherType;
use crate::dissect::{Dissect, Tree, Value};
use crate::field::{read_array, read_u16, read_u32, write_u16, write_u32, Field};
use crate::Result;

code_point! {
    /// Where the packet was going relative to the capturing host (`PACKET_*` in
    /// `linux/if_packet.h`).
    pub struct PacketType(u16) {
        HOST = 0 => "Unicast to us",
        BROADCAST = 1 => "Broadcast",
        MULTICAST = 2 => "Multicast",
        OTHERHOST = 3 => "Unicast to another host",
        OUTGOING = 4 => "Sent by us",
    }
}

code_point! {
    /// The link-layer address type (`ARPHRD_*` in `linux/if_arp.h`).
    pub struct HaType(u16) {
        ETHER = 1 => "Ethernet",
        INFINIBAND = 32 => "InfiniBand",
        LOOPBACK = 772 => "Loopback",
        NONE = 0xfffe => "None",
    }
}

mod field {
    use super::Field;
    pub const PKTTYPE: usize = 0;
    pub const HATYPE: usize = 2;
    pub const HALEN: usize = 4;
    pub const ADDR: Field = 6..14;
    pub const PROTOCOL: usize = 14;

    pub mod v2 {
        use super::Field;
        pub const PROTOCOL: usize = 0;
        pub const RESERVED: usize = 2;
        pub const IFINDEX: usize = 4;
        pub const HATYPE: usize = 8;
        pub const PKTTYPE: usize = 10;
        pub const HALEN: usize = 11;
        pub const ADDR: Field = 12..20;
    }
}

/// SLL v1 header length.
pub const HEADER_LEN: usize = 16;
/// SLL2 header length.
pub const SLL2_HEADER_LEN: usize = 20;

fixed_view! {
    /// A zero-copy view of an SLL v1 header.
    struct Packet(HEADER_LEN, "sll");
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn pkttype(&self) -> PacketType {
        PacketType(read_u16(self.buffer.as_ref(), field::PKTTYPE))
    }

    pub fn hatype(&self) -> HaType {
        HaType(read_u16(self.buffer.as_ref(), field::HATYPE))
    }

    pub fn halen(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HALEN)
    }

    /// The 8-byte address field (only the first `halen` bytes are the address).
    pub fn addr(&self) -> [u8; 8] {
        read_array(self.buffer.as_ref(), field::ADDR.start)
    }

    pub fn protocol(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::PROTOCOL))
    }

    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_pkttype(&mut self, v: PacketType) {
        write_u16(self.buffer.as_mut(), field::PKTTYPE, v.0);
    }
    pub fn set_hatype(&mut self, v: HaType) {
        write_u16(self.buffer.as_mut(), field::HATYPE, v.0);
    }
    pub fn set_halen(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::HALEN, v);
    }
    pub fn set_addr(&mut self, v: [u8; 8]) {
        self.buffer.as_mut()[field::ADDR].copy_from_slice(&v);
    }
    pub fn set_protocol(&mut self, v: EtherType) {
        write_u16(self.buffer.as_mut(), field::PROTOCOL, v.0);
    }
}

/// An SLL v1 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub pkttype: PacketType,
    pub hatype: HaType,
    pub halen: u16,
    /// The address field as captured, padding included (so that re-emitting is exact).
    pub addr: [u8; 8],
    pub protocol: EtherType,
}

/// The first `halen` bytes of the address field, shown as a MAC when 6 long.
fn addr_text(addr: &[u8; 8], halen: usize) -> String {
    let n = halen.min(8);
    let mut s = String::new();
    for (i, b) in addr.iter().take(n).enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn dissect_addr(t: &mut Tree, addr: &[u8; 8], halen: usize) {
    let n = halen.min(8);
    leaf(
        t,
        "src",
        "Source",
        match addr.get(..n).and_then(|a| <[u8; 6]>::try_from(a).ok()) {
            Some(mac) => Value::Mac(mac),
            None => Value::Bytes(addr.get(..n).unwrap_or(&[]).to_vec()),
        },
        addr_text(addr, halen),
    );
    // tshark shows the padding after a 6-byte address as "Unused".
    if n < 8 {
        t.bytes("unused", "Unused", addr.get(n..).unwrap_or(&[]));
    }
}

/// The protocol field as tshark shows it in both versions.
fn dissect_protocol(t: &mut Tree, protocol: EtherType) {
    leaf(
        t,
        "etype",
        "Protocol",
        Value::Uint(protocol.0.into()),
        format!(
            "{} ({:#06x})",
            protocol.description().unwrap_or("Unknown"),
            protocol.0
        ),
    );
}

/// The ARPHRD_ type field as tshark shows it in both versions.
fn dissect_hatype(t: &mut Tree, hatype: HaType) {
    t.code("hatype", "Link-layer address type", hatype.0, hatype);
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr {
            pkttype: p.pkttype(),
            hatype: p.hatype(),
            halen: p.halen(),
            addr: p.addr(),
            protocol: p.protocol(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "sll: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_pkttype(self.pkttype);
        p.set_hatype(self.hatype);
        p.set_halen(self.halen);
        p.set_addr(self.addr);
        p.set_protocol(self.protocol);
    }

    to_bytes!();

    pub fn title(&self) -> String {
        "Linux cooked capture v1".to_string()
    }
}

impl Dissect for Repr {
    /// A subtree `sll` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("sll", self.title(), |t| self.dissect_fields(t));
    }
}

impl Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        t.code("pkttype", "Packet type", self.pkttype.0, self.pkttype);
        dissect_hatype(t, self.hatype);
        t.dec("halen", "Link-layer address length", self.halen);
        dissect_addr(t, &self.addr, usize::from(self.halen));
        dissect_protocol(t, self.protocol);
    }
}

fixed_view! {
    /// A zero-copy view of an SLL2 header.
    struct Sll2Packet(SLL2_HEADER_LEN, "sll2");
}

impl<T: AsRef<[u8]>> Sll2Packet<T> {
    pub fn protocol(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::v2::PROTOCOL))
    }
    pub fn reserved(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::v2::RESERVED)
    }
    pub fn ifindex(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::v2::IFINDEX)
    }
    pub fn hatype(&self) -> HaType {
        HaType(read_u16(self.buffer.as_ref(), field::v2::HATYPE))
    }
    pub fn pkttype(&self) -> PacketType {
        PacketType(self.buffer.as_ref()[field::v2::PKTTYPE].into())
    }
    pub fn halen(&self) -> u8 {
        self.buffer.as_ref()[field::v2::HALEN]
    }
    pub fn addr(&self) -> [u8; 8] {
        read_array(self.buffer.as_ref(), field::v2::ADDR.start)
    }
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(SLL2_HEADER_LEN..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Sll2Packet<T> {
    pub fn set_protocol(&mut self, v: EtherType) {
        write_u16(self.buffer.as_mut(), field::v2::PROTOCOL, v.0);
    }
    pub fn set_reserved(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::v2::RESERVED, v);
    }
    pub fn set_ifindex(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::v2::IFINDEX, v);
    }
    pub fn set_hatype(&mut self, v: HaType) {
        write_u16(self.buffer.as_mut(), field::v2::HATYPE, v.0);
    }
    /// Writes the packet type (one byte in SLL2; higher bits of `v` are dropped).
    pub fn set_pkttype(&mut self, v: PacketType) {
        self.buffer.as_mut()[field::v2::PKTTYPE] = v.0 as u8;
    }
    pub fn set_halen(&mut self, v: u8) {
        self.buffer.as_mut()[field::v2::HALEN] = v;
    }
    pub fn set_addr(&mut self, v: [u8; 8]) {
        self.buffer.as_mut()[field::v2::ADDR].copy_from_slice(&v);
    }
}

/// An SLL2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sll2Repr {
    pub protocol: EtherType,
    pub reserved: u16,
    pub ifindex: u32,
    pub hatype: HaType,
    /// One byte on the wire.
    pub pkttype: PacketType,
    pub halen: u8,
    pub addr: [u8; 8],
}

impl Sll2Repr {
    pub fn parse(buf: &[u8]) -> Result<Sll2Repr> {
        let p = Sll2Packet::new_checked(buf)?;
        Ok(Sll2Repr {
            protocol: p.protocol(),
            reserved: p.reserved(),
            ifindex: p.ifindex(),
            hatype: p.hatype(),
            pkttype: p.pkttype(),
            halen: p.halen(),
            addr: p.addr(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        SLL2_HEADER_LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), SLL2_HEADER_LEN, "sll2: emit buffer length");
        let mut p = Sll2Packet::new_unchecked(buf);
        p.set_protocol(self.protocol);
        p.set_reserved(self.reserved);
        p.set_ifindex(self.ifindex);
        p.set_hatype(self.hatype);
        p.set_pkttype(self.pkttype);
        p.set_halen(self.halen);
        p.set_addr(self.addr);
    }

    to_bytes!();

    pub fn title(&self) -> String {
        "Linux cooked capture v2".to_string()
    }
}

impl Dissect for Sll2Repr {
    /// A subtree `sll2` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("sll2", self.title(), |t| self.dissect_fields(t));
    }
}

impl Sll2Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        dissect_protocol(t, self.protocol);
        t.dec("reserved", "Reserved", self.reserved);
        t.dec("ifindex", "Interface index", self.ifindex);
        dissect_hatype(t, self.hatype);
        t.code("pkttype", "Packet type", self.pkttype.0, self.pkttype);
        t.dec("halen", "Link-layer address length", self.halen);
        dissect_addr(t, &self.addr, usize::from(self.halen));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i_mra_atomic.sll.pcap, frame 6: the SLL v1 header.
    const SLL: [u8; 16] = [
        0x00, 0x03, 0x00, 0x01, 0x00, 0x06, 0x52, 0x54, 0x00, 0x77, 0x00, 0x0b, 0x00, 0x00, 0x08,
        0x00,
    ];

    #[test]
    fn parse_captured_v1() {
        let r = Repr::parse(&SLL).unwrap();
        assert_eq!(r.pkttype, PacketType::OTHERHOST);
        assert_eq!(r.hatype, HaType::ETHER);
        assert_eq!(r.halen, 6);
        assert_eq!(r.protocol, EtherType::IPV4);
        assert_eq!(r.to_bytes(), SLL);
        let t = r.to_tree();
        assert_eq!(
            t.find("sll.pkttype").unwrap().display,
            "Unicast to another host (3)"
        );
        assert_eq!(t.find("sll.src").unwrap().display, "52:54:00:77:00:0b");
        assert_eq!(t.find("sll.unused").unwrap().display, "0000");
        assert_eq!(t.find("sll.etype").unwrap().display, "IPv4 (0x0800)");
        for n in 0..16 {
            assert!(Repr::parse(&SLL[..n]).is_err());
        }
    }

    #[test]
    fn v2_round_trip() {
        let r = Sll2Repr {
            protocol: EtherType::IPV6,
            reserved: 0,
            ifindex: 7,
            hatype: HaType::ETHER,
            pkttype: PacketType::OUTGOING,
            halen: 6,
            addr: [0x52, 0x54, 0, 0x77, 0, 0x0a, 0, 0],
        };
        let b = r.to_bytes();
        assert_eq!(
            b,
            [0x86, 0xdd, 0, 0, 0, 0, 0, 7, 0, 1, 4, 6, 0x52, 0x54, 0, 0x77, 0, 0x0a, 0, 0]
        );
        assert_eq!(Sll2Repr::parse(&b).unwrap(), r);
        for n in 0..20 {
            assert!(Sll2Repr::parse(&b[..n]).is_err());
        }
        // An absurd address length is shown clipped, never indexed past the field.
        let mut odd = r;
        odd.halen = 200;
        assert_eq!(odd.to_tree().find("sll2.src").unwrap().display.len(), 23);
    }
}
