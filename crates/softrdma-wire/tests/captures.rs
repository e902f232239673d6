//! Every frame of every kernel capture in `fixtures/captures/`: decoding never panics, every
//! layer re-emits to the captured bytes, every RoCEv2 ICRC verifies, and every field tshark
//! decodes (saved in `fixtures/tshark/` by `scripts/update-fixtures.sh`) equals ours.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use softrdma_wire::cm::CmMessage;
use softrdma_wire::dissect::{Tree, Value};
use softrdma_wire::frame::dissect_frame;
use softrdma_wire::icrc;
use softrdma_wire::link::{
    EtherType, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Repr, LinkType, Sll2Repr,
    SllRepr, UdpRepr, ROCEV2_PORT,
};
use softrdma_wire::mad::{Mad, MgmtClass};
use softrdma_wire::pcap::read_all;
use softrdma_wire::roce::RoceRepr;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Renders a tree as text and (with the `serde` feature) as JSON; no key repeats among
/// siblings, so the JSON object loses no field.
fn render(t: &Tree) {
    assert_eq!(t.duplicate_key(), None);
    assert!(!t.to_text(0).is_empty() || t.nodes.is_empty());
    #[cfg(feature = "serde")]
    assert!(serde_json::to_string(t)
        .unwrap_or_default()
        .starts_with('{'));
}

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

/// The RoCEv2 layers: the packet, its MAD and CM message re-emit to the captured bytes.
fn reemit_roce(name: &str, number: usize, _ip: &[u8], payload: &[u8]) {
    let r = RoceRepr::parse(payload).unwrap();
    assert_eq!(r.to_bytes(), payload, "{name}#{number} roce");
    if r.bth.dest_qp == 1 && r.deth.is_some() {
        let mad = Mad::parse(r.payload).unwrap();
        assert_eq!(mad.to_bytes(), r.payload, "{name}#{number} mad");
        if mad.header.mgmt_class == MgmtClass::CM {
            let cm = CmMessage::parse(mad.header.attr_id, &mad.data).unwrap();
            assert_eq!(cm.to_bytes(), mad.data, "{name}#{number} cm");
        }
    }
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
            render(&tree);
            if let Some((ip, payload)) = reemit_lower(&name, &f) {
                assert!(info.roce);
                roce += 1;
                reemit_roce(&name, f.number, &ip, &payload);
                // Every kernel ICRC verifies, except h_host_rx.pcap's, whose IP headers were
                // rebuilt from recvfrom() (lab README).
                let ok = icrc::verify(&ip).unwrap();
                assert_eq!(ok, name != "h_host_rx.pcap", "{name}#{} ICRC", f.number);
                assert_eq!(info.icrc_ok, Some(ok), "{name}#{}", f.number);
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
            render(&t);
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
        (Value::Uint(v) | Value::U64(v), Some(n)) => *v == n,
        (Value::Bool(b), Some(n)) => u64::from(*b) == n,
        (v, _) if v.octets().is_some() => {
            let b = v.octets().unwrap_or_default();
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
    m.insert("infiniband.bth.opcode", "infiniband.bth.opcode");
    m.insert("infiniband.bth.se", "infiniband.bth.se");
    m.insert("infiniband.bth.m", "infiniband.bth.mig_req");
    m.insert("infiniband.bth.padcnt", "infiniband.bth.pad_count");
    m.insert("infiniband.bth.tver", "infiniband.bth.tver");
    m.insert("infiniband.bth.p_key", "infiniband.bth.pkey");
    m.insert("infiniband.bth.destqp", "infiniband.bth.dest_qp");
    m.insert("infiniband.bth.a", "infiniband.bth.ack_req");
    m.insert("infiniband.bth.reserved7", "infiniband.bth.resv7");
    m.insert("infiniband.bth.psn", "infiniband.bth.psn");
    m.insert("infiniband.deth.q_key", "infiniband.deth.q_key");
    m.insert("infiniband.deth.srcqp", "infiniband.deth.src_qp");
    m.insert(
        "infiniband.reth.va",
        "infiniband.reth.va|infiniband.atomic_eth.va",
    );
    m.insert(
        "infiniband.reth.r_key",
        "infiniband.reth.r_key|infiniband.atomic_eth.r_key",
    );
    m.insert("infiniband.reth.dmalen", "infiniband.reth.dma_len");
    m.insert("infiniband.aeth.syndrome", "infiniband.aeth.syndrome");
    m.insert(
        "infiniband.aeth.syndrome.reserved",
        "infiniband.aeth.syndrome.reserved",
    );
    m.insert(
        "infiniband.aeth.syndrome.opcode",
        "infiniband.aeth.syndrome.opcode",
    );
    m.insert(
        "infiniband.aeth.syndrome.credit_count",
        "infiniband.aeth.syndrome.credit_count",
    );
    m.insert("infiniband.aeth.msn", "infiniband.aeth.msn");
    m.insert(
        "infiniband.atomiceth.swapdt",
        "infiniband.atomic_eth.swap_add",
    );
    m.insert(
        "infiniband.atomiceth.cmpdt",
        "infiniband.atomic_eth.compare",
    );
    m.insert(
        "infiniband.atomicacketh.origremdt",
        "infiniband.atomic_ack_eth.orig_remote_data",
    );
    m.insert("infiniband.invariant.crc", "infiniband.icrc");
    m.insert("infiniband.mad.baseversion", "infiniband.mad.base_version");
    m.insert("infiniband.mad.mgmtclass", "infiniband.mad.mgmt_class");
    m.insert(
        "infiniband.mad.classversion",
        "infiniband.mad.class_version",
    );
    m.insert("infiniband.mad.method", "infiniband.mad.method");
    m.insert("infiniband.mad.status", "infiniband.mad.status");
    m.insert(
        "infiniband.mad.classspecific",
        "infiniband.mad.class_specific",
    );
    m.insert("infiniband.mad.transactionid", "infiniband.mad.tid");
    m.insert("infiniband.mad.attributeid", "infiniband.mad.attr_id");
    m.insert(
        "infiniband.mad.attributemodifier",
        "infiniband.mad.attr_mod",
    );
    m.insert("infiniband.cm.req", "infiniband.cm_req.local_comm_id");
    m.insert(
        "infiniband.cm.req.serviceid",
        "infiniband.cm_req.service_id",
    );
    m.insert(
        "infiniband.cm.req.serviceid.prefix",
        "infiniband.cm_req.ip_cm_service_id.prefix",
    );
    m.insert(
        "infiniband.cm.req.serviceid.protocol",
        "infiniband.cm_req.ip_cm_service_id.protocol",
    );
    m.insert(
        "infiniband.cm.req.serviceid.dport",
        "infiniband.cm_req.ip_cm_service_id.dport",
    );
    m.insert(
        "infiniband.cm.req.localcaguid",
        "infiniband.cm_req.local_ca_guid",
    );
    m.insert(
        "infiniband.cm.req.localqkey",
        "infiniband.cm_req.local_qkey",
    );
    m.insert("infiniband.cm.req.localqpn", "infiniband.cm_req.local_qpn");
    m.insert(
        "infiniband.cm.req.responderres",
        "infiniband.cm_req.responder_resources",
    );
    m.insert(
        "infiniband.cm.req.localeecn",
        "infiniband.cm_req.local_eecn",
    );
    m.insert(
        "infiniband.cm.req.initdepth",
        "infiniband.cm_req.initiator_depth",
    );
    m.insert(
        "infiniband.cm.req.remoteeecn",
        "infiniband.cm_req.remote_eecn",
    );
    m.insert(
        "infiniband.cm.req.remoteresptout",
        "infiniband.cm_req.remote_cm_response_timeout",
    );
    m.insert(
        "infiniband.cm.req.transpsvctype",
        "infiniband.cm_req.transport_service_type",
    );
    m.insert(
        "infiniband.cm.req.e2eflowctrl",
        "infiniband.cm_req.end_to_end_flow_control",
    );
    m.insert(
        "infiniband.cm.req.startpsn",
        "infiniband.cm_req.starting_psn",
    );
    m.insert(
        "infiniband.cm.req.localresptout",
        "infiniband.cm_req.local_cm_response_timeout",
    );
    m.insert(
        "infiniband.cm.req.retrcount",
        "infiniband.cm_req.retry_count",
    );
    m.insert("infiniband.cm.req.pkey", "infiniband.cm_req.partition_key");
    m.insert("infiniband.cm.req.pppmtu", "infiniband.cm_req.path_mtu");
    m.insert("infiniband.cm.req.rdcexist", "infiniband.cm_req.rdc_exists");
    m.insert(
        "infiniband.cm.req.rnrretrcount",
        "infiniband.cm_req.rnr_retry_count",
    );
    m.insert(
        "infiniband.cm.req.maxcmretr",
        "infiniband.cm_req.max_cm_retries",
    );
    m.insert("infiniband.cm.req.srq", "infiniband.cm_req.srq");
    m.insert(
        "infiniband.cm.req.ext_transport",
        "infiniband.cm_req.extended_transport_type",
    );
    m.insert(
        "infiniband.cm.req.prim_locallid",
        "infiniband.cm_req.primary_local_lid",
    );
    m.insert(
        "infiniband.cm.req.prim_remotelid",
        "infiniband.cm_req.primary_remote_lid",
    );
    m.insert(
        "infiniband.cm.req.prim_localgid_ipv4",
        "infiniband.cm_req.primary_local_gid",
    );
    m.insert(
        "infiniband.cm.req.prim_remotegid_ipv4",
        "infiniband.cm_req.primary_remote_gid",
    );
    m.insert(
        "infiniband.cm.req.prim_localgid",
        "infiniband.cm_req.primary_local_gid",
    );
    m.insert(
        "infiniband.cm.req.prim_remotegid",
        "infiniband.cm_req.primary_remote_gid",
    );
    m.insert(
        "infiniband.cm.req.prim_tfcclass",
        "infiniband.cm_req.primary_traffic_class",
    );
    m.insert(
        "infiniband.cm.req.prim_hoplim",
        "infiniband.cm_req.primary_hop_limit",
    );
    m.insert("infiniband.cm.req.prim_sl", "infiniband.cm_req.primary_sl");
    m.insert(
        "infiniband.cm.req.prim_subnetlocal",
        "infiniband.cm_req.primary_subnet_local",
    );
    m.insert(
        "infiniband.cm.req.prim_localacktout",
        "infiniband.cm_req.primary_local_ack_timeout",
    );
    m.insert(
        "infiniband.cm.req.alt_locallid",
        "infiniband.cm_req.alternate_local_lid",
    );
    m.insert(
        "infiniband.cm.req.alt_remotelid",
        "infiniband.cm_req.alternate_remote_lid",
    );
    m.insert(
        "infiniband.cm.req.alt_localgid",
        "infiniband.cm_req.alternate_local_gid",
    );
    m.insert(
        "infiniband.cm.req.alt_remotegid",
        "infiniband.cm_req.alternate_remote_gid",
    );
    m.insert(
        "infiniband.cm.req.alt_tfcclass",
        "infiniband.cm_req.alternate_traffic_class",
    );
    m.insert(
        "infiniband.cm.req.alt_hoplim",
        "infiniband.cm_req.alternate_hop_limit",
    );
    m.insert("infiniband.cm.req.alt_sl", "infiniband.cm_req.alternate_sl");
    m.insert(
        "infiniband.cm.req.alt_subnetlocal",
        "infiniband.cm_req.alternate_subnet_local",
    );
    m.insert(
        "infiniband.cm.req.alt_localacktout",
        "infiniband.cm_req.alternate_local_ack_timeout",
    );
    m.insert(
        "infiniband.cm.req.private",
        "infiniband.cm_req.private_data",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.majv",
        "infiniband.cm_req.ip_cm.major_version",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.minv",
        "infiniband.cm_req.ip_cm.minor_version",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.ipv",
        "infiniband.cm_req.ip_cm.ip_version",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.reserved",
        "infiniband.cm_req.ip_cm.reserved",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.sport",
        "infiniband.cm_req.ip_cm.src_port",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.sip4",
        "infiniband.cm_req.ip_cm.src_ip",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.dip4",
        "infiniband.cm_req.ip_cm.dst_ip",
    );
    m.insert(
        "infiniband.cm.req.ip_cm.private",
        "infiniband.cm_req.ip_cm.consumer_data",
    );
    m.insert("infiniband.cm.rep", "infiniband.cm_rep.local_comm_id");
    m.insert(
        "infiniband.cm.rep.remotecommid",
        "infiniband.cm_rep.remote_comm_id",
    );
    m.insert(
        "infiniband.cm.rep.localqkey",
        "infiniband.cm_rep.local_qkey",
    );
    m.insert("infiniband.cm.rep.localqpn", "infiniband.cm_rep.local_qpn");
    m.insert(
        "infiniband.cm.rep.localeecn",
        "infiniband.cm_rep.local_eecn",
    );
    m.insert(
        "infiniband.cm.rep.startpsn",
        "infiniband.cm_rep.starting_psn",
    );
    m.insert(
        "infiniband.cm.rep.respres",
        "infiniband.cm_rep.responder_resources",
    );
    m.insert(
        "infiniband.cm.rep.initdepth",
        "infiniband.cm_rep.initiator_depth",
    );
    m.insert(
        "infiniband.cm.rep.tgtackdelay",
        "infiniband.cm_rep.target_ack_delay",
    );
    m.insert(
        "infiniband.cm.rep.failoveracc",
        "infiniband.cm_rep.failover_accepted",
    );
    m.insert(
        "infiniband.cm.rep.e2eflowctrl",
        "infiniband.cm_rep.end_to_end_flow_control",
    );
    m.insert(
        "infiniband.cm.rep.rnrretrcount",
        "infiniband.cm_rep.rnr_retry_count",
    );
    m.insert("infiniband.cm.rep.srq", "infiniband.cm_rep.srq");
    m.insert(
        "infiniband.cm.rep.localcaguid",
        "infiniband.cm_rep.local_ca_guid",
    );
    m.insert(
        "infiniband.cm.rep.private",
        "infiniband.cm_rep.private_data",
    );
    m.insert(
        "infiniband.cm.rtu.localcommid",
        "infiniband.cm_rtu.local_comm_id",
    );
    m.insert(
        "infiniband.cm.rtu.remotecommid",
        "infiniband.cm_rtu.remote_comm_id",
    );
    m.insert(
        "infiniband.cm.rtu.private",
        "infiniband.cm_rtu.private_data",
    );
    m.insert(
        "infiniband.cm.rej.localcommid",
        "infiniband.cm_rej.local_comm_id",
    );
    m.insert(
        "infiniband.cm.rej.remotecommid",
        "infiniband.cm_rej.remote_comm_id",
    );
    m.insert(
        "infiniband.cm.rej.msgrej",
        "infiniband.cm_rej.message_rejected",
    );
    m.insert(
        "infiniband.cm.rej.rejinfolen",
        "infiniband.cm_rej.reject_info_length",
    );
    m.insert("infiniband.cm.rej.reason", "infiniband.cm_rej.reason");
    m.insert("infiniband.cm.rej.ari", "infiniband.cm_rej.ari");
    m.insert(
        "infiniband.cm.rej.private",
        "infiniband.cm_rej.private_data",
    );
    m.insert(
        "infiniband.cm.dreq.localcommid",
        "infiniband.cm_dreq.local_comm_id",
    );
    m.insert(
        "infiniband.cm.dreq.remotecommid",
        "infiniband.cm_dreq.remote_comm_id",
    );
    m.insert(
        "infiniband.cm.req.remoteqpneecn",
        "infiniband.cm_dreq.remote_qpn_eecn",
    );
    m.insert(
        "infiniband.cm.dreq.private",
        "infiniband.cm_dreq.private_data",
    );
    m.insert(
        "infiniband.cm.drsp.localcommid",
        "infiniband.cm_drep.local_comm_id",
    );
    m.insert(
        "infiniband.cm.drsp.remotecommid",
        "infiniband.cm_drep.remote_comm_id",
    );
    m.insert(
        "infiniband.cm.drsp.private",
        "infiniband.cm_drep.private_data",
    );
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

/// The parts tshark does not decode, checked against the lab's own decoder
/// (`fixtures/tshark-text/*.cmdecode.txt`, from `cm_decode.py`) and the lab README.
#[test]
fn srp_mra_sidr_where_tshark_is_silent() {
    let tree_of = |name: &str, n: usize| {
        let fs = frames(name);
        let f = &fs[n - 1];
        dissect_frame(f.linktype, &f.data).0
    };
    // f_srp: frame 3 REQ with SRP_LOGIN_REQ (RDMA CM layout), frame 4 REP with SRP_LOGIN_RSP.
    let t = tree_of("f_srp.pcap", 3);
    let u = |p: &str| t.uint(&format!("infiniband.srp_login_req.{p}"));
    assert_eq!(u("req_it_iu_len"), Some(8260));
    assert_eq!(u("req_buf_fmt"), Some(6));
    assert_eq!(u("req_flags"), Some(0x80));
    assert_eq!(u("imm_data_offset"), Some(68));
    let hex = |p: &str| {
        t.find(&format!("infiniband.srp_login_req.{p}"))
            .unwrap()
            .display
            .clone()
    };
    assert_eq!(hex("initiator_port_id"), "0000000000000000505400fffe77000b");
    assert_eq!(hex("target_port_id"), "505400fffe77000a505400fffe77000a");
    let t = tree_of("f_srp.pcap", 4);
    let u = |p: &str| t.uint(&format!("infiniband.srp_login_rsp.{p}"));
    assert_eq!(u("req_lim_delta"), Some(128));
    assert_eq!(u("max_it_iu_len"), Some(8276));
    assert_eq!(u("max_ti_iu_len"), Some(8260));
    assert_eq!(u("buf_fmt"), Some(6));
    assert_eq!(u("rsp_flags"), Some(0x80));

    // Every SRP IU in f_srp's SENDs re-emits to its bytes; no other capture shows SRP.
    let mut ius = 0;
    for name in captures() {
        for f in frames(&name) {
            let (t, _) = dissect_frame(f.linktype, &f.data);
            let srp: Vec<_> = t
                .find("infiniband")
                .map(|ib| {
                    ib.children
                        .iter()
                        .filter(|n| n.key.starts_with("srp"))
                        .collect()
                })
                .unwrap_or_default();
            if name != "f_srp.pcap" {
                assert!(srp.is_empty(), "{name}#{}: SRP false positive", f.number);
                continue;
            }
            ius += srp.len();
            if let Some((_, payload)) = reemit_lower(&name, &f) {
                let r = RoceRepr::parse(&payload).unwrap();
                if r.deth.is_none() && !srp.is_empty() {
                    let iu = softrdma_wire::srp::SrpIu::parse(r.payload).unwrap();
                    assert_eq!(iu.to_bytes(), r.payload, "{name}#{} srp", f.number);
                }
            }
        }
    }
    assert_eq!(ius, 52);

    // i_mra_atomic: the delayed MRA (service timeout 24, message MRAed 0 = REQ).
    let fs = frames("i_mra_atomic.sll.pcap");
    let mra = fs
        .iter()
        .map(|f| dissect_frame(f.linktype, &f.data).0)
        .find(|t| t.find("infiniband.cm_mra").is_some())
        .expect("an MRA");
    assert_eq!(mra.uint("infiniband.cm_mra.service_timeout"), Some(24));
    assert_eq!(mra.uint("infiniband.cm_mra.message_mraed"), Some(0));

    // c_udaddy: SIDR_REP status 0, QPN 0x11, Q_Key 0x01234567; d_reject: SIDR_REP status 1.
    let sidr_rep = |name: &str| {
        frames(name)
            .iter()
            .map(|f| dissect_frame(f.linktype, &f.data).0)
            .find(|t| t.find("infiniband.cm_sidr_rep").is_some())
            .expect("a SIDR_REP")
    };
    let t = sidr_rep("c_udaddy.pcap");
    assert_eq!(t.uint("infiniband.cm_sidr_rep.status"), Some(0));
    assert_eq!(t.uint("infiniband.cm_sidr_rep.qpn"), Some(0x11));
    assert_eq!(t.uint("infiniband.cm_sidr_rep.qkey"), Some(0x0123_4567));
    assert_eq!(
        sidr_rep("d_reject.pcapng").uint("infiniband.cm_sidr_rep.status"),
        Some(1)
    );
}
