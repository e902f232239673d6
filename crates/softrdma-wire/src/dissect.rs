//! Field trees: how a decoded packet is shown to people (`tshark -V` style) and machines (JSON).
//!
//! Each `Repr` implements [`Dissect`] by adding its fields to a [`Tree`] in wire order, with a
//! machine key (`"psn"`), a human label (`"Packet Sequence Number"`), a typed value and the
//! text shown after the label. Layers are subtrees (`"bth"`, `"deth"`, `"mad"`, `"cm_req"`...).
//! The decoder composes layers; tests look fields up by path (`"bth.psn"`).
//!
//! # JSON
//!
//! With the `serde` feature, [`Tree`] implements `serde::Serialize`: a JSON object whose keys
//! are the nodes' keys, a layer or group being a nested object. Values keep their type where a
//! JSON reader can hold it exactly, and take the text form people know otherwise:
//!
//! | [`Value`] | JSON |
//! |---|---|
//! | [`Value::Uint`] (fields of at most 32 bits) | number |
//! | [`Value::U64`] (64-bit fields: GUIDs, TIDs, service IDs, VAs, SRP tags, LUNs, LBAs) | `"0x%016x"` string: JSON numbers above 2^53 lose digits in `jq` and JavaScript |
//! | [`Value::Bool`] | `true` / `false` |
//! | [`Value::Ip`] | `"10.77.0.1"`, `"fe80::1"` |
//! | [`Value::Gid`] | IPv6 text, IPv4-mapped as `"::ffff:10.77.0.1"` |
//! | [`Value::Mac`] | `"52:54:00:77:00:0a"` |
//! | [`Value::Bytes`] | lowercase hex string, no separators |
//! | [`Value::Text`] | string |
//! | [`Value::None`] | `null` |
//! | [`Value::List`] (a node made by [`Tree::list`]) | array of its children |
//!
//! The feature is off by default: parsing needs no serde, and softrdma-core, the fuzz targets
//! and any other user of the parsers keep the wire crate's one dependency (crc32fast). The
//! impl lives here rather than in the CLI because only this module knows the value types
//! (which fields are 64-bit, which bytes are addresses).

use crate::types::{Gid, Guid};
use core::fmt::{self, Write as _};
use std::net::IpAddr;

/// A field's value, typed for JSON output and for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A subtree or a label without a value.
    None,
    /// An unsigned field of at most 32 bits.
    Uint(u64),
    /// A 64-bit field (GUID, TID, service ID, virtual address, tag, LUN, LBA, ...).
    U64(u64),
    Bool(bool),
    Bytes(Vec<u8>),
    Text(String),
    /// An IPv4 or IPv6 address.
    Ip(IpAddr),
    /// A GID (an IPv6 address on RoCEv2).
    Gid(Gid),
    /// A 48-bit MAC address.
    Mac([u8; 6]),
    /// A subtree whose children are the items of one list, all with the same key (see
    /// [`Tree::list`]).
    List,
}

impl Value {
    /// The bytes of a byte-like value (raw bytes or an address) as they are on the wire.
    pub fn octets(&self) -> Option<Vec<u8>> {
        match self {
            Value::Bytes(b) => Some(b.clone()),
            Value::Ip(IpAddr::V4(a)) => Some(a.octets().to_vec()),
            Value::Ip(IpAddr::V6(a)) => Some(a.octets().to_vec()),
            Value::Gid(g) => Some(g.0.to_vec()),
            Value::Mac(m) => Some(m.to_vec()),
            _ => None,
        }
    }
}

/// An unsigned integer a field can hold: [`Value::U64`] for `u64`, [`Value::Uint`] for the
/// narrower types, so the JSON form of a field follows its width on the wire.
pub trait FieldUint: Copy + Into<u64> {
    /// The value, typed by width.
    fn to_value(self) -> Value {
        Value::Uint(self.into())
    }
}

impl FieldUint for u8 {}
impl FieldUint for u16 {}
impl FieldUint for u32 {}
impl FieldUint for u64 {
    fn to_value(self) -> Value {
        Value::U64(self)
    }
}

/// `aa:bb:cc:dd:ee:ff`, as tshark and `ip link` print a MAC address.
pub fn mac_text(m: &[u8; 6]) -> String {
    let mut s = String::with_capacity(17);
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// One field, or one layer with its fields as children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Machine name, unique among siblings (`"psn"`).
    pub key: &'static str,
    /// Human name (`"Packet Sequence Number"`).
    pub label: String,
    pub value: Value,
    /// What the text view prints after `label: ` (empty for a subtree).
    pub display: String,
    pub children: Vec<Node>,
}

/// How many bytes of a byte field the text view shows before eliding, as tshark does.
const BYTES_SHOWN: usize = 36;

/// An ordered list of fields being built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

/// Something that can lay out its fields in a [`Tree`].
pub trait Dissect {
    fn dissect(&self, t: &mut Tree);

    /// The fields as a fresh tree (mostly for tests).
    fn to_tree(&self) -> Tree {
        let mut t = Tree::new();
        self.dissect(&mut t);
        t
    }
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Adds a node as is.
    pub fn push(&mut self, node: Node) {
        self.nodes.push(node);
    }

    fn leaf(&mut self, key: &'static str, label: &str, value: Value, display: String) {
        self.nodes.push(Node {
            key,
            label: label.to_string(),
            value,
            display,
            children: Vec::new(),
        });
    }

    /// A layer or group: `f` adds its children.
    pub fn subtree(
        &mut self,
        key: &'static str,
        label: impl Into<String>,
        f: impl FnOnce(&mut Tree),
    ) {
        let mut sub = Tree::new();
        f(&mut sub);
        self.nodes.push(Node {
            key,
            label: label.into(),
            value: Value::None,
            display: String::new(),
            children: sub.nodes,
        });
    }

    /// A list of like items (slots, service entries, LUNs, descriptors), which `f` adds with
    /// one key: shown as a subtree, put in JSON as an array.
    pub fn list(&mut self, key: &'static str, label: impl Into<String>, f: impl FnOnce(&mut Tree)) {
        let mut sub = Tree::new();
        f(&mut sub);
        self.nodes.push(Node {
            key,
            label: label.into(),
            value: Value::List,
            display: String::new(),
            children: sub.nodes,
        });
    }

    /// An unsigned field shown in decimal.
    pub fn dec(&mut self, key: &'static str, label: &str, v: impl FieldUint) {
        let n: u64 = v.into();
        self.leaf(key, label, v.to_value(), n.to_string());
    }

    /// An unsigned field shown in hex with `digits` digits (`0x000001`).
    pub fn hex(&mut self, key: &'static str, label: &str, v: impl FieldUint, digits: usize) {
        let n: u64 = v.into();
        self.leaf(
            key,
            label,
            v.to_value(),
            format!("{n:#0w$x}", w = digits + 2),
        );
    }

    /// A code point shown as `Text (value)`.
    pub fn code(
        &mut self,
        key: &'static str,
        label: &str,
        v: impl FieldUint,
        text: impl fmt::Display,
    ) {
        let n: u64 = v.into();
        self.leaf(key, label, v.to_value(), format!("{text} ({n})"));
    }

    /// A code point shown as `Text (0xvalue)`.
    pub fn code_hex(
        &mut self,
        key: &'static str,
        label: &str,
        v: impl FieldUint,
        digits: usize,
        text: impl fmt::Display,
    ) {
        let n: u64 = v.into();
        self.leaf(
            key,
            label,
            v.to_value(),
            format!("{text} ({n:#0w$x})", w = digits + 2),
        );
    }

    /// A one-bit flag shown as `True`/`False`.
    pub fn flag(&mut self, key: &'static str, label: &str, v: bool) {
        self.leaf(
            key,
            label,
            Value::Bool(v),
            if v { "True" } else { "False" }.to_string(),
        );
    }

    /// Raw bytes shown in hex, elided after a few dozen bytes.
    pub fn bytes(&mut self, key: &'static str, label: &str, b: &[u8]) {
        let mut s = String::with_capacity(b.len().min(BYTES_SHOWN) * 2 + 3);
        for x in b.iter().take(BYTES_SHOWN) {
            let _ = write!(s, "{x:02x}");
        }
        if b.len() > BYTES_SHOWN {
            s.push('…');
        }
        if b.is_empty() {
            s.push_str("<none>");
        }
        self.leaf(key, label, Value::Bytes(b.to_vec()), s);
    }

    /// Free text.
    pub fn text(&mut self, key: &'static str, label: &str, s: impl Into<String>) {
        let s = s.into();
        self.leaf(key, label, Value::Text(s.clone()), s);
    }

    /// A GID: IPv4-mapped ones print as dotted quads, as tshark does.
    pub fn gid(&mut self, key: &'static str, label: &str, g: Gid) {
        self.leaf(key, label, Value::Gid(g), g.to_string());
    }

    /// A GUID in the kernel's colon form (`5054:00ff:fe77:000a`).
    pub fn guid(&mut self, key: &'static str, label: &str, g: Guid) {
        self.leaf(key, label, Value::U64(g.0), g.to_string());
    }

    /// An IP address in its usual text form.
    pub fn ip(&mut self, key: &'static str, label: &str, a: IpAddr) {
        self.leaf(key, label, Value::Ip(a), a.to_string());
    }

    /// A MAC address (`52:54:00:77:00:0a`).
    pub fn mac(&mut self, key: &'static str, label: &str, m: [u8; 6]) {
        self.leaf(key, label, Value::Mac(m), mac_text(&m));
    }

    /// Looks a node up by dotted key path (`"bth.psn"`), searching top-level nodes first.
    pub fn find(&self, path: &str) -> Option<&Node> {
        find_in(&self.nodes, path)
    }

    /// The unsigned value at `path`, if there is one.
    pub fn uint(&self, path: &str) -> Option<u64> {
        match self.find(path)?.value {
            Value::Uint(v) | Value::U64(v) => Some(v),
            Value::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The dotted path of the first key that repeats among its siblings outside a
    /// [`Tree::list`], if any. A tree without one maps to JSON with no field lost.
    pub fn duplicate_key(&self) -> Option<String> {
        fn walk(nodes: &[Node], prefix: &str, list: bool) -> Option<String> {
            for (i, n) in nodes.iter().enumerate() {
                let path = if prefix.is_empty() {
                    n.key.to_string()
                } else {
                    format!("{prefix}.{}", n.key)
                };
                if !list && nodes[..i].iter().any(|m| m.key == n.key) {
                    return Some(path);
                }
                if let Some(p) = walk(&n.children, &path, n.value == Value::List) {
                    return Some(p);
                }
            }
            None
        }
        walk(&self.nodes, "", false)
    }

    /// The `tshark -V`-style text: one line per field, four spaces per level.
    pub fn to_text(&self, indent: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            n.write_text(indent, &mut out);
        }
        out
    }
}

fn find_in<'a>(nodes: &'a [Node], path: &str) -> Option<&'a Node> {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let n = nodes.iter().find(|n| n.key == head)?;
    match rest {
        None => Some(n),
        Some(r) => find_in(&n.children, r),
    }
}

impl Node {
    fn write_text(&self, indent: usize, out: &mut String) {
        for _ in 0..indent {
            out.push_str("    ");
        }
        out.push_str(&self.label);
        if !self.display.is_empty() {
            out.push_str(": ");
            out.push_str(&self.display);
        }
        out.push('\n');
        for c in &self.children {
            c.write_text(indent + 1, out);
        }
    }
}

/// `Tree` as JSON (see the module docs): a map of keys to values and nested layers.
#[cfg(feature = "serde")]
mod json {
    use super::{mac_text, Node, Tree, Value};
    use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
    use std::net::Ipv6Addr;

    struct Nodes<'a>(&'a [Node]);

    impl Serialize for Nodes<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for n in self.0 {
                m.serialize_entry(n.key, n)?;
            }
            m.end()
        }
    }

    impl Serialize for Tree {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            Nodes(&self.nodes).serialize(s)
        }
    }

    impl Serialize for Node {
        /// A leaf is its value; a list the array of its children; another node with children
        /// the object of its children.
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if self.value == Value::List {
                s.collect_seq(&self.children)
            } else if self.children.is_empty() {
                self.value.serialize(s)
            } else {
                Nodes(&self.children).serialize(s)
            }
        }
    }

    impl Serialize for Value {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Value::None => s.serialize_unit(),
                Value::List => s.serialize_seq(Some(0))?.end(),
                Value::Uint(x) => s.serialize_u64(*x),
                Value::U64(x) => s.collect_str(&format_args!("{x:#018x}")),
                Value::Bool(b) => s.serialize_bool(*b),
                Value::Bytes(b) => {
                    let mut hex = String::with_capacity(b.len() * 2);
                    for x in b {
                        hex.push(char::from(b"0123456789abcdef"[usize::from(x >> 4)]));
                        hex.push(char::from(b"0123456789abcdef"[usize::from(x & 0xf)]));
                    }
                    s.serialize_str(&hex)
                }
                Value::Text(t) => s.serialize_str(t),
                Value::Ip(a) => s.collect_str(a),
                Value::Gid(g) => s.collect_str(&Ipv6Addr::from(g.0)),
                Value::Mac(m) => s.serialize_str(&mac_text(m)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tree {
        let mut t = Tree::new();
        t.subtree("bth", "Base Transport Header", |t| {
            t.code(
                "opcode",
                "Opcode",
                100u8,
                "Unreliable Datagram (UD) - SEND only",
            );
            t.hex("dqpn", "Destination Queue Pair", 1u32, 6);
            t.flag("ackreq", "Acknowledge Request", true);
        });
        t.bytes("data", "Data", &[0xde, 0xad, 0x22]);
        t
    }

    #[test]
    fn text_and_lookup() {
        let t = sample();
        assert_eq!(
            t.to_text(1),
            "    Base Transport Header\n        Opcode: Unreliable Datagram (UD) - SEND only (100)\n        Destination Queue Pair: 0x000001\n        Acknowledge Request: True\n    Data: dead22\n"
        );
        assert_eq!(t.uint("bth.dqpn"), Some(1));
        assert_eq!(t.uint("bth.ackreq"), Some(1));
        assert!(t.find("bth.nope").is_none());
    }

    #[test]
    fn values_typed_by_width() {
        let mut t = Tree::new();
        t.hex("tid", "Transaction ID", 0x0000_0002_f053_3aa9u64, 16);
        t.dec("qkey", "Q_Key", 0x8001_0000u32);
        t.guid("guid", "GUID", Guid(0x5054_00ff_fe77_000a));
        t.mac("mac", "MAC", [0x52, 0x54, 0, 0x77, 0, 0x0a]);
        assert_eq!(
            t.find("tid").map(|n| &n.value),
            Some(&Value::U64(0x2_f053_3aa9))
        );
        assert_eq!(
            t.find("qkey").map(|n| &n.value),
            Some(&Value::Uint(0x8001_0000))
        );
        assert_eq!(t.uint("tid"), Some(0x2_f053_3aa9));
        assert_eq!(t.uint("guid"), Some(0x5054_00ff_fe77_000a));
        assert_eq!(
            t.to_text(0),
            "Transaction ID: 0x00000002f0533aa9\nQ_Key: 2147549184\nGUID: 5054:00ff:fe77:000a\nMAC: 52:54:00:77:00:0a\n"
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json() {
        let mut t = sample();
        t.text("s", "S", "a\"b\\c\n\u{1}");
        assert_eq!(
            serde_json::to_string(&t).unwrap_or_default(),
            r#"{"bth":{"opcode":100,"dqpn":1,"ackreq":true},"data":"dead22","s":"a\"b\\c\n\u0001"}"#
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_u64_and_addresses_as_text() {
        // 5788252520563802123 > 2^53: as a JSON number, jq and JavaScript round it to
        // 5788252520563802000. As a hex string it survives any JSON parser.
        let big: u64 = 5_788_252_520_563_802_123;
        let mut t = Tree::new();
        t.hex("local_ca_guid", "Local CA GUID", big, 16);
        t.ip("v4", "IPv4", IpAddr::from([127, 0, 0, 2]));
        t.ip(
            "v6",
            "IPv6",
            "fe80::1".parse().unwrap_or(IpAddr::from([0; 16])),
        );
        t.gid(
            "gid_v4",
            "GID",
            Gid::from(std::net::Ipv4Addr::new(10, 77, 0, 10)),
        );
        t.gid(
            "gid_v6",
            "GID",
            Gid([
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x77, 0, 0x0a,
            ]),
        );
        t.mac("mac", "MAC", [0x02, 0x00, 0x7f, 0x00, 0x00, 0x01]);
        let s = serde_json::to_string(&t).unwrap_or_default();
        assert_eq!(
            s,
            r#"{"local_ca_guid":"0x505400fffe77000b","v4":"127.0.0.2","v6":"fe80::1","gid_v4":"::ffff:10.77.0.10","gid_v6":"fe80::5054:ff:fe77:a","mac":"02:00:7f:00:00:01"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_default();
        let text = v["local_ca_guid"].as_str().unwrap_or_default();
        assert_eq!(
            u64::from_str_radix(text.trim_start_matches("0x"), 16).ok(),
            Some(big)
        );
    }
}
