//! Tests of the composite RoCE packet against the kernel captures in `fixtures/captures/`.

#![allow(clippy::unwrap_used)] // tests panic on purpose

use super::*;

/// A test-only reader of classic pcap files (24-byte global header, 16-byte record headers),
/// enough to pull the IP packets out of the lab captures. The decoder's real reader lives
/// elsewhere.
pub(crate) mod pcap {
    pub const LINKTYPE_ETHERNET: u32 = 1;
    pub const LINKTYPE_LINUX_SLL: u32 = 113;
    pub const LINKTYPE_RAW: u32 = 101;

    pub const B_RPING: &[u8] = include_bytes!("../../../../fixtures/captures/b_rping.pcap");
    pub const G_TOOLS: &[u8] = include_bytes!("../../../../fixtures/captures/g_tools.pcap");
    pub const G_PINGPONG: &[u8] = include_bytes!("../../../../fixtures/captures/g_pingpong.pcap");
    pub const I_MRA_ATOMIC: &[u8] =
        include_bytes!("../../../../fixtures/captures/i_mra_atomic.sll.pcap");

    /// Every classic pcap capture of the lab, by name (h_host_rx has rebuilt IP headers).
    pub const ALL: &[(&str, &[u8])] = &[
        (
            "a_cmtime",
            include_bytes!("../../../../fixtures/captures/a_cmtime.pcap"),
        ),
        ("b_rping", B_RPING),
        (
            "c_udaddy",
            include_bytes!("../../../../fixtures/captures/c_udaddy.pcap"),
        ),
        (
            "d_reject",
            include_bytes!("../../../../fixtures/captures/d_reject.pcap"),
        ),
        (
            "e_ucmatose",
            include_bytes!("../../../../fixtures/captures/e_ucmatose.pcap"),
        ),
        (
            "f_srp",
            include_bytes!("../../../../fixtures/captures/f_srp.pcap"),
        ),
        ("g_pingpong", G_PINGPONG),
        ("g_tools", G_TOOLS),
        (
            "h_host_req",
            include_bytes!("../../../../fixtures/captures/h_host_req.pcap"),
        ),
        (
            "h_host_rx",
            include_bytes!("../../../../fixtures/captures/h_host_rx.pcap"),
        ),
        (
            "h_req_single",
            include_bytes!("../../../../fixtures/captures/h_req_single.pcap"),
        ),
        ("i_mra_atomic", I_MRA_ATOMIC),
    ];

    fn u32le(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }

    /// The records of a little-endian microsecond pcap: (frame number from 1, link type,
    /// bytes).
    pub fn records(file: &[u8]) -> Vec<(usize, u32, &[u8])> {
        assert_eq!(u32le(file, 0), 0xa1b2_c3d4, "classic little-endian pcap");
        let linktype = u32le(file, 20);
        let mut out = Vec::new();
        let mut off = 24;
        while off + 16 <= file.len() {
            let incl = u32le(file, off + 8) as usize;
            let data = &file[off + 16..off + 16 + incl];
            out.push((out.len() + 1, linktype, data));
            off += 16 + incl;
        }
        out
    }

    /// The IP packet (from the IP header) of a link-layer frame, if it is IPv4 or IPv6.
    pub fn ip_packet(linktype: u32, frame: &[u8]) -> Option<&[u8]> {
        let (ethertype, off) = match linktype {
            LINKTYPE_ETHERNET => (u16::from_be_bytes([frame[12], frame[13]]), 14),
            LINKTYPE_LINUX_SLL => (u16::from_be_bytes([frame[14], frame[15]]), 16),
            LINKTYPE_RAW => match frame.first()? >> 4 {
                4 => (0x0800, 0),
                6 => (0x86dd, 0),
                _ => return None,
            },
            _ => return None,
        };
        matches!(ethertype, 0x0800 | 0x86dd).then(|| &frame[off..])
    }

    /// For a RoCEv2 packet (UDP to port 4791): the IP packet cut to its IP length and the
    /// UDP payload.
    pub fn roce(ip: &[u8]) -> Option<(&[u8], &[u8])> {
        let (proto, udp_off, ip_len) = match ip[0] >> 4 {
            4 => (
                ip[9],
                usize::from(ip[0] & 0xf) * 4,
                usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            ),
            6 => (
                ip[6],
                40,
                40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])),
            ),
            _ => return None,
        };
        if proto != 17 || u16::from_be_bytes([ip[udp_off + 2], ip[udp_off + 3]]) != 4791 {
            return None;
        }
        let udp_len = usize::from(u16::from_be_bytes([ip[udp_off + 4], ip[udp_off + 5]]));
        Some((&ip[..ip_len], &ip[udp_off + 8..udp_off + udp_len]))
    }

    /// Every RoCEv2 packet of a capture: (frame number, IP packet, UDP payload).
    pub fn roce_packets(file: &[u8]) -> Vec<(usize, &[u8], &[u8])> {
        records(file)
            .into_iter()
            .filter_map(|(n, lt, f)| {
                let ip = ip_packet(lt, f)?;
                let (ip, udp) = roce(ip)?;
                Some((n, ip, udp))
            })
            .collect()
    }

    /// The UDP payload of frame `n`.
    pub fn frame(file: &[u8], n: usize) -> &[u8] {
        roce_packets(file)
            .into_iter()
            .find(|(f, _, _)| *f == n)
            .map(|(_, _, udp)| udp)
            .expect("frame is a RoCE packet")
    }
}

#[test]
fn every_captured_packet_parses_and_re_emits() {
    let mut total = 0;
    let mut seen = std::collections::BTreeSet::new();
    for (name, file) in pcap::ALL {
        for (n, _, udp) in pcap::roce_packets(file) {
            let r = Repr::parse(udp).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
            assert!(r.headers_match_opcode(), "{name} frame {n}");
            assert_eq!(r.to_bytes(), udp, "{name} frame {n}: re-emit");
            assert_eq!(r.buffer_len(), udp.len());
            let p = RocePacket::new_checked(udp).unwrap();
            assert_eq!(Repr::parse_packet(&p), r);
            assert_eq!(p.payload(), r.payload);
            let _ = r.to_tree().to_text(0);
            seen.insert(r.bth.opcode);
            total += 1;
        }
    }
    assert!(total > 2900, "{total}");
    // The captures hold these opcodes; each went through parse and emit above.
    for op in [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::UD_SEND_ONLY,
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
    ] {
        assert!(seen.contains(&op), "{op:?} not in the captures");
    }
}

/// Field values tshark 4.0 decodes for chosen frames (`tshark -T fields`), checked against
/// ours: (file, frame, opcode, dest QP, PSN, AckReq, ICRC as tshark shows it, UDP length).
/// (capture, frame, opcode, dest QP, PSN, AckReq, ICRC as tshark shows it, UDP length).
type Case = (&'static [u8], usize, u8, u32, u32, bool, u32, usize);

#[test]
fn bth_and_icrc_match_tshark() {
    #[rustfmt::skip]
    let cases: &[Case] = &[
        (pcap::B_RPING, 6, 4, 0x11, 1007295, true, 0x7d6d24a2, 40),
        (pcap::B_RPING, 7, 17, 0x11, 1007295, false, 0xb7be8f87, 28),
        (pcap::B_RPING, 8, 12, 0x11, 7959271, true, 0x4e9d9204, 40),
        (pcap::B_RPING, 9, 16, 0x11, 7959271, false, 0x654b273a, 92),
        (pcap::B_RPING, 14, 10, 0x11, 7959273, true, 0x63f16ff5, 104),
        (pcap::G_TOOLS, 9, 13, 0x11, 8435349, false, 0x2f05fb4a, 1052),
        (pcap::G_TOOLS, 10, 14, 0x11, 8435350, false, 0x1c1b3fe5, 1048),
        (pcap::G_TOOLS, 11, 15, 0x11, 8435351, false, 0x6c831231, 980),
        (pcap::G_TOOLS, 16, 6, 0x11, 8435353, false, 0xc20a7473, 1064),
        (pcap::G_TOOLS, 18, 8, 0x11, 8435355, true, 0x9476b5f1, 976),
        (pcap::G_TOOLS, 1654, 101, 0xda, 0, false, 0xb172e604, 136),
        (pcap::G_PINGPONG, 11, 0, 0xdf, 2513034, false, 0x8a2223b5, 1048),
        (pcap::G_PINGPONG, 12, 1, 0xdf, 2513035, false, 0x473f665d, 1048),
        (pcap::G_PINGPONG, 18, 2, 0xdf, 2513041, true, 0x051b054d, 1048),
        (pcap::G_PINGPONG, 383, 100, 0xe0, 7377404, false, 0x8e45300f, 1016),
        (pcap::I_MRA_ATOMIC, 116, 20, 0x12, 5451779, true, 0x23301744, 52),
        (pcap::I_MRA_ATOMIC, 118, 18, 0x12, 5451779, false, 0x26c40bb3, 36),
        (pcap::I_MRA_ATOMIC, 254, 19, 0x13, 7761778, true, 0xec6f2d19, 52),
    ];
    for &(file, n, op, qp, psn, ack, icrc, udp_len) in cases {
        let udp = pcap::frame(file, n);
        assert_eq!(udp.len() + 8, udp_len, "frame {n}");
        let r = Repr::parse(udp).unwrap();
        assert_eq!(r.bth.opcode, Opcode(op), "frame {n}");
        assert_eq!(r.bth.dest_qp, qp, "frame {n}");
        assert_eq!(r.bth.psn, Psn::new(psn), "frame {n}");
        assert_eq!(r.bth.ack_req, ack, "frame {n}");
        assert_eq!(r.bth.pkey, 0xffff, "frame {n}");
        assert_eq!(r.icrc.swap_bytes(), icrc, "frame {n}");
    }
}

#[test]
fn extension_headers_match_tshark() {
    // b_rping frame 8: RDMA READ Request.
    let r = Repr::parse(pcap::frame(pcap::B_RPING, 8)).unwrap();
    let reth = r.reth.unwrap();
    assert_eq!(
        (reth.va, reth.r_key, reth.dma_len),
        (0x0000_55a0_3550_8d50, 0x50d, 64)
    );
    assert!(r.payload.is_empty());

    // b_rping frame 9: READ response Only, AETH syndrome 31 (ACK), MSN 1, 64 bytes data.
    let r = Repr::parse(pcap::frame(pcap::B_RPING, 9)).unwrap();
    let aeth = r.aeth.unwrap();
    assert_eq!(aeth.syndrome.kind(), AckKind::Ack { credit_count: 31 });
    assert_eq!(aeth.msn, 1);
    assert_eq!(r.payload.len(), 64);

    // g_tools frame 16: RDMA WRITE First, RETH, 1024-byte payload.
    let r = Repr::parse(pcap::frame(pcap::G_TOOLS, 16)).unwrap();
    let reth = r.reth.unwrap();
    assert_eq!(
        (reth.va, reth.r_key, reth.dma_len),
        (0x0000_5578_6f3a_0250, 0x43a, 3000)
    );
    assert_eq!(r.payload.len(), 1024);

    // g_tools frame 1654: UD SEND only with Immediate.
    let r = Repr::parse(pcap::frame(pcap::G_TOOLS, 1654)).unwrap();
    assert!(r.deth.is_some() && r.immdt.is_some());

    // i_mra_atomic frame 116: FetchAdd, add 1, compare 0.
    let r = Repr::parse(pcap::frame(pcap::I_MRA_ATOMIC, 116)).unwrap();
    let a = r.atomic_eth.unwrap();
    assert_eq!(
        (a.va, a.r_key, a.swap_add, a.compare),
        (0x0000_5629_fbfc_a000, 0x572, 1, 0)
    );
    // Frame 118: its ATOMIC Acknowledge, original data 11526804766742150312.
    let r = Repr::parse(pcap::frame(pcap::I_MRA_ATOMIC, 118)).unwrap();
    assert_eq!(r.aeth.unwrap().msn, 1);
    assert_eq!(
        r.atomic_ack_eth.unwrap().orig_remote_data,
        11_526_804_766_742_150_312
    );
    // Frame 254: CmpSwap.
    let r = Repr::parse(pcap::frame(pcap::I_MRA_ATOMIC, 254)).unwrap();
    assert_eq!(r.atomic_eth.unwrap().r_key, 0x606);
}

/// Our text beside tshark's (`tshark -V`, b_rping.pcap frame 9), with tshark's bit-pattern
/// prefixes ("0... .... = ") removed: the lines are otherwise identical.
#[test]
fn dissects_like_tshark() {
    const TSHARK: &str = "
    Base Transport Header
        Opcode: Reliable Connection (RC) - RDMA READ response Only (16)
        0... .... = Solicited Event: False
        .0.. .... = MigReq: False
        ..00 .... = Pad Count: 0
        .... 0000 = Header Version: 0
        Partition Key: 65535
        Reserved: 00
        Destination Queue Pair: 0x000011
        0... .... = Acknowledge Request: False
        .000 0000 = Reserved (7 bits): 0
        Packet Sequence Number: 7959271
    AETH - ACK Extended Transport Header
        Syndrome: 31, Ack
            0... .... = Reserved: 0
            .00. .... = OpCode: Ack (0)
            ...1 1111 = Credit Count: 31
        Message Sequence Number: 1
    Invariant CRC: 0x654b273a
";
    let strip = |l: &str| -> String {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let is_bits = t.len() > 12
            && t[..9].chars().all(|c| matches!(c, '0' | '1' | '.' | ' '))
            && t[9..].starts_with(" = ");
        if is_bits {
            format!("{indent}{}", &t[12..])
        } else {
            l.to_string()
        }
    };
    let want: Vec<String> = TSHARK.lines().skip(1).map(strip).collect();
    let r = Repr::parse(pcap::frame(pcap::B_RPING, 9)).unwrap();
    let mut t = Tree::new();
    r.dissect_headers(&mut t);
    let got: Vec<String> = t.to_text(1).lines().map(str::to_string).collect();
    assert_eq!(got, want);
    // The full dissection adds the data.
    let full = r.to_tree();
    assert_eq!(full.find("data").map(|n| n.label.as_str()), Some("Data"));
    assert_eq!(full.uint("aeth.msn"), Some(1));
    assert_eq!(full.uint("bth.opcode"), Some(16));
}

#[test]
fn ud_dissection_keys() {
    let r = Repr::parse(pcap::frame(pcap::B_RPING, 3)).unwrap();
    let t = r.to_tree();
    assert_eq!(t.uint("deth.q_key"), Some(0x8001_0000));
    assert_eq!(t.uint("deth.src_qp"), Some(1));
    assert_eq!(t.uint("bth.dest_qp"), Some(1));
    let text = t.to_text(1);
    assert!(text.contains("    DETH - Datagram Extended Transport Header\n"));
    assert!(text.contains("        Queue Key: 0x0000000080010000\n"));
    assert!(text.contains("    Invariant CRC: 0x5a6a6c28\n"));
    assert_eq!(r.payload.len(), 256);
}

fn build(op: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut r = Repr::new(BthRepr {
        opcode: op,
        dest_qp: 0x12_3456,
        psn: Psn::new(0xff_fffe),
        ..BthRepr::default()
    });
    let h = op.headers();
    if h.contains(Headers::RDETH) {
        r.rdeth = Some(RdethRepr {
            reserved: 0,
            ee_context: 7,
        });
    }
    if h.contains(Headers::DETH) {
        r.deth = Some(DethRepr {
            q_key: 0x1111_2222,
            reserved: 0,
            src_qp: 0x33,
        });
    }
    if h.contains(Headers::RETH) {
        r.reth = Some(RethRepr {
            va: 0x1000,
            r_key: 0x44,
            dma_len: 5,
        });
    }
    if h.contains(Headers::ATOMIC_ETH) {
        r.atomic_eth = Some(AtomicEthRepr {
            va: 0x2000,
            r_key: 0x55,
            swap_add: 9,
            compare: 10,
        });
    }
    if h.contains(Headers::AETH) {
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::rnr_nak(RnrTimer(14)),
            msn: 77,
        });
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        r.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig_remote_data: 123,
        });
    }
    if h.contains(Headers::IMMDT) {
        r.immdt = Some(ImmDtRepr {
            imm_data: 0xdead_beef,
        });
    }
    if h.contains(Headers::IETH) {
        r.ieth = Some(IethRepr { r_key: 0x66 });
    }
    if op.has_payload() {
        r.set_payload(payload);
    }
    r.icrc = 0x0102_0304;
    assert!(r.headers_match_opcode());
    r.to_bytes()
}

#[test]
fn every_opcode_round_trips_with_padding() {
    let payload = b"hello";
    for &op in Opcode::ALL {
        let bytes = build(op, payload);
        let r = Repr::parse(&bytes).unwrap();
        assert_eq!(r.bth.opcode, op);
        assert_eq!(r.headers(), op.headers(), "{op:?}");
        assert_eq!(r.to_bytes(), bytes, "{op:?}");
        if op.has_payload() {
            assert_eq!(r.payload, payload, "{op:?}");
            assert_eq!(r.pad, &[0, 0, 0], "{op:?}");
            assert_eq!(r.bth.pad_count, 3);
            assert_eq!((bytes.len() - 4) % 4, 0);
        }
        assert_eq!(&bytes[bytes.len() - 4..], &[4, 3, 2, 1]);
        assert_eq!(r.icrc, 0x0102_0304);
        let t = r.to_tree();
        assert_eq!(t.uint("bth.opcode"), Some(u64::from(op.0)));
    }
    assert_eq!(pad_count_for(0), 0);
    assert_eq!(pad_count_for(1), 3);
    assert_eq!(pad_count_for(4), 0);
    assert_eq!(pad_count_for(6), 2);
}

#[test]
fn truncated_at_every_length() {
    let mut inputs: Vec<Vec<u8>> = Opcode::ALL.iter().map(|&op| build(op, b"xyz")).collect();
    for (file, n) in [
        (pcap::B_RPING, 9),
        (pcap::I_MRA_ATOMIC, 118),
        (pcap::B_RPING, 3),
    ] {
        inputs.push(pcap::frame(file, n).to_vec());
    }
    for full in &inputs {
        for n in 0..full.len() {
            let cut = &full[..n];
            // A shorter buffer may still be a valid packet when the payload absorbs the cut;
            // when it is not, the error names what is missing. Never a panic.
            match Repr::parse(cut) {
                Ok(r) => assert_eq!(r.to_bytes(), cut),
                Err(e) => {
                    assert!(
                        matches!(
                            e.field(),
                            "bth"
                                | "rdeth"
                                | "deth"
                                | "reth"
                                | "atomic_eth"
                                | "aeth"
                                | "atomic_ack_eth"
                                | "immdt"
                                | "ieth"
                                | "roce.icrc"
                                | "bth.pad_count"
                        ),
                        "{e}"
                    );
                }
            }
            let _ = RocePacket::new_checked(cut);
        }
        // The minimal length: headers + ICRC, no payload, parses iff the pad count is 0.
        let r = Repr::parse(full).unwrap();
        let min = r.header_len() + 4;
        assert!(matches!(
            Repr::parse(&full[..min - 1]),
            Err(Error::Truncated { .. })
        ));
    }
    assert_eq!(
        Repr::parse(&[0x64; 11]),
        Err(Error::Truncated {
            what: "bth",
            need: 12,
            got: 11
        })
    );
    // UD SEND with a BTH but only half a DETH.
    let ud = build(Opcode::UD_SEND_ONLY, b"");
    assert!(matches!(
        Repr::parse(&ud[..16]),
        Err(Error::Truncated { what: "deth", .. })
    ));
    // Headers complete, ICRC missing.
    assert!(matches!(
        Repr::parse(&ud[..22]),
        Err(Error::Truncated {
            what: "roce.icrc",
            ..
        })
    ));
}

#[test]
fn pad_count_larger_than_payload_is_an_error() {
    // An ACK with pad count 2 and no payload: nothing to take the pad from.
    let mut ack = build(Opcode::RC_ACKNOWLEDGE, b"");
    ack[1] |= 0x20;
    assert_eq!(
        Repr::parse(&ack),
        Err(Error::BadValue {
            field: "bth.pad_count",
            value: 2
        })
    );
    assert!(RocePacket::new_checked(&ack[..]).is_err());
    // A SEND with one payload byte and pad count 3: one byte short.
    let mut send = build(Opcode::RC_SEND_ONLY, b"");
    send.splice(12..12, [0xaa, 0xbb]);
    send[1] |= 0x30;
    assert!(matches!(
        Repr::parse(&send),
        Err(Error::BadValue {
            field: "bth.pad_count",
            ..
        })
    ));
    // With pad count 2 the two bytes are pad, the payload empty; kept bit-exactly.
    send[1] = (send[1] & !0x30) | 0x20;
    let r = Repr::parse(&send).unwrap();
    assert!(r.payload.is_empty());
    assert_eq!(r.pad, &[0xaa, 0xbb]);
    assert_eq!(r.to_bytes(), send);
}

#[test]
fn unknown_opcodes_are_kept() {
    for op in [0x15u8, 0x18, 0x2c, 0x56, 0x63, 0x66, 0x80, 0xa4, 0xff] {
        let mut b = vec![op, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 2];
        b.extend_from_slice(b"opaque payload!!");
        b.extend_from_slice(&[9, 9, 9, 9]);
        let r = Repr::parse(&b).unwrap();
        assert_eq!(r.bth.opcode, Opcode(op));
        assert!(!r.bth.opcode.is_known());
        assert_eq!(r.headers(), Headers::NONE);
        assert_eq!(r.payload, b"opaque payload!!");
        assert_eq!(r.to_bytes(), b);
        let text = r.to_tree().to_text(0);
        assert!(text.contains(&format!("({op})")), "{text}");
    }
}

#[test]
fn garbage_never_panics() {
    // A small xorshift generator: deterministic garbage of every length up to 96 bytes.
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..20_000 {
        let len = (next() % 97) as usize;
        let b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if let Ok(r) = Repr::parse(&b) {
            assert_eq!(r.to_bytes(), b);
            crate::test_support::render(&r.to_tree());
        }
        if let Ok(p) = RocePacket::new_checked(&b[..]) {
            let _ = (p.payload(), p.pad(), p.icrc(), p.aeth(), p.reth());
        }
    }
}

#[test]
fn view_setters() {
    let mut b = build(Opcode::RC_SEND_ONLY, b"abcd");
    let mut p = RocePacket::new_checked(&mut b[..]).unwrap();
    p.payload_mut().copy_from_slice(b"wxyz");
    p.set_icrc(0xaabb_ccdd);
    p.bth_mut().set_psn(Psn::new(5));
    let r = Repr::parse(&b).unwrap();
    assert_eq!(r.payload, b"wxyz");
    assert_eq!(r.icrc, 0xaabb_ccdd);
    assert_eq!(r.bth.psn, Psn::new(5));
    assert_eq!(&b[b.len() - 4..], &[0xdd, 0xcc, 0xbb, 0xaa]);
}
