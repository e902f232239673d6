//! Field trees: how a decoded packet is shown to people (`tshark -V` style) and machines (JSON).
//!
//! Each `Repr` implements [`Dissect`] by adding its fields to a [`Tree`] in wire order, with a
//! machine key (`"psn"`), a human label (`"Packet Sequence Number"`), a typed value and the
//! text shown after the label. Layers are subtrees (`"bth"`, `"deth"`, `"mad"`, `"cm_req"`...).
//! The decoder composes layers; tests look fields up by path (`"bth.psn"`).

use crate::types::Gid;
use core::fmt::{self, Write as _};

/// A field's value, typed for JSON output and for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A subtree or a label without a value.
    None,
    Uint(u64),
    Bool(bool),
    Bytes(Vec<u8>),
    Text(String),
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

    /// An unsigned field shown in decimal.
    pub fn dec(&mut self, key: &'static str, label: &str, v: impl Into<u64>) {
        let v = v.into();
        self.leaf(key, label, Value::Uint(v), v.to_string());
    }

    /// An unsigned field shown in hex with `digits` digits (`0x000001`).
    pub fn hex(&mut self, key: &'static str, label: &str, v: impl Into<u64>, digits: usize) {
        let v = v.into();
        self.leaf(
            key,
            label,
            Value::Uint(v),
            format!("{v:#0w$x}", w = digits + 2),
        );
    }

    /// A code point shown as `Text (value)`.
    pub fn code(
        &mut self,
        key: &'static str,
        label: &str,
        v: impl Into<u64>,
        text: impl fmt::Display,
    ) {
        let v = v.into();
        self.leaf(key, label, Value::Uint(v), format!("{text} ({v})"));
    }

    /// A code point shown as `Text (0xvalue)`.
    pub fn code_hex(
        &mut self,
        key: &'static str,
        label: &str,
        v: impl Into<u64>,
        digits: usize,
        text: impl fmt::Display,
    ) {
        let v = v.into();
        self.leaf(
            key,
            label,
            Value::Uint(v),
            format!("{text} ({v:#0w$x})", w = digits + 2),
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
        self.leaf(key, label, Value::Bytes(g.0.to_vec()), g.to_string());
    }

    /// Looks a node up by dotted key path (`"bth.psn"`), searching top-level nodes first.
    pub fn find(&self, path: &str) -> Option<&Node> {
        find_in(&self.nodes, path)
    }

    /// The unsigned value at `path`, if there is one.
    pub fn uint(&self, path: &str) -> Option<u64> {
        match self.find(path)?.value {
            Value::Uint(v) => Some(v),
            Value::Bool(b) => Some(u64::from(b)),
            _ => None,
        }
    }

    /// The `tshark -V`-style text: one line per field, four spaces per level.
    pub fn to_text(&self, indent: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            n.write_text(indent, &mut out);
        }
        out
    }

    /// A JSON object: `{"key": value, "layer": {...}}`.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_json_object(&self.nodes, &mut out);
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

fn write_json_object(nodes: &[Node], out: &mut String) {
    out.push('{');
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_str(n.key, out);
        out.push(':');
        if n.children.is_empty() {
            write_json_value(&n.value, out);
        } else {
            write_json_object(&n.children, out);
        }
    }
    out.push('}');
}

fn write_json_value(v: &Value, out: &mut String) {
    match v {
        Value::None => out.push_str("null"),
        Value::Uint(x) => {
            let _ = write!(out, "{x}");
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Bytes(b) => {
            out.push('"');
            for x in b {
                let _ = write!(out, "{x:02x}");
            }
            out.push('"');
        }
        Value::Text(s) => write_json_str(s, out),
    }
}

/// Writes `s` as a JSON string literal.
pub fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json() {
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
        assert_eq!(
            t.to_text(1),
            "    Base Transport Header\n        Opcode: Unreliable Datagram (UD) - SEND only (100)\n        Destination Queue Pair: 0x000001\n        Acknowledge Request: True\n    Data: dead22\n"
        );
        assert_eq!(
            t.to_json(),
            r#"{"bth":{"opcode":100,"dqpn":1,"ackreq":true},"data":"dead22"}"#
        );
        assert_eq!(t.uint("bth.dqpn"), Some(1));
        assert_eq!(t.uint("bth.ackreq"), Some(1));
        assert!(t.find("bth.nope").is_none());
    }

    #[test]
    fn json_escapes() {
        let mut t = Tree::new();
        t.text("s", "S", "a\"b\\c\n\u{1}");
        assert_eq!(t.to_json(), r#"{"s":"a\"b\\c\n\u0001"}"#);
    }
}
