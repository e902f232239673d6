//! The layers below RoCEv2: link-layer framing (Ethernet II, Linux cooked captures) and the
//! IP/UDP encapsulation RoCEv2 rides on.
//!
//! Each header follows the crate contract (a zero-copy `Packet` view and a `Repr` with
//! `parse`/`emit`/`buffer_len`). A `Repr` here describes the *header only*: the payload is
//! whatever follows `buffer_len()` bytes (for IPv4, up to the header's total length). Checksums
//! are kept as captured so that re-emitting a parsed header reproduces its bytes exactly; the
//! helpers [`ipv4::checksum`] compute fresh ones for senders.
//!
//! Labels follow `tshark -V` (Wireshark 4.0), machine keys follow Wireshark's field names
//! (`ip.ttl` is the node `ip` → `ttl`), so tests can compare with tshark field dumps.

use crate::dissect::{Node, Tree, Value};

pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod sll;
pub mod udp;

pub use ethernet::{EtherType, Packet as EthernetPacket, Repr as EthernetRepr, VlanTag};
pub use ipv4::{IpProtocol, Packet as Ipv4Packet, Repr as Ipv4Repr};
pub use ipv6::{Packet as Ipv6Packet, Repr as Ipv6Repr};
pub use sll::{
    Packet as SllPacket, PacketType as SllPacketType, Repr as SllRepr, Sll2Packet, Sll2Repr,
};
pub use udp::{Packet as UdpPacket, Repr as UdpRepr, ROCEV2_PORT};

code_point! {
    /// A pcap/pcapng link type (the `LINKTYPE_*` registry), saying how each captured frame
    /// begins.
    pub struct LinkType(u32) {
        ETHERNET = 1 => "Ethernet",
        RAW = 101 => "Raw IP",
        LINUX_SLL = 113 => "Linux cooked-mode capture v1",
        IPV4 = 228 => "Raw IPv4",
        IPV6 = 229 => "Raw IPv6",
        LINUX_SLL2 = 276 => "Linux cooked-mode capture v2",
    }
}

/// Formats a MAC address the way tshark does when it has no vendor name for it.
pub fn mac_to_string(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Adds a leaf with a display text of our choosing (tshark's "Set"/"Not set", "20 bytes (5)").
pub(crate) fn leaf(t: &mut Tree, key: &'static str, label: &str, value: Value, display: String) {
    t.push(Node {
        key,
        label: label.to_string(),
        value,
        display,
        children: Vec::new(),
    });
}

/// Adds an IP address field, shown (and put in JSON) in its usual text form.
pub(crate) fn addr_leaf(t: &mut Tree, key: &'static str, label: &str, addr: std::net::IpAddr) {
    t.ip(key, label, addr);
}

/// Adds a field that has a value, a display text and sub-fields (tshark's "Flags: 0x2, Don't
/// fragment" with one line per flag below it).
pub(crate) fn group(
    t: &mut Tree,
    key: &'static str,
    label: &str,
    value: Value,
    display: String,
    f: impl FnOnce(&mut Tree),
) {
    let mut sub = Tree::new();
    f(&mut sub);
    t.push(Node {
        key,
        label: label.to_string(),
        value,
        display,
        children: sub.nodes,
    });
}

/// tshark's text for a one-bit IP flag.
pub(crate) fn set_text(v: bool) -> String {
    if v { "Set" } else { "Not set" }.to_string()
}
