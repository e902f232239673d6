//! SRP IUs against the real ib_srp ↔ ib_srpt session in `fixtures/captures/f_srp.pcap`
//! (values cross-checked with `f_srp.cmdecode.txt`, the lab's decode of the CM private data),
//! plus hand-built IUs and hostile input.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::dissect::Dissect;
use crate::scsi::{AscAscq, Cdb, RwKind, ScsiOpcode, ScsiStatus, SenseKey, SenseRepr};

/// The RoCEv2 payloads of the SRP capture (the walk down to them is `crate::test_support`).
pub(crate) mod capture {
    pub const F_SRP: &[u8] = include_bytes!("../../../../fixtures/captures/f_srp.pcap");

    /// One RoCEv2 packet: frame number (1-based, as tshark counts), the last octet of the
    /// source IPv4 address, the BTH opcode, the RETH if any, and the payload (after the
    /// extended headers, without pad bytes and ICRC).
    #[derive(Debug, Clone)]
    pub struct Frame {
        pub no: usize,
        pub src: u8,
        pub opcode: u8,
        pub reth: Option<(u64, u32, u32)>,
        pub payload: Vec<u8>,
    }

    pub fn frames(pcap: &[u8]) -> Vec<Frame> {
        crate::test_support::roce_v4(pcap)
            .into_iter()
            .map(|p| {
                let bth = p.bth;
                let opcode = bth[0];
                let pad = usize::from((bth[1] >> 4) & 3);
                let mut h = 12;
                let mut reth = None;
                if matches!(opcode, 0x06 | 0x0a | 0x0c) {
                    let r = &bth[12..28];
                    reth = Some((
                        u64::from_be_bytes(r[0..8].try_into().unwrap()),
                        u32::from_be_bytes(r[8..12].try_into().unwrap()),
                        u32::from_be_bytes(r[12..16].try_into().unwrap()),
                    ));
                    h += 16;
                }
                if matches!(opcode, 0x0d | 0x0f | 0x10 | 0x11) {
                    h += 4; // AETH
                }
                if opcode == 0x64 {
                    h += 8; // DETH
                }
                let end = bth.len() - 4 - pad;
                Frame {
                    no: p.no,
                    src: p.ip[15],
                    opcode,
                    reth,
                    payload: bth[h..end].to_vec(),
                }
            })
            .collect()
    }

    pub fn frame(no: usize) -> Frame {
        frames(F_SRP)
            .into_iter()
            .find(|f| f.no == no)
            .expect("frame in capture")
    }
}

use capture::{frame, frames, F_SRP};

/// Initiator (guest B, 10.77.0.11) and target (guest A, 10.77.0.10).
const INITIATOR: u8 = 11;
const TARGET: u8 = 10;
const RC_SEND_ONLY: u8 = 0x04;

fn tag(n: u8) -> u64 {
    // Linux writes the u64 tag in host (little-endian) order.
    u64::from(n) << 56
}

#[test]
fn login_req_rdma_from_capture() {
    // Frame 3: the REQ. MAD data = UD payload after the 24-byte MAD header; the REQ's private
    // data starts at MAD data offset 140 with the 36-byte RDMA CM header.
    let f = frame(3);
    let pd = &f.payload[24 + 140..];
    assert_eq!(pd.len(), 92);
    let login = &pd[36..];
    let r = LoginReqRdmaRepr::parse(login).unwrap();
    assert_eq!(r.tag, 0);
    assert_eq!(r.req_buf_fmt, BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT);
    assert_eq!(r.req_flags, IMMED_REQUESTED);
    assert_eq!(r.req_it_iu_len, 8260);
    assert_eq!(
        r.initiator_port_id,
        [0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x0b]
    );
    assert_eq!(
        r.target_port_id,
        [
            0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x0a, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x77,
            0x00, 0x0a
        ]
    );
    assert_eq!(r.imm_data_offset, 68);
    assert_eq!(r.to_bytes(), login);
    let v = LoginReqRdmaPacket::new_checked(login).unwrap();
    assert_eq!(v.opcode(), 0);
    assert_eq!(v.req_it_iu_len(), 8260);

    // The IB CM form carries the same values at its own offsets; converting back is lossless.
    let ib = LoginReqRepr::from(r);
    assert_eq!(ib.multichannel_action(), login::MultiChannelAction::SINGLE);
    assert!(ib.immediate_requested());
    let b = ib.to_bytes();
    assert_eq!(b.len(), 64);
    assert_eq!(b[0], 0x00);
    assert_eq!(&b[16..20], &8260u32.to_be_bytes());
    assert_eq!(&b[24..28], &[0x00, 0x06, 0x80, 0x00]);
    assert_eq!(&b[28..30], &68u16.to_be_bytes());
    assert_eq!(&b[32..48], &r.initiator_port_id);
    assert_eq!(&b[48..64], &r.target_port_id);
    assert_eq!(LoginReqRepr::parse(&b).unwrap(), ib);
    assert_eq!(LoginReqRdmaRepr::from(ib), r);
    assert_eq!(SrpIu::parse(&b).unwrap(), SrpIu::LoginReq(ib));
    let iu = SrpIu::parse_login_req_rdma(login).unwrap();
    assert_eq!(iu.opcode(), Opcode::LOGIN_REQ);
    assert_eq!(iu.to_bytes(), login);

    let t = r.to_tree();
    assert_eq!(t.uint("srp_login_req.req_it_iu_len"), Some(8260));
    assert_eq!(t.uint("srp_login_req.imm_data_offset"), Some(68));
}

#[test]
fn login_rsp_from_capture() {
    // Frame 4: the REP; its private data (MAD data offset 36, 196 bytes) starts with the
    // 52-byte SRP_LOGIN_RSP.
    let f = frame(4);
    let pd = &f.payload[24 + 36..24 + 36 + 196];
    let r = LoginRspRepr::parse(pd).unwrap();
    assert_eq!(r.req_lim_delta, 128);
    assert_eq!(r.tag, 0);
    assert_eq!(r.max_it_iu_len, 8276);
    assert_eq!(r.max_ti_iu_len, 8260);
    assert_eq!(r.buf_fmt, 0x0006);
    assert_eq!(r.rsp_flags, LOGIN_RSP_IMMED_SUPP);
    assert!(r.immediate_supported());
    assert_eq!(r.multichannel_result(), login::MultiChannelResult::NO_CHAN);
    assert_eq!(r.to_bytes(), &pd[..52]);
    assert!(pd[52..].iter().all(|&b| b == 0));
    match SrpIu::parse(pd).unwrap() {
        SrpIu::LoginRsp(x) => assert_eq!(x, r),
        other => panic!("{other:?}"),
    }
    let t = r.to_tree();
    assert_eq!(t.uint("srp_login_rsp.max_it_iu_len"), Some(8276));
    assert_eq!(t.uint("srp_login_rsp.req_lim_delta"), Some(128));
}

#[test]
fn login_rej_hand_built() {
    // What ib_srpt sends (CM REJ reason 28) when the ACL has no entry for the initiator:
    // SRP_LOGIN_REJ 0x00010006, tag echoed, buf_fmt DIRECT|INDIRECT.
    let r = LoginRejRepr {
        reason: LoginRejReason::CHANNEL_LIMIT_REACHED,
        tag: 0,
        buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
    };
    let b = r.to_bytes();
    let mut want = [0u8; 32];
    want[0] = 0xc2;
    want[4..8].copy_from_slice(&[0x00, 0x01, 0x00, 0x06]);
    want[24..26].copy_from_slice(&[0x00, 0x06]);
    assert_eq!(b, want);
    assert_eq!(LoginRejRepr::parse(&b).unwrap(), r);
    assert_eq!(
        r.reason.to_string(),
        "RDMA channel limit reached for this initiator"
    );
    assert_eq!(format!("{:?}", r.reason), "CHANNEL_LIMIT_REACHED");
    assert_eq!(LoginRejReason::ALL.len(), 7);
    for (i, reason) in LoginRejReason::ALL.iter().enumerate() {
        assert_eq!(reason.0, 0x0001_0000 + i as u32);
    }
    // An unknown reason is a value, not an error.
    let mut u = b;
    u[7] = 0x42;
    let p = LoginRejRepr::parse(&u).unwrap();
    assert_eq!(p.reason, LoginRejReason(0x0001_0042));
    assert!(!p.reason.is_known());
    assert_eq!(p.to_bytes(), u);
    let t = r.to_tree();
    assert_eq!(t.uint("srp_login_rej.reason"), Some(0x0001_0006));
}

/// Every RC SEND of the session is an SRP IU: parse, check direction, re-emit exactly.
#[test]
fn every_send_parses_and_reemits() {
    let sends: Vec<_> = frames(F_SRP)
        .into_iter()
        .filter(|f| f.opcode == RC_SEND_ONLY)
        .collect();
    assert_eq!(sends.len(), 50);
    let (mut cmds, mut rsps) = (0, 0);
    for f in &sends {
        let iu = SrpIu::parse(&f.payload).unwrap_or_else(|e| panic!("frame {}: {e}", f.no));
        assert_eq!(iu.to_bytes(), f.payload, "frame {} re-emit", f.no);
        assert_eq!(iu.buffer_len(), f.payload.len());
        match &iu {
            SrpIu::Cmd(c) => {
                cmds += 1;
                assert_eq!(f.src, INITIATOR);
                assert_eq!(c.lun, 0);
                assert_eq!(c.task_attr, TaskAttr::SIMPLE);
                // Every CDB the initiator sent decodes and re-emits.
                let cdb = Cdb::parse(&c.cdb).unwrap();
                assert_eq!(cdb.to_cdb16(), Some(c.cdb), "frame {} cdb", f.no);
            }
            SrpIu::Rsp(r) => {
                rsps += 1;
                assert_eq!(f.src, TARGET);
                // ib_srpt: req_lim_delta = 1 + accumulated delta.
                assert_eq!(r.req_lim_delta, 1);
            }
            other => panic!("frame {}: unexpected {other:?}", f.no),
        }
        let _ = iu.to_tree().to_text(0);
        crate::test_support::render(&iu.to_tree());
    }
    assert_eq!((cmds, rsps), (25, 25));
}

fn cmd(no: usize) -> CmdRepr {
    match SrpIu::parse(&frame(no).payload).unwrap() {
        SrpIu::Cmd(c) => c,
        other => panic!("frame {no}: {other:?}"),
    }
}

fn rsp(no: usize) -> RspRepr {
    match SrpIu::parse(&frame(no).payload).unwrap() {
        SrpIu::Rsp(r) => r,
        other => panic!("frame {no}: {other:?}"),
    }
}

#[test]
fn commands_from_capture() {
    // Frame 8: INQUIRY, 36 bytes, data-in direct descriptor to the RDMA WRITE of frame 10.
    let c = cmd(8);
    assert_eq!(c.tag, tag(0x28));
    assert!(matches!(
        Cdb::parse(&c.cdb).unwrap(),
        Cdb::Inquiry(i) if !i.evpd && i.page_code == 0 && i.alloc_len == 36
    ));
    assert_eq!(c.data_out, DataDescriptor::None);
    let d = match c.data_in {
        DataDescriptor::Direct(d) => d,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(d.len, 36);
    let w = frame(10);
    assert_eq!(w.reth, Some((d.va, d.key, d.len)));
    assert_eq!(c.data_len(), 36);
    let v = CmdPacket::new_checked(frame(8).payload).unwrap();
    assert_eq!(v.data_in_format(), DATA_DESC_DIRECT);
    assert_eq!(v.data_out_format(), NO_DATA_DESC);
    assert_eq!(v.data_in_desc_cnt(), 0); // ib_srp leaves the count 0 for direct descriptors

    // Frame 20: INQUIRY EVPD page 0x00, allocation length 4.
    assert!(matches!(
        Cdb::parse(&cmd(20).cdb).unwrap(),
        Cdb::Inquiry(i) if i.evpd && i.page_code == 0 && i.alloc_len == 4
    ));
    // Frame 26: TEST UNIT READY, no data: a bare 48-byte IU.
    let tur = cmd(26);
    assert_eq!(frame(26).payload.len(), 48);
    assert_eq!(
        Cdb::parse(&tur.cdb).unwrap(),
        Cdb::TestUnitReady { control: 0 }
    );
    assert_eq!(tur.data_len(), 0);
    // Frame 30: REPORT LUNS 4096; frame 31: READ CAPACITY(16) 32.
    assert!(matches!(Cdb::parse(&cmd(30).cdb).unwrap(), Cdb::ReportLuns(r) if r.alloc_len == 4096));
    assert!(matches!(
        Cdb::parse(&cmd(31).cdb).unwrap(),
        Cdb::ReadCapacity16(r) if r.alloc_len == 32 && r.lba == 0 && !r.pmi
    ));
    // Frame 45: MODE SENSE(6) all pages, 4 bytes; frame 51: caching page.
    assert!(matches!(
        Cdb::parse(&cmd(45).cdb).unwrap(),
        Cdb::ModeSense(m) if !m.ten && m.page_code == 0x3f && m.alloc_len == 4 && !m.dbd
    ));
    assert!(matches!(
        Cdb::parse(&cmd(51).cdb).unwrap(),
        Cdb::ModeSense(m) if m.page_code == 0x08 && m.alloc_len == 4
    ));
    // Frame 63: MAINTENANCE IN (REPORT SUPPORTED OPERATION CODES), kept as Other.
    match Cdb::parse(&cmd(63).cdb).unwrap() {
        Cdb::Other { opcode, bytes } => {
            assert_eq!(opcode, ScsiOpcode::MAINTENANCE_IN);
            assert_eq!(bytes.len(), 12);
            assert_eq!(bytes[1], 0x0c);
        }
        other => panic!("{other:?}"),
    }
    // Frame 101: READ(10) LBA 0, 8 blocks into 4096 bytes.
    let r = cmd(101);
    match Cdb::parse(&r.cdb).unwrap() {
        Cdb::ReadWrite(rw) => {
            assert_eq!(rw.kind, RwKind::Read10);
            assert_eq!((rw.lba, rw.transfer_len), (0, 8));
            assert!(!rw.fua() && !rw.dpo());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.data_len(), 4096);
    // Frame 138: WRITE(10) LBA 0x80, 0x68 blocks, data-out direct 53248 bytes: the target
    // pulls it with the RDMA READ request of frame 142.
    let wcmd = cmd(138);
    match Cdb::parse(&wcmd.cdb).unwrap() {
        Cdb::ReadWrite(rw) => {
            assert_eq!(rw.kind, RwKind::Write10);
            assert_eq!((rw.lba, rw.transfer_len), (0x80, 0x68));
        }
        other => panic!("{other:?}"),
    }
    let d = match wcmd.data_out {
        DataDescriptor::Direct(d) => d,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(d.len, 0x68 * 512);
    assert_eq!(frame(142).reth, Some((d.va, d.key, d.len)));
}

#[test]
fn immediate_data_write_from_capture() {
    // Frame 128: WRITE(10) of one block carried as SRP-2 immediate data at the login's
    // imm_data_offset 68; bytes 52..68 are stale (a previous descriptor) and are kept.
    let f = frame(128);
    assert_eq!(f.payload.len(), 68 + 512);
    let c = cmd(128);
    assert_eq!(c.data_out, DataDescriptor::Immediate(ImmBuf { len: 512 }));
    assert_eq!(c.header_len(), 52);
    let data = c.immediate_data(68).unwrap();
    assert_eq!(data.len(), 512);
    assert!(data.starts_with(b"hello from guest B via SRP over Soft-RoCE\n"));
    assert_eq!(data, &f.payload[68..]);
    assert!(matches!(
        Cdb::parse(&c.cdb).unwrap(),
        Cdb::ReadWrite(rw) if rw.kind == RwKind::Write10 && rw.lba == 0 && rw.transfer_len == 1
    ));
    // The offset must not point into the descriptors, nor the data past the IU.
    assert!(c.immediate_data(50).is_err());
    assert!(c.immediate_data(69).is_err());
    assert!(cmd(8).immediate_data(68).is_err());

    // Building one: the data lands at the offset, zero padding before it.
    let mut b = CmdRepr {
        tag: 7,
        cdb: c.cdb,
        ..CmdRepr::default()
    };
    b.set_immediate_data(68, data);
    let bytes = b.to_bytes();
    assert_eq!(bytes.len(), 580);
    assert_eq!(bytes[5], 0x30);
    assert_eq!(&bytes[48..52], &512u32.to_be_bytes());
    assert!(bytes[52..68].iter().all(|&x| x == 0));
    assert_eq!(&bytes[68..], data);
    assert_eq!(
        CmdRepr::parse(&bytes).unwrap().immediate_data(68).unwrap(),
        data
    );
}

#[test]
fn responses_from_capture() {
    // Frame 11: GOOD, no residual, tag 0x28 (answers frame 8).
    let r = rsp(11);
    assert_eq!(r.tag, tag(0x28));
    assert_eq!(r.status, ScsiStatus::GOOD);
    assert_eq!(r.flags, RspFlags(0));
    assert!(r.sense_data.is_empty() && r.response_data.is_empty());
    // Frame 37: REPORT LUNS: DIUNDER, 4080 of 4096 bytes not transferred.
    let r = rsp(37);
    assert_eq!(r.tag, tag(0x2c));
    assert!(r.flags.diunder() && !r.flags.snsvalid());
    assert_eq!(r.data_in_res_cnt, 0xff0);
    // Frame 65: CHECK CONDITION with 96 bytes of fixed-format sense data:
    // ILLEGAL REQUEST / INVALID COMMAND OPERATION CODE for the MAINTENANCE IN of frame 63.
    let r = rsp(65);
    assert_eq!(r.tag, cmd(63).tag);
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
    assert_eq!(r.flags, RspFlags(RspFlags::SNSVALID));
    assert_eq!(r.sense_data.len(), 96);
    let s = SenseRepr::parse(&r.sense_data).unwrap();
    assert_eq!(s.sense_key(), SenseKey::ILLEGAL_REQUEST);
    assert_eq!(s.asc_ascq(), AscAscq::INVALID_COMMAND_OPERATION_CODE);
    assert_eq!(s.response_code(), 0x70);
    assert_eq!(s.to_bytes(), &r.sense_data[..18]);
    let v = RspPacket::new_checked(frame(65).payload).unwrap();
    assert_eq!(v.sense_data().unwrap().len(), 96);
    assert_eq!(v.response_data().unwrap().len(), 0);
    let t = r.to_tree();
    assert_eq!(t.uint("srp_rsp.status"), Some(2));
    assert_eq!(t.uint("srp_rsp.flags.snsvalid"), Some(1));
    assert_eq!(t.uint("srp_rsp.scsi_sense.sense_key"), Some(5));
    assert_eq!(t.uint("srp_rsp.scsi_sense.asc_ascq"), Some(0x2000));
    // Frame 80: INQUIRY VPD 0 with 36-byte allocation: 32 bytes residual.
    let r = rsp(80);
    assert!(r.flags.diunder());
    assert_eq!(r.data_in_res_cnt, 32);
}

#[test]
fn other_ius_roundtrip() {
    let ious = vec![
        SrpIu::ILogout(ILogoutRepr { tag: 9 }),
        SrpIu::TLogout(TLogoutRepr {
            sol_not: 1,
            reason: TLogoutReason::INVALID_IU_TYPE,
            tag: 3,
        }),
        SrpIu::TskMgmt(TskMgmtRepr {
            sol_not: 0,
            tag: 0x11,
            lun: 0x0001_0000_0000_0000,
            function: TaskMgmtFunction::ABORT_TASK,
            task_tag: tag(0x28),
        }),
        SrpIu::CredReq(CredReqRepr {
            sol_not: 1,
            req_lim_delta: 5,
            tag: 1,
        }),
        SrpIu::CredRsp(CredRspRepr { tag: 1 }),
        SrpIu::AerReq(AerReqRepr {
            sol_not: 0,
            req_lim_delta: 0,
            tag: 2,
            lun: 0,
            sense_data: SenseRepr::fixed(
                SenseKey::UNIT_ATTENTION,
                AscAscq::CAPACITY_DATA_HAS_CHANGED,
            )
            .to_bytes(),
        }),
        SrpIu::AerRsp(AerRspRepr { tag: 2 }),
        SrpIu::Rsp(RspRepr::task_mgmt(0x11, 1, RspCode::COMPLETE)),
        SrpIu::LoginRsp(LoginRspRepr {
            req_lim_delta: 128,
            tag: 0,
            max_it_iu_len: 8276,
            max_ti_iu_len: 8260,
            buf_fmt: 6,
            rsp_flags: 0x82,
        }),
        SrpIu::Unknown {
            opcode: Opcode(0x55),
            data: vec![0x55; 20],
        },
    ];
    for iu in ious {
        let b = iu.to_bytes();
        let p = SrpIu::parse(&b).unwrap();
        assert_eq!(p, iu);
        assert_eq!(p.to_bytes(), b);
        assert_eq!(b[0], iu.opcode().0);
        if !matches!(iu, SrpIu::Unknown { .. }) {
            assert!(iu.opcode().is_known());
        }
        let _ = p.to_tree().to_text(0);
    }
    // Layout spot checks against include/scsi/srp.h.
    let t = TskMgmtRepr {
        sol_not: 0,
        tag: 1,
        lun: 0x0102_0304_0506_0708,
        function: TaskMgmtFunction::LUN_RESET,
        task_tag: 0x0a0b,
    }
    .to_bytes();
    assert_eq!(t.len(), 48);
    assert_eq!(&t[20..28], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(t[30], 0x08);
    assert_eq!(&t[38..40], &[0x0a, 0x0b]);
    let tl = TLogoutRepr {
        sol_not: 0,
        reason: TLogoutReason::MULTICHANNEL_ACTION,
        tag: 0,
    }
    .to_bytes();
    assert_eq!(tl, [0x80, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
    let rsp = RspRepr::task_mgmt(5, 1, RspCode::NOT_SUPPORTED);
    assert_eq!(rsp.rsp_code(), Some(RspCode::NOT_SUPPORTED));
    let rb = rsp.to_bytes();
    assert_eq!(rb.len(), 40);
    assert_eq!(rb[18], 0x01);
    assert_eq!(&rb[32..36], &4u32.to_be_bytes());
    assert_eq!(rb[39], 0x04);
}

#[test]
fn indirect_descriptors() {
    let descs = vec![
        DirectBuf {
            va: 0x1000,
            key: 0x11,
            len: 4096,
        },
        DirectBuf {
            va: 0x3000,
            key: 0x11,
            len: 4096,
        },
        DirectBuf {
            va: 0x9000,
            key: 0x12,
            len: 512,
        },
    ];
    let c = CmdRepr {
        tag: tag(0x30),
        cdb: Cdb::ReadWrite(crate::scsi::ReadWriteRepr {
            kind: RwKind::Read16,
            lba: 0x1_0000_0000,
            transfer_len: 17,
            flags: crate::scsi::ReadWriteRepr::FUA,
            group: 0,
            control: 0,
        })
        .to_cdb16()
        .unwrap(),
        data_in: DataDescriptor::Indirect(IndirectBuf {
            table: DirectBuf {
                va: 0xffff_8800_0000_0000,
                key: 0x99,
                len: 48,
            },
            total_len: 8704,
            descs: descs.clone(),
        }),
        ..CmdRepr::default()
    };
    let b = c.to_bytes();
    assert_eq!(b.len(), 48 + 20 + 3 * 16);
    assert_eq!(b[5], 0x02);
    assert_eq!((b[6], b[7]), (0, 3));
    assert_eq!(&b[48 + 12..48 + 16], &48u32.to_be_bytes());
    assert_eq!(&b[64..68], &8704u32.to_be_bytes());
    let p = CmdRepr::parse(&b).unwrap();
    assert_eq!(p, c);
    assert_eq!(p.data_len(), 8704);
    // A data-out direct plus a data-in indirect (bidirectional) in wire order.
    let bidi = CmdRepr {
        data_out: DataDescriptor::Direct(descs[0]),
        additional_cdb: vec![1, 2, 3, 4],
        ..c.clone()
    };
    let bb = bidi.to_bytes();
    assert_eq!(bb[31], 4);
    assert_eq!(bb[5], 0x12);
    assert_eq!(CmdRepr::parse(&bb).unwrap(), bidi);
    assert_eq!(bidi.full_cdb().len(), 20);

    // A descriptor count that runs past the IU is an error naming the descriptor.
    let mut over = b.clone();
    over[7] = 200;
    assert_eq!(
        CmdRepr::parse(&over).unwrap_err().field(),
        "srp.cmd.data_in_desc"
    );
    // Unknown formats and immediate data-in are refused.
    let mut bad = b.clone();
    bad[5] = 0x05;
    assert_eq!(
        CmdRepr::parse(&bad).unwrap_err().field(),
        "srp.cmd.data_in_format"
    );
    bad[5] = 0x03;
    assert_eq!(
        CmdRepr::parse(&bad).unwrap_err().field(),
        "srp.cmd.data_in_format"
    );
    bad[5] = 0x40;
    assert_eq!(
        CmdRepr::parse(&bad).unwrap_err().field(),
        "srp.cmd.data_out_format"
    );
    // An additional CDB length past the IU.
    let mut add = frame(26).payload.clone();
    add[31] = 0x10;
    assert_eq!(
        CmdRepr::parse(&add).unwrap_err().field(),
        "srp.cmd.additional_cdb"
    );
}

#[test]
fn hostile_input_never_panics() {
    let mut samples: Vec<Vec<u8>> = frames(F_SRP)
        .into_iter()
        .filter(|f| f.opcode == RC_SEND_ONLY)
        .map(|f| f.payload)
        .collect();
    samples.push(frame(3).payload[24 + 176..].to_vec());
    samples.push(frame(4).payload[24 + 36..24 + 36 + 52].to_vec());
    for iu in [
        LoginRejRepr::default().to_bytes(),
        TskMgmtRepr::default().to_bytes(),
        TLogoutRepr::default().to_bytes(),
        AerReqRepr {
            sense_data: vec![0x70; 18],
            ..AerReqRepr::default()
        }
        .to_bytes(),
    ] {
        samples.push(iu);
    }
    for s in &samples {
        // Truncated at every length: an error, never a panic.
        for n in 0..s.len() {
            let t = &s[..n];
            let _ = SrpIu::parse(t);
            let _ = LoginReqRdmaRepr::parse(t);
            let _ = LoginReqRepr::parse(t);
        }
    }
    // Fixed-size IUs: every truncation is an error.
    for s in samples.iter().filter(|s| s[0] != 0x02 && s[0] != 0xc1) {
        if s.len() == 56 {
            for n in 0..56 {
                assert!(LoginReqRdmaRepr::parse(&s[..n]).is_err());
            }
        } else {
            for n in 0..s.len().min(16) {
                assert!(SrpIu::parse(&s[..n]).is_err(), "len {n} of {:02x}", s[0]);
            }
        }
    }
    // SRP_RSP with lengths that overflow, SRP_CMD/RSP cut short.
    let mut r = frame(65).payload.clone();
    r[28..32].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        RspRepr::parse(&r).unwrap_err().field(),
        "srp.rsp.sense_data"
    );
    r[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(RspRepr::parse(&r).is_err());
    let r = frame(65).payload;
    for n in 0..r.len() {
        assert!(RspRepr::parse(&r[..n]).is_err());
    }
    let c = frame(8).payload;
    for n in 0..c.len() {
        assert!(CmdRepr::parse(&c[..n]).is_err(), "cmd cut at {n}");
    }
    // Wrong opcode for the type asked for.
    assert_eq!(
        LoginRspRepr::parse(&[0u8; 52]).unwrap_err().field(),
        "srp.login_rsp.opcode"
    );
    let mut rdma = frame(3).payload[24 + 176..].to_vec();
    rdma[11] = 0xc0;
    assert_eq!(
        LoginReqRdmaRepr::parse(&rdma).unwrap_err().field(),
        "srp.login_req_rdma.opcode"
    );
    // Pseudo-random garbage with every opcode.
    let mut x: u32 = 0x1234_5678;
    for len in [0usize, 1, 15, 16, 35, 36, 47, 48, 52, 56, 64, 100, 300] {
        for op in 0..=255u8 {
            let mut g: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            if let Some(b) = g.first_mut() {
                *b = op;
            }
            if let Ok(iu) = SrpIu::parse(&g) {
                let again = SrpIu::parse(&iu.to_bytes()).unwrap();
                assert_eq!(again, iu);
                crate::test_support::render(&iu.to_tree());
            }
            let _ = SrpIu::parse_login_req_rdma(&g);
        }
    }
}
