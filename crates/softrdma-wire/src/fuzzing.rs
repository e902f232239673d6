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
pub const TARGETS: &[&str] = &[
    "link", "pcap", "frame", "roce", "icrc", "mad", "cm", "rdma_cm", "dm", "srp", "scsi", "nbd",
];

/// Runs the body of the target `name` on `data`. Unknown names panic (a test bug).
pub fn run(name: &str, data: &[u8]) {
    match name {
        "link" => link(data),
        "pcap" => pcap(data),
        "frame" => frame(data),
        "roce" => roce(data),
        "icrc" => icrc(data),
        "mad" => mad(data),
        "cm" => cm(data),
        "rdma_cm" => rdma_cm(data),
        "dm" => dm(data),
        "srp" => srp(data),
        "scsi" => scsi(data),
        "nbd" => nbd(data),
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
    // Keys unique among siblings: the JSON object loses no field.
    assert_eq!(t.duplicate_key(), None);
}

/// A RoCEv2 UDP payload: the composite re-emits to exactly the input.
pub fn roce(data: &[u8]) {
    if let Ok(r) = crate::roce::RoceRepr::parse(data) {
        assert_eq!(r.to_bytes(), data);
        let _ = r.to_tree().to_text(0);
    }
}

/// An IP packet carrying RoCEv2: computing, verifying and filling the ICRC agree.
pub fn icrc(data: &[u8]) {
    let computed = crate::icrc::compute(data);
    let verified = crate::icrc::verify(data);
    if let (Ok(c), Ok(v)) = (computed, verified) {
        assert_eq!(v, crate::icrc::stored_in(data).ok() == Some(c));
        let mut copy = data.to_vec();
        if crate::icrc::fill(&mut copy).is_ok() {
            assert_eq!(crate::icrc::verify(&copy).ok(), Some(true));
        }
    }
    // A header memo warmed by the same headers with another IPv4 ID and PSN word gives what a
    // fresh computation gives, and verifies as a fresh check does. (Not the whole-packet
    // path: a socket's view rebuilds the IP and UDP lengths from the payload, and an input
    // may claim others.)
    if let Ok((flow, ident, roce)) = crate::icrc::flow_of(data) {
        let mut memo = crate::icrc::HeaderMemo::default();
        let mut other = roce.to_vec();
        if let Some(b) = other.get_mut(9) {
            *b ^= 0x5a;
        }
        let other_id = crate::icrc::Ipv4Ident {
            id: ident.id ^ 0xa55a,
            ..ident
        };
        let _ = memo.compute_udp(&flow, other_id, &other);
        assert_eq!(
            memo.compute_udp(&flow, ident, roce).ok(),
            crate::icrc::compute_udp(&flow, ident, roce).ok(),
            "a warm memo against a fresh one"
        );
        assert_eq!(
            memo.verify_udp(&flow, roce).ok(),
            crate::icrc::verify_udp(&flow, roce).ok()
        );
    }
}

/// A 256-byte MAD.
pub fn mad(data: &[u8]) {
    if let Ok(m) = crate::mad::Mad::parse(data) {
        assert_eq!(Some(&m.to_bytes()[..]), data.get(..256));
        let _ = m.to_tree().to_text(0);
    }
}

/// The attribute ID at MAD offset 16 and the 232 data bytes after the 24-byte header.
fn attr_and_data(data: &[u8]) -> Option<(u16, &[u8])> {
    let attr = u16::from_be_bytes([*data.get(16)?, *data.get(17)?]);
    Some((attr, data.get(24..)?))
}

/// A CM message (input laid out as a MAD: attribute ID at 16, data from 24).
pub fn cm(data: &[u8]) {
    let Some((attr, body)) = attr_and_data(data) else {
        return;
    };
    if let Ok(m) = crate::cm::CmMessage::parse(attr, body) {
        let b = m.to_bytes();
        assert_eq!(crate::cm::CmMessage::parse(attr, &b).ok(), Some(m.clone()));
        let _ = m.to_tree().to_text(0);
    }
}

/// The RDMA CM IP private-data header.
pub fn rdma_cm(data: &[u8]) {
    if let Ok(h) = crate::rdma_cm::IpCmHeader::parse(data) {
        let b = h.to_bytes();
        assert_eq!(crate::rdma_cm::IpCmHeader::parse(&b).ok(), Some(h));
    }
}

/// A device-management MAD (attribute ID at 16, data from 24).
pub fn dm(data: &[u8]) {
    let Some((attr, body)) = attr_and_data(data) else {
        return;
    };
    let id = crate::dm::DmAttributeId(attr);
    if let Ok(r) = crate::dm::Repr::parse(id, body) {
        let b = r.to_bytes();
        assert_eq!(crate::dm::Repr::parse(id, &b).ok(), Some(r.clone()));
        let _ = r.to_tree().to_text(0);
    }
}

/// An SRP IU, in both the opcode-first and the RDMA CM login forms.
pub fn srp(data: &[u8]) {
    use crate::srp::SrpIu;
    if let Ok(iu) = SrpIu::parse(data) {
        let b = iu.to_bytes();
        assert_eq!(SrpIu::parse(&b).ok(), Some(iu.clone()));
        let _ = iu.to_tree().to_text(0);
    }
    if let Ok(iu) = SrpIu::parse_login_req_rdma(data) {
        let b = iu.to_bytes();
        assert_eq!(SrpIu::parse_login_req_rdma(&b).ok(), Some(iu.clone()));
    }
}

/// A SCSI CDB.
pub fn scsi(data: &[u8]) {
    if let Ok(c) = crate::scsi::Cdb::parse(data) {
        let b = c.to_bytes();
        assert_eq!(crate::scsi::Cdb::parse(&b).ok(), Some(c.clone()));
        let _ = c.to_tree().to_text(0);
    }
}

/// The NBD handshake and transmission structures (what `softrdma srp nbd` reads from its
/// clients); the first byte picks the structure, so the fuzzer reaches each one.
pub fn nbd(data: &[u8]) {
    use crate::nbd::*;
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 7 {
        0 => round_trip!(GreetingRepr, rest),
        1 => round_trip!(OptionRepr, rest),
        2 => round_trip!(OptionReplyRepr, rest),
        3 => round_trip!(InfoRequestRepr, rest),
        4 => round_trip!(InfoRepr, rest),
        5 => round_trip!(RequestRepr, rest),
        _ => {
            round_trip!(SimpleReplyRepr, rest);
            if let Ok(r) = ExportNameReplyRepr::parse(rest) {
                assert_eq!(ExportNameReplyRepr::parse(&r.to_bytes()).ok(), Some(r));
            }
        }
    }
}
