//! Whole-frame decoding: from the first byte of a captured frame to the innermost layer we
//! understand, as one field tree (what `softrdma decode` prints).
//!
//! The chain is link (Ethernet II / Linux cooked v1, v2 / raw IP) → IPv4 or IPv6 → UDP → on
//! port 4791 RoCEv2: BTH and the extended headers, the ICRC (checked), and inside QP1 MADs the
//! MAD header and the CM message or DM attribute, inside CM private data the RDMA CM IP header
//! and SRP login IUs, inside RC SENDs SRP IUs and their SCSI CDBs.
//!
//! Decoding never fails as a whole: a layer that does not parse becomes a node
//! `[Malformed: <error>]` followed by the layer's bytes, and the layers before it stay.

use crate::dissect::Dissect;
use crate::dissect::{Node, Tree, Value};
use crate::link::{
    EtherType, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, LinkType,
    Sll2Repr, SllRepr, UdpPacket, UdpRepr, ROCEV2_PORT,
};
use crate::Error;
use std::net::IpAddr;

/// What a frame was, in brief: for summaries, filters and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameInfo {
    /// Protocol keys in order, as tshark's "Protocols in frame" (`eth:ethertype:ip:udp:infiniband`).
    pub protocols: Vec<&'static str>,
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    /// Whether the frame carries RoCEv2 (UDP port 4791).
    pub roce: bool,
    /// Whether the ICRC verified (`None`: not RoCE, or too short to have one).
    pub icrc_ok: Option<bool>,
    /// One line saying what the packet is (like tshark's Info column).
    pub info: String,
    /// The error of every layer that did not parse.
    pub malformed: Vec<Error>,
}

/// Where the network layer of a RoCEv2 packet is, for the ICRC (which covers it).
#[derive(Debug, Clone, Copy)]
pub struct IpContext<'a> {
    /// The IP header and everything after it (up to the IP length).
    pub ip_packet: &'a [u8],
    pub v6: bool,
}

/// Adds `[Malformed: err]` and the bytes that could not be decoded.
pub fn malformed(t: &mut Tree, info: &mut FrameInfo, err: Error, rest: &[u8]) {
    t.push(Node {
        key: "_malformed",
        label: format!("[Malformed: {err}]"),
        value: Value::Text(err.to_string()),
        display: String::new(),
        children: Vec::new(),
    });
    if !rest.is_empty() {
        data(t, "_malformed_data", rest);
    }
    info.malformed.push(err);
}

/// Undecoded bytes, labelled with their length as tshark does ("Data (12 bytes)").
pub fn data(t: &mut Tree, key: &'static str, b: &[u8]) {
    t.bytes(key, &format!("Data ({} bytes)", b.len()), b);
}

/// Decodes one captured frame whose first byte is the start of a `linktype` header.
pub fn dissect_frame(linktype: LinkType, bytes: &[u8]) -> (Tree, FrameInfo) {
    let mut t = Tree::new();
    let mut info = FrameInfo::default();
    match linktype {
        LinkType::ETHERNET => match EthernetRepr::parse(bytes) {
            Ok(eth) => {
                info.protocols.extend(["eth", "ethertype"]);
                let hl = eth.buffer_len();
                eth.dissect(&mut t);
                let rest = bytes.get(hl..).unwrap_or(&[]);
                network(&mut t, &mut info, eth.ethertype, rest);
            }
            Err(e) => malformed(&mut t, &mut info, e, bytes),
        },
        LinkType::LINUX_SLL => match SllRepr::parse(bytes) {
            Ok(sll) => {
                info.protocols.extend(["sll", "ethertype"]);
                sll.dissect(&mut t);
                let rest = bytes.get(sll.buffer_len()..).unwrap_or(&[]);
                network(&mut t, &mut info, sll.protocol, rest);
            }
            Err(e) => malformed(&mut t, &mut info, e, bytes),
        },
        LinkType::LINUX_SLL2 => match Sll2Repr::parse(bytes) {
            Ok(sll) => {
                info.protocols.extend(["sll", "ethertype"]);
                sll.dissect(&mut t);
                let rest = bytes.get(sll.buffer_len()..).unwrap_or(&[]);
                network(&mut t, &mut info, sll.protocol, rest);
            }
            Err(e) => malformed(&mut t, &mut info, e, bytes),
        },
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => {
            info.protocols.push("raw");
            let et = match bytes.first().map(|b| b >> 4) {
                Some(6) => EtherType::IPV6,
                _ => EtherType::IPV4,
            };
            network(&mut t, &mut info, et, bytes);
        }
        other => {
            t.text(
                "_unknown_link",
                "Link type",
                format!("{other} (not decoded)"),
            );
            data(&mut t, "data", bytes);
            info.info = format!("link type {}", other.0);
        }
    }
    (t, info)
}

fn network(t: &mut Tree, info: &mut FrameInfo, et: EtherType, bytes: &[u8]) {
    match et {
        EtherType::IPV4 => match Ipv4Repr::parse(bytes) {
            Ok(ip) => {
                info.protocols.push("ip");
                info.src = Some(IpAddr::V4(ip.src));
                info.dst = Some(IpAddr::V4(ip.dst));
                ip.dissect(t);
                let view = Ipv4Packet::new_unchecked(bytes);
                let payload = view.payload();
                let end = ip.buffer_len() + payload.len();
                let ctx = IpContext {
                    ip_packet: bytes.get(..end).unwrap_or(bytes),
                    v6: false,
                };
                if ip.frag_offset != 0 || ip.flags & crate::link::ipv4::FLAG_MF != 0 {
                    data(t, "data", payload);
                    info.info = "IPv4 fragment".into();
                    return;
                }
                transport(t, info, ip.protocol, payload, ctx);
            }
            Err(e) => malformed(t, info, e, bytes),
        },
        EtherType::IPV6 => match Ipv6Repr::parse(bytes) {
            Ok(ip) => {
                info.protocols.push("ipv6");
                info.src = Some(IpAddr::V6(ip.src));
                info.dst = Some(IpAddr::V6(ip.dst));
                ip.dissect(t);
                let view = Ipv6Packet::new_unchecked(bytes);
                let payload = view.payload();
                let end = ip.buffer_len() + payload.len();
                let ctx = IpContext {
                    ip_packet: bytes.get(..end).unwrap_or(bytes),
                    v6: true,
                };
                transport(t, info, ip.next_header, payload, ctx);
            }
            Err(e) => malformed(t, info, e, bytes),
        },
        other => {
            info.protocols.push(match other {
                EtherType::ARP => "arp",
                _ => "data",
            });
            info.info = format!(
                "{} ({:#06x})",
                other.description().unwrap_or("EtherType"),
                other.0
            );
            data(t, "data", bytes);
        }
    }
}

fn transport(
    t: &mut Tree,
    info: &mut FrameInfo,
    proto: IpProtocol,
    bytes: &[u8],
    ctx: IpContext<'_>,
) {
    if proto != IpProtocol::UDP {
        info.protocols.push(match proto {
            IpProtocol::TCP => "tcp",
            IpProtocol::ICMP => "icmp",
            IpProtocol::ICMPV6 => "icmpv6",
            _ => "data",
        });
        info.info = format!("{proto}");
        data(t, "data", bytes);
        return;
    }
    match UdpRepr::parse(bytes) {
        Ok(udp) => {
            info.protocols.push("udp");
            info.src_port = Some(udp.src_port);
            info.dst_port = Some(udp.dst_port);
            udp.dissect(t);
            let view = UdpPacket::new_unchecked(bytes);
            let payload = view.payload();
            if udp.dst_port == ROCEV2_PORT {
                info.roce = true;
                info.protocols.push("infiniband");
                let mut ib = Tree::new();
                crate::frame::infiniband(&mut ib, info, payload, ctx);
                t.push(Node {
                    key: "infiniband",
                    label: "InfiniBand".into(),
                    value: Value::None,
                    display: String::new(),
                    children: ib.nodes,
                });
            } else {
                info.protocols.push("data");
                info.info = format!("UDP {} → {}", udp.src_port, udp.dst_port);
                data(t, "data", payload);
            }
        }
        Err(e) => malformed(t, info, e, bytes),
    }
}

/// RoCEv2: everything after the UDP header.
fn infiniband(t: &mut Tree, info: &mut FrameInfo, payload: &[u8], _ctx: IpContext<'_>) {
    info.info = "RoCEv2".into();
    data(t, "data", payload);
}
