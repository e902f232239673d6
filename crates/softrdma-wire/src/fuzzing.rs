//! Fuzz bodies: one per parser, shared by the cargo-fuzz targets in `fuzz/` and by the plain
//! test that replays the committed corpus (`tests/fuzz_corpus.rs`), so CI exercises every
//! corpus file on stable without nightly.
//!
//! Each body feeds arbitrary bytes to a parser; it must not panic, and whatever parses must
//! re-emit to bytes that parse to the same value (and, where the format has no slack, to the
//! same bytes).

use crate::dissect::Dissect;
use crate::link::{EthernetRepr, Ipv4Repr, Ipv6Repr, LinkType, Sll2Repr, SllRepr, UdpRepr};

/// The fuzz targets, by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[&str] = &["link", "pcap", "frame"];

/// Runs the body of the target `name` on `data`. Unknown names panic (a test bug).
pub fn run(name: &str, data: &[u8]) {
    match name {
        "link" => link(data),
        "pcap" => pcap(data),
        "frame" => frame(data),
        other => panic!("no fuzz target {other}"),
    }
}

/// Parse → emit → parse must be a fixed point, and the emitted bytes the parsed prefix.
macro_rules! round_trip {
    ($ty:ty, $data:expr) => {{
        if let Ok(r) = <$ty>::parse($data) {
            let b = r.to_bytes();
            assert_eq!(b.len(), r.buffer_len());
            assert_eq!(Some(&b[..]), $data.get(..b.len()), "{}", stringify!($ty));
            assert_eq!(<$ty>::parse(&b).ok(), Some(r.clone()));
            let _ = r.to_tree().to_text(0);
        }
    }};
}

/// Link, IP and UDP headers.
pub fn link(data: &[u8]) {
    round_trip!(EthernetRepr, data);
    round_trip!(SllRepr, data);
    round_trip!(Sll2Repr, data);
    round_trip!(Ipv6Repr, data);
    round_trip!(UdpRepr, data);
    // IPv4: the header re-emits exactly (total length may exceed what parse saw; fine).
    round_trip!(Ipv4Repr, data);
}

/// The capture-file reader.
pub fn pcap(data: &[u8]) {
    if let Ok(r) = crate::pcap::Reader::new(data) {
        for rec in r.take(10_000) {
            match rec {
                Ok(rec) => assert!(rec.data.len() <= data.len()),
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
}

/// A whole frame; the first byte picks the link type.
pub fn frame(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let lt = match sel % 5 {
        0 => LinkType::ETHERNET,
        1 => LinkType::LINUX_SLL,
        2 => LinkType::LINUX_SLL2,
        3 => LinkType::RAW,
        _ => LinkType(u32::from(sel)),
    };
    let (t, _info) = crate::frame::dissect_frame(lt, rest);
    let _ = t.to_text(0);
    let _ = t.to_json();
}
