//! What the module tests share: the fixture captures (`fixtures/captures/*.pcap`, copies of
//! the lab's kernel captures) and a walk from a capture down to its RoCEv2 packets, on top of
//! the crate's own [`crate::pcap`] reader rather than a private one per module.

use crate::dissect::Tree;
use crate::link::LinkType;
use crate::pcap;
use std::path::PathBuf;

/// Where the fixture captures live.
fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/captures")
}

/// The bytes of one fixture capture.
pub fn fixture(name: &str) -> Vec<u8> {
    let p = captures_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The names of every fixture capture (`*.pcap`), sorted.
pub fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(captures_dir())
        .expect("fixtures/captures")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    v.sort();
    v
}

/// Every packet of a capture: (frame number from 1, as tshark counts; link type; bytes).
pub fn records(file: &[u8]) -> Vec<(usize, LinkType, &[u8])> {
    let (recs, err) = pcap::read_all(file).expect("a pcap or pcapng file");
    assert!(err.is_none(), "the capture ends early: {err:?}");
    recs.into_iter()
        .enumerate()
        .map(|(i, r)| (i + 1, r.linktype, r.data))
        .collect()
}

/// One RoCEv2 packet over IPv4 (UDP destination port 4791).
#[derive(Debug, Clone, Copy)]
pub struct RocePacket<'a> {
    /// Frame number from 1, as tshark counts.
    pub no: usize,
    /// The IPv4 header onwards.
    pub ip: &'a [u8],
    /// The UDP payload: BTH, extended headers, payload, pad, ICRC.
    pub bth: &'a [u8],
}

/// The RoCEv2-over-IPv4 packets of a capture with an Ethernet, Linux cooked v1 or raw IP
/// link layer (IPv4 IHL honoured; anything not IPv4/UDP to port 4791 is skipped).
pub fn roce_v4(file: &[u8]) -> Vec<RocePacket<'_>> {
    records(file)
        .into_iter()
        .filter_map(|(no, linktype, f)| {
            let l2 = match linktype {
                LinkType::ETHERNET => 14,
                LinkType::LINUX_SLL => 16,
                LinkType::RAW | LinkType::IPV4 => 0,
                other => panic!("linktype {other:?}"),
            };
            let ip = f.get(l2..)?;
            if ip.first().map(|b| b >> 4) != Some(4) || ip.get(9) != Some(&17) {
                return None;
            }
            let ihl = usize::from(ip[0] & 0xf) * 4;
            let udp = ip.get(ihl..)?;
            if udp.len() < 8 || u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
                return None;
            }
            Some(RocePacket {
                no,
                ip,
                bth: &udp[8..],
            })
        })
        .collect()
}

/// Renders a tree both ways (text, and JSON when the `serde` feature is on), checking that its
/// JSON object would lose no field (keys unique among siblings).
pub fn render(t: &Tree) {
    assert!(
        t.duplicate_key().is_none(),
        "duplicate key {:?}",
        t.duplicate_key()
    );
    let _ = t.to_text(0);
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_string(t).unwrap_or_default();
        assert!(json.starts_with('{'), "{json}");
    }
}
