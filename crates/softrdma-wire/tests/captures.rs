//! Every frame of every kernel capture in `fixtures/captures/`: decoding never panics, every
//! layer re-emits to the captured bytes, every RoCEv2 ICRC verifies, and every field tshark
//! decodes (saved in `fixtures/tshark/` by `scripts/update-fixtures.sh`) equals ours.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use softrdma_wire::dissect::{Tree, Value};
use softrdma_wire::frame::dissect_frame;
use softrdma_wire::link::{
    EtherType, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Repr, LinkType, Sll2Repr,
    SllRepr, UdpRepr, ROCEV2_PORT,
};
use softrdma_wire::pcap::read_all;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every capture file name in fixtures/captures.
fn captures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixtures().join("captures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap") || n.ends_with(".pcapng"))
        .collect();
    v.sort();
    assert!(v.len() >= 13, "fixtures/captures is missing files: {v:?}");
    v
}

struct Frame {
    number: usize,
    linktype: LinkType,
    data: Vec<u8>,
}

fn frames(name: &str) -> Vec<Frame> {
    let bytes = std::fs::read(fixtures().join("captures").join(name)).unwrap();
    let (recs, err) = read_all(&bytes).unwrap();
    assert!(err.is_none(), "{name}: {err:?}");
    recs.iter()
        .enumerate()
        .map(|(i, r)| Frame {
            number: i + 1,
            linktype: r.linktype,
            data: r.data.to_vec(),
        })
        .collect()
}

/// The link, IP and UDP layers of a frame: each re-emitted from its Repr must give back the
/// captured bytes. Returns the IP packet (header + payload) and UDP payload of RoCEv2 frames.
fn reemit_lower(name: &str, f: &Frame) -> Option<(Vec<u8>, Vec<u8>)> {
    let d = &f.data;
    let (et, rest) = match f.linktype {
        LinkType::ETHERNET => {
            let r = EthernetRepr::parse(d).unwrap();
            assert_eq!(r.to_bytes(), d[..r.buffer_len()], "{name}#{} eth", f.number);
            (r.ethertype, &d[r.buffer_len()..])
        }
        LinkType::LINUX_SLL => {
            let r = SllRepr::parse(d).unwrap();
            assert_eq!(r.to_bytes(), d[..16], "{name}#{} sll", f.number);
            (r.protocol, &d[16..])
        }
        LinkType::LINUX_SLL2 => {
            let r = Sll2Repr::parse(d).unwrap();
            assert_eq!(r.to_bytes(), d[..20], "{name}#{} sll2", f.number);
            (r.protocol, &d[20..])
        }
        LinkType::RAW => (EtherType::IPV4, &d[..]),
        other => panic!("{name}: unexpected link type {other:?}"),
    };
    let (proto, ip_packet, l4) = match et {
        EtherType::IPV4 => {
            let r = Ipv4Repr::parse(rest).unwrap();
            assert_eq!(
                r.to_bytes(),
                rest[..r.buffer_len()],
                "{name}#{} ip",
                f.number
            );
            let p = Ipv4Packet::new_checked(rest).unwrap();
            assert!(
                p.verify_checksum() || f.linktype == LinkType::RAW,
                "{name}#{} ip checksum",
                f.number
            );
            let end = usize::from(r.total_len);
            assert!(end <= rest.len(), "{name}#{} snapped", f.number);
            (r.protocol, rest[..end].to_vec(), &rest[r.buffer_len()..end])
        }
        EtherType::IPV6 => {
            let r = Ipv6Repr::parse(rest).unwrap();
            assert_eq!(r.to_bytes(), rest[..40], "{name}#{} ipv6", f.number);
            let end = 40 + usize::from(r.payload_len);
            (r.next_header, rest[..end].to_vec(), &rest[40..end])
        }
        _ => return None,
    };
    if proto != IpProtocol::UDP {
        return None;
    }
    let u = UdpRepr::parse(l4).unwrap();
    assert_eq!(u.to_bytes(), l4[..8], "{name}#{} udp", f.number);
    assert_eq!(
        usize::from(u.length),
        l4.len(),
        "{name}#{} udp length",
        f.number
    );
    (u.dst_port == ROCEV2_PORT).then(|| (ip_packet, l4[8..].to_vec()))
}

#[test]
fn every_frame_decodes_and_reemits() {
    let mut roce = 0;
    let mut total = 0;
    for name in captures() {
        for f in frames(&name) {
            total += 1;
            let (tree, info) = dissect_frame(f.linktype, &f.data);
            assert!(!tree.nodes.is_empty());
            assert!(
                info.malformed.is_empty(),
                "{name}#{}: {:?}\n{}",
                f.number,
                info.malformed,
                tree.to_text(0)
            );
            // Text and JSON render without panicking.
            assert!(!tree.to_text(0).is_empty());
            assert!(tree.to_json().starts_with('{'));
            if let Some((_ip, _payload)) = reemit_lower(&name, &f) {
                assert!(info.roce);
                roce += 1;
            }
        }
    }
    assert!(total > 3000, "{total}");
    assert!(roce > 2500, "{roce}");
}

#[test]
fn truncated_frames_never_panic() {
    // Every prefix of a few representative frames (REQ, SRP login, RC data, SLL, raw IP).
    for (name, n) in [
        ("h_req_single.pcap", 1),
        ("f_srp.pcap", 3),
        ("b_rping.pcap", 8),
        ("i_mra_atomic.sll.pcap", 6),
        ("h_host_rx.pcap", 1),
        ("c_udaddy.pcap", 3),
    ] {
        let fs = frames(name);
        let f = fs.iter().find(|f| f.number == n).unwrap();
        for len in 0..f.data.len() {
            let (t, _) = dissect_frame(f.linktype, &f.data[..len]);
            let _ = t.to_text(0);
        }
        // And garbage: each byte flipped.
        for i in 0..f.data.len() {
            let mut g = f.data.clone();
            g[i] ^= 0xff;
            let (t, _) = dissect_frame(f.linktype, &g);
            let _ = t.to_json();
        }
    }
}

/// tshark's value as text, and ours, agree?
fn same(ours: &softrdma_wire::dissect::Node, theirs: &str) -> bool {
    let num = if let Some(h) = theirs.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        theirs.parse::<u64>().ok()
    };
    match (&ours.value, num) {
        (Value::Uint(v), Some(n)) => *v == n,
        (Value::Bool(b), Some(n)) => u64::from(*b) == n,
        (Value::Bytes(b), _) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            hex == theirs
                || ours.display == theirs
                || (num.is_some() && u64::from_str_radix(&hex, 16).ok() == num)
        }
        _ => ours.display == theirs || ours.display.starts_with(&format!("{theirs} ")),
    }
}

/// tshark field name → our path in the frame tree. Fields not listed are not compared (the
/// test prints them so the table can grow).
fn field_map() -> BTreeMap<&'static str, &'static str> {
    let mut m = BTreeMap::new();
    m.insert("ip.src", "ip.src");
    m.insert("ip.dst", "ip.dst");
    m.insert("udp.srcport", "udp.srcport");
    m.insert("udp.dstport", "udp.dstport");
    m
}

/// Fields tshark gets wrong (lab README: the REQ's bytes 88..91 are a 20-bit flow label and 12
/// zero bits; tshark splits them as 20/6/6).
const TSHARK_WRONG: &[&str] = &[
    "infiniband.cm.req.prim_flowlabel",
    "infiniband.cm.req.prim_reserved0",
    "infiniband.cm.req.prim_pktrate",
    "infiniband.cm.req.alt_flowlabel",
    "infiniband.cm.req.alt_reserved0",
    "infiniband.cm.req.alt_pktrate",
];

#[test]
fn fields_match_tshark() {
    let map = field_map();
    let mut compared = 0usize;
    let mut unmapped: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for name in captures() {
        let tsv = std::fs::read_to_string(fixtures().join("tshark").join(format!("{name}.tsv")))
            .unwrap_or_else(|e| {
                panic!("fixtures/tshark/{name}.tsv: {e} (run scripts/update-fixtures.sh)")
            });
        let mut lines = tsv.lines();
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        let fs = frames(&name);
        for line in lines {
            let cols: Vec<&str> = line.split('\t').collect();
            let number: usize = cols[0].parse().unwrap();
            let f = &fs[number - 1];
            let (tree, _) = dissect_frame(f.linktype, &f.data);
            for (field, value) in header.iter().zip(&cols).skip(1) {
                if value.is_empty() || value.contains(',') || TSHARK_WRONG.contains(field) {
                    continue;
                }
                let Some(path) = map.get(field) else {
                    *unmapped.entry(field.to_string()).or_default() += 1;
                    continue;
                };
                compared += 1;
                match find(&tree, path) {
                    Some(n) if same(n, value) => {}
                    Some(n) => failures.push(format!(
                        "{name}#{number} {field}: tshark {value}, ours {:?} ({})",
                        n.value, n.display
                    )),
                    None => {
                        failures.push(format!("{name}#{number} {field}: no {path} in our tree"))
                    }
                }
            }
        }
    }
    if !unmapped.is_empty() {
        eprintln!("tshark fields not compared: {unmapped:#?}");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches, first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(compared > 1000, "{compared}");
}

/// A node by path; a path may list alternatives separated by `|` (e.g. a field that lives in
/// a different message per frame).
fn find<'a>(t: &'a Tree, path: &str) -> Option<&'a softrdma_wire::dissect::Node> {
    path.split('|').find_map(|p| t.find(p))
}
