//! Verbs object tests: lifecycles, limits, the memory model's guarantees, modify_qp value
//! checks and flushing.

use std::net::{IpAddr, Ipv4Addr};

use softrdma_wire::Gid;

use super::*;
use crate::device::{Device, DeviceConfig, Mtu};

fn dev() -> Device {
    Device::new(
        DeviceConfig::new("rxe0", vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))])
            .with_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x0a]),
    )
}

struct Env {
    dev: Device,
    v: Verbs,
    pd: PdId,
    scq: CqId,
    rcq: CqId,
}

fn env() -> Env {
    let dev = dev();
    let mut v = Verbs::new(dev.query_device(), 7);
    let pd = v.alloc_pd().expect("pd");
    let scq = v.create_cq(16).expect("scq");
    let rcq = v.create_cq(16).expect("rcq");
    Env {
        dev,
        v,
        pd,
        scq,
        rcq,
    }
}

fn init_attr(e: &Env, qp_type: QpType) -> QpInitAttr {
    QpInitAttr {
        qp_type,
        pd: e.pd,
        send_cq: e.scq,
        recv_cq: e.rcq,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

/// A modify_qp that changes only the state.
fn set_state(e: &mut Env, qpn: u32, qp_state: QpState) -> Result<(), VerbsError> {
    let attr = QpAttr {
        qp_state,
        ..QpAttr::default()
    };
    e.v.modify_qp(&e.dev, qpn, &attr, QpAttrMask::STATE)
}

/// Asserts that a modify_qp was refused for the value of `attr`.
#[track_caller]
fn assert_invalid_value(r: Result<(), VerbsError>, attr: &str) {
    assert!(
        matches!(
            &r,
            Err(VerbsError::ModifyQp(ModifyQpError::InvalidValue { attr: a, .. })) if *a == attr
        ),
        "{r:?}"
    );
}

/// RESET -> INIT of an RC QP on P_Key index 0, port 1, with `access`.
fn rc_to_init(e: &mut Env, qpn: u32, access: AccessFlags) {
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    let mask = required_mask(QpState::Reset, QpState::Init, QpType::Rc);
    e.v.modify_qp(&e.dev, qpn, &init, mask).expect("INIT");
}

/// ibv_rc_pingpong's three modify_qp calls.
fn rc_to_rts(e: &mut Env, qpn: u32) {
    use QpState::{Init, Rtr, Rts};
    rc_to_init(e, qpn, AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE);
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x11,
        rq_psn: 0x123456,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AddressVector {
            dgid: Gid::from(Ipv4Addr::new(10, 77, 0, 11)),
            sgid_index: 1,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    let mask = required_mask(Init, Rtr, QpType::Rc);
    e.v.modify_qp(&e.dev, qpn, &rtr, mask).expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0x654321,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let mask = required_mask(Rtr, Rts, QpType::Rc);
    e.v.modify_qp(&e.dev, qpn, &rts, mask).expect("RTS");
}

fn ud_to_rts(e: &mut Env, qpn: u32, gsi: bool) {
    let ty = if gsi { QpType::Gsi } else { QpType::Ud };
    let attr = QpAttr {
        qkey: if gsi { GSI_QKEY } else { 0x1111_1111 },
        sq_psn: 0,
        ..QpAttr::default()
    };
    for (a, mask) in steps_to_rts(ty, &attr) {
        e.v.modify_qp(&e.dev, qpn, &a, mask).expect("to RTS");
    }
}

fn ud_dest() -> UdDest {
    UdDest {
        av: AddressVector {
            dgid: Gid::from(Ipv4Addr::new(10, 77, 0, 11)),
            sgid_index: 1,
            ..AddressVector::default()
        },
        remote_qpn: 1,
        remote_qkey: GSI_QKEY,
    }
}

#[test]
fn rc_pingpong_sequence_and_query() {
    let mut e = env();
    let (qpn, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("qp");
    assert_eq!(e.v.qp(qpn).map(|q| q.state()), Ok(QpState::Reset));
    rc_to_rts(&mut e, qpn);
    let a = *e.v.qp(qpn).expect("qp").attr();
    assert_eq!(a.qp_state, QpState::Rts);
    assert_eq!(a.dest_qp_num, 0x11);
    assert_eq!(a.rq_psn, 0x123456);
    assert_eq!(a.sq_psn, 0x654321);
    assert_eq!(a.path_mtu, Mtu::Mtu1024);
    assert_eq!(a.timeout, 14);
    assert_eq!(a.min_rnr_timer, 12);
    assert_eq!(a.ah_attr.sgid_index, 1);
    assert_eq!(
        a.qp_access_flags,
        AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE
    );
}

#[test]
fn qp_numbers_like_rxe() {
    // rxe: the GSI QP takes pool index 16 but is numbered 1, so the first user QP is 0x11
    // (udaddy's SIDR_REP in the lab carries QPN 0x11).
    let mut e = env();
    let (gsi, _) = e.v.create_qp(init_attr(&e, QpType::Gsi)).expect("gsi");
    assert_eq!(gsi, GSI_QPN);
    let (q1, _) = e.v.create_qp(init_attr(&e, QpType::Ud)).expect("ud");
    let (q2, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("rc");
    assert_eq!((q1, q2), (0x11, 0x12));
    assert_eq!(
        e.v.create_qp(init_attr(&e, QpType::Gsi)),
        Err(VerbsError::GsiExists)
    );
    // Numbers are allocated cyclically: a destroyed number is not reused at once.
    e.v.destroy_qp(q1).expect("destroy");
    let (q3, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("rc");
    assert_eq!(q3, 0x13);
    assert_eq!(e.v.qp_numbers().collect::<Vec<_>>(), vec![1, 0x12, 0x13]);
}

/// `max_qp`: rxe's 65,536 by default (the 65,537th QP is refused); a device configured for
/// more (`DeviceConfig::with_max_qp`, scale runs) holds them, with QPNs from a pool twice
/// its size, and refuses the one over its limit.
#[test]
fn qp_limit_default_and_configured() {
    fn fill(max_qp: Option<u32>) -> (usize, Result<(u32, QpCap), VerbsError>, u32) {
        let mut cfg = DeviceConfig::new("rxe0", vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))]);
        if let Some(m) = max_qp {
            cfg = cfg.with_max_qp(m);
        }
        let dev = Device::new(cfg);
        let mut v = Verbs::new(dev.query_device(), 7);
        let pd = v.alloc_pd().expect("pd");
        let cq = v.create_cq(16).expect("cq");
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        };
        let limit = dev.query_device().max_qp;
        let mut top = 0;
        for _ in 0..limit {
            let (q, _) = v.create_qp(init).expect("within the limit");
            top = top.max(q);
        }
        (v.qp_numbers().count(), v.create_qp(init), top)
    }
    let (n, over, _) = fill(None);
    assert_eq!(n, 65_536);
    assert!(
        matches!(
            over,
            Err(VerbsError::Limit {
                what: "max_qp",
                max: 65_536,
                ..
            })
        ),
        "{over:?}"
    );
    let (n, over, top) = fill(Some(100_000));
    assert_eq!(n, 100_000);
    assert!(
        matches!(
            over,
            Err(VerbsError::Limit {
                what: "max_qp",
                max: 100_000,
                ..
            })
        ),
        "{over:?}"
    );
    assert!(top < 0x00ff_ffff, "QPNs stay 24-bit: {top:#x}");
}

#[test]
fn qp_caps_rounded_and_limited() {
    let mut e = env();
    let mut ia = init_attr(&e, QpType::Rc);
    ia.cap = QpCap {
        max_send_wr: 10,
        max_recv_wr: 100,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let (_, cap) = e.v.create_qp(ia).expect("qp");
    assert_eq!(cap.max_send_wr, 15);
    assert_eq!(cap.max_recv_wr, 127);
    // The send WQE holds max(1 * 16, 64) bytes: 4 SGEs or 64 inline bytes.
    assert_eq!(cap.max_send_sge, 4);
    assert_eq!(cap.max_inline_data, 64);
    ia.cap.max_send_wr = 0x4001;
    assert_eq!(
        e.v.create_qp(ia),
        Err(VerbsError::Limit {
            what: "max_send_wr",
            requested: 0x4001,
            max: 0x4000
        })
    );
    ia.cap.max_send_wr = 1;
    ia.cap.max_recv_sge = 33;
    assert!(matches!(
        e.v.create_qp(ia),
        Err(VerbsError::Limit {
            what: "max_recv_sge",
            ..
        })
    ));
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 513;
    assert!(matches!(
        e.v.create_qp(ia),
        Err(VerbsError::Limit {
            what: "max_inline_data",
            ..
        })
    ));
    ia.send_cq = CqId(99);
    assert_eq!(e.v.create_qp(ia), Err(VerbsError::InvalidCq(CqId(99))));
}

#[test]
fn modify_qp_value_checks() {
    use QpAttrMask as A;
    let mut e = env();
    let (qpn, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("qp");
    let base = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let m = required_mask(QpState::Reset, QpState::Init, QpType::Rc);
    let bad = |e: &mut Env, a: QpAttr, mask: QpAttrMask| e.v.modify_qp(&e.dev, qpn, &a, mask);
    // P_Key index beyond rxe's one-entry table.
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                pkey_index: 1,
                ..base
            },
            m,
        ),
        "pkey_index",
    );
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                port_num: 2,
                ..base
            },
            m,
        ),
        "port_num",
    );
    // CAP is refused by the table, not silently ignored.
    let r = bad(&mut e, base, m | A::CAP);
    assert!(matches!(
        r,
        Err(VerbsError::ModifyQp(ModifyQpError::ForbiddenAttribute {
            attr: "cap",
            ..
        }))
    ));
    // Nothing was applied by the refused calls.
    assert_eq!(e.v.qp(qpn).map(|q| q.state()), Ok(QpState::Reset));
    e.v.modify_qp(&e.dev, qpn, &base, m).expect("INIT");

    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    let rm = required_mask(QpState::Init, QpState::Rtr, QpType::Rc);
    let r = bad(&mut e, rtr, rm.minus(A::MIN_RNR_TIMER));
    assert_eq!(
        r,
        Err(VerbsError::ModifyQp(ModifyQpError::MissingAttribute {
            qp_type: QpType::Rc,
            from: QpState::Init,
            to: QpState::Rtr,
            attr: "min_rnr_timer"
        }))
    );
    let mut av = rtr;
    av.ah_attr.sgid_index = 2;
    assert_invalid_value(bad(&mut e, av, rm), "ah_attr.grh.sgid_index");
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                max_dest_rd_atomic: 129,
                ..rtr
            },
            rm,
        ),
        "max_dest_rd_atomic",
    );
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                rq_psn: 0x0100_0000,
                ..rtr
            },
            rm,
        ),
        "rq_psn",
    );
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                min_rnr_timer: 32,
                ..rtr
            },
            rm,
        ),
        "min_rnr_timer",
    );
    let r = bad(&mut e, rtr, rm | A::ALT_PATH);
    assert_eq!(
        r,
        Err(VerbsError::ModifyQp(ModifyQpError::Unsupported {
            attr: "alt_path"
        }))
    );
    // Path MTU 4096 is within the port's max even though the active MTU is 1024 (rxe checks
    // against max_mtu).
    e.v.modify_qp(
        &e.dev,
        qpn,
        &QpAttr {
            path_mtu: Mtu::Mtu4096,
            ..rtr
        },
        rm,
    )
    .expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 32,
        ..QpAttr::default()
    };
    let sm = required_mask(QpState::Rtr, QpState::Rts, QpType::Rc);
    assert_invalid_value(bad(&mut e, rts, sm), "timeout");
    assert_invalid_value(
        bad(
            &mut e,
            QpAttr {
                timeout: 14,
                retry_cnt: 8,
                ..rts
            },
            sm,
        ),
        "retry_cnt",
    );
    // Illegal jump.
    let r = bad(
        &mut e,
        QpAttr {
            qp_state: QpState::Init,
            ..rts
        },
        A::STATE,
    );
    assert!(matches!(
        r,
        Err(VerbsError::ModifyQp(
            ModifyQpError::InvalidTransition { .. }
        ))
    ));
}

#[test]
fn err_flushes_everything_in_order() {
    let mut e = env();
    let (qpn, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("qp");
    // Receives may be posted from INIT on.
    rc_to_init(&mut e, qpn, AccessFlags::NONE);
    // ... sends only from RTS.
    assert!(matches!(
        e.v.post_send(qpn, SendWr::new(1, SendOp::Send)),
        Err(VerbsError::QpState {
            state: QpState::Init,
            ..
        })
    ));
    for id in 10..13 {
        e.v.post_recv(qpn, RecvWr::new(id, vec![])).expect("recv");
    }
    set_state(&mut e, qpn, QpState::Reset).expect("RESET");
    // RESET discards silently.
    assert_eq!(e.v.qp(qpn).map(|q| q.recv_queue_len()), Ok(0));
    assert!(e.v.cq(e.rcq).map(|c| c.is_empty()).unwrap_or(false));
    rc_to_rts(&mut e, qpn);
    for id in 10..13 {
        e.v.post_recv(qpn, RecvWr::new(id, vec![])).expect("recv");
    }
    e.v.post_send(qpn, SendWr::new(1, SendOp::Send))
        .expect("send");
    e.v.post_send(
        qpn,
        SendWr::new(
            2,
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 5,
            },
        ),
    )
    .expect("read");
    set_state(&mut e, qpn, QpState::Err).expect("ERR");
    let mut s = Vec::new();
    e.v.poll_cq_into(e.scq, &mut s, 10).expect("poll");
    assert_eq!(
        s.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::Send, WcStatus::WrFlushErr),
            (2, WcOpcode::RdmaRead, WcStatus::WrFlushErr)
        ]
    );
    let mut r = Vec::new();
    e.v.poll_cq_into(e.rcq, &mut r, 10).expect("poll");
    assert_eq!(
        r.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![10, 11, 12]
    );
    assert!(r.iter().all(|w| w.status == WcStatus::WrFlushErr
        && w.opcode == WcOpcode::Recv
        && w.qp_num == qpn));
    // Posting to a QP in ERR completes at once with a flush error.
    e.v.post_send(qpn, SendWr::new(3, SendOp::Send))
        .expect("send");
    e.v.post_recv(qpn, RecvWr::new(13, vec![])).expect("recv");
    assert_eq!(
        e.v.poll_cq(e.scq)
            .ok()
            .flatten()
            .map(|w| (w.wr_id, w.status)),
        Some((3, WcStatus::WrFlushErr))
    );
    assert_eq!(
        e.v.poll_cq(e.rcq)
            .ok()
            .flatten()
            .map(|w| (w.wr_id, w.status)),
        Some((13, WcStatus::WrFlushErr))
    );
    // The transport's fatal path flushes too and raises QP_FATAL.
    let (q2, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("qp");
    rc_to_rts(&mut e, q2);
    e.v.post_send(q2, SendWr::new(4, SendOp::Send))
        .expect("send");
    e.v.set_qp_error(q2);
    assert_eq!(e.v.poll_event(), Some(AsyncEvent::QpFatal(q2)));
    assert_eq!(e.v.poll_cq(e.scq).ok().flatten().map(|w| w.wr_id), Some(4));
}

#[test]
fn post_send_checks() {
    let mut e = env();
    let (ud, _) = e.v.create_qp(init_attr(&e, QpType::Ud)).expect("ud");
    let (rc, cap) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("rc");
    ud_to_rts(&mut e, ud, false);
    rc_to_rts(&mut e, rc);
    // UD: SENDs only, and always with a destination.
    assert!(matches!(
        e.v.post_send(ud, SendWr::new(1, SendOp::Send)),
        Err(VerbsError::WrongQpType {
            qp_type: QpType::Ud,
            ..
        })
    ));
    assert!(matches!(
        e.v.post_send(
            ud,
            SendWr::new(
                1,
                SendOp::RdmaRead {
                    remote_addr: 0,
                    rkey: 1
                }
            )
            .with_ud(ud_dest())
        ),
        Err(VerbsError::WrongQpType {
            op: "RDMA_READ",
            ..
        })
    ));
    e.v.post_send(
        ud,
        SendWr::new(1, SendOp::SendWithImm { imm: 7 }).with_ud(ud_dest()),
    )
    .expect("ud send");
    // RC: no UD destination.
    assert!(matches!(
        e.v.post_send(rc, SendWr::new(1, SendOp::Send).with_ud(ud_dest())),
        Err(VerbsError::WrongQpType {
            qp_type: QpType::Rc,
            ..
        })
    ));
    // SGE count.
    let sge = Sge {
        addr: 0,
        length: 8,
        lkey: 0,
    };
    let mut wr = SendWr::new(1, SendOp::Send);
    wr.sg_list = vec![sge; cap.max_send_sge as usize + 1];
    assert!(matches!(
        e.v.post_send(rc, wr),
        Err(VerbsError::Limit {
            what: "num_sge",
            ..
        })
    ));
    // Atomics: exactly 8 bytes, aligned.
    let fa = |addr| SendOp::AtomicFetchAdd {
        remote_addr: addr,
        rkey: 1,
        add: 1,
    };
    assert!(matches!(
        e.v.post_send(rc, SendWr::new(1, fa(8)).with_sge(Sge { length: 4, ..sge })),
        Err(VerbsError::InvalidWr { .. })
    ));
    assert!(matches!(
        e.v.post_send(rc, SendWr::new(1, fa(12)).with_sge(sge)),
        Err(VerbsError::InvalidWr {
            reason: "atomic remote address not 8-byte aligned"
        })
    ));
    // Too long for the port.
    assert!(matches!(
        e.v.post_send(
            rc,
            SendWr::new(1, SendOp::Send).with_sge(Sge {
                length: 0x80_0001,
                ..sge
            })
        ),
        Err(VerbsError::Limit {
            what: "message length",
            ..
        })
    ));
    // Queue depth.
    for i in 0..cap.max_send_wr {
        e.v.post_send(rc, SendWr::new(u64::from(i), fa(8)).with_sge(sge))
            .expect("post");
    }
    assert_eq!(
        e.v.post_send(rc, SendWr::new(99, SendOp::Send)),
        Err(VerbsError::QueueFull {
            what: "send queue",
            depth: cap.max_send_wr
        })
    );
    assert_eq!(e.v.take_send_wr(rc).map(|w| w.wr_id), Some(0));
}

#[test]
fn mr_keys_and_access_flags() {
    let mut e = env();
    let k =
        e.v.reg_mr(e.pd, 64, 0x1000, AccessFlags::LOCAL_WRITE)
            .expect("mr");
    assert_eq!(k.lkey >> 8, 1);
    assert_eq!(k.rkey, 0, "no remote access, no rkey");
    let k2 =
        e.v.reg_mr(
            e.pd,
            64,
            0,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .expect("mr");
    assert_eq!(k2.lkey >> 8, 2);
    assert_eq!(k2.rkey, k2.lkey);
    // ib_check_mr_access: remote write without local write is refused.
    assert_eq!(
        e.v.reg_mr(e.pd, 8, 0, AccessFlags::REMOTE_WRITE),
        Err(VerbsError::Mr(MrError::InvalidAccessFlags(
            AccessFlags::REMOTE_WRITE
        )))
    );
    assert!(e.v.reg_mr(e.pd, 8, 0, AccessFlags::REMOTE_READ).is_ok());
    assert!(e
        .v
        .reg_mr(e.pd, 8, u64::MAX - 4, AccessFlags::NONE)
        .is_err());
    assert!(e.v.reg_mr(PdId(42), 8, 0, AccessFlags::NONE).is_err());
    // A key with the right index but the wrong key byte finds nothing.
    assert_eq!(
        e.v.mr(k.lkey ^ 1).err(),
        Some(VerbsError::Mr(MrError::InvalidKey(k.lkey ^ 1)))
    );
    assert!(e.v.mr_table().by_rkey(0).is_err());
    assert!(e.v.mr_table().by_rkey(k2.rkey).is_ok());
    // The PD cannot go while MRs use it; dereg gives the bytes back.
    assert!(matches!(
        e.v.dealloc_pd(e.pd),
        Err(VerbsError::Busy { what: "PD", .. })
    ));
    e.v.local_write(k.lkey, 0x1000, b"hello").expect("write");
    let bytes = e.v.dereg_mr(k.lkey).expect("dereg");
    assert_eq!(&bytes[..5], b"hello");
    assert!(e.v.mr(k.lkey).is_err());
}

/// rxe_invalidate_mr / rxe_reg_fast_mr: only a fast-registration MR can be invalidated, by
/// its own key; a free MR answers to no key for the device but stays the owner's.
#[test]
fn fast_mr_invalidate_and_reregister() {
    let mut e = env();
    let user =
        e.v.reg_mr(
            e.pd,
            16,
            0x1000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .expect("user");
    assert!(e.v.invalidate_mr(user.rkey).is_err(), "user MR");
    assert_eq!(e.v.mr(user.lkey).expect("mr").mr_type(), MrType::User);
    let local_only =
        e.v.reg_fast_mr(e.pd, vec![1; 16], 0x2000, AccessFlags::LOCAL_WRITE)
            .expect("fast");
    assert_eq!(local_only.rkey, local_only.lkey);
    assert!(
        e.v.invalidate_mr(local_only.lkey ^ 0x80).is_err(),
        "key byte"
    );
    assert!(e.v.invalidate_mr(0x7fff_ff00).is_err(), "no such index");
    e.v.invalidate_mr(local_only.lkey).expect("invalidate");
    e.v.invalidate_mr(local_only.lkey)
        .expect("again: rxe does not check the state");
    let t = e.v.mr_table();
    assert!(t.by_lkey(local_only.lkey).is_err());
    assert!(t.by_rkey(local_only.rkey).is_err());
    let mut b = [0u8; 4];
    e.v.local_read(local_only.lkey, 0x2000, &mut b)
        .expect("owner");
    assert_eq!(b, [1; 4]);
    // Only the key byte changes; the index stays.
    let k =
        e.v.rereg_fast_mr(local_only.lkey, 0x42, AccessFlags::LOCAL_WRITE)
            .expect("rereg");
    assert_eq!(k.lkey, (local_only.lkey & !0xff) | 0x42);
    assert_eq!(e.v.mr(k.lkey).expect("mr").state(), MrState::Valid);
    assert!(e.v.mr(local_only.lkey).is_err() || local_only.lkey == k.lkey);
    e.v.invalidate_mr(k.lkey).expect("invalidate");
    assert_eq!(
        e.v.dereg_mr(k.lkey).expect("dereg of a free MR"),
        vec![1; 16]
    );
}

#[test]
fn mr_bounds_never_escape() {
    let mut e = env();
    let pd2 = e.v.alloc_pd().expect("pd");
    let a =
        e.v.reg_mr_with(
            e.pd,
            vec![0xaa; 16],
            0x1000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .expect("a");
    let b =
        e.v.reg_mr_with(e.pd, vec![0xbb; 16], 0x1010, AccessFlags::LOCAL_WRITE)
            .expect("b");
    let table = e.v.mr_table();
    let mr = table.by_rkey(a.rkey).expect("mr");
    // Inside, at both edges.
    assert_eq!(
        mr.check_remote(e.pd, 0x1000, 16, AccessFlags::REMOTE_WRITE),
        Ok(0..16)
    );
    assert_eq!(
        mr.check_remote(e.pd, 0x100f, 1, AccessFlags::REMOTE_WRITE),
        Ok(15..16)
    );
    assert_eq!(
        mr.check_remote(e.pd, 0x1010, 0, AccessFlags::REMOTE_WRITE),
        Ok(16..16)
    );
    // One byte past the end (where MR b's iova starts), before the start, wrapping.
    for (addr, len) in [
        (0x1001u64, 16usize),
        (0xfff, 1),
        (0x1010, 1),
        (u64::MAX, 2),
        (0x1000, usize::MAX),
    ] {
        assert!(
            matches!(
                mr.check_remote(e.pd, addr, len, AccessFlags::REMOTE_WRITE),
                Err(MrError::OutOfBounds { .. })
            ),
            "{addr:#x}+{len}"
        );
    }
    assert_eq!(
        mr.check_remote(pd2, 0x1000, 1, AccessFlags::REMOTE_WRITE),
        Err(MrError::WrongPd { key: a.rkey })
    );
    assert!(matches!(
        mr.check_remote(e.pd, 0x1000, 1, AccessFlags::REMOTE_READ),
        Err(MrError::AccessDenied { .. })
    ));
    // A scatter that fails on its second SGE writes nothing at all.
    let sges = [
        Sge {
            addr: 0x1000,
            length: 8,
            lkey: a.lkey,
        },
        Sge {
            addr: 0x1018,
            length: 16,
            lkey: b.lkey,
        },
    ];
    assert!(matches!(
        e.v.scatter(e.pd, &sges, &[0x11; 20]),
        Err(ScatterError::Mr(MrError::OutOfBounds { .. }))
    ));
    assert_eq!(
        e.v.mr(a.lkey).map(|m| m.as_slice().to_vec()),
        Ok(vec![0xaa; 16])
    );
    assert_eq!(
        e.v.mr(b.lkey).map(|m| m.as_slice().to_vec()),
        Ok(vec![0xbb; 16])
    );
    assert_eq!(
        e.v.scatter(e.pd, &sges[..1], &[0; 9]),
        Err(ScatterError::TooLong { len: 9, room: 8 })
    );
    // A good scatter spans SGEs; gather reads them back.
    let good = [
        Sge {
            addr: 0x1008,
            length: 8,
            lkey: a.lkey,
        },
        Sge {
            addr: 0x1010,
            length: 16,
            lkey: b.lkey,
        },
    ];
    e.v.scatter(e.pd, &good, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        .expect("scatter");
    let back = e.v.gather(e.pd, &good).expect("gather");
    assert_eq!(&back[..10], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(&back[10..], &[0xbb; 14]);
    // Receives need LOCAL_WRITE.
    let ro = e.v.reg_mr(e.pd, 8, 0, AccessFlags::NONE).expect("ro");
    assert!(matches!(
        e.v.scatter(
            e.pd,
            &[Sge {
                addr: 0,
                length: 8,
                lkey: ro.lkey
            }],
            &[1]
        ),
        Err(ScatterError::Mr(MrError::AccessDenied { .. }))
    ));
}

#[test]
fn cq_limits_and_overflow_event() {
    let mut e = env();
    assert!(matches!(
        e.v.create_cq(0),
        Err(VerbsError::Limit { what: "cqe", .. })
    ));
    assert!(matches!(
        e.v.create_cq(32768),
        Err(VerbsError::Limit { what: "cqe", .. })
    ));
    let cq = e.v.create_cq(100).expect("cq");
    assert_eq!(e.v.cq(cq).map(|c| c.cqe()), Ok(127));
    let small = e.v.create_cq(1).expect("cq");
    let wc = WorkCompletion::new(1, 0x11, WcOpcode::Send, WcStatus::Success);
    assert!(e.v.complete(small, wc));
    assert!(!e.v.complete(small, wc));
    assert!(!e.v.complete(small, wc));
    // One CQ_ERR event, however many completions are lost.
    assert_eq!(e.v.poll_event(), Some(AsyncEvent::CqErr(small)));
    assert_eq!(e.v.poll_event(), None);
    // A CQ in use cannot be destroyed.
    let (qpn, _) = e.v.create_qp(init_attr(&e, QpType::Rc)).expect("qp");
    assert!(matches!(
        e.v.destroy_cq(e.scq),
        Err(VerbsError::Busy {
            what: "CQ",
            users: 1
        })
    ));
    e.v.destroy_qp(qpn).expect("destroy");
    e.v.destroy_cq(e.scq).expect("destroy cq");
}

#[test]
fn resize_cq_keeps_completions_and_refuses_to_drop_any() {
    let mut e = env();
    let cq = e.v.create_cq(1).expect("cq");
    assert_eq!(e.v.cq(cq).map(|c| c.cqe()), Ok(1));
    let wc = |id| WorkCompletion::new(id, 0x11, WcOpcode::Send, WcStatus::Success);
    assert!(e.v.complete(cq, wc(1)));
    // Grown as rxe sizes a queue: 5 asked, 7 usable.
    assert_eq!(e.v.resize_cq(cq, 5), Ok(7));
    for id in 2..=7 {
        assert!(e.v.complete(cq, wc(id)), "completion {id} fits");
    }
    assert!(matches!(
        e.v.resize_cq(cq, 3),
        Err(VerbsError::Busy { users: 7, .. })
    ));
    assert!(matches!(
        e.v.resize_cq(cq, 0),
        Err(VerbsError::Limit { what: "cqe", .. })
    ));
    assert!(matches!(
        e.v.resize_cq(cq, 32768),
        Err(VerbsError::Limit { what: "cqe", .. })
    ));
    assert_eq!(
        e.v.cq(cq).map(|c| c.cqe()),
        Ok(7),
        "a refused resize changes nothing"
    );
    let mut out = Vec::new();
    assert_eq!(e.v.poll_cq_into(cq, &mut out, 16), Ok(7));
    let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<_>>(), "kept in order");
    assert_eq!(e.v.resize_cq(cq, 1), Ok(1), "shrinks once drained");
    assert!(matches!(
        e.v.resize_cq(CqId(9999), 4),
        Err(VerbsError::InvalidCq(_))
    ));
}

#[test]
fn srq_limit_and_last_wqe() {
    let mut e = env();
    let (srq, attr) =
        e.v.create_srq(
            e.pd,
            SrqAttr {
                max_wr: 5,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .expect("srq");
    assert_eq!(attr.max_wr, 7);
    let mut ia = init_attr(&e, QpType::Rc);
    ia.srq = Some(srq);
    let (qpn, cap) = e.v.create_qp(ia).expect("qp");
    assert_eq!(cap.max_recv_wr, 0);
    assert!(matches!(
        e.v.post_recv(qpn, RecvWr::new(1, vec![])),
        Err(VerbsError::WrongQpType { .. })
    ));
    for id in 0..4 {
        e.v.post_srq_recv(srq, RecvWr::new(id, vec![]))
            .expect("post");
    }
    e.v.arm_srq_limit(srq, 3).expect("arm");
    assert_eq!(e.v.take_recv_wr(qpn).map(|w| w.wr_id), Some(0));
    assert_eq!(e.v.poll_event(), None, "3 left: not below the limit");
    assert_eq!(e.v.take_recv_wr(qpn).map(|w| w.wr_id), Some(1));
    assert_eq!(e.v.poll_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(e.v.take_recv_wr(qpn).map(|w| w.wr_id), Some(2));
    assert_eq!(e.v.poll_event(), None, "the limit disarmed");
    assert!(matches!(
        e.v.destroy_srq(srq),
        Err(VerbsError::Busy { what: "SRQ", .. })
    ));
    rc_to_rts(&mut e, qpn);
    set_state(&mut e, qpn, QpState::Err).expect("ERR");
    assert_eq!(e.v.poll_event(), Some(AsyncEvent::LastWqeReached(qpn)));
    // SRQ WRs belong to the SRQ: not flushed.
    assert_eq!(e.v.srq(srq).map(|s| s.len()), Ok(1));
}

#[test]
fn sqd_drained_event_and_gsi_qkey() {
    use QpAttrMask as A;
    let mut e = env();
    let (gsi, _) = e.v.create_qp(init_attr(&e, QpType::Gsi)).expect("gsi");
    ud_to_rts(&mut e, gsi, true);
    assert_eq!(e.v.qp(gsi).map(|q| q.attr().qkey), Ok(GSI_QKEY));
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    e.v.modify_qp(&e.dev, gsi, &sqd, A::STATE | A::EN_SQD_ASYNC_NOTIFY)
        .expect("SQD");
    assert_eq!(e.v.poll_event(), Some(AsyncEvent::SqDrained(gsi)));
    // Send WRs posted in SQD wait (take_send_wr gives nothing until RTS again).
    e.v.post_send(gsi, SendWr::new(5, SendOp::Send).with_ud(ud_dest()))
        .expect("post");
    assert_eq!(e.v.take_send_wr(gsi), None);
    set_state(&mut e, gsi, QpState::Rts).expect("RTS");
    assert_eq!(e.v.take_send_wr(gsi).map(|w| w.wr_id), Some(5));
}

/// `copy_between`: one copy from one MR to another (either order of their indexes), or
/// within one; bounds checked on both sides before anything moves; a refused registration
/// of `reg_mr_or_return` hands the bytes back.
#[test]
fn copy_between_mrs_and_bytes_kept_on_refusal() {
    let mut e = env();
    let a =
        e.v.reg_mr_with(
            e.pd,
            (0..32).collect::<Vec<u8>>(),
            0x1000,
            AccessFlags::LOCAL_WRITE,
        )
        .expect("a");
    let b =
        e.v.reg_mr_with(e.pd, vec![0; 32], 0, AccessFlags::LOCAL_WRITE)
            .expect("b");
    let t = e.v.mr_table_mut();
    t.copy_between(a.lkey, 0x1004, b.lkey, 8, 4)
        .expect("a to b");
    t.copy_between(b.lkey, 8, a.lkey, 0x1000, 2)
        .expect("b to a");
    t.copy_between(a.lkey, 0x1010, a.lkey, 0x101c, 4)
        .expect("within a");
    assert_eq!(
        &t.owned(b.lkey).expect("b").as_slice()[6..14],
        &[0, 0, 4, 5, 6, 7, 0, 0]
    );
    let av = t.owned(a.lkey).expect("a").as_slice().to_vec();
    assert_eq!(&av[..4], &[4, 5, 2, 3]);
    assert_eq!(&av[28..], &[16, 17, 18, 19]);
    // Out of bounds on either side, or a bad key: nothing moves.
    assert!(matches!(
        t.copy_between(a.lkey, 0x101e, b.lkey, 0, 4),
        Err(MrError::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.copy_between(a.lkey, 0x1000, b.lkey, 30, 4),
        Err(MrError::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.copy_between(a.lkey ^ 1, 0x1000, b.lkey, 0, 4),
        Err(MrError::InvalidKey(_))
    ));
    assert_eq!(t.owned(a.lkey).expect("a").as_slice(), &av[..]);
    // Remote write without local write is refused: the bytes come back.
    let (err, bytes) =
        e.v.reg_mr_or_return(e.pd, vec![7; 8], 0, AccessFlags::REMOTE_WRITE)
            .expect_err("refused");
    assert!(matches!(
        err,
        VerbsError::Mr(MrError::InvalidAccessFlags(_))
    ));
    assert_eq!(bytes, vec![7; 8]);
}
