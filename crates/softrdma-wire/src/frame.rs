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

use crate::cm::CmMessage;
use crate::dissect::Dissect;
use crate::dissect::{Node, Tree, Value};
use crate::dm::{DmAttributeId, Repr as DmRepr};
use crate::icrc;
use crate::link::{
    EtherType, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, LinkType,
    Sll2Repr, SllRepr, UdpPacket, UdpRepr, ROCEV2_PORT,
};
use crate::mad::{Mad, MgmtClass};
use crate::rdma_cm;
use crate::roce::{Opcode, RoceRepr};
use crate::srp::{Opcode as SrpOpcode, SrpIu};
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
        LinkType::ETHERNET => {
            let eth = EthernetRepr::parse(bytes).map(|h| (h.buffer_len(), h.ethertype, h));
            link(&mut t, &mut info, "eth", eth, bytes);
        }
        LinkType::LINUX_SLL => {
            let sll = SllRepr::parse(bytes).map(|h| (h.buffer_len(), h.protocol, h));
            link(&mut t, &mut info, "sll", sll, bytes);
        }
        LinkType::LINUX_SLL2 => {
            let sll = Sll2Repr::parse(bytes).map(|h| (h.buffer_len(), h.protocol, h));
            link(&mut t, &mut info, "sll", sll, bytes);
        }
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

/// A link-layer header (`parsed`: its length, the EtherType of what follows, and the header)
/// named `protocol` by tshark, then the network layer after it.
fn link(
    t: &mut Tree,
    info: &mut FrameInfo,
    protocol: &'static str,
    parsed: crate::Result<(usize, EtherType, impl Dissect)>,
    bytes: &[u8],
) {
    match parsed {
        Ok((header_len, et, header)) => {
            info.protocols.extend([protocol, "ethertype"]);
            header.dissect(t);
            let rest = bytes.get(header_len..).unwrap_or(&[]);
            network(t, info, et, rest);
        }
        Err(e) => malformed(t, info, e, bytes),
    }
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

/// RoCEv2: everything after the UDP header — transport headers, the payload as a MAD, an SRP
/// IU or data, and the ICRC with its verdict last (where tshark shows it).
fn infiniband(t: &mut Tree, info: &mut FrameInfo, payload: &[u8], ctx: IpContext<'_>) {
    let r = match RoceRepr::parse(payload) {
        Ok(r) => r,
        Err(e) => {
            info.info = "RoCEv2 (malformed)".into();
            return malformed(t, info, e, payload);
        }
    };
    let mut hdrs = Tree::new();
    r.dissect_headers(&mut hdrs);
    // dissect_headers ends with the ICRC; it goes after the payload's layers.
    let icrc_node = hdrs
        .nodes
        .iter()
        .position(|n| n.key == "icrc")
        .map(|i| hdrs.nodes.remove(i));
    t.nodes.extend(hdrs.nodes);
    let op = r.bth.opcode;
    info.info = op.tshark_text().to_string();

    if r.deth.is_some() && r.bth.dest_qp == 1 && op == Opcode::UD_SEND_ONLY {
        mad(t, info, r.payload);
    } else if is_send_start(op) && !r.payload.is_empty() {
        match srp_in_send(r.payload) {
            Some(iu) => {
                info.info = format!("{} {}", info.info, iu.opcode());
                iu.dissect(t);
            }
            None => data(t, "data", r.payload),
        }
    } else if !r.payload.is_empty() {
        data(t, "data", r.payload);
    }
    if !r.pad.is_empty() {
        t.bytes("pad", "Padding", r.pad);
    }

    let ok = icrc::verify(ctx.ip_packet).ok();
    info.icrc_ok = ok;
    if let Some(mut n) = icrc_node {
        let verdict = match ok {
            Some(true) => " [correct]".to_string(),
            Some(false) => match icrc::compute(ctx.ip_packet) {
                Ok(c) => format!(" [incorrect, should be {:#010x}]", c.swap_bytes()),
                Err(_) => " [incorrect]".to_string(),
            },
            None => " [not checked]".to_string(),
        };
        n.display.push_str(&verdict);
        t.push(n);
        t.push(Node {
            key: "icrc_status",
            label: "[ICRC status".into(),
            value: ok.map_or(Value::None, Value::Bool),
            display: match ok {
                Some(true) => "Good]".into(),
                Some(false) => "Bad]".into(),
                None => "Unverified]".into(),
            },
            children: Vec::new(),
        });
    }
}

/// RC/UC SEND first or only: where an SRP IU starts.
fn is_send_start(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::RC_SEND_FIRST
            | Opcode::RC_SEND_ONLY
            | Opcode::RC_SEND_ONLY_WITH_IMMEDIATE
            | Opcode::RC_SEND_ONLY_WITH_INVALIDATE
    )
}

/// An SRP IU in a SEND, if the payload looks like one: an opcode SRP sends over a channel (not
/// a login, which travels in CM private data), the fixed part's reserved bytes zero as the
/// kernel leaves them, and a clean parse. Anything else (rping's buffer descriptors,
/// ucmatose's text) stays data.
fn srp_in_send(p: &[u8]) -> Option<SrpIu> {
    let op = SrpOpcode(*p.first()?);
    if !op.is_known()
        || matches!(
            op,
            SrpOpcode::LOGIN_REQ | SrpOpcode::LOGIN_RSP | SrpOpcode::LOGIN_REJ
        )
    {
        return None;
    }
    // Every SRP IU has its tag at byte 8 and reserved bytes 1..8 (some use 1..4 or byte 1..2
    // for flags); requiring bytes 2..4 zero rules out most non-SRP payloads cheaply.
    if p.len() < 16 || p.get(2..4)? != [0, 0] {
        return None;
    }
    SrpIu::parse(p).ok()
}

/// A MAD on QP1: header, then the class's message (CM, DM) or the raw data.
fn mad(t: &mut Tree, info: &mut FrameInfo, payload: &[u8]) {
    let m = match Mad::parse(payload) {
        Ok(m) => m,
        Err(e) => return malformed(t, info, e, payload),
    };
    m.dissect(t);
    let h = &m.header;
    info.info = match h.attr_name() {
        Some(n) => format!("{}: {n}", h.mgmt_class.description().unwrap_or("MAD")),
        None => format!("MAD class {:#04x} attr {:#06x}", h.mgmt_class.0, h.attr_id),
    };
    if h.base_version != 1 {
        return;
    }
    if h.mgmt_class == MgmtClass::CM {
        match CmMessage::parse(h.attr_id, &m.data) {
            Ok(cm) => {
                cm.dissect(t);
                cm_private(t, info, &cm);
            }
            Err(e) => malformed(t, info, e, &m.data),
        }
    } else if h.mgmt_class == MgmtClass::DEVICE_MGMT {
        match DmRepr::parse(DmAttributeId(h.attr_id), &m.data) {
            Ok(dm) => dm.dissect(t),
            Err(e) => malformed(t, info, e, &m.data),
        }
    }
}

/// SRP inside CM private data: the login request in a REQ (RDMA CM form after the IP CM
/// header for IP service IDs, IB CM form otherwise), the login response in a REP, the login
/// reject in a REJ. Only when the bytes look like SRP (a consumer's private data is its own).
fn cm_private(t: &mut Tree, info: &mut FrameInfo, cm: &CmMessage) {
    let iu = match cm {
        CmMessage::Req(req) => {
            let pd = &req.private_data[..];
            if rdma_cm::is_ip_cm_service_id(req.service_id) {
                let rest = pd.get(rdma_cm::IP_CM_HEADER_LEN..).unwrap_or(&[]);
                // srp_login_req_rdma: tag(8) req_buf_fmt(2) req_flags(1) opcode(1) ...
                let looks = rest.get(11) == Some(&0)
                    && rest
                        .get(8..10)
                        .is_some_and(|f| f[0] == 0 && f[1] != 0 && f[1] & !0x06 == 0)
                    && rest.get(12..16).is_some_and(|l| l != [0, 0, 0, 0]);
                looks.then(|| SrpIu::parse_login_req_rdma(rest))
            } else {
                // srp_login_req: opcode(1) rsvd(7) tag(8) req_it_iu_len(4) rsvd(4) buf_fmt(2) ...
                let looks = pd.first() == Some(&0)
                    && pd
                        .get(24..26)
                        .is_some_and(|f| f[0] == 0 && f[1] != 0 && f[1] & !0x06 == 0);
                looks.then(|| SrpIu::parse(pd.get(..64).unwrap_or(pd)))
            }
        }
        CmMessage::Rep(rep) => (rep.private_data.first() == Some(&SrpOpcode::LOGIN_RSP.0)
            && rep
                .private_data
                .get(1..4)
                .is_some_and(|r| r.iter().all(|&b| b == 0)))
        .then(|| SrpIu::parse(&rep.private_data[..])),
        CmMessage::Rej(rej) => (rej.private_data.first() == Some(&SrpOpcode::LOGIN_REJ.0)
            && rej
                .private_data
                .get(1..4)
                .is_some_and(|r| r.iter().all(|&b| b == 0)))
        .then(|| SrpIu::parse(&rej.private_data[..])),
        _ => None,
    };
    match iu {
        Some(Ok(iu)) => {
            info.info = format!("{} + {}", info.info, iu.opcode());
            iu.dissect(t);
        }
        Some(Err(e)) => malformed(t, info, e, &[]),
        None => {}
    }
}
